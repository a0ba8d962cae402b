"""What the NVIDIA driver and nvidia-smi say about GPUs beyond Xid lines.

* SGL-GPU-013: nvidia-smi itself failed for the whole host (system_formats.md §2.5): ``NVIDIA-SMI has failed
  because it couldn't communicate with the NVIDIA driver`` (NVML_ERROR_DRIVER_NOT_LOADED, exit 9), ``Failed to
  initialize NVML: Driver/library version mismatch`` (exit 18) or another NVML initialisation error, ``No devices
  were found`` (exit 6), libnvidia-ml missing, and nvidia-persistenced's ``Failed to query NVIDIA devices`` at boot
  (§6.2). No process on the host can use a GPU until the driver is fixed.
* For SGL-XID-001 (called by :mod:`forensics.detectors.xid`): nvidia-smi's lost device handles (``GPU is lost``,
  NVML_ERROR_GPU_IS_LOST, which goes with Xid 79; ``Unknown Error`` after Xid 79/119/154 — §2.5) as the Xid 79
  class; the driver's ``os_schedule: Attempted to yield the CPU while in atomic or interrupt context`` (§6.2: a
  symptom of an already hung GPU, repeating every ~2 s); NVSwitch ``SXid`` lines (§6.2: a fault of the NVLink
  fabric, its severity the line's own ``Fatal`` / ``Non-fatal``; the SXid table is in NVIDIA's Fabric Manager
  guide, which is not shipped here, so the code is reported as printed).

>>> sxid_severity("Fatal"), sxid_severity("Non-fatal"), sxid_severity(None)
('critical', 'medium', 'high')
"""

from __future__ import annotations

from forensics.facts.rows import Row, attrs, rows
from forensics.model import Finding, Timeline

from ._common import make_finding

#: nvidia-smi failures that leave no GPU of the host usable (parsers/nvidia_smi/common.py ``match_failure``)
HOST_FAILURES = {
    "no_driver": "nvidia-smi could not communicate with the NVIDIA driver (the kernel module is not loaded, or "
                 "does not match the user-space driver after an upgrade without a reboot)",
    "driver_library_mismatch": "NVML's library and the loaded kernel module come from different driver versions",
    "nvml_init_failed": "NVML could not initialise",
    "nvml_not_found": "nvidia-smi found no NVML library (libnvidia-ml.so)",
    "no_devices": "the driver is loaded but sees no usable GPU",
    "persistenced_no_devices": "nvidia-persistenced found no NVIDIA device at start (the device files are missing or "
                               "the driver did not load)",
}
#: per-GPU handle errors that mean the GPU is gone from the driver: the Xid 79 class (§2.5)
LOST_HANDLE_ERRORS = {"gpu_lost": "GPU is lost", "unknown_error": "Unknown Error"}
#: per-GPU handle errors that leave that GPU unusable until someone acts (NVML return codes, §2.5)
UNUSABLE_GPU_ERRORS = {"reset_required": "the GPU needs a reset", "insufficient_power": "insufficient power (cables)",
                       "timeout": "NVML timed out talking to the GPU"}
_OS_SCHEDULE = "os_schedule: Attempted to yield the CPU while in atomic or interrupt context"


def detect(tl: Timeline) -> list[Finding]:
    return _host_unusable(tl)


def _host_unusable(tl: Timeline) -> list[Finding]:
    """SGL-GPU-013: nvidia-smi's own failure output for the host, or per-GPU errors that leave a GPU unusable."""
    errors = [r for r in rows(tl, "gpu_error") if attrs(r).get("error") in (*HOST_FAILURES, *UNUSABLE_GPU_ERRORS)]
    if not errors:
        return []
    host = [r for r in errors if attrs(r).get("error") in HOST_FAILURES]
    per_gpu = [r for r in errors if attrs(r).get("error") in UNUSABLE_GPU_ERRORS]
    words = [HOST_FAILURES[k] for k in dict.fromkeys(attrs(r)["error"] for r in host)]
    words += [f"{_where(r)}: {UNUSABLE_GPU_ERRORS[attrs(r)['error']]}" for r in per_gpu]
    mismatch = any(attrs(r).get("error") == "driver_library_mismatch" for r in host)
    version = next((attrs(r).get("detail") for r in host if "NVML library version" in str(attrs(r).get("detail"))),
                   None)
    return [make_finding(
        "SGL-GPU-013",
        summary=(("The host's GPUs are unusable: " if host else "A GPU is unusable: ") + "; ".join(words) + ". "
                 + ("No process on this host can use a GPU until the driver is fixed: an inference server started "
                    "here fails at its first CUDA call." if host else
                    "That GPU cannot run anything until it is reset or repaired.")),
        evidence=errors[:6],
        confidence="high",
        gpus=[r["gpu"] for r in per_gpu if r.get("gpu") is not None],
        figures={"nvidia_smi_errors": sorted({attrs(r)["error"] for r in errors}), "nvml_library": version},
        actions=[*(["Reboot so the kernel module matches the installed driver (or reload it: stop every GPU "
                    "process, `rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia`, `modprobe nvidia`); in a "
                    "container, the host's driver and the image's libraries must match."] if mismatch else []),
                 "`lsmod | grep nvidia`, `dmesg -T | grep -iE 'NVRM|nvidia'` (the module failed to load? an Xid 79 "
                 "at probe?) and `cat /proc/driver/nvidia/version`.",
                 "In a container that lost its GPUs after the host reloaded its cgroups (`Failed to initialize "
                 "NVML: Unknown Error`), restart the container; run it with the NVIDIA runtime's device rules.",
                 "A GPU that needs a reset: `nvidia-smi -r -i N` with no process on it, else reboot."],
    )]


def _where(row: Row) -> str:
    a = attrs(row)
    gpu = row.get("gpu")
    bus = a.get("pci_bus_id") or a.get("bus_id")
    return f"GPU {gpu}" + (f" ({bus})" if bus else "") if gpu is not None else f"GPU {bus or '?'}"


def bus_key(address: object) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a PCI address in any of the drivers' spellings (``0000:c1:00``, ``00000000:C1:00.0``).

    >>> bus_key("00000000:C1:00.0") == bus_key("0000:c1:00")
    True
    """
    parts = str(address or "").lower().split(".")[0].split(":")
    try:
        return (int(parts[0], 16), int(parts[1], 16), int(parts[2], 16)) if len(parts) == 3 else None
    except ValueError:
        return None


def lost_handle_rows(tl: Timeline, xid_rows: list[Row]) -> list[Row]:
    """nvidia-smi's lost device handles as Xid 79 rows; ``xid_named`` when the kernel log has an Xid for that GPU."""
    named = {bus_key(attrs(x).get("pci_bus_id")) for x in xid_rows} - {None}
    out = []
    for r in rows(tl, "gpu_error"):
        a = attrs(r)
        if a.get("error") in LOST_HANDLE_ERRORS:
            key = bus_key(a.get("pci_bus_id") or a.get("bus_id"))
            out.append({**r, "code": 79, "smi_handle": a["error"], "xid_named": key is not None and key in named})
    return out


def lost_handle_words(lost: list[Row]) -> str:
    """The sentence a finding adds for lost handles: what nvidia-smi printed, for which GPUs."""
    if not lost:
        return ""
    gpus = ", ".join(f"{_where(r)} ({LOST_HANDLE_ERRORS[r['smi_handle']]})" for r in lost[:6])
    unnamed = not all(r.get("xid_named") for r in lost)
    return (f" nvidia-smi could not get a handle for {gpus}: NVML's view of a GPU the driver has lost"
            + (" (the Xid 79 class; the kernel log's Xid line for it is not in the input)." if unnamed else "."))


def os_schedule_rows(tl: Timeline) -> list[Row]:
    return [r for r in rows(tl, "nvrm") if _OS_SCHEDULE in str(attrs(r).get("message") or r.get("text") or "")]


def os_schedule_words(warnings: list[Row]) -> str:
    n = sum(int(r.get("count") or 1) for r in warnings)
    return (f"The NVIDIA driver warned {n} time{'s' if n > 1 else ''} that it tried to yield the CPU in atomic "
            "context (os_schedule): the driver is stuck waiting on a GPU that no longer answers, a hung GPU or a "
            "wedged GSP.")


def driver_hang(tl: Timeline) -> list[Finding]:
    """SGL-XID-001 from the os_schedule warning alone, when no Xid line is in the input."""
    warnings = os_schedule_rows(tl)
    if not warnings:
        return []
    repeated = sum(int(r.get("count") or 1) for r in warnings) > 1
    return [make_finding(
        "SGL-XID-001",
        summary=os_schedule_words(warnings) + " No Xid line is in the input to name the GPU; every process on "
                "it stalls until the GPU is reset.",
        evidence=warnings[:4],
        severity="high",
        confidence="medium" if repeated else "low",
        confidence_reason=("the warning names no GPU and no Xid; `dmesg -T | grep -i xid` around it decides"
                           if repeated else "a single warning; the driver repeats it every ~2 s on a hung GPU"),
        figures={"os_schedule_warnings": sum(int(r.get("count") or 1) for r in warnings)},
        actions=["`dmesg -T | grep -iE 'xid|NVRM'` for the GPU and the Xid before the warnings (119/120: GSP, 79: "
                 "fallen off the bus); `timeout 20 nvidia-smi` — it hangs or errors on that GPU.",
                 "Reset the GPU (`nvidia-smi -r -i N`, no process on it) or reboot; update the driver when it recurs."],
    )]


def sxid_severity(word: str | None) -> str:
    """The SXid line's own severity word in our vocabulary: a fatal fabric error needs the fabric reset."""
    w = (word or "").strip().lower().replace("-", "")
    return {"fatal": "critical", "nonfatal": "medium"}.get(w, "high")


def nvswitch_faults(tl: Timeline) -> list[Finding]:
    """SGL-XID-001 for NVSwitch SXid lines: a fault of the NVLink fabric the GPUs talk over, not of one GPU."""
    hits = [r for r in rows(tl, "nvrm") if attrs(r).get("sxid") is not None]
    if not hits:
        return []
    by_code: dict[int, list[Row]] = {}
    for r in hits:
        by_code.setdefault(int(attrs(r)["sxid"]), []).append(r)
    worst = min((sxid_severity(attrs(r).get("severity")) for r in hits if attrs(r).get("severity")),
                key=("critical", "high", "medium").index, default="high")
    parts = []
    for code, rs in sorted(by_code.items()):
        sev = next((attrs(r)["severity"] for r in rs if attrs(r).get("severity")), None)
        switches = sorted({f"{attrs(r).get('device')} ({attrs(r).get('pci_bus_id')})" for r in rs})
        detail = next((str(attrs(r).get("detail")).split(",", 1)[-1].strip() for r in rs if attrs(r).get("severity")),
                      attrs(rs[0]).get("detail"))
        parts.append(f"SXid {code}" + (f" ({sev})" if sev else "") + f" ×{len(rs)} on {', '.join(switches[:4])}"
                     + (f": {detail}" if detail else ""))
    fatal = worst == "critical"
    return [make_finding(
        "SGL-XID-001",
        summary=("The NVSwitch fabric reported errors: " + "; ".join(parts) + ". "
                 + ("A fatal SXid takes the NVLink links through that switch down: every job whose GPUs talk over "
                    "them fails (NCCL errors or hangs) until the fabric is reset." if fatal else
                    "Non-fatal SXids are logged and corrected; they matter when they repeat or precede a fatal one.")),
        evidence=hits[:6],
        severity=worst,
        confidence="high" if any(attrs(r).get("severity") for r in hits) else "medium",
        confidence_reason=None if any(attrs(r).get("severity") for r in hits) else
        "the lines do not say whether the SXid was fatal",
        figures={"sxid_counts": {str(c): len(rs) for c, rs in sorted(by_code.items())},
                 "nvswitches": sorted({str(attrs(r).get("device")) for r in hits})},
        actions=["Look the SXid up in NVIDIA's Fabric Manager user guide (the SXid table); `nvidia-smi nvlink -s` "
                 "and `nvidia-smi -q | grep -i fabric` show the links' and the fabric's state.",
                 "After a fatal SXid: stop the jobs, reset the GPUs and NVSwitches (`nvidia-smi -r`, with Fabric "
                 "Manager restarted) or reboot; a fault that recurs on the same link means a board to replace."],
    )]

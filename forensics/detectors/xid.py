"""SGL-XID-001/002: NVIDIA Xid events, judged by the Xid catalog (:mod:`forensics.facts.xid`).

Sources: SGL-XID-001 and SGL-XID-002 read the NVRM Xid line (reference/system_formats.md §6.1) and the catalog
(reference/system_formats.md §6.3: 43 and 45 are the channel teardown of a killed process); SGL-XID-003 is the
CUDA runtime's ECC/NVLink error text (reference/failure_messages.md §2.2); SGL-XID-004 the ECC, retired-page
and remapped-row counters of reference/system_formats.md §2.2 and §2.3.

SGL-XID-005 and SGL-XID-006 are AMD's counterparts, read from the amdgpu driver's kernel lines: a job that outran
the GPU scheduler's timeout (``ring gfx_0.0.0 timeout, signaled seq=…, emitted seq=…``,
linux drivers/gpu/drm/amd/amdgpu/amdgpu_job.c::amdgpu_job_timedout (5.x-6.x)) and the reset that follows
(``GPU reset begin!``, linux drivers/gpu/drm/amd/amdgpu/amdgpu_device.c (5.x-6.x)); a ring the driver soft-recovered
(``… timeout, but soft recovered``) hung nothing. SGL-XID-006 is the GPU's page fault (``[gfxhub0] no-retry page
fault (src_id:… ring:… vmid:… pasid:…, for process …)``, linux drivers/gpu/drm/amd/amdgpu/gmc_v9_0.c (5.x-6.x)):
a kernel touched an address not mapped for its process, like NVIDIA's MMU-fault Xid 31.

Sample (R460+ driver)::

    NVRM: Xid (PCI:0000:9b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.

Teardown Xids (45, 43 …) that follow a kill are noise: SGL-XID-002 at info severity.

>>> our_severity("critical"), our_severity("FATAL"), our_severity("nonfatal"), our_severity(None)
('critical', 'critical', 'medium', 'high')
"""

from __future__ import annotations

from typing import Any

from forensics.facts.gpu_map import fill_gpus, gpu_map
from forensics.facts.lifecycle import end_events
from forensics.facts.rows import Row, attrs, before, rows
from forensics.model import SEVERITIES, SEVERITY_RANK, Finding, Timeline
from parsers.failures import hardware_fault

from . import gpu_driver
from ._common import evidence as evidence_of
from ._common import make_finding


def our_severity(value: Any) -> str:
    """The catalog's severity in our vocabulary (unknown → high: an Xid is never nothing)."""
    s = str(value or "").strip().lower()
    if s in SEVERITIES:
        return s
    return {"fatal": "critical", "nonfatal": "medium", "non-fatal": "medium", "warning": "medium",
            "error": "high"}.get(s, "high")


def _field(info: Any, *names: str) -> Any:
    for name in names:
        if isinstance(info, dict) and name in info:
            return info[name]
        if hasattr(info, name):
            return getattr(info, name)
    return None


def _is_teardown_noise(info: Any) -> bool:
    """Catalog entries flagged as logged when a process is killed (Xid 43/45)."""
    if info is None:
        return False
    if hasattr(info, "has"):
        return bool(info.has("noise_after_kill"))
    return bool(_field(info, "noise_after_kill"))


#: failure classes (parsers.failures) where CUDA itself reports a hardware fault to the process
HARDWARE_CLASSES = {"ecc_error": "an uncorrectable ECC error (Xid 48/94/95 class)",
                    "nvlink_error": "an uncorrectable NVLink error (Xid 74 class)"}


#: rows that carry an exception a server process raised (the engines' parsers keep its message in the row)
_RAISED_KINDS = ("scheduler_exception", "exception", "init_failed", "cuda_graph_failed", "engine_dead", "rank_dead")


def _hardware_class(row: Row) -> str | None:
    """The hardware fault a row reports: a failure line's class, vLLM's cuda_error, or the message of an exception
    a scheduler or worker raised (failure_messages.md §2.2 — the fault is the same whichever frame raised it: a
    forward step, CUDA-graph capture, the weights' load)."""
    a = attrs(row)
    if row.get("kind") == "failure":
        return a.get("failure") if a.get("failure") in HARDWARE_CLASSES else None
    if row.get("kind") == "cuda_error":
        return "ecc_error" if a.get("error") == "uncorrectable_ecc" else hardware_fault(a.get("message") or "")
    return hardware_fault(str(a.get("exception_message") or "") + "\n" + (row.get("text") or ""))


def _hardware_from_cuda(tl: Timeline, xid_rows: list[Row]) -> list[Finding]:
    """SGL-XID-003: the CUDA runtime told a process the GPU failed, whether or not the kernel log is here."""
    found = [(r, k) for r in rows(tl, "failure", "cuda_error", *_RAISED_KINDS) if (k := _hardware_class(r))]
    if not found:
        return []
    hits = [r for r, _k in found]
    kinds = sorted({k for _r, k in found})
    # the server's death after the fault is the fault's consequence: its lines are this finding's evidence too
    deaths = [r for r in rows(tl, "init_failed", "engine_dead", "sigquit") if before(hits[0], r)]
    return [make_finding(
        "SGL-XID-003",
        summary=("CUDA reported " + " and ".join(HARDWARE_CLASSES[k] for k in kinds) + " to the server: a hardware "
                 "fault of the GPU, not a load or configuration problem."
                 + ("" if xid_rows else " The kernel log is not in the input, so the GPU's Xid and its bus id are "
                                        "not known.")),
        evidence=[*hits[:4], *deaths[:2]],
        confidence="high",
        figures={"hardware_errors": kinds},
        actions=["Find the GPU: `nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER` (volatile/aggregate uncorrectable "
                 "counts, pending remaps) and `dmesg -T | grep -i xid` for the bus id.",
                 "Drain the node, reset the GPU (`nvidia-smi -r -i N`) or reboot to apply row remapping; replace it if "
                 "the errors recur. Relaunching the server on the same GPU will fail again."],
    )]


def detect(tl: Timeline) -> list[Finding]:
    xids = _detect_xids(tl)
    hang = [] if any(f.rule_id == "SGL-XID-001" for f in xids) else gpu_driver.driver_hang(tl)
    return xids + hang + gpu_driver.nvswitch_faults(tl) + _hardware_from_cuda(tl, rows(tl, "xid")) \
        + _memory_counters(tl) + _amdgpu(tl)


def _amd_gpus(hits: list[Row]) -> str:
    pcis = sorted({a for r in hits if (a := attrs(r).get("pci_bus_id"))})
    return f" on {', '.join(pcis)}" if pcis else ""


def _amdgpu(tl: Timeline) -> list[Finding]:
    """SGL-XID-005 (a ring timeout, the GPU reset) and SGL-XID-006 (a GPU page fault) from the amdgpu driver."""
    by_event: dict[str, list[Row]] = {}
    for r in rows(tl, "amdgpu_fault"):
        by_event.setdefault(str(attrs(r).get("event")), []).append(r)
    out = []
    crashes = _engine_crashes(tl)
    faults = by_event.get("page_fault", [])
    if faults:
        procs = sorted({f"{r.get('comm')} pid {r.get('pid')}" for r in faults if r.get("comm")})
        later = [r for r in crashes if before(faults[0], r)]
        out.append(make_finding(
            "SGL-XID-006",
            summary=(f"The amdgpu driver logged {len(faults)} GPU page fault{'s' if len(faults) > 1 else ''}"
                     f"{_amd_gpus(faults)}" + (f" for {', '.join(procs[:3])}" if procs else "")
                     + ": a kernel read or wrote an address not mapped for its process, the GPU's side of an illegal "
                     "memory access (NVIDIA's Xid 31)."
                     + (f" The server's crash after it ({_crash_words(later[0])}) is its consequence." if later else "")),
            evidence=[*faults[:3], *later[:2]],
            confidence="high",
            figures={"page_faults": len(faults), "hubs": sorted({str(attrs(r).get("hub")) for r in faults})},
            actions=["Match the fault's process and time to the crash; reproduce with another attention or MoE backend "
                     "(AITER kernels off) to find the kernel, and report it with the ROCm, driver and engine versions.",
                     "Faults that follow the GPU across workloads, with `amd-smi metric --ecc` errors, are hardware."],
        ))
    hung = by_event.get("ring_timeout", [])
    resets = by_event.get("gpu_reset", [])
    if hung or resets:
        first = (hung or resets)[0]
        rings = sorted({str(attrs(r).get("ring")) for r in hung})
        later = [r for r in crashes if before(first, r)]
        out.append(make_finding(
            "SGL-XID-005",
            summary=(("A job on the GPU's " + ", ".join(rings) + f" ring{'s' if len(rings) > 1 else ''} outran the "
                      "driver's timeout" if hung else "The amdgpu driver reset the GPU")
                     + _amd_gpus(hung or resets)
                     + (" and the driver reset the GPU" if hung and resets else "")
                     + ": the GPU hung, and every process on it lost its work."
                     + (f" The server's death after it ({_crash_words(later[0])}) is the hang's consequence, not "
                        "another fault." if later else "")),
            evidence=[*hung[:2], *resets[:2], *later[:2]],
            severity="critical" if resets else None,
            confidence="high" if hung else "medium",
            confidence_reason=None if hung else "the reset is in the input but not the timeout that caused it",
            figures={"ring_timeouts": len(hung), "gpu_resets": len(resets), "rings": rings},
            actions=["`dmesg -T | grep -i amdgpu` around the time: a page fault or a RAS error just before the timeout "
                     "names the cause; `amd-smi metric --ecc` and `amd-smi list` for the GPU's state.",
                     "A hang in one workload's kernel is software (reproduce with AITER or the custom kernels off); one "
                     "that recurs across workloads, or a reset that fails, means draining the node."],
        ))
    return out


def _yes(value: Any) -> bool:
    return str(value or "").strip().lower() in ("yes", "1", "true")


def _count(value: Any) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return 0


def _section(a: dict[str, Any], key: str) -> dict[str, Any]:
    """An ``nvidia-smi -q`` section as a dict (it is ``N/A`` text on GPUs without it)."""
    v = a.get(key)
    return v if isinstance(v, dict) else {}


def gpu_memory_faults(row: Row) -> list[str]:
    """What a GPU's nvidia-smi counters say about its memory failing (system_formats.md §2.1-2.3): uncorrectable
    ECC errors since the driver loaded (volatile; the aggregate is history), a row remap pending (it needs a reset)
    or one that failed, pages pending retirement. Empty when the counters are clean or absent.

    >>> import json
    >>> gpu_memory_faults({"attrs": json.dumps({"ecc_uncorrected_volatile": 2})})
    ['2 uncorrectable ECC errors since the driver loaded']
    >>> gpu_memory_faults({"attrs": json.dumps({"remapped_rows": {"Pending": "No", "Remapping Failure Occurred": "Yes"}})})
    ['a row remapping failed']
    """
    a = attrs(row)
    out = []
    volatile = _count(a.get("ecc_uncorrected_volatile"))
    volatile += sum(_count(v) for k, v in _section(a, "ecc_errors").items()
                    if k.startswith("Volatile") and ("Uncorr" in k or "Double Bit" in k) and not k.endswith("Total"))
    if volatile:
        out.append(f"{volatile} uncorrectable ECC error{'s' if volatile > 1 else ''} since the driver loaded")
    remap = _section(a, "remapped_rows")
    if _yes(a.get("remapped_rows_failure")) or _yes(remap.get("Remapping Failure Occurred")):
        out.append("a row remapping failed")
    if _yes(a.get("remapped_rows_pending")) or _yes(remap.get("Pending")):
        out.append("a row remap is pending (applied at the next GPU reset)")
    retired = _section(a, "retired_pages")
    if _yes(a.get("retired_pages_pending")) or any(_yes(v) for k, v in retired.items() if k.startswith("Pending")):
        out.append("pages are pending retirement")
    return out


def _memory_counters(tl: Timeline) -> list[Finding]:
    """SGL-XID-004: nvidia-smi's own counters say a GPU's memory failed, whatever the logs say."""
    by_gpu: dict[int, tuple[Row, list[str]]] = {}
    for r in rows(tl, "gpu_memory"):
        faults = gpu_memory_faults(r)
        if faults and r.get("gpu") is not None:
            by_gpu[int(r["gpu"])] = (r, faults)  # the latest snapshot of each GPU
    if not by_gpu:
        return []
    words = "; ".join(f"GPU {g}: {', '.join(f)}" for g, (_r, f) in sorted(by_gpu.items()))
    failed = any("remapping failed" in x for _r, f in by_gpu.values() for x in f)
    return [make_finding(
        "SGL-XID-004",
        summary=(f"nvidia-smi's counters show the GPU memory failing ({words}): a hardware fault, which kills the "
                 "process that touches the bad memory and stays until the GPU is reset or replaced."),
        evidence=[r for r, _f in by_gpu.values()][:6],
        severity="critical" if failed else None,
        confidence="high",
        gpus=sorted(by_gpu),
        figures={"memory_faults": {str(g): f for g, (_r, f) in sorted(by_gpu.items())}},
        actions=["Drain the node; `nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER -i N` for the counts, then reset the "
                 "GPU (`nvidia-smi -r -i N`) or reboot to apply pending remaps.",
                 "A failed remap, or uncorrectable errors that return after the reset, mean the GPU needs replacing "
                 "(RMA); `dmesg -T | grep -i xid` shows the matching Xid 48/63/64/94/95."],
    )]


def _detect_xids(tl: Timeline) -> list[Finding]:
    hits = [r for r in rows(tl, "xid") if r.get("code") is not None]
    # "fallen off the bus" without its Xid 79 line (probe time, or the Xid line lost): an Xid 79 all the same
    hits += [{**r, "code": 79} for r in rows(tl, "gpu_fallen_off_bus") if not attrs(r).get("xid79_line")
             and not any(x.get("code") == 79 and x.get("file") == r.get("file") and attrs(x).get("pci_bus_id")
                         == attrs(r).get("pci_bus_id") for x in hits)]
    lost = gpu_driver.lost_handle_rows(tl, hits)
    hits += [r for r in lost if not r["xid_named"]]  # a GPU whose own Xid is here is told by that Xid
    if not hits:
        return []
    hits = fill_gpus(hits, gpu_map(tl))  # Xid lines name a PCI address; nvidia-smi says which index it is
    from forensics.facts import xid as xid_catalog

    ends = end_events(tl)
    real: dict[int, list[Row]] = {}
    noise: dict[int, list[Row]] = {}
    infos: dict[int, Any] = {}
    for r in hits:
        code = int(r["code"])
        if code not in infos:
            try:
                infos[code] = xid_catalog.lookup(code)
            except KeyError:
                infos[code] = None
        after_kill = any(before(e, r) for e in ends)
        is_noise = _is_teardown_noise(infos[code]) and after_kill
        (noise if is_noise else real).setdefault(code, []).append(r)
    out = []
    if real:
        finding = _real(real, infos)
        finding.summary += gpu_driver.lost_handle_words(lost)
        finding.evidence = finding.evidence + [evidence_of(r) for r in lost[:2]]
        if warnings := gpu_driver.os_schedule_rows(tl):
            finding.summary += " " + gpu_driver.os_schedule_words(warnings)
            finding.evidence = finding.evidence + [evidence_of(r) for r in warnings[:2]]
        crashes = _engine_crashes(tl)
        app = sorted(c for c in real if c in APPLICATION_XIDS)
        if crashes and app and SEVERITY_RANK[finding.severity] > SEVERITY_RANK["high"]:
            # a GPU exception and a server crash in the same incident are one event: the kernel that faulted
            # is what killed the rank
            finding.severity = "high"
            finding.summary += (f" A rank of the server crashed in the same incident ({_crash_words(crashes[0])}): "
                                f"Xid {', '.join(map(str, app))} is the GPU's side of that crash, a fault raised by a "
                                "kernel the server ran. That is usually a software bug (attention or MoE kernel, "
                                "speculative decoding, a driver/CUDA mismatch), not bad hardware: do not drain or "
                                "RMA the GPU unless the Xid follows it across workloads.")
            finding.evidence = finding.evidence + [evidence_of(r) for r in crashes[:2]]
            finding.figures["crash_lines"] = [f"{r.get('file')}:{r.get('line')}" for r in crashes[:5]]
            finding.remediation.actions.insert(0, "Match the Xid's time to the rank's crash (`dmesg -T`), then "
                                                  "reproduce with another attention backend or with speculative "
                                                  "decoding off to find the kernel; report it with the driver and "
                                                  "engine versions.")
        elif crashes and not app and SEVERITY_RANK[finding.severity] <= SEVERITY_RANK["high"] \
                and not rows(tl, "cuda_oom", "cuda_error_oom"):
            # the GPU failed (bus, memory, GSP): the rank on it died of that, and the launcher's SIGQUIT followed
            quits = rows(tl, "sigquit")
            finding.summary += (f" A rank of the server died in the same incident ({_crash_words(crashes[0])})"
                                + (" and the launcher got SIGQUIT" if quits else "")
                                + ": on a GPU that failed, that death is the Xid's consequence, not another fault.")
            finding.evidence = finding.evidence + [evidence_of(r) for r in [*crashes[:2], *quits[:1]]]
            finding.figures["crash_lines"] = [f"{r.get('file')}:{r.get('line')}" for r in crashes[:5]]
        out.append(finding)
    if noise:
        codes = sorted(noise)
        rows_ = [r for c in codes for r in noise[c]]
        out.append(make_finding(
            "SGL-XID-002",
            summary=(f"Xid {', '.join(map(str, codes))} ({len(rows_)} events) followed the kill of the server's processes: "
                     "CUDA channels torn down, not a cause."),
            evidence=rows_[:6],
            gpus=[r["gpu"] for r in rows_ if r.get("gpu") is not None],
            figures={"xid_counts": {str(c): len(noise[c]) for c in codes}},
            actions=["None needed for these; look at what killed the processes."],
        ))
    return out


#: Xids raised by a faulting kernel (graphics exception, MMU fault, channel reset): the application's fault
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 69, 109})
_CRASH_KINDS = ("scheduler_exception", "rank_dead", "subprocess_crashed", "failure", "cuda_error_oom")


def _engine_crashes(tl: Timeline) -> list[Row]:
    """Lines where a server process crashed (not teardown after a kill, not a client)."""
    from .fatal_other import client_side, failure_class

    out = []
    for r in rows(tl, *_CRASH_KINDS):
        if r.get("kind") == "failure" and (failure_class(r) not in ("exception", "traceback_cut", "illegal_memory_access",
                                                                      "launch_failure", "cuda_error", "signal",
                                                                      "process_exit") or client_side(r)):
            continue
        out.append(r)
    return out


def _crash_words(row: Row) -> str:
    return f"{row.get('file')}:{row.get('line')}"


def _real(real: dict[int, list[Row]], infos: dict[int, Any]) -> Finding:
    codes = sorted(real, key=lambda c: (SEVERITY_RANK[our_severity(_field(infos[c], "severity"))], c))
    worst = our_severity(_field(infos[codes[0]], "severity"))
    parts, actions = [], []
    for c in codes:
        info = infos[c]
        name = _field(info, "mnemonic", "name", "title") or "unknown Xid"
        meaning = _field(info, "meaning", "description", "summary")
        gpus = sorted({r["gpu"] for r in real[c] if r.get("gpu") is not None})
        # a GPU nvidia-smi did not map to an index is named by its bus
        buses = sorted({str(attrs(r).get("pci_bus_id")) for r in real[c] if attrs(r).get("pci_bus_id")
                        and r.get("gpu") is None})
        where = ", ".join([f"GPU {g}" for g in gpus] + buses) or "unknown GPU"
        seen_as = " (nvidia-smi's lost handles)" if all(r.get("smi_handle") for r in real[c]) else ""
        parts.append(f"Xid {c} ({name}){seen_as} ×{len(real[c])} on {where}" + (f": {meaning}" if meaning else ""))
        action = _field(info, "action", "next_step")
        if action:
            actions.append(f"Xid {c}: {action}")
    all_rows = [r for c in codes for r in real[c]]
    return make_finding(
        "SGL-XID-001",
        summary="; ".join(parts) + ".",
        evidence=[r for c in codes for r in real[c][:3]],
        confidence="high" if all(infos[c] is not None for c in codes) else "medium",
        confidence_reason=None if all(infos[c] is not None for c in codes) else "some Xid numbers are not in the catalog",
        severity=worst,
        gpus=[r["gpu"] for r in all_rows if r.get("gpu") is not None],
        figures={"xid_counts": {str(c): len(real[c]) for c in codes},
                 "pci_bus_ids": sorted({str(attrs(r).get("pci_bus_id")) for r in all_rows if attrs(r).get("pci_bus_id")})},
        actions=actions or ["Look the Xid up in NVIDIA's Xid catalog; reset or drain the GPU if it repeats."],
    )

"""SGL-XID-001/002: NVIDIA Xid events, judged by the Xid catalog (:mod:`forensics.facts.xid`).

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


def _hardware_from_cuda(tl: Timeline, xid_rows: list[Row]) -> list[Finding]:
    """SGL-XID-003: the CUDA runtime told a process the GPU failed, whether or not the kernel log is here."""
    hits = [r for r in rows(tl, "failure") if attrs(r).get("failure") in HARDWARE_CLASSES]
    # the same message read by an engine's own parser (parsers/vllm.py: cuda_error)
    hits += [r for r in rows(tl, "cuda_error") if attrs(r).get("error") == "uncorrectable_ecc"]
    if not hits:
        return []
    kinds = sorted({attrs(r).get("failure") or "ecc_error" for r in hits})
    return [make_finding(
        "SGL-XID-003",
        summary=("CUDA reported " + " and ".join(HARDWARE_CLASSES[k] for k in kinds) + " to the server: a hardware "
                 "fault of the GPU, not a load or configuration problem."
                 + ("" if xid_rows else " The kernel log is not in the input, so the GPU's Xid and its bus id are "
                                        "not known.")),
        evidence=hits[:4],
        confidence="high",
        figures={"hardware_errors": kinds},
        actions=["Find the GPU: `nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER` (volatile/aggregate uncorrectable "
                 "counts, pending remaps) and `dmesg -T | grep -i xid` for the bus id.",
                 "Drain the node, reset the GPU (`nvidia-smi -r -i N`) or reboot to apply row remapping; replace it if "
                 "the errors recur. Relaunching the server on the same GPU will fail again."],
    )]


def detect(tl: Timeline) -> list[Finding]:
    return _detect_xids(tl) + _hardware_from_cuda(tl, rows(tl, "xid"))


def _detect_xids(tl: Timeline) -> list[Finding]:
    hits = [r for r in rows(tl, "xid") if r.get("code") is not None]
    # "fallen off the bus" without its Xid 79 line (probe time, or the Xid line lost): an Xid 79 all the same
    hits += [{**r, "code": 79} for r in rows(tl, "gpu_fallen_off_bus") if not attrs(r).get("xid79_line")
             and not any(x.get("code") == 79 and x.get("file") == r.get("file") and attrs(x).get("pci_bus_id")
                         == attrs(r).get("pci_bus_id") for x in hits)]
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
        buses = sorted({str(attrs(r).get("pci_bus_id")) for r in real[c] if attrs(r).get("pci_bus_id")})
        where = f"GPU {', '.join(map(str, gpus))}" if gpus else (", ".join(buses) or "unknown GPU")
        parts.append(f"Xid {c} ({name}) ×{len(real[c])} on {where}" + (f": {meaning}" if meaning else ""))
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

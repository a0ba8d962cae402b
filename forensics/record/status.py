"""``forensics record --status``: what the ring holds, since when, and how full it is."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from .ring import DEFAULT_MAX_AGE_S, DEFAULT_MAX_BYTES, ring_status

SECTION_WORDS = {"meminfo": "host memory", "vmstat": "OOM-kill counter", "cgroups": "cgroup memory",
                 "shm": "/dev/shm", "procs": "inference processes", "gpus": "GPUs"}


def _when(t: float | None) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%SZ") if t is not None else "—"


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.0f} KiB"


def _span(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else (f"{s / 60:.0f} min" if s >= 60 else f"{s:.0f} s")


def status_text(folder: Path, max_bytes: int = DEFAULT_MAX_BYTES, max_age_s: float = DEFAULT_MAX_AGE_S,
                now: float | None = None) -> str:
    st = ring_status(folder)
    now = datetime.now(UTC).timestamp() if now is None else now
    if st.segments == 0 and st.open_records == 0 and not st.refused:
        return f"record: nothing recorded in {folder} yet."
    used = st.sealed_bytes + st.open_bytes
    span = (st.last - st.first) if st.first is not None and st.last is not None else 0.0
    lines = [
        f"ring        {folder}",
        f"host        {', '.join(sorted(st.hosts)) or 'unknown'}",
        f"recorded    {_when(st.first)} → {_when(st.last)} ({_span(span)}"
        + (f", every {st.interval_s:g} s" if st.interval_s else "") + ")",
        f"last sample {now - st.last:.0f} s ago" if st.last is not None else "last sample —",
        f"size        {_mib(used)} of {_mib(max_bytes)} ({used / max_bytes:.0%}); {st.segments} sealed segment{'s' if st.segments != 1 else ''}"
        f" + {st.open_records} record{'s' if st.open_records != 1 else ''} being written; age cap {max_age_s / 3600:g} h",
        "samples of  " + (", ".join(SECTION_WORDS[k] for k in SECTION_WORDS if st.sections.get(k)) or "nothing"),
    ]
    if not st.sections.get("procs"):
        lines.append("note        no SGLang or vLLM process in the latest samples")
    for src, why in sorted(st.gaps.items()):
        lines.append(f"gap         {SECTION_WORDS.get(src, src)}: {why}")
    for name, why in st.refused:
        lines.append(f"ignored     {name}: {why}")
    if st.last is not None and now - st.last > max(60.0, 3 * (st.interval_s or 5)):
        lines.append("note        no sample for a while: is the recorder running? (systemctl status forensics-record)")
    return "\n".join(lines)

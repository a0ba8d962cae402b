"""SGL-HOST-003: host RAM still used after the server was killed, far above the pre-launch level.

Sources: SGL-HOST-003 compares free(1)'s ``used`` after the kill with the level before the launch
(reference/system_formats.md §1.1); what stays pinned is each rank's HiCache pool (reference/sglang_formats.md
§4).

Seed phase 3, after ``pkill -9 -f sglang``::

                   total        used        free      shared  buff/cache   available
    Mem:             449         318         130           0           0         130

318 GiB used against ~40 GiB before the launch: pinned HiCache pools of schedulers that have
not finished dying.

>>> round(excess_threshold(449 * 2**30) / 2**30, 2)
44.9
"""

from __future__ import annotations

from forensics.facts.host_memory import ASSUMED_BASELINE_FRACTION, Baseline, host_memory
from forensics.facts.lifecycle import end_events, last_end_before, relaunched_between
from forensics.facts.rows import Row, before, rows
from forensics.model import Finding, Timeline

from ._common import GIB, fmt_gib, make_finding

EXCESS_FRACTION = 0.10  # used − baseline must exceed max(16 GiB, 10% of total)
MIN_USED_FRACTION = 0.25  # and used must be at least 25% of total


def excess_threshold(total: int) -> float:
    return max(16 * GIB, EXCESS_FRACTION * total)


def _baseline(tl: Timeline, total: int, end: Row) -> Baseline:
    """The host's baseline (forensics.facts.host_memory) when its snapshot is not known to come after
    ``end``; else the assumed one."""
    base = host_memory(tl).baseline(total)
    if base.observed and before(end, base.row) is True:  # that snapshot belongs to a later launch
        return Baseline(int(total * ASSUMED_BASELINE_FRACTION), False,
                        f"assumed {ASSUMED_BASELINE_FRACTION:.0%} of capacity: no snapshot before the launch")
    return base


def detect(tl: Timeline) -> list[Finding]:
    host_rows = [r for r in rows(tl, "host_memory") if r.get("used_bytes") is not None and r.get("total_bytes")]
    if not host_rows:
        return []
    ends = end_events(tl)
    hits = []
    for row in host_rows:
        end = last_end_before(ends, row)
        if end is None or relaunched_between(tl, end, row):
            continue
        # the host's total as every finding states it (free -g after a kill truncates it)
        total, used = host_memory(tl).total or int(row["total_bytes"]), int(row["used_bytes"])
        baseline = _baseline(tl, total, end)
        base_row, base = (baseline.row if baseline.observed else None), baseline.used
        excess = used - base
        hits.append((row, end, base_row, base, excess, excess > excess_threshold(total)
                     and used >= MIN_USED_FRACTION * total))
    bad = [h for h in hits if h[5]]
    if not bad:
        return []
    row, end, base_row, base, excess, _ = bad[-1]
    total, used = host_memory(tl).total or int(row["total_bytes"]), int(row["used_bytes"])
    later_ok = [h for h in hits if before(row, h[0]) and not h[5]]
    reasons = []
    if base_row is None:
        reasons.append(f"no snapshot before the launch: baseline assumed {ASSUMED_BASELINE_FRACTION:.0%} of total "
                       f"({fmt_gib(base)}) for the OS and idle services")
    if end.get("kind") == "process":
        reasons.append("the end of the server is inferred from ps (no SGLang process), not from a kill or crash line")
    summary = (f"Host memory used is {fmt_gib(used)} of {fmt_gib(total)} after "
               + (f"`{(end.get('text') or '').strip()[:80]}`" if end.get("kind") == "command" else f"the server stopped ({end.get('kind')})")
               + f", {fmt_gib(excess)} above the {'pre-launch' if base_row else 'assumed'} baseline of {fmt_gib(base)}: "
               "memory of the killed processes (pinned HiCache pools, CUDA host allocations) was not released.")
    severity = None
    if later_ok:
        rel = later_ok[0][0]
        summary += f" It was released later ({rel.get('file')}:{rel.get('line')})."
        severity = "low"
    return [make_finding(
        "SGL-HOST-003",
        summary=summary,
        evidence=[row, end, *([base_row] if base_row else []), *([later_ok[0][0]] if later_ok else [])],
        confidence="high" if not reasons else ("medium" if len(reasons) == 1 else "low"),
        confidence_reason="; ".join(reasons) or None,
        severity=severity,
        figures={"host_total_bytes": total, "host_used_after_bytes": used, "baseline_bytes": base,
                 "baseline_assumed": base_row is None, "excess_bytes": excess,
                 "host_available_after_bytes": row.get("avail_bytes")},
        actions=[
            "Find what still holds it: `ps -eo pid,ppid,stat,rss,comm --sort=-rss | head`, processes in D or Z state, "
            "`ipcs -m`, `df -h /dev/shm`.",
            "Kill the holders with SIGKILL; in a container kill from the host/hypervisor (`docker kill`, "
            "`pct exec <id> -- pkill -9 -f sglang`); D-state processes unpinning a large pool may take minutes.",
            "Reboot when D-state processes never exit. Verify with `free -g` (used back near the baseline) before "
            "relaunching.",
        ],
    )]

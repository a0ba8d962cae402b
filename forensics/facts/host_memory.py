"""One host's memory, established once: its total, the snapshot before the launch, the container's
limit, and the baseline every finding about host memory uses.

Two findings about one host must not disagree on what it had (DESIGN.md's facts layer; issue 24):
the per-rank pool arithmetic and the memory-not-reclaimed check read the same total and the same
baseline. The baseline is what was not available to the server before it started (total − available
of the last snapshot before a launch), observed; without such a snapshot it is assumed to be
:data:`ASSUMED_BASELINE_FRACTION` of the total for the OS and idle services, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from forensics.facts.launch import docker_memory_limit, is_prose
from forensics.facts.lifecycle import launch_moments
from forensics.facts.rows import Row, before, rows, timeline_memo
from forensics.model import Timeline

#: the OS and idle services, when no snapshot before the launch says what they took
ASSUMED_BASELINE_FRACTION = 0.05


@dataclass(frozen=True)
class Baseline:
    """Host memory in use before the server started, and how it is known."""

    used: int
    observed: bool
    how: str  # "used before the launch" | "assumed 5% of capacity: no snapshot before the launch"
    row: Row | None = None


@dataclass(frozen=True)
class HostMemory:
    """What the input says of one host's memory (bytes)."""

    total: int | None = None  # the largest total a free/meminfo snapshot showed
    total_row: Row | None = None
    avail_before: int | None = None  # available in the last snapshot before a launch
    before_row: Row | None = None
    limit: int | None = None  # a container's or job's memory limit from the launch
    limit_row: Row | None = None

    @property
    def capacity(self) -> int | None:
        """What the server could use at most: the smaller of the host's total and the container's limit."""
        known = [v for v in (self.total, self.limit) if v]
        return min(known) if known else None

    def baseline(self, capacity: int | None = None) -> Baseline | None:
        """Memory in use before the launch, against ``capacity`` (default: :attr:`capacity`)."""
        cap = capacity if capacity is not None else self.capacity
        if cap is None:
            return None
        if self.avail_before is not None:
            usable = self.avail_before if self.limit is None else min(self.avail_before, self.limit)
            return Baseline(max(cap - usable, 0), True, "used before the launch", self.before_row)
        return Baseline(int(cap * ASSUMED_BASELINE_FRACTION), False,
                        f"assumed {ASSUMED_BASELINE_FRACTION:.0%} of capacity: no snapshot before the launch")


def host_memory(tl: Timeline) -> HostMemory:
    """The host's memory facts, computed once per timeline."""
    memo = timeline_memo(tl)
    if "host_memory" in memo:
        return memo["host_memory"]
    host_rows = [r for r in rows(tl, "host_memory") if r.get("total_bytes")]
    # a figure stated in a sentence stands in only where no program printed one
    host_rows = [r for r in host_rows if not is_prose(r)] or host_rows
    total = total_row = avail_before = before_row = None
    if host_rows:
        total_row = max(host_rows, key=lambda r: r["total_bytes"])
        total = int(total_row["total_bytes"])
        moments = launch_moments(tl)
        pre = [r for r in host_rows if r.get("avail_bytes") is not None and any(before(r, m) for m in moments)]
        if pre:
            before_row = pre[-1]
            avail_before = int(before_row["avail_bytes"])
    limit = limit_row = None
    found = docker_memory_limit(tl)
    if found:
        limit, limit_row = found
    memo["host_memory"] = HostMemory(total, total_row, avail_before, before_row, limit, limit_row)
    return memo["host_memory"]

"""What the engines' crash artifacts establish: the requests in flight at a crash, the KV pool a crash
snapshot states, and where each dumped process's main thread was.

Rows come from ``parsers/crash_dump.py`` (``crash_request``: ``tokens`` = input tokens, ``count`` =
``max_new_tokens``, ``attrs.finished``), ``parsers/crash_snapshot.py`` (``crash_snapshot``: ``tokens`` =
the scheduler's ``max_total_num_tokens``) and ``parsers/stack_dumps.py`` (``pyspy_stack``: one per
thread). Every value here is observed: each comes with the row that says it.
"""

from __future__ import annotations

from forensics.model import Timeline

from .rows import Row, attrs, rows


def dumped_requests(tl: Timeline) -> list[Row]:
    """The crash dump's requests whose input size is known."""
    return [r for r in rows(tl, "crash_request") if r.get("tokens") is not None]


def unfinished_requests(tl: Timeline) -> list[Row]:
    return [r for r in dumped_requests(tl) if attrs(r).get("finished") is False]


def longest_unfinished(tl: Timeline) -> Row | None:
    reqs = unfinished_requests(tl)
    return max(reqs, key=lambda r: int(r["tokens"])) if reqs else None


def snapshot_pool(tl: Timeline) -> Row | None:
    """The crash snapshot that states a KV pool size (the largest, if ranks differ)."""
    snaps = [r for r in rows(tl, "crash_snapshot") if r.get("tokens")]
    return max(snaps, key=lambda r: int(r["tokens"])) if snaps else None


def main_threads(tl: Timeline) -> list[Row]:
    """Each dumped process's main thread (else its first active thread); the last dump of a process wins.
    A stack pasted without its header (``attrs.headerless``) names no process or thread: each is its own."""
    by_proc: dict[tuple, Row] = {}
    for r in rows(tl, "pyspy_stack"):
        a = attrs(r)
        if a.get("headerless"):
            by_proc[(r.get("host"), r.get("file"), r.get("line"))] = r
            continue
        key = (r.get("host"), r.get("pid"), r.get("tp_rank"))
        if a.get("thread") == "MainThread" or (str(a.get("state", "")).startswith("active") and key not in by_proc):
            by_proc[key] = r
    return list(by_proc.values())

"""Run every detector over a timeline, link symptoms to their cause and pick the root cause.

One module per rule family; each exposes ``detect(tl) -> list[Finding]`` and never reads files.
When several findings fire, the cause wins over its symptoms: an OOM kill that follows a per-rank
HiCache overallocation, or a stranded context after a headroom crash, gets ``consequence_of`` and a
sentence that says how it follows.

>>> from forensics.model import Timeline
>>> from parsers.schema import empty_frame
>>> run_all(Timeline(events=empty_frame()))
([], None)
"""

from __future__ import annotations

from forensics.model import SEVERITY_RANK, Finding, Timeline

from . import (
    cuda_graph_headroom,
    host_memory_not_reclaimed,
    kernel_oom_killer,
    kv_cache_capacity,
    nccl_timeout,
    per_rank_overallocation,
    stranded_context,
    weights_do_not_fit,
    xid,
)

DETECTORS = (
    per_rank_overallocation,
    cuda_graph_headroom,
    weights_do_not_fit,
    stranded_context,
    host_memory_not_reclaimed,
    kernel_oom_killer,
    xid,
    nccl_timeout,
    kv_cache_capacity,
)

#: Rules that can be a cause, most fundamental first. A symptom links to the first of these that fired.
CAUSE_PRIORITY = (
    "SGL-HOST-001",
    "SGL-HOST-002",
    "SGL-GPU-004",
    "SGL-GPU-002",
    "SGL-GPU-001",
    "SGL-KV-002",
    "SGL-XID-001",
    "SGL-HOST-004",
    "SGL-NCCL-001",
    "SGL-NCCL-002",
    "SGL-GPU-005",
    "SGL-HOST-003",
)

#: (cause rule, symptom rule) → how the symptom follows from the cause.
FOLLOWS: dict[tuple[str, str], str] = {}


def _link(causes: tuple[str, ...], symptoms: tuple[str, ...], why: str) -> None:
    for c in causes:
        for s in symptoms:
            FOLLOWS.setdefault((c, s), why)


_link(("SGL-HOST-001", "SGL-HOST-002"), ("SGL-HOST-004",),
      "the ranks' pinned HiCache pools exhausted host memory, so the kernel OOM killer fired")
_link(("SGL-HOST-001",), ("SGL-HOST-002",),
      "ranks that checked after others had pinned their pools found the host already full")
_link(("SGL-HOST-001", "SGL-HOST-002", "SGL-GPU-001", "SGL-GPU-002", "SGL-GPU-004", "SGL-KV-002", "SGL-HOST-004"),
      ("SGL-NCCL-001", "SGL-NCCL-002"),
      "when one rank died the others waited on it in their collectives until the NCCL watchdog fired")
_link(("SGL-XID-001",), ("SGL-NCCL-001", "SGL-NCCL-002"),
      "the rank on the faulted GPU stopped joining collectives")
_link(("SGL-HOST-001", "SGL-HOST-004"), ("SGL-GPU-005",),
      "schedulers killed while pinning or unpinning their large host pools hang in uninterruptible sleep and keep "
      "their CUDA contexts")
_link(("SGL-HOST-001", "SGL-HOST-004"), ("SGL-HOST-003",),
      "the pinned HiCache pools of schedulers that have not finished dying stay allocated")
_link(("SGL-GPU-001", "SGL-GPU-002", "SGL-KV-002", "SGL-GPU-004", "SGL-XID-001"), ("SGL-GPU-005", "SGL-HOST-003"),
      "the crash and the kill that followed left processes that did not exit cleanly")
_link(("SGL-GPU-005",), ("SGL-HOST-003",),
      "the same stuck processes that hold the GPU contexts hold their host memory (pinned pools)")
_link(CAUSE_PRIORITY, ("SGL-XID-002",), "Xids from channels torn down when the processes were killed")


def _sort_key(f: Finding) -> tuple[int, str]:
    return SEVERITY_RANK[f.severity], f.rule_id


def link_consequences(findings: list[Finding]) -> None:
    """Set ``consequence_of`` on symptoms whose cause fired too, and say how they follow."""
    fired = {f.rule_id for f in findings}
    for f in findings:
        for cause in CAUSE_PRIORITY:
            if cause == f.rule_id or cause not in fired:
                continue
            why = FOLLOWS.get((cause, f.rule_id))
            if why:
                f.consequence_of = cause
                f.summary = f"{f.summary} Follows from {cause}: {why}."
                break


def pick_root_cause(findings: list[Finding]) -> str | None:
    """The most fundamental critical/high finding that is nobody's consequence."""
    candidates = [f for f in findings if f.consequence_of is None and SEVERITY_RANK[f.severity] <= SEVERITY_RANK["high"]]
    if not candidates:
        return None
    order = {rid: i for i, rid in enumerate(CAUSE_PRIORITY)}
    best = min(candidates, key=lambda f: (order.get(f.rule_id, len(order)), SEVERITY_RANK[f.severity], f.rule_id))
    return best.rule_id


def run_all(tl: Timeline) -> tuple[list[Finding], str | None]:
    """Every finding, sorted by severity then rule id, and the root cause's rule id (or None)."""
    findings: list[Finding] = []
    for det in DETECTORS:
        findings.extend(det.detect(tl))
    findings.sort(key=_sort_key)
    link_consequences(findings)
    return findings, pick_root_cause(findings)

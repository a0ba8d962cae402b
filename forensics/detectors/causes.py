"""Causes and their symptoms: the rules that can be a root cause (most fundamental first), how each
symptom follows from its cause, which run is the incident, and the root cause among the findings.

A symptom links to a cause of the same run (or one of them is host-level); with several hosts, to a
cause on its own host first, then to the failure on another host.
"""

from __future__ import annotations

from forensics.facts.runs import iter_runs
from forensics.model import SEVERITY_RANK, Finding, Timeline

#: Rules that can be a cause, most fundamental first. A symptom links to the first of these that fired.
CAUSE_PRIORITY = (
    "SGL-HOST-001",
    "SGL-HOST-002",
    "SGL-HOST-007",
    "SGL-HOST-009",
    "VLLM-HOST-001",
    "SGL-REC-001",
    "SGL-GPU-006",
    "SGL-GPU-010",
    "VLLM-GPU-003",
    "VLLM-GPU-012",
    "VLLM-GPU-004",
    "VLLM-GPU-021",
    "SGL-GPU-011",
    "SGL-GPU-007",
    "SGL-GPU-004",
    "VLLM-GPU-010",
    "VLLM-KV-002",
    "SGL-KV-004",
    "SGL-GPU-002",
    "SGL-RUN-050",
    "VLLM-GPU-011",
    "SGL-GPU-001",
    "VLLM-GPU-017",
    "VLLM-GPU-001",
    "SGL-KV-002",
    "SGL-XID-003",
    "SGL-XID-004",
    "VLLM-KV-001",
    "SGL-XID-006",
    "SGL-XID-005",
    "SGL-XID-001",
    "SGL-GPU-013",
    "SGL-HOST-004",
    "SGL-HOST-012",
    "VLLM-HOST-003",
    "SGL-NCCL-006",
    "SGL-NCCL-008",
    "SGL-NCCL-007",
    "SGL-NCCL-009",
    "SGL-HOST-006",
    "SGL-NCCL-003",
    "SGL-NCCL-004",
    "VLLM-NCCL-001",
    "SGL-NCCL-005",
    "SGL-NCCL-010",
    "SGL-NCCL-001",
    "SGL-NCCL-002",
    "SGL-GPU-008",
    "SGL-GPU-005",
    "SGL-REC-002",
    "SGL-HOST-003",
    "SGL-REC-003",
    "SGL-HOST-005",
    "SGL-RUN-080",
    "VLLM-HOST-002",
    "SGL-RUN-003",
    "SGL-RUN-001",
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
_link(("SGL-HOST-001", "SGL-HOST-002", "SGL-GPU-001", "SGL-GPU-002", "SGL-GPU-004", "SGL-KV-002", "SGL-HOST-004",
       "SGL-HOST-012", "VLLM-HOST-003"),
      ("SGL-NCCL-001", "SGL-NCCL-002"),
      "when one rank died the others waited on it in their collectives until the NCCL watchdog fired")
_link(("SGL-XID-006",), ("SGL-XID-005",), "the faulting kernel hung its ring, and the driver reset the GPU")
_link(("SGL-XID-001", "SGL-XID-003", "SGL-XID-004", "SGL-XID-005", "SGL-XID-006"), ("SGL-NCCL-001", "SGL-NCCL-002", "SGL-NCCL-004", "SGL-NCCL-010",
                                                      "VLLM-NCCL-001"),
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
_link(("SGL-HOST-007", "SGL-HOST-009"), ("SGL-HOST-004", "SGL-HOST-005", "SGL-NCCL-001", "SGL-NCCL-002"),
      "the host pools that could not be pinned had exhausted host memory")
_link(("SGL-GPU-006", "SGL-GPU-007", "SGL-KV-004", "SGL-HOST-006"), ("SGL-NCCL-001", "SGL-NCCL-002"),
      "when one rank died the others waited on it in their collectives until the NCCL watchdog fired")
_link(("SGL-HOST-001", "SGL-HOST-002", "SGL-HOST-004", "SGL-HOST-005", "SGL-HOST-007", "SGL-HOST-009", "SGL-GPU-004",
       "SGL-GPU-006", "SGL-GPU-007", "SGL-KV-004", "SGL-XID-001", "SGL-XID-003", "SGL-XID-004"), ("SGL-NCCL-005",),
      "the rank that failed while loading is the one the others waited for")
_link(("SGL-RUN-050", "VLLM-GPU-011"), ("SGL-NCCL-001", "SGL-NCCL-002", "SGL-NCCL-005", "SGL-GPU-001", "SGL-GPU-005", "SGL-HOST-003"),
      "the rank whose memory-saver resume ran out of GPU memory exited, and the rest followed from its exit")
_link(("SGL-NCCL-006",), ("SGL-NCCL-001", "SGL-NCCL-002"),
      "the ranks on the node that went silent stopped joining collectives, so the others waited until the watchdog fired")
_link(("SGL-HOST-001", "SGL-HOST-002", "SGL-GPU-001", "SGL-GPU-002", "SGL-GPU-004", "SGL-GPU-006", "SGL-GPU-007",
       "SGL-KV-002", "SGL-KV-004", "SGL-HOST-004", "SGL-HOST-005", "SGL-HOST-006", "SGL-XID-001", "SGL-XID-003",
       "SGL-NCCL-006"), ("SGL-NCCL-007",),
      "the rank that failed is the one the flight recorder shows never entering the collective")
_link(("SGL-NCCL-008", "SGL-NCCL-007"), ("SGL-NCCL-001", "SGL-NCCL-002", "SGL-NCCL-004", "SGL-NCCL-005"),
      "the flight recorder shows why the collective never completed")
_link(("SGL-NCCL-003", "SGL-NCCL-004"), ("SGL-NCCL-001", "SGL-NCCL-002"),
      "the collectives timed out because the ranks never met / one rank hung inside the step")
_link(("SGL-GPU-007",), ("SGL-GPU-004",), "the same weights that do not fit, seen from the load's failure")
_link(("SGL-GPU-010", "SGL-GPU-011"), ("SGL-NCCL-003", "SGL-NCCL-001", "SGL-NCCL-002", "SGL-NCCL-005"),
      "the rank raised in its distributed set-up over the memory check, and the others waited for it")
_link(("VLLM-GPU-003", "VLLM-GPU-012", "VLLM-GPU-004"), ("VLLM-NCCL-001", "SGL-NCCL-001", "SGL-NCCL-002", "SGL-NCCL-005"),
      "the worker that refused to start never joined the others, which waited for it")
_link(("SGL-XID-001", "SGL-XID-003", "SGL-XID-004"), ("SGL-GPU-005", "SGL-GPU-009"),
      "processes on a GPU the driver lost or that faulted cannot finish their CUDA teardown, so their memory stays held")
_link(("SGL-GPU-008",), ("SGL-GPU-006", "SGL-GPU-005"),
      "the orphaned workers of the earlier run are what holds the GPUs")
_link(("SGL-GPU-006",), ("SGL-GPU-004", "SGL-GPU-007", "SGL-KV-004"),
      "memory another process held was missing when the weights and pools were sized")
_link(("SGL-HOST-001", "SGL-HOST-002"), ("SGL-HOST-005", "SGL-RUN-080"),
      "the ranks' pinned HiCache pools most likely exhausted host memory, so a scheduler was SIGKILLed")
_link(("SGL-HOST-005", "SGL-RUN-080"), ("SGL-NCCL-001", "SGL-NCCL-002", "SGL-GPU-005", "SGL-HOST-003"),
      "a scheduler was SIGKILLed and the others were left waiting or holding memory")
_link(("SGL-HOST-001", "SGL-HOST-002", "SGL-HOST-004", "SGL-HOST-005", "SGL-GPU-001", "SGL-GPU-002", "SGL-GPU-004",
       "SGL-GPU-006", "SGL-GPU-007", "SGL-KV-002", "SGL-KV-004", "SGL-XID-001", "SGL-XID-003", "SGL-XID-004",
       "SGL-NCCL-006"),
      ("SGL-NCCL-009",), "the peer that failed first closed its connections, so NCCL's transport to it failed")
_link(("SGL-NCCL-009",), ("SGL-NCCL-001", "SGL-NCCL-002", "SGL-NCCL-004", "VLLM-NCCL-001"),
      "the collectives could not complete over the failed link, so the ranks waited until the watchdog fired")
_link(("VLLM-HOST-001", "VLLM-GPU-001", "VLLM-GPU-017", "VLLM-KV-001", "VLLM-KV-002", "SGL-GPU-001", "SGL-HOST-004", "SGL-HOST-005",
       "VLLM-HOST-002"), ("VLLM-NCCL-001",),
      "a worker that failed first never returned from its step, so the engine's call to it timed out")
_link(("SGL-HOST-001", "SGL-HOST-002", "SGL-HOST-004", "SGL-HOST-005", "SGL-HOST-007", "SGL-HOST-009", "VLLM-HOST-001",
       "SGL-GPU-006", "SGL-XID-001", "SGL-XID-003", "SGL-XID-004"), ("SGL-NCCL-010", "SGL-RUN-003"),
      "the start-up stalled where that failure left it: the stage's wait never ended")
_link(("VLLM-HOST-001",), ("SGL-HOST-004", "SGL-HOST-005", "VLLM-HOST-002"),
      "the vLLM ranks' pinned per-GPU host memory (swap space, CPU offload) exhausted host memory")
_link(("SGL-HOST-001", "VLLM-HOST-001"), ("SGL-HOST-007", "SGL-HOST-009"),
      "the ranks' host pools together exceed the host, so pinning them failed or the kernel killed a rank holding one")
_link(("VLLM-HOST-002",), ("SGL-NCCL-009", "SGL-NCCL-001", "SGL-NCCL-002", "SGL-NCCL-004"),
      "the killed worker's connections closed with it, so the surviving ranks' collectives with it failed")
_link(("SGL-REC-001",), ("SGL-HOST-004", "SGL-HOST-005", "VLLM-HOST-002", "SGL-NCCL-001", "SGL-NCCL-002"),
      "the process's host memory grew until the kernel OOM killer took it")
_link(("SGL-HOST-001", "SGL-HOST-004", "SGL-HOST-005", "SGL-GPU-001", "SGL-GPU-002", "SGL-KV-002", "SGL-XID-001"),
      ("SGL-REC-002",), "the crash and the kill that followed left processes that did not release their GPU")
_link(("SGL-REC-002",), ("SGL-GPU-006",), "the stranded context of the earlier run is what holds the GPU")
_link(("VLLM-GPU-021",), ("VLLM-KV-002", "VLLM-GPU-010", "VLLM-NCCL-001"),
      "the memory another process holds on the GPU was charged to this engine's KV budget")
_link(("VLLM-GPU-010",), ("VLLM-KV-002", "VLLM-KV-001"),
      "the CUDA-graph reserve charged to the budget is what left the KV cache short")
_link(("SGL-REC-003",), ("SGL-HOST-006",), "the shared-memory segments left by earlier runs filled /dev/shm")


def _run_of(f: Finding) -> str | None:
    """The run a finding is about (its first line), or None for host-level findings and single-run logs."""
    v = f.figures.get("run_started")
    return str(v) if v is not None else None


def incident_run(findings: list[Finding], tl: Timeline | None = None) -> str | None:
    """The run that failed last: the latest run with a critical/high finding (None when no finding names a run)."""
    failing = {_run_of(f) for f in findings if SEVERITY_RANK[f.severity] <= SEVERITY_RANK["high"]} - {None}
    if not failing:
        return None
    order: dict[str, tuple] = {}
    if tl is not None:
        order = {ref.started: ref.order() for ref, _ in iter_runs(tl)}
    # without the timeline, the run's number in the figures orders runs of one file
    index = {_run_of(f): f.figures.get("run", 0) for f in findings if _run_of(f)}
    return max(failing, key=lambda r: order.get(r, (float("-inf"), index.get(r, 0), r, 0)))


#: The run that failed last: one for one host's evidence, or per host (host name → run) for several.
Incident = str | None | dict[str, str | None]


def _host_of(f: Finding) -> str | None:
    return f.hosts[0] if f.hosts else None


def _incident_of(f: Finding, incident: Incident) -> str | None:
    return incident.get(_host_of(f) or "") if isinstance(incident, dict) else incident


def in_incident(f: Finding, incident: Incident) -> bool:
    return _run_of(f) in (None, _incident_of(f, incident))


def sort_key(f: Finding, incident: Incident = None) -> tuple[int, str, int]:
    # same rule in several runs: the incident's finding first, so it is the one ``root_cause`` names
    return SEVERITY_RANK[f.severity], f.rule_id, 0 if in_incident(f, incident) else 1


def _same_run(a: Finding, b: Finding, incident: Incident = None) -> bool:
    if _host_of(a) != _host_of(b):
        # one server over several nodes: each node's part of the incident is its own run that failed
        return in_incident(a, incident) and in_incident(b, incident)
    return _run_of(a) is None or _run_of(b) is None or _run_of(a) == _run_of(b)


def link_consequences(findings: list[Finding], incident: Incident = None) -> None:
    """Set ``consequence_of`` on symptoms whose cause fired too, and say how they follow.

    A cause and its symptom belong to the same run (or one of them is host-level). A host-level symptom
    (a stranded GPU, an OOM kill) links to a cause of the incident run first, then of earlier runs.
    With several hosts, a symptom links to a cause on its own host first, then to the failure on another
    host (the node whose rank died explains the other nodes' collective timeouts).
    """
    order = {rid: i for i, rid in enumerate(CAUSE_PRIORITY)}
    for f in findings:
        causes = [c for c in findings if c is not f and c.rule_id in order and c.rule_id != f.rule_id
                  and (c.rule_id, f.rule_id) in FOLLOWS and _same_run(c, f, incident)]
        if not causes:
            continue
        cause = min(causes, key=lambda c: (not in_incident(c, incident), _host_of(c) != _host_of(f),
                                           order[c.rule_id]))
        f.consequence_of = cause.rule_id
        where = f" on {_host_of(cause)}" if _host_of(cause) != _host_of(f) and _host_of(cause) else ""
        if where:
            f.figures["consequence_of_host"] = _host_of(cause)
        f.summary = f"{f.summary} Follows from {cause.rule_id}{where}: {FOLLOWS[(cause.rule_id, f.rule_id)]}."


def root_finding(findings: list[Finding], incident: Incident = None) -> Finding | None:
    """The most fundamental critical/high finding that is nobody's consequence, from the run that failed
    last (with several hosts: the earliest such failure among equals, wherever it is)."""
    candidates = [f for f in findings if f.consequence_of is None and SEVERITY_RANK[f.severity] <= SEVERITY_RANK["high"]]
    of_incident = [f for f in candidates if in_incident(f, incident)]
    candidates = of_incident or candidates
    if not candidates:
        return None
    order = {rid: i for i, rid in enumerate(CAUSE_PRIORITY)}
    return min(candidates, key=lambda f: (order.get(f.rule_id, len(order)), SEVERITY_RANK[f.severity], f.rule_id,
                                          _first_seen(f)))


def _first_seen(f: Finding) -> str:
    stamps = [e.ts for e in f.evidence if e.ts]
    return min(stamps) if stamps else "~"


def pick_root_cause(findings: list[Finding], incident: Incident = None) -> str | None:
    """The rule id of :func:`root_finding`."""
    best = root_finding(findings, incident)
    return best.rule_id if best else None

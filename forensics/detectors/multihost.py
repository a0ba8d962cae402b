"""One server over several nodes: every rule per host, then causes linked across hosts.

Sources: SGL-NCCL-006 reads the watchdog timeouts of the waiting ranks (reference/failure_messages.md §4.4)
against the last line of each node's log.

Each host's evidence is judged against that host's facts (its RAM, its GPUs, its ranks: the detectors
see one host's view, :func:`forensics.timeline.hosts.host_view`), so HiCache × the ranks of the small-RAM node is
weighed against that node's RAM, and GPU 0 of one node is never GPU 0 of another. Then the hosts'
findings are linked as one incident: the rank that died on one node explains the other nodes' collective
timeouts. A flag corrected on several hosts takes the value that fits the tightest one. The topology
(nnodes, node rank, ranks per node) places ranks on hosts and names the nodes whose evidence is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from forensics.facts.launch import ranks_per_host, server_config
from forensics.facts.rows import attrs, rank_of, rows, to_number
from forensics.facts.stages import SERVING, furthest_in, nodes_behind
from forensics.model import SEVERITY_RANK, Finding, Timeline, iso_z

from ._common import make_finding

#: Row kinds whose rank labels say which ranks ran on a host.
_RANK_KINDS = ("weight_load_begin", "weight_load_end", "kv_cache_allocated", "memory_pool_end", "hicache_alloc",
               "cuda_graph_begin", "cuda_graph_end", "dist_init_begin", "dist_init_end", "server_ready",
               "ranks_not_loaded", "nccl_watchdog", "scheduler_exception", "cuda_oom", "hicache_insufficient")


def topology(tl: Timeline) -> dict[str, Any]:
    """nnodes, this host's node rank, the parallel sizes, ranks per node, and the ranks seen here.

    The node rank is the server's ``node_rank`` when stated, else the node the ranks seen here fall on.
    """
    cfg = server_config(tl)
    seen = sorted({r for r in (rank_of(row) for row in rows(tl, *_RANK_KINDS)) if r is not None})
    per_node, how = ranks_per_host(cfg, 0)
    nnodes = int(to_number(cfg.get("nnodes")) or 1)
    node_rank = to_number(cfg.get("node_rank"))
    if node_rank is None and seen and nnodes > 1 and per_node > 1:
        node_rank = seen[0] // per_node
    sizes = {k: int(v) for k in ("tp_size", "pp_size", "dp_size", "ep_size")
             if (v := to_number(cfg.get(k))) is not None}
    return {"nnodes": nnodes, "node_rank": int(node_rank) if node_rank is not None else None,
            "ranks_per_node": per_node, "ranks_per_node_from": how, "ranks_seen": seen, **sizes}


def _span(a: int, b: int) -> str:
    return f"rank {a}" if a == b else f"ranks {a}–{b}"


def note_missing_nodes(tl: Timeline, views: dict[str, Timeline]) -> list[str]:
    """Name the nodes of the server whose evidence is not in the input (a gap in the facts), e.g.
    "ranks 8–15 (node 1 of 2) have no log here; collect on node 1"."""
    topo = {h: topology(v) for h, v in views.items()}
    for h, t in topo.items():
        if h in tl.facts.hosts:
            tl.facts.hosts[h].topology = t
    nnodes = max((t["nnodes"] for t in topo.values()), default=1)
    if nnodes <= 1:
        return []
    per_node = max(t["ranks_per_node"] for t in topo.values())
    covered = {t["node_rank"] for t in topo.values() if t["node_rank"] is not None}
    unplaced = [h for h, t in topo.items() if t["node_rank"] is None]
    missing = [n for n in range(nnodes) if n not in covered]
    if len(unplaced) >= len(missing):
        return []  # every node may be here: we just cannot tell which is which
    gaps = []
    for n in missing[len(unplaced):] if unplaced else missing:
        ranks = _span(n * per_node, (n + 1) * per_node - 1) if per_node > 1 else f"node {n}'s ranks"
        gaps.append(f"{ranks} (node {n} of {nnodes}) have no log here; collect on node {n} "
                    f"(`forensics collect --tag <incident>` there, then report all bundles together)")
    for g in gaps:
        if g not in tl.facts.gaps:
            tl.facts.gaps.append(g)
    return gaps


def _numeric(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def tightest_corrections(findings: list[Finding]) -> None:
    """A flag corrected on several hosts (one server, one command line) takes the value that fits the
    tightest host: the smallest proposed size, said in the why."""
    by_flag: dict[tuple[str, str], list[tuple[Finding, Any]]] = {}
    for f in findings:
        for c in f.remediation.flags:
            if _numeric(c.new) is not None:
                by_flag.setdefault((f.rule_id, c.flag), []).append((f, c))
    for (_rule, _flag), changes in by_flag.items():
        hosts = {f.hosts[0] if f.hosts else None for f, _c in changes}
        if len(hosts) < 2:
            continue
        tight_f, tight = min(changes, key=lambda fc: _numeric(fc[1].new))  # type: ignore[arg-type,return-value]
        where = tight_f.hosts[0] if tight_f.hosts else "?"
        for f, c in changes:
            f.figures["tightest_host"] = where
            if c.new != tight.new:
                c.why = f"{c.why}; {tight.new} fits the tightest host ({where}), so every node gets it"
                c.new = tight.new


#: What a rank prints when it waited on another that failed (SGL-RUN-001's first failure): on its own it
#: is unexplained, but with another node's failure in the input it is that failure's consequence.
WAITING_KINDS = frozenset({"ranks_not_loaded", "nccl_watchdog", "watchdog_timeout"})
WAITING_CLASSES = frozenset({"collective_timeout", "store_timeout"})
#: Rules whose findings only wait on others: never the failure another node waited on (SGL-NCCL-005,
#: "ranks that loaded waited for ranks that had not", is main's rule for the same wait).
WAITERS = frozenset({"SGL-NCCL-001", "SGL-NCCL-002", "SGL-NCCL-005", "SGL-RUN-001"})


def _waited(f: Finding) -> bool:
    return f.rule_id == "SGL-RUN-001" and (f.figures.get("first_failure_kind") in WAITING_KINDS
                                           or f.figures.get("first_failure_class") in WAITING_CLASSES)


def link_waiting(findings: list[Finding], incidents: dict[str, str | None]) -> None:
    """A node whose ranks only waited (other ranks did not finish loading, a collective timed out) and that
    no rule explained: its wait follows from the first failure on another node."""
    from forensics.detectors.causes import CAUSE_PRIORITY, in_incident

    order = {rid: i for i, rid in enumerate(CAUSE_PRIORITY)}
    for f in findings:
        if f.consequence_of or not _waited(f) or not in_incident(f, incidents):
            continue
        causes = [c for c in findings if c.hosts != f.hosts and c.rule_id in order and c.rule_id not in WAITERS
                  and c.consequence_of is None and in_incident(c, incidents)]
        if not causes:
            continue
        cause = min(causes, key=lambda c: (order[c.rule_id], min((e.ts for e in c.evidence if e.ts), default="~")))
        f.consequence_of = cause.rule_id
        f.figures["consequence_of_host"] = cause.hosts[0] if cause.hosts else None
        f.summary = (f"{f.summary} Follows from {cause.rule_id} on {f.figures['consequence_of_host']}: this node's "
                     "ranks were waiting on the node where a rank failed.")


#: Engine-log sources: the rows that say a node's server was still running.
_ENGINE_SOURCES = ("sglang", "vllm", "failures")
#: A node's last engine line may come this long after the others entered the collective and still count as
#: having gone silent before it (the collective that timed out began at about the same moment on every node).
SILENCE_SLACK_S = 60.0


def _collective_starts(view: Timeline) -> list[tuple[Any, dict, Any]]:
    """(moment the collective began, its row, the timeout stamp) for each collective timeout of a host."""
    from forensics.timeline.hosts import glog_stamp

    out = []
    years = view.events.get_column("ts").drop_nulls().dt.year()
    year = int(years[0]) if years.len() else None
    for row in rows(view, "nccl_watchdog"):
        a = attrs(row)
        if a.get("event") != "collective_timeout":
            continue
        at = row.get("ts") or glog_stamp(a.get("stamp"), year, view.facts.utc_offset_s)
        timeout = to_number(a.get("timeout_s"))
        if at is None or timeout is None:
            continue
        out.append((at - timedelta(seconds=timeout), row, at))
    return out


def _duration(seconds: float) -> str:
    """A gap in words.

    >>> _duration(3.2), _duration(600)
    ('3 s', '10.0 min')
    """
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def silent_nodes(tl: Timeline, views: dict[str, Timeline], findings: list[Finding]) -> list[Finding]:
    """SGL-NCCL-006 for a node whose engine log stopped, without a failure of its own, before the
    collective the other nodes then timed out in began."""
    waiting = {h: starts for h, v in views.items() if (starts := _collective_starts(v))}
    if not waiting:
        return []
    failed = {f.hosts[0] for f in findings if f.hosts and SEVERITY_RANK[f.severity] <= SEVERITY_RANK["high"]}
    out = []
    for host, view in views.items():
        if host in waiting or host in failed:
            continue
        hf = tl.facts.hosts[host]
        engine = view.events.filter(pl.col("source").is_in(_ENGINE_SOURCES) & pl.col("ts").is_not_null()
                                    & pl.col("ts_basis").is_in(["source-utc", "local+offset", "local+tz",
                                                                "local-assumed"]))
        if engine.is_empty():
            continue
        last = engine.sort("ts").row(-1, named=True)
        skew = timedelta(seconds=hf.clock_skew_s or 0.0)
        last_ts = last["ts"] - skew  # on the reference host's clock
        begun = min((s[0] - timedelta(seconds=tl.facts.hosts[h].clock_skew_s or 0.0), h, s[1])
                    for h, starts in waiting.items() for s in starts)
        start, other, other_row = begun
        if last_ts > start + timedelta(seconds=SILENCE_SLACK_S):
            continue
        if hf.collected_at is not None and hf.collected_at <= start:
            continue  # its evidence was taken before the incident: its end is the collection's, not the node's
        if engine.get_column("ts").min() > start:
            continue
        quiet_s = (start - last_ts).total_seconds()
        ranks = topology(view)["ranks_seen"]
        out.append(make_finding(
            "SGL-NCCL-006",
            summary=(f"{host}'s engine log stops at {iso_z(last['ts'])} with no error; "
                     f"{_duration(quiet_s)} later (by its timeout) the collective began that {other}'s ranks then "
                     f"timed out in: the node or its network most likely died without a trace in the log."),
            evidence=[last, other_row],
            confidence="medium",
            confidence_reason=("nothing in the input says why the node went silent: its kernel log, BMC log or "
                               "link state of those minutes would"),
            ranks=ranks,
            figures={"last_line_at": iso_z(last["ts"]), "collective_began_at": iso_z(start), "silent_before_s":
                     round(quiet_s, 1), "waiting_host": other, "clock_skew_s": hf.clock_skew_s},
            actions=[f"Read {host}'s kernel log of those minutes (`journalctl -k -b -1` if it rebooted) and its BMC "
                     "event log (`ipmitool sel list`); check its links (`ibstat`, `ip -s link`).",
                     f"Collect {host} with `forensics collect --tag <incident>` and report it with the others."],
        ))
        out[-1].hosts = [host]
    return out


#: the stalled-start rules (stalled.py): a node that stopped at a stage
_STALLS = ("SGL-NCCL-010", "SGL-RUN-003")


def stages_across_nodes(views: dict[str, Timeline], findings: list[Finding]) -> None:
    """A start-up stalled on one server over several nodes: each node's furthest stage in every stall's finding, and
    the nodes behind the furthest named as the ones the others wait on. The stalls of the nodes ahead follow from
    the node behind (their stage waits on it), so the node behind carries the root cause."""
    stalled = [f for f in findings if f.rule_id in _STALLS and f.hosts]
    if not stalled:
        return
    # the server came up on a node after a node's last stage: that node's quiet is the idle of a server that serves
    up = [t for h, v in views.items() for r in rows(v, *SERVING) if isinstance(t := r.get("ts"), datetime)]
    for f in stalled:
        last = max((datetime.fromisoformat(e.ts.replace("Z", "+00:00")) for e in f.evidence if e.ts), default=None)
        if up and last is not None and max(up) >= last:
            findings.remove(f)
    stalled = [f for f in stalled if f in findings]
    if not stalled:
        return
    reached = {h: r for h, v in views.items() if (r := furthest_in(v)) is not None}
    if len(reached) < 2:
        return
    behind = nodes_behind(reached)
    per_node = "; ".join(f"{h} {r.stage} ({r.row.get('file')}:{r.row.get('line')})" for h, r in sorted(reached.items()))
    if behind:
        said = (f" Per node, the furthest stage: {per_node}. {', '.join(behind)} "
                f"{'is' if len(behind) == 1 else 'are'} behind the others: the node(s) they wait on.")
    else:
        said = (f" Per node, the furthest stage: {per_node} — every node stopped at the same stage, so they wait on "
                "something they share (the rendezvous, the storage, each other's collectives), not on one node.")
    laggards = [f for f in stalled if f.hosts[0] in behind]
    for f in stalled:
        f.summary += said
        f.figures["stages_by_node"] = {h: r.stage for h, r in sorted(reached.items())}
        f.figures["nodes_behind"] = sorted(behind) or None
        if laggards and f.hosts[0] not in behind and f.consequence_of is None:
            f.consequence_of = laggards[0].rule_id
            f.figures["consequence_of_host"] = laggards[0].hosts[0]


def run_hosts(tl: Timeline, detect: Callable[[Timeline], list[Finding]]) -> tuple[list[Finding], str | None]:
    """Every rule over each host's view, linked across hosts; the root cause and its host."""
    from forensics.detectors.causes import incident_run, link_consequences, root_finding, sort_key
    from forensics.timeline.hosts import host_view

    from . import flight_recorder, missing_facts

    views = {h: host_view(tl, h) for h in tl.facts.hosts}
    findings: list[Finding] = []
    incidents: dict[str, str | None] = {}
    for host, view in views.items():
        mine = detect(view)
        for f in mine:
            f.hosts = [host]
        incidents[host] = incident_run(mine, view)
        findings.extend(mine)
    # the flight recorder compares every rank's dump: read across hosts, not per host's view
    findings = [f for f in findings if f.rule_id not in flight_recorder.RULES]
    findings.extend(flight_recorder.across_hosts(tl))
    findings.extend(silent_nodes(tl, views, findings))
    stages_across_nodes(views, findings)
    tightest_corrections(findings)
    findings.sort(key=lambda f: (*sort_key(f, incidents), f.hosts[0] if f.hosts else ""))
    link_consequences(findings, incidents)
    link_waiting(findings, incidents)
    for host, view in views.items():
        missing_facts.annotate(view, [f for f in findings if f.hosts == [host]])
    note_missing_nodes(tl, views)
    root = root_finding(findings, incidents)
    if root is not None:
        tl.facts.host = root.hosts[0] if root.hosts else None
        # the root cause's finding first among its rule's, so the rule id names it
        findings.sort(key=lambda f: (*sort_key(f, incidents), f is not root, f.hosts[0] if f.hosts else ""))
    return findings, root.rule_id if root else None

"""SGL-NCCL-001/002: an NCCL collective timed out; the sequence number tells start-up from mid-run.

Sample (c10d, stderr of each rank)::

    [rank3]:[E421 04:13:43.426633564 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective
    operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, ...) ran for 600060 milliseconds before timing out.

A low SeqNum (< 100) means the ranks barely started talking (rendezvous, network); a high one
means one rank stopped joining mid-run.

>>> phase_of(3), phase_of(1580)
('SGL-NCCL-001', 'SGL-NCCL-002')
"""

from __future__ import annotations

import re

from forensics.facts.launch import ServerConfig, server_config
from forensics.facts.rows import Row, attrs, rank_of, rows
from forensics.facts.runs import iter_runs, of_kind
from forensics.model import Finding, Timeline

from ._common import make_finding, tag_run

STARTUP_SEQ = 100  # SeqNum below this: the collective was among the first few of the run


def phase_of(seq: int) -> str:
    return "SGL-NCCL-001" if seq < STARTUP_SEQ else "SGL-NCCL-002"


def _seq(row: Row) -> int | None:
    if row.get("count") is not None:
        return int(row["count"])
    v = attrs(row).get("seq_num")
    if isinstance(v, int | float):
        return int(v)
    m = re.search(r"SeqNum=(\d+)|work sequence id: (\d+)|at work: (\d+)", row.get("text") or "")
    return int(next(g for g in m.groups() if g)) if m else None


def _rank(row: Row) -> int | None:
    r = rank_of(row)
    if r is not None:
        return r
    m = re.search(r"\[(?:PG \d+ )?Rank (\d+)\]|\[rank(\d+)\]", row.get("text") or "")
    return int(m.group(1) or m.group(2)) if m else None


def detect(tl: Timeline) -> list[Finding]:
    hits = [r for r in rows(tl, "nccl_watchdog") if _seq(r) is not None]
    # the same watchdog line in a fragment or a vLLM log, read by the failure scan
    hits += [r for r in rows(tl, "failure") if attrs(r).get("failure") == "collective_timeout" and _seq(r) is not None]
    if not hits:
        return []
    out: list[Finding] = []
    seen: set[tuple[str, int]] = set()
    for ref, run in iter_runs(tl):  # each run with its own world size
        mine = [r for r in of_kind(run, "nccl_watchdog") if _seq(r) is not None]
        seen |= {(r["file"], r["line"]) for r in mine}
        out += [tag_run(f, ref) for f in _detect_run(mine, server_config(tl, run))] if mine else []
    rest = [r for r in hits if (r["file"], r["line"]) not in seen]
    if rest:
        out += _detect_run(rest, server_config(tl))
    return out


def _detect_run(hits: list[Row], cfg: ServerConfig) -> list[Finding]:
    by_rule: dict[str, list[Row]] = {}
    for r in hits:
        by_rule.setdefault(phase_of(_seq(r) or 0), []).append(r)
    world = int((cfg.num("tp_size") or 1) * (cfg.num("pp_size") or 1)) if cfg.get("tp_size") else None
    out = []
    for rule_id, group in sorted(by_rule.items()):
        ranks = sorted({x for x in (_rank(r) for r in group) if x is not None})
        seqs = sorted({_seq(r) for r in group if _seq(r) is not None})
        ops = sorted({str(attrs(r).get("op_type")) for r in group if attrs(r).get("op_type")})
        silent = sorted(set(range(world)) - set(ranks)) if world and ranks and len(ranks) < world else []
        if rule_id == "SGL-NCCL-001":
            summary = (f"NCCL {'/'.join(ops) or 'collective'} timed out at SeqNum {seqs[0]} on rank(s) "
                       f"{', '.join(map(str, ranks)) or '?'}: the ranks never got to talk (start-up/rendezvous).")
            actions = ["Rerun with NCCL_DEBUG=INFO; check NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME, the firewall between "
                       "nodes, --dist-init-addr reachability, the same image on every node, and that every rank started."]
        else:
            summary = (f"NCCL {'/'.join(ops) or 'collective'} timed out mid-run (SeqNum {seqs[0]}"
                       + (f"–{seqs[-1]}" if len(seqs) > 1 else "") + f") on rank(s) {', '.join(map(str, ranks)) or '?'}"
                       + (f"; rank(s) {', '.join(map(str, silent))} did not report and are the suspects" if silent else "")
                       + ": one rank stopped joining collectives (crash, hang or hardware fault).")
            actions = ["Find the first rank that failed (its traceback, an OOM kill, an Xid) and fix that; py-spy dump a "
                       "hung rank. --watchdog-timeout only changes how long the others wait."]
        reasons = [m for m, bad in (("the timeout lines do not name their rank", not ranks),
                                    ("the world size is unknown (no server_args or launch command): the rank that "
                                     "stopped joining cannot be named", rule_id == "SGL-NCCL-002" and world is None))
                   if bad]
        out.append(make_finding(
            rule_id,
            summary=summary,
            evidence=group,
            confidence="high" if not reasons else "medium" if len(reasons) == 1 else "low",
            confidence_reason="; ".join(reasons) or None,
            ranks=ranks,
            figures={"seq_nums": seqs, "op_types": ops, "reporting_ranks": ranks, "silent_ranks": silent,
                     "timeout_s": max((float(attrs(r).get("timeout_s") or 0) for r in group), default=None) or None},
            actions=actions,
        ))
    return out

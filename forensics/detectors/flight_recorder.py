"""SGL-NCCL-007/008: what PyTorch's NCCL flight recorder says about a collective timeout.

Sources: SGL-NCCL-007 and SGL-NCCL-008 read the dump as pytorch tools/flight_recorder/components/builder.py
(2.5+) does, and the watchdog line it follows (reference/failure_messages.md §4.4).

Each rank's dump (``parsers/flight_recorder.py``) holds, per process group, the sequence numbers of
the last collective it enqueued, started and completed (``pg_status``) and its ring of recent
collectives (``entries``). PyTorch's own analyser (``tools/flight_recorder/components/builder.py``)
reads them the same way:

* **SGL-NCCL-007** — ranks wait in collective S (they enqueued it, their last completed is S − 1);
  a rank whose last *enqueued* collective is below S never entered it: that rank is why the others
  timed out ("Not all ranks joining collective", "missing ranks"). A rank of the group that left no
  dump at all is named as the likely culprit when every dump that exists entered S.
* **SGL-NCCL-008** — ranks disagree on the collective at one sequence number (a different op, or
  different input sizes): the program desynchronised, and the collective can never complete.

The failure_messages reference §4 reads the same counters from the watchdog lines (``last enqueued
work``, ``last completed work``): a rank whose last enqueued is below the work the others time out on
is the straggler.
"""

from __future__ import annotations

from typing import Any

from forensics.facts.rows import Row, attrs, rows
from forensics.model import Finding, Timeline

from ._common import make_finding


def _ranges(ranks: list[int]) -> str:
    """Ranks written compactly.

    >>> _ranges([0, 1, 2, 3, 4, 6, 7])
    '0-4, 6, 7'
    """
    out: list[str] = []
    rs = sorted(set(ranks))
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(f"{rs[i]}-{rs[j]}" if j - i >= 2 else ", ".join(str(x) for x in rs[i:j + 1]))
        i = j + 1
    return ", ".join(out)


def _op_name(op: str) -> str:
    return op.split(":", 1)[-1] if op else "collective"


def _dumps(tl: Timeline) -> dict[int, Row]:
    """Rank → its dump's summary row (the last dump read for a rank wins)."""
    out: dict[int, Row] = {}
    for r in rows(tl, "fr_dump"):
        rank = attrs(r).get("global_rank")
        if isinstance(rank, int):
            out[rank] = r
    return out


def _status(dump: Row, entries: list[Row]) -> dict[str, dict[str, Any]]:
    """pg name → {enqueued, completed, desc, ranks} for one rank; the ring fills what pg_status lacks."""
    out: dict[str, dict[str, Any]] = {}
    for pg in (attrs(dump).get("pgs") or {}).values():
        if isinstance(pg, dict):
            out[str(pg.get("name"))] = {"enqueued": pg.get("last_enqueued"), "completed": pg.get("last_completed"),
                                        "desc": pg.get("desc") or "", "ranks": pg.get("ranks")}
    for e in entries:
        a = attrs(e)
        seq = a.get("seq")
        if not isinstance(seq, int) or a.get("is_p2p"):
            continue
        st = out.setdefault(str(a.get("pg_name")), {"enqueued": None, "completed": None, "desc": a.get("pg_desc") or "",
                                                     "ranks": None})
        st.setdefault("_enq", -1)
        st["_enq"] = max(st["_enq"], seq)
        if a.get("state") == "completed":
            st["_comp"] = max(st.get("_comp", -1), seq)
    for st in out.values():
        if st["enqueued"] is None and "_enq" in st:
            st["enqueued"] = st["_enq"]
        if st["completed"] is None and "_comp" in st:
            st["completed"] = st["_comp"]
    return out


RULES = ("SGL-NCCL-007", "SGL-NCCL-008")


def across_hosts(tl: Timeline) -> list[Finding]:
    """The findings over every host's dumps at once, each about the hosts of the ranks it names."""
    out = detect(tl)
    hosts = {attrs(r).get("global_rank"): r.get("host") for r in rows(tl, "fr_dump")}
    for f in out:
        f.hosts = sorted({hosts[r] for r in f.ranks if hosts.get(r)}) or sorted(set(hosts.values()) - {None})[:1]
    return out


def detect(tl: Timeline) -> list[Finding]:
    dumps = _dumps(tl)
    if not dumps:
        return []
    by_rank: dict[int, list[Row]] = {}
    for e in rows(tl, "fr_entry"):
        rank = attrs(e).get("global_rank")
        if isinstance(rank, int):
            by_rank.setdefault(rank, []).append(e)
    status = {rank: _status(d, by_rank.get(rank, [])) for rank, d in dumps.items()}
    pg_names = sorted({pg for st in status.values() for pg in st})
    out: list[Finding] = []
    for pg in pg_names:
        f = _behind(pg, status, dumps, by_rank)
        if f is not None:
            out.append(f)
            break  # the first group that names a rank says it; the others wait on the same rank
    desync = _desync(by_rank)
    if desync is not None:
        out.append(desync)
    return out


#: Collective timeouts whose culprit the flight recorder would name.
TIMEOUT_RULES = ("SGL-NCCL-001", "SGL-NCCL-002", "SGL-NCCL-004")


def advise(findings: list[Finding], tl: Timeline) -> None:
    """A collective timeout without dumps: say how to get the ranks' flight recorders next time."""
    if rows(tl, "fr_dump") or any(f.rule_id in RULES for f in findings):
        return
    for f in findings:
        if f.rule_id in TIMEOUT_RULES:
            f.remediation.actions.append(
                "Next time let every rank dump its NCCL flight recorder when the watchdog fires "
                "(TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1; files "
                "${TORCH_NCCL_DEBUG_INFO_TEMP_FILE:-/tmp/nccl_trace_rank_}<rank>, which `forensics collect` picks up): "
                "the dumps name the rank that never entered the collective.")


def _host(row: Row | None) -> str | None:
    return row.get("host") if row else None


def _behind(pg: str, status: dict[int, dict[str, dict[str, Any]]], dumps: dict[int, Row],
            by_rank: dict[int, list[Row]]) -> Finding | None:
    mine = {r: st[pg] for r, st in status.items() if pg in st}
    waiting = {r: s for r, s in mine.items() if isinstance(s["enqueued"], int) and isinstance(s["completed"], int)
               and s["enqueued"] > s["completed"]}
    if not waiting:
        return None
    seq = min(s["completed"] for s in waiting.values()) + 1  # the collective they wait in
    behind = sorted(r for r, s in mine.items() if isinstance(s["enqueued"], int) and s["enqueued"] < seq)
    members = next((s["ranks"] for s in mine.values() if s.get("ranks")), None)
    no_dump = sorted(set(members or []) - set(dumps))
    if not behind and not no_dump:
        return None
    desc = next((s["desc"] for s in mine.values() if s.get("desc")), "")
    wait_rows = [e for r in waiting for e in by_rank.get(r, []) if attrs(e).get("seq") == seq
                 and str(attrs(e).get("pg_name")) == pg]
    op = _op_name(str(attrs(wait_rows[0]).get("op"))) if wait_rows else "collective"
    sizes = attrs(wait_rows[0]).get("input_sizes") if wait_rows else None
    hosts = {r: _host(dumps.get(r)) for r in behind}
    several_hosts = len({_host(d) for d in dumps.values()} - {None}) > 1

    def who(r: int) -> str:
        return f"rank {r}" + (f" on {hosts[r]}" if several_hosts and hosts.get(r) else "")

    group = f"process group {pg}" + (f" ({desc})" if desc else "")
    if behind:
        lasts = {r: mine[r]["enqueued"] for r in behind}
        culprit = ", ".join(f"{who(r)} (last collective #{lasts[r]})" for r in behind)
        summary = (f"The flight recorder shows {culprit} never entered {op} #{seq} of {group}, which ranks "
                   f"{_ranges(list(waiting))} entered and waited in until the NCCL watchdog fired: "
                   f"{'that rank is' if len(behind) == 1 else 'those ranks are'} the cause of the timeout."
                   + (f" Rank(s) {_ranges(no_dump)} of the group left no dump." if no_dump else ""))
        confidence, reason = "high", None
    else:
        summary = (f"Every flight-recorder dump shows its rank waiting in {op} #{seq} of {group}; rank(s) "
                   f"{_ranges(no_dump)} of the group left no dump at all — most likely the one(s) that died or hung "
                   "before the watchdog could dump.")
        confidence, reason = "medium", "the suspect is inferred from a missing dump, not read from one"
    # the rank behind (its dump and its last collective), then one rank waiting in S
    evidence = [dumps[r] for r in behind] + wait_rows[:1] + ([] if behind else [dumps[min(waiting)]])
    last_rows = [e for r in behind for e in by_rank.get(r, [])[-1:]]
    return make_finding(
        "SGL-NCCL-007", summary=summary, evidence=[*evidence, *last_rows], confidence=confidence,
        confidence_reason=reason, ranks=behind or no_dump,
        figures={"process_group": pg, "process_group_desc": desc or None, "collective_seq": seq, "collective_op": op,
                 "input_sizes": sizes, "ranks_behind": behind or None, "ranks_waiting": sorted(waiting),
                 "ranks_without_dump": no_dump or None,
                 "hosts_behind": sorted({h for h in hosts.values() if h}) or None},
        actions=[f"Look at what {'rank ' + _ranges(behind) if behind else 'rank ' + _ranges(no_dump)} was doing "
                 f"before #{seq}: its own log's last lines (an exception, an OOM), py-spy dump of its scheduler if it is "
                 "still alive, dmesg/Xid on its GPU and host.",
                 "Raising the NCCL/watchdog timeout only makes the others wait longer."],
    )


def _desync(by_rank: dict[int, list[Row]]) -> Finding | None:
    """The first sequence number at which ranks of one group ran different collectives."""
    seen: dict[tuple[str, int], dict[int, tuple[str, str]]] = {}
    rows_at: dict[tuple[str, int], dict[int, Row]] = {}
    for rank, entries in by_rank.items():
        for e in entries:
            a = attrs(e)
            seq = a.get("seq")
            if not isinstance(seq, int) or a.get("is_p2p"):
                continue
            key = (str(a.get("pg_name")), seq)
            seen.setdefault(key, {})[rank] = (str(a.get("op") or ""), repr(a.get("input_sizes")))
            rows_at.setdefault(key, {})[rank] = e
    for key in sorted(seen, key=lambda k: (k[1], k[0])):
        per = seen[key]
        if len(per) < 2 or len(set(per.values())) < 2:
            continue
        groups: dict[tuple[str, str], list[int]] = {}
        for rank, sig in per.items():
            groups.setdefault(sig, []).append(rank)
        parts = [f"rank{'s' if len(rs) > 1 else ''} {_ranges(rs)} ran {_op_name(sig[0])} with input sizes {sig[1]}"
                 for sig, rs in sorted(groups.items(), key=lambda kv: -len(kv[1]))]
        minority = sorted(min(groups.values(), key=len))
        majority = sorted(max(groups.values(), key=len))
        pg, seq = key
        return make_finding(
            "SGL-NCCL-008",
            summary=(f"The ranks' flight recorders disagree on collective #{seq} of process group {pg}: "
                     + "; ".join(parts) + ". The ranks issued different collectives at the same point, so it "
                     "can never complete."),
            evidence=[rows_at[key][r] for r in [*minority, majority[0]]],
            ranks=minority,
            figures={"process_group": pg, "collective_seq": seq, "variants": len(groups), "ranks_minority": minority},
            actions=["Find the code path where the minority ranks diverged (the frames in the dump entries); a "
                     "rank-dependent branch, a different batch shape, or a rank that skipped a step.",
                     "Check every rank runs the same SGLang/PyTorch build and the same launch flags."],
        )
    return None

"""The start-up table: each rank's way through loading, the KV pool, graph capture and ready, lined up across ranks and hosts."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from forensics.model import Timeline
from forensics.report.document import events

#: Column label → event kinds that mark the stage.
STARTUP_STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("dist init", ("dist_init_end", "dist_init_begin")),
    ("weights begin", ("weight_load_begin",)),
    ("weights end", ("weight_load_end",)),
    ("KV allocated", ("kv_cache_allocated",)),
    ("pool end", ("memory_pool_end",)),
    ("graph begin", ("cuda_graph_begin",)),
    ("graph end", ("cuda_graph_end",)),
    ("HiCache alloc", ("hicache_alloc",)),
    ("ready", ("server_ready",)),
)


@dataclass
class StartupCell:
    text: str  # time, "✓", or "" when not reached
    title: str  # file:line and full stamp
    state: str  # "done" | "missing" | "stalled"


@dataclass
class StartupRow:
    group: str  # the log (or set of per-rank logs) and server run the rank belongs to
    run: int | None
    rank: str
    cells: list[StartupCell]
    stalled_at: str | None


def _natural(label: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", label))


def _stamp(row: dict[str, Any]) -> tuple[str, str]:
    if row.get("ts") is not None:
        return row["ts"].strftime("%H:%M:%S"), row["ts"].strftime("%Y-%m-%d %H:%M:%S UTC")
    if row.get("ts_local") is not None:
        return row["ts_local"].strftime("%H:%M:%S") + " local", row["ts_local"].strftime("%Y-%m-%d %H:%M:%S (host local)")
    return "✓", "no time stamp"


def _rank_of(r: dict[str, Any]) -> str:
    if r.get("rank"):
        return str(r["rank"])
    return f"TP{r['tp_rank']}" if r.get("tp_rank") is not None else "no rank prefix"


def _startup_groups(rows: list[dict[str, Any]], hosts: int = 1) -> dict[tuple[str, Any], str]:
    """(file, run) → group name. Ranks are compared only with ranks of the same server run: one log
    and run, except per-rank log files (one rank label each) of a host, which form one group. With
    several hosts (one server over several nodes) every host's ranks form one group, so a rank of one
    node that never reached a stage the other nodes' ranks reached stands out."""
    if hosts > 1:
        return {(r.get("file") or "", r.get("run")): "all hosts" for r in rows}
    labels: dict[tuple[str, Any], set[str]] = {}
    for r in rows:
        if r["kind"] != "server_ready":
            labels.setdefault((r.get("file") or "", r.get("run")), set()).add(_rank_of(r))
    per_rank = {k for k, v in labels.items() if len(v) == 1 and "no rank prefix" not in v}
    names: dict[tuple[str, Any], str] = {}
    for r in rows:
        key = (r.get("file") or "", r.get("run"))
        run = "" if key[1] is None else f", run {key[1]}"
        if key in per_rank:
            names[key] = f"per-rank logs{' of ' + r['host'] if r.get('host') else ''}{run}"
        else:
            names[key] = f"{key[0]}{run}"
    return names


def startup_table(tl: Timeline | None) -> list[StartupRow]:
    """Rows = ranks of each server run, columns = :data:`STARTUP_STAGES`.

    A rank that lacks a stage other ranks of its run reached, and logged nothing after it, is
    marked "stalled here".
    """
    kinds = [k for _, ks in STARTUP_STAGES for k in ks]
    rows = events(tl, *kinds)
    if not rows:
        return []
    n_hosts = len(tl.facts.hosts) if tl is not None else 0
    group_of = _startup_groups(rows, n_hosts)
    if n_hosts > 1:  # ranks are the server's (TP8 lives on node 1): the host goes with the label
        rows = [{**r, "rank": f"{r.get('host')} {_rank_of(r)}"} if r["kind"] != "server_ready" or r.get("rank")
                or r.get("tp_rank") is not None else r for r in rows]
    stage_of = {k: i for i, (_, ks) in enumerate(STARTUP_STAGES) for k in ks}
    reached: dict[tuple[str, Any, str], dict[int, dict[str, Any]]] = {}
    ready_of: dict[str, dict[str, Any]] = {}
    for r in rows:
        group = group_of[(r.get("file") or "", r.get("run"))]
        has_rank = bool(r.get("rank")) or r.get("tp_rank") is not None
        if r["kind"] == "server_ready" and not has_rank:
            ready_of.setdefault(group, r)  # main process: applies to every rank of the run
            continue
        stages = reached.setdefault((group, r.get("run"), _rank_of(r)), {})
        s = stage_of[r["kind"]]
        if s not in stages or _sort_key(r) < _sort_key(stages[s]):
            stages[s] = r
    ready_idx = len(STARTUP_STAGES) - 1
    for (group, _, _), stages in reached.items():
        if group in ready_of and ready_idx not in stages:
            stages[ready_idx] = ready_of[group]
    by_group: dict[str, set[int]] = {}
    for (group, _, _), stages in reached.items():
        by_group.setdefault(group, set()).update(stages)
    table = []
    for (group, run, label), stages in sorted(reached.items(), key=lambda kv: (kv[0][0], _natural(kv[0][2]))):
        others = by_group[group]
        last_own = max(stages)
        stalled_at = next((i for i in range(len(STARTUP_STAGES))
                           if i in others and i not in stages and i > last_own), None)
        cells = []
        for i, (name, _) in enumerate(STARTUP_STAGES):
            if i in stages:
                text, when = _stamp(stages[i])
                cells.append(StartupCell(text, f"{name}: {when} — {stages[i].get('file')}:{stages[i].get('line')}",
                                         "done"))
            elif i == stalled_at:
                cells.append(StartupCell("stalled here", f"other ranks of this run reached {name}", "stalled"))
            elif i in others:
                cells.append(StartupCell("—", f"other ranks reached {name}; not seen for this rank", "missing"))
            else:
                cells.append(StartupCell("", "", "none"))
        table.append(StartupRow(group, run, label, cells,
                                STARTUP_STAGES[stalled_at][0] if stalled_at is not None else None))
    return table


def _sort_key(r: dict[str, Any]) -> tuple:
    ts = r.get("ts") or r.get("ts_local")
    return (ts is None, ts or datetime.min, r.get("file") or "", r.get("line") or 0)



"""The end of a run and what came after: kill commands, the engine's death lines, OOM kills of the
server, launches, and process snapshots.

Sources: kill(1) and pkill(1) (procps) for the kill commands; reference/failure_messages.md §5.5 for the death
notices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from forensics.facts.launch import is_prose, launch_rows
from forensics.facts.rows import Row, attrs, before, rows
from forensics.facts.runs import sglang_runs
from forensics.model import Timeline

KILL_RE = re.compile(
    r"\b(?:pkill|killall|kill\s+-\S+|kill\s+\d+|fuser\s+(?:-\S+\s+)*-k|docker\s+(?:kill|stop|rm\s+-f)|"
    r"podman\s+(?:kill|stop)|pct\s+(?:exec\b.*\bkill|stop|shutdown|reboot)|systemctl\s+(?:stop|restart)\s+\S*sglang|"
    r"kubectl\s+delete\s+pod)"
)



END_KINDS = ("sigquit", "rank_dead", "scheduler_exception", "subprocess_crashed", "sigterm", "init_failed")



@dataclass
class CommandRef:
    """A command typed in a transcript: a ``command`` row or a parsed segment's command."""

    file: str
    line: int
    text: str
    ts: Any = None

    def as_row(self) -> Row:
        return {"file": self.file, "line": self.line, "ts": self.ts, "text": self.text, "kind": "command"}



def commands(tl: Timeline) -> list[CommandRef]:
    """Every command we know was typed, in file/line order."""
    out: dict[tuple[str, int, str], CommandRef] = {}
    for row in rows(tl, "command"):
        text = str(attrs(row).get("command") or row.get("text") or "")
        out[(row["file"], int(row["line"]), text)] = CommandRef(row["file"], int(row["line"]), text, row.get("ts"))
    known = {(f, t) for f, _, t in out}
    for art in tl.artifacts:
        for seg in art.segments or []:
            cmd = seg.get("command")
            if cmd and (art.path, str(cmd)) not in known:
                line = max(int(seg.get("start_line") or 1) - 1, 1)
                out[(art.path, line, str(cmd))] = CommandRef(art.path, line, str(cmd))
    return [out[k] for k in sorted(out)]



def kill_commands(tl: Timeline) -> list[CommandRef]:
    return [c for c in commands(tl) if KILL_RE.search(c.text)]



def is_sglang_process(comm: Any, args: Any = None) -> bool:
    c = str(comm or "").lower()
    return c.startswith("sglang") or "sglang" in str(args or "").lower()



def end_events(tl: Timeline) -> list[Row]:
    """Moments the server stopped: kill commands, SGLang's own death lines, OOM kills of SGLang."""
    out = [c.as_row() for c in kill_commands(tl)]
    out += rows(tl, *END_KINDS)
    out += [r for r in rows(tl, "oom_kill") if is_sglang_process(r.get("comm"), attrs(r).get("args"))
            or (r.get("comm") or "").startswith("python")]
    out += _server_gone_markers(tl)
    out.sort(key=lambda r: (r.get("file") or "", r.get("line") or 0))
    return out



def _server_gone_markers(tl: Timeline) -> list[Row]:
    """A ps snapshot without any SGLang process, on an input where SGLang ran: the server was gone."""
    if not (launch_rows(tl) or sglang_runs(tl)):
        return []
    out = []
    for snap in group_snapshots(rows(tl, "process")):
        if not any(is_sglang_process(r.get("comm"), attrs(r).get("args")) and attrs(r).get("state") not in ("Z", "X")
                   for r in snap):
            out.append(min(snap, key=lambda r: r.get("line") or 0))
    return out



def launch_moments(tl: Timeline) -> list[Row]:
    """Launch commands, typed or written, and the first line of each SGLang run.

    A configuration told in prose is no moment: a write-up's order of sentences is not the order of events."""
    out = [r for r in launch_rows(tl) if not is_prose(r)]
    out += [c.as_row() for c in commands(tl)
            if re.search(r"sglang\.launch_server|sglang\s+serve", c.text)]
    for run in sglang_runs(tl).values():
        first = min(run, key=lambda r: (r.get("line") or 0))
        if not is_prose(first):
            out.append(first)
    return out



def last_end_before(ends: list[Row], row: Row) -> Row | None:
    """The latest end event known to precede ``row``."""
    found = [e for e in ends if before(e, row) or (e.get("kind") == "process" and same_moment(e, row))]
    if not found:
        return None
    same_file = [e for e in found if e.get("file") == row.get("file")]
    pool = same_file or found
    if same_file:
        return max(pool, key=lambda e: e.get("line") or 0)
    return max(pool, key=lambda e: e["ts"].timestamp() if isinstance(e.get("ts"), datetime) else float("-inf"))



def same_moment(a: Row, b: Row, tolerance_s: float = 120.0) -> bool:
    """Collected together: the same snapshot ordinal in a bundle, or stamps within ``tolerance_s``."""
    if a.get("snapshot") is not None and a.get("snapshot") == b.get("snapshot") and a.get("file") != b.get("file"):
        return True
    ta, tb = a.get("ts"), b.get("ts")
    return isinstance(ta, datetime) and isinstance(tb, datetime) and abs((ta - tb).total_seconds()) <= tolerance_s



def relaunched_between(tl: Timeline, start: Row, end: Row) -> bool:
    """Was the server launched again after ``start`` and before ``end``?"""
    return any(before(start, m) and before(m, end) for m in launch_moments(tl))



def snapshot_key(row: Row) -> tuple[str, int]:
    return (row.get("file") or "", int(row["snapshot"]) if row.get("snapshot") is not None else -1)



def group_snapshots(snap_rows: list[Row]) -> list[list[Row]]:
    """Rows of one snapshot together, snapshots in file/line order."""
    groups: dict[tuple[str, int], list[Row]] = {}
    for r in snap_rows:
        groups.setdefault(snapshot_key(r), []).append(r)
    out = list(groups.values())
    out.sort(key=lambda g: (g[0].get("file") or "", min(r.get("line") or 0 for r in g)))
    return out



def live_sglang_processes(tl: Timeline) -> list[Row]:
    return [r for r in rows(tl, "process")
            if is_sglang_process(r.get("comm"), attrs(r).get("args")) and attrs(r).get("state") not in ("Z", "X")]


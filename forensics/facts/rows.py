"""The timeline as rows: each kind's rows decoded once per analysis, their attrs parsed once, and the
order between two events.

Every fact and detector reads rows through :func:`rows`; the decoded rows live in a memo on the
:class:`~forensics.model.Timeline` (:func:`timeline_memo`) until :func:`release`.

>>> to_number("0.93"), to_number(True), to_number("n/a")
(0.93, None, None)
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

import polars as pl

from forensics.model import Timeline
from parsers.schema import joined_attrs, typed_members

Row = dict[str, Any]



def attrs(row: Row) -> dict[str, Any]:
    """Every field the parser read for the row (cached on the row dict): its ``attrs`` JSON with its typed
    members put back (``fields``: the batch lines' figures, parsers.schema.FIELDS; ``figures``: the OOM,
    KV-pool, capture and load rows', parsers.schema.FIGURES), keys sorted."""
    cached = row.get("_attrs")
    if cached is None:
        raw = row.get("attrs")
        typed = typed_members(row)
        if typed:
            cached = joined_attrs(raw, typed)
        else:
            try:
                cached = json.loads(raw) if raw else {}
            except (TypeError, ValueError):
                cached = {}
            if not isinstance(cached, dict):
                cached = {}
        row["_attrs"] = cached
    return cached


def field(row: Row, name: str) -> Any:
    """One parsed field of the row: the typed value when the row has it (no JSON read), else from attrs.

    >>> field({"kind": "decode_batch", "fields": {"queue_req": 4}, "attrs": None}, "queue_req")
    4
    >>> field({"kind": "log", "attrs": '{"queue_req": 5}'}, "queue_req")
    5
    >>> field({"kind": "cuda_graph_end", "fields": None, "figures": {"graph_bytes": 7}}, "graph_bytes")
    7
    """
    typed = typed_members(row)
    if typed:
        v = typed.get(name)
        if v is not None:
            return v
    return attrs(row).get(name)



def _row_key(r: Row) -> tuple:
    return (r.get("file") or "", r.get("line") or 0, r.get("kind") or "")



def timeline_memo(tl: Timeline) -> dict[str, Any]:
    """Per-Timeline memo of converted rows: ~60 ``rows`` calls per analysis each turned the frame into
    dicts again. Keyed on the events frame itself, so a Timeline given new events is read afresh."""
    memo = tl.__dict__.get("_detector_cache")
    if memo is None or memo["frame"] is not tl.events:
        memo = {"frame": tl.events, "kinds": {}}
        tl.__dict__["_detector_cache"] = memo
    return memo



_REPEATED = ("kind", "file", "source", "rank", "ts_basis", "host", "comm")



def release(tl: Timeline) -> None:
    """Drop the rows converted for the analysis (the report reads the frame, not these)."""
    tl.__dict__.pop("_detector_cache", None)



def kinds_present(tl: Timeline) -> frozenset[str]:
    """The kinds the timeline holds, read once per analysis."""
    memo = timeline_memo(tl)
    present = memo.get("present")
    if present is None:
        frame = tl.events
        present = memo["present"] = frozenset(frame.get_column("kind").unique().to_list()
                                              if "kind" in frame.columns else ())
    return present


def rows(tl: Timeline, *kinds: str) -> list[Row]:
    """Rows of these kinds as dicts, in a stable order: file, line, then kind.

    The list is the caller's own; the dicts are shared between calls (only ``attrs`` caches into them)."""
    frame = tl.events
    if frame.is_empty() or "kind" not in frame.columns:
        return []
    by_kind: dict[str, list[Row]] = timeline_memo(tl)["kinds"]
    missing = [k for k in dict.fromkeys(kinds) if k not in by_kind]
    if missing:
        for k in missing:
            by_kind[k] = []
        # most kinds asked for are absent from any one input: a filter over the whole frame for each
        # would cost a scan of every row per question
        missing = [k for k in missing if k in kinds_present(tl)]
    if missing:
        # one str object per distinct file, kind, rank… instead of one per row: a big input's ~100k rows
        # weigh ~15% less
        shared: dict[str, str] = timeline_memo(tl).setdefault("strings", {})
        for r in narrow_fields(frame.filter(pl.col("kind").is_in(missing))).iter_rows(named=True):
            for c in _REPEATED:
                v = r.get(c)
                if v is not None:
                    r[c] = shared.setdefault(v, v)
            by_kind[r["kind"]].append(r)
        for k in missing:  # stable: rows of one kind tied on (file, line) keep the frame's order
            by_kind[k].sort(key=_row_key)
    wanted = list(dict.fromkeys(kinds))
    if len(wanted) == 1:
        return list(by_kind[wanted[0]])
    out = [r for k in wanted for r in by_kind[k]]
    out.sort(key=_row_key)
    return out



def narrow_fields(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with its ``fields`` and ``figures`` structs cut to the members some row holds: a row dict
    then carries the handful its kind has, not every member of every typed kind (or None when no row holds
    one)."""
    if not frame.height:
        return frame
    cut = [_narrowed(frame, c) for c in ("fields", "figures") if c in frame.columns]
    return frame.with_columns(cut) if cut else frame


def _narrowed(frame: pl.DataFrame, name: str) -> pl.Expr:
    col = frame.get_column(name)
    if col.null_count() == frame.height:
        return pl.lit(None).alias(name)
    parts = [col.struct.field(f) for f in col.struct.fields]
    present = [p for p in parts if p.null_count() < frame.height]
    if not present:
        return pl.lit(None).alias(name)
    return pl.when(col.is_not_null()).then(pl.struct(present)).alias(name)  # a row without one keeps None


def to_number(value: Any) -> float | None:
    """A flag or arg value as a float; None for bools, None and text that is not a number."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        return None



def rank_of(row: Row) -> int | None:
    """The scheduler's TP rank, from the column or the printed label."""
    if row.get("tp_rank") is not None:
        return int(row["tp_rank"])
    m = re.search(r"TP(\d+)", row.get("rank") or "")
    return int(m.group(1)) if m else None



def row_words(row: Row) -> str:
    """Everything a failure row says: its line, the message a parser read from it and the exception's message
    (a traceback's last line may be the row's text, the message, or both), for a rule that searches the words."""
    a = attrs(row)
    return f"{row.get('text') or ''} {a.get('message') or ''} {a.get('exception_message') or ''}"



def rank_label(row: Row) -> str | None:
    return row.get("rank") or (f"TP{row['tp_rank']}" if row.get("tp_rank") is not None else None)



def before(a: Row, b: Row) -> bool | None:
    """Is ``a`` earlier than ``b``? Same file: by line; else by UTC stamp; None when unknowable."""
    if a.get("file") is not None and a.get("file") == b.get("file"):
        return (a.get("line") or 0) < (b.get("line") or 0)
    ta, tb = a.get("ts"), b.get("ts")
    if isinstance(ta, datetime) and isinstance(tb, datetime):
        return ta < tb
    return None


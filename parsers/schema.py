"""The event frame every parser returns, and the result wrapper with line coverage.

A parser is a pure function ``parse(text, path="", command=None) -> ParseResult``. It turns one
text (a whole file, or one segment of a pasted transcript) into rows of :data:`EVENT_SCHEMA`.
It never reads files, never knows about bundles, and never guesses a time zone:

* ``ts`` is filled only when the source itself carries an absolute instant with a zone
  (ISO stamps with an offset, journal JSON's ``__REALTIME_TIMESTAMP``).
* ``ts_local`` holds a naive wall-clock stamp exactly as printed (SGLang logs, ``dmesg -T``,
  syslog); the timeline assembly converts it with the host's UTC offset.
* ``uptime_s`` holds seconds since boot (``dmesg``'s ``[  123.456789]``); the assembly turns it
  into UTC when it knows the boot time.

``line`` is 1-based within the text handed to the parser; the caller adds the segment offset.
Quantities are canonical: bytes, seconds, ratios in 0..1, token counts. Every parsed field also
goes into ``attrs`` (a JSON object, sorted keys) under a name that states its unit
(``k_size_bytes``, ``timeout_s``), so nothing a parser understood is lost.

>>> r = ParseResult.from_rows([{"line": 1, "kind": "x", "text": "hi", "attrs": {"b": 2, "a": 1}}],
...                           source="demo", path="f.txt", lines=1, recognized=1)
>>> r.events.select("file", "line", "source", "kind", "attrs").row(0)
('f.txt', 1, 'demo', 'x', '{"a": 1, "b": 2}')
>>> r.coverage()["unrecognized"]
0
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import polars as pl

#: The typed figures of batch lines: a row of a kind in :data:`FIELDS_OF` keeps those of its parsed fields
#: in the ``fields`` struct column instead of ``attrs`` — each under the same name and with the same value,
#: moved only when the value has the field's type (an int where a float belongs stays in ``attrs``, so
#: ``attrs`` ∪ ``fields`` is exactly what the parser read). The members are fields of reference/sglang_formats.md
#: §6 (snake case, as parsers.sglang._snake names them) that detectors read; docs/timeline.md lists them.
#: Every member is a column that each row of every chunk carries, null or not, so the rest stays in attrs
#: (measured with bench/chunk.py and bench/run.py): a batch line's other fields (hybrid models' full/swa/mamba
#: usage, PD counters, pending tokens, accept length, occupancy, MFU); the access line's strings (a string
#: member costs 16 bytes in every row of the frame: +80 MB peak RSS on the 256 MB set, for ~5 % of its rows).
_BATCH_INT = ("iteration", "new_seq", "new_token", "cached_token", "token", "running_req", "queue_req")
_BATCH_FLOAT = ("token_usage", "cache_hit_rate", "gen_throughput", "input_throughput")
_BATCH_BOOL = ("cuda_graph",)
FIELDS: dict[str, pl.DataType] = {
    **{k: pl.Int64 for k in _BATCH_INT}, **{k: pl.Float64 for k in _BATCH_FLOAT},
    **{k: pl.Boolean for k in _BATCH_BOOL},
}
_BATCH = (*_BATCH_INT, *_BATCH_FLOAT, *_BATCH_BOOL)
#: Kind → the fields its rows keep typed.
FIELDS_OF: dict[str, frozenset[str]] = {
    "decode_batch": frozenset(_BATCH), "prefill_batch": frozenset(_BATCH),
}

#: The typed figures of the few rows a log holds of each kind that detectors weigh — the CUDA OOMs, the KV
#: pool's sizing and refusals, the CUDA-graph capture, the weights' load — in the ``figures`` struct column,
#: by the same rule as ``fields`` (same names and values, moved only when of the member's type; attrs ∪
#: figures is what the parser read). A column of its own, not members of ``fields``: a batch row's
#: ``fields`` is never null, so a member there is a null in every batch row of every chunk (measured with
#: bench/chunk.py's chunks of the 256 MB set: these 19 members in ``fields`` cost +5 ms of Parquet encoding,
#: +3 ms of sampling and +79 KB, 4 %, an 8 MiB chunk), while ``figures`` is null in every row of a chunk of
#: batch lines (polars holds it as one null, :data:`NO_FIGURES`): ~2 ms of Parquet and ~5 KB, 0.3 %, a
#: chunk; the analysis' sample holds it as nulls (~11.5 MB for the 256 MB set's 87k kept rows). The members are the attrs that detectors read out of those rows (parsers/sglang.py,
#: parsers/vllm.py, parsers/failures.py name them); the rest (messages, frames, the processes' list, flags,
#: the pool's K/V sizes) stays in attrs. docs/timeline.md lists them.
_OOM_INT = ("allocated_by_pytorch_bytes", "private_pools_bytes", "reserved_unallocated_bytes")
_KV_INT = ("available_tokens", "chunked_prefill_size", "context_len", "max_running_requests", "max_model_len",
           "gpu_blocks", "cpu_blocks", "available_kv_bytes", "needed_kv_bytes", "kv_cache_tokens",
           "estimated_max_model_len")
_LOAD_INT = ("weights_bytes", "graph_bytes", "bs")
_PHASE = ("during", "phase")
FIGURES: dict[str, pl.DataType] = {
    **{k: pl.Int64 for k in (*_OOM_INT, *_KV_INT, *_LOAD_INT)}, **{k: pl.Utf8 for k in _PHASE},
}
_OOM = frozenset((*_OOM_INT, "during"))
#: Kind → the figures its rows keep typed.
FIGURES_OF: dict[str, frozenset[str]] = {
    "cuda_oom": _OOM, "cuda_error_oom": _OOM, "scheduler_exception": _OOM | {"phase"},
    "kv_exhausted": frozenset(("available_tokens", "phase")),
    "kv_sizing": frozenset(("chunked_prefill_size", "context_len", "max_running_requests", "max_model_len",
                            "gpu_blocks", "cpu_blocks")),
    "kv_memory": frozenset(("available_kv_bytes",)),
    "kv_cache_too_small": frozenset(("available_kv_bytes", "needed_kv_bytes", "kv_cache_tokens", "max_model_len",
                                     "estimated_max_model_len")),
    "cuda_graph_begin": frozenset(("bs",)), "capture_progress": frozenset(("bs",)),
    "cuda_graph_end": frozenset(("graph_bytes",)), "weight_load_end": frozenset(("weights_bytes",)),
}
#: Kind → (the struct column its typed members go to, those members).
TYPED_OF: dict[str, tuple[str, frozenset[str]]] = {
    **{k: ("fields", v) for k, v in FIELDS_OF.items()}, **{k: ("figures", v) for k, v in FIGURES_OF.items()},
}
assert not FIELDS.keys() & FIGURES.keys(), "a member belongs to one struct column"
_PY_TYPE = {pl.Int64: int, pl.Float64: float, pl.Boolean: bool, pl.Utf8: str}
_FIELD_TYPE = {k: _PY_TYPE[v] for k, v in (*FIELDS.items(), *FIGURES.items())}
_INT64 = 1 << 63

#: Column → dtype of the event frame. Order is the column order of timeline.parquet.
EVENT_SCHEMA: dict[str, pl.DataType] = {
    "ts": pl.Datetime("us", "UTC"),  # absolute instant (UTC); filled by parser only if the source has a zone
    "ts_local": pl.Datetime("us"),  # naive wall clock as printed, zone unknown to the parser
    "uptime_s": pl.Float64,  # kernel monotonic seconds since boot
    "ts_basis": pl.Utf8,  # how ts was obtained: source-utc | local+offset | local-assumed | uptime+boot | none
    "host": pl.Utf8,
    "file": pl.Utf8,  # path inside the bundle / input
    "line": pl.Int64,  # 1-based first line of the record
    "line_end": pl.Int64,  # last line of a multi-line record (== line for one-liners)
    "source": pl.Utf8,  # parser format name: sglang, free, meminfo, nvidia_smi_csv, kernel, ps, ...
    "kind": pl.Utf8,  # event kind, see docs/timeline.md
    "run": pl.Int32,  # server run inside one SGLang log (0-based, bumps at each server_args dump)
    "snapshot": pl.Int32,  # ordinal of the snapshot/segment this row came from (assembly)
    "rank": pl.Utf8,  # rank label as printed: "TP3", "DP0 TP3 EP3", "PP1 TP3"
    "tp_rank": pl.Int32,
    "dp_rank": pl.Int32,
    "pp_rank": pl.Int32,
    "ep_rank": pl.Int32,
    "gpu": pl.Int32,  # GPU index (nvidia-smi index, or the "GPU k" of a CUDA OOM)
    "pid": pl.Int64,
    "comm": pl.Utf8,  # process name
    "bytes": pl.Int64,  # the size the event is about (requested, allocated, used by a process)
    "avail_bytes": pl.Int64,  # free/available memory reported at that moment (GPU or host)
    "used_bytes": pl.Int64,
    "free_bytes": pl.Int64,
    "total_bytes": pl.Int64,
    "tokens": pl.Int64,
    "ratio": pl.Float64,  # token usage, mem fraction, utilisation as 0..1
    "seconds": pl.Float64,  # elapsed / timeout / duration
    "count": pl.Int64,  # requests, retracted requests, repeats
    "code": pl.Int64,  # exit code, Xid number, HTTP status, signal
    "text": pl.Utf8,  # the raw record (multi-line records joined with "\n")
    "attrs": pl.Utf8,  # JSON object of every parsed field not in ``fields``/``figures``, sorted keys
    "fields": pl.Struct(FIELDS),  # the batch lines' figures, typed (FIELDS_OF); null for other rows
    "figures": pl.Struct(FIGURES),  # the OOM, KV-pool, capture and load rows' figures, typed (FIGURES_OF)
    # what a log envelope around the record knew (parsers/envelopes.py); null for a bare log
    "envelope": pl.Utf8,  # docker-json, timestamp, journal-short, compose, ... ("+" joins stacked ones)
    "env_ts": pl.Datetime("us", "UTC"),  # the envelope's own stamp, in UTC
    "unit": pl.Utf8,  # systemd unit or syslog tag
    "container": pl.Utf8,  # docker/compose/kubernetes container or service, Ray actor
    "pod": pl.Utf8,  # kubernetes pod
    "stream": pl.Utf8,  # stdout | stderr
    "task": pl.Int32,  # Slurm task (srun --label)
}

COLUMNS: tuple[str, ...] = tuple(EVENT_SCHEMA)

#: How many unrecognised lines a parser keeps as examples (the count is always exact).
MAX_UNRECOGNIZED_EXAMPLES = 20


_EMPTY: pl.DataFrame | None = None


def empty_frame() -> pl.DataFrame:
    """A frame with the event schema and no rows (a clone of one made once: building the schema's 38
    columns costs ~0.6 ms, and every small file asks for several)."""
    global _EMPTY
    if _EMPTY is None:
        _EMPTY = pl.DataFrame(schema=EVENT_SCHEMA)
    return _EMPTY.clone()


#: One encoder for every row: ``json.dumps`` with keyword arguments builds a new encoder per call.
_ENCODER = json.JSONEncoder(sort_keys=True, default=str, ensure_ascii=False)


def _dump_attrs(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return _ENCODER.encode(value)


def split_fields(kind: str | None, attrs: Any) -> tuple[dict[str, Any] | None, Any]:
    """(the typed members, the rest of attrs) of one row: the members of ``kind`` (FIELDS_OF, FIGURES_OF;
    :data:`TYPED_OF` names their column) whose value has the member's type move out of attrs; the rest stays
    (None when nothing is left). attrs given as JSON text or None stays as it is.

    >>> split_fields("decode_batch", {"queue_req": 3, "token_usage": 0.5, "gen_throughput": 12, "odd": "x"})
    ({'queue_req': 3, 'token_usage': 0.5}, {'gen_throughput': 12, 'odd': 'x'})
    >>> split_fields("cuda_graph_end", {"graph_bytes": 1 << 30, "capture_name": "decode"})
    ({'graph_bytes': 1073741824}, {'capture_name': 'decode'})
    >>> split_fields("log", {"queue_req": 3})
    (None, {'queue_req': 3})
    """
    typed = TYPED_OF.get(kind) if kind else None
    if not typed or not isinstance(attrs, dict):
        return None, attrs
    wanted = typed[1]
    moved: dict[str, Any] | None = None
    rest: dict[str, Any] = {}
    for k, v in attrs.items():
        if k in wanted and type(v) is _FIELD_TYPE[k] and (type(v) is not int or -_INT64 <= v < _INT64):
            if moved is None:
                moved = {}
            moved[k] = v
        else:
            rest[k] = v
    if moved is None:
        return None, attrs
    return moved, (rest or None)


def joined_attrs(attrs: Any, fields: dict[str, Any] | None) -> dict[str, Any]:
    """Every parsed field of a row: its ``attrs`` (JSON text or dict) with its typed members (its ``fields``
    or its ``figures``: :func:`row_attrs` takes the row) put back, in sorted key order as ``attrs`` is
    written — the dict the parser built.

    >>> joined_attrs('{"odd": "x"}', {"queue_req": 3, "token": None})
    {'odd': 'x', 'queue_req': 3}
    """
    if isinstance(attrs, str) and attrs:
        try:
            out = json.loads(attrs)
        except ValueError:
            out = {}
    else:
        out = dict(attrs) if isinstance(attrs, dict) else {}
    if not isinstance(out, dict):
        out = {}
    if fields:
        typed = {k: v for k, v in fields.items() if v is not None}
        if typed:
            out.update(typed)
            out = dict(sorted(out.items()))
    return out


def row_attrs(row: dict[str, Any]) -> dict[str, Any]:
    """:func:`joined_attrs` of a row dict (a frame's row, named): attrs with whichever struct holds its members.

    >>> row_attrs({"attrs": '{"capture_name": "decode"}', "fields": None, "figures": {"graph_bytes": 5}})
    {'capture_name': 'decode', 'graph_bytes': 5}
    """
    return joined_attrs(row.get("attrs"), typed_members(row))


def typed_members(row: dict[str, Any]) -> dict[str, Any] | None:
    """A row dict's typed members: its ``fields`` and its ``figures`` (a row has one of them; a frame cut to
    some members may hand the other as a dict of nulls)."""
    fields, figures = row.get("fields"), row.get("figures")
    if fields and figures:
        return {**fields, **{k: v for k, v in figures.items() if v is not None}}
    return fields or figures


def rows_to_frame(rows: list[dict[str, Any]], *, source: str, path: str) -> pl.DataFrame:
    """Build an event frame from row dicts; missing columns are null, unknown keys are an error.

    ``attrs`` may be a dict (serialised here) or an already-serialised JSON string.
    ``line_end`` defaults to ``line``.
    """
    if not rows:
        return empty_frame()
    # column by column: one C-level pass per column instead of a Python loop per row per column
    keys = set(itertools.chain.from_iterable(rows))
    unknown = keys - EVENT_SCHEMA.keys()
    if unknown:
        raise KeyError(f"unknown event columns: {sorted(unknown)}")
    n = len(rows)
    cols: dict[str, Any] = {}
    typed = "attrs" in keys and any(r.get("kind") in TYPED_OF for r in rows)
    split = [split_fields(r.get("kind"), r.get("attrs")) for r in rows] if typed else []
    figures_set = False
    for c in COLUMNS:
        if c == "attrs":
            if c in keys and typed:
                vals: list[Any] = [_dump_attrs(a) for _f, a in split]
            else:
                vals = [_dump_attrs(r.get("attrs")) for r in rows] if c in keys else [None] * n
        elif c in ("fields", "figures"):
            if typed:
                vals = [_typed(c, r, f) for (f, _a), r in zip(split, rows, strict=True)]
            elif c in keys:
                vals = [r.get(c) for r in rows]
            else:
                cols[c] = pl.Series(c, [None] * n, dtype=EVENT_SCHEMA[c])
                continue
            if c == "figures":
                figures_set = any(v is not None for v in vals)
        elif c == "source":
            vals = [source if r.get(c) is None else r[c] for r in rows] if c in keys else [source] * n
        elif c == "file":
            vals = [path if r.get(c) is None else r[c] for r in rows] if c in keys else [path] * n
        elif c == "line_end":
            vals = [r.get("line") if r.get(c) is None else r[c] for r in rows] if c in keys else \
                [r.get("line") for r in rows]
        elif c in keys:
            vals = [r.get(c) for r in rows]
        else:
            cols[c] = pl.Series(c, [None] * n, dtype=EVENT_SCHEMA[c])
            continue
        cols[c] = vals
    frame = pl.DataFrame(cols, schema=EVENT_SCHEMA, strict=False)
    return frame if figures_set else frame.with_columns(NO_FIGURES)


#: The ``figures`` column of rows that have none, as one null (polars keeps a constant column as one value)
#: instead of a struct of nulls that every filter, gather and concat of a chunk's rows walks member by member.
NO_FIGURES = pl.lit(None, dtype=EVENT_SCHEMA["figures"]).alias("figures")


def _typed(column: str, row: dict[str, Any], moved: dict[str, Any] | None) -> dict[str, Any] | None:
    """The value of struct column ``column`` for a row whose members ``moved`` out of its attrs."""
    given = row.get(column)
    if moved is None or TYPED_OF[row["kind"]][0] != column:
        return given
    return {**given, **moved} if given else moved


@dataclass
class ParseResult:
    """What a parser returns: the events plus an exact account of the lines it saw."""

    events: pl.DataFrame
    source: str
    path: str = ""
    lines: int = 0
    recognized: int = 0
    unrecognized: int = 0
    #: up to MAX_UNRECOGNIZED_EXAMPLES (line, text) pairs
    unrecognized_examples: list[tuple[int, str]] = field(default_factory=list)
    #: notes for the report ("kernel stamps are relative: no boot time in input")
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_rows(
        cls,
        rows: list[dict[str, Any]],
        *,
        source: str,
        path: str = "",
        lines: int = 0,
        recognized: int = 0,
        unrecognized_examples: list[tuple[int, str]] | None = None,
        unrecognized: int | None = None,
        notes: list[str] | None = None,
    ) -> ParseResult:
        examples = list(unrecognized_examples or [])
        n_unrec = unrecognized if unrecognized is not None else max(lines - recognized, 0)
        return cls(
            events=rows_to_frame(rows, source=source, path=path),
            source=source,
            path=path,
            lines=lines,
            recognized=recognized,
            unrecognized=n_unrec,
            unrecognized_examples=examples[:MAX_UNRECOGNIZED_EXAMPLES],
            notes=list(notes or []),
        )

    def coverage(self) -> dict[str, Any]:
        return {
            "file": self.path,
            "format": self.source,
            "lines": self.lines,
            "recognized": self.recognized,
            "unrecognized": self.unrecognized,
        }


class NotThisFormat(ValueError):
    """Raised by a parser given text that is not its format at all.

    "Nothing here" (a valid but empty output, e.g. ``No running processes found``) is *not*
    this error: it is a normal result, usually with an explicit event saying so.
    """

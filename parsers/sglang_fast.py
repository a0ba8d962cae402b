"""Vectorised SGLang parsing for the bulk line kinds; identical output to :func:`parsers.sglang.parse`.

A long-running server's log is >99% three one-line records: ``Decode batch``, ``Prefill batch`` and the
uvicorn access line. Those are read by the compiled scanner (``parsers.bulkscan``) where it is built,
else here with polars (Rust regex, column-wise string ops), both under the same rule; every other
line (tracebacks, start-up, anything odd) goes to the Python scanner of ``parsers.sglang``, which is fed
only those lines, in order, with their own line numbers (``scan_lines``). A bulk line closes the open
record and sets the rank's phase exactly as it would have there (``skip_records``). Rows are merged by
line number. A line is taken by the fast path only when it is provably read the same way: printable
ASCII, one segment (no ``\\r``, no glued record), a full stamp that parses, no odd label, and every
batch value in a class whose JSON is known (count, plain decimal, percent, True/False, word); anything
else is left to the scanner, so the fast path can only be slower, never different.

:class:`Stream` reads a text chunk by chunk (each chunk ending at a line end) with the scanner state,
line numbers and the ``run`` counter carried over; rows a later chunk may still change (an open
traceback, a ``rank_dead`` waiting for its exit code) are held back until they are final.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl

from parsers import bulkscan
from parsers import sglang as S
from parsers.schema import (
    COLUMNS,
    EVENT_SCHEMA,
    FIELDS,
    FIELDS_OF,
    MAX_UNRECOGNIZED_EXAMPLES,
    NotThisFormat,
    ParseResult,
    empty_frame,
    rows_to_frame,
)

_STAMP = r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}"
_LABELS = r"(?: [A-Za-z][0-9A-Za-z_.]*){0,8}"
#: The prefix as parsers.sglang._PREFIX reads it (stamp alternative), for ASCII lines.
_PREFIX_RX = rf"^\[({_STAMP})((?:[.,][0-9]{{1,6}})?)({_LABELS})\] "
_BATCH_RX = _PREFIX_RX + "(?:Decode batch|Prefill batch)"
#: Access line with exactly two quotes, so the path/client split is the one _ACCESS finds.
_ACCESS_RX = (_PREFIX_RX + r'(INFO|WARNING|ERROR|DEBUG|CRITICAL|TRACE): +([^ "\\]+) - "([A-Z]+) ([^ "\\]*)'
              r'(?: [^"]*)?" ([0-9]{3})[^"]*$')
_RX_META = set("\\.+*?()|[]{}^$#&-~")
_MAX_TEMPLATES = 48
_MAX_LINE = 2000
_PRINTABLE = bytes(range(0x20, 0x7F)) + b"\n\r"


def _rx_escape(s: str) -> str:
    return "".join("\\" + c if c in _RX_META else c for c in s)


@dataclass
class _Template:
    kind: str
    regex: str  # the whole line, anchored; stamp digits, iteration digits and values ([^,]*) vary
    stamp_len: int  # stamp incl. fraction
    labels: str | None
    body_at: int  # offset of the fields text (without iteration digits; with them: before the digits)
    iter_tail: int  # with iteration digits: length of the literal after them up to the fields
    has_iter: bool
    fields: list[tuple[str, int]]  # (snake key, length of the literal before the value in its piece)
    pieces: list[int | None]  # field index of each comma-separated piece of the fields text, or None


def _template(line: str) -> _Template | None:
    """The literal skeleton of one batch line (values blanked), or None when the scanner must read it."""
    m = S._PREFIX.match(line)
    if not m or not m.group("stamp"):
        return None
    msg = line[m.end():]
    if msg.startswith("Decode batch"):
        kind, off = "decode_batch", 12
    elif msg.startswith("Prefill batch"):
        kind, off = "prefill_batch", 13
    else:
        return None
    rest = msg[off:]
    h = S._BATCH_HEAD.match(rest)
    if h is None or rest.startswith("(mixed") or h.group("mixed") is not None:
        return None
    stamp = m.group("stamp")
    labels = (m.group("labels") or "").strip() or None
    rx = [r"^\[", _STAMP]
    frac = stamp[19:]
    if frac:
        rx.append(_rx_escape(frac[0]) + f"[0-9]{{{len(frac) - 1}}}")
    rx.append(_rx_escape(line[1 + len(stamp):m.end()] + msg[:off]))
    has_iter = h.group("iter") is not None
    fields_start = h.end()
    if has_iter:
        rx.append(_rx_escape(rest[:h.start("iter")]) + "[0-9]{1,18}" + _rx_escape(rest[h.end("iter"):fields_start]))
        body_at = m.end() + off + h.start("iter")
        iter_tail = fields_start - h.end("iter")
    else:
        rx.append(_rx_escape(rest[:fields_start]))
        body_at = m.end() + off + fields_start
        iter_tail = 0
    body = rest[fields_start:]
    keys: list[tuple[str, int]] = []
    pieces: list[int | None] = []
    bpos = 0
    for fm in S._BATCH_FIELD.finditer(body):
        lit = body[bpos:fm.start(2)]
        rx.append(_rx_escape(lit) + "[^,]*")
        if bpos:  # after a value the literal starts with the comma that ended it
            if not lit.startswith(","):
                return None
            lit = lit[1:]
        parts = lit.split(",")
        pieces.extend([None] * (len(parts) - 1))  # pieces without a field
        keys.append((S._snake(fm.group(1)), len(parts[-1])))
        pieces.append(len(keys) - 1)
        bpos = fm.end(2)
    rx.append(_rx_escape(body[bpos:]) + "$")
    return _Template(kind=kind, regex="".join(rx), stamp_len=len(stamp), labels=labels, body_at=body_at,
                     iter_tail=iter_tail, has_iter=has_iter, fields=keys, pieces=pieces)


# --------------------------------------------------------------------------------------------
# Values: the JSON text and typed value of parsers.sglang._value, column-wise


def _canon_decimal(sign: pl.Expr, ip: pl.Expr, fp: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """repr(float) of sign+ip.fp when it has ≤15 digits and is 0 or ≥1e-4; (json, ok)."""
    ic = ip.str.strip_chars_start("0")
    fc = fp.str.strip_chars_end("0")
    ok = (ic.str.len_bytes() + fc.str.len_bytes() <= 15) & ~((ic == "") & fc.str.starts_with("0000"))
    js = pl.concat_str([sign, pl.when(ic == "").then(pl.lit("0")).otherwise(ic), pl.lit("."),
                        pl.when(fc == "").then(pl.lit("0")).otherwise(fc)])
    return js, ok


def _value_exprs(v: pl.Expr) -> tuple[pl.Expr, pl.Expr, pl.Expr, pl.Expr]:
    """(json text, ok, int value or null, float value or null, is_bool) of one raw value column."""
    s = v.str.strip_chars(" ")
    is_int = s.str.contains(r"^-?[0-9]{1,15}$")
    as_int = pl.when(is_int).then(s.cast(pl.Int64, strict=False))
    dec = s.str.extract_groups(r"^(-?)([0-9]+)\.([0-9]+)$")
    is_dec = dec.struct.field("1").is_not_null()
    dec_js, dec_ok = _canon_decimal(dec.struct.field("1"), dec.struct.field("2"), dec.struct.field("3"))
    pct = s.str.extract_groups(r"^([0-9]{1,6})(?:\.([0-9]+))?%$")
    is_pct = pct.struct.field("1").is_not_null()
    pip = pct.struct.field("1").str.zfill(3)
    pfp = pct.struct.field("2").fill_null("")
    p_int = pip.str.head(-2)
    p_frac = pl.concat_str([pip.str.tail(2), pfp])
    pct_js, pct_ok = _canon_decimal(pl.lit(""), p_int, p_frac)
    pct_ok = pct_ok & (pfp.str.strip_chars_end("0").str.len_bytes() <= 4) & \
        ((p_int.str.strip_chars_start("0") != "") | (p_frac.str.strip_chars_end("0").str.len_bytes() <= 6))
    is_bool = (s == "True") | (s == "False")
    is_word = (s == "") | s.str.contains(r'^[A-Za-z][^"\\]*$')
    js = (pl.when(is_int).then(as_int.cast(pl.Utf8))
          .when(is_dec).then(dec_js)
          .when(is_pct).then(pct_js)
          .when(s == "True").then(pl.lit("true"))
          .when(s == "False").then(pl.lit("false"))
          .otherwise(pl.concat_str([pl.lit('"'), s, pl.lit('"')])))
    ok = (pl.when(is_int).then(pl.lit(True)).when(is_dec).then(dec_ok).when(is_pct).then(pct_ok)
          .when(is_bool).then(pl.lit(True)).otherwise(is_word))
    num = (pl.when(is_int).then(as_int.cast(pl.Float64))
           .when(is_dec).then(s.cast(pl.Float64, strict=False))
           .when(is_pct).then(pct_js.cast(pl.Float64, strict=False)))
    return js, ok, as_int, num, is_bool


_INT_CANON = r"^(?:0|[1-9][0-9]{0,14})$"
_DEC_PLAIN = r"^(?:0|[1-9][0-9]{0,14})\.[0-9]+$"


def _column_values(col: pl.Series, name: str) -> list[pl.Expr]:
    """The j_/ok_/i_/n_/b_ columns of one value column; whole-column checks pick a cheap form for the
    usual cases (all counts, all plain decimals, all booleans), else the per-row form."""
    c = pl.col(name)
    null_i, null_f = pl.lit(None, dtype=pl.Int64), pl.lit(None, dtype=pl.Float64)
    if col.null_count() == 0 and not (col.str.starts_with(" ") | col.str.ends_with(" ")).any():
        if col.str.contains(_INT_CANON).all():
            i = c.cast(pl.Int64)
            return [c.alias(f"j_{name}"), pl.lit(True).alias(f"ok_{name}"), i.alias(f"i_{name}"),
                    i.cast(pl.Float64).alias(f"n_{name}"), pl.lit(False).alias(f"b_{name}")]
        if col.str.contains(_DEC_PLAIN).all() and (col.str.len_bytes() <= 16).all() \
                and not col.str.starts_with("0.0000").any():
            z = c.str.strip_chars_end("0")
            js = pl.when(z.str.ends_with(".")).then(pl.concat_str([z, pl.lit("0")])).otherwise(z)
            return [js.alias(f"j_{name}"), pl.lit(True).alias(f"ok_{name}"), null_i.alias(f"i_{name}"),
                    c.cast(pl.Float64).alias(f"n_{name}"), pl.lit(False).alias(f"b_{name}")]
        if col.is_in(["True", "False"]).all():
            return [pl.when(c == "True").then(pl.lit("true")).otherwise(pl.lit("false")).alias(f"j_{name}"),
                    pl.lit(True).alias(f"ok_{name}"), null_i.alias(f"i_{name}"), null_f.alias(f"n_{name}"),
                    pl.lit(True).alias(f"b_{name}")]
    js, ok, as_int, num, is_bool = _value_exprs(c)
    return [js.alias(f"j_{name}"), ok.alias(f"ok_{name}"), as_int.alias(f"i_{name}"), num.alias(f"n_{name}"),
            is_bool.alias(f"b_{name}")]


def _batch_frame(lines: pl.DataFrame, t: _Template) -> pl.DataFrame:
    """Rows (+ column ``ok``) of the lines that match template ``t``."""
    exprs: list[pl.Expr] = []
    keyed: dict[str, str] = {}  # snake key -> column of its JSON text; the last one wins, as in a dict
    cols: dict[str, pl.Expr] = {}
    if t.has_iter:
        after = pl.col("l").str.slice(t.body_at)
        digits = after.str.extract(r"^([0-9]+)", 1)
        lines = lines.with_columns(digits.alias("_it"))
        body = pl.col("l").str.slice(pl.col("_it").str.len_bytes() + (t.body_at + t.iter_tail))
        exprs.append(pl.col("_it").cast(pl.Int64).cast(pl.Utf8).alias("v_iteration"))
        keyed["iteration"] = "v_iteration"
    else:
        body = pl.col("l").str.slice(t.body_at)
    if t.fields:
        frame = lines.with_columns(body.str.split(",").alias("_sp"))
        for pi, fi in enumerate(t.pieces):
            if fi is None:
                continue
            key, lit_len = t.fields[fi]
            name = f"f{fi}"
            cols[name] = pl.col("_sp").list.get(pi, null_on_oob=True).str.slice(lit_len)
            keyed[key] = name
        frame = frame.with_columns(**cols).drop("_sp")
    else:
        frame = lines
    for name in list(cols):
        exprs += _column_values(frame.get_column(name), name)
    frame = frame.with_columns(exprs) if exprs else frame
    oks = [pl.col(f"ok_{n}") for n in cols]
    attrs, fields = _typed_split(t.kind, keyed)

    def typed(key: str, kind: str) -> tuple[pl.Expr, pl.Expr]:
        """(value, ok) for a typed column from attrs[key]: bools in int columns are left to the scanner."""
        name = keyed.get(key)
        if name is None:
            return pl.lit(None, dtype=pl.Int64 if kind != "f" else pl.Float64), pl.lit(True)
        if name == "v_iteration":
            return pl.col(name).cast(pl.Int64), pl.lit(True)
        if kind == "f":
            return pl.when(~pl.col(f"b_{name}")).then(pl.col(f"n_{name}")), pl.lit(True)
        return pl.col(f"i_{name}"), ~pl.col(f"b_{name}")

    tok_key = "new_token" if t.kind == "prefill_batch" else "token"
    if tok_key not in keyed:
        tok_key = "full_token"
    ratio_key = "token_usage" if "token_usage" in keyed else "full_token_usage"
    tokens, ok_t = typed(tok_key, "i")
    ratio, _ = typed(ratio_key, "f")
    count, ok_c = typed("running_req", "i")
    ok = pl.all_horizontal([*oks, ok_t, ok_c]) if oks else ok_t & ok_c
    return frame.select("i", "l", "stamp", "labels",
                        pl.lit(t.kind).alias("kind"), tokens.alias("tokens"), ratio.alias("ratio"),
                        count.alias("count"), pl.lit(None, dtype=pl.Int64).alias("code"),
                        attrs.alias("attrs"), fields.alias("fields"), ok.alias("ok"))


def _typed_split(kind: str, keyed: dict[str, str]) -> tuple[pl.Expr, pl.Expr]:
    """(attrs, fields) of a batch template's rows: each key whose value has its typed field's type
    (parsers.schema.FIELDS) goes to ``fields``, row by row; the others make the sorted-key JSON, null when
    none is left — what parsers.schema.rows_to_frame makes of the scanner's rows."""
    wanted = FIELDS_OF[kind]
    typed: dict[str, pl.Expr] = {}
    moved: list[pl.Expr] = []
    pieces: list[pl.Expr] = []
    for key in sorted(keyed):
        name = keyed[key]
        js = pl.col(name) if name == "v_iteration" else pl.col(f"j_{name}")
        dt = FIELDS.get(key) if key in wanted else None
        if name == "v_iteration":
            go = pl.lit(dt == pl.Int64)
            value = pl.col(name).cast(pl.Int64)
        elif dt == pl.Int64:
            go, value = pl.col(f"i_{name}").is_not_null(), pl.col(f"i_{name}")
        elif dt == pl.Float64:
            go = pl.col(f"i_{name}").is_null() & pl.col(f"n_{name}").is_not_null()
            value = pl.col(f"n_{name}")
        elif dt == pl.Boolean:
            go, value = pl.col(f"b_{name}"), pl.col(f"j_{name}") == "true"
        else:
            pieces.append(pl.concat_str([pl.lit(f'"{key}": '), js]))
            continue
        typed[key] = pl.when(go).then(value)
        moved.append(go)
        pieces.append(pl.when(~go).then(pl.concat_str([pl.lit(f'"{key}": '), js])))
    body = pl.concat_str(pieces, separator=", ", ignore_nulls=True) if pieces else pl.lit(None, dtype=pl.Utf8)
    attrs = pl.when(body.is_not_null() & (body != "")).then(pl.concat_str([pl.lit("{"), body, pl.lit("}")]))
    return attrs, _fields_struct(typed, pl.any_horizontal(moved) if moved else pl.lit(False))


def _fields_struct(typed: dict[str, pl.Expr], any_set: pl.Expr) -> pl.Expr:
    """The ``fields`` struct from the given field values (others null); null where ``any_set`` is false."""
    parts = [typed[k].cast(dt).alias(k) if k in typed else pl.lit(None, dtype=dt).alias(k) for k, dt in FIELDS.items()]
    return pl.when(any_set).then(pl.struct(parts))


def _access_frame(lines: pl.DataFrame) -> pl.DataFrame:
    g = pl.col("l").str.extract_groups(_ACCESS_RX)
    f = lines.with_columns(g.alias("g")).filter(pl.col("g").struct.field("1").is_not_null())
    gf = pl.col("g").struct.field
    attrs = pl.concat_str([pl.lit('{"client": "'), gf("5"), pl.lit('", "level": "'), gf("4"),
                           pl.lit('", "method": "'), gf("6"), pl.lit('", "path": "'), gf("7"), pl.lit('"}')])
    return f.select("i", "l", pl.concat_str([gf("1"), gf("2")]).alias("stamp"),
                    pl.when(gf("3") != "").then(gf("3").str.strip_chars(" ")).alias("labels"), pl.lit("http_access").alias("kind"),
                    pl.lit(None, dtype=pl.Int64).alias("tokens"), pl.lit(None, dtype=pl.Float64).alias("ratio"),
                    pl.lit(None, dtype=pl.Int64).alias("count"), gf("8").cast(pl.Int64).alias("code"),
                    attrs.alias("attrs"), pl.lit(None, dtype=EVENT_SCHEMA["fields"]).alias("fields"),
                    pl.lit(True).alias("ok"))


_FAST_SCHEMA = {"i": pl.UInt32, "l": pl.Utf8, "stamp": pl.Utf8, "labels": pl.Utf8, "kind": pl.Utf8,
                "tokens": pl.Int64, "ratio": pl.Float64, "count": pl.Int64, "code": pl.Int64,
                "attrs": pl.Utf8, "fields": EVENT_SCHEMA["fields"], "ok": pl.Boolean}


def _bulk(lines: pl.DataFrame, clean: bool) -> pl.DataFrame:
    """The bulk rows of a chunk's lines (columns ``i`` … ``attrs``), all verified."""
    cand = lines.filter(pl.col("l").str.contains(_BATCH_RX))
    acc = lines.filter(pl.col("l").str.contains(_PREFIX_RX + "[A-Z]+: +[^ ]+ - \""))
    if not clean:
        good = ~pl.col("l").str.contains(r"[^\x20-\x7e]") & ~pl.col("l").str.slice(1).str.contains("[20", literal=True)
        cand, acc = cand.filter(good), acc.filter(good)
    long = pl.col("l").str.len_bytes() <= _MAX_LINE
    cand, acc = cand.filter(long), acc.filter(long)
    frames = [_access_frame(acc)] if acc.height else []
    remaining = cand
    n = 0
    while remaining.height and n < _MAX_TEMPLATES:
        n += 1
        sample = remaining.get_column("l")[0]
        t = _template(sample)
        if t is None:
            remaining = remaining.slice(1)
            continue
        hit = remaining.get_column("l").str.contains(t.regex)
        matched = remaining.filter(hit)
        if not matched.height:  # cannot happen; never loop on it
            remaining = remaining.slice(1)
            continue
        remaining = remaining.filter(~hit)
        matched = matched.with_columns(pl.col("l").str.slice(1, t.stamp_len).alias("stamp"),
                                       pl.lit(t.labels, dtype=pl.Utf8).alias("labels"))
        frames.append(_batch_frame(matched, t))
    if not frames:
        return pl.DataFrame(schema=_FAST_SCHEMA)
    out = pl.concat([f.cast(_FAST_SCHEMA) for f in frames], how="vertical")
    ts = pl.col("stamp").str.replace(",", ".", literal=True).str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S%.f",
                                                                          strict=False)
    # chrono takes a leap second and year 0, datetime.fromisoformat does not: those go to the scanner
    valid = (pl.col("stamp").str.slice(17, 2) < "60") & (pl.col("stamp").str.slice(0, 4) != "0000")
    out = out.with_columns(ts.alias("ts_local")).filter(pl.col("ok") & pl.col("ts_local").is_not_null() & valid)
    odd = [lab for lab in out.get_column("labels").unique().to_list()
           if lab and S._Scanner()._labels(lab)["_extra"]]  # ATTN_CP/MOE_DP labels add attrs: scanner
    if odd:
        out = out.filter(~pl.col("labels").is_in(odd))
    return out.sort("i")


# --------------------------------------------------------------------------------------------
# Lines of a chunk


def _lines(data: bytes | str) -> tuple[pl.DataFrame, bool]:
    """The physical lines of a chunk as a frame (``i`` 0-based, ``l``), and whether every line is
    printable ASCII without a glued stamp (so the per-line checks can be skipped)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if not raw:
        return pl.DataFrame({"i": [], "l": []}, schema={"i": pl.UInt32, "l": pl.Utf8}), True
    n_nl = raw.count(b"\n")
    n_lines = n_nl + (0 if raw.endswith(b"\n") else 1)
    ascii_ = raw.isascii()
    n_cr = raw.count(b"\r")
    lines = None
    csv = False
    if ascii_ and b"\x00" not in raw and n_cr == raw.count(b"\r\n"):
        # polars' CSV reader splits lines in parallel; \r\n loses its \r as the scanner would
        df = pl.read_csv(raw, has_header=False, separator="\x00", quote_char=None, new_columns=["l"],
                         schema={"l": pl.Utf8}, encoding="utf8", comment_prefix=None, eol_char="\n",
                         raise_if_empty=False)
        if df.height == n_lines:
            lines = df.get_column("l").fill_null("")
            csv = True
    if lines is None:
        text = raw.decode("utf-8", "replace") if not isinstance(data, str) else data
        parts = text.split("\n")
        if text.endswith("\n"):
            parts.pop()
        lines = pl.Series("l", parts, dtype=pl.Utf8)  # the scanner strips a \r itself; bulk lines have none
    # clean: every line printable ASCII (\r only in \r\n, which the reader dropped) and no "[20" but at a
    # line start, so no line needs the per-line checks
    clean = csv and raw.translate(None, _PRINTABLE) == b"" and \
        raw.count(b"[20") == raw.count(b"\n[20") + (1 if raw.startswith(b"[20") else 0)
    return pl.DataFrame({"l": lines}).with_row_index("i"), clean


# --------------------------------------------------------------------------------------------
# The compiled path


def _odd_labels(labels: list[str | None]) -> list[str]:
    """Labels with a rank part that has no column (ATTN_CP, MOE_DP): their rows add attrs, so the
    scanner reads them."""
    sc = S._Scanner()
    return [lab for lab in labels if lab and sc._labels(lab)["_extra"]]


def _native_chunk(data: bytes | bytearray | str) -> tuple[int, pl.DataFrame, pl.Series, list[str]]:
    """(lines in the chunk, bulk rows as _bulk gives them, line index and text of every other line)."""
    is_str = isinstance(data, str)
    raw = data.encode("utf-8", "surrogatepass") if is_str else data
    got = bulkscan.scan(raw)
    errors = "surrogatepass" if is_str else "replace"
    others = [raw[a:b].decode("utf-8", errors) for a, b in got.other_spans]
    idx = got.other_line
    bulk = pl.from_arrow(bulkscan.table(got.rows))
    assert isinstance(bulk, pl.DataFrame)
    bulk = bulk.select(pl.col("i").cast(pl.UInt32), "l", "labels",
                       pl.col("k").replace_strict(bulkscan.KIND_NAMES, return_dtype=pl.Utf8).alias("kind"),
                       "tokens", "ratio", "count", "code", "attrs", "fields",
                       pl.col("ts").cast(pl.Datetime("us")).alias("ts_local"))
    if bulk.height:
        odd = _odd_labels(bulk.get_column("labels").unique().to_list())
        if odd:
            is_odd = pl.col("labels").is_in(odd).fill_null(False)
            moved = bulk.filter(is_odd)
            bulk = bulk.filter(~is_odd)
            pairs = sorted([*zip(idx, others, strict=True),
                            *zip(moved.get_column("i").to_list(), moved.get_column("l").to_list(), strict=True)])
            idx = [i for i, _ in pairs]
            others = [t for _, t in pairs]
    return got.n_lines, bulk, pl.Series("i", idx, dtype=pl.UInt32), others


def _interleave(py: pl.DataFrame, fast: pl.DataFrame) -> pl.DataFrame:
    """The rows of both in line order. Both are in line order and never share a line; the scanner's rows
    are usually a few among thousands, so they are slotted in between slices instead of sorting all."""
    if py.height > 256:
        return pl.concat([py, fast], how="vertical").sort("line", maintain_order=True)
    pos = fast.get_column("line").search_sorted(py.get_column("line"), side="left").to_list()
    parts, prev, j = [], 0, 0
    while j < len(pos):
        k = j
        while k + 1 < len(pos) and pos[k + 1] == pos[j]:
            k += 1
        parts += [fast.slice(prev, pos[j] - prev), py.slice(j, k - j + 1)]
        prev, j = pos[j], k + 1
    parts.append(fast.slice(prev))
    # one chunk again: every later step (to_arrow above all) pays per chunk, and this costs ~0.5 ms
    return pl.concat(parts, how="vertical", rechunk=False).rechunk()


# --------------------------------------------------------------------------------------------
# The stream


class Stream:
    """Parse one SGLang text chunk by chunk; :meth:`feed` returns the rows that are final."""

    def __init__(self, path: str = "") -> None:
        self.path = path
        self.sc = S._Scanner()
        self.offset = 0  # lines before the current chunk
        self.pending = empty_frame()  # bulk rows held back with the scanner rows they follow
        self.lines = 0
        self.recognized = 0
        self.has_sglang = False
        self.n_rows = 0
        self.native = bulkscan.available()
        #: called with (lines before the chunk, 0-based index in the chunk, text) of every line that is not a
        #: batch or access line, when set: what the readers that look anywhere in a text need of a streamed one
        self.on_other_lines: Callable[[int, pl.Series, list[str]], None] | None = None
        #: lines of the last chunk the native scan handed to the Python parser (-1: none fed yet)
        self.last_other = -1

    def feed(self, data: bytes | bytearray | str) -> pl.DataFrame:
        """A chunk that ends at a line end (or the last chunk); the rows now final, in line order."""
        gc_was = gc.isenabled()
        gc.disable()
        try:
            return self._feed(data)
        finally:
            if gc_was:
                gc.enable()

    def _feed(self, data: bytes | bytearray | str) -> pl.DataFrame:
        if self.native:
            n, bulk, py_i, py_lines = _native_chunk(data)
            if not n:
                return empty_frame()
        else:
            lines, clean = _lines(data)
            n = lines.height
            if not n:
                return empty_frame()
            bulk = _bulk(lines, clean)
            py = lines.join(bulk.select("i"), on="i", how="anti").sort("i") if bulk.height else lines
            py_i = py.get_column("i")
            py_lines = py.get_column("l").to_list()
        sc = self.sc
        off = self.offset
        self.last_other = len(py_lines)
        if self.on_other_lines is not None:
            self.on_other_lines(off, py_i, py_lines)
        if bulk.height:
            self.has_sglang = True
        gaps: dict[int, list[Any]] = {}
        gap_run: dict[int, int] = {}
        if bulk.height:
            g = bulk.select(py_i.search_sorted(bulk.get_column("i"), side="left").alias("g"),
                            pl.col("labels"), pl.col("kind"))
            fwd = g.filter(pl.col("kind") != "http_access").select("g", "labels").unique(maintain_order=True)
            for gid in g.get_column("g").unique().to_list():
                gaps[gid] = []
            for gid, lab in fwd.iter_rows():
                gaps[gid].append(lab)

        def numbered():
            for j, (i, line) in enumerate(zip(py_i.to_list(), py_lines, strict=True)):
                ranks = gaps.get(j)
                if ranks is not None:
                    sc.skip_records(ranks)
                    gap_run[j] = sc.run
                yield i + 1 + off, line

        status_before = len(sc.status)
        S.scan_lines(sc, numbered())
        last = len(py_lines)
        if last in gaps:
            sc.skip_records(gaps[last])
            gap_run[last] = sc.run
        st = sc.status[status_before:]
        self.recognized += sum(1 for s in st if s in (S.RECORD, S.FOREIGN, S.BLANK)) + bulk.height
        self.has_sglang = self.has_sglang or any(s in (S.RECORD, S.RECORD_UNKNOWN) for s in st)
        del sc.status[:]
        self.lines += n
        self.offset += n
        fast = self._fast_frame(bulk, py_i, gap_run, off) if bulk.height else empty_frame()
        return self._flush(fast, final=False)

    def _fast_frame(self, bulk: pl.DataFrame, py_i: pl.Series, gap_run: dict[int, int], off: int) -> pl.DataFrame:
        # mappings instead of joins: they keep the row order, so nothing needs sorting afterwards
        runs = set(gap_run.values())
        if len(runs) == 1:
            run = pl.lit(runs.pop(), dtype=pl.Int32)
        else:
            gid = py_i.search_sorted(bulk.get_column("i"), side="left").cast(pl.UInt32)
            run = pl.lit(gid).replace_strict(list(gap_run), list(gap_run.values()), return_dtype=pl.Int32)
        labs = [lab for lab in bulk.get_column("labels").unique().to_list() if lab]
        parts = {lab: self.sc._labels(lab)["_cols"] for lab in labs}
        lab = pl.col("labels")

        def by_label(col: str, dtype: pl.DataType) -> pl.Expr:
            if not labs:
                return pl.lit(None, dtype=dtype)
            return lab.replace_strict(labs, [parts[x].get(col) for x in labs], default=None, return_dtype=dtype)

        line = (pl.col("i").cast(pl.Int64) + (1 + off))
        sel = {c: pl.lit(None, dtype=dt) for c, dt in EVENT_SCHEMA.items()}
        sel.update(ts_local=pl.col("ts_local"), file=pl.lit(self.path), line=line, line_end=line,
                   source=pl.lit(S.FORMAT), kind=pl.col("kind"), run=run, rank=lab,
                   tp_rank=by_label("tp_rank", pl.Int32), dp_rank=by_label("dp_rank", pl.Int32),
                   pp_rank=by_label("pp_rank", pl.Int32), ep_rank=by_label("ep_rank", pl.Int32),
                   tokens=pl.col("tokens"), ratio=pl.col("ratio"),
                   count=pl.col("count"), code=pl.col("code"), text=pl.col("l"), attrs=pl.col("attrs"),
                   fields=pl.col("fields"))
        return bulk.select([sel[c].cast(EVENT_SCHEMA[c]).alias(c) for c in COLUMNS])

    def _held_line(self) -> int | None:
        """The first line whose rows a later chunk may still change."""
        sc = self.sc
        cands = []
        if sc.rec is not None:
            cands.append(sc.rec.row["line"])
        prev = sc.prev_row
        if prev is not None and prev["kind"] == "rank_dead" and prev.get("code") is None:
            cands.append(prev["line"])
        return min(cands) if cands else None

    def _flush(self, fast: pl.DataFrame, final: bool) -> pl.DataFrame:
        held = None if final else self._held_line()
        rows = self.sc.rows
        if held is None:
            out_rows, self.sc.rows = rows, []
        else:
            k = 0
            while k < len(rows) and rows[k]["line"] < held:
                k += 1
            out_rows, self.sc.rows = rows[:k], rows[k:]
        for row in out_rows:
            a = row.get("attrs")
            if a is not None and not a:
                row["attrs"] = None
        fast = pl.concat([self.pending, fast], how="vertical") if self.pending.height else fast
        if held is not None:
            self.pending = fast.filter(pl.col("line") >= held)
            fast = fast.filter(pl.col("line") < held)
        else:
            self.pending = empty_frame()
        py = rows_to_frame(out_rows, source=S.FORMAT, path=self.path)
        if not py.height:
            out = fast
        elif not fast.height:
            out = py
        else:
            out = _interleave(py, fast)
        self.n_rows += out.height
        return out

    def finish(self) -> tuple[pl.DataFrame, ParseResult]:
        """The last rows and the parse account (its ``events`` empty). Raises NotThisFormat as parse does."""
        sc = self.sc
        sc._close()
        last = self._flush(empty_frame(), final=True)
        if self.lines and not self.has_sglang and not self.n_rows and self.recognized < self.lines:
            raise NotThisFormat("sglang: no SGLang record in the text")
        notes = []
        if sc.errors:
            notes.append(f"sglang: {sc.errors} line(s) could not be classified because of a parser error")
        res = ParseResult(events=empty_frame(), source=S.FORMAT, path=self.path, lines=self.lines,
                          recognized=self.recognized, unrecognized=self.lines - self.recognized,
                          unrecognized_examples=sc.unrecognized_examples[:MAX_UNRECOGNIZED_EXAMPLES], notes=notes)
        return last, res


def parse(text: str | bytes, path: str = "", command: str | None = None) -> ParseResult:
    """Same result as :func:`parsers.sglang.parse`, faster on logs made mostly of batch/access lines."""
    if not isinstance(text, (str, bytes)):
        raise NotThisFormat("sglang: not text")
    st = Stream(path)
    first = st.feed(text)
    last, res = st.finish()
    frames = [f for f in (first, last) if f.height]
    res.events = pl.concat(frames, how="vertical") if len(frames) > 1 else (frames[0] if frames else empty_frame())
    return res

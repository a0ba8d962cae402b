"""Envelopes in the timeline: rows of a wrapped file mapped back to its lines, with what the envelope knew.

``parsers.envelopes`` peels the text; this module hands each inner stream to the same sniffing and
parsers as a bare file (``forensics.timeline``), maps the rows' ``line``/``line_end`` back to the
original lines, adds the envelope columns (``envelope``, ``env_ts``, ``unit``, ``container``, ``pod``,
``stream``, ``task``; ``host`` and ``pid`` where the row has none), converts the envelope's stamps to
UTC by the timeline's own clock rules, and says once when a record's clock and its envelope's disagree.
Streamed files are peeled chunk by chunk (:class:`EnvelopeChunks`).
"""

from __future__ import annotations

import bisect
import re
from typing import Any

import polars as pl

from forensics.inputs import InputFile
from forensics.model import Facts
from forensics.timeline.clock import resolve_time
from forensics.timeline.parse import Piece, count_lines, parse_file, writer_format
from parsers import envelopes
from parsers.schema import EVENT_SCHEMA, ParseResult, empty_frame

#: Envelope columns of EVENT_SCHEMA that come straight from the envelope's metadata.
_ENV_COLUMNS = ("envelope", "unit", "container", "pod", "stream", "task")


def _env_utc(meta: pl.DataFrame, facts: Facts, tz: str | None, year: int | None) -> pl.DataFrame:
    """``env_ts`` in UTC for every envelope stamp: zone-less ones (syslog, journal ``short``) by the same
    rule as the rows' own wall clocks, a year-less one in ``year``, ``short-monotonic`` by the boot time."""
    local = pl.col("env_ts_local")
    if year is not None and meta.get_column("env_stamp").is_not_null().any():
        local = local.fill_null((pl.lit(f"{year} ") + pl.col("env_stamp")).str.strptime(
            pl.Datetime("us"), "%Y %b %d %H:%M:%S%.f", strict=False))
    clocks = meta.select(ts=pl.col("env_ts"), ts_local=local, uptime_s=pl.col("env_uptime_s"))
    resolved = resolve_time(clocks, facts, tz, None)
    return meta.with_columns(env_ts=resolved.get_column("ts"), _env_basis=resolved.get_column("ts_basis"))


def _stamp_year(facts: Facts, events: list[pl.DataFrame]) -> int | None:
    """The year of a syslog stamp that prints none: the collection's, else the rows' own wall clock's."""
    if facts.collected_at is not None:
        return facts.collected_at.year
    for ev in events:
        years = ev.get_column("ts_local").drop_nulls().dt.year()
        if years.len():
            return int(years.max())  # type: ignore[arg-type]
    return None


def _with_envelope(ev: pl.DataFrame, meta: pl.DataFrame, orig: pl.Series, first_inner: int,
                   shift: int) -> pl.DataFrame:
    """Rows of inner lines (``line`` relative to ``first_inner``) → original lines minus ``shift``, plus
    what the envelope knew; the row's own host and pid win over the envelope's."""
    if not ev.height:
        return ev
    last = len(orig) - 1
    at = (ev.get_column("line") + (first_inner - 2)).clip(0, last)
    at_end = (ev.get_column("line_end").fill_null(ev.get_column("line")) + (first_inner - 2)).clip(0, last)
    m = meta.select(pl.col("env_host", "env_pid", "env_ts", *_ENV_COLUMNS).gather(at))
    return ev.with_columns(
        line=orig.gather(at) - shift, line_end=orig.gather(at_end) - shift,
        host=pl.col("host").fill_null(m.get_column("env_host")),
        pid=pl.col("pid").fill_null(m.get_column("env_pid")),
        env_ts=m.get_column("env_ts"),
        **{c: pl.col(c).fill_null(m.get_column(c).cast(EVENT_SCHEMA[c])) for c in _ENV_COLUMNS},
    )


def read_enveloped(f: InputFile, text: str, art: dict | None, facts: Facts,
                    tz: str | None) -> tuple[list[Piece], str | None] | None:
    """Parse a file whose lines are wrapped (docker, kubectl, journald, syslog, compose, srun, Ray): the
    inner text of each stream to sniffing and its parser, rows mapped back to the file's lines with the
    envelope's columns; None when the file has no envelope (then it is read as it is)."""
    peeled = envelopes.peel(text)
    if peeled is None:
        return None
    pieces: list[Piece] = []
    labels: list[str] = []
    n_inner = 0
    for st in peeled.streams:
        n_inner += len(st.lines)
        sub, label = parse_file(f, st.text, None if st.raw else writer_format(st, art))
        if label is None:
            continue
        envs = sorted({m.envelope for m in st.meta if m is not None})
        labels.append(f"{label} in {'/'.join(envs)}" if envs else label)
        meta = _env_utc(envelopes.meta_frame(st), facts, tz, _stamp_year(facts, [p.result.events for p in sub]))
        note = ("Envelope stamps (syslog/journal) are host-local without a zone and the input gives no UTC "
                "offset: they were read as UTC (pass --tz to correct).")
        if note not in facts.notes and "local-assumed" in meta.get_column("_env_basis").to_list():
            facts.notes.append(note)
        orig = pl.Series(st.lines, dtype=pl.Int64)
        for piece in sub:
            res = piece.result
            k = piece.start_line  # the piece's first inner line
            start = st.lines[min(k, len(st.lines)) - 1]
            ev = _with_envelope(res.events, meta, orig, k, start - 1)
            examples = [(st.lines[min(ln + k - 2, len(st.lines) - 1)] - start + 1, t)
                        for ln, t in res.unrecognized_examples]
            res = ParseResult(events=ev, source=res.source, path=res.path, lines=res.lines,
                              recognized=res.recognized, unrecognized=res.unrecognized,
                              unrecognized_examples=examples, notes=res.notes)
            pieces.append(Piece(res, start, piece.snapshot, piece.command))
    if not pieces:
        return [], None
    # lines the envelopes themselves consumed (journal export fields, docker partial continuations) were
    # read; a journal JSON message of several lines gives back more inner lines than it took
    extra = count_lines(text) - n_inner
    pieces.append(Piece(ParseResult(events=empty_frame(), source="envelope", path=f.name, lines=max(extra, 0),
                                     recognized=extra), 1, None))
    return pieces, ", ".join(labels)


_YEAR_IN_TEXT = re.compile(r"(?m)^\S{0,40}?\[?((?:19|20)\d\d)-[01]\d-[0-3]\d[ T]\d\d:")


#: lines sampled at each end of a streamed chunk to tell a bare chunk without reading all of it
_SAMPLE_LINES = 64


def _looks_bare(chunk: Any) -> bool:
    """No envelope on the lines sampled at both ends of a chunk, no ANSI codes, no CRLF, and it ends at a line
    end: the whole chunk is taken as bare. An envelope wraps every line it wraps, so a chunk it starts or ends
    in shows it at one of the ends; one that wraps only a stretch in the middle is the price of speed."""
    data = chunk  # bytes or bytearray, tested in place: a copy of 8 MiB costs more than the tests
    # '\r' first: a one-byte search is a memchr, the two-byte one several times slower
    if not data.endswith(b"\n") or b"\x1b" in data or (b"\r" in data and b"\r\n" in data):
        return False
    lead = data[:4096].lstrip()  # the first byte that is not white space, without stripping all 8 MiB
    if (lead[:1] if lead else data.lstrip()[:1]) == b"{":
        return False
    head = data[:16384].decode("utf-8", errors="replace").split("\n")[:_SAMPLE_LINES]
    tail = data[-16384:].decode("utf-8", errors="replace").split("\n")[-_SAMPLE_LINES:]
    return not any(envelopes._ANY.match(ln) for ln in (*head, *tail) if ln)


class EnvelopeChunks:
    """A streamed file's chunks with their envelopes peeled, each chunk on its own (so a file may switch
    envelope mid-way, or start bare); the rows' lines are mapped back to the file's and get the
    envelope's columns. A bare chunk passes as it came. Kernel lines of a streamed journal are not read
    (a note says how many): only the engines' parsers stream."""

    def __init__(self, facts: Facts, tz: str | None) -> None:
        self.facts, self.tz = facts, tz
        self.inner = 0  # inner lines handed on
        self.orig = 0  # original lines read
        self.map_inner: list[int] = [1]  # from inner line map_inner[i] on, orig = line + map_delta[i]
        self.map_delta: list[int] = [0]
        # the envelope metadata of the chunks whose lines a row still to come may start on: a parser holds a row
        # whose record spans chunks (a traceback) until it ends, so a chunk's metadata is kept until rows past it
        # have come back (low_water: the first line of the last rows remapped)
        self.metas: list[pl.DataFrame] = []
        self.low_water = 0
        self.unread = 0  # kernel lines set aside
        self.envelopes: set[str] = set()  # the envelopes peeled (the inventory's label names them)
        self.year = facts.collected_at.year if facts.collected_at else None

    def chunks(self, raw: Any) -> Any:
        carry = ""
        for chunk in raw:
            had = bool(carry)
            if not had and _looks_bare(chunk):
                # a bare log's chunk: no decode, no line-by-line pass (most big logs are bare)
                self._bare(chunk.count(b"\n"))
                yield chunk
                continue
            text = bytes(chunk).decode("utf-8", errors="replace")
            text, carry = envelopes.carry_split(carry + text if had else text)
            out = self._peel(text)
            if out is None and not had and not carry:
                yield chunk  # bare, and whole: as it came
            else:
                yield out if out is not None else text.encode("utf-8", errors="surrogatepass")
        if carry:
            out = self._peel(carry)
            yield out if out is not None else carry.encode("utf-8", errors="surrogatepass")

    def _bare(self, n_orig: int) -> None:
        """Account for ``n_orig`` lines that go on as they are."""
        if self.map_delta[-1] != self.orig - self.inner:
            self.map_inner.append(self.inner + 1)
            self.map_delta.append(self.orig - self.inner)
        self.inner += n_orig
        self.orig += n_orig

    def _peel(self, text: str) -> bytes | None:
        """The inner text of one chunk; None when the chunk is bare (its lines go on as they are)."""
        n_orig = count_lines(text)
        peeled = envelopes.peel(text)
        if peeled is None:
            self._bare(n_orig)
            return None
        streams = peeled.streams
        st = next((s for s in streams if not s.raw), envelopes.Stream("", [], []))
        self.unread += sum(len(s.lines) for s in streams if s.raw)
        self.envelopes.update(m.envelope for m in st.meta if m is not None)
        delta = self.map_delta[-1]
        for i, ln in enumerate(st.lines):
            d = ln + self.orig - (self.inner + i + 1)
            if d != delta:
                self.map_inner.append(self.inner + i + 1)
                self.map_delta.append(d)
                delta = d
        if self.year is None and st.lines:  # a year-less syslog stamp: the year the records print
            m = _YEAR_IN_TEXT.search(st.text)
            self.year = int(m.group(1)) if m else None
        if st.lines:
            meta = envelopes.meta_frame(st, self.inner + 1)
            kept = [m for m in self.metas[:-1] if m.height and m.get_column("line").max() >= self.low_water]
            self.metas = [*kept, *self.metas[-1:], _env_utc(meta, self.facts, self.tz, self.year)]
        self.inner += len(st.lines)
        self.orig += n_orig
        return st.text.encode("utf-8", errors="surrogatepass")

    def orig_line(self, line: int) -> int:
        return line + self.map_delta[bisect.bisect_right(self.map_inner, line) - 1]

    def remap(self, fr: pl.DataFrame) -> pl.DataFrame:
        if not fr.height or (len(self.map_inner) == 1 and not self.metas):  # nothing peeled so far
            return fr
        starts = pl.Series(self.map_inner, dtype=pl.Int64)
        deltas = pl.Series(self.map_delta, dtype=pl.Int64)

        def orig(col: pl.Series) -> pl.Series:
            return col + deltas.gather(starts.search_sorted(col, side="right") - 1)

        out = fr.with_columns(line=orig(fr.get_column("line")),
                              line_end=orig(fr.get_column("line_end").fill_null(fr.get_column("line"))))
        if not self.metas:
            return out
        meta = pl.concat([m.select("line", "env_host", "env_pid", "env_ts", *_ENV_COLUMNS) for m in self.metas])
        m = fr.select("line").join(meta, on="line", how="left", maintain_order="left")
        self.low_water = max(self.low_water, int(fr.get_column("line").min() or 0))
        return out.with_columns(
            host=pl.col("host").fill_null(m.get_column("env_host")),
            pid=pl.col("pid").fill_null(m.get_column("env_pid")),
            env_ts=m.get_column("env_ts"),
            **{c: pl.col(c).fill_null(m.get_column(c).cast(EVENT_SCHEMA[c])) for c in _ENV_COLUMNS},
        )

    def label(self, fmt: str) -> str:
        """The inventory's label of the file, as :func:`read_enveloped` writes it for a file read whole."""
        return f"{fmt} in {'/'.join(sorted(self.envelopes))}" if self.envelopes else fmt

    def finish(self, res: ParseResult, name: str) -> ParseResult:
        extra = self.orig - self.inner
        res.lines = self.orig
        res.recognized = min(res.recognized + extra, self.orig)
        res.unrecognized = self.orig - res.recognized
        res.unrecognized_examples = [(self.orig_line(ln), t) for ln, t in res.unrecognized_examples]
        if self.unread:
            res.notes.append(f"{name}: {self.unread:,} kernel line(s) of this streamed journal were not read "
                             "(a streamed file is read by its engine's parser only); pass them as their own file.")
        return res


def note_skew(events: pl.DataFrame, facts: Facts) -> None:
    """Say once when rows' own stamps and their envelope's disagree by more than a minute."""
    if "env_ts" not in events.columns or events.get_column("env_ts").null_count() == events.height:
        return
    d = events.filter(pl.col("env_ts").is_not_null() & pl.col("ts").is_not_null()
                      & (pl.col("ts_basis") != "envelope")).select(
        s=(pl.col("ts") - pl.col("env_ts")).dt.total_seconds())
    d = d.filter(pl.col("s").abs() > 60)
    if not d.height:
        return
    med = float(d.get_column("s").median())  # type: ignore[arg-type]
    quarter_h = round(med / 900) * 900
    hint = ""
    if quarter_h and abs(med - quarter_h) < 120:
        sign = "+" if quarter_h > 0 else "-"
        hint = (f"; a steady {abs(quarter_h) / 3600:g} h looks like a time zone: the log's own clock may be "
                f"UTC{sign}{abs(quarter_h) // 3600:02d}:{abs(quarter_h) % 3600 // 60:02d} (try --tz)")
    facts.notes.append(f"{d.height:,} row(s): the time the program printed differs from its envelope's "
                       f"(docker/kubectl/journald) stamp by more than a minute (median {med:+,.0f} s) — a skewed "
                       f"container clock or a wrong --tz{hint}. ts keeps the program's own stamp.")

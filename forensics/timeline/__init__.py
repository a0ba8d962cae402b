"""Assemble the timeline: inputs → the right parser per file or transcript segment → one frame in UTC.

This is the only place that knows both bundles and parsers: it maps manifest artifacts to their
parser, sniffs loose files by content, splits pasted transcripts into segments, shifts segment
line numbers back to file lines, and turns every stamp into UTC while saying which clock it
assumed (DESIGN.md §5 "Time").
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import weakref
import zoneinfo
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import polars as pl

from forensics.inputs import InputError, InputFile, iter_text, read_inputs
from forensics.inputs.rotation import member_examples
from forensics.model import Artifact, Facts, Timeline
from forensics.progress import byte_task
from forensics.redact import redact_frame, redact_text
from forensics.timeline.anywhere import BULK_KINDS, ROUTE_CHARS, StreamedText, read_anywhere
from forensics.timeline.clock import resolve_time
from forensics.timeline.parquet import PARQUET_OPTIONS, parquet_meta, place_parquet, write_parquet
from forensics.timeline.parse import (
    NAMED_FORMATS,
    count_lines,
    hinted_format,
    is_binary,
    parse_dt,
    parse_file,
    read_binary,
    shift,
    to_members,
    writer_format,
)
from parsers import bulkscan, pasted, registry, routing
from parsers.schema import EVENT_SCHEMA, NO_FIGURES, NotThisFormat, ParseResult, empty_frame

Progress = Callable[[str], None]
#: Big files are parsed this much at a time (cut at a line end).
CHUNK_BYTES = 8 << 20
#: A chunk of a streamed SGLang log goes to its parser in pieces this big (cut at a line end) while the last
#: piece had more than PY_HEAVY_LINES lines the native scan left to the Python parser, and so does a file's
#: first piece: each such line costs ~1 KB while its chunk is parsed (a row dict, then a frame row), so a
#: log of lines no pattern reads would take ~600 MB for one 8 MiB chunk. The native scan's batch lines cost
#: nothing like it: their chunks stay whole.
HEAVY_PIECE_BYTES = 1 << 20
PY_HEAVY_LINES = 4096
#: BULK_KINDS (forensics.timeline.anywhere): the one-line records a long-running server's log is made of;
#: in a streamed file only a sample of them stays in memory (every row is in timeline.parquet).
#: Rows of one (kind, rank, run) of a streamed file kept whole before sampling starts: a log this
#: short (every scenario, every real sample) is analysed exactly as if it were read whole.
KEEP_ALL = 2048
#: Sample buckets per (kind, rank, run) of a streamed file, whatever its size, so memory stays flat.
BUCKETS = 500
#: Rows of a streamed file sampled like the bulk kinds, each with the words the report's note names them by:
#: a line of the engine's own format that no pattern reads ("log", parsers.sglang and parsers.vllm) — a log
#: made of those would otherwise keep a row per line in memory (64 MiB of them: ~1.3 GB), and no detector
#: reads this kind — and vLLM's periodic engine-metrics line, its batch line (~40k rows per 64 MiB of log).
SAMPLED_OTHER = {"log": "log lines no pattern reads", "engine_metrics": "vLLM engine-metrics rows"}
SAMPLED_KINDS = (*BULK_KINDS, *SAMPLED_OTHER)
#: Sampled rows kept whatever the sample: a metrics line that counts preempted, swapped or corrupted requests
#: (VLLM-KV-003 sums V1's preemption counts over every line, and looks for any swapped request).
ALWAYS_KEPT = r'"(?:preemptions|swapped_reqs|corrupted_reqs)":\s*[1-9]'
#: Batch rows at or above this token usage are all kept (up to MAX_EXTREME per file): KV pressure.
EXTREME_RATIO = 0.9
MAX_EXTREME = 2_000


#: ROUTE_CHARS (forensics.timeline.anywhere): texts read whole from this size on are routed.
#: Skipped items (links, unreadable files, manifest fields) listed one by one; the rest are counted.
MAX_SKIPPED_LISTED = 50
#: The formats whose parser reads a big file chunk by chunk (:func:`_stream_log`).
STREAMED_FORMATS = ("sglang", "vllm", "kernel")


class _VllmFeed:
    """vLLM's parser (``parsers.vllm.Stream``) fed as ``sglang_fast.Stream`` is: chunks of bytes in, final
    rows out; every line goes to the readers that look anywhere (``on_other_lines``), as vLLM has no lines
    the readers can skip."""

    def __init__(self, name: str, on_other_lines: Callable[[int, pl.Series, list[str]], None]) -> None:
        from parsers import vllm

        self.st = vllm.Stream(name)
        self.on_other_lines = on_other_lines
        self.before = 0
        self.last_other = -1  # every line is the Python parser's: always fed in HEAVY_PIECE_BYTES pieces

    def feed(self, data: bytes | bytearray) -> pl.DataFrame:
        text = _offer_lines(self, data)
        return self.st.feed(text).sort("line", maintain_order=True)

    def finish(self) -> tuple[pl.DataFrame, ParseResult]:
        last, res = self.st.finish()
        return last.sort("line", maintain_order=True), res


def _offer_lines(feed: Any, data: bytes | bytearray) -> str:
    """A chunk's text (it ends at a line end: decoded as whole), its every line offered to the readers that look
    anywhere (``feed.on_other_lines``), and ``feed.before`` moved past them."""
    text = bytes(data).decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    feed.on_other_lines(feed.before, pl.Series(range(len(lines)), dtype=pl.UInt32), lines)
    feed.before += len(lines)
    return text


class _KernelFeed:
    """The kernel log's parser (``parsers.kernel.Stream``) fed as ``sglang_fast.Stream`` is. Its rows are few
    and complete only at the end (:meth:`finish`); as they come, the readers that look anywhere consult them
    (``rows_of``: the failure scan leaves the lines of a reported OOM kill to it), and read every line."""

    consults_itself = True

    def __init__(self, name: str, on_other_lines: Callable[[int, pl.Series, list[str]], None],
                 rows_of: Callable[[pl.DataFrame], None]) -> None:
        from parsers import kernel

        self.st = kernel.Stream(name)
        self.name = name
        self.on_other_lines, self.rows_of = on_other_lines, rows_of
        self.before = 0
        self.given = 0  # rows handed to rows_of
        self.last_other = 0  # the reader looks at a few lines of a chunk only: chunks go whole

    def feed(self, data: bytes | bytearray) -> pl.DataFrame:
        from parsers import kernel
        from parsers.schema import rows_to_frame

        text = _offer_lines(self, data)
        self.st.feed(text)
        rows = self.st.reader.content.rows
        if len(rows) > self.given:
            new = [{k: v for k, v in r.items() if k != "_texts"} for r in rows[self.given:]]
            self.rows_of(rows_to_frame(new, source=kernel.FORMAT, path=self.name).sort("line", maintain_order=True))
            self.given = len(rows)
        return empty_frame()

    def finish(self) -> tuple[pl.DataFrame, ParseResult]:
        res = self.st.finish()
        last, res.events = res.events, empty_frame()
        return last, res


def _stream_log(f: InputFile, art: dict | None, progress: Progress | None,
                emit: Callable[[pl.DataFrame], None], facts: Facts | None = None,
                tz: str | None = None) -> tuple[ParseResult, str] | None:
    """A big file the manifest or the sniffer calls SGLang, vLLM or a kernel log (STREAMED_FORMATS), parsed chunk by
    chunk, each chunk's rows handed to ``emit`` in line order: its account and format; None if it is
    neither (then nothing was emitted). Envelopes (docker JSON, kubectl, journald…) are peeled chunk by
    chunk; the head's inner text is sniffed."""
    from forensics.timeline.envelope_rows import EnvelopeChunks
    from parsers import envelopes, sglang_fast

    head = f.head(registry.SNIFF_BYTES).decode("utf-8", errors="replace")
    peeled = envelopes.peel(head[: head.rfind("\n") + 1] or head)
    wrapped = peeled is not None and any(not s.raw for s in peeled.streams)
    if wrapped:
        inner = next(s for s in peeled.streams if not s.raw)  # type: ignore[union-attr]
        head, art = inner.text, writer_format(inner, art)
    fmt = hinted_format(art.get("format") if art else None, head) or registry.best_format(head)[0]
    if fmt not in STREAMED_FORMATS or (fmt == "kernel" and peeled is not None):
        # a kernel log in an envelope is read whole (its raw streams would be set aside here): the kernel
        # parser reads the kernel's own containers (dmesg, journal, syslog) itself, so none is peeled for it
        return None
    env = EnvelopeChunks(facts or Facts(), tz)
    keep = fmt == "kernel"  # the chunks as they are, lines at their own numbers
    # the launches, GPU names, dumps and failure lines anywhere in it, as in a text read whole
    anywhere = StreamedText(f.name)
    st: sglang_fast.Stream | _VllmFeed | _KernelFeed
    if fmt == "vllm":
        st = _VllmFeed(f.name, anywhere.lines)
    elif fmt == "kernel":
        st = _KernelFeed(f.name, anywhere.lines, anywhere.rows_of)
    else:
        st = sglang_fast.Stream(f.name)
        st.on_other_lines = anywhere.lines
    done = 0
    tick = byte_task(progress, f.name, f.nbytes)
    for chunk in f.chunks(CHUNK_BYTES) if keep else env.chunks(f.chunks(CHUNK_BYTES)):
        for piece in pieces(chunk, lambda: st.last_other < 0 or st.last_other > PY_HEAVY_LINES):
            fr = st.feed(piece)
            if not hasattr(st, "consults_itself"):
                anywhere.rows_of(fr)
            fr = fr if keep else env.remap(fr)
            done += len(piece)
            del piece
            if fr.height:
                emit(fr)
            if tick is not None:
                tick(done)
        del chunk
    if tick is not None:
        tick.done()
    try:
        last, res = st.finish()
    except NotThisFormat:
        return None
    if not hasattr(st, "consults_itself"):
        anywhere.rows_of(last)
    found = anywhere.rows(res)
    res.recognized += anywhere.recognized
    if anywhere.newly:
        res.unrecognized_examples = [(ln, t) for ln, t in res.unrecognized_examples if ln not in anywhere.newly]
    if not keep:
        last, res = env.remap(last), env.finish(res, f.name)
        found = env.remap(found) if found is not None else None
    if last.height:
        emit(last)
    if found is not None:  # after the parser's rows: they are known at the end of the file
        emit(found)
    return res, env.label(fmt)


def pieces(chunk: bytes | bytearray, heavy: Callable[[], bool]) -> Iterator[bytes | bytearray]:
    """``chunk`` (which ends at a line end) whole, or while ``heavy()`` says so, in pieces of about
    HEAVY_PIECE_BYTES that end at line ends; the rest goes whole once ``heavy()`` turns false.

    >>> [bytes(p) for p in pieces(b"a\\nb\\n", lambda: False)]
    [b'a\\nb\\n']
    """
    start, n = 0, len(chunk)
    while start < n:
        end = n
        if heavy() and n - start > HEAVY_PIECE_BYTES:
            cut = chunk.find(b"\n", start + HEAVY_PIECE_BYTES - 1)
            end = n if cut < 0 else cut + 1
        yield chunk if start == 0 and end == n else chunk[start:end]
        start = end


def _texts(f: InputFile, text: str | None, art: dict | None) -> Iterator[tuple[int, str, int | None]]:
    """The text of a file read whole, as (lines before it, text, the file's size when it is a piece): the
    whole of it, or, for a streamed file whose head no parser claims (only the readers that look anywhere
    and the paste splitter have a use for it), chunk by chunk (CHUNK_BYTES, cut at line ends) so that
    memory stays that of a chunk: a record or a pasted session that spans a cut is read in two halves."""
    if text is not None or not f.streamed:
        yield 0, text if text is not None else next(iter_text([f]))[1], None
        return
    head = f.head(registry.SNIFF_BYTES).decode("utf-8", errors="replace")
    hint = (art.get("format") if art else None) or NAMED_FORMATS.get(f.name.rsplit("/", 1)[-1])
    if hinted_format(hint, head) is not None or registry.best_format(head)[0] is not None:
        yield 0, next(iter_text([f]))[1], None
        return
    before = 0
    for chunk in f.chunks(CHUNK_BYTES):
        text = bytes(chunk).decode("utf-8", errors="replace")  # each chunk ends at a line end
        del chunk
        yield before, text, f.nbytes
        before += count_lines(text)


#: The inventory's label for what the collector ran to learn about the host's software (docs/bundle.md).
PROBE_FORMAT = "collector probe"


def is_probe(art: dict | None) -> bool:
    """Is this manifest artifact one of the collector's probes (a version query), not evidence?

    The manifest says so (``role: probe``); bundles written before that field name their version
    probes ``version-*`` (docs/bundle.md).
    """
    if not art:
        return False
    return art.get("role") == "probe" or str(art.get("source") or "").startswith("version-")


def _facts_from_manifest(m: dict | None, paths: list[str]) -> Facts:
    facts = Facts(input_paths=[str(p) for p in paths], manifest=m)
    if not m:
        return facts
    facts.host = m.get("host")
    facts.collected_at = parse_dt(m.get("ended_at") or m.get("started_at"))
    off = m.get("utc_offset_s")
    facts.utc_offset_s = int(off) if isinstance(off, int | float) else None
    facts.boot_time = parse_dt(m.get("boot_time"))
    versions = m.get("versions") or {}
    if isinstance(versions, dict):
        facts.versions.update({str(k): str(v) for k, v in versions.items() if v})
    facts.gaps.extend(str(g) for g in (m.get("gaps") or []))
    for a in m.get("artifacts") or []:
        p = a.get("path", "?")
        if a.get("timed_out"):
            facts.gaps.append(f"{p}: timed out")
        if a.get("abandoned"):
            facts.gaps.append(f"{p}: command abandoned (stuck, possibly in D state)")
        if a.get("truncated"):
            facts.gaps.append(f"{p}: truncated to the size cap")
    facts.gaps = list(dict.fromkeys(facts.gaps))
    return facts

#: Sampled kinds that have no token usage to be extreme in.
_NOT_EXTREME = ("http_access", "log")


_NOT_FIGURES = {c: t for c, t in EVENT_SCHEMA.items() if c != "figures"}


class _Sampler:
    """Which bulk rows of one file stay in memory: all of a short log; of a long one, per (kind, rank, run)
    bucket of consecutive rows its first, last and extreme rows (token usage, tokens, running and queued
    requests), and every row at or above EXTREME_RATIO token usage."""

    KEYS = ("kind", "rank", "run")

    def __init__(self, nbytes: int) -> None:
        # ~150 bytes a bulk line: the whole file makes about BUCKETS buckets, whatever its size
        self.bucket = max(1, nbytes // 150 // BUCKETS)
        #: rows seen so far per (kind, rank, run)
        self.seen: dict[tuple[Any, Any, Any], int] = {}
        self.extreme = 0
        self.bulk = 0
        self.kept = 0
        #: rows of the other sampled kinds (SAMPLED_OTHER) seen and kept, per kind
        self.other: Counter[str] = Counter()
        self.other_kept: Counter[str] = Counter()

    def keep(self, frame: pl.DataFrame) -> pl.DataFrame:
        kind = frame.get_column("kind")
        is_bulk = kind.is_in(SAMPLED_KINDS)
        n_sampled = int(is_bulk.sum())
        if not n_sampled:
            return frame
        n_other = n_sampled - int(kind.is_in(BULK_KINDS).sum())
        # only the columns the choice needs, and only the bulk rows (_i: the row in ``frame``)
        # _q: #queue-req, the typed field (parsers.schema.FIELDS; a value that is no integer stays in attrs
        # and ranks nothing, as when it was read out of the JSON)
        b = frame.select(*self.KEYS, "ratio", "tokens", "count",
                         _q=pl.col("fields").struct.field("queue_req")).with_row_index("_i").filter(is_bulk)
        kept = self._choose_native(b) if bulkscan.available() else self._choose(b)
        kept_other = 0
        if n_other:
            must = (kind == "engine_metrics") & frame.get_column("attrs").str.contains(ALWAYS_KEPT)
            if must.any():
                kept = pl.concat([kept, must.fill_null(False).arg_true().cast(kept.dtype)]).unique().sort()
            for k, n in kind.filter(is_bulk & ~kind.is_in(BULK_KINDS)).value_counts().iter_rows():
                self.other[k] += n
            for k, n in kind.gather(kept).filter(~kind.gather(kept).is_in(BULK_KINDS)).value_counts().iter_rows():
                self.other_kept[k] += n
                kept_other += n
        self.bulk += n_sampled - n_other
        self.kept += kept.len() - kept_other
        # the other rows, then the kept bulk rows, each in line order
        out = frame.gather(pl.concat([(~is_bulk).arg_true().cast(kept.dtype), kept]))
        # a gathered string column still points into the whole chunk's buffers: copy what is kept so
        # the chunk can be freed (else memory grows by the chunk, not by the sample)
        # (a figures column no kept row fills stays one null, not a struct of nulls: the frame is kept until
        # the analysis, and reading the column as a Series would store it materialized in the frame)
        if out.select(pl.col("figures").null_count()).item() < out.height:
            return pl.from_arrow(out.to_arrow()).cast(EVENT_SCHEMA)  # type: ignore[return-value]
        copied = pl.from_arrow(out.drop("figures").to_arrow()).cast(_NOT_FIGURES)  # type: ignore[union-attr]
        return copied.with_columns(NO_FIGURES).select(out.columns)  # type: ignore[union-attr]

    def _choose_native(self, b: pl.DataFrame) -> pl.Series:
        """The ``_i`` of the rows to keep, by the compiled twin of :meth:`_choose` (parsers/_native)."""
        keys = list(self.KEYS)
        # 1.. per (kind, rank, run) in order of first appearance: a group-by, not a sort of the keys
        groups = b.select(keys).with_row_index("_r").group_by(keys, maintain_order=True).agg("_r")
        groups = groups.with_row_index("_k", offset=1)
        kid = groups.select(pl.col("_k").cast(pl.Int64).repeat_by(pl.col("_r").list.len()).explode(),
                            pl.col("_r").explode()).sort("_r").get_column("_k")
        firsts = kid.arg_unique()
        nkeys = int(kid.max())  # type: ignore[arg-type]
        ord0 = [0] * (nkeys + 1)
        key_of: dict[int, tuple[Any, ...]] = {}
        key_cols = b.select(keys)
        for k, row in zip(kid.gather(firsts).to_list(), firsts.to_list(), strict=True):
            key_of[k] = key_cols.row(row)
            ord0[k] = self.seen.get(key_of[k], 0)
        keep, counts, extreme = bulkscan.sample(
            kid.to_arrow(), nkeys, ord0, self.bucket, KEEP_ALL, b.get_column("ratio").to_arrow(),
            b.get_column("tokens").to_arrow(), b.get_column("count").to_arrow(),
            b.get_column("_q").to_arrow(),
            b.get_column("kind").is_in(_NOT_EXTREME).fill_null(False).to_arrow(), EXTREME_RATIO, MAX_EXTREME,
            self.extreme)
        for k, key in key_of.items():
            self.seen[key] = ord0[k] + counts[k]
        self.extreme = min(extreme, MAX_EXTREME + 1)
        return b.get_column("_i").filter(pl.from_arrow(keep).cast(pl.Boolean))  # type: ignore[union-attr]

    def _choose(self, b: pl.DataFrame) -> pl.Series:
        """The ``_i`` of the rows to keep (see the class): per (kind, rank, run) ordinals going on from the
        rows seen in earlier chunks, buckets of them, and each bucket's first, last and extreme rows."""
        keys = list(self.KEYS)
        groups = b.group_by(keys, maintain_order=True).len()
        before = [self.seen.get(k, 0) for k in groups.select(keys).iter_rows()]
        for k, n0, n in zip(groups.select(keys).iter_rows(), before, groups.get_column("len"), strict=True):
            self.seen[k] = n0 + n
        o = pl.int_range(pl.len(), dtype=pl.Int64).over(keys)
        if any(before):  # a later chunk of a (kind, rank, run): its ordinals go on from the rows seen
            offsets = groups.select(*keys, _n=pl.Series(before, dtype=pl.Int64))
            b = b.join(offsets, on=keys, how="left", nulls_equal=True, maintain_order="left")
            o = o + pl.col("_n")
        extreme = (pl.col("ratio") >= EXTREME_RATIO) & ~pl.col("kind").is_in(_NOT_EXTREME)
        b = b.with_columns(_o=o, _x=extreme.fill_null(False))
        b = b.with_columns(_b=pl.col("_o") // self.bucket,
                           _xn=pl.col("_x").cast(pl.Int64).cum_sum() + self.extreme)

        def at_max(col: str, desc: bool = True) -> pl.Expr:
            c = pl.col(col)
            return pl.col("_i").filter(c == (c.max() if desc else c.min())).first().alias(f"{col}{desc}")

        g = b.group_by([*keys, "_b"]).agg(pl.col("_i").first().alias("a"), pl.col("_i").last().alias("z"),
                                          at_max("ratio"), at_max("ratio", False), at_max("tokens"),
                                          at_max("count"), at_max("_q"))
        ids = pl.concat([g.get_column(c) for c in g.columns[len(keys) + 1:]])
        kept = b.filter((pl.col("_o") < KEEP_ALL) | (pl.col("_x") & (pl.col("_xn") <= MAX_EXTREME))
                        | pl.col("_i").is_in(ids.drop_nulls().implode())).get_column("_i")
        self.extreme = min(int(b.get_column("_xn")[-1]), MAX_EXTREME + 1)
        return kept



class _Sink:
    """timeline.parquet written as the rows come (zstd, EVENT_SCHEMA) in a private folder under ``where``;
    one write at a time runs on a thread while the next chunk is parsed."""

    def __init__(self, where: str | os.PathLike | None) -> None:
        import pyarrow.parquet as pq

        if where is not None:
            os.makedirs(where, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix=".forensics-", dir=where)
        self.path = os.path.join(self.dir, "timeline.parquet")
        self.schema = empty_frame().to_arrow().schema
        # no ARROW:schema blob: readers then take the facts (added at close) as the schema's metadata too
        self.writer = pq.ParquetWriter(self.path, self.schema, store_schema=False, **PARQUET_OPTIONS)
        self.pool = ThreadPoolExecutor(1)
        self.busy: Future | None = None
        self.counts: Counter[str] = Counter()
        self.bases: set[str] = set()
        self.n_up = 0

    def write(self, frame: pl.DataFrame) -> None:
        if not frame.height:
            return
        for kind, n in frame.group_by("kind").len().iter_rows():
            self.counts[kind] += n
        self.bases.update(frame.get_column("ts_basis").drop_nulls().unique().to_list())
        table = frame.to_arrow()
        if table.schema != self.schema:
            table = table.cast(self.schema)
        self._wait()
        self.busy = self.pool.submit(self.writer.write_table, table)

    def _wait(self) -> None:
        if self.busy is not None:
            busy, self.busy = self.busy, None
            busy.result()

    def close(self, meta: dict[bytes, bytes]) -> None:
        try:
            self._wait()
            self.writer.add_key_value_metadata(meta)
        finally:
            self.writer.close()
            self.pool.shutdown()

    def abort(self) -> None:
        with contextlib.suppress(Exception):  # the folder goes anyway
            self.close({})
        shutil.rmtree(self.dir, ignore_errors=True)


#: Files from this size on get a "reading …" line on stderr.
PROGRESS_FILE_BYTES = 1 << 20


def build_timeline(paths: list[str | os.PathLike], tz: str | None = None,
                   progress: Progress | None = None, spill_dir: str | os.PathLike | None = None,
                   transform: Callable[[pl.DataFrame], pl.DataFrame] | None = None,
                   redact: bool = True, hosts: dict[str, str] | None = None) -> Timeline:
    """Read INPUT paths and return the assembled timeline. Raises InputError for bad input.

    Several inputs that are different hosts' evidence (a bundle per node, a folder per node) are read
    host by host and merged (forensics.timeline.hosts); ``hosts`` maps an INPUT path to the host it is
    (``--host NAME=PATH``), overriding what the input says.

    ``redact`` (the default) masks credentials in every row's text and attrs and in the examples of
    unrecognised lines, so a raw log handed straight to ``report`` carries no secret into its outputs.

    When a file is too big to read whole, every row is streamed to a timeline.parquet in a temporary
    folder under ``spill_dir`` (the system's temp folder if None; give the output's folder) and the
    returned timeline's ``events`` keeps all rows but a sample of the bulk kinds (``parquet_path``).
    ``transform`` (e.g. redaction) is applied to every frame of rows before it is written or kept.
    """
    if tz:
        try:
            zoneinfo.ZoneInfo(tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise InputError(f"unknown time zone {tz!r} (use an IANA name such as Asia/Shanghai or UTC)") from None
    if len(paths) > 1 or hosts:
        from forensics.timeline.hosts import build_by_host

        merged = build_by_host(paths, hosts or {}, lambda ps, host: _build_one(
            ps, tz, progress, spill_dir, transform, redact, host), spill_dir)
        if merged is not None:
            return merged
    return _build_one(paths, tz, progress, spill_dir, transform, redact)


def _build_one(paths: list[str | os.PathLike], tz: str | None, progress: Progress | None,
               spill_dir: str | os.PathLike | None, transform: Callable[[pl.DataFrame], pl.DataFrame] | None,
               redact: bool, host: str | None = None) -> Timeline:
    """One host's inputs read into one timeline (``host``: its name, when the caller knows it)."""
    # big archive members are spooled next to the output, and removed once the rows are read
    inp = read_inputs([str(p) for p in paths], spool_dir=spill_dir, progress=progress)
    sink = _Sink(spill_dir) if any(f.streamed for f in inp.files) else None
    redactions: Counter[str] = Counter()
    if redact:
        transform = _redacting(transform, redactions)
        _redact_names(inp, redactions)
    finish = (lambda facts, unrec: _redact_examples(facts, unrec, redactions)) if redact else None
    try:
        tl = _assemble(inp, paths, tz, progress, sink, transform, finish, host)
    except BaseException:
        if sink is not None:
            sink.abort()
        raise
    finally:
        inp.close()
    if sink is not None:
        weakref.finalize(tl, shutil.rmtree, sink.dir, True)
    if not tl.facts.host:
        tl.facts.host = _prompted_host(tl.events)
    return tl


def _prompted_host(events: pl.DataFrame) -> str | None:
    """The host the typed commands' prompts (``root@gpu-b:~#``) and NCCL's ``host:pid:tid`` lines name."""
    from parsers.hostname import stated_host

    if events.is_empty():
        return None
    said = events.filter(((pl.col("source") == "transcript") & (pl.col("kind") == "command"))
                         | (pl.col("kind") == "nccl_info")).head(2000).get_column("text").drop_nulls()
    return stated_host("\n".join(said.to_list())) if said.len() else None


def _redacting(inner: Callable[[pl.DataFrame], pl.DataFrame] | None,
               counts: Counter[str]) -> Callable[[pl.DataFrame], pl.DataFrame]:
    def apply(fr: pl.DataFrame) -> pl.DataFrame:
        fr, c = redact_frame(inner(fr) if inner else fr)
        counts.update(c)
        return fr

    return apply


def _redact_names(inp: Any, counts: Counter[str]) -> None:
    """Mask credentials in the names of the input's files (``rank1-hf_….log``), of the archives they came
    from, of what was skipped and in the manifest's artifact paths (the same function: they still pair
    up), before any name reaches a row, the coverage, the report or the Parquet metadata."""
    def clean(name: str) -> str:
        red, c = redact_text(name)
        counts.update(c)
        return red

    for f in inp.files:
        f.name, f.origin = clean(f.name), clean(f.origin)
        if f.parts:
            f.parts = [(clean(n), line) for n, line in f.parts]
    inp.skipped = [clean(s) for s in inp.skipped]
    for a in (inp.manifest or {}).get("artifacts") or []:
        if isinstance(a.get("path"), str):
            a["path"] = clean(a["path"])


def _redact_examples(facts: Facts, unrec: dict[str, list[tuple[int, str]]], counts: Counter[str]) -> None:
    """Mask the examples of unrecognised lines too, and say how much was masked (before the facts are
    sealed into the Parquet metadata)."""
    for name, examples in unrec.items():
        cleaned = []
        for line, text in examples:
            red, c = redact_text(text)
            counts.update(c)
            cleaned.append((line, red))
        unrec[name] = cleaned
    facts.input_paths = [redact_text(p)[0] for p in facts.input_paths]
    if counts:
        kinds = ", ".join(f"{k} ×{n}" for k, n in sorted(counts.items()))
        facts.notes.append(f"{sum(counts.values())} credential(s) in the input were masked before analysis ({kinds}).")


def _assemble(inp: Any, paths: list[str | os.PathLike], tz: str | None, progress: Progress | None,
              sink: _Sink | None, transform: Callable[[pl.DataFrame], pl.DataFrame] | None = None,
              finish: Callable[[Facts, dict[str, list[tuple[int, str]]]], None] | None = None,
              host: str | None = None) -> Timeline:
    facts = _facts_from_manifest(inp.manifest, [str(p) for p in paths])
    if host:
        facts.host = host
    facts.gaps.extend(f"skipped {s}" for s in inp.skipped[:MAX_SKIPPED_LISTED])
    if len(inp.skipped) > MAX_SKIPPED_LISTED:
        facts.gaps.append(f"skipped {len(inp.skipped) - MAX_SKIPPED_LISTED:,} more items not listed here")
    arts_by_path = {a.get("path"): a for a in (inp.manifest or {}).get("artifacts") or []}
    frames: list[pl.DataFrame] = []
    held: list[pl.DataFrame] = []  # rows kept in memory as they came (emit)
    coverage: list[dict[str, Any]] = []
    artifacts: list[Artifact] = []
    unrec: dict[str, list[tuple[int, str]]] = {}
    notes: list[str] = []
    n_bulk = n_kept = 0
    n_other: Counter[str] = Counter()
    n_other_kept: Counter[str] = Counter()
    members: list[tuple[str, int]] | None = None  # the members of the file being read, if a rotation set

    def emit(fr: pl.DataFrame, sampler: _Sampler | None) -> None:
        """One file's rows (in line order when streaming) to the sink and, maybe sampled, to memory."""
        if members and fr.height:
            fr = to_members(fr, members)
        if sink is None or sampler is None:
            # kept in memory only: the host and the transform (redaction) are applied once to all such rows at
            # the end, not per file (each call's set-up is most of what a small file costs)
            held.append(fr)
            return
        if facts.host and fr.height:
            fr = fr.with_columns(pl.col("host").fill_null(facts.host))
        if transform is not None and fr.height:
            fr = transform(fr)
        sink.write(fr)
        frames.append(sampler.keep(fr))

    for f in inp.files:
        members = f.parts
        art = arts_by_path.get(f.name)
        artifact = Artifact(path=f.name, format=None, bytes=f.nbytes, lines=0,
                            timed_out=bool(art and art.get("timed_out")),
                            truncated=bool(art and art.get("truncated")),
                            rc=art.get("rc") if art else None, error=art.get("error") if art else None)
        artifacts.append(artifact)
        if is_probe(art):
            # the collector's own question (which sglang is installed?): its answer is in the manifest's
            # versions, its failure in the gaps; a traceback in it is the probe's, never the server's
            artifact.format = PROBE_FORMAT
            artifact.lines = 0 if f.streamed else count_lines(next(iter_text([f]))[1])
            coverage.append({"file": f.name, "format": PROBE_FORMAT, "lines": artifact.lines,
                             "recognized": artifact.lines, "unrecognized": 0, "cut_lines": 0})
            continue
        text = None if f.streamed else next(iter_text([f]))[1]
        if text is not None:
            artifact.lines = count_lines(text)
        binary = read_binary(f)
        if binary is not None:  # an engine's own crash artifact (a pickle): read as data, never executed
            res, artifact.format, artifact.error = binary
            if artifact.error:
                facts.gaps.append(f"{f.name}: {artifact.error}")
            lines = res.lines if res is not None else 0
            coverage.append({"file": f.name, "format": artifact.format, "lines": lines, "recognized": lines,
                             "unrecognized": 0, "cut_lines": 0, "binary": True})
            if res is not None:
                emit(resolve_time(shift(res.events, 1, None), facts, tz, None),
                     _Sampler(f.nbytes) if sink is not None else None)
            continue
        if is_binary(f.head(8192)):
            artifact.error = "binary file, not read"
            coverage.append({"file": f.name, "format": None, "lines": 0, "recognized": 0, "unrecognized": 0,
                             "cut_lines": 0, "binary": True})
            continue
        if progress and f.nbytes >= PROGRESS_FILE_BYTES:  # small files are read faster than a line is printed
            progress(f"reading {f.name} ({f.nbytes / (1 << 20):,.1f} MiB)")
        # the collector's stamp dates what it captured itself (a snapshot), not a file it copied in
        capture = parse_dt(art.get("started")) if art and art.get("snapshot") is not None else None
        sampler = _Sampler(f.nbytes) if sink is not None else None
        streamed = _stream_log(f, art, progress, lambda fr, _a=art, _c=capture, _s=sampler: emit(
            resolve_time(shift(fr, 1, _a.get("snapshot") if _a else None), facts, tz, _c), _s),
            facts, tz) if f.streamed else None
        if streamed is not None:
            res, fmt = streamed
            artifact.format = fmt
            artifact.lines = res.lines
            notes.extend(res.notes)
            if res.unrecognized_examples:
                unrec[f.name] = sorted(res.unrecognized_examples)[:20]
            coverage.append({"file": f.name, "format": fmt, "lines": res.lines,
                             "recognized": min(res.recognized, res.lines),
                             "unrecognized": res.lines - min(res.recognized, res.lines), "cut_lines": f.cut_lines})
        else:
            n_lines = recognized = 0
            examples: list[tuple[int, str]] = []
            labels: list[str] = []
            failed_any = False
            for before, whole_text, of in _texts(f, text, art):  # one, or a big file no parser claims in pieces
                text = pasted.unwrap(whole_text, whole_chars=of)  # a log quoted or indented in a ticket
                del whole_text
                n_lines += count_lines(text)
                from forensics.timeline.envelope_rows import read_enveloped

                enveloped = read_enveloped(f, text, art, facts, tz)
                pieces, label = enveloped or parse_file(f, text, art)
                if label is not None:
                    labels.append(label)
                # one pass tells the readers below which lines they can use (a text with envelopes: each
                # reader reads the peeled text as before)
                routes = routing.route(text) if enveloped is None and len(text) >= ROUTE_CHARS else None
                got: list[tuple[int, str]] = []
                parts = []
                for piece in pieces:
                    res = piece.result
                    recognized += res.recognized
                    got += [(ln + piece.start_line - 1, t) for ln, t in res.unrecognized_examples]
                    notes.extend(res.notes)
                    if piece.command or piece.snapshot is not None:
                        artifact.segments.append({"start_line": piece.start_line + before, "format": res.source,
                                                  "command": piece.command, "lines": res.lines})
                    fr = shift(res.events, piece.start_line, piece.snapshot)
                    parts.append(resolve_time(fr, facts, tz, capture))
                more, newly, failed = read_anywhere(text, f.name, parts, routes,
                                                    lambda fr, _c=capture: resolve_time(fr, facts, tz, _c))
                recognized += more
                failed_any = failed_any or failed
                if before:
                    parts = [shift(fr, before + 1, None) for fr in parts]
                if sink is None:
                    for fr in parts:
                        emit(fr, None)
                elif parts:
                    whole = pl.concat(parts, how="vertical") if len(parts) > 1 else parts[0]
                    emit(whole.sort("line", maintain_order=True), sampler)
                if not pieces:  # no parser read any of it: its first lines
                    got = [(i + 1, ln) for i, ln in enumerate(text.splitlines()[:40]) if ln.strip()]
                if len(examples) < 40:
                    examples += [(ln + before, t) for ln, t in got if ln not in newly]
                del text
            label = labels[0] if labels else ("failures" if failed_any else None)
            artifact.format = label
            artifact.lines = n_lines
            recognized = min(recognized, n_lines)
            if examples:
                unrec[f.name] = sorted(examples)[:20]
            coverage.append({"file": f.name, "format": label, "lines": n_lines, "recognized": recognized,
                             "unrecognized": n_lines - recognized, "cut_lines": f.cut_lines})
        if members:
            coverage[-1]["members"] = [n for n, _s in members]
            if f.name in unrec:
                unrec[f.name] = member_examples(unrec[f.name], members)  # type: ignore[assignment]
        if sampler is not None:
            n_bulk += sampler.bulk
            n_kept += sampler.kept
            n_other += sampler.other
            n_other_kept += sampler.other_kept
    held = [fr for fr in held if fr.height]
    if held:
        fr = pl.concat(held, how="vertical") if len(held) > 1 else held[0]
        held.clear()
        if facts.host:
            fr = fr.with_columns(pl.col("host").fill_null(facts.host))
        frames.append(transform(fr) if transform is not None else fr)
    events = pl.concat(frames, how="vertical") if frames else empty_frame()
    frames.clear()
    events = events.sort(["ts", "file", "line"], nulls_last=True, maintain_order=True)
    _derive_facts(events, facts, tz, sink.bases if sink is not None else None)
    from forensics.timeline.envelope_rows import note_skew

    note_skew(events, facts)
    facts.notes.extend(dict.fromkeys(notes))
    if finish is not None:
        finish(facts, unrec)
    if n_kept < n_bulk:
        facts.notes.append(f"{n_bulk:,} batch/access rows are in timeline.parquet; {n_kept:,} kept for analysis "
                           "(every row of other kinds; per rank the first, last and extreme rows).")
    for k, words in SAMPLED_OTHER.items():
        if n_other_kept[k] < n_other[k]:
            facts.notes.append(f"{n_other[k]:,} {words} are in timeline.parquet; {n_other_kept[k]:,} kept for analysis "
                               "(per rank the first, last and extreme rows).")
    if sink is not None:
        counts = dict(sorted(sink.counts.items()))
        sink.close(parquet_meta(facts, coverage))
        return Timeline(events=events, facts=facts, coverage=coverage, artifacts=artifacts,
                        unrecognized_examples=unrec, kind_counts=counts, parquet_path=sink.path)
    counts = dict(events.group_by("kind").len().sort("kind").iter_rows()) if events.height else {}
    return Timeline(events=events, facts=facts, coverage=coverage, artifacts=artifacts,
                    unrecognized_examples=unrec, kind_counts=counts)


def _derive_facts(events: pl.DataFrame, facts: Facts, tz: str | None, bases: set[str] | None = None) -> None:
    """Facts the events themselves reveal: versions, host, and which clocks were assumed (``bases``: the
    ts_basis values of every row when ``events`` holds a sample)."""
    if events.is_empty():
        return
    ver = events.filter(pl.col("kind") == "version")
    for row in ver.iter_rows(named=True):
        a = json.loads(row["attrs"]) if row["attrs"] else {}
        comp, v = a.get("component"), a.get("version")
        if comp and v and comp not in facts.versions:
            facts.versions[str(comp)] = str(v)
    facts.sglang_version = facts.versions.get("sglang")
    if not facts.host:
        hosts = events.get_column("host").drop_nulls().unique().sort().to_list()
        if len(hosts) == 1:
            facts.host = hosts[0]
    if bases is None:
        bases = set(events.get_column("ts_basis").drop_nulls().unique().to_list())
    if "local-assumed" in bases:
        facts.tz_assumed = "UTC"
        facts.notes.append("Log stamps are host-local without a zone and the input gives no UTC offset: "
                           "they were read as UTC (pass --tz to correct).")
    elif tz:
        facts.tz_assumed = tz
    n_up = events.filter(pl.col("uptime_s").is_not_null() & pl.col("ts").is_null()).height
    if n_up:
        facts.notes.append(f"{n_up} kernel lines carry only seconds since boot and the input gives no boot "
                           "time: they are ordered but not placed on the clock.")


#: The timeline's public face: what `report`, `timeline` and the tests use.
__all__ = ["build_timeline", "write_parquet", "place_parquet", "hinted_format", "is_probe", "PROBE_FORMAT",
           "PARQUET_OPTIONS", "CHUNK_BYTES"]

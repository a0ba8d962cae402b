"""One file's text to timeline rows: the parser its content picks (a manifest's label only a hint),
transcripts split into segments, sentences left unread handed to the prose reader, and the failure
lines, launches and GPU names any text may hold."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import polars as pl

from forensics.inputs import InputFile, looks_binary
from parsers import registry
from parsers.routing import Routes
from parsers.schema import EVENT_SCHEMA, NotThisFormat, ParseResult


@dataclass
class Piece:
    """One parse: a whole file, or one segment of a transcript."""

    result: ParseResult
    start_line: int  # 1-based line of the file where the parsed text starts
    snapshot: int | None
    command: str | None = None



def parse_dt(value: Any) -> datetime | None:
    if not value or not isinstance(value, str):
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def is_binary(data: bytes) -> bool:
    return looks_binary(data[:8192])


def read_binary(f: InputFile) -> tuple[ParseResult | None, str | None, str | None] | None:
    """(result, format, error) for a file a binary parser claims (parsers.registry), else None."""
    from parsers.safe_pickle import MAX_BYTES, UnsafePickle

    fmt = registry.best_binary_format(f.head(registry.SNIFF_BYTES))
    if fmt is None:
        return None
    if f.nbytes > MAX_BYTES:
        return None, fmt, f"{f.nbytes:,} bytes, over the {MAX_BYTES:,}-byte limit for a pickle; not read"
    data = bytes(f.data) if not f.streamed else b"".join(f.chunks())
    try:
        return registry.binary_parsers()[fmt].parse_bytes(data, f.name), fmt, None
    except UnsafePickle as e:
        return None, fmt, f"not read: {e}"
    except NotThisFormat:
        return None


def stack_rows(text: str, name: str, parts: list[pl.DataFrame],
               routes: Routes | None = None) -> tuple[pl.DataFrame | None, set[int]]:
    """Stack and input dumps in a text (parsers.stack_dumps), stamped with the record before them (the
    ``Pyspy dump for PID`` line that introduced the tool's unstamped output), and the lines they newly read.
    ``routes``: the text's (parsers.routing), when it was routed."""
    from parsers import stack_dumps

    if routes is not None and not routes.maybe("stack_dumps"):
        return None, set()
    found = stack_dumps.parse(text, name).events  # four substring tests when the text holds neither dump
    if found.is_empty():
        return None, set()
    read = {n for a, b in found.select("line", "line_end").iter_rows() for n in range(a, (b or a) + 1)}
    for p in parts:
        if p.height:
            for a, b, kind in p.select("line", "line_end", "kind").iter_rows():
                if kind != "log" and a is not None:
                    read.difference_update(range(a, (b or a) + 1))
    stamped = [p.select("line", "ts", "ts_local", "ts_basis").filter(pl.col("ts").is_not_null()
                                                                     | pl.col("ts_local").is_not_null())
               for p in parts if p.height]
    if not stamped:
        return found, read
    before = pl.concat(stamped, how="vertical").sort("line").unique("line", keep="last", maintain_order=True)
    joined = found.drop("ts", "ts_local", "ts_basis").sort("line").join_asof(before, on="line", strategy="backward")
    return joined.select(found.columns), read


def to_members(frame: pl.DataFrame, parts: list[tuple[str, int]]) -> pl.DataFrame:
    """Rows of a joined rotation set (forensics.inputs.rotation) named by their member file and its own line."""
    if not frame.height:
        return frame
    starts = pl.Series([s for _n, s in parts], dtype=pl.Int64)
    idx = (starts.search_sorted(frame.get_column("line").fill_null(1).cast(pl.Int64), side="right") - 1).clip(0)
    known = pl.col("line").is_not_null()
    return frame.with_columns(_first=starts.gather(idx), _member=pl.Series([n for n, _s in parts]).gather(idx)).with_columns(
        file=pl.when(known).then(pl.col("_member")).otherwise(pl.col("file")),
        line=(pl.col("line") - pl.col("_first") + 1).cast(EVENT_SCHEMA["line"]),
        line_end=(pl.col("line_end") - pl.col("_first") + 1).cast(EVENT_SCHEMA["line_end"]),
    ).drop("_first", "_member")


def count_lines(text: str) -> int:
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def _run_parser(fmt: str, text: str, name: str, command: str | None) -> ParseResult:
    if fmt == "sglang" and len(text) > 1 << 20:  # same result, column-wise for the bulk lines
        from parsers import sglang_fast

        return sglang_fast.parse(text, name, command)
    mod = registry.get(fmt)
    if mod is None:
        raise NotThisFormat(f"no parser named {fmt}")
    return mod.parse(text, name, command)


def _transcript_pieces(text: str, name: str) -> list[Piece] | None:
    """Split a pasted session into segments and parse each; None if nothing in it is data."""
    from parsers import transcript

    segments = transcript.split(text, registry.sniffers())
    pieces: list[Piece] = []
    ordinal = 0
    lines = text.split("\n")
    for k, seg in enumerate(segments):
        if seg.format is None or seg.kind != "output":
            continue
        start, body = _with_container(segments, k, lines) if seg.format == "launch" else (seg.start_line, seg.text)
        try:
            res = _run_parser(seg.format, body, name, seg.command)
        except NotThisFormat:
            continue
        pieces.append(Piece(res, start, ordinal, seg.command))
        # a writer's sentence inside an output's block (``Mem: 384GB`` under an environment report): as for a whole file
        pieces += [Piece(p.result, start, None) for p in prose_in_unread(res, body, name)]
        ordinal += 1
    pieces += _prose_pieces(text, segments, name)
    if not pieces:
        return None
    # The commands typed matter even without output ("pkill -9 -f sglang" splits before from after);
    # prose was read as prose by the splitter, so it counts as recognised, not lost.
    cmd_rows = transcript.command_rows(segments)
    cmd_lines = sum(s.end_line - s.start_line + 1 for s in segments if s.kind in ("command", "prose"))
    pieces.append(Piece(ParseResult.from_rows(cmd_rows, source="transcript", path=name, lines=cmd_lines,
                                               recognized=cmd_lines), 1, None))
    return pieces


def _prose_pieces(text: str, segments: list, name: str) -> list[Piece]:
    """Launch settings and stated figures in the prose of a write-up, and launch commands typed in it.

    The prose parser sees only the prose lines (others blanked, so line numbers stay the file's); its
    lines are already counted as recognised by the transcript piece, so it reports none of its own.
    """
    from parsers import launch
    from parsers.launch import prose as launch_prose

    out: list[Piece] = []
    lines = text.split("\n")
    # prose, and text no parser claimed (a sentence that starts with `--flag` is not "prose" to the splitter);
    # a launch command inside either is a command, not a sentence
    keep = {n for s in segments if s.kind == "prose" or (s.kind == "output" and s.format is None)
            for n in range(s.start_line, s.end_line + 1)}
    for k, seg in enumerate(segments):
        if seg.kind == "output" and seg.format is None and launch.sniff(seg.text) > 0:
            start, body = _with_container(segments, k, lines)
            try:
                res = launch.parse(body, name)
            except NotThisFormat:
                continue
            if res.events.height:
                used: set[int] = set()
                for r in res.events.iter_rows(named=True):
                    used |= set(range(start + r["line"] - 1, start + r["line_end"]))
                keep -= used
                # lines nobody had claimed are now a command: recognised (the transcript counted none of them)
                res.lines, res.recognized, res.unrecognized = len(used), len(used), 0
                out.append(Piece(res, start, None))
    if keep:
        masked = "\n".join(ln if i + 1 in keep else "" for i, ln in enumerate(lines))
        res = launch_prose.parse(masked, name)
        if res.events.height:
            res.lines = res.recognized = res.unrecognized = 0
            out.append(Piece(res, 1, None))
    for seg in segments:
        if seg.kind == "command" and launch.sniff(seg.text) > 0:
            try:
                res = launch.parse(seg.text, name)
            except NotThisFormat:
                continue
            if res.events.height:
                res.lines = res.recognized = res.unrecognized = 0
                out.append(Piece(res, seg.start_line, None))
    return out


_CONTAINER_RUN_RE = re.compile(r"^\s*(?:sudo\s+)?(?:docker|podman|nvidia-docker)\s+(?:container\s+)?run\b")


def _with_container(segments: list, k: int, lines: list[str]) -> tuple[int, str]:
    """Segment ``k``'s first line and text, from the ``docker run`` typed just above it when the splitter took that
    as a command of its own (a code fence's first line, its options then ``...`` or a line break before the image
    and the server's command): the container's ``--memory`` is the limit the command's host pools must fit in."""
    seg = segments[k]
    prev = segments[k - 1] if k else None
    if prev is not None and prev.kind == "command" and _CONTAINER_RUN_RE.match(prev.text):
        return prev.start_line, "\n".join(lines[prev.start_line - 1:seg.end_line])
    return seg.start_line, seg.text


#: files whose name says what their content is when the content alone cannot (a cgroup file holds a bare
#: number: Linux Documentation/admin-guide/cgroup-v2.rst, ``memory.max``; cgroup v1 ``memory.limit_in_bytes``)
NAMED_FORMATS = {"memory.max": "container_limits", "memory.limit_in_bytes": "container_limits"}


def hinted_format(hint: str | None, head: str) -> str | None:
    """The manifest's format for a file when its content does not say otherwise, else None.

    Formats are decided by content everywhere (a loose file, a folder, a bundle): a manifest's label
    is the collector's expectation, e.g. a log found through an SGLang process's stdout, and a wrong
    one (a vLLM log given with ``--log`` to an older collector labelled SGLang) must not override
    the content. The hint holds when no sniffer is sure of the content, or when the hinted parser's
    sniffer scores at least as high as the best (docs/bundle.md).
    """
    if not hint or registry.get(hint) is None:
        return None
    best, score = registry.best_format(head)
    if best is None or best == hint or registry.sniff_scores(head).get(hint, 0.0) >= score:
        return hint
    return None


def writer_format(stream: Any, art: dict | None) -> dict | None:
    """``art`` with the format the Ray tags of an enveloped stream name, when nothing else says what it is.

    Ray's ``(actor pid=N)`` prefix is peeled before sniffing, and with it the only sign of the writer in a
    fragment that has no record headers (vLLM's ``(EngineCore_DP0 pid=N)`` traceback): the head is sniffed again
    with the tags put back, and a format sure of it becomes the stream's hint (a hint, so content still decides:
    :func:`hinted_format`)."""
    if stream.raw or (art and art.get("format")):
        return art
    head = stream.text[: registry.SNIFF_BYTES]
    if registry.best_format(head)[0] is not None:
        return art
    tagged = stream.ray_tagged_head()
    fmt = registry.best_format(tagged)[0] if tagged else None
    return {**(art or {}), "format": fmt} if fmt else art


def parse_file(f: InputFile, text: str, art: dict | None) -> tuple[list[Piece], str | None]:
    """Parse one file; returns the pieces and the format label for the inventory."""
    snapshot = art.get("snapshot") if art else None
    head = text[: registry.SNIFF_BYTES]
    fmt = hinted_format((art.get("format") if art else None) or NAMED_FORMATS.get(f.name.rsplit("/", 1)[-1]), head)
    if fmt is not None:
        try:
            return [Piece(_run_parser(fmt, text, f.name, _argv_command(art) if art else None), 1, snapshot)], fmt
        except NotThisFormat:
            pass  # the manifest's word is a hint; content decides
    best, score = registry.best_format(head)
    from parsers import transcript

    t_score = transcript.looks_like_transcript(head)
    if best is not None and score >= t_score:
        try:
            whole = Piece(_run_parser(best, text, f.name, None), 1, snapshot)
        except NotThisFormat:
            pass
        else:
            return [whole, *prose_in_unread(whole.result, text, f.name)], best
    pieces = _transcript_pieces(text, f.name)
    if pieces:
        fmts = sorted({p.result.source for p in pieces if p.result.source != "transcript"})
        return pieces, "transcript[" + ",".join(fmts) + "]"
    return [], None


def prose_in_unread(res: ParseResult, text: str, name: str) -> list[Piece]:
    """Sentences a format's parser left unread in a mixed paste (a kernel log with "we launched with --tp 8
    --hicache-size 100" and "the host has 512 GB of RAM" under it): every segment goes to the parser it fits,
    so the prose parser reads them, at its own (lower) weight.

    Only when the parser listed every line it did not understand (a ticket-sized remainder): the cost stays
    that of those lines, and a long log's unread lines are its own chatter, not a writer's sentences.
    """
    from parsers.launch import prose as launch_prose

    unread = res.unrecognized_examples
    if not unread or res.unrecognized != len(unread):
        return []
    keep = {n for n, _ in unread}
    masked = "\n".join(ln if i + 1 in keep else "" for i, ln in enumerate(text.split("\n")))
    prose = launch_prose.parse(masked, name)
    if not prose.events.height:
        return []
    read = {n for a, b in zip(prose.events.get_column("line").to_list(),
                              prose.events.get_column("line_end").fill_null(prose.events.get_column("line")).to_list(), strict=True)
            if a is not None for n in range(int(a), int(b or a) + 1)} & keep
    # the lines the prose parser read are now recognised, by it, not the format's parser
    res.recognized += len(read)
    res.unrecognized -= len(read)
    res.unrecognized_examples = [(n, ln) for n, ln in unread if n not in read]
    prose.lines = prose.recognized = prose.unrecognized = 0
    return [Piece(prose, 1, None)]


#: Kinds with which a format's own parser already reports a failure: the failure scan's row for a line
#: inside one of these records is the same news and is dropped.
REPORTED_FAILURE_KINDS = frozenset({
    "cuda_oom", "cuda_error_oom", "cuda_graph_failed", "scheduler_exception", "not_enough_memory",
    "weights_no_kv_room", "hicache_insufficient", "ranks_not_loaded", "watchdog_timeout", "sigquit", "rank_dead",
    "subprocess_crashed", "health_check_failed", "init_failed", "nccl_watchdog", "nccl_info", "kv_exhausted",
    "memory_leak", "memory_imbalance", "retract", "oom_kill", "oom_reaper", "xid", "gpu_fallen_off_bus", "hung_task",
    "gpu_error", "amdgpu_fault", "failure", "kv_cache_too_small", "kv_no_room", "preemption", "engine_dead", "worker_dead",
    # vLLM's own (parsers/vllm.py)
    "exception", "cuda_error", "gpu_memory_short", "swap_space_too_large", "swap_exhausted", "nccl_error",
    "rpc_timeout", "shm_wait", "memory_profiling_error",
    # Gloo's start-up connections, read by either engine's parser and by the failure scan
    "dist_transport",
})
#: Kinds that stand for lines no parser understood (they stay unrecognised unless the scan reads them).
_UNREAD_KINDS = ("log",)


def _scan_failures(text: str, name: str, routes: Routes | None = None) -> pl.DataFrame:
    """The failure scan of a text, through its envelopes when it has any (lines mapped back to the file's).
    ``routes``: the routes of a text known to have no envelope (parsers.routing): only its candidate
    lines are looked at."""
    from parsers import envelopes, failures

    if routes is not None:
        lines = routes.for_lines("failures")
        cand = [i for i, _ in lines] if lines is not None and routes.plain_breaks else None
        return failures.parse(text, name, candidates=cand).events
    peeled = envelopes.peel(text)
    if peeled is None:
        return failures.parse(text, name).events
    frames = []
    for stream in peeled.streams:
        ev = failures.parse(stream.text, name, tags=_ray_tags(stream)).events
        if ev.is_empty():
            continue
        orig = pl.Series(stream.lines, dtype=pl.Int64)
        last = len(stream.lines) - 1
        at = (ev.get_column("line") - 1).clip(0, last)
        at_end = (ev.get_column("line_end").fill_null(ev.get_column("line")) - 1).clip(0, last)
        frames.append(ev.with_columns(line=orig.gather(at), line_end=orig.gather(at_end)))
    return pl.concat(frames, how="vertical") if frames else failures.parse("", name).events


def _ray_tags(stream: Any) -> Callable[[int], dict[str, Any]] | None:
    """Ray's tag of each peeled line (the envelope's ``ray`` layer: pid, actor, ip), for the failure scan's rows."""
    metas = stream.meta
    if not any(m is not None and "ray" in m.envelope for m in metas):
        return None

    def tag(i: int) -> dict[str, Any]:
        m = metas[i] if 0 <= i < len(metas) else None
        if m is None or "ray" not in m.envelope:
            return {}
        return {k: v for k, v in (("pid", m.pid), ("ray_actor", m.ray_actor), ("ip", m.ray_ip)) if v is not None}
    return tag


def embedded_launches(text: str, name: str, parts: list[pl.DataFrame],
                      routes: Routes | None = None) -> pl.DataFrame | None:
    """Launch commands inside a text its own parser read as something else (a ticket whose traceback made it
    a log, a log that echoes its command): the configuration counts wherever it is written."""
    from parsers import launch

    if routes is not None and not routes.maybe("launch"):
        return None
    if any(p.height and p.get_column("kind").is_in(["launch_command"]).any() for p in parts):
        return None
    if not launch.mentions_launch(text):
        return None
    try:
        found = launch.parse(text, name).events
    except NotThisFormat:
        return None
    return found if found.height else None


def failure_rows(text: str, name: str, parts: list[pl.DataFrame],
                 routes: Routes | None = None) -> tuple[pl.DataFrame | None, set[int]]:
    """Failure lines of ``text`` that its parsers did not already report, and the lines they newly read.
    ``routes``: given for a text known to have no envelope, its routes (parsers.routing).

    Every text read whole is scanned (``parsers.failures``): a traceback pasted into a ticket, a CUDA
    error in a log whose format is otherwise unknown, an OOM line between records. A row is kept when
    no parsed record of a failure kind covers its line; it takes the run of the record before it, so it
    joins that server run.
    """
    found = _scan_failures(text, name, routes)
    if found.is_empty():
        return None, set()
    parsed = pl.concat([p.select("line", "line_end", "kind", "run") for p in parts], how="vertical") \
        if parts else pl.DataFrame(schema={"line": pl.Int64, "line_end": pl.Int64, "kind": pl.Utf8, "run": pl.Int32})
    # which of the found rows' lines parsed rows cover: only rows that span several lines or start on one
    # of those lines can (a long log's hundreds of thousands of one-line batch rows are not stepped through)
    wanted = {x for a, b in found.select("line", "line_end").iter_rows() for x in range(a, b + 1)}
    spans = parsed.select("line", pl.col("line_end").fill_null(pl.col("line")).alias("end"), "kind")
    near = spans.filter((pl.col("end") > pl.col("line")) | pl.col("line").is_in(sorted(wanted)))
    reported: set[int] = set()
    read: set[int] = set()
    for line, end, kind in near.iter_rows():
        span = range(int(line), int(end) + 1)
        if kind in REPORTED_FAILURE_KINDS:
            reported.update(span)
        if kind not in _UNREAD_KINDS:
            read.update(span)
    keep = [i for i, (a, b) in enumerate(found.select("line", "line_end").iter_rows())
            if not any(x in reported for x in range(a, b + 1))]
    if not keep:
        return None, set()
    found = found[keep]
    runs = parsed.filter(pl.col("run").is_not_null()).select("line", "run").sort("line")
    if runs.height:
        found = found.drop("run").sort("line").join_asof(runs, on="line", strategy="backward") \
            .with_columns(pl.col("run").fill_null(pl.lit(0, dtype=pl.Int32))).select(found.columns)
    newly = {x for a, b in found.select("line", "line_end").iter_rows() for x in range(a, b + 1)} - read
    return found, newly


def _argv_command(art: dict) -> str | None:
    argv = art.get("argv")
    if isinstance(argv, list):
        return " ".join(str(a) for a in argv)
    return None


def shift(frame: pl.DataFrame, start_line: int, snapshot: int | None) -> pl.DataFrame:
    exprs = []
    if start_line > 1:
        exprs += [pl.col("line") + (start_line - 1), pl.col("line_end") + (start_line - 1)]
    if snapshot is not None:
        exprs.append(pl.col("snapshot").fill_null(pl.lit(snapshot, dtype=pl.Int32)))
    return frame.with_columns(exprs) if exprs else frame



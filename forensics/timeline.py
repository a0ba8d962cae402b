"""Assemble the timeline: inputs → the right parser per file or transcript segment → one frame in UTC.

This is the only place that knows both bundles and parsers: it maps manifest artifacts to their
parser, sniffs loose files by content, splits pasted transcripts into segments, shifts segment
line numbers back to file lines, and turns every stamp into UTC while saying which clock it
assumed (DESIGN.md §5 "Time").
"""

from __future__ import annotations

import json
import os
import time
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import polars as pl

from parsers import registry
from parsers.schema import EVENT_SCHEMA, NotThisFormat, ParseResult, empty_frame

from .inputs import InputError, InputFile, iter_text, read_inputs
from .model import Artifact, Facts, Timeline

Progress = Callable[[str], None]
#: Big files are parsed this much at a time (cut at a line end).
CHUNK_BYTES = 32 << 20


@dataclass
class _Piece:
    """One parse: a whole file, or one segment of a transcript."""

    result: ParseResult
    start_line: int  # 1-based line of the file where the parsed text starts
    snapshot: int | None
    command: str | None = None


def _parse_dt(value: Any) -> datetime | None:
    if not value or not isinstance(value, str):
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def _is_binary(data: bytes) -> bool:
    head = data[:8192]
    return bool(head) and head.count(b"\x00") > len(head) // 10


def _count_lines(text: str) -> int:
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


def _stream_sglang(f: InputFile, art: dict | None, progress: Progress | None
                   ) -> tuple[list[pl.DataFrame], ParseResult] | None:
    """A big file the manifest or the sniffer calls SGLang, parsed chunk by chunk; None if it is not."""
    from parsers import sglang_fast

    fmt = art.get("format") if art else None
    if not (fmt and registry.get(fmt) is not None):
        head = f.head(registry.SNIFF_BYTES).decode("utf-8", errors="replace")
        fmt, _score = registry.best_format(head)
    if fmt != "sglang":
        return None
    st = sglang_fast.Stream(f.name)
    frames: list[pl.DataFrame] = []
    done, t0, said = 0, time.monotonic(), time.monotonic()
    for chunk in f.chunks(CHUNK_BYTES):
        fr = st.feed(chunk)
        if fr.height:
            frames.append(fr)
        done += len(chunk)
        now = time.monotonic()
        if progress and now - said >= 2:
            said = now
            rate = done / max(now - t0, 1e-9) / (1 << 20)
            progress(f"  {f.name}: {done / (1 << 20):,.0f} of {f.nbytes / (1 << 20):,.0f} MiB ({rate:,.0f} MiB/s)")
    try:
        last, res = st.finish()
    except NotThisFormat:
        return None
    if last.height:
        frames.append(last)
    return frames, res


def _transcript_pieces(text: str, name: str) -> list[_Piece] | None:
    """Split a pasted session into segments and parse each; None if nothing in it is data."""
    from parsers import transcript

    segments = transcript.split(text, registry.sniffers())
    pieces: list[_Piece] = []
    ordinal = 0
    for seg in segments:
        if seg.format is None or seg.kind != "output":
            continue
        try:
            res = _run_parser(seg.format, seg.text, name, seg.command)
        except NotThisFormat:
            continue
        pieces.append(_Piece(res, seg.start_line, ordinal, seg.command))
        ordinal += 1
    if not pieces:
        return None
    # The commands typed matter even without output ("pkill -9 -f sglang" splits before from after);
    # prose was read as prose by the splitter, so it counts as recognised, not lost.
    cmd_rows = transcript.command_rows(segments)
    cmd_lines = sum(s.end_line - s.start_line + 1 for s in segments if s.kind in ("command", "prose"))
    pieces.append(_Piece(ParseResult.from_rows(cmd_rows, source="transcript", path=name, lines=cmd_lines,
                                               recognized=cmd_lines), 1, None))
    return pieces


def _parse_file(f: InputFile, text: str, art: dict | None) -> tuple[list[_Piece], str | None]:
    """Parse one file; returns the pieces and the format label for the inventory."""
    snapshot = art.get("snapshot") if art else None
    fmt = art.get("format") if art else None
    if fmt and registry.get(fmt) is not None:
        try:
            return [_Piece(_run_parser(fmt, text, f.name, _argv_command(art)), 1, snapshot)], fmt
        except NotThisFormat:
            pass  # the manifest's word is a hint; content decides
    head = text[: registry.SNIFF_BYTES]
    best, score = registry.best_format(head)
    from parsers import transcript

    t_score = transcript.looks_like_transcript(head)
    if best is not None and score >= t_score:
        try:
            return [_Piece(_run_parser(best, text, f.name, None), 1, snapshot)], best
        except NotThisFormat:
            pass
    pieces = _transcript_pieces(text, f.name)
    if pieces:
        fmts = sorted({p.result.source for p in pieces if p.result.source != "transcript"})
        return pieces, "transcript[" + ",".join(fmts) + "]"
    return [], None


def _argv_command(art: dict) -> str | None:
    argv = art.get("argv")
    if isinstance(argv, list):
        return " ".join(str(a) for a in argv)
    return None


def _shift(frame: pl.DataFrame, start_line: int, snapshot: int | None) -> pl.DataFrame:
    exprs = []
    if start_line > 1:
        exprs += [pl.col("line") + (start_line - 1), pl.col("line_end") + (start_line - 1)]
    if snapshot is not None:
        exprs.append(pl.col("snapshot").fill_null(pl.lit(snapshot, dtype=pl.Int32)))
    return frame.with_columns(exprs) if exprs else frame


def _resolve_time(frame: pl.DataFrame, facts: Facts, tz: str | None, capture: datetime | None) -> pl.DataFrame:
    """Fill ``ts`` (UTC) and ``ts_basis`` from whatever clock each row carries."""
    if frame.is_empty():
        return frame
    local = pl.col("ts_local")
    if tz:
        local_utc = local.dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null").dt.convert_time_zone("UTC")
        local_basis = "local+tz"
    elif facts.utc_offset_s is not None:
        local_utc = (local - pl.duration(seconds=facts.utc_offset_s)).dt.replace_time_zone("UTC")
        local_basis = "local+offset"
    else:
        local_utc = local.dt.replace_time_zone("UTC")
        local_basis = "local-assumed"
    if facts.boot_time is not None:
        boot = facts.boot_time.astimezone(UTC).replace(tzinfo=None)
        up_utc = (pl.lit(boot) + pl.duration(microseconds=(pl.col("uptime_s") * 1e6).cast(pl.Int64))
                  ).dt.replace_time_zone("UTC")
    else:
        up_utc = pl.lit(None, dtype=EVENT_SCHEMA["ts"])
    cap = pl.lit(capture.astimezone(UTC).replace(tzinfo=None)).dt.replace_time_zone("UTC") if capture else \
        pl.lit(None, dtype=EVENT_SCHEMA["ts"])
    has_ts = pl.col("ts").is_not_null()
    has_local = local.is_not_null()
    has_up = pl.col("uptime_s").is_not_null() & pl.lit(facts.boot_time is not None)
    has_cap = pl.lit(capture is not None)
    return frame.with_columns(
        ts=pl.when(has_ts).then(pl.col("ts"))
        .when(has_local).then(local_utc)
        .when(has_up).then(up_utc)
        .when(has_cap).then(cap)
        .otherwise(None).cast(EVENT_SCHEMA["ts"]),
        ts_basis=pl.when(has_ts).then(pl.lit("source-utc"))
        .when(has_local).then(pl.lit(local_basis))
        .when(has_up).then(pl.lit("uptime+boot"))
        .when(has_cap).then(pl.lit("capture"))
        .otherwise(pl.lit("none")),
    )


def _facts_from_manifest(m: dict | None, paths: list[str]) -> Facts:
    facts = Facts(input_paths=[str(p) for p in paths], manifest=m)
    if not m:
        return facts
    facts.host = m.get("host")
    facts.collected_at = _parse_dt(m.get("ended_at") or m.get("started_at"))
    off = m.get("utc_offset_s")
    facts.utc_offset_s = int(off) if isinstance(off, int | float) else None
    facts.boot_time = _parse_dt(m.get("boot_time"))
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


def build_timeline(paths: list[str | os.PathLike], tz: str | None = None,
                   progress: Progress | None = None) -> Timeline:
    """Read INPUT paths and return the assembled timeline. Raises InputError for bad input."""
    if tz:
        try:
            zoneinfo.ZoneInfo(tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise InputError(f"unknown time zone {tz!r} (use an IANA name such as Asia/Shanghai or UTC)") from None
    inp = read_inputs([str(p) for p in paths])
    facts = _facts_from_manifest(inp.manifest, [str(p) for p in paths])
    facts.gaps.extend(f"skipped {s}" for s in inp.skipped)
    arts_by_path = {a.get("path"): a for a in (inp.manifest or {}).get("artifacts") or []}
    frames: list[pl.DataFrame] = []
    coverage: list[dict[str, Any]] = []
    artifacts: list[Artifact] = []
    unrec: dict[str, list[tuple[int, str]]] = {}
    notes: list[str] = []
    for f in inp.files:
        art = arts_by_path.get(f.name)
        artifact = Artifact(path=f.name, format=None, bytes=f.nbytes, lines=0,
                            timed_out=bool(art and art.get("timed_out")),
                            truncated=bool(art and art.get("truncated")),
                            rc=art.get("rc") if art else None, error=art.get("error") if art else None)
        artifacts.append(artifact)
        text = None if f.streamed else next(iter_text([f]))[1]
        if text is not None:
            artifact.lines = _count_lines(text)
        if _is_binary(f.head(8192)):
            artifact.error = "binary file, not read"
            coverage.append({"file": f.name, "format": None, "lines": 0, "recognized": 0, "unrecognized": 0})
            continue
        if progress:
            progress(f"reading {f.name} ({f.nbytes:,} bytes)")
        capture = _parse_dt(art.get("started")) if art else None
        streamed = _stream_sglang(f, art, progress) if f.streamed else None
        if streamed is not None:
            s_frames, res = streamed
            artifact.format = "sglang"
            artifact.lines = res.lines
            notes.extend(res.notes)
            snap = art.get("snapshot") if art else None
            frames.extend(_resolve_time(_shift(fr, 1, snap), facts, tz, capture) for fr in s_frames)
            if res.unrecognized_examples:
                unrec[f.name] = sorted(res.unrecognized_examples)[:20]
            coverage.append({"file": f.name, "format": "sglang", "lines": res.lines,
                             "recognized": min(res.recognized, res.lines),
                             "unrecognized": res.lines - min(res.recognized, res.lines)})
            continue
        if text is None:
            text = next(iter_text([f]))[1]
        n_lines = _count_lines(text)
        artifact.lines = n_lines
        pieces, label = _parse_file(f, text, art)
        artifact.format = label
        recognized = 0
        examples: list[tuple[int, str]] = []
        for piece in pieces:
            res = piece.result
            recognized += res.recognized
            examples += [(ln + piece.start_line - 1, t) for ln, t in res.unrecognized_examples]
            notes.extend(res.notes)
            if piece.command or piece.snapshot is not None:
                artifact.segments.append({"start_line": piece.start_line, "format": res.source,
                                          "command": piece.command, "lines": res.lines})
            fr = _shift(res.events, piece.start_line, piece.snapshot)
            fr = _resolve_time(fr, facts, tz, capture)
            frames.append(fr)
        recognized = min(recognized, n_lines)
        if not pieces:
            examples = [(i + 1, ln) for i, ln in enumerate(text.splitlines()[:20]) if ln.strip()]
        if examples:
            unrec[f.name] = sorted(examples)[:20]
        coverage.append({"file": f.name, "format": label, "lines": n_lines, "recognized": recognized,
                         "unrecognized": n_lines - recognized})
        del text
    events = pl.concat(frames, how="vertical") if frames else empty_frame()
    if facts.host:
        events = events.with_columns(pl.col("host").fill_null(facts.host))
    events = events.sort(["ts", "file", "line"], nulls_last=True, maintain_order=True)
    _derive_facts(events, facts, tz)
    facts.notes.extend(dict.fromkeys(notes))
    return Timeline(events=events, facts=facts, coverage=coverage, artifacts=artifacts,
                    unrecognized_examples=unrec)


def _derive_facts(events: pl.DataFrame, facts: Facts, tz: str | None) -> None:
    """Facts the events themselves reveal: versions, host, and which clocks were assumed."""
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


def write_parquet(tl: Timeline, path: str | os.PathLike) -> None:
    """timeline.parquet: zstd, the event schema, plus the facts as file metadata."""
    import pyarrow.parquet as pq

    table = tl.events.to_arrow()
    meta = dict(table.schema.metadata or {})
    meta[b"forensics.facts"] = json.dumps(_facts_json(tl.facts), sort_keys=True).encode()
    meta[b"forensics.coverage"] = json.dumps(tl.coverage, sort_keys=True).encode()
    table = table.replace_schema_metadata(meta)
    pq.write_table(table, str(path), compression="zstd")


def _facts_json(f: Facts) -> dict[str, Any]:
    def iso(d: datetime | None) -> str | None:
        return d.astimezone(UTC).isoformat().replace("+00:00", "Z") if d else None

    return {
        "input_paths": f.input_paths, "host": f.host, "collected_at": iso(f.collected_at),
        "utc_offset_s": f.utc_offset_s, "tz_assumed": f.tz_assumed, "boot_time": iso(f.boot_time),
        "sglang_version": f.sglang_version, "versions": f.versions, "gaps": f.gaps, "notes": f.notes,
    }


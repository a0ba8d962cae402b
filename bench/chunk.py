#!/usr/bin/env python3
"""Where one streamed chunk's CPU goes in `forensics timeline`: the scan, the rows, the clock, redaction,
the sampler, Arrow, and the Parquet encoding of each column group.

    python bench/chunk.py                      # chunks of tp0.log of bench/run.py's 256 MB set
    python bench/chunk.py --file LOG --chunks 4
    python bench/chunk.py --options            # also the encoder's options, each tried on the same chunks
    python bench/chunk.py --root ../main       # the same stages of another checkout (before/after)

Each stage runs on the same chunks (CHUNK_BYTES each) in one process, five times; the medians are
printed in milliseconds per chunk and as a share of the whole. Shares are what to compare across
machines.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _chunks(path: Path, n: int, size: int) -> list[bytes]:
    out = []
    with open(path, "rb") as fh:
        fh.seek(size)  # past the start-up: a chunk of the running server, as most chunks are
        rest = b""
        while len(out) < n:
            data = rest + fh.read(size - len(rest))
            if not data:
                break
            cut = data.rfind(b"\n") + 1
            out.append(data[:cut])
            rest = data[cut:]
    return out


def _ms(fn, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return 1000 * statistics.median(times)


def _encode(table, **opts) -> int:
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf, **opts)
    return buf.tell()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", type=Path, default=HERE / "_data" / "set-268435456" / "logs" / "tp0.log")
    ap.add_argument("--chunks", type=int, default=2)
    ap.add_argument("--options", action="store_true", help="also time the encoder's options")
    ap.add_argument("--root", type=Path, default=HERE.parent, help="the checkout to measure (default: this one)")
    args = ap.parse_args()
    sys.path.insert(0, str(args.root.resolve()))

    import polars as pl

    from forensics.model import Facts
    from forensics.redact import redact_frame
    from forensics.timeline import CHUNK_BYTES, _Sampler
    from forensics.timeline.clock import resolve_time
    from forensics.timeline.parquet import PARQUET_OPTIONS
    from forensics.timeline.parse import shift
    from parsers import bulkscan, sglang_fast
    from parsers.schema import EVENT_SCHEMA

    chunks = _chunks(args.file, args.chunks, CHUNK_BYTES)
    if not chunks:
        print(f"{args.file}: no data", file=sys.stderr)
        return 2
    facts = Facts()

    def rows(c: bytes) -> pl.DataFrame:
        st = sglang_fast.Stream("tp0.log")
        st.native = bulkscan.available()
        return st.feed(c)

    frames = [rows(c) for c in chunks]
    timed = [resolve_time(shift(f, 1, None), facts, None, None) for f in frames]
    tables = [f.to_arrow().cast(pl.DataFrame(schema=EVENT_SCHEMA).to_arrow().schema) for f in timed]
    stages: dict[str, float] = {}
    n = len(chunks)
    if bulkscan.available():
        stages["native scan (bulkscan.scan)"] = sum(_ms(lambda c=c: bulkscan.scan(c)) for c in chunks) / n
    stages["rows (Stream.feed, scan included)"] = sum(_ms(lambda c=c: rows(c)) for c in chunks) / n
    stages["clock (shift + resolve_time)"] = sum(_ms(lambda f=f: resolve_time(shift(f, 1, None), facts, None, None))
                                                 for f in frames) / n
    stages["redaction"] = sum(_ms(lambda f=f: redact_frame(f)) for f in timed) / n
    stages["sampler"] = sum(_ms(lambda f=f: _Sampler(1 << 30).keep(f)) for f in timed) / n
    stages["to_arrow"] = sum(_ms(lambda f=f: f.to_arrow()) for f in timed) / n
    text_cols = ["text"]
    attrs_cols = [c for c in ("attrs", "fields", "figures") if c in tables[0].column_names]
    rest_cols = [c for c in tables[0].column_names if c not in text_cols + attrs_cols]

    def enc(cols: list[str]) -> float:
        return sum(_ms(lambda t=t: _encode(t.select(cols), **_opts(PARQUET_OPTIONS, cols))) for t in tables) / n

    stages["parquet: text"] = enc(text_cols)
    stages[f"parquet: {' + '.join(attrs_cols)}"] = enc(attrs_cols)
    stages["parquet: the other columns"] = enc(rest_cols)
    total = sum(v for k, v in stages.items() if not k.startswith("native"))
    print(f"{args.file.name}: {n} chunk(s) of {CHUNK_BYTES >> 20} MiB, {sum(t.num_rows for t in tables) // n:,} rows each; "
          f"CPU ms per chunk (median of 5)")
    for k, v in stages.items():
        share = "" if k.startswith("native") else f"{100 * v / total:5.1f}%"
        print(f"  {k:<40} {v:8.1f} ms {share}")
    print(f"  {'total (scan counted once)':<40} {total:8.1f} ms")
    sizes = {c: sum(_encode(t.select([c]), **_opts(PARQUET_OPTIONS, [c])) for t in tables) // n
             for c in tables[0].column_names}
    big = sorted(sizes.items(), key=lambda kv: -kv[1])[:6]
    print(f"Parquet bytes per chunk: {sum(_encode(t, **PARQUET_OPTIONS) for t in tables) // n:,}; largest columns: "
          + ", ".join(f"{c} {b:,}" for c, b in big))
    if args.options:
        base = dict(PARQUET_OPTIONS)
        trials = {
            "as written": base,
            "zstd 3": {**base, "compression_level": 3},
            "lz4": {**base, "compression": "lz4", "compression_level": None},
            "snappy": {**base, "compression": "snappy", "compression_level": None},
            "dictionary everywhere": {**base, "use_dictionary": True, "column_encoding": None},
            "no dictionary": {**base, "use_dictionary": False},
            "row groups of 16k rows": {**base, "row_group_size": 16384},
            "pages of 64 KiB": {**base, "data_page_size": 64 << 10},
            "pages of 4 MiB": {**base, "data_page_size": 4 << 20},
        }
        print("encoder options (whole table, ms per chunk, bytes per chunk):")
        for name, opts in trials.items():
            o = {k: v for k, v in opts.items() if v is not None}
            ms = sum(_ms(lambda t=t, o=o: _encode(t, **o)) for t in tables) / n
            size = sum(_encode(t, **o) for t in tables) // n
            print(f"  {name:<28} {ms:8.1f} ms {size:>12,} B")
    return 0


def _opts(opts: dict, cols: list[str]) -> dict:
    """The writer's options restricted to ``cols`` (per-column lists name only columns that exist)."""
    out = dict(opts)
    for k in ("use_dictionary", "write_statistics"):
        if isinstance(out.get(k), list):
            out[k] = [c for c in out[k] if c in cols]
    if isinstance(out.get("column_encoding"), dict):
        out["column_encoding"] = {c: e for c, e in out["column_encoding"].items() if c in cols}
    return out


if __name__ == "__main__":
    sys.exit(main())

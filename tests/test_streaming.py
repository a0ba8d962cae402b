"""Big inputs are streamed: the timeline of a file read chunk by chunk equals the one read whole."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
from polars.testing import assert_frame_equal

from forensics import inputs, timeline
from tests.test_perf_equivalence import _mix


def _write_set(root: Path, seed: int) -> None:
    (root / "logs").mkdir(parents=True)
    for r in range(2):
        lines = _mix(seed + r, 250)
        (root / "logs" / f"tp{r}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "free.txt").write_text("               total        used        free      shared  buff/cache   available\n"
                                   "Mem:        1000000      500000      500000           0           0      500000\n")


def test_streamed_timeline_equals_whole(tmp_path, monkeypatch) -> None:
    _write_set(tmp_path, 11)
    whole = timeline.build_timeline([tmp_path])
    said: list[str] = []
    monkeypatch.setattr(inputs, "STREAM_BYTES", 10_000)  # the rank logs are ~60 KB: streamed
    monkeypatch.setattr(timeline, "CHUNK_BYTES", 9_999)  # cuts inside records, at odd places
    monkeypatch.setattr(timeline.time, "monotonic", iter(range(0, 10**6, 3)).__next__)  # progress every chunk
    streamed = timeline.build_timeline([tmp_path], progress=said.append)
    assert_frame_equal(whole.events, streamed.events)
    assert whole.coverage == streamed.coverage
    assert whole.unrecognized_examples == streamed.unrecognized_examples
    assert [a.bytes for a in whole.artifacts] == [a.bytes for a in streamed.artifacts]
    assert any("MiB/s" in s for s in said)
    assert streamed.events.filter(pl.col("kind") == "decode_batch").height > 150


def test_chunks_end_at_line_ends(tmp_path) -> None:
    p = tmp_path / "x.log"
    rng = random.Random(5)
    data = b"".join(b"a" * rng.randint(0, 300) + b"\n" for _ in range(2000)) + b"tail-without-newline"
    p.write_bytes(data)
    f = inputs.InputFile(name="x.log", data=b"", origin=str(p), path=p, size=len(data))
    parts = list(f.chunks(1000))
    assert b"".join(parts) == data
    assert all(c.endswith(b"\n") for c in parts[:-1]) and len(parts) > 10
    assert f.head(5) == data[:5] and f.nbytes == len(data)

"""The fast SGLang paths (parsers.sglang_fast) give exactly what parsers.sglang.parse gives.

Every test runs twice: with the compiled bulk-line scanner (parsers/_native, skipped where it was not
built) and with the polars path that stands in for it.

Real logs from ../shared (skipped when absent), our fixtures, and generated text that mixes every odd
case the fast path must either read identically or leave to the scanner: multi-line records between
batch lines, glued tqdm, runs, CRLF, percent/negative/boolean/huge values, iteration numbers, labels
with extra ranks, impossible stamps, non-ASCII lines, and chunk boundaries anywhere.
"""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from parsers import bulkscan, sglang, sglang_fast
from parsers.schema import NotThisFormat


@pytest.fixture(autouse=True, params=["native", "polars"])
def fast_path(request, monkeypatch) -> str:
    if request.param == "native":
        if not bulkscan.available():
            pytest.skip(f"native scanner not available: {bulkscan.why_not}")
        # read every chunk but the smallest in two halves on two threads, as big chunks are
        monkeypatch.setattr(bulkscan, "SPLIT_BYTES", 256)
    else:
        monkeypatch.setattr(bulkscan, "available", lambda: False)
    return request.param

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "sglang_real_logs"


def _same(text: str, name: str = "f.log", chunks: list[int] | None = None) -> pl.DataFrame:
    try:
        a = sglang.parse(text, name)
    except NotThisFormat:
        with pytest.raises(NotThisFormat):
            sglang_fast.parse(text, name)
        return pl.DataFrame()
    if chunks is None:
        b = sglang_fast.parse(text, name)
        events = b.events
    else:  # feed the text cut at these line numbers, as the timeline streams a big file
        lines = text.splitlines(keepends=True)
        st = sglang_fast.Stream(name)
        frames, start = [], 0
        for cut in [*chunks, len(lines)]:
            frames.append(st.feed(bytearray("".join(lines[start:cut]).encode())))  # as inputs.chunks gives
            start = cut
        last, b = st.finish()
        frames.append(last)
        events = pl.concat(frames, how="vertical")
    assert_frame_equal(a.events, events)
    assert (a.lines, a.recognized, a.unrecognized, a.unrecognized_examples, a.notes) == \
        (b.lines, b.recognized, b.unrecognized, b.unrecognized_examples, b.notes)
    return events


def _real_logs() -> list[Path]:
    return sorted(REAL.glob("*.log")) if REAL.is_dir() else []


@pytest.mark.skipif(not _real_logs(), reason="../shared/sglang_real_logs not present")
@pytest.mark.parametrize("path", _real_logs(), ids=lambda p: p.name)
def test_real_logs_identical(path: Path) -> None:
    _same(path.read_text(encoding="utf-8", errors="replace"), path.name)


def test_fixture_logs_identical() -> None:
    files = sorted(p for p in (ROOT / "fixtures").rglob("*.log") if p.is_file())
    assert files
    for p in files:
        _same(p.read_text(encoding="utf-8", errors="replace"), p.name)


S = "[2025-11-20 11:02:{:02d}{}] "


def _decode(rng: random.Random, label: str = " DP0 TP0 EP0", sec: int = 1) -> str:
    return (S.format(sec % 60, label) + f"Decode batch, #running-req: {rng.randint(0, 64)}, #token: {rng.randint(0, 9999)}, "
            f"token usage: {rng.random():.2f}, cuda graph: {rng.choice(['True', 'False'])}, "
            f"gen throughput (token/s): {rng.uniform(0, 2000):.2f}, #queue-req: {rng.randint(0, 9)}, ")


ODD = [
    "[2025-11-20 11:02:41 TP0] Decode batch [1234], #running-req: 3, #token: 40, token usage: 0.10, ",
    "[2025-11-20 11:02:41.123 TP0] Prefill batch. #new-seq: 1, #new-token: 8, #cached-token: 0, "
    "cache hit rate: 12.34%, token usage: 0.05, #running-req: 0, #queue-req: 0",
    "[2025-11-20 11:02:41,5 TP0] Prefill batch. #new-seq: 1, #new-token: 8, cache hit rate: 0.005%, token usage: 0.05",
    "[2025-11-20 11:02:41 TP0] Prefill batch(mixed #running-req: 2). #new-seq: 1, #new-token: 8, token usage: 0.05",
    "[2025-11-20 11:02:41 TP0] Decode batch, #running-req: True, #token: -5, token usage: 1e-05, ",
    "[2025-11-20 11:02:41 TP0] Decode batch, #running-req: 0, #token: 12345678901234567890, token usage: 0.000001, ",
    "[2025-11-20 11:02:41 TP0] Decode batch, #running-req: 007, #token:  42 , token usage: 0.90 , x: nan, y: inf, ",
    "[2025-11-20 11:02:41 TP0] Decode batch, #running-req: 1, #token: 2, token usage: 0.9, fwd occupancy: 85.3%, "
    "est. decode TFLOPS/s (per GPU): 12.5, accept len: 3.10, z: \"q\", w: a\\b",
    "[2025-11-20 11:02:60 TP0] Decode batch, #running-req: 1, #token: 2, token usage: 0.9, ",
    "[2025-02-30 11:02:41 TP0] Decode batch, #running-req: 1, #token: 2, token usage: 0.9, ",
    "[2025-11-20 11:02:41 ATTN_CP1 TP0] Decode batch, #running-req: 1, #token: 2, token usage: 0.9, ",
    "[2025-11-20 11:02:41 TP0] Decode batch, #running-req: 1, #token: 2, token usage: 0.9, note: ümlaut, ",
    "[2025-11-20 11:02:41] Decode batch, #running-req: 1, #token: 2, junk, token usage: 0.9, a:b, c: d: e,",
    "[2025-11-20 11:02:41] Decode batch",
    "[2025-11-20 11:02:41 TP0] Decode batch, #full token: 5, full token usage: 0.50, #running-req: -0, ",
    "[2025-11-20 11:02:41] Prefill batch, #new-token: False, token usage: True, #running-req: 2, ",
    '[2025-11-20 11:02:41] INFO:     127.0.0.1:5555 - "POST /generate HTTP/1.1" 200 OK',
    '[2025-11-20 11:02:41 TP0] INFO:     10.0.0.1:1 - "GET /health" 503 Service Unavailable',
    '[2025-11-20 11:02:41] INFO:     127.0.0.1:5555 - "GET /a"b HTTP/1.1" 200 OK',
    '[2025-11-20 11:02:41] WARNING:  127.0.0.1:5555 - "GET  HTTP/1.1" 404 Not Found',
    '[2025-11-20 11:02:41] INFO:     Started server process [123]',
    "Capturing batches (bs=8 avail_mem=4.21 GB):  2%|▏         | 1/52 [00:04<03:24,  4.01s/it]"
    "[2025-11-20 11:02:41 TP0] Decode batch, #running-req: 1, #token: 2, token usage: 0.9, ",
    "[2025-11-20 11:02:41 TP1] Decode batch, #running-req: 1, #token: 2 [2025-11-20 11:02:42 TP1] x, ",
]

MULTI = [
    "[2025-11-20 11:02:48 TP3] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl/scheduler.py", line 2677, in run_scheduler_process',
    "    scheduler.event_loop_overlap()",
    "",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.41 GiB. GPU 3 has a total capacity of "
    "95.00 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 93.96 GiB memory in use.",
]
STARTUP = [
    "[2025-11-20 09:14:02] server_args=ServerArgs(model_path='/m', tp_size=8,",
    "  mem_fraction_static=0.9)",
    "[2025-11-20 09:18:02 TP3] Load weight begin. avail mem=93.79 GB",
    "[2025-11-20 09:18:02 TP3] Capture cuda graph begin. This can take up to several minutes. avail mem=4.49 GB",
]
TAIL = [
    "[2025-11-20 11:05:00] Rank 3 scheduler is dead. Please check if there are relevant logs.",
    "[2025-11-20 11:05:00] Exit code: -9",
    "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.00 GiB",
    "some unknown line",
]


def _mix(seed: int, n: int = 400) -> list[str]:
    rng = random.Random(seed)
    out = list(STARTUP)
    for k in range(n):
        r = rng.random()
        if r < 0.75:
            out.append(_decode(rng, rng.choice([" DP0 TP0 EP0", " TP1", "", " PP1 TP3"]), k))
        elif r < 0.85:
            out.append(rng.choice(ODD))
        elif r < 0.9:
            out.extend(MULTI)
        elif r < 0.93:
            out.extend(STARTUP)  # another server_args: the run counter goes up
        elif r < 0.96:
            out.extend(TAIL[:2])
        elif r < 0.98:
            out.append("")
        else:
            out.append(rng.choice(TAIL[2:]))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_generated_identical(seed: int) -> None:
    lines = _mix(seed)
    text = "\n".join(lines) + "\n"
    ev = _same(text)
    assert ev.filter(pl.col("kind") == "decode_batch").height > 200
    assert ev.get_column("run").max() >= 1
    _same(text.replace("\n", "\r\n"))  # CRLF
    _same(text.rstrip("\n"))  # no final newline


@pytest.mark.parametrize("seed", range(2))
def test_chunk_boundaries_anywhere(seed: int) -> None:
    rng = random.Random(100 + seed)
    lines = _mix(seed, 120)
    text = "\n".join(lines) + "\n"
    n = len(lines)
    # cuts inside tracebacks, between "is dead" and its exit code, in wrapped server_args: anywhere
    cuts = sorted(rng.sample(range(1, n), 25))
    _same(text, chunks=cuts)
    _same(text, chunks=list(range(1, n, 3)))  # a few lines per chunk


def test_fast_path_takes_the_bulk(fast_path: str) -> None:
    """The point of it all: plain batch and access lines are read in bulk, not by the Python scanner."""
    rng = random.Random(3)
    lines = [_decode(rng, " TP0", k) for k in range(300)] + [ODD[16]]
    text = "\n".join(lines) + "\n"
    if fast_path == "native":
        n, bulk, py_i, py_lines = sglang_fast._native_chunk(text.encode())
        assert (n, py_lines) == (301, [])
    else:
        frame, clean = sglang_fast._lines(text)
        assert clean
        bulk = sglang_fast._bulk(frame, clean)
    assert bulk.height == 301


def test_non_text_refused() -> None:
    with pytest.raises(NotThisFormat):
        sglang_fast.parse(None, "x")  # type: ignore[arg-type]
    _same("just some text\nnothing sglang\n")
    _same("")

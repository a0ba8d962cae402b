"""Memory stays bounded whatever a big file is made of (issue 26): a streamed log of lines no pattern reads
goes to its parser in small pieces and keeps a sample of those rows; a vLLM log is streamed as an SGLang one
is, with the same timeline as when read whole. Asserted on piece sizes and row counts, not on time or RSS."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from forensics import inputs, timeline
from parsers import kernel, pasted, sglang_fast, vllm
from tests.test_perf_equivalence import _mix

ROOT = Path(__file__).resolve().parents[1]


def _unknown_log(path: Path, n: int) -> None:
    head = ["[2025-11-20 09:14:16 TP0] Load weight begin. avail mem=93.79 GB",
            "[2025-11-20 09:14:17 TP0] KV Cache is allocated. #tokens: 221628, KV size: 14.50 GB"]
    body = [f"[2025-11-20 09:{(i // 60) % 60:02d}:{i % 60:02d} TP0] plugin tick {i} queue={i % 97}" for i in range(n)]
    path.write_text("\n".join(head + body) + "\n", encoding="utf-8")


def _fed(monkeypatch, cls) -> list[int]:
    sizes: list[int] = []
    real = cls.feed

    def feed(self, data):
        sizes.append(len(data))
        return real(self, data)
    monkeypatch.setattr(cls, "feed", feed)
    return sizes


def _small_stream(monkeypatch, piece: int = 2_000) -> None:
    monkeypatch.setattr(inputs.limits, "STREAM_BYTES", 10_000)
    monkeypatch.setattr(timeline, "CHUNK_BYTES", 20_000)
    monkeypatch.setattr(timeline, "HEAVY_PIECE_BYTES", piece)
    monkeypatch.setattr(timeline, "PY_HEAVY_LINES", 20)


def test_lines_left_to_the_python_parser_are_fed_in_small_pieces(tmp_path, monkeypatch) -> None:
    log = tmp_path / "tp0.log"
    _unknown_log(log, 3_000)
    whole = timeline.build_timeline([log])
    _small_stream(monkeypatch)
    sizes = _fed(monkeypatch, sglang_fast.Stream)
    streamed = timeline.build_timeline([log])
    longest = max(len(ln) + 1 for ln in log.read_text().splitlines())
    assert sum(sizes) == log.stat().st_size
    assert len(sizes) > log.stat().st_size // 20_000 * 5  # not one feed per chunk
    assert max(sizes) <= 2_000 + longest
    assert_frame_equal(whole.events, streamed.events)
    assert whole.coverage == streamed.coverage


def test_batch_lines_go_to_the_parser_in_whole_chunks(tmp_path, monkeypatch) -> None:
    log = tmp_path / "tp0.log"
    log.write_text("\n".join(_mix(3, 1_500)) + "\n", encoding="utf-8")
    _small_stream(monkeypatch)
    monkeypatch.setattr(timeline, "PY_HEAVY_LINES", 400)
    sizes = _fed(monkeypatch, sglang_fast.Stream)
    timeline.build_timeline([log])
    chunks = -(-log.stat().st_size // 20_000)
    # the file's first piece is small (nothing known of the file yet), every chunk after it whole
    assert sizes[0] <= 2_000 + 1_000 and len(sizes) <= chunks + 1 and sum(sizes) == log.stat().st_size


def test_rows_of_lines_no_pattern_reads_are_sampled_in_memory_and_all_in_parquet(tmp_path, monkeypatch) -> None:
    log = tmp_path / "tp0.log"
    _unknown_log(log, 3_000)
    _small_stream(monkeypatch)
    monkeypatch.setattr(timeline, "KEEP_ALL", 100)
    monkeypatch.setattr(timeline, "BUCKETS", 10)
    tl = timeline.build_timeline([log], spill_dir=tmp_path / "spill")
    kept = tl.events.filter(pl.col("kind") == "log").height
    full = pl.read_parquet(tl.parquet_path)
    assert full.filter(pl.col("kind") == "log").height == 3_000
    assert kept < 3_000 // 5, kept  # the first KEEP_ALL, then per bucket (and piece) its first and last
    assert any("3,000 log lines no pattern reads" in n for n in tl.facts.notes), tl.facts.notes
    # the first and the last of them are kept: the file's time span is the same
    span = full.filter(pl.col("kind") == "log").get_column("line")
    assert {span.min(), span.max()} <= set(tl.events.get_column("line").to_list())


def _logs(sniff, least: float, where: tuple[str, ...] = ("scenarios/*/input/**/*",), size: int = 2_000) -> list[Path]:
    out = []
    for p in sorted(q for w in where for q in (ROOT / "fixtures").glob(w)):
        if not p.is_file() or p.stat().st_size < size:
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if sniff(text[:65536]) >= least and pasted.unwrap(text) == text:
            out.append(p)
    return out


VLLM_LOGS = _logs(vllm.sniff, 0.8)
KERNEL_LOGS = _logs(kernel.sniff, 0.5, ("scenarios/*/input/**/*", "kernel/*"), 300)


def test_there_are_vllm_logs_to_stream() -> None:
    assert len(VLLM_LOGS) >= 10


@pytest.mark.parametrize("log", VLLM_LOGS, ids=lambda p: p.parent.parent.name + "/" + p.name)
def test_streamed_vllm_log_reads_as_when_read_whole(log: Path, monkeypatch) -> None:
    whole = timeline.build_timeline([log])
    assert [c["format"].split(" in ")[0] for c in whole.coverage] == ["vllm"]
    monkeypatch.setattr(inputs.limits, "STREAM_BYTES", 1_000)
    monkeypatch.setattr(timeline, "CHUNK_BYTES", 997)  # cuts inside tracebacks and wrapped messages
    monkeypatch.setattr(timeline, "HEAVY_PIECE_BYTES", 301)
    sizes = _fed(monkeypatch, vllm.Stream)
    streamed = timeline.build_timeline([log])
    assert len(sizes) > 1 and max(sizes) < 997 + 5_000
    assert_frame_equal(whole.events, streamed.events)
    assert whole.coverage == streamed.coverage
    assert whole.unrecognized_examples == streamed.unrecognized_examples


@pytest.mark.parametrize("lines_per_chunk", [1, 2, 5])
def test_vllm_stream_equals_parse_at_every_cut(lines_per_chunk: int) -> None:
    for log in VLLM_LOGS:
        text = log.read_text(encoding="utf-8")
        want = vllm.parse(text, log.name)
        st = vllm.Stream(log.name)
        lines = text.splitlines(keepends=True)
        frames = [st.feed("".join(lines[i:i + lines_per_chunk])) for i in range(0, len(lines), lines_per_chunk)]
        last, res = st.finish()
        got = pl.concat([f for f in [*frames, last] if f.height])
        assert_frame_equal(got, want.events)
        assert res.coverage() == want.coverage() and res.notes == want.notes, log
        assert res.unrecognized_examples == want.unrecognized_examples


def _plain_text(path: Path, n: int) -> None:
    """A sidecar's heartbeat lines no parser claims, with a launch command, a GPU's name and a CUDA OOM in
    them (one line each: a cut between lines never splits them)."""
    lines = [f"2025-11-20T09:00:{i % 60:02d}Z sidecar-{i % 7} heartbeat seq={i} status=ok" for i in range(n)]
    lines[n // 5] = "python -m sglang.launch_server --model-path /models/Llama-3.1-70B --tp 8 --mem-fraction-static 0.93"
    lines[n // 2] = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5c4f3ad2-1f2e-4a6b-9d3c-2b1a0f9e8d7c)"
    lines[4 * n // 5] = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.41 GiB. GPU 3 has a total "
                         "capacity of 95.00 GiB of which 1.02 GiB is free.")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_a_big_text_no_parser_claims_is_read_chunk_by_chunk(tmp_path, monkeypatch) -> None:
    log = tmp_path / "sidecar.txt"
    _plain_text(log, 3_000)
    whole = timeline.build_timeline([log])
    assert {"launch_command", "gpu_model"} <= set(whole.events.get_column("kind").to_list())
    read: list[int] = []
    real = timeline.read_anywhere

    def read_anywhere(text, *a):
        read.append(len(text))
        return real(text, *a)
    monkeypatch.setattr(timeline, "read_anywhere", read_anywhere)
    monkeypatch.setattr(inputs.limits, "STREAM_BYTES", 10_000)
    monkeypatch.setattr(timeline, "CHUNK_BYTES", 9_999)
    streamed = timeline.build_timeline([log])
    assert len(read) == -(-log.stat().st_size // 9_999) and max(read) < 9_999 + 200
    # what the readers that look anywhere took, at the same lines (the paste splitter's prose segments end
    # at the cuts, so what the prose reader cites may move: a session across a cut is read in two halves)
    key = ["line", "kind", "text", "attrs"]
    read_by = pl.col("kind").is_in(["launch_command", "gpu_model", "cuda_oom"])
    assert_frame_equal(whole.events.filter(read_by).select(key), streamed.events.filter(read_by).select(key))
    assert [{k: c[k] for k in ("lines", "recognized", "unrecognized")} for c in whole.coverage] == \
        [{k: c[k] for k in ("lines", "recognized", "unrecognized")} for c in streamed.coverage]
    # the examples of what nobody read: the file's first lines (the first chunk has nothing any parser read)
    assert [ln for ln, _t in streamed.unrecognized_examples["sidecar.txt"]] == list(range(1, 21))


def test_there_are_kernel_logs_to_stream() -> None:
    assert len(KERNEL_LOGS) >= 10


@pytest.mark.parametrize("log", KERNEL_LOGS, ids=lambda p: p.parent.parent.name + "/" + p.name)
def test_streamed_kernel_log_reads_as_when_read_whole(log: Path, monkeypatch) -> None:
    whole = timeline.build_timeline([log])
    if [c["format"] for c in whole.coverage] != ["kernel"]:
        pytest.skip("not read as a bare kernel log")  # in an envelope, or another parser's: read whole
    monkeypatch.setattr(inputs.limits, "STREAM_BYTES", 200)
    monkeypatch.setattr(timeline, "CHUNK_BYTES", 97)  # cuts inside OOM-killer reports and NVRM blocks
    sizes = _fed(monkeypatch, kernel.Stream)
    streamed = timeline.build_timeline([log])
    assert len(sizes) >= log.stat().st_size // 400 and max(sizes) < 97 + 5_000
    assert_frame_equal(whole.events, streamed.events)
    assert whole.coverage == streamed.coverage
    assert whole.unrecognized_examples == streamed.unrecognized_examples


@pytest.mark.parametrize("lines_per_chunk", [1, 3])
def test_kernel_stream_equals_parse_at_every_cut(lines_per_chunk: int) -> None:
    for log in KERNEL_LOGS:
        text = log.read_text(encoding="utf-8")
        try:
            want = kernel.parse(text, log.name)
        except kernel.NotThisFormat:
            continue
        st = kernel.Stream(log.name)
        lines = text.splitlines(keepends=True)
        for i in range(0, len(lines), lines_per_chunk):
            st.feed("".join(lines[i:i + lines_per_chunk]))
        got = st.finish()
        assert_frame_equal(got.events, want.events)
        assert got.coverage() == want.coverage() and got.notes == want.notes, log
        assert got.unrecognized_examples == want.unrecognized_examples


def test_vllm_metrics_rows_are_sampled_but_every_preemption_count_is_kept(tmp_path, monkeypatch) -> None:
    log = tmp_path / "vllm.log"
    lines = ["INFO 11-24 16:00:00 [api_server.py:1] vLLM API server version 0.9.1"]
    for i in range(3_000):
        pre = f"Preemptions: {1 + i % 3}, " if i % 97 == 5 else ""
        lines.append(f"INFO 11-24 16:{i // 60 % 60:02d}:{i % 60:02d} [loggers.py:116] Engine 000: Avg prompt throughput: "
                     f"{i % 50}.0 tokens/s, Avg generation throughput: 12.3 tokens/s, Running: {i % 9} reqs, Waiting: 0 "
                     f"reqs, {pre}GPU KV cache usage: {(i * 7) % 90}.0%, Prefix cache hit rate: 0.0%")
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    whole = timeline.build_timeline([log])
    _small_stream(monkeypatch, piece=20_000)
    monkeypatch.setattr(timeline, "KEEP_ALL", 100)
    monkeypatch.setattr(timeline, "BUCKETS", 10)
    tl = timeline.build_timeline([log], spill_dir=tmp_path / "spill")
    metrics = pl.col("kind") == "engine_metrics"
    preempted = pl.col("attrs").str.contains('"preemptions"')
    assert tl.events.filter(metrics).height < 3_000 // 5
    assert_frame_equal(tl.events.filter(metrics & preempted).select("line", "attrs"),
                       whole.events.filter(metrics & preempted).select("line", "attrs"))
    assert whole.events.filter(metrics & preempted).height == 31
    assert tl.events.filter(metrics).get_column("ratio").max() == whole.events.filter(metrics).get_column("ratio").max()
    assert any("3,000 vLLM engine-metrics rows" in n for n in tl.facts.notes), tl.facts.notes

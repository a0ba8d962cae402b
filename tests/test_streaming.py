"""Big inputs are streamed: the timeline of a file read chunk by chunk equals the one read whole."""

from __future__ import annotations

import gc
import json
import random
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
from polars.testing import assert_frame_equal

from forensics import inputs, progress, timeline
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
    monkeypatch.setattr(inputs.limits, "STREAM_BYTES", 10_000)  # the rank logs are ~60 KB: streamed
    monkeypatch.setattr(timeline, "CHUNK_BYTES", 9_999)  # cuts inside records, at odd places
    monkeypatch.setattr(progress.time, "monotonic", iter(range(0, 10**6, 3)).__next__)  # progress every chunk
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


def _streamed(tmp_path: Path, monkeypatch, seed: int = 11, **over) -> timeline.Timeline:
    monkeypatch.setattr(inputs.limits, "STREAM_BYTES", 10_000)
    monkeypatch.setattr(timeline, "CHUNK_BYTES", 9_999)
    for k, v in over.items():
        monkeypatch.setattr(timeline, k, v)
    return timeline.build_timeline([tmp_path / "in"], spill_dir=tmp_path / "spill")


def test_streamed_parquet_holds_every_row_in_file_then_line_order(tmp_path, monkeypatch) -> None:
    _write_set(tmp_path / "in", 11)
    whole = timeline.build_timeline([tmp_path / "in"])
    tl = _streamed(tmp_path, monkeypatch)
    assert tl.parquet_path and Path(tl.parquet_path).parent.parent == tmp_path / "spill"
    full = pl.read_parquet(tl.parquet_path)
    # files in input order, lines in order; rows of one line (a glued tqdm line) in parse order
    assert_frame_equal(full, full.sort(["file", "line"], maintain_order=True))
    key = ["file", "line", "kind"]
    assert_frame_equal(full.sort(key, maintain_order=True), whole.events.sort(key, maintain_order=True))
    assert tl.kind_counts == dict(full.group_by("kind").len().sort("kind").iter_rows()) == whole.kind_counts
    assert tl.n_events == full.height == whole.n_events
    out = tmp_path / "t.parquet"
    timeline.write_parquet(tl, out)
    meta = pq.read_schema(out).metadata
    assert json.loads(meta[b"forensics.facts"])["notes"] == tl.facts.notes
    assert json.loads(meta[b"forensics.coverage"]) == tl.coverage
    # the same input twice: the same bytes
    again = _streamed(tmp_path, monkeypatch)
    timeline.write_parquet(again, tmp_path / "u.parquet")
    assert out.read_bytes() == (tmp_path / "u.parquet").read_bytes()


def test_long_logs_keep_a_sample_with_the_extremes(tmp_path, monkeypatch) -> None:
    _write_set(tmp_path / "in", 12)
    whole = timeline.build_timeline([tmp_path / "in"])
    tl = _streamed(tmp_path, monkeypatch, KEEP_ALL=10, BUCKETS=4)
    bulk = pl.col("kind").is_in(timeline.BULK_KINDS)
    full = pl.read_parquet(tl.parquet_path)
    kept = tl.events.filter(bulk)
    assert 0 < kept.height < full.filter(bulk).height
    # every other row stays; the sample is a subset of the real rows, in timeline order
    assert_frame_equal(tl.events.filter(~bulk), whole.events.filter(~bulk))
    assert kept.join(full, on=list(full.columns), how="anti", nulls_equal=True).height == 0
    assert_frame_equal(tl.events, tl.events.sort(["ts", "file", "line"], nulls_last=True, maintain_order=True))
    keys = ["file", "kind", "rank", "run"]
    for col, agg in (("line", "min"), ("line", "max"), ("ratio", "max"), ("ratio", "min"), ("tokens", "max"),
                     ("count", "max")):
        want = full.filter(bulk).group_by(keys).agg(getattr(pl.col(col), agg)()).sort(keys, nulls_last=True)
        got = kept.group_by(keys).agg(getattr(pl.col(col), agg)()).sort(keys, nulls_last=True)
        assert_frame_equal(want, got, check_row_order=True), (col, agg)
    high = full.filter(bulk & (pl.col("ratio") >= timeline.EXTREME_RATIO))
    assert high.height and high.join(kept, on=["file", "line"], how="anti").height == 0
    assert tl.kind_counts == whole.kind_counts
    assert any("kept for analysis" in n for n in tl.facts.notes)


def test_spill_folder_is_removed(tmp_path, monkeypatch) -> None:
    _write_set(tmp_path / "in", 13)
    tl = _streamed(tmp_path, monkeypatch)
    spill = Path(tl.parquet_path).parent
    assert spill.is_dir()
    del tl
    gc.collect()
    assert not spill.exists() and not any((tmp_path / "spill").iterdir())


def test_sample_is_the_same_with_and_without_the_compiled_reader(tmp_path, monkeypatch) -> None:
    """The sampler reads queue_req through parsers/_native where it is built; the sample must not differ,
    and each (kind, rank, run)'s largest queue is in it."""
    from parsers import bulkscan

    if not bulkscan.available():
        import pytest

        pytest.skip(f"native scanner not available: {bulkscan.why_not}")
    _write_set(tmp_path / "in", 14)
    native = _streamed(tmp_path, monkeypatch, KEEP_ALL=10, BUCKETS=4)
    monkeypatch.setattr(bulkscan, "available", lambda: False)
    plain = _streamed(tmp_path, monkeypatch, KEEP_ALL=10, BUCKETS=4)
    assert_frame_equal(native.events, plain.events)
    q = pl.col("attrs").str.extract(r'"queue_req": (-?[0-9]{1,15})[,}]', 1).cast(pl.Int64)
    keys = ["file", "kind", "rank", "run"]
    full = pl.read_parquet(native.parquet_path).filter(pl.col("kind") == "decode_batch")
    want = full.group_by(keys).agg(q.max()).sort(keys, nulls_last=True)
    got = native.events.filter(pl.col("kind") == "decode_batch").group_by(keys).agg(q.max()).sort(keys, nulls_last=True)
    assert_frame_equal(want, got)


def _sampler_chunk(rng: random.Random, n: int, start: int) -> pl.DataFrame:
    from parsers.schema import rows_to_frame

    rows = []
    for i in range(n):
        kind = rng.choice(["decode_batch"] * 5 + ["prefill_batch", "http_access", "retract"])
        q = rng.choice([None, 0, 3, 3, 7, -1, "x"])
        attrs = None if q is None else json.dumps({"queue_req": q, "running_req": rng.randint(0, 3)})
        rows.append({"line": start + i, "kind": kind, "rank": rng.choice([None, "TP0", "TP1"]),
                     "run": rng.choice([0, 0, 1]), "ratio": rng.choice([None, 0.1, 0.5, 0.5, 0.9, 0.95, 0.95]),
                     "tokens": rng.choice([None, 1, 5, 5, 9]), "count": rng.choice([None, 0, 2, 2]),
                     "text": f"line {start + i}", "attrs": attrs})
    return rows_to_frame(rows, source="sglang", path="r.log")


def test_compiled_sampler_chooses_the_rows_polars_chooses(monkeypatch) -> None:
    """Ties, nulls, keys that come and go, buckets cut by chunk ends, the extreme budget running out:
    the compiled sampler (parsers/_native) keeps exactly the rows of the polars one, chunk after chunk."""
    from parsers import bulkscan

    if not bulkscan.available():
        import pytest

        pytest.skip(f"native scanner not available: {bulkscan.why_not}")
    monkeypatch.setattr(timeline, "KEEP_ALL", 5)
    monkeypatch.setattr(timeline, "MAX_EXTREME", 9)
    for seed in range(12):
        rng = random.Random(seed)
        native, plain = timeline._Sampler(150 * 500 * 4), timeline._Sampler(150 * 500 * 4)  # buckets of 4 rows
        start = 1
        for _ in range(3):
            chunk = _sampler_chunk(rng, rng.randint(1, 120), start)
            start += chunk.height
            a = native.keep(chunk)
            monkeypatch.setattr(bulkscan, "available", lambda: False)
            b = plain.keep(chunk)
            monkeypatch.undo()
            monkeypatch.setattr(timeline, "KEEP_ALL", 5)
            monkeypatch.setattr(timeline, "MAX_EXTREME", 9)
            assert_frame_equal(a, b)
            assert (native.seen, native.extreme, native.kept, native.bulk) == (plain.seen, plain.extreme, plain.kept,
                                                                               plain.bulk)
        assert native.kept < native.bulk


#: What a watchdog's py-spy run and a vLLM engine's input dump print (py-spy src/dump.rs; vllm
#: vllm/logging_utils/dump_input.py), with a launch command, a GPU name and a failure line: the readers
#: that look anywhere in a text, besides its parser.
ANYWHERE = [
    "[2026-11-30 10:00:00 TP0] Pyspy dump for PID 4242:",
    "Process 4242: sglang::scheduler_TP0",
    "Python v3.12.3 (/usr/bin/python3.12)",
    "",
    'Thread 4242 (active): "MainThread"',
    "    all_reduce (torch/distributed/distributed_c10d.py:2501)",
    "    forward (sglang/srt/layers/linear.py:1290)",
    "    run_batch (sglang/srt/managers/scheduler.py:1700)",
    'Thread 4250 (idle): "Thread-3"',
    "    wait (threading.py:355)",
    "",
    "ERROR 11-30 10:00:01 [dump_input.py:69] Dumping input data for V1 LLM engine "
    "(v0.10.1) with config: model='/models/demo-70b', max_seq_len=32768, tensor_parallel_size=4, ",
    "ERROR 11-30 10:00:01 [dump_input.py:76] Dumping scheduler output for model execution: "
    "SchedulerOutput(scheduled_new_reqs=[NewRequestData(req_id=cmpl-9,prompt_token_ids_len=24000,"
    "num_computed_tokens=0)],total_num_scheduled_tokens=8192,finished_req_ids=[])",
    "ERROR 11-30 10:00:01 [dump_input.py:79] Dumping scheduler stats: SchedulerStats("
    "num_running_reqs=7, num_waiting_reqs=3, kv_cache_usage=0.91)",
    "python3 -m sglang.launch_server --model-path /models/demo-70b --tp 4 --mem-fraction-static 0.85",
    "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-1111-2222-3333-444444444444)",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
]


def test_streamed_log_is_read_for_dumps_launches_gpus_and_failures(tmp_path, monkeypatch) -> None:
    """A streamed SGLang log goes to the readers that look anywhere as a log read whole does: the same rows
    (py-spy stacks, vLLM's input dump, a launch, a GPU name, a failure line), coverage and examples, with
    the dump cut across chunks."""
    from forensics.timeline import anywhere

    lines = _mix(21, 300)
    at = len(lines) // 2
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "tp0.log").write_text("\n".join(lines[:at] + ANYWHERE + lines[at:]) + "\n", encoding="utf-8")
    whole = timeline.build_timeline([tmp_path])
    kinds = set(whole.events.get_column("kind").to_list())
    assert {"pyspy_stack", "engine_input_dump", "engine_scheduler_output", "engine_scheduler_stats",
            "launch_command", "gpu_model"} <= kinds
    monkeypatch.setattr(inputs.limits, "STREAM_BYTES", 10_000)
    for chunk in (997, 9_999):
        monkeypatch.setattr(timeline, "CHUNK_BYTES", chunk)
        streamed = timeline.build_timeline([tmp_path])
        assert_frame_equal(whole.events, streamed.events)
        assert whole.coverage == streamed.coverage
        assert whole.unrecognized_examples == streamed.unrecognized_examples
    # past the held text's bound the text so far is read and let go: every dump still read, once
    monkeypatch.setattr(anywhere, "MAX_CHARS", 2_000)
    cut = timeline.build_timeline([tmp_path])
    key = ["line", "kind"]
    for kind in ("pyspy_stack", "engine_input_dump", "engine_scheduler_output", "engine_scheduler_stats"):
        want = whole.events.filter(pl.col("kind") == kind).select(key)
        assert_frame_equal(cut.events.filter(pl.col("kind") == kind).select(key), want)

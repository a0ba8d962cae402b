"""parsers/vllm.py: every prefix and line kind of vLLM 0.2 – newest, on our own fixtures and on the
real incident excerpts in ../shared (read at test time, skipped when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_data import SHARED, SKIP_REASON

from parsers import registry, vllm
from parsers.schema import row_attrs
from parsers.units import gib

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures" / "vllm"


def parse_file(name: str):
    return vllm.parse((FIXTURES / name).read_text(encoding="utf-8"), name)


def rows(result, kind: str | None = None) -> list[dict]:
    out = result.events.to_dicts()
    for r in out:
        r["a"] = row_attrs(r)
    return [r for r in out if kind is None or r["kind"] == kind]


def test_v0_tp2_start_up_reads_every_line_kind() -> None:
    r = parse_file("v0_tp2_serve.log")
    assert r.unrecognized <= 3, r.unrecognized_examples  # a couple of records of no forensic weight
    args = rows(r, "server_args")[0]["a"]
    assert args["form"] == "Namespace" and args["args"]["tensor_parallel_size"] == 2
    assert args["args"]["gpu_memory_utilization"] == 0.9 and args["args"]["swap_space"] == 4
    cfg = rows(r, "engine_config")[0]
    assert cfg["tokens"] == 32768 and cfg["a"]["version"] == "0.6.6" and cfg["a"]["tensor_parallel_size"] == 2
    assert {"vllm", "nccl"} <= {x["a"]["component"] for x in rows(r, "version")}
    weights = rows(r, "weight_load_end")
    assert len(weights) == 2 and {w["pid"] for w in weights} == {None, 2211}
    assert weights[0]["bytes"] == gib(32.8772)  # vLLM's "GB" is GiB
    prof = rows(r, "memory_profile")
    budget = next(p for p in prof if p["a"].get("budget_bytes"))
    assert budget["total_bytes"] == gib(79.19) and budget["ratio"] == 0.9
    split = next(p for p in prof if p["a"].get("weights_bytes"))
    assert split["a"]["activation_peak_bytes"] == gib(4.61) and split["bytes"] == gib(33.00)
    sizing = rows(r, "kv_sizing")[0]
    assert sizing["tokens"] == 13508 * 16 and sizing["a"]["cpu_blocks"] == 1638
    assert rows(r, "kv_concurrency")[0]["a"]["max_concurrency"] == 6.6
    assert len(rows(r, "cuda_graph_begin")) == 2
    end = rows(r, "cuda_graph_end")[0]
    assert end["seconds"] == 18 and end["bytes"] == gib(0.53)
    assert rows(r, "server_ready")
    assert all(x["a"].get("stamp") for x in rows(r, "weight_load_end"))  # year-less: kept as printed
    assert r.events["ts_local"].null_count() == r.events.height


def test_v1_tp2_start_up_ranks_and_sizes() -> None:
    r = parse_file("v1_tp2_serve.log")
    assert r.unrecognized <= 2, r.unrecognized_examples
    nd = rows(r, "server_args")[0]
    assert nd["a"]["form"] == "non_default" and nd["a"]["args"]["gpu_memory_utilization"] == 0.92
    assert nd["rank"] == "APIServer" and nd["pid"] == 4101
    cfg = rows(r, "engine_config")[0]
    assert cfg["a"]["engine"] == "V1" and cfg["dp_rank"] == 0 and cfg["a"]["data_parallel_size"] == 1
    assigned = rows(r, "rank_assigned")
    assert sorted(x["tp_rank"] for x in assigned) == [0, 1]
    w = rows(r, "weight_load_end")[0]
    assert (w["tp_rank"], w["bytes"], w["seconds"]) == (0, gib(30.7107), 45.318)
    assert rows(r, "kv_memory")[0]["bytes"] == gib(36.42)
    assert rows(r, "kv_sizing")[0]["tokens"] == 298_336  # thousands separators
    assert rows(r, "kv_concurrency")[0]["tokens"] == 32_768
    progress = rows(r, "capture_progress")
    assert [p["a"]["capture_name"] for p in progress] == ["mixed prefill-decode, PIECEWISE", "decode, FULL"]
    assert rows(r, "cuda_graph_end")[0]["bytes"] == gib(1.02)
    assert {x["run"] for x in rows(r)} == {0}


def test_prefix_variants() -> None:
    r = parse_file("prefix_variants.log")
    by_line = {x["line"]: x for x in rows(r) if x["kind"] != "version"}
    assert r.unrecognized == 0, r.unrecognized_examples
    assert by_line[2]["rank"] == "RayWorkerVllm" and by_line[2]["pid"] == 31877
    assert by_line[3]["a"]["ip"] == "10.0.16.95" and by_line[4]["pid"] == 776
    assert by_line[5]["rank"] == "VllmWorkerProcess" and by_line[5]["tp_rank"] is None
    assert by_line[6]["tp_rank"] == 1 and by_line[6]["a"]["global_rank"] == 1
    assert by_line[7]["tp_rank"] == 1
    assert (by_line[8]["pp_rank"], by_line[8]["tp_rank"]) == (1, 3)
    assert (by_line[9]["dp_rank"], by_line[9]["tp_rank"], by_line[9]["ep_rank"]) == (1, 0, 4)
    assert by_line[10]["rank"] == "EngineCore_0" and by_line[10]["dp_rank"] == 0
    assert by_line[11]["dp_rank"] == 1 and by_line[11]["tokens"] == 90_688
    nested = by_line[12]
    assert nested["rank"] == "RayWorkerWrapper" and nested["pid"] == 6001 and nested["a"]["relayed_by"] == ["EngineCore_DP0"]
    merged = by_line[13]
    assert merged["kind"] == "kv_sizing" and merged["tokens"] == 186_464 and merged["a"]["max_concurrency"] == 1.42
    assert by_line[14]["kind"] == "cuda_graph_memory" and by_line[14]["a"]["estimated_bytes"] == gib(0.81)
    assert by_line[15]["a"]["estimated_bytes"] == gib(0.81)
    hint = by_line[16]
    assert hint["kind"] == "memory_profile" and hint["a"]["weights_bytes"] == gib(15.5)
    assert hint["a"]["graph_bytes"] == gib(0.74) and hint["a"]["budget_bytes"] == gib(71.27)
    metrics = by_line[17]  # ANSI colours stripped
    assert metrics["kind"] == "engine_metrics" and metrics["count"] == 31 and metrics["ratio"] == 0.964
    assert metrics["a"]["preemptions"] == 2 and metrics["a"]["engine"] == 0 and metrics["a"]["waiting_reqs"] == 4
    assert str(by_line[18]["ts_local"]) == "2025-05-12 10:11:12.345000"  # a year from a custom config
    assert by_line[19]["a"]["stamp"] == "05-12 10:11:12.345"
    assert by_line[20]["a"]["container"] == "vllm-1"
    assert by_line[21]["kind"] == "kv_sizing" and by_line[21]["pid"] == 4711  # JSON formatter
    v0 = by_line[22]
    assert v0["a"]["swapped_reqs"] == 0 and v0["a"]["waiting_reqs"] == 0 and v0["count"] == 8
    assert by_line[23]["a"]["message_id"] == "prefix_cache_hit_rate"
    assert by_line[25]["a"]["engines_aggregated"] == 2
    assert by_line[26]["kind"] == "http_access" and by_line[26]["code"] == 200
    cfg = by_line[27]
    assert cfg["a"]["enforce_eager"] is True and cfg["a"]["kv_cache_dtype"] == "fp8" and cfg["run"] == 1


def test_v1_failures() -> None:
    r = parse_file("v1_failures.log")
    assert r.unrecognized == 0, r.unrecognized_examples
    tb = rows(r, "exception")[0]
    assert tb["line"] == 1 and tb["line_end"] == 5 and tb["tp_rank"] == 1
    assert tb["a"]["exception_type"] == "RuntimeError" and tb["a"]["during"] == "sampler_warmup"
    oom = rows(r, "cuda_oom")
    assert oom[0]["line"] == 5 and oom[0]["count"] == 1024 and oom[0]["a"]["during"] == "sampler_warmup"
    failed = rows(r, "init_failed")
    assert any(f["a"].get("failed_procs") == {"EngineCore_DP0": 1} and f["code"] == 1 for f in failed)
    dead = rows(r, "rank_dead")[0]
    assert (dead["tp_rank"], dead["code"]) == (3, -9)
    assert {d["a"]["reason"] for d in rows(r, "engine_dead")} >= {"EngineCore encountered a fatal error",
                                                                  "AsyncLLM output_handler failed", "EngineDeadError"}
    short = rows(r, "gpu_memory_short")[0]
    assert short["free_bytes"] == gib(3.22) and short["ratio"] == 0.9
    assert rows(r, "shm_wait")[0]["seconds"] == 60
    assert rows(r, "rpc_timeout")[0]["a"]["method"] == "execute_model"
    logo = [v for v in rows(r, "version") if v["a"].get("form") == "logo"]
    assert [v["a"]["version"] for v in logo] == ["0.15.1"]
    assert rows(r, "memory_profiling_error")[0]["tp_rank"] == 0
    assert any("Timed out waiting for engine core" in f["a"]["reason"] for f in rows(r, "init_failed"))


def test_v0_failures() -> None:
    r = parse_file("v0_failures.log")
    assert r.unrecognized == 0, r.unrecognized_examples
    kinds = [x["kind"] for x in rows(r)]
    assert kinds.count("rank_dead") == 1 and rows(r, "rank_dead")[0]["code"] == -9
    assert "nccl_error" in kinds and "engine_dead" in kinds and "swap_exhausted" in kinds and "kv_no_room" in kinds
    assert rows(r, "cuda_error")[0]["a"]["error"] == "uncorrectable_ecc"
    swaps = rows(r, "swap_space_too_large")
    assert [s["a"]["warning_only"] for s in swaps] == [True, False] and swaps[1]["bytes"] == gib(64)
    pre = rows(r, "preemption")[0]
    assert pre["a"]["mode"] == "SWAP" and pre["count"] == 1


@pytest.mark.parametrize("text, kind, attrs", [
    ("ValueError: The model's max seq len (29000) is larger than the maximum number of tokens that can be stored "
     "in KV cache (23648). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
     "the engine.", "kv_cache_too_small", {"max_model_len": 29000, "kv_cache_tokens": 23648}),
    ("(EngineCore_DP0 pid=1094) ValueError: To serve at least one request with the models's max seq len (262144), "
     "(24.0 GiB KV cache is needed, which is larger than the available KV cache memory (3.18 GiB). Based on the "
     "available memory, the estimated maximum model length is 34736. Try increasing `gpu_memory_utilization` or "
     "decreasing `max_model_len` when initializing the engine.", "kv_cache_too_small",
     {"max_model_len": 262144, "estimated_max_model_len": 34736, "needed_kv_bytes": gib(24.0)}),
    ("ERROR 02-01 10:00:00 core.py:200] To serve at least one request with the models's max seq len (32768), (4.00 GB "
     "KV cache is needed, which is larger than the available KV cache memory (1.37 GB). Try increasing "
     "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.", "kv_cache_too_small",
     {"available_kv_bytes": gib(1.37)}),
    ("INFO 12-01 09:00:00 worker.py:178] Memory profiling results: total_gpu_memory=23.58GiB "
     "initial_memory_usage=15.34GiB peak_torch_memory=17.06GiB memory_usage_post_profile=15.35GiB "
     "non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90", "memory_profile",
     {"kv_cache_bytes": gib(3.81), "gpu_memory_utilization": 0.9}),
    ("INFO 01-30 03:18:12 gpu_model_runner.py:848] Loading model weights took 67.7229 GB", "weight_load_end",
     {"weights_bytes": gib(67.7229)}),
    ("INFO 01-30 03:19:14 kv_cache_utils.py:395] # GPU blocks: 1381", "kv_sizing", {"gpu_blocks": 1381}),
    ("INFO 02-01 10:00:00 executor_base.py:110] # CUDA blocks: 2048, # CPU blocks: 512", "kv_sizing",
     {"gpu_blocks": 2048, "cpu_blocks": 512}),
    ("INFO 10-01 10:00:00 model_runner.py:1000] Graph capturing finished in 7 secs.", "cuda_graph_end",
     {"elapsed_s": 7.0}),
    ("INFO 10-01 10:00:00 model_runner.py:900] Capturing the model for CUDA graphs. This may lead to unexpected "
     "consequences if the model is not static.", "cuda_graph_begin", {}),
    ("INFO 02-01 10:00:00 llm_engine.py:600] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 23.1 "
     "tokens/s, Running: 3 reqs, Swapped: 1 reqs, Pending: 7 reqs, GPU KV cache usage: 99.2%, CPU KV cache "
     "usage: 3.5%", "engine_metrics", {"swapped_reqs": 1, "waiting_reqs": 7, "cpu_kv_cache_usage_ratio": 0.035}),
    ("vLLM server version 0.16.0, serving model Qwen/Qwen3-8B", "version", {"version": "0.16.0"}),
    ("(EngineCore_DP0 pid=88) ERROR 05-01 10:00:00 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to "
     "allocate 1.95 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.58 GiB is free. Including non-PyTorch "
     "memory, this process has 77.50 GiB memory in use.", "cuda_oom",
     {"tried_bytes": gib(1.95), "total_bytes": gib(79.19), "free_bytes": gib(1.58)}),
])
def test_single_lines(text: str, kind: str, attrs: dict) -> None:
    r = vllm.parse(text + "\n", "x.log")
    got = [x for x in rows(r) if x["kind"] == kind]
    assert got, rows(r)
    for k, v in attrs.items():
        assert got[0]["a"].get(k) == v, (k, got[0]["a"])


def test_traceback_frames_name_the_phase() -> None:
    text = "\n".join([
        "(VllmWorker rank=2 pid=9) ERROR 06-05 06:18:13 [multiproc_executor.py:470] WorkerProc hit an exception.",
        "(VllmWorker rank=2 pid=9) ERROR 06-05 06:18:13 [multiproc_executor.py:470] Traceback (most recent call last):",
        '(VllmWorker rank=2 pid=9) ERROR 06-05 06:18:13 [multiproc_executor.py:470]   File "/x/vllm/v1/worker/'
        'gpu_model_runner.py", line 1900, in capture_model',
        "(VllmWorker rank=2 pid=9) ERROR 06-05 06:18:13 [multiproc_executor.py:470]     self._dummy_run(n)",
        "(VllmWorker rank=2 pid=9) ERROR 06-05 06:18:13 [multiproc_executor.py:470] RuntimeError: CUDA error: out of memory",
        "(VllmWorker rank=0 pid=7) INFO 06-05 06:18:14 [multiproc_executor.py:400] WorkerProc shutting down.",
    ]) + "\n"
    r = vllm.parse(text, "t.log")
    err = rows(r, "cuda_error_oom")[0]
    assert err["tp_rank"] == 2 and err["a"]["during"] == "graph_capture" and err["a"]["in_traceback"]
    tb = rows(r, "exception")[0]
    assert tb["line_end"] == 5 and "capture_model" in tb["a"]["frames"]
    assert r.unrecognized == 0


def test_unknown_lines_are_counted_not_lost() -> None:
    text = ("INFO 05-12 10:11:12 worker.py:1] Loading model weights took 1.0 GB\n"
            "INFO 05-12 10:11:13 foo.py:2] something vLLM says that we do not know\n"
            "WARNING 05-12 10:11:14 foo.py:3] an unknown warning\n"
            "random text\n")
    r = vllm.parse(text, "u.log")
    assert (r.lines, r.recognized, r.unrecognized) == (4, 1, 3)
    assert [ln for ln, _ in r.unrecognized_examples] == [2, 3, 4]
    assert [x["kind"] for x in rows(r, "log")] == ["log"]  # warnings and errors stay visible as rows


def test_runs_split_at_a_second_start_up() -> None:
    one = (FIXTURES / "v0_tp2_serve.log").read_text(encoding="utf-8")
    r = vllm.parse(one + one, "twice.log")
    assert sorted({x["run"] for x in rows(r, "engine_config")}) == [0, 1]


def test_sniffing_prefers_the_right_parser() -> None:
    for name in ("v0_tp2_serve.log", "v1_tp2_serve.log", "prefix_variants.log", "v1_failures.log"):
        head = (FIXTURES / name).read_text(encoding="utf-8")[: registry.SNIFF_BYTES]
        assert registry.best_format(head)[0] == "vllm", name
    sglang = "[2025-11-20 09:14:16 TP0] Load weight begin. avail mem=93.79 GB\n" * 3
    assert registry.best_format(sglang)[0] == "sglang"
    assert vllm.sniff("Linux version 6.8.0 (gcc)\n") == 0.0


def test_not_text() -> None:
    with pytest.raises(vllm.NotThisFormat):
        vllm.parse(b"bytes")  # type: ignore[arg-type]


@pytest.mark.skipif(not (SHARED / "incidents").is_dir(), reason=f"{SKIP_REASON}: incidents not present")
def test_real_incident_excerpts_are_read() -> None:
    cases = sorted((SHARED / "incidents").glob("3[2-8]_vllm*")) + sorted((SHARED / "incidents").glob("4[45]_vllm*"))
    assert cases
    for case in cases:
        for f in sorted(case.glob("*.log")):
            text = f.read_text(encoding="utf-8", errors="replace")
            r = vllm.parse(text, f.name)
            assert r.recognized + r.unrecognized == r.lines
            assert r.events.height, f
            # at most the reporter's trim markers and non-vLLM lines stay unrecognised
            assert r.unrecognized <= max(3, r.lines // 4), (f, r.unrecognized_examples)


def test_a_start_up_check_wrapped_by_the_paste_is_read_whole() -> None:
    """The check's ValueError broken after ``on startup is`` (a ticket's soft wrap): one record, both lines read."""
    r = vllm.parse("ValueError: Free memory on device cuda:1 (60.20/79.10 GiB) on startup is\n"
                   "less than desired GPU memory utilization (0.85, 67.24 GiB). Decrease GPU memory utilization or "
                   "reduce GPU memory used by other processes.\n")
    assert r.events.select("kind", "line").rows() == [("gpu_memory_short", 1)]
    assert (r.recognized, r.unrecognized) == (2, 0)
    assert r.events.row(0, named=True)["free_bytes"] == gib(60.20)
    assert registry.best_format("ValueError: Free memory on device cuda:1 (60.20/79.10 GiB) on startup is\n")[0] == "vllm"


@pytest.mark.parametrize("text, joined, want", [
    # the "(" before the size lost at the cut, the estimate on a line of its own
    ("ValueError: To serve at least one request with the model's max seq len (65536),\n"
     "12.0 GiB KV cache is needed, which is larger than the available KV cache memory (7.5 GiB).\n"
     "Based on the available memory, the estimated maximum model length is 40960.\n",
     3, {"max_model_len": 65536, "needed_kv_bytes": gib(12.0), "estimated_max_model_len": 40960}),
    # the figures lost, the estimate kept
    ("ValueError: To serve at least one request with the models's max seq len (65536),\n"
     "Based on the available memory, the estimated maximum model length is 40960.\n",
     2, {"max_model_len": 65536, "figures_lost": True, "estimated_max_model_len": 40960}),
    # the head alone
    ("ValueError: To serve at least one request with the model's max seq len (65536), [...]\n",
     1, {"max_model_len": 65536, "figures_lost": True, "estimated_max_model_len": None}),
])
def test_a_v1_kv_refusal_is_read_from_a_damaged_paste(text: str, joined: int, want: dict) -> None:
    """vllm_formats.md §3.1: the V1 refusal hard-wrapped (a continuation opens with a size or with the estimate) or
    cut after its head is one ``kv_cache_too_small`` record."""
    r = vllm.parse(text)
    assert r.events.select("kind", "line").rows() == [("kv_cache_too_small", 1)]
    assert (r.recognized, r.unrecognized) == (joined, 0)
    row = r.events.row(0, named=True)
    a = row_attrs(row)
    assert {k: a.get(k) for k in want} == want
    assert registry.best_format(text)[0] == "vllm"


def test_a_line_opening_with_a_size_joins_nothing_without_a_refusal_head() -> None:
    r = vllm.parse("INFO 05-21 11:04:02 [gpu_worker.py:298] Available KV cache memory: 26.15 GiB\n"
                   "12.0 GiB KV cache is needed, which is larger than nothing\n")
    assert r.events.select("kind").to_series().to_list() == ["kv_memory"]


def test_lines_that_do_not_complete_a_record_stay_apart() -> None:
    r = vllm.parse("some long unrecognised line of a ticket that has no end to it at all\n"
                   "and the next one goes on in lower case\n")
    assert r.events.height == 0 and r.unrecognized == 2

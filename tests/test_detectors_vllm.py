"""The vLLM detectors and forensics/engines.py: arithmetic, flag names, observed vs assumed, and that
SGLang inputs and healthy vLLM logs stay quiet."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.detectors import run_all, vllm_headroom, vllm_kv_cache
from forensics.facts import engines
from forensics.model import Timeline
from forensics.timeline import build_timeline
from parsers import vllm
from parsers.schema import empty_frame

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures" / "vllm"
GIB = 1 << 30


def timeline(text: str, name: str = "vllm.log") -> Timeline:
    return Timeline(events=vllm.parse(text, name).events)


def findings(text: str) -> dict:
    fs, root = run_all(timeline(text))
    return {f.rule_id: f for f in fs} | {"_root": root}


def flag(f, name: str):
    return next(c for c in f.remediation.flags if c.flag == name)


# ---------------------------------------------------------------------------------------------
# engines.py


def test_same_concept_different_flags() -> None:
    pairs = {"gpu_memory_fraction": ("--mem-fraction-static", "--gpu-memory-utilization"),
             "tensor_parallel": ("--tp-size", "--tensor-parallel-size"),
             "max_context": ("--context-length", "--max-model-len"),
             "max_concurrent": ("--max-running-requests", "--max-num-seqs"),
             "host_kv_per_gpu": ("--hicache-size", "--swap-space"),
             "eager": ("--disable-cuda-graph", "--enforce-eager")}
    for concept, (sgl, vl) in pairs.items():
        assert engines.flag_for("sglang", concept) == sgl
        assert engines.flag_for("vllm", concept) == vl
        assert engines.concept_of("sglang", sgl) == engines.concept_of("vllm", vl) == concept
    assert engines.flag_for("sglang", "cpu_offload_per_gpu") is None
    assert engines.canonical_flag("vllm", "--gpu_memory_utilization") == "--gpu-memory-utilization"
    assert engines.canonical_flag("sglang", "--tp") == "--tp-size"
    assert engines.canonical_flag("vllm", "--some-new-flag") == "--some-new-flag"


def test_defaults_follow_the_version() -> None:
    assert engines.default_for("vllm", "gpu_memory_fraction") == 0.9
    assert engines.default_for("vllm", "host_kv_per_gpu", version=(0, 6, 3)) == 4
    assert engines.default_for("vllm", "host_kv_per_gpu", version=(0, 18, 0)) is None  # flag removed
    assert engines.default_for("vllm", "max_concurrent", version=(0, 7, 3)) == 256
    assert engines.default_for("vllm", "max_concurrent", version=(0, 8, 2)) == 1024
    assert engines.default_for("vllm", "max_concurrent", version=(0, 11, 0)) is None  # depends on the GPU
    assert engines.default_for("sglang", "hicache_ratio", version=(0, 5, 2)) == 2.0
    with pytest.raises(KeyError):
        engines.engine("tgi")


def test_engine_of_rows_and_commands() -> None:
    assert engines.engine_of([{"source": "kernel"}, {"source": "vllm"}]) == "vllm"
    assert engines.engine_of([{"source": "launch", "kind": "launch_command", "attrs": '{"engine": "vllm"}'}]) == "vllm"
    assert engines.engine_of([{"source": "launch", "kind": "launch_command",
                               "text": "python -m sglang.launch_server --tp 8"}]) == "sglang"
    assert engines.engine_of([{"source": "free"}]) is None
    assert engines.engine_of_command("docker run vllm/vllm-openai:v0.9.0 --model m") == "vllm"
    assert engines.value_for("vllm", "tensor_parallel", {"--tensor-parallel-size": "4"}) == "4"
    assert engines.value_for("sglang", "gpu_memory_fraction", {"mem_fraction_static": 0.8}) == 0.8


# ---------------------------------------------------------------------------------------------
# VLLM-KV-001


V0_TOO_SMALL = """\
INFO 12-02 10:00:00 llm_engine.py:249] Initializing an LLM engine (v0.6.4) with config: model='m', dtype=torch.bfloat16, max_seq_len=29000, tensor_parallel_size=1, enforce_eager=False, seed=0
INFO 12-02 10:00:30 model_runner.py:1072] Loading model weights took 14.9888 GB
INFO 12-02 10:00:33 worker.py:232] Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB peak_torch_memory=17.98GiB memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB kv_cache_size=2.89GiB gpu_memory_utilization=0.90
INFO 12-02 10:00:33 gpu_executor.py:113] # GPU blocks: 1478, # CPU blocks: 2048
INFO 12-02 10:00:33 gpu_executor.py:117] Maximum concurrency for 29000 tokens per request: 0.82x
ERROR 12-02 10:00:33 engine.py:366] The model's max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache (23648). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
"""


def test_max_model_len_corrected_to_what_the_cache_holds() -> None:
    fs = findings(V0_TOO_SMALL)
    f = fs["VLLM-KV-001"]
    assert fs["_root"] == "VLLM-KV-001" and f.category == "kv_cache_capacity" and f.confidence == "high"
    mml = flag(f, "--max-model-len")
    assert mml.old == "29000" and int(mml.new) <= 23648 and int(mml.new) % 1024 == 0
    util = flag(f, "--gpu-memory-utilization")
    # 2.89 GiB holds 23648 tokens, 29000 need 3.54 GiB: +0.65 GiB of 23.58 GiB (+0.0277) + 0.01
    assert util.old == "0.9" and util.new == "0.94"


def test_max_model_len_inferred_from_sizing_without_the_error_line() -> None:
    text = "\n".join(V0_TOO_SMALL.splitlines()[:5]) + "\n"
    f = findings(text)["VLLM-KV-001"]
    assert f.confidence == "medium" and "not in the input" in (f.confidence_reason or "")
    assert int(flag(f, "--max-model-len").new) <= 23648


def test_fitting_max_model_len_is_quiet() -> None:
    text = V0_TOO_SMALL.replace("max_seq_len=29000", "max_seq_len=20000").replace("for 29000", "for 20000")
    text = "\n".join(text.splitlines()[:5]) + "\n"
    assert "VLLM-KV-001" not in findings(text)


def test_raise_that_cannot_work_is_not_offered() -> None:
    assert vllm_kv_cache.raised_utilization(0.9, needed_bytes=16 * GIB, available_bytes=4.87 * GIB,
                                            total_bytes=23.6 * GIB) is None
    assert vllm_kv_cache.corrected_max_model_len(39888) == 38912
    assert vllm_kv_cache.corrected_max_model_len(1500) == 1488


# ---------------------------------------------------------------------------------------------
# VLLM-KV-002


def test_negative_kv_v1_without_gpu_size_uses_a_lower_bound() -> None:
    text = """\
(EngineCore_0 pid=5839) INFO 08-20 18:04:10 [gpu_model_runner.py:2007] Model loading took 65.9651 GiB and 12.799889 seconds
(EngineCore_0 pid=5839) INFO 08-20 18:04:22 [gpu_worker.py:276] Available KV cache memory: -2.14 GiB
(EngineCore_0 pid=5839) ERROR 08-20 18:04:22 [core.py:700] EngineCore failed to start.
"""
    fs = findings(text)
    f = fs["VLLM-KV-002"]
    assert fs["_root"] == "VLLM-KV-002" and f.category == "weights_do_not_fit" and f.confidence == "medium"
    assert f.figures["gpu_total_is_lower_bound"] is True
    util = flag(f, "--gpu-memory-utilization")
    assert util.old == "0.9 (default, assumed)" and float(util.new) == 0.95  # the raise alone would exceed 0.95
    bt = flag(f, "--max-num-batched-tokens")
    assert bt.old is None and int(bt.new) == 1024  # ≥ 70 GiB GPU class: max_num_seqs defaults to 1024
    assert "VLLM-GPU-001" not in fs


def test_negative_kv_v0_raise_fits() -> None:
    text = (FIXTURES.parent / "scenarios" / "vllm_no_kv_room" / "input" / "console.log").read_text(encoding="utf-8")
    f = findings(text)["VLLM-KV-002"]
    util = flag(f, "--gpu-memory-utilization")
    # (0.81 + max(0.5, 3 % of 23.64) GiB) / 23.64 + 0.75 → 0.82 (rounded up)
    assert util.old == "0.75" and util.new == "0.82"
    assert not [c for c in f.remediation.flags if c.flag == "--max-num-batched-tokens"]  # V0: not this lever


# ---------------------------------------------------------------------------------------------
# VLLM-KV-003


def _metrics(usage: float, pending: int, t: int) -> str:
    return (f"INFO 03-04 10:{t // 60:02d}:{t % 60:02d} metrics.py:467] Avg prompt throughput: 100.0 tokens/s, "
            f"Avg generation throughput: 50.0 tokens/s, Running: 40 reqs, Swapped: 0 reqs, Pending: {pending} reqs, "
            f"GPU KV cache usage: {usage:.1f}%, CPU KV cache usage: 0.0%.")


def test_a_single_early_preemption_is_low() -> None:
    text = "\n".join([_metrics(60.0, 0, 5), "WARNING 03-04 10:00:06 scheduler.py:1560] Sequence group 9 is preempted "
                      "by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect "
                      "the end-to-end performance. total_num_cumulative_preemption=1", _metrics(55.0, 0, 10)]) + "\n"
    f = findings(text)["VLLM-KV-003"]
    assert f.severity == "low"


def test_v1_preemptions_from_the_metrics_line() -> None:
    lines = [f"(APIServer pid=1) INFO 11-20 09:{i:02d}:00 [loggers.py:123] Engine 000: Avg prompt throughput: 10.0 "
             f"tokens/s, Avg generation throughput: 900.0 tokens/s, Running: 64 reqs, Waiting: {i} reqs, "
             f"Preemptions: 12, GPU KV cache usage: 99.1%, Prefix cache hit rate: 3.0%" for i in range(6)]
    f = findings("\n".join(lines) + "\n")["VLLM-KV-003"]
    assert f.severity == "medium" and f.figures["preemptions"] == 72
    assert flag(f, "--gpu-memory-utilization").new == "0.95" and flag(f, "--tensor-parallel-size").new == "2"


def test_busy_but_not_full_is_quiet() -> None:
    text = "\n".join(_metrics(50.0 + i, i % 2, i * 5) for i in range(40)) + "\n"
    assert set(findings(text)) == {"_root"}


# ---------------------------------------------------------------------------------------------
# VLLM-GPU-001


def test_lowered_utilization_arithmetic() -> None:
    assert vllm_headroom.lowered_utilization(0.95, tried_bytes=GIB, free_bytes=612 * (1 << 20),
                                             total_bytes=79.19 * GIB) == 0.92
    assert vllm_headroom.lowered_utilization(0.6, tried_bytes=None, free_bytes=None, total_bytes=None) == 0.55


def test_oom_while_loading_weights_is_not_headroom() -> None:
    text = """\
(EngineCore_DP0 pid=9) ERROR 02-01 10:00:00 [core.py:700] Traceback (most recent call last):
(EngineCore_DP0 pid=9) ERROR 02-01 10:00:00 [core.py:700]   File "/x/vllm/model_executor/model_loader/default_loader.py", line 260, in load_weights
(EngineCore_DP0 pid=9) ERROR 02-01 10:00:00 [core.py:700]     param.data.copy_(w)
(EngineCore_DP0 pid=9) ERROR 02-01 10:00:00 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.64 GiB of which 1.02 GiB is free.
"""
    assert "VLLM-GPU-001" not in findings(text)


def test_healthy_fixtures_are_quiet_and_sglang_rules_ignore_vllm() -> None:
    for name in ("v0_tp2_serve.log", "v1_tp2_serve.log"):
        fs, root = run_all(timeline((FIXTURES / name).read_text(encoding="utf-8"), name))
        assert root is None and not [f for f in fs if f.severity in ("critical", "high")], [f.rule_id for f in fs]
    assert run_all(Timeline(events=empty_frame())) == ([], None)


# ---------------------------------------------------------------------------------------------
# VLLM-HOST-001


def _host_timeline(log: str, total_kib: int) -> Timeline:
    import polars as pl

    from parsers import free

    mem = (f"               total        used        free      shared  buff/cache   available\n"
           f"Mem:        {total_kib}     3921544    58127616       10240     3789064    61227704\n")
    return Timeline(events=pl.concat([vllm.parse(log, "vllm.log").events, free.parse(mem, "free.txt").events]))


def test_swap_space_times_ranks_over_the_host() -> None:
    log = ("INFO 07-21 13:40:02 api_server.py:586] args: Namespace(model='m', tensor_parallel_size=4, swap_space=16.0, "
           "cpu_offload_gb=0, gpu_memory_utilization=0.9)\n")
    fs, root = run_all(_host_timeline(log, 65838224))  # 62.79 GiB
    f = {x.rule_id: x for x in fs}["VLLM-HOST-001"]
    assert root == "VLLM-HOST-001" and f.category == "per_rank_overallocation" and f.severity == "high"
    c = flag(f, "--swap-space")
    assert c.old == "16" and 4 * int(c.new) <= 0.3 * 62.79 and int(c.new) >= 1


def test_swap_space_that_fits_is_quiet() -> None:
    log = ("INFO 07-21 13:40:02 api_server.py:586] args: Namespace(model='m', tensor_parallel_size=4, swap_space=4, "
           "cpu_offload_gb=0)\n")
    fs, _ = run_all(_host_timeline(log, 527_000_000))  # ~502 GiB: 4 × 4 GiB is nothing
    assert "VLLM-HOST-001" not in {x.rule_id for x in fs}


#: vLLM's own refusal (CacheConfig.verify_with_parallel_config): swap × TP against 70 % of total RAM
SWAP_REFUSAL = "ValueError: Too large swap space. 96.00 GiB out of the 125.50 GiB total CPU memory is allocated for the swap space.\n"


def test_swap_refusal_alone_states_the_sum_and_proposes_no_per_gpu_number() -> None:
    f = findings(SWAP_REFUSAL)["VLLM-HOST-001"]
    assert f.category == "per_rank_overallocation" and f.severity == "critical"
    assert "96.00 GiB" in f.summary and "× the tensor-parallel size" in f.summary
    assert not f.remediation.flags  # the sum alone does not say how many GPUs share it


def test_swap_refusal_with_the_flag_gives_the_tensor_parallel_size() -> None:
    flags = ("(APIServer pid=1) INFO 03-02 08:00:00 [arg_utils.py:100] non-default args: {'model': 'm', "
             "'swap_space': 24}\n")
    f = findings(flags + SWAP_REFUSAL)["VLLM-HOST-001"]
    c = flag(f, "--swap-space")
    assert f.figures["ranks_per_host"] == 4 and c.old == "24"
    assert 4 * int(c.new) <= 0.3 * 125.5 and int(c.new) >= 1


def _kv_offload_log(size: int) -> str:
    return ("(APIServer pid=1) INFO 02-10 08:00:00 [utils.py:253] non-default args: {'model_tag': 'm', "
            f"'tensor_parallel_size': 2, 'pipeline_parallel_size': 2, 'data_parallel_size': 2, 'kv_offloading_size': "
            f"{size}}}\n"
            "(EngineCore_DP0 pid=2) INFO 02-10 08:00:05 [core.py:93] Initializing a V1 LLM engine (v0.12.0) with "
            "config: model='m', max_seq_len=8192, tensor_parallel_size=2, pipeline_parallel_size=2\n")


def test_kv_offloading_size_is_one_engines_over_its_tp_and_pp_ranks() -> None:
    # vllm/config/vllm.py: cpu_bytes_to_use = size GiB for the engine, split over TP × PP; each DP replica has its own
    host = 268_435_456  # 256 GiB
    fs, _ = run_all(_host_timeline(_kv_offload_log(100), host))  # 2 engines × 100 GiB within 256 − reserve
    assert "VLLM-HOST-001" not in {x.rule_id for x in fs}
    fs, _ = run_all(_host_timeline(_kv_offload_log(130), host))  # 2 × 130 GiB is over
    f = {x.rule_id: x for x in fs}["VLLM-HOST-001"]
    c = flag(f, "--kv-offloading-size")
    assert c.old == "130" and 2 * int(c.new) <= 256 * 0.9 and int(c.new) >= 100


def test_cpu_offload_per_gpu_counts_for_every_rank() -> None:
    log = ("(APIServer pid=1) INFO 11-20 09:14:02 [utils.py:253] non-default args: {'model_tag': 'm', "
           "'tensor_parallel_size': 2, 'cpu_offload_gb': 120}\n"
           "(EngineCore_DP0 pid=2) INFO 11-20 09:14:09 [core.py:93] Initializing a V1 LLM engine (v0.12.0) with "
           "config: model='m', max_seq_len=8192, tensor_parallel_size=2\n")
    fs, _ = run_all(_host_timeline(log, 205_520_896))  # 196 GiB
    f = {x.rule_id: x for x in fs}["VLLM-HOST-001"]
    off = flag(f, "--cpu-offload-gb")
    assert off.old == "120" and 2 * int(off.new) <= 196 - 19.6
    assert not [c for c in f.remediation.flags if c.flag == "--swap-space"]  # V1 allocates no swap


# ---------------------------------------------------------------------------------------------
# VLLM-HOST-002


#: Ray's memory monitor saying it killed a worker: an observation of a host-memory kill
RAY_MONITOR_KILL = ("(raylet, ip=10.1.4.7) ERROR 03-11 09:02:41 worker.py:611] ray.exceptions.OutOfMemoryError: Task "
                    "was killed due to the node running low on memory. Memory on the node (IP: 10.1.4.7, ID: 9f1c) "
                    "was 243.11GB / 251.50GB (0.966638), which exceeds the memory usage threshold of 0.95.\n")
#: Ray's worker-exit notice: a death, with a generic list of what *might* have caused it
RAY_WORKER_EXIT = ("(RayWorkerWrapper pid=4410) WARNING 03-11 09:02:41 worker.py:2037] A worker died or was killed "
                   "while executing a task by an unexpected system error. Worker exit type: SYSTEM_ERROR Worker exit "
                   "detail: Worker unexpectedly exits with a connection error code 2. End of file. There are some "
                   "potential root causes. (1) The process is killed by SIGKILL by OOM killer due to high memory "
                   "usage. (2) ray stop --force is called. (3) The worker is crashed unexpectedly due to SIGSEGV or "
                   "other unexpected errors.\n")
TP4_LOADING = ("INFO 03-11 09:01:02 llm_engine.py:223] Initializing an LLM engine (v0.4.2) with config: "
               "model='acme/Writer-34B', tensor_parallel_size=4, pipeline_parallel_size=1, seed=0)\n")


def test_ray_monitor_kill_while_loading_suggests_sequential_loading() -> None:
    f = findings(TP4_LOADING + RAY_MONITOR_KILL)["VLLM-HOST-002"]
    assert f.category == "kernel_oom_killer" and f.confidence == "medium"
    assert flag(f, "--max-parallel-loading-workers").new == "1"


def test_ray_list_of_possible_causes_is_not_an_observed_oom_kill() -> None:
    # alone, the death without a traceback is the observation (killed from outside), Ray's list is not: low weight,
    # and the finding names the fact that would confirm it
    alone = findings(RAY_WORKER_EXIT)
    f = alone["VLLM-HOST-002"]
    assert alone["_root"] == "VLLM-HOST-002" and f.confidence == "low" and "does not say why" in f.summary
    assert "not a diagnosis" in f.summary and "dmesg" in f.confidence_reason
    # while 4 ranks were loading their weights through host RAM, host memory is the likely cause, at low weight
    f = findings(TP4_LOADING + RAY_WORKER_EXIT)["VLLM-HOST-002"]
    assert f.confidence == "low" and "does not say why" in f.summary
    assert flag(f, "--max-parallel-loading-workers").new == "1"


#: a worker's own traceback: what its death that follows is the consequence of
WORKER_OOM = ("(Worker_TP1 pid=7) ERROR 09-03 22:29:59 [multiproc_executor.py:654] WorkerProc hit an exception.\n"
              "(Worker_TP1 pid=7) ERROR 09-03 22:29:59 [multiproc_executor.py:654] torch.OutOfMemoryError: CUDA out "
              "of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 44.52 GiB of which 1.10 GiB is "
              "free.\n")
SILENT_WORKER_DEATH = ("(EngineCore_DP0 pid=5) ERROR 09-03 22:30:00 [multiproc_executor.py:149] Worker proc "
                       "VllmWorker-1 died unexpectedly, shutting down executor.\n")


def test_a_death_with_no_traceback_and_no_exit_code_is_a_kill_from_outside() -> None:
    f = findings(SILENT_WORKER_DEATH)["VLLM-HOST-002"]
    assert f.category == "kernel_oom_killer" and f.confidence == "low"
    assert "without a traceback" in f.summary and "memory.events" in f.confidence_reason
    # a traceback in the input says what failed: the death is its consequence, not a kill
    assert "VLLM-HOST-002" not in findings(WORKER_OOM + SILENT_WORKER_DEATH)
    # nor after an orderly stop that reached the workers first
    stop = "(APIServer pid=3) INFO 09-03 22:29:58 [launcher.py:101] Shutting down FastAPI HTTP server.\n"
    assert "VLLM-HOST-002" not in findings(stop + SILENT_WORKER_DEATH)
    # Ray's exit notice after a worker's traceback is the same consequence
    assert "VLLM-HOST-002" not in findings(WORKER_OOM + RAY_WORKER_EXIT)
    # the surviving ranks' NCCL errors after the death are its consequences, not its cause
    after = ("(Worker_TP0 pid=6) ERROR 09-03 22:30:01 [multiproc_executor.py:654] RuntimeError: NCCL error: remote "
             "process exited or there was a network error, NCCL version 2.21.5\n")
    f = findings(SILENT_WORKER_DEATH + after)
    assert f["_root"] == "VLLM-HOST-002", f


def test_sigkill_after_loading_keeps_the_finding_without_the_loading_flag() -> None:
    text = ("(Worker_TP1 pid=7) INFO 09-03 22:12:00 [gpu_model_runner.py:2653] Model loading took 16.4 GiB memory "
            "and 60.1 seconds\n"
            "(EngineCore_DP0 pid=5) ERROR 09-03 22:30:00 [multiproc_executor.py:149] Worker proc VllmWorker-1 died "
            "unexpectedly (exit code: -9), shutting down executor.\n")
    f = findings(text)["VLLM-HOST-002"]
    assert f.confidence == "low" and not f.remediation.flags


def test_an_ordinary_exit_is_not_a_kill() -> None:
    text = ("(EngineCore_DP0 pid=5) ERROR 09-03 22:30:00 [multiproc_executor.py:149] Worker proc VllmWorker-1 died "
            "unexpectedly (exit code: 1), shutting down executor.\n")
    assert "VLLM-HOST-002" not in findings(text)


def test_settings_take_vllm_launch_flags_and_ignore_sglang_launches() -> None:
    import polars as pl

    from forensics.facts import vllm as _vllm
    from parsers.schema import rows_to_frame

    launch = rows_to_frame([
        {"line": 1, "kind": "launch_command", "text": "--num-scheduler-steps 16 --gpu-memory-utilization 0.941",
         "attrs": {"flags": {"--num-scheduler-steps": "16", "--gpu-memory-utilization": "0.941"}}},
        {"line": 2, "kind": "launch_command", "text": "python -m sglang.launch_server --mem-fraction-static 0.8",
         "attrs": {"flags": {"--mem-fraction-static": "0.8", "--max-running-requests": "64"}}},
    ], source="launch", path="launch.sh")
    oom = ("ERROR 10-11 12:27:29 engine.py:157] OutOfMemoryError('CUDA out of memory. Tried to allocate 138.00 MiB. "
           "GPU 0 has a total capacity of 79.15 GiB of which 2.19 MiB is free.')\n"
           "ERROR 10-11 12:27:29 engine.py:157] Traceback (most recent call last):\n"
           'ERROR 10-11 12:27:29 engine.py:157]   File "/x/vllm/engine/multiprocessing/engine.py", line 218, in '
           "run_engine_loop\n")
    tl = Timeline(events=pl.concat([launch, vllm.parse(oom, "server.log").events]))
    run = _vllm.vllm_runs(tl)[0]
    cfg = _vllm.settings(tl, run)
    assert cfg.num("gpu_memory_utilization") == 0.941 and cfg.num("num_scheduler_steps") == 16
    assert cfg.num("max_running_requests") is None
    fs, _ = run_all(tl)
    f = {x.rule_id: x for x in fs}["VLLM-GPU-001"]
    util = flag(f, "--gpu-memory-utilization")
    assert util.old == "0.941" and float(util.new) < 0.941
    assert flag(f, "--num-scheduler-steps").new == "1"


def test_rank_logs_of_one_launch_give_one_finding() -> None:
    import polars as pl

    line = ("(VllmWorker rank={r} pid=1{r}) ERROR 06-05 06:18:13 [multiproc_executor.py:470] RuntimeError: CUDA "
            "error: out of memory\n")
    head = ("(VllmWorker rank={r} pid=1{r}) ERROR 06-05 06:18:13 [multiproc_executor.py:470]   File "
            '"/x/vllm/v1/worker/gpu_model_runner.py", line 1788, in capture_model\n')
    frames = [vllm.parse(head.format(r=r) + line.format(r=r), f"rank{r}.log").events for r in range(4)]
    fs, _ = run_all(Timeline(events=pl.concat(frames)))
    hits = [f for f in fs if f.rule_id == "VLLM-GPU-001"]
    assert len(hits) == 1 and hits[0].ranks == [0, 1, 2, 3]


def test_headroom_marks_a_default_utilization_as_assumed() -> None:
    # V0 capture OOM with no gpu_memory_utilization anywhere in the input: 0.9 is vLLM's default, not an observation
    text = """\
INFO 05-11 10:02:07 model_runner.py:1402] Capturing cudagraphs for decoding. This may lead to unexpected consequences if the model is not static.
ERROR 05-11 10:02:09 worker_base.py:467] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total capacity of 23.57 GiB of which 98.00 MiB is free.
"""
    f = findings(text)["VLLM-GPU-001"]
    util = flag(f, "--gpu-memory-utilization")
    assert util.old == "0.9 (default, assumed)" and float(util.new) < 0.9


# ---------------------------------------------------------------------------------------------
# VLLM-GPU-001 at start-up: the compile / CUDA-graph path (vLLM's capture message: lower the utilization, go eager
# or lower max_num_seqs)

COMPILED_OOM = """\
(RayWorkerWrapper pid=4410, ip=10.0.3.9) ERROR 08-21 14:55:02 [worker_base.py:620] Traceback (most recent call last):
(RayWorkerWrapper pid=4410, ip=10.0.3.9) ERROR 08-21 14:55:02 [worker_base.py:620]   File "/opt/vllm/vllm/compilation/decorators.py", line 170, in __call__
(RayWorkerWrapper pid=4410, ip=10.0.3.9) ERROR 08-21 14:55:02 [worker_base.py:620]     return self.forward(*args, **kwargs)
(RayWorkerWrapper pid=4410, ip=10.0.3.9) ERROR 08-21 14:55:02 [worker_base.py:620]   File "/opt/vllm/vllm/model_executor/models/mixtral.py", line 301, in forward
(RayWorkerWrapper pid=4410, ip=10.0.3.9) ERROR 08-21 14:55:02 [worker_base.py:620]     hidden_states = layer(positions, hidden_states)
[... trimmed ...]
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 MiB. GPU 1 has a total capacity of 39.39 GiB of which 2.50 MiB is free.
"""


def test_a_compiled_forward_oom_in_a_run_that_served_nothing_is_placed_at_start_up() -> None:
    f = findings(COMPILED_OOM)["VLLM-GPU-001"]
    assert f.figures["during"] == "compile"
    assert "at start-up" in f.summary and "while serving" not in f.summary
    assert "8.00 MiB requested, 2.50 MiB free" in f.summary  # not "0.01 GiB"
    assert flag(f, "--enforce-eager").new == "true"
    assert flag(f, "--max-num-seqs").new == "128"  # V0's / a 40 GiB GPU's default 256, halved
    assert f.confidence == "medium"  # placed by the traceback alone


def test_a_compiled_forward_oom_after_serving_stays_a_serving_oom() -> None:
    served = ("INFO 08-21 14:50:00 metrics.py:351] Avg prompt throughput: 812.0 tokens/s, Avg generation throughput: "
              "95.1 tokens/s, Running: 12 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 71.0%, CPU KV "
              "cache usage: 0.0%.\n")
    f = findings(served + COMPILED_OOM)["VLLM-GPU-001"]
    assert f.figures["during"] == "forward" and "while serving" in f.summary
    assert not [c for c in f.remediation.flags if c.flag in ("--enforce-eager", "--max-num-seqs")]


def test_an_oom_after_capture_before_any_serving_line_is_start_up(tmp_path: Path) -> None:
    # a failure-scan abort (no frames) after the capture finished and before anything was served
    text = """\
INFO 03-02 11:00:01 model_runner.py:1077] Loading model weights took 14.99 GB
INFO 03-02 11:00:20 model_runner.py:1401] Capturing the model for CUDA graphs. This may lead to unexpected consequences if the model is not static.
INFO 03-02 11:00:41 model_runner.py:1530] Graph capturing finished in 21 secs, took 0.88 GiB
:0:rocdevice.cpp            :2652: 52811204411 us: 7712: [tid:0x7f31aa7fe700] Device::callbackQueue aborting with error : HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources. code: 0x1008
"""
    (tmp_path / "server.log").write_text(text, encoding="utf-8")
    fs, _ = run_all(build_timeline([tmp_path]))
    f = next(x for x in fs if x.rule_id == "VLLM-GPU-001")
    assert f.figures["during"] == "startup_forward" and "before anything was served" in f.summary
    assert flag(f, "--enforce-eager").new == "true"


def test_an_eager_launch_gets_no_capture_alternatives() -> None:
    eager = "INFO 08-21 14:40:00 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='m', enforce_eager=True\n"
    f = findings(eager + COMPILED_OOM)["VLLM-GPU-001"]
    assert not [c for c in f.remediation.flags if c.flag in ("--enforce-eager", "--max-num-seqs")]


def test_pools_without_the_host_size_do_not_claim_they_exceed_it() -> None:
    # the host's size is the unknown: the title must not say the total exceeds it (the catalog's title does)
    log = ("INFO 07-21 13:40:02 api_server.py:586] args: Namespace(model='m', tensor_parallel_size=4, swap_space=16.0, "
           "cpu_offload_gb=0, gpu_memory_utilization=0.9)\n"
           # past the load: the swap blocks are pinned after it (a death before it is VLLM-HOST-002's alone)
           "INFO 07-21 13:41:02 model_runner.py:104] Loading model weights took 15.00 GB\n"
           "ERROR 07-21 13:41:10 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid 4242 died, exit code: -9\n")
    with_host = {x.rule_id: x for x in run_all(_host_timeline(log, 65838224))[0]}["VLLM-HOST-001"]
    without = findings(log).get("VLLM-HOST-001")
    assert "exceeds" in with_host.title
    assert without is not None and "exceeds" not in without.title and "not state" in without.title
    assert without.figures.get("capacity_bytes") is None and without.figures["demand_bytes"] == 4 * 16 * 2**30

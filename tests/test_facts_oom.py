"""forensics/facts/oom.py: what an OOM-shaped row says ran out, and the phase an OOM is placed in."""

from __future__ import annotations

import json

import pytest

from forensics.facts.oom import PLACE_AT_MOST, memory_kind, oom_phase, phase_of_frames, place_ooms


def _row(kind: str, line: int, text: str = "", file: str = "a.log", **attrs) -> dict:
    return {"kind": kind, "line": line, "file": file, "text": text, "attrs": json.dumps(attrs)}


@pytest.mark.parametrize(("frames", "phase"), [
    ([("srt/managers/scheduler.py", "run_batch"), ("srt/model_executor/model_runner.py", "forward_extend"),
      ("srt/layers/logits_processor.py", "forward")], "prefill"),
    ([("srt/model_executor/model_runner.py", "forward_decode"), ("srt/model_executor/cuda_graph_runner.py", "replay")],
     "decode"),
    ([("srt/model_executor/cuda_graph_runner.py", "capture"), ("x/cuda_graph_runner.py", "capture_one_batch_size"),
      ("srt/model_executor/model_runner.py", "forward_decode")], "graph_capture"),
    ([("srt/model_executor/model_runner.py", "init_memory_pool"), ("mem_cache/memory_pool.py", "_create_buffers")],
     "memory_pool"),
    ([("model_loader/loader.py", "load_model"), ("models/llama.py", "load_weights"), ("layers/linear.py", "weight_loader")],
     "weight_load"),
    # vLLM: capture and the profiling run both go through _dummy_run; the outer phase wins
    ([("v1/worker/gpu_model_runner.py", "capture_model"), ("v1/worker/gpu_model_runner.py", "_dummy_run")],
     "graph_capture"),
    ([("v1/worker/gpu_worker.py", "determine_available_memory"), ("v1/worker/gpu_model_runner.py", "profile_run"),
      ("v1/worker/gpu_model_runner.py", "_dummy_run")], "profile"),
    ([("v1/worker/gpu_worker.py", "compile_or_warm_up_model"), ("v1/worker/gpu_model_runner.py", "_dummy_sampler_run")],
     "sampler_warmup"),
    ([("controller/tp_worker.py", "forward_step"), ("controller/tp_worker.py", "forward_decode_batch")], "decode"),
    ([("controller/tp_worker.py", "forward_step"), ("controller/tp_worker.py", "forward_fill_batch")], "prefill"),
    ([("x/engine.py", "serve"), ("x/util.py", "helper")], None),
    # the speculative draft's worker being built: its load and pool come after the target's, whatever they are
    ([("srt/managers/scheduler.py", "__init__"), ("srt/speculative/eagle_worker.py", "__init__"),
      ("srt/model_executor/model_runner.py", "init_memory_pool"), ("mem_cache/memory_pool.py", "_create_buffers")],
     "draft_init"),
    ([("srt/managers/scheduler.py", "launch_draft_worker"), ("srt/model_executor/model_runner.py", "load_model")],
     "draft_init"),
    # ... but the same worker serving is a decode like any other
    ([("srt/speculative/eagle_worker.py", "forward_batch_generation"), ("srt/speculative/eagle_worker.py", "draft"),
      ("srt/model_executor/model_runner.py", "forward_decode")], "decode"),
])
def test_phase_of_frames(frames: list[tuple[str, str]], phase: str | None) -> None:
    assert phase_of_frames(frames) == phase


def test_replay_file_name_is_not_capture() -> None:
    # cuda_graph_runner.py also replays every decode step: a file name alone does not place a capture
    assert phase_of_frames([("srt/model_executor/cuda_graph_runner.py", "replay")]) != "graph_capture"


def test_batch_line_places_a_bare_oom() -> None:
    run = [_row("prefill_batch", 1), _row("decode_batch", 2), _row("cuda_oom", 3, "torch.OutOfMemoryError: ...")]
    assert oom_phase(run, run[-1]) == ("decode", "the decode batch line before it")
    run = [_row("decode_batch", 1), _row("prefill_batch", 2), _row("cuda_oom", 3, "torch.OutOfMemoryError: ...")]
    assert oom_phase(run, run[-1])[0] == "prefill"


def test_forward_frames_take_the_batch_kind_from_the_line_before() -> None:
    tb = ('Traceback (most recent call last):\n  File "s/tp_worker.py", line 9, in forward_batch_generation\n'
          '    x = self.model_runner.forward(batch)\n')
    run = [_row("prefill_batch", 1), _row("scheduler_exception", 2, tb)]
    assert oom_phase(run, run[-1]) == ("prefill", "the batch line before it")


def test_an_oom_line_inside_a_traceback_takes_its_frames() -> None:
    tb = ('Traceback (most recent call last):\n  File "m/model_runner.py", line 4, in init_memory_pool\n'
          '    self.pool = Pool()\n  File "m/memory_pool.py", line 9, in _create_buffers\n    torch.zeros(\n')
    trace = {**_row("scheduler_exception", 10, tb), "line_end": 16}
    oom = _row("cuda_oom", 16, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    assert oom_phase([trace, oom], oom) == ("memory_pool", "the traceback's frames")


def test_nothing_places_a_lone_line() -> None:
    oom = _row("cuda_oom", 1, "torch.OutOfMemoryError: CUDA out of memory.")
    assert oom_phase([oom], oom) == (None, "")


def test_placement_is_bounded() -> None:
    run = [_row("decode_batch", 0)] + [_row("cuda_oom", i, "x") for i in range(1, 200)]
    assert len(place_ooms(run, run[1:])) == PLACE_AT_MOST


@pytest.mark.parametrize(("exc", "kind"), [
    ("RuntimeError: Triton Error [CUDA]: out of memory", "device"),
    ("RuntimeError: CUDA driver error (/w/kernel_runtime.hpp:45): 2 (CUDA_ERROR_OUT_OF_MEMORY, out of memory)", "device"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.19 GiB",
     "device"),
    ("torch.OutOfMemoryError: out of resource: triton_bmm_7 Required: 98304 Hardware limit:65536 Reducing block sizes",
     "workspace"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory.", "bogus"),
    ("ValueError: max_total_num_tokens is not positive", None),
])
def test_memory_kind_of_an_exception(exc: str, kind: str | None) -> None:
    etype, _, msg = exc.partition(": ")
    row = _row("scheduler_exception", 1, "Traceback (most recent call last):\n" + exc,
               exception_type=etype, exception_message=msg)
    assert memory_kind(row) == kind


def test_sglang_start_up_order_places_an_oom_without_frames() -> None:
    def sg(kind: str, line: int) -> dict:
        return {**_row(kind, line), "source": "sglang"}
    oom = sg("cuda_oom", 9)
    assert oom_phase([sg("weight_load_begin", 1), sg("weight_load_end", 2), oom], oom)[0] == "memory_pool"
    assert oom_phase([sg("weight_load_end", 2), sg("memory_pool_end", 3), oom], oom)[0] == "graph_capture"
    # vLLM's order differs (it profiles after loading): the engine's own parser places those
    vllm_end = {**_row("weight_load_end", 2), "source": "vllm"}
    assert oom_phase([vllm_end, oom], oom) == (None, "")


def test_a_chained_traceback_keeps_the_oom_under_its_secondary_error() -> None:
    text = ("Traceback (most recent call last):\n  File \"m/model_runner.py\", line 3, in forward_decode\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of "
            "79.19 GiB of which 300.00 MiB is free.\n\nDuring handling of the above exception, another exception "
            "occurred:\n\nTraceback (most recent call last):\n  File \"m/scheduler.py\", line 9, in on_error\n"
            "TypeError: 'NoneType' object is not iterable")
    row = _row("scheduler_exception", 1, text, exception_type="TypeError",
               exception_message="'NoneType' object is not iterable")
    assert memory_kind(row) == "device"


def test_a_ranks_own_records_place_its_oom() -> None:
    def sg(kind: str, line: int, rank: str) -> dict:
        return {**_row(kind, line), "source": "sglang", "rank": rank}
    oom = sg("cuda_oom", 9, "TP0")
    run = [sg("cuda_graph_begin", 3, "TP0"), sg("weight_load_begin", 4, "TP3"), oom]
    assert oom_phase(run, oom)[0] == "graph_capture"  # TP3 still loading says nothing of TP0
    run = [sg("decode_batch", 5, "TP0"), sg("cuda_oom", 9, "TP3")]
    assert oom_phase(run, run[-1])[0] == "decode"  # batch lines are the first rank's only

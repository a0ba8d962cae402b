"""parsers/failures.py: failure text in any text, every release's wording, with or without a prefix.

Our own lines, written to the templates of failure_messages.md; each case checks the kind, the class
and the figures parsed, and a few lines that only look like failures check it stays quiet.
"""

from __future__ import annotations

import json

import pytest

from parsers import failures
from parsers.schema import row_attrs
from parsers.units import GIB, MIB

PREFIXES = (
    "",
    "[2026-03-01 10:00:00 TP3] ",
    "(EngineCore_0 pid=207) ERROR 03-01 10:00:00 [core.py:1132] ",
    "[rank3]: ",
    "(RayWorkerWrapper pid=4411, ip=10.1.2.3) ",
    "sglang-1  | ",
    "2026-03-01T10:00:00.123456789Z ",
    "\x1b[1;31mERROR\x1b[0m ",
)


def one(text: str) -> dict:
    ev = failures.parse(text).events
    assert ev.height == 1, ev
    row = ev.row(0, named=True)
    row["a"] = row_attrs(row)
    return row


OOM_V1 = ("RuntimeError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 2; 39.39 GiB total capacity; 36.10 GiB "
          "already allocated; 812.00 MiB free; 36.92 GiB reserved in total by PyTorch) If reserved memory is >> "
          "allocated memory try setting max_split_size_mb to avoid fragmentation.")
OOM_V21 = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacty of "
           "23.65 GiB of which 3.06 MiB is free. Including non-PyTorch memory, this process has 23.64 GiB memory in use. "
           "Of the allocated memory 22.91 GiB is allocated by PyTorch, and 310.12 MiB is reserved by PyTorch but "
           "unallocated.")
OOM_V24 = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 5 has a total capacity of "
           "139.81 GiB of which 2.19 GiB is free. Process 4411 has 12.00 GiB memory in use. Including non-PyTorch "
           "memory, this process has 125.60 GiB memory in use. Of the allocated memory 118.20 GiB is allocated by "
           "PyTorch, with 6.10 GiB allocated in private pools (e.g., CUDA Graphs), and 1.30 GiB is reserved by PyTorch "
           "but unallocated.")
OOM_HIP = ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of "
           "191.98 GiB of which 1.02 GiB is free. Of the allocated memory 180.11 GiB is allocated by PyTorch, and "
           "3.40 GiB is reserved by PyTorch but unallocated.")


@pytest.mark.parametrize("prefix", PREFIXES)
def test_the_allocator_oom_of_every_era_with_any_prefix(prefix: str) -> None:
    r = one(prefix + OOM_V24)
    assert (r["kind"], r["gpu"], r["bytes"], r["total_bytes"]) == ("cuda_oom", 5, 4 * GIB, round(139.81 * GIB))
    assert r["used_bytes"] == round(125.60 * GIB)
    assert r["a"]["processes"] == [{"pid": 4411, "used_bytes": 12 * GIB}]
    assert r["a"]["private_pools_bytes"] == round(6.10 * GIB)


def test_pytorch_1x_and_21_wordings() -> None:
    old = one(OOM_V1)
    assert (old["gpu"], old["total_bytes"], old["free_bytes"]) == (2, round(39.39 * GIB), 812 * MIB)
    assert old["a"]["reserved_bytes"] == round(36.92 * GIB)
    typo = one(OOM_V21)  # 2.1's "capacty"
    assert (typo["gpu"], typo["bytes"], typo["free_bytes"]) == (0, 20 * MIB, round(3.06 * MIB))


def test_hip_oom_has_no_process_clauses() -> None:
    r = one(OOM_HIP)
    assert r["kind"] == "cuda_oom" and r["a"]["device_api"] == "hip" and "processes" not in r["a"]


def test_nvml_not_available_is_no_process() -> None:
    r = one("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of "
            "8.00 GiB of which 0 bytes is free. Process 77 has 17179869184.00 GiB memory in use. Of the allocated "
            "memory 7.20 GiB is allocated by PyTorch, and 12.00 MiB is reserved by PyTorch but unallocated.")
    assert "processes" not in r["a"] and r["free_bytes"] == 0


@pytest.mark.parametrize("text", [
    "RuntimeError: CUDA error: out of memory",
    "torch.AcceleratorError: CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation' in https://docs",
    "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "RuntimeError: HIP error: out of memory",
    "HIP driver error 'hipErrorOutOfMemory' (2): out of memory",
    "RuntimeError: Triton Error [CUDA]: out of memory",
    "gpu-a:881:902 [3] NCCL WARN Cuda failure 'out of memory'",
    "gpu-a:881:902 [3] include/alloc.h:125 NCCL WARN Failed to CUDA calloc 6291456 bytes",
    "RuntimeError: CUDART error: out of memory",  # the engines' ctypes wrapper of cudaMalloc
])
def test_runtime_and_library_allocation_failures(text: str) -> None:
    r = failures.parse(text).events.row(0, named=True)
    assert r["kind"] == "cuda_error_oom"


def test_pinned_host_registration_with_its_size() -> None:
    r = one("RuntimeError: cudaHostRegister failed (rc=2, out of memory) for ptr=0x7f2a00000000 size=107374182400; "
            "host buffer is not pinned and device transfers may silently return stale data.")
    assert (r["kind"], r["bytes"]) == ("cuda_error_oom", 107374182400) and r["a"]["host_pinned"] and r["a"]["rc"] == 2
    chunked = one("RuntimeError: cudaHostRegister failed (rc=2, out of memory) at offset=0 size=1073741824 "
                  "(total=214748364800, chunk_limit=1073741824); host buffer is not pinned")
    assert chunked["bytes"] == 214748364800  # the whole pool, not the chunk


def test_rocm_out_of_resources_takes_its_free_figure_from_the_next_line() -> None:
    r = one("HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources.\n"
            "Available Free mem : 12 MB")
    assert r["kind"] == "cuda_error_oom" and r["a"]["unreliable"] and r["free_bytes"] == 12 * 10**6
    assert (r["line"], r["line_end"]) == (1, 2)


@pytest.mark.parametrize(("text", "cls"), [
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "illegal_memory_access"),
    ("Memory access fault by GPU node-2 (Agent handle: 0x55d1) on address 0x7f01. Reason: Page not present.",
     "illegal_memory_access"),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "ecc_error"),
    ("RuntimeError: CUDA error: unspecified launch failure", "launch_failure"),
    ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled cuda error (run with "
     "NCCL_DEBUG=INFO for details), NCCL version 2.21.5", "nccl_error"),
    ("ncclUnhandledCudaError: Call to CUDA function failed.", "nccl_error"),
    ("torch.distributed.DistBackendError: NCCL error: unhandled system error", "nccl_error"),
    ("gpu-a:881:902 [3] include/shm.h:28 NCCL WARN Error: failed to extend /dev/shm/nccl-Ab12 to 9637892 bytes",
     "shm_exhausted"),
    ("[rank1]:[E1130 03:00:01.000000000 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation "
     "timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600100 "
     "milliseconds before timing out.", "collective_timeout"),
    ("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
     "store_timeout"),
    ("Fatal Python error: Segmentation fault", "signal"),
    ("terminate called after throwing an instance of 'c10::DistBackendError'", "signal"),
    ("RuntimeError: Rank 2 scheduler died during initialization (exit code: -9)", "process_exit"),
    ("Worker proc VllmWorker-1 died unexpectedly (exit code: 137), shutting down executor.", "process_exit"),
    ("Memory cgroup out of memory: Killed process 9001 (python3) total-vm:1kB, anon-rss:1000kB, file-rss:0kB, "
     "shmem-rss:2000kB", "oom_killed"),
    ("    Reason:       OOMKilled", "oom_killed"),
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory. Memory on the node "
     "(IP: 10.0.0.5, ID: ab12) where the task was running was 480.20GB / 503.00GB (0.954), which exceeds the memory "
     "usage threshold of 0.95.", "ray_oom"),
    # the memory monitor's message from its first words (a paste cuts its tail), and the raylet's kill summary
    ("Memory on the node (IP: 10.0.0.5, ID: 9f3e) where the task (actor ID: 77, name=RayWorkerWrapper.__init__, "
     "pid=411, memory used=9.80GB) was running was 30.10GB / 31.50GB (0.9556), which exceeds the memory usage thr",
     "ray_oom"),
    ("(raylet) node_manager.cc:3041: 3 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers "
     "crashed due to other reasons at node (ID: 4c1d, IP: 10.0.0.5) over the last time period.", "ray_oom"),
    ("OSError: [Errno 98] Address already in use", "port_in_use"),
    ("Input length (140000 tokens) exceeds the maximum allowed length (131066 tokens). Use a shorter input or enable "
     "--allow-auto-truncate.", "request_refused"),
    ("RuntimeError: Failed to allocate memory for batch_prefill_tmp_v with size 536870912 and alignment 16 in "
     "AlignedAllocator", "workspace"),
    ("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 232448, Hardware limit: 232448. "
     "Reducing block sizes or `num_stages` may help.", "workspace"),
    ("MemoryError: Unable to allocate 12.0 GiB for an array", "host_oom"),
    ("Cannot map memory with base addr 0x7f0000000000 and size of 0x100000 pages", "kernel_map_failed"),
    ("AssertionError: SWA Pool Mem Leak Detected! [swa] total=10, available=2", "kv_pool_leak"),
    ("ValueError: Unsupported architecture 'FooForCausalLM'", "exception"),
])
def test_each_failure_class(text: str, cls: str) -> None:
    r = one(text)
    assert (r["kind"], r["a"].get("failure")) == ("failure", cls)


def test_a_kill_summary_of_no_kills_is_no_failure() -> None:
    r = failures.parse("(raylet) node_manager.cc:3041: 0 Workers (tasks / actors) killed due to memory pressure (OOM), "
                       "2 Workers crashed due to other reasons at node (ID: 4c1d, IP: 10.0.0.5)\n", "r.log").events
    assert "ray_oom" not in [json.loads(a).get("failure") for a in r.get_column("attrs").to_list()]


def test_figures_of_the_classes() -> None:
    assert one("Fatal Python error: Bus error")["code"] == -7
    assert one("Worker proc VllmWorker-1 died unexpectedly (exit code: 137), shutting down executor.")["code"] == -9
    wd = one("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=BROADCAST, "
             "Timeout(ms)=1800000) ran for 1800555 milliseconds before timing out.")
    assert wd["seconds"] == 1800.555 and wd["a"]["timeout_s"] == 1800 and wd["a"]["op_type"] == "BROADCAST"
    store = one("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.")
    assert store["count"] == 1 and store["a"]["world_size"] == 2
    refused = one("Input length (140000 tokens) exceeds the maximum allowed length (131066 tokens).")
    assert refused["tokens"] == 140000 and refused["a"]["limit_tokens"] == 131066 and refused["a"]["reveals"] == "kv_pool"
    ray = one("Task was killed due to the node running low on memory. Memory on the node (IP: 10.0.0.5, ID: ab) where "
              "the task was running was 480.20GB / 503.00GB (0.954)")
    assert ray["total_bytes"] == round(503 * GIB)
    pages = one("Cannot map memory with base addr 0x7f0000000000 and size of 0x100000 pages")
    assert pages["bytes"] == 0x100000 * 4096


def test_a_traceback_is_one_row_with_its_stage() -> None:
    text = ("Traceback (most recent call last):\n"
            '  File "/x/sglang/srt/model_executor/model_runner.py", line 300, in initialize\n'
            "    self.init_memory_pool(total_gpu_memory)\n"
            '  File "/x/sglang/srt/model_executor/model_runner.py", line 900, in init_memory_pool\n'
            "    self.req_to_token_pool = ReqToTokenPool(\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 21.36 GiB. GPU 0 has a total capacity of "
            "79.19 GiB of which 9.00 GiB is free.\n"
            "next line is not part of it\n")
    r = one(text)
    assert (r["kind"], r["line"], r["line_end"]) == ("cuda_oom", 1, 6)
    assert r["a"]["during"] == "memory_pool" and r["a"]["innermost_frame"] == "model_runner.py:init_memory_pool"


def test_a_cut_traceback_still_says_where() -> None:
    r = one("Traceback (most recent call last):\n"
            '  File "/x/sglang/srt/model_executor/cuda_graph_runner.py", line 40, in capture\n'
            "[... trimmed ...]\n")
    assert r["a"]["failure"] == "traceback_cut" and r["a"]["during"] == "graph_capture"


def test_frames_without_their_header_still_name_the_stage() -> None:
    r = one('  File "/x/sglang/srt/model_loader/loader.py", line 411, in load_model\n'
            "    model.load_weights(weights)\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 1 has a total capacity of "
            "79.19 GiB of which 1.00 GiB is free.")
    assert r["kind"] == "cuda_oom" and r["a"]["during"] == "weight_load"


def test_the_prefix_gives_time_and_rank() -> None:
    r = one("[2026-03-01 10:00:07 TP5] RuntimeError: CUDA error: an illegal memory access was encountered")
    assert r["tp_rank"] == 5 and r["rank"] == "TP5" and str(r["ts_local"]) == "2026-03-01 10:00:07"


@pytest.mark.parametrize("text", [
    "INFO 03-01 10:00:00 [gpu_worker.py:227] Available KV cache memory: 21.34 GiB",
    "[2026-03-01 10:00:00 TP0] Decode batch, #running-req: 3, #token: 1000, token usage: 0.01, cuda graph: True",
    "We discussed the error handling in the meeting.",
    "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "ExitStack is a context manager",
    "process exited normally with exit code 0",
])
def test_lines_that_only_look_like_failures_stay_quiet(text: str) -> None:
    assert failures.parse(text).events.height == 0


def test_coverage_counts_the_lines_it_read() -> None:
    r = failures.parse("hello\nFatal Python error: Aborted\nbye\n")
    assert (r.lines, r.recognized) == (3, 1)


def test_a_long_log_reads_the_same_failures_as_a_short_one() -> None:
    """Past 2000 lines the candidate lines are picked in one vectorised pass: the rows must not change."""
    batch = "[2026-03-01 10:00:00 TP0] Decode batch, #running-req: 2, #token: 900, token usage: 0.01, cuda graph: True\n"
    failing = ("Traceback (most recent call last):\n"
               '  File "/x/sglang/srt/managers/scheduler.py", line 10, in event_loop\n'
               "    self.run_batch(batch)\n"
               "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of "
               "79.19 GiB of which 0 bytes is free.\n"
               "Fatal Python error: Aborted\n")
    short = failures.parse(batch * 10 + failing).events
    long = failures.parse(batch * 3000 + failing).events
    assert long.height == short.height == 2
    assert (long.get_column("line") - 2990).to_list() == short.get_column("line").to_list()
    assert long.get_column("kind").to_list() == short.get_column("kind").to_list() == ["cuda_oom", "failure"]


def test_frames_without_header_or_message_are_a_cut_traceback() -> None:
    """A paste that kept only the middle of a traceback: the frames still say where, and that it allocated."""
    r = one("[... trimmed ...]\n"
            '  File "/x/sglang/srt/model_executor/cuda_graph_runner.py", line 143, in __init__\n'
            "    self.model_runner.attn_backend.init_cuda_graph_state(self.max_num_token)\n"
            '  File "/x/sglang/srt/layers/attention/triton_backend.py", line 72, in init_cuda_graph_state\n'
            "    self.cuda_graph_attn_logits = torch.empty(\n"
            "[... trimmed ...]\n")
    assert (r["line"], r["line_end"]) == (2, 5)
    assert r["a"]["failure"] == "traceback_cut" and r["a"]["during"] == "graph_capture"
    assert r["a"]["stops_at_allocation"] is True
    assert failures.parse('  File "/x/a.py", line 1, in f\n    g()\n').events.height == 0  # one frame is no traceback


def test_a_cut_mark_between_headless_frames_and_their_error_keeps_them_together() -> None:
    """A user's own cut ('<snip>', '...') between the frames and the exception line: the frames still place it."""
    rows = failures.parse('  File "/y/sglang/srt/model_executor/cuda_graph_runner.py", line 40, in capture\n'
                          "    with graph_capture() as ctx:\n"
                          '  File "/y/sglang/srt/distributed/device_communicators/custom_all_reduce.py", line 9, in '
                          "register_graph_buffers\n"
                          "<snip>\n"
                          "RuntimeError: CUDA error: invalid argument\n").events
    (r,) = [json.loads(a) for a in rows["attrs"].to_list()]
    assert r["during"] == "graph_capture" and r["innermost_frame"] == "custom_all_reduce.py:register_graph_buffers"


@pytest.mark.parametrize("text, asked, limit", [
    ("The input (9120 tokens) is longer than the model's context length (8192 tokens).", 9120, 8192),
    # a JSON error body pasted with its escape kept
    ('{"object":"error","message":"The input (70001 tokens) is longer than the model\\\'s context length (65536 '
     'tokens).","code":400}', 70001, 65536),
    ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, "
     "1000 in the completion).", 5000, 4096),
    ("The decoder prompt (length 140000) is longer than the maximum model length of 131072. Make sure", 140000, 131072),
])
def test_context_refusal_separates_the_request_from_the_limit(text: str, asked: int, limit: int) -> None:
    r = one(text)
    assert r["a"]["reveals"] == "context_length"
    assert (r["tokens"], r["a"]["limit_tokens"]) == (asked, limit)


@pytest.mark.parametrize("mark", ["[... trimmed ...]", "...", "<snip>", "(truncated)", "[...]", "-- 14 lines omitted --"])
def test_an_elided_traceback_is_one_failure_with_its_message(mark: str) -> None:
    """Whatever mark the writer left where they cut frames out, the traceback goes on to its exception line."""
    r = one("Traceback (most recent call last):\n"
            '  File "/srv/sglang/srt/managers/scheduler.py", line 900, in event_loop_normal\n'
            "    result = self.run_batch(batch)\n"
            f"{mark}\n"
            '  File "/srv/sglang/srt/model_executor/model_runner.py", line 1500, in forward_extend\n'
            "    return self.model.forward(\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 2 has a total capacity of "
            "44.39 GiB of which 1.07 GiB is free.\n")
    assert r["kind"] == "cuda_oom" and r["line"] == 1 and r["line_end"] == 7


# --- documented forms only (issue 29): each message read as its source prints it, cut pastes read as cut


def test_rocm_free_figure_on_the_abort_line_itself_and_an_underflow_is_no_figure() -> None:
    # ROCclr's callbackQueue prints the figure at the end of the abort line (newer ROCm)
    r = one(":0:rocdevice.cpp            :3020: 99120331 us: [pid:812 tid:0x7f11] Callback: Queue 0x7f0a Aborting with "
            "error : HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources. Code: "
            "0x1008 Available Free mem : 488 MB")
    assert r["free_bytes"] == 488 * 10**6 and (r["line"], r["line_end"]) == (1, 1)
    bogus = one("HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources. Code: 0x1008 "
                "Available Free mem : 17592186044372 MB")
    assert bogus.get("free_bytes") is None


def test_a_registration_refused_with_invalid_value_is_not_out_of_memory() -> None:
    refused = one("RuntimeError: cudaHostRegister failed (rc=1, invalid argument) at offset=0 size=25769803776 "
                  "(total=51539607552, chunk_limit=25769803776); host buffer is not pinned")
    assert (refused["kind"], refused["a"]["failure"], refused["a"]["rc"]) == ("failure", "host_register_refused", 1)
    assert refused["bytes"] == 51539607552
    short = one("RuntimeError: cudaHostRegister failed (rc=2, out of memory) for ptr=0x7f00 size=4096; host buffer")
    assert short["kind"] == "cuda_error_oom"


def test_a_process_clause_is_read_in_its_documented_wording_only() -> None:
    clause = one("Process 40211 has 52.75 GiB memory in use.")
    assert clause["kind"] == "cuda_oom" and clause["a"]["fragment"]
    assert clause["a"]["processes"] == [{"pid": 40211, "used_bytes": int(52.75 * GIB)}]
    # a writer's cut through the clause: the size may be anyone's, nothing is read from it
    assert failures.parse("Process 40211 ... 52.75 GiB").events.height == 0


def test_pool_leak_checks_in_sglang_wording() -> None:
    for text in ("token_to_kv_pool_allocator memory leak detected! available_size=901, protected_size=0",
                 "AssertionError: Full Pool Mem Leak Detected! [full] total=4096, available=3968"):
        assert one(text)["a"]["failure"] == "kv_pool_leak"
    assert failures.parse("we think a leak detected by valgrind is unrelated").events.height == 0


def test_a_test_harness_sentence_is_not_an_engine_start_up_failure() -> None:
    assert failures.parse("Engine vllm failed to start workers 2 times, giving up").events.height == 0


def test_sglang_port_wait_names_the_port_the_wait_and_the_holder() -> None:
    same_line = one("ValueError: nccl_port at 31005 is not available in 45 seconds. nccl_port is used by a process "
                    "already. process.name()='python3'' process.cmdline()=['python3', '-m', 'sglang.launch_server', "
                    "'--port', '31000'] process.status()='disk-sleep' pid=7781")
    a = same_line["a"]
    assert (a["port_name"], a["port"], a["waited_s"]) == ("nccl_port", 31005, 45)
    assert a["holder_is_engine"] and a["holder_status"] == "disk-sleep" and same_line["pid"] == 7781
    wrapped = one("ValueError: port at 8002 is not available in 30 seconds. port is used by a process already.\n"
                  "process.name()='nginx'' process.cmdline()=['nginx: worker process'] process.status()='sleeping'")
    assert wrapped["line_end"] == 2 and wrapped["a"]["holder_is_engine"] is False


def test_madvise_prefault_with_efault_is_a_tmpfs_that_cannot_back_the_mapping() -> None:
    # madvise(2): EFAULT for MADV_POPULATE_* is a SIGBUS the access would have raised (a full tmpfs)
    r = one("Traceback (most recent call last):\n"
            '  File "/srv/app/ring.py", line 40, in attach\n'
            "    self.buf.madvise(mmap.MADV_POPULATE_WRITE, 0, size)\n"
            "OSError: [Errno 14] Bad address\n")
    assert r["a"]["failure"] == "shm_exhausted" and r["a"]["via"] == "madvise_populate_efault"
    # the same errno from another call is no shared-memory fault
    other = one("Traceback (most recent call last):\n"
                '  File "/srv/app/io.py", line 12, in read\n'
                "    os.read(fd, n)\n"
                "OSError: [Errno 14] Bad address\n")
    assert other["a"]["failure"] == "exception"


def test_a_runtime_oom_inside_the_pinned_host_allocator_is_host_memory() -> None:
    # failure_messages.md §2.1: frames through pin_memory / CachingHostAllocator ⇒ host, not the GPU
    r = one("Traceback (most recent call last):\n"
            '  File "/srv/ring/buffers.py", line 88, in grow\n'
            "    staging = torch.empty(nbytes, dtype=torch.uint8).pin_memory()\n"
            "RuntimeError: CUDA error: out of memory\n")
    assert r["kind"] == "cuda_error_oom" and r["a"]["host_pinned"]
    gpu = one("Traceback (most recent call last):\n"
              '  File "/srv/ring/buffers.py", line 91, in grow\n'
              "    staging = torch.empty(nbytes, dtype=torch.uint8, device='cuda')\n"
              "RuntimeError: CUDA error: out of memory\n")
    assert not gpu["a"].get("host_pinned")


def test_a_refused_registration_is_not_a_pinning_shortage() -> None:
    """failure_messages.md §2.2: 712 (already registered) is the registration's own error; 801 (not supported) only
    with the registration in the frames; neither is the runtime's out-of-memory."""
    kind, _cols, attrs = failures.classify(
        "RuntimeError: CUDA error: part or all of the requested memory range is already mapped")
    assert (kind, attrs["failure"], attrs["rc"]) == ("failure", "host_register_refused", 712)
    assert failures.classify("RuntimeError: CUDA error: operation not supported")[2].get("failure") != \
        "host_register_refused"  # without frames it could be any runtime call
    assert failures.register_refusal("RuntimeError: CUDA error: operation not supported",
                                     "    cudart.cudaHostRegister(buf.data_ptr(), n, 0)") == 801
    assert failures.register_refusal("RuntimeError: CUDA error: out of memory", "cudaHostRegister(...)") is None


@pytest.mark.parametrize("line", [
    "4471 Killed",
    "./serve.sh: line 9:  4471 Killed                  python3 -m sglang.launch_server --tp 8",
    "[2]-  Killed                  vllm serve acme/m --tensor-parallel-size 4",
])
def test_the_shells_report_of_a_killed_job(line: str) -> None:
    """Bash names the job it reaped (jobs.c, pretty_print_job): the pid and the command around ``Killed``."""
    kind, cols, attrs = failures.classify(line)
    assert (kind, cols["code"], attrs["failure"], attrs["signal"]) == ("failure", -9, "signal", "Killed")


def test_killed_in_prose_is_not_a_kill() -> None:
    assert failures.classify("the job was Killed after an hour") is None
    assert failures.classify("Killed by user request") is None


def test_sglang_ci_gpu_idle_wait_is_a_gpu_held_before_the_run() -> None:
    """SGLang's CI harness (sgl-project/sglang PR #31746) waits for the GPUs before each test class."""
    from parsers.failures import classify

    kind, cols, attrs = classify("[CI GPU Idle] Waiting for GPU to become idle: GPU 5 uses 11.02 GiB (pid=40231 10.51 GiB)")
    assert (kind, attrs["failure"], cols) == ("failure", "gpu_busy", {"gpu": 5, "pid": 40231})
    assert classify("RuntimeError: GPU(s) still not idle after waiting 60s before setUpClass:")[2]["failure"] == "gpu_busy"
    assert classify("the GPU was not idle when I looked") is None  # prose, no harness wording


def test_ascend_npu_allocator_oom_keeps_its_figures() -> None:
    """torch_npu's caching allocator (Ascend/pytorch NPUCachingAllocator.cpp) keeps the ≤2.0 layout with a
    ``current active`` clause: the same figures as CUDA's, read from their own places."""
    kind, cols, attrs = failures.classify(
        "RuntimeError: NPU out of memory. Tried to allocate 512.00 MiB (NPU 3; 29.50 GiB total capacity; 27.10 GiB "
        "already allocated; 27.10 GiB current active; 301.25 MiB free; 27.60 GiB reserved in total by PyTorch) If "
        "reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.")
    assert (kind, attrs["device_api"], cols["gpu"]) == ("cuda_oom", "npu", 3)
    assert (cols["bytes"], cols["free_bytes"]) == (512 * 1024**2, round(301.25 * 1024**2))
    assert cols["total_bytes"] == round(29.5 * 1024**3) and attrs["reserved_bytes"] == round(27.6 * 1024**3)


@pytest.mark.parametrize("line, used", [
    # 2.3–2.50, pasted without the ``Task was killed …`` header above it
    ("Memory on the node (IP: 172.16.4.9, ID: 5e0c) where the task (actor ID: 77aa, name=RayWorkerWrapper.__init__, "
     "pid=4120, memory used=52.30GB) was running was 60.12GB / 62.80GB (0.957325), which exceeds the memory usage "
     "threshold of 0.95. Ray killed this worker (ID: 3c1d) because it was the most recently scheduled task;", 60.12),
    # 2.60: used / limit
    ("Memory on the node (IP: 172.16.4.9, ID: 5e0c) was 60.12GB used / 62.80GB limit (0.957325)", 60.12),
    # the raylet's periodic summary (Ray's documentation, "Debugging Out of Memory")
    ("(raylet) [2025-03-02 11:40:03,118 E 221 221] (raylet) node_manager.cc:3041: 3 Workers (tasks / actors) killed "
     "due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 5e0c, IP: 172.16.4.9) over "
     "the last time period.", None),
])
def test_ray_memory_monitor_observations_without_their_header(line: str, used: float | None) -> None:
    kind, cols, attrs = failures.classify(line)
    assert (kind, attrs["failure"]) == ("failure", "ray_oom")
    if used is not None:
        assert cols["used_bytes"] == round(used * 1024**3)


def test_ray_summary_with_no_oom_kill_is_not_one() -> None:
    """``0 Workers … killed due to memory pressure`` with crashes for other reasons: no memory kill happened."""
    assert failures.classify("(raylet) node_manager.cc:3041: 0 Workers (tasks / actors) killed due to memory pressure "
                             "(OOM), 2 Workers crashed due to other reasons at node (ID: 5e0c, IP: 10.0.0.2)") is None


def test_ray_header_and_figure_line_are_one_report() -> None:
    r = failures.parse("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
                       "Memory on the node (IP: 10.2.0.7, ID: 91ab) where the task (task ID: ff01, name=Worker.run, "
                       "pid=812, memory used=20.50GB) was running was 30.10GB / 31.20GB (0.964743), which exceeds the "
                       "memory usage threshold of 0.95. Ray killed this worker (ID: 0c1d) because it was the most "
                       "recently scheduled task;\n")
    row = r.events.row(0, named=True)
    assert r.events.height == 1 and (row["line"], row["line_end"], row["pid"]) == (1, 2, 812)


def test_kubelet_eviction_names_the_container_and_its_request() -> None:
    """§5.3 «Kubernetes»: node-pressure eviction, distinct from the container's own limit (OOMKilled)."""
    kind, cols, attrs = failures.classify(
        "Message:          The node was low on resource: memory. Threshold quantity: 100Mi, available: 48Mi. "
        "Container engine was using 30Gi, request is 4Gi, has larger consumption of memory.")
    assert (attrs["failure"], attrs["via"], cols["comm"]) == ("oom_killed", "node_pressure_eviction", "engine")
    assert (cols["used_bytes"], attrs["request_bytes"]) == (30 * 2**30, 4 * 2**30)
    older = failures.classify("The node was low on resource: memory. Container engine was using 30Gi, which exceeds "
                              "its request of 4Gi. ")
    assert older[2]["request_bytes"] == 4 * 2**30


@pytest.mark.parametrize("line, want", [
    ("(RayWorkerWrapper pid=41, ip=10.0.0.9) INFO x", {"pid": 41, "ray_actor": "RayWorkerWrapper", "ip": "10.0.0.9"}),
    ("\x1b[36m(RayWorkerWrapper pid=41)\x1b[0m INFO x", {"pid": 41, "ray_actor": "RayWorkerWrapper"}),
    # a copy that lost the colour code's escape keeps its "[36m"
    ("[36m(RayWorkerWrapper pid=41, ip=10.0.0.9) INFO x", {"pid": 41, "ray_actor": "RayWorkerWrapper", "ip": "10.0.0.9"}),
    ("[2026-01-01 00:00:00 TP0] (pid=41) x", {}),
])
def test_ray_process_tag(line: str, want: dict) -> None:
    from parsers.failures import process_tag

    assert process_tag(line) == want


def test_resource_tracker_shutdown_warning_is_information_with_its_echo_line() -> None:
    """cpython multiprocessing/resource_tracker.py's shutdown warning (and the source line warnings prints under
    it) is one ``leaked_at_shutdown`` row, never a ``failure``; a segment it could not unlink is one too."""
    import json

    from parsers import failures

    text = ("Killed\n"
            "/usr/lib/python3.12/multiprocessing/resource_tracker.py:279: UserWarning: resource_tracker: There appear "
            "to be 4 leaked shared_memory objects to clean up at shutdown: {'/psm_a1', '/psm_b2'}\n"
            "  warnings.warn(\n"
            "resource_tracker: '/psm_a1': [Errno 2] No such file or directory: '/psm_a1'\n")
    got = [(r["line"], r["line_end"], r["kind"], json.loads(r["attrs"]))
           for r in failures.parse(text).events.iter_rows(named=True)]
    assert [(a, b, k) for a, b, k, _ in got] == [(1, 1, "failure"), (2, 3, "leaked_at_shutdown"),
                                                  (4, 4, "leaked_at_shutdown")]
    assert (got[1][3]["resource"], got[1][3]["objects"]) == ("shared_memory", 4)
    assert (got[2][3]["resource"], got[2][3]["name"]) == ("shared_memory", "/psm_a1")

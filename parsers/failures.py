"""Failure text in any text: the lines that say something broke, wherever they were pasted.

A format parser reads the records of its own format; this module reads what every format shares
and nobody owns — PyTorch's allocator OOM in every release's wording, CUDA/HIP runtime and library
errors, NCCL errors, illegal memory access, signals and exit codes, /dev/shm exhaustion, request
refusals that reveal a small KV pool, Ray's memory monitor, the last line of a Python traceback —
with or without a prefix (SGLang, vLLM, ``[rank3]:``, Ray actors, compose, time stamps), in a log, a
fragment of a ticket or a traceback. Figures are parsed (bytes, GPU, exit codes, token counts).

The timeline runs :func:`parse` over every text read whole and keeps the rows for lines that the
format's own parser did not already report as a failure. Reference: ``failure_messages.md``.

Kinds: ``cuda_oom`` (the caching allocator's message, CUDA or HIP, with figures), ``cuda_error_oom``
(a runtime/library allocation failed: no figures, or the host-pinning size), ``dist_transport`` (Gloo's
start-up connections: :func:`gloo_transport`), ``leaked_at_shutdown`` (Python's resource tracker cleaning up
after processes that were killed: :func:`leaked_at_shutdown`; information, not a failure), and ``failure`` for
everything else, with ``attrs.failure`` naming the class (see :data:`CLASSES`).

>>> r = parse("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a "
...           "total capacity of 79.10 GiB of which 20.08 GiB is free. Process 806478 has 59.01 GiB memory in use.")
>>> r.events.select("kind", "gpu", "bytes").row(0)
('cuda_oom', 3, 2147483648)
>>> parse("Fatal Python error: Bus error").events.select("kind", "code").row(0)
('failure', -7)
>>> parse("all good\\nnothing to see").events.height
0
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import polars as pl

from .elision import is_elision
from .nvidia_smi.common import match_failure
from .schema import ParseResult
from .shm_listing import shm_file
from .units import GIB, MIB, k8s_quantity, parse_size

FORMAT = "failures"

#: attrs.failure of ``failure`` rows, and what each proves
CLASSES = {
    "exception": "a Python exception (the last line of a traceback, or a logged str(e))",
    "traceback_cut": "a traceback whose exception line is not in the input",
    "illegal_memory_access": "a kernel faulted (CUDA illegal address / ROCm memory access fault): the context is dead",
    "ecc_error": "uncorrectable ECC error: hardware",
    "nvlink_error": "uncorrectable NVLink error: fabric",
    "launch_failure": "a kernel crashed or timed out (unspecified launch failure)",
    "cuda_error": "another CUDA/HIP runtime error",
    "device_unavailable": "no usable GPU (busy, not detected, driver mismatch)",
    "cuda_forked": "CUDA used in a process forked after its parent had initialised CUDA",
    "nccl_error": "a NCCL call failed (unhandled CUDA/system/remote error)",
    "collective_timeout": "a rank waited past the process-group timeout in a collective",
    "store_timeout": "rendezvous (TCPStore/Gloo) did not complete: a peer never joined",
    "peer_exited": "a peer's socket reached end-of-file (Gloo, TCPStore): the process at the other end had exited",
    "probe_failed": "a Kubernetes startup, liveness or readiness probe of the container failed (kubelet event)",
    "probe_restart": "the kubelet killed the container for a failed startup or liveness probe (it will be restarted)",
    "crash_backoff": "Kubernetes backing off restarting a container that keeps exiting (CrashLoopBackOff)",
    "shm_exhausted": "/dev/shm could not back a segment (too small or full)",
    "signal": "a process died of a signal (SIGBUS, SIGSEGV, SIGABRT, SIGKILL)",
    "process_exit": "a process exited or died with a code",
    "oom_killed": "the kernel, cgroup or container runtime killed a process for host memory",
    "ray_oom": "Ray's memory monitor killed a worker: host RAM above its threshold",
    "host_oom": "a host (CPU) allocation failed",
    "gpu_busy": "a GPU still held memory (another process's) when a run started",
    "port_in_use": "a port or address was already taken by another process",
    "request_refused": "a request was refused as too long (context or KV pool)",
    "workspace": "a fixed kernel workspace or shared-memory limit, not GPU memory",
    "kv_pool_leak": "an engine's KV pool self-check found leaked slots",
    "dispatch_cap": "a batch larger than DeepEP's low-latency dispatch cap per rank (a capacity, not GPU memory)",
    "hicache_host_smaller": "SGLang's HiCache host pool is not larger than the device KV pool it backs",
    "health_check": "the health check failed",
    "kernel_map_failed": "the kernel could not map (pin) a host memory range",
    "host_register_refused": "CUDA refused to register (pin) a host buffer with a code other than out-of-memory",
    "startup_failed": "a server or worker failed during start-up",
    "device_assert": "a CUDA kernel's device-side assertion failed (an index out of range): the context is dead",
    "arch_unsupported": "the GPU's architecture cannot run a kernel or data type that was asked for",
    "abi_mismatch": "a compiled extension does not match the library it was loaded against (undefined symbol)",
    "memory_saver_oom": "the memory saver could not map GPU memory for a paused region (out of memory) and exited",
    "memory_resume_failed": "a client's request that SGLang map its paused memory back failed or timed out",
    "numa_bind_refused": "numactl could not apply a NUMA binding and exited before the program it wraps started",
}

# A figure starts where a number does and its digits are possessive: searched in a line of digits, a
# match is tried once per number, not once per digit (which costs the square of the line)
_SIZE = r"(?<![\d.])(\d++(?:\.\d++)? ?(?:bytes|[KMGTP]iB))"
_N = r"(\d+(?:\.\d+)?)"
# ECMA-48 (SGR and other CSI escapes a coloured log keeps)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")

#: prefixes that stand before a message: stamps, ranks, process tags (stripped to find where it starts)
#: §0 «Per-line prefixes»; the forms of reference/sglang_formats.md §1 and reference/vllm_formats.md §1.1, §1.3
_PREFIXES = (
    re.compile(r"^\s*\[rank\d+\]:\s?"),
    re.compile(r"^\[[A-Z]\d{4} [\d:.]+ [^\]]*\]\s*"),  # c10d [E321 02:07:08.408 ProcessGroupNCCL.cpp:607]
    re.compile(r"^\((?:[\w.:-]+ )?pid=\d+(?:, ip=[^)]*)?\)\s*"),  # vLLM/Ray process tags
    re.compile(r"^\(raylet[^)]*\)\s*"),
    re.compile(r"^\[\d{4}-\d\d-\d\d[ T][\d:.,]+(?: [^\]]*)?\]\s*"),  # SGLang [stamp TP0]
    re.compile(r"^\d{4}-\d\d-\d\d[ T][\d:.,]+(?:Z|[+-]\d\d:?\d\d)?\s+"),  # ISO stamp
    re.compile(r"^(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\s+\d\d-\d\d [\d:.]+\s+(?:\[[^\]]*\]|\S+\.py:\d+\])\s*"),
    re.compile(r"^(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)[: ]\s*"),
    re.compile(r"^[\w.-]+\s+\|\s"),  # compose service-1  |
)

# a traceback as cpython Lib/traceback.py (3.x) prints it: header, File/line frames, the exception line; §4.3
_EXC_LINE = re.compile(
    r"^((?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault)|AssertionError)"
    # a class of a module named errors/exceptions, whatever its name (triton.runtime.errors.OutOfResources)
    r"|(?:[A-Za-z_]\w*\.)*(?:errors|exceptions)\.[A-Z]\w*)(?::\s?(.*))?$"
)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\):?\s*$")
_FRAME = re.compile(r'^\s*File "([^"]*)", line \d+, in (\S+)')
# §2.1 (the frames say which allocation failed)
_ALLOCATION = re.compile(r"torch\.(?:empty|zeros|ones|full|randn?)(?:_like)?\(|\.cuda\(\)|\.to\([^)]*cuda|"
                         r"torch\.cuda\.(?:caching_allocator|mem_get_info)|\balloc(?:ate)?\w*\(")
_CARETS = re.compile(r"^\s*[\^~]+\s*$")
_FRAME_LIKE = re.compile(r'^\s+(?:File "|\S)|^\s*\^+\s*$|^\s*~+\s*$|^\s*$')

# --- the allocator OOM (§1) ---
#: ``NPU``: Ascend's torch_npu caching allocator (Ascend/pytorch torch_npu/csrc/core/npu/NPUCachingAllocator.cpp,
#: ``DeviceCachingAllocator::malloc``), which vLLM-Ascend and SGLang's NPU backend run on
_OOM = re.compile(r"\b(CUDA|HIP|XPU|MPS|NPU) out of memory\b")
_OOM_TRIED = re.compile(r"Tried to allocate " + _SIZE)
_OOM_GPU = re.compile(r"GPU (\d+) has a total capac(?:i)?ty of(?: " + _SIZE + ")?")  # the size may be cut off
_OOM_FREE = re.compile(r"of which " + _SIZE + r" is free")
_OOM_THIS = re.compile(r"this process has " + _SIZE + r" memory in use")
_OOM_PROC = re.compile(r"Process (\d+) has " + _SIZE + r" memory in use")
# §1.1: the free clause alone, on the next line of a paste that wrapped the message before "which"
_OOM_WRAPPED_FREE = re.compile(r"(?:of )?which " + _SIZE + r" is free")
# §1.1 (the 2.4+ private-pools and reserved-but-unallocated clauses; the ≤2.0 template), §1.5 (allowed memory)
_OOM_ALLOC = re.compile(r"(?:Of the allocated memory )?" + _SIZE + r" is allocated by PyTorch")
_OOM_PRIVATE = re.compile(r"with " + _SIZE + r" allocated in private pools")
_OOM_UNALLOC = re.compile(r"and " + _SIZE + r" is reserved by PyTorch but unallocated")
_OOM_V1 = re.compile(r"\(GPU (\d+); " + _SIZE + r" total capacity; " + _SIZE + r" already allocated; " + _SIZE + r" free;")
_OOM_V1_RES = re.compile(_SIZE + r" reserved in total by PyTorch")
_OOM_ALLOWED = re.compile(r"Allocation on device (\d+) would exceed allowed memory")
# §1.1 (2.2+): the allocator's own hint names its configuration variable (PYTORCH_ALLOC_CONF from 2.10, the HIP
# spelling on ROCm, §3)
_OOM_CONF_VAR = re.compile(r"try setting (PYTORCH_(?:CUDA_|HIP_)?ALLOC_CONF)=expandable_segments:True")
#: torch_npu keeps the ≤2.0 layout with a ``current active`` clause and ``NPU`` for ``GPU``: ``NPU out of memory. Tried
#: to allocate {A} (NPU {d}; {T} total capacity; {alloc} already allocated; {active} current active; {F} free;
#: [{allowed} allowed; ]{R} reserved in total by PyTorch)`` — torch_npu torch_npu/csrc/core/npu/NPUCachingAllocator.cpp
#: (main, 2025: ``AT_ERROR`` in ``DeviceCachingAllocator::malloc``)
_OOM_NPU = re.compile(r"\(NPU (\d+); " + _SIZE + r" total capacity; " + _SIZE + r" already allocated; " + _SIZE
                      + r" current active; " + _SIZE + r" free;")

# --- CUDA runtime/library errors (§2, §3, §7) ---
_RUNTIME_OOM = re.compile(
    r"CUDA error: out of memory|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|"
    r"CUFFT_ALLOC_FAILED|hipErrorOutOfMemory|HIP error: out of memory|Triton Error \[CUDA\]: out of memory|"
    r"CUDA_ERROR_OUT_OF_MEMORY|Cuda failure (?:2 )?'out of memory'|Failed to CUDA (?:c|m)alloc(?: async)? (\d+) bytes|"
    r"HSA_STATUS_ERROR_OUT_OF_RESOURCES|CUDA driver error: out of memory|"
    # the engines' own ctypes wrapper of the runtime (sglang python/sglang/srt/distributed/device_communicators/
    # cuda_wrapper.py (0.4-0.5), vllm vllm/distributed/device_communicators/cuda_wrapper.py (0.5+) ``CUDART_CHECK``:
    # ``RuntimeError(f"CUDART error: {error_str}")``): a raw cudaMalloc, outside PyTorch's allocator
    r"CUDART error: out of memory"
)
#: SGLang's HiCache host pool registration (0.5.15+, chunked 0.5.23: failure_messages.md §2.4); ``rc`` is the CUDA
#: runtime's error code: 2 = cudaErrorMemoryAllocation (the kernel would not lock that much RAM), 1 =
#: cudaErrorInvalidValue (the driver refused the range), which is not a memory shortage by itself
_HOST_REGISTER = re.compile(r"cudaHost(?:Register|Alloc) failed(?: \(rc=(\d+)[^)]*\))?")
_RC_OUT_OF_MEMORY = 2
# §2.4 (the registration line's ``size=``/``total=``)
_REG_SIZE = re.compile(r"\bsize=(\d+)")
_REG_TOTAL = re.compile(r"\btotal=(\d+)")
#: ROCclr's queue-abort callback (ROCm/clr rocclr/device/rocm/rocdevice.cpp, ``callbackQueue``) ends the
#: HSA_STATUS_ERROR_OUT_OF_RESOURCES line with ``Code: 0x1008 Available Free mem : N MB`` in newer ROCm; a paste that
#: wraps the long line puts it on the next one. Values past 2^40 MB are an unsigned underflow, not a figure.
#: rocm rocclr/device/rocm/rocdevice.cpp (6.x, ``callbackQueue``); §3
_AVAIL_FREE = re.compile(r"Available Free mem\s*:\s*" + _N + r"\s*([KMGT]?B)", re.I)
_AVAIL_FREE_BOGUS_MB = 1 << 40
# §2.1, §2.2 (the runtime error strings), §3 (HIP)
_CUDA_ERR = re.compile(r"\b(CUDA|HIP) error: (.+)")

#: torch_memory_saver's fatal checks (SGLang's --enable-memory-saver regions: the pools RL trainers pause and
#: resume): CURESULT_CHECK / CUDA_ERROR_CHECK print the driver's or runtime's code, then exit(1) with no traceback
#: (torch_memory_saver csrc/utils.h (0.0.6-0.0.9) ``CUresult error: 2 (out of memory) file=… func=… line=…``;
#: torch_memory_saver csrc/torch_memory_saver.cpp (0.0.4-0.0.5) ``CUresult error  result=2 file=…``). Code 2 is
#: CUDA_ERROR_OUT_OF_MEMORY (CUresult) and cudaErrorMemoryAllocation (cudaError_t); the non-fatal
#: ``cuMemCreate CUDA_ERROR_OUT_OF_MEMORY (may not be an issue …)`` notice, followed by a retry, is not matched.
MEMORY_SAVER_OOM = re.compile(r"\[torch_memory_saver\.cpp\] (CUresult|cudaError) error:? {1,2}(?:result=)?2\b"
                              r"[^\n]{0,200}?\bfunc=(\w{1,60})")
#: vLLM's sleep-mode allocator (``--enable-sleep-mode``, how RL frameworks colocate vLLM with training): its
#: CUDA_CHECK prints the driver's message and python_create_and_map raises it as a RuntimeError (vllm
#: csrc/cumem_allocator.cpp (0.7.3+) ``"CUDA Error: %s at %s:%d"`` with cuGetErrorString's text, from
#: ``create_and_map``, which vllm/device_allocator/cumem.py ``CuMemAllocator.wake_up`` and the first allocation
#: call). Only CUDA_ERROR_OUT_OF_MEMORY ("out of memory") is matched: another code is not a lack of memory.
VLLM_CUMEM_OOM = re.compile(r"\bCUDA Error: out of memory at \S{0,200}?cumem_allocator\.cpp:(\d+)")
#: a client's report that its call of SGLang's resume endpoint failed (the endpoint's name: sglang
#: python/sglang/srt/entrypoints/http_server.py (0.4.6-0.5.x) ``/resume_memory_occupation``), e.g. a colocated
#: trainer's ``Async request to resume_memory_occupation timed out (attempt 1)``
MEMORY_RESUME_FAILED = re.compile(r"\bresume_memory_occupation\b[^\n]{0,160}?\b(timed out|failed|[Ee]rror)\b")

#: CUDA used in a child forked from a parent that had already initialised it: pytorch torch/cuda/__init__.py::_lazy_init
#: (2.x) ``Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the 'spawn'
#: start method``; vLLM forces spawn itself when it sees CUDA initialised (vllm_formats.md §5 VLLM_WORKER_MULTIPROC_METHOD)
_CUDA_FORKED = re.compile(r"Cannot re-initialize CUDA in forked subprocess")

#: a native check that prints and exits with no Python traceback: the custom all-reduce's CUDACHECK (vllm
#: csrc/custom_all_reduce.cuh (0.3-0.11) ``Failed: Cuda error %s:%d '%s'``, older builds without "Cuda error"; sglang
#: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh (0.4-0.5) the same macro)
_NATIVE_CHECK = re.compile(r"^Failed: (?:Cuda error )?(\S{1,300}?\.(?:cuh|cu|cpp|cc|h|hpp)):(\d{1,6}) '([^'\n]{1,160})'")
#: ROCm's HSA runtime reports a kernel's bad GPU virtual address through the queue callback of ROCclr
#: (rocclr/device/rocm/rocdevice.cpp ``callbackQueue``: ``Callback: Queue 0x… aborting with error : {status}``) with the
#: status string of ROCR-Runtime's hsa_status_string (``HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted
#: to access memory beyond the largest legal address. code: 0x29``; ``HSA_STATUS_ERROR_MEMORY_FAULT``): an address
#: fault like CUDA's illegal address, despite "MEMORY" in the name, not an out-of-memory (failure_messages.md §3 lists
#: the OUT_OF_RESOURCES status of the same callback and ROCr's ``Memory access fault by GPU``)
_ILLEGAL = re.compile(r"illegal memory access|Memory access fault by GPU|cudaErrorIllegalAddress|hipErrorIllegalAddress"
                      r"|HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION|HSA_STATUS_ERROR_MEMORY_FAULT"
                      # the status's own text, which a terminal's wrap may leave on a line of its own
                      r"|agent attempted to access memory beyond the largest legal address")
_ECC = re.compile(r"uncorrectable ECC error|cudaErrorECCUncorrectable")
_NVLINK = re.compile(r"uncorrectable NVLink error|cudaErrorNvlinkUncorrectable")
_LAUNCH = re.compile(r"unspecified launch failure|cudaErrorLaunchFailure")
_NO_DEVICE = re.compile(
    r"no CUDA-capable device is detected|CUDA-capable device\(s\) is/are busy or unavailable|"
    r"CUDA driver version is insufficient|Found no NVIDIA driver|NVIDIA driver on your system is too old"
)
#: a kernel's device-side assertion: the device printf of ``CUDA_KERNEL_ASSERT`` (pytorch c10/macros/Macros.h (1.x–2.x):
#: ``{file}.cu:{line}: {func}: block: [x,y,z], thread: [x,y,z] Assertion `{cond}` failed.``) and the runtime error it
#: leaves, ``CUDA error: device-side assert triggered`` (``cudaErrorAssert``, 710; failure_messages.md §2.1's template,
#: whose ``TORCH_USE_CUDA_DSA`` line is about these assertions)
_DEVICE_ASSERT = re.compile(r"\.cuh?:\d+: [\w()<>~:]{1,100}: block: \[[\d,]+\], thread: \[[\d,]+\] Assertion .{1,300} failed|"
                            r"device-side assert triggered|cudaErrorAssert\b")
#: a kernel or data type this GPU's architecture cannot run: Triton's fp8 check (triton
#: python/triton/language/core.py (3.0+) ``dtype.to_ir``: ``type {dtype} not supported in this architecture. The
#: supported fp8 dtypes are {…}``; triton python/triton/language/semantic.py (2.1) ``fp8e4nv data type is not supported
#: on CUDA arch < 89``), the CUDA runtime's ``no kernel image is available for execution on the device``
#: (``cudaErrorNoKernelImageForDevice``, 209, through failure_messages.md §2.1's ``CUDA error: {str}``: the binary holds
#: no code for this compute capability), and an attention kernel's own architecture check (flash-attention
#: flash_attn/cute/interface.py (FA4, 2025+): ``FP8 is only supported on SM100 (compute capability 10.x) for FA4 CuTe``)
#: and vLLM's check of a quantization method against the device (vllm vllm/config/vllm.py, 0.10+; vllm/config.py
#: ``_verify_quantization`` before: ``The quantization method {q} is not supported for the current GPU. Minimum
#: capability: {m}. Current capability: {c}.``, capabilities as major×10+minor; a pydantic ValidationError may wrap it)
_ARCH_UNSUPPORTED = re.compile(
    r"type fp8\w{0,6} not supported in this architecture|fp8\w{0,6} data type is not supported on CUDA arch < ?(\d+)|"
    r"no kernel image is available for execution on the device|cudaErrorNoKernelImageForDevice|"
    r"only supported on SM ?(\d+) \(compute capability [\d.x]+\)|"
    r"quantization method (\w{1,40}) is not supported[ ]{1,4}for the current GPU\. Minimum capability: (\d{2,3})\. "
    r"Current capability: (\d{2,3})"
)
#: AMD's Composable Kernel refusing a problem none of its compiled instances covers (rocm composable_kernel
#: include/ck/tensor_operation/gpu/device/impl/ (6.x): a device op whose ``IsSupportedArgument`` is false throws
#: ``wrong! {op} with the specified compilation parameters does not support this GEMM problem``), reached through
#: AITER's fused MoE and GEMMs in vLLM (``VLLM_ROCM_USE_AITER*``) and SGLang (``SGLANG_USE_AITER``): a kernel-coverage
#: gap for this shape on this GPU, not memory
_CK_NO_INSTANCE = re.compile(r"with the specified compilation parameters does not support this (?:GEMM|Gemm) problem")
#: a dtype or an attention backend the GPU's architecture cannot run, as vLLM checks it before loading: bf16 below
#: compute capability 8.0 (vllm vllm/platforms/cuda.py ``check_if_supports_dtype``, 0.7+; vllm/worker/worker.py
#: ``_check_if_gpu_supports_dtype`` before: ``Bfloat16 is only supported on GPUs with compute capability of at least
#: 8.0. Your {name} GPU has compute capability {c}. You can use float16 instead by explicitly setting the `dtype`
#: flag in CLI, for example: --dtype=half.``) and FlashAttention-2 on Volta/Turing (vllm
#: vllm/attention/backends/flash_attn.py, V0: ``Cannot use FlashAttention-2 backend for Volta and Turing GPUs.``)
_DTYPE_ARCH = re.compile(r"Bfloat16 is only supported on GPUs with compute capability of at least (\d)\.(\d)"
                         r"(?:\. Your ([^\n]{1,60}?) GPU has compute capability (\d\.\d))?")
_BACKEND_ARCH = re.compile(r"Cannot use FlashAttention-2 backend for Volta and Turing GPUs")
#: dlopen(3)'s error for a shared object that needs a symbol no loaded library defines (``ImportError: {path}.so:
#: undefined symbol: {name}``): the extension was built against another version of the library that should define
#: it; its mangled namespace names that library (``c10``/``at``/``torch``: PyTorch; ``cu…``: the CUDA driver API)
_UNDEFINED_SYMBOL = re.compile(r"(?<![\w./+-])([\w./+-]{1,600}?\.so)[\w.]{0,20}: undefined symbol: (\S{1,300})")
#: the installed package a shared object belongs to (``…/site-packages/{package}/…``)
_PACKAGE_DIR = re.compile(r"(?:site|dist)-packages/([\w.-]{1,100})/")
# §7 (kernel-library workspaces: FlashInfer, Triton, Inductor)
_WORKSPACE = re.compile(
    r"AlignedAl\w{0,4}tor|Out of workspace memory|workspace_buffer too small|insufficient workspace|workspace to the [\w-]+ .*too small|"
    r"OutOfResources: out of resource|out of resource: \w+ Required: \d+|Increase the workspace buffer size"
)
_WS_NEED = re.compile(r"(?:with size|need) (\d+)")

# --- Kubernetes' kubelet restarting a container (its events, as ``kubectl describe pod`` / ``kubectl get events`` print
# them) ---
#: a probe that failed: kubernetes pkg/kubelet/prober/prober.go (1.2x) records ``%s probe failed: %s`` (probe type
#: Startup/Liveness/Readiness, then the probe's output: ``Get "http://…/health": dial tcp …: connect: connection
#: refused``, ``HTTP probe failed with statuscode: 503``, ``context deadline exceeded``); describe aggregates repeats
#: as ``(x3 over 13s)`` in the Age column
PROBE_FAILED = re.compile(r"\b(Startup|Liveness|Readiness) probe failed: ?(.{0,300})")
_EVENT_REPEATS = re.compile(r"\(x(\d{1,6}) over ")
#: the kubelet killing the container for it: pkg/kubelet/kuberuntime/kuberuntime_manager.go (1.2x)
#: ``computePodActions``: ``Container %s failed %s probe`` + ``, will be restarted`` (the Killing event); only
#: startup and liveness probes restart a container (Kubernetes docs, "Configure Liveness, Readiness and Startup
#: Probes": a readiness failure only takes the pod out of its Service's endpoints)
PROBE_RESTART = re.compile(r"Container (\S{1,253}) failed (startup|liveness) probe, will be restarted")
#: the restart loop: pkg/kubelet/kuberuntime/kuberuntime_manager.go (1.2x) ``doBackOff``: ``Back-off restarting
#: failed container %s in pod %s`` (the BackOff event), the container's waiting reason ``CrashLoopBackOff`` in
#: ``kubectl get pods``' STATUS column (``NAME  READY  STATUS  RESTARTS  AGE``) or describe's ``Reason:``
_BACKOFF = re.compile(r"Back-off restarting failed container(?: (\S{1,253}))?|\bCrashLoopBackOff\b")
_GET_PODS_RESTARTS = re.compile(r"^\s*\S+\s+\d+/\d+\s+CrashLoopBackOff\s+(\d{1,6})\b")


def kubelet_restart(text: str) -> dict[str, Any] | None:
    """The facts of a kubelet event or pod status line that says a container's probe failed or that it was restarted:
    ``event`` (``probe_failed``, ``probe_restart``, ``crash_backoff``), ``probe``, ``probe_output``, ``refused``,
    ``count``, ``container``, ``restarts``; None for any other text.

    >>> kubelet_restart('Warning  Unhealthy  3s (x3 over 13s)  kubelet  Startup probe failed: Get "http://10.1.0.7:8000/health": '
    ...                 'dial tcp 10.1.0.7:8000: connect: connection refused')["count"]
    3
    >>> kubelet_restart("Normal  Killing  2m  kubelet  Container vllm failed liveness probe, will be restarted")["probe"]
    'liveness'
    >>> kubelet_restart("vllm-0   0/1   CrashLoopBackOff   5 (2m30s ago)   13m")["restarts"]
    5
    """
    head = text[:4000]
    if (k := PROBE_RESTART.search(head)) is not None:
        return {"event": "probe_restart", "container": k.group(1), "probe": k.group(2),
                **({"count": int(c.group(1))} if (c := _EVENT_REPEATS.search(head)) else {})}
    if (p := PROBE_FAILED.search(head)) is not None:
        out = p.group(2).strip()
        return {"event": "probe_failed", "probe": p.group(1).lower(), "probe_output": out[:300],
                "refused": "connection refused" in out,
                **({"count": int(c.group(1))} if (c := _EVENT_REPEATS.search(head)) else {})}
    if (b := _BACKOFF.search(head)) is not None:
        r = _GET_PODS_RESTARTS.search(head)
        return {"event": "crash_backoff", **({"container": b.group(1)} if b.group(1) else {}),
                **({"restarts": int(r.group(1))} if r else {})}
    return None


# --- NCCL / c10d (§4) ---
_NCCL = re.compile(
    r"NCCL error in: |ncclUnhandledCudaError|ncclSystemError|ncclInternalError|ncclRemoteError|ncclInvalidUsage|"
    r"unhandled (?:cuda|system) error|NCCL Error \d+:|NCCL error: |NCCL WARN (?:Cuda failure|Call to|NET/)|"
    # NCCL misc/socket.cc and proxy.cc WARNs: a peer's socket that would not connect or closed (§4.1)
    r"NCCL WARN (?:socket\w{0,40}: |\[Proxy Service \d+\] Failed)|"
    r"NCCL communicator was aborted|remote process exited or there was a network error"
)
_WATCHDOG = re.compile(r"Watchdog caught collective operation timeout|failure detected by watchdog at work sequence id|"
                       r"Exception \(either an error or timeout\) detected by watchdog|"
                       # 1.4-1.8 with NCCL_BLOCKING_WAIT=1: the waiting call raises it (failure_messages.md §4.5)
                       r"ProcessGroupNCCL\.cpp:\d+\] Operation timed out!")
#: c10d's heartbeat monitor on a watchdog thread that stopped making progress (failure_messages.md §4.5; pytorch
#: torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp::HeartbeatMonitor (2.3+)), the ``[PG 3 Rank 0]`` prefix of
#: 2.3-2.4 or the ``[PG ID 0 PG GUID 0(default_pg) Rank 0]`` of 2.5+; the rank that first saw it says so
HEARTBEAT_MONITOR = re.compile(r"Heartbeat monitor timed out!|watchdog got stuck for (\d+) seconds without making progress|"
                                r"First PG on this rank that detected no heartbeat of its watchdog")
_PG_RANK = re.compile(r"\[PG [^\]]{0,120}?\bRank (\d{1,6})\]")
_WD_TIMEOUT = re.compile(r"Timeout\(ms\)=(\d+)")
_WD_RAN = re.compile(r"ran for (\d+) milliseconds")
_WD_OP = re.compile(r"OpType=(\w+)")
_STORE = re.compile(
    r"waiting for clients\. \d+/\d+ clients joined|client socket has (?:timed out|failed to connect)|"
    r"TCP client failed to connect|DistStoreError|DistNetworkError|store based barrier|failed to pass monitoredBarrier|"
    r"Connection closed by peer|wait timeout after \d+ms|Socket Timeout|Timed out waiting \d+ms|"
    r"waitForInput: socket .{0,300}? timed out after \d+ms|"  # c10d socket.cpp (the store client's poll)
    # and the poll's own warnings before it (pytorch torch/csrc/distributed/c10d/socket.cpp (2.4+))
    r"waitForInput: poll for socket .{0,300}? returned (?:0, likely a|operation_in_progress before a) timeout"
)
#: the store client's ``SocketImpl::waitForInput`` (pytorch torch/csrc/distributed/c10d/socket.cpp (2.4+)): a poll that
#: came back empty goes round again (``waitForInput: poll for socket {} returned 0, likely a timeout``, ``… returned
#: operation_in_progress before a timeout``) and the wait that ran out returns false (``waitForInput: socket {} timed out
#: after {}ms``), all at warning level; the caller decides (``_store_based_barrier`` logs and waits again, ``wait`` raises
#: ``DistStoreError: wait timeout after …``). Not ``… failed with res={}, err={}.``: an error on the socket itself
_STORE_POLL = re.compile(r"waitForInput: (?:poll for socket .{0,300}? returned (?:0, likely a|operation_in_progress "
                         r"before a) timeout|socket .{0,300}? timed out after \d+ms)")
#: c10's log prefix at warning level on a c10d line (failure_messages.md §0 «Per-line prefixes»: ``[W socket.cpp:464]``,
#: ``[rank3]:[W208 00:55:32.444220068 socket.cpp:487] [c10d] …``; the c10d sources of pytorch
#: torch/csrc/distributed/c10d/socket.cpp, TCPStore.cpp, ProcessGroupNCCL.cpp (2.x) log with C10D_WARNING / LOG(WARNING))
_C10D_WARNING = re.compile(r"^\s*(?:\[rank\d+\]:\s?)?\[W(?:\d{3,4})?(?: [\d:.]+)?(?: \d+)? ?([\w.]+):\d+\] (\[c10d\])?")
_C10D_SOURCE = re.compile(r"^(?:socket|TCPStore\w*|ProcessGroup\w*|NCCLUtils|FlightRecorder\w*)\.(?:cpp|hpp|h)$")


def c10d_warning(text: str) -> bool:
    """Whether a line is one of c10d's own warnings (``[W…]``): a store client that polls again, a connection
    retried — or the last word of a call that then raises (``recvValue failed on …``): the line alone does not say which.

    >>> c10d_warning("[rank9]:[W304 02:11:40.118220051 socket.cpp:487] [c10d] waitForInput: socket S timed out after 9ms")
    True
    >>> c10d_warning("[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98).")
    True
    >>> c10d_warning("[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective")
    False
    >>> c10d_warning("[W CUDAGuardImpl.h:119] Warning: CUDA warning: an illegal memory access was encountered")
    False
    """
    m = _C10D_WARNING.match(text)
    return bool(m and (m.group(2) or _C10D_SOURCE.match(m.group(1))))


def store_poll_warning(text: str) -> bool:
    """Whether a line is c10d's warning that its store client's poll came back empty or ran out (``_STORE_POLL``): the
    client waiting on the TCPStore, not a death — what the caller then does (waits again, raises) says so itself.

    >>> store_poll_warning("[W512 09:19:11.402183114 socket.cpp:462] [c10d] waitForInput: poll for socket "
    ...                    "SocketImpl(fd=41, addr=[node-b]:51822, remote=[10.4.0.21]:5000) returned 0, likely a timeout")
    True
    >>> store_poll_warning("[W512 09:19:11.402183114 socket.cpp:470] [c10d] waitForInput: poll for socket "
    ...                    "SocketImpl(fd=41, addr=[node-b]:51822, remote=[10.4.0.21]:5000) failed with res=-1, err=x.")
    False
    >>> store_poll_warning("[rank1]:[W601 09:40:00.000000000 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl("
    ...                    "fd=51, addr=[node-1]:41532, remote=[node-0]:29500): Failed to recv, got 0 bytes.")
    False
    """
    return c10d_warning(text) and _STORE_POLL.search(text) is not None


# --- Gloo's connections at distributed start-up (failure_messages.md §4.6) ---
#: torch's Gloo process group could not connect a rank to every peer (pytorch
#: torch/csrc/distributed/c10d/ProcessGroupGloo.cpp (2.x): ``Gloo connectFullMesh failed with {what}``, logged and
#: raised as a RuntimeError; the reason is Gloo's, pytorch third_party/gloo/gloo/transport/tcp/pair.cc (2.x):
#: ``[pair.cc:N] timed out connecting: SO_ERROR: Connection refused, remote=[ip]:port``, ``… no error`` for a
#: peer that closed), newer releases adding ``(rank=R, size=W, local=[ip])``; and the device's fallback when
#: the host name resolves to no local address (same file, ``createDefaultDevice``: ``Unable to resolve hostname to
#: a (local) address. Using the loopback address as fallback. Manually set the network interface to bind to with
#: GLOO_SOCKET_IFNAME.``)
_GLOO_MESH = re.compile(r"Gloo connectFullMesh failed")
_GLOO_FALLBACK = re.compile(r"Unable to resolve hostname to a \(local\) address")
_GLOO_REMOTE = re.compile(r"remote=\[([^\]\s]{1,64})\](?::(\d{1,5}))?")
_GLOO_LOCAL = re.compile(r"local=\[([^\]\s]{1,64})\]")
_GLOO_RANK = re.compile(r"\(rank=(\d{1,6}), size=(\d{1,6})")
_GLOO_WHY = re.compile(r"pair\.cc:\d+\]\s*([^,\n]{1,160})")


def gloo_transport(text: str) -> dict[str, Any] | None:
    """The facts of Gloo's start-up connection lines: ``event`` (``connect_full_mesh_failed``,
    ``loopback_fallback``), ``remote_ip``/``remote_port``, ``local_ip``, ``gloo_rank``, ``world_size``, ``error``
    and ``loopback`` (an address in 127.0.0.0/8, or the loopback fallback); None for any other text.

    >>> gloo_transport("Gloo connectFullMesh failed with [/g/tcp/pair.cc:152] timed out connecting: SO_ERROR: "
    ...                "Connection refused, remote=[127.0.0.1]:30211 (rank=3, size=8, local=[127.0.0.1])")["loopback"]
    True
    """
    head = text[:4000]
    mesh, fallback = _GLOO_MESH.search(head), _GLOO_FALLBACK.search(head)
    if mesh is None and fallback is None:
        return None
    out: dict[str, Any] = {"transport": "gloo",
                           "event": "connect_full_mesh_failed" if mesh is not None else "loopback_fallback"}
    if (r := _GLOO_REMOTE.search(head)) is not None:
        out["remote_ip"] = r.group(1)
        if r.group(2):
            out["remote_port"] = int(r.group(2))
    if (lo := _GLOO_LOCAL.search(head)) is not None:
        out["local_ip"] = lo.group(1)
    if (rk := _GLOO_RANK.search(head)) is not None:
        out["gloo_rank"], out["world_size"] = int(rk.group(1)), int(rk.group(2))
    if (why := _GLOO_WHY.search(head)) is not None:
        out["error"] = why.group(1).strip()
    out["loopback"] = fallback is not None or any(
        str(out.get(k) or "").startswith("127.") or out.get(k) == "::1" for k in ("remote_ip", "local_ip"))
    return out


#: end-of-file on a socket the ranks had already opened (failure_messages.md §4.6): Gloo's tcp/pair.cc ``Connection
#: closed by peer [ip]:port`` and TCPStore's ``Failed to recv, got 0 bytes. Connection was likely closed`` (2.9+). A
#: read that returns 0 is the other end's orderly close, which the kernel does for a process that exits: the peer (a
#: rank, the store's host) had gone — a consequence of its exit, not a rendezvous that failed nor a network fault
_PEER_EXITED = re.compile(r"Connection closed by peer|Failed to recv, got 0 bytes")
# §4.6 (``k/world clients joined``)
_JOINED = re.compile(r"(?<!\d)(\d++)/(\d++) clients joined")

#: the watchdog's exception escaping its thread without the timeout line (failure_messages.md §1: a C++ c10::Error out of a
#: thread prints ``Exception raised from <func> at <file>:<line>``; §4.4: the NCCL watchdog thread terminates with the
#: exception): raised from ProcessGroupNCCL's ``checkTimeout`` it is the collective timeout itself; from
#: ``ncclCommWatchdog`` / ``watchdogHandler`` the watchdog re-raising what it caught (a timeout or an async NCCL error;
#: pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (2.2-2.5) ``watchdogHandler`` → ``WorkNCCL::checkTimeout``)
_WD_RAISED = re.compile(r"Exception raised from (checkTimeout|ncclCommWatchdog|watchdogHandler) at \S*ProcessGroupNCCL\.cpp")
#: DeepEP's expert all-to-all giving up on its peers: deepep csrc/deep_ep.cpp (main, 2025), the CPU waits
#: NUM_CPU_TIMEOUT_SECS for the notify kernel's receive counts, then ``throw std::runtime_error("DeepEP error: timeout
#: (dispatch CPU)")``; deepep csrc/kernels/internode.cu (main, 2025) and intranode.cu, a kernel waits NUM_TIMEOUT_CYCLES
#: for a peer's data, ``printf("DeepEP dispatch NVL receiver timeout, …")`` / ``"DeepEP dispatch forwarder timeout (RDMA
#: meta), …"``, then ``trap()``. The all-to-all's collective timeout: a peer that never sent (still compiling, hung,
#: dead) or a transport (NVSHMEM/IBGDA between nodes, NVLink) that does not move the data. Releases before the
#: timeout's own name threw ``"DeepEP error: CPU recv timeout"`` from the same wait (``Buffer::intranode_dispatch``,
#: ``internode_dispatch``), and the kernels' ``"DeepEP timeout check failed: rank = %d, thread = %d, …"`` is the GPU
#: side's (csrc/kernels/utils.cuh, 2025)
_DEEPEP_TIMEOUT = re.compile(r"DeepEP error: (?:timeout \(\w{1,20} CPU\)|CPU recv timeout)|"
                             r"DeepEP (?:dispatch|combine) [\w ()]{0,40}?timeout|DeepEP timeout check failed")
#: DeepEP's low-latency dispatch refusing more tokens than its buffer was sized for: deepep csrc/deep_ep.cpp
#: ``Buffer::low_latency_dispatch`` (main, 2025) ``EP_HOST_ASSERT(num_tokens <= num_max_dispatch_tokens_per_rank)``,
#: thrown by csrc/kernels/exception.cuh as ``Failed: Assertion error <file>:<line> '<condition>'``; the Python-side
#: dispatchers' bare ``assert num_tokens <= self.num_max_dispatch_tokens_per_rank`` shows the same condition in its
#: traceback. The cap is sglang's SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK (python/sglang/srt/layers/moe/
#: ep_moe/token_dispatcher.py (0.4.4-0.4.10) ``get_int_env_var(…, 128)``; python/sglang/srt/environ.py (0.5.x) ``EnvInt(128)``)
#: DeepEP releases of early-mid 2025 spell the same check on the input tensor: deep_ep.cpp ``low_latency_dispatch``
#: ``EP_HOST_ASSERT(x.size(0) == topk_idx.size(0) and x.size(0) <= num_max_dispatch_tokens_per_rank)``
DEEPEP_DISPATCH_CAP = re.compile(r"(?:num_tokens|x\.size\(0\)) <= (?:self\.)?num_max_dispatch_tokens_per_rank")
#: HiCache's host pool at most the device pool's size: sglang python/sglang/srt/mem_cache/memory_pool_host.py
#: (0.4.8-0.5.13) ``assert self.size > device_pool.size, "The host memory should be larger than the device memory
#: with the current protocol"`` (0.5.15+ only warns; sglang_formats.md §4)
HICACHE_HOST_SMALLER = re.compile(r"The host memory should be larger than the device memory")
#: the interface NCCL chose for its sockets, from its INFO lines: nccl src/transport/net_socket.cc (v2.18-2.27)
#: ``NET/Socket : Using [0]eth0:10.1.2.3<0>``, nccl src/bootstrap.cc (v2.18-2.27) ``Bootstrap : Using eth0:10.1.2.3<0>``,
#: nccl src/transport/net_ib.cc (v2.18-2.27) ``NET/IB : Using [0]mlx5_0:1/IB ... ; OOB eth0:10.1.2.3<0>``. The address
#: its peers are told to connect to
#: NCCL starting a communicator (nccl src/init.cc (v2.18-2.27) ``ncclCommInitRank comm %p rank %d nranks %d cudaDev %d
#: nvmlDev %d busId %lx commId 0x%llx - Init START``; its ``Init COMPLETE`` follows once every rank joined)
_NCCL_INIT_START = re.compile(r"NCCL INFO ncclCommInitRank(?:Config)? comm \S+ rank (\d+) nranks (\d+) [^\n]{0,200}- Init START")
_NCCL_IFACE = re.compile(r"(?:NCCL INFO |^\s*(?=NET/Socket : Using \[))"
                         r"(?:NET/Socket : Using|Bootstrap : Using|NET/IB : Using [^;\n]{0,2000}; OOB) "
                         r"(?:\[\d+\])?([\w.-]{1,40}):([0-9A-Fa-f.:%\w-]{2,60})<")
#: every interface of the socket transport's list: nccl src/transport/net_socket.cc (v2.18-2.27) prints all the
#: interfaces it found (up to MAX_IFS) as ``NET/Socket : Using [0]eth0:10.1.2.3<0> [1]eth1:10.2.2.3<0>``, and
#: each is one NCCL network device its channels can use; a paste may drop the ``host:pid:tid [dev] NCCL INFO``
#: prefix, which the ``[i]`` entries still identify
_NCCL_IFACE_ENTRY = re.compile(r"\[(\d{1,2})\]([\w.-]{1,40}):([0-9A-Fa-f.:%\w-]{2,60})<")
#: NCCL's own connect attempts to a peer's socket (nccl src/misc/socket.cc ``socketConnectCheck`` (v2.23-2.27):
#: INFO ``%s: connect to %s returned %s, retrying (%d/%d) after sleep for %u msec``, WARN ``%s: connect to %s
#: returned %s, exceeded error retry count after %d attempts`` and ``%s: connect to %s failed : %s``, %s being
#: socketStartConnect or socketPollConnect; v2.19-2.22 capitalise ``Connect to``), also where a paste dropped the
#: ``NCCL INFO``/``NCCL WARN`` prefix
NCCL_CONNECT = re.compile(r"\bsocket(?:Start|Poll)Connect: [Cc]onnect to (\S+) (?:returned |failed : ?)([^,\n]{1,120})")

# --- process death (§5) ---
_SHM = re.compile(
    r"failed to extend /dev/shm|creating shared memory segment|No space left on device.*?/dev/shm|/dev/shm.*?No space left|"
    r"insufficient shared memory|out of shared memory|Unexpected bus error encountered in worker"
)
#: vLLM's own start-up check of /dev/shm before it creates its shared-memory segments (the shm-broadcast ring buffer
#: of its MessageQueue, the KV-offload region): vllm PR #48879 ("Fail fast when /dev/shm is too small for the shm ring
#: buffer", 2026) raises ``RuntimeError: Insufficient space in /dev/shm: {need} MiB required, {free} MiB free.
#: Increase /dev/shm (e.g. --shm-size or --ipc=host).`` instead of the SIGBUS a lazily backed tmpfs gives later;
#: the figures are MiB (2**20 bytes)
_SHM_PREFLIGHT = re.compile(r"Insufficient space in /dev/shm: (\d+(?:\.\d+)?) MiB required, (\d+(?:\.\d+)?) MiB free")
#: Ray's start-up measure of /dev/shm, printed when the object store would not fit in it (ray
#: python/ray/_private/services.py ``determine_plasma_store_config``, 1.x-2.x: ``WARNING: The object store is using
#: {dir} instead of /dev/shm because /dev/shm has only {n} bytes available. … If you are inside a Docker container,
#: you can increase /dev/shm size by passing '--shm-size=…' to 'docker run'``): a fact about the tmpfs, not a failure
_RAY_SHM_AVAILABLE = re.compile(r"instead of /dev/shm because /dev/shm has only (\d+) bytes available")
#: madvise(2), EFAULT: "advice is MADV_POPULATE_READ or MADV_POPULATE_WRITE, and populating (prefaulting) page
#: tables failed because a SIGBUS would have been generated on actual access" — a shared file mapping (a tmpfs
#: file in /dev/shm) whose filesystem cannot back the pages: the SIGBUS of a full /dev/shm, returned to the caller
#: (vLLM's KV-offload region, vllm/v1/kv_offload/cpu/shared_offload_region.py, prefaults with
#: ``mmap_obj.madvise(MADV_POPULATE_WRITE, …)``; Python raises ``OSError: [Errno 14] Bad address``)
_EFAULT = re.compile(r"OSError: \[Errno 14\] Bad address")
# madvise(2)
_MADVISE_CALL = re.compile(r"\bmadvise\(")


#: failure_messages.md §2.1, ``out of memory``: "Look at the frames: ``CachingHostAllocator``/``pin_memory`` ⇒ host"
#: — PyTorch's pinned allocator (``pin_memory=True``) calls ``cudaHostAlloc``, whose failure reads as the plain
#: runtime OOM (§2.4)
_PINNED_FRAMES = re.compile(r"pin_memory|CachingHostAllocator|cudaHostAlloc\b|\.pin_memory\(\)")


#: CUDA runtime errors that refuse a host registration for a reason other than memory (failure_messages.md §2.2):
#: ``cudaErrorHostMemoryAlreadyRegistered`` (712, the same range registered twice) and ``cudaErrorNotSupported``
#: (801, a platform without host registration: some VMs, WSL)
_REGISTER_REFUSALS = {"part or all of the requested memory range is already mapped": 712,
                      "operation not supported": 801}
_REGISTER_ERROR = re.compile(r"\b(?:CUDA|HIP) error: (part or all of the requested memory range is already mapped|"
                             r"operation not supported)")
_REGISTER_FRAMES = re.compile(r"cudaHostRegister|cuda_host_register|host_register")


def ray_oom_killed(text: str) -> bool:
    """Whether a line is Ray's memory monitor reporting a worker it killed (§5.4): the header, the figure line or the
    raylet's summary with a count above zero.

    >>> ray_oom_killed("(raylet) node_manager.cc:3040: 0 Workers (tasks / actors) killed due to memory pressure (OOM)")
    False
    """
    head = text[:4000]
    return bool(_RAY_OOM.search(head)) and not ((k := _RAY_SUMMARY.search(head)) is not None and k.group(1) == "0")


def nccl_interface(line: str) -> tuple[str, str] | None:
    """(interface, address) of an NCCL INFO line naming the interface it uses for its sockets, else None.

    >>> nccl_interface("NET/Socket : Using [0]enp7s0:10.1.2.3<0> [1]pod-link0:169.254.1.2<0>")
    ('enp7s0', '10.1.2.3')
    """
    m = _NCCL_IFACE.search(line)
    return (m.group(1), m.group(2)) if m else None


def nccl_socket_interfaces(line: str) -> list[tuple[str, str]]:
    """Every (interface, address) of NCCL's ``NET/Socket : Using [0]… [1]…`` list, in its order; [] for any other line.

    >>> nccl_socket_interfaces("NCCL INFO NET/Socket : Using [0]enp7s0:10.1.2.3<0> [1]pod-link0:169.254.1.2<0>")
    [('enp7s0', '10.1.2.3'), ('pod-link0', '169.254.1.2')]
    """
    at = line.find("NET/Socket : Using [")
    if at < 0:
        return []
    return [(m.group(2), m.group(3)) for m in _NCCL_IFACE_ENTRY.finditer(line, at)]


def register_refusal(exc_line: str, frames: str = "") -> int | None:
    """The runtime code of a host registration refused for a reason other than memory, else None.

    ``already mapped`` is a registration's own error (only ``cudaHostRegister`` returns it); ``operation not
    supported`` is one only when the traceback's frames are registering host memory.

    >>> register_refusal("RuntimeError: CUDA error: part or all of the requested memory range is already mapped")
    712
    >>> register_refusal("RuntimeError: CUDA error: operation not supported"), register_refusal(
    ...     "RuntimeError: CUDA error: operation not supported", "torch.cuda.cudart().cudaHostRegister(ptr, n, 0)")
    (None, 801)
    """
    m = _REGISTER_ERROR.search(exc_line[:4000])
    if m is None:
        return None
    rc = _REGISTER_REFUSALS[m.group(1)]
    return rc if rc == 712 or _REGISTER_FRAMES.search(frames[:20000]) else None


def pinned_host_oom(kind: str, text: str) -> bool:
    """Whether a runtime ``out of memory`` came from pinning host memory (its traceback shows the pinned path)."""
    return kind == "cuda_error_oom" and bool(_PINNED_FRAMES.search(text))


#: nvidia-smi failure lines that say GPUs are unusable (not "command not found", not a bad --query field)
_SMI_FAILURES = frozenset({"no_driver", "driver_library_mismatch", "nvml_init_failed", "nvml_not_found", "no_devices",
                           "gpu_lost", "unknown_error", "reset_required", "insufficient_power", "timeout"})


#: nvidia-persistenced at boot finding no GPU (system_formats.md §6.2): the driver is not usable, as §2.5's no-devices
_PERSISTENCED_NO_DEVICES = re.compile(r"nvidia-persistenced(?:\[\d+\])?: Failed to query NVIDIA devices")


def smi_failure(line: str) -> dict[str, Any] | None:
    """nvidia-smi's failure line (``parsers.nvidia_smi.common.match_failure``) when it says a GPU is unusable, or
    nvidia-persistenced's failure to find the devices.

    >>> smi_failure("nvidia-persistenced[1535]: Failed to query NVIDIA devices. Please ensure that ...")["error"]
    'persistenced_no_devices'
    """
    first = line.split("\n", 1)[0]
    if _PERSISTENCED_NO_DEVICES.search(first):
        return {"error": "persistenced_no_devices", "gpu": None, "detail": first.strip()[:300]}
    found = match_failure(first)
    return found if found is not None and found.get("error") in _SMI_FAILURES else None


def hardware_fault(text: str) -> str | None:
    """``ecc_error`` or ``nvlink_error`` when a CUDA error message names a hardware fault of the GPU, else None.

    failure_messages.md §2.2: ``uncorrectable ECC error encountered`` (cudaErrorECCUncorrectable, 214: the Xid
    48/94/95 class) and ``uncorrectable NVLink error detected during the execution`` (cudaErrorNvlinkUncorrectable,
    220: a fabric fault), whichever exception class carries them (RuntimeError ≤2.7, torch.AcceleratorError 2.8+).

    >>> hardware_fault("torch.AcceleratorError: CUDA error: uncorrectable NVLink error detected during the execution")
    'nvlink_error'
    >>> hardware_fault("RuntimeError: CUDA error: an illegal memory access was encountered") is None
    True
    """
    head = text[:20000]
    if _ECC.search(head):
        return "ecc_error"
    if _NVLINK.search(head):
        return "nvlink_error"
    return None


#: CPython's resource tracker at shutdown (cpython Lib/multiprocessing/resource_tracker.py::main (3.8-3.13)): when
#: the last process using it is gone, it unlinks every segment and semaphore its clients registered and never
#: unregistered, and warns once per type, "resource_tracker: There appear to be N leaked shared_memory objects to
#: clean up at shutdown" (a ``UserWarning`` that ``warnings`` prints as ``FILE:LINE: UserWarning: …`` followed by
#: the source line of the call). A client that was killed never unregisters: the line follows a kill, it does not
#: cause one. A segment the tracker then cannot unlink gets its own warning (``resource_tracker: NAME: ERROR``).
_LEAKED_AT_SHUTDOWN = re.compile(r"resource_tracker: There appear to be (\d{1,9}) leaked (\w{1,40}) objects to clean up"
                                 r" at shutdown")
_TRACKER_UNLINK = re.compile(r"resource_tracker: '?(/[\w.-]{1,200})'?: (\S.{0,300})$")


def leaked_at_shutdown(msg: str) -> dict[str, Any] | None:
    """The attrs of a ``leaked_at_shutdown`` row for one of the resource tracker's shutdown warnings, or None.

    >>> leaked_at_shutdown("x.py:279: UserWarning: resource_tracker: There appear to be 3 leaked shared_memory "
    ...                    "objects to clean up at shutdown")
    {'resource': 'shared_memory', 'objects': 3}
    >>> leaked_at_shutdown("resource_tracker: '/psm_5f2a': [Errno 2] No such file or directory: '/psm_5f2a'")["name"]
    '/psm_5f2a'
    """
    if "resource_tracker: " not in msg:
        return None
    m = _LEAKED_AT_SHUTDOWN.search(msg)
    if m:
        return {"resource": m.group(2), "objects": int(m.group(1))}
    u = _TRACKER_UNLINK.search(msg)
    if u:
        # the names multiprocessing gives them: shared_memory.py ``/psm_<hex>``, synchronize.py ``/mp-<random>``
        name = u.group(1)
        kind = "shared_memory" if name.startswith("/psm_") else "semaphore" if name.startswith("/mp-") else None
        return {"resource": kind, "name": name, "unlink_error": u.group(2)[:300]}
    return None


def populate_fault(text: str) -> bool:
    """Whether a traceback is madvise's prefault of a shared mapping failing with EFAULT (a tmpfs that cannot
    back it)."""
    return bool(_EFAULT.search(text) and _MADVISE_CALL.search(text))


#: ``df -h /dev/shm`` with the tmpfs (nearly) full: a row of df's table
#: df(1) (coreutils: Filesystem, Size, Used, Avail, Use%, Mounted on) for /dev/shm, §4.1
_DF_SHM_FULL = re.compile(r"^\S+\s+[\d.,]+[KMGTP]?i?B?\s+[\d.,]+[KMGTP]?i?B?\s+[\d.,]+[KMGTP]?i?B?\s+(9[5-9]|100)%\s+/dev/shm\s*$")
#: a process's death by signal as Python or the shell reports it (failure_messages.md §5.1: ``Killed`` (shell),
#: ``Bus error (core dumped)``, …). Bash names the job it reaped: a script's background job as
#: ``<script>: line <n>: <pid> Killed   <command>``, an interactive one as ``[1]+  Killed   <command>``
#: (bash jobs.c, ``notify_of_job_status`` → ``pretty_print_job``); a paste often keeps only ``<pid> Killed``
# §5.1, §5.2 (signals, exit codes, launchers)
_FATAL_SIGNAL = re.compile(r"Fatal Python error: (Bus error|Segmentation fault|Aborted)|"
                           r"^(?:[^\s:]{1,200}: line \d{1,7}: +|\[\d{1,5}\][+-]? +)?(?:\d{1,10} +)?"
                           r"(Bus error|Segmentation fault|Aborted|Killed)(?: \(core dumped\))?(?: {2,}\S[^\n]{0,500})?\s*$")
_SIGNAL_CODES = {"Bus error": -7, "Segmentation fault": -11, "Aborted": -6, "Killed": -9}
_TERMINATE = re.compile(r"terminate called after throwing an instance of '([^']+)'")
_EXIT = re.compile(
    r"(?:exit ?code|exitcode|exit status|returned non-zero exit status|died with exit code|exited with code|"
    r"terminated with exit code|Exited \()[:=]? ?\(?(-?\d+)"
)
_EXIT_SIGNAL = re.compile(r"terminated with signal (SIG[A-Z]+)|status=(\d+)/([A-Z]+)|exitcode=-?(SIG[A-Z]+)|"
                          r"died with <Signals\.(SIG[A-Z]+)")
_SIGNUM = {"SIGKILL": -9, "KILL": -9, "SIGBUS": -7, "BUS": -7, "SIGABRT": -6, "ABRT": -6, "SIGSEGV": -11,
           "SEGV": -11, "SIGTERM": -15, "TERM": -15}
_DIED = re.compile(
    r"\b(?:died|is dead|crashed|exited unexpectedly|died unexpectedly|failed to start|initialization failed|"
    r"failed during (?:start-?up|initiali[sz]ation)|Failed core proc|EngineDeadError|encountered a fatal error)\b",
    re.I,
)
_PROC_NAME = re.compile(r"\b((?:Rank \d+ )?[Ss]cheduler|Worker[^\s(]*|Engine ?[Cc]ore[\w_]*|[Dd]etokenizer|"
                        r"[Tt]okenizer(?:Manager)?|[Ss]ubprocess \S+|Process \S+)")
# §5.3 (containers, orchestrators, the kernel); the kernel's lines: reference/system_formats.md §4.1
_OOM_KILLED = re.compile(
    r"OOMKilled|Result: oom-kill|result 'oom-kill'|killed by the OOM killer|Memory cgroup out of memory|"
    r"Out of memory: Kill(?:ed)? process|oom-kill:constraint=|The node was low on resource: memory"
)
_KILLED_PROC = re.compile(r"Kill(?:ed)? process (\d+)? ?\(([^)]+)\)")
#: the kubelet's node-pressure eviction (§5.3 «Kubernetes»): ``The node was low on resource: memory. Threshold
#: quantity: 100Mi, available: 52Mi. Container api was using 900Mi, request is 0, …`` (older kubelets: ``… which exceeds
#: its request of {y}``) — the node ran short, and the pod furthest above its memory request went first
_EVICTED = re.compile(r"The node was low on resource: memory\.(?:.{0,200}?Container (\S+) was using (\S+?),? "
                      r"(?:request is (\S+?)|which exceeds its request of (\S+?))[,.\s])?")
_RSS = re.compile(r"(anon|file|shmem)-rss:(\d+)kB")
_OOM_TASK = re.compile(r"\btask=([^,\s]+)")
# §5.4 (Ray memory monitor). The monitor's own observation is the figure line: ``… which exceeds the memory usage
# threshold of {thr}. Ray killed this worker`` (2.2–2.50) or ``… was {used}GB used / {limit}GB limit ({frac})`` (2.60),
# also when a paste keeps it without the ``Task was killed …`` line above it; and the raylet's periodic summary
# ``(raylet) node_manager.cc:N: {k} Workers (tasks / actors) killed due to memory pressure (OOM), {m} Workers crashed
# due to other reasons at node (ID: …, IP: …)`` (Ray's documentation, "Debugging Out of Memory": "Ray memory monitor
# also periodically prints the aggregated out-of-memory killer summary to Ray drivers"; raylet node_manager.cc); the
# figure line from its first words, whose tail a paste often cuts (``Memory on the node (IP: …, ID: …) where …``)
_RAY_OOM = re.compile(r"killed due to the node running low on memory|failed due to oom|NODE_OUT_OF_MEMORY|"
                      r"exceeds the memory usage threshold of [\d.]+\. Ray killed|GB used / [\d.]+ ?GB limit \(|"
                      r"killed due to memory pressure \(OOM\)|Memory on the node \(IP: [^)\s]{1,64}, ID: ")
_RAY_MEM = re.compile(r"(?:was|Memory on the node \([^)]*\) was) " + _N + r" ?GB(?: used)? / " + _N + r" ?GB")
#: the summary's count, when the paste kept it on the line (a terminal wrap can leave it on the line above)
_RAY_SUMMARY = re.compile(r"(?<!\d)(\d++) Workers? \(tasks / actors\) killed due to memory pressure")
#: the killed task in the 2.3–2.50 form (``where the task (task ID: …, name={n}, pid={p}, memory used={x}GB)``)
_RAY_VICTIM = re.compile(r"name=([^,()]{1,200}), pid=(\d+), memory used=" + _N + r" ?GB")
# §5 and vllm_formats.md §3.7 (host allocations: MemoryError, std::bad_alloc, ENOMEM as errno(3) prints it)
_HOST_OOM = re.compile(r"^(?:\w+\.)*MemoryError\b|std::bad_alloc|Cannot allocate memory|\[Errno 12\]")
# errno(3) EADDRINUSE (``Address already in use``); the wait below
_PORT = re.compile(r"Address already in use|is (?:already )?used by a process already|port \S+ is (?:already )?in use|"
                   r"\[Errno 98\]|bind\(\) failed", re.I)
_PORT_NUM = re.compile(r"(?:port|rpc_port)[ =:]*(\d{2,5})", re.I)
#: SGLang's ``wait_port_available`` (python/sglang/srt/utils/network.py): ``ValueError: {port_name} at {port} is not
#: available in {timeout_s} seconds. {port_name} is used by a process already. {process.name()=}'
#: {process.cmdline()=} {process.status()=} {pid=}`` — the wait (SGLANG_WAIT_PORT_TIMEOUT, default 30 s) and the holder
#: The port's name is a whole word holding "port" (was ``\w*port\w*``, the same leftmost match, rescanned
#: from every character of a long word)
#: sglang python/sglang/srt/utils/network.py::wait_port_available (0.5.x; utils.py in 0.4.x)
_PORT_WAIT = re.compile(r"(?<!\w)(?=\w*?port)(\w++) at (\d{2,5}) is not available in (\d+) seconds")
_PORT_HOLDER_STATUS = re.compile(r"process\.status\(\)='([\w-]+)'")
_PORT_HOLDER_CMD = re.compile(r"process\.cmdline\(\)=\[([^\]]{0,400})")
_PORT_HOLDER_PID = re.compile(r"\bpid=(\d+)")
_ENGINE_CMD = re.compile(r"sglang|vllm", re.I)
#: the NVIDIA kernel module's ``os_lookup_user_io_memory`` (NVIDIA/open-gpu-kernel-modules,
#: kernel-open/nvidia/os-mlock.c: ``nv_printf(NV_DBG_ERRORS, "Cannot map memory with base addr 0x%llx and size of
#: 0x%llx pages\n", …)``), reached when pinning a user range with get_user_pages failed (cudaHostRegister):
#: ``RmCreateOsDescriptor`` (src/nvidia/arch/nvalloc/unix/src/escape.c) falls back to it after ``os_lock_user_pages``
#: nvidia-open kernel-open/nvidia/os-mlock.c (5xx)
_KERNEL_MAP = re.compile(r"Cannot map memory with base addr (0x[0-9a-f]+) and size of (0x[0-9a-f]+|\d+) pages", re.I)
#: SGLang's CI harness waiting for the GPUs to be released before a test class starts (sgl-project/sglang PR #31746,
#: July 2026: ``[CI GPU Idle] Waiting for GPU to become idle: GPU 2 uses 25.30 GiB (pid=1117859 24.81 GiB)`` then
#: ``RuntimeError: GPU(s) still not idle after waiting 30s before setUpClass``): an earlier server still holds the GPU
_GPU_BUSY = re.compile(r"GPU\(s\) still not idle after waiting|Waiting for GPU to become idle: GPU (\d+) uses "
                       + _SIZE + r" \(pid=(\d+)")
#: the allocator OOM's per-process clause pasted on its own (failure_messages.md §1: ``Process {pid} has {Q} memory in
#: use.``); only the documented wording — a writer's cut through the middle of it says nothing of whose memory it is
#: §1.1/§1.6: the body of the 2.x allocator message (``Tried to allocate {A}. GPU {d} has a total capacity of …``)
#: pasted without its ``CUDA out of memory.`` head; both clauses are required, the pair is the allocator's alone
_OOM_HEADLESS = re.compile(r"^(?:\.\.\.\s*)?Tried to allocate " + _SIZE + r"\. GPU \d+ has a total capac")
_PROC_FRAGMENT = re.compile(r"^Process (\d+) has (\d+(?:\.\d+)? ?[KMG]iB) memory in use\.?\s*$")
# reference/sglang_formats.md §7 (``Health check failed. …``)
_HEALTH = re.compile(r"[Hh]ealth check failed|health check timed out")

# --- request refusals (§6) ---
_REFUSE_KV = re.compile(r"Input length \((\d+) tokens\) exceeds the maximum allowed length \((\d+) tokens\)|"
                        # the scheduler's silent truncation (0.3.6–0.4.0 "Truncated!!!"; 0.4.3+ with the figures), §6.1
                        r"Request length is longer than the KV cache pool size or the max context length\. Truncated"
                        r"(?:!!!|\. len\(req\.origin_input_ids\)=(\d+), max_req_input_len=(\d+))")
#: a multimodal prompt whose expanded tokens pass the context (SGLang 0.3.6 image form, 0.4.0+ "after expanding"), §6.1
_REFUSE_MM = re.compile(r"Image request length is longer than the KV cache pool size or the max context length|"
                        r"Multimodal prompt is too long after expanding multimodal tokens\.(?: After expanding "
                        r"[\w.()\[\]]{0,60}=(\d+) >= (?:[\w.]{0,40}=)?(\d+))?")
# §6.2
_REFUSE_BLOCKS = re.compile(r"Input prompt \((\d+) tokens\)(?: \+ lookahead slots \(\d+\))? is too long and exceeds the "
                            r"capacity of block_manager")
#: ``(?P<n>)`` the request's tokens, ``(?P<c>)`` the context limit; ``\\?'`` because a JSON error body pasted with
#: its escapes keeps ``model\'s`` (failure_messages.md §9: unescape collectors' JSON before matching)
_REFUSE_CTX = re.compile(
    r"The input \((?P<n1>\d+) tokens\) is longer than the model\\?'s context length \((?P<c1>\d+) tokens\)|"
    r"maximum context length is (?P<c2>\d+) tokens(?:\. However, (?:you requested|your request has) (?P<n2>\d+))?|"
    r"exceeds the model\\?'s maximum context length of (?P<c3>\d+) tokens(?:\. You requested a total of (?P<n3>\d+))?|"
    r"\(length (?P<n4>\d+)\)(?: plus the number of requested output tokens \(at least 1\))? is longer than the maximum "
    r"model length of (?P<c4>\d+)|is longer than the maximum model length of (?P<c5>\d+)|"
    r"Input prompt \((?P<n6>\d+) tokens\) is too long and exceeds limit of (?P<c6>\d+)"
)
#: vLLM 0.11+ names the output tokens first (``However, you requested {M} output tokens and your prompt contains {N}
#: input tokens, for a total of {N+M} tokens``, failure_messages.md §6.2 #3/#4): the total is what passed the limit
_REFUSE_TOTAL = re.compile(r"for a total of (\d+) tokens")
#: SGLang's pool self-checks (sglang_formats.md: ``token_to_kv_pool_allocator memory leak detected!``,
#: ``req_to_token_pool memory leak detected!``; the busy-time invariant checker,
#: python/sglang/srt/managers/scheduler_runtime_checker_mixin.py: ``Full Pool Mem Leak Detected!`` /
#: ``SWA Pool Mem Leak Detected!``)
#: reference/sglang_formats.md §6 and sglang python/sglang/srt/managers/scheduler_runtime_checker_mixin.py (0.5.x)
KV_POOL_LEAK = re.compile(r"\b\w+ memory leak detected!|\b(?:Full|SWA|Mamba) Pool Mem Leak Detected!", re.I)
#: argparse's refusal of a command line, ``prog: error: …`` after the usage line (Python's argparse; an
#: old launch script meets a release that dropped a flag: sglang_formats.md §8, vllm_formats.md §5.1)
#: cpython Lib/argparse.py (3.x: ``prog: error: …``)
#: numactl's own refusal: each binding option calls checkerror(), which perror()s the option's words and exits 1
#: before exec-ing the wrapped program (numactl numactl.c (2.0.x) ``checkerror("setting membind")``,
#: ``"setting preferred node"``, ``"setting interleave mask"``, ``"sched_setaffinity"``)
NUMACTL_REFUSED = re.compile(r"^(setting membind|setting preferred node|setting interleave mask|setting local allocation|"
                             r"sched_setaffinity): ([A-Z][a-z]{1,20}(?: [a-z]{1,20}){0,4})\s*$")
#: the same refusal glued to the end of another record's text (a log parser appends unprefixed lines to the record
#: above), where it ends the text or a line of it
NUMACTL_REFUSED_IN_TEXT = re.compile(r"(setting membind|setting preferred node|setting interleave mask|"
                                     r"setting local allocation|sched_setaffinity): ([A-Z][a-z]{1,20}(?: [a-z]{1,20}){0,4})"
                                     r"[ \t]*(?:$|\n)")
_USAGE_ERROR = re.compile(r"^[\w./-]{1,200}(?: [\w.-]{1,60})?: error: (unrecognized arguments: .{1,500}|argument [^:]{1,200}: .{1,500}|"
                          r"the following arguments are required: .{1,500})$")
# reference/vllm_formats.md §3.6 and reference/sglang_formats.md §7 (start-up failures)
_STARTUP = re.compile(r"Engine core initialization failed|died during (?:startup|initiali[sz]ation)|"
                      r"Initialization failed|failed to initiali[sz]e", re.I)


# reference/sglang_formats.md §1, reference/vllm_formats.md §1.3, the ``[rankN]:`` prefix of §0
_SGL_PREFIX = re.compile(r"^\s*\[(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:[.,](\d{1,6}))?((?: [A-Za-z_]+\d+)*)\]")
_ISO_PREFIX = re.compile(r"^\s*(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:[.,](\d{1,6}))?\s")
_TP_LABEL = re.compile(r"\bTP(\d+)\b")
_WORKER_RANK = re.compile(r"^\s*\((?:VllmWorker(?:Process)? rank=(\d+)|Worker_TP(\d+))")
_GLOBAL_RANK = re.compile(r"^\s*\[rank(\d+)\]:")


#: Ray's process tag before a relayed line, innermost last when nested (vllm_formats.md §1.3 "V0/V1 Ray worker":
#: ``(RayWorkerWrapper pid=263, ip=10.0.16.95)``, the ``ip`` only for an actor on another node than the driver's;
#: sglang_formats.md §1, ``(SchedulerActor pid=123, ip=1.2.3.4)``), after an optional colour code (§1.4)
_RAY_TAG = re.compile(r"\s{0,8}(?:\x1b\[[0-9;]{0,16}m|\[\d{1,3}m)?\((?:(?P<actor>[A-Za-z_][\w.-]{0,80})(?:, | ))?pid=(?P<pid>\d{1,10})"
                      r"(?:, ip=(?P<ip>[^)\s]{1,60}))?\)(?:\x1b\[0m)?\s?")


def process_tag(line: str) -> dict[str, Any]:
    """Ray's tag on a relayed line: ``pid``, ``ray_actor`` and ``ip`` of the process that wrote it (the innermost
    of nested tags); empty for a line without one.

    >>> process_tag("(RayWorkerWrapper pid=5512, ip=10.1.2.3) [rank3]:[E ProcessGroupNCCL.cpp:1316] x")
    {'pid': 5512, 'ray_actor': 'RayWorkerWrapper', 'ip': '10.1.2.3'}
    >>> process_tag("(EngineCore_DP0 pid=7) (RayWorkerWrapper pid=9) INFO x")
    {'pid': 9, 'ray_actor': 'RayWorkerWrapper'}
    """
    out: dict[str, Any] = {}
    at = 0
    for _ in range(4):
        m = _RAY_TAG.match(line, at)
        if m is None:
            break
        out = {"pid": int(m.group("pid")), **({"ray_actor": m.group("actor")} if m.group("actor") else {}),
               **({"ip": m.group("ip")} if m.group("ip") else {})}
        at = m.end()
    return out


def line_context(line: str) -> dict[str, Any]:
    """What a line's prefix says: its wall-clock stamp (``ts_local``) and its rank.

    >>> line_context("[2025-05-29 14:59:00 TP5] Scheduler hit an exception")
    {'ts_local': datetime.datetime(2025, 5, 29, 14, 59), 'rank': 'TP5', 'tp_rank': 5}
    """
    out: dict[str, Any] = {}
    m = _SGL_PREFIX.match(line) or _ISO_PREFIX.match(line)
    if m:
        try:
            frac = (m.group(3) or "0").ljust(6, "0")
            out["ts_local"] = datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}.{frac}")
        except ValueError:
            pass
        label = m.group(4).strip() if m.re is _SGL_PREFIX and m.group(4) else ""
        if label:
            out["rank"] = label
            if (tp := _TP_LABEL.search(label)) is not None:
                out["tp_rank"] = int(tp.group(1))
    after_tag = line
    while (t := _RAY_TAG.match(after_tag)) is not None and t.end() > 0:
        after_tag = after_tag[t.end():]  # ``[rankN]:`` after Ray's tag on a relayed line
    if (w := _WORKER_RANK.match(line)) is not None:
        out["tp_rank"] = int(w.group(1) or w.group(2))
    elif (g := _GLOBAL_RANK.match(after_tag)) is not None:
        out["rank"] = f"rank{g.group(1)}"
    return out


#: every failure text above holds one of these words: a line without any is skipped before the prefix is even
#: stripped (a long log is nearly all batch and access lines, and the scan runs over every text)
#: a word of each message above (§1-§7): a prefilter, no format of its own
_TRIGGER = re.compile(
    r"rror|xception|Traceback|File \"|Fatal|[Ff]ault|[Kk]ill|exit|[Dd]ied|dead|crash|[Tt]ime(?:d )?out|NCCL|nccl|ECC|"
    r"SIG|OOM|oom|shm|Bus error|Segmentation|Aborted|terminate|refused|exceeds|longer than|maximum context|too long|"
    r"in use|not idle|become idle|Cannot map|[Ff]ailed|[Ll]eak|resource|HSA_|HIP|hip|CUBLAS|CUDNN|CUFFT|[Hh]ealth|already|"
    r"Errno|bad_alloc|allocate|Process \d|out of memory|failure|clients joined|[Cc]onnection|uncorrectable|illegal|"
    r"device handle|No devices|not supported in this architecture|not supported on CUDA arch|no kernel image|"
    r"only supported on SM|undefined symbol|Assertion|assert triggered|resolve hostname|setting membind|"
    r"setting preferred node|setting interleave mask|setting local allocation|sched_setaffinity|"
    r"NET/Socket : Using|Connect: [Cc]onnect to|CrashLoopBackOff|"  # NCCL's socket interfaces and connects, pasted without "NCCL"
    r"legal address|GEMM problem|"  # ROCm's aperture status and CK's refusal, when a wrap cut their heads off
    r"psm_[0-9a-f]|vllm_offload_"  # a listing of /dev/shm (parsers/shm_listing.py); nccl-* segments match NCCL's "nccl"
)


def _int(s: str | None) -> int | None:
    try:
        return int(s) if s is not None and len(s) < 19 else None
    except ValueError:
        return None


def _size(s: str | None) -> int | None:
    if not s:
        return None
    s = s.strip()
    if s.endswith("bytes"):
        return _int(s.split()[0].split(".")[0])
    v = parse_size(s)
    return v if v is not None and abs(v) < 1 << 62 else None


def strip_prefix(line: str) -> str:
    """The message without the stamps, rank and process tags loggers put before it.

    >>> strip_prefix("(EngineCore_0 pid=207) ERROR 04-19 10:05:27 [core.py:1132] ValueError: x")
    'ValueError: x'
    >>> strip_prefix("[2025-05-29 14:59:00 TP5] Scheduler hit an exception")
    'Scheduler hit an exception'
    """
    s = _ANSI.sub("", line).rstrip("\r\n")
    for _ in range(4):
        before = s
        for rx in _PREFIXES:
            s = rx.sub("", s, count=1)
        if s == before:
            break
    return s.strip()


def oom_figures(msg: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Columns and attrs of an allocator OOM message, in any release's wording (§1)."""
    cols: dict[str, Any] = {}
    attrs: dict[str, Any] = {}
    m = _OOM.search(msg)
    attrs["device_api"] = (m.group(1) if m else "CUDA").lower()
    if (t := _OOM_TRIED.search(msg)) is not None:
        cols["bytes"] = _size(t.group(1))
    if (g := _OOM_GPU.search(msg)) is not None:
        cols["gpu"], cols["total_bytes"] = _int(g.group(1)), _size(g.group(2))
    if (f := _OOM_FREE.search(msg)) is not None:
        cols["free_bytes"] = _size(f.group(1))
    if (p := _OOM_THIS.search(msg)) is not None:
        cols["used_bytes"] = _size(p.group(1))
    procs = [{"pid": _int(pid), "used_bytes": _size(sz)} for pid, sz in _OOM_PROC.findall(msg[:20000])]
    # 2^64-1 bytes is NVML's "not available" (§1.3)
    procs = [p for p in procs if p["used_bytes"] is not None and p["used_bytes"] < 1 << 50]
    if procs:
        attrs["processes"] = procs
    for name, rx in (("allocated_by_pytorch_bytes", _OOM_ALLOC), ("private_pools_bytes", _OOM_PRIVATE),
                     ("reserved_unallocated_bytes", _OOM_UNALLOC)):
        if (x := rx.search(msg)) is not None:
            attrs[name] = _size(x.group(1))
    if (conf := _OOM_CONF_VAR.search(msg)) is not None:
        attrs["alloc_conf_var"] = conf.group(1)
    if (old := _OOM_V1.search(msg)) is not None:
        cols["gpu"], cols["total_bytes"] = _int(old.group(1)), _size(old.group(2))
        attrs["allocated_by_pytorch_bytes"], cols["free_bytes"] = _size(old.group(3)), _size(old.group(4))
        if (res := _OOM_V1_RES.search(msg)) is not None:
            attrs["reserved_bytes"] = _size(res.group(1))
    if (npu := _OOM_NPU.search(msg)) is not None:
        cols["gpu"], cols["total_bytes"] = _int(npu.group(1)), _size(npu.group(2))
        attrs["allocated_by_pytorch_bytes"], cols["free_bytes"] = _size(npu.group(3)), _size(npu.group(5))
        attrs["active_bytes"] = _size(npu.group(4))
        if (res := _OOM_V1_RES.search(msg)) is not None:
            attrs["reserved_bytes"] = _size(res.group(1))
    if (a := _OOM_ALLOWED.search(msg)) is not None:
        cols["gpu"] = _int(a.group(1))
        attrs["limit"] = "per_process_memory_fraction"
    if "more than 1EB" in msg:
        attrs["bogus_size"] = True
    return {k: v for k, v in cols.items() if v is not None}, attrs


# reference/vllm_formats.md §3.6 (``Engine core initialization failed. … Failed core proc(s): {…: code}``)
_FAILED_PROCS = re.compile(r"Failed core proc\(s\): \{'[^']+': (-?\d+)")


def _exit_code(msg: str) -> int | None:
    if (m := _FAILED_PROCS.search(msg)) is not None:  # vLLM: {'EngineCore_0': -9}, raw exit codes
        return _int(m.group(1))
    if (m := _EXIT_SIGNAL.search(msg)) is not None:
        name = next(g for g in m.groups() if g and not g.isdigit())
        return _SIGNUM.get(name)
    if (m := _EXIT.search(msg)) is not None:
        code = _int(m.group(1))
        if code is not None and code > 128 and code - 128 in (6, 7, 9, 11, 15):
            return -(code - 128)  # a shell or runtime's 128+N is signal N
        return code
    return None


def classify(msg: str) -> tuple[str, dict[str, Any], dict[str, Any]] | None:  # noqa: C901 - one flat table
    """(kind, columns, attrs) of one message that reports a failure, or None.

    >>> classify("RuntimeError: Rank 0 scheduler died during initialization (exit code: -7)")[2]["failure"]
    'process_exit'
    >>> classify("HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources.")[0]
    'cuda_error_oom'
    >>> classify("Input length (200000 tokens) exceeds the maximum allowed length (131066 tokens).")[1]
    {'tokens': 200000}
    """
    if not msg or len(msg) < 6:
        return None
    head = msg[:4000]
    if _OOM.search(head) or _OOM_ALLOWED.search(head):
        if _WORKSPACE.search(head):  # Inductor's "out of resource" is raised as OutOfMemoryError (§7)
            return "failure", {}, {"failure": "workspace", "message": msg[:2000]}
        cols, attrs = oom_figures(msg)
        attrs["message"] = msg[:2000]
        return "cuda_oom", cols, attrs
    if _OOM_HEADLESS.match(head) and _OOM_GPU.search(head):
        # the same allocator message with its "CUDA out of memory." head cut off by the paste (§1.1, §1.6)
        cols, attrs = oom_figures(msg)
        attrs.update(fragment=True, headless=True, message=msg[:2000])
        return "cuda_oom", cols, attrs
    if (pf := _PROC_FRAGMENT.match(head)) is not None:
        # a "Process N has X memory in use" clause of a CUDA OOM message pasted on its own
        return "cuda_oom", {}, {"processes": [{"pid": _int(pf.group(1)), "used_bytes": _size(pf.group(2))}],
                                "fragment": True, "message": msg[:500]}
    if (r := _HOST_REGISTER.search(head)) is not None:
        size, total = _REG_SIZE.search(head), _REG_TOTAL.search(head)
        cols = {"bytes": _int(total.group(1)) if total else (_int(size.group(1)) if size else None)}
        rc = _int(r.group(1))
        if rc is not None and rc != _RC_OUT_OF_MEMORY and "out of memory" not in head:
            return "failure", {k: v for k, v in cols.items() if v is not None}, {
                "failure": "host_register_refused", "api": "cudaHostRegister", "host_pinned": True, "rc": rc,
                "message": msg[:2000]}
        return "cuda_error_oom", {k: v for k, v in cols.items() if v is not None}, {
            "api": "cudaHostRegister", "host_pinned": True, "rc": _int(r.group(1)), "message": msg[:2000]}
    if (ms := MEMORY_SAVER_OOM.search(head)) is not None:
        return "failure", {}, {"failure": "memory_saver_oom", "api": ms.group(1), "func": ms.group(2),
                               "message": msg[:500]}
    if (vc := VLLM_CUMEM_OOM.search(head)) is not None:
        return "failure", {}, {"failure": "memory_saver_oom", "api": "cuMemCreate", "allocator": "vllm_cumem",
                               "source_line": int(vc.group(1)), "message": msg[:500]}
    if (mr := MEMORY_RESUME_FAILED.search(head)) is not None:
        return "failure", {}, {"failure": "memory_resume_failed", "outcome": mr.group(1), "message": msg[:500]}
    if (nc := _NATIVE_CHECK.match(head)) is not None:
        return "failure", {}, {"failure": "cuda_error", "source_file": nc.group(1).rsplit("/", 1)[-1],
                               "source_line": int(nc.group(2)), "cuda_message": nc.group(3), "message": msg[:2000]}
    if _WORKSPACE.search(head):
        need = _WS_NEED.search(head)
        return "failure", {"bytes": _int(need.group(1)) if need else None}, {"failure": "workspace", "message": msg[:2000]}
    if (ro := _RUNTIME_OOM.search(head)) is not None:
        attrs = {"message": msg[:2000], "api": ro.group(0).split(":")[0][:60]}
        if "HSA_STATUS" in ro.group(0):
            attrs["unreliable"] = True  # also queue/thread limits, not only VRAM (§3)
        if "NCCL" in head or "Failed to CUDA" in ro.group(0):
            attrs["in_nccl"] = True
        return "cuda_error_oom", {"bytes": _int(ro.group(1))} if ro.group(1) else {}, attrs
    if (rc := register_refusal(head)) is not None:
        return "failure", {}, {"failure": "host_register_refused", "api": "cudaHostRegister", "host_pinned": True,
                               "rc": rc, "message": msg[:2000]}
    if (k := _KERNEL_MAP.search(head)) is not None:
        pages = int(k.group(2), 16) if k.group(2).lower().startswith("0x") else int(k.group(2))
        return "failure", {"bytes": pages * 4096}, {"failure": "kernel_map_failed", "pages": pages, "message": msg[:500]}
    if _ILLEGAL.search(head):
        return "failure", {}, {"failure": "illegal_memory_access", "message": msg[:2000]}
    if _ECC.search(head):
        return "failure", {}, {"failure": "ecc_error", "message": msg[:2000]}
    if _NVLINK.search(head):
        return "failure", {}, {"failure": "nvlink_error", "message": msg[:2000]}
    if _LAUNCH.search(head):
        return "failure", {}, {"failure": "launch_failure", "message": msg[:2000]}
    if _DEVICE_ASSERT.search(head):
        return "failure", {}, {"failure": "device_assert", "message": msg[:2000]}
    if (arch := _DTYPE_ARCH.search(head)) is not None:
        return "failure", {}, {"failure": "arch_unsupported", "needs": arch.group(0)[:120], "dtype": "bfloat16",
                               "min_arch": int(arch.group(1)) * 10 + int(arch.group(2)), "gpu_name": arch.group(3),
                               "current_arch": int(float(arch.group(4)) * 10) if arch.group(4) else None,
                               "message": msg[:2000]}
    if (arch := _BACKEND_ARCH.search(head)) is not None:
        return "failure", {}, {"failure": "arch_unsupported", "needs": arch.group(0)[:120], "backend": "FLASH_ATTN",
                               "min_arch": 80, "message": msg[:2000]}
    if (arch := _ARCH_UNSUPPORTED.search(head)) is not None:
        need = arch.group(1) or arch.group(2) or arch.group(4)
        return "failure", {}, {"failure": "arch_unsupported", "needs": arch.group(0)[:120],
                               "min_arch": _int(need) if need else None, "message": msg[:2000],
                               **({"quant_method": arch.group(3), "current_arch": _int(arch.group(5))}
                                  if arch.group(3) else {})}
    if _CK_NO_INSTANCE.search(head):
        return "failure", {}, {"failure": "arch_unsupported", "needs": "a Composable Kernel instance for this shape",
                               "kernel_library": "ck", "message": msg[:2000]}
    if (sym := _UNDEFINED_SYMBOL.search(head)) is not None:
        pkg = _PACKAGE_DIR.search(sym.group(1))
        return "failure", {}, {"failure": "abi_mismatch", "object": sym.group(1).rsplit("/", 1)[-1],
                               "package": pkg.group(1) if pkg else None, "symbol": sym.group(2), "message": msg[:2000]}
    if (smi := smi_failure(head)) is not None:
        # nvidia-smi's own failure output pasted anywhere (system_formats.md §2.5): the GPU listing's row kind
        return "gpu_error", {"gpu": smi.get("gpu")} if smi.get("gpu") is not None else {}, {
            **{k: v for k, v in smi.items() if v is not None and k != "gpu"}, "message": msg[:500]}
    if _CUDA_FORKED.search(head):
        return "failure", {}, {"failure": "cuda_forked", "message": msg[:2000]}
    if _NO_DEVICE.search(head):
        return "failure", {}, {"failure": "device_unavailable", "message": msg[:2000]}
    if _WATCHDOG.search(head):
        t, ran, op = _WD_TIMEOUT.search(head), _WD_RAN.search(head), _WD_OP.search(head)
        return "failure", {"seconds": int(ran.group(1)) / 1000 if ran else None}, {
            "failure": "collective_timeout", "timeout_s": int(t.group(1)) / 1000 if t else None,
            "op_type": op.group(1) if op else None, "message": msg[:2000]}
    if (beat := HEARTBEAT_MONITOR.search(head)) is not None:
        return "failure", {"seconds": int(beat.group(1)) if beat.group(1) else None}, {
            "failure": "watchdog_hung", "message": msg[:2000],
            **({"rank": int(pg.group(1))} if (pg := _PG_RANK.search(head)) is not None else {})}
    if (start := _NCCL_INIT_START.search(head)) is not None:
        return "nccl_info", {}, {"level": "INFO", "event": "init_start", "nccl_rank": int(start.group(1)),
                                 "nranks": int(start.group(2)), "message": msg[:500]}
    if (iface := nccl_interface(head)) is not None:
        listed = nccl_socket_interfaces(head)
        return "nccl_info", {}, {"level": "INFO", "net_if": iface[0], "net_ip": iface[1], "message": msg[:500],
                                 **({"net_ifs": [list(x) for x in listed]} if len(listed) > 1 else {})}
    if DEEPEP_DISPATCH_CAP.search(head):
        return "failure", {}, {"failure": "dispatch_cap", "engine": "deepep", "message": msg[:2000]}
    if HICACHE_HOST_SMALLER.search(head):
        return "failure", {}, {"failure": "hicache_host_smaller", "message": msg[:2000]}
    if _DEEPEP_TIMEOUT.search(head):
        return "failure", {}, {"failure": "collective_timeout", "op_type": "DeepEP all-to-all", "engine": "deepep",
                               "message": msg[:2000]}
    if (raised := _WD_RAISED.search(head)) is not None:
        return "failure", {}, {"failure": "collective_timeout", "engine": "c10d_watchdog", "raised_from": raised.group(1),
                               "message": msg[:2000]}
    if (seg := shm_file(head)) is not None:  # a line of `ls -l /dev/shm`: a segment, its size and maker
        return "shm_file", {"bytes": seg["bytes"]}, {k: v for k, v in seg.items() if k != "bytes"}
    if (ray_shm := _RAY_SHM_AVAILABLE.search(head)) is not None:
        return "shm_capacity", {"free_bytes": int(ray_shm.group(1))}, {"source": "ray_object_store",
                                                                        "message": msg[:1000]}
    if (pre := _SHM_PREFLIGHT.search(head)) is not None:
        return "failure", {"bytes": int(float(pre.group(1)) * 2**20)}, {
            "failure": "shm_exhausted", "via": "engine_preflight", "shm_free_bytes": int(float(pre.group(2)) * 2**20),
            "message": msg[:2000]}
    if _SHM.search(head):
        return "failure", {}, {"failure": "shm_exhausted", "message": msg[:2000]}
    if (df := _DF_SHM_FULL.match(head)) is not None:
        return "failure", {"ratio": int(df.group(1)) / 100}, {"failure": "shm_exhausted", "df_use_pct": int(df.group(1)),
                                                             "message": msg[:500]}
    if (kube := kubelet_restart(head)) is not None:  # before the refused-connection wordings below
        return "failure", {"count": kube.get("count") or kube.get("restarts")}, {
            "failure": kube.pop("event"), **kube, "message": msg[:2000]}
    if (gloo := gloo_transport(head)) is not None:  # before Gloo's own wording of a refused or closed peer
        return "dist_transport", {}, {**gloo, "message": msg[:2000]}
    if _NCCL.search(head):
        return "failure", {}, {"failure": "nccl_error", "message": msg[:2000]}
    if (conn := NCCL_CONNECT.search(head)) is not None:
        # a retry is NCCL's INFO (it tries again); the give-up and the hard failure are its WARNs
        if "retrying" in head:
            return "nccl_info", {}, {"level": "INFO", "event": "connect_retry", "peer": conn.group(1),
                                     "error": conn.group(2).strip(), "message": msg[:500]}
        return "failure", {}, {"failure": "nccl_error", "peer": conn.group(1), "error": conn.group(2).strip(),
                               "message": msg[:2000]}
    if _PEER_EXITED.search(head):
        return "failure", {}, {"failure": "peer_exited", "message": msg[:2000]}
    # the store's server side that cannot bind (``The server socket has failed to listen … name: EADDRINUSE``,
    # failure_messages.md §4.6 row 2) is a taken port, not a rendezvous that timed out: read by _PORT below
    if _STORE.search(head) and not _PORT.search(head):
        j = _JOINED.search(head)
        return "failure", {"count": _int(j.group(1)) if j else None}, {
            "failure": "store_timeout", "world_size": _int(j.group(2)) if j else None, "message": msg[:2000]}
    if _OOM_KILLED.search(head):
        attrs: dict[str, Any] = {"failure": "oom_killed", "message": msg[:2000]}
        cols: dict[str, Any] = {}
        if (ev := _EVICTED.search(head)) is not None:
            attrs["via"] = "node_pressure_eviction"
            if ev.group(1):
                cols.update(comm=ev.group(1), used_bytes=k8s_quantity(ev.group(2)))
                attrs["request_bytes"] = k8s_quantity(ev.group(3) or ev.group(4) or "") or 0
        elif (kp := _KILLED_PROC.search(head)) is not None:
            cols["pid"], cols["comm"] = _int(kp.group(1)), kp.group(2)
        elif (task := _OOM_TASK.search(head)) is not None:
            cols["comm"] = task.group(1)
        rss = {f"{n}_rss_bytes": int(v) * 1024 for n, v in _RSS.findall(head)}
        if rss:
            attrs.update(rss)
            cols["used_bytes"] = sum(rss.values())
        return "failure", cols, attrs
    if ray_oom_killed(head):
        m = _RAY_MEM.search(msg[:20000])
        cols = {"used_bytes": round(float(m.group(1)) * GIB), "total_bytes": round(float(m.group(2)) * GIB)} if m else {}
        ray_attrs: dict[str, Any] = {"failure": "ray_oom", "message": msg[:2000]}
        if (v := _RAY_VICTIM.search(head)) is not None:
            cols.update(comm=v.group(1).strip(), pid=_int(v.group(2)))
            ray_attrs["victim_bytes"] = round(float(v.group(3)) * GIB)
        if (k := _RAY_SUMMARY.search(head)) is not None:
            ray_attrs["workers_killed"] = _int(k.group(1))
        return "failure", cols, ray_attrs
    if (sig := _FATAL_SIGNAL.search(head)) is not None:
        name = sig.group(1) or sig.group(2)
        return "failure", {"code": _SIGNAL_CODES.get(name)}, {"failure": "signal", "signal": name, "message": msg[:500]}
    if (term := _TERMINATE.search(head)) is not None:
        return "failure", {"code": -6}, {"failure": "signal", "signal": "Aborted", "exception_type": term.group(1),
                                         "message": msg[:500]}
    if _PORT.search(head):
        return "failure", *_port_figures(head, msg)
    if (rk := _REFUSE_KV.search(head)) is not None:
        # SGLang: K = min(C − 1, max_total_num_tokens − 1) − 5 (failure_messages.md §6.1)
        asked, limit = _int(rk.group(1) or rk.group(3)), _int(rk.group(2) or rk.group(4))
        return "failure", {"tokens": asked} if asked is not None else {}, {
            "failure": "request_refused", "limit_tokens": limit, "reveals": "kv_pool", "message": msg[:500]}
    if (rm := _REFUSE_MM.search(head)) is not None:
        return "failure", {"tokens": _int(rm.group(1))} if rm.group(1) else {}, {
            "failure": "request_refused", "limit_tokens": _int(rm.group(2)), "reveals": "context_length",
            "multimodal": True, "message": msg[:500]}
    if (rb := _REFUSE_BLOCKS.search(head)) is not None:
        return "failure", {"tokens": _int(rb.group(1))}, {"failure": "request_refused", "reveals": "kv_pool",
                                                          "message": msg[:500]}
    if (rc := _REFUSE_CTX.search(head)) is not None:
        named = rc.groupdict()
        limit = next((_int(v) for k, v in named.items() if k[0] == "c" and v), None)
        asked = next((_int(v) for k, v in named.items() if k[0] == "n" and v), None)
        if (total := _REFUSE_TOTAL.search(head, rc.end())) is not None:
            asked = _int(total.group(1))
        return "failure", {"tokens": asked} if asked is not None else {}, {
            "failure": "request_refused", "reveals": "context_length", "limit_tokens": limit, "message": msg[:500]}
    if KV_POOL_LEAK.search(head):
        return "failure", {}, {"failure": "kv_pool_leak", "message": msg[:2000]}
    if (gb := _GPU_BUSY.search(head)) is not None:
        cols = {"gpu": _int(gb.group(1)), "pid": _int(gb.group(3))} if gb.group(1) else {}
        return "failure", {k: v for k, v in cols.items() if v is not None}, {"failure": "gpu_busy", "message": msg[:500]}
    if _HEALTH.search(head):
        return "failure", {}, {"failure": "health_check", "message": msg[:500]}
    code = _exit_code(head)
    died = _DIED.search(head)
    if code is not None and (died or code != 0) and not head.startswith(("INFO", "DEBUG")):
        who = _PROC_NAME.search(head)
        return "failure", {"code": code}, {"failure": "process_exit", "process": who.group(1) if who else None,
                                           "message": msg[:500]}
    if _HOST_OOM.search(head):
        return "failure", {}, {"failure": "host_oom", "message": msg[:500]}
    exc = _EXC_LINE.match(head)
    if exc is not None:
        etype, emsg = exc.group(1), (exc.group(2) or "").strip()
        fail = "startup_failed" if _STARTUP.search(emsg) else "exception"
        return "failure", {"code": _exit_code(emsg)} if _FAILED_PROCS.search(emsg) else {}, {"failure": fail, "exception_type": etype, "exception_message": emsg[:2000],
                               "message": msg[:2000]}
    if died and _STARTUP.search(head):
        return "failure", {}, {"failure": "startup_failed", "message": msg[:500]}
    if (nb := NUMACTL_REFUSED.match(head)) is not None:
        return "failure", {}, {"failure": "numa_bind_refused", "option": nb.group(1), "error": nb.group(2),
                               "message": msg[:500]}
    if (ue := _USAGE_ERROR.match(head)) is not None:
        # the command line never became a server: a start-up failure that names what was refused
        return "failure", {}, {"failure": "startup_failed", "usage_error": ue.group(1)[:500], "message": msg[:500]}
    return None


def _port_figures(head: str, msg: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Port, the wait and the holder of a port message (SGLang's ``wait_port_available`` names all three)."""
    attrs: dict[str, Any] = {"failure": "port_in_use", "message": msg[:500]}
    if (w := _PORT_WAIT.search(head)) is not None:
        attrs.update(port_name=w.group(1), port=_int(w.group(2)), waited_s=_int(w.group(3)))
    elif (p := _PORT_NUM.search(head)) is not None:
        attrs["port"] = _int(p.group(1))
    holder_figures(head, attrs)
    cols = {"pid": attrs["holder_pid"]} if attrs.get("holder_pid") else {}
    return cols, attrs


def holder_figures(text: str, attrs: dict[str, Any]) -> None:
    """The port holder's status, pid and whether its command line is an engine's (a previous server)."""
    if (st := _PORT_HOLDER_STATUS.search(text)) is not None:
        attrs["holder_status"] = st.group(1)
    if (cmd := _PORT_HOLDER_CMD.search(text)) is not None:
        attrs["holder_is_engine"] = bool(_ENGINE_CMD.search(cmd.group(1)))
    if (pid := _PORT_HOLDER_PID.search(text)) is not None:
        attrs["holder_pid"] = _int(pid.group(1))


def _draft_worker_frames(frames: list[tuple[str, str]]) -> bool:
    """A speculative draft worker being built (sglang srt/speculative/*_worker.py ``__init__``, the scheduler's
    ``init_draft_worker`` / ``launch_draft_worker``): its load and pool come after the target's, in the same process."""
    return any(("/speculative/" in p and "worker" in p.rsplit("/", 1)[-1] and fn == "__init__") or "draft_worker" in fn
               for p, fn in frames)


def _in_wake_up(frames: list[tuple[str, str]]) -> bool:
    """Whether vLLM's sleep-mode allocator was mapping memory back for a wake-up (vllm
    vllm/device_allocator/cumem.py ``CuMemAllocator.wake_up``; the worker's and executor's ``wake_up`` above it)."""
    return any(fn == "wake_up" for _, fn in frames)


def _during(frames: list[tuple[str, str]]) -> str | None:
    """The start-up stage or phase a traceback's frames pass through, most specific last."""
    if _draft_worker_frames(frames):
        return "draft_init"
    funcs = " ".join(f"{p.rsplit('/', 1)[-1]}:{fn}" for p, fn in frames)
    for stage, needles in (
        # register_graph_buffers: the custom all-reduce registers the captured graphs' buffers at the end of each
        # capture (sglang srt/distributed/device_communicators/custom_all_reduce.py ``capture()``), nowhere else
        ("graph_capture", ("capture", "cuda_graph_runner", "graph_runner", "register_graph_buffers")),
        ("memory_pool", ("init_memory_pool", "profile_max_num_token", "memory_pool", "KVCache", "ReqToTokenPool",
                         "_allocate_kv_cache", "initialize_kv_cache", "determine_available_memory", "profile_run")),
        ("weight_load", ("load_model", "load_weights", "weight_loader", "model_loader")),
        ("forward", ("forward", "run_batch", "event_loop", "execute_model", "step")),
        ("init", ("__init__", "initialize", "init_")),
    ):
        if any(n in funcs for n in needles):
            return stage
    return None


# CPython's faulthandler dump after ``Fatal Python error: …`` (reference/failure_messages.md §5.2): the faulting
# thread first as ``Current thread 0x… (most recent call first):``, then ``  File "…", line N in func`` frames,
# innermost first (no comma before "in", unlike a traceback)
_FAULT_THREAD = re.compile(r"^\s*Current thread 0x[0-9a-fA-F]+ \(most recent call first\):\s*$")
_FAULT_FRAME = re.compile(r'^\s*File "([^"]*)", line \d+ in (\S+)')
_FAULT_LOOKAHEAD = 400  # lines after the fatal error where its dump may begin (other threads come first)


def faulting_thread(lines: list[str], at: int) -> list[tuple[str, str]]:
    """The (path, function) frames of the thread a faulthandler dump marks as current, innermost first, from the
    dump that follows the ``Fatal Python error`` on line index ``at``; [] when the dump is not in the text.

    >>> faulting_thread(["Fatal Python error: Bus error", "", "Current thread 0x00007f01 (most recent call first):",
    ...                  '  File "/m/loader.py", line 9 in load_weights'], 0)
    [('/m/loader.py', 'load_weights')]
    """
    for j in range(at + 1, min(len(lines), at + 1 + _FAULT_LOOKAHEAD)):
        ln = lines[j]
        if "Fatal Python error" in ln:
            return []  # the next process's dump
        if _FAULT_THREAD.match(ln):
            frames = []
            for k in range(j + 1, min(len(lines), j + 1 + 200)):
                fm = _FAULT_FRAME.match(lines[k])
                if not fm:
                    break
                frames.append((fm.group(1), fm.group(2)))
            return frames
    return []


def stage_of_frames(frames: list[tuple[str, str]]) -> str | None:
    """The stage a traceback's (path, function) frames pass through: ``graph_capture``, ``memory_pool``,
    ``weight_load``, ``forward`` or ``init`` (what detectors read when the exception line itself was lost).

    >>> stage_of_frames([("x/tp_worker.py", "forward_batch_generation"), ("x/model_runner.py", "forward_extend")])
    'forward'
    """
    return _during(frames)


#: frames that run the model itself: a ``forward``/``forward_*`` function (SGLang's
#: ``tp_worker.forward_batch_generation`` → ``model_runner.forward`` → ``forward_extend``/``forward_decode``, the
#: speculative workers' ``forward_batch_speculative_generation``, the overlap scheduler's model thread
#: ``forward_thread_func``, 0.1-0.3's ``forward_step``/``forward_decode_batch``), sampling, a graph's ``replay``, vLLM's
#: ``execute_model``; or a file of the model, its layers or the kernel libraries they call: sglang
#: python/sglang/srt/managers/tp_worker.py (0.4–0.5.x), sglang python/sglang/srt/model_executor/model_runner.py
#: (0.2–0.5.x), sglang python/sglang/srt/managers/tp_worker_overlap_thread.py (0.4.0–0.5.3), vllm
#: vllm/v1/worker/gpu_model_runner.py (0.8+)
_MODEL_FORWARD = re.compile(r"/(?:model_executor|models|layers|flashinfer|sgl_kernel|deep_gemm)/|/worker/\w*model_runner")
_MODEL_FORWARD_FUNCS = re.compile(r"^(?:forward(?:_\w+)?|execute_model|replay|sample)$")


#: the PyTorch compiler's own marks on a failure it raised: its frames (torch/_dynamo, torch/_inductor), dynamo's
#: ``from user code:`` trailer, its exception types (BackendCompilerFailed, TorchRuntimeError; InductorError 2.6+)
#: and the compile worker's ``SubprocException`` — pytorch torch/_dynamo/exc.py (2.0-2.9),
#: pytorch torch/_inductor/compile_worker/subproc_pool.py (2.4-2.9)
_COMPILER = re.compile(r'File "[^"\n]{0,400}/torch/_(?:dynamo|inductor)/|^\s*from user code:\s*$|'
                       r"\b(?:BackendCompilerFailed|TorchRuntimeError|InductorError|SubprocException|"
                       r"torch\._dynamo\.exc\.\w+|torch\._inductor\.exc\.\w+)\b", re.M)


def compiler_failure(text: str) -> bool:
    """Whether a failure's text is the PyTorch compiler's (dynamo tracing, Inductor compiling): a compile failure,
    not the model's memory.

    >>> compiler_failure('  File "/usr/lib/python3/torch/_dynamo/eval_frame.py", line 9, in _fn\\n    return fn()')
    True
    >>> compiler_failure("Exception: Capture cuda graph failed: SubprocException: An exception occurred in a subprocess:")
    True
    >>> compiler_failure('  File "/x/sglang/srt/models/llama.py", line 3, in forward\\ntorch.OutOfMemoryError: CUDA out')
    False
    """
    return bool(_COMPILER.search(text[:200000]))


#: the frames of dynamo's ``from user code:`` trailer (pytorch torch/_dynamo/exc.py (2.0-2.9)
#: ``augment_exc_message``: the user frames it was tracing, ``File "<path>", line N, in <func>``; a paste may shorten them
#: to ``<path>:N, in <func>``): which function the compiler was compiling when it failed
_USER_CODE = re.compile(r"^\s*from user code:\s*$", re.M)
_USER_FRAME = re.compile(r'^\s*(?:File "([^"\n]+)", line \d+|(\S+\.py):\d+), in (\w+)', re.M)


def compiled_user_frames(text: str) -> list[tuple[str, str]]:
    """(path, function) of each frame dynamo's ``from user code:`` trailer names, in order; empty without one.

    >>> compiled_user_frames('x\\nfrom user code:\\n  File "/s/layers/moe/fused_moe.py", line 9, in moe_sum\\n    y')
    [('/s/layers/moe/fused_moe.py', 'moe_sum')]
    >>> compiled_user_frames("from user code:\\n  .../models/llama.py:457, in forward")
    [('.../models/llama.py', 'forward')]
    """
    m = _USER_CODE.search(text[:200000])
    if m is None:
        return []
    tail = text[m.end():m.end() + 20000]
    return [(f1 or f2, func) for f1, f2, func in _USER_FRAME.findall(tail)]


def reaches_model_forward(frames: list[tuple[str, str]]) -> bool:
    """Whether a traceback's frames reach the model's forward pass, not only the scheduler's loop around it.

    A scheduler's traceback always passes ``event_loop_*`` and often ``run_batch``; what fails in batch building, a
    grammar, a detokenizer or a request's bookkeeping never enters the model, and cannot be its activations' OOM.

    >>> reaches_model_forward([("x/managers/scheduler.py", "event_loop_overlap"),
    ...                        ("x/managers/scheduler.py", "get_next_batch_to_run")])
    False
    >>> reaches_model_forward([("x/managers/scheduler.py", "run_batch"), ("x/managers/tp_worker.py",
    ...                        "forward_batch_generation")])
    True
    """
    return any(_MODEL_FORWARD.search(path) or _MODEL_FORWARD_FUNCS.match(fn) for path, fn in frames)


#: CPython faulthandler's dump after ``Fatal Python error: …`` (failure_messages.md §5.2): ``Current thread 0x…
#: (most recent call first):`` then ``  File "…", line N in func`` — no comma before ``in``; concurrent ranks' dumps
#: interleave, so the file and function are read apart
_DUMP_THREAD = re.compile(r"(?:Current|Thread) (?:thread )?0x[0-9a-f]+")
_FAULT_FUNC = re.compile(r"line \d+ in (\w+)")
_FAULT_FILE = re.compile(r"(?<![\w.-])([\w.-]{1,100}?\.py)\b")


def crashed_frame(after: list[str]) -> dict[str, str]:
    """The innermost frame of the faulthandler dump in the lines after ``Fatal Python error``: ``crashed_in`` (the
    function, when legible) and ``crashed_file``.

    >>> crashed_frame(["", "Current thread 0x00007f48 (most recent call first):",
    ...                '  File "/x/pynccl_wrapper.py", line 351 in ncclCommInitRank'])
    {'crashed_file': 'pynccl_wrapper.py', 'crashed_in': 'ncclCommInitRank'}
    """
    for k, line in enumerate(after):
        if _DUMP_THREAD.search(line):
            for frame in after[k + 1:k + 4]:
                if (file := _FAULT_FILE.search(frame)) is not None:
                    func = _FAULT_FUNC.search(frame)
                    return {"crashed_file": file.group(1), **({"crashed_in": func.group(1)} if func else {})}
            break
    return {}


def stops_at_allocation(text: str) -> bool:
    """Whether a traceback's last lines allocate device memory (``torch.empty(``, ``.cuda()``, an ``alloc…(`` call).

    >>> stops_at_allocation('  File "x.py", line 3, in init\\n    self.buf = torch.zeros(\\n')
    True
    >>> stops_at_allocation('  File "x.py", line 9, in call_begin_forward\\n    wrapper.begin_forward(\\n')
    False
    """
    tail = [ln for ln in text.splitlines() if ln.strip()][-3:]
    return bool(_ALLOCATION.search("\n".join(tail)))


def parse(text: str, path: str = "", command: str | None = None,
          candidates: Iterable[int] | None = None,
          tags: Callable[[int], dict[str, Any]] | None = None) -> ParseResult:
    """Every failure line of ``text`` as rows; a traceback becomes one row spanning its lines.

    ``candidates``: 0-based indices (as ``text.splitlines()`` numbers them) of a superset of the lines
    :data:`TRIGGER` matches (``parsers.routing``): the lines between them are not stepped through.
    ``tags``: for a text whose envelopes were peeled, Ray's tag of the 0-based line (:func:`process_tag`'s keys),
    which the peel took off; a line that still carries its tag is read by :func:`process_tag`.
    """
    result = _parse(text, path, candidates)
    if result.events.is_empty():
        return result
    lines = text.splitlines()
    found = [process_tag(lines[ln - 1]) or (tags(ln - 1) if tags else {}) if 0 < ln <= len(lines) else {}
             for ln in result.events.get_column("line").to_list()]
    if not any(found):
        return result
    return ParseResult(events=_with_tags(result.events, found), source=result.source, path=result.path,
                       lines=result.lines, recognized=result.recognized, unrecognized=result.unrecognized,
                       unrecognized_examples=result.unrecognized_examples, notes=result.notes)


def _with_tags(ev: pl.DataFrame, found: list[dict[str, Any]]) -> pl.DataFrame:
    """The rows with the Ray tag of their first line: ``pid`` where the row has none, ``ray_actor``/``ip`` in attrs."""
    import json

    pids = pl.Series("pid", [t.get("pid") for t in found], dtype=ev.schema["pid"])
    merged = []
    for a, t in zip(ev.get_column("attrs").to_list(), found, strict=True):
        extra = {k: t[k] for k in ("ray_actor", "ip") if t.get(k)}
        if not extra:
            merged.append(a)
            continue
        d = json.loads(a) if isinstance(a, str) and a else dict(a or {}) if isinstance(a, dict) else {}
        merged.append(json.dumps({**d, **{k: v for k, v in extra.items() if k not in d}}, sort_keys=True))
    return ev.with_columns(pl.col("pid").fill_null(pids), pl.Series("attrs", merged, dtype=ev.schema["attrs"]))


def _parse(text: str, path: str, candidates: Iterable[int] | None) -> ParseResult:
    lines = text.splitlines()
    rows: list[dict[str, Any]] = []
    i = 0
    n = len(lines)
    recognized = 0
    loose_frames: list[tuple[str, str]] = []
    loose = [-1, -1]  # first and last line of the frames pasted without their header
    last_frame = [-10]  # the line of the last loose frame

    def under_frame(k: int) -> bool:
        """A line that belongs to the loose frames: a frame's source line (indented as CPython prints it, or the
        line right after the frame where a paste lost the indentation), a caret line, or a blank line."""
        line = lines[k]
        if is_elision(line.strip()):
            return False  # the paste's own cut: the frames end there
        return line[:1].isspace() or not line.strip() or bool(_CARETS.match(line)) or last_frame[0] >= k - 2

    def flush_loose() -> None:
        """Frames whose header and message were both cut: a traceback all the same, when there are several."""
        nonlocal recognized
        if len(loose_frames) >= 2:
            first, last = loose
            attrs: dict[str, Any] = {"failure": "traceback_cut", "headless": True,
                                     "innermost_frame": f"{loose_frames[-1][0].rsplit('/', 1)[-1]}:{loose_frames[-1][1]}",
                                     "during": _during(loose_frames)}
            if _ALLOCATION.search("\n".join(lines[max(first, last - 3):last + 1])):
                attrs["stops_at_allocation"] = True
            rows.append({"line": first + 1, "line_end": last + 1, "kind": "failure", **line_context(lines[first]),
                         "text": "\n".join(lines[first:last + 1])[:20000],
                         "attrs": {k: v for k, v in attrs.items() if v is not None}})
            recognized += last - first + 1
        loose_frames.clear()
    # which lines can hold a failure at all: one vectorised pass (polars' regex engine) for a long text
    cand = sorted(set(candidates)) if candidates is not None else None
    cset = set(cand) if cand is not None else None
    ci = 0
    maybe = pl.Series(lines, dtype=pl.Utf8).str.contains(_TRIGGER.pattern).to_list() if n > 2000 and cand is None else None
    while i < n:
        if cand is not None and not loose_frames:
            # nothing open: the lines up to the next candidate would each just be passed over
            ci = bisect.bisect_left(cand, i, ci)
            if ci == len(cand):
                break
            i = cand[ci]
            if i >= n:
                break
        if cset is not None:
            trigger = i in cset and _TRIGGER.search(lines[i])
        else:
            trigger = maybe[i] if maybe is not None else _TRIGGER.search(lines[i])
        if not trigger:
            if loose_frames and under_frame(i):
                if lines[i].strip():
                    loose[1] = i  # the source line shown under a frame (a blank line does not extend it)
            elif loose_frames and is_elision(strip_prefix(lines[i])):
                pass  # a cut mark between the frames and their error keeps them open, without joining the span
            else:
                flush_loose()
            i += 1
            continue
        msg = strip_prefix(lines[i])
        if _TRACEBACK.search(msg):
            flush_loose()
            j, frames = i + 1, []
            while j < n:
                inner = strip_prefix(lines[j])
                fm = _FRAME.match(inner)
                if fm:
                    frames.append((fm.group(1), fm.group(2)))
                elif not (_FRAME_LIKE.match(lines[j]) or is_elision(inner) or inner.startswith(("File ", "^", "~"))) \
                        or _EXC_LINE.match(inner):
                    break
                j += 1
            found = classify(strip_prefix(lines[j])) if j < n else None
            end = j if found else j - 1
            if found:
                kind, cols, attrs = found
            else:
                kind, cols, attrs = "failure", {}, {"failure": "traceback_cut"}
            if attrs.get("failure") == "exception" and populate_fault("\n".join(lines[i:end + 1])):
                attrs.update(failure="shm_exhausted", via="madvise_populate_efault")
            if not attrs.get("host_pinned") and pinned_host_oom(kind, "\n".join(lines[i:end + 1])):
                attrs.update(host_pinned=True, api="cudaHostAlloc (pinned host memory)")
            if frames:
                attrs["innermost_frame"] = f"{frames[-1][0].rsplit('/', 1)[-1]}:{frames[-1][1]}"
                attrs["during"] = attrs.get("during") or _during(frames)
                if attrs.get("allocator") == "vllm_cumem":
                    attrs["in_wake_up"] = _in_wake_up(frames)
                if not found and _ALLOCATION.search("\n".join(lines[max(i, end - 3):end + 1])):
                    attrs["stops_at_allocation"] = True  # cut right where a tensor was being allocated
            rows.append({"line": i + 1, "line_end": end + 1, "kind": kind, **cols, **line_context(lines[i]),
                         "text": "\n".join(lines[i:end + 1])[:20000], "attrs": attrs})
            recognized += end - i + 1
            i = end + 1
            continue
        fm = _FRAME.match(msg)
        if fm:  # frames of a traceback whose header was cut: they still say where it failed
            if not loose_frames:
                loose[0] = i
            loose_frames.append((fm.group(1), fm.group(2)))
            loose[1] = last_frame[0] = i
            i += 1
            continue
        leak = leaked_at_shutdown(msg)
        if leak is not None:  # an information line of the tracker's cleanup, with the source line warnings echoes
            flush_loose()
            # the call's source line warnings prints under it (indented; ``warnings.warn(`` alone from 3.12), behind
            # the same process prefix when a launcher relays the stream
            echo = strip_prefix(lines[i + 1]).lstrip() if i + 1 < n else ""
            end = i + 1 if echo.startswith("warnings.warn(") else i
            rows.append({"line": i + 1, "line_end": end + 1, "kind": "leaked_at_shutdown", **line_context(lines[i]),
                         "text": "\n".join(lines[i:end + 1])[:2000], "attrs": {**leak, "message": msg[:500]}})
            recognized += end - i + 1
            i = end + 1
            continue
        found = classify(msg)
        if found is None and loose_frames and under_frame(i):
            loose[1] = i  # the source line shown under a frame
            i += 1
            continue
        if found:
            kind, cols, attrs = found
            if loose_frames and attrs.get("failure") == "exception" \
                    and populate_fault("\n".join(lines[max(loose[0], 0):i + 1])):
                attrs.update(failure="shm_exhausted", via="madvise_populate_efault")  # frames pasted without header
            if loose_frames and "during" not in attrs:
                attrs["innermost_frame"] = f"{loose_frames[-1][0].rsplit('/', 1)[-1]}:{loose_frames[-1][1]}"
                attrs["during"] = _during(loose_frames)
            if loose_frames and attrs.get("allocator") == "vllm_cumem":
                attrs["in_wake_up"] = _in_wake_up(loose_frames)
            loose_frames.clear()
            end = i
            # the allocator message wrapped by the paste right before "which {F} is free" (§1.1)
            if kind == "cuda_oom" and "free_bytes" not in cols and i + 1 < n \
                    and (wf := _OOM_WRAPPED_FREE.match(lines[i + 1].strip())) is not None:
                cols = {**cols, "free_bytes": _size(wf.group(1))}
                end = i + 1
            # Gloo's reason, remote and local addresses on the lines a paste wrapped them onto (indented)
            while kind == "dist_transport" and end + 1 < n and end < i + 3 and lines[end + 1][:1].isspace() \
                    and lines[end + 1].strip() and classify(strip_prefix(lines[end + 1])) is None:
                end += 1
                attrs = {**attrs, **(gloo_transport(" ".join(ln.strip() for ln in lines[i:end + 1])) or {})}
            # ROCm's free-memory figure: on the abort line itself, or on the next one when the paste wrapped it
            af = _AVAIL_FREE.search(lines[i]) if "HSA_STATUS" in lines[i] else None
            if af is None and "HSA_STATUS" in lines[i] and i + 1 < n and _AVAIL_FREE.match(lines[i + 1].strip()):
                af, end = _AVAIL_FREE.match(lines[i + 1].strip()), i + 1
            if af is not None and float(af.group(1)) < _AVAIL_FREE_BOGUS_MB:
                cols = {**cols, "free_bytes": parse_size(f"{af.group(1)} {af.group(2)}") or None}
            # the port holder's clause of SGLang's port message, when the paste wrapped it onto the next line
            if attrs.get("failure") == "port_in_use" and end + 1 < n and "process." in lines[end + 1] \
                    and _PORT_HOLDER_STATUS.search(lines[end + 1]):
                holder_figures(lines[end + 1], attrs)
                end += 1
            if attrs.get("failure") == "signal" and "Fatal Python error" in msg:
                frames = faulting_thread(lines, i)
                if frames:  # where the faulting thread was: a mapping of /dev/shm, or of a checkpoint file
                    attrs.update(faulting_thread=True, during=_during(frames),
                                 innermost_frame=f"{frames[0][0].rsplit('/', 1)[-1]}:{frames[0][1]}")
            # the frame a faulthandler dump names first (most recent call first): where the native crash happened
            if attrs.get("failure") == "signal" and "Fatal Python error" in lines[i]:
                attrs.update(crashed_frame(lines[i + 1:i + 8]))
            # the rss figures of a kill report pasted on lines of their own
            while attrs.get("failure") == "oom_killed" and end + 1 < n and _RSS.search(lines[end + 1]) \
                    and classify(strip_prefix(lines[end + 1])) is None:
                attrs.update({f"{k}_rss_bytes": int(v) * 1024 for k, v in _RSS.findall(lines[end + 1])})
                cols = {**cols, "used_bytes": sum(v for k, v in attrs.items() if k.endswith("_rss_bytes"))}
                end += 1
            # Ray's memory monitor prints its header and its figure line as one report (§5.4): one row for both
            while attrs.get("failure") == "ray_oom" and end + 1 < n and ray_oom_killed(lines[end + 1]):
                more = classify(strip_prefix(lines[end + 1]))
                if more is None or more[2].get("failure") != "ray_oom":
                    break
                cols = {**more[1], **{k: v for k, v in cols.items() if v is not None}}
                attrs = {**more[2], **attrs}
                end += 1
            rows.append({"line": i + 1, "line_end": end + 1, "kind": kind, **line_context(lines[i]),
                         **{k: v for k, v in cols.items() if v is not None and not (isinstance(v, float) and math.isnan(v))},
                         "text": "\n".join(lines[i:end + 1])[:20000], "attrs": {k: v for k, v in attrs.items() if v is not None}})
            recognized += end - i + 1
            i = end + 1
            continue
        flush_loose()
        i += 1
    flush_loose()
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=n, recognized=recognized)


#: The gate of the scan, public for ``parsers.routing`` (which runs it with every other reader's at once).
TRIGGER = _TRIGGER

__all__ = ["CLASSES", "DEEPEP_DISPATCH_CAP", "FORMAT", "NCCL_CONNECT", "HEARTBEAT_MONITOR", "HICACHE_HOST_SMALLER", "KV_POOL_LEAK", "MEMORY_RESUME_FAILED", "MEMORY_SAVER_OOM", "MIB", "NUMACTL_REFUSED", "NUMACTL_REFUSED_IN_TEXT", "TRIGGER", "classify", "compiler_failure", "gloo_transport", "hardware_fault", "kubelet_restart", "nccl_interface", "nccl_socket_interfaces",
           "oom_figures", "parse", "pinned_host_oom", "populate_fault", "process_tag", "ray_oom_killed", "strip_prefix"]

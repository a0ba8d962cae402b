"""vLLM server / engine logs (``vllm serve``, ``python -m vllm.entrypoints.openai.api_server``, ``LLM(...)``).

Every vLLM record carries ``LEVEL MM-DD HH:MM:SS file.py:line] message`` (0.2–0.7), the same with
``[file.py:line]`` (0.8+), behind zero or more process prefixes: ``(VllmWorkerProcess pid=N)`` (V0 mp),
``(RayWorkerWrapper pid=N, ip=A.B.C.D)`` (Ray), ``(EngineCore_0 pid=N)`` / ``(EngineCore_DP0 pid=N)``,
``(VllmWorker rank=1 pid=N)``, ``(Worker_TP1 pid=N)``, ``(APIServer pid=N)`` (V1)::

    INFO 05-12 10:11:12 llm_engine.py:72] Initializing an LLM engine (v0.4.3) with config: model='m', max_seq_len=4096, tensor_parallel_size=2, ...
    INFO 05-12 10:11:30 worker.py:162] Loading model weights took 12.5523 GB
    INFO 05-12 10:11:34 gpu_executor.py:83] # GPU blocks: 1800, # CPU blocks: 512
    (EngineCore_DP0 pid=4188) INFO 11-20 09:14:32 [kv_cache_utils.py:1087] GPU KV cache size: 186,464 tokens
    (Worker_TP1 pid=4232) ERROR 11-20 09:14:45 [multiproc_executor.py:671] RuntimeError: CUDA error: out of memory

The stamp has no year: ``ts_local`` stays null and the stamp goes to ``attrs.stamp`` (like SGLang's
year-less forms); a stamp with a year (custom logging config) fills ``ts_local``. Trimmed excerpts
whose headers were cut are read by their message text. Memory figures are GiB even where vLLM
prints "GB" (``/ 2**30``); token counts may have thousands separators. Each physical line is a
record (vLLM repeats the header on continuation lines); a traceback, headed or bare, becomes one
``exception`` row, and a CUDA OOM or a KV-cache failure inside it gets its own row too.

>>> r = parse("INFO 05-12 10:11:30 worker.py:162] Loading model weights took 12.5523 GB\\n"
...           "(Worker_TP1 pid=7) INFO 05-12 10:11:40 [gpu_worker.py:9] Available KV cache memory: -1.5 GiB\\n")
>>> r.events.select("kind", "rank", "tp_rank", "pid", "bytes").rows()
[('weight_load_end', None, None, None, 13477929497), ('kv_no_room', 'Worker_TP1', 1, 7, -1610612736)]
>>> (r.lines, r.recognized, r.unrecognized)
(2, 2, 0)
>>> sniff("INFO 05-12 10:11:30 worker.py:162] Loading model weights took 12.5523 GB") > 0.9
True
"""

from __future__ import annotations

import ast
import re
from datetime import datetime
from typing import Any

import polars as pl

from parsers import jsontext
from parsers.failures import classify as classify_failure
from parsers.failures import gloo_transport, oom_figures, pinned_host_oom, populate_fault, ray_oom_killed
from parsers.schema import MAX_UNRECOGNIZED_EXAMPLES, NotThisFormat, ParseResult, empty_frame, rows_to_frame
from parsers.units import gib, parse_size

FORMAT = "vllm"

#: V0 default block size: ``# GPU blocks`` × this = KV tokens when the log does not say otherwise.
DEFAULT_BLOCK_SIZE = 16

# --------------------------------------------------------------------------------------------
# Line prefixes

# vllm_formats.md §1.4 (colours), §1.5 (compose prefixes), §1.1 (the record header), §1.3 (process prefixes);
# ``[repeated Nx across cluster]`` is Ray's log dedup (vllm_formats.md §1.3)
_ANSI = re.compile(r"\x1b\[[0-9;]*m|\^\[\[[0-9;]*m")
_CONTAINER = re.compile(r"^(?P<svc>[A-Za-z0-9][\w.-]{0,80})\s+\| ")
#: One process prefix; vLLM (and Ray relayed through EngineCore) nests them.
_PROC = re.compile(
    r"\((?P<proc>[A-Za-z_][\w-]*(?: rank=\d+| [A-Z][A-Z0-9_]*\d)?)? ?pid=(?P<pid>\d{1,10})"
    r"(?:, ip=(?P<ip>[^)\s]{1,60}))?\) ?"
)
#: The record header: level, optional stamp (year-less; a year or milliseconds from custom configs), file:line.
_HEADER = re.compile(
    r"(?P<lvl>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) +"
    r"(?:(?:(?P<year>\d{4})-)?(?P<md>\d\d-\d\d) (?P<time>\d\d:\d\d:\d\d(?:[.,]\d{1,6})?) +)?"
    r"\[?(?P<file>[\w.<>-]+(?:/[\w.<>-]+)*(?:/\.\.\./[\w./-]+)?):(?P<srcline>\d+)\] ?(?P<msg>.*)$"
)
#: From the first blank before the mark only: any later one fails as the first did (issue 25)
_REPEATED = re.compile(r"(?<!\s)\s*\[repeated (\d+)x across cluster\]\s*$")
_RANK_PART = re.compile(r"(?:^|_)(DP|PP|PCP|TP|DCP|EP)(\d+)")
_RANK_COLUMNS = {"TP": "tp_rank", "DP": "dp_rank", "PP": "pp_rank", "EP": "ep_rank"}

# --------------------------------------------------------------------------------------------
# Message templates (searched in the message, so header-less excerpts are read too)

_NUM = r"(-?[\d,]*\d(?:\.\d+)?)"
#: A number that opens an alternative starts at the first of its digits and commas (issue 25): from any
#: later one ``[\d,]*`` rescans the run and fails as the first one did (tests/test_regex_rewrites.py)
_NUM_START = r"(-?(?<![\d,])[\d,]*\d(?:\.\d+)?)"
# vllm_formats.md §2.2 (version, config dump, args)
_VERSION = re.compile(r"vLLM (?:API )?server version v?([\w.+-]+)(?:, serving model (\S+))?")
_LOGO_VERSION = re.compile(r"\bversion (\d+\.\d+\.\d+[\w.+-]*)")
_CONFIG = re.compile(r"Initializing an? (?:(V[01]) )?LLM engine(?: \(v?([^)]+)\))? with config: (.*)$")
_CONFIG_KV = re.compile(
    r"(?:^|, )(\w+)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}|\[[^\]]*\]"
    r"|[\w.+-]+\([^()]*\)|[^,]*)"
)
_NON_DEFAULT = re.compile(r"non-default args: (\{.*)$")
_NAMESPACE = re.compile(r"^args: Namespace\((.*?)\)?\s*$")
# vllm_formats.md §2.3 (model weights)
_WEIGHTS_OLD = re.compile(r"Loading model weights took " + _NUM + r" ?(GB|GiB)")
_WEIGHTS_NEW = re.compile(r"Model loading took " + _NUM + r" ?(GB|GiB)(?: memory)? and " + _NUM + r" ?s")
_WEIGHTS_READ = re.compile(r"^Loading weights took " + _NUM + r" ?s")
_LOAD_BEGIN = re.compile(r"^Starting to load model (\S+?)(?:\.\.\.)?$")
# vllm_formats.md §2.4 (V0 profiling), §2.5 (V1 KV budget), §2.6 (the --kv-cache-memory hint), §3.3 (free memory at
# start-up)
_PROFILE_064 = re.compile(r"Memory profiling results: (.*)")
#: A name from its first character only (issue 25; tests/test_regex_rewrites.py says what that changes)
_PROFILE_KV = re.compile(r"(?<!\w)(\w+)=" + _NUM + r"(GiB)?")
_PROFILE_TAKES = re.compile(r"^Memory profiling takes " + _NUM + r" seconds(.*)$")
_PROFILE_BUDGET = re.compile(
    r"total_gpu_memory \(" + _NUM + r" ?GiB\) x gpu_memory_utilization \(" + _NUM + r"\) = " + _NUM + r" ?GiB"
)
_PROFILE_SPLIT = re.compile(
    r"model weights take " + _NUM + r" ?GiB; non_torch_memory takes " + _NUM
    + r" ?GiB; PyTorch activation peak memory takes " + _NUM
    + r" ?GiB; the rest of the memory reserved for KV Cache is " + _NUM + r" ?GiB"
)
_PROFILE_V1 = re.compile(r"(Total non KV cache memory|torch peak memory increase|non-torch forward increase memory"
                         r"|weights memory|total consumed \(from mem_get_info\)): " + _NUM + r" ?GiB")
#: the profiling assertion's figures (vllm_formats.md §3.3): free memory (bytes 0.5.5-0.9.0, GiB in V1 0.9.1+) or, in V0
#: 0.7-0.10.2, used memory, before and after profiling
_PROFILING_FIGURES = re.compile(r"Initial (free|used) memory " + _NUM + r"( ?GiB)?, current(?:ly)? (?:free|used) memory "
                                + _NUM + r"( ?GiB)?")
# vllm_formats.md §3.3 (``Free memory on device … on startup``), §2.6 (the hint)
_FREE_HINT = re.compile(r"Free memory on device (?:\S+ )?\(" + _NUM + "/" + _NUM + r" GiB\) on startup\. (.*)$")
#: the tail after "less" may be cut by a paste ("… on startup is less..."): the free and total figures already say
#: the refusal, the fraction and the request are then unknown
_FREE_LOW = re.compile(r"Free memory on device (?:(?P<device>\S+) )?\(" + _NUM + "/" + _NUM
                       + r" GiB\) on startup is ?less(?: ?than ?(?:desired ?GPU ?memory ?utilization|the engine's budget "
                       r"after excluding external process's weights) ?\(" + _NUM + ", " + _NUM + ")?")  # " ?": a re-joined wrap
_HINT_PARTS = re.compile(
    r"Desired GPU memory utilization is \(" + _NUM + ", " + _NUM + r" GiB\)"
    r"|" + _NUM_START + r" GiB for (weight|peak activation|non-torch memory|CUDAGraph memory|consumed memory)"
    r"|Current kv cache memory in use is " + _NUM + r" (GiB|bytes)"
    # vllm_formats.md §2.6 "hint": ``--kv-cache-memory=N`` (bytes) to fit the requested budget / to fill the GPU
    r"|--kv-cache-memory=(\d+)`?(?: \([^)]{0,40}\))? to (fit|fully)"
)
# vllm_formats.md §2.4, §2.5 (capacity lines)
_BLOCKS = re.compile(r"(?:^|# )(GPU|CUDA|cuda|[A-Za-z]{1,12}) blocks: (\d+)(?:, # CPU blocks: (\d+))?")
_KV_TOKENS = re.compile(r"(\b[A-Za-z]{1,12}(?: \+ [A-Za-z]{1,12})?) KV cache size: " + _NUM + r" tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for " + _NUM + r" tokens per request: " + _NUM + r"x")
_KV_AVAIL = re.compile(r"^Available KV cache memory: " + _NUM + r" ?GiB")
#: sleep mode's own account (vllm vllm/v1/worker/gpu_worker.py and vllm/worker/worker.py ``Worker.sleep``, 0.7.3+):
#: what torch.cuda.mem_get_info says was freed by the sleep and what the whole device still has in use after it
_SLEEP_FREED = re.compile(r"^Sleep mode freed " + _NUM + r" GiB memory, " + _NUM + r" GiB memory is still in use")
_KV_RESERVED = re.compile(r"reserved " + _NUM + r" ?GiB memory for KV Cache as specified by kv_cache_memory_bytes")
# vllm_formats.md §2.7 (CUDA graph capture); tqdm bars of §1.5; NCCL INFO lines of failure_messages.md §4.1
_GRAPH_BEGIN = re.compile(r"^Capturing (?:the model for CUDA graphs|cudagraphs for decoding)")
_GRAPH_END = re.compile(r"Graph capturing finished in " + _NUM + r" secs?(?:, took " + _NUM + r" ?GiB)?")
# vllm_formats.md §2.6 (``CUDA graph pool memory: … (actual), … (estimated)``, ``Estimated CUDA graph memory``)
_GRAPH_POOL = re.compile(r"CUDA graph pool memory: " + _NUM + r" GiB \(actual\), " + _NUM + r" GiB \(estimated\)")
_GRAPH_ESTIMATE = re.compile(r"Estimated CUDA graph memory: " + _NUM + r" GiB total")
_PROMPTS_BAR = re.compile(r"(?<!\d)(\d{1,9})/(\d{1,9}) \[([\d:]{1,12})<")
_NCCL_COMM = re.compile(r"\bnranks (\d{1,6})\b")
# failure_messages.md §4.1 (NCCL INFO ``nranks``, ``via P2P/SHM/NET``); vllm_formats.md §2.7 (the capture bar)
_NCCL_VIA = re.compile(r" via (P2P|SHM|NET|NVLS|CollNet)\b")
_GRAPH_TQDM = re.compile(r"^Capturing CUDA graph(?:s| shapes)(?: \(([^)]*)\))?:\s*(\d+)%")
# vllm_formats.md §3.1, §3.2 (the KV cache cannot hold a request; no KV memory), §3.4 (preemption)
_TOO_SMALL_V0 = re.compile(r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored"
                           r" in KV cache \((\d+)\)")
# (a paste may lose the "(" before the size where a terminal cut the line after "),")
_TOO_SMALL_V1 = re.compile(r"max seq len \((\d+)\),? ?\(?" + _NUM + r" ?Gi?B KV cache is needed, which is larger than"
                           r" the available KV cache memory \(" + _NUM + r" ?Gi?B\)")
_ESTIMATED_LEN = re.compile(r"estimated maximum model length is (\d+)")
#: the V1 refusal's opening words alone (vllm_formats.md §3.1, 0.7.0+ ``check_enough_kv_cache_memory``; "models's"
#: until 0.22): already the documented refusal when a paste cut the figures off
_TOO_SMALL_V1_HEAD = re.compile(r"To serve at least one request with the models?'s max seq len \((\d+)\)")
#: the estimate sentence of the same message (0.8.5+ ``estimated_msg``), where a wrap put it on a line of its own
_ESTIMATE_TAIL = re.compile(r"^\s*Based on the available memory, the estimated maximum model length is \d+")
# the second wording: vllm vllm/v1/core/kv_cache_utils.py::_auto_fit_max_model_len (0.14+, ``--max-model-len -1/auto``):
# not one token of KV fits after the weights and activations, the same refusal under auto-fit
_NO_CACHE = re.compile(r"No available memory for the cache blocks"
                       r"|Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token")
_PREEMPT = re.compile(r"Sequence group (\S+) is preempted by (?:PreemptionMode\.)?(\w+) mode because there is not"
                      r" enough KV cache space.*?(?:total_num_cumulative_preemption=(\d+))?$")
_SWAP_ABORT = re.compile(r"Aborted due to the lack of CPU swap space")
#: the UVA offloader's total per worker (vllm/model_executor/offloader/uva.py: ``logger.info("Total CPU offloaded
#: parameters: %s", format_gib(self.cpu_offload_bytes))``): GiB of weights this rank keeps in pinned host memory
#: vllm vllm/model_executor/offloader/uva.py (main)
_CPU_OFFLOADED = re.compile(r"^Total CPU offloaded parameters: " + _NUM + r"\s*(?:GiB)?\s*$")
#: LMCache's own dump of its configuration, logged by every worker's engine (``LMCacheEngineConfig.log_config``,
#: lmcache/v1/config.py: ``"max_local_cpu_size": f"{self.max_local_cpu_size} GB"`` — GiB: the allocator takes
#: ``max_local_cpu_size * 1024**3``)
_LMCACHE_CONFIG = re.compile(r"LMCache Configuration: \{")
_LMCACHE_CPU = re.compile(r"'local_cpu': (True|False)\b.{0,400}?'max_local_cpu_size': '" + _NUM + " GB'")
#: the KV-offload tier's shared region (vllm/v1/kv_offload/cpu/shared_offload_region.py: ``logger.info("Created mmap
#: file %s (%.2f GB)", path, total_size_bytes / 1e9)``): a file in /dev/shm, unlinked on a graceful shutdown only
#: vllm vllm/v1/kv_offload/cpu/shared_offload_region.py (main)
_OFFLOAD_REGION = re.compile(r"^Created mmap file (\S+) \(" + _NUM + r" GB\)")
# vllm_formats.md §3.7 (host memory), §4 (periodic metrics lines)
_SWAP_TOO_LARGE = re.compile(r"(Possibly )?[Tt]oo large swap space\. " + _NUM + r" GiB out of the " + _NUM
                             + r" GiB total CPU memory")
_METRICS_FIELD = re.compile(
    r"(Avg prompt throughput|Avg generation throughput|Running|Swapped|Pending|Waiting|Deferred|Preemptions"
    r"|(?:GPU|CPU|\b[A-Za-z]{1,12}) KV cache usage|Prefix cache hit rate|External prefix cache hit rate|MM cache hit rate"
    r"|Corrupted): " + _NUM
)
_ENGINE_IDX = re.compile(r"^Engine (\d+): |^(\d+) Engines Aggregated: ")
_PREFIX_HIT_V0 = re.compile(r"^Prefix cache hit rate: GPU: " + _NUM + r"%, CPU: " + _NUM + "%")
# vllm vllm/distributed/parallel_state.py (main: ``rank N in world size M is assigned as …``); vllm_formats.md §3.8
# (nccl version), §2.1 (``Using max model len``, chunked prefill), §2.8 (end of start-up)
_RANK_ASSIGNED = re.compile(r"rank (\d+) in world size (\d+) is assigned as (.*)$")
_ASSIGNED_PART = re.compile(r"(DP|PP|TP|EP|PCP|DCP) rank (\d+)")
_NCCL_VERSION = re.compile(r"vLLM is using nccl==(\S+)")
_MAX_MODEL_LEN = re.compile(r"^Using max model len (\d+)")
#: V1's multimodal profiling, just before the encoder's dummy batch runs: the encoder budget (min of the compute
#: budget and the cache size, each max(max_num_batched_tokens, one item's tokens)) and the items of the largest
#: modality that fill it (vllm vllm/v1/worker/gpu_model_runner.py::profile_run (0.7-main),
#: vllm vllm/multimodal/encoder_budget.py (0.11-main))
_ENCODER_BUDGET = re.compile(r"^Encoder cache will be initialized with a budget of (\d+) tokens, and profiled with "
                             r"(\d+) (\w+) items of the maximum feature size")
_CHUNKED = re.compile(r"max_num_batched_tokens=(\d+)")
_INIT_DONE = re.compile(r"^init engine \(profile, create kv cache, warmup model\) took " + _NUM)
# vllm_formats.md §3.6 (process and engine death)
_WORKER_DIED = re.compile(
    r"Worker proc (\S+) died unexpectedly(?: \(exit code: (-?\d+)\))?"
    r"|Worker (\S+) pid (\d+) died, exit code: (-?\d+)"
    r"|RayWorkerProc rank=(\d+) died unexpectedly"
    r"|Engine core proc (\S+) died unexpectedly"
    r"|Engine core process (\S+) died unexpectedly"
    # vllm vllm/engine/multiprocessing/client.py::run_heartbeat_loop (V0 MQLLMEngineClient, 0.6-0.10): psutil finds
    # the engine process gone (or a zombie) without an RPCError from it, logged as ``RuntimeError('Engine process
    # (pid N) died.')`` — the same death from outside as V1's ``Engine core proc … died unexpectedly``
    r"|Engine process \(pid (\d+)\) died\b"
)
_FAILED_PROCS = re.compile(r"Failed core proc\(s\): (\{[^}]*\})")
#: Ray's memory monitor saying it killed a worker (vllm_formats.md, "Ray memory monitor"): an observation
#: failure_messages.md §5.4 (Ray memory monitor)
#: (the kill message's "… exceeds the memory usage threshold of T. Ray killed this worker" alone, and the raylet's kill
#: summary "N Workers (tasks / actors) killed due to memory pressure (OOM)": Ray's OOM-prevention docs, 2.3-2.50)
_RAY_OOM = re.compile(r"killed due to the node running low on memory|"
                      r"exceeds the memory usage threshold of [\d.]+\. Ray killed this worker|"
                      r"killed due to memory pressure \(OOM\)")
#: Ray's notice that a worker process died, followed by its generic list of *potential* causes ("(1) The process
#: is killed by SIGKILL by OOM killer … (2) ray stop --force … (3) … SIGSEGV"): the death is observed, the cause
#: is not (Ray's worker-exit message, ``Worker exit type: SYSTEM_ERROR`` / ``UNEXPECTED_SYSTEM_EXIT``)
_RAY_WORKER_EXITED = re.compile(r"Worker exit type: (?:SYSTEM_ERROR|UNEXPECTED_SYSTEM_EXIT)|"
                                r"Worker unexpectedly exits with a connection error code")
# vllm_formats.md §3.6 (engine death, start-up failures), §3.8 (RPC and shared-memory broadcast timeouts);
# failure_messages.md §7 (sampler warm-up OOM), §2.2 (CUDA errors)
_DEAD = re.compile(
    r"(EngineCore encountered a fatal error|EngineDeadError|EngineCore encountered an issue|MQEngineDeadError"
    r"|AsyncEngineDeadError|Background loop has errored already|Engine loop is not running"
    r"|Engine background task failed|(?:AsyncLLMEngine|MQLLMEngine) (?:is already dead|has failed)"
    r"|AsyncLLM output_handler failed|Engine iteration timed out)"
)
_INIT_FAILED = re.compile(
    r"(EngineCore failed to start|Timed out waiting for engines? ?\w*|Timed out waiting for engine core processes to start|Engine core initialization failed|EngineCore initialization failed"
    r"|WorkerProc failed to start|WorkerProc initialization failed|Engine process failed to start)"
)
#: vllm vllm/v1/engine/core.py (0.8-0.11+) ``run_engine_core``: "Either SIGTERM or SIGINT will terminate the
#: engine_core" — its signal handler raises SystemExit, caught as ``logger.debug("EngineCore exiting.")`` (an error
#: is ``EngineCore failed to start`` / ``encountered a fatal error`` instead); the front-end sends the same SIGTERM to
#: its engine cores when it is itself stopped
_CORE_EXITING = re.compile(r"\bEngineCore exiting\.")
_RPC_TIMEOUT = re.compile(r"RPC call to (\w+) timed out")
_SHM_WAIT = re.compile(r"No available (?:shared memory broadcast )?block found in " + _NUM + r" seconds?")
# vllm vllm/executor/ray_utils.py (0.4-0.11) ``_wait_until_pg_ready``: the engine asking Ray for one GPU bundle per
# rank (TP × PP) and waiting with an exponential back-off (10 s, 20 s, 40 s, …) up to ``PG_WAIT_TIMEOUT`` (1800 s),
# then ``Cannot provide a placement group of placement_group_specs=… within N seconds``; the first bundle carries
# ``node:<VLLM_HOST_IP>`` (the driver's node); ``initialize_ray_cluster`` warns when the cluster has fewer GPUs.
# vllm vllm/v1/executor/ray_utils.py (main, 2026) ``_wait_until_pg_ready``: with more than one GPU asked for, the
# same timeout reads ``Cannot provide a placement group requiring {total} GPUs (placement_group_specs=…) within N
# seconds`` (the total a float sum of the bundles' GPUs, ``4.0``)
_PG_WAIT = re.compile(r"Waiting for creating a placement group of specs for (\d+) seconds\. specs=(\[.{0,20000}?\])")
_PG_TIMEOUT = re.compile(r"Cannot provide a placement group (?:of |requiring \d+(?:\.\d+)? GPUs \()placement_group_specs="
                         r"(\[.{0,20000}?\])\)? within (\d+) seconds")
_PG_GPU = re.compile(r"'GPU': ([\d.]+)")
_PG_NODE = re.compile(r"'node:([^']+)': ")
_SAMPLER_OOM = re.compile(r"CUDA out of memory occurred when warming up (sampler|pooler)(?: \([^)]*\))? with (\d+)"
                          r" ?dummy requests")  # " ?": a wrap re-joined without its space
_ECC = re.compile(r"CUDA error: uncorrectable ECC error encountered")
# failure_messages.md §2.2 (CUDA errors), vllm_formats.md §3.8 (``NCCL error:``)
_CUDA_ERR_OOM = re.compile(r"CUDA error: out of memory")
_NCCL_ERR = re.compile(r"NCCL error: ([^\n(]+)")

# vllm vllm/v1/engine/utils.py::wait_for_engine_startup (0.9.2+): the front-end polling its engine cores at start-up,
# DEBUG every ``STARTUP_POLL_PERIOD_MS`` = 10 s, ``Waiting for %d local, %d remote core engine proc(s) to connect.`` /
# ``… to start.`` until every core has sent its ready message
_STARTUP_WAIT = re.compile(r"Waiting for (\d+) local, (\d+) remote core engine proc\(s\) to (connect|start)")

# PyTorch's CUDA-OOM message (binary units)
_SZ = r"(\d+(?:\.\d+)? (?:bytes|[KMGTP]iB))"
# failure_messages.md §1.1
_ALLOCATOR_OOM = re.compile(r"\b(?:CUDA|HIP) out of memory\b")
_OOM = re.compile(r"(?:CUDA|HIP) out of memory\. Tried to allocate " + _SZ)

# foreign lines on the same streams
# vllm_formats.md §1.5 (uvicorn and access lines), failure_messages.md §4.4 (c10d watchdog), §4.1 (NCCL lines), §0
# (``[rankN]:``)
_UVICORN = re.compile(r"^(INFO|WARNING|ERROR|DEBUG):\s+(.*)$")
_ACCESS = re.compile(r'^(?P<client>\S+) - "(?P<method>[A-Z]+) (?P<path>\S*)[^"]*" (?P<status>\d{3})')
_C10D = re.compile(r"^(?:\[rank(\d+)\]:)?\[[EWIF]\d{0,4}[^\]]*ProcessGroupNCCL\.cpp:\d+\] (.*)")
# pytorch torch/csrc/distributed/c10d/ProcessGroupGloo.cpp (2.x): the CPU group's own lines (its start-up connections,
# parsers/failures.py ``gloo_transport``), same header
_C10D_GLOO = re.compile(r"^(?:\[rank(\d+)\]:)?\[[EWIF]\d{0,4}[^\]]*ProcessGroupGloo\.cpp:\d+\] (.*)")
_C10D_WATCHDOG = re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=(\w+)"
                            r".*?Timeout\(ms\)=(\d+)\) ran for (\d+) milliseconds")
_NCCL_LINE = re.compile(r"^\S{1,120}?:\d+:\d+ \[\d+\] NCCL (INFO|WARN|ERROR)")
_TQDM = re.compile(r"(?<!\d)\d{1,3}%(?:\|| Completed \|)|(?<!\d)\d{1,9}/\d{1,9} \[[\d:?]{1,12}<")
# failure_messages.md §0 (the ``[rankN]:`` prefix)
_TORCHRUN = re.compile(r"^\[rank(\d+)\]: ")

# tracebacks
# cpython Lib/traceback.py (3.x); vllm_formats.md §3.6 (WorkerProc/EngineCore openers); failure_messages.md §2.1
# (the notes after a CUDA error)
_TB_START = re.compile(r"^(?:Traceback \(most recent call last\):|Process (\S+):$)")
_TB_FRAME = re.compile(r'^\s+File "([^"]*)", line \d+, in (\S+)', re.M)
_TB_CONT = re.compile(r"^(?:\s+\S|\s*[\^~]+\s*$|The above exception was the direct cause|During handling of the"
                      r" above exception|\s*$)")
_TB_OPENER = re.compile(r"^(?:WorkerProc|EngineCore) hit an exception|^Exception in worker \S+ while processing")
#: PyTorch's notes after a CUDA error: part of the traceback record.
_TB_TAIL = re.compile(r"^(?:CUDA kernel errors might be asynchronously reported|For debugging consider passing"
                      r"|Compile with `TORCH_USE_CUDA_DSA`|Search for `cudaErrorMemoryAllocation')")
#: ``Name: message`` / ``pkg.Name(…)``: the name is checked apart (a regex over a long name backtracks).
_EXC_HEAD = re.compile(r"^([A-Za-z_][\w.]*+)(?:[:(] ?(.*))?$")
_EXC_SUFFIXES = ("Error", "Exception", "Exit", "Interrupt")
_EXC_MODULES = {"errors", "exceptions"}



#: the multi-API-server supervisor on a child's death (vllm_formats.md §3.6, ``v1/utils.py`` 0.20+)
_SUPERVISED_DIED = re.compile(r"\bProcess (\S{1,100}) \(PID: (\d{1,10})\) died with exit code (-?\d{1,4})")


def _refused_request(message: str | None) -> bool:
    """A ``ValueError`` that is a request refused for its length (failure_messages.md §6.2)."""
    got = classify_failure(message or "") if message and "length" in message else None
    return got is not None and got[2].get("failure") == "request_refused"

class _ExcMatch:
    def __init__(self, name: str, msg: str | None) -> None:
        self._g = (name, msg)

    def group(self, i: int) -> str | None:
        return self._g[i - 1]


class _ExcLine:
    """``_EXC_LINE.match(s)``: an exception line's type and message, in linear time.

    >>> _EXC_LINE.match("torch.OutOfMemoryError: CUDA out of memory").group(1)
    'torch.OutOfMemoryError'
    >>> _EXC_LINE.match("Errors happen: x") is None
    True
    >>> _EXC_LINE.match("triton.runtime.errors.OutOfResources: out of resource").group(1)
    'triton.runtime.errors.OutOfResources'
    >>> _EXC_LINE.match("errors.note: x") is None
    True
    """

    @staticmethod
    def match(s: str) -> _ExcMatch | None:
        m = _EXC_HEAD.match(s)
        if not m:
            return None
        name = m.group(1)
        last = name.rsplit(".", 1)[-1]
        if not last or not (last[0].isalpha() or last[0] == "_"):
            return None
        # a class of a module named errors/exceptions, whatever its name (triton.runtime.errors.OutOfResources)
        if not last.endswith(_EXC_SUFFIXES) and not (last[0].isupper() and _EXC_MODULES & set(name.split(".")[:-1])):
            return None
        return _ExcMatch(name, m.group(2))


_EXC_LINE = _ExcLine()

#: Functions in a traceback → the start-up phase a failure happened in (innermost match wins).
#: vllm_formats.md §2.1 (the start-up order), §2.4-§2.7 (the functions of each phase)
_PHASE_OF_FRAME = (
    (re.compile(r"capture_model|_capture_cudagraphs|capture_end|capture_begin|cudagraph|CUDAGraph|graph_capture"),
     "graph_capture"),
    (re.compile(r"_warmup_sampler|_dummy_sampler_run|warming up sampler"), "sampler_warmup"),
    (re.compile(r"profile_run|determine_num_available_blocks|determine_available_memory|_dummy_run"), "profile"),
    (re.compile(r"_allocate_kv_cache|initialize_kv_cache|initialize_cache|_init_cache|initialize_from_config"),
     "kv_alloc"),
    (re.compile(r"load_model|load_weights|process_weights_after_loading"), "weight_load"),
    (re.compile(r"execute_model|engine_step|run_engine_loop|step_with_batch_queue|run_busy_loop|\bstep\b"), "forward"),
)
#: The phase a process is in after each lifecycle record (for failures without frames).
_PHASE_OF_KIND = {
    "weight_load_begin": "weight_load", "weight_load_end": "profile", "memory_profile": "kv_alloc",
    "kv_memory": "kv_alloc", "kv_sizing": "kv_alloc", "cuda_graph_begin": "graph_capture",
    "capture_progress": "graph_capture", "cuda_graph_end": "warmup", "engine_metrics": "forward",
    "server_ready": "forward",
}

#: Known records of no forensic weight, recognised (not counted as unknown): substring → message id.
_NOTICES = (
    # LMCache's engine, one per worker (lmcache/v1/cache_engine.py ``LMCacheEngineBuilder.get_or_create``)
    ("Creating LMCacheEngine instance", "lmcache_engine"),
    ("Using cache directory", "compile_cache"), ("Dynamo bytecode transform time", "compile"),
    ("torch.compile takes", "compile"), ("Compiling a graph for", "compile"), ("Cache the graph of shape", "compile"),
    ("Directly load the compiled graph", "compile"), ("Resolved architecture", "architecture"),
    ("Chunked prefill is enabled", "chunked_prefill"), ("Automatically detected platform", "platform"),
    ("Cudagraph is disabled under eager mode", "eager"), ("Supported_tasks", "tasks"),
    ("vllm cache_config_info", "cache_config_info"), ("Custom allreduce is disabled", "custom_allreduce_disabled"),
    ("Using Flash", "attention_backend"), ("Using FlashInfer", "attention_backend"), ("Using XFormers", "attention_backend"),
    ("Using Triton", "attention_backend"), ("backend for attention", "attention_backend"),
    ("Using model weights format", "weights_format"), ("Downgrading", "downgrade"), ("Registering ", "cuda_graph_registered"),
    ("Starting vLLM API server", "server_start"), ("Starting vLLM server", "server_start"),
    ("Available routes are", "routes"), ("Route: ", "routes"), ("default chat sampling params", "sampling_defaults"),
    ("Default sampling parameters have been overridden", "sampling_defaults"), ("Found nccl from library", "nccl"),
    ("P2P access cache", "p2p_cache"), ("Possibly too large swap space", "swap_space_large"),
    # V0 worker/model_runner.py and enc_dec_model_runner.py ``profile_run`` (0.5-0.10): logged when the model takes
    # multimodal input, before the dummy batch of max_num_seqs sequences each carrying the largest multimodal input
    ("Starting profile run for multi-modal models", "mm_profile_run"),
    # vllm vllm/executor/ray_utils.py ``initialize_ray_cluster`` (0.5-0.11): the cluster Ray sees has fewer GPUs than
    # TP × PP; Ray's own ``Started a local Ray instance.`` (ray python/ray/_private/worker.py (2.x)): the engine did
    # not join a running cluster, so it sees this node's GPUs only
    ("The number of required GPUs exceeds the total number of available GPUs", "ray_gpus_short"),
    ("Started a local Ray instance", "ray_local_instance"),
    ("Using max model len", "max_model_len"), ("Overriding num_gpu_blocks", "gpu_blocks_override"),
    ("Loading safetensors checkpoint shards", "weights_progress"), ("Loading pt checkpoint shards", "weights_progress"),
    ("Parent process exited", "worker_shutdown"), ("WorkerProc shutting down", "worker_shutdown"),
    ("WorkerProc was terminated", "worker_shutdown"), ("Killing local vLLM worker processes", "worker_shutdown"),
    ("shutting down", "shutdown"), ("Shutting down", "shutdown"), ("We must use the `spawn`", "spawn"),
    ("The model has a long context length", "long_context"), ("CUDA graph memory profiling", "graph_profiling"),
    ("Profiling CUDA graph memory", "graph_profiling"), ("Auto-fit max_model_len", "auto_fit"),
    ("padding layers", "kv_padding"), ("This model supports", "model_support"),
    ("Asynchronous scheduling is", "async_scheduling"), ("Setting max_num_batched_tokens", "batched_tokens"),
    ("Loading weights with", "weights_format"), ("Reducing Torch parallelism", "torch_threads"),
    ("Worker ready; awaiting tasks", "worker_ready"), ("Setting Triton cache manager", "triton_cache"),
    ("chat template", "chat_template"), ("Dumping ", "crash_dump"),
)
_LEVEL_HEAD = {"DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL"}
_MAX_TB_LINES = 400


def _num(s: str | None) -> float | None:
    if s is None or s == "":
        return None
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return None


def _int(s: str | None) -> int | None:
    v = _num(s)
    return int(v) if v is not None else None


def _profiling_figures(s: str) -> dict[str, Any]:
    """``{initial_free_bytes, current_free_bytes}`` (or ``…_used_bytes``) of the profiling assertion, when it names them.

    >>> _profiling_figures("Initial free memory 42949672960, current free memory 47244640256. This happens when")
    {'initial_free_bytes': 42949672960, 'current_free_bytes': 47244640256}
    """
    m = _PROFILING_FIGURES.search(s)
    if m is None:
        return {}
    what = m.group(1)
    first, second = ((_gib(m.group(i)) if m.group(i + 1) else _int_num(m.group(i))) for i in (2, 4))
    return {f"initial_{what}_bytes": first, f"current_{what}_bytes": second}


def _int_num(s: str | None) -> int | None:
    v = _num(s)
    return int(v) if v is not None else None


def _gib(s: str | None) -> int | None:
    v = _num(s)
    return gib(v) if v is not None else None


def _size(s: str | None) -> int | None:
    return parse_size(s) if s else None


def _literal(v: str) -> Any:
    """A repr'd scalar as a Python value; unknown forms stay text.

    >>> _literal("4096"), _literal("'m'"), _literal("True"), _literal("torch.bfloat16")
    (4096, 'm', True, 'torch.bfloat16')
    """
    v = v.strip()
    if v in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[v]
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return v[1:-1]
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


def parse_config(body: str) -> dict[str, Any]:
    """The ``key=value`` pairs of an engine config dump or ``Namespace(...)``, first occurrence wins.

    >>> parse_config("model='m', max_seq_len=8192, tensor_parallel_size=4, compilation_config={\\"a\\": [1, 2]}, seed=0")
    {'model': 'm', 'max_seq_len': 8192, 'tensor_parallel_size': 4, 'compilation_config': '{"a": [1, 2]}', 'seed': 0}
    """
    out: dict[str, Any] = {}
    for m in _CONFIG_KV.finditer(body):
        k, v = m.group(1), m.group(2)
        if k not in out:
            out[k] = _literal(v) if not v.startswith(("{", "[")) else v.strip()
    return out


def parse_dict(body: str) -> tuple[dict[str, Any], bool]:
    """A ``{...}`` repr (``non-default args``) as a dict, and whether it was read whole.

    >>> parse_dict("{'model_tag': 'm', 'tensor_parallel_size': 8, 'gpu_memory_utilization': 0.95}")
    ({'model_tag': 'm', 'tensor_parallel_size': 8, 'gpu_memory_utilization': 0.95}, True)
    >>> parse_dict("{'max_model_len': 131072, 'enforce_eager': True, 'x': <function f at 0x1>")[0]
    {'max_model_len': 131072, 'enforce_eager': True}
    """
    try:
        v = ast.literal_eval(body)
        if isinstance(v, dict):
            return {str(k): _plain(x) for k, x in v.items()}, True
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    out = {}
    for m in re.finditer(r"'(\w+)': ('(?:[^'\\]|\\.)*'|-?[\d.]+(?:e-?\d+)?|True|False|None)(?=[,}])", body):
        out[m.group(1)] = _literal(m.group(2))
    return out, False


def _plain(v: Any) -> Any:
    return v if isinstance(v, str | int | float | bool | type(None)) else (
        [_plain(x) for x in v] if isinstance(v, list | tuple) else str(v))


def _ranks(proc: str) -> dict[str, Any]:
    """Rank columns from a process name: ``Worker_DP1_TP3``, ``VllmWorker rank=2``, ``EngineCore_DP0``.

    >>> _ranks("Worker_PP1_TP3"), _ranks("VllmWorker rank=2"), _ranks("EngineCore_1")
    ({'pp_rank': 1, 'tp_rank': 3}, {'tp_rank': 2, 'global_rank': 2}, {'dp_rank': 1})
    """
    out: dict[str, Any] = {}
    m = re.search(r"rank=(\d+)", proc)
    if m:  # the global rank: the TP rank when pp = 1 (the common case; attrs keep the global rank)
        return {"tp_rank": int(m.group(1)), "global_rank": int(m.group(1))}
    m = re.match(r"EngineCore_(\d+)$", proc)
    if m:
        return {"dp_rank": int(m.group(1))}
    for part, n in _RANK_PART.findall(proc.replace(" ", "_")):
        col = _RANK_COLUMNS.get(part)
        if col:
            out[col] = int(n)
    return out


def _phase_of_text(text: str) -> str | None:
    """The phase named by the innermost traceback frame that names one."""
    frames = _TB_FRAME.findall(text) if "File \"" in text else []
    # capture and the sampler's warm-up run the model through ``_dummy_run`` as the profiling run does: a frame of
    # either anywhere in the stack names the phase, whatever the innermost frame is
    for rx, phase in _PHASE_OF_FRAME[:2]:
        if any(rx.search(func) for _, func in frames):
            return phase
    for _, func in reversed(frames):
        for rx, phase in _PHASE_OF_FRAME:
            if rx.search(func):
                return phase
    for rx, phase in _PHASE_OF_FRAME:
        if rx.search(text):
            return phase
    return None


class _Parser:
    def __init__(self, path: str) -> None:
        self.path = path
        self.rows: list[dict[str, Any]] = []
        self.recognized = 0
        self.unrecognized = 0
        self.examples: list[tuple[int, str]] = []
        self.run = 0
        self.run_started = False  # the current run has passed its start-up markers
        self.phase: dict[Any, str] = {}  # stream (process) → phase after its last lifecycle record
        self.tb: dict[str, Any] | None = None  # the open traceback record
        self.headered = 0
        # the last message no record pattern read: the head of one a paste may have wrapped onto the next line
        self.held: tuple[int, str, dict[str, Any], str | None, int, int] | None = None

    # -- output ----------------------------------------------------------------------------

    def emit(self, kind: str, base: dict[str, Any], attrs: dict[str, Any], **cols: Any) -> dict[str, Any]:
        row = {**base, "kind": kind, "run": self.run, **{k: v for k, v in cols.items() if v is not None}}
        row["attrs"] = {**base.get("_attrs", {}), **{k: v for k, v in attrs.items() if v is not None}}
        row.pop("_attrs", None)
        self.rows.append(row)
        if kind in _PHASE_OF_KIND:
            self.phase[base.get("pid")] = _PHASE_OF_KIND[kind]
        elif kind == "notice" and attrs.get("message_id") == "weights_progress" and base.get("pid") not in self.phase:
            # the shard bar is drawn inside load_model (vllm vllm/model_executor/model_loader/weight_utils.py
            # (0.4-0.11) tqdm "Loading safetensors checkpoint shards"): a process that shows it and no earlier
            # lifecycle record is loading weights, so a frameless OOM after it is the load's
            self.phase[base.get("pid")] = "weight_load"
        if kind in ("weight_load_end", "kv_sizing", "kv_memory", "memory_profile", "engine_metrics",
                    "cuda_graph_end", "kv_cache_too_small", "kv_no_room", "init_failed"):
            self.run_started = True
        return row

    def unknown(self, lineno: int, text: str) -> None:
        self.unrecognized += 1
        if len(self.examples) < MAX_UNRECOGNIZED_EXAMPLES:
            self.examples.append((lineno, text[:500]))

    def new_run_marker(self) -> None:
        """A start-up record (version, args, config) after the current run's start-up: a new run."""
        if self.run_started:
            self.run += 1
            self.run_started = False

    # -- tracebacks --------------------------------------------------------------------------

    def close_tb(self) -> None:
        tb, self.tb = self.tb, None
        if tb is None:
            return
        text = "\n".join(tb["lines"])
        funcs = [f for _, f in _TB_FRAME.findall(text)]
        exc_line = f"{tb.get('etype')}: {tb.get('emsg') or ''}" if tb.get("etype") else ""
        # the sleep-mode allocator mapping memory back (vllm/device_allocator/cumem.py (0.7.3+) ``wake_up`` under
        # v1/worker/gpu_worker.py ``wake_up`` and EngineCore's utility call): the wake-up is the phase, not the
        # start-up stage the last lifecycle record left the process in
        woke = "wake_up" in funcs
        attrs = {"exception_type": tb.get("etype"), "exception_message": (tb.get("emsg") or "")[:2000] or None,
                 "during": "wake_up" if woke else _phase_of_text(text) or self.phase.get(tb["base"].get("pid")),
                 "frames": funcs[-8:] or None}
        base = {**tb["base"], "line_end": tb["last"], "text": text[:200_000]}
        self.emit("exception", base, attrs)
        found = classify_failure(exc_line) if "cumem_allocator" in exc_line else None
        if found is not None and found[0] == "failure" and found[2].get("allocator") == "vllm_cumem":
            # the allocator's out-of-memory inside EngineCore's or a worker's traceback: the row the sleep-mode
            # rules read, as the failure scan gives it for a relayed line (parsers/failures.py)
            self.emit("failure", base, {**found[2], "in_wake_up": woke})
        if pinned_host_oom("cuda_error_oom", text) and _CUDA_ERR_OOM.search(text):
            # the plain runtime OOM from the pinned host allocator (swap space, offload buffers): host memory
            for row in self.rows[::-1]:
                if row["kind"] == "cuda_error_oom" and tb["base"]["line"] <= (row.get("line") or 0) <= tb["last"]:
                    row["attrs"].update(host_pinned=True, api="cudaHostAlloc (pinned host memory)")
                    break
        # rows that quote the whole traceback are cited where it starts (its first line, or the engine's line
        # that opens it), and span it to its exception line
        self.emit_shm_refusal(base, f"{tb.get('etype')}: {tb.get('emsg') or ''}" if tb.get("etype") else "")
        if populate_fault(text):  # the tmpfs behind a shared region could not back it: /dev/shm full
            self.emit("failure", base, {"failure": "shm_exhausted", "via": "madvise_populate_efault",
                                        "message": text[-500:]})
        if _ALLOCATOR_OOM.search(text):
            # the allocator's OOM inside a worker's traceback ("Exception in worker … : CUDA out of memory. …")
            self.emit_oom(base, text, attrs["during"])

    def emit_shm_refusal(self, base: dict[str, Any], exc_line: str) -> None:
        """An exception whose message is vLLM's own /dev/shm check refusing to start (failure_messages.md §5: /dev/shm
        too small): the failure row the /dev/shm rule reads, with the figures the check printed."""
        found = classify_failure(exc_line) if "/dev/shm" in exc_line else None
        if found is not None and found[0] == "failure" and found[2].get("via") == "engine_preflight":
            self.emit("failure", {**base, **found[1]}, found[2])

    def rejoined(self, lineno: int, stripped: str, held: tuple[int, str, dict[str, Any], str | None, int, int]) -> bool:
        """Whether this line completes the one before it into a record: a message the paste or the terminal wrapped
        (a line that breaks mid-sentence, the next one going on in lower case: vllm_formats.md §1 «pastes»).

        The earlier line's fallback reading (an exception line, a log line) gives way to the record.
        """
        h_line, h_text, h_base, h_level, h_rows, h_unknown = held
        if h_line != lineno - 1 or not stripped[:1].islower() or h_text[-1:] in ".!?;:)]}" or len(h_text) < 40:
            return False
        before = len(self.rows)
        if not self.classify(h_line, f"{h_text} {stripped}", {**h_base, "line_end": lineno}, h_level):
            return False
        joined = self.rows[before:]
        del self.rows[h_rows:]  # the held line's own reading (emitted after it was held)
        self.rows.extend(joined)
        self.recognized += 1
        if self.unrecognized > h_unknown:  # the held line had been counted as unrecognized
            self.unrecognized, self.recognized = h_unknown, self.recognized + 1
            if self.examples and self.examples[-1][0] == h_line:
                self.examples.pop()
        return True

    def emit_oom(self, base: dict[str, Any], text: str, during: str | None) -> None:
        """A ``cuda_oom`` row with the allocator message's figures (one reader of them: parsers.failures)."""
        cols, oom = oom_figures(text)
        self.emit("cuda_oom", base, {"during": during, "tried_bytes": cols.get("bytes"), "total_bytes": cols.get("total_bytes"),
                                     "free_bytes": cols.get("free_bytes"), **oom}, **cols)

    # -- one line ----------------------------------------------------------------------------

    def line(self, lineno: int, raw: str) -> None:
        s = _ANSI.sub("", raw.rstrip("\r\n").replace("\r", "")) if ("\x1b" in raw or "^[[" in raw or "\r" in raw) \
            else raw.rstrip("\n")
        if not s.strip():
            if self.tb is not None:
                self.tb["last"] = lineno
            self.recognized += 1  # blank lines are nobody's
            return
        prefix_attrs: dict[str, Any] = {}
        base: dict[str, Any] = {"line": lineno}
        rest = s
        m = _CONTAINER.match(rest) if "| " in rest[:90] else None
        if m and ("pid=" in rest[m.end():m.end() + 60] or _HEADER.match(rest, m.end())):
            prefix_attrs["container"] = m.group("svc")
            rest = rest[m.end():]
        procs = []
        while rest.startswith("("):
            m = _PROC.match(rest)
            if not m:
                break
            procs.append(m)
            rest = rest[m.end():]
        if procs:
            # the innermost (last) prefix is the process that wrote the line; outer ones relayed it
            inner = procs[-1]
            name = inner.group("proc") or ""
            base["pid"] = int(inner.group("pid"))
            if name:
                base["rank"] = name
                rnk = _ranks(name)
                for col in ("tp_rank", "dp_rank", "pp_rank", "ep_rank"):
                    if col in rnk:
                        base[col] = rnk[col]
                if "global_rank" in rnk:
                    prefix_attrs["global_rank"] = rnk["global_rank"]
                prefix_attrs["process"] = name
            if inner.group("ip"):
                prefix_attrs["ip"] = inner.group("ip")
            if len(procs) > 1:
                prefix_attrs["relayed_by"] = [p.group("proc") or f"pid={p.group('pid')}" for p in procs[:-1]]
        m = _TORCHRUN.match(rest) if rest.startswith("[rank") else None
        if m:
            base["tp_rank"] = base.get("tp_rank", int(m.group(1)))
            rest = rest[m.end():]
        m = _REPEATED.search(rest) if "[repeated " in rest else None
        if m:
            prefix_attrs["repeated"] = int(m.group(1))
            rest = rest[: m.start()]
        level = None
        msg = rest
        hm = _HEADER.match(rest)
        if hm:
            self.headered += 1
            level = hm.group("lvl")
            prefix_attrs["level"] = level
            prefix_attrs["source_file"] = hm.group("file")
            if hm.group("md"):
                stamp = f"{hm.group('md')} {hm.group('time')}"
                if hm.group("year"):
                    try:
                        base["ts_local"] = datetime.fromisoformat(
                            f"{hm.group('year')}-{hm.group('md')} {hm.group('time').replace(',', '.')}")
                    except ValueError:
                        prefix_attrs["stamp"] = f"{hm.group('year')}-{stamp}"
                else:
                    prefix_attrs["stamp"] = stamp
            msg = hm.group("msg")
        elif rest.startswith("{") and '"message"' in rest:
            try:
                obj = jsontext.loads(rest)
            except ValueError:
                obj = None
            if isinstance(obj, dict) and isinstance(obj.get("message"), str):
                level = str(obj.get("levelname") or "") or None
                prefix_attrs["level"] = level
                if obj.get("asctime"):
                    prefix_attrs["stamp"] = str(obj["asctime"])
                if isinstance(obj.get("process"), int):
                    base["pid"] = obj["process"]
                msg = obj["message"]
        base["text"] = s
        base["_attrs"] = prefix_attrs
        self.message(lineno, msg, base, headered=hm is not None, level=level)

    def message(self, lineno: int, msg: str, base: dict[str, Any], *, headered: bool, level: str | None) -> None:
        stream = base.get("pid")
        tb = self.tb
        # a traceback: opened by its first line, continued by frames, code and the exception line
        if tb is not None and tb["stream"] == stream:
            stripped = msg.strip()
            em = _EXC_LINE.match(stripped)
            if _TB_CONT.match(msg) or _TB_START.match(stripped) or em or _TB_FRAME.match(msg) \
                    or _TB_TAIL.match(stripped) or _TB_FRAME.match("  " + stripped):
                if len(tb["lines"]) < _MAX_TB_LINES:
                    tb["lines"].append(msg)
                tb["last"] = lineno
                self.recognized += 1
                if em and not msg.startswith((" ", "\t")):
                    tb["etype"], tb["emsg"] = em.group(1), em.group(2)
                self.embedded(lineno, msg, base)
                return
            self.close_tb()
        elif tb is not None:
            self.close_tb()
        stripped = msg.strip()
        # a traceback opens at its head, or at a frame line when the excerpt starts inside one
        if _TB_START.match(stripped) or _TB_OPENER.match(stripped) or _TB_FRAME.match(msg) \
                or (_TB_FRAME.match("  " + stripped) and level in ("ERROR", "CRITICAL")):
            self.tb = {"stream": stream, "base": {k: v for k, v in base.items() if k != "text"} | {"line": lineno},
                       "lines": [stripped], "last": lineno}
            self.recognized += 1
            return
        held, self.held = self.held, None
        if self.classify(lineno, stripped, base, level):
            self.recognized += 1
            return
        if held is not None and self.rejoined(lineno, stripped, held):
            return
        self.held = (lineno, stripped, base, level, len(self.rows), self.unrecognized)
        # an exception line outside a traceback (an excerpt that kept only the last line)
        em = _EXC_LINE.match(stripped)
        if em and (headered or ":" in stripped):
            self.recognized += 1
            if _refused_request(em.group(2)):
                # the API server refused one request as too long (failure_messages.md §6.2): the client's
                # error, logged; the engine serves on, so it is no exception of the engine's
                self.emit("log", base, {"message": stripped[:2000]})
                return
            self.emit("exception", base, {"exception_type": em.group(1), "exception_message": em.group(2),
                                          "during": _phase_of_text(stripped) or self.phase.get(stream)})
            self.emit_shm_refusal(base, stripped)
            return
        if headered:
            if level in ("WARNING", "WARN", "ERROR", "CRITICAL"):
                self.emit("log", base, {"message": stripped[:2000]})
            self.unknown(lineno, base.get("text") or msg)
            return
        if _TQDM.search(stripped) or _NCCL_LINE.match(stripped) or re.match(r"^\S+\.py:\d+: \w*Warning: ", stripped):
            self.recognized += 1  # foreign output on the same streams, mostly of no forensic weight
            self.progress(stripped, base)
            return
        self.unknown(lineno, base.get("text") or msg)

    def progress(self, s: str, base: dict[str, Any]) -> None:
        """Rows for the foreign lines that say how far a run got: the offline requests' bar (``LLM._run_engine``:
        ``tqdm(total=<unfinished requests>, desc="Processed prompts")``, one ``update`` per finished request,
        vllm/entrypoints/llm.py 0.1–0.11) and NCCL's communicator and channel lines (failure_messages.md §4.1)."""
        if s.startswith("Processed prompts"):
            m = _PROMPTS_BAR.search(s)
            if m:
                self.emit("progress_bar", base, {"label": "Processed prompts", "steps_done": int(m.group(1)),
                                                 "steps_total": int(m.group(2)), "elapsed": m.group(3)})
        elif " NCCL INFO " in s and ("Init COMPLETE" in s or " via " in s):
            m = _NCCL_COMM.search(s)
            t = _NCCL_VIA.search(s)
            self.emit("nccl_info", base, {"level": "INFO", "message": s[:500], "nranks": int(m.group(1)) if m else None,
                                          "transport": t.group(1) if t else None})

    def _placement_group(self, m: re.Match[str], base: dict[str, Any]) -> None:
        """A placement-group wait or timeout line (``_PG_WAIT`` / ``_PG_TIMEOUT``) as a ``ray_pg_wait`` row."""
        timed_out = m.re is _PG_TIMEOUT
        specs = m.group(1 if timed_out else 2)
        node = _PG_NODE.search(specs)
        self.emit("ray_pg_wait", base, {"waited_s": _num(m.group(2 if timed_out else 1)), "timed_out": timed_out,
                                        "gpus": sum(_num(g) or 0 for g in _PG_GPU.findall(specs)),
                                        "bundles": specs.count("{"), "driver_node": node.group(1) if node else None},
                  seconds=_num(m.group(2 if timed_out else 1)))

    def embedded(self, lineno: int, msg: str, base: dict[str, Any]) -> None:
        """A failure named inside a traceback line gets its own row too (detectors look for the kind)."""
        s = msg.strip()
        if any(k in s for k in ("CUDA out of memory", "CUDA error", "max seq len", "No available memory for the cache",
                                "Cannot auto-fit max_model_len", "EngineDeadError", "NCCL error", "swap space",
                                "Error in memory profiling", "on startup is less than ", "on startup isless than ",
                                "Cannot provide a placement group")):
            before = len(self.rows)
            self.classify(lineno, s, {**base, "line": lineno}, None, only_failures=True)
            during = _phase_of_text("\n".join(self.tb["lines"])) if self.tb else None
            for r in self.rows[before:]:
                r["attrs"]["in_traceback"] = True
                if during and r["kind"] in ("cuda_oom", "cuda_error_oom"):
                    r["attrs"]["during"] = during

    # -- the templates -------------------------------------------------------------------------

    def classify(self, lineno: int, s: str, base: dict[str, Any], level: str | None,  # noqa: C901
                 only_failures: bool = False) -> bool:
        emit = self.emit
        stream = base.get("pid")
        if not only_failures:
            if "Avg prompt throughput" in s:
                return self._metrics(s, base)
            if s[:9] in ("INFO:    ", "WARNING: ", "ERROR:   ", "DEBUG:   ") and self._uvicorn(s, base):
                return True
            m = _CONFIG.search(s)
            if m:
                self.new_run_marker()
                cfg = parse_config(m.group(3))
                engine = m.group(1) or None
                attrs = {"engine": engine, "version": m.group(2), "config": cfg,
                         "max_model_len": cfg.get("max_seq_len"),
                         "tensor_parallel_size": cfg.get("tensor_parallel_size"),
                         "pipeline_parallel_size": cfg.get("pipeline_parallel_size"),
                         "data_parallel_size": cfg.get("data_parallel_size"),
                         "enforce_eager": cfg.get("enforce_eager"), "kv_cache_dtype": cfg.get("kv_cache_dtype"),
                         "quantization": cfg.get("quantization"), "model": cfg.get("model"),
                         "truncated": not s.rstrip().endswith((")", ",", "}")) or None}
                mx = cfg.get("max_seq_len")
                emit("engine_config", base, attrs, tokens=mx if isinstance(mx, int) else None)
                if m.group(2):
                    emit("version", base, {"component": "vllm", "version": m.group(2).lstrip("v")})
                return True
            m = _NON_DEFAULT.search(s)
            if m:
                self.new_run_marker()
                args, whole = parse_dict(m.group(1))
                emit("server_args", base, {"args": args, "form": "non_default", "truncated": None if whole else True})
                return True
            m = _NAMESPACE.match(s)
            if m:
                self.new_run_marker()
                emit("server_args", base, {"args": parse_config(m.group(1)), "form": "Namespace"})
                return True
            # 0.15+ ASCII logo: its lines name the version and the model (a graph-capture bar's blocks are no logo)
            if any(c in s[:40] for c in "█▄▀") and not _GRAPH_TQDM.match(s):
                lm = _LOGO_VERSION.search(s)
                if lm:
                    self.new_run_marker()
                    emit("version", base, {"component": "vllm", "version": lm.group(1), "form": "logo"})
                else:
                    mm = re.search(r"\bmodel +(\S+)\s*$", s)
                    emit("notice", base, {"message_id": "logo", "model": mm.group(1) if mm else None})
                return True
            m = _VERSION.search(s)
            if m:
                self.new_run_marker()
                emit("version", base, {"component": "vllm", "version": m.group(1).lstrip("v"), "model": m.group(2)})
                return True
            m = _WEIGHTS_NEW.search(s) or _WEIGHTS_OLD.search(s)
            if m:
                b = _gib(m.group(1))
                sec = _num(m.group(3)) if m.re is _WEIGHTS_NEW else None
                emit("weight_load_end", base, {"weights_bytes": b, "elapsed_s": sec, "unit_printed": m.group(2)},
                     bytes=b, used_bytes=b, seconds=sec)
                return True
            m = _LOAD_BEGIN.match(s)
            if m:
                emit("weight_load_begin", base, {"model": m.group(1)})
                return True
            m = _WEIGHTS_READ.match(s)
            if m:
                emit("notice", base, {"message_id": "weights_read", "elapsed_s": _num(m.group(1))},
                     seconds=_num(m.group(1)))
                return True
            if self._profile(s, base):
                return True
            m = _CONCURRENCY.search(s)
            km = _KV_TOKENS.search(s) if "KV cache size: " in s else None
            if km:
                tokens = _int(km.group(2))
                emit("kv_sizing", base, {"kv_tokens": tokens, "device": km.group(1),
                                         "max_concurrency": _num(m.group(2)) if m else None,
                                         "max_model_len": _int(m.group(1)) if m else None}, tokens=tokens)
                return True
            if m:
                emit("kv_concurrency", base, {"max_model_len": _int(m.group(1)), "max_concurrency": _num(m.group(2))},
                     tokens=_int(m.group(1)))
                return True
            m = _BLOCKS.search(s) if "blocks: " in s else None
            if m and ("blocks: " in s and (s.startswith(("#", "GPU", "CUDA", "cuda")) or "# " in s)):
                gpu_blocks = int(m.group(2))
                attrs = {"gpu_blocks": gpu_blocks, "cpu_blocks": _int(m.group(3)), "device": m.group(1),
                         "block_size_assumed": DEFAULT_BLOCK_SIZE, "kv_tokens": gpu_blocks * DEFAULT_BLOCK_SIZE}
                emit("kv_sizing", base, attrs, tokens=gpu_blocks * DEFAULT_BLOCK_SIZE, count=gpu_blocks)
                return True
            m = _SLEEP_FREED.match(s)
            if m:
                freed, in_use = _gib(m.group(1)), _gib(m.group(2))
                emit("sleep_report", base, {"freed_bytes": freed, "in_use_bytes": in_use}, bytes=freed,
                     used_bytes=in_use)
                return True
            m = _KV_AVAIL.match(s)
            if m:
                b = _gib(m.group(1))
                emit("kv_no_room" if b is not None and b <= 0 else "kv_memory", base,
                     {"available_kv_bytes": b, "reason": "negative_kv_memory" if b is not None and b <= 0 else None},
                     bytes=b)
                return True
            m = _KV_RESERVED.search(s)
            if m:
                b = _gib(m.group(1))
                emit("kv_memory", base, {"available_kv_bytes": b, "source": "kv_cache_memory_bytes"}, bytes=b)
                return True
            if _GRAPH_BEGIN.match(s):
                emit("cuda_graph_begin", base, {})
                return True
            m = _GRAPH_END.search(s)
            if m:
                b = _gib(m.group(2))
                emit("cuda_graph_end", base, {"elapsed_s": _num(m.group(1)), "graph_bytes": b},
                     seconds=_num(m.group(1)), bytes=b)
                return True
            m = _GRAPH_POOL.search(s)
            if m:
                emit("cuda_graph_memory", base, {"actual_bytes": _gib(m.group(1)), "estimated_bytes": _gib(m.group(2))},
                     bytes=_gib(m.group(1)))
                return True
            m = _GRAPH_ESTIMATE.search(s)
            if m:
                emit("cuda_graph_memory", base, {"estimated_bytes": _gib(m.group(1))}, bytes=_gib(m.group(1)))
                return True
            m = _GRAPH_TQDM.match(s)
            if m:
                emit("capture_progress", base, {"capture_name": m.group(1), "percent": int(m.group(2))})
                return True
            m = _PREEMPT.search(s)
            if m:
                total = _int(m.group(3))
                emit("preemption", base, {"sequence_group": m.group(1), "mode": m.group(2),
                                          "cumulative_preemptions": total}, count=total)
                return True
            m = _RANK_ASSIGNED.search(s)
            if m:
                parts = {p: int(n) for p, n in _ASSIGNED_PART.findall(m.group(3))}
                cols = {c: parts[p] for p, c in _RANK_COLUMNS.items() if p in parts}
                emit("rank_assigned", {**base, **cols}, {"global_rank": int(m.group(1)),
                                                         "world_size": int(m.group(2)), **{
                                                             f"{p.lower()}_rank": n for p, n in parts.items()}})
                return True
            m = _NCCL_VERSION.search(s)
            if m:
                emit("version", base, {"component": "nccl", "version": m.group(1)})
                return True
            m = _MAX_MODEL_LEN.match(s)
            if m:
                emit("notice", base, {"message_id": "max_model_len", "max_model_len": int(m.group(1))},
                     tokens=int(m.group(1)))
                return True
            m = _ENCODER_BUDGET.match(s)
            if m:
                emit("notice", base, {"message_id": "encoder_cache_budget", "encoder_budget_tokens": int(m.group(1)),
                                      "mm_items": int(m.group(2)), "modality": m.group(3)}, tokens=int(m.group(1)),
                     count=int(m.group(2)))
                return True
            m = _INIT_DONE.match(s)
            if m:
                emit("notice", base, {"message_id": "init_engine_done", "elapsed_s": _num(m.group(1))},
                     seconds=_num(m.group(1)))
                return True
            if s.startswith(("Application startup complete", "Uvicorn running on")):
                emit("server_ready", base, {"message": s})
                return True
            m = _PREFIX_HIT_V0.match(s)
            if m:
                emit("notice", base, {"message_id": "prefix_cache_hit_rate", "gpu_hit_ratio": _num(m.group(1)) / 100,
                                      "cpu_hit_ratio": _num(m.group(2)) / 100})
                return True
            m = _STARTUP_WAIT.search(s)
            if m:
                emit("engine_startup_wait", base, {"local": int(m.group(1)), "remote": int(m.group(2)),
                                                   "until": m.group(3)}, count=int(m.group(1)) + int(m.group(2)))
                return True
            m = _SHM_WAIT.search(s)
            if m:
                emit("shm_wait", base, {"waited_s": _num(m.group(1))}, seconds=_num(m.group(1)))
                return True
            m = _PG_WAIT.search(s) or _PG_TIMEOUT.search(s)
            if m:
                self._placement_group(m, base)
                return True
            m = _OFFLOAD_REGION.match(s)
            if m:
                size = _num(m.group(2))
                emit("host_pool", base, {"pool": "kv_offload_region", "path": m.group(1),
                                         "tmpfs": m.group(1).startswith("/dev/shm/")},
                     bytes=round(size * 1e9) if size is not None else None)
                return True
            if _LMCACHE_CONFIG.search(s):
                m = _LMCACHE_CPU.search(s[:4000])
                if m and m.group(1) == "True":
                    emit("host_pool", base, {"pool": "lmcache_cpu", "per_rank": True, "pinned": True,
                                             "size_gib": _num(m.group(2))}, bytes=_gib(m.group(2)))
                    return True
            m = _CPU_OFFLOADED.match(s)
            if m:
                emit("host_pool", base, {"pool": "cpu_offload_weights", "per_rank": True, "pinned": True},
                     bytes=_gib(m.group(1)))
                return True
            m = _SWAP_TOO_LARGE.search(s)
            if m:
                emit("swap_space_too_large", base, {"swap_total_bytes": _gib(m.group(2)),
                                                    "host_total_bytes": _gib(m.group(3)),
                                                    "warning_only": bool(m.group(1))},
                     bytes=_gib(m.group(2)), total_bytes=_gib(m.group(3)))
                return True
            m = _C10D.match(s)
            if m:
                w = _C10D_WATCHDOG.search(m.group(2))
                if w:
                    emit("nccl_watchdog", base, {"seq_num": int(w.group(1)), "op_type": w.group(2),
                                                 "timeout_s": int(w.group(3)) / 1000, "ran_for_s": int(w.group(4)) / 1000},
                         seconds=int(w.group(4)) / 1000, count=int(w.group(1)))
                else:
                    emit("nccl_info", base, {"message": m.group(2)[:500]})
                return True
            m = _C10D_GLOO.match(s) if "ProcessGroupGloo" in s else None
            gloo = gloo_transport(m.group(2)) if m else None
            if gloo is not None:  # Gloo's other lines (its monitoredBarrier) stay the failure scan's
                emit("dist_transport", base, {**gloo, "message": m.group(2)[:500]})  # type: ignore[union-attr]
                return True
            if self._uvicorn(s, base):
                return True
        # failures (also searched inside tracebacks)
        m = _TOO_SMALL_V0.search(s)
        if m:
            emit("kv_cache_too_small", base, {"max_model_len": int(m.group(1)), "kv_cache_tokens": int(m.group(2))},
                 tokens=int(m.group(1)))
            return True
        m = _TOO_SMALL_V1.search(s)
        if m:
            est = _ESTIMATED_LEN.search(s)
            need, avail = _gib(m.group(2)), _gib(m.group(3))
            emit("kv_cache_too_small", base, {"max_model_len": int(m.group(1)), "needed_kv_bytes": need,
                                              "available_kv_bytes": avail,
                                              "estimated_max_model_len": int(est.group(1)) if est else None},
                 tokens=int(m.group(1)), bytes=need, avail_bytes=avail)
            return True
        m = _TOO_SMALL_V1_HEAD.search(s)
        if m:  # the figures are lost: the length and, when it survived, vLLM's estimate
            est = _ESTIMATED_LEN.search(s)
            emit("kv_cache_too_small", base, {"max_model_len": int(m.group(1)), "figures_lost": True,
                                              "estimated_max_model_len": int(est.group(1)) if est else None},
                 tokens=int(m.group(1)))
            return True
        if "Error in memory profiling" in s:
            emit("memory_profiling_error", base, {"message": s[:500], **_profiling_figures(s)})
            return True
        if _NO_CACHE.search(s):
            emit("kv_no_room", base, {"reason": "no_available_memory"})
            return True
        m = _SAMPLER_OOM.search(s)
        if m:
            emit("cuda_oom", base, {"during": f"{m.group(1)}_warmup", "dummy_requests": int(m.group(2))},
                 count=int(m.group(2)))
            return True
        if _OOM.search(s):
            self.emit_oom(base, s, _phase_of_text(s) or self.phase.get(stream))
            return True
        if _ECC.search(s):
            emit("cuda_error", base, {"error": "uncorrectable_ecc", "message": s[:500]})
            return True
        if _CUDA_ERR_OOM.search(s):
            emit("cuda_error_oom", base, {"during": self.phase.get(stream)})
            return True
        m = _NCCL_ERR.search(s)
        if m:
            emit("nccl_error", base, {"message": m.group(1).strip()})
            return True
        if only_failures:
            m = _PG_TIMEOUT.search(s) if "placement group" in s else None
            if m:  # the timeout raised as the traceback's exception (V1's engine core logs it at its end)
                self._placement_group(m, base)
                return True
            if ("on startup is less than " in s or "on startup isless than " in s) and self._profile(s, base):
                return True  # §3.3 (both wordings), raised inside the worker's traceback
            m = _SWAP_TOO_LARGE.search(s)
            if m:
                emit("swap_space_too_large", base, {"swap_total_bytes": _gib(m.group(2)),
                                                    "host_total_bytes": _gib(m.group(3)), "warning_only": False},
                     bytes=_gib(m.group(2)), total_bytes=_gib(m.group(3)))
                return True
            m = _DEAD.search(s)
            if m and "EngineDeadError" in s:
                emit("engine_dead", base, {"reason": m.group(1)})
                return True
            return False
        m = _WORKER_DIED.search(s)
        if m:
            name = m.group(1) or m.group(3) or m.group(7) or m.group(8) or ("MQLLMEngine" if m.group(9) else None)
            code = m.group(2) or m.group(5)
            cols: dict[str, Any] = {}
            rk = re.search(r"(\d+)$", name or "") if name and name.startswith(("VllmWorker", "Worker")) else None
            if m.group(6):
                cols["tp_rank"] = int(m.group(6))
            elif rk:
                cols["tp_rank"] = int(rk.group(1))
            emit("rank_dead", {**base, **cols}, {"process_name": name, "exit_code": _int(code),
                                                 "worker_pid": _int(m.group(4) or m.group(9))}, code=_int(code))
            return True
        if ray_oom_killed(s):  # Ray's memory monitor saying it killed a worker: an observation (§5.4)
            found = classify_failure(s)
            figs = found[1] if found is not None else {}
            emit("rank_dead", base, {"cause": "ray_oom_killer", "message": s[:500],
                                     "host_used_bytes": figs.get("used_bytes"), "host_total_bytes": figs.get("total_bytes"),
                                     "worker_pid": figs.get("pid")})
            return True
        if _RAY_WORKER_EXITED.search(s):
            emit("rank_dead", base, {"cause": "ray_worker_exited", "message": s[:500]})
            return True
        if _CORE_EXITING.search(s):
            # the engine core's SIGTERM/SIGINT handler raised SystemExit (see _CORE_EXITING): a signal, not an error
            emit("sigterm", base, {"phase": "engine_core_exiting", "signal": "SIGTERM or SIGINT", "message": s[:500]})
            return True
        m = _INIT_FAILED.search(s)
        if m:
            fp = _FAILED_PROCS.search(s)
            procs = parse_dict(fp.group(1))[0] if fp else None
            codes = [v for v in (procs or {}).values() if isinstance(v, int)]
            emit("init_failed", base, {"reason": m.group(1), "failed_procs": procs or None},
                 code=codes[0] if codes else None)
            return True
        m = _DEAD.search(s)
        if m:
            emit("engine_dead", base, {"reason": m.group(1)})
            return True
        m = _RPC_TIMEOUT.search(s)
        if m:
            emit("rpc_timeout", base, {"method": m.group(1)})
            return True
        if _SWAP_ABORT.search(s):
            emit("swap_exhausted", base, {})
            return True
        m = _SUPERVISED_DIED.search(s)
        if m:
            code = _int(m.group(3))
            emit("rank_dead", base, {"process_name": m.group(1), "exit_code": code, "worker_pid": _int(m.group(2))},
                 code=code)
            return True
        for needle, mid in _NOTICES:
            if needle in s:
                extra: dict[str, Any] = {}
                cm = _CHUNKED.search(s) if mid == "chunked_prefill" else None
                if cm:
                    extra["max_num_batched_tokens"] = int(cm.group(1))
                emit("notice", base, {"message_id": mid, "message": s[:300], **extra})
                return True
        return False

    def _uvicorn(self, s: str, base: dict[str, Any]) -> bool:
        um = _UVICORN.match(s)
        if not um:
            return False
        am = _ACCESS.match(um.group(2))
        if am:
            self.emit("http_access", base, {"method": am.group("method"), "path": am.group("path"),
                                            "client": am.group("client")}, code=int(am.group("status")))
        elif um.group(2).startswith("Application startup complete"):
            self.emit("server_ready", base, {"message": um.group(2)})
        else:
            self.emit("uvicorn", base, {"message": um.group(2)[:500]})
        return True

    def _profile(self, s: str, base: dict[str, Any]) -> bool:
        m = _PROFILE_064.search(s)
        if m:  # 0.6.4: one line of key=valueGiB
            vals = {k: (_gib(v) if unit else _num(v)) for k, v, unit in _PROFILE_KV.findall(m.group(1))}
            util = vals.get("gpu_memory_utilization")
            total = vals.get("total_gpu_memory")
            attrs = {"total_gpu_bytes": total, "gpu_memory_utilization": util,
                     "initial_memory_usage_bytes": vals.get("initial_memory_usage"),
                     "peak_torch_bytes": vals.get("peak_torch_memory"),
                     "memory_usage_post_profile_bytes": vals.get("memory_usage_post_profile"),
                     "non_torch_bytes": vals.get("non_torch_memory"), "kv_cache_bytes": vals.get("kv_cache_size"),
                     "budget_bytes": int(total * util) if total is not None and util is not None else None}
            self.emit("memory_profile", base, attrs, total_bytes=total, ratio=util, bytes=attrs["kv_cache_bytes"])
            return True
        m = _PROFILE_BUDGET.search(s)
        if m:
            total, util, budget = _gib(m.group(1)), _num(m.group(2)), _gib(m.group(3))
            self.emit("memory_profile", base, {"total_gpu_bytes": total, "gpu_memory_utilization": util,
                                               "budget_bytes": budget}, total_bytes=total, ratio=util)
            return True
        m = _PROFILE_SPLIT.search(s)
        if m:
            w, nt, act, kv = (_gib(m.group(i)) for i in range(1, 5))
            self.emit("memory_profile", base, {"weights_bytes": w, "non_torch_bytes": nt, "activation_peak_bytes": act,
                                               "kv_cache_bytes": kv}, bytes=kv)
            return True
        m = _FREE_LOW.search(s)
        if m:  # group 1 is the device (0.14+: cuda:N)
            free, total = _gib(m.group(2)), _gib(m.group(3))
            self.emit("gpu_memory_short", base, {"free_gpu_bytes": free, "total_gpu_bytes": total,
                                                 "gpu_memory_utilization": _num(m.group(4)),
                                                 "requested_bytes": _gib(m.group(5)), "device": m.group("device")},
                      free_bytes=free, total_bytes=total, ratio=_num(m.group(4)), bytes=_gib(m.group(5)))
            return True
        m = _FREE_HINT.search(s)
        if m:
            attrs: dict[str, Any] = {"free_gpu_bytes": _gib(m.group(1)), "total_gpu_bytes": _gib(m.group(2))}
            names = {"weight": "weights_bytes", "peak activation": "activation_peak_bytes",
                     "non-torch memory": "non_torch_bytes", "CUDAGraph memory": "graph_bytes",
                     "consumed memory": "consumed_bytes"}
            for h in _HINT_PARTS.finditer(m.group(3)):
                if h.group(1) is not None:
                    attrs["gpu_memory_utilization"], attrs["budget_bytes"] = _num(h.group(1)), _gib(h.group(2))
                elif h.group(3) is not None:
                    attrs[names[h.group(4)]] = _gib(h.group(3))
                elif h.group(5) is not None:
                    attrs["kv_cache_bytes"] = _gib(h.group(5)) if h.group(6) == "GiB" else _int(h.group(5))
                elif h.group(7) is not None:
                    key = "kv_cache_memory_to_fit_bytes" if h.group(8) == "fit" else "kv_cache_memory_to_fill_bytes"
                    attrs[key] = _int(h.group(7))
            self.emit("memory_profile", base, attrs, total_bytes=attrs["total_gpu_bytes"],
                      free_bytes=attrs["free_gpu_bytes"], ratio=attrs.get("gpu_memory_utilization"),
                      bytes=attrs.get("kv_cache_bytes"))
            return True
        m = _PROFILE_TAKES.match(s)
        if m:
            attrs = {"profile_s": _num(m.group(1))}
            names = {"Total non KV cache memory": "non_kv_bytes", "torch peak memory increase": "activation_peak_bytes",
                     "non-torch forward increase memory": "non_torch_bytes", "weights memory": "weights_bytes",
                     "total consumed (from mem_get_info)": "consumed_bytes"}
            for k, v in _PROFILE_V1.findall(m.group(2)):
                attrs[names[k]] = _gib(v)
            self.emit("memory_profile", base, attrs, seconds=attrs["profile_s"])
            return True
        return False

    def _metrics(self, s: str, base: dict[str, Any]) -> bool:
        attrs: dict[str, Any] = {}
        em = _ENGINE_IDX.search(s)
        if em:
            attrs["engine"] = int(em.group(1)) if em.group(1) else None
            attrs["engines_aggregated"] = int(em.group(2)) if em.group(2) else None
        names = {"Avg prompt throughput": "prompt_throughput_tps", "Avg generation throughput": "generation_throughput_tps",
                 "Running": "running_reqs", "Swapped": "swapped_reqs", "Pending": "waiting_reqs",
                 "Waiting": "waiting_reqs", "Deferred": "deferred_reqs", "Preemptions": "preemptions",
                 "Prefix cache hit rate": "prefix_cache_hit_ratio", "CPU KV cache usage": "cpu_kv_cache_usage_ratio",
                 "External prefix cache hit rate": "external_prefix_cache_hit_ratio",
                 "MM cache hit rate": "mm_cache_hit_ratio", "Corrupted": "corrupted_reqs"}
        for k, v in _METRICS_FIELD.findall(s):
            n = _num(v)
            if n is None:
                continue
            if k.endswith("KV cache usage") and not k.startswith("CPU"):
                attrs["gpu_kv_cache_usage_ratio"] = round(n / 100, 6)
            elif k in names:
                key = names[k]
                attrs[key] = round(n / 100, 6) if key.endswith("_ratio") else (int(n) if key.endswith(("_reqs", "ions"))
                                                                                else n)
        self.emit("engine_metrics", base, attrs, count=attrs.get("running_reqs"),
                  ratio=attrs.get("gpu_kv_cache_usage_ratio"), tokens=None)
        return True


# --------------------------------------------------------------------------------------------
# sniffing and the entry point

# vllm_formats.md §1.1, §1.3
_SNIFF_HEADER = re.compile(
    r"^(?:[\w.-]{1,80}\s{1,20}\| )?(?:\([\w =-]{0,80}pid=\d+(?:, ip=[^)]{0,60})?\) ?)*"
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) +(?:\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? +)?\[?[\w./-]+\.py:\d+\] ",
    re.M,
)
_SNIFF_PREFIX = re.compile(
    r"^\((?:VllmWorkerProcess|VllmWorker|EngineCore|APIServer|ApiServer_\d+|Worker|RayWorkerVllm|RayWorkerWrapper"
    r"|RayWorkerProc|DPCoordinator)[\w =]*pid=\d+", re.M)
_SNIFF_STRONG = (
    "LLM engine (v", "Initializing an LLM engine with config", "vLLM API server version", "non-default args: {",
    "Loading model weights took", "Model loading took", "# GPU blocks:", "# cuda blocks:", "# CUDA blocks:",
    "GPU KV cache size:", "Maximum concurrency for", "Available KV cache memory:", "Memory profiling results: total_gpu_memory",
    "the current vLLM instance can use", "is larger than the maximum number of tokens that can be stored in KV cache",
    "KV cache is needed, which is larger than the available KV cache memory", "preempted by PreemptionMode",
    "No available memory for the cache blocks", "Cannot auto-fit max_model_len", "Avg prompt throughput:", "EngineCore failed to start",
    "EngineCore encountered a fatal error", "vLLM is using nccl==", "Graph capturing finished in",
    "init engine (profile, create kv cache", "(RayWorkerVllm pid=", "killed by SIGKILL by OOM killer",
    "Task was killed due to the node running low on memory",
    # vLLM-only wording of failures (failure_messages.md §7, vllm_formats.md §3.3), pasted without the prefix
    "CUDA out of memory occurred when warming up", "on startup is less than desired GPU memory utilization",
    # CacheConfig.verify_with_parallel_config's refusal and warning (vllm_formats.md §3.7, vllm/config.py 0.2–0.17)
    "Too large swap space. ", "Possibly too large swap space. ",
    "Sleep mode freed ",  # Worker.sleep's account (vllm/v1/worker/gpu_worker.py 0.7.3+), pasted on its own
    "on startup is less than the engine's budget after excluding",  # 0.32+ (vllm_formats.md §3.3)
    "GiB) on startup is less than",  # §3.3 either wording, when a paste wrapped the rest onto the next line
    # the start-up check's head alone, when a paste wrapped the line after it (vllm_formats.md §3.3; 0.14+ names cuda:N)
    "Free memory on device (", "Free memory on device cuda:",
    # the V1 KV refusal's head alone (vllm_formats.md §3.1, "model's"/"models's"), its figures wrapped or cut away
    "To serve at least one request with the model",
)  # log messages only: process titles (VLLM::…) and module paths also appear in ps output and launch scripts


def sniff(head: str) -> float:
    """Confidence that ``head`` is a vLLM log.

    >>> sniff("MemTotal:       16318480 kB")
    0.0
    >>> sniff("# GPU blocks: 1478, # CPU blocks: 2048") >= 0.7
    True
    >>> sniff("[2025-11-20 09:14:16 TP0] Load weight begin. avail mem=93.79 GB")
    0.0
    """
    head = head[:65536]
    headers = len(_SNIFF_HEADER.findall(head[:32768]))
    prefixed = bool(_SNIFF_PREFIX.search(head))
    strong = any(s in head for s in _SNIFF_STRONG)
    if headers and (strong or prefixed or headers >= 3):
        return 0.95
    if prefixed and strong:
        return 0.95
    if strong:
        return 0.8
    if "CUDA error: uncorrectable ECC error encountered" in head:
        return 0.55  # the message vLLM surfaces; any parser with a real claim on the text wins
    if headers or prefixed:
        return 0.6
    return 0.0


#: Messages whose figures a paste may hard-wrap onto the next line (a ticket, a terminal at 80/120 columns, a
#: ``kubectl logs`` viewer): the sampler warm-up OOM (§3.5), the start-up free-memory check (§3.3) and the two
#: KV-capacity refusals (§3.1). The head alone names the message; the joined text must then match in full.
_WRAPPABLE = (_SAMPLER_OOM, _FREE_LOW, _TOO_SMALL_V0, _TOO_SMALL_V1)
# vllm_formats.md §3.1, §3.3, §3.5: the opening words of those messages
_WRAP_HEADS = re.compile(r"CUDA out of memory occurred when warming up|Free memory on device|max seq len \(\d+\)")
#: a continuation is bare text: no record header, no process prefix (vllm_formats.md §1.1, §1.3), starting in
#: the middle of a sentence
_CONTINUATION = re.compile(r"^\s*(?:[a-z][\w`]|\(\d)"  # not "(EngineCore_DP0 pid=…)": a record of its own
                           # §3.1: a figure whose "(" the cut lost ("22.5 GiB KV cache is needed, …"), the estimate
                           r"|^\s*\d+(?:\.\d+)? ?Gi?B\b|^\s*Based on the available memory\b")
MAX_WRAPPED_LINES = 2


def _unwrap(raw: str, lines: list[str], lineno: int) -> tuple[str, int]:
    """``raw`` with the lines a paste wrapped it onto, when it opens a known figure message that it does not
    complete alone; the number of following lines joined (0 when none)."""
    if len(raw) > 4000 or not _WRAP_HEADS.search(raw):
        return raw, 0
    if any(rx.search(raw) for rx in _WRAPPABLE):
        return _estimate_tail(raw, 0, lines, lineno)
    joined = raw.rstrip()
    for used in range(1, MAX_WRAPPED_LINES + 1):
        nxt = lines[lineno - 1 + used] if lineno - 1 + used < len(lines) else None
        if nxt is None or not _CONTINUATION.match(nxt):
            break
        joined = f"{joined} {nxt.strip()}"
        if any(rx.search(joined) for rx in _WRAPPABLE):
            return _estimate_tail(joined, used, lines, lineno)
    return _estimate_tail(raw, 0, lines, lineno)


def _estimate_tail(text: str, used: int, lines: list[str], lineno: int) -> tuple[str, int]:
    """``text`` with the estimate sentence of the V1 refusal (§3.1) when a wrap left it on the next line."""
    at = lineno + used  # 0-based index of the line after those joined
    if used < MAX_WRAPPED_LINES and at < len(lines) and _TOO_SMALL_V1_HEAD.search(text) \
            and not _ESTIMATED_LEN.search(text) and _ESTIMATE_TAIL.match(lines[at]):
        return f"{text.rstrip()} {lines[at].strip()}", used + 1
    return text, used


class Stream:
    """Parse one vLLM log chunk by chunk (each chunk ends at a line end, but the last): :meth:`feed` returns the
    rows now final, :meth:`finish` the last ones and the account. The same reading as :func:`parse`, which is
    one chunk: the parser's state goes on from chunk to chunk; the last MAX_WRAPPED_LINES lines of a chunk wait
    for the next (a message a paste wrapped onto them is joined when read), and rows a later line may still
    change (the held line's, which a continuation replaces; an open traceback's, which its end amends) wait
    until it cannot."""

    def __init__(self, path: str = "") -> None:
        self.p = _Parser(path)
        self.path = path
        self.tail: list[str] = []  # lines fed but not yet read
        self.start = 1  # the line number of tail[0]
        self.skip = 0
        self.lines = 0
        self.any_rows = False
        self.first: list[dict[str, Any]] = []  # the first 50 rows (the notes look at their stamps)

    def feed(self, text: str) -> pl.DataFrame:
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        self.lines += len(lines)
        self._read(self.tail + lines if self.tail else lines, MAX_WRAPPED_LINES)
        return self._flush(final=False)

    def _read(self, buf: list[str], keep: int) -> None:
        p, start = self.p, self.start
        upto = max(len(buf) - keep, 0)
        for j in range(upto):
            if self.skip:
                self.skip -= 1
                p.recognized += 1  # the tail of the message joined onto the line before
                continue
            joined, used = _unwrap(buf[j], buf, j + 1)
            p.line(start + j, joined)
            self.skip = used
        self.tail = buf[upto:]
        self.start = start + upto

    def _flush(self, final: bool) -> pl.DataFrame:
        p = self.p
        rows = p.rows
        k = len(rows)
        if not final:
            if p.held is not None:
                k = min(k, p.held[4])
            if p.tb is not None:
                first = p.tb["base"]["line"]
                while k and rows[k - 1]["line"] >= first:
                    k -= 1
        if not k:
            return empty_frame()
        out = rows[:k]
        del rows[:k]
        if p.held is not None:  # the held line's rows are counted from the rows still held
            p.held = (*p.held[:4], p.held[4] - k, p.held[5])
        self.any_rows = True
        if len(self.first) < 50:
            self.first.extend(out[: 50 - len(self.first)])
        return rows_to_frame(out, source=FORMAT, path=self.path)

    def finish(self) -> tuple[pl.DataFrame, ParseResult]:
        p = self.p
        self._read(self.tail, 0)
        p.close_tb()
        last = self._flush(final=True)
        path = self.path
        notes = []
        if self.any_rows and not p.headered:
            notes.append(f"{path or 'vllm log'}: no vLLM record headers (an excerpt); times and levels unknown")
        if any(r["attrs"].get("stamp") for r in self.first):
            notes.append(f"{path or 'vllm log'}: vLLM stamps carry no year; wall-clock times are kept in attrs.stamp")
        res = ParseResult.from_rows([], source=FORMAT, path=path, lines=self.lines, recognized=p.recognized,
                                    unrecognized=p.unrecognized, unrecognized_examples=p.examples, notes=notes)
        return last, res


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    """Parse one vLLM log text into events (see the module docstring): :class:`Stream` fed the whole text.

    >>> r = parse("INFO 01-02 03:04:05 llm_engine.py:1] Initializing an LLM engine (v0.4.3) with config: max_seq_len=4096\\n"
    ...           "INFO 01-02 03:04:09 worker.py:1] Loading model weights took 3.5 GB\\n"
    ...           "INFO 01-02 03:09:05 llm_engine.py:1] Initializing an LLM engine (v0.4.3) with config: max_seq_len=2048\\n")
    >>> r.events.select("kind", "run", "tokens").rows()
    [('engine_config', 0, 4096), ('version', 0, None), ('weight_load_end', 0, None), ('engine_config', 1, 2048), ('version', 1, None)]
    """
    if not isinstance(text, str):
        raise NotThisFormat("vllm: not text")
    st = Stream(path)
    frames = [st.feed(text)]
    last, res = st.finish()
    frames = [f for f in (*frames, last) if f.height]
    res.events = pl.concat(frames, how="vertical") if len(frames) > 1 else (frames[0] if frames else empty_frame())
    return res

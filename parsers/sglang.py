"""SGLang server / scheduler logs (``python -m sglang.launch_server`` stdout+stderr, per-rank logs).

Every SGLang record is ``[<asctime>{.msecs}{ rank labels}] <message>``; there is no level name, so
records are classified by their text (format strings in ``reference/sglang_formats.md``)::

    [2025-11-20 09:14:02] server_args=ServerArgs(model_path='/models/k2', tp_size=8, ...)
    [2025-11-20 09:18:02 TP3] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=21.07 GB, mem usage=72.72 GB.
    [2025-11-20 11:02:41 DP0 TP0 EP0] Decode batch, #running-req: 41, #token: 199472, token usage: 0.90, cuda graph: True, gen throughput (token/s): 913.27, #queue-req: 17,
    [2025-11-20 11:02:48 TP3] Scheduler hit an exception: Traceback (most recent call last):
      File ".../scheduler.py", line 2677, in run_scheduler_process
    torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.41 GiB. GPU 3 has a total capacity of ...

Also read: tp=1 logs without a rank label, v0.2 ``[gpu_id=0]`` and multimodal_gen ``[MM-DD HH:MM:SS]``
prefixes (year unknown: ``ts_local`` stays null, the stamp goes to ``attrs.stamp``), docker-compose
(``sglang-1  | ``) and Ray (``(SchedulerActor pid=1, ip=...)``) line prefixes, tqdm bars glued to
records, NCCL INFO / c10d / Gloo lines interleaved on stderr, and excerpts whose prefixes were
stripped. Multi-line records (tracebacks, the KV-exhaustion message, wrapped ``server_args``) are
one row whose ``text`` joins their lines; a CUDA OOM or a KV exhaustion inside a traceback gets an
extra row at its own line. Sizes: GPU "GB" is GiB, HiCache "GB" is 10^9 bytes, PyTorch sizes
are binary. ``ts_local`` is the printed wall clock, never converted.

>>> r = parse("[2025-11-20 09:19:43 TP5] Allocating 48.00 GB host memory for hierarchical KV cache.\\n"
...           "[2025-11-20 11:02:41 TP0] Decode batch, #running-req: 41, #token: 199472, token usage: 0.90, \\n")
>>> r.events.select("kind", "rank", "tp_rank", "bytes", "tokens", "ratio", "count").rows()
[('hicache_alloc', 'TP5', 5, 48000000000, None, None, None), ('decode_batch', 'TP0', 0, None, 199472, 0.9, 41)]
>>> (r.lines, r.recognized, r.unrecognized)
(2, 2, 0)
>>> sniff("[2025-11-20 09:14:16 TP0] Load weight begin. avail mem=93.79 GB") > 0.9
True
"""

from __future__ import annotations

import ast
import gc
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from parsers.failures import classify as classify_failure
from parsers.failures import (
    gloo_transport,
    nccl_interface,
    nccl_socket_interfaces,
    oom_figures,
    register_refusal,
)
from parsers.schema import MAX_UNRECOGNIZED_EXAMPLES, NotThisFormat, ParseResult
from parsers.units import gb_decimal, gib, parse_size

FORMAT = "sglang"

# --------------------------------------------------------------------------------------------
# Line prefixes

#: The SGLang prefix: full stamp (+ms), multimodal_gen MM-DD stamp, time-only stamp (excerpts),
#: v0.2 ``[gpu_id=0]``, or a bare rank label (``[TP0]``, excerpts with stripped time).
#: sglang_formats.md §1 (line prefix: stamp and rank labels; compose and container prefixes)
_PREFIX = re.compile(
    r"\[(?:(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,6})?)"
    r"|(?P<mdstamp>\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})?)"
    r"|(?P<tstamp>\d\d:\d\d:\d\d(?:\.\d{1,6})?)"
    r"|gpu_id=(?P<gpu>\d{1,4}))"
    r"(?P<labels>(?: [A-Za-z][\w.]*){0,8})\](?: |$)"
    r"|\[(?P<onlylabels>(?:DP|PP|TP|EP|ATTN_CP|MOE_DP)\d{1,6}(?: [A-Za-z][\w.]*\d*){0,7})\](?: |$)"
)
#: A full stamp inside a physical line: a record glued after tqdm output.
_EMBEDDED_STAMP = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,6})?(?: [A-Za-z][\w.]*){0,8}\] ")
_CONTAINER = re.compile(
    r"(?P<svc>[A-Za-z0-9][\w.-]{0,80})\s+\| "
    r"|\((?:(?P<actor>[\w.]{1,80}) )?pid=(?P<pid>\d{1,10})(?:, ip=(?P<ip>[^)\s]{1,60}))?\) "
)
_LABEL = re.compile(r"([A-Za-z_][A-Za-z_.]*?)(\d+)$")
_LABEL_COLUMNS = {"TP": "tp_rank", "DP": "dp_rank", "PP": "pp_rank", "EP": "ep_rank"}

# --------------------------------------------------------------------------------------------
# Field regexes (searched independently, so a cut line still yields what it holds)

_N = r"(-?\d+(?:\.\d+)?)"
# sglang_formats.md §3 (memory lifecycle: weights, KV pool, CUDA-graph capture, avail mem)
_AVAIL_MEM = re.compile(r"avail mem=" + _N + r" ?GB")
_MEM_USAGE = re.compile(r"mem usage=" + _N + r" ?GB")
_ELAPSED = re.compile(r"(?:Time elapsed: |elapsed=)" + _N + r" ?s")
_TYPE = re.compile(r"\btype=([\w.]+)")
_DTYPE = re.compile(r"\bdtype[=:] ?([\w.]+)")
_QUANT = re.compile(r"\bquant=(.*?)(?:, avail mem=|$)")
# sglang_formats.md §3 (``min_per_gpu_memory=``, ``local_gpu_memory=`` of the imbalance check; the KV pool's
# ``#tokens``)
_MIN_PER_GPU = re.compile(r"min_per_gpu_memory=" + _N)
_LOCAL_GPU = re.compile(r"local_gpu_memory=" + _N)
_TOKENS_HASH = re.compile(r"#tokens: (\d+)")
# sglang_formats.md §3 (KV pool allocation and capture lines)
_K_SIZE = re.compile(r"(?<![\w])K size: " + _N + r" ?GB")
_V_SIZE = re.compile(r"(?<![\w])V size: " + _N + r" ?GB")
_KV_SIZE = re.compile(r"\bKV size: " + _N + r" ?GB")
_KV_CACHE_NAME = re.compile(r"^(.*?KV Cache) (?:is allocated|VA upper bound)")
#: Names and numbers are read from their first character (``(?<!\w)``, ``(?<!\d)``): from a later one
#: the run is rescanned, the square of a hostile line (issue 25; tests/test_regex_rewrites.py)
_POST_CAPTURE_TOKENS = re.compile(r"(?<!\w)(\w+_layer_tokens)=(\d+)")
_CAPTURE = re.compile(
    r"^Capture (?P<what>.*?) ?(?P<backend>cuda graph|CUDA graph|cpu graph|CPU graph|npu graph|NPU graph"
    r"|graph) (?P<ev>begin|end)\b"
)
# sglang_formats.md §3 (capture begin/end: ``bs=[…]``, ``avail_mem=``, ``num_tokens_per_bs=``, post-capture
# ``key=value`` figures)
_CAPTURE_KV = re.compile(r"\b(backend|num_tokens_per_bs|num_tokens_per_req|num_tokens)=([\w.]+)")
_BS_LIST = re.compile(r"\bbs=\[([^\]]*)(\]?)")
_INTS = re.compile(r"-?\d+")
_CAPTURING = re.compile(r"Capturing batches \((?:bs=(\d+) )?avail_mem=" + _N + r" ?GB\)")
_KV_EQ = re.compile(r"\b([a-z_]+)=" + _N + r"( ?GB)?")
# sglang_formats.md §4 (the HiCache host pool and its refusal)
_HICACHE_KV = re.compile(r"^Allocating " + _N + r" GB host memory for hierarchical KV cache")
_HICACHE_POOL = re.compile(
    r"^Allocating (\S+) hierarchical KV host pool: (\d+) tokens, " + _N + r" GB host memory"
)
_HICACHE_MAMBA = re.compile(r"^Allocating " + _N + r" GB host memory for hierarchical Mamba cache"
                            r"(?: \(layout=([\w-]+)\))?")
_LAYERS = re.compile(r"\b(target_layers|draft_layers|total_layers)=(\d+)")
_HOST_SHORT = re.compile(r"Requesting " + _N + r" GB but only have " + _N + r" GB")
_HOST_FOR = re.compile(r"Not enough host memory (?:available )?for ([\w ./-]+?)[.:]")
#: One ``key: value`` field of a batch line's body. A key starts only where the body does or after a
#: ``,``/``:`` and its runs are possessive: a long stretch with no ``:`` is scanned once, not once per
#: start position (a 1 MiB line of padding otherwise takes about an hour).
#: sglang_formats.md §6 (batch lines, retraction, KV-pool exhaustion)
_BATCH_FIELD = re.compile(r"(?<![^,:]) ?([^:,]++): ([^,]*+)")
_BATCH_HEAD = re.compile(r"(?:\(mixed (?P<mixed>[^)]*)\))?(?: \[(?P<iter>\d+)\])?[.,:]? ?")
_RETRACT_FIELDS = re.compile(r"#(retracted_reqs|aborted_retracted_reqs|new_tokens_gained): (\d+)")
_RATIO_ARROW = re.compile(r"#new_token_ratio: " + _N + r" -> " + _N)
_TRY_ALLOC = re.compile(r"Try to allocate (\d+) tokens")
_AVAILABLE_LINE = re.compile(r"Ava(?:il|li)able ((?:\w+ )?tokens|\w+): ?(\d+)(?: \(([^)]*)\))?")
# sglang_formats.md §6 (the KV-exhaustion message: ``available_size()=``, ``evictable_size()=``)
_INNER_KV = re.compile(r"(?<!\w)(\w+?)_?=(\d+)")
_CALL_EQ = re.compile(r"(available_size|evictable_size)\(\)=(\d+)")
# sglang_formats.md §7 (failure lines), §5 (the --mem-fraction-static errors)
_EXC_HEAD = re.compile(r"^(\w+) hit an exception")
_EXC_LINE = re.compile(
    r"^((?:[A-Za-z_][\w.]*\.)?(?:[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure)|Exception)"
    # a class of a module named errors/exceptions, whatever its name (triton.runtime.errors.OutOfResources)
    r"|(?:[A-Za-z_]\w*\.)*(?:errors|exceptions)\.[A-Z]\w*)(?:: ?(.*))?$"
)
_MEM_FRACTION = re.compile(r"mem_fraction_static=" + _N)
_NO_KV_ROOM = re.compile(r"--mem-fraction-static=" + _N)
_RAISE_ABOVE = re.compile(r"above " + _N)
_MIN_VIABLE = re.compile(r"minimum viable = [^=]*= " + _N)
# sglang_formats.md §7 (watchdog, rank death, exit codes, health check, shutdown, crash dump)
_TP_RANK = re.compile(r"TP rank (\d+)")
_WATCHDOG = re.compile(r"(?:(?<!\w)(\w+) )?[Ww]atchdog timeout \(self\.watchdog_timeout=" + _N
                       + r"(?:, self\.soft=(\w+))?")
_RANK_DEAD = re.compile(r"^Rank (\d+) scheduler (?:is dead|died during initialization)"
                        r"(?: \(exit code: (-?\d+)\))?")
_EXIT_CODE = re.compile(r"^Exit code: (-?\d+)")
_SUBPROCESS = re.compile(r"^Subprocess (\S+) \(pid=(\d+)\) crashed with exit code (-?\d+)")
_HEALTH = re.compile(r"for last " + _N + r" seconds")
# sglang_formats.md §7 (``Gracefully exiting... Remaining number of requests``, ``Dumped N finished and M unfinished
# requests before crash``)
_REMAINING = re.compile(r"[Rr]emaining number of requests:? (\d+)")
_DUMPED = re.compile(r"Dumped (\d+) finished and (\d+) unfinished requests before crash to (\S+)")
#: a multimodal request whose placeholder tokens in the text and the encoder's embedding rows disagree, logged on every
#: rank before the embedding is cut to fit or the scatter fails:
#: sglang python/sglang/srt/managers/mm_utils.py::_adjust_embedding_length (0.5.x; get_embedding_and_mask in 0.4.x,
#: whose text lacks the space after "text.")
_MM_MISMATCH = re.compile(r"^Number of tokens in multimodal embedding does not match those in the input text\.\s*"
                          r"Got (\d+) tokens in the text but (\d+)\s*tokens from multimodal embeddings")
# sglang_formats.md §3 (custom all-reduce, nccl version), §1 (uvicorn lines and levels)
_REGISTERING = re.compile(r"^Registering (\d+) cuda graph addresses")
#: the custom all-reduce turned off at the group's set-up, and why (vllm_formats.md §3.8; SGLang's copy, sglang
#: python/sglang/srt/distributed/device_communicators/custom_all_reduce.py and quick_all_reduce.py (0.4-0.5)):
#: ``… is disabled because this process group spans across nodes.`` says the server's ranks are on several nodes
_CUSTOM_AR_OFF = re.compile(r"^Custom ?(?:quick )?all-?reduce is disabled (?:because (?:(this process group spans "
                            r"across nodes)|(it's not supported on more than two PCIe-only GPUs)|(your platform lacks "
                            r"GPU P2P capability or P2P test failed))|due to an unsupported world size)", re.I)
_NCCL_VERSION = re.compile(r"^sglang is using nccl==(\S+)")
#: a rank joining (reader) or opening (writer) a process group's broadcast queue while the parallel groups are set up:
#: sglang python/sglang/srt/distributed/device_communicators/shm_broadcast.py (0.4-0.5) ``MessageQueue.__init__`` logs
#: ``Binding to tcp://127.0.0.1:PORT`` and ``create_from_handle`` ``Connecting to tcp://HOST:PORT`` (DEBUG level, a
#: copy of vLLM's), each followed by ``wait_until_ready``: a collective in which the writer waits for every reader's
#: subscription, a reader on another node connecting to the address the writer's node advertises
_BROADCAST_QUEUE = re.compile(r"^(Binding|Connecting) to tcp://(\[[0-9A-Fa-f:.]+\]|[^:\s]+):(\d+)\s*$")
_ACCESS = re.compile(
    r'^(?P<level>[A-Z]+):\s+(?P<client>\S+) - "(?P<method>[A-Z]+) (?P<path>\S*)(?: (?P<proto>[^"]*))?" (?P<status>\d{3})'
)
_LEVEL = re.compile(r"^(INFO|WARNING|ERROR|DEBUG|CRITICAL|TRACE):\s+")

# PyTorch CUDA-OOM message pieces (c10 CUDACachingAllocator; sizes via format_size, binary units)

# Foreign lines on the same stream
# failure_messages.md §4.1 (NCCL lines), §4.4 (the c10d watchdog)
_NCCL = re.compile(r"^(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL (?P<level>[A-Z]+) (?P<msg>.*)")
_C10D = re.compile(
    r"^(?:\[rank(?P<rank>\d+)\]:)?\[(?P<lvl>[EWIF])(?P<md>\d{3,4})? ?(?P<time>[\d:.]+)? ?(?:\d+ )?"
    r"(?P<src>[\w.]+):(?P<srcline>\d+)\] (?P<msg>.*)"
)
_C10D_SEQ = re.compile(r"SeqNum=(\d+)")
_C10D_OP = re.compile(r"OpType=(\w+)")
_C10D_TIMEOUT = re.compile(r"Timeout\(ms\)=(\d+)")
_C10D_RAN = re.compile(r"ran for (\d+) milliseconds")
# failure_messages.md §4.4 (``Rank N``, ``[PG ID n …]`` of the watchdog line)
_C10D_RANK = re.compile(r"\bRank (\d+)")
_C10D_PG = re.compile(r"\[PG (?:ID )?(\d+)")
#: tqdm's default bar with no description (``{percentage}%|{bar}| {n}/{total} [...``): SGLang's CUDA-graph capture
#: before 0.4.5 (``cuda_graph_runner.py``: ``tqdm.tqdm(self.capture_bs)`` on TP rank 0), and the EAGLE/draft runners'
#: captures after it, draw exactly this; the weights' bars are labelled (``Loading safetensors checkpoint shards``)
#: failure_messages.md §6.1; tqdm bars: sglang python/sglang/srt/model_executor/cuda_graph_runner.py (0.4.x); Python
#: warnings as cpython Lib/warnings.py (3.x) formats them
_POOL_BELOW_CONTEXT = re.compile(r"KV pool holds (\d+) tokens, fewer than --context-length (\d+)")
_BARE_BAR = re.compile(r"^\s*\d+%\|[^|]*\| ?\d+/\d+ \[")
_TQDM_STEPS = re.compile(r"\| ?(\d+)/(\d+) \[")
_TQDM = re.compile(r"(?<!\d)\d+%\||(?<!\d)\d+% Completed \||(?<!\d)\d+/\d+ \[[\d:?]+<")
_PY_WARNING = re.compile(r"^\S+\.py:\d+: \w*Warning: ")
#: the weight loader's bars (sglang python/sglang/srt/model_loader/weight_utils.py (0.4.x-0.5.x): the iterators'
#: ``tqdm(desc="Loading safetensors checkpoint shards", bar_format="{desc}: {percentage:3.0f}% Completed | {n_fmt}/
#: {total_fmt} [...")``, ``Loading pt checkpoint shards``, ``Multi-thread loading shards``); a line may hold several
#: carriage-return updates, the last one counts
_WEIGHT_BAR = re.compile(r"(Loading safetensors checkpoint shards|Loading pt checkpoint shards|Multi-thread loading "
                         r"shards): {0,4}\d{1,3}% Completed \| (\d{1,9})/(\d{1,9}) \[")

#: Kinds that may be found on a continuation line of a traceback and get their own row.
_EMBEDDABLE = frozenset({
    "cuda_oom", "cuda_error_oom", "cuda_graph_failed", "kv_exhausted", "not_enough_memory",
    "weights_no_kv_room", "ranks_not_loaded", "hicache_insufficient", "memory_leak", "memory_imbalance",
})
#: failure classes (parsers.failures) of a detail line inside an exception record that say its cause
_CAUSE_DETAILS = frozenset({"shm_exhausted"})
#: Kinds whose record goes on over the following unprefixed lines.
_MULTILINE = frozenset({
    "scheduler_exception", "cuda_graph_failed", "kv_exhausted", "cuda_error_oom", "init_failed", "log",
})
#: A rank's records that close its target model's memory set-up. SGLang builds the target's worker first (load_model →
#: init_memory_pool → capture) and the speculative draft's (EAGLE/MTP/standalone) after it in the same process, which
#: logs its own ``Load weight begin/end`` (sglang managers/scheduler.py 0.4+: ``self.tp_worker`` before
#: ``self.draft_worker``): a load line after one of these is the draft's.
_POOL_KINDS = ("kv_cache_allocated", "memory_pool_end", "cuda_graph_begin", "cuda_graph_end")
#: The phase a rank is in after each lifecycle record (the "during" of a later bare CUDA OOM).
_PHASE_OF_KIND = {
    "weight_load_begin": "weight_load", "weight_load_end": "init", "cuda_graph_begin": "graph_capture",
    "cuda_graph_end": "init", "kv_sizing": "init", "prefill_batch": "forward", "decode_batch": "forward",
}
_MAX_RECORD_LINES = 400  # text kept of one record; its line count stays exact

# Line statuses (classify_lines): a "record" line is SGLang's own (prefixed, a bare known SGLang
# message, or a continuation of a record).
BLANK, RECORD, RECORD_UNKNOWN, FOREIGN, UNKNOWN = "blank", "record", "record_unknown", "foreign", "unknown"
_RANK_OF_STATUS = {BLANK: 0, FOREIGN: 1, UNKNOWN: 2, RECORD: 3, RECORD_UNKNOWN: 4}

Event = tuple[str, dict[str, Any], dict[str, Any]]  # kind, columns, attrs


# --------------------------------------------------------------------------------------------
# Small value helpers


def _int(s: str | None) -> int | None:
    if s is None or len(s) > 18:
        return None
    try:
        return int(s)
    except ValueError:
        return None


def _float(s: str | None) -> float | None:
    if s is None or len(s) > 40:
        return None
    try:
        f = float(s)
    except ValueError:
        return None
    return f if math.isfinite(f) else None


def _gib(s: str | None) -> int | None:
    f = _float(s)
    return None if f is None or abs(f) > 1e9 else gib(f)


def _gb(s: str | None) -> int | None:
    f = _float(s)
    return None if f is None or abs(f) > 1e9 else gb_decimal(f)


def _size(s: str | None) -> int | None:
    """A PyTorch ``format_size`` text (``448.00 MiB``, ``12 bytes``) in bytes."""
    if not s:
        return None
    if s.endswith("bytes"):
        return _int(s.split()[0].split(".")[0])
    v = parse_size(s)
    return v if v is None or abs(v) < 1 << 62 else None


def _value(v: str) -> Any:
    """A batch-line value: bool, int, finite float, percent (→ 0..1), else the text."""
    if v.isdigit():  # the hot path: most fields are counts
        return int(v) if len(v) < 19 else v
    v = v.strip()
    if v == "True" or v == "False":
        return v == "True"
    if v.endswith("%"):
        f = _float(v[:-1])
        return v if f is None else round(f / 100, 6)
    f = _float(v)
    if f is None:
        return v
    return int(f) if f.is_integer() and "." not in v and "e" not in v.lower() else f


_KEY_CACHE: dict[str, str] = {}
KEY_RENAMES = {"gen throughput (token/s)": "gen_throughput", "input throughput (token/s)": "input_throughput"}


def _snake(key: str) -> str:
    """``#new-seq`` → ``new_seq``; ``est. decode TFLOPS/s (per GPU)`` → ``est_decode_tflops_per_gpu``."""
    out = _KEY_CACHE.get(key)
    if out is None:
        out = KEY_RENAMES.get(key)
        if out is None:
            k = key.lower().replace("tflops/s", "tflops").replace("/", "_per_")
            out = re.sub(r"[^a-z0-9]+", "_", k).strip("_") or "field"
        if len(_KEY_CACHE) < 4096:
            _KEY_CACHE[key] = out
    return out


def _jsonable(v: Any, depth: int = 0) -> Any:
    """Make a literal_eval result JSON-safe (tuple keys, sets, bytes, inf)."""
    if depth > 20:
        return repr(v)
    if v is None or isinstance(v, (bool, int, str)):
        return v if not isinstance(v, int) or abs(v) < 1 << 63 else str(v)
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, dict):
        return {str(k) if not isinstance(k, str) else k: _jsonable(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_jsonable(x, depth + 1) for x in v]
    return repr(v)


# --------------------------------------------------------------------------------------------
# server_args=


def _split_top_level(s: str, start: int) -> tuple[list[str], bool]:
    """Split ``s[start:]`` at top-level commas up to the closing bracket; (pieces, closed).

    A cut text leaves its last, incomplete piece out.
    """
    pieces: list[str] = []
    depth = 0
    quote = ""
    i, n, piece_start = start, len(s), start
    while i < n:
        c = s[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c == "'" or c == '"':
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                pieces.append(s[piece_start:i])
                return [p for p in pieces if p.strip()], True
            depth -= 1
        elif c == "," and depth == 0:
            pieces.append(s[piece_start:i])
            piece_start = i + 1
        i += 1
    return [p for p in pieces if p.strip()], False


def _literal(src: str) -> Any:
    src = src.strip()
    try:
        return _jsonable(ast.literal_eval(src))
    except Exception:  # enum reprs, torch dtypes, cut values: keep the source text
        return src


# sglang_formats.md §2 (the server_args dump)
_DICT_KEY = re.compile(r"\s*(['\"])(.*?)\1\s*:\s*(.*)", re.S)


def parse_server_args(dump: str) -> tuple[dict[str, Any], str, bool]:
    """The text after ``server_args=`` → (args, form, truncated).

    >>> parse_server_args("ServerArgs(model_path='m', cuda_graph_bs=[1, 2, 4], tp_size=8)")
    ({'model_path': 'm', 'cuda_graph_bs': [1, 2, 4], 'tp_size': 8}, 'ServerArgs', False)
    >>> parse_server_args("{'tp_size': 8, 'mem_fraction_static': 0.93, 'hicache_si")
    ({'tp_size': 8, 'mem_fraction_static': 0.93}, 'dict', True)
    """
    dump = dump.strip()
    if dump.startswith("{"):
        try:
            val = ast.literal_eval(dump)
            if isinstance(val, dict):
                return _jsonable(val), "dict", False
        except Exception:
            pass
        pieces, closed = _split_top_level(dump, 1)
        args: dict[str, Any] = {}
        for p in pieces:
            m = _DICT_KEY.match(p)
            if m:
                args[m.group(2)] = _literal(m.group(3))
        return args, "dict", not closed
    head = dump.find("(")
    form = dump[:head] if 0 < head <= 40 and dump[:head].isidentifier() else "ServerArgs"
    if head < 0 or head > 40:
        return {}, form, True
    try:
        tree = ast.parse(dump, mode="eval")
        call = tree.body
        if isinstance(call, ast.Call):
            out: dict[str, Any] = {}
            for kw in call.keywords:
                if kw.arg is None:
                    continue
                try:
                    out[kw.arg] = _jsonable(ast.literal_eval(kw.value))
                except Exception:
                    out[kw.arg] = ast.get_source_segment(dump, kw.value)
            return out, form, False
    except Exception:  # cut, wrapped, or not Python (enum reprs): salvage complete pairs
        pass
    pieces, closed = _split_top_level(dump, head + 1)
    args = {}
    for p in pieces:
        k, sep, v = p.partition("=")
        k = k.strip()
        if sep and k.isidentifier():
            args[k] = _literal(v)
    return args, form, not closed


def _balanced(s: str) -> bool:
    """Whether a server_args dump has its closing bracket (a wrapped line goes on otherwise)."""
    i = s.find("server_args=")
    body = s[i + 12:] if i >= 0 else s
    j = min((k for k in (body.find("("), body.find("{")) if k >= 0), default=-1)
    if j < 0:
        return True
    return _split_top_level(body, j + 1)[1]


# --------------------------------------------------------------------------------------------
# Message classification: message text → events


def _ev(kind: str, cols: dict[str, Any] | None = None, attrs: dict[str, Any] | None = None) -> list[Event]:
    return [(kind, cols or {}, attrs or {})]


def _batch(kind: str, rest: str) -> list[Event]:
    """Prefill/Decode batch: generic ``key: value`` fields in any order, any release."""
    attrs: dict[str, Any] = {}
    m = _BATCH_HEAD.match(rest)
    if m.group("iter"):
        attrs["iteration"] = _int(m.group("iter"))
    if m.group("mixed"):
        attrs["mixed"] = True
        k, _, v = m.group("mixed").partition(": ")
        attrs[_snake(k)] = _value(v)
    cache = _KEY_CACHE
    for k, v in _BATCH_FIELD.findall(rest[m.end():]):
        attrs[cache.get(k) or _snake(k)] = _value(v)
    tokens = attrs.get("new_token") if kind == "prefill_batch" else attrs.get("token")
    if tokens is None:
        tokens = attrs.get("full_token")
    ratio = attrs.get("token_usage", attrs.get("full_token_usage"))
    cols = {
        "tokens": tokens if isinstance(tokens, int) else None,
        "ratio": float(ratio) if isinstance(ratio, (int, float)) and not isinstance(ratio, bool) else None,
        "count": attrs.get("running_req") if isinstance(attrs.get("running_req"), int) else None,
    }
    return [(kind, cols, attrs)]


def _lifecycle(msg: str) -> list[Event] | None:
    if msg.startswith("Init torch distributed"):
        if "begin" in msg[:30]:
            return _ev("dist_init_begin")
        mu = _MEM_USAGE.search(msg)
        gb = mu.group(1) if mu else None
        return _ev("dist_init_end", {"bytes": _gib(gb)}, {"mem_usage_gib": _float(gb)})
    if msg.startswith("Init nccl begin"):
        return _ev("dist_init_begin", attrs={"form": "nccl"})
    if msg.startswith("Load weight begin"):
        am = _AVAIL_MEM.search(msg)
        return _ev("weight_load_begin", {"avail_bytes": _gib(am.group(1)) if am else None})
    if msg.startswith("Load weight end"):
        am, mu, el = _AVAIL_MEM.search(msg), _MEM_USAGE.search(msg), _ELAPSED.search(msg)
        ty, dt, qu = _TYPE.search(msg), _DTYPE.search(msg), _QUANT.search(msg)
        attrs = {
            "model_type": ty.group(1) if ty else None,
            "dtype": dt.group(1) if dt else None,
            "quant": qu.group(1) if qu else None,
        }
        cols = {
            "avail_bytes": _gib(am.group(1)) if am else None,
            "bytes": _gib(mu.group(1)) if mu else None,
            "seconds": _float(el.group(1)) if el else None,
        }
        return _ev("weight_load_end", cols, {k: v for k, v in attrs.items() if v is not None})
    if msg.startswith("Memory pool end"):
        am = _AVAIL_MEM.search(msg)
        return _ev("memory_pool_end", {"avail_bytes": _gib(am.group(1)) if am else None})
    return None


def _kv_cache(msg: str) -> list[Event]:
    tk, k, v, kv = _TOKENS_HASH.search(msg), _K_SIZE.search(msg), _V_SIZE.search(msg), _KV_SIZE.search(msg)
    dt, am = _DTYPE.search(msg), _AVAIL_MEM.search(msg)
    attrs: dict[str, Any] = {"layout": "MLA" if kv else "MHA"}
    cols: dict[str, Any] = {"tokens": _int(tk.group(1)) if tk else None}
    if kv:
        attrs["kv_size_bytes"] = cols["bytes"] = _gib(kv.group(1))
    if k:
        attrs["k_size_bytes"] = _gib(k.group(1))
    if v:
        attrs["v_size_bytes"] = _gib(v.group(1))
    if k and v and attrs["k_size_bytes"] is not None and attrs["v_size_bytes"] is not None:
        cols["bytes"] = attrs["k_size_bytes"] + attrs["v_size_bytes"]
    if dt:
        attrs["dtype"] = dt.group(1)
    if msg.startswith("Post-capture KV sizing"):
        attrs["post_capture"] = True
        attrs["cache_name"] = "KV Cache"
        if am:
            cols["avail_bytes"] = _gib(am.group(1))
    else:
        nm = _KV_CACHE_NAME.match(msg)
        attrs["cache_name"] = nm.group(1) if nm else "KV Cache"
        if "VA upper bound" in msg:
            attrs["va_upper_bound"] = True
    return _ev("kv_cache_allocated", cols, attrs)


def _bs_list(msg: str) -> tuple[list[int] | None, bool]:
    m = _BS_LIST.search(msg)
    if not m:
        return None, False
    return [int(x) for x in _INTS.findall(m.group(1)[:100_000]) if len(x) < 10], not m.group(2)


def _capture(msg: str) -> list[Event] | None:
    if msg.startswith("Capture cuda graph bs"):
        i = msg.find("[")
        body = msg[i + 1:] if i >= 0 else ""
        closed = "]" in body
        bs = [int(x) for x in _INTS.findall(body.split("]")[0][:100_000]) if len(x) < 10]
        return _ev("cuda_graph_bs", attrs={"bs": bs, "truncated": not closed} if not closed else {"bs": bs})
    if " failed" in msg[:60]:
        return _graph_failed(msg)
    m = _CAPTURE.match(msg)
    if not m:
        return None
    what = m.group("what").strip() or "decode"
    attrs: dict[str, Any] = {"capture_name": what, "graph_backend": m.group("backend")}
    am = _AVAIL_MEM.search(msg)
    cols: dict[str, Any] = {"avail_bytes": _gib(am.group(1)) if am else None}
    if m.group("ev") == "begin":
        for k, v in _CAPTURE_KV.findall(msg):
            attrs[k] = _int(v) if v.isdigit() else v
        bs, cut = _bs_list(msg)
        if bs is not None:
            attrs["bs"] = bs
            if cut:
                attrs["bs_truncated"] = True
        return _ev("cuda_graph_begin", cols, attrs)
    mu, el = _MEM_USAGE.search(msg), _ELAPSED.search(msg)
    cols["bytes"] = _gib(mu.group(1)) if mu else None
    cols["seconds"] = _float(el.group(1)) if el else None
    events = _ev("cuda_graph_end", cols, attrs)
    glued = msg.find(" max_total_num_tokens=")
    if glued > 0:  # an excerpt that joined the sizing line onto the capture-end line
        events += _sizing(msg[glued + 1:])
    return events


#: the piecewise (prefill/extend) CUDA graph's failure, logged before it re-raises (sglang
#: python/sglang/srt/compilation/piecewise_context_manager.py ``enable_piecewise_cuda_graph``, default-on era 0.5.10+;
#: 0.5.15+ the same line from the tc_piecewise context): its own hint names --disable-piecewise-cuda-graph
_PIECEWISE_FAILED = "Piecewise CUDA Graph failed with error:"
#: the first line of the hint block that follows that failure (sglang python/sglang/srt/compilation/
#: piecewise_context_manager.py ``PIECEWISE_CUDA_GRAPH_CAPTURE_FAILED_MSG``, 0.5.10+): the engine prints it only after
#: the piecewise graph failed, so a paste that cut the failure line still says which graph failed
_PIECEWISE_HINT = "Piecewise CUDA Graph is enabled by default as an experimental feature"


#: the CUDA or HIP runtime's own out-of-memory error, raised outside PyTorch's caching allocator: torch's
#: ``C10_CUDA_CHECK`` (``CUDA error: out of memory``, failure_messages.md §2; ``HIP error: …`` on ROCm, §3), the
#: driver API (``CUDA driver error: …``) and the engine's ctypes wrapper (sglang python/sglang/srt/distributed/
#: device_communicators/cuda_wrapper.py (0.4-0.5): ``CUDART error: …``)
_RUNTIME_OOM_SAID = re.compile(r"\b(?:CUDA|HIP|CUDART|CUDA driver) error: out of memory")


def _graph_failed(msg: str) -> list[Event]:
    i = msg.find("failed")
    events = _ev("cuda_graph_failed", attrs={"message": msg[i + 6:].lstrip(": ")[:2000]})
    if "CUDA out of memory" in msg or "HIP out of memory" in msg:
        oom = _cuda_oom(msg)
        oom[0][2]["during"] = "graph_capture"
        events += oom
    return events


def _sizing(msg: str) -> list[Event]:
    attrs: dict[str, Any] = {}
    for k, v, gb in _KV_EQ.findall(msg[:4000]):
        if gb:
            attrs[k + "_bytes"] = _gib(v)
        else:
            attrs[k] = _int(v) if _int(v) is not None else _float(v)
    avail = attrs.get("available_gpu_mem_bytes", attrs.get("available_cpu_mem_bytes"))
    return _ev("kv_sizing", {"tokens": attrs.get("max_total_num_tokens"), "avail_bytes": avail}, attrs)


def _hicache(msg: str) -> list[Event] | None:
    m = _HICACHE_KV.match(msg)
    if m:
        return _ev("hicache_alloc", {"bytes": _gb(m.group(1))}, {"pool": "kv", "kind": "kv", "host_gb": _float(m.group(1))})
    m = _HICACHE_POOL.match(msg)
    if m:
        attrs: dict[str, Any] = {"pool": m.group(1), "kind": "kv", "host_gb": _float(m.group(3))}
        attrs.update({k: int(v) for k, v in _LAYERS.findall(msg)})
        return _ev("hicache_alloc", {"bytes": _gb(m.group(3)), "tokens": _int(m.group(2))}, attrs)
    m = _HICACHE_MAMBA.match(msg)
    if m:
        attrs = {"pool": "mamba", "kind": "mamba", "host_gb": _float(m.group(1))}
        if m.group(2):
            attrs["layout"] = m.group(2)
        return _ev("hicache_alloc", {"bytes": _gb(m.group(1))}, attrs)
    return None


def _host_insufficient(msg: str) -> list[Event]:
    m, f = _HOST_SHORT.search(msg), _HOST_FOR.search(msg)
    attrs: dict[str, Any] = {}
    if m:
        attrs = {"requested_gb": _float(m.group(1)), "only_have_gb": _float(m.group(2))}
    if f:
        attrs["pool"] = f.group(1)
    cols = {"bytes": _gb(m.group(1)), "avail_bytes": _gb(m.group(2))} if m else {}
    return _ev("hicache_insufficient", cols, attrs)


def _retract(msg: str) -> list[Event]:
    attrs: dict[str, Any] = {k: int(v) for k, v in _RETRACT_FIELDS.findall(msg) if len(v) < 12}
    r = _RATIO_ARROW.search(msg)
    if r:
        attrs["new_token_ratio_from"], attrs["new_token_ratio_to"] = _float(r.group(1)), _float(r.group(2))
    attrs["form"] = ("decode_oom" if msg.startswith("Decode out of memory happened")
                     else "testing" if msg.startswith("Testing") else "pool_full")
    return _ev("retract", {"count": attrs.get("retracted_reqs")}, attrs)


def kv_exhausted_facts(text: str) -> dict[str, Any]:
    """Facts of a logical KV exhaustion message and its continuation lines.

    >>> kv_exhausted_facts("Prefill out of memory. Try to lower your batch size.\\nTry to allocate 2048 tokens.\\n"
    ...                    "Available full tokens: 704 (full_available_size=704 + full_evictable_size_=0)")
    {'phase': 'prefill', 'tried_tokens': 2048, 'available_full_tokens': 704, 'full_available_size': 704, 'full_evictable_size': 0, 'available_tokens': 704}
    """
    facts: dict[str, Any] = {}
    lo = text[:200].lower()
    facts["phase"] = "decode" if "decode out of memory" in lo or "decode batch" in lo else "prefill"
    t = _TRY_ALLOC.search(text)
    if t:
        facts["tried_tokens"] = _int(t.group(1))
    for name, val, inner in _AVAILABLE_LINE.findall(text[:20000]):
        pool = name.lower().removesuffix("tokens").strip()
        facts[f"available_{pool}_tokens" if pool else "available_tokens"] = _int(val)
        for k, v in _INNER_KV.findall(inner):
            k = k.rstrip("_")
            facts[k if not pool or k.startswith(pool) else f"{pool}_{k}"] = _int(v)
    for k, v in _CALL_EQ.findall(text[:20000]):
        facts[k] = _int(v)
    if "available_tokens" not in facts and "available_full_tokens" in facts:
        facts["available_tokens"] = facts["available_full_tokens"]
    return facts


def _cuda_oom(msg: str) -> list[Event]:
    """``torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...`` (any PyTorch era): the figures are
    read by the failure scanner's one reader of the allocator's message."""
    cols, attrs = oom_figures(msg)
    attrs.pop("device_api", None)
    attrs["message"] = msg[:2000]
    return _ev("cuda_oom", cols, attrs)


def _notice(message_id: str, **attrs: Any) -> list[Event]:
    return _ev("notice", attrs={"message_id": message_id, **attrs})


def _failure(msg: str) -> list[Event] | None:  # noqa: C901 - one flat dispatch table reads best
    """Failure and shutdown messages; checked with cheap ``in`` tests, most specific first."""
    if "CUDA out of memory" in msg or "HIP out of memory" in msg:  # ROCm's PyTorch says HIP (failure_messages.md §3)
        if "graph failed" in msg[:200]:
            return _graph_failed(msg)
        return _cuda_oom(msg)
    if "error: out of memory" in msg and _RUNTIME_OOM_SAID.search(msg):
        return _ev("cuda_error_oom", attrs={"message": msg[:2000]})
    if "cudaHostRegister failed" in msg or "cudaHostAlloc failed" in msg:
        # one reader decides what a registration failure is (its rc: out of memory or a refused range)
        found = classify_failure(msg)
        if found is not None:
            return _ev(found[0], found[1], found[2])
        return _ev("cuda_error_oom", attrs={"message": msg[:2000], "api": "cudaHostRegister"})
    m = _EXC_HEAD.match(msg)
    if m:
        return _ev("scheduler_exception", attrs={"component": m.group(1)})
    if msg.startswith("Traceback (most recent call last)"):
        return _ev("scheduler_exception", attrs={"component": "traceback"})
    if "out of memory. Try to lower your batch size" in msg:
        return _ev("kv_exhausted", attrs={"phase": "decode" if "Decode" in msg[:40] else "prefill"})
    if msg.startswith("Failed to retract any request"):
        return _ev("kv_exhausted", attrs={"phase": "decode", "reason": "failed_to_retract"})
    if msg.startswith("Out of memory even after retracting"):
        return _ev("kv_exhausted", attrs={"phase": "decode", "reason": "oom_after_retract"})
    if "Not enough host memory" in msg:
        return _host_insufficient(msg)
    # 0.1.x spelled it "Not enought memory." (sglang python/sglang/srt/managers/router/model_runner.py::init_memory_pool)
    if "Not enough memory. Please try to increase --mem-fraction-static" in msg \
            or "Not enought memory. Please try to increase --mem-fraction-static" in msg:
        mf = _MEM_FRACTION.search(msg)
        return _ev("not_enough_memory", {"ratio": _float(mf.group(1)) if mf else None})
    # the same pool, a few tokens above zero: the token pool must hold at least one request of ~6 tokens
    # (sglang python/sglang/srt/managers/tp_worker.py::TpModelWorker.__init__, 0.4.x-0.5.x)
    if msg.startswith("Memory pool size is too small") or "AssertionError: Memory pool size is too small" in msg:
        return _ev("not_enough_memory", {"ratio": None}, {"form": "pool_too_small"})
    if "Loaded weights leave no GPU memory for the KV cache" in msg:
        f, a, mv = _NO_KV_ROOM.search(msg), _RAISE_ABOVE.search(msg), _MIN_VIABLE.search(msg)
        attrs = {"raise_above": _float(a.group(1)) if a else None,
                 "minimum_fraction": _float(mv.group(1)) if mv else None}
        return _ev("weights_no_kv_room", {"ratio": _float(f.group(1)) if f else None}, attrs)
    if "could finish the model loading" in msg:
        t = _TP_RANK.search(msg)
        return _ev("ranks_not_loaded", attrs={"named_tp_rank": _int(t.group(1)) if t else None})
    if "memory leak detected" in msg:
        return _ev("memory_leak", attrs={"pool": msg.split(" ", 1)[0]})
    if "The memory capacity is unbalanced" in msg:
        a, b = _MIN_PER_GPU.search(msg), _LOCAL_GPU.search(msg)
        return _ev("memory_imbalance", attrs={"min_per_gpu_memory_gib": _float(a.group(1)) if a else None,
                                              "local_gpu_memory_gib": _float(b.group(1)) if b else None})
    if "atchdog timeout (" in msg:
        w = _WATCHDOG.search(msg)
        attrs = {"component": (w.group(1) if w and w.group(1) else "Scheduler")}
        if w and w.group(3):
            attrs["soft"] = w.group(3) == "True"
        return _ev("watchdog_timeout", {"seconds": _float(w.group(2)) if w else None}, attrs)
    if msg.startswith("Received sigquit from a child proces"):
        return _ev("sigquit", attrs={"phase": "launch"})
    if msg.startswith("SIGQUIT received"):
        return _ev("sigquit", attrs={"phase": "running"})
    m = _RANK_DEAD.match(msg)
    if m:
        return _ev("rank_dead", {"tp_rank": _int(m.group(1)), "code": _int(m.group(2))},
                   {"during_init": "during initialization" in msg})
    m = _SUBPROCESS.match(msg)
    if m:
        return _ev("subprocess_crashed", {"pid": _int(m.group(2)), "code": _int(m.group(3))}, {"name": m.group(1)})
    if msg.startswith("Health check"):
        if "shutdown" in msg[:60]:
            return _ev("health_check_failed", attrs={"during_shutdown": True})
        h = _HEALTH.search(msg)
        return _ev("health_check_failed", {"seconds": _float(h.group(1)) if h else None})
    if msg.startswith("SIGTERM received") or msg.startswith("Signal SIGTERM received"):
        return _ev("sigterm", attrs={"health_check_failed": "health check failed" in msg})
    if msg.startswith("Gracefully exiting"):
        r = _REMAINING.search(msg)
        return _ev("sigterm", {"count": _int(r.group(1)) if r else None}, {"phase": "exiting"})
    if msg.startswith("Initialization failed"):
        return _ev("init_failed", attrs={"warmup_error": "warmup error" in msg[:40]})
    return None


def _other(msg: str) -> list[Event] | None:
    if msg.startswith("The server is fired up and ready to roll"):
        return _ev("server_ready")
    m = _NCCL_VERSION.match(msg)
    if m:
        return _ev("version", attrs={"component": "nccl", "version": m.group(1)})
    m = _REGISTERING.match(msg)
    if m:
        return _notice("cuda_graph_registered", addresses=_int(m.group(1)))
    if msg.startswith("Using KV cache dtype"):
        return _notice("kv_cache_dtype", dtype=msg.partition(":")[2].strip()[:100])
    if msg.startswith("Dumping requests before crash") or "unfinished requests before crash" in msg:
        d = _DUMPED.search(msg)
        return _notice("crash_dump", **({"finished": _int(d.group(1)), "unfinished": _int(d.group(2)),
                                          "path": d.group(3)} if d else {}))
    if msg.endswith(" debug info:") or msg.startswith("Pyspy dump for PID"):
        return _notice("watchdog_debug")
    m = _CUSTOM_AR_OFF.match(msg) if "is disabled" in msg[:40] else None
    if m:
        why = "spans_nodes" if m.group(1) else "pcie_only" if m.group(2) else "no_p2p" if m.group(3) else "world_size"
        return _notice("custom_allreduce_disabled", reason=why, message=msg[:300])
    m = _BROADCAST_QUEUE.match(msg) if msg[:1] in "BC" else None
    if m:
        return _notice("broadcast_queue", role="writer" if m.group(1) == "Binding" else "reader",
                       host=m.group(2).strip("[]"), port=_int(m.group(3)))
    if msg.startswith("Setup Custom allreduce failed"):
        return _notice("custom_allreduce_failed", message=msg[:500])
    if "for JIT HiCache kernel" in msg:
        return _notice("hicache_jit_unsupported", message=msg[:500])
    if msg.startswith("Number of tokens in multimodal embedding"):
        m = _MM_MISMATCH.match(msg)
        if m:
            return _notice("mm_token_mismatch", text_tokens=_int(m.group(1)), embedding_tokens=_int(m.group(2)))
    if msg.startswith("Hierarchical cache cleared successfully"):
        return _notice("hicache_cleared")
    if msg.startswith("HiCache host KV pool") and "smaller than the device pool" in msg:
        return _notice("hicache_smaller_than_device", message=msg[:500])
    if msg.startswith("KV pool holds ") and "fewer than --context-length" in msg:
        # 0.5.23 start-up warning (failure_messages.md §6.1): the pool cannot hold one full-length request
        m = _POOL_BELOW_CONTEXT.search(msg)
        return _ev("kv_sizing", {"tokens": _int(m.group(1)) if m else None},
                   {"warning": "pool_below_context", "context_len": _int(m.group(2)) if m else None})
    if msg.startswith("max_total_tokens=") and "profiled value" in msg:
        ints = [int(x) for x in _INTS.findall(msg[:300]) if len(x) < 15]
        return _ev("kv_sizing", {"tokens": ints[-1] if ints else None},
                   {"warning": "max_total_tokens_above_profiled", "max_total_tokens": ints[0] if ints else None})
    return None


def classify_message(msg: str) -> list[Event] | None:
    """Events of one record message (no prefix), or None when it is not a message we know.

    >>> classify_message("Capture cuda graph end. Time elapsed: 98.73 s. mem usage=2.60 GB. avail mem=1.89 GB.")
    [('cuda_graph_end', {'avail_bytes': 2029372047, 'bytes': 2791728742, 'seconds': 98.73}, {'capture_name': 'decode', 'graph_backend': 'cuda graph'})]
    >>> classify_message("Piecewise CUDA Graph failed with error: shape mismatch")
    [('cuda_graph_failed', {}, {'message': 'shape mismatch', 'graph': 'piecewise'})]
    >>> classify_message("Piecewise CUDA Graph is enabled by default as an experimental feature.")
    [('cuda_graph_failed', {}, {'message': '', 'graph': 'piecewise', 'hint_only': True})]
    >>> classify_message("KV pool holds 30000 tokens, fewer than --context-length 131072. One full-context request cannot fit")
    [('kv_sizing', {'tokens': 30000}, {'warning': 'pool_below_context', 'context_len': 131072})]
    """
    if msg.startswith("Decode batch"):
        return _batch("decode_batch", msg[12:])
    if msg.startswith("Prefill batch"):
        return _batch("prefill_batch", msg[13:])
    c = msg[:1]
    if c == "I" or c == "W" or c == "E" or c == "D" or c == "C" or c == "T":
        lv = _LEVEL.match(msg)
        if lv:
            a = _ACCESS.match(msg)
            if a:
                return _ev("http_access", {"code": _int(a.group("status"))},
                           {"method": a.group("method"), "path": a.group("path")[:2000], "client": a.group("client"),
                            "level": a.group("level")})
            return _ev("uvicorn", attrs={"level": lv.group(1), "message": msg[lv.end():][:2000]})
    if msg.startswith("server_args="):
        return _ev("server_args")  # filled when the record closes (it may be wrapped)
    if "KV Cache is allocated" in msg or "KV Cache VA upper bound" in msg or msg.startswith("Post-capture KV sizing"):
        if msg.startswith("Post-capture KV sizing: full_layer_tokens") or "_layer_tokens=" in msg[:80]:
            attrs = {k: int(v) for k, v in _POST_CAPTURE_TOKENS.findall(msg) if len(v) < 15}
            attrs["post_capture"] = True
            return _ev("kv_sizing", {"tokens": attrs.get("full_layer_tokens")}, attrs)
        return _kv_cache(msg)
    if msg.startswith("Capture "):
        r = _capture(msg)
        if r:
            return r
    if msg.startswith("max_total_num_tokens="):
        return _sizing(msg)
    if msg.startswith("Allocating "):
        r = _hicache(msg)
        if r:
            return r
    if "Retract requests" in msg or msg.startswith("Decode out of memory happened"):
        return _retract(msg)
    r = _lifecycle(msg) if msg[:1] in "ILM" else None
    if r:
        return r
    if msg.startswith(_PIECEWISE_FAILED) and "CUDA out of memory" not in msg:  # an OOM keeps the OOM's reading
        said = msg[len(_PIECEWISE_FAILED):].split("\nPiecewise CUDA Graph is ", 1)[0]  # the engine's hint follows
        return _ev("cuda_graph_failed", attrs={"message": " ".join(said.split())[:2000], "graph": "piecewise"})
    if msg.lstrip().startswith(_PIECEWISE_HINT):  # the hint alone: its failure line was cut; the error is unknown
        return _ev("cuda_graph_failed", attrs={"message": "", "graph": "piecewise", "hint_only": True})
    return _failure(msg) or _other(msg)


def _capture_progress(seg: str) -> list[Event] | None:
    m = _CAPTURING.search(seg)
    if not m:
        return None
    attrs: dict[str, Any] = {"avail_mem_gib": _float(m.group(2))}
    if m.group(1):
        attrs["bs"] = _int(m.group(1))
    steps = _TQDM_STEPS.search(seg)
    if steps:  # how many batch sizes were captured: the bar's total
        attrs["steps_done"], attrs["steps_total"] = _int(steps.group(1)), _int(steps.group(2))
    return _ev("capture_progress", {"avail_bytes": _gib(m.group(2))}, attrs)


# --------------------------------------------------------------------------------------------
# The scanner


@dataclass
class _Record:
    row: dict[str, Any]
    lines: list[str]
    messages: list[str]  # message text of each line (wrapped server_args are re-joined from these)
    last_line: int
    multiline: bool
    blank_tail: int = 0
    saw_capture: bool = False
    saw_forward: bool = False
    saw_load: bool = False
    embedded: list[tuple[dict[str, Any], int]] = field(default_factory=list)  # (row, index into lines)


class _Scanner:
    """One pass over a text: rows, and a status per line."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.status: list[str] = []
        self.run = 0
        self.dumps = 0
        self.rec: _Record | None = None
        self.prev_row: dict[str, Any] | None = None
        self.phase_by_rank: dict[str | None, str] = {}
        self.pool_seen: set[tuple[int, str | None]] = set()  # (run, rank) whose target model set up its pool
        self.ts_cache: dict[str, datetime | None] = {}
        self.label_cache: dict[str, dict[str, Any]] = {}
        self.unrecognized_examples: list[tuple[int, str]] = []
        self.errors = 0

    # -- prefix pieces -------------------------------------------------------------------------
    def _ts(self, stamp: str) -> datetime | None:
        ts = self.ts_cache.get(stamp, False)
        if ts is False:
            try:
                ts = datetime.fromisoformat(stamp.replace(",", "."))
            except ValueError:
                ts = None
            if len(self.ts_cache) > 50_000:
                self.ts_cache.clear()
            self.ts_cache[stamp] = ts
        return ts  # type: ignore[return-value]

    def _labels(self, labels: str) -> dict[str, Any]:
        out = self.label_cache.get(labels)
        if out is None:
            out = {"rank": labels}
            extra: dict[str, Any] = {}
            for tok in labels.split():
                m = _LABEL.match(tok)
                if not m:
                    continue
                col = _LABEL_COLUMNS.get(m.group(1))
                if col:
                    out[col] = _int(m.group(2))
                else:
                    extra[m.group(1).lower().strip("._") + "_rank"] = _int(m.group(2))
            out = {"_cols": dict(out), "_extra": extra}
            if len(self.label_cache) < 10_000:
                self.label_cache[labels] = out
        return out

    # -- records --------------------------------------------------------------------------------
    def _emit(self, kind: str, cols: dict[str, Any], attrs: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
        row = dict(base)
        row.update(cols)
        row["kind"] = kind
        if kind == "server_args":
            if self.dumps:
                self.run += 1
            self.dumps += 1
        row["run"] = self.run
        a = dict(base.get("attrs") or {})
        a.update(attrs)
        row["attrs"] = a
        self.rows.append(row)
        return row

    def _close(self) -> None:
        rec = self.rec
        if rec is None:
            return
        self.rec = None
        row = rec.row
        n = len(rec.lines) - rec.blank_tail
        if n > 1:
            row["text"] = "\n".join(rec.lines[: min(n, _MAX_RECORD_LINES)])
            row["line_end"] = rec.last_line
        kind = row["kind"]
        attrs = row["attrs"]
        if kind == "server_args":
            joined = "".join(rec.messages[:n])
            i = joined.find("server_args=")
            args, form, truncated = parse_server_args(joined[i + 12:] if i >= 0 else joined)
            attrs.update({"args": args, "form": form, "truncated": truncated})
            if n > 1:
                attrs["wrapped_lines"] = n
        if n > 1 or kind in ("kv_exhausted", "scheduler_exception"):
            body = rec.lines[:n]
            exc = None
            for ln in body[1:] if kind != "kv_exhausted" else ():
                if ln[:1] not in (" ", "\t"):
                    m = _EXC_LINE.match(ln)
                    if m:
                        exc = m
            if exc and kind != "server_args":
                attrs["exception_type"] = exc.group(1)
                attrs["exception_message"] = (exc.group(2) or "")[:2000]
                inner = classify_failure(exc.group(0)) if "cudaHost" in exc.group(0) else None
                refused = register_refusal(exc.group(0), "\n".join(body))
                if refused is not None:  # CUDA refused the registration for a reason that is not memory
                    attrs.update(failure="host_register_refused", rc=refused)
                elif inner is not None and inner[2].get("failure") == "host_register_refused":
                    attrs.update(failure="host_register_refused", rc=inner[2].get("rc"))  # not a memory shortage
                elif inner is not None and inner[2].get("host_pinned"):
                    attrs["host_pinned"] = True  # host memory that could not be pinned: not the GPU's
                if "DeepEP" in exc.group(0):  # DeepEP's all-to-all timeout raised in the scheduler (failures.py)
                    deepep = classify_failure(exc.group(0))
                    if deepep is not None and deepep[2].get("engine") == "deepep":
                        attrs.update({k: v for k, v in deepep[2].items() if k != "message"})
                if "EADDRINUSE" in exc.group(0) or "ddress already in use" in exc.group(0):
                    # the c10d store raised inside init_torch_distributed that its port is taken
                    # (failure_messages.md §4.6, ``The server socket has failed to listen … EADDRINUSE``)
                    port = classify_failure(exc.group(0))
                    if port is not None and port[2].get("failure") == "port_in_use":
                        attrs.update(failure="port_in_use", port=port[2].get("port"))
            if kind == "kv_exhausted":
                facts = kv_exhausted_facts("\n".join(body))
                facts.pop("phase") if "phase" in attrs else None  # the header said it already
                attrs.update(facts)
                row["tokens"] = facts.get("tried_tokens")
        for erow, idx in rec.embedded:
            if erow["kind"] == "kv_exhausted":
                facts = kv_exhausted_facts("\n".join(rec.lines[idx:n]))
                erow["attrs"].update(facts)
                erow["tokens"] = facts.get("tried_tokens")

    def _open(self, row: dict[str, Any], seg: str, msg: str, lineno: int) -> None:
        kind = row["kind"]
        if kind in ("cuda_oom", "cuda_graph_failed"):
            self._set_during(row, msg, None)
        if kind in _MULTILINE or kind == "server_args":
            multiline = kind != "server_args" or not _balanced(msg)
            self.rec = _Record(row=row, lines=[seg], messages=[msg], last_line=lineno, multiline=multiline)

    def _set_during(self, row: dict[str, Any], line: str, rec: _Record | None) -> None:
        if row["kind"] != "cuda_oom" or row["attrs"].get("during"):
            return
        during = None
        drafting = self.phase_by_rank.get(row.get("rank") if row.get("rank") is not None else "*") == "draft_init"
        if "graph failed" in line or rec is not None and rec.saw_capture:
            during = "graph_capture"
        elif drafting:
            during = "draft_init"  # the draft's own load or pool, after the target's pool took its share
        elif rec is not None and rec.saw_load:
            during = "weight_load"
        elif rec is not None and rec.saw_forward:
            during = "forward"
        elif row.get("rank") is not None:
            during = self.phase_by_rank.get(row.get("rank"))
        else:  # a bare line (prefix stripped): the latest phase of any rank
            during = self.phase_by_rank.get("*")
        if during:
            row["attrs"]["during"] = during

    def _track_phase(self, row: dict[str, Any]) -> None:
        kind = row["kind"]
        phase = _PHASE_OF_KIND.get(kind)
        key = (self.run, row.get("rank"))
        if kind in _POOL_KINDS:
            self.pool_seen.add(key)
        elif kind in ("weight_load_begin", "weight_load_end") and key in self.pool_seen:
            # a load after this rank's pool: the speculative draft's own worker (see _POOL_KINDS)
            row["attrs"]["draft"] = True
            phase = "draft_init"
        if phase:
            self.phase_by_rank[row.get("rank")] = phase
            self.phase_by_rank["*"] = phase

    def _record(self, seg: str, msg: str, base: dict[str, Any], lineno: int, bare: bool) -> str:
        """Start a record from a prefixed (or bare known) message; returns the line status."""
        ec = _EXIT_CODE.match(msg) if msg.startswith("Exit code") else None
        if ec:
            prev = self.prev_row
            if prev is not None and prev["kind"] == "rank_dead" and prev.get("code") is None:
                # "Rank N scheduler is dead ..." + "Exit code: -9": one rank_dead row
                self._close()
                prev["code"] = _int(ec.group(1))
                prev["line_end"] = lineno
                prev["text"] = (prev.get("text") or "") + "\n" + seg
                return RECORD
            events: list[Event] | None = _ev("rank_dead", {"code": _int(ec.group(1))})
        else:
            try:
                events = classify_message(msg)
                if bare:  # "ValueError: Not enough host memory ..." printed without prefix
                    m = _EXC_LINE.match(msg)
                    if m and m.group(2):
                        events = events or classify_message(m.group(2))
                        if events:
                            events[0][2].setdefault("exception_type", m.group(1))
            except Exception:  # a bug on one odd line must not lose the file
                self.errors += 1
                events = None
        if events is None:
            if bare:
                return UNKNOWN
            events = [("log", {}, {})]
        if bare and events[0][2].get("hint_only") and _PIECEWISE_FAILED in ((self.prev_row or {}).get("text") or ""):
            return RECORD  # the hint of a failure line already read (an OOM one is not a multi-line record): no new row
        self._close()
        base["text"] = seg
        base["line"] = lineno
        row = self._emit(*events[0], base=base)
        for kind, cols, attrs in events[1:]:
            self._emit(kind, cols, attrs, base)
        self.prev_row = row
        self._track_phase(row)
        self._open(row, seg, msg, lineno)
        return RECORD_UNKNOWN if row["kind"] == "log" else RECORD

    def _continue(self, seg: str, lineno: int) -> str:
        rec = self.rec
        assert rec is not None
        rec.blank_tail = 0
        if len(rec.lines) < _MAX_RECORD_LINES * 4:
            rec.lines.append(seg)
            rec.messages.append(seg)
        rec.last_line = lineno
        kind = rec.row["kind"]
        if kind == "server_args":
            rec.multiline = not _balanced("".join(rec.messages))
            return RECORD
        c = seg[:1]
        if c == " " or c == "\t":
            if "capture" in seg:
                rec.saw_capture = True
            elif "load_model" in seg or "load_weights" in seg or "weight_loader" in seg:
                rec.saw_load = True
            elif "forward" in seg:
                rec.saw_forward = True
        else:
            try:
                stripped = seg
                m = _EXC_LINE.match(seg)
                if m and m.group(2):
                    stripped = m.group(2)
                events = classify_message(stripped) if stripped else None
            except Exception:
                self.errors += 1
                events = None
            if not events and kind == "scheduler_exception":
                # NCCL's "Last error:" detail under a DistBackendError names the cause (failure_messages.md §4,
                # ``Last error:`` / ``Error while creating shared memory segment /dev/shm/nccl-… (size …)``)
                found = classify_failure(stripped) if stripped else None
                if found is not None and found[2].get("failure") in _CAUSE_DETAILS:
                    events = [found]
            if events and (events[0][0] in _EMBEDDABLE or events[0][2].get("failure") in _CAUSE_DETAILS) \
                    and events[0][0] != kind:
                base = {k: rec.row.get(k) for k in ("ts_local", "rank", "tp_rank", "dp_rank", "pp_rank",
                                                    "ep_rank", "pid", "host", "container")}
                base["attrs"] = {k: v for k, v in (rec.row["attrs"] or {}).items()
                                 if k in ("stamp", "container", "ray_actor", "ip", "gpu_id") or k.endswith("_rank")}
                base["line"] = lineno
                base["text"] = seg
                for ekind, cols, attrs in events:
                    erow = self._emit(ekind, cols, attrs, base)
                    self._set_during(erow, seg, rec)
                    if ekind == "kv_exhausted":
                        rec.embedded.append((erow, len(rec.lines) - 1))
        return RECORD_UNKNOWN if kind == "log" else RECORD

    def _foreign(self, seg: str, lineno: int) -> str | None:
        """Recognised foreign lines (tqdm, NCCL, c10d, Gloo); rows for the interesting ones."""
        if "Capturing batches" in seg:
            ev = _capture_progress(seg)
            if ev:
                base = {"line": lineno, "text": seg}
                self._emit(*ev[0], base=base)
                return FOREIGN
        bare = _BARE_BAR.match(seg)
        if bare:
            # an unlabelled bar (see _BARE_BAR): detectors read it as capture only after the weights were loaded
            steps = _TQDM_STEPS.search(seg)
            self._emit("progress_bar", {}, {"steps_done": _int(steps.group(1)), "steps_total": _int(steps.group(2))}
                       if steps else {}, {"line": lineno, "text": seg})
            return FOREIGN
        bars = list(_WEIGHT_BAR.finditer(seg)) if "Completed |" in seg else []
        if bars:
            weights = bars[-1]  # the bar's last update on the line
            self._emit("progress_bar", {}, {"label": weights.group(1), "steps_done": _int(weights.group(2)),
                                            "steps_total": _int(weights.group(3))}, {"line": lineno, "text": seg})
            return FOREIGN
        if _TQDM.search(seg) or seg.startswith(("Loading safetensors checkpoint shards",
                                                "Loading pt checkpoint shards", "Capturing batches",
                                                "Multi-thread loading shards")):
            return FOREIGN
        if " NCCL " in seg:
            m = _NCCL.match(seg)
            if m:
                msg = m.group("msg")
                iface = nccl_interface(seg) if m.group("level") == "INFO" else None
                # a communicator's start (failures.py reads its rank and nranks): a set-up begun, not yet complete
                start = classify_failure(seg) if m.group("level") == "INFO" and "Init START" in msg else None
                listed = nccl_socket_interfaces(seg) if iface else []
                extra = {"net_if": iface[0], "net_ip": iface[1],
                         **({"net_ifs": [list(x) for x in listed]} if len(listed) > 1 else {})} if iface else \
                    {k: v for k, v in start[2].items() if k in ("event", "nccl_rank", "nranks")} if start else {}
                if m.group("level") != "INFO" or "Init COMPLETE" in msg or extra:
                    self._emit("nccl_info", {"host": m.group("host"), "pid": _int(m.group("pid")),
                                             "gpu": _int(m.group("dev"))},
                               {"level": m.group("level"), "message": msg[:2000], **extra},
                               {"line": lineno, "text": seg})
                return FOREIGN
        if seg[:1] == "[":
            if seg.startswith("[Gloo]"):
                return FOREIGN
            m = _C10D.match(seg)
            if m:
                self._c10d(m, seg, lineno)
                return FOREIGN
        return None

    def _c10d(self, m: re.Match[str], seg: str, lineno: int) -> None:
        msg = m.group("msg")
        lo = msg.lower()
        if m.group("src").startswith("ProcessGroupGloo") and (gloo := gloo_transport(msg)) is not None:
            # the CPU group's start-up connections (parsers/failures.py ``gloo_transport``): a transport fact
            attrs_g: dict[str, Any] = {**gloo, "source_file": m.group("src"), "level": m.group("lvl"),
                                       "message": msg[:2000]}
            if m.group("md") and m.group("time"):
                attrs_g["stamp"] = f"{m.group('md')} {m.group('time')}"
            if m.group("rank") is not None:
                attrs_g["rank"] = _int(m.group("rank"))
            self._emit("dist_transport", {}, attrs_g, {"line": lineno, "text": seg})
            return
        if "watchdog" not in lo and "monitoredbarrier" not in lo and "should dump" not in lo \
                and "timeout" not in lo:
            return
        attrs: dict[str, Any] = {"source_file": m.group("src"), "level": m.group("lvl"), "message": msg[:2000]}
        if m.group("md") and m.group("time"):
            attrs["stamp"] = f"{m.group('md')} {m.group('time')}"
        rank = m.group("rank")
        r = _C10D_RANK.search(msg)
        if rank is None and r:
            rank = r.group(1)
        if rank is not None:
            attrs["rank"] = _int(rank)
        pg = _C10D_PG.search(msg)
        if pg:
            attrs["pg"] = _int(pg.group(1))
        cols: dict[str, Any] = {}
        seq, op, to, ran = _C10D_SEQ.search(msg), _C10D_OP.search(msg), _C10D_TIMEOUT.search(msg), _C10D_RAN.search(msg)
        if seq:
            attrs["seq_num"] = cols["count"] = _int(seq.group(1))
        if op:
            attrs["op_type"] = op.group(1)
        if to and _float(to.group(1)) is not None:
            attrs["timeout_s"] = _float(to.group(1)) / 1000
        if ran and _float(ran.group(1)) is not None:
            cols["seconds"] = _float(ran.group(1)) / 1000
        # the store client's poll (socket.cpp ``waitForInput``): a rank waiting on the TCPStore, not a collective
        event = ("collective_timeout" if "caught collective operation timeout" in msg
                 else "monitored_barrier" if "monitoredbarrier" in lo
                 else "store_wait" if "waitforinput" in lo
                 else "watchdog_exception" if "watchdog" in lo else "other")
        attrs["event"] = event
        self._emit("nccl_watchdog", cols, attrs, {"line": lineno, "text": seg})

    # -- one physical line ----------------------------------------------------------------------
    def segment(self, seg: str, lineno: int) -> str:
        attrs: dict[str, Any] = {}
        base: dict[str, Any] = {}
        s = seg
        if s[:1] != "[":
            cm = _CONTAINER.match(s)
            if cm:
                if cm.group("svc"):
                    attrs["container"] = base["container"] = cm.group("svc")
                else:
                    base["pid"] = _int(cm.group("pid"))
                    if cm.group("actor"):
                        attrs["ray_actor"] = cm.group("actor")
                    if cm.group("ip"):
                        attrs["ip"] = cm.group("ip")
                s = s[cm.end():]
                if not s.strip():
                    return BLANK
        if s[:1] == "[":
            m = _PREFIX.match(s)
            if m:
                msg = s[m.end():]
                stamp = m.group("stamp")
                if stamp:
                    base["ts_local"] = self._ts(stamp)
                    if base["ts_local"] is None:
                        attrs["stamp"] = stamp
                elif m.group("mdstamp"):
                    attrs["stamp"] = m.group("mdstamp")
                elif m.group("tstamp"):
                    attrs["stamp"] = m.group("tstamp")
                elif m.group("gpu"):
                    base["gpu"] = attrs["gpu_id"] = _int(m.group("gpu"))
                labels = (m.group("labels") or "").strip() or m.group("onlylabels")
                if labels:
                    lab = self._labels(labels)
                    base.update(lab["_cols"])
                    if lab["_extra"]:
                        attrs.update(lab["_extra"])
                base["attrs"] = attrs
                return self._record(seg, msg, base, lineno, bare=False)
        rec = self.rec
        # interleaved stderr first: tqdm / NCCL / c10d never continue a record
        st = self._foreign(s, lineno)
        if st is not None:
            return st
        if rec is not None and rec.multiline and rec.row["kind"] != "log":
            return self._continue(s, lineno)
        if _PY_WARNING.match(s):
            return FOREIGN
        if s.startswith("# "):
            return UNKNOWN  # a shell/markdown comment quoting a message is not that message
        base["attrs"] = attrs
        st = self._record(seg, s, base, lineno, bare=True)
        if st == UNKNOWN and rec is not None and self.rec is rec and rec.row["kind"] == "log" \
                and s[:1] in (" ", "\t", ")", "]", "}"):
            return self._continue(s, lineno)  # an unknown record's own continuation: still unknown
        return st

    def skip_records(self, forward_ranks: Iterable[str | None]) -> None:
        """One-line records read by the fast path sit here: like any prefixed record they close the open
        record and end an "Exit code" merge; batch lines (of these rank labels) set the phase."""
        self._close()
        self.prev_row = None
        for rank in forward_ranks:
            self.phase_by_rank[rank] = "forward"
            self.phase_by_rank["*"] = "forward"

    def blank(self) -> None:
        rec = self.rec
        if rec is not None and rec.multiline and rec.row["kind"] != "server_args":
            rec.blank_tail += 1
            if len(rec.lines) < _MAX_RECORD_LINES * 4:
                rec.lines.append("")
                rec.messages.append("")


def _segments(line: str) -> list[str]:
    """A physical line split at tqdm's ``\\r`` and at records glued after tqdm output."""
    if "\r" not in line and line.find("[20", 1) < 0:
        return [line]
    out: list[str] = []
    for piece in line.split("\r"):
        start = 0
        for m in _EMBEDDED_STAMP.finditer(piece, 1):
            head = piece[start:m.start()]
            if start == 0 and _CONTAINER.fullmatch(head):
                continue  # "sglang-1  | [2025-...": a container prefix, not glued output
            out.append(head)
            start = m.start()
        out.append(piece[start:])
    return [p for p in out if p.strip()]


def _split_lines(text: str) -> list[str]:
    if not text:
        return []
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return lines


def _scan(text: str) -> _Scanner:
    sc = _Scanner()
    scan_lines(sc, enumerate(_split_lines(text), 1))
    sc._close()
    return sc


def scan_lines(sc: _Scanner, numbered: Iterable[tuple[int, str]]) -> None:
    """Feed (line number, physical line) pairs to a scanner; ``parsers.sglang_fast`` feeds only the
    lines it does not read itself, and the scanner may be fed again with the next chunk of a file."""
    status = sc.status
    for lineno, line in numbered:
        if line.endswith("\r"):
            line = line[:-1]
        if not line.strip():
            sc.blank()
            status.append(BLANK)
            continue
        segs = _segments(line)
        if len(segs) == 1:
            st = sc.segment(segs[0], lineno)
        else:
            st = BLANK
            bad = False
            for seg in segs:
                s1 = sc.segment(seg, lineno)
                bad = bad or s1 in (UNKNOWN, RECORD_UNKNOWN)
                if _RANK_OF_STATUS[s1] > _RANK_OF_STATUS[st]:
                    st = s1
            if bad and st == RECORD:
                st = RECORD_UNKNOWN
        status.append(st)
        if st in (UNKNOWN, RECORD_UNKNOWN) and len(sc.unrecognized_examples) < MAX_UNRECOGNIZED_EXAMPLES:
            sc.unrecognized_examples.append((lineno, line[:500]))


def classify_lines(text: str) -> list[str]:
    """Per line of ``text``: ``record`` (SGLang's own, understood), ``record_unknown`` (SGLang's own,
    not understood), ``foreign`` (tqdm/NCCL/c10d, understood), ``unknown`` or ``blank``.

    >>> classify_lines("[2025-01-01 12:00:00 TP0] Memory pool end. avail mem=4.53 GB\\n"
    ...                "[2025-01-01 12:00:00 TP0] hello\\nCache shape torch.Size([1])\\n\\n")
    ['record', 'record_unknown', 'unknown', 'blank']
    """
    return _scan(text).status


# --------------------------------------------------------------------------------------------
# Public API

# sglang_formats.md §1
_SNIFF_PREFIX = re.compile(
    r"^(?:[\w.-]+\s+\| )?\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,6})?(?P<labels>(?: [A-Z][\w.]*\d*)*)\] ",
    re.M,
)
_SNIFF_STRONG = (
    "server_args=ServerArgs(", "server_args={", "hit an exception: Traceback", "Decode batch", "Prefill batch",
    "Load weight begin", "Load weight end", "KV Cache is allocated", "Capture cuda graph", "CUDA graph begin",
    "max_total_num_tokens=", "host memory for hierarchical", "hierarchical KV host pool",
    "fired up and ready to roll", "Init torch distributed", "Memory pool end", "sglang is using nccl",
    "Received sigquit from a child", "SIGQUIT received. signum=", "scheduler is dead",
    "scheduler died during initialization", "[gpu_id=", "Not enough host memory available. Requesting",
    "out of memory. Try to lower your batch size", "Please try to increase --mem-fraction-static",
    "KV cache pool is full. Retract requests", "Decode out of memory happened",
)


def sniff(head: str) -> float:
    """Confidence that ``head`` (the first ~64 KiB of a text) is an SGLang log.

    >>> sniff("MemTotal:       16318480 kB")
    0.0
    >>> sniff("Prefill out of memory. Try to lower your batch size.\\nTry to allocate 2048 tokens.") >= 0.7
    True
    """
    head = head[:65536]
    strong = any(s in head for s in _SNIFF_STRONG)
    prefixed = 0
    labelled = 0
    for m in _SNIFF_PREFIX.finditer(head):
        prefixed += 1
        if m.group("labels"):
            labelled += 1
        if prefixed >= 50:
            break
    if strong and prefixed:
        return 0.95
    if strong:
        return 0.75
    if labelled:
        return 0.6
    if prefixed >= 3:
        return 0.35
    return 0.0


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    """Parse one SGLang log text into events (see the module docstring).

    >>> r = parse("[2025-11-20 09:14:02] server_args=ServerArgs(tp_size=8, hicache_size=48)\\n"
    ...           "[2025-11-20 09:20:02] server_args={'tp_size': 8, 'hicache_size': 4\\n")
    >>> r.events.select("kind", "run").rows()
    [('server_args', 0), ('server_args', 1)]
    """
    if not isinstance(text, str):
        raise NotThisFormat("sglang: not text")
    # millions of small row dicts and no reference cycles: the cyclic GC only costs time here
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse(text, path)
    finally:
        if gc_was_enabled:
            gc.enable()


def _parse(text: str, path: str) -> ParseResult:
    sc = _scan(text)
    st = sc.status
    n_lines = len(st)
    recognized = sum(1 for s in st if s in (RECORD, FOREIGN, BLANK))
    has_sglang = any(s in (RECORD, RECORD_UNKNOWN) for s in st)
    if n_lines and not has_sglang and not sc.rows and recognized < n_lines:
        raise NotThisFormat("sglang: no SGLang record in the text")
    rows = sc.rows
    for row in rows:
        a = row.get("attrs")
        if a is not None and not a:
            row["attrs"] = None
    notes = []
    if sc.errors:
        notes.append(f"sglang: {sc.errors} line(s) could not be classified because of a parser error")
    return ParseResult.from_rows(
        rows, source=FORMAT, path=path, lines=n_lines, recognized=recognized,
        unrecognized=n_lines - recognized, unrecognized_examples=sc.unrecognized_examples, notes=notes,
    )

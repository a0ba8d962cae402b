"""What an out-of-memory row says ran out, and the phase the engine was in when it did.

Read once here so that every GPU-memory detector places an OOM the same way (issue 21 item 5):

- :func:`memory_kind`: a message that *looks* like an OOM is not always the GPU's memory. Inductor raises its
  shared-memory-per-block limit as ``torch.OutOfMemoryError: out of resource: …`` and an allocator request over
  1 EB is a size computed wrongly (failure_messages.md §1.5, §7); Triton's ``Triton Error [CUDA]: out of memory``
  and DeepGEMM's ``CUDA driver error (…): 2 (CUDA_ERROR_OUT_OF_MEMORY, out of memory)`` are real device OOMs at
  kernel load that carry no figures (§7). The exception line is classified by ``parsers.failures.classify``,
  the one table of those messages.
- :func:`oom_phase`: where in the engine's life the OOM happened, from the best evidence the input holds —
  the traceback's frames (failure_messages.md §2.2 "look at the frames"; SGLang's ``load_model``/``weight_loader``,
  ``init_memory_pool``, ``cuda_graph_runner``/``capture``, ``forward_extend``/``forward_decode``; vLLM's
  ``profile_run``/``_dummy_run``, ``_warmup_sampler``, ``capture_model``; vllm_formats.md §3.5; a speculative
  draft worker's construction, ``draft_init``), else the
  lifecycle record or batch line just before it in the same run (sglang_formats.md §2: ``Load weight begin``,
  ``Capture cuda graph begin``, ``Prefill batch``/``Decode batch``; vllm_formats.md §3.5 item 2: the last
  start-up line seen tells the phase that died).

>>> memory_kind({"kind": "scheduler_exception", "attrs": '{"exception_type": "RuntimeError", '
...              '"exception_message": "Triton Error [CUDA]: out of memory"}'})
'device'
>>> memory_kind({"kind": "scheduler_exception", "attrs": '{"exception_type": "torch.OutOfMemoryError", '
...              '"exception_message": "out of resource: triton_mm_4 Required: 98304 Hardware limit:65536"}'})
'workspace'
>>> phase_of_frames([("m/model_runner.py", "forward_extend"), ("m/linear.py", "forward")])
'prefill'
"""

from __future__ import annotations

import re
from datetime import datetime

from forensics.facts.rows import Row, attrs, before
from forensics.facts.runs import of_kind
from parsers.failures import classify, stage_of_frames

#: rows that report an allocation failure of their own
OOM_KINDS = ("cuda_oom", "cuda_error_oom", "cuda_graph_failed")

_FRAME_RE = re.compile(r'File "([^"]*)", line \d+, in (\w+)')
_EXC_END_RE = re.compile(r"^\s*(?:\[rank\d+\]: ?)?((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\b.*)$", re.M)

#: functions that name a phase, in the order one phase runs inside another: graph capture and warm-up run the
#: model through ``_dummy_run`` as profiling does, and every phase ends in some ``forward``; so the phase named
#: first here wins, wherever its frame is in the traceback
_PHASE_FRAMES = (
    ("sampler_warmup", re.compile(r"^(?:_warmup_sampler|_dummy_sampler_run|_dummy_pooler_run)$")),
    # the custom all-reduce registers the graphs' buffers at the end of each capture and nowhere else (sglang
    # srt/distributed/device_communicators/custom_all_reduce.py ``capture()``; vllm the same file)
    ("graph_capture", re.compile(r"capture|^register_graph_buffers$")),
    ("warmup", re.compile(r"^(?:compile_or_warm_up_model|warmup_model|_warmup\w*|warm_up\w*)$")),
    ("memory_pool", re.compile(r"^(?:init_memory_pool|profile_max_num_token|_allocate_kv_cache\w*|initialize_kv_cache\w*|"
                               r"_init_cache|initialize_cache|_create_buffers|init_kv_buffer)$")),
    ("profile", re.compile(r"^(?:profile_run|_dummy_run|determine_num_available_blocks|determine_available_memory)$")),
    ("weight_load", re.compile(r"^(?:load_model|load_weights|weight_loader\w*|_load_weights\w*|"
                               r"process_weights_after_loading|load_checkpoint\w*)$")),
    # SGLang 0.1–0.2's ModelTpServer: forward_fill_batch / forward_decode_batch
    ("prefill", re.compile(r"^(?:forward_extend\w*|forward_fill_batch|run_prefill\w*|forward_prefill\w*|"
                           r"get_new_batch_prefill)$")),
    ("decode", re.compile(r"^(?:forward_decode\w*|run_decode\w*|update_running_batch|forward_idle)$")),
)
#: the phase a run is in after a lifecycle record or batch line that means the same in both engines
#: (sglang_formats.md §2, vllm_formats.md §3.5); the records between weights and serving come in an order of each
#: engine's own (SGLang sizes its pool before capture and logs the sizing after it; vLLM profiles after loading),
#: so after those nothing is concluded here and the engine's parser's own ``during`` decides
_PHASE_AFTER = {
    "weight_load_begin": "weight_load", "cuda_graph_begin": "graph_capture", "capture_progress": "graph_capture",
    "prefill_batch": "prefill", "decode_batch": "decode", "server_ready": "serving", "engine_metrics": "serving",
    "weight_load_end": None, "kv_sizing": None, "kv_memory": None, "memory_profile": None, "kv_cache_allocated": None,
    "memory_pool_end": None, "cuda_graph_end": None,
}
#: SGLang's own order (``ModelRunner.initialize``: ``load_model`` → ``init_memory_pool`` → ``init_cublas`` /
#: ``init_attention_backend`` / kernel warm-up → ``init_cuda_graphs``; sglang_formats.md §2): after ``Load weight
#: end`` the pool is being set up; after ``KV Cache is allocated`` / ``Memory pool end`` the next memory is outside
#: the static pool — attention workspaces and the capture — so an OOM there is capture's
_SGLANG_PHASE_AFTER = {"weight_load_end": "memory_pool", "kv_cache_allocated": "graph_capture",
                       "memory_pool_end": "graph_capture"}


_NCCL_LAST_ERROR_RE = re.compile(r"Last error:[ \t]*\n?[ \t]*([^\n]{1,300})")


def _exception_lines(row: Row) -> list[str]:
    """The exception lines a row holds: its parsed exception, then every exception line of its text (a chained
    traceback, "During handling of the above exception…", holds several)."""
    a = attrs(row)
    out = [f"{a['exception_type']}: {a.get('exception_message') or ''}"] if a.get("exception_type") else []
    text = (row.get("text") or "")[:20000]
    out += _EXC_END_RE.findall(text)
    # an NCCL error's own cause: PyTorch (1.13+) appends ncclGetLastError as ``Last error:`` then NCCL's last WARN
    # text (failure_messages.md §4.2: ``unhandled cuda error`` … ``Last error:`` / ``Cuda failure 2 'out of memory'``)
    out += _NCCL_LAST_ERROR_RE.findall(text)
    if not out and a.get("message"):
        out.append(str(a["message"]))
    return out


#: when a row's exception lines disagree, the more specific reading wins: a nonsense size or a kernel's
#: shared-memory limit is what that message is, whatever else the traceback holds
_KIND_ORDER = ("bogus", "workspace", "host_pinned", "device")


def _kind_of(found: tuple | None, a: dict) -> str | None:
    if found is None:
        return None
    fkind, _cols, fa = found
    if fkind == "failure":
        return "workspace" if fa.get("failure") == "workspace" else None
    if fa.get("bogus_size") or a.get("bogus_size"):
        return "bogus"
    if fa.get("host_pinned") or a.get("host_pinned"):
        return "host_pinned"
    return "device" if fkind in ("cuda_oom", "cuda_error_oom") else None


def exceeds_device(row: Row) -> bool:
    """The allocator's one request is larger than the whole device (``Tried to allocate X. GPU n has a total capacity
    of Y``, X > Y; failure_messages.md §1.1, the same words in PyTorch's HIP build): no memory fraction, utilization
    or freed neighbour makes it fit, so the size itself is what a fix must change.

    >>> exceeds_device({"bytes": 256 * 2**30, "total_bytes": 16 * 2**30})
    True
    >>> exceeds_device({"bytes": 2**30, "total_bytes": 16 * 2**30})
    False
    """
    tried, total = row.get("bytes"), row.get("total_bytes")
    return bool(tried and total and tried > total)


def memory_kind(row: Row) -> str | None:
    """What ran out according to an OOM-shaped row: ``device`` (the GPU's memory), ``host_pinned`` (host memory
    being pinned), ``workspace`` (a kernel's shared-memory or workspace limit: not the GPU's memory), ``bogus``
    (a request over 1 EB: a size computed wrongly), or None when the row reports no running-out at all."""
    a = attrs(row)
    kind = row.get("kind")
    if kind in ("cuda_oom", "cuda_error_oom"):
        return _kind_of((kind, {}, a), a)
    if kind == "failure" and a.get("failure") == "workspace":
        return "workspace"
    if kind not in ("scheduler_exception", "exception", "failure", "cuda_graph_failed"):
        return None
    kinds = {_kind_of(classify(line), a) for line in _exception_lines(row)[:8]}
    return next((k for k in _KIND_ORDER if k in kinds), None)


#: the speculative draft's worker being built (sglang srt/speculative/eagle_worker.py, multi_layer_eagle_worker.py,
#: standalone_worker.py … ``__init__``; the scheduler's ``init_draft_worker``/``launch_draft_worker``): whatever it loads or allocates comes
#: after the target's static pool took its share, so it is the draft's start-up, not the target's
def _draft_frames(frames: list[tuple[str, str]]) -> bool:
    return any(("/speculative/" in path and "worker" in path.rsplit("/", 1)[-1] and func == "__init__")
               or "draft_worker" in func for path, func in frames)


def phase_of_frames(frames: list[tuple[str, str]]) -> str | None:
    """The phase a traceback's (path, function) frames pass through: the outermost phase any frame names."""
    if _draft_frames(frames):
        return "draft_init"
    funcs = {func for _path, func in frames}
    for phase, rx in _PHASE_FRAMES:
        if any(rx.search(f) for f in funcs):
            return phase
    stage = stage_of_frames(frames)
    # not its graph_capture: a file name (``cuda_graph_runner.py``) also holds the replay of every decode step
    return stage if stage in ("memory_pool", "weight_load", "forward") else None


#: vLLM's compilation layer (vllm/compilation/: ``decorators.py``'s ``support_torch_compile`` wrapper, ``backends.py``'s
#: VllmBackend and piecewise backends, ``cuda_graph.py``/``cuda_piecewise_backend.py``'s graph wrappers; vllm_formats.md
#: §2.7): torch.compile and the CUDA-graph capture run the model through it at start-up (``compile_or_warm_up_model``),
#: and so does every compiled forward while serving — these frames place an OOM only in a run that served nothing
_VLLM_COMPILATION = re.compile(r"/vllm/compilation/")


def passes_vllm_compilation(frames: list[tuple[str, str]]) -> bool:
    """Whether a traceback's frames pass vLLM's compilation layer (torch.compile and CUDA-graph wrappers).

    >>> passes_vllm_compilation([("/x/vllm/compilation/backends.py", "__call__"), ("/x/models/llama.py", "forward")])
    True
    """
    return any(_VLLM_COMPILATION.search(path) for path, _func in frames)


def startup_phase_of_frames(frames: list[tuple[str, str]], *, served: bool) -> str | None:
    """:func:`phase_of_frames`, with what a run that served nothing adds: a forward pass through vLLM's compilation
    layer there is the start-up's compile or CUDA-graph capture (``compile``), not serving.

    >>> startup_phase_of_frames([("/x/vllm/compilation/decorators.py", "__call__"), ("/x/models/l.py", "forward")],
    ...                         served=False)
    'compile'
    >>> startup_phase_of_frames([("/x/vllm/compilation/decorators.py", "__call__"), ("/x/models/l.py", "forward")],
    ...                         served=True)
    'forward'
    """
    phase = phase_of_frames(frames)
    if not served and phase in (None, "forward") and passes_vllm_compilation(frames):
        return "compile"
    return phase


_TRACEBACK_KINDS = ("scheduler_exception", "exception", "failure", "cuda_graph_failed")


def enclosing_traceback(run: list[Row], row: Row) -> Row | None:
    """The traceback row (an engine's exception record) whose lines hold ``row`` (an OOM line inside it)."""
    line = row.get("line") or 0
    for tb in of_kind(run, *_TRACEBACK_KINDS):  # a run's index: a big run's batch rows are not walked
        if tb is not row and tb.get("kind") in _TRACEBACK_KINDS and tb.get("file") == row.get("file") \
                and tb.get("line_end") and (tb.get("line") or 0) <= line <= tb["line_end"]:
            return tb
    return None


#: lines a paste may put between a traceback's last frame and its exception line (a ``[... trimmed ...]`` marker)
TB_TAIL_GAP = 2


def traceback_before(run: list[Row], row: Row) -> Row | None:
    """The traceback row that ends just before ``row`` in the same file, nothing recorded between: Python prints
    the frames first and the exception line (the OOM) last, so a cut traceback's frames are the OOM's own."""
    line = row.get("line") or 0
    best = None
    for r in of_kind(run, *_TRACEBACK_KINDS):
        end = r.get("line_end") or r.get("line") or 0
        if r is row or r.get("file") != row.get("file") or not 0 <= line - end - 1 <= TB_TAIL_GAP:
            continue
        if r.get("kind") in _TRACEBACK_KINDS and _FRAME_RE.search(r.get("text") or ""):
            best = r
    if best is None:
        return None
    end = best.get("line_end") or best.get("line") or 0
    between = [r for r in run if r.get("file") == row.get("file") and end < (r.get("line") or 0) < line]
    return None if between else best


def traceback_frames(run: list[Row], row: Row) -> list[tuple[str, str]]:
    """The (path, function) frames of the traceback that raised ``row``: its own, the traceback row whose lines hold
    it, else the traceback that ends just before it (:func:`traceback_before`)."""
    frames = _frames_of(run, row)
    if frames:
        return frames
    tb = traceback_before(run, row)
    return _FRAME_RE.findall(tb.get("text") or "") if tb is not None else []


def _frames_of(run: list[Row], row: Row) -> list[tuple[str, str]]:
    """The row's traceback frames, else those of the traceback row whose lines hold it (an OOM line inside it)."""
    frames = _FRAME_RE.findall(row.get("text") or "")
    if frames:
        return frames
    tb = enclosing_traceback(run, row)
    return _FRAME_RE.findall(tb.get("text") or "") if tb is not None else []


def oom_phase(run: list[Row], row: Row) -> tuple[str | None, str]:
    """The phase an OOM happened in and what placed it: ``weight_load``, ``memory_pool`` (KV pool sizing or
    allocation), ``profile`` (vLLM's profiling run), ``graph_capture``, ``sampler_warmup``, ``warmup``,
    ``prefill``, ``decode``, ``forward`` or ``serving`` (a batch of unknown kind); (None, "") when nothing does."""
    if attrs(row).get("during") == "draft_init":  # the engine parser saw the draft's own load lines before it
        return "draft_init", "the draft model's load line before it"
    frames = _frames_of(run, row)
    phase = phase_of_frames(frames) if frames else None
    if phase and phase != "forward":
        return phase, "the traceback's frames"
    last = _last_record_before(run, row)
    after = None
    if last is not None and attrs(last).get("draft"):  # the speculative draft's own load line (parsers/sglang.py)
        return "draft_init", "the draft model's load line before it"
    if last is not None:
        after = _PHASE_AFTER[last["kind"]] or (_SGLANG_PHASE_AFTER.get(last["kind"]) if last.get("source") == "sglang"
                                               else None)
    if phase == "forward":  # a forward pass of a batch: the batch line before it says which kind
        return (after, "the batch line before it") if after in ("prefill", "decode") else ("forward", "the traceback's frames")
    if after is not None:
        return after, f"the {last['kind'].replace('_', ' ')} line before it"
    during = attrs(row).get("during")  # the engine parser's own reading of its start-up records
    during = {"load": "weight_load", "kv_alloc": "memory_pool"}.get(during, during)
    if during not in (None, "init"):
        return during, "the start-up line before it"
    return None, ""


def _last_record_before(run: list[Row], row: Row) -> Row | None:
    """The lifecycle record or batch line last before ``row``: the same rank's when it has any (ranks load and
    capture side by side; batch lines are the first rank's only), then the same file's (the same process's log)
    last by line; across files the last by time. One pass: a big run holds tens of thousands of batch lines."""
    rank, file = row.get("rank"), row.get("file")
    # per group (all records; the row's rank's): [same file's last, its line, last by time, its stamp, any at all];
    # the last by time only counts while the group has no record of the same file
    groups = {"all": [None, 0, None, 0.0, False], "rank": [None, 0, None, 0.0, False]}
    row_line = row.get("line") or 0
    for r in of_kind(run, *_PHASE_AFTER):
        same, line = r.get("file") == file, r.get("line") or 0
        # :func:`before`, its same-file case inline (nearly every record is the row's own file's)
        if r is row or not (line < row_line if same and file is not None else before(r, row)):
            continue
        for name in ("all", "rank") if rank is not None and r.get("rank") == rank else ("all",):
            g = groups[name]
            g[4] = True
            if same:
                if g[0] is None or line > g[1]:
                    g[0], g[1] = r, line
            elif g[0] is None:
                stamp = _stamp(r)
                if g[2] is None or stamp > g[3]:
                    g[2], g[3] = r, stamp
    g = groups["rank"] if groups["rank"][4] else groups["all"]
    return g[0] if g[0] is not None else g[2]


def _stamp(r: Row) -> float:
    ts = r.get("ts")
    return ts.timestamp() if isinstance(ts, datetime) else float("-inf")


#: OOM rows placed per run: each placement reads the run once, so a flood of OOM lines is placed by its first ones
PLACE_AT_MOST = 16


def place_ooms(run: list[Row], ooms: list[Row]) -> dict[int, tuple[str | None, str]]:
    """:func:`oom_phase` of the first :data:`PLACE_AT_MOST` OOM rows, by ``id(row)`` (the rest stay unplaced)."""
    return {id(r): oom_phase(run, r) for r in ooms[:PLACE_AT_MOST]}

#: phases of start-up before anything is served: an OOM there is the weights' or a pool's, not serving headroom
STARTUP_PHASES = ("weight_load", "memory_pool", "profile")


def fragmentation(row: Row) -> dict | None:
    """The allocator's own figures when fragmentation alone could explain the OOM, else None.

    failure_messages.md §1.3/§1.4: ``X`` reserved by PyTorch but unallocated (2.1+) is memory the caching
    allocator holds in split blocks; when X is at least the allocation A that failed, A would have fit in memory
    the process already had, had it been contiguous — the allocator's own hint (``expandable_segments:True``, 2.1+)
    is the fix to try before giving activations more room. X small with little free is genuine exhaustion.

    >>> fragmentation({"bytes": 2 * 2**30, "attrs": '{"reserved_unallocated_bytes": 3221225472}'})["variable"]
    'PYTORCH_CUDA_ALLOC_CONF'
    >>> fragmentation({"bytes": 2 * 2**30, "attrs": '{"reserved_unallocated_bytes": 104857600}'}) is None
    True
    """
    a = attrs(row)
    unalloc, tried = a.get("reserved_unallocated_bytes"), row.get("bytes")
    if not isinstance(unalloc, int | float) or not isinstance(tried, int | float) or tried <= 0 or unalloc < tried:
        return None
    return {"reserved_unallocated_bytes": int(unalloc), "tried_bytes": int(tried),
            "variable": a.get("alloc_conf_var") or "PYTORCH_CUDA_ALLOC_CONF"}

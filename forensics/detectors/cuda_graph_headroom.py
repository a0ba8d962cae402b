"""SGL-GPU-001/002/003/014: too little GPU memory left outside ``--mem-fraction-static``.

Sources: SGL-GPU-001, SGL-GPU-002 and SGL-GPU-003 read reference/sglang_formats.md §3 (``Capture cuda graph
end … avail mem``) and §5 (what ``--mem-fraction-static`` leaves outside the static pool), and the allocator
OOM of reference/failure_messages.md §1.1. SGL-GPU-014 reads the same OOM placed in the speculative draft
worker's set-up: sglang managers/scheduler.py (0.4+: the target's worker, then ``self.draft_worker``) and
sglang issue #6875 / PR #28855 (the draft's weights and pool were not counted in the fraction).

SGLang gives ``f`` × the pre-load free memory of each GPU to weights + KV pool; CUDA graphs,
activations and NCCL buffers live in the rest. Seed phase 2: f = 0.93 left 0.82 GB after graph
capture and a large prefill hit ``torch.OutOfMemoryError``.

>>> corrected_fraction(0.93, shortfall=1.39 * 2**30, gpu_bytes=93.79 * 2**30)
(0.88, 4.2037)
"""

from __future__ import annotations

import math
import re

from forensics.facts.gpu import gpu_capacity, target_load_rows
from forensics.facts.launch import ServerConfig, server_config
from forensics.facts.oom import STARTUP_PHASES, enclosing_traceback, fragmentation, memory_kind, place_ooms
from forensics.facts.rows import Row, attrs, before, rank_of, rows
from forensics.facts.runs import has_kind, iter_runs, of_kind
from forensics.facts.sglang_defaults import default_fraction_for_tp
from forensics.facts.versions import fields_floor, sglang_version
from forensics.model import Finding, FlagChange, Timeline
from parsers.elision import is_elision
from parsers.failures import compiler_failure, reaches_model_forward, stage_of_frames, stops_at_allocation
from parsers.units import parse_size

from ._common import GIB, fmt_binary, fmt_gib, make_finding, tag_run
from .batch_flags import MIN_PREFILL_CHUNK, prefill_chunk_flag, running_requests_flag
from .held_at_start import foreign_processes
from .kv_cache_capacity import raised_in_kv_allocator
from .model_fit import weights_overflow

MARGIN_FRACTION = 0.03  # margin over the measured need: max(1 GiB, 3% of the GPU's memory)
THIN_FRACTION = 0.025  # "little left" after capture: below max(1 GiB, 2.5% of the GPU's memory)
OOM_KINDS = ("cuda_oom", "cuda_error_oom", "cuda_graph_failed")
WEIGHT_KINDS = ("not_enough_memory", "weights_no_kv_room")


def margin_bytes(gpu_bytes: float) -> float:
    return max(GIB, MARGIN_FRACTION * gpu_bytes)


def corrected_fraction(f: float, *, shortfall: float, gpu_bytes: float) -> tuple[float, float]:
    """The new fraction (rounded down to 0.01) and the GiB it frees, for a shortfall in bytes."""
    freed = max(shortfall, 0.0) + margin_bytes(gpu_bytes)
    new = math.floor(round((f - freed / gpu_bytes) * 100, 6)) / 100
    return new, round(freed / GIB, 4)


def _is_oom_exception(row: Row) -> bool:
    """The exception is the GPU's memory running out (not Inductor's shared-memory limit, nor a 1 EB size bug)."""
    return memory_kind(row) == "device"


#: NCCL's WARN when its own cudaMalloc failed (failure_messages.md §4.1 ``Cuda failure 2 'out of memory'``)
_NCCL_OOM_RE = re.compile(r"Cuda failure (?:\d+ )?'out of memory'")
#: NCCL's ``ncclUnhandledCudaError`` as PyTorch and the engines' pynccl wrappers print it (failure_messages.md §4.1:
#: ``unhandled cuda error (run with NCCL_DEBUG=INFO for details)``); ``Last error:`` (§4.2) names the CUDA call's own error
_NCCL_UNHANDLED_CUDA_RE = re.compile(r"unhandled cuda error", re.IGNORECASE)
_NCCL_LAST_ERROR_RE = re.compile(r"Last error:\s*([^\n]{0,200})")
#: an all-reduce that shares its buffers over CUDA IPC fails for reasons of its own, not memory
#: (sglang python/sglang/srt/distributed/device_communicators/custom_all_reduce.py, 0.4-0.5)
_IPC_FRAME_RE = re.compile(r"custom_all_reduce|register_graph_buffers|cudaIpc", re.IGNORECASE)


def _is_oom_failure(row: Row) -> bool:
    text = f"{attrs(row).get('message', '')} {row.get('text') or ''}".lower()
    return "out of memory" in text or "outofmemory" in text


def nccl_cuda_failure_on_thin_capture(cfg: ServerConfig, run: list[Row], row: Row) -> bool:
    """An NCCL ``unhandled cuda error`` while CUDA graphs were captured, with less free before the capture than SGLang
    budgets outside the pool for activations: most likely NCCL's buffers not fitting.

    NCCL allocates its buffers with cudaMalloc, outside PyTorch's pool, at a communicator's first collective — inside
    the capture for the graphs' all-reduces; a failed allocation there is ``Cuda failure 'out of memory'`` under
    NCCL_DEBUG=INFO and only ``unhandled cuda error`` without it (failure_messages.md §4.1, §8; vllm_formats.md
    ``--gpu-memory-utilization``: too high ⇒ "NCCL 'unhandled cuda error'"). A ``Last error:`` naming another CUDA
    error, or frames in the CUDA-IPC all-reduce, say it was not memory.
    """
    a = attrs(row)
    text = f"{a.get('exception_message') or ''}\n{(row.get('text') or '')[:20000]}"
    if row.get("kind") != "scheduler_exception" or not _NCCL_UNHANDLED_CUDA_RE.search(text):
        return False
    last = _NCCL_LAST_ERROR_RE.search(text)
    if (last and last.group(1).strip() and "out of memory" not in last.group(1).lower()) or _IPC_FRAME_RE.search(text):
        return False
    begun = [r for r in of_kind(run, "cuda_graph_begin") if before(r, row)]
    if not begun or any(before(b, e) and before(e, row) for e in of_kind(run, "cuda_graph_end") for b in begun[-1:]):
        return False  # not inside a capture
    free = [r["avail_bytes"] for r in begun if r.get("avail_bytes")]
    if not free:
        return False
    chunk, _how = _chunk(cfg, run)
    return min(free) < activation_reserve(chunk, int(cfg.num("tp_size") or 1), int(cfg.num("pp_size") or 1))


def _sizes_from_text(text: str) -> tuple[int | None, int | None]:
    """Tried and free bytes from a PyTorch OOM message (binary units)."""
    tried = re.search(r"Tried to allocate ([\d.]+ ?[KMGT]i?B)", text)
    free = re.search(r"of which ([\d.]+ ?[KMGT]i?B) is free", text)
    conv = [parse_size(m.group(1)) if m else None for m in (tried, free)]
    return conv[0], conv[1]


def _gpu_memory(tl: Timeline, run: list[Row], ooms: list[Row]) -> tuple[float | None, str]:
    pre = [r["avail_bytes"] for r in target_load_rows(run, "weight_load_begin") if r.get("avail_bytes")]
    if pre:
        return float(min(pre)), "free memory before the weights were loaded (what the fraction multiplies)"
    return gpu_capacity(tl, run, ooms)


def _headroom(run: list[Row]) -> tuple[float | None, Row | None]:
    ends = [r for r in of_kind(run, "cuda_graph_end") if r.get("avail_bytes") is not None]
    if ends:
        row = min(ends, key=lambda r: r["avail_bytes"])
        return float(row["avail_bytes"]), row
    sizing = [r for r in of_kind(run, "kv_sizing") if r.get("avail_bytes") is not None]
    if sizing:
        return float(sizing[0]["avail_bytes"]), sizing[0]
    return None, None


def _alternatives(cfg: ServerConfig, run: list[Row]) -> list[str]:
    sizing = next((attrs(r) for r in of_kind(run, "kv_sizing")), {})
    chunk = cfg.num("chunked_prefill_size") or sizing.get("chunked_prefill_size")
    graph_bs = cfg.num("cuda_graph_max_bs")
    running = cfg.num("max_running_requests") or sizing.get("max_running_requests")
    out = []
    out.append("Or lower --chunked-prefill-size" + (f" (now {int(chunk)}, e.g. {int(chunk) // 2})" if chunk else "")
               + ": smaller activation peak per prefill; long prompts take more steps.")
    out.append("Or lower --cuda-graph-max-bs" + (f" (now {int(graph_bs)}, e.g. {int(graph_bs) // 2})" if graph_bs else "")
               + ": less memory in captured graphs; larger decode batches run without graphs (slower).")
    out.append("Or lower --max-running-requests" + (f" (now {int(running)})" if running else "")
               + ": smaller batches and activations; lower throughput.")
    return out


#: without the GPU's size, the fraction is lowered by this much (about 4 % of the GPU to activations)
BLIND_STEP = 0.04


def assumed_mem_fraction(cfg: ServerConfig) -> tuple[float, str]:
    """SGLang's automatic --mem-fraction-static when the flag is absent: by TP size in the releases that
    pick it so (newer ones derive it from the GPU's memory; the finding says it assumed)."""
    tp = int(cfg.num("tp_size") or 1)
    return default_fraction_for_tp(tp), f"TP {tp}" if tp > 1 or cfg.get("tp_size") is not None else "TP 1 assumed"


def _flag(cfg: ServerConfig, new: float, why: str) -> list[FlagChange]:
    old = cfg.flag_text("mem_fraction_static")
    return [FlagChange("--mem-fraction-static", old, f"{new:.2f}", why)] if new > 0 else []


def detect(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    for ref, run in iter_runs(tl):
        found = _detect_run(tl, run)
        if found:
            out.append(tag_run(found, ref))
    return out


def _detect_run(tl: Timeline, run: list[Row]) -> Finding | None:
    if has_kind(run, *WEIGHT_KINDS):
        return None  # weights_do_not_fit: the opposite direction
    # a capture failure that is no OOM (a kernel/backend error) is no headroom problem: SGL-RUN-001
    # a traceback that lost its message is read by its frames only when nothing else says what failed
    placeable = not _other_failure_named(tl)
    ooms = [r for r in of_kind(run, *OOM_KINDS, "scheduler_exception", "failure")
            if ((r.get("kind") in OOM_KINDS and (r.get("kind") != "cuda_graph_failed" or _is_oom_failure(r)))
                or (r.get("kind") == "scheduler_exception" and _is_oom_exception(r))
                or (placeable and lost_message_stage(r) in ("graph_capture", "forward")))
            and not attrs(r).get("host_pinned")]  # pinning host memory failed: SGL-HOST-007's, not the GPU's
    cfg = server_config(tl, run)
    ooms += [r for r in of_kind(run, "scheduler_exception") if r not in ooms
             and nccl_cuda_failure_on_thin_capture(cfg, run, r)]
    # a fragment that starts mid-run still shows batches: the start-up (and capture) succeeded
    serving = has_kind(run, "prefill_batch", "decode_batch", "server_ready")
    captured = serving or has_kind(run, "cuda_graph_end")
    loaded = captured or has_kind(run, "weight_load_end")
    # a table sized by the context length, or memory another process held, is not headroom (SGL-KV-004, SGL-GPU-006)
    # nor a nonsense size (more than 1 EB: a bug computing it, SGL-GPU-012)
    ooms = [r for r in ooms if not _sized_by_config(r) and not foreign_processes(r) and not attrs(r).get("fragment")
            and not attrs(r).get("bogus_size")]
    # an OOM whose traceback places it in loading, the pool's set-up or profiling is no headroom problem
    # (SGL-GPU-004, SGL-KV-004 read those), with or without the start-up lines around it
    placed = place_ooms(run, ooms)
    # the frames, or SGLang's own start-up order (after "Load weight end" the pool is being set up)
    # SGLang's own "Capture ... graph failed" wrapper places the OOM in capture whatever line came before it
    # (the capture follows the pool: python/sglang/srt/model_executor/cuda_graph_runner.py, 0.4.x-0.5.x)
    ooms = [r for r in ooms if r.get("kind") == "cuda_graph_failed"
            or placed.get(id(r), (None, ""))[0] not in STARTUP_PHASES]
    draft = [r for r in ooms if placed.get(id(r), (None, ""))[0] == "draft_init"]
    if draft:
        return _draft_oom(tl, cfg, run, draft)
    capture_fail = [r for r in ooms if r.get("kind") == "cuda_graph_failed" or attrs(r).get("during") == "graph_capture"
                    or placed.get(id(r), (None, ""))[0] == "graph_capture"
                    or "Capture cuda graph failed" in (r.get("text") or "") or lost_message_stage(r) == "graph_capture"]
    if ooms and (loaded or capture_fail):  # a capture failure proves the weights had loaded
        if not captured and not capture_fail:
            capture_fail = [r for r in ooms if any(before(b, r) for b in of_kind(run, "cuda_graph_begin"))]
        if capture_fail:
            return _capture_failed(tl, cfg, run, capture_fail)
        if captured:
            return _serving_oom(tl, cfg, run, ooms, placed=placed)
    elif captured:
        return _thin(tl, cfg, run)
    elif ooms and not has_kind(run, "weight_load_begin", "server_args", "dist_init_begin", "sigquit") \
            and not any(attrs(r).get("during") in ("weight_load", "init", "memory_pool") for r in ooms) \
            and not weights_overflow(tl, run):  # weights beyond the GPU place it in the load (SGL-GPU-007)
        # a fragment: the OOM without the start-up around it. Serving OOMs are by far the common case; say so.
        return _serving_oom(tl, cfg, run, ooms, phase_known=False, placed=placed)
    return None


def _draft_oom(tl: Timeline, cfg: ServerConfig, run: list[Row], ooms: list[Row]) -> Finding:
    """SGL-GPU-014: the speculative draft's weights or KV pool did not fit beside the target's static pool.

    SGLang sizes the target's KV pool from the memory free before the target loaded (``--mem-fraction-static`` of
    it), then builds the draft worker in the same process; until the draft was counted in that budget (sglang PR
    #23862 / #28855, 2026: "count speculative draft weights against --mem-fraction-static"; issue #6875) the draft's
    weights, pool and graphs had only the headroom left outside the target's pool. So the fix is the same direction
    as a serving OOM: a smaller target pool (lower fraction), not more of it.
    """
    oom, tried, free_at = _oom_sizes(ooms)
    gpu, gpu_how = _gpu_memory(tl, run, ooms)
    f = cfg.num("mem_fraction_static")
    f_assumed = None
    if f is None:
        f_assumed, f_how = assumed_mem_fraction(cfg)
        f = f_assumed
    flags: list[FlagChange] = []
    new = None
    shortfall = max(tried - free_at, 0.0) if tried is not None and free_at is not None else None
    if gpu is not None:
        new, freed = corrected_fraction(f, shortfall=shortfall or 0.0, gpu_bytes=gpu)
        flags = _flag(cfg, new, f"{f:g}{' (assumed default)' if f_assumed is not None else ''} − "
                                f"({fmt_gib(shortfall or 0.0)} the draft's allocation lacked + "
                                f"{fmt_gib(margin_bytes(gpu))} margin) ÷ {fmt_gib(gpu)} ({gpu_how}) → {new:.2f}; the "
                                "draft's remaining layers may need more: watch its 'Memory pool end' line")
    reasons = []
    if f_assumed is not None:
        reasons.append(f"--mem-fraction-static not in the input: assumed {f_assumed:g} ({f_how})")
    if gpu is None:
        reasons.append("the GPU's memory is unknown")
    draft_lines = [r for r in target_rows_excluded(run)][:1]
    gpus = [oom["gpu"]] if oom.get("gpu") is not None else []
    return make_finding(
        "SGL-GPU-014",
        summary=(f"CUDA ran out of memory while SGLang set up the speculative draft model{f' on GPU {gpus[0]}' if gpus else ''}"
                 + (f" (an allocation of {fmt_gib(tried)} with {fmt_gib(free_at)} free)" if tried is not None
                    and free_at is not None else "")
                 + ": the target's weights and KV pool had already taken their share under --mem-fraction-static"
                 + f" {f:g}" + (" (assumed)" if f_assumed is not None else "")
                 + ", and the draft's weights and pool only had what was left outside it."
                 + (f" Lower --mem-fraction-static to {new:.2f}." if flags else "")),
        evidence=[oom, *draft_lines, *cfg.evidence_rows("mem_fraction_static"),
                  *[tb for tb in (enclosing_traceback(run, oom),) if tb is not None]],
        confidence="medium" if not reasons else "low",
        confidence_reason="; ".join(reasons) or None,
        ranks=[x for x in (rank_of(oom),) if x is not None],
        gpus=gpus,
        figures={"mem_fraction_static": f, "failed_allocation_bytes": int(tried) if tried is not None else None,
                 "free_at_failure_bytes": int(free_at) if free_at is not None else None,
                 "gpu_memory_bytes": int(gpu) if gpu else None, "corrected_mem_fraction_static": new},
        flags=flags,
        actions=["Or upgrade: SGLang releases that count the draft in --mem-fraction-static size the target's pool "
                 "around it.",
                 "Or make the draft cheaper: fewer --speculative-num-draft-tokens / --speculative-eagle-topk, or a "
                 "smaller draft model.",
                 "Not the weights-do-not-fit problem: raising --mem-fraction-static gives the target's pool more and "
                 "leaves the draft less."],
    )


def target_rows_excluded(run: list[Row]) -> list[Row]:
    """The draft's own load lines (the ones :func:`forensics.facts.gpu.target_load_rows` leaves out)."""
    kept = {id(r) for k in ("weight_load_begin", "weight_load_end") for r in target_load_rows(run, k)}
    return [r for r in of_kind(run, "weight_load_begin", "weight_load_end") if id(r) not in kept]


#: a traceback's frames and its exception line, as cpython Lib/traceback.py (3.x) prints them
_FRAME_RE = re.compile(r'File "([^"]*)", line \d+, in (\w+)')
#: the exception line that ends a Python traceback (``torch.OutOfMemoryError: …``, ``AssertionError``)
_EXC_END_RE = re.compile(r"^\s*(?:\[rank\d+\]: )?(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b", re.M)


#: failures that name a cause other than memory: a GPU fault (Xid, an illegal address, ECC) or a collective's error
_NAMED_ELSEWHERE = frozenset({"illegal_memory_access", "device_assert", "ecc_error", "nvlink_error", "launch_failure", "cuda_error",
                              "nccl_error", "collective_timeout", "signal"})


def _other_failure_named(tl: Timeline) -> bool:
    """Whether the input names a failure that is not memory (the kernel's Xid, a CUDA fault, an NCCL error)."""
    return bool(rows(tl, "xid", "gpu_fallen_off_bus", "gpu_error", "nccl_watchdog", "cuda_error")) or any(
        attrs(r).get("failure") in _NAMED_ELSEWHERE for r in rows(tl, "failure"))


def lost_message_stage(row: Row) -> str | None:
    """The stage of a traceback whose exception line the input does not hold (a paste cut it), from its frames.

    The frames still say where it failed (failure_messages.md §2.2: "look at the frames"): inside CUDA-graph
    capture, or in the forward pass of a batch being served. At those two places the failure a worker's traceback
    most often ends in is the allocator's OOM, in memory outside the static pool; the finding says the message is
    missing and which line would decide. None when the message is there or nothing places it — and for a traceback
    whose frames never reach the model (``parsers.failures.reaches_model_forward``): a scheduler's loop, a grammar or
    the detokenizer failing is not the forward pass's memory, and SGL-RUN-001 says where it stopped instead.
    """
    a = attrs(row)
    if row.get("kind") == "failure":
        if a.get("failure") != "traceback_cut":
            return None
        stage, text, at_alloc = a.get("during"), row.get("text") or "", bool(a.get("stops_at_allocation"))
        frames = _FRAME_RE.findall(text)
    elif row.get("kind") == "scheduler_exception":
        text = row.get("text") or ""
        frames = _FRAME_RE.findall(text)
        if not frames or _EXC_END_RE.search(text.split("\n", 1)[-1]) or a.get("exception_type"):
            return None
        stage, at_alloc = stage_of_frames(frames), stops_at_allocation(_drop_elisions(text))
    else:
        return None
    # the engine's own ``raise`` in the last frame (a KV allocator, a check) is its error, not the allocator's OOM;
    # nor is a failure of the PyTorch compiler (dynamo's frames, its ``from user code:`` trailer) the model's memory
    if _LAST_RAISE_RE.search(_drop_elisions(text)) or compiler_failure(text):
        return None
    # cut inside a call to SGLang's KV-slot allocator: what it raises is the pool's logical exhaustion (SGL-KV-002),
    # not the CUDA allocator's OOM
    if raised_in_kv_allocator(_drop_elisions(text)):
        return None
    # capture fails for reasons of its own (a backend's plan, a stream-capture error: failure_messages.md §2.2):
    # there the cut must stop where memory was being allocated
    if stage == "graph_capture" and not at_alloc:
        return None
    # a traceback that never entered the model (batch building, a grammar, the detokenizer) says nothing about the
    # memory of its forward pass: what failed there is not known, and SGL-RUN-001 says so
    if stage == "forward" and not reaches_model_forward(frames):
        return None
    return stage


#: the last frame's source line a ``raise`` (cpython Lib/traceback.py (3.x) prints each frame's line under it)
_LAST_RAISE_RE = re.compile(r'File "[^"]*", line \d+, in \w+[ \t]*\n[ \t]*raise\b[^\n]*\s*$')


def _drop_elisions(text: str) -> str:
    return "\n".join(ln for ln in text.splitlines() if ln.strip() and not is_elision(ln) and not ln.startswith("# "))


def _sized_by_config(row: Row) -> bool:
    tried, total = row.get("bytes"), row.get("total_bytes")
    return bool(tried and total and tried >= 0.5 * total)


def _oom_sizes(ooms: list[Row]) -> tuple[Row, float | None, float | None]:
    # the parsed OOM row (with its GPU) before the traceback that contains it
    ooms = sorted(ooms, key=lambda r: r.get("kind") != "cuda_oom")
    for r in ooms:
        tried, free = r.get("bytes"), r.get("free_bytes")
        if tried is None:
            t2, f2 = _sizes_from_text(r.get("text") or attrs(r).get("message") or attrs(r).get("exception_message") or "")
            tried, free = tried or t2, free if free is not None else f2
        if tried is not None:
            return r, float(tried), float(free) if free is not None else None
    return ooms[0], None, None


def _serving_oom(tl: Timeline, cfg: ServerConfig, run: list[Row], ooms: list[Row], phase_known: bool = True,
                 placed: dict[int, tuple[str | None, str]] | None = None) -> Finding:
    oom, tried, free_at = _oom_sizes(ooms)
    lost = [r for r in ooms if lost_message_stage(r) == "forward"]
    if lost and len(lost) == len(ooms):
        oom = lost[0]
    message_lost = oom in lost
    headroom, head_row = _headroom(run)
    gpu, gpu_how = _gpu_memory(tl, run, ooms)
    f = cfg.num("mem_fraction_static")
    f_assumed = None
    if f is None:  # the launch is not in the input: the default stands in, and the finding says so
        f_assumed, f_how = assumed_mem_fraction(cfg)
        f = f_assumed
    prefill = [r for r in of_kind(run, "prefill_batch") if before(r, oom)]
    last_prefill = prefill[-1] if prefill else None
    need = shortfall = None
    if tried is not None:
        if headroom is not None and free_at is not None:
            need = max(tried, headroom - free_at + tried)
            shortfall = max(need - headroom, 0.0)
        elif free_at is not None:
            need, shortfall = tried, max(tried - free_at, 0.0)
        elif headroom is not None:
            need, shortfall = tried, max(tried - headroom, 0.0)
    reasons = []
    if headroom is None:
        reasons.append("no 'Capture cuda graph end' / sizing line: headroom after capture unknown")
    if tried is None:
        reasons.append("the OOM does not say how much it tried to allocate")
    if f is None:
        reasons.append("--mem-fraction-static unknown (no server_args or launch command)")
    if f_assumed is not None:
        reasons.append(f"--mem-fraction-static not in the input: assumed SGLang's default {f_assumed:g} ({f_how})")
    phase, placed_by = (placed or {}).get(id(oom), (None, ""))
    if phase not in ("prefill", "decode"):
        phase = None
    if not phase_known and phase is None:
        reasons.append("the lines around the OOM are not in the input: taken as an OOM while serving (the common "
                       "case); an OOM while loading weights needs the opposite fix (SGL-GPU-004)")
    if message_lost:
        reasons.append("the traceback's exception line is not in the input: its frames place it in the forward pass of "
                       "a batch being served, where the usual failure is the allocator's OOM; `CUDA error: an illegal "
                       "memory access` or an NCCL error on that line would be a different cause")
    if attrs(oom).get("unreliable"):
        reasons.append("the runtime's out-of-resources error is not always GPU memory (queues and threads too)")
    if gpu is None:
        reasons.append("the GPU's memory is unknown")
    flags: list[FlagChange] = []
    new = None
    if f is not None and gpu is None:
        new = math.floor(round((f - BLIND_STEP) * 100, 6)) / 100
        flags = [FlagChange("--mem-fraction-static", cfg.flag_text("mem_fraction_static"), f"{new:.2f}",
                            f"{f:g}{' (assumed default)' if f_assumed is not None else ''} − {BLIND_STEP} → {new:.2f}: "
                            "returns about 4 % of the GPU to activations; the GPU's size (`nvidia-smi "
                            "--query-gpu=memory.total --format=csv`) gives the exact step")]
    if f is not None and gpu is not None:
        new, freed = corrected_fraction(f, shortfall=shortfall or 0.0, gpu_bytes=gpu)
        why = (f"{f:g}{' (assumed default)' if f_assumed is not None else ''} − ({fmt_gib(shortfall)} shortfall + {fmt_gib(margin_bytes(gpu))} margin "
               f"(max(1 GiB, 3% of {fmt_gib(gpu)}))) ÷ {fmt_gib(gpu)} ({gpu_how}) = {f - freed * GIB / gpu:.4f} "
               f"→ {new:.2f}; frees {freed:.2f} GiB per GPU from the KV pool")
        if need is not None:
            why += (f". Need: {fmt_gib(need)} = {fmt_gib(headroom)} left after capture − {fmt_gib(free_at)} free "
                    f"at the failure + {fmt_gib(tried)} it tried" if headroom is not None and free_at is not None
                    else f". Need: {fmt_gib(need)}")
        flags = _flag(cfg, new, why)
    frag = fragmentation(oom)
    if frag is not None:
        flags.insert(0, fragmentation_flag(frag))
    batch = (running_requests_flag(cfg, run, oom, "each decode step's activations and sampling buffers grow with "
                                   "the batch (the other way is a smaller pool)") if phase == "decode" else
             prefill_chunk_flag(cfg, last_prefill, "a prefill's activations grow with the tokens it processes at "
                                "once; long prompts take more steps", gpu) if phase == "prefill" else None)
    rechunk = batch is not None and batch.flag == "--chunked-prefill-size" and (cfg.num("chunked_prefill_size") or 0) < 0
    if rechunk:
        flags.insert(0, batch)  # chunking turned off is the cause; the fraction is the second step
    elif batch is not None:
        flags.append(batch)
    gpus = [oom["gpu"]] if oom.get("gpu") is not None else []
    ranks = [x for x in (rank_of(oom),) if x is not None]
    summary = (
        (f"A worker died in the forward pass while serving{f' on GPU {gpus[0]}' if gpus else ''} (its error line is "
         "cut from the input; most likely CUDA out of memory): " if message_lost else
         f"CUDA out of memory while serving{f' on GPU {gpus[0]}' if gpus else ''}: " if phase_known or phase else
         f"CUDA out of memory{f' on GPU {gpus[0]}' if gpus else ''}, read as an OOM while serving (the lines around "
         "it, which would place it, are not in the input): ")
        + (f"--mem-fraction-static {f:g} left {fmt_gib(headroom)} after CUDA-graph capture" if f is not None and headroom is not None
           else f"only {fmt_gib(headroom)} was left after CUDA-graph capture" if headroom is not None
           else "the memory outside the static pool ran out")
        + (f", and a {phase} forward{f' (placed by {placed_by})' if placed_by else ''} needing {fmt_gib(tried)} more failed"
           if tried is not None and phase
           else f", and a forward needing {fmt_gib(tried)} more failed" if tried is not None
           else f" in a {phase} forward" if phase else "")
        + (f" after a prefill of {last_prefill['tokens']} new tokens" if last_prefill and last_prefill.get("tokens") else "")
        + "." + (fragmentation_words(frag) if frag is not None else "")
        + (f" Chunked prefill is off: set --chunked-prefill-size {flags[0].new} first"
           + (f", then lower --mem-fraction-static to {new:.2f} if it still fails." if new else ".")
           if rechunk else f" Lower --mem-fraction-static to {new:.2f}." if new else "")
    )
    figures = {
        "mem_fraction_static": f,
        "headroom_after_capture_bytes": int(headroom) if headroom is not None else None,
        "failed_allocation_bytes": int(tried) if tried is not None else None,
        "free_at_failure_bytes": int(free_at) if free_at is not None else None,
        "need_bytes": int(need) if need is not None else None,
        "shortfall_bytes": int(shortfall) if shortfall is not None else None,
        "gpu_memory_bytes": int(gpu) if gpu else None,
        "gpu_memory_from": gpu_how if gpu else None,
        "margin_bytes": int(margin_bytes(gpu)) if gpu else None,
        "prefill_new_tokens": last_prefill.get("tokens") if last_prefill else None,
        "corrected_mem_fraction_static": new,
        "reserved_unallocated_bytes": frag["reserved_unallocated_bytes"] if frag else None,
    }
    actions = _alternatives(cfg, run)
    # SGLang's troubleshooting guide (docs/references/troubleshooting.md, "CUDA out of memory"): an OOM in prefill is
    # eased by a smaller --chunked-prefill-size, one in decode by fewer --max-running-requests: that knob first
    if phase == "decode":
        actions.sort(key=lambda a: "--max-running-requests" not in a)
    if not flags:  # nothing to set: the first alternative is the fix, not an afterthought
        actions[0] = "L" + actions[0].removeprefix("Or l")
    actions.append("Not the opposite problem: 'Not enough memory … increase --mem-fraction-static' at start-up "
                   "means the weights do not fit (SGL-GPU-004); "
                   + ("this crash happened after a successful start." if phase_known or phase else
                      "if this OOM came while the weights were loading, that is the fix instead."))
    ev = [oom, *([head_row] if head_row else []), *([last_prefill] if last_prefill else []),
          *cfg.evidence_rows("mem_fraction_static")]
    ev += of_kind(run, "sigquit")[:1]
    # the traceback that carried the OOM, when the engine's parser kept it as its own row
    ev += [r for r in of_kind(run, "scheduler_exception") if r is not oom and r.get("file") == oom.get("file")
           and (r.get("line") or 0) <= (oom.get("line") or 0) <= (r.get("line_end") or r.get("line") or 0)][:1]
    return make_finding(
        "SGL-GPU-001",
        summary=summary,
        evidence=ev,
        severity=None if phase_known and not message_lost else "high",
        confidence="low" if message_lost else "high" if not reasons else ("medium" if len(reasons) == 1 else "low"),
        confidence_reason="; ".join(reasons) or None,
        ranks=ranks,
        gpus=gpus,
        figures={**figures, "phase": phase, "phase_from": placed_by or None},
        flags=flags,
        actions=actions,
    )


#: the capture failure's own list of remedies (sglang_formats.md §5 "graph capture failure": 0.4.6+ ``set
#: --cuda-graph-max-bs to a smaller value (e.g., 16)``, 0.5.15+ ``--cuda-graph-max-bs-decode``)
_CAPTURE_BS_ADVICE = re.compile(r"(--cuda-graph-max-bs(?:-decode)?) to a smaller value \(e\.g\., (\d{1,5})\)")
#: the release that renamed the decode graphs' batch size (§5 flag table: the old name an alias 0.5.15-0.5.19)
DECODE_BS_FLAG_SINCE = (0, 5, 15)
#: the remedy list names the batch size from 0.4.6, with this example value (§5 graph capture failure row)
CAPTURE_BS_ADVICE_SINCE = (0, 4, 6)
CAPTURE_BS_EXAMPLE = 16


#: the captures of the prefill/extend graphs (sglang_formats.md §3 "piecewise": ``Capture piecewise CUDA graph begin``
#: 0.5.6–0.5.12, ``Capture {role} prefill CUDA graph begin. backend=…`` 0.5.15+) and their failures (the piecewise
#: failure line, sglang python/sglang/srt/compilation/piecewise_context_manager.py (0.5.10+); ``Capture prefill CUDA
#: graph failed``, sglang python/sglang/srt/model_executor/runner/prefill_cuda_graph_runner.py (0.5.15+))
_PREFILL_CAPTURE_RE = re.compile(r"piecewise|prefill", re.IGNORECASE)
#: the flag bounding the prefill graphs' token count: ``--piecewise-cuda-graph-max-tokens`` (0.5.4+, default the
#: prefill chunk), renamed ``--cuda-graph-max-bs-prefill`` in 0.5.15 (the old name a deprecated alias; sglang
#: python/sglang/srt/server_args.py (0.5.15+)); the opt-in era's own remedy list gives 512 as its example
PREFILL_TOKENS_FLAG_SINCE = (0, 5, 15)
PREFILL_TOKENS_EXAMPLE = 512


def phased_graph_flags(tl: Timeline) -> tuple[bool, str]:
    """Whether the release names its graph flags by phase (0.5.15+: ``--cuda-graph-max-bs-decode``,
    ``--cuda-graph-max-bs-prefill``), and what says so: the stated version, else a server_args field or launch
    flag only those releases have (forensics/facts/versions.py::fields_floor); "" when nothing does."""
    version, where = sglang_version(tl)
    if version is not None:
        return version >= DECODE_BS_FLAG_SINCE, f"SGLang {'.'.join(map(str, version))} ({where})"
    floor, field = fields_floor(tl)
    if floor is not None and floor >= DECODE_BS_FLAG_SINCE:
        return True, f"the input names {field}, a setting of 0.5.15+"
    return False, ""


def prefill_graph_capture(run: list[Row], fails: list[Row]) -> bool:
    """Whether the capture that failed was of the prefill (piecewise) graphs: the failure says so, or the last
    capture that began before it in the same log was one."""
    if any(_PREFILL_CAPTURE_RE.search(str(r.get("text") or "")[:300]) and "graph" in str(r.get("text") or "")[:300]
           .lower() for r in fails):
        return True
    first = min(fails, key=lambda r: (r.get("file") or "", r.get("line") or 0), default=None)
    if first is None:
        return False
    begun = [r for r in of_kind(run, "cuda_graph_begin") if r.get("file") == first.get("file")
             and (r.get("line") or 0) < (first.get("line") or 0)]
    last = max(begun, key=lambda r: r.get("line") or 0, default=None)
    return last is not None and bool(_PREFILL_CAPTURE_RE.search(
        f"{attrs(last).get('capture_name') or ''} {attrs(last).get('backend') or ''}"))


def prefill_tokens_flag(tl: Timeline, cfg: ServerConfig, run: list[Row]) -> FlagChange:
    """Fewer tokens in the prefill graphs: their memory grows with the largest token count captured, which is
    bounded by its own flag (never --cuda-graph-max-bs, which sizes the decode graphs). Half the bound when the
    input gives it (the flag, else the prefill chunk it defaults to), else the engine's example value."""
    phased, said = phased_graph_flags(tl)
    name = "--cuda-graph-max-bs-prefill" if phased else "--piecewise-cuda-graph-max-tokens"
    named = f" ({name}: {said})" if said else " (0.5.15+ calls it --cuda-graph-max-bs-prefill)"
    bound = cfg.num("piecewise_cuda_graph_max_tokens") or cfg.num("cuda_graph_max_bs_prefill")
    how = "the flag"
    if not bound:
        bound, how = _chunk(cfg, run)
        how = f"the prefill chunk it defaults to ({how})"
    if bound and bound > 1:
        return FlagChange(name, cfg.flag_text("piecewise_cuda_graph_max_tokens" if not phased
                                              else "cuda_graph_max_bs_prefill"), str(int(bound) // 2),
                          f"half of {int(bound)} tokens ({how}): the prefill graphs' memory grows with the largest "
                          f"token count captured; longer prefills run without graphs{named}")
    return FlagChange(name, None, str(PREFILL_TOKENS_EXAMPLE),
                      f"the engine's own example for the prefill graphs' bound; longer prefills run without "
                      f"graphs{named}")


def capture_bs_flag(tl: Timeline, cfg: ServerConfig, run: list[Row], fails: list[Row]) -> FlagChange | None:
    """Fewer captured batch sizes: the graphs' memory shrinks with the largest one (sglang_formats.md §5, the
    capture failure's remedy 2). The flag the engine's own message names, else the one of its release; half the
    largest captured size when the input shows it, else the message's example value."""
    texts = " ".join(str(r.get("text") or "") + " " + str(attrs(r).get("message") or "") for r in fails)
    advice = _CAPTURE_BS_ADVICE.search(texts)
    version, _where = sglang_version(tl)
    phased, said = phased_graph_flags(tl)
    name = advice.group(1) if advice else "--cuda-graph-max-bs-decode" if phased else "--cuda-graph-max-bs"
    named = ("" if advice else f" ({name}: {said})" if said
             else " (0.5.15+ calls it --cuda-graph-max-bs-decode)")
    max_bs, how = graph_max_bs(run, cfg)
    if max_bs and max_bs > 1:
        new, why = max(max_bs // 2, 1), (f"half of bs {max_bs} ({how}): the captured graphs' memory shrinks with the "
                                         "largest batch captured; larger decode batches run without graphs")
    elif advice:
        new, why = int(advice.group(2)), ("the capture failure's own advice (its example value); larger decode "
                                          "batches run without graphs")
    elif version is None or version >= CAPTURE_BS_ADVICE_SINCE:
        # the paste cut the remedy list the engine prints under every capture failure; its example value stands
        new, why = CAPTURE_BS_EXAMPLE, ("the example of SGLang's own remedy list under a capture failure (0.4.6+; cut "
                                        "from this input); larger decode batches run without graphs")
    else:
        return None
    old = cfg.flag_text("cuda_graph_max_bs") or cfg.flag_text("cuda_graph_max_bs_decode")
    return FlagChange(name, old, str(new), why + named)


def fragmentation_flag(frag: dict) -> FlagChange:
    """The allocator's own fix when fragmentation alone explains the OOM (forensics.facts.oom.fragmentation)."""
    return FlagChange(frag["variable"], None, "expandable_segments:True",
                      f"{fmt_binary(frag['reserved_unallocated_bytes'])} was reserved by PyTorch but unallocated, at "
                      f"least the {fmt_binary(frag['tried_bytes'])} that failed: split blocks, not a lack of memory; expandable "
                      "segments let the allocator grow one segment instead (PyTorch 2.1+, the OOM message's own hint)")


def fragmentation_words(frag: dict) -> str:
    return (f" {fmt_binary(frag['reserved_unallocated_bytes'])} was reserved but unallocated — more than the "
            f"{fmt_binary(frag['tried_bytes'])} it asked for — so fragmentation alone could explain it: try "
            f"{frag['variable']}=expandable_segments:True first.")


def _capture_failed(tl: Timeline, cfg: ServerConfig, run: list[Row], fails: list[Row]) -> Finding:
    oom, tried, free_at = _oom_sizes(fails + of_kind(run, "cuda_oom"))
    gpu, gpu_how = _gpu_memory(tl, run, fails)
    f = cfg.num("mem_fraction_static")
    shortfall = max(tried - free_at, 0.0) if tried is not None and free_at is not None else (tried or 0.0)
    flags: list[FlagChange] = []
    new = None
    if f is not None and gpu is not None:
        new, freed = corrected_fraction(f, shortfall=shortfall, gpu_bytes=gpu)
        lacked = f"{fmt_gib(shortfall)} the capture lacked + " if tried is not None else ""
        flags = _flag(cfg, new, f"{f:g} − ({lacked}{fmt_gib(margin_bytes(gpu))} margin"
                                + ("" if lacked else "; what the capture lacked is not in the input")
                                + f") ÷ {fmt_gib(gpu)} ({gpu_how}) → {new:.2f}")
    elif gpu is None and f is not None and f > BLIND_STEP:
        # the fraction but not the GPU's size: SGLang's own remedy under a capture failure ("set
        # --mem-fraction-static to a smaller value"), one step; the exact step needs the GPU's memory
        new = math.floor(round((f - BLIND_STEP) * 100, 6)) / 100
        flags = _flag(cfg, new, f"{f:g} − {BLIND_STEP} → {new:.2f}: the capture needs that share of the GPU outside "
                                "the static pool; the GPU's memory (nvidia-smi) would size the step exactly")
    elif f is None:
        # neither the fraction nor the server's start-up lines: SGLang's automatic value, lowered one step
        assumed, how = assumed_mem_fraction(cfg)
        new = math.floor(round((assumed - BLIND_STEP) * 100, 6)) / 100
        flags = [FlagChange("--mem-fraction-static", None, f"{new:.2f}",
                            f"{assumed:g} (SGLang's automatic value for {how}, assumed) − {BLIND_STEP} → {new:.2f}: "
                            "the capture needs that share of the GPU outside the static pool")]
    graph_bs = cfg.num("cuda_graph_max_bs")
    prefill = prefill_graph_capture(run, fails)
    bs_flag = prefill_tokens_flag(tl, cfg, run) if prefill else capture_bs_flag(tl, cfg, run, fails)
    if bs_flag is not None:
        flags.append(bs_flag)
    actions = [
        "Last resort: --disable-piecewise-cuda-graph (prefill runs without graphs; the decode graphs stay)." if prefill
        else "Last resort: --disable-cuda-graph (large decode slowdown).",
    ]
    if bs_flag is None and not prefill:
        actions.insert(0, "Or capture fewer graphs: --cuda-graph-max-bs" + (f" {int(graph_bs) // 2} (now {int(graph_bs)})"
                                                                            if graph_bs else " smaller")
                       + "; larger decode batches then run without graphs.")
    gpus = [oom["gpu"]] if oom.get("gpu") is not None else []
    reasons = [m for m, bad in (("--mem-fraction-static unknown", f is None), ("GPU memory unknown", gpu is None),
                                ("the failure does not say what it tried to allocate", tried is None)) if bad]
    lost = all(lost_message_stage(r) == "graph_capture" for r in fails)
    unhandled = not lost and all(nccl_cuda_failure_on_thin_capture(cfg, run, r) for r in fails)
    if unhandled:
        begun = [r["avail_bytes"] for r in of_kind(run, "cuda_graph_begin") if r.get("avail_bytes")]
        chunk, chunk_how = _chunk(cfg, run)
        reasons.append(f"NCCL said only 'unhandled cuda error': with {fmt_gib(min(begun))} free before the capture, "
                       f"less than the {fmt_gib(activation_reserve(chunk, int(cfg.num('tp_size') or 1), int(cfg.num('pp_size') or 1)))} "
                       "SGLang budgets outside the pool, its buffers' allocation is the likely call; under NCCL_DEBUG=INFO "
                       "NCCL's WARN says \"Cuda failure 'out of memory'\" if so")
    if lost:
        reasons.append("the traceback's exception line is not in the input: its frames place it in CUDA-graph capture, "
                       "where the usual failure is the allocator's OOM; a kernel or backend error on that line would "
                       "be a different cause")
    # NCCL's own buffers (its communicators, a collective's first use inside the capture) come from cudaMalloc outside
    # PyTorch's pool: failure_messages.md §4.1 ``Cuda failure 2 'out of memory'`` = NCCL could not allocate them
    nccl = [r for r in of_kind(run, "cuda_error_oom") if attrs(r).get("in_nccl")] or \
        [r for r in fails if _NCCL_OOM_RE.search(r.get("text") or "")]
    return make_finding(
        "SGL-GPU-002",
        summary=(("A rank died in CUDA-graph capture (its error line is cut from the input; most likely out of GPU "
                  "memory)" if lost else "A rank died in CUDA-graph capture of an NCCL 'unhandled cuda error' (a CUDA "
                  "call inside NCCL failed; with this little free, most likely its buffers' allocation)" if unhandled else "CUDA-graph capture ran out of GPU memory: NCCL could not allocate its "
                  "buffers ('Cuda failure … out of memory'), which live outside the static pool"
                  if nccl else "CUDA-graph capture ran out of GPU memory")
                 + f"{f' on GPU {gpus[0]}' if gpus else ''}"
                 + ((f" that --mem-fraction-static {f:g} reserves" if nccl and not lost else
                     f" with --mem-fraction-static {f:g}") if f is not None else "") + "; the server did not start."
                 + ((f" Lower it to {new:.2f}." if f is not None else f" Lower --mem-fraction-static to {new:.2f}.")
                    if new else "")),
        evidence=[*nccl[:1], *fails[:3], *cfg.evidence_rows("mem_fraction_static"),
                  *[tb for r in fails[:2] if (tb := enclosing_traceback(run, r)) is not None]],
        severity="high" if lost or unhandled else None,
        confidence="low" if lost or unhandled else "high" if not reasons else ("medium" if len(reasons) == 1 else "low"),
        confidence_reason="; ".join(reasons) or None,
        ranks=[x for x in (rank_of(oom),) if x is not None],
        gpus=gpus,
        figures={"mem_fraction_static": f, "failed_allocation_bytes": int(tried) if tried else None,
                 "free_at_failure_bytes": int(free_at) if free_at is not None else None,
                 "gpu_memory_bytes": int(gpu) if gpu else None, "corrected_mem_fraction_static": new},
        flags=flags,
        actions=actions,
    )


#: SGLang's own budget for memory outside the static pool (``server_args.py::_handle_gpu_memory_settings``, the
#: automatic --mem-fraction-static of 0.5.3+, PR #10975), in MiB: 512 of constant metadata, 1.5 per token of the
#: largest prefill chunk (``max(chunked_prefill_size, 2048)``) for its activations, 2 per captured batch size for the
#: graphs, and tp × pp / 8 GiB for the parallel groups. After capture the graphs are spent; what is left must still
#: hold the rest.
RESERVE_BASE_MIB = 512
RESERVE_PER_PREFILL_TOKEN_MIB = 1.5
RESERVE_MIN_CHUNK = MIN_PREFILL_CHUNK


def activation_reserve(chunk: float | None, tp: int = 1, pp: int = 1) -> float:
    """Bytes SGLang budgets outside the pool for a prefill's activations and the parallel groups (not the graphs).

    >>> round(activation_reserve(8192, tp=8) / 2**30, 2)
    13.5
    >>> round(activation_reserve(None) / 2**30, 2)
    3.62
    """
    tokens = max(chunk or 0, RESERVE_MIN_CHUNK)
    return (RESERVE_BASE_MIB + RESERVE_PER_PREFILL_TOKEN_MIB * tokens + tp * pp / 8 * 1024) * 2**20


def graph_max_bs(run: list[Row], cfg: ServerConfig) -> tuple[int | None, str]:
    """The largest captured batch size: the flag, the logged bs list (``Capture cuda graph bs [...]``), or the
    capture bar's ``bs=`` (0.4.9+; sglang_formats.md §3 "bs list", "progress")."""
    v = cfg.num("cuda_graph_max_bs")
    if v:
        return int(v), "--cuda-graph-max-bs"
    v = cfg.num("cuda_graph_max_bs_decode")  # 0.5.15+'s name (sglang_formats.md flag table)
    if v:
        return int(v), "--cuda-graph-max-bs-decode"
    lists = [b for r in of_kind(run, "cuda_graph_bs") for b in (attrs(r).get("bs") or []) if isinstance(b, int)]
    if lists:
        return max(lists), "the captured bs list"
    bars = [attrs(r).get("bs") for r in of_kind(run, "capture_progress") if isinstance(attrs(r).get("bs"), int)]
    if bars:
        return max(bars), "the capture bar's bs"
    return None, "unknown"


def _chunk(cfg: ServerConfig, run: list[Row]) -> tuple[float | None, str]:
    """The prefill chunk: the flag or server_args, else the sizing line's ``chunked_prefill_size=``."""
    v = cfg.num("chunked_prefill_size")
    if v:
        return v, "--chunked-prefill-size"
    for r in of_kind(run, "kv_sizing"):
        c = attrs(r).get("chunked_prefill_size")
        if isinstance(c, int | float) and c > 0:
            return float(c), "the sizing line"
    return None, f"chunk size not in the input: SGLang's floor of {RESERVE_MIN_CHUNK}"


def _thin(tl: Timeline, cfg: ServerConfig, run: list[Row]) -> Finding | None:
    headroom, head_row = _headroom(run)
    gpu, gpu_how = _gpu_memory(tl, run, [])
    if headroom is None or head_row is None:
        return None
    graphs = head_row.get("bytes") if head_row.get("kind") == "cuda_graph_end" else None
    chunk, chunk_how = _chunk(cfg, run)
    if gpu is not None:
        threshold = max(GIB, THIN_FRACTION * gpu)
        if headroom >= threshold:
            return None
        rule_words = f"below {fmt_gib(threshold)} (max(1 GiB, {THIN_FRACTION:.1%} of the GPU))"
    else:
        # the GPU's size unknown: SGLang's own budget for a prefill's activations is the measure
        threshold = activation_reserve(chunk, int(cfg.num("tp_size") or 1), int(cfg.num("pp_size") or 1))
        if headroom >= threshold:
            return None
        rule_words = (f"less than the {fmt_gib(threshold)} SGLang budgets outside the pool for a prefill of "
                      f"{int(max(chunk or 0, RESERVE_MIN_CHUNK))} tokens ({chunk_how})")
    f = cfg.num("mem_fraction_static")
    flags: list[FlagChange] = []
    new = None
    if f is not None and gpu is not None:
        target = margin_bytes(gpu)
        new = math.floor(round((f - (target - headroom) / gpu) * 100, 6)) / 100
        # the target sits above the threshold that flagged it, so a little drift after the change does not flag again
        flags = _flag(cfg, new, f"{f:g} − ({fmt_gib(target)} target headroom (max(1 GiB, {MARGIN_FRACTION:.0%} of "
                                f"{fmt_gib(gpu)}), above the {fmt_gib(threshold)} this finding flags) − "
                                f"{fmt_gib(headroom)} left) ÷ {fmt_gib(gpu)} ({gpu_how}) → {new:.2f}")
    max_bs, bs_how = graph_max_bs(run, cfg)
    if max_bs and max_bs > 128 and (gpu is None or not flags):
        new_bs = max(max_bs // 2, 64)
        flags.append(FlagChange("--cuda-graph-max-bs", cfg.flag_text("cuda_graph_max_bs"), str(new_bs),
                                f"graphs up to bs {max_bs} ({bs_how}) took {fmt_gib(graphs)}; capturing up to "
                                f"{new_bs} needs about half, left to activations; larger decode batches run without "
                                "graphs" if graphs else f"half of bs {max_bs} ({bs_how})"))
    reasons = ["a risk, not a failure: no CUDA OOM was seen in this run"]
    if gpu is None:
        reasons.append("the GPU's size is not in the input: judged against SGLang's own activation budget")
    return make_finding(
        "SGL-GPU-003",
        summary=(f"Only {fmt_gib(headroom)} of GPU memory was left after CUDA-graph capture"
                 + (f" (--mem-fraction-static {f:g})" if f is not None else "")
                 + f", {rule_words}: a long prefill or a large decode batch may hit CUDA OOM."
                 + (f" Lower --cuda-graph-max-bs to {flags[-1].new}." if flags and flags[-1].flag == "--cuda-graph-max-bs"
                    else "")),
        evidence=[head_row, *of_kind(run, "capture_progress")[:1], *cfg.evidence_rows("mem_fraction_static")],
        confidence="medium" if gpu is not None else "low",
        confidence_reason="; ".join(reasons),
        ranks=[x for x in (rank_of(head_row),) if x is not None],
        figures={"mem_fraction_static": f, "headroom_after_capture_bytes": int(headroom),
                 "threshold_bytes": int(threshold), "gpu_memory_bytes": int(gpu) if gpu else None,
                 "graph_memory_bytes": int(graphs) if graphs else None, "graph_max_bs": max_bs,
                 "corrected_mem_fraction_static": new},
        flags=flags,
        actions=[*_alternatives(cfg, run),
                 "Or lower --mem-fraction-static by a few hundredths (the KV pool shrinks by that share of the GPU)."],
    )

"""VLLM-KV-001/002/003: vLLM's KV cache cannot hold one request, has no room at all, or is too small for the load.

Samples::

    INFO 02-26 09:54:05 worker.py:267] model weights take 5.20GiB; non_torch_memory takes 0.03GiB; PyTorch activation peak memory takes 1.42GiB; the rest of the memory reserved for KV Cache is -1.05GiB.
    ValueError: The model's max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache (23648). ...
    WARNING 05-12 10:11:12 scheduler.py:1560] Sequence group 7 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. ... total_num_cumulative_preemption=51

>>> corrected_max_model_len(23648), corrected_max_model_len(3664), corrected_max_model_len(40100)
(23552, 3072, 39936)
>>> raised_utilization(0.9, needed_bytes=3.8 * 2**30, available_bytes=2.89 * 2**30, total_bytes=23.58 * 2**30)
0.95
>>> raised_utilization(0.9, needed_bytes=16 * 2**30, available_bytes=4.9 * 2**30, total_bytes=23.6 * 2**30) is None
True
"""

from __future__ import annotations

import math

from forensics.facts import engines
from forensics.facts.oom import memory_kind
from forensics.facts.rows import Row, attrs, rank_of, rows
from forensics.facts.vllm import VllmSettings, first_attr, gpu_total_bytes, of_kind, settings, vllm_runs
from forensics.model import Finding, FlagChange, Timeline

from ._common import GIB, fmt_gib, make_finding, old_value
from .held_at_start import foreign_processes
from .vllm_shared_gpu import no_room_rows, shared_refusal

MAX_SENSIBLE_UTILIZATION = 0.95  # above this nothing is left for NCCL, graphs and activation spikes
UTIL_MARGIN = 0.01  # on top of the exact raise, as vLLM's own docs advise
MIN_KV_RESERVE_BYTES = GIB // 2  # KV room the corrected utilization leaves at least (or 3 % of the GPU)
PREEMPTION_LOG_EVERY = 50  # V0 logs the 1st, 51st, 101st … preemption
MANY_PREEMPTIONS = 50
FULL_KV_USAGE = 0.95
_MIN_GUESS = 1024  # a max model len below twice this is not halved blind


def _util_flag() -> str:
    return engines.flag_for("vllm", "gpu_memory_fraction") or "--gpu-memory-utilization"


def corrected_max_model_len(capacity_tokens: int) -> int:
    """The largest round length the KV cache holds: a multiple of 1024 (of 16, the block size, below 2048)."""
    step = 1024 if capacity_tokens >= 2048 else engines.default_for("vllm", "block_size") or 16
    return max(int(capacity_tokens // step * step), int(step))


def raised_utilization(util: float, *, needed_bytes: float, available_bytes: float, total_bytes: float) -> float | None:
    """The utilization that gives the KV cache ``needed`` instead of ``available`` (+ margin); None above 0.95."""
    new = util + (needed_bytes - available_bytes) / total_bytes + UTIL_MARGIN
    new = math.ceil(round(new * 100, 6)) / 100
    return new if new <= MAX_SENSIBLE_UTILIZATION else None


def detect(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    for run in vllm_runs(tl):
        cfg = settings(tl, run)
        out += _too_small(tl, run, cfg) or _cut_at_cache_check(tl, run, cfg)
        out += _no_room(tl, run, cfg) or _weights_oom(tl, run, cfg)
        out += _preemption(run, cfg)
    return out


# ----------------------------------------------------------------------------------------------
# VLLM-KV-001: max model len above the KV cache


#: V0's scheduler (``core/scheduler.py::_schedule_prefills``, 0.2.7–0.10.2; failure_messages.md §6.2) warns
#: ``Input prompt ({N} tokens) + lookahead slots ({s}) is too long and exceeds the capacity of block_manager`` and
#: ignores the request: the prompt passed the max model len check, so max model len ≥ N > what the KV cache holds
_BLOCK_MANAGER = "capacity of block_manager"


def _block_manager_refusals(run: list[Row]) -> list[Row]:
    return [r for r in of_kind(run, "failure") if attrs(r).get("failure") == "request_refused"
            and _BLOCK_MANAGER in f"{attrs(r).get('message') or ''} {r.get('text') or ''}"]


def _one_request_fits(run: list[Row], mml: int) -> bool:
    """vLLM's own concurrency line says one request of ``mml`` tokens (or more) fits in the KV cache.

    The V1 engine logs ``Maximum concurrency for {max_model_len} tokens per request: {x}x``
    (vllm/v1/core/kv_cache_utils.py, ``get_max_concurrency_for_kv_cache_config``), computed from the blocks one
    request needs per KV-cache group: sliding-window and mamba layers need fewer blocks than the full length, so
    on a hybrid model the ``GPU KV cache size`` token count can be below the max model len while a full-length
    request still fits (x ≥ 1). V1 also checks this at start (``check_enough_kv_cache_memory``) and would have
    refused; the line is printed only after that check passed.
    """
    for r in of_kind(run, "kv_concurrency"):
        a = attrs(r)
        x, length = a.get("max_concurrency"), a.get("max_model_len")
        if x is not None and length is not None and int(length) >= mml and float(x) >= 1.0:
            return True
    return False


def _too_small(tl: Timeline, run: list[Row], cfg: VllmSettings) -> list[Finding]:
    hits = of_kind(run, "kv_cache_too_small")
    sizing = [r for r in of_kind(run, "kv_sizing") if r.get("tokens")]
    refused = _block_manager_refusals(run) if not hits else []
    mml = None
    if hits:
        mml = attrs(hits[0]).get("max_model_len")
    if mml is None:
        mml = cfg.num("max_model_len")
        if mml is None:
            v, _ = first_attr(run, "max_model_len", "kv_concurrency", "kv_sizing", "notice")
            mml = v
    prompt = max((int(r["tokens"]) for r in refused if r.get("tokens")), default=None)
    mml_is_bound = False
    if prompt and (mml is None or int(mml) < prompt):  # the prompt passed the length check: mml ≥ it
        mml, mml_is_bound = prompt, True
    if refused and not hits:
        hits = refused
    # no error in the excerpt: the sizing lines themselves may show a max length the cache cannot hold
    if not hits and not (sizing and mml and int(mml) > int(sizing[0]["tokens"])):
        return []
    if not hits and _one_request_fits(run, int(mml)):
        return []
    if not mml:
        return []
    a = attrs(hits[0]) if hits else {}
    capacity = a.get("kv_cache_tokens") or a.get("estimated_max_model_len")
    how = "the KV-cache token count vLLM names" if a.get("kv_cache_tokens") else \
        "vLLM's estimated maximum model length" if capacity else ""
    needed, available = a.get("needed_kv_bytes"), a.get("available_kv_bytes")
    if capacity is None and needed and available and mml:
        capacity = int(mml * available / needed)
        how = "max model len × available ÷ needed KV memory"
    if capacity is None and sizing:
        capacity = int(sizing[0]["tokens"])
        how = "the KV cache size line" + (" (GPU blocks × 16)" if attrs(sizing[0]).get("gpu_blocks") is not None else "")
    util, util_seen = cfg.value_or_default("gpu_memory_fraction")
    total, total_row, total_how = gpu_total_bytes(tl, run)
    kv_bytes, kv_row = first_attr(run, "kv_cache_bytes", "memory_profile")
    if kv_bytes is None:
        kv_bytes, kv_row = first_attr(run, "available_kv_bytes", "kv_memory")
    if needed is None and kv_bytes and capacity and mml:
        needed, available = kv_bytes * mml / capacity, kv_bytes  # KV bytes scale with tokens
    flags: list[FlagChange] = []
    mml_flag = engines.flag_for("vllm", "max_context") or "--max-model-len"
    if capacity:
        new_len = corrected_max_model_len(int(capacity))
        flags.append(FlagChange(mml_flag, str(int(mml)) if mml else None, str(new_len),
                                f"the KV cache holds {int(capacity)} tokens ({how}); rounded down → {new_len}"))
    elif a.get("figures_lost") and int(mml) > 2 * _MIN_GUESS:
        # the refusal's head alone (vllm_formats.md §3.1): the length is too long by an unknown amount
        new_len = corrected_max_model_len(int(mml) // 2)
        flags.append(FlagChange(mml_flag, str(int(mml)), str(new_len),
                                f"the refusal's figures are not in the input: half of {int(mml)} as a first step; "
                                "the full message names vLLM's estimated maximum model length"))
    new_util = None
    if util is not None and needed and available is not None and total:
        new_util = raised_utilization(util, needed_bytes=needed, available_bytes=available, total_bytes=total)
        if new_util is not None and new_util > util:
            flags.append(FlagChange(
                _util_flag(), old_value(util, util_seen), f"{new_util:.2f}",
                f"alternative: {fmt_gib(needed)} KV needed − {fmt_gib(available)} available over a "
                f"{fmt_gib(total)} GPU ({total_how}) + {UTIL_MARGIN} margin" + ("" if util_seen else
                                                                                  f"; {util:g} is vLLM's default")))
    tp, _ = cfg.value_or_default("tensor_parallel")
    actions = [
        f"Or keep the length and give the KV cache more room: more GPUs ({engines.flag_for('vllm', 'tensor_parallel')} "
        f"{int(tp or 1) * 2}: halves the KV bytes per token per GPU and the weights per GPU, needs twice the GPUs), "
        "--kv-cache-dtype fp8 (about twice the tokens, small accuracy cost), or a quantised checkpoint.",
    ]
    if new_util is None and needed and total:
        actions.insert(0, f"Raising {_util_flag()} alone cannot hold {int(mml)} tokens: it would need more than "
                          f"{MAX_SENSIBLE_UTILIZATION}.")
    reasons = []
    if a.get("figures_lost") and not capacity:
        reasons.append("the refusal's figures are cut off: the corrected length is a first step, not a measurement")
    if not hits:
        reasons.append("the error line is not in the input: inferred from the KV-cache size and the max model len")
    if not a.get("kv_cache_tokens") and not a.get("estimated_max_model_len") and sizing \
            and attrs(sizing[0]).get("block_size_assumed"):
        reasons.append("KV tokens from GPU blocks × 16 (the default block size)")
    if refused:
        reasons.append("V0 checks only at scheduling: the max model len is at least the refused prompt"
                       if mml_is_bound else "")
        reasons = [x for x in reasons if x]
    held = f" ({int(capacity)} tokens)" if capacity else ""
    if refused:
        lead = (f"A prompt of {prompt} tokens is more than the KV cache holds{held}: vLLM V0 ignores every such "
                "request (its block manager can never hold it) while the max model len"
                + ("" if mml_is_bound else f" ({int(mml)} tokens)") + " lets it through.")
    else:
        lead = (f"The max model len ({int(mml)} tokens) is larger than the KV cache holds{held}: vLLM refuses to start "
                "because one full-length request would not fit.")
    return [make_finding(
        "VLLM-KV-001",
        summary=(lead + (f" Set {mml_flag} {flags[0].new}" if flags else "")
                 + (f", or raise {_util_flag()} to {new_util:.2f}." if new_util and len(flags) > 1 else
                    "." if flags else "")),
        evidence=[*hits[:2], *sizing[:1], *of_kind(run, "kv_concurrency")[:1], *cfg.evidence_rows("max_model_len"),
                  *([kv_row] if kv_row else []), *([total_row] if total_row and total_row in run else [])],
        confidence="high" if hits and capacity else "medium",
        confidence_reason="; ".join(reasons) or None,
        ranks=[x for x in (rank_of(r) for r in hits) if x is not None],
        figures={"max_model_len": int(mml) if mml else None, "kv_cache_tokens": int(capacity) if capacity else None,
                 "needed_kv_bytes": int(needed) if needed else None,
                 "available_kv_bytes": int(available) if available is not None else None,
                 "gpu_memory_utilization": util, "gpu_memory_utilization_observed": util_seen,
                 "gpu_total_bytes": total},
        flags=flags,
        actions=actions,
    )]


#: the V0 worker's own report of a method that raised (worker_base.py ``Error executing method %s``, 0.4–0.6;
#: multiproc_worker_utils.py ``Exception in worker %s while processing method %s``, 0.5–0.10)
_CACHE_METHOD_FAILED = ("method initialize_cache", "processing method initialize_cache")


def _cut_at_cache_check(tl: Timeline, run: list[Row], cfg: VllmSettings) -> list[Finding]:
    """VLLM-KV-001 when V0's ``initialize_cache`` raised after sizing the cache, but the excerpt stops before the error.

    V0's ``Worker.initialize_cache`` (vllm vllm/worker/worker.py, 0.4–0.10) runs ``raise_if_cache_size_invalid``
    first — no blocks at all, or ``max_model_len > block_size × num_gpu_blocks`` — then allocates the cache engine
    and warms the model up (CUDA graph capture). With a positive block count the first check can only fail on the
    length, which is the common failure there; the two later steps fail with an error of their own (an OOM, a
    CUDA error), so the finding stays low and says what the missing line would settle."""
    sizing = [r for r in of_kind(run, "kv_sizing") if r.get("tokens") and int(r["tokens"]) > 0]
    # the worker's report is a plain log row, outside the run's lifecycle rows: the same file and run as the sizing
    said = [r for r in rows(tl, "log") if r.get("file") == sizing[0].get("file") and r.get("run") == sizing[0].get("run")
            and any(m in str(attrs(r).get("message") or "") for m in _CACHE_METHOD_FAILED)] if sizing else []
    # multiproc_worker_utils' line heads the traceback it logs, so it is the exception row's own text
    failed = said + [r for r in of_kind(run, "exception") if "initialize_cache" in (attrs(r).get("frames") or [])
                     or any(m in str(r.get("text") or "")[:300] for m in _CACHE_METHOD_FAILED)]
    if not sizing or not failed:
        return []
    # anything that names what was raised (an exception's type, a failure line, a CUDA error) is its own account
    if any(r.get("kind") == "exception" and attrs(r).get("exception_type") for r in run) \
            or of_kind(run, "failure", "cuda_error", "cuda_error_oom", "kv_no_room"):
        return []
    capacity = int(sizing[0]["tokens"])
    mml = cfg.num("max_model_len")
    if mml is not None and int(mml) <= capacity:
        return []  # the length fits: the check passed and a later step failed
    mml_flag = engines.flag_for("vllm", "max_context") or "--max-model-len"
    new_len = corrected_max_model_len(capacity)
    return [make_finding(
        "VLLM-KV-001",
        summary=(f"vLLM V0 failed in initialize_cache right after sizing a KV cache of {capacity} tokens, and the input "
                 "stops before the error line. The first thing initialize_cache does is refuse a max model len above "
                 f"what the cache holds{f' ({int(mml)} tokens here)' if mml else ''}: set {mml_flag} {new_len} "
                 "(or raise the GPU memory utilization). The full error settles it: an OOM or a CUDA error there "
                 "would be the cache allocation or the CUDA graph warm-up instead."),
        evidence=[*sizing[:1], *failed[:2], *cfg.evidence_rows("max_model_len")],
        confidence="low",
        confidence_reason="the exception's own line is not in the input: inferred from the order of initialize_cache's "
                          "steps and the cache size" + ("; KV tokens from GPU blocks × 16 (the default block size)"
                                                        if attrs(sizing[0]).get("block_size_assumed") else ""),
        figures={"max_model_len": int(mml) if mml else None, "kv_cache_tokens": capacity},
        flags=[FlagChange(mml_flag, str(int(mml)) if mml else None, str(new_len),
                          f"the KV cache holds {capacity} tokens (the KV cache size line); rounded down → {new_len}")],
        actions=["Read the rest of the traceback: `The model's max seq len (…) is larger than the maximum number of "
                 "tokens that can be stored in KV cache (…)` confirms this; an out-of-memory error points at the cache "
                 "allocation or CUDA graph capture (try --enforce-eager)."],
    )]


# ----------------------------------------------------------------------------------------------
# VLLM-KV-002: no memory left for the KV cache at all


def _weights_oom(tl: Timeline, run: list[Row], cfg: VllmSettings) -> list[Finding]:
    """VLLM-KV-002 at its extreme: the GPU ran out while the weights themselves were loading.

    vLLM loads the weights before it profiles or sizes anything (``load_model`` → the model's ``load_weights`` →
    a layer's ``weight_loader``; vllm_formats.md §3.5, the phase after ``Starting to load model`` and before
    ``Model loading took``), and no utilization caps them: an OOM there is the weights per GPU (plus the CUDA
    context) over the GPU — unless another process held part of it (SGL-GPU-006 says so)."""
    ooms = [r for r in of_kind(run, "cuda_oom", "cuda_error_oom")
            if attrs(r).get("during") == "weight_load" and memory_kind(r) == "device" and not foreign_processes(r)]
    if not ooms:
        return []
    first = next((r for r in ooms if r.get("total_bytes")), ooms[0])
    total = first.get("total_bytes")
    used = first.get("used_bytes") or attrs(first).get("allocated_by_pytorch_bytes")
    tp, tp_seen = cfg.value_or_default("tensor_parallel")
    tp_flag = engines.flag_for("vllm", "tensor_parallel") or "--tensor-parallel-size"
    flags = [FlagChange(tp_flag, f"{tp:g}" if tp_seen else None, str(int(tp or 1) * 2),
                        "halves the weights per GPU" + ("" if tp_seen else f" ({int(tp or 1)} assumed)"))]
    return [make_finding(
        "VLLM-KV-002",
        summary=("vLLM ran out of GPU memory while loading the weights"
                 + (f" ({fmt_gib(used)} in use of the {fmt_gib(total)} GPU)" if used and total else "")
                 + ": the weights per GPU at this parallelism do not fit, so nothing is left for activations or "
                 f"the KV cache. Spread them over more GPUs ({tp_flag} {flags[0].new}) or load a smaller checkpoint."),
        evidence=[*ooms[:2], *of_kind(run, "init_failed", "exception", "engine_dead")[:3]],
        confidence="high" if tp_seen else "medium",
        confidence_reason=None if tp_seen else "the tensor-parallel size is not in the input (1 assumed)",
        ranks=[x for x in (rank_of(r) for r in ooms) if x is not None],
        gpus=[r["gpu"] for r in ooms if r.get("gpu") is not None],
        figures={"during": "weight_load", "gpu_total_bytes": total, "in_use_bytes": used, "tensor_parallel_size": tp},
        flags=flags,
        actions=["Or serve a quantised checkpoint (FP8 halves bf16 weights, 4-bit quarters them), or offload part of "
                 f"the weights to host RAM ({engines.flag_for('vllm', 'cpu_offload_per_gpu') or '--cpu-offload-gb'}, "
                 "slower).",
                 f"Do not change {_util_flag()} for this: it sizes the KV cache after the weights, not the weights."],
    )]


def _no_room(tl: Timeline, run: list[Row], cfg: VllmSettings) -> list[Finding]:
    hits, prof, zero = no_room_rows(run)
    if not (hits or prof or zero):
        return []
    if shared_refusal(tl, run)[0]:
        return []  # another process on the GPU was charged to the budget: VLLM-GPU-021, not a higher utilization
    kv = next((attrs(r).get("available_kv_bytes") for r in hits if attrs(r).get("available_kv_bytes") is not None),
              None)
    if kv is None and prof:
        kv = attrs(prof[0]).get("kv_cache_bytes")
    deficit = max(-(kv or 0), 0)
    util, util_seen = cfg.value_or_default("gpu_memory_fraction")
    weights, wrow = first_attr(run, "weights_bytes", "memory_profile", "weight_load_end")
    total, total_row, total_how = gpu_total_bytes(tl, run)
    total_is_bound = False
    if total is None and weights and util and kv is not None:
        # budget = total × util = non-KV + KV ≥ weights + KV: the GPU is at least this large
        total = int((weights + kv) / util)
        total_is_bound, total_how = True, "at least (weights + KV) ÷ utilization"
    flags: list[FlagChange] = []
    actions: list[str] = []
    new_util = None
    if util is not None and total:
        reserve = max(MIN_KV_RESERVE_BYTES, 0.03 * total)
        new_util = math.ceil(round((util + (deficit + reserve) / total) * 100, 6)) / 100
        why = (f"{fmt_gib(deficit)} short + {fmt_gib(reserve)} for the KV cache over a "
               f"{'≥ ' if total_is_bound else ''}{fmt_gib(total)} GPU ({total_how})"
               + ("" if util_seen else f"; {util:g} is vLLM's default"))
        if new_util <= MAX_SENSIBLE_UTILIZATION:
            flags.append(FlagChange(_util_flag(), old_value(util, util_seen), f"{new_util:.2f}", why + f" → {new_util:.2f}"))
        elif util < MAX_SENSIBLE_UTILIZATION:
            flags.append(FlagChange(_util_flag(), old_value(util, util_seen), f"{MAX_SENSIBLE_UTILIZATION:.2f}",
                                    why + f" would need {new_util:.2f}: take {MAX_SENSIBLE_UTILIZATION} and shrink "
                                    "the activation peak too"))
            new_util = None
    blind_default = False
    if new_util is None and not flags and util is not None and util_seen and total is None and util < 0.9:
        # a budget set well below vLLM's default: raising it is the first step even without the GPU's size
        new_util = min(max(0.9, round(util + 0.1, 2)), MAX_SENSIBLE_UTILIZATION)
        flags.append(FlagChange(_util_flag(), old_value(util, util_seen), f"{new_util:.2f}",
                                f"only {util:g} of the GPU was the budget for weights, activations and the KV cache; "
                                f"{new_util:.2f} (the GPU's size is not in the input: `nvidia-smi --query-gpu="
                                "memory.total --format=csv` gives the exact step)"))
    elif new_util is None and not flags and hits and util is not None and not util_seen \
            and util < MAX_SENSIBLE_UTILIZATION:
        # the error itself says "Try increasing `gpu_memory_utilization`" (vllm_formats.md §3.2, 0.2.0-0.33.0): at the
        # default budget the step to the sensible ceiling is the engine's own first fix; fewer tokens per step too
        new_util, blind_default = MAX_SENSIBLE_UTILIZATION, True
        flags.append(FlagChange(_util_flag(), None, f"{new_util:.2f}",
                                f"vLLM's own advice ('Try increasing `gpu_memory_utilization`'): from its default "
                                f"{util:g} to {new_util:.2f}, the most that leaves room for NCCL and graph capture "
                                "(the GPU's size is not in the input to say whether that is enough)"))
    if (new_util is None or blind_default) and cfg.engine_generation != "V0":
        # V1's profile run processes max_num_batched_tokens at once: its activation peak scales with it
        bt_flag = engines.flag_for("vllm", "max_batched_tokens") or "--max-num-batched-tokens"
        old_bt = cfg.num("max_num_batched_tokens")
        big_gpu = total is not None and total >= 70 * GIB
        floor_bt = 1024 if big_gpu else 256  # vLLM requires max_num_batched_tokens ≥ max_num_seqs (its default)
        seqs = cfg.num("max_num_seqs")
        floor_bt = int(seqs) if seqs else floor_bt
        if old_bt is None:
            old_bt = 8192 if big_gpu else 2048
            old_txt = None
        else:
            old_txt = f"{old_bt:g}"
        if old_bt > floor_bt:
            flags.append(FlagChange(bt_flag, old_txt, str(floor_bt),
                                    f"the profiled activation peak scales with the tokens per step; {floor_bt} is the "
                                    f"lowest vLLM accepts with --max-num-seqs {floor_bt}"
                                    + ("" if old_txt else f" (default {int(old_bt)} on this GPU class)")))
    if new_util is None or blind_default:
        actions.append("The weights nearly fill the GPU at this parallelism: use more GPUs "
                       f"({engines.flag_for('vllm', 'tensor_parallel')} ×2), a quantised checkpoint, or "
                       f"{engines.flag_for('vllm', 'cpu_offload_per_gpu')} (host RAM per GPU, slower).")
    actions += [
        f"Shrink the activation peak: lower {engines.flag_for('vllm', 'max_context')} (V0 profiles max(max model len, "
        f"2048) tokens) or {engines.flag_for('vllm', 'max_batched_tokens')}; --enforce-eager frees the CUDA-graph pool.",
        "Check that no other process holds GPU memory before the launch (nvidia-smi): V1 up to 0.9.0 counts it "
        "against the budget.",
    ]
    reasons = []
    if not util_seen:
        reasons.append(f"the utilization is vLLM's default ({util:g}), not read from the input")
    if total_is_bound:
        reasons.append("the GPU's size is not in the input: a lower bound from weights and KV memory")
    first = (hits or prof or zero)[0]
    return [make_finding(
        "VLLM-KV-002",
        summary=("The weights and activations leave no GPU memory for vLLM's KV cache"
                 + (f" ({fmt_gib(kv)} available)" if kv is not None else "")
                 + (f" under {_util_flag()} {util:g}" if util is not None else "")
                 + (f"; raise it to {flags[0].new}" if flags and flags[0].flag == _util_flag() and new_util else
                    "; raising the utilization alone is not enough" if flags or total else "")
                 + "."),
        evidence=[*hits[:2], *prof[:1], *zero[:1], *([wrow] if wrow else []),
                  *([total_row] if total_row is not None and total_row in run else []),
                  *of_kind(run, "init_failed")[:1], *cfg.evidence_rows("gpu_memory_utilization")],
        confidence="high" if not reasons else "medium",
        confidence_reason="; ".join(reasons) or None,
        ranks=[x for x in (rank_of(first),) if x is not None],
        figures={"available_kv_bytes": kv, "weights_bytes": weights, "gpu_total_bytes": total,
                 "gpu_total_is_lower_bound": total_is_bound or None, "gpu_memory_utilization": util,
                 "gpu_memory_utilization_observed": util_seen},
        flags=flags,
        actions=actions,
    )]


# ----------------------------------------------------------------------------------------------
# VLLM-KV-003: preemption storm


def _preemption(run: list[Row], cfg: VllmSettings) -> list[Finding]:
    warns = of_kind(run, "preemption")
    metrics = of_kind(run, "engine_metrics")
    v1_total = sum(int(attrs(r).get("preemptions") or 0) for r in metrics)
    logged = max((int(r["count"]) for r in warns if r.get("count") is not None), default=0)
    total = max(logged, len(warns) * PREEMPTION_LOG_EVERY - (PREEMPTION_LOG_EVERY - 1) if warns else 0, v1_total)
    full = [r for r in metrics if r.get("ratio") is not None and r["ratio"] >= FULL_KV_USAGE]
    swapped = [r for r in metrics if (attrs(r).get("swapped_reqs") or 0) > 0]
    # V0's scheduler (``core/scheduler.py::_preempt_by_swap``, 0.2–0.10.2; vllm_formats.md §3.4) raises "Aborted due to
    # the lack of CPU swap space" when a preempted group's blocks do not fit the CPU swap: the KV pressure's last step
    aborted = of_kind(run, "swap_exhausted")
    if not total and not swapped and not aborted:
        return []
    if aborted:
        return [_swap_aborted(run, cfg, aborted, warns, total)]
    peak = max((r["ratio"] for r in metrics if r.get("ratio") is not None), default=None)
    severity = "medium" if total >= MANY_PREEMPTIONS or (total and full) else "low"
    util, util_seen = cfg.value_or_default("gpu_memory_fraction")
    tp, tp_seen = cfg.value_or_default("tensor_parallel")
    seqs = cfg.num("max_num_seqs")
    flags: list[FlagChange] = []
    if util is not None and util < MAX_SENSIBLE_UTILIZATION:
        new = min(MAX_SENSIBLE_UTILIZATION, round(util + 0.05, 2))
        flags.append(FlagChange(_util_flag(), old_value(util, util_seen), f"{new:.2f}",
                                "more KV blocks if the start-up headroom allows (check graph capture memory)"
                                + ("" if util_seen else f"; {util:g} is vLLM's default")))
    if tp:
        flags.append(FlagChange(engines.flag_for("vllm", "tensor_parallel") or "--tensor-parallel-size",
                                f"{tp:g}", f"{int(tp) * 2}",
                                "halves KV bytes per token per GPU (GQA/MHA) and the weights per GPU; needs twice "
                                "the GPUs" + ("" if tp_seen else f"; {tp:g} assumed")))
    if seqs and seqs > 1:
        flags.append(FlagChange(engines.flag_for("vllm", "max_concurrent") or "--max-num-seqs", f"{seqs:g}",
                                str(max(int(seqs) // 2, 1)), "fewer sequences in flight need fewer KV blocks at once "
                                "(lower throughput, no recomputation)"))
    return [make_finding(
        "VLLM-KV-003",
        summary=(f"vLLM preempted running requests for lack of KV cache space (≈{total} preemptions"
                 + (", counted from V0's every-50th warning" if warns and not v1_total else "")
                 + ")" + (f", KV cache usage up to {peak:.0%}" if peak is not None else "")
                 + (f", {len(swapped)} interval(s) with swapped requests" if swapped else "")
                 + ". Preempted requests are recomputed or swapped: throughput suffers, the server stays up."),
        evidence=[*warns[:4], *full[-3:], *swapped[:2]],
        severity=severity,
        confidence="high" if warns or v1_total else "medium",
        ranks=[],
        figures={"preemptions": total, "preemption_warnings": len(warns) or None, "peak_kv_cache_usage": peak,
                 "full_kv_intervals": len(full) or None, "max_num_seqs": seqs},
        flags=flags,
        actions=["Give the KV cache more room (utilization, more GPUs, --kv-cache-dtype fp8) or admit fewer "
                 "sequences (--max-num-seqs); long generations need the most."],
    )]


def _swap_aborted(run: list[Row], cfg: VllmSettings, aborted: list[Row], warns: list[Row], total: int) -> Finding:
    """VLLM-KV-003 at its end: preemption by swap filled the CPU swap space and the engine aborted."""
    swap = cfg.num("swap_space")
    default_swap = engines.default_for("vllm", "host_kv_per_gpu")
    seqs = cfg.num("max_num_seqs")
    sflag = engines.flag_for("vllm", "host_kv_per_gpu") or "--swap-space"
    flags: list[FlagChange] = []
    if seqs and seqs > 1:
        flags.append(FlagChange(engines.flag_for("vllm", "max_concurrent") or "--max-num-seqs", f"{seqs:g}",
                                str(max(int(seqs) // 2, 1)), "fewer sequences in flight: fewer preempted at once, and "
                                "less to swap out"))
    size = swap if swap is not None else default_swap
    if size:
        flags.append(FlagChange(sflag, f"{size:g}" if swap is not None else None, f"{float(size) * 2:g}",
                                "twice the CPU swap per GPU" + ("" if swap is not None else f" ({size:g} GiB is the "
                                                               "default)") + "; host RAM must hold it × the GPUs"))
    return make_finding(
        "VLLM-KV-003",
        summary=("The KV cache ran out and vLLM swapped running requests to CPU until the swap space ("
                 + (f"{sflag} {swap:g} GiB per GPU" if swap is not None else f"{sflag}, default {default_swap:g} GiB per GPU"
                    if default_swap else sflag)
                 + ") was full too: the engine aborted ('Aborted due to the lack of CPU swap space')"
                 + (f" after ≈{total} preemptions" if total else "") + "."),
        evidence=[*aborted[:2], *warns[:3], *of_kind(run, "engine_dead", "exception")[:2]],
        severity="high",
        confidence="high",
        figures={"preemptions": total or None, "swap_space_gib": swap, "max_num_seqs": seqs, "aborted": True},
        flags=flags,
        actions=["Admit fewer sequences (--max-num-seqs) or give the GPU KV cache more room (higher "
                 "--gpu-memory-utilization if the headroom allows, more GPUs, --kv-cache-dtype fp8), so fewer requests "
                 "are preempted; or recompute instead of swapping (--preemption-mode recompute, in the V0 releases that have it).",
                 "A larger --swap-space only moves the limit: it is pinned host RAM per GPU, × the GPUs."],
    )

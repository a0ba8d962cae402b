"""VLLM-GPU-001: vLLM's ``--gpu-memory-utilization`` left too little GPU memory outside its budget.

The budget (weights + activations + KV cache) is sized at start-up; CUDA-graph capture (before 0.18's
estimate), sampler warm-up, NCCL buffers and run-time spikes live outside it. A CUDA OOM there is a
utilization too high for this GPU (the opposite of VLLM-KV-002). Sample::

    (VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470] RuntimeError: CUDA error: out of memory

VLLM-GPU-017 is the same start-up OOM in the encoder pass of V1's multimodal profile run: after ``Encoder cache
will be initialized with a budget of N tokens, and profiled with K <modality> items of the maximum feature size``
(vllm vllm/v1/worker/gpu_model_runner.py::profile_run (0.7-main)) the K largest items run through the encoder at
once, so the items' size and count, not the utilization, are what to change.

>>> lowered_utilization(0.941, tried_bytes=138 * 2**20, free_bytes=2.19 * 2**20, total_bytes=79.15 * 2**30)
0.91
>>> lowered_utilization(0.9, tried_bytes=None, free_bytes=None, total_bytes=None)
0.85
"""

from __future__ import annotations

import ast
import json
import math

from forensics.facts import engines
from forensics.facts.oom import (
    exceeds_device,
    fragmentation,
    memory_kind,
    startup_phase_of_frames,
    traceback_frames,
)
from forensics.facts.rows import attrs, rank_of
from forensics.facts.stages import served
from forensics.facts.vllm import gpu_total_bytes, of_kind, settings, vllm_runs
from forensics.model import Finding, FlagChange, Timeline

from ._common import fmt_binary, fmt_gib, make_finding, old_value
from .cuda_graph_headroom import fragmentation_flag, fragmentation_words
from .model_fit import weights_overflow_vllm

LOWER_MARGIN = 0.02  # below the exact shortfall, for the next spike
UNKNOWN_STEP = 0.05  # when the OOM gives no sizes: a CUDA-graph pool is 1–3 GiB, ~2–4 % of an 80 GB GPU
HEADROOM_PHASES = ("graph_capture", "sampler_warmup", "pooler_warmup", "forward", "kv_alloc", "warmup",
                   "after_capture", "profile", "after_kv_sizing", "compile", "startup_forward", "startup")
#: vLLM's words for an engine whose constructor raised: ``EngineCore failed to start.`` is logged by
#: vllm vllm/v1/engine/core.py::run_engine_core (0.8-main) only while ``engine_core`` is still None, i.e. from
#: ``EngineCore.__init__`` — the executor (workers, weights), then ``_initialize_kv_caches`` (profile run, KV cache
#: allocation, ``compile_or_warm_up_model``: CUDA graphs, sampler warm-up); the front-end's ``Engine core
#: initialization failed`` and the workers' ``WorkerProc failed to start`` report the same start-up (§3.6)
_NEVER_STARTED = ("EngineCore failed to start", "Engine core initialization failed", "EngineCore initialization failed",
                  "WorkerProc failed to start", "WorkerProc initialization failed", "Engine process failed to start")
#: phases where the CUDA graphs are being made or the compiled model first runs: vLLM's own capture message
#: (vllm/worker/model_runner.py ``capture_model``, 0.5–0.10: "If out-of-memory error occurs during cudagraph capture,
#: consider decreasing `gpu_memory_utilization` or switching to eager mode. You can also reduce the `max_num_seqs`")
#: names eager mode and fewer sequences as the other two ways out
CAPTURE_PHASES = ("graph_capture", "compile", "startup_forward", "warmup")
#: the KV sizing records (vllm_formats.md §2.6 ``Available KV cache memory``, §2.7 ``GPU KV cache size`` /
#: V0 ``# GPU blocks``): logged once the profile run is over and the budget is spent; what follows at start-up
#: (allocating the pool, CUDA-graph capture, sampler warm-up: v1/worker/gpu_worker.py ``initialize_from_config``
#: then ``compile_or_warm_up_model``) runs on what the budget left outside it
_KV_SIZED = ("kv_memory", "kv_sizing")
#: the profiling run's batch (vllm_formats.md §3.5 "profile run"; §4 --max-num-batched-tokens: "size of the profile
#: run ⇒ activation peak"): V1's ``profile_run``/``_dummy_run`` and V0's ``profile_run`` run one dummy batch of
#: max_num_batched_tokens tokens (max_num_seqs sequences) before the KV cache exists, so an OOM there is the
#: activations of that batch over what the weights left, and no utilization changes it
PROFILE_MIN_BATCHED_TOKENS = 2048
#: a release of the V0 engine, for V0's defaults when a record only V0 writes is all that says which engine ran
V0_RELEASE = (0, 6, 0)


def lowered_utilization(util: float, *, tried_bytes: float | None, free_bytes: float | None,
                        total_bytes: float | None) -> float:
    """The utilization that frees the failed allocation's shortfall (+ margin), rounded down to 0.01."""
    if tried_bytes and total_bytes:
        step = max(tried_bytes - (free_bytes or 0), 0) / total_bytes + LOWER_MARGIN
    else:
        step = UNKNOWN_STEP
    return max(math.floor(round((util - step) * 100, 6)) / 100, 0.5)


def _during(run: list, row: dict) -> str | None:
    """The OOM's phase; V0 logs the exception's repr first and its traceback (whose frames say) just after."""
    d = attrs(row).get("during")
    if d:
        return d
    line = row.get("line") or 0
    for r in of_kind(run, "exception"):
        if r.get("pid") == row.get("pid") and 0 <= (r.get("line") or 0) - line <= 3:
            return attrs(r).get("during")
    # no frames (a failure line read by the failure scan): the last lifecycle record before it says
    before = [r for r in run if r.get("file") == row.get("file") and (r.get("line") or 0) < line
              and r.get("kind") in ("cuda_graph_begin", "cuda_graph_end", "capture_progress", "engine_metrics",
                                    "server_ready", *_KV_SIZED)]
    if before:
        last = max(before, key=lambda r: r.get("line") or 0)
        if last["kind"] in _KV_SIZED:
            return "after_kv_sizing"
        return "graph_capture" if last["kind"] in ("cuda_graph_begin", "capture_progress") else "forward"
    # the message itself: memory "allocated in private pools (e.g., CUDA Graphs)" (PyTorch 2.4+, printed only when
    # non-zero; failure_messages.md §1.1, §1.3 {G}) means graphs were being or had been captured, so the KV cache
    # was already allocated and the OOM came from outside the budget
    if (attrs(row).get("private_pools_bytes") or 0) > 0:
        return "after_capture"
    return None


def detect(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    for run in vllm_runs(tl):
        # host memory that could not be pinned is not the GPU's; one request larger than the whole GPU no
        # utilization fits (SGL-GPU-012)
        ooms = [r for r in of_kind(run, "cuda_oom", "cuda_error_oom") if _placed(run, r) in HEADROOM_PHASES
                and not attrs(r).get("host_pinned") and not exceeds_device(r)]
        unplaced = not ooms and _fragment_ooms(tl, run)
        if unplaced:
            ooms = unplaced
        if not ooms or of_kind(run, "kv_no_room", "kv_cache_too_small"):
            continue  # an OOM after a KV failure is the failure's, not the headroom's
        at_start = all(_placed(run, r) == "startup" for r in ooms)
        if at_start and weights_overflow_vllm(tl, run):
            continue  # a model too big for its GPUs by name: the start-up OOM is the load's (SGL-GPU-007)
        cfg = settings(tl, run)
        first = next((r for r in ooms if r.get("bytes")), ooms[0])
        during = _placed(run, first) or "forward"
        util, util_seen = cfg.value_or_default("gpu_memory_fraction")
        total, _total_row, _how = gpu_total_bytes(tl, run)
        tried, free = first.get("bytes"), first.get("free_bytes")
        flags: list[FlagChange] = []
        uflag = engines.flag_for("vllm", "gpu_memory_fraction") or "--gpu-memory-utilization"
        if during == "profile":
            enc = _encoder_profile(run, first)
            out.append(_encoder_profile_oom(cfg, run, ooms, enc, tried, free, total) if enc is not None
                       else _profile_oom(cfg, run, ooms, tried, free, total))
            continue
        if util is not None:
            new = lowered_utilization(util, tried_bytes=tried, free_bytes=free, total_bytes=total)
            why = (f"frees the {fmt_binary(tried)} allocation that failed with {fmt_binary(free)} free on a "
                   f"{fmt_gib(total)} GPU"
                   f" + {LOWER_MARGIN} margin" if tried and total else
                   f"the OOM names no sizes: one step of {UNKNOWN_STEP} (a CUDA-graph pool is 1–3 GiB)")
            flags.append(FlagChange(uflag, old_value(util, util_seen), f"{new:.2f}",
                                    why + ("" if util_seen else f"; {util:g} is vLLM's default")))
        # the count is on the message's own row, which a traceback's header row of the same OOM may precede
        dummies = next((d for r in ooms if (d := attrs(r).get("dummy_requests"))), None)
        if during in ("sampler_warmup", "pooler_warmup") and dummies and int(dummies) > 1:
            # the warm-up samples max_num_seqs dummy requests at once (v1/worker/gpu_worker.py
            # ``_dummy_sampler_run``; the message's own advice: lower max_num_seqs or the utilization)
            flags.append(FlagChange(engines.flag_for("vllm", "max_concurrent") or "--max-num-seqs", str(int(dummies)),
                                    str(int(dummies) // 2),
                                    f"alternative: the warm-up samples {int(dummies)} dummy requests at once, one per "
                                    "--max-num-seqs; half of them need half the logits and sampler memory"))
        steps = cfg.num("num_scheduler_steps")
        if steps and steps > 1:
            flags.append(FlagChange(engines.flag_for("vllm", "scheduler_steps") or "--num-scheduler-steps", f"{steps:g}",
                                    "1", "multi-step scheduling keeps extra per-step buffers outside the budget"))
        hint = next((r for r in of_kind(run, "memory_profile") if attrs(r).get("kv_cache_memory_to_fit_bytes")), None)
        if hint is not None and not _negative_accounting(run):
            fit = int(attrs(hint)["kv_cache_memory_to_fit_bytes"])
            flags.append(FlagChange(
                "--kv-cache-memory", None, str(fit),
                f"vLLM's own start-up hint: a KV cache of {fmt_gib(fit)} keeps weights, activations, CUDA graphs and the "
                f"cache inside the requested budget (vllm_formats.md §2.6)"))
        seqs = cfg.num("max_num_seqs")
        alternatives = _capture_alternatives(cfg, total) if during in CAPTURE_PHASES and not _eager(cfg) else []
        flags += alternatives
        frag = fragmentation(first)
        actions = [] if alternatives else [
            f"Or keep the utilization and drop the CUDA graphs: {engines.flag_for('vllm', 'eager')} (slower decode), "
            f"or capture fewer/smaller graphs with a lower {engines.flag_for('vllm', 'max_concurrent')}"
            + (f" (now {seqs:g})" if seqs else "") + ".",
        ]
        if frag is None:
            actions.append("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps when much memory is reserved but "
                           "unallocated.")
        reasons = []
        if not util_seen:
            reasons.append(f"the utilization is vLLM's default ({util:g}), not read from the input")
        if not (tried and total):
            reasons.append("the OOM message gives no sizes: the step down is a rule of thumb")
        if during == "compile" and not of_kind(run, *_START_KINDS):
            reasons.append("no start-up or serving lines around the OOM: placed at start-up by its traceback alone, a "
                           "forward pass through vLLM's compilation layer in a run that served nothing")
        if at_start:
            reasons.append("placed at start-up by vLLM's own start-up failure line ('EngineCore failed to start', "
                           "'Engine core initialization failed'), with no frames or start-up lines: which step ran out — the weights, the profile run, the KV cache, CUDA-graph "
                           "capture or warm-up — is not in the input; one while loading the weights needs more GPUs "
                           "instead (VLLM-KV-002)")
        if unplaced:
            reasons.append("the lines around the OOM are not in the input (no start-up lines, no frames): taken as an "
                           "OOM while serving, the common case; one while loading the weights needs more GPUs instead "
                           "(VLLM-KV-002)")
        phase = {"graph_capture": "during CUDA-graph capture", "sampler_warmup": "while warming up the sampler",
                 "compile": "at start-up, in the compiled model's first passes (torch.compile and CUDA-graph "
                            "capture; nothing had been served)",
                 "startup_forward": "at start-up, in a forward pass before anything was served (compile, CUDA-graph "
                                    "capture or warm-up)",
                 "warmup": "at start-up, while compiling, capturing and warming up the model (after the KV cache)",
                 "after_capture": "after its CUDA graphs were captured (the OOM counts memory in graph pools)",
                 "forward": "while serving", "kv_alloc": "while allocating the KV cache",
                 "startup": "at start-up: vLLM reported its engine failed to start (nothing had been served)",
                 "after_kv_sizing": "after the KV cache was sized (allocating it, capturing CUDA graphs or warming "
                                    "up: all outside the profiled budget)"}.get(during, "at start-up")
        lowered = next((c.new for c in flags if c.flag == uflag), None)
        if frag is not None:
            flags.insert(0, fragmentation_flag(frag))
        out.append(make_finding(
            "VLLM-GPU-001",
            summary=(f"vLLM ran out of GPU memory {phase}, outside the budget of {uflag}"
                     + (f" {util:g}" if util is not None else "")
                     + (f" ({fmt_binary(tried)} requested, {fmt_binary(free)} free)" if tried else "")
                     + (f"; lower it to {lowered}" if lowered else "") + "."
                     + (fragmentation_words(frag) if frag is not None else "")),
            evidence=[*ooms[:3], *cfg.evidence_rows("gpu_memory_utilization")],
            confidence="high" if not reasons else "medium",
            confidence_reason="; ".join(reasons) or None,
            ranks=[x for x in (rank_of(r) for r in ooms) if x is not None],
            figures={"during": during, "gpu_memory_utilization": util, "gpu_memory_utilization_observed": util_seen,
                     "failed_allocation_bytes": tried, "free_bytes": free, "gpu_total_bytes": total},
            flags=flags,
            actions=actions,
        ))
    return out


def _placed(run: list, row: dict) -> str | None:
    """:func:`_during`, moved to start-up where the run served nothing: a forward pass through vLLM's compilation
    layer (``compile``: torch.compile and the CUDA-graph wrappers, facts/oom.py), or a forward pass that is not the
    engine step after start-up records with no serving record (``startup_forward``). An OOM line with no context at all stays unplaced (the
    common case, serving, is assumed by the caller and said)."""
    during = _during(run, row)
    if during not in (None, "forward"):
        return during
    nothing_served = not served(run)
    if during is None and nothing_served and memory_kind(row) == "device" and _never_started(run):
        return "startup"  # no frames, no start-up line before it: the engine's own words place it
    frames = traceback_frames(run, row)
    if frames and startup_phase_of_frames(frames, served=not nothing_served) == "compile":
        return "compile"
    # the engine step (``execute_model``, V0 worker/model_runner.py and V1 gpu_model_runner.py) runs scheduled
    # requests; start-up runs the model through profile_run/_dummy_run/capture_model instead, which place themselves
    if during == "forward" and nothing_served and of_kind(run, *_START_KINDS) \
            and not any(func == "execute_model" for _path, func in frames):
        return "startup_forward"
    return during


def _never_started(run: list) -> bool:
    """vLLM said its engine (or a worker) raised while starting (:data:`_NEVER_STARTED`)."""
    return any(attrs(r).get("reason") in _NEVER_STARTED for r in of_kind(run, "init_failed"))


def _eager(cfg) -> bool:
    v = cfg.values.get("enforce_eager")
    return v is True or str(v).strip().lower() in ("true", "1")


#: below this a GPU gets vLLM's smaller --max-num-seqs default, 256, in V0 and in V1 from 0.8.5 (engines.py note)
LARGE_GPU_BYTES = 70 * 2**30


def _capture_alternatives(cfg, total: float | None) -> list[FlagChange]:
    """--enforce-eager and a lower --max-num-seqs: the two other ways out vLLM's capture message names."""
    eflag = engines.flag_for("vllm", "eager") or "--enforce-eager"
    out = [FlagChange(eflag, None, "true",
                      "alternative: no CUDA graphs to capture and no graph pools outside the budget (slower decode); "
                      "vLLM's own capture message names eager mode")]
    seqs, seen = cfg.value_or_default("max_concurrent")
    if seqs is None and (cfg.engine_generation == "V0" or (total and total < LARGE_GPU_BYTES)):
        seqs = engines.default_for("vllm", "max_concurrent", version=V0_RELEASE)  # 256, V0's and a smaller GPU's
    if seqs and seqs >= 2:
        out.append(FlagChange(engines.flag_for("vllm", "max_concurrent") or "--max-num-seqs", old_value(seqs, seen),
                              str(int(seqs) // 2),
                              "alternative: the captured batch sizes stop at --max-num-seqs, so half of it captures "
                              "fewer and smaller graphs (the capture message's own advice)"
                              + ("" if seen else f"; {seqs:g} is vLLM's default")))
    return out


def _profile_oom(cfg, run: list, ooms: list, tried: float | None, free: float | None,
                 total: float | None) -> Finding:
    """VLLM-GPU-001 in the memory-profiling run: the dummy batch's activations did not fit beside the weights."""
    bflag = engines.flag_for("vllm", "max_batched_tokens") or "--max-num-batched-tokens"
    batched = cfg.num("max_num_batched_tokens")
    flags: list[FlagChange] = []
    if batched and batched > PROFILE_MIN_BATCHED_TOKENS:
        new = max(int(batched) // 2, PROFILE_MIN_BATCHED_TOKENS)
        flags.append(FlagChange(bflag, f"{batched:g}", str(new),
                                "halves the profiling batch and so its activation peak (prefills are chunked to it)"))
    mm_seqs = _multimodal_profile_seqs(cfg, run, ooms, tried, total)
    if mm_seqs is not None:
        flags.append(mm_seqs)
    mml = cfg.num("max_model_len")
    actions = [
        f"Lower {bflag}" + (f" (now {batched:g})" if batched else " (its default depends on the release and GPU)")
        + ": the profiling batch, and every prefill step after it, holds that many tokens' activations.",
        "Lower --max-num-seqs for many small sequences, and for multimodal models the items per prompt "
        "(--limit-mm-per-prompt): the profile run builds its dummy batch from them.",
        "Without chunked prefill the batch is the whole max model len"
        + (f" ({mml:g})" if mml else "") + ": lower --max-model-len or enable chunked prefill.",
        "Check the weights fit with room to spare (a larger GPU, more GPUs or a quantised checkpoint otherwise); "
        "--gpu-memory-utilization only sizes the KV cache afterwards and does not change this peak.",
    ]
    return make_finding(
        "VLLM-GPU-001",
        summary=("vLLM ran out of GPU memory in its memory-profiling run, before the KV cache existed: one dummy "
                 + (f"batch of {batched:g} tokens ({bflag})" if batched else f"batch the size of {bflag}") + " needed more activation memory "
                 "than the weights left" + (f" ({fmt_gib(tried)} requested, {fmt_gib(free)} free)" if tried else "")
                 + (f"; lower it to {flags[0].new}." if flags else ".")),
        # the engine's start-up failure and the exception that carried the OOM are this OOM's, not other failures
        evidence=[*ooms[:3], *of_kind(run, "init_failed", "exception", "engine_dead")[:3]],
        confidence="high" if flags else "medium",
        confidence_reason=None if flags else f"{bflag} is not in the input: the step down is not computed",
        ranks=[x for x in (rank_of(r) for r in ooms) if x is not None],
        figures={"during": "profile", "max_num_batched_tokens": batched, "failed_allocation_bytes": tried,
                 "free_bytes": free, "gpu_total_bytes": total},
        flags=flags,
        actions=actions,
    )


#: the multimodal encoder's frames in V1's profile run: the model's multimodal entry points (``get_multimodal_embeddings``
#: 0.7-0.11, ``embed_multimodal`` 0.12+, the ``_process_<modality>_input`` helpers of the vision-language models) and
#: the vision/audio towers (vllm vllm/v1/worker/gpu_model_runner.py::profile_run (0.7-main),
#: vllm vllm/model_executor/models/qwen2_5_vl.py (0.8-main))
_ENCODER_FUNCS = frozenset({"get_multimodal_embeddings", "embed_multimodal", "_execute_mm_encoder",
                            "_process_image_input", "_process_video_input", "_process_audio_input"})
_ENCODER_PATHS = ("vision", "visual", "vit_attn", "siglip", "/clip.py", "whisper")


def _encoder_profile(run: list, oom: dict) -> dict | None:
    """The encoder-cache record of V1's multimodal profile run when the OOM fell in its encoder pass: the traceback
    runs through the encoder, or (no frames) the record is the last start-up record before the OOM. An OOM whose
    frames are the decoder's dummy batch (``_dummy_run`` with no encoder frame) is the decoder's (VLLM-GPU-001)."""
    line = oom.get("line") or 0
    budget = [r for r in of_kind(run, "notice") if attrs(r).get("message_id") == "encoder_cache_budget"
              and r.get("file") == oom.get("file") and (r.get("line") or 0) < line]
    if not budget:
        return None
    rec = max(budget, key=lambda r: r.get("line") or 0)
    frames = traceback_frames(run, oom)
    if frames:
        if any(func in _ENCODER_FUNCS or any(p in path.lower() for p in _ENCODER_PATHS) for path, func in frames):
            return {**attrs(rec), "row": rec, "placed_by": "frames"}
        return None
    later = [r for r in run if r.get("file") == oom.get("file") and (rec.get("line") or 0) < (r.get("line") or 0) < line
             and r.get("kind") in _START_KINDS and r.get("kind") != "init_failed"]
    return None if later else {**attrs(rec), "row": rec, "placed_by": "order"}


def _limits(cfg) -> dict:
    """--limit-mm-per-prompt as a mapping (the args dump's dict or the command line's JSON), {} when not given."""
    v = cfg.values.get("limit_mm_per_prompt")
    if isinstance(v, str):  # the command line's JSON, or the args dump's Python repr
        try:
            v = json.loads(v)
        except ValueError:
            try:
                v = ast.literal_eval(v)
            except (ValueError, SyntaxError):
                return {}
    return dict(v) if isinstance(v, dict) else {}


def _encoder_profile_oom(cfg, run: list, ooms: list, enc: dict, tried: float | None, free: float | None,
                         total: float | None) -> Finding:
    """VLLM-GPU-017: the encoder pass of V1's multimodal profile run ran out of memory beside the weights.

    The pass runs ``items`` dummy items of the largest modality, each of the maximum feature size, through the
    encoder at once. items = min(budget // item tokens, max_num_seqs × the per-prompt limit), the budget being
    max(--max-num-batched-tokens, one item's tokens) (vllm vllm/multimodal/encoder_budget.py (0.11-main),
    vllm vllm/v1/core/encoder_cache_manager.py::compute_mm_encoder_budget (0.9-main)). So the levers are the item's
    size (the processor's max pixels or frames, or the dummy sizes --limit-mm-per-prompt takes from 0.11,
    vllm vllm/config/multimodal.py), the item count (the budget) and the modality profiled (0 for one
    the deployment does not take: the next largest is profiled instead)."""
    modality, items, budget = enc.get("modality") or "image", int(enc.get("mm_items") or 1), enc.get("encoder_budget_tokens")
    bflag = engines.flag_for("vllm", "max_batched_tokens") or "--max-num-batched-tokens"
    batched = cfg.num("max_num_batched_tokens")
    per_item = int(budget // items) if budget and items else None
    limits = _limits(cfg)
    flags: list[FlagChange] = []
    if items > 1 and budget:
        new = max(int(budget // 2), per_item or 0)
        flags.append(FlagChange(bflag, f"{batched:g}" if batched else None, str(new),
                                f"the encoder budget ({budget} tokens) is --max-num-batched-tokens when larger than one "
                                f"item ({per_item} tokens at most): {new} profiles {max(new // per_item, 1) if per_item else 1} "
                                f"{modality} item(s) instead of {items}"))
    old_limits = json.dumps(limits) if limits else None
    others = [m for m in limits if m != modality and limits[m]]
    new_limits = json.dumps({**limits, modality: 0}) if limits else json.dumps({modality: 0})
    flags.append(FlagChange("--limit-mm-per-prompt", old_limits, new_limits,
                            (f"if this deployment takes no {modality}: vLLM then profiles the next largest modality "
                             f"({', '.join(others)}) instead" if others else
                             f"to confirm: a start with no {modality} input skips the encoder's dummy batch; to keep "
                             f"{modality}s, shrink the profiled item instead (the actions)")))
    item_words = f"{items} {modality} item{'s' if items != 1 else ''} of the largest size"
    actions = [
        f"Make the largest {modality} smaller, which sizes the profiled item: the processor's maximum pixels "
        "(--mm-processor-kwargs, e.g. max_pixels for Qwen-VL; fewer frames for video), or from vLLM 0.11 the dummy "
        f"size in --limit-mm-per-prompt ('{{\"{modality}\": {{\"count\": N, \"width\": W, \"height\": H}}}}').",
        f"Lower {bflag}" + (f" (now {batched:g})" if batched else "") + " when more than one item was profiled: the "
        "encoder budget, and so the item count, follows it.",
        "Set the count of a modality the deployment does not take to 0 in --limit-mm-per-prompt.",
        "--gpu-memory-utilization does not change this peak: the profile run measures it before the KV cache is sized.",
    ]
    return make_finding(
        "VLLM-GPU-017",
        summary=(f"vLLM ran out of GPU memory profiling the multimodal encoder, before the KV cache existed: the dummy "
                 f"batch of {item_words}"
                 + (f" ({budget} tokens)" if budget else "") + " did not fit beside the weights"
                 + (f" ({fmt_gib(tried)} requested, {fmt_gib(free)} free)" if tried else "")
                 + f". Shrink the largest {modality} (the processor's max pixels or frames) or, with fewer items, "
                 + (f"{bflag} {flags[0].new}." if items > 1 and budget else f"set {modality} to 0 in --limit-mm-per-prompt.")),
        evidence=[enc["row"], *ooms[:3], *of_kind(run, "init_failed", "exception", "engine_dead")[:2]],
        confidence="high" if enc.get("placed_by") == "frames" else "medium",
        confidence_reason=None if enc.get("placed_by") == "frames" else (
            "no frames: placed in the encoder pass by the encoder-cache line being the last start-up line before the "
            "OOM; the decoder's dummy batch runs next with no line of its own"),
        ranks=[x for x in (rank_of(r) for r in ooms) if x is not None],
        figures={"during": "profile_encoder", "modality": modality, "mm_items": items, "encoder_budget_tokens": budget,
                 "max_num_batched_tokens": batched, "failed_allocation_bytes": tried, "free_bytes": free,
                 "gpu_total_bytes": total},
        flags=flags,
        actions=actions,
    )


def _multimodal_profile_seqs(cfg, run: list, ooms: list, tried: float | None, total: float | None) -> FlagChange | None:
    """--max-num-seqs for V0's multimodal profiling run, which builds max_num_seqs dummy sequences and gives each the
    largest multimodal input (worker/enc_dec_model_runner.py ``profile_run``: one encoder input per sequence; the
    decoder-only model_runner.py caps the count at max_num_batched_tokens ÷ the items' tokens): the activation
    peak scales with the sequence count, so halving it halves the encoder's part.

    The figures bound the step from above: at the failure the activations already held the memory PyTorch had
    allocated beyond the weights, plus the request; the run had not finished, so its full peak is larger still."""
    if not any(attrs(r).get("message_id") == "mm_profile_run" for r in of_kind(run, "notice")):
        return None
    seqs, seen = cfg.value_or_default("max_concurrent")
    if seqs is None:  # the notice is V0's own code: V0's default, whatever release it was
        seqs = engines.default_for("vllm", "max_concurrent", version=V0_RELEASE)
    if not seqs or seqs <= 1:
        return None
    cap, why_cap = seqs / 2, "half of it"
    weights = next((r.get("bytes") for r in of_kind(run, "weight_load_end") if r.get("bytes")), None)
    util = cfg.value_or_default("gpu_memory_fraction")[0]
    held = next((attrs(r).get("allocated_by_pytorch_bytes") for r in ooms if attrs(r).get("allocated_by_pytorch_bytes")),
                None)
    if weights and held and total and util and tried:
        peak_lb = held + tried - weights
        room = total * util - weights
        if peak_lb > 0 and room > 0 and seqs * room / peak_lb < cap:
            cap, why_cap = seqs * room / peak_lb, (
                f"{seqs:g} × the {fmt_gib(room)} the budget leaves beside {fmt_gib(weights)} of weights ÷ the "
                f"≥ {fmt_gib(peak_lb)} of activations already needed")
    new = 2 ** max(int(math.log2(max(cap, 1))), 0)
    return FlagChange(engines.flag_for("vllm", "max_concurrent") or "--max-num-seqs", old_value(seqs, seen), str(new),
                      f"the multimodal profiling run builds one dummy sequence per --max-num-seqs, each with the "
                      f"largest multimodal input; the largest power of two ≤ {why_cap}. An upper bound: the run "
                      "had not finished when it failed, so halve again if it fails the same way")


#: vLLM's start-up records: a run that holds any was not cut to its serving part, and its OOM's phase is read there
_START_KINDS = ("weight_load_begin", "weight_load_end", "memory_profile", "kv_memory", "kv_sizing", "cuda_graph_begin",
                "cuda_graph_end", "capture_progress", "init_failed", "kv_no_room", "kv_cache_too_small")


def _fragment_ooms(tl: Timeline, run: list) -> list:
    """Device OOMs of a run cut to the failure: no frame, no record before them and no start-up record at all.

    Serving OOMs are by far the common case (the start-up ones name their phase in frames or follow a start-up
    line); the finding says it assumed. A model too big for its GPUs by name places it in the load (SGL-GPU-007)."""
    if of_kind(run, *_START_KINDS) or weights_overflow_vllm(tl, run):
        return []
    return [r for r in of_kind(run, "cuda_oom", "cuda_error_oom") if _during(run, r) is None
            and memory_kind(r) == "device" and not exceeds_device(r)]


def _negative_accounting(run: list) -> bool:
    """A start-up account with a negative CUDA-graph figure: its derived hints are not to be acted on (VLLM-GPU-002)."""
    return any((attrs(r).get("graph_bytes") or 0) < 0 for r in of_kind(run, "memory_profile", "cuda_graph_end"))

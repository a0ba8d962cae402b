"""SGL-GPU-007: the model's weights per GPU are larger than the GPU.

Sources: SGL-GPU-007 compares parameters × bytes ÷ (TP × PP) with the GPU's capacity; the weights are loaded
before any pool (reference/sglang_formats.md §3, reference/vllm_formats.md §2.3) and fail with the allocator
OOM of reference/failure_messages.md §1.1.

When no start-up line says what the weights took (a fragment, a ticket), the model's name often does:
``gpt-oss-120b-bf16`` is 120 × 10^9 parameters at 2 bytes, 223.5 GiB, so TP2 puts 111.8 GiB on each
79.1 GiB H100 and the load fails with a CUDA OOM whatever ``--mem-fraction-static`` says. The estimate
is parameters × bytes per parameter (from the name's precision tag or ``--quantization``) ÷ (TP × PP).

>>> model_weights("lmsys/gpt-oss-120b-bf16")
(240000000000.0, 120.0, 2.0, 'bf16 in the name')
>>> model_weights("TheBloke/Mixtral-8x7B-Instruct-v0.1-AWQ")[1:3]
(47.6, 0.5)
>>> model_weights("deepseek-ai/DeepSeek-V3") is None
True
>>> model_weights("Qwen/Qwen3-30B-A3B")[1], model_weights("some-org/MoE-40B-128E-Instruct") is None
(30.0, True)
>>> model_weights("google/gemma-3-12b-it", "fp8")[2], model_weights("Qwen/Qwen2.5-32B-Instruct-FP8", "fp8")[2]
(2.0, 1.0)
>>> tp_that_fits(240e9, 79.1 * 2**30)
4

The load lines say it without a name when the GPUs of a tensor-parallel group differ: tensor parallelism shards
the weights evenly (every rank builds the same layers with 1/tp of each parallel linear layer), so the weight-load
delta of a rank that finished loading — ``Load weight begin. avail mem=A`` minus ``Load weight end … avail mem=B``,
or the ``mem usage=`` SGLang prints beside it (sglang_formats.md §3) — is every rank's shard. A rank whose free
memory at ``Load weight begin`` is below that shard and that never logs its ``Load weight end`` (or dies of an OOM
while loading) cannot hold it, whatever ``--mem-fraction-static`` says: the fix is GPUs of equal size, or a TP
layout whose shard the smallest GPU holds.
"""

from __future__ import annotations

import math
import re

from forensics.facts.gpu import gpu_capacity, target_load_rows
from forensics.facts.launch import launch_rows, server_config
from forensics.facts.oom import oom_phase
from forensics.facts.rows import Row, attrs, rank_of
from forensics.facts.runs import iter_runs, of_kind
from forensics.facts.vllm import gpu_total_bytes, is_vllm_launch, settings, vllm_runs
from forensics.facts.vllm import of_kind as vllm_of_kind
from forensics.model import Finding, FlagChange, Timeline

from ._common import fmt_gib, make_finding, tag_run
from .fatal_other import failure_class

#: weights may fill at most this share of a GPU and leave room for a KV pool worth serving from
USABLE_FOR_WEIGHTS = 0.8
_PARAMS = re.compile(r"(?<![\w.])(?:(\d+)x)?(\d+(?:\.\d+)?)\s*[bB](?![a-zA-Z0-9])")
#: mixture-of-experts names state one of three figures, and only two of them size the weights:
#: ``{experts}x{per-expert}B`` (Mixtral ``8x7B``: the nominal product, see _MOE_SHARE), ``{total}B-A{active}B`` (Qwen
#: ``30B-A3B``: the first figure is the total; the active one, after ``A``, is never read as a size), and
#: ``{active}B-{experts}E`` (Llama 4 ``17B-16E``/``17B-128E``: the *active* count, per the model cards; the total
#: depends on the expert width and is not in the name): a name of that form gives no estimate
#: From a number's first digit only: a later one fails as the first did, after rescanning the run (issue 25)
_MOE_ACTIVE = re.compile(r"(?<!\d)\d+[bB]-\d+E\b", re.I)
_PRECISION = (
    (re.compile(r"fp32|float32", re.I), 4.0, "fp32"),
    (re.compile(r"(?:^|[-_/.])(?:bf16|fp16|float16|half)(?:$|[-_/.])", re.I), 2.0, "bf16"),
    (re.compile(r"fp8|int8|w8a8|8bit|w8a16|q8", re.I), 1.0, "8-bit"),
    (re.compile(r"int4|awq|gptq|nvfp4|mxfp4|fp4|4bit|w4a16|q4|bnb", re.I), 0.5, "4-bit"),
)
#: ``--quantization`` methods that quantize a 16-bit checkpoint while loading rather than read a quantized one:
#: SGLang's and vLLM's ``Fp8LinearMethod.create_weights`` allocates ``params_dtype`` (not fp8) weights unless
#: ``is_checkpoint_fp8_serialized`` (``layers/quantization/fp8.py``), and quantizes them after the load
_ONLINE = re.compile(r"fp8$", re.I)
#: share of a Mixtral-style NxM model's nominal N×M that its weights really hold (attention is shared)
_MOE_SHARE = 0.85


def model_weights(name: str | None, quantization: str | None = None) -> tuple[float, float, float, str] | None:
    """(bytes, billions of parameters, bytes per parameter, where the precision came from), or None."""
    if not name:
        return None
    base = str(name).rstrip("/").rsplit("/", 1)[-1]
    if _MOE_ACTIVE.search(base):
        return None
    m = _PARAMS.search(base)
    if not m:
        return None
    billions = float(m.group(2)) * (int(m.group(1)) * _MOE_SHARE if m.group(1) else 1)
    if billions < 0.1 or billions > 5000:
        return None
    per_param, how = 2.0, "assumed bf16 (no precision in the name)"
    for rx, size, label in _PRECISION:
        if rx.search(base):
            per_param, how = size, f"{label} in the name"
            break
    else:
        if quantization and _ONLINE.match(str(quantization).strip()):
            # the checkpoint is 16-bit: each layer's weights are created in the model dtype, loaded, and only then
            # quantized (process_weights_after_loading), so loading peaks at the 16-bit size
            how = ("assumed 16-bit checkpoint, quantized to fp8 only after loading (online --quantization fp8: the "
                   "16-bit weights are allocated first)")
        elif quantization:
            for rx, size, label in _PRECISION:
                if rx.search(str(quantization)):
                    per_param, how = size, f"{label} from --quantization"
                    break
    billions = round(billions, 2)
    return billions * 1e9 * per_param, billions, per_param, how


def tp_that_fits(weights: float, gpu_bytes: float) -> int:
    """The smallest power-of-two TP size whose per-GPU share of the weights fits the usable part of a GPU."""
    need = weights / (USABLE_FOR_WEIGHTS * gpu_bytes)
    return 1 << max(math.ceil(math.log2(max(need, 1.0))), 0)


def _gpu_bytes(tl: Timeline, run: list[Row]) -> tuple[float | None, str]:
    found = gpu_capacity(tl, run)
    if found[0] is not None:
        return found
    begin = [r["avail_bytes"] for r in of_kind(run, "weight_load_begin") if r.get("avail_bytes")]
    if begin:
        return float(max(begin)), "free memory before the weights were loaded"
    return None, "unknown"


def _failed(run: list[Row]) -> list[Row]:
    """What says the start-up failed: an OOM, a start-up death, a cut traceback in the model's set-up."""
    out = of_kind(run, "cuda_oom", "cuda_error_oom", "not_enough_memory", "weights_no_kv_room")
    out += [r for r in of_kind(run, "failure") if failure_class(r) in ("startup_failed", "process_exit", "traceback_cut")]
    return out


def detect(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    for ref, run in iter_runs(tl):
        short = _shard_over_a_rank(tl, run)
        if short is not None:
            out.append(tag_run(short, ref))
            continue
        failed = _failed(run)
        if not failed or of_kind(run, "cuda_graph_end", "decode_batch", "prefill_batch", "server_ready"):
            continue  # a server that got past capture had its weights in memory
        cfg = server_config(tl, run)
        model = cfg.get("model_path") or cfg.get("model")
        gpu, gpu_how = _gpu_bytes(tl, run)
        # failure lines outside any engine's log pool here; a vLLM launch (an ``LLM(...)`` script) names its flags
        launched = {attrs(r).get("engine") for r in launch_rows(tl)} - {None}
        found = _overflow(model, cfg.get("quantization"), int(cfg.num("tp_size") or 1), int(cfg.num("pp_size") or 1),
                          gpu, gpu_how, tp_stated=cfg.get("tp_size") is not None,
                          engine="vllm" if launched == {"vllm"} else "sglang",
                          evidence=[*failed[:3], *cfg.evidence_rows("model_path", "model", "tp_size")])
        if found is not None:
            out.append(tag_run(found, ref))
    out += _vllm(tl)
    return out


def weights_overflow(tl: Timeline, run: list[Row]) -> bool:
    """Whether the SGLang run's model, by its name, has more weights per GPU than the GPU usefully holds: an OOM
    of that run without start-up lines is placed in loading the weights (issue 21 item 5), not in serving."""
    cfg = server_config(tl, run)
    gpu, _how = _gpu_bytes(tl, run)
    return _beyond_gpu(cfg.get("model_path") or cfg.get("model"), cfg.get("quantization"), int(cfg.num("tp_size") or 1),
                       int(cfg.num("pp_size") or 1), gpu) is not None


#: vLLM records that prove the weights were in memory (``Model loading took``, the profile, the KV cache's size)
_VLLM_LOADED = ("weight_load_end", "memory_profile", "kv_memory", "kv_sizing", "cuda_graph_begin", "cuda_graph_end",
                "server_ready", "engine_metrics")


def _vllm(tl: Timeline) -> list[Finding]:
    """The same arithmetic for vLLM runs that died at start-up with an OOM before their weights were loaded: vLLM
    loads the weights first and caps them with nothing (vllm_formats.md §3.5), so weights ÷ (TP × PP) over the GPU
    fail the load whatever --gpu-memory-utilization says."""
    out: list[Finding] = []
    for run in vllm_runs(tl):
        ooms = [r for r in vllm_of_kind(run, "cuda_oom", "cuda_error_oom") if not attrs(r).get("host_pinned")]
        # a failure its frames place after the load (profiling, the KV cache, capture, serving) proves the weights fit
        after_load = any(attrs(r).get("during") not in (None, "weight_load", "init")
                         for r in vllm_of_kind(run, "cuda_oom", "cuda_error_oom", "exception"))
        if not ooms or after_load or vllm_of_kind(run, *_VLLM_LOADED):
            continue
        cfg = settings(tl, run)
        model, tp, total, total_how = _vllm_model_gpu(tl, run, cfg)
        found = _overflow(model, cfg.text("quantization"), int(tp or 1), int(cfg.num("pipeline_parallel_size") or 1),
                          float(total) if total else None, total_how, tp_stated=tp is not None, engine="vllm",
                          evidence=[*ooms[:3], *vllm_of_kind(run, "init_failed", "exception")[:2],
                                    *cfg.evidence_rows("model", "model_tag", "tensor_parallel_size")])
        if found is not None:
            out.append(found)
    return out


def _vllm_model_gpu(tl: Timeline, run: list[Row], cfg) -> tuple[str | None, float | None, int | None, str]:
    """A vLLM run's model name, tensor-parallel size, one GPU's memory and where that came from."""
    total, _row, total_how = gpu_total_bytes(tl, run)
    return (cfg.text("model") or cfg.text("model_tag") or _launched_model(tl), cfg.num("tensor_parallel_size"),
            total, total_how)


def weights_overflow_vllm(tl: Timeline, run: list[Row]) -> bool:
    """:func:`weights_overflow` for a vLLM run."""
    cfg = settings(tl, run)
    model, tp, total, _how = _vllm_model_gpu(tl, run, cfg)
    return _beyond_gpu(model, cfg.text("quantization"), int(tp or 1), int(cfg.num("pipeline_parallel_size") or 1),
                       float(total) if total else None) is not None


def _launched_model(tl: Timeline) -> str | None:
    for row in launch_rows(tl):
        a = attrs(row)
        if is_vllm_launch(row) and (a.get("model_tag") or (a.get("flags") or {}).get("--model")):
            return str(a.get("model_tag") or a["flags"]["--model"])
    return None


def _beyond_gpu(model: str | None, quantization: str | None, tp: int, pp: int,
                gpu: float | None) -> tuple[float, float, float, str] | None:
    """The name's weight estimate when the weights per GPU pass USABLE_FOR_WEIGHTS of the GPU, else None."""
    est = model_weights(model, quantization)
    if est is None or gpu is None or est[0] / (tp * pp) <= USABLE_FOR_WEIGHTS * gpu:
        return None
    return est


def _overflow(model: str | None, quantization: str | None, tp: int, pp: int, gpu: float | None, gpu_how: str, *,
              tp_stated: bool, engine: str, evidence: list[Row]) -> Finding | None:
    """SGL-GPU-007 when the model's estimated weights per GPU pass USABLE_FOR_WEIGHTS of the GPU."""
    est = _beyond_gpu(model, quantization, tp, pp, gpu)
    if est is None or gpu is None:
        return None
    weights, billions, per_param, how = est
    per_gpu = weights / (tp * pp)
    new_tp = tp_that_fits(weights / pp, gpu)
    tp_flag = "--tp-size" if engine == "sglang" else "--tensor-parallel-size"
    # in GiB throughout, the GPU's unit (CUDA's OOM message and nvidia-smi's MiB are binary)
    why = (f"{billions:g}B parameters × {per_param:g} bytes ({how}) = {fmt_gib(weights)}; "
           f"÷ {new_tp} GPUs{f' × PP {pp}' if pp > 1 else ''} = {fmt_gib(weights / (new_tp * pp))} per GPU ≤ "
           f"{USABLE_FOR_WEIGHTS:.0%} of {fmt_gib(gpu)} ({gpu_how})")
    flags = [FlagChange(tp_flag, str(tp) if tp_stated else None, str(new_tp), why)]
    assumed = [] if tp_stated else ["TP size not in the input (assumed 1)"]
    if "assumed" in how:
        assumed.append("precision not in the model's name (assumed bf16)")
    budget = "--mem-fraction-static" if engine == "sglang" else "--gpu-memory-utilization"
    return make_finding(
        "SGL-GPU-007",
        summary=(f"{model} needs about {fmt_gib(weights)} of weights ({billions:g}B × {per_param:g} bytes); over "
                 f"{tp * pp} GPU(s) that is {fmt_gib(per_gpu)} per GPU, "
                 + (f"more than the {fmt_gib(gpu)} GPU holds. " if per_gpu > gpu else
                    f"more than the {USABLE_FOR_WEIGHTS:.0%} of the {fmt_gib(gpu)} GPU that leaves room for a KV "
                    "cache and activations. ")
                 + f"Use {tp_flag} {new_tp} (or a quantised checkpoint)."),
        evidence=evidence,
        confidence="medium" if not assumed else "low",
        confidence_reason="; ".join(["the weights' size is estimated from the model's name (parameters × "
                                     "precision), not read from a load line", *assumed]),
        figures={"model": model, "params_billions": billions, "bytes_per_param": per_param,
                 "weights_bytes": int(weights), "weights_per_gpu_bytes": int(per_gpu), "gpu_memory_bytes": int(gpu),
                 "gpu_memory_from": gpu_how, "tp_size": tp, "corrected_tp_size": new_tp, "engine": engine},
        flags=flags,
        actions=[("Confirm the weights' size: the `Load weight end … mem usage=` line, or `du -sh` of the checkpoint "
                  "(safetensors files)." if engine == "sglang" else
                  "Confirm the weights' size: the `Model loading took … GiB` line, or `du -sh` of the checkpoint "
                  "(safetensors files)."),
                 "Or serve a quantised checkpoint (FP8 halves bf16 weights; 4-bit quarters them)"
                 + (": --quantization fp8 on a 16-bit checkpoint does not lower the load's peak, a checkpoint "
                    "already in FP8 does." if "online" in how else "."),
                 f"Changing {budget} does not help: the weights are loaded before the KV cache is sized."],
    )


def _by_rank(rows_: list[Row]) -> dict[int, Row]:
    out: dict[int, Row] = {}
    for r in rows_:
        rank = rank_of(r)
        if rank is not None and rank not in out:
            out[rank] = r
    return out


def _shard_over_a_rank(tl: Timeline, run: list[Row]) -> Finding | None:
    """SGL-GPU-007 from the load lines of a TP group whose GPUs differ: a rank that had less free memory when it
    began loading than the shard a finished rank loaded, and that did not finish (module docstring)."""
    if of_kind(run, "server_ready", "decode_batch", "prefill_batch"):
        return None  # every rank held its shard
    begins = {k: r for k, r in _by_rank(target_load_rows(run, "weight_load_begin")).items() if r.get("avail_bytes")}
    ends = _by_rank(target_load_rows(run, "weight_load_end"))
    shards = {}
    for rank, end in ends.items():
        used = end.get("bytes")
        if not used and rank in begins and end.get("avail_bytes") is not None:
            used = begins[rank]["avail_bytes"] - end["avail_bytes"]
        if used and used > 0:
            shards[rank] = float(used)
    if not shards or len(begins) < 2:
        return None
    done = min(shards, key=lambda k: shards[k])  # the smallest delta: what the shard at least is
    shard = shards[done]
    short = sorted(k for k, r in begins.items() if k not in ends and r["avail_bytes"] < shard)
    if not short:
        return None
    ooms = {rank_of(r): r for r in of_kind(run, "cuda_oom", "cuda_error_oom")
            if rank_of(r) in short and oom_phase(run, r)[0] in (None, "weight_load")}
    cfg = server_config(tl, run)
    tp = int(cfg.num("tp_size") or max(len(begins), max(begins) + 1))
    base, step = int(cfg.num("base_gpu_id") or 0), int(cfg.num("gpu_id_step") or 1)
    gpus = [int(ooms[k]["gpu"]) if k in ooms and ooms[k].get("gpu") is not None else base + k * step for k in short]
    small = min(short, key=lambda k: begins[k]["avail_bytes"])
    small_free = float(begins[small]["avail_bytes"])
    weights = shard * tp
    fits_tp = tp_that_fits(weights, small_free / USABLE_FOR_WEIGHTS)
    how = ("the mem usage its load end prints" if ends[done].get("bytes") else
           f"{fmt_gib(begins[done]['avail_bytes'])} free before − {fmt_gib(ends[done]['avail_bytes'])} after")
    names = ", ".join(f"TP{k} (GPU {g}: {fmt_gib(begins[k]['avail_bytes'])} free)"
                      for k, g in zip(short, gpus, strict=True))
    one = len(short) == 1
    died = ("died of an OOM while loading" if ooms else
            f"never logged {'its' if one else 'their'} Load weight end")
    return make_finding(
        "SGL-GPU-007",
        summary=(f"The GPUs of this TP {tp} group differ in free memory: every rank loads an equal shard of the "
                 f"weights, {fmt_gib(shard)} on TP{done} ({how}), and {names} had less than that free when "
                 f"{'it' if one else 'they'} began loading; {'it' if one else 'they'} {died}. Serve on GPUs that "
                 "each hold the shard (equal GPUs), or a TP layout whose shard the smallest GPU holds; "
                 "--mem-fraction-static does not change the weights."),
        evidence=[*(begins[k] for k in short), begins[done] if done in begins else ends[done], ends[done],
                  *ooms.values()][:6],
        confidence="high" if ooms else "medium",
        confidence_reason=None if ooms else (
            "the short rank's failure is not in the input (no OOM line; SGLang 0.1–0.2 logged it only with "
            "--log-level debug): inferred from its missing load end and the arithmetic"),
        ranks=short,
        gpus=gpus,
        figures={"shard_bytes": int(shard), "shard_from_rank": done, "weights_bytes": int(weights), "tp_size": tp,
                 "smallest_free_bytes": int(small_free), "short_ranks": short, "engine": "sglang"},
        flags=[],
        actions=[f"Use GPUs that each have at least {fmt_gib(shard)} free for the weights (plus room for the KV "
                 f"cache): pin the launch to equal GPUs with CUDA_VISIBLE_DEVICES, leaving out GPU "
                 f"{', '.join(str(g) for g in gpus)}, or free what holds memory there (nvidia-smi) when the GPUs "
                 "are the same model.",
                 f"Or a layout the smallest GPU holds: --tp-size {fits_tp} over GPUs of at least its size puts "
                 f"{fmt_gib(weights / fits_tp)} of weights on each ({fmt_gib(shard)} × {tp} ÷ {fits_tp}; at most "
                 f"{USABLE_FOR_WEIGHTS:.0%} of {fmt_gib(small_free)}), or a smaller or more quantised checkpoint."
                 if fits_tp > tp else
                 "Or a smaller or more quantised checkpoint whose shard the smallest GPU holds.",
                 "Changing --mem-fraction-static does not help: the weights are loaded before the KV pool is sized, "
                 "and tensor parallelism cannot shard unevenly."],
    )

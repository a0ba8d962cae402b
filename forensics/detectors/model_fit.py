"""SGL-GPU-007: the model's weights per GPU are larger than the GPU.

When no start-up line says what the weights took (a fragment, a ticket), the model's name often does:
``gpt-oss-120b-bf16`` is 120 × 10^9 parameters at 2 bytes, 240 GB, so TP2 puts 120 GB on each
80 GB GPU and the load fails with a CUDA OOM whatever ``--mem-fraction-static`` says. The estimate
is parameters × bytes per parameter (from the name's precision tag or ``--quantization``) ÷ (TP × PP).

>>> model_weights("lmsys/gpt-oss-120b-bf16")
(240000000000.0, 120.0, 2.0, 'bf16 in the name')
>>> model_weights("TheBloke/Mixtral-8x7B-Instruct-v0.1-AWQ")[1:3]
(47.6, 0.5)
>>> model_weights("deepseek-ai/DeepSeek-V3") is None
True
>>> tp_that_fits(240e9, 79.1 * 2**30)
4
"""

from __future__ import annotations

import math
import re

from forensics.facts.gpu import gpu_capacity
from forensics.facts.launch import server_config
from forensics.facts.rows import Row
from forensics.facts.runs import iter_runs, of_kind
from forensics.model import Finding, FlagChange, Timeline

from ._common import GIB, fmt_gb, fmt_gib, make_finding, tag_run
from .fatal_other import failure_class

#: weights may fill at most this share of a GPU and leave room for a KV pool worth serving from
USABLE_FOR_WEIGHTS = 0.8
_PARAMS = re.compile(r"(?<![\w.])(?:(\d+)x)?(\d+(?:\.\d+)?)\s*[bB](?![a-zA-Z0-9])")
_MOE_ACTIVE = re.compile(r"\d+[bB]-\d+E\b", re.I)  # Llama-4 "17B-16E": 17B active of many more: total unknown
_PRECISION = (
    (re.compile(r"fp32|float32", re.I), 4.0, "fp32"),
    (re.compile(r"(?:^|[-_/.])(?:bf16|fp16|float16|half)(?:$|[-_/.])", re.I), 2.0, "bf16"),
    (re.compile(r"fp8|int8|w8a8|8bit|w8a16|q8", re.I), 1.0, "8-bit"),
    (re.compile(r"int4|awq|gptq|nvfp4|mxfp4|fp4|4bit|w4a16|q4|bnb", re.I), 0.5, "4-bit"),
)
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
        if quantization:
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
        failed = _failed(run)
        if not failed or of_kind(run, "cuda_graph_end", "decode_batch", "prefill_batch", "server_ready"):
            continue  # a server that got past capture had its weights in memory
        cfg = server_config(tl, run)
        model = cfg.get("model_path") or cfg.get("model")
        est = model_weights(model, cfg.get("quantization"))
        gpu, gpu_how = _gpu_bytes(tl, run)
        if est is None or gpu is None:
            continue
        weights, billions, per_param, how = est
        tp = int(cfg.num("tp_size") or 1)
        pp = int(cfg.num("pp_size") or 1)
        per_gpu = weights / (tp * pp)
        if per_gpu <= USABLE_FOR_WEIGHTS * gpu:
            continue
        new_tp = tp_that_fits(weights / pp, gpu)
        why = (f"{billions:g}B parameters × {per_param:g} bytes ({how}) = {fmt_gb(weights)}; "
               f"÷ {new_tp} GPUs{f' × PP {pp}' if pp > 1 else ''} = {fmt_gb(weights / (new_tp * pp))} per GPU ≤ "
               f"{USABLE_FOR_WEIGHTS:.0%} of {fmt_gib(gpu)} ({gpu_how})")
        flags = [FlagChange("--tp-size", str(tp) if cfg.get("tp_size") is not None else None, str(new_tp), why)]
        assumed = [] if cfg.get("tp_size") is not None else ["TP size not in the input (assumed 1)"]
        if "assumed" in how:
            assumed.append("precision not in the model's name (assumed bf16)")
        out.append(tag_run(make_finding(
            "SGL-GPU-007",
            summary=(f"{model} needs about {fmt_gb(weights)} of weights ({billions:g}B × {per_param:g} bytes); over "
                     f"{tp * pp} GPU(s) that is {fmt_gb(per_gpu)} per GPU, more than the {fmt_gib(gpu)} GPU holds. "
                     f"Use --tp-size {new_tp} (or a quantised checkpoint)."),
            evidence=[*failed[:3], *cfg.evidence_rows("model_path", "model", "tp_size")],
            confidence="medium" if not assumed else "low",
            confidence_reason="; ".join(["the weights' size is estimated from the model's name (parameters × "
                                         "precision), not read from a load line", *assumed]),
            gpus=[r["gpu"] for r in failed if r.get("gpu") is not None],
            figures={"model": model, "params_billions": billions, "bytes_per_param": per_param,
                     "weights_bytes": int(weights), "weights_per_gpu_bytes": int(per_gpu), "gpu_memory_bytes": int(gpu),
                     "gpu_memory_from": gpu_how, "tp_size": tp, "corrected_tp_size": new_tp},
            flags=flags,
            actions=[f"Confirm the weights' size: the `Load weight end … mem usage=` line, or `du -sh` of the checkpoint "
                     f"({GIB and 'safetensors'} files).",
                     "Or serve a quantised checkpoint (FP8 halves bf16 weights; 4-bit quarters them).",
                     "Lowering --mem-fraction-static does not help: the weights are loaded before the KV pool is sized."],
        ), ref))
    return out

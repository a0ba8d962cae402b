"""SGL-GPU-004: the weights leave no GPU memory for the KV pool under ``--mem-fraction-static``.

The opposite of a headroom problem: the static fraction is too *small* for the model. Sample::

    [2025-11-20 09:18:03 TP0] Scheduler hit an exception: Traceback (most recent call last):
    ...
    RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.2

>>> raised_fraction(0.7412)
0.77
>>> raised_fraction(0.97) is None
True
>>> raised_blind(0.55), raised_blind(0.93), raised_blind(0.95)
(0.6, 0.95, None)
"""

from __future__ import annotations

import math

from forensics.facts.gpu import gpu_capacity, target_load_rows
from forensics.facts.launch import ServerConfig, server_config
from forensics.facts.oom import enclosing_traceback, oom_phase
from forensics.facts.rows import Row, attrs, rank_of
from forensics.facts.runs import has_kind, iter_runs, of_kind
from forensics.facts.sglang_defaults import FROM_GPU_SINCE, default_fraction_for_gpu, default_fraction_for_tp
from forensics.facts.versions import sglang_version, version_window
from forensics.model import Finding, FlagChange, Timeline

from ._common import fmt_gib, make_finding, tag_run

RAISE_MARGIN = 0.02  # above the minimum viable fraction, so a KV pool of useful size remains
MAX_SENSIBLE_FRACTION = 0.95  # above this there is no headroom left for graphs and activations


def raised_fraction(minimum: float) -> float | None:
    """The minimum viable fraction plus a margin, rounded up to 0.01; None when it cannot work."""
    new = math.ceil(round((minimum + RAISE_MARGIN) * 100, 6)) / 100
    return new if new <= MAX_SENSIBLE_FRACTION else None


#: without the weight-load lines the fraction is raised by this much (about 5 % of the GPU to the static pool)
BLIND_RAISE = 0.05


def raised_blind(f: float) -> float | None:
    """``f`` raised by :data:`BLIND_RAISE`, at most :data:`MAX_SENSIBLE_FRACTION`; None when already there."""
    if f >= MAX_SENSIBLE_FRACTION:
        return None
    return min(MAX_SENSIBLE_FRACTION, math.floor(round((f + BLIND_RAISE) * 100, 6)) / 100)


def sglang_default_fraction(tl: Timeline, run: list[Row], cfg: ServerConfig) -> tuple[float, str, float | None]:
    """SGLang's own --mem-fraction-static for this GPU and TP (forensics/facts/sglang_defaults.py), how it was
    found, and the reserve (bytes) it keeps outside the pool when the GPU's size gave it."""
    tp, pp = int(cfg.num("tp_size") or 1), int(cfg.num("pp_size") or 1)
    version, _where = sglang_version(tl)
    below = version_window(tl)[1]  # the log's formats bound it from above: older than that release
    older = version < FROM_GPU_SINCE if version else below is not None and below <= FROM_GPU_SINCE
    capacity, capacity_how = gpu_capacity(tl, run)
    if capacity and not older:
        spec = cfg.get("speculative_algorithm")
        value, reserve = default_fraction_for_gpu(
            capacity, tp=tp, pp=pp, chunk=cfg.num("chunked_prefill_size"), graph_bs=cfg.num("cuda_graph_max_bs"),
            dp_attention=cfg.enabled("enable_dp_attention"), dp=int(cfg.num("dp_size") or 1),
            speculative=str(spec) if spec not in (None, "None", "") else None)
        return value, f"its default for a {fmt_gib(capacity)} GPU at TP {tp}, {capacity_how}", reserve
    said = "" if cfg.get("tp_size") is not None else " assumed"
    return default_fraction_for_tp(tp), f"its default for TP {tp}{said}", None


def _minimum_from_log(run: list[Row], rows_: list[Row]) -> tuple[float | None, str]:
    for r in rows_:
        m = attrs(r).get("minimum_fraction")
        if isinstance(m, int | float):
            return float(m), "the minimum SGLang names"
    begin = [r["avail_bytes"] for r in target_load_rows(run, "weight_load_begin") if r.get("avail_bytes")]
    end = [r["avail_bytes"] for r in target_load_rows(run, "weight_load_end") if r.get("avail_bytes") is not None]
    if begin and end:
        pre, post = min(begin), min(end)
        return 1 - post / pre, f"1 − {fmt_gib(post)} free after weights ÷ {fmt_gib(pre)} before"
    # newer logs print what the weights took ("mem usage=") beside what was left: before = after + usage
    loaded = [r for r in of_kind(run, "weight_load_end") if r.get("avail_bytes") is not None and r.get("bytes")]
    if loaded:
        r = min(loaded, key=lambda x: x["avail_bytes"])
        used, post = float(r["bytes"]), float(r["avail_bytes"])
        return used / (used + post), (f"{fmt_gib(used)} of weights ÷ ({fmt_gib(used)} + {fmt_gib(post)} left after "
                                      "loading) free before")
    return None, "unknown"


def detect(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    for ref, run in iter_runs(tl):
        hits = of_kind(run, "not_enough_memory", "weights_no_kv_room")
        if server_config(tl, run).num("max_total_tokens") is not None:
            # a pool of a few tokens under a stated --max-total-tokens is that flag's doing (SGL-RUN-005), not the weights'
            hits = [r for r in hits if attrs(r).get("form") != "pool_too_small"]
        # "max_total_tokens=N is larger than the profiled value -M": the KV budget after the weights is negative,
        # and a forced --max-total-tokens then allocates a pool the GPU does not have
        hits += [r for r in of_kind(run, "kv_sizing") if attrs(r).get("warning") == "max_total_tokens_above_profiled"
                 and r.get("tokens") is not None and r["tokens"] <= 0]
        # (not the speculative draft's own load, after the target's pool took its share: SGL-GPU-014)
        target = [r for r in of_kind(run, "cuda_oom") if oom_phase(run, r)[0] != "draft_init"]
        load_oom = [r for r in target if attrs(r).get("during") in ("weight_load", "load")]
        if not load_oom and not has_kind(run, "weight_load_end", "cuda_graph_end"):
            # a CUDA OOM before the weights finished loading: the model does not fit these GPUs
            started = has_kind(run, "weight_load_begin")
            load_oom = target if started else []
        if not hits and not load_oom:
            continue
        cfg = server_config(tl, run)
        f = cfg.num("mem_fraction_static")
        if f is None:
            f = next((float(r["ratio"]) for r in hits if r.get("ratio") is not None), None)
        minimum, how = _minimum_from_log(run, hits)
        flags: list[FlagChange] = []
        by_default = False  # raised to SGLang's own default, not by a step
        new = raised_fraction(minimum) if minimum is not None and hits else None
        if new is not None and (f is None or new > f):
            flags.append(FlagChange("--mem-fraction-static", f"{f:g}" if f is not None else None, f"{new:.2f}",
                                    f"minimum viable {minimum:.4f} ({how}) + {RAISE_MARGIN} margin (a KV pool of "
                                    f"{RAISE_MARGIN:.0%} of the memory before the load), rounded up → {new:.2f}"))
        elif minimum is None and f is not None and any(r.get("kind") == "not_enough_memory" for r in hits):
            # the message itself says "Please try to increase --mem-fraction-static" (sglang_formats.md §5); without
            # the weight-load lines how far is unknown. The fraction must hold the weights and a KV pool
            # (model_runner.py::profile_max_num_token: the pool is what is left after the weights of fraction × the
            # memory before the load), so a fraction set far below SGLang's own default is raised to that default
            # (what SGLang picks itself to hold both); one above it by a blind step, as SGL-GPU-001's is the other way
            default, default_how, reserve = sglang_default_fraction(tl, run, cfg)
            if default > f and default - f > BLIND_RAISE:
                step = math.floor(round(min(default, MAX_SENSIBLE_FRACTION) * 100, 6)) / 100  # keep its reserve
                by_default = True
                kept = f", keeping SGLang's {fmt_gib(reserve)} for activations and graphs" if reserve else ""
                flags.append(FlagChange("--mem-fraction-static", f"{f:g}", f"{step:.2f}",
                                        f"SGLang's own advice ('Please try to increase --mem-fraction-static') and its "
                                        f"own default, {step:.2f} ({default_how}): the fraction SGLang picks itself "
                                        f"to hold the weights and a KV pool{kept}; a small step from {f:g} may still "
                                        "leave no pool. The weight-load lines (`Load weight end … avail mem … mem "
                                        "usage`) give the exact minimum"))
            elif (step := raised_blind(f)) is not None:
                flags.append(FlagChange("--mem-fraction-static", f"{f:g}", f"{step:.2f}",
                                        f"SGLang's own advice ('Please try to increase --mem-fraction-static'): {f:g} + "
                                        f"{BLIND_RAISE} → {step:.2f}; the weight-load lines (`Load weight end … avail "
                                        "mem`) give the exact minimum"))
        actions = []
        if any(attrs(r).get("warning") == "max_total_tokens_above_profiled" for r in hits):
            actions.append("Do not force --max-total-tokens above what SGLang profiled: a pool larger than the memory "
                           "left after the weights is allocated anyway and fails later (an illegal memory access, an "
                           "OOM).")
        if load_oom or (minimum is not None and new is None):
            actions.append("The weights alone nearly fill the GPUs: use more GPUs (--tp-size), a quantised checkpoint "
                           "or --quantization fp8, or a smaller model.")
        actions += [
            "Shrink the KV cache per token: --kv-cache-dtype fp8_e4m3.",
            "Check that no other process holds GPU memory before the launch (nvidia-smi; SGL-GPU-005).",
            "Do not lower --mem-fraction-static for this error: that is the fix for CUDA OOM after start-up "
            "(SGL-GPU-001), the opposite direction.",
        ]
        first = (hits or load_oom)[0]
        reasons = []
        if minimum is None and hits:
            reasons.append("the minimum viable fraction is not in the log (no weight-load memory lines)")
        if load_oom and not hits:
            reasons.append("inferred from a CUDA OOM before the weights finished loading")
        out.append(tag_run(make_finding(
            "SGL-GPU-004",
            summary=("The weights leave no GPU memory for the KV cache"
                     + (f" under --mem-fraction-static {f:g}" if f is not None else "")
                     + ((f"; raise it to {flags[0].new}" if f is not None else f"; raise --mem-fraction-static to {flags[0].new}")
                        + ((", SGLang's own default (how far is not in the log: no weight-load memory lines)"
                            if by_default else
                            " as SGLang advises (how far is not in the log: no weight-load memory lines)")
                           if minimum is None else "")
                        if flags
                        else ("; raise it" if f is not None else "; raise --mem-fraction-static")
                        + " (the log lacks the weight-load memory lines that say how far)"
                        if minimum is None and hits
                        else "; more GPUs, quantisation or a smaller model are needed")
                     + "." if hits else _load_oom_summary(load_oom[0])),
            evidence=[*hits[:3], *load_oom[:2], *cfg.evidence_rows("mem_fraction_static"),
                      *[tb for r in load_oom[:2] if (tb := enclosing_traceback(run, r)) is not None]],
            confidence="high" if not reasons else "medium",
            confidence_reason="; ".join(reasons) or None,
            ranks=[x for x in (rank_of(first),) if x is not None],
            gpus=[r["gpu"] for r in load_oom if r.get("gpu") is not None],
            figures={"mem_fraction_static": f, "minimum_viable_fraction": round(minimum, 4) if minimum is not None else None,
                     "corrected_mem_fraction_static": float(flags[0].new) if flags else None},
            flags=flags,
            actions=actions,
        ), ref))
    return out


def _load_oom_summary(oom: Row) -> str:
    """What a CUDA OOM while the weights load says: the allocation, the GPU's free and total memory it printed."""
    asked, free, total = oom.get("bytes"), oom.get("free_bytes"), oom.get("total_bytes")
    gpu = f"GPU {oom['gpu']}" if oom.get("gpu") is not None else "the GPU"
    figures = (f" ({gpu} could not allocate {fmt_gib(asked)} with {fmt_gib(free)} of {fmt_gib(total)} free)"
               if asked and free is not None and total else "")
    return (f"CUDA ran out of memory while the weights were loading{figures}: the weights per GPU do not fit; more "
            "GPUs (--tp-size), quantisation or a smaller model are needed.")

"""VLLM-GPU-010: vLLM's start-up CUDA-graph memory estimate took the KV cache's budget.

Since CUDA-graph memory profiling (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``, default on since v0.21) the V1
worker captures a sample of graphs against a throwaway KV cache (vllm vllm/v1/worker/gpu_model_runner.py::
profile_cudagraph_memory (0.18–main), logged as ``Estimated CUDA graph memory: X GiB total``, vllm_formats.md §2.6)
and vllm vllm/v1/worker/gpu_worker.py::Worker.determine_available_memory (0.18–main) subtracts that estimate from
the budget before it sizes the KV cache. vllm vllm/v1/core/kv_cache_utils.py::check_enough_kv_cache_memory
(0.8–main) then refuses to start (vllm_formats.md §3.1, §3.2: ``No available memory for the cache blocks`` /
``... KV cache is needed, which is larger than the available KV cache memory``). The refusal says to raise ``gpu_memory_utilization`` whatever took the
budget; when the estimate is what tips it (the KV memory plus the estimate would have been enough) the fault
is in the graph reserve, and an estimate far above what graphs take is itself the bug to report. Sample::

    (Worker_DP1_TP1_EP3 pid=11) INFO 08-19 05:56:57 [gpu_model_runner.py:6936] Estimated CUDA graph memory: 96.00 GiB total
    (EngineCore_DP0 pid=10) ERROR 08-19 05:56:57 [core.py:1346] ValueError: No available memory for the cache blocks.

>>> estimate_is_decisive(estimate=6 * GIB, available=-1 * GIB, needed=2 * GIB)
True
>>> estimate_is_decisive(estimate=1 * GIB, available=-3 * GIB, needed=None)
False
"""

from __future__ import annotations

from forensics.facts import engines
from forensics.facts.rows import Row, attrs, rank_of
from forensics.facts.vllm import first_attr, gpu_total_bytes, of_kind, settings, vllm_runs
from forensics.model import Finding, FlagChange, Timeline

from ._common import GIB, fmt_gib, make_finding
from .vllm_kv_cache import MAX_SENSIBLE_UTILIZATION, MIN_KV_RESERVE_BYTES, UTIL_MARGIN

#: vLLM's own word on what captured graphs take: "CUDA graphs can take additional 1~3 GiB memory per GPU"
#: (vllm vllm/worker/model_runner.py::ModelRunner.capture_model (0.3–0.10), V0's capture log). An estimate above this upper end, with no other
#: figure of the budget in the input, is the largest term the input shows.
ENGINE_GRAPH_UPPER_BYTES = 3 * GIB
ESTIMATE_ENV = "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"


def _util_flag() -> str:
    return engines.flag_for("vllm", "gpu_memory_fraction") or "--gpu-memory-utilization"


def estimate_is_decisive(*, estimate: float, available: float, needed: float | None) -> bool:
    """Whether the KV cache would have had what it needs (any room when ``needed`` is None) without the estimate."""
    want = needed if needed is not None else MIN_KV_RESERVE_BYTES
    return available < want <= available + estimate


def _estimate_rows(run: list[Row]) -> list[Row]:
    """The profiling lines (``Estimated CUDA graph memory``), not the after-capture comparison (which has actual)."""
    return [r for r in of_kind(run, "cuda_graph_memory")
            if attrs(r).get("estimated_bytes") and attrs(r).get("actual_bytes") is None]


def _refusals(run: list[Row]) -> list[Row]:
    return [*of_kind(run, "kv_no_room"),
            *[r for r in of_kind(run, "kv_cache_too_small") if not attrs(r).get("figures_lost")]]


def _available(run: list[Row], refusals: list[Row]) -> float | None:
    for r in refusals:
        v = attrs(r).get("available_kv_bytes")
        if v is not None:
            return float(v)
    v, _ = first_attr(run, "available_kv_bytes", "kv_memory")
    return float(v) if v is not None else None


def _other_terms(run: list[Row]) -> list[float]:
    """The non-KV figures of the budget the profile printed (weights, activation peak, non-torch memory)."""
    out = []
    for key in ("weights_bytes", "activation_peak_bytes", "non_torch_bytes"):
        v, _ = first_attr(run, key, "memory_profile")
        if v:
            out.append(float(v))
    return out


def detect(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    for run in vllm_runs(tl):
        est_rows, refusals = _estimate_rows(run), _refusals(run)
        if not est_rows or not refusals:
            continue
        est = max(float(attrs(r)["estimated_bytes"]) for r in est_rows)
        available = _available(run, refusals)
        needed = next((float(attrs(r)["needed_kv_bytes"]) for r in refusals if attrs(r).get("needed_kv_bytes")), None)
        reasons: list[str] = []
        if available is not None:
            if not estimate_is_decisive(estimate=est, available=available, needed=needed):
                continue  # the KV cache would be short even with the graph reserve given back
            confidence = "high"
        else:
            others = _other_terms(run)
            if est <= ENGINE_GRAPH_UPPER_BYTES or any(o >= est for o in others):
                continue  # a graph reserve of the usual size, or a larger term the profile shows: not this rule
            confidence = "medium"
            reasons.append("the KV memory left is not in the input: the estimate is the largest budget term it shows")
        cfg = settings(tl, run)
        util, util_seen = cfg.value_or_default("gpu_memory_fraction")
        total, total_row, total_how = gpu_total_bytes(tl, run)
        flags = [FlagChange(ESTIMATE_ENV, None, "0",
                            f"gives the {fmt_gib(est)} graph reserve back to the KV cache; the real capture then "
                            "shows what the graphs take (if it runs out of memory there, the estimate was right: "
                            "use --enforce-eager or fewer capture sizes instead)")]
        if util is not None and total:
            new = round(util + est / total + UTIL_MARGIN, 2)
            if new <= MAX_SENSIBLE_UTILIZATION:
                flags.append(FlagChange(_util_flag(), f"{util:g}" if util_seen else None, f"{new:.2f}",
                                        f"alternative: keep the reserve and add {fmt_gib(est)} to the budget over a "
                                        f"{fmt_gib(total)} GPU ({total_how})"))
        refusal = refusals[0]
        if available is not None:
            lead = (f"vLLM estimated the CUDA graphs at {fmt_gib(est)} and charged that to the budget before sizing "
                    f"the KV cache ({fmt_gib(available)} left), so it refused to start; with the reserve given back "
                    "the KV cache would have had what it needs.")
        else:
            lead = (f"vLLM estimated the CUDA graphs at {fmt_gib(est)} and charged that to the budget before sizing "
                    "the KV cache, then refused to start: the reserve is the largest budget term the input shows.")
        tail = (f" The refusal's advice to raise {_util_flag()} treats the symptom"
                + (": an estimate this large is above what captured graphs take (vLLM's own figure: 1-3 GiB per "
                   "GPU)." if est > ENGINE_GRAPH_UPPER_BYTES else "."))
        out.append(make_finding(
            "VLLM-GPU-010",
            summary=lead + tail,
            evidence=[*est_rows[:2], refusal, *([total_row] if total_row and total_row in run else [])],
            confidence=confidence,
            confidence_reason="; ".join(reasons) or None,
            ranks=[x for x in (rank_of(r) for r in est_rows) if x is not None],
            figures={"cudagraph_estimate_bytes": int(est),
                     "available_kv_bytes": int(available) if available is not None else None,
                     "needed_kv_bytes": int(needed) if needed else None,
                     "gpu_memory_utilization": util, "gpu_total_bytes": total},
            flags=flags,
            actions=[f"Start once with {ESTIMATE_ENV}=0 to confirm; report the estimate with the model, the "
                     "parallelism and the capture sizes (the profiler extrapolates from a sample of graphs).",
                     "If the graphs do need that much: --enforce-eager, or fewer --cudagraph-capture-sizes / a lower "
                     "--max-num-seqs, rather than a higher utilization."],
        ))
    return out

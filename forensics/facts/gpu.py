"""One GPU's capacity and where it was read: a CUDA OOM message, nvidia-smi, a GPU model named."""

from __future__ import annotations

from forensics.facts.rows import Row, attrs, rows
from forensics.facts.runs import of_kind
from forensics.model import Timeline


def gpu_capacity(tl: Timeline, run: list[Row], ooms: list[Row] | None = None) -> tuple[float | None, str]:
    """A GPU's total memory and where it came from: a CUDA OOM message, nvidia-smi, else the known memory of a
    GPU model the input names (parsers/gpu_models.py); the smallest when they differ."""
    totals = [r["total_bytes"] for r in (ooms if ooms is not None else of_kind(run, "cuda_oom")) if r.get("total_bytes")]
    if totals:
        return float(min(totals)), "the GPU's total capacity in the CUDA OOM message"
    smi = [r["total_bytes"] for r in rows(tl, "gpu_memory") if r.get("total_bytes")]
    if smi:
        return float(min(smi)), "nvidia-smi total memory"
    named = [r for r in rows(tl, "gpu_model") if r.get("total_bytes")]
    if named:
        r = min(named, key=lambda x: x["total_bytes"])
        return float(r["total_bytes"]), f"the known memory of the {attrs(r).get('model')} the input names"
    return None, "unknown"



def gpu_holders(tl: Timeline, gpu: int | None = None, exclude_pids: frozenset[int] = frozenset()) -> list[Row]:
    """The processes nvidia-smi lists on a GPU (every GPU when ``gpu`` is None) with the memory each holds, the
    largest first; ``exclude_pids`` are the failing server's own (system_formats.md §2.1-2.4: the process table
    of the default view, ``--query-compute-apps``, ``-q``'s Processes section)."""
    procs = [r for r in rows(tl, "gpu_process") if r.get("pid") is not None and int(r["pid"]) not in exclude_pids
             and (gpu is None or r.get("gpu") == gpu)]
    return sorted(procs, key=lambda r: -(r.get("used_bytes") or 0))

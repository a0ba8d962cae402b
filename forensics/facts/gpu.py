"""One GPU's capacity and where it was read: a CUDA OOM message, nvidia-smi, a GPU model named."""

from __future__ import annotations

import re

from forensics.facts.rows import Row, attrs, rank_of, rows
from forensics.facts.runs import of_kind
from forensics.model import Timeline

#: a rank's lines that end its target model's start-up memory: after them a "Load weight begin/end" is a draft's
_POOL_KINDS = ("kv_cache_allocated", "memory_pool_end", "cuda_graph_begin", "cuda_graph_end")


def target_load_rows(run: list[Row], kind: str) -> list[Row]:
    """The ``weight_load_begin`` / ``weight_load_end`` rows of the served (target) model, not a draft's.

    With speculative decoding SGLang builds the target's worker first (load_model → init_memory_pool → capture)
    and then, in the same process, the draft worker (EAGLE/MTP/standalone), which loads its own weights and logs
    its own ``Load weight begin/end`` with the memory the target's pool left (sglang managers/scheduler.py 0.4+:
    ``self.tp_worker`` before ``self.draft_worker``; sglang_formats.md §2). A load line that follows the same
    rank's pool or capture line in the same file is therefore the draft's: its ``avail mem`` is not what the GPU
    had before anything loaded, nor what ``--mem-fraction-static`` multiplies.
    """
    pools = of_kind(run, *_POOL_KINDS)
    out = []
    for r in of_kind(run, kind):
        after_pool = bool(attrs(r).get("draft")) or any(p.get("file") == r.get("file") and rank_of(p) == rank_of(r)
                         and (p.get("line") or 0) < (r.get("line") or 0) for p in pools)
        if not after_pool:
            out.append(r)
    return out


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


#: GPUs whose memory is the host's: vllm vllm/utils/mem_utils.py (0.11+, ``MemorySnapshot.measure``: "On UMA (Orin,
#: Thor and Spark) platform, where both CPU and GPU rely on system memory, the cudaMemGetInfo function shows the
#: amount of free system memory" — vLLM then takes ``psutil.virtual_memory().available`` as the GPU's free memory)
_UNIFIED = re.compile(r"\bGB10\b|DGX Spark|\bJetson\b|\bOrin\b|\bThor\b", re.I)


def unified_memory_gpu(tl: Timeline) -> tuple[str, Row] | None:
    """The name of a unified-memory GPU the input names (nvidia-smi's listing, a GPU model named), with its row:
    its "GPU memory" is the host's RAM, so what holds it is host memory in use, not another GPU process."""
    for r in [*rows(tl, "gpu_memory"), *rows(tl, "gpu_model")]:
        name = str(attrs(r).get("name") or attrs(r).get("model") or "")
        if _UNIFIED.search(name):
            return name, r
    return None

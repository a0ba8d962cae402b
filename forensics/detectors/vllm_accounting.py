"""VLLM-GPU-002: vLLM's start-up memory account has a negative CUDA-graph figure: a measurement, not memory.

vLLM V1 measures what CUDA-graph capture took as the difference of two device-wide free-memory readings
(``torch.cuda.mem_get_info`` before and after ``capture_model``, ``vllm/v1/worker/gpu_model_runner.py``) and
prints it as-is (vllm_formats.md §0 "Negative memory is printed as-is", §2.7 ``Graph capturing finished in N
secs, took X GiB``). Anything that frees memory on the device while the graphs are captured (another engine or
process on the same GPU, an allocator cache released) makes the difference negative; the start-up summary
(§2.6 ``Free memory on device … -X GiB for CUDAGraph memory``) and the ``--kv-cache-memory`` figures it derives
then carry the same error. A capture cannot free memory, so a negative figure is a fault of the account:
headroom must not be computed from it, and the hint's sizes are not to be acted on. Sample::

    (EngineCore_DP1 pid=811) INFO 03-02 10:11:12 [gpu_model_runner.py:2100] Graph capturing finished in 41 secs, took -3.20 GiB

>>> [r["line"] for r in negative_graph_rows([{"kind": "cuda_graph_end", "line": 7, "attrs": '{"graph_bytes": -5}'},
...                                          {"kind": "cuda_graph_end", "line": 9, "attrs": '{"graph_bytes": 5}'}])]
[7]
"""

from __future__ import annotations

from forensics.facts.rows import Row, attrs, rank_of
from forensics.facts.vllm import of_kind, vllm_runs
from forensics.model import Finding, Timeline

from ._common import fmt_gib, make_finding


def negative_graph_rows(run: list[Row]) -> list[Row]:
    """The capture and summary lines of a run whose CUDA-graph figure is below zero."""
    return [r for r in of_kind(run, "cuda_graph_end", "memory_profile") if (attrs(r).get("graph_bytes") or 0) < 0]


def detect(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    for run in vllm_runs(tl):
        bad = negative_graph_rows(run)
        if not bad:
            continue
        graph = min(attrs(r)["graph_bytes"] for r in bad)
        summary_row = next((r for r in bad if r.get("kind") == "memory_profile"), None)
        kv = attrs(summary_row).get("kv_cache_bytes") if summary_row else None
        out.append(make_finding(
            "VLLM-GPU-002",
            summary=(f"vLLM's start-up account says CUDA-graph capture took {fmt_gib(graph)}: a capture cannot free "
                     "memory, so the figure is a fault of the measurement (free memory read device-wide before and "
                     "after capture), not headroom. Its --kv-cache-memory suggestions inherit the error"
                     + (f" (the KV cache in use is {fmt_gib(kv)})" if kv else "") + "."),
            evidence=bad[:3],
            confidence="high",
            ranks=[x for x in (rank_of(r) for r in bad) if x is not None],
            figures={"graph_bytes": int(graph), "kv_cache_bytes": kv},
            actions=["Do not size --kv-cache-memory or --gpu-memory-utilization from this start-up's summary; the "
                     "CUDA-graph figure in it is wrong by at least its own size.",
                     "Check what else ran on the GPU during capture (`nvidia-smi --query-compute-apps=pid,used_memory "
                     "--format=csv`): another engine of a data-parallel deployment, or a process that exited.",
                     "Upgrade vLLM to a release that measures graph memory from the allocator rather than from "
                     "device-wide free memory (the negative-CUDA-memory fix), then read the summary again."],
        ))
    return out

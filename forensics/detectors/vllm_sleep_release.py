"""VLLM-GPU-013: vLLM's sleep freed little and most of the device is still in use after it.

``Worker.sleep`` (vllm vllm/v1/worker/gpu_worker.py::Worker.sleep (0.7.3+), V0's vllm/worker/worker.py the same) releases the weights and KV
cache its CuMemAllocator mapped (vllm/device_allocator/cumem.py ``CuMemAllocator.sleep``: offload or discard, then
``unmap_and_release``) and logs what ``torch.cuda.mem_get_info`` shows before and after::

    Sleep mode freed 71.25 GiB memory, 1.38 GiB memory is still in use.

What stays in use after a sleep is the CUDA/HIP context and whatever the engine allocated outside the sleep-mode
pool: a few GiB. The figure is the whole device's (``mem_get_info``), so when the freed share is smaller than what
is still in use, and that is many GiB, the sleep did not hand the GPU back: another process holds the rest, the
engine allocated a large part outside CuMemAllocator (what ``sleep`` cannot release), or the driver kept the pages
it was told to release — on ROCm, ``hipMemRelease`` returns no physical memory while the virtual range stays
reserved, which vLLM's ROCm path in csrc/cumem_allocator.cpp ``unmap_and_release`` left reserved before the fix
that frees and re-reserves it (vllm PR #46203, June 2026). A trainer colocated for RL then finds the GPU full.

>>> released_little(2.03 * 2**30, 178.23 * 2**30)
True
>>> released_little(71.25 * 2**30, 1.38 * 2**30)
False
"""

from __future__ import annotations

from forensics.facts.rows import rank_of, rows
from forensics.model import Finding, Timeline

from ._common import GIB, fmt_gib, make_finding

#: more than a context and the engine's own buffers outside the sleep-mode pool (a few GiB on a large GPU)
RESIDENT_FLOOR = 8 * GIB


def released_little(freed: float | None, in_use: float | None) -> bool:
    """Most of what was there is still in use after the sleep, and it is more than a context's worth."""
    return freed is not None and in_use is not None and in_use >= RESIDENT_FLOOR and in_use > freed


def detect(tl: Timeline) -> list[Finding]:
    hits = [r for r in rows(tl, "sleep_report") if released_little(r.get("bytes"), r.get("used_bytes"))]
    if not hits:
        return []
    worst = max(hits, key=lambda r: r.get("used_bytes") or 0)
    freed, in_use = worst["bytes"], worst["used_bytes"]
    return [make_finding(
        "VLLM-GPU-013",
        summary=(f"vLLM's sleep freed only {fmt_gib(freed)}, and {fmt_gib(in_use)} of the device was still in use "
                 "after it: the sleep did not hand the GPU back. The figure is the whole device's — another "
                 "process's memory, memory the engine allocated outside its sleep-mode allocator, or pages the "
                 "driver kept after the release (vLLM's ROCm path before its fix) all show here."),
        evidence=hits[:3],
        confidence="medium",
        confidence_reason="which of the three holds the memory is not in this line; the device's process list tells",
        ranks=[x for x in (rank_of(r) for r in hits) if x is not None],
        figures={"freed_bytes": int(freed), "in_use_bytes": int(in_use), "resident_floor_bytes": RESIDENT_FLOOR},
        actions=[
            "List who holds the GPU while vLLM sleeps (`nvidia-smi --query-compute-apps=pid,used_memory "
            "--format=csv`, `amd-smi process` or `rocm-smi --showpids`): a second process is its own problem.",
            "If only vLLM holds it on ROCm, upgrade vLLM: releases before June 2026 kept the virtual range reserved "
            "and the driver kept the pages (vllm csrc/cumem_allocator.cpp, PR #46203).",
            "Otherwise something in the engine allocates outside the sleep-mode pool (a multimodal encoder run "
            "with --mm-encoder-tp-mode data, custom kernels' buffers): report it with the launch flags; a "
            "colocated trainer must budget for it meanwhile.",
        ],
    )]

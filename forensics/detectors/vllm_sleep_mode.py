"""VLLM-GPU-011: vLLM's sleep-mode allocator could not map its memory back: the GPU is shared with a trainer.

RL frameworks that colocate vLLM with training (OpenRLHF ``--vllm_enable_sleep``, verl, TRL, ms-swift) start it
with ``enable_sleep_mode=True``: weights and KV cache are allocated through vLLM's CuMemAllocator, released with
``sleep()`` while the trainer runs and mapped back with ``wake_up()`` before the next rollout (vllm
vllm/device_allocator/cumem.py (0.7.3+) ``CuMemAllocator.sleep``/``wake_up`` → ``create_and_map``). Waking up
calls ``cuMemCreate`` for every region it released; when the trainer's parameters, optimizer state, activations
or cached allocator blocks still hold that memory, the driver answers out of memory and the allocator raises
``RuntimeError: CUDA Error: out of memory at …/cumem_allocator.cpp:N`` (vllm csrc/cumem_allocator.cpp
``CUDA_CHECK``, ``python_create_and_map``). What is mapped back is what ``--gpu-memory-utilization`` reserved at
start-up (weights plus a KV cache sized to fill the fraction), so the two tenants' shares add up to more than
the GPU: the fix is a smaller vLLM fraction, or freeing the trainer's memory before the wake-up.
"""

from __future__ import annotations

import polars as pl

from forensics.facts.launch import server_config
from forensics.facts.rows import attrs, rows
from forensics.model import Finding, Timeline

from ._common import make_finding
from .memory_saver import handover_share
from .vllm_sleep_colocated import colocated

#: what in a log says the engine was waking up: the allocator's and the executor's frames and vLLM's
#: "It took … seconds to wake up" (vllm/executor/executor_base.py, v1/engine/core.py)
_WAKE = r"\bwake_up\b|\bto wake up\b"


def _wake_seen(tl: Timeline) -> bool:
    if tl.events.is_empty() or "text" not in tl.events.columns:
        return False
    return not tl.events.filter(pl.col("text").str.contains(_WAKE)).is_empty()


def detect(tl: Timeline) -> list[Finding]:
    hits = [r for r in rows(tl, "failure") if attrs(r).get("failure") == "memory_saver_oom"
            and attrs(r).get("allocator") == "vllm_cumem"]
    if not hits or colocated(tl, hits)[0]:  # other vLLM engines share the GPU: VLLM-GPU-014
        return []
    wake = any(attrs(r).get("in_wake_up") for r in hits) or _wake_seen(tl)
    old = server_config(tl).num("gpu_memory_utilization")
    when = ("while it woke up (wake_up mapped the released weights and KV cache back)" if wake
            else "while it mapped memory of its sleep-mode pool")
    summary = (f"vLLM's sleep-mode allocator could not map GPU memory (cuMemCreate: out of memory) {when}. "
               "This engine shares its GPUs with a training process (enable_sleep_mode, as colocated RL "
               "frameworks run it): what the trainer still holds plus what vLLM maps back — the weights and the "
               "KV cache its --gpu-memory-utilization reserved — is more than the GPU has.")
    if len(hits) > 1:
        summary += f" The allocator reported it {len(hits)} times (one line per engine or rank)."
    flags = [handover_share("--gpu-memory-utilization", old, "vLLM's", "OpenRLHF --vllm_gpu_memory_utilization, "
                            "verl's rollout gpu_memory_utilization", "the wake-up")]
    actions = [
        "Or free the trainer's memory before vLLM wakes up: offload its parameters and optimizer state and empty "
        "its allocator cache (torch.cuda.empty_cache()) first; waking the weights before the KV cache "
        "(wake_up(tags=[\"weights\"]), then [\"kv_cache\"], vLLM 0.8.3+) lowers the peak of a weight update.",
        "Measure what the trainer holds at the handover: `nvidia-smi --query-compute-apps=pid,used_memory "
        "--format=csv` between the training step and the next rollout.",
    ]
    return [make_finding("VLLM-GPU-011", summary=summary, evidence=hits[:3], confidence="high" if wake else "medium",
                         confidence_reason=None if wake else (
                             "no wake-up in the input: the region that failed may be the first mapping at "
                             "start-up, not the handover from a trainer"),
                         figures={"wake_up_seen": wake, "failed_lines": len(hits),
                                  "gpu_memory_utilization": old},
                         flags=flags, actions=actions)]

"""SGL-RUN-050: the memory saver could not map back a paused region: the GPU is shared with a trainer that holds it.

RL frameworks that colocate SGLang with training (verl, slime, AReaL, OpenRLHF) start it with
``--enable-memory-saver``: the weights, the KV pool and the CUDA-graph memory are allocated through
torch_memory_saver, paused while the trainer runs and resumed before the next rollout (sglang
python/sglang/srt/managers/scheduler_update_weights_mixin.py (0.4.8-0.5.x) ``release_memory_occupation``,
``resume_memory_occupation``; sglang python/sglang/srt/torch_memory_saver_adapter.py (0.4.x-0.5.x)). Pausing unmaps
the physical memory and keeps the address range; resuming maps it again with ``cuMemCreate``. When the trainer (its
parameters, optimizer state, activations or cached allocator blocks) still holds what SGLang gave up, the driver
returns CUDA_ERROR_OUT_OF_MEMORY and the library's check prints the code and calls ``exit(1)``: no Python
traceback, and the other ranks then wait in their collectives until a watchdog fires (torch_memory_saver
csrc/utils.h (0.0.6-0.0.9) ``CURESULT_CHECK``, ``CUDA_ERROR_CHECK``). The KV pool SGLang maps back is sized by
``--mem-fraction-static``, so the two tenants' shares of the GPU add up to more than it has; the fix is a smaller
SGLang share (or offloading the trainer before the resume), not a larger GPU budget for either.
"""

from __future__ import annotations

import polars as pl

from forensics.facts.launch import server_config
from forensics.facts.rows import attrs, rows
from forensics.model import Finding, FlagChange, Timeline

from ._common import make_finding

#: with no figure for the trainer's peak, half of each GPU to each tenant is the starting split
_SPLIT = 0.5
#: one step down from a stated fraction that proved too large
_STEP = 0.1


def _resume_seen(tl: Timeline) -> bool:
    """Whether the input shows a resume request: a client's failed call, or SGLang's access line for it."""
    if any(attrs(r).get("failure") == "memory_resume_failed" for r in rows(tl, "failure")):
        return True
    if tl.events.is_empty() or "text" not in tl.events.columns:
        return False
    return not tl.events.filter(pl.col("text").str.contains("resume_memory_occupation", literal=True)).is_empty()


def handover_share(flag: str, old: float | None, engine: str, frameworks: str, retried: str) -> FlagChange:
    """The engine's share of a GPU it hands back and forth with a colocated trainer: one step down from what the
    launch set, else half each when the launch is not in the input (the trainer's peak decides the exact split)."""
    if old is not None and old > _STEP:
        new = round(old - _STEP, 2)
        why = (f"{engine} share ({old:g} of each GPU) left too little for the trainer at the handover; one step "
               "down, then size it as 1 − (trainer peak + margin) ÷ GPU memory")
    else:
        new = _SPLIT
        why = ("the colocated trainer needs the rest of each GPU; with no figure for its peak, half each is the "
               f"starting split (set it through the framework: {frameworks}); lower it further if {retried} fails "
               "again")
    return FlagChange(flag, f"{old:g}" if old is not None else None, f"{new:g}", why)


def detect(tl: Timeline) -> list[Finding]:
    hits = [r for r in rows(tl, "failure") if attrs(r).get("failure") == "memory_saver_oom"
            and attrs(r).get("allocator") != "vllm_cumem"]  # vLLM's own allocator: vllm_sleep_mode
    if not hits:
        return []
    a = attrs(hits[0])
    resume = _resume_seen(tl) or a.get("func") == "resume"
    cfg = server_config(tl)
    old = cfg.num("mem_fraction_static")
    when = ("while SGLang was resuming its paused memory (resume_memory_occupation)" if resume
            else "while it mapped one of its memory-saver regions")
    summary = (f"torch_memory_saver could not map GPU memory ({a.get('api')} code 2, out of memory, in "
               f"{a.get('func')}) {when}, and exited without a traceback. These regions belong to an SGLang engine "
               "that shares its GPUs with a training process (--enable-memory-saver, as colocated RL frameworks "
               "run it): what the trainer still holds plus the pool SGLang maps back, sized by "
               "--mem-fraction-static, is more than the GPU has.")
    if len(hits) > 1:
        summary += f" The check printed {len(hits)} such lines."
    flags = [handover_share("--mem-fraction-static", old, "SGLang's", "verl's rollout gpu_memory_utilization, "
                            "slime's --sglang-mem-fraction-static", "the resume")]
    actions = [
        "Or free the trainer's memory before SGLang resumes: offload its parameters and optimizer state "
        "(FSDP/Megatron offload options of the framework) and empty its allocator cache first.",
        "Measure what the trainer holds at the handover: `nvidia-smi --query-compute-apps=pid,used_memory "
        "--format=csv` between the training step and the next rollout.",
    ]
    return [make_finding("SGL-RUN-050", summary=summary, evidence=hits[:3], confidence="high" if resume else "medium",
                         confidence_reason=None if resume else (
                             "no resume of paused memory in the input: the region that failed may be the first "
                             "mapping at start-up, not the handover from a trainer"),
                         figures={"api": a.get("api"), "func": a.get("func"), "resume_seen": resume,
                                  "ranks_failed_lines": len(hits)},
                         flags=flags, actions=actions)]

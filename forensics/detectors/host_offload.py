"""SGL-HOST-008: per-GPU host memory (vLLM swap space, CPU offload) × the GPUs on a host exceeds its RAM.

vLLM's ``--swap-space`` (GiB of pinned CPU memory for preempted KV blocks, default 4) and
``--cpu-offload-gb`` (GiB of weights kept in CPU memory) are per GPU, like SGLang's ``--hicache-size``
is per rank: ``--tensor-parallel-size 8 --swap-space 64`` pins 512 GiB. Each worker allocates its
share at start-up; together they exhaust the host and the kernel kills a worker::

    Out of memory: Killed process (VLLM::Worker_TP)  total-vm:…kB anon-rss:…kB shmem-rss:90272184kB

>>> per_gpu_budget(256 * 2**30, 8) / 2**30
28.8
"""

from __future__ import annotations

import math

from forensics.model import Finding, FlagChange, Timeline

from ._common import GIB, Row, attrs, fmt_gib, launch_rows, make_finding, rows

RESERVE_SHARE = 0.1
MIN_RESERVE = 10 * GIB
#: vLLM's per-GPU host-memory flags, in GiB, and their defaults
PER_GPU_FLAGS = {"--swap-space": 4.0, "--cpu-offload-gb": 0.0}


def per_gpu_budget(capacity: float, gpus: int) -> float:
    """What each GPU's host pools may take: capacity less a reserve of max(10 GiB, 10 %), shared out."""
    return (capacity - max(MIN_RESERVE, RESERVE_SHARE * capacity)) / max(gpus, 1)


def _flag(row: Row, *names: str) -> str | None:
    flags = attrs(row).get("flags") or {}
    for n in names:
        v = flags.get(n)
        if v not in (None, True):
            return str(v)
    return None


def _num(v: str | None) -> float | None:
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


def _capacity(tl: Timeline, launch: Row) -> tuple[float | None, str, Row | None]:
    limit = attrs(launch).get("container_memory_bytes") or attrs(launch).get("docker_memory_bytes")
    if isinstance(limit, int | float) and limit > 0:
        return float(limit), str(attrs(launch).get("container_memory_from") or "the container's memory limit"), launch
    totals = [r for r in rows(tl, "host_memory") if r.get("total_bytes")]
    if totals:
        r = min(totals, key=lambda x: x["total_bytes"])
        return float(r["total_bytes"]), "host memory", r
    return None, "unknown", None


def detect(tl: Timeline) -> list[Finding]:
    vllm = [r for r in launch_rows(tl) if attrs(r).get("engine") == "vllm"
            and not (attrs(r).get("confidence") == "prose" and attrs(r).get("discussed"))]
    if not vllm:
        return []
    launch = vllm[-1]
    tp = int(_num(_flag(launch, "--tensor-parallel-size", "-tp", "--tp")) or 1)
    pp = int(_num(_flag(launch, "--pipeline-parallel-size", "-pp")) or 1)
    nodes = int(_num(_flag(launch, "--nnodes")) or 1)
    gpus = max(tp * pp // max(nodes, 1), 1)
    capacity, cap_how, cap_row = _capacity(tl, launch)
    per_gpu = {f: _num(_flag(launch, f)) for f in PER_GPU_FLAGS}
    asked = sum(v if v is not None else PER_GPU_FLAGS[f] for f, v in per_gpu.items()) * GIB
    kills = [r for r in rows(tl, "oom_kill", "failure") if r.get("kind") == "oom_kill"
             or attrs(r).get("failure") == "oom_killed"]
    if capacity is None or asked * gpus <= capacity - max(MIN_RESERVE, RESERVE_SHARE * capacity):
        return []
    budget = per_gpu_budget(capacity, gpus)
    flags: list[FlagChange] = []
    remaining = budget
    offload = per_gpu["--cpu-offload-gb"] or 0.0
    if offload * GIB > budget:
        new = max(math.floor(budget / GIB), 0)
        flags.append(FlagChange("--cpu-offload-gb", f"{offload:g}", str(new),
                                f"({fmt_gib(capacity)} {cap_how} − reserve) ÷ {gpus} GPUs = {fmt_gib(budget)} per GPU"))
        remaining = 0.0
    else:
        remaining = budget - offload * GIB
    swap = per_gpu["--swap-space"]
    swap_now = swap if swap is not None else PER_GPU_FLAGS["--swap-space"]
    if swap_now * GIB > remaining:
        new = max(math.floor(remaining / GIB), 0)
        flags.append(FlagChange("--swap-space", f"{swap_now:g}" if swap is not None else None, str(new),
                                f"({fmt_gib(capacity)} {cap_how} − max(10 GiB, 10 %) reserve) ÷ {gpus} GPUs"
                                + (f" − {offload:g} GiB CPU offload" if offload else "") + f" = {fmt_gib(remaining)} "
                                "per GPU; swap space is pinned per GPU"))
    return [make_finding(
        "SGL-HOST-008",
        summary=(f"vLLM's per-GPU host memory ({' + '.join(f'{f} {v if v is not None else PER_GPU_FLAGS[f]:g} GiB' for f, v in per_gpu.items() if (v or PER_GPU_FLAGS[f]))}) "
                 f"× {gpus} GPUs = {fmt_gib(asked * gpus)}, more than the {fmt_gib(capacity)} of {cap_how}"
                 + (f". Lower {flags[0].flag} to {flags[0].new}" if flags else "") + "."),
        evidence=[launch, *([cap_row] if cap_row is not None and cap_row is not launch else []), *kills[:3]],
        confidence="high" if kills else "medium",
        confidence_reason=None if kills else "a risk: no OOM kill in the input",
        severity="critical" if kills else "high",
        figures={"gpus_per_host": gpus, "per_gpu_host_bytes": int(asked), "capacity_bytes": int(capacity),
                 "capacity_from": cap_how},
        flags=flags,
        actions=["Both flags are per GPU: multiply by the GPUs on the host before sizing them.",
                 "Preemption without swap space recomputes instead (slower, no host memory)."],
    )]

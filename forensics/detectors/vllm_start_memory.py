"""VLLM-GPU-003: vLLM found less free GPU memory at start-up than ``--gpu-memory-utilization`` asks for;
VLLM-GPU-012: the same refusal when what others hold is no more than the default fraction leaves (a raised fraction);
VLLM-GPU-004: free memory rose while vLLM profiled (another process on the GPU released memory).

vLLM V1 (0.9.1+) measures the device's free memory before loading and refuses to start when it is below
utilization × total (``v1/worker/gpu_worker.py::init_device``, 0.14+ ``v1/worker/utils.py::request_memory``;
vllm_formats.md §3.3)::

    ValueError: Free memory on device (3.22/79.19 GiB) on startup is less than desired GPU memory utilization
    (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.

The difference, total − free, is held by something else on the GPU: another engine or tenant, or a process of an
earlier run that has not exited. Either free it, or ask for no more than is free: utilization ≤ free ÷ total less a
margin (vllm_formats.md "K3 co-tenancy"). When nvidia-smi's process list is in the input, the finding names the
processes on that GPU and what each holds (0.14+ names the device, ``cuda:N``).

>>> fitting_utilization(3.22, 79.19), fitting_utilization(40.1, 79.19)
(None, 0.48)
"""

from __future__ import annotations

import math
import re

from forensics.facts.gpu import gpu_holders, unified_memory_gpu
from forensics.facts.rows import Row, attrs, rank_of
from forensics.facts.vllm import of_kind, vllm_runs
from forensics.model import Finding, FlagChange, Timeline

from ._common import GIB, fmt_gib, make_finding

MARGIN = 0.02  # below what was free: the CUDA context and the allocator's slack
#: vLLM's default fraction (vllm/config/cache.py ``CacheConfig.gpu_memory_utilization``, 0.9 in every release): the
#: share it leaves is meant for what any GPU has resident besides the engine — a display server, other processes'
#: CUDA contexts, the driver's reservations
DEFAULT_UTILIZATION = 0.9
MIN_USEFUL = 0.3  # a budget under this share of the GPU serves nothing: free the GPU instead


def fitting_utilization(free_gib: float, total_gib: float) -> float | None:
    """The largest utilization (0.01 steps) that fits what was free, or None when too little was free to serve."""
    u = math.floor(round((free_gib / total_gib - MARGIN) * 100, 6)) / 100
    return u if u >= MIN_USEFUL else None


_CUDA_DEVICE = re.compile(r"^cuda:(\d+)$")


def holders_words(procs: list[Row]) -> str:
    """``pid 4411 (python3) 48.00 GiB on GPU 1, …``: what nvidia-smi says each process holds."""
    return ", ".join(f"pid {p['pid']} ({p.get('comm') or '?'}) {fmt_gib(p.get('used_bytes') or 0)}"
                     + (f" on GPU {p['gpu']}" if p.get("gpu") is not None else "") for p in procs[:4]) + (f" and {len(procs) - 4} more" if len(procs) > 4 else "")


def detect(tl: Timeline) -> list[Finding]:
    return _short_at_start(tl) + _memory_changed_while_profiling(tl)


def _memory_changed_while_profiling(tl: Timeline) -> list[Finding]:
    """VLLM-GPU-004: vLLM's profiling assertion — the GPU had *more* free memory after profiling than before.

    vLLM sizes the KV cache from the device's free memory before and after a profiling forward pass; it asserts
    that free memory fell (``assert init free > current free``, ``"Error in memory profiling"``; V0 0.2-0.6.3
    ``assert peak_memory > 0``; vllm_formats.md §2.4, §3.3; ``v1/worker/gpu_worker.py::determine_available_memory``).
    Free memory rises during the pass only when memory vLLM does not own is released meanwhile: an earlier
    instance still exiting ("not properly cleaned up before initializing", 0.4-0.9) or a co-tenant in the same
    container or on the same GPU ("other processes sharing the same container release GPU memory", 0.9.1+)."""
    out: list[Finding] = []
    for run in vllm_runs(tl):
        hits = of_kind(run, "memory_profiling_error")
        if not hits:
            continue
        a = attrs(hits[0])
        before, after = a.get("initial_free_bytes"), a.get("current_free_bytes")
        used_before, used_after = a.get("initial_used_bytes"), a.get("current_used_bytes")
        if before is not None and after is not None:
            change = (f"free GPU memory rose from {fmt_gib(before)} to {fmt_gib(after)} "
                      f"(+{fmt_gib(after - before)}) while it profiled")
        elif used_before is not None and used_after is not None:
            change = (f"GPU memory in use fell from {fmt_gib(used_before)} to {fmt_gib(used_after)} while it "
                      "profiled")
        else:
            change = "free GPU memory rose while it profiled"
        own = frozenset(int(r["pid"]) for r in run if r.get("pid") is not None)
        holders = [p for p in gpu_holders(tl, exclude_pids=own) if p.get("used_bytes")]
        out.append(make_finding(
            "VLLM-GPU-004",
            summary=(f"vLLM's start-up memory profiling failed: {change}. Memory vLLM does not own was released on "
                     "the GPU during the pass — an earlier instance still exiting, or another process sharing the "
                     "GPU or the container" + (f" (nvidia-smi lists {holders_words(holders)})" if holders else "")
                     + ". vLLM cannot size its KV cache while other processes' memory changes under it; this is not "
                     "an out-of-memory error and no memory setting fixes it."),
            evidence=[*hits[:2], *of_kind(run, "exception", "init_failed", "engine_dead")[:2], *holders[:3]],
            confidence="high" if before is not None or used_before is not None else "medium",
            confidence_reason=None if before is not None or used_before is not None else
            "the assertion's message names no figures (vLLM before 0.5.5)",
            ranks=[x for x in (rank_of(r) for r in hits) if x is not None],
            figures={"initial_free_bytes": before, "current_free_bytes": after,
                     "initial_used_bytes": used_before, "current_used_bytes": used_after,
                     "holder_pids": [int(p["pid"]) for p in holders] or None},
            actions=["Before starting vLLM, wait until the previous instance's processes are gone and the GPU is "
                     "empty: `nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv` lists "
                     "nothing on it.",
                     "Give vLLM GPUs of its own (CUDA_VISIBLE_DEVICES, a container per GPU set, MIG) when other jobs "
                     "run on the host; retrying while they allocate and free memory fails the same way."],
        ))
    return out


def _short_at_start(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    for run in vllm_runs(tl):
        short = of_kind(run, "gpu_memory_short")
        if not short:
            continue
        row = min(short, key=lambda r: attrs(r).get("free_gpu_bytes") or float("inf"))
        a = attrs(row)
        free, total, util = a.get("free_gpu_bytes"), a.get("total_gpu_bytes"), a.get("gpu_memory_utilization")
        held = total - free if free is not None and total is not None else None
        device = _CUDA_DEVICE.match(str(a.get("device") or ""))
        own = frozenset(int(r["pid"]) for r in run if r.get("pid") is not None)
        holders = [p for p in gpu_holders(tl, int(device.group(1)) if device else None, own) if p.get("used_bytes")]
        flags: list[FlagChange] = []
        new = fitting_utilization(free / GIB, total / GIB) if free and total else None
        if new is not None and util is not None and new < util:
            flags.append(FlagChange("--gpu-memory-utilization", f"{util:g}", f"{new:.2f}",
                                    f"{fmt_gib(free)} free of {fmt_gib(total)} at start-up ÷ total − {MARGIN} margin"))
        uma = unified_memory_gpu(tl)
        if uma is not None:
            out.append(_short_on_unified_memory(uma, row, short, run, free, total, util, held, flags, new))
            continue
        if held is not None and total and flags and held <= (1 - DEFAULT_UTILIZATION) * total:
            out.append(_fraction_above_residents(row, short, run, free, total, util, held, holders, flags, new))
            continue
        out.append(make_finding(
            "VLLM-GPU-003",
            summary=("vLLM refused to start: "
                     + (f"only {fmt_gib(free)} of the GPU's {fmt_gib(total)} was free, " if free and total else "")
                     + (f"less than the {util:g} utilization asks for" if util is not None else "less than asked for")
                     + (f"; {fmt_gib(held)} is held by another process" if held else "; the rest is held by another "
                        "process")
                     + (f": nvidia-smi lists {holders_words(holders)}." if holders else
                        " (another engine, a tenant, or an earlier run that has not exited).")
                     + (f" Free it, or lower --gpu-memory-utilization to {new:.2f}." if flags else
                        " Free the GPU first: what is left is too little to serve from.")),
            evidence=[*short[:3], *of_kind(run, "init_failed", "engine_dead")[:2], *holders[:3]],  # and the teardown
            confidence="high" if holders else "medium",
            confidence_reason=None if holders else "who holds the memory is not in vLLM's message; the process table "
                                                   "of the GPU says",
            ranks=[x for x in (rank_of(r) for r in short) if x is not None],
            figures={"free_gpu_bytes": free, "total_gpu_bytes": total, "gpu_memory_utilization": util,
                     "held_by_others_bytes": held, "corrected_gpu_memory_utilization": new,
                     "holder_pids": [int(p["pid"]) for p in holders] or None},
            flags=flags,
            actions=["List what holds the GPU: `nvidia-smi --query-compute-apps=pid,process_name,used_memory "
                     "--format=csv` (in a container, on the host), and stop what should not be there.",
                     "Sharing the GPU on purpose: set --gpu-memory-utilization to what is free; it is a share of "
                     "the whole GPU, not of the free memory."],
        ))
    return out


def _fraction_above_residents(row: Row, short: list[Row], run: list[Row], free: float, total: float,
                              util: float | None, held: float, holders: list[Row], flags: list[FlagChange],
                              new: float | None) -> Finding:
    """VLLM-GPU-012: what others hold fits in the share the default fraction leaves, so the default would have
    started; the refusal comes from a fraction raised toward the whole GPU, not from a process to clean up."""
    return make_finding(
        "VLLM-GPU-012",
        summary=(f"vLLM refused to start: --gpu-memory-utilization {util:g} asks for "
                 f"{fmt_gib((util or 0) * total)} of the GPU's {fmt_gib(total)}, but {fmt_gib(held)} "
                 f"({held / total:.0%}) was already in use when it started, so only {fmt_gib(free)} was free. "
                 f"That much is what a GPU ordinarily has resident besides the engine — a display server, another "
                 f"process's CUDA context — and fits in the {1 - DEFAULT_UTILIZATION:.0%} vLLM's default "
                 f"{DEFAULT_UTILIZATION:g} leaves for it"
                 + (f" (nvidia-smi lists {holders_words(holders)})" if holders else "")
                 + f". The fraction is set too close to the whole GPU: lower it to {new:.2f}."),
        evidence=[*short[:3], *of_kind(run, "init_failed", "engine_dead")[:2], *holders[:3]],
        confidence="high",
        ranks=[x for x in (rank_of(r) for r in short) if x is not None],
        figures={"free_gpu_bytes": free, "total_gpu_bytes": total, "gpu_memory_utilization": util,
                 "held_by_others_bytes": held, "corrected_gpu_memory_utilization": new,
                 "default_gpu_memory_utilization": DEFAULT_UTILIZATION,
                 "holder_pids": [int(p["pid"]) for p in holders] or None},
        flags=flags,
        actions=["--gpu-memory-utilization is a share of the whole GPU, measured against what is free when vLLM "
                 "starts: keep it at or below free ÷ total, less a margin, on a GPU that also drives a display or "
                 "hosts other processes.",
                 "To use that memory too, stop what holds it (`nvidia-smi --query-compute-apps=pid,process_name,"
                 "used_memory --format=csv`; the display server shows in `nvidia-smi`'s process table as G-type)."],
    )


def _short_on_unified_memory(uma: tuple[str, Row], row: Row, short: list[Row], run: list[Row], free: float | None,
                             total: float | None, util: float | None, held: float | None, flags: list[FlagChange],
                             new: float | None) -> Finding:
    """VLLM-GPU-003 on a unified-memory GPU (GB10, Jetson Orin/Thor): vLLM's free figure there is the host's
    ``MemAvailable`` (vllm vllm/utils/mem_utils.py, 0.11+), so the memory missing is the host's, in use by processes,
    pinned or shared-memory segments, or what a failed earlier start left — the GPU's process table does not list it
    (nvidia-smi reports the memory of a GB10 as "Not Supported")."""
    name, named = uma
    return make_finding(
        "VLLM-GPU-003",
        summary=("vLLM refused to start on the " + name + ", whose GPU memory is the host's RAM: "
                 + (f"only {fmt_gib(free)} of {fmt_gib(total)} was available, " if free and total else "")
                 + (f"less than the {util:g} utilization asks for" if util is not None else "less than asked for")
                 + (f"; the other {fmt_gib(held)} is host memory in use" if held else "; the rest is host memory in use")
                 + " — processes, pinned or /dev/shm segments, or what an earlier run that failed left behind."
                 + (f" Free it, or lower --gpu-memory-utilization to {new:.2f}." if flags else
                    " Free host memory first: what is left is too little to serve from.")),
        evidence=[*short[:3], named, *of_kind(run, "init_failed", "engine_dead")[:2]],
        confidence="medium",
        confidence_reason="what holds the host's memory is not in vLLM's message; the host's process table says",
        ranks=[x for x in (rank_of(r) for r in short) if x is not None],
        figures={"free_gpu_bytes": free, "total_gpu_bytes": total, "gpu_memory_utilization": util,
                 "held_by_others_bytes": held, "corrected_gpu_memory_utilization": new, "unified_memory_gpu": name},
        flags=flags,
        actions=["List what holds host memory: `free -g`, `ps -eo pid,rss,etime,args --sort=-rss | head -20` and "
                 "`du -sh /dev/shm`; stop what should not run (an earlier engine's workers, a notebook, a desktop "
                 "session) — nvidia-smi does not list it on this GPU.",
                 "A launcher that retries on failure makes it worse: each failed start can leave memory behind. Start "
                 "once by hand after the host is clean.",
                 "--gpu-memory-utilization is a share of the whole unified memory the OS also lives in: keep it "
                 "below what is free at start-up and leave the OS its own room."],
    )

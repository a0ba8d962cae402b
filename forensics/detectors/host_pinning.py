"""SGL-HOST-007: pinning a host memory pool failed — the pool is larger than the host can lock.

Sources: SGL-HOST-007 and SGL-HOST-009 read reference/failure_messages.md §2.4 (pinned host memory), the
kernel OOM-kill block (reference/system_formats.md §4.1) and the per-rank pools of reference/sglang_formats.md
§4.

HiCache (and other host pools) are allocated and then registered with ``cudaHostRegister``. The NVIDIA
kernel module imports the range in ``RmCreateOsDescriptor`` (NVIDIA/open-gpu-kernel-modules,
``src/nvidia/arch/nvalloc/unix/src/escape.c``): ``os_lock_user_pages`` pins it with ``pin_user_pages``;
when that fails (``NV_ERR_INVALID_ADDRESS``) it tries the range as an I/O mapping,
``os_lookup_user_io_memory`` (``kernel-open/nvidia/os-mlock.c``), which for ordinary RAM prints
``nv_printf(NV_DBG_ERRORS, "Cannot map memory with base addr 0x%llx and size of 0x%llx pages\\n", …)``.
So the line proves the kernel would not pin those pages — RAM or the cgroup's limit exhausted most
often; some kernels also refuse very large single ranges whatever is free, which is why the host's
facts set the confidence. SGLang 0.5.15+ raises with the runtime's code (failure_messages.md §2.4)::

    Cannot map memory with base addr 0x7fa0c0000000 and size of 0x500000 pages      (0x500000 × 4 KiB = 20 GiB)
    RuntimeError: cudaHostRegister failed (rc=2, out of memory) for ptr=0x7fa0c0000000 size=21474836480; …

``rc=2`` (cudaErrorMemoryAllocation) is the kernel refusing to lock that much RAM. A registration refused
with another code (``rc=1``, cudaErrorInvalidValue) is not a shortage by itself: it is this rule's only
when the launch's arithmetic says the ranks' pools exceed the host; otherwise SGL-RUN-001 reports it
with the fact that decides. SGLang 0.5.5–0.5.12 ignored the return code, so the failure surfaced later
as a confusing error at the first copy to the GPU.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from forensics.facts.host_memory import host_memory
from forensics.facts.launch import ranks_per_host, server_config
from forensics.facts.lmcache import cpu_pool
from forensics.facts.rows import Row, attrs, rank_of, rows
from forensics.facts.vllm import settings, vllm_runs
from forensics.model import Finding, FlagChange, Timeline
from parsers.failures import HICACHE_HOST_SMALLER

from ._common import GIB, fmt_gib, make_finding
from .fatal_other import failure_class
from .per_rank_overallocation import HICACHE_UNIT
from .vllm_host_memory import engine_ranks, ranks_of

#: with no host figures, propose at most this share of what failed to pin
BLIND_SHARE = 0.5
RESERVE_SHARE = 0.1


#: frames of SGLang's host pools: a failure raised inside them is the pool's allocation or pinning failing
_HOST_POOL_FRAMES = re.compile(r"memory_pool_host\.py|pool_host/|in init_kv_buffer|in _cuda_host_register|"
                               r"in alloc_with_host_register|cudaHostRegister")


def _pin_failures(tl: Timeline) -> list[Row]:
    out = [r for r in rows(tl, "failure") if failure_class(r) == "kernel_map_failed"]
    out += [r for r in rows(tl, "cuda_error_oom") if attrs(r).get("host_pinned")]
    out += [r for r in rows(tl, "failure", "scheduler_exception")
            if r not in out and attrs(r).get("failure") not in ("kernel_map_failed", "host_register_refused")
            and not _REFUSED_RC.search(r.get("text") or "") and _HOST_POOL_FRAMES.search(r.get("text") or "")
            and not HICACHE_HOST_SMALLER.search(r.get("text") or "")]  # a pool smaller than the device's: SGL-HOST-011
    return out


#: a registration refused with a CUDA code other than 2 (out of memory): not a shortage by itself
_REFUSED_RC = re.compile(r"cudaHostRegister failed \(rc=(?!2\b)\d+")


def detect(tl: Timeline) -> list[Finding]:
    return _pin_failed(tl) + detect_killed_with_pool(tl)


def _pin_failed(tl: Timeline) -> list[Finding]:
    fails = _pin_failures(tl)
    if not fails:
        return []
    cfg = server_config(tl)
    if vllm_runs(tl) and cfg.get("hicache_size") is None and cfg.get("hicache_ratio") is None:
        return []  # vLLM's per-GPU host memory: VLLM-HOST-001 (vllm_host_memory.pinning_failed)
    size = max((float(r["bytes"]) for r in fails if r.get("bytes")), default=None)
    ranks, ranks_how = ranks_per_host(cfg)
    capacity = host_memory(tl).capacity  # the host's facts, as every host-memory finding reads them
    flags: list[FlagChange] = []
    reasons = []
    if capacity:
        budget = capacity * (1 - RESERVE_SHARE)
        per_rank_gb = math.floor(budget / ranks / 1e9)
        why = (f"{fmt_gib(capacity)} host memory − {RESERVE_SHARE:.0%} reserve = {fmt_gib(budget)}; ÷ {ranks} rank(s) "
               f"({ranks_how}) = {fmt_gib(budget / ranks)} per rank, so {per_rank_gb} GB ({HICACHE_UNIT}) = "
               f"{fmt_gib(per_rank_gb * 1e9)}")
    elif size:
        per_rank_gb = math.floor(size * BLIND_SHARE / 1e9)
        why = (f"the pool that failed to pin was {fmt_gib(size)}; half of it is {per_rank_gb} GB ({HICACHE_UNIT}), "
               "until `free -g` shows what this host can lock for all its ranks")
        reasons.append("host memory not in the input")
    else:
        per_rank_gb, why = 0, ""
        reasons.append("neither the pool's size nor host memory is in the input")
    if cfg.get("hicache_ratio") is not None and cfg.get("hicache_size") in (None, 0, "0"):
        ratio = cfg.num("hicache_ratio") or 2.0
        new_ratio = max(round(ratio * BLIND_SHARE, 2), 1.0)
        flags.append(FlagChange("--hicache-ratio", cfg.flag_text("hicache_ratio"), f"{new_ratio:g}",
                                "the host pool is --hicache-ratio × the device KV pool per rank; " + (why or "halve it")))
    elif per_rank_gb >= 1:
        flags.append(FlagChange("--hicache-size", cfg.flag_text("hicache_size"), str(per_rank_gb), why))
    if cfg.get("hicache_size") is None and cfg.get("hicache_ratio") is None:
        reasons.append("the launch flags are not in the input (HiCache assumed to be the pool)")
    return [make_finding(
        "SGL-HOST-007",
        summary=("Pinning a host memory pool" + (f" of {fmt_gib(size)}" if size else "")
                 + " failed: the host could not lock that much RAM. The per-rank HiCache pool (× the ranks on the "
                 "host) is larger than the memory available" + (f"; lower it to {flags[0].new}" if flags else "") + "."),
        evidence=fails[:4] + cfg.evidence_rows("hicache_size", "hicache_ratio"),
        confidence="high" if not reasons else "low",  # the failure, the host and the flags all stated
        confidence_reason="; ".join(reasons) or None,
        ranks=[x for x in (rank_of(r) for r in fails) if x is not None],
        figures={"pin_failed_bytes": int(size) if size else None, "ranks_per_host": ranks},
        flags=flags,
        actions=["`free -g` and `ulimit -l` (memlock) on the host; in a container, its memory limit.",
                 "Size the pool per rank: ranks on the host × per-rank pool must stay below available memory.",
                 "Upgrade SGLang: from 0.5.15 a failed cudaHostRegister is reported at once instead of as a later "
                 "error."],
    )]


# ---------------------------------------------------------------------------------------------
# SGL-HOST-009: a rank killed for host memory while holding its pinned pool

#: shared/pinned memory this large a share of the victim's resident memory is a pinned pool, not a heap
PINNED_SHARE = 0.5


def _victims_with_pools(tl: Timeline) -> list[Row]:
    out = []
    for r in rows(tl, "oom_kill", "failure"):
        if r.get("kind") == "failure" and failure_class(r) != "oom_killed":
            continue
        a = attrs(r)
        shmem = a.get("shmem_rss_bytes") or 0
        total = r.get("used_bytes") or 0
        comm = str(r.get("comm") or "")
        if shmem and total and shmem >= PINNED_SHARE * total and (comm.startswith(("sglang", "VLLM", "python", "ray::"))):
            out.append(r)
    return out


def detect_killed_with_pool(tl: Timeline) -> list[Finding]:
    """The kernel killed an engine rank whose resident memory was mostly a pinned/shared pool, on a server that
    gives every rank its own host pool: ranks × per-rank pool is what exhausted the host.

    Per-rank pools: SGLang's HiCache (``--hicache-size``/``--hicache-ratio`` per rank); vLLM's per-GPU
    ``--cpu-offload-gb`` (the UVA offloader logs each rank's ``Total CPU offloaded parameters``),
    ``--swap-space`` and ``--kv-offloading-size`` (one engine's, over its TP × PP ranks), LMCache's
    ``LMCACHE_MAX_LOCAL_CPU_SIZE`` (GB per worker: :func:`vllm_host_memory.lmcache_cpu_size`; the vLLM connector
    builds one LMCacheEngine, with its own CPU backend, in every worker: each rank logs ``Creating LMCacheEngine
    instance``). PyTorch's pinned host allocator rounds each block up to a power of two (failure_messages.md
    §2.4), so a rank's pinned share can exceed its setting.
    """
    victims = _victims_with_pools(tl)
    if not victims:
        return []
    pool = _per_rank_pool(tl, victims)
    if pool is None:
        return []
    words, pool_rows, ranks, ranks_how, flags_of = pool
    if ranks < 2:
        return []
    pinned = max(int(attrs(v).get("shmem_rss_bytes") or 0) for v in victims)
    capacity = host_memory(tl).capacity  # the host's RAM or the container's limit, when the input states one
    if words != "HiCache host pool":
        capacity = None  # vLLM's pools: bounded by the victim's pool (vllm_host_memory sizes them against the host)
    if capacity and capacity > pinned:
        # the host's own budget, as every host-memory finding reads it; each flag floors the share in its unit
        flags = flags_of(capacity * (1 - RESERVE_SHARE) / ranks, capacity, ranks, ranks_how)
    else:
        # the host held at least this one rank's pool: all ranks together must stay below it (a lower bound on RAM)
        flags = flags_of(pinned * (1 - RESERVE_SHARE) / ranks, pinned, ranks, ranks_how)
    return [make_finding(
        "SGL-HOST-009",
        summary=(f"The kernel killed {victims[0].get('comm') or 'a rank'} while {fmt_gib(pinned)} of its memory was "
                 f"pinned/shared host memory: every one of the {ranks} ranks pins its own {words}, and together they "
                 "exhausted host memory." + (f" Set {flags[0].flag} {flags[0].new} (per rank)." if flags else "")),
        evidence=victims[:3] + pool_rows[:4],
        confidence="medium",
        confidence_reason=("the kill report names one rank; that every rank held a pool as large is read from the "
                           "launch, not observed" if capacity and capacity > pinned else
                           "host RAM is not known: the corrected size is bounded by the pool the killed rank held"),
        severity="critical",
        ranks=[],
        figures={"victim_pinned_bytes": pinned, "ranks_per_host": ranks},
        flags=flags,
        actions=["`free -g` for the host's real budget: ranks × per-rank pool must stay below available memory "
                 "less a reserve.",
                 f"The {words} is per rank; pinned blocks are rounded up to a power of two by PyTorch's pinned "
                 "allocator, so budget for up to 2× the setting per rank."],
    )]


#: (bytes one rank may pin, the killed rank's pinned bytes, ranks per host, how counted) → the flag change
_FlagsOf = Callable[[float, int, int, str], list[FlagChange]]


def _per_rank_pool(tl: Timeline, victims: list[Row]) -> tuple[str, list[Row], int, str, _FlagsOf] | None:
    """The per-rank host pool the server gives every rank: (its name, evidence, ranks per host, how counted, the
    flag change for a per-rank size in GB); None when nothing says every rank has one."""
    cfg = server_config(tl)
    capacity_of = host_memory(tl).capacity
    if cfg.enabled("enable_hierarchical_cache") or cfg.get("hicache_size") not in (None, 0, "0") \
            or cfg.get("hicache_ratio") is not None:
        ranks, how = ranks_per_host(cfg)

        def hicache_flags(share: float, bound: int, n: int, n_how: str) -> list[FlagChange]:
            gb = math.floor(share / 1e9)
            held = capacity_of is not None and bound == capacity_of
            why = ((f"the host's {fmt_gib(bound)} − {RESERVE_SHARE:.0%} reserve ÷ {n} ranks ({n_how}) = "
                    f"{fmt_gib(share)} per rank, so {gb} GB ({HICACHE_UNIT}) = {fmt_gib(gb * 1e9)}") if held else
                   (f"one rank's pinned pool was {fmt_gib(bound)} when the host ran out; the host held at least that, "
                    f"so {n} ranks ({n_how}) × {gb} GB ({HICACHE_UNIT}) = {fmt_gib(n * gb * 1e9)} stays below "
                    f"{fmt_gib(bound)} − {RESERVE_SHARE:.0%} reserve — `free -g` gives the real budget"))
            old = cfg.flag_text("hicache_size") if cfg.get("hicache_size") not in (None, 0, "0") else None
            return [FlagChange("--hicache-size", old, str(gb), why)] if gb >= 1 else []
        return ("HiCache host pool", cfg.evidence_rows("hicache_size", "hicache_ratio", "enable_hierarchical_cache",
                                                     "tp_size"), ranks, how, hicache_flags)
    return _vllm_pool(tl, victims)


#: vLLM's per-GPU host memory flags and LMCache's per-worker size (engines' concept names)
_VLLM_POOL_FLAGS = (("cpu_offload_gb", "--cpu-offload-gb", "offloaded weights"),
                    ("swap_space", "--swap-space", "swap space"),
                    ("kv_offloading_size", "--kv-offloading-size", "KV offload buffer"))
#: the parallel groups vLLM names in a worker's process title (v1 multiproc_executor: ``Worker_TP1``, ``_PP``,
#: ``_DP`` appended only when that group has more than one rank); the kernel's comm keeps 15 characters
_PARALLEL_TITLE = re.compile(r"_(?:TP|PP|DP)\b|_(?:TP|PP|DP)\d")


def _vllm_pool(tl: Timeline, victims: list[Row]) -> tuple[str, list[Row], int, str, _FlagsOf] | None:
    runs = vllm_runs(tl)
    run = runs[-1] if runs else []
    cfg = settings(tl, run)
    logged = [r for r in rows(tl, "host_pool") if attrs(r).get("per_rank")]
    set_flags = [(key, flag, words) for key, flag, words in _VLLM_POOL_FLAGS if (cfg.num(key) or 0) > 0]
    lmcache_pool = cpu_pool(tl)
    lmcache, lmcache_gb = lmcache_pool.row, lmcache_pool.gib
    if not logged and not set_flags and not lmcache_gb:
        return None
    ranks, how = ranks_of(cfg)
    if ranks < 2 and any(_PARALLEL_TITLE.search(str(v.get("comm") or "")) for v in victims):
        ranks, how = 2, "at least 2: vLLM titles a worker Worker_TP<n> only when tensor parallel > 1"
    words = (set_flags[0][2] if set_flags else "offloaded weights" if logged else "LMCache CPU backend")

    tp = engine_ranks(cfg)  # --kv-offloading-size is one engine's, over its TP × PP ranks

    def vllm_flags(share: float, pinned: int, n: int, n_how: str) -> list[FlagChange]:
        # vLLM's host flags and LMCache's size are GiB (vllm_formats.md: `* GiB_bytes`; LMCache allocates
        # max_local_cpu_size * 1024**3), per GPU / worker except --kv-offloading-size, which is per TP group
        gib = math.floor(share / GIB)
        why = (f"one rank held {fmt_gib(pinned)} pinned when the kernel killed it; {n} ranks ({n_how}) each pin "
               f"their own, so {n} × {gib} GiB per rank = {fmt_gib(n * gib * GIB)} stays below {fmt_gib(pinned)} "
               f"− {RESERVE_SHARE:.0%} reserve — `free -g` gives the real budget")
        if gib < 1:
            return []
        if set_flags:
            key, flag, _w = set_flags[0]
            if key == "kv_offloading_size":
                return [FlagChange(flag, cfg.text(key), str(gib * tp), why + f"; the flag is GiB for one engine's "
                                   f"TP × PP ranks together: {tp} × {gib} GiB")]
            return [FlagChange(flag, cfg.text(key), str(gib), why)]
        if lmcache_gb:
            return [FlagChange(lmcache_pool.flag, f"{lmcache_gb:g}", str(gib), why + lmcache_pool.fix_note())]
        return [FlagChange("--cpu-offload-gb", None, str(gib), why + "; the offloaded share is set by "
                           "--cpu-offload-gb (GiB per GPU)")]
    evidence = [*logged[:2], *cfg.evidence_rows(*(k for k, _f, _w in set_flags), "tensor_parallel_size"),
                *([lmcache] if lmcache is not None and lmcache_gb else [])]
    return words, evidence, ranks, how, vllm_flags

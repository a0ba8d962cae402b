"""SGL-HOST-007: pinning a host memory pool failed — the pool is larger than the host can lock.

HiCache (and other host pools) are ``mmap``ed and then registered with ``cudaHostRegister``; when the
host cannot lock that much RAM the kernel says so and the call fails::

    Cannot map memory with base addr 0x7f134c660000 and size of 0xf179a0 pages
    RuntimeError: cudaHostRegister failed (rc=2, out of memory) for ptr=0x… size=64424509440; …

0xf179a0 pages × 4 KiB = 60.4 GiB: the size of the requested pool. SGLang 0.5.5–0.5.12 ignored the
return code, so the failure surfaced later as a confusing error at the first copy to the GPU.
"""

from __future__ import annotations

import math
import re

from forensics.facts.launch import ranks_per_host, server_config
from forensics.facts.rows import Row, attrs, rank_of, rows
from forensics.model import Finding, FlagChange, Timeline

from ._common import fmt_gib, make_finding
from .fatal_other import failure_class

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
            if r not in out and failure_class(r) != "kernel_map_failed" and _HOST_POOL_FRAMES.search(r.get("text") or "")]
    return out


def detect(tl: Timeline) -> list[Finding]:
    return _pin_failed(tl) + detect_killed_with_pool(tl)


def _pin_failed(tl: Timeline) -> list[Finding]:
    fails = _pin_failures(tl)
    if not fails:
        return []
    cfg = server_config(tl)
    size = max((float(r["bytes"]) for r in fails if r.get("bytes")), default=None)
    ranks, ranks_how = ranks_per_host(cfg)
    totals = [r for r in rows(tl, "host_memory") if r.get("total_bytes")]
    flags: list[FlagChange] = []
    reasons = []
    if totals:
        total = float(min(r["total_bytes"] for r in totals))
        budget = total * (1 - RESERVE_SHARE)
        per_rank_gb = math.floor(budget / ranks / 1e9)
        why = (f"{fmt_gib(total)} host memory − {RESERVE_SHARE:.0%} reserve = {fmt_gib(budget)} ÷ {ranks} rank(s) "
               f"({ranks_how}) → {per_rank_gb} GB per rank")
    elif size:
        per_rank_gb = math.floor(size * BLIND_SHARE / 1e9)
        why = (f"the pool that failed to pin was {fmt_gib(size)}; half of it, until `free -g` shows what this host can "
               "lock for all its ranks")
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
        confidence="medium" if not reasons else "low",
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
    gives every rank a host pool (HiCache): ranks × per-rank pool is what exhausted the host."""
    victims = _victims_with_pools(tl)
    if not victims:
        return []
    cfg = server_config(tl)
    hicache = cfg.enabled("enable_hierarchical_cache") or cfg.get("hicache_size") not in (None, 0, "0") \
        or cfg.get("hicache_ratio") is not None
    if not hicache:
        return []
    ranks, ranks_how = ranks_per_host(cfg)
    if ranks < 2:
        return []
    pool = max(int(attrs(v).get("shmem_rss_bytes") or 0) for v in victims)
    # the host held at least this one rank's pool: all ranks together must stay below it (a lower bound on RAM)
    per_rank_gb = math.floor(pool * (1 - RESERVE_SHARE) / ranks / 1e9)
    flags: list[FlagChange] = []
    why = (f"one rank's pinned pool was {fmt_gib(pool)} when the host ran out; the host held at least that, so "
           f"{ranks} ranks ({ranks_how}) × {per_rank_gb} GB stays below it with a {RESERVE_SHARE:.0%} reserve — "
           "`free -g` gives the real budget")
    if per_rank_gb >= 1:
        flags.append(FlagChange("--hicache-size", cfg.flag_text("hicache_size")
                                if cfg.get("hicache_size") not in (None, 0, "0") else None, str(per_rank_gb), why))
    return [make_finding(
        "SGL-HOST-009",
        summary=(f"The kernel killed {victims[0].get('comm') or 'a rank'} while {fmt_gib(pool)} of its memory was a "
                 f"pinned host pool: every one of the {ranks} ranks pins its own HiCache pool, and together they "
                 f"exhausted host memory." + (f" Set --hicache-size {per_rank_gb} (per rank)." if flags else "")),
        evidence=victims[:3] + cfg.evidence_rows("hicache_size", "hicache_ratio", "enable_hierarchical_cache",
                                                 "tp_size"),
        confidence="medium",
        confidence_reason="host RAM is not known: the corrected size is bounded by the pool the killed rank held",
        severity="critical",
        ranks=[],
        figures={"victim_pinned_bytes": pool, "ranks_per_host": ranks},
        flags=flags,
        actions=["`free -g` for the host's real budget: ranks × per-rank pool must stay below available memory "
                 "less a reserve.",
                 "HiCache sizes are per rank (`--hicache-size` GB, or `--hicache-ratio` × the device KV pool)."],
    )]

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

from forensics.model import Finding, FlagChange, Timeline

from ._common import Row, attrs, fmt_gib, make_finding, rank_of, ranks_per_host, rows, server_config
from .fatal_other import failure_class

#: with no host figures, propose at most this share of what failed to pin
BLIND_SHARE = 0.5
RESERVE_SHARE = 0.1


def _pin_failures(tl: Timeline) -> list[Row]:
    out = [r for r in rows(tl, "failure") if failure_class(r) == "kernel_map_failed"]
    out += [r for r in rows(tl, "cuda_error_oom") if attrs(r).get("host_pinned")]
    return out


def detect(tl: Timeline) -> list[Finding]:
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

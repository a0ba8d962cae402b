"""SGL-HOST-011: SGLang refused a HiCache host pool that is not larger than the device KV pool it backs.

Sources: reference/sglang_formats.md §4 (the host pool's size and its assertion); sglang
python/sglang/srt/mem_cache/memory_pool_host.py (0.4.8-0.5.13) ``HostKVCache.__init__``.

The host tier holds what the device pool evicts, so SGLang's protocol wants it larger: the pool is
``--hicache-size`` GB (10^9 bytes) per rank ÷ the bytes of a token, or ``--hicache-ratio`` × the rank's device KV
pool (``#tokens`` of "KV Cache is allocated"), rounded to pages; then ``assert self.size > device_pool.size, "The
host memory should be larger than the device memory with the current protocol"`` (parsers/failures.py
``HICACHE_HOST_SMALLER``). A ratio below 1, or a ``--hicache-size`` smaller than the device pool's bytes, stops the
start-up there: a sizing relation between two pools of the same rank, not the host running out of RAM (that is
SGL-HOST-002's refusal or SGL-HOST-001's arithmetic), and the fix grows the host pool. From 0.5.15 the same
relation only warns (``HiCache host KV pool (N tokens) is smaller than the device pool (M tokens)``).

>>> host_gb_for(331776, 131072)
87
"""

from __future__ import annotations

import math

from forensics.facts.launch import server_config
from forensics.facts.rows import Row, rank_of, row_words, rows
from forensics.model import Finding, FlagChange, Timeline
from parsers.failures import HICACHE_HOST_SMALLER

from ._common import fmt_gb, make_finding

#: the ratio proposed: SGLang's default (--hicache-ratio 2.0 up to 0.5.19), twice the device pool
DEFAULT_RATIO = 2.0
_KINDS = ("scheduler_exception", "exception", "failure", "init_failed")


def host_gb_for(device_tokens: int, bytes_per_token: float, ratio: float = DEFAULT_RATIO) -> int:
    """``--hicache-size`` (GB, 10^9 bytes, per rank) holding ``ratio`` × the device pool's tokens."""
    return math.ceil(ratio * device_tokens * bytes_per_token / 1e9)


def refused(tl: Timeline) -> list[Row]:
    """The rows that carry SGLang's host-smaller-than-device assertion."""
    return [r for r in rows(tl, *_KINDS) if HICACHE_HOST_SMALLER.search(row_words(r))]


def detect(tl: Timeline) -> list[Finding]:
    hits = refused(tl)
    if not hits:
        return []
    cfg = server_config(tl)
    kv = [r for r in rows(tl, "kv_cache_allocated") if r.get("tokens")]
    device = max(kv, key=lambda r: r["tokens"]) if kv else None
    tokens = int(device["tokens"]) if device else None
    per_token = device["bytes"] / device["tokens"] if device and device.get("bytes") else None
    size_gb = cfg.num("hicache_size")
    ratio = cfg.num("hicache_ratio")
    by_size = bool(size_gb and size_gb > 0)
    flags: list[FlagChange] = []
    sized = ""
    if by_size and tokens and per_token:
        host_tokens = int(size_gb * 1e9 // per_token)
        new_gb = host_gb_for(tokens, per_token)
        sized = (f": --hicache-size {size_gb:g} GB per rank ÷ {per_token:,.0f} bytes per token = {host_tokens:,} tokens, "
                 f"not more than the device pool's {tokens:,}")
        flags.append(FlagChange("--hicache-size", cfg.flag_text("hicache_size"), str(new_gb),
                                f"{DEFAULT_RATIO:g} × the device pool: {DEFAULT_RATIO:g} × {tokens:,} tokens × "
                                f"{per_token:,.0f} bytes = {fmt_gb(DEFAULT_RATIO * tokens * per_token)} per rank"))
    elif not by_size:
        shown = ratio if ratio is not None else None
        if tokens and shown is not None:
            sized = (f": --hicache-ratio {shown:g} × the device pool's {tokens:,} tokens = {int(tokens * shown):,} "
                     f"tokens, not more than {tokens:,}")
        flags.append(FlagChange("--hicache-ratio", cfg.flag_text("hicache_ratio"), f"{DEFAULT_RATIO:g}",
                                "the host pool is --hicache-ratio × the device KV pool per rank and must exceed it; "
                                f"{DEFAULT_RATIO:g} is SGLang's default"
                                + (f" ({int(DEFAULT_RATIO * tokens):,} tokens"
                                   + (f", {fmt_gb(DEFAULT_RATIO * tokens * per_token)} per rank)" if per_token else ")")
                                   if tokens else "")))
    summary = ("SGLang refused the HiCache host pool because it is not larger than the device KV pool it backs"
               + sized + ". A sizing relation between the two pools of each rank, not a shortage of host RAM: grow "
               "the host pool.")
    actions = [
        "Raise --hicache-ratio above 1 (2 is the default) or --hicache-size per rank above the device pool's bytes; "
        "then check that ranks on the host × the new per-rank pool still fits its RAM (`free -g`).",
        "Or shrink the device pool instead (a lower --mem-fraction-static or --max-total-tokens) when the host "
        "cannot hold more.",
        "SGLang 0.5.15+ only warns for this relation (the host tier then barely caches anything).",
    ]
    return [make_finding(
        "SGL-HOST-011", summary=summary,
        evidence=[*hits[:3], *([device] if device else []), *cfg.evidence_rows("hicache_ratio", "hicache_size")],
        confidence="high" if sized else "medium",
        confidence_reason=None if sized else "the device pool's size or the host pool's flag is not in the input",
        ranks=[x for x in (rank_of(r) for r in hits) if x is not None],
        figures={"device_pool_tokens": tokens, "bytes_per_token": per_token, "hicache_ratio": ratio,
                 "hicache_size_gb": size_gb},
        flags=flags, actions=actions,
    )]

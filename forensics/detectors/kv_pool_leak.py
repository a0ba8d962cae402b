"""SGL-RUN-004: SGLang's own KV-pool accounting check found slots that are neither free nor held: an engine bug.

Sources: reference/sglang_formats.md §6 (the idle self-check's ``token_to_kv_pool_allocator memory leak detected!``,
``req_to_token_pool memory leak detected!``); sglang python/sglang/srt/managers/scheduler.py (0.4.5-0.5.x)
``check_memory``; the busy-time invariant checker, sglang
python/sglang/srt/managers/scheduler_runtime_checker_mixin.py (0.5.x) ``Full Pool Mem Leak Detected!`` /
``SWA Pool Mem Leak Detected!`` (parsers/failures.py ``KV_POOL_LEAK``).

When the scheduler is idle (or, with ``SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY``, between batches) it adds its
pool's buckets (available, evictable, protected, …) and compares the sum with the pool's size. A difference is a
slot the allocator lost (or counted twice): the engine's own bookkeeping, whatever the pool's size, so no sizing
flag fixes it. Older releases raise at once (the scheduler dies); later ones raise only with the strict-check
variables (``SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE``) and otherwise log a warning and go on serving with a
pool that shrinks by the leaked slots.

>>> accounting("full_avail=401152, full_evict=0, full_protected=0 (expected 401408)")
(401152, 401408)
>>> accounting("[swa] total=322816, available=2816, evictable=308992, protected=2560, session_held=0, uncached=8704")
(323072, 322816)
"""

from __future__ import annotations

import re

from forensics.facts.rows import Row, rank_of, row_words, rows
from forensics.model import Finding, Timeline
from parsers.failures import KV_POOL_LEAK

from ._common import make_finding

_KINDS = ("memory_leak", "failure", "scheduler_exception", "exception")
#: the checks' ``name=value`` figures (the scheduler's f-strings ``{available_size=}``, ``full_avail=``, ``[swa]
#: total=``): reference/sglang_formats.md §6
_FIGURE = re.compile(r"\b(?:self\.)?([a-z_]{3,40})=(\d{1,12})\b")
#: the size the buckets must add up to (``(expected N)`` in the 0.5.x hybrid check)
_EXPECTED = re.compile(r"\(expected (\d{1,12})\)")
_TOTAL_NAMES = ("max_total_num_tokens", "total", "total_size", "size", "expected")
_BUCKET = re.compile(r"avail|evict|protected|session_held|uncached")


def accounting(text: str) -> tuple[int, int] | None:
    """(sum of the pool's buckets, its size) as the check printed them, or None."""
    figures = dict(_FIGURE.findall(text))
    total = next((int(figures[n]) for n in _TOTAL_NAMES if n in figures), None)
    if (e := _EXPECTED.search(text)) is not None:
        total = int(e.group(1))
    buckets = [int(v) for k, v in figures.items() if _BUCKET.search(k) and k not in _TOTAL_NAMES]
    return (sum(buckets), total) if total is not None and buckets else None


def _raised(row: Row) -> bool:
    return row.get("kind") in ("scheduler_exception", "exception") or "Error:" in row_words(row)


def detect(tl: Timeline) -> list[Finding]:
    hits = [r for r in rows(tl, *_KINDS) if KV_POOL_LEAK.search(row_words(r))]
    if not hits:
        return []
    died = any(_raised(r) for r in hits) or bool(rows(tl, "sigquit"))
    counted = next((c for c in (accounting(KV_POOL_LEAK.split(row_words(r), 1)[-1]) for r in hits) if c), None)
    figures: dict = {"checks": len(hits), "server_died": died}
    said = ""
    if counted:
        summed, total = counted
        gap = total - summed
        figures.update(buckets_sum=summed, pool_size=total, slots_off=gap)
        said = (f" (its buckets add up to {summed:,} of a pool of {total:,}: "
                + (f"{gap:,} slots lost" if gap > 0 else f"{-gap:,} slots counted twice" if gap < 0 else "no gap") + ")")
    summary = ("SGLang's own KV-pool accounting check found that its free, evictable and held slots do not add up to "
               "the pool's size" + said
               + ": a bug in the engine's allocator bookkeeping, not a pool too small for the load"
               + ("; the scheduler raised and the server died." if died else
                  "; logged as a warning, the server went on with a pool that shrinks by the lost slots."))
    actions = [
        "Not a sizing problem: do not change --mem-fraction-static, --max-total-tokens or the HiCache sizes for it.",
        "Upgrade SGLang (the check's leaks are fixed release by release) and report the line with the features in "
        "use (speculative decoding, hierarchical cache, paged or SWA pools, the radix cache); turning the feature "
        "that leaks off avoids it meanwhile.",
        "Newer releases raise only when SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE (or _DURING_BUSY) is set; unset, "
        "they warn and keep serving while the pool loses the slots.",
    ]
    return [make_finding(
        "SGL-RUN-004", summary=summary, evidence=hits[:4],
        severity=None if died else "medium", confidence="high",
        ranks=[x for x in (rank_of(r) for r in hits) if x is not None],
        figures=figures, actions=actions,
    )]

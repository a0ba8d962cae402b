"""SGL-KV-001/002/003: the KV cache pool is too small for the load or for one request.

Samples::

    [2025-11-20 11:02:44 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_token_ratio: 0.4132 -> 0.7021
    [2025-11-20 09:19:43 TP0] max_total_num_tokens=221628, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=2048, context_len=262144, available_gpu_mem=1.89 GB

>>> pressure_severity(retract_events=1, growing_queue=False)
'low'
>>> pressure_severity(retract_events=3, growing_queue=False)
'medium'
"""

from __future__ import annotations

import re

from forensics.facts.launch import server_config
from forensics.facts.rows import Row, attrs, rank_of
from forensics.facts.runs import iter_runs, of_kind
from forensics.model import Finding, Timeline

from ._common import make_finding, tag_run

FULL_USAGE = 0.95  # decode token usage counted as "full"
FULL_BATCHES = 3  # this many full decode batches with a non-shrinking queue = pressure
SATURATED_USAGE = 0.99  # a pool this full with requests queued in two batches is the bottleneck
MANY_RETRACTS = 3


def pressure_severity(*, retract_events: int, growing_queue: bool) -> str:
    return "medium" if retract_events >= MANY_RETRACTS or growing_queue else "low"


def _queue(row: Row) -> int | None:
    q = attrs(row).get("queue_req")
    return int(q) if isinstance(q, int | float) else None


def detect(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    for ref, run in iter_runs(tl):
        cfg = server_config(tl, run)
        out += [tag_run(f, ref) for f in (*_exhausted(run), *_pressure(run, cfg), *_too_long(run))]
    return out


_TRIED_RE = re.compile(r"Try to allocate (\d+) tokens")
# a traceback frame and the source line it shows
_FRAME_RE = re.compile(r'File "[^"]*", line \d+, in (\w+)[ \t]*\n[ \t]*([^\n]*)')
# SGLang's KV-slot allocators (mem_cache/common.py, schedule_batch.py): a raise there is KV exhaustion
_KV_ALLOC_FUNC_RE = re.compile(r"^alloc_(?:\w*token_slots\w*|for_(?:extend|decode))$")


def raised_in_kv_allocator(text: str) -> bool:
    """The traceback's innermost frame is an SGLang KV allocator raising (not a CUDA OOM inside it).

    >>> raised_in_kv_allocator('File "x/mem_cache/common.py", line 4, in alloc_paged_token_slots_extend\\n    raise RuntimeError(e')
    True
    >>> raised_in_kv_allocator('File "x/mem_cache/common.py", line 4, in alloc_for_extend\\n    t = torch.empty(n)')
    False
    """
    if "OutOfMemoryError" in text or "CUDA out of memory" in text:
        return False
    start = text.rfind('File "')
    m = _FRAME_RE.match(text, start) if start >= 0 else None
    return bool(m and _KV_ALLOC_FUNC_RE.match(m.group(1)) and m.group(2).startswith("raise"))


_AVAIL_RE = re.compile(r"Ava(?:il|li)able tokens: (\d+)")


def _exhausted(run: list[Row]) -> list[Finding]:
    hits = of_kind(run, "kv_exhausted")
    inferred = False
    if not hits:  # the message inside a traceback the parser kept whole
        hits = [r for r in of_kind(run, "scheduler_exception")
                if "out of memory. Try to lower your batch size" in (r.get("text") or "")]
    if not hits:  # a traceback cut before its message: the KV allocator's own raise says it
        hits = [r for r in of_kind(run, "scheduler_exception") if raised_in_kv_allocator(r.get("text") or "")]
        inferred = bool(hits)
    if not hits:
        return []
    first = hits[0]
    avail = attrs(first).get("available_tokens")
    text = first.get("text") or ""
    if avail is None and _AVAIL_RE.search(text):
        avail = int(_AVAIL_RE.search(text).group(1))
    if first.get("tokens") is None and _TRIED_RE.search(text):
        first = {**first, "tokens": int(_TRIED_RE.search(text).group(1))}
    phase = attrs(first).get("phase")
    if phase is None and inferred:
        phase = "decode" if "decode" in text.rsplit('File "', 1)[-1].split("\n", 1)[0] else "prefill"
    return [make_finding(
        "SGL-KV-002",
        summary=("The KV pool ran out: a " + (f"{phase} " if phase else "") + "batch"
                 + (f" needed {first.get('tokens')} tokens" if first.get("tokens") is not None else " found no free KV slots")
                 + (f" with only {avail} available" if avail is not None else "") + "; the scheduler raised and the "
                 "server was torn down."),
        evidence=hits[:4],
        confidence="medium" if inferred else "high",
        confidence_reason=("the error message is not in the input: inferred from the traceback, whose innermost "
                           "frame is SGLang's KV-slot allocator raising") if inferred else None,
        ranks=[x for x in (rank_of(r) for r in hits) if x is not None],
        figures={"tokens_tried": first.get("tokens"), "tokens_available": avail, "events": len(hits)},
        actions=["Lower --max-running-requests and --chunked-prefill-size; enlarge the pool (--kv-cache-dtype fp8_e4m3, "
                 "more GPUs, --mem-fraction-static up if the headroom allows); newer SGLang retracts instead of crashing."],
    )]


def _pressure(run: list[Row], cfg) -> list[Finding]:
    retracts = of_kind(run, "retract")
    decodes = [r for r in of_kind(run, "decode_batch") if r.get("ratio") is not None]
    full = [r for r in decodes if r["ratio"] >= FULL_USAGE]
    queues = [q for q in (_queue(r) for r in full) if q is not None]
    growing = len(full) >= FULL_BATCHES and bool(queues) and queues[-1] > 0 and queues[-1] >= queues[0]
    # retractions happen on every rank at once: count distinct moments, not lines
    events = len({(r.get("ts"), r.get("ts_local")) if r.get("ts") or r.get("ts_local") else r.get("line") for r in retracts})
    # the pool at its limit with requests waiting, batch after batch: the pool, not compute, is what holds them
    saturated = sum(1 for r in decodes if r["ratio"] >= SATURATED_USAGE and (_queue(r) or 0) > 0) >= 2
    if not retracts and not growing and not saturated:
        return []
    retracted = sum(int(r.get("count") or 0) for r in retracts if rank_of(r) in (0, None))
    peak = max((r["ratio"] for r in decodes), default=None)
    running = cfg.num("max_running_requests")
    return [make_finding(
        "SGL-KV-001",
        summary=(f"The KV pool is under pressure: {events} retraction event(s)" if retracts else "The KV pool is full")
        + (f", decode token usage up to {peak:.2f}" if peak is not None else "")
        + (f" with the queue growing to {queues[-1]} requests" if growing else "")
        + ". Throughput suffers (retracted requests are recomputed); the server itself is healthy.",
        evidence=[*retracts[:4], *full[-3:]],
        severity=pressure_severity(retract_events=events, growing_queue=growing),
        ranks=sorted({x for x in (rank_of(r) for r in retracts) if x is not None}),
        figures={"retract_events": events, "retracted_requests_rank0": retracted or None,
                 "peak_token_usage": peak, "full_decode_batches": len(full), "queue_growing": growing},
        actions=["Lower --max-running-requests" + (f" (now {int(running)})" if running else "")
                 + " so admitted requests fit; or give the pool more room (--kv-cache-dtype fp8_e4m3, more GPUs, "
                 "--mem-fraction-static up if the headroom allows); or enable the hierarchical cache."],
    )]


def _too_long(run: list[Row]) -> list[Finding]:
    sizing = [r for r in of_kind(run, "kv_sizing") if r.get("tokens")]
    if not sizing:
        return []
    row = sizing[0]
    pool = int(row["tokens"])
    ctx = attrs(row).get("context_len")
    long_prefill = [r for r in of_kind(run, "prefill_batch") if r.get("tokens") is not None
                    and int(r["tokens"]) + int(attrs(r).get("cached_token") or 0) > pool]
    if not (isinstance(ctx, int | float) and ctx > pool) and not long_prefill:
        return []
    return [make_finding(
        "SGL-KV-003",
        summary=(f"The KV pool holds {pool} tokens per rank"
                 + (f" but the context length is {int(ctx)}" if isinstance(ctx, int | float) and ctx > pool else "")
                 + (f"; a prefill of {long_prefill[0]['tokens']} tokens was seen" if long_prefill else "")
                 + ": a full-context request can never be scheduled whole."),
        evidence=[row, *long_prefill[:2]],
        confidence="high" if long_prefill else "medium",
        confidence_reason=None if long_prefill else "only the configured context length exceeds the pool; no such request was seen",
        figures={"kv_pool_tokens": pool, "context_len": int(ctx) if isinstance(ctx, int | float) else None},
        actions=[f"Cap --context-length at {pool} or less, or enlarge the pool (--mem-fraction-static, "
                 "--kv-cache-dtype fp8_e4m3, more GPUs)."],
    )]

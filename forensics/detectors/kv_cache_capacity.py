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

from forensics.facts.crash_artifacts import longest_unfinished, snapshot_pool
from forensics.facts.launch import server_config
from forensics.facts.rows import Row, attrs, before, field, rank_of
from forensics.facts.runs import has_kind, iter_runs, of_kind
from forensics.model import Finding, FlagChange, Timeline

from ._common import make_finding, tag_run
from .batch_flags import prefill_chunk_flag, running_requests_flag

FULL_USAGE = 0.95  # decode token usage counted as "full"
FULL_BATCHES = 3  # this many full decode batches with a non-shrinking queue = pressure
#: SGLang admits a queued request only when the pool's free tokens, less what the running requests reserve, cover it
#: (``schedule_policy.py::PrefillAdder``); a request still queued at the next decode batch of a full pool outlived a
#: scheduling step for lack of KV, so the pool, not arrival, is what holds it
QUEUE_OUTLIVES_STEP = 2
MANY_RETRACTS = 3


def pressure_severity(*, retract_events: int, growing_queue: bool) -> str:
    return "medium" if retract_events >= MANY_RETRACTS or growing_queue else "low"


def _queue(row: Row) -> int | None:
    q = field(row, "queue_req")
    return int(q) if isinstance(q, int | float) else None


def detect(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    runs = iter_runs(tl)
    # the crash dump and snapshot are of the run that crashed: the last one
    longest, snap = longest_unfinished(tl), snapshot_pool(tl)
    for i, (ref, run) in enumerate(runs):
        cfg = server_config(tl, run)
        last = i == len(runs) - 1
        out += [tag_run(f, ref) for f in (*(_req_slots(run, cfg) or _exhausted(run, cfg)), *_pressure(run, cfg),
                                          *_too_long(run, longest if last else None, snap if last else None, cfg))]
    if not runs and (longest or snap):
        out += _too_long([], longest, snap, server_config(tl))
    return out


# reference/sglang_formats.md §6 (KV-pool exhaustion: ``Try to allocate N tokens``, ``Available tokens: N``)
_TRIED_RE = re.compile(r"Try to allocate (\d+) tokens")
# a traceback frame and the source line it shows
# a frame as cpython Lib/traceback.py (3.x) prints it; the allocators of sglang
# python/sglang/srt/mem_cache/common.py (main, 0.5.x; managers/schedule_batch.py in 0.4.x)
_FRAME_RE = re.compile(r'File "[^"]*", line \d+, in (\w+)[ \t]*\n[ \t]*([^\n]*)')
# SGLang's KV-slot allocators (mem_cache/common.py, schedule_batch.py): a raise there is KV exhaustion
_KV_ALLOC_FUNC_RE = re.compile(r"^alloc_(?:\w*token_slots\w*|for_(?:extend|decode))$")
#: a source line calling one of those allocators (``batch.out_cache_loc = alloc_token_slots(``)
_KV_ALLOC_CALL_RE = re.compile(r"\balloc_(?:\w*token_slots\w*|for_(?:extend|decode))\(")


def raised_in_kv_allocator(text: str) -> bool:
    """The traceback's innermost frame is an SGLang KV allocator raising (not a CUDA OOM inside it).

    >>> raised_in_kv_allocator('File "x/mem_cache/common.py", line 4, in alloc_paged_token_slots_extend\\n    raise RuntimeError(e')
    True
    >>> raised_in_kv_allocator('File "x/mem_cache/common.py", line 4, in alloc_for_extend\\n    t = torch.empty(n)')
    False

    A traceback cut right after a frame that calls into one (the allocator's own frame lost) says the same: sglang
    python/sglang/srt/mem_cache/common.py ``alloc_token_slots`` (0.5.x) does no GPU allocation of its own, it evicts
    from the radix cache, asks the pool allocator, and raises ``RuntimeError("Out of memory. Try to lower your batch
    size. …")`` when the pool returns None:

    >>> raised_in_kv_allocator('File "x/eagle_info.py", line 111, in prepare_for_verify\\n    b.loc = alloc_token_slots(')
    True
    """
    if "OutOfMemoryError" in text or "CUDA out of memory" in text:
        return False
    start = text.rfind('File "')
    m = _FRAME_RE.match(text, start) if start >= 0 else None
    if m is None:
        return False
    if _KV_ALLOC_FUNC_RE.match(m.group(1)):
        return m.group(2).startswith("raise")
    # the innermost frame shown calls the allocator and nothing follows it: the traceback was cut inside the call
    return bool(_KV_ALLOC_CALL_RE.search(m.group(2))) and not text[m.end():].strip(" \t\n^~").strip()


# reference/sglang_formats.md §6 (``Avaliable tokens`` 0.3.6-0.4.6, ``Available tokens`` later)
_AVAIL_RE = re.compile(r"Ava(?:il|li)able tokens: (\d+)")
# the same message's breakdown (§6: ``available_size()=N`` 0.4.7-0.4.9, ``(available_size=N + evictable_size=M)``
# 0.4.10+, the hybrid pools' ``full_available_size=N``)
_FREE_RE = re.compile(r"(?:full_)?available_size(?:\(\))?=(\d+)")
#: ``schedule_batch.py::retract_decode``: with one request left to retract and no free KV slot, SGLang asserts
#: ``No space left for only one request[ in SWA mode …]`` (an AssertionError, 0.3.x–0.4.x; "Failed to retract any
#: request. No space left for only one request." from 0.4.8, sglang_formats.md §6): the assertion is how the
#: decode pool's exhaustion crashes the scheduler, so the pool, not the assertion, is the cause
_NO_SPACE_RE = re.compile(r"No space left for only one request")
_NO_SPACE_AVAIL_RE = re.compile(r"available_size\(\)=(\d+)")


#: sglang python/sglang/srt/managers/schedule_batch.py::ScheduleBatch.retract_decode (0.3-0.5.x: "Retract the
#: decoding requests when there is not enough memory") runs only when the next decode step has no free KV slot for every running request
#: (``check_decode_mem`` failed): an exception raised inside it — its own assertion or a bug in its path — is how
#: the decode pool's exhaustion crashed the scheduler
_RETRACT_FRAME_RE = re.compile(r'File "[^"]*", line \d+, in retract_decode\b')


def _retract_assertions(run: list[Row]) -> list[Row]:
    """Failure and exception rows that carry retraction's no-space assertion, or were raised inside retraction."""
    out = []
    for r in of_kind(run, "failure", "scheduler_exception"):
        a = attrs(r)
        text = " ".join(str(x) for x in (a.get("exception_message"), a.get("message"), r.get("text")) if x)
        if _NO_SPACE_RE.search(text) or _RETRACT_FRAME_RE.search(r.get("text") or ""):
            out.append(r)
    return out


def _raised_in_retraction(row: Row) -> str | None:
    """The exception raised inside retraction, when it is not retraction's own no-space assertion."""
    a = attrs(row)
    text = " ".join(str(x) for x in (a.get("exception_message"), a.get("message"), row.get("text")) if x)
    if _NO_SPACE_RE.search(text) or not _RETRACT_FRAME_RE.search(row.get("text") or ""):
        return None
    etype = a.get("exception_type")
    msg = str(a.get("exception_message") or "").strip()[:160]
    return (f"{etype}: {msg}" if msg else str(etype)) if etype else "an exception"


#: sglang python/sglang/srt/mem_cache/common.py::alloc_req_slots (0.5.x; schedule_batch.py's ScheduleBatch method in
#: 0.4.x): the request-slot
#: pool (``ReqToTokenPool``, one row per running request, sized from --max-running-requests) had no row left for the
#: batch's new requests — a capacity limit on requests, not on tokens; it prints the rows left and the rows wanted
_REQ_SLOTS_RE = re.compile(r"alloc_req_slots runs out of memory")
_REQ_SLOTS_LEFT_RE = re.compile(r"available_size\(\)=(\d+)")
_REQ_SLOTS_WANTED_RE = re.compile(r"(?:num_reqs|len\(reqs\))=(\d+)")


def _row_text(r: Row) -> str:
    a = attrs(r)
    return " ".join(str(x) for x in (a.get("exception_message"), a.get("message"), r.get("text")) if x)


def _req_slots(run: list[Row], cfg) -> list[Finding]:
    """SGL-KV-002 for the request-slot pool: every row of ``ReqToTokenPool`` held by a running request."""
    hits = [r for r in of_kind(run, "scheduler_exception", "failure", "exception") if _REQ_SLOTS_RE.search(_row_text(r))]
    if not hits:
        return []
    text = _row_text(hits[0])
    left, wanted = _REQ_SLOTS_LEFT_RE.search(text), _REQ_SLOTS_WANTED_RE.search(text)
    running = cfg.num("max_running_requests") if cfg is not None else None
    sizing = next((attrs(r) for r in of_kind(run, "kv_sizing") if attrs(r).get("max_running_requests")), {})
    running = running or sizing.get("max_running_requests")
    return [make_finding(
        "SGL-KV-002",
        summary=("The request-slot pool ran out: a batch of "
                 + (f"{wanted.group(1)} new request(s)" if wanted else "new requests")
                 + " found " + (f"only {left.group(1)} request slot(s) free" if left else "no request slot free")
                 + " in ReqToTokenPool (one row per running request"
                 + (f", --max-running-requests {int(running)}" if running else "")
                 + "); the scheduler raised and the server was torn down. It is the number of requests, not of "
                 "tokens, that ran out."),
        evidence=[*hits[:3], *[r for r in of_kind(run, "sigquit") if r not in hits][:2]],
        confidence="high",
        ranks=[x for x in (rank_of(r) for r in hits) if x is not None],
        figures={"request_slots_free": int(left.group(1)) if left else None,
                 "requests_wanted": int(wanted.group(1)) if wanted else None,
                 "max_running_requests": running, "pool": "request_slots"},
        actions=["Lower --max-running-requests" + (f" (now {int(running)})" if running else "")
                 + " as SGLang's message says: the request-slot pool and the scheduler's admission then agree.",
                 "With speculative decoding, disaggregation or a hybrid (Mamba/SWA) pool, each request takes extra "
                 "rows: leave more margin below the pool's size."],
    )]


def _exhausted(run: list[Row], cfg) -> list[Finding]:
    hits = of_kind(run, "kv_exhausted")
    inferred = False
    if not hits:  # the message inside a traceback the parser kept whole
        hits = [r for r in of_kind(run, "scheduler_exception")
                if "out of memory. Try to lower your batch size" in (r.get("text") or "")]
    retract_assert = False
    if not hits:  # retraction found nothing left to retract and asserted (the crash is the pool's)
        hits = _retract_assertions(run)
        retract_assert = bool(hits)
    if not hits:  # a traceback cut before its message: the KV allocator's own raise says it
        # (a paste that starts inside the traceback keeps no "Scheduler hit an exception" header: a bare failure)
        hits = [r for r in of_kind(run, "scheduler_exception", "exception", "failure")
                if raised_in_kv_allocator(r.get("text") or "")]
        inferred = bool(hits)
    if not hits:
        return []
    first = hits[0]
    avail = attrs(first).get("available_tokens")
    text = first.get("text") or ""
    if retract_assert:
        m = _NO_SPACE_AVAIL_RE.search(" ".join(str(v) for v in attrs(first).values() if isinstance(v, str)) + text)
        avail = int(m.group(1)) if m else avail
        first = {**first, "_attrs": {**attrs(first), "phase": "decode"}}
    if avail is None and _AVAIL_RE.search(text):
        avail = int(_AVAIL_RE.search(text).group(1))
    if first.get("tokens") is None and _TRIED_RE.search(text):
        first = {**first, "tokens": int(_TRIED_RE.search(text).group(1))}
    phase = attrs(first).get("phase")
    if phase is None and inferred:
        # speculative decoding's draft and verify steps run on decode batches (sglang python/sglang/srt/speculative/
        # eagle_worker.py ``forward_batch_generation``: a decode batch is drafted, then verified)
        last = text.rsplit('File "', 1)[-1].split("\n", 1)[0]
        phase = "decode" if re.search(r"decode|verify|draft", last) else "prefill"
    tried = first.get("tokens")
    # free without evicting: the message's own breakdown when it prints one (0.4.7+: available_size, the hybrid
    # pools' full_available_size), else the one count it prints; evictable tokens are the radix cache's, freed
    # only as far as eviction succeeds
    free = next((v for k in ("available_size", "full_available_size") if isinstance(v := attrs(first).get(k), int)),
                None)
    if free is None:
        split = _FREE_RE.search(text)  # the message inside a traceback no parser took apart
        free = int(split.group(1)) if split else avail
    if not retract_assert and isinstance(tried, int) and isinstance(free, int) and 0 < tried <= free:
        return [_free_tokens_refused(run, cfg, hits, first, tried, free, phase)]
    evictable = next((v for k in ("evictable_size", "full_evictable_size") if isinstance(v := attrs(first).get(k), int)),
                     None)
    page = cfg.num("page_size")
    split = None if retract_assert else _split_count(first, tried, free, evictable, page)
    flags = [] if _covered(tried, free, evictable) and not retract_assert else [f for f in (
        running_requests_flag(cfg, run, hits[0], "each decode step adds a token per running request to the pool; "
                              "fewer requests leave it room to grow") if phase == "decode" else
        prefill_chunk_flag(cfg, _last_before(run, "prefill_batch", hits[0]), "a prefill chunk's tokens are "
                           "allocated from the pool at once") if phase == "prefill" else None,) if f]
    return [make_finding(
        "SGL-KV-002",
        summary=(f"The KV pool ran out in decode: SGLang's retraction, which runs only when the next decode step has "
                 f"no free KV slot, raised {crash} and the scheduler died; the pool's exhaustion, not the error in its "
                 "recovery path, is the cause."
                 if retract_assert and (crash := _raised_in_retraction(first)) else
                 "The KV pool ran out: decoding the last running request found no free KV slot "
                 + (f"({avail} available) " if avail is not None else "")
                 + "and nothing left to retract, so SGLang's retraction asserted and the scheduler died."
                 if retract_assert else
                 ("The KV allocator refused a " if _covered(tried, free, evictable) else "The KV pool ran out: a ")
                 + (f"{phase} " if phase else "") + "batch"
                 + (f"{' that' if _covered(tried, free, evictable) else ''} needed {first.get('tokens')} tokens"
                    if first.get("tokens") is not None else " found no free KV slots")
                 + (split or (f" with only {avail} available" if avail is not None else ""))
                 + "; the scheduler raised and the server was torn down."),
        # the tracebacks that carried it and the errors other ranks raised after it are the crash, not other causes
        evidence=[*hits[:4], *[r for r in of_kind(run, "scheduler_exception", "sigquit") if r not in hits
                               and ((r.get("line_end") or r.get("line") or 0) >= (hits[0].get("line") or 0)
                                    or r.get("file") != hits[0].get("file"))][:3]],
        confidence="medium" if inferred else "high",
        confidence_reason=("the error message is not in the input: inferred from the traceback, whose innermost "
                           "frame is SGLang's KV-slot allocator raising") if inferred else None,
        ranks=[x for x in (rank_of(r) for r in hits) if x is not None],
        figures={"tokens_tried": first.get("tokens"), "tokens_available": avail, "tokens_free": free,
                 "tokens_evictable": evictable, **_component_figures(first), "events": len(hits)},
        flags=flags,
        actions=[*(["By the message's own count the tokens were there (free plus evictable cover the batch): the "
                    "radix cache's eviction did not release what it counted, so a bigger pool alone does not remove "
                    "the crash" + ("" if page == 1 else " (unless --page-size above 1 rounded the batch up to more "
                                   "pages than its printed tokens)") + "; upgrade to a release that returns a prefill "
                    "whose allocation misses to the waiting queue instead of raising."]
                  if _covered(tried, free, evictable) and not retract_assert else []),
                 ("Or enlarge the pool (--kv-cache-dtype fp8_e4m3, more GPUs, --mem-fraction-static up if the "
                  "headroom allows); newer SGLang retracts instead of crashing." if flags else
                  "Lower --max-running-requests and --chunked-prefill-size; enlarge the pool (--kv-cache-dtype "
                  "fp8_e4m3, more GPUs, --mem-fraction-static up if the headroom allows); newer SGLang retracts "
                  "instead of crashing.")],
    )]


def _last_before(run: list[Row], kind: str, row: Row) -> Row | None:
    earlier = [r for r in of_kind(run, kind) if before(r, row)]
    return earlier[-1] if earlier else None


def _covered(tried: object, free: object, evictable: object) -> bool:
    """The batch fits in what the pool had free plus what its radix cache counted as evictable."""
    return all(isinstance(v, int) for v in (tried, free, evictable)) and tried <= free + evictable  # type: ignore[operator]


#: the per-component lines SGLang's hybrid radix caches add under the full pool's (sglang
#: python/sglang/srt/mem_cache/*radix_cache.py::available_and_evictable_str (main, 2026): ``Available mamba: N
#: (available_size=a + component_evictable_size_=b)``, the SWA cache's ``Available swa tokens: N
#: (swa_available_size=a + swa_evictable_size_=b)``), as parsers/sglang.py ``kv_exhausted_facts`` keys them
_COMPONENT_KEY = re.compile(r"^available_(\w+?)(?:_tokens)?$")


def _components(row: Row) -> list[tuple[str, int, int | None, int | None]]:
    """(pool, free plus evictable, free, evictable) of each component pool the message lists besides the full one."""
    a = attrs(row)
    out = []
    for k, v in a.items():
        m = _COMPONENT_KEY.match(k)
        if not m or m.group(1) in ("full", "tokens") or not isinstance(v, int):
            continue
        pool = m.group(1)
        free = a.get(f"{pool}_available_size")
        evict = next((x for x in (a.get(f"{pool}_component_evictable_size"), a.get(f"{pool}_evictable_size"))
                      if isinstance(x, int)), None)
        out.append((pool, v, free if isinstance(free, int) else None, evict))
    return out


def _component_figures(row: Row) -> dict[str, int]:
    return {f"{pool}_available": total for pool, total, _, _ in _components(row)}


def _split_count(row: Row, tried: object, free: object, evictable: object, page: float | None) -> str | None:
    """The message's count as it is: free without eviction, what the radix cache counted as evictable, and the
    component pools of a hybrid cache. SGLang evicts the shortfall before it allocates (sglang
    python/sglang/srt/mem_cache/common.py::evict_from_tree_cache (main, 2026)), so a refusal the free and evictable tokens cover is eviction falling short of its
    own count, not ``only N available`` — unless pages above one token made the batch need more than it printed
    (the paged allocator evicts for whole pages per request)."""
    if not isinstance(free, int) or not isinstance(evictable, int):
        return None
    text = f": {free} free, {evictable} more counted evictable in the radix cache"
    if _covered(tried, free, evictable):
        text += " — enough by that count, so eviction did not release what it counted" + (
            "" if page == 1 else f" (or --page-size {int(page)} rounded the batch up to more pages than that)"
            if page else " (or a page size above 1 rounded the batch up to more pages than that)")
    comps = [f"the {pool} pool at {total}" + (f" ({f} free + {e} evictable)" if f is not None and e is not None else "")
             for pool, total, f, e in _components(row)]
    return text + (f"; {', '.join(comps)}" if comps else "")


def _free_tokens_refused(run: list[Row], cfg, hits: list[Row], first: Row, tried: int, free: int,
                         phase: str | None) -> Finding:
    """SGL-KV-006: the KV allocator refused a batch although its own message counts enough free tokens.

    SGLang's logical-OOM message prints what the batch tried and what the pool had (sglang_formats.md §6: ``Try to
    allocate N tokens`` / ``Available tokens: A``, from 0.4.7 broken down into the free ``available_size`` and the
    radix cache's ``evictable_size``). With N tokens free without evicting anything the pool was not full: the allocation is by whole pages when --page-size is above 1 (each request's new tokens rounded up to a
    page, §3 page alignment), and the admission that let the batch in counted tokens — so a batch that fits by
    tokens can need more pages than are free (sglang PR #5081 aligned the estimate to pages). More KV memory does
    not fix a miscount; a smaller page, or a release with the estimate aligned, does.
    """
    page = cfg.num("page_size")
    flags = []
    if page is None or page > 1:
        flags.append(FlagChange("--page-size", cfg.flag_text("page_size"), "1",
                                "SGLang's default: with one-token pages what the admission counts and what the "
                                "allocator needs are the same" + ("" if page else " (the page size is not in the input: "
                                                                                  "any page above 1 token can do this)")))
    return make_finding(
        "SGL-KV-006",
        summary=(f"SGLang's KV allocator refused a {phase + ' ' if phase else ''}batch of {tried} tokens although its "
                 f"own message counts {free} free: the pool was not full. "
                 + (f"With --page-size {int(page)} each request takes whole pages" if page and page > 1 else
                    "A page size above 1 makes each request take whole pages" if page is None else
                    "With --page-size 1 no page rounding explains it")
                 + ", and the admission that let the batch in counted tokens: an accounting mismatch in the engine, "
                 "not a pool too small for the load."),
        evidence=[*hits[:3], *cfg.evidence_rows("page_size")],
        confidence="medium",
        confidence_reason="the request count of the refused batch is not in the message: how many pages it needed "
                          "is inferred, not measured",
        ranks=[x for x in (rank_of(r) for r in hits) if x is not None],
        figures={"tokens_tried": tried, "tokens_available": free, "page_size": page},
        flags=flags,
        actions=["Upgrade SGLang: releases after the page-aligned admission estimate (PR #5081, 0.4.5) count whole "
                 "pages before admitting a batch.",
                 "Not a bigger pool: more KV memory leaves the same miscount."],
    )


def _pressure(run: list[Row], cfg) -> list[Finding]:
    # "Testing retraction." is SGLang's test mode retracting on purpose (SGLANG_TEST_RETRACT), not a full pool
    retracts = [r for r in of_kind(run, "retract") if attrs(r).get("form") != "testing"]
    decodes = [r for r in of_kind(run, "decode_batch") if r.get("ratio") is not None]
    full = [r for r in decodes if r["ratio"] >= FULL_USAGE]
    queues = [q for q in (_queue(r) for r in full) if q is not None]
    growing = len(full) >= FULL_BATCHES and bool(queues) and queues[-1] > 0 and queues[-1] >= queues[0]
    # retractions happen on every rank at once: count distinct moments, not lines
    events = len({(r.get("ts"), r.get("ts_local")) if r.get("ts") or r.get("ts_local") else r.get("line") for r in retracts})
    # the pool full with requests waiting, batch after batch: the pool, not compute, is what holds them
    saturated = sum(1 for r in full if (_queue(r) or 0) > 0) >= QUEUE_OUTLIVES_STEP
    if not retracts and not growing and not saturated:
        return []
    retracted = sum(int(r.get("count") or 0) for r in retracts if rank_of(r) in (0, None))
    peak = max((r["ratio"] for r in decodes), default=None)
    running = cfg.num("max_running_requests")
    # a run that then died is not "healthy", whatever its retractions say
    died = has_kind(run, "scheduler_exception", "sigquit", "rank_dead")
    return [make_finding(
        "SGL-KV-001",
        summary=(f"The KV pool is under pressure: {events} retraction event(s)" if retracts else "The KV pool is full")
        + (f", decode token usage up to {peak:.2f}" if peak is not None else "")
        + (f" with the queue growing to {queues[-1]} requests" if growing else "")
        + ". Throughput suffers (retracted requests are recomputed)"
        + ("." if died else "; the server itself is healthy."),
        evidence=[*retracts[:4], *full[-3:]],
        severity=pressure_severity(retract_events=events, growing_queue=growing),
        ranks=sorted({x for x in (rank_of(r) for r in retracts) if x is not None}),
        figures={"retract_events": events, "retracted_requests_rank0": retracted or None,
                 "peak_token_usage": peak, "full_decode_batches": len(full), "queue_growing": growing},
        actions=["Lower --max-running-requests" + (f" (now {int(running)})" if running else "")
                 + " so admitted requests fit; or give the pool more room (--kv-cache-dtype fp8_e4m3, more GPUs, "
                 "--mem-fraction-static up if the headroom allows); or enable the hierarchical cache."],
    )]


#: SGLang's ``validate_input_length`` refuses ``Input length ({N} tokens) exceeds the maximum allowed length ({K}
#: tokens)`` with K = min(C − 1, max_total_num_tokens − 1) − 5 (failure_messages.md §6.1): K + 6 is the pool whenever
#: the pool, not the context, set K — known when K + 6 < C, assumed (and said) when the context is not in the input
_ALLOWED_LENGTH_RE = re.compile(r"exceeds the maximum allowed length \((\d+) tokens\)")


def capped_context_length(pool_tokens: int) -> int:
    """The largest round --context-length one request of which the pool holds: a multiple of 1024 (below
    2048 tokens, the pool itself). SGLang's own warning names the fix: "KV pool holds {P} tokens, fewer than
    --context-length {C}. … Lower --context-length, raise --mem-fraction-static, …" (failure_messages.md,
    start-up warning, 0.5.23); the pool is ``max_total_num_tokens`` of the sizing line (sglang_formats.md §5).

    >>> capped_context_length(48210), capped_context_length(1500)
    (48128, 1500)
    """
    return pool_tokens // 1024 * 1024 if pool_tokens >= 2048 else pool_tokens


def context_cap(ctx: float, pool: int, holds: str) -> FlagChange:
    """--context-length capped at what the pool holds (``holds``: the pool in words, with how it was read)."""
    new = capped_context_length(pool)
    return FlagChange("--context-length", f"{int(ctx)}", str(new),
                      f"the KV pool holds {holds}: one request of the full context needs {int(ctx)}; {new} fits it "
                      "(or enlarge the pool to keep the context)")


def _pool_refusal(run: list[Row]) -> Row | None:
    found = [r for r in of_kind(run, "failure") if attrs(r).get("failure") == "request_refused"
             and _ALLOWED_LENGTH_RE.search(f"{attrs(r).get('message') or ''} {r.get('text') or ''}")]
    return max(found, key=lambda r: r.get("tokens") or 0) if found else None


def _pool_from_refusal(refusal: Row, ctx: float | None) -> list[Finding]:
    """SGL-KV-003 from the refusal alone: the pool is K + 6 tokens, and the refused request never fits it."""
    k = int(_ALLOWED_LENGTH_RE.search(f"{attrs(refusal).get('message') or ''} {refusal.get('text') or ''}").group(1))
    pool, asked = k + 6, refusal.get("tokens")
    if isinstance(ctx, int | float) and pool >= ctx:
        return []  # the context length, not the pool, set the limit (SGL-KV-005 says so)
    known = isinstance(ctx, int | float)
    # a profiled pool is rarely a power of two; a context length usually is: then the limit may well be the context's
    round_number = (pool & (pool - 1)) == 0
    # the refused request is the longer request seen: with the context length known, the fix is the flag (as in _too_long)
    flags = [context_cap(ctx, pool, f"about {pool} tokens per rank (the refusal's limit {k} + 6)")] \
        if known and ctx > pool else []
    return [make_finding(
        "SGL-KV-003",
        summary=(f"The KV pool holds about {pool} tokens per rank (the refusal's limit {k} + 6)"
                 + (f", less than the context length {int(ctx)}" if known else "")
                 + (f"; a request of {int(asked)} tokens was refused" if asked else "")
                 + ": a request longer than the pool can never be scheduled whole."),
        evidence=[refusal],
        confidence="high" if known else "low" if round_number else "medium",
        confidence_reason=None if known else ("the context length is not in the input: the limit is read as the "
                                              "pool's (it is the context's when the context is below it)"
                                              + (f"; {pool} is a power of two, as context lengths usually are"
                                                 if round_number else "")),
        figures={"kv_pool_tokens": pool, "context_len": int(ctx) if known else None, "refusal_limit_tokens": k,
                 "refused_request_tokens": int(asked) if asked else None},
        flags=flags,
        actions=[f"Cap --context-length at {pool} or less so such requests are refused up front, or enlarge the pool "
                 "(--mem-fraction-static, --kv-cache-dtype fp8_e4m3, more GPUs)."],
    )]


def _too_long(run: list[Row], dumped: Row | None = None, snap: Row | None = None, cfg=None) -> list[Finding]:
    """The pool (the sizing line, else a crash snapshot) against the context length and the longest
    request seen: a prefill in the log, or the longest unfinished request of a crash dump."""
    sizing = [r for r in of_kind(run, "kv_sizing") if r.get("tokens")]
    row = sizing[0] if sizing else snap
    refusal = _pool_refusal(run) if row is None else None
    if row is None and refusal is None:
        return []
    ctx = attrs(row).get("context_len") if row is not None else None
    if not isinstance(ctx, int | float) and cfg is not None and cfg.num("context_length") is not None:
        ctx = cfg.num("context_length")
    if refusal is not None:
        return _pool_from_refusal(refusal, ctx)
    pool = int(row["tokens"])
    long_prefill = [r for r in of_kind(run, "prefill_batch") if r.get("tokens") is not None
                    and int(r["tokens"]) + int(field(r, "cached_token") or 0) > pool]
    too_big = dumped if dumped is not None and int(dumped["tokens"]) > pool else None
    if not (isinstance(ctx, int | float) and ctx > pool) and not long_prefill and too_big is None:
        return []
    seen = bool(long_prefill or too_big)
    where = "per rank" if sizing else "per rank (the crash snapshot's max_total_num_tokens)"
    flags = []
    # the fix is a flag when SGLang's own warning names it, or a request longer than the pool was seen; a bare
    # sizing line against a long configured context is latent and stays advice
    advised = any(attrs(r).get("warning") == "pool_below_context" for r in sizing)
    if isinstance(ctx, int | float) and ctx > pool and (advised or seen):
        flags.append(context_cap(ctx, pool, f"{pool} tokens per rank"))
    return [make_finding(
        "SGL-KV-003",
        summary=(f"The KV pool holds {pool} tokens {where}"
                 + (f" but the context length is {int(ctx)}" if isinstance(ctx, int | float) and ctx > pool else "")
                 + (f"; a prefill of {long_prefill[0]['tokens']} tokens was seen" if long_prefill else "")
                 + (f"; the crash dump's longest unfinished request has {int(too_big['tokens'])} input tokens"
                    + (f" (max_new_tokens {int(too_big['count'])})" if too_big.get("count") is not None else "")
                    if too_big is not None else "")
                 + (": a full-context request can never be scheduled whole." if not too_big else
                    ": that request can never be scheduled whole.")),
        evidence=[row, *long_prefill[:2], *([too_big] if too_big is not None else [])],
        confidence="high" if seen else "medium",
        confidence_reason=None if seen else "only the configured context length exceeds the pool; no such request was seen",
        figures={"kv_pool_tokens": pool, "context_len": int(ctx) if isinstance(ctx, int | float) else None,
                 "longest_unfinished_request_tokens": int(too_big["tokens"]) if too_big is not None else None},
        flags=flags,
        actions=[f"Cap --context-length at {pool} or less, or enlarge the pool (--mem-fraction-static, "
                 "--kv-cache-dtype fp8_e4m3, more GPUs)."],
    )]

"""SGL-KV-004: a start-up buffer sized by the context length does not fit the GPU.

Sources: SGL-KV-004 reads sglang python/sglang/srt/mem_cache/memory_pool.py::ReqToTokenPool (0.4+:
``req_to_token`` is max running requests × context length int32) and the allocator OOM of
reference/failure_messages.md §1.1.

SGLang sizes its request-to-token table (and a few other start-up buffers) as max running requests ×
context length × 4 bytes. Without ``--context-length`` the model's own maximum is used; Llama 4
Scout's is 10 M tokens, so the table alone asks for ~80 GiB on an 80 GB GPU::

    torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 80.04 GiB. GPU 3 has a total
    capacity of 79.10 GiB of which 20.08 GiB is free. ...

One allocation of half a GPU or more during start-up, or a start-up failure while a context length of
a million tokens or more is configured, is this mechanism, not a KV pool or headroom problem.

>>> table_bytes(2_800_000, 2048) / 2**30
21.36
>>> fitting_context(2_800_000, 2048, 2 * 2**30)
262144
"""

from __future__ import annotations

import math
import re

from forensics.facts.launch import server_config
from forensics.facts.oom import enclosing_traceback, place_ooms
from forensics.facts.rows import Row, attrs
from forensics.facts.runs import iter_runs, of_kind
from forensics.facts.vllm import vllm_files
from forensics.model import Finding, FlagChange, Timeline
from parsers.failures import stage_of_frames

from ._common import GIB, fmt_gib, make_finding, tag_run
from .fatal_other import failure_class

#: one allocation at least this share of the GPU during start-up is a table sized by configuration
HUGE_ALLOCATION_SHARE = 0.5
#: a configured context this long makes the start-up tables large enough to matter
LONG_CONTEXT = 1 << 20
#: SGLang's request-table rows when max_running_requests is not set (its default lies in 2048–4096)
ASSUMED_REQUESTS = 2048
TABLE_BUDGET = 2 * GIB
#: what to suggest when the model's own (unknown) maximum is in use
TYPICAL_CONTEXT = 131072


def table_bytes(context: float, requests: float) -> float:
    return round(context * requests * 4 / GIB, 2) * GIB


def fitting_context(context: float, requests: float, budget: float) -> int:
    """The largest power of two not above the context whose table fits ``budget``."""
    fit = budget / (requests * 4)
    return 1 << int(math.floor(math.log2(max(min(fit, context), 4096))))


def _startup_failures(run: list[Row]) -> list[Row]:
    out = [r for r in of_kind(run, "failure") if failure_class(r) in ("traceback_cut", "exception", "startup_failed")
           and (r.get("kind") != "failure" or _in_setup(r))]
    out += [r for r in of_kind(run, "scheduler_exception") if _in_setup(r)]
    out += [r for r in of_kind(run, "rank_dead", "sigquit", "init_failed")]
    return out


def _in_setup(row: Row) -> bool:
    from forensics.facts.rows import attrs

    a = attrs(row)
    text = row.get("text") or ""
    return a.get("during") in ("init", "memory_pool") or "Scheduler(" in text or "ModelRunner(" in text \
        or "init_memory_pool" in text or "__init__" in text


def detect(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    vfiles = vllm_files(tl)
    for ref, run in iter_runs(tl):
        if of_kind(run, "cuda_graph_end", "decode_batch", "prefill_batch", "server_ready"):
            continue  # it started: whatever failed later is no start-up table
        cfg = server_config(tl, run)
        ctx = cfg.num("context_length")
        requests = cfg.num("max_running_requests")
        # the request table is SGLang's (ReqToTokenPool); vLLM sizes no table by the context length at start-up, its
        # KV cache is what the profile left (vllm/v1/worker/gpu_worker.py determine_available_memory), so a vLLM
        # allocation larger than its GPU is another buffer's (SGL-GPU-012)
        huge = [r for r in of_kind(run, "cuda_oom") if r.get("bytes") and r.get("total_bytes")
                and r["bytes"] >= HUGE_ALLOCATION_SHARE * r["total_bytes"] and r.get("file") not in vfiles]
        failed = _startup_failures(run)
        # an OOM whose frames are the memory pool's set-up (failure_messages.md §2.2 "look at the frames")
        # or, without frames, SGLang's start-up order: after "Load weight end" the pool is being set up (facts/oom.py)
        oom_rows = of_kind(run, "cuda_oom", "cuda_error_oom")
        placed = place_ooms(run, oom_rows)
        # (not ROCm's HSA out-of-resources, which is also a queue or thread limit: failure_messages.md §3)
        # (not the speculative draft's own pool, set up after the target's took its share: SGL-GPU-014)
        # (not an OOM SGLang wrapped as a capture failure: the capture runs after the pool, SGL-GPU-002)
        pool = [r for r in oom_rows if placed.get(id(r), (None, ""))[0] != "draft_init"
                and attrs(r).get("during") != "graph_capture"
                and (_stage(run, r) == "memory_pool"
                     or (placed.get(id(r), (None, ""))[0] == "memory_pool" and not attrs(r).get("unreliable")))]
        if huge:
            out.append(tag_run(_huge(cfg, huge, ctx, requests), ref))
        elif failed and ctx is not None and ctx >= LONG_CONTEXT:
            out.append(tag_run(_long_context(cfg, failed, ctx, requests), ref))
        elif pool:
            out.append(tag_run(_pool_setup(cfg, run, pool, ctx, requests), ref))
    return out


_FRAME = re.compile(r'File "([^"]*)", line \d+, in (\w+)')


def _stage(run: list[Row], row: Row) -> str | None:
    """The stage of an OOM: its own frames' (``during``), else those of the traceback that holds its line."""
    for tb in of_kind(run, "scheduler_exception", "failure"):
        if tb.get("file") == row.get("file") and (tb.get("line") or 0) <= (row.get("line") or 0) \
                <= (tb.get("line_end") or tb.get("line") or 0) and tb is not row:
            stage = stage_of_frames(_FRAME.findall(tb.get("text") or ""))
            if stage:
                return stage
    return attrs(row).get("during")


def _pool_setup(cfg, run: list[Row], pool: list[Row], ctx: float | None, requests: float | None) -> Finding:
    """An OOM while the memory pool was set up. SGLang sizes the KV pool to what was free after the weights
    (``profile_max_num_token``, sglang_formats.md §5), so it fits by construction; what fails beside it is a buffer
    sized by configuration — the request table, max running requests × (context length + 4) × 4 bytes — or memory
    taken by another process between the profile and the allocation."""
    r = max(pool, key=lambda x: x.get("bytes") or 0)
    rq = requests or ASSUMED_REQUESTS
    flags = _flags(cfg, ctx, requests, "") if ctx is not None else []
    return make_finding(
        "SGL-KV-004",
        summary=("CUDA ran out of memory while SGLang set up its memory pools"
                 + (f" (an allocation of {fmt_gib(r['bytes'])})" if r.get("bytes") else "")
                 + ": the KV pool is sized to fit what was free, so the buffers sized by the configuration beside it "
                 + (f"(a request table of {int(rq)}{'' if requests else ' (assumed)'} × {int(ctx)} tokens × 4 bytes = "
                    f"{fmt_gib(table_bytes(ctx, rq))})" if ctx else "(the request table: running requests × context "
                    "length × 4 bytes)")
                 + " did not fit, or another process took memory meanwhile."
                 + (f" Lower --context-length to {flags[0].new}." if flags else "")),
        evidence=[*pool[:3], *cfg.evidence_rows("context_length", "max_running_requests"),
                  *[tb for r in pool[:2] if (tb := enclosing_traceback(run, r)) is not None]],
        confidence="medium" if ctx is not None else "low",
        confidence_reason=("which buffer beside the pool failed is not in the message; the frames and the configured "
                           "sizes point at the request table") if ctx is not None else
        "the context length is not in the input: which buffer failed rests on the frames alone",
        gpus=[x["gpu"] for x in pool if x.get("gpu") is not None][:1],
        figures={"failed_allocation_bytes": r.get("bytes"), "context_length": ctx, "max_running_requests": requests},
        flags=flags,
        actions=["Set --context-length to what the requests need (the model's maximum is the default) and "
                 "--max-running-requests to the concurrency served: the request table scales with both.",
                 "Check that nothing else took GPU memory during start-up (`nvidia-smi --query-compute-apps`).",
                 "Not a weights problem: they had loaded; and --mem-fraction-static up makes the pool, not the "
                 "buffers beside it, larger."],
    )


def _flags(cfg, ctx: float | None, requests: float | None, why_unset: str) -> list[FlagChange]:
    rq = requests or ASSUMED_REQUESTS
    if ctx is not None:
        new = fitting_context(ctx, rq, TABLE_BUDGET)
        return [FlagChange("--context-length", cfg.flag_text("context_length"), str(new),
                           f"{int(rq)} requests{'' if requests else ' (assumed)'} × {new} tokens × 4 bytes = "
                           f"{fmt_gib(table_bytes(new, rq))} for the request table (now {fmt_gib(table_bytes(ctx, rq))})")]
    return [FlagChange("--context-length", None, str(TYPICAL_CONTEXT), why_unset)]


def _huge(cfg, huge: list[Row], ctx: float | None, requests: float | None) -> Finding:
    r = max(huge, key=lambda x: x["bytes"])
    tried, total = float(r["bytes"]), float(r["total_bytes"])
    why_unset = (f"no --context-length: the model's own maximum sized a {fmt_gib(tried)} buffer; {TYPICAL_CONTEXT} "
                 "tokens (or what your requests need) shrinks it in proportion")
    flags = _flags(cfg, ctx, requests, why_unset)
    return make_finding(
        "SGL-KV-004",
        summary=(f"During start-up one allocation asked for {fmt_gib(tried)}, "
                 + ("more than the whole" if tried > total else f"{tried / total:.0%} of the")
                 + f" {fmt_gib(total)} GPU: a buffer sized by the context length"
                 + (f" ({int(ctx)} tokens)" if ctx else " (the model's own maximum, no --context-length given)")
                 + f". Set --context-length {flags[0].new}."),
        evidence=[r, *cfg.evidence_rows("context_length", "max_running_requests")],
        confidence="medium",
        confidence_reason="which buffer made the request is not in the message; its size points at a table sized by "
                          "context length × running requests",
        gpus=[r["gpu"]] if r.get("gpu") is not None else [],
        figures={"failed_allocation_bytes": int(tried), "gpu_memory_bytes": int(total), "context_length": ctx,
                 "max_running_requests": requests},
        flags=flags,
        actions=["Or lower --max-running-requests: the request table scales with it too.",
                 "Not a --mem-fraction-static problem: no fraction makes one allocation larger than the GPU fit."],
    )


def _long_context(cfg, failed: list[Row], ctx: float, requests: float | None) -> Finding:
    rq = requests or ASSUMED_REQUESTS
    flags = _flags(cfg, ctx, requests, "")
    return make_finding(
        "SGL-KV-004",
        summary=(f"The server failed during start-up with --context-length {int(ctx)}: the request table alone is "
                 f"{int(rq)}{'' if requests else ' (assumed)'} requests × {int(ctx)} tokens × 4 bytes = "
                 f"{fmt_gib(table_bytes(ctx, rq))} per GPU, besides a KV pool that must hold one full-length request. "
                 f"Lower it to {flags[0].new}."),
        evidence=[*failed[:3], *cfg.evidence_rows("context_length")],
        confidence="low" if not any(r.get("kind") == "cuda_oom" for r in failed) else "medium",
        confidence_reason="the failure's own message is not in the input (a cut traceback or a teardown line); the "
                          "configured context length is the start-up setting that scales with it",
        figures={"context_length": ctx, "max_running_requests": requests,
                 "request_table_bytes": int(table_bytes(ctx, rq))},
        flags=flags,
        actions=["Find the failure's last line (the full traceback): a CUDA OOM in the memory-pool set-up confirms it.",
                 "Long contexts need a KV pool to match: more GPUs (--tp-size) or --kv-cache-dtype fp8_e4m3."],
    )

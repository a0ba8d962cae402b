"""SGL-GPU-015: a batch larger than DeepEP's low-latency dispatch cap reached the expert all-to-all.

DeepEP's low-latency buffer is sized at start-up for a fixed number of tokens per rank and call, and its dispatch
refuses more: deepep csrc/deep_ep.cpp ``Buffer::low_latency_dispatch`` (main, 2025)
``EP_HOST_ASSERT(num_tokens <= num_max_dispatch_tokens_per_rank)``, thrown as ``Failed: Assertion error
<file>:<line> 'num_tokens <= num_max_dispatch_tokens_per_rank'`` (parsers/failures.py ``DEEPEP_DISPATCH_CAP``).
SGLang sets that cap from ``SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK``, default 128 (sglang
python/sglang/srt/layers/moe/ep_moe/token_dispatcher.py (0.4.4-0.4.10); python/sglang/srt/environ.py (0.5.x)), and
asserts it is at most 1024 (python/sglang/srt/layers/moe/token_dispatcher/deepep.py (0.5.x)).

Low-latency mode carries the decode batches (``--deepep-mode low_latency``, and ``auto``'s decode), so a decode
batch of more tokens per rank than the cap trips it: most often CUDA-graph capture, which runs the largest batch
first (``--cuda-graph-max-bs``, × ``--speculative-num-draft-tokens`` under speculative decoding), or a decode batch
of more running requests than the cap. With DP attention each DP rank batches its own share, ``--max-running-requests
÷ --dp-size`` (sglang python/sglang/srt/managers/tp_worker.py (0.4.x), model_runner.py (0.5.x)).

A capacity of the expert all-to-all, not GPU memory: the capture hint's ``--mem-fraction-static`` does not touch
it, and without CUDA graphs the same decode batches reach the same cap eagerly.

A prefill (extend) batch reaches the low-latency dispatcher only under ``--deepep-mode low_latency``: ``auto``
resolves each batch, normal mode for a batch with any extend in it and low-latency for pure decode (sglang
python/sglang/srt/utils.py (0.4.x), python/sglang/srt/layers/moe/utils.py (0.5.x) ``DeepEPMode.resolve``), and
normal mode's buffer is not sized by the cap. So the cap hit in a prefill (the traceback passes ``forward_extend``,
or the last batch line before it is a prefill), or a launch in ``low_latency`` whose prefill chunk
(``--chunked-prefill-size``, per DP rank under DP attention) is larger than the cap, is corrected by ``auto``:
prefill through normal mode, decode through low-latency mode.

>>> largest_fitting(128, 1), largest_fitting(128, 4)
(128, 32)
"""

from __future__ import annotations

from forensics.facts.launch import launch_rows, server_config
from forensics.facts.oom import oom_phase
from forensics.facts.rows import Row, attrs, rank_of, row_words, rows
from forensics.facts.runs import iter_runs
from forensics.facts.stages import SERVING
from forensics.model import Finding, FlagChange, Timeline
from parsers.failures import DEEPEP_DISPATCH_CAP

from ._common import evidence_list, make_finding

ENV = "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"
DEFAULT_CAP = 128
MAX_CAP = 1024
_KINDS = ("scheduler_exception", "exception", "failure", "cuda_graph_failed", "init_failed", "rank_dead")


def largest_fitting(cap: int, tokens_per_request: int) -> int:
    """The largest batch of requests whose tokens stay within the cap."""
    return max(1, cap // max(1, tokens_per_request))


def _cap(tl: Timeline) -> tuple[int, str | None, list[Row]]:
    """The cap the launch set (the last launch that names it wins), else the default."""
    for r in reversed(launch_rows(tl)):
        value = (attrs(r).get("env") or {}).get(ENV)
        if value is not None and str(value).strip().isdigit():
            return int(str(value).strip()), str(value).strip(), [r]
    return DEFAULT_CAP, None, []


def _in_capture(hits: list[Row], tl: Timeline) -> bool:
    if any(r.get("kind") == "cuda_graph_failed" or "Capture cuda graph failed" in row_words(r)
           or "capture_one_batch_size" in row_words(r) for r in hits):
        return True
    return bool(rows(tl, "cuda_graph_begin", "capture_progress")) and not rows(tl, "cuda_graph_end", "server_ready")


def _graph_bs(cfg, tl: Timeline) -> tuple[int | None, list[Row]]:
    if (bs := cfg.num("cuda_graph_max_bs")) is not None:
        return int(bs), cfg.evidence_rows("cuda_graph_max_bs")
    listed = [max(b) for r in rows(tl, "cuda_graph_bs") if (b := attrs(r).get("bs")) and isinstance(b, list)]
    captured = rows(tl, "capture_progress")
    if listed:
        return int(max(listed)), rows(tl, "cuda_graph_bs")[:1]
    seen = [attrs(r).get("bs") for r in captured if attrs(r).get("bs")]
    return (int(max(seen)), captured[:1]) if seen else (None, [])


def _in_prefill(tl: Timeline, hits: list[Row]) -> str | None:
    """What says a hit happened in a prefill (extend) batch — the traceback's frames, or the batch line before it —
    else None."""
    keys = {(r.get("file"), r.get("line")) for r in hits}
    for _ref, run in iter_runs(tl):
        for r in run:
            if (r.get("file"), r.get("line")) in keys:
                phase, how = oom_phase(run, r)
                if phase == "prefill":
                    return how
    return None


def _mode_change(cfg, tl: Timeline, hits: list[Row], cap: int, dp: int,
                 capture: bool) -> tuple[FlagChange | None, str, bool]:
    """``--deepep-mode auto`` when a prefill batch went (or must go) through the low-latency dispatch (only
    ``low_latency`` sends it there), the sentence saying why, and whether the hit itself was a prefill."""
    mode = str(cfg.get("deepep_mode") or "").strip().lower() or None
    if mode in ("auto", "normal") or capture:
        return None, "", False
    how = _in_prefill(tl, hits)
    chunk = cfg.num("chunked_prefill_size")
    per_rank = int(chunk) // dp if chunk is not None and int(chunk) > 0 else None
    if how is None and not (mode == "low_latency" and per_rank is not None and per_rank > cap):
        return None, "", False
    if how is not None:
        why = (f"a prefill batch ({how}) reached the low-latency dispatch, which only --deepep-mode low_latency "
               f"sends it to; auto runs prefill through normal mode, whose buffer the cap does not size")
    else:
        why = (f"under low_latency every prefill chunk goes through the low-latency dispatch, and a chunk of "
               f"--chunked-prefill-size {int(chunk)}" + (f" ÷ {dp} DP ranks" if dp > 1 else "")
               + f" = {per_rank} tokens per rank is over the cap of {cap}; auto runs prefill through normal mode")
    # without the launch the mode is not seen: only low_latency sends a prefill there, so the change says so in why
    return FlagChange("--deepep-mode", mode, "auto", why), why, how is not None


def detect(tl: Timeline) -> list[Finding]:
    hits = [r for r in rows(tl, *_KINDS) if DEEPEP_DISPATCH_CAP.search(row_words(r))]
    if not hits:
        return []
    cfg = server_config(tl)
    cap, cap_text, cap_rows = _cap(tl)
    cap_said = f"{ENV}={cap}" if cap_text else f"{ENV} = {cap} (the default)"
    per_request = int(cfg.num("speculative_num_draft_tokens") or 1) \
        if (cfg.get("speculative_algorithm") or cfg.get("speculative_algo")) else 1
    dp = int(cfg.num("dp_size") or 1) if cfg.enabled("enable_dp_attention") else 1
    fits = largest_fitting(cap, per_request)
    capture = _in_capture(hits, tl)
    graph_bs, graph_rows = _graph_bs(cfg, tl)
    running = cfg.num("max_running_requests")
    tokens_note = f" × {per_request} draft tokens each" if per_request > 1 else ""

    flags: list[FlagChange] = []
    said: list[str] = []
    if graph_bs is not None and graph_bs > fits and not cfg.enabled("disable_cuda_graph"):
        flags.append(FlagChange("--cuda-graph-max-bs", str(graph_bs), str(fits),
                                f"the largest captured decode batch must carry at most {cap} tokens per rank "
                                f"({fits} requests{tokens_note}) through DeepEP's low-latency dispatch"))
        said.append(f"CUDA-graph capture runs its largest batch, {graph_bs} requests per rank{tokens_note}, through "
                    f"the low-latency dispatch first")
    if running is not None and int(running) // dp > fits:
        new = fits * dp
        flags.append(FlagChange("--max-running-requests", str(int(running)), str(new),
                                f"each {'DP rank' if dp > 1 else 'rank'} decodes at most --max-running-requests"
                                + (f" ÷ {dp} (DP attention)" if dp > 1 else "")
                                + f" requests at once; {new // dp} requests{tokens_note} fit the cap of {cap}"))
        said.append(f"up to {int(running) // dp} running requests per {'DP rank' if dp > 1 else 'rank'} can be "
                    f"decoded in one batch")
    if not flags:
        # nothing in the input says how large the refused batch was: the one setting that lifts the refusal is the
        # cap itself, doubled (SGLang asserts at most 1024 unless DeepEP v2 is in use: sglang
        # python/sglang/srt/layers/moe/token_dispatcher/deepep.py (2026 main) skips the assert under
        # ``have_deepep_v2`` / SGLANG_DEEPEP_USE_V2)
        raised = min(2 * cap, MAX_CAP) if cap < MAX_CAP else 2 * cap
        flags.append(FlagChange(ENV, str(cap) if cap_text else None, str(raised),
                                f"the refused batch carried more than {cap} tokens per rank; the input does not say "
                                f"how many, so the cap is doubled" + ("" if cap < MAX_CAP else
                                f" (above {MAX_CAP} SGLang asserts unless DeepEP v2 is in use; else keep "
                                f"--cuda-graph-max-bs and the decode batch at most {fits})")))
    mode_flag, mode_said, in_prefill = _mode_change(cfg, tl, hits, cap, dp, capture)
    if mode_flag is not None:
        flags.insert(0, mode_flag)
        said.insert(0, mode_said)
    where = (" during CUDA-graph capture" if capture else " in a prefill batch" if in_prefill
             else " in a decode batch while serving" if rows(tl, *SERVING) else "")
    summary = (f"DeepEP's low-latency dispatch refused a batch of more tokens per rank than its buffer was sized for"
               f"{where}: the cap is {cap_said}"
               + (f"; {'; '.join(said)}" if said else "")
               + ". A capacity of the expert all-to-all, not GPU memory: memory fractions and --disable-cuda-graph "
                 "do not lift it.")
    actions = [
        *(["Launch with --deepep-mode auto (SGLang's default): prefill batches then use DeepEP's normal mode and "
           "only decode batches the low-latency buffer (for a prefill-only server of a disaggregated deployment, "
           "--deepep-mode normal)."] if mode_flag is not None else []),
        f"Keep every decode batch within the cap: --cuda-graph-max-bs at most {fits}"
        + (f" and --max-running-requests at most {fits * dp}" + (f" ({fits} per DP rank × {dp})" if dp > 1 else "")
           if running is None or int(running) // dp > fits else "")
        + (f" (each request carries {per_request} tokens under speculative decoding)" if per_request > 1 else "")
        + ".",
        f"Or raise {ENV} (on every node, at most {MAX_CAP}: SGLang asserts it) to the largest decode batch per rank; "
        f"DeepEP's low-latency RDMA buffer grows with it.",
        "Do not lower --mem-fraction-static or disable CUDA graphs for this error: the capture hint's advice is for "
        "memory, and eager decode batches reach the same cap.",
    ]
    evidence = evidence_list([*hits[:3], *cap_rows, *graph_rows, *cfg.evidence_rows("max_running_requests")])
    return [make_finding(
        "SGL-GPU-015", summary=summary, evidence=evidence, confidence="high" if flags else "medium",
        confidence_reason=None if flags else "the input does not show the batch sizes that reached the dispatch",
        ranks=[x for x in (rank_of(r) for r in hits) if x is not None],
        figures={"dispatch_cap_tokens": cap, "cap_from": "launch" if cap_text else "default", "in_capture": capture,
                 "cuda_graph_max_bs": graph_bs, "tokens_per_request": per_request, "dp_attention_ranks": dp,
                 "max_running_requests": int(running) if running is not None else None},
        flags=flags, actions=actions,
    )]

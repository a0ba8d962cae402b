"""SGL-GPU-010 / SGL-GPU-011: a rank refused to start because the group's free GPU memory was unbalanced.

``model_runner.py::init_torch_distributed`` (SGLang 0.3.4–0.5.23) reads the free memory of every GPU of the
tensor-parallel group (an all-reduce of the minimum) and raises when the smallest is under 90 % of its own
(sglang_formats.md §3 "imbalance")::

    ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes.
    min_per_gpu_memory=31.2, local_gpu_memory=71.9, local_gpu_memory * 0.9=64.71

Where it runs decides whose memory differs. For the target model (the first ``ModelRunner`` of a scheduler) the
GPUs hold nothing of this server yet, so the memory that is missing on some GPUs is another process's (SGL-GPU-010,
stranded: the message's own reading). A speculative draft worker (EAGLE/NextN: ``EAGLEWorker.__init__`` builds its
own ``ModelRunner``) runs the same check *after* the target model's weights and KV pool were allocated: an imbalance
then is the server's own allocations differing between ranks — an engine fault, not a foreign process (SGL-GPU-011).
``SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK=1`` turns the error into a warning: a rank that goes on to ``Load weight
begin`` after it did not refuse, and nothing is reported for the warning itself.

>>> gap_gib(8.88, 11.90)
3.02
"""

from __future__ import annotations

import re

from forensics.facts.gpu import gpu_holders
from forensics.facts.rows import Row, attrs, rank_of, rows
from forensics.facts.runs import iter_runs, of_kind
from forensics.model import Finding, Timeline

from ._common import make_finding, tag_run
from .vllm_start_memory import holders_words

#: frames of a speculative-decoding draft worker building its own model runner (``speculative/eagle_worker.py``)
_DRAFT_FRAMES = re.compile(r"EAGLEWorker|eagle_worker\.py|draft_worker|speculative/|NextN|MTPWorker", re.I)
_FRAME = re.compile(r'File "([^"]*)", line \d+, in (\w+)')


def gap_gib(min_gib: float, local_gib: float) -> float:
    return round(local_gib - min_gib, 2)


def _tracebacks(run: list[Row], row: Row) -> list[Row]:
    """The scheduler exception (or failure) rows whose traceback holds the imbalance row."""
    return [r for r in of_kind(run, "scheduler_exception", "failure")
            if r.get("file") == row.get("file") and (r.get("line") or 0) <= (row.get("line") or 0)
            <= (r.get("line_end") or r.get("line") or 0)]


def _context(run: list[Row], row: Row) -> str:
    """The traceback around the imbalance row: the scheduler exception that holds it, or the row itself."""
    return "\n".join([*(h.get("text") or "" for h in _tracebacks(run, row)), row.get("text") or ""])


def _only_warned(run: list[Row], row: Row) -> bool:
    """The check only warned (``SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK=1``): the same rank went on to load its
    weights after it (``Load weight begin`` follows in its file), so no rank refused to start; a rank that then
    cannot hold its shard is SGL-GPU-007's."""
    rank, line = rank_of(row), row.get("line") or 0
    return any(r.get("file") == row.get("file") and (r.get("line") or 0) > line
               and (rank is None or rank_of(r) == rank) for r in of_kind(run, "weight_load_begin"))


def detect(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    smi_procs = rows(tl, "gpu_process")
    for ref, run in iter_runs(tl):
        hits = of_kind(run, "memory_imbalance")
        if not hits:
            continue
        first = hits[0]
        a = attrs(first)
        low, local = a.get("min_per_gpu_memory_gib"), a.get("local_gpu_memory_gib")
        context = _context(run, first)
        draft = bool(_DRAFT_FRAMES.search(context))
        figures = {"min_per_gpu_memory_gib": low, "local_gpu_memory_gib": local,
                   "gap_gib": gap_gib(low, local) if low is not None and local is not None else None,
                   "in_draft_worker": draft}
        numbers = (f" (the emptiest GPU had {low:.2f} GiB free, this rank {local:.2f} GiB)"
                   if low is not None and local is not None else "")
        ranks = [x for x in (rank_of(r) for r in hits) if x is not None]
        if draft:
            out.append(tag_run(make_finding(
                "SGL-GPU-011",
                summary=("A rank refused to start its speculative draft model: SGLang's check found the group's free "
                         f"GPU memory unbalanced{numbers}. The check ran after the target model's weights and KV pool "
                         "were allocated, so the memory that differs between ranks is the server's own, not another "
                         "process's."),
                evidence=[*hits[:3], *_tracebacks(run, first)[:2]],
                confidence="medium",
                confidence_reason="which allocation differs between ranks is not in the log; nvidia-smi on every GPU "
                                  "of the group at the failure would show it",
                ranks=ranks, figures=figures,
                actions=["Compare the GPUs' used memory (`nvidia-smi --query-gpu=index,memory.used --format=csv`) "
                         "with the server stopped and while it starts: equal when idle means the server's own "
                         "allocations diverge.",
                         "Upgrade SGLang: releases after the NextN/EAGLE start-up fixes keep the draft worker's check "
                         "from tripping on the target's own memory; SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK=1 makes the "
                         "check a warning in the meantime.",
                         "Not a reason to hunt for orphan processes: the target model had already loaded on every "
                         "rank."],
            ), ref))
            continue
        if _only_warned(run, first):
            continue
        seen = [p for p in smi_procs if p.get("pid") is not None]
        held = [p for p in gpu_holders(tl, exclude_pids=frozenset(int(r["pid"]) for r in run if r.get("pid")))
                if p.get("used_bytes")]
        out.append(tag_run(make_finding(
            "SGL-GPU-010",
            summary=(f"A rank refused to start: SGLang's check found the group's free GPU memory unbalanced{numbers}. "
                     "Before the model loads the GPUs hold nothing of this server, so some GPUs hold another "
                     "process's memory" + (f": nvidia-smi lists {holders_words(held)}." if held else ".")),
            evidence=[*hits[:3], *_tracebacks(run, first)[:2], *seen[:3]],  # the rank's death is the refusal
            confidence="high" if seen else "low",
            confidence_reason=None if seen else ("no process table in the input: whose memory it is rests on the "
                                                 "check's own reading; `nvidia-smi --query-compute-apps=pid,"
                                                 "used_memory --format=csv` on each GPU decides"),
            ranks=ranks, figures=figures,
            actions=["Find and stop what holds the GPUs (`nvidia-smi --query-compute-apps=pid,process_name,"
                     "used_memory --format=csv`, `fuser -v /dev/nvidia*`), then start again.",
                     "Or give the server only GPUs that are free (CUDA_VISIBLE_DEVICES).",
                     "SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK=1 only hides the imbalance: the fullest GPU then sizes "
                     "every rank's pool."],
        ), ref))
    return out

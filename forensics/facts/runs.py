"""Server runs: an SGLang log's rows grouped by launch, each run indexed by kind, in a stable order."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from forensics.facts.rows import Row, rows, timeline_memo
from forensics.model import Timeline


def run_groups(sglang_rows: list[Row]) -> dict[tuple[str | None, int], list[Row]]:
    """Group SGLang rows by server run.

    A file that holds a ``server_args`` dump is one launch log: its runs are its own. Files
    without one (per-rank logs, fragments) are pooled by run index, as ranks of one launch.
    """
    files = launch_files(sglang_rows)
    groups: dict[tuple[str | None, int], list[Row]] = {}
    for r in sglang_rows:
        groups.setdefault(run_key(r, files), []).append(r)
    return groups



def launch_files(sglang_rows: list[Row]) -> set[str]:
    return {r["file"] for r in sglang_rows if r.get("kind") == "server_args"}



def run_key(row: Row, files: set[str]) -> tuple[str | None, int]:
    """The run a row belongs to, as :func:`run_groups` keys it."""
    return (row["file"] if row.get("file") in files else None, int(row.get("run") or 0))



@dataclass
class RunRef:
    """One server run: its key, its index in the file, its first row, and whether it needs naming."""

    key: tuple[str | None, int]
    index: int
    first: Row
    multi: bool  # its file (or the pool of rank logs) holds more than one run

    @property
    def started(self) -> str:
        return f"{self.first.get('file')}:{self.first.get('line')}"

    def order(self) -> tuple:
        """Later runs sort higher: by the first row's UTC stamp when known, else by run index."""
        ts = self.first.get("ts")
        return (ts.timestamp() if isinstance(ts, datetime) else float("-inf"), self.index,
                self.first.get("file") or "", self.first.get("line") or 0)



def run_refs(runs: dict[tuple[str | None, int], list[Row]]) -> dict[tuple[str | None, int], RunRef]:
    per_file: dict[str | None, int] = {}
    for key in runs:
        per_file[key[0]] = per_file.get(key[0], 0) + 1
    return {key: RunRef(key, key[1], min(rs, key=lambda r: (r.get("file") or "", r.get("line") or 0)),
                        per_file[key[0]] > 1)
            for key, rs in runs.items()}



class Run(list):
    """One server run's rows in order, with where each kind's rows are: a big input's run holds tens of
    thousands of batch rows, and detectors looking for a few start-up records should not walk them all."""

    def __init__(self, rows: list[Row], index: dict[str, list[int]]) -> None:
        super().__init__(rows)
        self.index = index
        self.n = len(rows)



def _kind_index(rows: list[Row]) -> dict[str, list[int]]:
    index: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        index.setdefault(r.get("kind") or "", []).append(i)
    return index



def of_kind(run: list[Row], *kinds: str) -> list[Row]:
    """The rows of ``run`` of these kinds, in run order (through the run's index when it has one)."""
    if isinstance(run, Run) and len(run) == run.n:
        if len(kinds) == 1:
            return [run[i] for i in run.index.get(kinds[0], ())]
        pos = sorted(i for k in dict.fromkeys(kinds) for i in run.index.get(k, ()))
        return [run[i] for i in pos]
    return [r for r in run if r.get("kind") in kinds]



def has_kind(run: list[Row], *kinds: str) -> bool:
    """Whether ``run`` holds a row of one of these kinds."""
    if isinstance(run, Run) and len(run) == run.n:
        return any(run.index.get(k) for k in kinds)
    return any(r.get("kind") in kinds for r in run)



def iter_runs(tl: Timeline) -> list[tuple[RunRef, list[Row]]]:
    """Every SGLang run with its reference, in the order :func:`sglang_runs` gives them."""
    runs = sglang_runs(tl)
    memo = timeline_memo(tl)
    refs = memo.get("run_refs")
    if refs is None:  # each ref scans its whole run for the first row
        refs = memo["run_refs"] = run_refs(runs)
    indexes = memo.setdefault("run_index", {})
    out = []
    for k, rs in runs.items():
        if k not in indexes:
            indexes[k] = _kind_index(rs)
        out.append((refs[k], Run(rs, indexes[k])))
    return out



SGLANG_KINDS = (
    "server_args", "weight_load_begin", "weight_load_end", "kv_cache_allocated", "memory_pool_end",
    "cuda_graph_begin", "cuda_graph_end", "kv_sizing", "hicache_alloc", "hicache_insufficient",
    "server_ready", "prefill_batch", "decode_batch", "retract", "kv_exhausted", "scheduler_exception",
    "cuda_oom", "cuda_error_oom", "cuda_graph_failed", "not_enough_memory", "weights_no_kv_room",
    "ranks_not_loaded", "watchdog_timeout", "sigquit", "rank_dead", "subprocess_crashed", "sigterm",
    "init_failed", "memory_imbalance", "dist_init_begin", "dist_init_end", "nccl_watchdog", "health_check_failed",
    "failure", "notice", "capture_progress", "cuda_graph_bs", "progress_bar",
    # ``sglang is using nccl==X``: pynccl's communicator up, a stage of distributed initialisation (facts/stages.py)
    "version",
)



#: Sources whose rows belong to a server run: the engine's own parser, and failure lines found in its
#: log or in a fragment beside it (``parsers.failures``)
RUN_SOURCES = (None, "sglang", "failures", "prose")



def sglang_runs(tl: Timeline) -> dict[tuple[str | None, int], list[Row]]:
    memo = timeline_memo(tl)
    runs = memo.get("sglang_runs")
    if runs is None:
        # "prose": a configuration and the figures a write-up states (parsers/launch_prose.py), as runs of their own file
        from forensics.facts.vllm import vllm_files

        vfiles = vllm_files(tl)  # failure lines in a vLLM log are that engine's runs, not SGLang's
        runs = run_groups([r for r in rows(tl, *SGLANG_KINDS) if r.get("source") in RUN_SOURCES
                           and not (r.get("source") == "failures" and r.get("file") in vfiles)])
        memo["sglang_runs"] = runs
    return {k: list(v) for k, v in runs.items()}  # callers may reorder or extend their lists


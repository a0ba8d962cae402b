"""Where each rank was: py-spy stacks and vLLM's input dump, named in the findings about a hang or a crash.

``parsers/stack_dumps.py`` reads ``py-spy dump`` output (one ``pyspy_stack`` row per thread, with its
process's TP rank when the title names it) and vLLM's "Dumping input data" block. A hang or a
collective timeout says where each rank's main thread was (:func:`where_ranks_were`): the ranks
inside a collective are the ones waiting; a rank elsewhere is the one they wait for. An engine
crash of vLLM names what its scheduler had just scheduled.
"""

from __future__ import annotations

from forensics.facts.crash_artifacts import main_threads
from forensics.facts.rows import Row, attrs, rows
from forensics.model import Evidence, Finding, Timeline

#: Findings about ranks that stopped making progress.
HANG_RULES = ("SGL-NCCL-004", "SGL-NCCL-007", "SGL-NCCL-001", "SGL-NCCL-002", "SGL-NCCL-005")
#: vLLM findings about a crash while serving.
VLLM_CRASH_RULES = ("VLLM-GPU-001", "VLLM-KV-003")


def _short(frame: str) -> str:
    """``func (path/to/file.py:12)`` → ``func (file.py:12)``."""
    name, _sp, where = frame.partition(" (")
    return f"{name} ({where.rsplit('/', 1)[-1]}" if where else name


def where_ranks_were(tl: Timeline) -> tuple[str, list[Row]] | None:
    """One sentence: the ranks grouped by the frame their main thread was in, and the rows it rests on.

    Grouped by the innermost frame's function; a rank outside a collective while others are in one is
    said so."""
    threads = [r for r in main_threads(tl) if r.get("tp_rank") is not None]
    if not threads:
        return None
    groups: dict[str, list[int]] = {}
    kinds: dict[str, str] = {}
    for r in threads:
        a = attrs(r)
        frame = _short(str(a.get("top_frame") or "?"))
        groups.setdefault(frame, []).append(int(r["tp_rank"]))
        kinds[frame] = str(a.get("waiting_in") or "")
    parts = [f"TP{','.join(str(x) for x in sorted(rs))} in {frame}" for frame, rs in
             sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
    sentence = "Where each rank was (py-spy): " + "; ".join(parts) + "."
    in_coll = {f for f, k in kinds.items() if k == "collective"}
    outside = sorted(r for f, rs in groups.items() if f not in in_coll for r in rs)
    if in_coll and outside:
        sentence += (f" TP{','.join(map(str, outside))} {'was' if len(outside) == 1 else 'were'} not in a collective "
                     "while the others waited in one.")
    return sentence, threads


def annotate(findings: list[Finding], tl: Timeline) -> None:
    where = None
    for f in findings:
        if f.rule_id in HANG_RULES and "Where each rank was" not in f.summary:
            where = where or where_ranks_were(tl)
            if where is None:
                break
            sentence, threads = where
            f.summary = f"{f.summary} {sentence}"
            f.figures["pyspy_ranks"] = sorted({int(r["tp_rank"]) for r in threads})
            f.evidence.extend(Evidence.from_row(r) for r in threads[:4])
    dumps = rows(tl, "engine_scheduler_output")
    if not dumps:
        return
    last = dumps[-1]
    for f in findings:
        if f.rule_id in VLLM_CRASH_RULES and "scheduler output" not in f.summary:
            f.summary = f"{f.summary} vLLM's input dump: {last.get('text', '').split(': ', 1)[-1]}."
            f.evidence.append(Evidence.from_row(last))

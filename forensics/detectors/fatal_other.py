"""SGL-RUN-001: the server died and no specific rule explains why.

Catch-all so that an incident never yields "no findings": a scheduler exception, a dead rank, a
failed initialisation, the scheduler watchdog, ranks that did not finish loading, a crashed
subprocess or a SIGQUIT in a run where no other rule found a critical/high cause. It names the
line SGLang printed and what to look at next, at medium confidence when the log says what failed
(an exception with its message, a specific death line) and low when it does not (a cut traceback,
a bare SIGQUIT). Sample::

    [2025-03-17 17:15:55 TP1] Scheduler hit an exception: Traceback (most recent call last):
    ...
    ValueError: TP rank 1 could finish the model loading, but there are other ranks that didn't finish loading.

Runs in ``run_all`` after every other detector, with their findings.

>>> innermost_frame('  File "/x/sglang/srt/model_executor/model_runner.py", line 417, in load_model\\n    raise ValueError(')
('model_runner.py', 'load_model')
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from forensics.model import SEVERITY_RANK, Finding, Timeline

from ._common import Row, RunRef, attrs, iter_runs, make_finding, of_kind, rank_of, tag_run

#: What counts as the server dying, most telling first (the first kind present leads the finding).
FATAL_KINDS = (
    "ranks_not_loaded", "watchdog_timeout", "rank_dead", "init_failed", "scheduler_exception", "cuda_graph_failed",
    "subprocess_crashed", "health_check_failed", "nccl_watchdog", "sigquit",
)
_FRAME_RE = re.compile(r'File "([^"]*)", line \d+, in (\w+)')


def innermost_frame(text: str) -> tuple[str, str] | None:
    """(file name, function) of a traceback's last frame."""
    frames = _FRAME_RE.findall(text)
    if not frames:
        return None
    path, func = frames[-1]
    return path.rsplit("/", 1)[-1], func


def _is_fatal(row: Row) -> bool:
    if row.get("kind") not in FATAL_KINDS:
        return False
    # '# ' lines are notes pasted around an excerpt, never an SGLang record
    return not (row.get("text") or "").lstrip().startswith("#")


def _explained(ref: RunRef, findings: Iterable[Finding]) -> bool:
    """A critical/high finding about this run (or about the host, untagged) already explains the death."""
    for f in findings:
        if SEVERITY_RANK[f.severity] > SEVERITY_RANK["high"] or f.rule_id == "SGL-RUN-001":
            continue
        if f.figures.get("run_started") in (None, ref.started):
            return True
    return False


def detect(tl: Timeline, findings: Iterable[Finding] = ()) -> list[Finding]:
    findings = list(findings)
    out = []
    for ref, run in iter_runs(tl):
        fatal = [r for r in of_kind(run, *FATAL_KINDS) if _is_fatal(r)]
        if not fatal or _explained(ref, findings):
            continue
        out.append(tag_run(_finding(fatal), ref))
    return out


def _exception_words(row: Row) -> tuple[str | None, bool]:
    """What a scheduler exception says, and whether its message is in the input."""
    a = attrs(row)
    etype, emsg = a.get("exception_type"), a.get("exception_message")
    text = row.get("text") or ""
    during_init = "Scheduler(" in text or "__init__" in text
    where = " during start-up" if during_init else ""
    if etype:
        return f"a scheduler raised {etype}{where}: {str(emsg or '').strip()[:200]}", True
    frame = innermost_frame(text)
    if frame:
        return (f"a scheduler raised an exception{where}; the traceback is cut before its message (innermost frame: "
                f"{frame[1]} in {frame[0]})"), False
    return f"a scheduler raised an exception{where}", False


def _words(row: Row) -> tuple[str, bool, list[str]]:
    """The death in words, whether the input says what failed, and what to do next."""
    kind = row.get("kind")
    a = attrs(row)
    generic = ["Read the first traceback of the first rank that failed (the other ranks die after it) and the kernel "
               "log of the same minutes (`dmesg -T`) for OOM kills and Xids."]
    if kind == "ranks_not_loaded":
        rank = a.get("named_tp_rank", rank_of(row))
        return (f"TP rank {rank if rank is not None else '?'} finished loading the weights but other ranks did not "
                "(one ran out of memory while loading, crashed, or a node was slow)", True,
                ["Read the logs of the other ranks and nodes: the first one that failed (an OOM while loading, a "
                 "traceback, an OOM kill in dmesg) is the cause; a slow node needs a longer --dist-timeout.", *generic])
    if kind == "watchdog_timeout":
        secs = row.get("seconds")
        return (f"the scheduler watchdog fired{f' after {secs:g} s' if secs else ''}: a forward pass or a collective "
                "hung", True,
                ["py-spy dump --pid <scheduler pid> on a hung rank; check the kernel log for Xids and NCCL for a dead "
                 "peer; --watchdog-timeout only changes how long SGLang waits.", *generic])
    if kind == "rank_dead":
        code = row.get("code")
        return (f"the rank {rank_of(row) if rank_of(row) is not None else ''} scheduler died".replace("rank  ", "rank ")
                + (f" with exit code {code}" if code is not None else ""), code is not None,
                ["A negative exit code is the signal that killed it (-9 SIGKILL: kernel OOM killer, `kill -9`, the "
                 "container runtime; -6 SIGABRT: a C++ abort, -11 SIGSEGV: a crash in a kernel or extension).",
                 *generic])
    if kind == "init_failed":
        return "the server failed to initialise", False, generic
    if kind == "scheduler_exception":
        words, said = _exception_words(row)
        return words, said, generic
    if kind == "cuda_graph_failed":
        return (f"CUDA-graph capture failed: {str(a.get('message') or '').strip()[:200]}", True,
                ["Not a memory problem: try another --attention-backend, or --disable-cuda-graph to confirm the "
                 "capture is what fails; report the error with the SGLang and driver versions.", *generic])
    if kind == "subprocess_crashed":
        return (f"the {a.get('name') or 'sub'}process crashed" + (f" (exit code {row['code']})" if row.get("code") is not None
                                                                   else ""), True, generic)
    if kind == "health_check_failed":
        return "the health check failed: the server stopped answering", False, generic
    if kind == "nccl_watchdog":
        return (f"a collective or barrier failed ({a.get('event') or 'watchdog'}): "
                f"{str(a.get('message') or row.get('text') or '').strip()[:160]}", False,
                ["The rank it names (or the one missing) failed first: read its log.", *generic])
    return "a child process failed and SGLang sent SIGQUIT to tear the server down", False, generic


def _finding(fatal: list[Row]) -> Finding:
    lead = min(fatal, key=lambda r: (FATAL_KINDS.index(r["kind"]), r.get("file") or "", r.get("line") or 0))
    words, said, actions = _words(lead)
    others = sorted({r["kind"] for r in fatal} - {lead["kind"]})
    reason = ("no rule explains this failure: it is reported as SGLang printed it"
              + ("" if said else "; the input does not say what failed (a cut traceback or only the teardown lines)"))
    return make_finding(
        "SGL-RUN-001",
        summary=f"The server died: {words}." + (f" Also seen: {', '.join(others)}." if others else ""),
        evidence=[lead, *[r for r in fatal if r is not lead][:5]],
        confidence="medium" if said else "low",
        confidence_reason=reason,
        ranks=[x for x in (rank_of(r) for r in fatal) if x is not None],
        figures={"first_failure_kind": lead["kind"], "exception_type": attrs(lead).get("exception_type"),
                 "exit_code": lead.get("code") if lead["kind"] in ("rank_dead", "subprocess_crashed") else None,
                 "failure_kinds": sorted({r["kind"] for r in fatal})},
        actions=actions,
    )

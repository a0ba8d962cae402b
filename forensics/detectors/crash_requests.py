"""The requests SGLang's crash dump says were in flight, for the findings about a serving-time failure.

``parsers/crash_dump.py`` turns each request of a ``--crash-dump-folder`` dump into a
``crash_request`` row (``tokens`` = input tokens, ``count`` = ``max_new_tokens``, ``attrs.finished``).
A CUDA OOM while serving or a KV pool that ran out names the request sizes that were being served
(:func:`annotate`); the KV-capacity check compares the longest unfinished one with the pool
(``forensics.facts.crash_artifacts``), which may come from a crash snapshot when no log has it.
"""

from __future__ import annotations

from forensics.facts.crash_artifacts import unfinished_requests
from forensics.facts.rows import Row, attrs, rows
from forensics.model import Evidence, Finding, Timeline

#: Serving-time failures whose summary names the dumped requests.
SERVING_FAILURES = ("SGL-GPU-001", "SGL-KV-002", "SGL-KV-001")


def in_flight_text(reqs: list[Row]) -> str:
    """One sentence on the unfinished requests, longest first.

    >>> in_flight_text([{"tokens": 24000, "count": 4096, "attrs": '{"finished": false}'},
    ...                 {"tokens": 1100, "count": 1024, "attrs": '{"finished": false}'}])
    'The crash dump holds 2 unfinished request(s): 24,000 input tokens (max_new_tokens 4,096), 1,100 (1,024).'
    """
    if not reqs:
        return ""
    ordered = sorted(reqs, key=lambda r: -int(r["tokens"]))
    parts = []
    for i, r in enumerate(ordered[:5]):
        mx = r.get("count")
        if i == 0:
            parts.append(f"{int(r['tokens']):,} input tokens" + (f" (max_new_tokens {int(mx):,})" if mx is not None else ""))
        else:
            parts.append(f"{int(r['tokens']):,}" + (f" ({int(mx):,})" if mx is not None else ""))
    more = f" and {len(ordered) - 5} more" if len(ordered) > 5 else ""
    return f"The crash dump holds {len(reqs)} unfinished request(s): " + ", ".join(parts) + more + "."


def _announced_dump(tl: Timeline) -> Row | None:
    """The log's ``Dumped N finished and M unfinished requests before crash to FILE`` (tokenizer manager)."""
    told = [r for r in rows(tl, "notice") if attrs(r).get("message_id") == "crash_dump" and attrs(r).get("path")]
    return told[-1] if told else None


def annotate(findings: list[Finding], tl: Timeline) -> None:
    """Name the requests in flight in the findings about a failure while serving; when the log says a
    dump was written and the input lacks it, say which file to attach."""
    reqs = unfinished_requests(tl)
    if not reqs:
        told = _announced_dump(tl) if not rows(tl, "crash_dump") else None
        if told is not None:
            for f in findings:
                if f.rule_id in SERVING_FAILURES:
                    f.remediation.actions.append(
                        f"SGLang wrote the requests in flight to {attrs(told)['path']} (the log says so): attach that "
                        "file to name the request sizes that triggered the failure (it is read without running it).")
        return
    longest = max(reqs, key=lambda r: int(r["tokens"]))
    for f in findings:
        if f.rule_id not in SERVING_FAILURES or "crash dump holds" in f.summary:
            continue
        f.summary = f"{f.summary} {in_flight_text(reqs)}"
        f.figures["crash_dump_unfinished_requests"] = len(reqs)
        f.figures["crash_dump_longest_input_tokens"] = int(longest["tokens"])
        f.figures["crash_dump_unfinished_input_tokens"] = int(sum(int(r["tokens"]) for r in reqs))
        f.evidence.append(Evidence.from_row(longest))

"""Findings that rest on sentences weigh less than findings that rest on program output.

A write-up's figures and settings (``source = prose``, parsers/launch_prose.py) reach the detectors as
ordinary rows, so every rule uses them unchanged; this pass, run once over all findings, lowers the
confidence of each finding whose evidence includes such a row by one step and says which sentences
it read. A rule that already says so itself (its reason names "sentences") is left as it is.

>>> from forensics.model import Evidence, Finding, Timeline
>>> from parsers.launch.prose import parse
>>> tl = Timeline(events=parse("We launched with --tp-size 8.\\n", "ticket.md").events)
>>> f = Finding(rule_id="X", category="other", severity="high", title="t", summary="s", confidence="high",
...             evidence=[Evidence("ticket.md", 1, "We launched with --tp-size 8.")])
>>> weigh([f], tl); f.confidence, f.confidence_reason
('medium', 'read from sentences, not program output: ticket.md:1')
"""

from __future__ import annotations

import json

import polars as pl

from forensics.model import Finding, Timeline

_LOWER = {"high": "medium", "medium": "low", "low": "low"}


def prose_lines(tl: Timeline) -> set[tuple[str, int]]:
    """(file, line) of every row read from prose, and of every sentence a prose configuration cites."""
    ev = tl.events
    if ev.is_empty() or "source" not in ev.columns:
        return set()
    out: set[tuple[str, int]] = set()
    for r in ev.filter(pl.col("source") == "prose").select("file", "line", "attrs").iter_rows(named=True):
        out.add((r["file"], int(r["line"])))
        try:
            mentions = (json.loads(r["attrs"] or "{}") or {}).get("mentions") or {}
        except ValueError:
            continue
        for m in mentions.values():
            if isinstance(m, dict) and isinstance(m.get("line"), int):
                out.add((r["file"], m["line"]))
    return out


def weigh(findings: list[Finding], tl: Timeline) -> None:
    """Lower by one step the confidence of findings that cite sentences, naming them."""
    lines = prose_lines(tl)
    if not lines:
        return
    for f in findings:
        cited = [f"{e.file}:{e.line}" for e in f.evidence if (e.file, e.line) in lines]
        if not cited or "sentences" in (f.confidence_reason or ""):
            continue
        f.confidence = _LOWER.get(f.confidence, f.confidence)
        note = "read from sentences, not program output: " + ", ".join(dict.fromkeys(cited))
        f.confidence_reason = f"{f.confidence_reason}; {note}" if f.confidence_reason else note

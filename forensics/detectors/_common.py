"""What building a finding takes: evidence from rows, the catalog's category and title, and figures
in the units people read. The facts a finding rests on come from :mod:`forensics.facts`.

Detectors are pure: they read a :class:`~forensics.model.Timeline` and never touch files.

>>> fmt_gib(1 << 30), fmt_gb(48e9)
('1.00 GiB', '48.0 GB')
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from forensics import rules
from forensics.facts.rows import Row
from forensics.facts.runs import RunRef
from forensics.model import Evidence, Finding, FlagChange, Remediation

GIB = 1 << 30

MIB = 1 << 20

MAX_EVIDENCE = 12


def evidence(row: Row, text: str | None = None) -> Evidence:
    return Evidence.from_row(row, text)


def evidence_list(items: Iterable[Row | Evidence], limit: int = MAX_EVIDENCE) -> list[Evidence]:
    """Deduplicated evidence sorted by file and line, at most ``limit`` items."""
    seen: dict[tuple[str, int], Evidence] = {}
    for it in items:
        ev = it if isinstance(it, Evidence) else evidence(it)
        seen.setdefault((ev.file, ev.line), ev)
    return [seen[k] for k in sorted(seen)][:limit]


def tag_run(finding: Finding, ref: RunRef | None) -> Finding:
    """Name the run a finding is about when its log holds several (figures + the summary's first words)."""
    if ref is None or not ref.multi:
        return finding
    finding.figures["run"] = ref.index
    finding.figures["run_started"] = ref.started
    finding.summary = f"Run {ref.index} (started {ref.started}): {finding.summary}"
    return finding


def make_finding(
    rule_id: str,
    *,
    summary: str,
    evidence: Iterable[Row | Evidence],
    confidence: str = "high",
    confidence_reason: str | None = None,
    severity: str | None = None,
    ranks: Iterable[int] = (),
    gpus: Iterable[int] = (),
    figures: dict[str, Any] | None = None,
    flags: Iterable[FlagChange] = (),
    actions: Iterable[str] = (),
) -> Finding:
    """A finding whose category, title and default severity come from the catalog."""
    rule = rules.get(rule_id)
    return Finding(
        rule_id=rule.id,
        category=rule.category,
        severity=severity or rule.severity,
        title=rule.title,
        summary=summary,
        confidence=confidence,
        evidence=evidence_list(evidence),
        ranks=sorted({int(r) for r in ranks}),
        gpus=sorted({int(g) for g in gpus}),
        figures={k: v for k, v in (figures or {}).items() if v is not None},
        remediation=Remediation(flags=list(flags), actions=list(actions)),
        confidence_reason=confidence_reason,
    )


def fmt_gib(n: float | None) -> str:
    return "?" if n is None else f"{n / GIB:.2f} GiB"


def fmt_binary(n: float | None) -> str:
    """A size in MiB below a GiB (an allocator's ``Tried to allocate 2.00 MiB`` reads as itself, not "0.00 GiB"),
    else in GiB: one binary unit family either way.

    >>> fmt_binary(2 * MIB), fmt_binary(458752), fmt_binary(3.5 * GIB)
    ('2.00 MiB', '0.44 MiB', '3.50 GiB')
    """
    return "?" if n is None else f"{n / MIB:.2f} MiB" if abs(n) < GIB else fmt_gib(n)


def old_value(value: float, seen: bool) -> str:
    """A flag's current value as a remediation shows it: marked when it is the engine's default, not read from the
    input (DESIGN.md §5 "observed or assumed"), so ``0.9 → 0.85`` never reads as if 0.9 had been seen."""
    return f"{value:g}" if seen else f"{value:g} (default, assumed)"


def fmt_gb(n: float | None) -> str:
    return "?" if n is None else f"{n / 1e9:.1f} GB"


def weakest(*levels: str) -> str:
    order = ("high", "medium", "low")
    return max(levels, key=order.index)

"""The rule catalog: data in ``catalog.toml``, read with :mod:`tomllib`.

A rule is an id that never changes or gets reused, a category from DESIGN.md §4, a default
severity, a title and three paragraphs of documentation (what it means, how we know, what to do).
Detectors create findings through :func:`get` so that category, title and severity always agree
with the catalog.

>>> r = get("SGL-HOST-001")
>>> (r.category, r.severity)
('per_rank_overallocation', 'critical')
>>> "SGL-GPU-005" in format_rules_table()
True
>>> format_rule("SGL-NOPE-000")
Traceback (most recent call last):
...
KeyError: 'SGL-NOPE-000'
"""

from __future__ import annotations

import re
import textwrap
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from forensics.model import CATEGORIES, SEVERITIES

CATALOG_PATH = Path(__file__).with_name("catalog.toml")
RULE_ID_RE = re.compile(r"^(?:SGL|VLLM)-[A-Z]+-\d{3}$")  # VLLM-: rules only vLLM logs trigger


@dataclass(frozen=True)
class Rule:
    id: str
    category: str
    severity: str
    title: str
    detector: str
    what: str
    how: str
    action: str
    retired: bool = False


def _rule_from_table(table: dict) -> Rule:
    rule = Rule(
        id=table["id"],
        category=table["category"],
        severity=table["severity"],
        title=table["title"],
        detector=table["detector"],
        what=table["what"].strip(),
        how=table["how"].strip(),
        action=table["action"].strip(),
        retired=bool(table.get("retired", False)),
    )
    if not RULE_ID_RE.match(rule.id):
        raise ValueError(f"bad rule id {rule.id!r}")
    if rule.category not in CATEGORIES:
        raise ValueError(f"{rule.id}: unknown category {rule.category!r}")
    if rule.severity not in SEVERITIES:
        raise ValueError(f"{rule.id}: unknown severity {rule.severity!r}")
    return rule


@lru_cache(maxsize=1)
def load_catalog() -> tuple[Rule, ...]:
    """Every rule of the catalog, in id order. Duplicate ids are an error."""
    data = tomllib.loads(CATALOG_PATH.read_text(encoding="utf-8"))
    rules = [_rule_from_table(t) for t in data.get("rule", [])]
    ids = [r.id for r in rules]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"duplicate rule ids: {dupes}")
    return tuple(sorted(rules, key=lambda r: r.id))


def get(rule_id: str) -> Rule:
    """One rule by id; KeyError for an unknown id."""
    for rule in load_catalog():
        if rule.id == rule_id:
            return rule
    raise KeyError(rule_id)


def format_rules_table() -> str:
    """The catalog as a plain-text table (``forensics rules``)."""
    rules = [r for r in load_catalog() if not r.retired]
    header = ("ID", "SEVERITY", "CATEGORY", "TITLE")
    rows = [(r.id, r.severity, r.category, r.title) for r in rules]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
    lines = []
    for row in [header, *rows]:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3])
    return "\n".join(lines) + "\n"


def _paragraph(text: str) -> str:
    return "\n".join(textwrap.fill(p, width=100) for p in text.split("\n\n"))


def format_rule(rule_id: str) -> str:
    """One rule's documentation (``forensics explain RULE_ID``); KeyError for unknown ids."""
    r = get(rule_id)
    flat = {k: " ".join(getattr(r, k).split()) for k in ("what", "how", "action")}
    parts = [
        f"{r.id}  {r.title}",
        f"category: {r.category}    default severity: {r.severity}" + ("    (retired)" if r.retired else ""),
        "",
        "What it means",
        _paragraph(flat["what"]),
        "",
        "How we know",
        _paragraph(flat["how"]),
        "",
        "What to do",
        _paragraph(flat["action"]),
    ]
    return "\n".join(parts) + "\n"

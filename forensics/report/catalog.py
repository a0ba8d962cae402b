"""The rule catalog as the report shows it: a rule's title, category and documentation, whatever shape the catalog has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class RuleInfo:
    id: str
    title: str
    severity: str | None
    category: str | None
    docs: list[tuple[str, str]]  # (heading, text)


_DOC_HEADINGS = {
    "meaning": "What it means", "what_it_means": "What it means", "means": "What it means",
    "description": "What it means", "how_we_know": "How we know", "how": "How we know",
    "evidence": "How we know", "detection": "How we know", "what_to_do": "What to do",
    "action": "What to do", "actions": "What to do", "remediation": "What to do", "fix": "What to do",
}


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


#: Rule attributes that carry documentation when the rule has no ``docs`` dict.
_DOC_ATTRS = (("what", "What it means"), ("how", "How we know"), ("action", "What to do"))


def _doc_text(v: Any) -> str:
    if isinstance(v, list | tuple):
        return "\n".join(map(str, v))
    return str(v)


def _rule_info(rule: Any, rule_id: str) -> RuleInfo:
    docs_raw = _field(rule, "docs")
    docs: list[tuple[str, str]] = []
    if isinstance(docs_raw, dict):
        for k, v in docs_raw.items():
            if v:
                key = str(k).lower().replace(" ", "_").replace("-", "_")
                docs.append((_DOC_HEADINGS.get(key, str(k).replace("_", " ").capitalize()), _doc_text(v)))
    elif isinstance(docs_raw, str) and docs_raw.strip():
        docs.append(("What it means", docs_raw))
    else:
        docs = [(heading, _doc_text(v)) for name, heading in _DOC_ATTRS if (v := _field(rule, name))]
    return RuleInfo(
        id=str(_field(rule, "id") or rule_id),
        title=str(_field(rule, "title") or rule_id),
        severity=_field(rule, "severity"),
        category=_field(rule, "category"),
        docs=[(h, " ".join(t.split()) if "\n\n" not in t else t) for h, t in docs],
    )


def _catalog_items(catalog: Any) -> list[Any]:
    """The rules of a catalog given as a sequence, a mapping, or an object listing them."""
    if isinstance(catalog, dict):
        return list(catalog.values())
    if isinstance(catalog, list | tuple | set | frozenset):
        return list(catalog)
    for name in ("all", "rules", "values"):
        attr = getattr(catalog, name, None)
        if attr is None:
            continue
        try:
            items = attr() if callable(attr) else attr
        except Exception:  # a catalog that cannot list itself: try the next way
            continue
        return list(items.values()) if isinstance(items, dict) else list(items or [])
    try:
        return list(iter(catalog))
    except TypeError:
        return []


def rule_info(catalog: Any, rule_id: str) -> RuleInfo | None:
    """The catalog's entry for ``rule_id``, or None when the catalog or the rule is missing.

    >>> rule_info([{"id": "R1", "title": "T", "what": "W"}], "R1").docs
    [('What it means', 'W')]
    >>> rule_info(None, "R1") is None
    True
    """
    if catalog is None:
        return None
    rule = None
    getter = getattr(catalog, "get", None)
    if callable(getter) and not isinstance(catalog, list | tuple):
        try:
            rule = getter(rule_id)
        except Exception:  # a catalog that raises on unknown ids is as good as one without the rule
            rule = None
    if rule is None:
        rule = next((r for r in _catalog_items(catalog) if not isinstance(r, str) and _field(r, "id") == rule_id),
                    None)
    return None if rule is None else _rule_info(rule, rule_id)


def catalog_rules(catalog: Any) -> list[RuleInfo]:
    """Every rule of the catalog, sorted by id; empty when it cannot be listed."""
    if catalog is None:
        return []
    out = []
    for rule in _catalog_items(catalog):
        if isinstance(rule, str):  # iterating a mapping-like catalog yields ids
            info = rule_info(catalog, rule)
            if info:
                out.append(info)
        elif _field(rule, "id"):
            out.append(_rule_info(rule, str(_field(rule, "id"))))
    return sorted(out, key=lambda r: r.id)



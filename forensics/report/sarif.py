"""findings.sarif: the findings document as SARIF 2.1.0, for code-scanning style dashboards.

One result per finding; its locations are the evidence lines (``file`` inside the bundle and the
1-based ``line``). Severity maps to SARIF ``level``: critical/high → ``error``, medium →
``warning``, low/info → ``note``. ``partialFingerprints`` hash the rule id and the evidence
locations, so the same incident read twice gives the same fingerprint.

>>> doc = {"tool": {"name": "forensics", "version": "0.1.0"}, "root_cause": "R1", "findings": [{
...     "rule_id": "R1", "category": "other", "severity": "high", "title": "T", "summary": "S.",
...     "confidence": "high", "evidence": [{"file": "logs/tp 0.log", "line": 7, "text": "x"}]}]}
>>> s = to_sarif(doc, None)
>>> r = s["runs"][0]["results"][0]
>>> r["level"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
('error', 'logs/tp%200.log')
>>> r["locations"][0]["physicalLocation"]["region"]["startLine"]
7
"""

from __future__ import annotations

import hashlib
import re
from typing import Any
from urllib.parse import quote

from forensics.report.catalog import RuleInfo, catalog_rules, rule_info
from forensics.report.document import flag_changes, normalise_document, ordered_findings

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SARIF_VERSION = "2.1.0"
LEVELS = {"critical": "error", "high": "error", "medium": "warning", "low": "note", "info": "note"}
#: SARIF's "security-severity"-style number (0–10) some dashboards sort by.
SEVERITY_SCORE = {"critical": "9.5", "high": "8.0", "medium": "5.5", "low": "3.0", "info": "1.0"}


def level(severity: str | None) -> str:
    """SARIF level of a finding severity.

    >>> level("medium"), level("info"), level("critical")
    ('warning', 'note', 'error')
    """
    return LEVELS.get(severity or "", "note")


def _rule_name(rule_id: str) -> str:
    return "".join(p.capitalize() for p in re.split(r"[^A-Za-z0-9]+", rule_id) if p) or "Rule"


def _help_text(rule: RuleInfo) -> tuple[str, str]:
    if not rule.docs:
        return rule.title, rule.title
    text = "\n\n".join(f"{h}: {t}" for h, t in rule.docs)
    markdown = "\n\n".join(f"**{h}**\n\n{t}" for h, t in rule.docs)
    return text, markdown


def _descriptor(rule: RuleInfo, fallback: dict[str, Any] | None = None) -> dict[str, Any]:
    severity = rule.severity or (fallback or {}).get("severity")
    category = rule.category or (fallback or {}).get("category")
    text, markdown = _help_text(rule)
    full = rule.docs[0][1] if rule.docs else rule.title
    props: dict[str, Any] = {"tags": [t for t in ("forensics", category) if t]}
    if severity:
        props["severity"] = severity
        props["security-severity"] = SEVERITY_SCORE.get(severity, "1.0")
    if category:
        props["category"] = category
    return {
        "id": rule.id,
        "name": _rule_name(rule.id),
        "shortDescription": {"text": rule.title},
        "fullDescription": {"text": full},
        "help": {"text": text, "markdown": markdown},
        "defaultConfiguration": {"level": level(severity)},
        "properties": props,
    }


def artifact_uri(path: str) -> str:
    """A bundle path as a relative URI reference (spaces and odd bytes percent-encoded).

    >>> artifact_uri("logs/tp0 #1.log")
    'logs/tp0%20%231.log'
    """
    return quote(path.replace("\\", "/").lstrip("/"), safe="/")


def _location(ev: dict[str, Any]) -> dict[str, Any] | None:
    file = ev.get("file")
    if not file:
        return None
    phys: dict[str, Any] = {"artifactLocation": {"uri": artifact_uri(str(file))}}
    line = ev.get("line")
    if isinstance(line, int) and not isinstance(line, bool) and line >= 1:
        region: dict[str, Any] = {"startLine": line}
        if ev.get("text"):
            region["snippet"] = {"text": str(ev["text"])}
        phys["region"] = region
    return {"physicalLocation": phys}


def fingerprint(finding: dict[str, Any]) -> str:
    """Stable hash of a finding's rule id and its evidence locations (not of the wording)."""
    locs = sorted(f"{e.get('file')}:{e.get('line')}" for e in finding.get("evidence") or [])
    raw = "\n".join([str(finding.get("rule_id")), *locs]).encode("utf-8", "replace")
    return hashlib.sha256(raw).hexdigest()[:32]


def _result(f: dict[str, Any], rule_index: int, root: str | None) -> dict[str, Any]:
    rem = f.get("remediation") or {}
    flags = flag_changes({"root_cause": None, "findings": [f]})
    message = str(f.get("summary") or f.get("title") or f.get("rule_id"))
    if flags:
        message += " Change: " + ", ".join(
            f"{r.flag} {r.old if r.old is not None else '(unset)'} → {r.new}" for r in flags) + "."
    props: dict[str, Any] = {
        "severity": f.get("severity"),
        "category": f.get("category"),
        "confidence": f.get("confidence"),
        "title": f.get("title"),
        "ranks": f.get("ranks") or [],
        "gpus": f.get("gpus") or [],
        "figures": f.get("figures") or {},
        "remediation": {"flags": rem.get("flags") or [], "actions": rem.get("actions") or []},
        "rootCause": f.get("rule_id") == root,
    }
    if f.get("hosts"):
        props["hosts"] = list(f["hosts"])
    if f.get("consequence_of"):
        props["consequenceOf"] = f["consequence_of"]
    if f.get("confidence_reason"):
        props["confidenceReason"] = f["confidence_reason"]
    result: dict[str, Any] = {
        "ruleId": f.get("rule_id"),
        "ruleIndex": rule_index,
        "level": level(f.get("severity")),
        "message": {"text": message},
        "locations": [loc for e in f.get("evidence") or [] if (loc := _location(e))],
        "partialFingerprints": {"forensicsFinding/v1": fingerprint(f)},
        "properties": props,
    }
    return result


def to_sarif(doc: dict[str, Any], catalog: Any) -> dict[str, Any]:
    """SARIF 2.1.0 log of the findings document, one run, rules from the catalog."""
    doc = normalise_document(doc)
    tool = doc.get("tool") or {}
    rules = {r.id: _descriptor(r) for r in catalog_rules(catalog)}
    for f in doc.get("findings") or []:
        rid = str(f.get("rule_id"))
        if rid not in rules:  # a rule the catalog does not list still needs a descriptor
            info = rule_info(catalog, rid) or RuleInfo(rid, str(f.get("title") or rid), f.get("severity"),
                                                        f.get("category"), [])
            rules[rid] = _descriptor(info, f)
    ordered = [rules[k] for k in sorted(rules)]
    index = {r["id"]: i for i, r in enumerate(ordered)}
    root = doc.get("root_cause")
    driver: dict[str, Any] = {
        "name": str(tool.get("name") or "forensics"),
        "version": str(tool.get("version") or "0"),
        "semanticVersion": str(tool.get("version") or "0"),
        "rules": ordered,
    }
    inp = doc.get("input") or {}
    run: dict[str, Any] = {
        "tool": {"driver": driver},
        "results": [_result(f, index[str(f.get("rule_id"))], root) for f in ordered_findings(doc)],
        "columnKind": "unicodeCodePoints",
        "properties": {"rootCause": root, "host": inp.get("host"), "collectedAt": inp.get("collected_at"),
                       "gaps": list(inp.get("gaps") or [])},
    }
    files = sorted({str(e["file"]) for f in doc.get("findings") or [] for e in f.get("evidence") or []
                    if e.get("file")})
    if files:
        run["artifacts"] = [{"location": {"uri": artifact_uri(p)}} for p in files]
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}

"""findings.json (schema_version 1, DESIGN.md §4): the findings document and its exact bytes.

Deterministic: the same timeline gives byte-identical JSON. Keys are sorted (no key order carries
meaning); findings keep their order (severity, then rule id), evidence is sorted by file and line,
coverage by file.

>>> from forensics.model import Timeline
>>> from parsers.schema import empty_frame
>>> doc = to_document([], None, Timeline(events=empty_frame()))
>>> doc["schema_version"], doc["root_cause"], doc["findings"]
(1, None, [])
>>> dumps_document(doc) == dumps_document(to_document([], None, Timeline(events=empty_frame())))
True
"""

from __future__ import annotations

import json
from typing import Any

from forensics import __version__
from forensics.model import Finding, Timeline, iso_z, json_safe

SCHEMA_VERSION = 1


def finding_dict(f: Finding) -> dict[str, Any]:
    d = f.to_dict()
    d["evidence"] = sorted(d["evidence"], key=lambda e: (e["file"], e["line"], e.get("text") or ""))
    return json_safe(d)


def to_document(findings: list[Finding], root_cause: str | None, tl: Timeline) -> dict[str, Any]:
    """The findings document for one analysed input."""
    facts = tl.facts
    coverage = sorted(
        (json_safe(dict(c)) for c in tl.coverage),
        key=lambda c: (str(c.get("file")), str(c.get("format"))),
    )
    inp: dict[str, Any] = {
        "paths": list(facts.input_paths),
        "host": facts.host,
        "collected_at": iso_z(facts.collected_at),
        "sglang_version": facts.sglang_version,
        "gaps": list(facts.gaps),
    }
    if facts.versions:  # every component version the input states (vllm, torch, driver, …), added to schema 1
        inp["versions"] = {str(k): str(v) for k, v in sorted(facts.versions.items())}
    if facts.hosts:  # several hosts: ``host`` is the root cause's; each host's own facts beside it
        inp["hosts"] = {name: json_safe(h.as_dict()) for name, h in sorted(facts.hosts.items())}
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "forensics", "version": __version__},
        "input": inp,
        "root_cause": root_cause,
        "findings": [finding_dict(f) for f in findings],
        "coverage": coverage,
    }


def dumps_document(doc: dict[str, Any]) -> str:
    """The document as JSON text: sorted keys, two-space indent, UTF-8 characters kept, final newline."""
    return json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False) + "\n"

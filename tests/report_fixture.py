"""The hand-written incident the report tests render: fixtures/report/seed_incident/.

Three files of our own text in the real shapes: ``findings.json`` (DESIGN.md §4), ``events.jsonl``
(rows of the event frame) and ``timeline.json`` (facts, coverage, artifacts, unrecognised lines).
"""

from __future__ import annotations

import copy
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from forensics.model import Artifact, Facts, Timeline
from parsers.schema import rows_to_frame

INCIDENT = Path(__file__).resolve().parents[1] / "fixtures" / "report" / "seed_incident"


def _dt(v: str | None) -> datetime | None:
    return None if v is None else datetime.fromisoformat(v.replace("Z", "+00:00"))


def load_rows() -> list[dict[str, Any]]:
    rows = []
    for raw in (INCIDENT / "events.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(raw)
        for col in ("ts", "ts_local"):
            if r.get(col):
                r[col] = _dt(r[col]) if col == "ts" else datetime.fromisoformat(r[col])
        rows.append(r)
    return rows


def timeline(rows: list[dict[str, Any]] | None = None) -> Timeline:
    meta = json.loads((INCIDENT / "timeline.json").read_text(encoding="utf-8"))
    facts = dict(meta["facts"])
    facts["collected_at"] = _dt(facts.get("collected_at"))
    events = rows_to_frame(rows if rows is not None else load_rows(), source="?", path="?")
    return Timeline(
        events=events,
        facts=Facts(**facts),
        coverage=meta["coverage"],
        artifacts=[Artifact(**a) for a in meta["artifacts"]],
        unrecognized_examples={k: [tuple(x) for x in v] for k, v in meta["unrecognized_examples"].items()},
    )


def document() -> dict[str, Any]:
    return copy.deepcopy(json.loads((INCIDENT / "findings.json").read_text(encoding="utf-8")))


def catalog():
    """The real rule catalog when it is there, else None (the report must cope with both)."""
    try:
        from forensics.rules import load_catalog
    except ImportError:
        return None
    return load_catalog()

"""The fleet dataset (docs/fleet.md): one row per finding, one row per incident, as plain Parquet.

``DIR/findings/date=YYYY-MM-DD/<incident id>.parquet`` is hive-partitioned (the partition value is
the incident's day, UTC; it is not repeated inside the files, as Spark and DuckDB expect), one file
per analysed incident (zero rows for a healthy one), written by the worker that analysed it.
``DIR/incidents.parquet`` is one file, one row per incident, failed ones included with their
``error``; the driver rewrites it (atomically) with the old rows plus the new ones.

The schemas are fixed here, so every file has the same column types whatever its rows hold (a column
that is null in one incident is still a string column) and DuckDB, polars and Spark read the folder as
one table.

>>> rows = finding_rows({"incident_id": "x", "tag": None, "inputs": ["/b.tgz"], "input_sha256": ["ab"],
...     "hosts": ["h1"], "engine": "sglang", "engine_version": None, "collected_at": None},
...     {"root_cause": "R-1", "findings": [{"rule_id": "R-1", "category": "xid", "severity": "high",
...      "confidence": "high", "title": "t", "summary": "s", "gpus": [5],
...      "evidence": [{"file": "added/k.txt", "line": 7}],
...      "remediation": {"flags": [{"flag": "--x", "old": "1", "new": "2"}]}}]}, {5: "GPU-AB"})
>>> r = rows[0]
>>> r["is_root_cause"], r["evidence_file"], r["evidence_line"], r["flags_corrected"], r["gpu_ids"]
(True, 'added/k.txt', 7, [{'flag': '--x', 'old': '1', 'new': '2'}], ['GPU-AB'])
>>> findings_table(rows).num_rows, findings_table([]).schema == FINDINGS_SCHEMA
(1, True)
"""

from __future__ import annotations

import os
import secrets
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

_TS = pa.timestamp("us", tz="UTC")
_FLAG = pa.struct([("flag", pa.string()), ("old", pa.string()), ("new", pa.string())])

#: One row per finding. ``date`` (the partition) is added by the reader from the folder name.
FINDINGS_SCHEMA = pa.schema([
    ("incident_id", pa.string()),
    ("tag", pa.string()),
    ("input_path", pa.string()),
    ("input_sha256", pa.string()),
    ("hosts", pa.list_(pa.string())),
    ("engine", pa.string()),
    ("engine_version", pa.string()),
    ("collected_at", _TS),
    ("rule_id", pa.string()),
    ("category", pa.string()),
    ("severity", pa.string()),
    ("is_root_cause", pa.bool_()),
    ("confidence", pa.string()),
    ("title", pa.string()),
    ("summary", pa.string()),
    ("consequence_of", pa.string()),
    ("flags_corrected", pa.list_(_FLAG)),
    ("gpus", pa.list_(pa.int32())),
    ("gpu_ids", pa.list_(pa.string())),
    ("evidence_file", pa.string()),
    ("evidence_line", pa.int64()),
    ("evidence_count", pa.int32()),
])

#: One row per incident, analysed or failed.
INCIDENTS_SCHEMA = pa.schema([
    ("incident_id", pa.string()),
    ("tag", pa.string()),
    ("inputs", pa.list_(pa.string())),
    ("input_sha256", pa.list_(pa.string())),
    ("hosts", pa.list_(pa.string())),
    ("engine", pa.string()),
    ("engine_version", pa.string()),
    ("collected_at", _TS),
    ("first_event", _TS),
    ("last_event", _TS),
    ("date", pa.date32()),
    ("root_cause_rule", pa.string()),
    ("root_cause_category", pa.string()),
    ("root_cause_title", pa.string()),
    ("severity", pa.string()),
    ("n_findings", pa.int32()),
    ("error", pa.string()),
    ("report", pa.string()),
    ("tool_version", pa.string()),
])


def finding_rows(incident: dict[str, Any], doc: dict[str, Any], gpu_ids: dict[int, str]) -> list[dict[str, Any]]:
    """The dataset rows of one findings document. ``incident`` carries the incident-level columns;
    ``gpu_ids`` maps a finding's GPU index to that GPU's serial or UUID where the evidence names one."""
    inputs, shas = incident["inputs"], incident["input_sha256"]
    root = doc.get("root_cause")
    out, root_seen = [], False
    for f in doc.get("findings") or []:
        ev = f.get("evidence") or []
        first = ev[0] if ev else {}
        is_root = f.get("rule_id") == root and not root_seen  # a rule that fired in several runs: the first
        root_seen = root_seen or is_root
        k = _input_of(str(first.get("file") or ""), inputs)
        rem = f.get("remediation") or {}
        gpus = [int(g) for g in f.get("gpus") or [] if isinstance(g, int)]
        out.append({
            "incident_id": incident["incident_id"],
            "tag": incident.get("tag"),
            "input_path": inputs[k] if inputs else None,
            "input_sha256": shas[k] if shas else None,
            "hosts": list(incident.get("hosts") or []),
            "engine": incident.get("engine"),
            "engine_version": incident.get("engine_version"),
            "collected_at": incident.get("collected_at"),
            "rule_id": f.get("rule_id"),
            "category": f.get("category"),
            "severity": f.get("severity"),
            "is_root_cause": is_root,
            "confidence": f.get("confidence"),
            "title": f.get("title"),
            "summary": f.get("summary"),
            "consequence_of": f.get("consequence_of"),
            "flags_corrected": [{"flag": str(c.get("flag")), "old": None if c.get("old") is None else str(c["old"]),
                                 "new": None if c.get("new") is None else str(c["new"])}
                                for c in rem.get("flags") or []],
            "gpus": gpus,
            "gpu_ids": [gpu_ids[g] for g in gpus if g in gpu_ids],
            "evidence_file": first.get("file"),
            "evidence_line": first.get("line"),
            "evidence_count": len(ev),
        })
    return out


def _input_of(evidence_file: str, inputs: list[str]) -> int:
    """Which of an incident's inputs an evidence file came from: the one whose name prefixes it
    (several bundles are read side by side under their names), else the first."""
    if len(inputs) > 1:
        for i, p in enumerate(inputs):
            name = Path(p).name
            for stem in (name, name.split(".")[0]):
                if stem and (evidence_file == stem or evidence_file.startswith(stem + "/")):
                    return i
    return 0


def findings_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=FINDINGS_SCHEMA)


def incidents_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=INCIDENTS_SCHEMA)


def _write_table(table: pa.Table, target: Path) -> None:
    """Write through a temporary name in the same folder and rename: a reader (or a rerun after a
    crash) sees the old file or the new one, never half of one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def partition_path(out_dir: Path, day: date, incident_id: str) -> Path:
    return Path(out_dir) / "findings" / f"date={day.isoformat()}" / f"{incident_id}.parquet"


def write_findings(out_dir: Path, day: date, incident_id: str, rows: list[dict[str, Any]]) -> Path:
    """One incident's partition file (overwritten when the incident is analysed again)."""
    target = partition_path(out_dir, day, incident_id)
    _write_table(findings_table(rows), target)
    return target


def read_incidents(out_dir: Path) -> list[dict[str, Any]]:
    p = Path(out_dir) / "incidents.parquet"
    if not p.is_file():
        return []
    return pq.read_table(p).cast(INCIDENTS_SCHEMA).to_pylist()


def write_incidents(out_dir: Path, rows: list[dict[str, Any]]) -> Path:
    """All incident rows, sorted by day then id, so the same set of incidents gives the same file."""
    def key(r: dict[str, Any]) -> tuple:
        return (r.get("date") or date.min, r.get("incident_id") or "")

    target = Path(out_dir) / "incidents.parquet"
    _write_table(incidents_table(sorted(rows, key=key)), target)
    return target


def read_findings(out_dir: Path) -> list[dict[str, Any]]:
    """Every finding row with its ``date`` (the partition), for the index page."""
    root = Path(out_dir) / "findings"
    out: list[dict[str, Any]] = []
    if not root.is_dir():
        return out
    for part in sorted(root.glob("date=*")):
        day = datetime.strptime(part.name[5:], "%Y-%m-%d").date()
        for f in sorted(part.glob("*.parquet")):
            for r in pq.read_table(f).cast(FINDINGS_SCHEMA).to_pylist():
                r["date"] = day
                out.append(r)
    return out

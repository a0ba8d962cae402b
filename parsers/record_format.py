"""The recorder's segment format, checked without polars (the recorder and ``collect`` load this, not the
parser): a header line holding ``"forensics_record": 1``, one JSON record a line, a footer
``{"forensics_record_end": {"records": N, "sha256": …}}`` over every byte before it (docs/record.md).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FOOTER_KEY", "FORMAT_VERSION", "HEADER_KEY", "Checked", "check_text", "load_line"]

FORMAT_VERSION = 1
HEADER_KEY = "forensics_record"
FOOTER_KEY = "forensics_record_end"
MAX_LINE = 1 << 20


@dataclass
class Checked:
    """A segment's text checked: header, (line, record) pairs, why it was refused (None when whole)."""

    header: dict[str, Any] = field(default_factory=dict)
    records: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    refused: str | None = None
    torn_lines: int = 0


def load_line(line: str) -> Any:
    if len(line) > MAX_LINE:
        return None
    try:
        return json.loads(line)
    except ValueError:
        return None


def check_text(text: str) -> Checked:
    """Validate a segment's text: header, every record a JSON object, the footer's count and digest.

    An open segment (header ``open``) has no footer: its complete lines are taken, torn ones counted.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    header = load_line(lines[0]) if lines else None
    if not isinstance(header, dict) or HEADER_KEY not in header:
        return Checked(refused="no header")
    if header.get("open"):
        out = Checked(header=header)
        for no, line in enumerate(lines[1:], 2):
            rec = load_line(line)
            if isinstance(rec, dict) and FOOTER_KEY not in rec:
                out.records.append((no, rec))
            else:
                out.torn_lines += 1
        return out
    footer = load_line(lines[-1]) if len(lines) > 1 else None
    end = footer.get(FOOTER_KEY) if isinstance(footer, dict) else None
    if not isinstance(end, dict):
        return Checked(header=header, refused="no footer: the segment was cut (a crash mid-write)")
    body = "\n".join(lines[:-1]) + "\n"
    if hashlib.sha256(body.encode()).hexdigest() != end.get("sha256"):
        return Checked(header=header, refused="footer digest does not match: the segment is corrupt")
    out = Checked(header=header)
    for no, line in enumerate(lines[1:-1], 2):
        rec = load_line(line)
        if not isinstance(rec, dict):
            return Checked(header=header, refused=f"line {no} is not a JSON record")
        out.records.append((no, rec))
    if len(out.records) != end.get("records"):
        return Checked(header=header, refused="record count does not match the footer")
    return out

"""What ``date`` printed → one ``clock`` row: the host's time when the snapshot was taken.

Sources: GNU coreutils date(1) (8.x–9.x): the default format ``%a %b %e %H:%M:%S %Z %Y``
(``Sun Nov  2 10:40:12 UTC 2025``; glibc's C locale), ``-R``/``--rfc-email`` (``Sun, 02 Nov 2025 10:40:12 +0000``),
``-I``/``--iso-8601=seconds`` (``2025-11-02T10:40:12+00:00``) and ``--rfc-3339=seconds``
(``2025-11-02 10:40:12+00:00``); ``-u`` prints UTC in any of them.

A paste that shows a server's log stopping is only a hang once something says how long it has been
silent: the engines' own stamps end where the log ends, and the time the operator looked is what
measures the silence (our own next step asks for ``date -u`` beside ``tail -n 1`` of the log). The row's
``ts`` is that moment; with a UTC zone or a numeric offset it is exact (``source-utc``, ``local+offset``),
with another zone name it is the host's wall clock, read as the engines' un-zoned stamps are
(``local-assumed``).

>>> r = parse("Sun Nov  2 10:40:12 UTC 2025\\n")
>>> r.events.select("kind", "ts_basis").row(0), str(r.events["ts"][0])
(('clock', 'source-utc'), '2025-11-02 10:40:12+00:00')
>>> str(parse("2025-11-02T12:40:12+02:00").events["ts"][0])
'2025-11-02 10:40:12+00:00'
>>> parse("Sun, 02 Nov 2025 10:40:12 -0500").events["ts_basis"][0]
'local+offset'
>>> sniff("Sun Nov  2 10:40:12 CST 2025"), sniff("Nov  2 10:40:12 host kernel: x")
(0.9, 0.0)
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from .schema import NotThisFormat, ParseResult

FORMAT = "date"

_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov",
                                       "dec"), 1)}
#: the default format (``%a %b %e %H:%M:%S %Z %Y``); the zone is an abbreviation or a numeric offset
_DEFAULT = re.compile(r"^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d):(\d\d)"
                      r"(?: ([A-Z]{2,5}|[+-]\d{2}:?\d{2}))? (\d{4})$")
#: ``-R``: ``%a, %d %b %Y %H:%M:%S %z``
_RFC_EMAIL = re.compile(r"^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), (\d{1,2}) ([A-Z][a-z]{2}) (\d{4}) (\d\d):(\d\d):(\d\d)"
                        r" ([+-]\d{4})$")
#: ``-Iseconds`` / ``--rfc-3339=seconds``: an explicit offset is what makes it a ``date`` and not a log stamp
_ISO = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,]\d{1,9})?(Z|[+-]\d\d:?\d\d)$")
_UTC_NAMES = ("UTC", "GMT", "Z", "UCT")


def _offset(text: str) -> timedelta | None:
    m = re.fullmatch(r"([+-])(\d\d):?(\d\d)", text)
    if m is None:
        return None
    delta = timedelta(hours=int(m.group(2)), minutes=int(m.group(3)))
    return -delta if m.group(1) == "-" else delta


def read(line: str) -> tuple[datetime, str] | None:
    """The moment one line of ``date`` output names, in UTC, and how it was obtained (``ts_basis``)."""
    got = read_wall(line)
    return got[:2] if got else None


def read_wall(line: str) -> tuple[datetime, str, datetime] | None:
    """:func:`read` and the wall clock as printed (no zone): what the host's un-zoned log stamps are read against."""
    s = line.strip()
    if len(s) > 64:
        return None
    zone: str | None
    try:
        if (m := _DEFAULT.match(s)) is not None:
            month = _MONTHS.get(m.group(1).lower())
            if month is None:
                return None
            wall = datetime(int(m.group(7)), month, int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)))
            zone = m.group(6)
        elif (m := _RFC_EMAIL.match(s)) is not None:
            month = _MONTHS.get(m.group(2).lower())
            if month is None:
                return None
            wall = datetime(int(m.group(3)), month, int(m.group(1)), int(m.group(4)), int(m.group(5)), int(m.group(6)))
            zone = m.group(7)
        elif (m := _ISO.match(s)) is not None:
            wall = datetime(*(int(g) for g in m.groups()[:6]))
            zone = m.group(7)
        else:
            return None
    except ValueError:  # 31 Feb, hour 25
        return None
    if zone is None or zone in _UTC_NAMES:
        return wall.replace(tzinfo=UTC), "source-utc" if zone else "local-assumed", wall
    off = _offset(zone)
    if off is not None:
        return (wall - off).replace(tzinfo=UTC), "source-utc" if not off else "local+offset", wall
    # a zone's name (CST, PDT) is ambiguous: the host's wall clock, as its logs' un-zoned stamps are read
    return wall.replace(tzinfo=UTC), "local-assumed", wall


def sniff(head: str) -> float:
    lines = [ln for ln in head.strip().split("\n")[:3] if ln.strip()]
    return 0.9 if lines and len(lines) <= 2 and all(read(ln) is not None for ln in lines) else 0.0


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    if not isinstance(text, str):
        raise NotThisFormat("date: not text")
    rows: list[dict[str, Any]] = []
    lines = text.split("\n")
    content = [(i, ln) for i, ln in enumerate(lines, 1) if ln.strip()]
    if not content or len(content) > 16:
        raise NotThisFormat("date: not one or a few clock lines")
    for i, ln in content:
        got = read_wall(ln)
        if got is None:
            continue
        ts, basis, wall = got
        rows.append({"line": i, "kind": "clock", "ts": ts, "ts_basis": basis, "text": ln.strip(),
                     "attrs": {"command": (command or "")[:200] or None, "wall": wall.isoformat()}})
    if not rows:
        raise NotThisFormat("date: no clock line")
    total = text.count("\n") + (0 if not text or text.endswith("\n") else 1)
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=total,
                                 recognized=min(len(rows) + total - len(content), total))

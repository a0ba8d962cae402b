"""A bundle's ``manifest.json`` read as the untrusted input it is: every field typed, a bad one ignored.

``forensics collect`` writes the manifest (see :mod:`forensics.collect`), but a bundle attached to a
ticket may hold anything there. :func:`validate` keeps the document's shape for its readers (the
timeline, the host split) and guarantees the types they rely on: a field of the wrong type or out of
range (``"utc_offset_s": 1e300``, ``"host": ["a"]``, a string inside ``artifacts``) is dropped and
named in a note, which the report lists among the inputs' gaps; the report goes on.

>>> doc, notes = validate({"schema_version": 1, "host": ["a"], "utc_offset_s": 1e300,
...                        "artifacts": ["x", {"path": "logs/a.log", "rc": "0", "format": "sglang"}]})
>>> doc["artifacts"], "host" in doc, "utc_offset_s" in doc
([{'path': 'logs/a.log', 'format': 'sglang'}], False, False)
>>> notes[:2]
['manifest.json: host ignored (a list, not a name)', 'manifest.json: utc_offset_s ignored (1e+300 is not a UTC offset in seconds)']
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

#: Longest string kept from a manifest (a host name, a path, a gap); longer ones are ignored.
MAX_TEXT = 4096
#: Most entries kept from a manifest's lists (artifacts, gaps, argv); the rest are ignored, counted.
MAX_ITEMS = 10_000
#: Offsets from UTC span -12 h to +14 h; a day either way is a generous bound.
MAX_OFFSET_S = 86_400

_SURROGATE = re.compile("[\ud800-\udfff]")
_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "true/false", int: "a number",
          float: "a number", type(None): "null"}


def _kind(v: Any) -> str:
    return _KINDS.get(type(v), type(v).__name__)


def _text(v: Any) -> str | None:
    if isinstance(v, str) and len(v) <= MAX_TEXT:
        return _SURROGATE.sub("\ufffd", v)
    return None


def _name(v: Any) -> str | None:
    t = _text(v)
    return t if t and t.strip() and "\n" not in t else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 1 << 63 else None


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def _offset(v: Any) -> int | float | None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and abs(v) <= MAX_OFFSET_S
    return v if ok else None


def _scalar(v: Any) -> Any:
    """A value of an unknown field: kept when a plain scalar."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int | float):
        return v if _int(v) is not None or (isinstance(v, float) and math.isfinite(v)) else None
    return _text(v)


_TOP: dict[str, tuple[Callable[[Any], Any], str]] = {
    "schema_version": (_int, "not a whole number"),
    "host": (_name, "not a name"),
    "tag": (_name, "not a name"),
    "started_at": (_text, "not a time stamp"),
    "ended_at": (_text, "not a time stamp"),
    "boot_time": (_text, "not a time stamp"),
    "timezone": (_name, "not a zone name"),
    "utc_offset_s": (_offset, "not a UTC offset in seconds"),
}
_ARTIFACT: dict[str, tuple[Callable[[Any], Any], str]] = {
    "path": (_name, "not a path"),
    "source": (_text, "not a name"),
    "format": (_text, "not a format name"),
    "started": (_text, "not a time stamp"),
    "ended": (_text, "not a time stamp"),
    "rc": (_int, "not an exit status"),
    "timed_out": (_bool, "not true/false"),
    "abandoned": (_bool, "not true/false"),
    "truncated": (_bool, "not true/false"),
    "bytes": (_int, "not a byte count"),
    "sha256": (_text, "not a digest"),
    "redactions": (_int, "not a count"),
    "error": (_text, "not a message"),
    "snapshot": (_int, "not a snapshot number"),
    "component": (_text, "not a name"),
    "version": (_text, "not a version"),
}


def _shown(v: Any) -> str:
    if isinstance(v, dict | list):
        return _kind(v)
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def _typed(obj: dict, schema: dict[str, tuple[Callable[[Any], Any], str]], where: str,
           notes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if not isinstance(key, str) or _text(key) is None:
            continue
        if key in schema:
            check, wanted = schema[key]
            if value is None:  # "unset" is every field's right
                out[key] = None
                continue
            got = check(value)
            if got is None:
                notes.append(f"{where}{key} ignored ({_shown(value)} is {wanted})" if not isinstance(value, dict | list)
                             else f"{where}{key} ignored ({_kind(value)}, {wanted})")
                continue
            out[key] = got
        elif key not in ("artifacts", "gaps", "versions", "tool", "options", "argv"):
            v = _scalar(value)
            if v is not None or value is None:
                out[key] = v
    return out


def _str_list(v: Any, where: str, notes: list[str]) -> list[str] | None:
    if not isinstance(v, list):
        notes.append(f"{where} ignored ({_kind(v)}, not a list)")
        return None
    items = [t for t in (_text(x) for x in v[:MAX_ITEMS]) if t is not None]
    if len(items) < len(v):
        notes.append(f"{where}: {len(v) - len(items)} of {len(v)} entries ignored (not short text)")
    return items


def _str_map(v: Any, where: str, notes: list[str]) -> dict[str, Any] | None:
    if not isinstance(v, dict):
        notes.append(f"{where} ignored ({_kind(v)}, not an object)")
        return None
    def value(x: Any) -> Any:  # a plain value, or a list of plain values (collect's --log/--add paths)
        if isinstance(x, list):
            items = [_scalar(i) for i in x[:MAX_ITEMS]]
            return items if all(i is not None for i in items) else None
        return _scalar(x)

    out = {k: value(x) for k, x in list(v.items())[:MAX_ITEMS] if isinstance(k, str) and _text(k) is not None}
    dropped = [k for k, x in out.items() if x is None and v.get(k) is not None]
    for k in dropped:
        del out[k]
    if dropped:
        notes.append(f"{where}: {len(dropped)} entr{'y' if len(dropped) == 1 else 'ies'} ignored (not plain values)")
    return out


def validate(doc: dict) -> tuple[dict[str, Any], list[str]]:
    """The manifest with every field of the wrong type dropped, and a note for each (see the module)."""
    notes: list[str] = []
    where = "manifest.json: "
    out = _typed(doc, _TOP, where, notes)
    for key in ("tool", "options", "versions"):
        if key in doc and doc[key] is not None:
            m = _str_map(doc[key], f"{where}{key}", notes)
            if m is not None:
                out[key] = m
    if "gaps" in doc and doc["gaps"] is not None:
        gaps = _str_list(doc["gaps"], f"{where}gaps", notes)
        if gaps is not None:
            out["gaps"] = gaps
    arts = doc.get("artifacts")
    if not isinstance(arts, list):
        if arts is not None:
            notes.append(f"{where}artifacts ignored ({_kind(arts)}, not a list)")
        out["artifacts"] = []
        return out, notes
    kept: list[dict[str, Any]] = []
    bad = 0
    for i, a in enumerate(arts[:MAX_ITEMS]):
        if not isinstance(a, dict):
            bad += 1
            continue
        art = _typed(a, _ARTIFACT, f"{where}artifacts[{i}].", notes)
        if "argv" in a and a["argv"] is not None:
            argv = _str_list(a["argv"], f"{where}artifacts[{i}].argv", notes)
            if argv is not None:
                art["argv"] = argv
        if not art.get("path"):
            bad += 1
            continue
        kept.append(art)
    bad += max(0, len(arts) - MAX_ITEMS)
    if bad:
        notes.append(f"{where}{bad} of {len(arts)} artifact entr{'y' if len(arts) == 1 else 'ies'} ignored "
                     "(not an object with a path)")
    out["artifacts"] = kept
    return out, notes[:100] + ([f"{where}{len(notes) - 100} more fields ignored"] if len(notes) > 100 else [])

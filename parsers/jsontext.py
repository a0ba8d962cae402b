"""JSON read from untrusted text (a docker ``log`` record, a JSON log line, a quoted YAML scalar).

Sources: JSON is RFC 8259 (§7: a ``\\uD800``-``\\uDFFF`` escape alone is a lone surrogate, which UTF-8 cannot
encode).

:func:`loads` is :func:`json.loads` with two guarantees the parsers rely on: nesting past
:data:`MAX_DEPTH` is a :class:`ValueError` like any other malformed line (the stdlib raises
``RecursionError`` on a deep one, and a walker further down would hit it on a shallower one), and no
string in the result holds a lone surrogate (``"\\ud800"`` is valid JSON but not encodable as UTF-8:
polars and every writer refuse it), each such code point becoming U+FFFD as an undecodable byte does.

>>> loads('{"log": "a\\\\ud800b", "n": [1]}')
{'log': 'a\ufffdb', 'n': [1]}
>>> loads("[" * 100_000 + "]" * 100_000)
Traceback (most recent call last):
ValueError: JSON nested deeper than 64 levels
"""

from __future__ import annotations

import json
import re
from typing import Any

#: Deeper than any log record or launch config; a line nested further is read as text.
MAX_DEPTH = 64

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def loads(text: str | bytes) -> Any:
    """``json.loads(text)`` bounded in depth and with lone surrogates replaced (see the module)."""
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8", errors="replace")
    try:
        obj = json.loads(text)  # the C scanner raises RecursionError past the interpreter's limit
    except RecursionError:
        obj = None
        deep = True
    else:
        deep = isinstance(obj, dict | list) and _depth(obj) > MAX_DEPTH
    if deep:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
    if _SURROGATE_ESCAPE.search(text) or _SURROGATE.search(text):
        obj = _clean(obj)
    return obj


def _depth(obj: Any) -> int:
    """How deep lists and objects nest in ``obj`` (iterative: a deep one must not recurse here)."""
    deepest = 0
    stack = [(obj, 1)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            deepest = max(deepest, d)
            stack.extend((v, d + 1) for v in node if isinstance(v, dict | list))
    return deepest


def _clean(obj: Any) -> Any:
    """``obj`` with every lone surrogate in its strings (keys too) replaced by U+FFFD."""
    if isinstance(obj, str):
        return _SURROGATE.sub("\ufffd", obj)
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    if isinstance(obj, dict):
        return {_clean(k): _clean(v) for k, v in obj.items()}
    return obj

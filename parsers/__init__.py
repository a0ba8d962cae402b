"""Pure parsers: text (+ path) in, event frame out. One module per source format.

Every format module exposes::

    FORMAT: str                                   # the name written to the ``source`` column
    def sniff(head: str) -> float                 # 0..1: how sure we are this text is ours
    def parse(text: str, path: str = "", command: str | None = None) -> ParseResult

``command`` is the shell command that produced the text when known (a transcript's
``nvidia-smi --query-gpu=index,memory.used --format=csv,noheader`` tells the columns of a
header-less CSV). Parsers import only polars, regex and the standard library.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EVENT_SCHEMA", "NotThisFormat", "ParseResult", "empty_frame", "rows_to_frame"]


def __getattr__(name: str) -> Any:
    """The schema's names on first use: a light module (the recorder's format check) loads without polars."""
    if name in __all__:
        from . import schema

        return getattr(schema, name)
    raise AttributeError(f"module 'parsers' has no attribute {name!r}")

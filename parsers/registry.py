"""Which parser reads which text: the module list and content sniffing.

Files are recognised by content, not by name (DESIGN.md §3): each parser's ``sniff`` scores the
head of a text and the best score at or above :data:`MIN_SCORE` wins.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

#: Every parser module, by module name. Adding a source = adding a module here.
PARSER_MODULES = (
    "sglang",
    "vllm",
    "launch",
    "free",
    "meminfo",
    "nvidia_smi.table",
    "nvidia_smi.csv",
    "nvidia_smi.q",
    "nvidia_smi.xml",
    "nvidia_smi.misc",
    "nvidia_smi.mon",
    "kernel",
    "ps",
    "fuser",
    "crash_snapshot",
    "container_limits",
    "record",
    "clock",
    "ray_status",
    "env_report",
)

#: Parsers of binary artifacts (the engines' crash dumps are pickles): ``sniff_bytes(head) -> float``,
#: ``parse_bytes(data, path) -> ParseResult``. The input layer asks them before it skips a binary file.
BINARY_PARSER_MODULES = (
    "crash_dump",
    "flight_recorder",
)

MIN_SCORE = 0.5
SNIFF_BYTES = 64 * 1024

_loaded: dict[str, ModuleType] | None = None


def parsers() -> dict[str, ModuleType]:
    """FORMAT name → parser module."""
    global _loaded
    if _loaded is None:
        mods = {}
        for name in PARSER_MODULES:
            mod = importlib.import_module(f"parsers.{name}")
            mods[mod.FORMAT] = mod
        _loaded = mods
    return _loaded


def get(fmt: str) -> ModuleType | None:
    return parsers().get(fmt)


def sniffers() -> dict[str, Callable[[str], float]]:
    return {fmt: mod.sniff for fmt, mod in parsers().items()}


#: The last head sniffed and its scores: a file's head is asked about two or three times in a row
#: (the manifest's hint, then the best format), and every sniffer reads up to 64 KiB.
_last: tuple[str, tuple[Callable[[str], float], ...], dict[str, float]] | None = None


def sniff_scores(head: str) -> dict[str, float]:
    """Every parser's score for this text head; a sniffer that fails scores 0."""
    global _last
    head = head[:SNIFF_BYTES]
    fns = sniffers()
    key = tuple(fns.values())
    if _last is not None and _last[1] == key and _last[0] == head:
        return dict(_last[2])
    scores = {}
    for fmt, fn in fns.items():
        try:
            scores[fmt] = float(fn(head))
        except Exception:  # a sniffer must never take the whole read down
            scores[fmt] = 0.0
    _last = (head, key, dict(scores))
    return scores


def best_format(head: str) -> tuple[str | None, float]:
    """The format whose sniffer is surest, if any is sure enough.

    >>> best_format("")
    (None, 0.0)
    """
    scores = sniff_scores(head)
    if not scores:
        return None, 0.0
    fmt, score = max(sorted(scores.items()), key=lambda kv: kv[1])
    return (fmt, score) if score >= MIN_SCORE else (None, score)


_binary: dict[str, ModuleType] | None = None


def binary_parsers() -> dict[str, ModuleType]:
    """FORMAT name → parser module, for binary artifacts."""
    global _binary
    if _binary is None:
        _binary = {m.FORMAT: m for m in (importlib.import_module(f"parsers.{n}") for n in BINARY_PARSER_MODULES)}
    return _binary


def best_binary_format(head: bytes) -> str | None:
    """The binary parser whose sniffer is surest of these first bytes, if any is sure enough.

    >>> best_binary_format(b"\\x7fELF"), best_binary_format(b"")
    (None, None)
    """
    best, top = None, 0.0
    for fmt, mod in sorted(binary_parsers().items()):
        try:
            score = float(mod.sniff_bytes(head))
        except Exception:  # a sniffer must never take the whole read down
            score = 0.0
        if score > top:
            best, top = fmt, score
    return best if top >= MIN_SCORE else None

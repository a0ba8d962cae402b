"""One pass over a text that tells each auxiliary reader which lines it can use.

Every text read whole goes, besides its own parser, to readers that look for a few things anywhere:
failure lines (``parsers.failures``), GPU model names (``parsers.gpu_models``), launch commands
(``parsers.launch``), stack and input dumps (``parsers.stack_dumps``). Each reader already has a cheap
gate of its own, a pattern that every text it reads matches (``failures.TRIGGER``,
``gpu_models.PREFILTER``, ``launch.ANCHOR_RE``, ``stack_dumps.NEEDLES``); but each gate was one more
scan of every byte by Python's regex engine, and the failure scan then stepped through every line in
Python. Here the gates are the readers' own patterns, joined into one alternation that polars' regex
engine (Rust: one automaton, linear time) runs once over the lines; the lines it flags are a superset
of those each reader's gate takes, and each reader then runs on its own lines only (or, for a reader
that needs the whole text, only when a line of the text is flagged for it). No list of words is kept
here: a pattern added to a reader's gate is routed without a change to this module.

A reader's Python pattern becomes a Rust one that matches at least as much (:func:`native_superset`):
look-arounds and word boundaries dropped (they only narrow a match), possessive quantifiers made
greedy, ``\\s`` widened to the characters Python counts as space and Rust does not, ``\\w`` to every
number. A pattern that cannot be widened safely is not routed: its reader reads the whole text, as
before. ``tests/test_routing.py`` holds the readers' output the same with and without routing, on
every fixture and real sample.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl


@dataclass(frozen=True)
class Gate:
    """A reader's gate: ``pattern`` (Python syntax) matches every line (``scope="line"``) or somewhere in
    every text (``scope="text"``) that the reader reads; ``literals``: the gate is those plain strings."""

    name: str
    pattern: str | None = None
    literals: tuple[str, ...] = ()
    scope: str = "line"


def gates() -> list[Gate]:
    """The auxiliary readers' gates, taken from the readers themselves."""
    from parsers import failures, gpu_models, launch, stack_dumps

    return [
        Gate("failures", failures.TRIGGER.pattern),
        Gate("gpu_models", gpu_models.PREFILTER.pattern),
        Gate("launch", launch.ANCHOR_RE.pattern, scope="text"),
        Gate("stack_dumps", literals=tuple(stack_dumps.NEEDLES), scope="text"),
    ]


_LOOKAROUND = re.compile(r"\(\?(?:<?[=!])")
_POSSESSIVE = re.compile(r"(?<!\\)([*+?}])\+")


def native_superset(pattern: str) -> str | None:
    """A pattern for polars (Rust regex) that matches wherever ``pattern`` matches under Python's ``re`` or
    ``regex`` (a superset), or None when this cannot widen it safely (then the reader is not routed).

    >>> native_superset(r"[NG](?:VIDIA|\\d{2}(?!\\d))")
    '[NG](?:VIDIA|\\\\d{2})'
    >>> native_superset(r"-m\\s+sglang\\b")
    '-m[\\\\s\\\\x1c-\\\\x1f]+sglang'
    >>> native_superset(r"[^\\s/@]") is None  # a negated class with \\s would shrink, not widen
    True
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            e = pattern[i + 1]
            if e in "sw" and in_class:
                return None
            if e == "s":
                out.append(r"[\s\x1c-\x1f]")
            elif e == "w":
                out.append(r"[\w\p{N}]")
            elif e in "bB" and not in_class:
                pass  # a boundary only narrows a match
            elif e in "SWDAZ" or e.isdigit() and e != "0":
                return None  # complements differ between the engines; back-references do not exist in Rust
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            if c == "]" and not (out and out[-1] in ("[", "[^")):
                in_class = False
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            if pattern.startswith("[^", i):
                out.append("[^")
                i += 2
            else:
                out.append("[")
                i += 1
            if i < n and pattern[i] == "]":  # a leading ']' is a member
                out.append("\\]")
                i += 1
            continue
        if c == "(" and _LOOKAROUND.match(pattern, i):
            end = _group_end(pattern, i)
            if end is None:
                return None
            i = end
            continue
        if pattern.startswith("(?>", i):
            out.append("(?:")
            i += 3
            continue
        if c == "(" and pattern.startswith("(?", i) and i + 2 < n and pattern[i + 2] not in ":P<":
            return None  # inline flags and other extensions: not widened here
        out.append(c)
        i += 1
    rust = _POSSESSIVE.sub(r"\1", "".join(out))
    try:
        pl.Series([""]).str.contains(rust)
    except Exception:  # not valid for polars' engine: this gate is not routed
        return None
    return rust


def _group_end(pattern: str, start: int) -> int | None:
    """Index after the group that opens at ``start`` (escapes and classes skipped), or None."""
    depth, i, n, in_class = 0, start, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


#: Line breaks of ``str.splitlines`` other than ``\\n`` and ``\\r\\n``: in a text holding one, lines split at
#: ``\\n`` are not the lines a reader that splits with ``splitlines`` numbers.
_OTHER_BREAKS = r"[\x0b\x0c\x1c-\x1e\x85\u2028\u2029]|\r(?:[^\n]|$)"


@dataclass
class Routes:
    """What one pass over a text found: per line gate the lines (0-based index at ``\\n`` splits, text) its
    reader may use, per text gate whether its reader may find anything; a gate that could not be routed
    is absent from both (its reader reads everything). ``plain_breaks``: every line ends in ``\\n`` or
    ``\\r\\n``, so ``splitlines`` numbers the lines alike."""

    lines: dict[str, list[tuple[int, str]]]
    texts: dict[str, bool]
    plain_breaks: bool = True

    def for_lines(self, name: str) -> list[tuple[int, str]] | None:
        return self.lines.get(name)

    def maybe(self, name: str) -> bool:
        return self.texts.get(name, True)


_compiled: tuple[tuple[Gate, ...], list[tuple[Gate, str]], list[tuple[Gate, str | None]]] | None = None


def _plan() -> tuple[list[tuple[Gate, str]], list[tuple[Gate, str | None]]]:
    """The line gates and text gates with their Rust patterns (recomputed when a reader's gate changes)."""
    global _compiled
    gs = tuple(gates())
    if _compiled is not None and _compiled[0] == gs:
        return _compiled[1], _compiled[2]
    line_gates: list[tuple[Gate, str]] = []
    text_gates: list[tuple[Gate, str | None]] = []
    for g in gs:
        if g.literals and g.scope == "text":
            text_gates.append((g, None))
            continue
        rust = native_superset(g.pattern) if g.pattern else None
        if rust is None:
            continue
        if g.scope == "line":
            line_gates.append((g, rust))
        else:
            text_gates.append((g, rust))
    _compiled = (gs, line_gates, text_gates)
    return line_gates, text_gates


def route(text: str) -> Routes:
    """The routes of ``text``: one pass of all line gates over its lines, one of all text gates over it."""
    line_gates, text_gates = _plan()
    whole = pl.Series([text], dtype=pl.Utf8)
    lines: dict[str, list[int]] = {}
    if line_gates:
        frame = whole.str.split("\n").explode().to_frame("l").with_row_index("i")
        union = "|".join(f"(?:{p})" for _g, p in line_gates)
        hit = frame.filter(pl.col("l").str.contains(union))
        for g, p in line_gates:
            mine = hit.filter(pl.col("l").str.contains(p))
            lines[g.name] = list(zip(mine.get_column("i").to_list(), mine.get_column("l").to_list(), strict=True))
    texts: dict[str, bool] = {}
    for g, p in text_gates:
        if p is None:
            texts[g.name] = bool(whole.str.contains_any(list(g.literals)).item())
        else:
            texts[g.name] = bool(whole.str.contains(p).item())
    return Routes(lines, texts, plain_breaks=not whole.str.contains(_OTHER_BREAKS).item())

"""One pass over a text that tells each auxiliary reader which lines it can use.

Every text read whole goes, besides its own parser, to readers that look for a few things anywhere:
failure lines (``parsers.failures``), GPU model names (``parsers.gpu_models``), launch commands
(``parsers.launch``), stack and input dumps (``parsers.stack_dumps``). Each reader already has a cheap
gate of its own, a pattern that every text it reads matches (``failures.TRIGGER``,
``gpu_models.PREFILTER``, ``launch.ANCHOR_RE``, ``stack_dumps.NEEDLES``); but each gate was one more
scan of every byte by Python's regex engine, and the failure scan then stepped through every line in
Python. Here the gates are the readers' own patterns, joined into one alternation that polars' regex
engine (Rust: one automaton, linear time) runs once over the lines; the lines it flags are a superset
of those each reader's gate takes, and each reader then runs on its own lines only. A reader that needs
the whole text (a launch command may span lines) runs only when the text holds one of the strings every
match of its gate holds (:func:`required_literals`). The text is read in slices, so the pass holds a
few MiB besides it. No list of words is kept here: a pattern added to a reader's gate is routed without
a change to this module.

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
    from parsers.launch import frameworks

    # the engines' own commands and the RL frameworks' spellings of them (launch.mentions_launch reads both)
    engine_literals = required_literals(launch.ANCHOR_RE.pattern)
    return [
        Gate("failures", failures.TRIGGER.pattern),
        Gate("gpu_models", gpu_models.PREFILTER.pattern),
        Gate("launch", launch.ANCHOR_RE.pattern + "|" + frameworks.ANCHOR_RE.pattern,
             literals=engine_literals + frameworks.ANCHOR_LITERALS if engine_literals else (), scope="text"),
        Gate("stack_dumps", literals=tuple(stack_dumps.NEEDLES), scope="text"),
    ]


#: Python's regex syntax for look-arounds ``(?=`` ``(?!`` ``(?<=`` ``(?<!`` and possessive quantifiers
#: ``*+`` ``++`` ``?+`` ``}+``, as cpython Lib/re/_parser.py (3.11) reads them.
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


def required_literals(pattern: str) -> tuple[str, ...] | None:
    """Plain strings one of which every match of ``pattern`` holds (per alternative, its longest run of
    literal characters), or None when some alternative has no run of three or more (or the pattern has
    flags this does not follow). A run never holds a line end here, so it lies within one line: a text
    holds a match only if one of its lines holds one of the strings.

    >>> required_literals(r"-m\\s+sglang\\.launch_server\\b|\\bvllm\\s+serve\\b")
    ('serve', 'sglang.launch_server')
    >>> required_literals(r"a\\d+b") is None
    True
    """
    import re._parser as sre  # the standard parser: the syntax the readers' patterns are written in

    try:
        tree = sre.parse(pattern)
    except (re.error, RecursionError, OverflowError):
        return None
    if tree.state.flags & (re.IGNORECASE | re.DOTALL | re.VERBOSE):
        return None

    def of_sequence(items) -> set[str] | None:
        best, run = "", []
        for op, arg in list(items) + [(None, None)]:
            if op is sre.LITERAL and arg != 10:
                run.append(chr(arg))
                continue
            if len(run) > len(best):
                best = "".join(run)
            run = []
        if len(best) >= 3:
            return {best}
        if len(items) == 1 and items[0][0] is sre.BRANCH:
            found: set[str] = set()
            for alt in items[0][1][1]:
                got = of_sequence(list(alt))
                if got is None:
                    return None
                found |= got
            return found
        if len(items) == 1 and items[0][0] is sre.SUBPATTERN:
            return of_sequence(list(items[0][1][3]))
        return None

    got = of_sequence(list(tree))
    return tuple(sorted(got)) if got else None


_compiled: tuple[tuple[Gate, ...], list[tuple[Gate, str]], list[tuple[Gate, tuple[str, ...]]]] | None = None


def _plan() -> tuple[list[tuple[Gate, str]], list[tuple[Gate, tuple[str, ...]]]]:
    """The line gates with their Rust patterns, the text gates with the strings one of which their text must
    hold (recomputed when a reader's gate changes); a gate that is neither is not routed."""
    global _compiled
    gs = tuple(gates())
    if _compiled is not None and _compiled[0] == gs:
        return _compiled[1], _compiled[2]
    line_gates: list[tuple[Gate, str]] = []
    text_gates: list[tuple[Gate, tuple[str, ...]]] = []
    for g in gs:
        if g.scope == "text":
            lits = g.literals or (required_literals(g.pattern) if g.pattern else None)
            if lits and not any("\n" in x for x in lits):
                text_gates.append((g, tuple(lits)))
            continue
        rust = native_superset(g.pattern) if g.pattern else None
        if rust is not None:
            line_gates.append((g, rust))
    _compiled = (gs, line_gates, text_gates)
    return line_gates, text_gates


#: The text is routed this much at a time (cut at a line end): what the pass holds besides the text is two
#: copies of one slice, not of the whole text.
SLICE_CHARS = 1 << 20


def _slices(text: str):
    """(first line's 0-based index, slice) of ``text`` in pieces of about SLICE_CHARS, cut after a ``\\n``."""
    start, first, n = 0, 0, len(text)
    while start < n:
        end = text.find("\n", min(start + SLICE_CHARS, n) - 1) if start + SLICE_CHARS < n else -1
        end = n if end < 0 else end + 1
        piece = text[start:end]
        yield first, piece
        first += piece.count("\n")
        start = end


def route(text: str) -> Routes:
    """The routes of ``text``: one pass of all line gates over its lines, and of all text gates' strings."""
    line_gates, text_gates = _plan()
    union = "|".join(f"(?:{p})" for _g, p in line_gates)
    lines: dict[str, list[tuple[int, str]]] = {g.name: [] for g, _p in line_gates}
    texts = {g.name: False for g, _lits in text_gates}
    plain = True
    for first, piece in _slices(text):
        whole = pl.Series([piece], dtype=pl.Utf8)
        if line_gates:
            frame = whole.str.split("\n").explode().to_frame("l").with_row_index("i", offset=first)
            if piece.endswith("\n"):  # the empty string after the last line end starts the next slice
                frame = frame.head(frame.height - 1)
            hit = frame.filter(pl.col("l").str.contains(union))
            for g, p in line_gates:
                mine = hit.filter(pl.col("l").str.contains(p))
                lines[g.name] += zip(mine.get_column("i").to_list(), mine.get_column("l").to_list(), strict=True)
        for g, lits in text_gates:
            if not texts[g.name]:
                texts[g.name] = bool(whole.str.contains_any(list(lits)).item())
        plain = plain and not whole.str.contains(_OTHER_BREAKS).item()
    return Routes(lines, texts, plain_breaks=plain)

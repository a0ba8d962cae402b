"""The readers that look anywhere in a text, besides its own parser: launch commands, GPU model names, stack
and input dumps, failure lines (docs/timeline.md, docs/crash_artifacts.md).

A text read whole goes to them at once (:func:`read_anywhere`). A streamed SGLang log (too big to hold) goes
to them as well, through :class:`StreamedText`: its parser hands over every line that is not a batch or
access line (those hold no launch, no GPU name, no dump and no failure: ``parsers.routing``), kept at their
own line numbers with the batch lines left blank, and the readers run on that text at the end; memory is
the non-batch text, at most ``MAX_CHARS`` at a time (past that, the text so far is read and let go).
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from forensics.timeline.parse import embedded_launches, failure_rows, prose_in_unread, stack_rows
from parsers import routing
from parsers.schema import ParseResult

#: Texts from this size on are routed (parsers.routing): below it, a few polars calls cost more than the
#: readers' own scans of the text.
ROUTE_CHARS = 1 << 20
#: The one-line kinds of a long-running server's log (the streamed parser's batch and access lines).
BULK_KINDS = ("decode_batch", "prefill_batch", "http_access")
#: Columns of the parser's rows the readers consult: which lines are read and as what (the failure scan
#: drops what a record already reported), the run a failure line joins, the stamp a stack dump takes.
_PART_COLUMNS = ("line", "line_end", "kind", "run", "ts", "ts_local", "ts_basis")


def read_anywhere(text: str, name: str, parts: list[pl.DataFrame], routes: routing.Routes | None,
                  resolve: Callable[[pl.DataFrame], pl.DataFrame]) -> tuple[int, set[int], bool]:
    """Run the readers on ``text`` beside its parsed rows ``parts``; their rows are appended to ``parts``
    (``resolve`` places a new row in time; stack rows take the stamp of the row before them).
    Returns (lines newly recognised, the lines the stack and failure readers newly read, whether the
    failure scan found anything)."""
    from parsers import gpu_models

    cmds = embedded_launches(text, name, parts, routes)
    if cmds is not None:
        parts.append(resolve(cmds))
    # a GPU named anywhere: its capacity, when nothing measured it
    models = gpu_models.parse(text, name, candidates=routes.for_lines("gpu_models") if routes else None).events
    if models.height:
        parts.append(resolve(models))
    recognized = 0
    stacks, stack_lines = stack_rows(text, name, parts, routes)  # py-spy stacks, vLLM's input dump
    if stacks is not None:
        parts.append(stacks)
        recognized += len(stack_lines)
    extra, newly = failure_rows(text, name, parts, routes)
    newly = newly | stack_lines
    if extra is not None:
        parts.append(resolve(extra))
        recognized += len(newly)
    return recognized, newly, extra is not None


#: Non-batch text of a streamed log held at a time: past it, what is held is read and let go (a record that
#: spans the cut is read in two halves).
MAX_CHARS = 16 << 20


class StreamedText:
    """The lines of a streamed log that its parser did not take as batch or access lines, with the parser's
    rows the readers consult; :meth:`rows` runs the readers (see the module)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.pieces: list[str] = []
        self.chars = 0
        self.first = 1  # the file's (inner) line the held text starts at
        self.next = 1  # the line the next held piece starts at
        self.parsed: list[pl.DataFrame] = []  # the parser's rows, the consulted columns only
        self.carry = pl.DataFrame()  # rows of a text already read that a later one still consults
        self.recognized = 0
        self.newly: set[int] = set()
        self.out: list[pl.DataFrame] = []

    def lines(self, before: int, index: pl.Series, texts: list[str]) -> None:
        """``sglang_fast.Stream.on_other_lines``: the chunk's other lines (``before`` lines precede it)."""
        for i, line in zip(index.to_list(), texts, strict=True):
            at = before + i + 1
            if at > self.next:
                self.pieces.append("\n" * (at - self.next))
            self.pieces.append(line)
            self.pieces.append("\n")
            self.chars += len(line) + 1 + max(0, at - self.next)
            self.next = at + 1
        if self.chars > MAX_CHARS:
            self._read()

    def rows_of(self, frame: pl.DataFrame) -> None:
        """The parser's rows of a chunk: every row but the batch and access ones, and of those only the
        ones right before a line that is not one (the stamp and run the lines after them take)."""
        if not frame.height:
            return
        cols = frame.select(_PART_COLUMNS)
        bulk = pl.col("kind").is_in(BULK_KINDS)
        stamped = pl.col("ts").is_not_null() | pl.col("ts_local").is_not_null()
        b = cols.filter(bulk)
        nxt_line, nxt_stamped = pl.col("line").shift(-1), stamped.shift(-1)
        b = b.filter((nxt_line.is_null() | (nxt_line != pl.col("line") + 1)) | (stamped & ~nxt_stamped))
        self.parsed.append(pl.concat([cols.filter(~bulk), b]).sort("line", maintain_order=True))

    def _read(self, text: str | None = None, prose: pl.DataFrame | None = None) -> None:
        """Run the readers on the text held (``prose``: the rows the prose reader read in it) and let it go."""
        if text is None:
            text = "".join(self.pieces)
        self.pieces, self.chars = [], 0
        if not text and prose is None:
            return
        delta = self.first - 1
        parsed = [p for p in ([self.carry] if self.carry.height else []) + self.parsed if p.height]
        self.parsed = []
        held = pl.concat(parsed, how="vertical") if parsed else None
        if held is not None and delta:
            held = held.with_columns(pl.col("line") - delta, pl.col("line_end") - delta)
        parts = [held] if held is not None else []
        if prose is not None:
            parts.append(prose.with_columns(pl.col("line") - delta, pl.col("line_end") - delta) if delta else prose)
        # routed however short: the text is mostly the blank lines the batch lines left, which one native pass
        # skips and the readers' own line loops would step through
        routes = routing.route(text)
        n, newly, _found = read_anywhere(text, self.name, parts, routes, lambda fr: fr)
        self.recognized += n
        self.newly |= {x + delta for x in newly}
        found = parts[1:] if held is not None else parts
        if found:
            rows = pl.concat(found, how="vertical") if len(found) > 1 else found[0]
            rows = rows.sort("line", maintain_order=True)  # in line order, as a text read whole is written
            self.out.append(rows.with_columns(pl.col("line") + delta, pl.col("line_end") + delta) if delta else rows)
        # what the next text still consults: the last row (its stamp and run) and any launch read so far
        seen = [p.select(_PART_COLUMNS) for p in parts if p.height]
        if seen:
            back = pl.concat(seen, how="vertical").sort("line", maintain_order=True)
            back = back.with_columns(pl.col("line") + delta, pl.col("line_end") + delta)
            self.carry = pl.concat([back.filter(pl.col("kind") == "launch_command"), back.tail(1)])
        self.first = self.next

    def rows(self, res: ParseResult) -> pl.DataFrame | None:
        """The readers' rows of the whole log (inner lines, in line order per text read), at its end; ``res``:
        the parser's account, whose unread lines the prose reader takes when they are few (as in
        ``forensics.timeline.parse.parse_file``), and which it updates."""
        text = "".join(self.pieces)
        prose = None
        unread = res.unrecognized_examples
        if unread and res.unrecognized == len(unread):
            whole = text if self.first == 1 else _lines_at(unread)  # the lines themselves, while all are held
            got = prose_in_unread(res, whole, self.name)
            prose = got[0].result.events if got else None
        self._read(text, prose)
        out = [fr for fr in self.out if fr.height]
        self.out = []
        return pl.concat(out, how="vertical_relaxed") if out else None


def _lines_at(numbered: list[tuple[int, str]]) -> str:
    """A text with each (1-based line, text) at its line, the others blank."""
    at = dict(numbered)
    return "\n".join(at.get(i, "") for i in range(1, max(at) + 1))

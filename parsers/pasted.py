"""A log pasted into a ticket or a mail: the paste's own markers taken off, so the log reads as a log.

People quote a log with ``> `` (mail, GitHub) or indent it as a Markdown code block (four spaces
after a blank line). Every parser anchors its records at the start of the line and reads a traceback
by its indentation, so such a paste hides the log from all of them (failure_messages.md §0: "recognise
these messages inside a prefixed log, inside a traceback, or pasted alone into a ticket"). This
module removes those two markers, line for line (the line count and numbers stay the file's):

* a run of lines that all start with ``>`` (up to three spaces before it; nested ``> >`` too);
* an indented code block: after a blank line (or at the start of a text indented throughout), a run
  of lines indented by four spaces or a tab, blank lines inside allowed; the run's common indent
  goes. A traceback's frames are indented two spaces under a non-blank line, never a block.

An indented block needs at least two non-blank lines, so one indented line (a ``free`` header)
stays as it is, and a block whose lines are mostly YAML (``key: value``, ``- item``: a manifest,
where the indentation is the meaning) stays too; a quote marker goes even on a single line.

>>> unwrap("Log:\\n\\n    [2025-01-01 10:00:00 TP0] x\\n      File \\"a.py\\", line 1, in f\\n\\nThanks")
'Log:\\n\\n[2025-01-01 10:00:00 TP0] x\\n  File "a.py", line 1, in f\\n\\nThanks'
>>> unwrap("> one\\n> > two\\n>\\n> three")
'one\\ntwo\\n\\nthree'
>>> unwrap(">>> import torch\\n>>> torch.cuda.mem_get_info()")
'>>> import torch\\n>>> torch.cuda.mem_get_info()'
>>> unwrap("Traceback (most recent call last):\\n  File \\"a.py\\", line 1, in f\\n    g()")
'Traceback (most recent call last):\\n  File "a.py", line 1, in f\\n    g()'
"""

from __future__ import annotations

import re

_QUOTE = re.compile(r"^ {0,3}>(?: >){0,3}(?: |$)")  # not ">>>": a Python prompt in a transcript
_QUOTED = _QUOTE
_INDENTED = re.compile(r"^(?: {4}|\t)")
#: a line of a YAML mapping or list (a manifest's nesting is its meaning: never dedented)
_YAMLISH = re.compile(r"^\s*(?:- |[\w.\-\"']{1,200}:(?:\s|$))")
_MIN_LINES = 2
#: an indented line right after an empty one: where a code block can start (plain substrings: fast)
_BLOCK_AFTER_BLANK = ("\n\n    ", "\n\n\t", "\r\n\r\n    ", "\r\n\r\n\t")
#: Any of them, or a quote marker at a line start: one search of the text (every literal starts at a line
#: end, so the engine only tries them there) instead of one per literal.
_MARKS = re.compile("|".join(re.escape(m) for m in ("\n>", *_BLOCK_AFTER_BLANK)))


def _quotes(lines: list[str]) -> None:
    i, n = 0, len(lines)
    while i < n:
        if not _QUOTED.match(lines[i]):
            i += 1
            continue
        j = i
        while j < n and _QUOTED.match(lines[j]):
            j += 1
        for k in range(i, j):
            lines[k] = _QUOTE.sub("", lines[k], count=1)
        i = j


def _blocks(lines: list[str]) -> None:
    n = len(lines)
    whole = all(_INDENTED.match(x) for x in lines if x.strip())
    i = 0
    while i < n:
        starts = _INDENTED.match(lines[i]) and lines[i].strip() and (
            (i > 0 and not lines[i - 1].strip()) or (i == 0 and whole))
        if not starts:
            i += 1
            continue
        j = i
        while j < n and (not lines[j].strip() or _INDENTED.match(lines[j])):
            j += 1
        body = [lines[k] for k in range(i, j) if lines[k].strip()]
        if len(body) >= _MIN_LINES and 2 * sum(1 for x in body if _YAMLISH.match(x)) <= len(body):
            cut = min(len(x) - len(x.lstrip(" \t")) for x in body)
            for k in range(i, j):
                lines[k] = lines[k][cut:] if lines[k].strip() else ""
        i = j


def unwrap(text: str) -> str:
    """``text`` with quote markers and code-block indentation taken off pasted log lines."""
    # most logs have neither (a traceback's 4-space lines follow a non-blank line): no copy is made
    if not text.startswith((">", " ", "\t")) and not _MARKS.search(text):
        return text
    lines = text.split("\n")
    _quotes(lines)
    _blocks(lines)
    return "\n".join(lines)

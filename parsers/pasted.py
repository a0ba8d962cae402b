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

Three more marks of a paste, also line for line:

* grep's own prefix (grep(1): ``-H`` the file's name, ``-n`` the line number, ``:`` after a match and ``-`` after
  a context line of ``-A/-B/-C``, ``--`` between groups): a run of at least two lines that carry the same file name
  (a path: a ``/`` or an extension) with or without a line number, or line numbers alone that rise and are followed
  by a record rather than a clock's digits, loses the prefix; the ``--`` lines between its groups become empty;

* the Markdown code fence around a text that is all one fenced block (a line of only ```` ``` ```` or ``~~~``,
  with an info string such as ``yaml`` or ``log``; CommonMark §4.5) becomes an empty line, so the manifest or
  log inside it reads as a file of its own (fences among prose are the transcript reader's to cut at);
* a terminal's hard wrap: a terminal (or a copy from a fixed-width viewer) cuts every line longer than its
  width W into pieces of exactly W characters. A log record or an exception's line (a stamp, a level, a
  bracketed prefix, ``…Error: ``, a traceback's frame) of the text's greatest length is joined to the
  next line when that line goes on with it — not a record, a frame, an indented line or a sentence
  (a capitalised word and a lower-case one), and not a space after a space —, and on
  while each piece has the full width; the joined line stays at the first piece's number and the
  pieces after it become empty lines. Tables, CSV rows, ``ps`` listings and prose are cut at a width
  too but are never records: they stay as they are; and when at least half the lines of that width end
  where a new record starts, the width is the records' own, not a terminal's: nothing is joined.

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

# pasted logs: failure_messages.md §0; block quotes and indented code blocks: CommonMark 0.31 §5.1, §4.4
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


#: CommonMark 0.31 §4.5: a fence is three or more backticks or tildes, an optional info string (no backtick in it)
_FENCE = re.compile(r"^ {0,3}(?:`{3,}[^`\n]{0,80}|~{3,}[^\n]{0,80})$")
#: hard wraps are a paste's: a long log read whole is not searched for them
_WRAP_MAX_CHARS = 4 << 20
#: a terminal narrower than this does not show a log
_WRAP_MIN_WIDTH = 60
#: a line that starts a record of its own: a stamp, a level, a bracketed prefix, a table's border, a traceback's
#: frame or head (not the rest of the line before it)
# source: none (the heads of records in any log, to tell a new line from the rest of one a terminal cut)
_RECORD_HEAD = re.compile(r"^(?:\[|\(|\d{4}-\d\d-\d\d|\d\d-\d\d |[A-Z][a-z]{2} [ \d]\d |(?:INFO|WARNING|WARN|ERROR|DEBUG|"
                          r"CRITICAL|FATAL)\b|[|+]|\s\s|\t|File \"|Traceback \(|$|"
                          # a shell prompt ($ cmd, user@host:~$), NCCL's host:pid:tid [dev] prefix (failure_messages.md §4)
                          r"[$#] |[\w.-]{1,64}@[\w.-]{1,64}[:$#]|[\w.-]{1,64}:\d{1,9}:\d{1,9} \[|"
                          # an elision mark, a quoted block's fence, a key = value line (TOML, INI, shell)
                          r"\.\.\.\s*$|\"\"\"|'''|[\w.-]{1,64} = |"
                          # an exception's line (Python's ``Type: message``), a word and a colon (``Mem:``, ``Note:``)
                          r"[\w.]{0,120}(?:Error|Exception|Warning|Exit|Interrupt)\b|[A-Z][\w.-]{0,40}:)")
#: a sentence after a record, not the rest of its line: a capitalised word, a space, a lower-case word
# source: none (English prose, to tell a sentence from a cut line's rest)
_SENTENCE = re.compile(r"^[A-Z][a-z]+\s+[a-z]")
#: a line a wrap is looked for in: a log record (stamp, level, bracketed prefix) or an exception's line — never a
#: table's row, a CSV line or prose, which a viewer's width cuts the same way but which do not go on
# source: none (the heads of log records and exception lines of any engine, as _RECORD_HEAD)
_WRAPPABLE = re.compile(r"^(?:\[|\(|\d{4}-\d\d-\d\d[ T]|(?:INFO|WARNING|ERROR|DEBUG) |[\w.]{1,120}(?:Error|Exception|Warning): |"
                        r"\s{1,8}File \"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d )")


#: grep(1)'s prefix: ``name:12:`` / ``name-12-`` (-Hn), ``name:`` / ``name-`` (-H), ``12:`` / ``12-`` (-n); the name is
#: a path (a ``/`` or an extension), so ``Error:`` or ``http:`` never is one
_GREP_NAMED = re.compile(r"^((?:[\w.@+~-]{0,100}/){0,12}[\w@+~-][\w.@+~-]{0,100}?\.[A-Za-z]\w{0,7})([:-])(?:(\d{1,9})\2)?")
_GREP_NUMBERED = re.compile(r"^(\d{1,9})([:-])")
#: what follows a bare line number: not a clock's or a date's next digits (``10:00:01``), unless a whole date
_GREP_REST_OK = re.compile(r"^(?:\D|\d{4}-\d\d-\d\d)")
_GREP_GROUPS = "--"
#: names of logs and captures (a single line grep printed from one of them is still grep's)
_LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
#: a line grep may have printed, anywhere in the text (one search: most texts have none)
_GREP_LINE = re.compile(r"\n(?:\d{1,9}|[\w./@+~-]{1,200}\.[A-Za-z]\w{0,7})[:-]")


def _grep_key(line: str) -> tuple[str, int | None, int] | None:
    """(file name or "", line number or None, prefix length) of a line grep printed, else None."""
    m = _GREP_NAMED.match(line)
    # without a number, grep's name is followed by the line itself: not a space (a label's ``name.ext: 10%|``,
    # ``socket.timeout: timed out``)
    if m and (m.group(3) is not None or line[m.end():m.end() + 1].strip()):
        return m.group(1), int(m.group(3)) if m.group(3) is not None else None, m.end()
    m = _GREP_NUMBERED.match(line)
    if m and _GREP_REST_OK.match(line[m.end():]):
        return "", int(m.group(1)), m.end()
    return None


def _grep_prefixes(lines: list[str]) -> None:
    i, n = 0, len(lines)
    while i < n:
        first = _grep_key(lines[i])
        if first is None:
            i += 1
            continue
        run, last, j = [(i, first[2])], first[1], i + 1
        while j < n:
            if lines[j].rstrip("\r") == _GREP_GROUPS:
                j += 1
                continue
            key = _grep_key(lines[j])
            if key is None or key[0] != first[0] or (key[1] is None) != (first[1] is None):
                break
            if key[1] is not None and last is not None and key[1] <= last and lines[j - 1].rstrip("\r") != _GREP_GROUPS:
                break  # numbers rise within a group (a new group, after ``--``, may start anywhere)
            run.append((j, key[2]))
            last = key[1]
            j += 1
        # a bare number needs a rising run of three: two lines that start with digits and a colon prove little; one
        # line is grep's when it names a log by its number (``rank3.log:118:``), not a source file (a warning's
        # ``__init__.py:123:``)
        if len(run) >= (3 if first[0] == "" else 2) or (first[1] is not None and first[0].endswith(_LOG_SUFFIXES)):
            for k, cut in run:
                lines[k] = lines[k][cut:]
            for k in range(i, run[-1][0]):
                if lines[k].rstrip("\r") == _GREP_GROUPS:
                    lines[k] = ""
            i = run[-1][0] + 1
        else:
            i += 1


def _fences(lines: list[str]) -> None:
    """A text that is one fenced block (its first and last lines the fences) loses them; fences among prose stay,
    for the transcript reader to cut the paste into its segments (parsers/transcript.py)."""
    filled = [k for k, line in enumerate(lines) if line.strip()]
    fences = [k for k in filled if lines[k].lstrip(" ").startswith(("```", "~~~")) and _FENCE.match(lines[k].rstrip("\r"))]
    if len(fences) == 2 and fences == [filled[0], filled[-1]]:
        for k in fences:
            lines[k] = ""


def _cut_inside(piece: str, nxt: str) -> bool:
    """Does ``nxt`` go on with ``piece``'s line? "…shmem-rss:50331648" + "kB, UID:0 …", "…Gi" + "B is free",
    "…KV cache" + " is needed": not when it starts a record, a frame or an indented line, or a sentence."""
    if not piece or not nxt or _RECORD_HEAD.match(nxt) or _SENTENCE.match(nxt):
        return False
    if piece.endswith(".") and nxt[0].isupper():  # a sentence ended with the line
        return False
    return not (piece[-1].isspace() and nxt[0].isspace())


def _hard_wraps(lines: list[str]) -> None:
    widths = [len(x.rstrip("\r")) for x in lines]
    width = max(widths, default=0)
    if width < _WRAP_MIN_WIDTH:
        return
    # lines of that width that end where a record follows: the width is the records' own (fixed-width batch lines),
    # not a terminal's — when as many end so as go on, nothing was cut
    full = [k for k in range(len(lines) - 1) if widths[k] == width]
    ends = sum(1 for k in full if _RECORD_HEAD.match(lines[k + 1]) and lines[k + 1].strip())
    if ends >= 2 and 2 * ends >= len(full):
        return
    k = 0
    while k < len(lines) - 1:
        head = lines[k].rstrip("\r")
        if widths[k] != width or not _WRAPPABLE.match(head) or not _cut_inside(head, lines[k + 1]):
            k += 1
            continue
        j = k + 1
        while True:  # a line wrapped several times: every piece but the last has the full width
            piece = lines[j].rstrip("\r")
            head += piece
            lines[j] = ""
            if widths[j] != width or j + 1 >= len(lines) or not _cut_inside(piece, lines[j + 1]):
                break
            j += 1
        lines[k] = head
        k = j + 1


def unwrap(text: str, whole_chars: int | None = None) -> str:
    """``text`` with quote markers, code-block indentation, Markdown fences and terminal hard wraps taken off
    pasted log lines (the line count stays the text's). ``whole_chars``: the size of the file ``text`` is a
    piece of, when it is one (hard wraps are looked for in a text as big as a paste, not in a piece of a
    long log)."""
    fenced = "```" in text or "~~~" in text
    # hard wraps and grep's prefixes are a paste's: judged by the whole file's size, so a long log read in pieces
    # reads as it does whole
    paste_sized = max(len(text), whole_chars or 0) <= _WRAP_MAX_CHARS
    wrapped = paste_sized and "\n" in text
    # most logs have no quote or block (a traceback's 4-space lines follow a non-blank line)
    marked = text.startswith((">", " ", "\t")) or bool(_MARKS.search(text))
    grepped = paste_sized and (_grep_key(text) is not None or bool(_GREP_LINE.search(text)))
    if not (marked or fenced or wrapped or grepped):
        return text
    lines = text.split("\n")
    if grepped:
        _grep_prefixes(lines)
    if marked:
        _quotes(lines)
        _blocks(lines)
    if fenced:
        _fences(lines)
    if wrapped:
        _hard_wraps(lines)
    out = "\n".join(lines)
    return text if out == text else out

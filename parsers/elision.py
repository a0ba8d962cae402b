"""A line a writer (or a tool) left where text was cut out of a paste: an elision mark, not content.

People elide logs in many ways; the corpus's own ``[... trimmed ...]`` is one instance of the class:
``...``, ``…``, ``[...]``, ``[... 40 lines ...]``, ``(...)``, ``<snip>``, ``<...>``, ``(truncated)``, ``[truncated]``,
``-- 120 lines omitted --``. Parsers read such a line as a cut: a traceback goes on past it, a continued command
ends at it, and it is never a record of its own. Every alternative is bounded, so the match is linear.

>>> [is_elision(s) for s in ("...", "  [... trimmed ...]", "<snip>", "(truncated)", "-- 12 lines omitted --", "…")]
[True, True, True, True, True, True]
>>> [is_elision(s) for s in ("", "  File \\"x.py\\", line 3, in f", "... done", "[2025-01-01 10:00:00] ...")]
[False, False, False, False]
"""

from __future__ import annotations

import re

_WORDS = r"(?:trimmed|truncated|snip(?:ped)?|cut|omitted|elided|redacted|removed)"
# source: none (the marks people leave where they cut a paste; the corpus's ``[... trimmed ...]`` is one of them)
ELISION_LINE = re.compile(
    r"^\s*+(?:"  # possessive: no alternative opens with blank space, so none needs a blank back
    r"(?:\.{3,}|…+)"  # ... or …
    r"|\[\s*(?:\.{3}|…)[^\]\n]{0,80}\]"  # [...], [... trimmed ...]
    r"|\(\s*(?:\.{3}|…)[^)\n]{0,80}\)"  # (...), (… 3 more …)
    r"|<\s*(?:\.{3}|…|" + _WORDS + r")[^>\n]{0,60}>"  # <snip>, <...>, <truncated 40 lines>
    r"|[\[(]\s*" + _WORDS + r"[^\])\n]{0,60}[\])]"  # (truncated), [snip]
    r"|[-=#*~ ]{0,10}(?:\d+ )?(?:more )?lines? " + _WORDS + r"[-=#*~ .]{0,10}"  # -- 12 lines omitted --
    r"|[-=#*~ ]{0,10}" + _WORDS + r" \d+ lines?[-=#*~ .]{0,10}"  # --- truncated 12 lines ---
    r")\s*$",
    re.I,
)


def is_elision(line: str) -> bool:
    """Whether the whole line is a cut mark."""
    return len(line) < 200 and ELISION_LINE.match(line) is not None

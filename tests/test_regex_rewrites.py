"""The patterns rewritten to run in linear time match what they matched before, on every line we have.

Issue 25: each pattern below cost the square of a hostile line's length (a run of digits, of word
characters or of blanks rescanned from every one of its characters); ``tests/test_regex_linear.py``
times them. Each was rewritten without changing what it finds: a start is skipped only where the old
pattern, started there, must fail because the start before it failed (``(?<!\\d)`` before a number,
``(?<!\\w)`` before a name), and a quantifier is made possessive only where nothing after it could take
back what it gives up. Here the old form (as it stood at the rewrite) and the module's current one are
applied the way the code applies them (every match of a scan, the first match of a search, or one
match at a line's start) to every line of the fixtures, every line of ``../shared`` when it is there,
and lines sampled from each old pattern's own syntax tree, then cut, joined, salted with digits,
separators, blanks and a few non-ASCII characters (both engines read ``\\w``, ``\\d`` and ``\\s``
in Unicode); spans and groups must agree.

One difference is allowed, and only for the three ``name=number`` scans marked ``continues``
(stdlib ``re`` has no ``\\G`` to say "where the last match ended"): the old form could start a match
in the middle of a word when the previous match ended there (``…=12abc_layer_tokens=5`` read
``abc_layer_tokens`` out of ``12abc_layer_tokens``); the matches before that one must still agree. No
engine writes a number straight into the next key; the new form reads a name only from its first
character. The prose sizes (``regex`` engine) keep even that case, with ``\\G``.

A second, for the GPU-model pattern marked ``bounded``: a model name reads at most three form words
(``H100-SXM5-NVL``); a line whose old match held four or more (``SXM PCIe NVL SXM``, which no datasheet
or ticket writes) may differ. Every other line must agree.
"""

from __future__ import annotations

import importlib
import os
import random
import re
from pathlib import Path
from typing import NamedTuple

import pytest
import regex
from shared_data import SHARED, skip_unless

ROOT = Path(__file__).resolve().parents[1]


class Old(NamedTuple):
    path: str  # module.NAME or module.NAME[i]
    pattern: object  # the old form, compiled with the old engine and flags
    use: str  # how the code applies it: "finditer" (every match), "search" (the first) or "match" (at 0)
    continues: bool  # may differ where an old match began where the previous one ended, mid-word
    bounded: bool = False  # may differ where an old match held four or more of a model's form words


OLD = [
    Old('parsers.elision.ELISION_LINE', re.compile(
        r"^\s*(?:(?:\.{3,}|…+)|\[\s*(?:\.{3}|…)[^\]\n]{0,80}\]|\(\s*(?:\.{3}|…)[^)\n]{0,80}\)|<\s*(?:\.{3}|…|(?:trimmed|truncated|snip(?:ped)?|cut|omitted|elided|redacted|removed))[^>\n]{0,60}>|[\[(]\s*(?:trimmed|truncated|snip(?:ped)?|cut|omitted|elided|redacted|removed)[^\])\n]{0,60}[\])]|[-=#*~ ]{0,10}(?:\d+ )?(?:more )?lines? (?:trimmed|truncated|snip(?:ped)?|cut|omitted|elided|redacted|removed)[-=#*~ .]{0,10}|[-=#*~ ]{0,10}(?:trimmed|truncated|snip(?:ped)?|cut|omitted|elided|redacted|removed) \d+ lines?[-=#*~ .]{0,10})\s*$",
        re.I), 'match', False),
    Old('parsers.launch.prose._HOST_PATTERNS[0]', regex.compile(
        r"(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s*(TiB|GiB|MiB|TB|GB|MB|T|G|M)\b\s+(?:of\s+)?(?:(?:total|installed|physical|system|host|main)\s+)*(?:RAM|DRAM)\b",
        regex.V0 | regex.I), 'finditer', False),
    Old('parsers.launch.prose._HOST_PATTERNS[1]', regex.compile(
        r"(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s*(TiB|GiB|MiB|TB|GB|MB|T|G|M)\b\s+(?:of\s+)?(?:total|installed|physical|system|host|main)\s+(?:memory|RAM)\b",
        regex.V0 | regex.I), 'finditer', False),
    Old('parsers.launch.prose._HOST_PATTERNS[3]', regex.compile(
        r"(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s*(TiB|GiB|MiB|TB|GB|MB|T|G|M)\b[- ](?:RAM\s+)?(?:host|machine|server|node|box)\b",
        regex.V0 | regex.I), 'finditer', False),
    Old('parsers.launch.prose._GPU_CAP_PATTERNS[0]', regex.compile(
        r"(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s*(TiB|GiB|MiB|TB|GB|MB|T|G|M)\b\s+(?:of\s+)?(?:(?:GPU|HBM|VRAM|device|total)\s+)*(?:memory\s+)?capacity\b",
        regex.V0 | regex.I), 'finditer', False),
    Old('parsers.launch.prose._GPU_CAP_PATTERNS[2]', regex.compile(
        r"(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s*(TiB|GiB|MiB|TB|GB|MB|T|G|M)\b\s+(?:of\s+)?(?:(?:GPU|HBM|VRAM)\s+)(?:memory\s+)?(?:each|per\s+GPU)\b",
        regex.V0 | regex.I), 'finditer', False),
    Old('parsers.launch.prose._GPU_CAP_PATTERNS[3]', regex.compile(
        r"(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s*(TiB|GiB|MiB|TB|GB|MB|T|G|M)\b\s+(?:GPUs?|cards?|VRAM|HBM\w*)\b",
        regex.V0), 'finditer', False),
    Old('parsers.launch.prose._LEFT_SIZE_RE', regex.compile(
        r"(?:\b(?:left|leaving|leaves|remain\w*|avail(?:able)?(?:\s+mem(?:ory)?)?|free(?:\s+(?:GPU\s+)?memory)?)(?:\s+(?:was|is|of|were))?\b\W{0,3}(?:only\s+|just\s+|about\s+|~)?(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s*(TiB|GiB|MiB|TB|GB|MB|T|G|M)\b)|(?:(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s*(TiB|GiB|MiB|TB|GB|MB|T|G|M)\b\s+(?:of\s+(?:GPU\s+)?(?:memory\s+)?)?(?:free|left|available|remain\w*|(?:was|were)\s+(?:left|free))\b)",
        regex.V0 | regex.I), 'finditer', False),
    Old('parsers.launch.prose._HOST_PATTERNS[2]', regex.compile(
        r"\b(?:machine|host|server|node|box|VM|container)\s+(?:with|has|had|have)\s+(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s*(TiB|GiB|MiB|TB|GB|MB|T|G|M)\b",
        regex.V0 | regex.I), 'finditer', False),
    Old('parsers.launch.prose._HOST_PATTERNS[4]', regex.compile(
        r"\bout\s+of\s+(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s*(TiB|GiB|MiB|TB|GB|MB|T|G|M)\b\s+total\b",
        regex.V0 | regex.I), 'finditer', False),
    Old('parsers.launch.prose._GPU_CAP_PATTERNS[1]', regex.compile(
        r"\bcapacity\s+of\s+(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s*(TiB|GiB|MiB|TB|GB|MB|T|G|M)\b",
        regex.V0 | regex.I), 'finditer', False),
    Old('parsers.launch.prose._GPU_CAP_PATTERNS[4]', regex.compile(
        r"\b(?:[ABHL]\d{2,3}[A-Z]?|GH200|GB200|MI\d{3}X?|L40S?|RTX\s?(?:PRO\s?)?\d{4}\w*)(?:[- ](?:SXM\d?|PCIe|NVL))*[- ]*\(?\s*(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s*(TiB|GiB|MiB|TB|GB|MB)\b(?:\s+each)?\b",
        regex.V0), 'finditer', False, bounded=True),
    Old('parsers.nvidia_smi.q._KV_RE', re.compile(
        r"^(?P<indent> *)(?P<key>[^:]*?\S)\s+: ?(?P<value>.*?)\s*$",
        0), 'match', False),
    Old('parsers.nvidia_smi.table._STRONG', re.compile(
        r"^\|\s*NVIDIA-SMI\s+\d|^\|\s+\d+\s+.*\|\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?\s|\d+MiB\s*/\s*\d+MiB\s*\||^\|\s+Processes:|^\|\s+No running processes found",
        re.M), 'search', False),
    Old('parsers.sglang._POST_CAPTURE_TOKENS', re.compile(
        r"(\w+_layer_tokens)=(\d+)",
        0), 'finditer', True),
    Old('parsers.sglang._INNER_KV', re.compile(
        r"(\w+?)_?=(\d+)",
        0), 'finditer', True),
    Old('parsers.sglang._WATCHDOG', re.compile(
        r"(?:(\w+) )?[Ww]atchdog timeout \(self\.watchdog_timeout=(-?\d+(?:\.\d+)?)(?:, self\.soft=(\w+))?",
        0), 'search', False),
    Old('parsers.sglang._TQDM', re.compile(
        r"\d+%\||\d+% Completed \||\d+/\d+ \[[\d:?]+<",
        0), 'search', False),
    Old('parsers.transcript._PS1_RE', regex.compile(
        r"^\s*(?:\([^()\s]{1,40}\)\s*)?(?P<who>\[[\w.-]+@[\w.-]+[^\]\n]{0,80}\]|[\w.-]+@[\w.-]+(?::[^\s$#%]*)?)?\s*(?P<sig>[$#%])\s+(?P<cmd>\S.*)$",
        regex.V0), 'match', False),
    Old('parsers.transcript._LOGGISH_RE', regex.compile(
        r"^(?:[\w.]*[a-z][A-Z]\w*:|\w*(?:Error|Exception|Warning|Interrupt|Exit)\b|Traceback\b|Fatal Python error|(?:ERROR|WARNING|WARN|INFO|DEBUG|CRITICAL|FATAL)\b)",
        regex.V0), 'match', False),
    Old('parsers.vllm._REPEATED', re.compile(
        r"\s*\[repeated (\d+)x across cluster\]\s*$",
        0), 'search', False),
    Old('parsers.vllm._PROFILE_KV', re.compile(
        r"(\w+)=(-?[\d,]*\d(?:\.\d+)?)(GiB)?",
        0), 'finditer', True),
    Old('parsers.vllm._HINT_PARTS', re.compile(
        r"Desired GPU memory utilization is \((-?[\d,]*\d(?:\.\d+)?), (-?[\d,]*\d(?:\.\d+)?) GiB\)|(-?[\d,]*\d(?:\.\d+)?) GiB for (weight|peak activation|non-torch memory|CUDAGraph memory|consumed memory)|Current kv cache memory in use is (-?[\d,]*\d(?:\.\d+)?) (GiB|bytes)|--kv-cache-memory=(\d+)`?(?: \([^)]{0,40}\))? to (fit|fully)",
        0), 'finditer', False),
    Old('forensics.detectors.model_fit._MOE_ACTIVE', re.compile(
        r"\d+[bB]-\d+E\b",
        re.I), 'search', False),
]

#: Old forms are the slow ones: a line is cut here before either form sees it.
MAX_LINE = 4000
#: Random lines per pattern on every run; FORENSICS_SLOW=1 (or ``-m slow``'s environment) runs more.
RANDOM_LINES = 100_000 if os.environ.get("FORENSICS_SLOW") else 4_000


def _current(path: str):
    base, _, index = path.partition("[")
    module, _, name = base.rpartition(".")
    value = getattr(importlib.import_module(module), name)
    return value[int(index[:-1])] if index else value


def _found(pattern, use: str, line: str):
    if use != "finditer":
        m = getattr(pattern, use)(line)
        return m and (m.span(), m.groups())
    return [(m.span(), m.groups()) for m in pattern.finditer(line)]


def _before_mid_word(old: Old, line: str):
    """The old matches before the first that began mid-word exactly where the previous one ended, and
    whether there is such a match."""
    out, end = [], None
    for m in old.pattern.finditer(line):
        if m.start() == end and m.start() > 0 and re.match(r"\w", line[m.start() - 1]):
            return out, True
        out.append((m.span(), m.groups()))
        end = m.end()
    return out, False


def _lines_under(folder: Path) -> set[str]:
    lines: set[str] = set()
    for f in sorted(folder.rglob("*")):
        if f.is_file() and f.stat().st_size < 20 << 20:
            lines.update(ln[:MAX_LINE] for ln in f.read_bytes().decode("utf-8", "replace").splitlines())
    return lines


#: Separators and characters mixed into the samples: digits, the punctuation the patterns use, blanks of
#: several kinds, a non-ASCII letter, a combining mark and a non-ASCII digit (both engines' \\w and \\d).
_PIECES = [*"0123456789", "000", "1,234", ",", ".", " ", "  ", "\t", "\u00a0", "_", "=", "-", ":", ";", "[", "]",
           "(", ")", "<", ">", "|", "%", "/", "#", "*", "~", "$", "@", "`", "'", "\"", "x", "A", "a", "é",
           "e\u0301", "\u0663", "…", "..."]
_CATEGORY = {"CATEGORY_DIGIT": "0123456789\u0663", "CATEGORY_NOT_DIGIT": "a ,.x_-",
             "CATEGORY_SPACE": " \t\u00a0", "CATEGORY_NOT_SPACE": "a0_.,:x-é",
             "CATEGORY_WORD": "aZ0_é9x", "CATEGORY_NOT_WORD": " .,:=-(["}


def _sample(tree, rnd: random.Random) -> str:
    """One string the old pattern's syntax tree describes (repeats kept short), to mutate afterwards."""
    out = []
    for op, av in tree:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(av))
        elif name in ("NOT_LITERAL", "ANY"):
            out.append(rnd.choice("a0 ._,:x"))
        elif name == "IN":
            out.append(_pick_in(av, rnd))
        elif name == "BRANCH":
            out.append(_sample(rnd.choice(av[1]), rnd))
        elif name == "SUBPATTERN":
            out.append(_sample(av[-1], rnd))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            lo, hi, sub = av
            n = rnd.randint(lo, min(hi, lo + rnd.choice((1, 2, 4))))
            out.extend(_sample(sub, rnd) for _ in range(n))
        elif name == "CATEGORY":
            out.append(rnd.choice(_CATEGORY.get(str(av), "a")))
        elif name == "ATOMIC_GROUP":
            out.append(_sample(av, rnd))
    return "".join(out)


def _pick_in(items, rnd: random.Random) -> str:
    if str(items[0][0]) == "NEGATE":
        return rnd.choice("a0 ._,:x")
    op, av = rnd.choice(items)
    if str(op) == "LITERAL":
        return chr(av)
    if str(op) == "RANGE":
        return chr(rnd.randint(*av))
    return rnd.choice(_CATEGORY.get(str(av), "a"))


def _random_lines(old: Old, n: int) -> list[str]:
    """Strings the old pattern describes, cut, joined and salted with the pieces above (a character
    inserted, dropped or changed, the case flipped), so that many match and many nearly do."""
    import re._parser as sre_parse

    tree = sre_parse.parse(old.pattern.pattern)
    rnd = random.Random(f"{old.path}:{n}")
    out = []
    for _ in range(n):
        parts = [_sample(tree, rnd) if rnd.random() < 0.6 else rnd.choice(_PIECES) for _ in range(rnd.randint(1, 5))]
        s = list("".join(parts))
        for _ in range(rnd.choice((0, 0, 1, 2, 3))):
            i = rnd.randrange(len(s) + 1)
            kind = rnd.random()
            if kind < 0.4:
                s.insert(i, rnd.choice(_PIECES))
            elif s and kind < 0.7:
                del s[min(i, len(s) - 1)]
            elif s:
                s[min(i, len(s) - 1)] = rnd.choice(_PIECES)
        line = "".join(s)
        out.append(line.swapcase() if rnd.random() < 0.1 else line)
    return out


def _compare(old: Old, lines) -> int:
    """Every line where the two forms disagree fails, but where a ``continues`` pattern's old form
    started a match mid-word (the matches before it must agree); returns the number of lines either
    form matched (a corpus that never matches proves nothing)."""
    new = _current(old.path)
    matched, wrong = 0, []
    for line in lines:
        a, b = _found(old.pattern, old.use, line), _found(new, old.use, line)
        matched += bool(a or b)
        if a != b and old.continues:
            before, mid_word = _before_mid_word(old, line)
            if mid_word and b[:len(before)] == before:
                continue  # the same matches up to the one the new form does not start mid-word
        if a != b and old.bounded and any(len(_FORM_WORDS.findall(line[i:j])) >= 4 for (i, j), _g in a):
            continue  # four or more form words in one model name: the new form reads three
        if a != b:
            wrong.append((line[:120], a, b))
    assert not wrong, f"{old.path}: {len(wrong)} lines differ, e.g. {wrong[:3]}"
    return matched


_FORM_WORDS = re.compile(r"SXM|PCIe|NVL")
_FIXTURE_LINES = None


def _fixture_lines() -> set[str]:
    global _FIXTURE_LINES
    if _FIXTURE_LINES is None:
        _FIXTURE_LINES = _lines_under(ROOT / "fixtures")
    return _FIXTURE_LINES


_IDS = [o.path for o in OLD]


@pytest.mark.parametrize("old", OLD, ids=_IDS)
def test_rewritten_pattern_matches_as_before_on_every_fixture_line(old):
    _compare(old, _fixture_lines())


@pytest.mark.parametrize("old", OLD, ids=_IDS)
def test_rewritten_pattern_matches_as_before_on_random_lines(old):
    assert _compare(old, _random_lines(old, RANDOM_LINES)) > 0


_SHARED_LINES = None


@pytest.mark.parametrize("old", OLD, ids=_IDS)
def test_rewritten_pattern_matches_as_before_on_the_real_samples(old):
    global _SHARED_LINES
    skip_unless(SHARED / "incidents", "incidents")
    if _SHARED_LINES is None:
        _SHARED_LINES = set().union(*(_lines_under(SHARED / d) for d in
                                      ("incidents", "sglang_real_logs", "research_samples", "reference", "seeds")
                                      if (SHARED / d).is_dir()))
    _compare(old, _SHARED_LINES)


def test_the_one_allowed_difference_is_a_name_read_from_mid_word():
    """``continues``: a number run straight into the next name. The old form read ``abc_layer_tokens``
    out of ``12abc_layer_tokens``; the new one reads no name there, and every ordinary line alike."""
    from parsers import sglang

    line = "x_layer_tokens=1, y_layer_tokens=2 z_layer_tokens=12abc_layer_tokens=5"
    old = next(o for o in OLD if o.path == "parsers.sglang._POST_CAPTURE_TOKENS")
    assert old.pattern.findall(line)[-1] == ("abc_layer_tokens", "5")
    assert sglang._POST_CAPTURE_TOKENS.findall(line) == old.pattern.findall(line)[:-1]
    assert _before_mid_word(old, line)[1]

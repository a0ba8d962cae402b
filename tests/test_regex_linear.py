"""Every regular expression the parsers and the input layer hold runs in linear time on hostile text.

A pattern with overlapping quantifiers, or one whose match may start anywhere and then scan far
(``\\d+ ?GiB`` over a run of digits), costs the square of a line's length: 40 KB of padding took
5 s in SGLang's batch fields, a 1 MiB line (MAX_LINE_BYTES) about an hour. Each module-level pattern
of ``parsers`` and ``forensics`` is fed adversarial shapes (runs of one character or of a short
unit, after the pattern's own literal start or not) at 2 KiB, the three costliest again at 8 KiB: a
quadrupled input must not cost much more than four times as much. The worst shape is then run at
128 KiB on every run (about 8 s of CPU for some 600 patterns) and at 1 MiB, MAX_LINE_BYTES, with
``-m slow``, and must stay within a ratio of a plain scan of the same bytes. What the rewrites of
issue 25 changed in the matches (nothing, but one mid-word case) is ``tests/test_regex_rewrites.py``.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
import time
from pathlib import Path

import pytest
import regex

import forensics
import parsers

PATTERN_TYPES = (re.Pattern, regex.Pattern)
UNITS = [*"a 0:,.=-_/[(#|A\"", "a ", "0.", "a=", "a:", "0,", ", ", "a=1 ", "(a)", "0x", "A_", "a\\", "000,", "0a"]
#: 1 MiB pass: at most this many times a plain scan of the same bytes (linear patterns cost 0.2-20×)
MAX_RATIO = 100
#: Time grows at most this much from 2 to 8 KiB (linear: 4×; quadratic: 16×)
MAX_GROWTH = 9


def _collect(obj, path: str, out: list, depth: int = 0) -> None:
    if isinstance(obj, PATTERN_TYPES):
        out.append((path, obj))
    elif depth < 2 and isinstance(obj, dict):
        for k, v in obj.items():
            _collect(v, f"{path}[{k!r}]", out, depth + 1)
    elif depth < 2 and isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            _collect(v, f"{path}[{i}]", out, depth + 1)


def _patterns() -> list[tuple[str, object]]:
    found: list[tuple[str, object]] = []
    for pkg in (parsers, forensics):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            mod = importlib.import_module(info.name)
            for name, value in vars(mod).items():
                _collect(value, f"{info.name}.{name}", found)
    seen, unique = set(), []
    for path, p in found:
        key = (type(p), p.pattern, p.flags)
        if key not in seen and isinstance(p.pattern, str | bytes):
            seen.add(key)
            unique.append((path, p))
    return unique


PATTERNS = _patterns()
_BY_PATH = dict(PATTERNS)


def _literal_start(src: str) -> str:
    out = []
    i = 0
    while i < len(src):
        c = src[i]
        if c == "\\" and i + 1 < len(src) and not src[i + 1].isalnum():
            out.append(src[i + 1])
            i += 2
            continue
        if c in ".^$*+?{}[]()|\\":
            break
        out.append(c)
        i += 1
    return "".join(out)


def _shapes(p, n: int) -> list[str | bytes]:
    src = p.pattern if isinstance(p.pattern, str) else p.pattern.decode("latin-1")
    start = _literal_start(src)
    shapes = []
    for u in UNITS:
        run = u * (n // len(u))
        shapes.append(run)
        if start:
            shapes.append(start + run)
    if isinstance(p.pattern, bytes):
        return [s.encode("latin-1", "replace") for s in shapes]
    return shapes


#: How the code applies a pattern decides what it costs: ``.match``/``.fullmatch`` try one start (a
#: line's, a line being at most MAX_LINE_BYTES), anything else may try every position.
_ANCHORED_CALLS = frozenset({"match", "fullmatch"})


def _anchored_use(path: str) -> str | None:
    """``match`` or ``fullmatch`` when that is the only way the source ever applies the pattern, read
    from the defining module (a private name cannot be used elsewhere) or, for a public name, from
    every module of both packages; a bare use (passed on, ``.pattern`` taken) counts as a scan."""
    mod_name, _, name = path.partition("[")[0].rpartition(".")
    if "[" in path:
        return None
    files = [importlib.import_module(mod_name).__file__]
    if not name.startswith("_"):
        files = [f for pkg in (parsers, forensics) for f in map(str, Path(pkg.__path__[0]).rglob("*.py"))]
    calls: set[str | None] = set()
    for file in files:
        text = Path(file).read_text(encoding="utf-8")
        for m in re.finditer(rf"(?<![\w.]){re.escape(name)}\b(?!\s*(?::[^=\n]*)?=[^=])(?:\.(\w+)\()?", text):
            calls.add(m.group(1))
    if not calls or not calls <= _ANCHORED_CALLS:
        return None
    return "match" if "match" in calls else "fullmatch"  # a match's start is the costlier of the two


def _scan_cost(p, text, reps: int = 2, use: str | None = None) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.process_time()  # CPU time: a shared runner's other jobs do not count
        if use is not None:
            getattr(p, use)(text)
        else:
            for _m in p.finditer(text):
                pass
        best = min(best, time.process_time() - t)
    return best


#: A plain scan: a match tried, and failed, at every position of the text (what any pattern without a
#: literal start costs at least)
_PLAIN = re.compile(r"[^\n](?!)")


def _plain(text) -> float:
    s = text if isinstance(text, str) else text.decode("latin-1")
    return max(_scan_cost(_PLAIN, s), 1e-5)


def _check(path: str, pattern, final: int) -> None:
    small, big = 2 << 10, 8 << 10
    use = _anchored_use(path)
    _cost = functools.partial(_scan_cost, use=use)
    quick = sorted(((_cost(pattern, a, 1), i) for i, a in enumerate(_shapes(pattern, small))), reverse=True)
    if quick[0][0] > 0.25:  # 2 KiB taking a quarter of a second: no need to time a bigger one
        pytest.fail(f"{path}: {quick[0][0]:.2f} s on 2 KiB")
    worst, worst_shape = 0.0, quick[0][1]
    bigs = _shapes(pattern, big)
    for _, i in quick[:3]:
        ta, tb = _cost(pattern, _shapes(pattern, small)[i]), _cost(pattern, bigs[i])
        if tb > 5e-3 and tb > MAX_GROWTH * max(ta, 5e-4):
            pytest.fail(f"{path}: {ta * 1e3:.1f} ms on 2 KiB, {tb * 1e3:.1f} ms on 8 KiB of {bigs[i][:20]!r}…")
        if tb > worst:
            worst, worst_shape = tb, i
    text = _shapes(pattern, final)[worst_shape]
    cost, plain = _cost(pattern, text), _plain(text)
    assert cost <= MAX_RATIO * plain or cost < 0.02, \
        f"{path}: {cost:.2f} s on {final >> 10} KiB, {cost / plain:.0f}× a plain scan"


def test_hung_task_follow_line_is_not_exponential():
    """A line of hex digits that ends in something else: the stack-word alternative split the run
    every possible way (256 digits never finished); matched at a line's start, as the parser does."""
    from parsers import kernel

    for line in ("0" * (1 << 20) + "x", "ffffffff81000000 " * 60_000 + "x"):
        t = time.process_time()
        assert not kernel._HUNG_FOLLOW.match(line)
        assert time.process_time() - t < 1


@pytest.mark.parametrize("path,pattern", PATTERNS, ids=[p for p, _ in PATTERNS])
def test_pattern_is_linear_on_adversarial_lines(path, pattern):
    _check(path, pattern, 128 << 10)


#: Shapes the sweep does not build: a run after words that open the pattern but are no literal start
#: (``\b(?:host|…)``), or a run the pattern repeats as a group (``(?:,\d{3})+``, ``(?:total\s+)*``),
#: which the regex engine backtracks quadratically even from one start.
_AFTER_WORDS = [
    ("parsers.launch.prose._HOST_PATTERNS[0]", "1 GB ", "total "),
    ("parsers.launch.prose._HOST_PATTERNS[2]", "host with ", "000,"),
    ("parsers.launch.prose._OUT_OF_TOTAL", "out of ", "000,"),
    ("parsers.launch.prose._GPU_CAP_PATTERNS[1]", "capacity of ", "000,"),
    ("parsers.launch.prose._LEFT_SIZE_RE", "left ", "000,"),
    ("parsers.launch.prose._GPU_CAP_PATTERNS[4]", "H100", "-SXM"),
    ("parsers.launch.prose._GPU_CAP_PATTERNS[4]", "H100", " "),
]


@pytest.mark.parametrize("path,prefix,unit", _AFTER_WORDS, ids=[p for p, _, _ in _AFTER_WORDS])
def test_pattern_is_linear_on_a_run_after_its_opening_words(path, prefix, unit):
    pattern = _BY_PATH[path]
    small, big = (prefix + unit * (n // len(unit)) for n in (16 << 10, 64 << 10))
    ta, tb = _scan_cost(pattern, small), _scan_cost(pattern, big)
    assert tb < 0.01 or tb <= MAX_GROWTH * max(ta, 5e-4), f"{path}: {ta * 1e3:.1f} ms on 16 KiB, {tb * 1e3:.1f} ms on 64 KiB"


@pytest.mark.slow
@pytest.mark.parametrize("path,pattern", PATTERNS, ids=[p for p, _ in PATTERNS])
def test_pattern_is_linear_on_a_1_mib_line(path, pattern):
    _check(path, pattern, 1 << 20)


def test_a_pattern_is_timed_at_one_start_only_when_the_code_never_scans_with_it():
    assert _anchored_use("parsers.envelopes._COMPOSE") == "match"
    assert _anchored_use("parsers.nvidia_smi.common._PROMPT_PREFIX_RE") == "fullmatch"
    assert _anchored_use("parsers.sglang._CONTAINER") == "match"  # both .match and .fullmatch
    assert _anchored_use("parsers.failures._TRIGGER") is None  # .search, and its .pattern handed to polars
    assert _anchored_use("parsers.failures._OOM_TASK") is None  # .search
    assert _anchored_use("parsers.kernel._BULK_SIMPLE") is None  # a string spliced into other patterns

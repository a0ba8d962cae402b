"""Every parser, fed anything: never an exception other than NotThisFormat, always the event schema.

Inputs are arbitrary text, arbitrary bytes decoded the way the timeline decodes them (UTF-8 with
replacement), and real-format text (our fixtures, plus the shared samples when present) cut at
any point, turned CRLF, salted with NUL bytes and broken UTF-8, and glued to another format.
The default suite runs a small profile; ``FORENSICS_FUZZ=1`` (or ``-m fuzz``) runs the same
properties with 10,000 examples per parser.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import pytest
from conftest import FUZZ_EXAMPLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shared_data import SHARED

from parsers import registry, transcript
from parsers.schema import EVENT_SCHEMA, NotThisFormat, ParseResult

REPO = Path(__file__).resolve().parents[1]
FORMATS = sorted(registry.parsers())
SMALL = 40  # examples per parser and property in the default suite

_SUFFIXES = {".txt", ".log", ".csv", ".xml", ".sh", ".yaml", ".json", ".md", ""}


def _corpus(*roots: Path) -> list[str]:
    """Real-format texts under ``roots`` (those that exist)."""
    texts = []
    for root in roots:
        if not root.exists():
            continue
        for p in sorted(root.rglob("*")):
            if p.is_file() and p.suffix in _SUFFIXES and p.stat().st_size < 400_000:
                texts.append(p.read_bytes().decode("utf-8", errors="replace"))
    return texts


#: Our own fixtures: every format has some here, so a fresh clone (no ../shared) tests every parser.
OWN = _corpus(REPO / "fixtures")
#: The fuzz corpus: ours, plus the shared samples when they are there.
CORPUS = OWN + _corpus(SHARED / "research_samples", SHARED / "sglang_real_logs")

# Text that trips tokenisers: format prefixes, separators, stray structure, odd code points.
_NOISE = st.sampled_from([
    "\x00", "\r", "\r\n", "\n", "\t", "\ufffd", "\u2028", "\x85", "\x1b[31m", "  ", "|", "+---", ",", ";",
    "[2025-11-20 09:14:11 TP0] ", "[  12.345678] ", "<4>", "Mem:", "MemTotal:", "<?xml", "<gpu>", "</",
    "index, name", "GPU 0:", "==============NVSMI LOG==============", "  PID TTY", "USER PID",
    "server_args=ServerArgs(", "Traceback (most recent call last):", "torch.OutOfMemoryError", "$ ", "# ",
    "nvidia-smi", "free -g", "{", "}", '"', "'", "(", ")", "=", "9" * 40, "-1", "1e309", "nan", "Killed process",
])


@st.composite
def _real_format_text(draw) -> str:
    """A fixture cut somewhere, maybe CRLF, maybe salted, maybe glued to another format."""
    text = draw(st.sampled_from(CORPUS)) if CORPUS else ""
    a = draw(st.integers(0, len(text)))
    b = draw(st.integers(a, len(text)))
    text = text[a:b] if draw(st.booleans()) else text[:b]  # a window, or a truncated head
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.one_of(_NOISE, st.text(max_size=12))) + text[at:]
    if CORPUS and draw(st.booleans()):  # two formats in one file
        other = draw(st.sampled_from(CORPUS))
        cut = draw(st.integers(0, len(other)))
        text = text + "\n" + other[:cut] if draw(st.booleans()) else other[:cut] + text
    return text


_TEXTS = st.one_of(
    st.text(max_size=400),
    st.binary(max_size=400).map(lambda b: b.decode("utf-8", errors="replace")),
    st.lists(st.one_of(_NOISE, st.text(max_size=20)), max_size=40).map("".join),
    _real_format_text(),
)


def _count_lines(text: str) -> int:
    """Lines as a reader counts them: a last line without its newline is a line; "" has none."""
    return text.count("\n") + (0 if not text or text.endswith("\n") else 1)


def check_parse(fmt: str, text: str) -> ParseResult | None:
    """The contract: NotThisFormat or a result in the event schema whose rows point at lines that exist."""
    mod = registry.get(fmt)
    score = mod.sniff(text[: registry.SNIFF_BYTES])
    assert 0.0 <= float(score) <= 1.0
    try:
        res = mod.parse(text, "fuzz/input.txt", None)
    except NotThisFormat:
        return None
    assert isinstance(res, ParseResult)
    assert dict(res.events.schema) == EVENT_SCHEMA
    # the inventory's arithmetic: every line of the input is counted once, as recognised or not
    assert res.lines == _count_lines(text), (res.lines, _count_lines(text))
    assert 0 <= res.recognized <= res.lines and res.unrecognized == res.lines - res.recognized
    assert len(res.unrecognized_examples) <= 20
    ev = res.events
    if ev.height:
        assert ev["line"].null_count() == 0 and ev["line"].min() >= 1
        assert (ev["line_end"] >= ev["line"]).all()
        assert ev["source"].null_count() == 0 and ev["kind"].null_count() == 0
        for attrs in ev["attrs"].drop_nulls():
            assert isinstance(json.loads(attrs), dict)
    return res


def check_transcript(text: str) -> None:
    segs = transcript.split(text, registry.sniffers())
    assert 0.0 <= transcript.looks_like_transcript(text[: registry.SNIFF_BYTES]) <= 1.0
    for seg in segs:
        assert 1 <= seg.start_line <= seg.end_line
    transcript.command_rows(segs)


def _small(fn):
    return settings(max_examples=SMALL, deadline=None, suppress_health_check=[HealthCheck.too_slow])(fn)


def _long(fn):
    return settings(max_examples=FUZZ_EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])(fn)


# ----------------------------------------------------------------------------------------------
# Small profile, default suite


@pytest.mark.parametrize("fmt", FORMATS)
@_small
@given(text=_TEXTS)
def test_parser_never_raises_and_keeps_the_schema(fmt, text):
    check_parse(fmt, text)


@_small
@given(text=_TEXTS)
def test_transcript_split_never_raises(text):
    check_transcript(text)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_parser_reads_its_own_format_truncated_and_crlf(fmt):
    """Each format's own fixtures (ours: the repository's, never only ../shared's), cut at every 1/16th
    and turned CRLF, still parse."""
    mod = registry.get(fmt)
    own = [t for t in OWN if mod.sniff(t[: registry.SNIFF_BYTES]) >= registry.MIN_SCORE]
    assert own, f"no fixture of ours sniffs as {fmt}"
    for text in own[:6]:
        for k in range(17):
            cut = text[: len(text) * k // 16]
            check_parse(fmt, cut)
            check_parse(fmt, cut.replace("\n", "\r\n"))
            check_parse(fmt, cut.replace("\n", "\x00\n", 3))


_MEGA_LINES = {
    "plain": "x" * 1_000_000,
    "nul": "\x00" * 1_000_000,
    "replacement": "\ufffd" * 500_000,
    "sglang": "[2025-11-20 09:14:11 TP0] " + "Decode batch. #running-req: 8, " * 33_000,
    "kernel": "[  12.345678] " + "NVRM: Xid (PCI:0000:3b:00): 79, " * 30_000,
    "csv": "index, name, memory.used [MiB]\n" + "0, " * 330_000,
    "xml": "<?xml version=\"1.0\" ?><nvidia_smi_log>" + "<gpu>" * 200_000,
    "table": "|" + "=" * 999_998 + "|",
    "free": "Mem: " + "1 " * 500_000,
    "ps": "USER PID %CPU %MEM VSZ RSS TTY STAT START TIME COMMAND\nroot 1 0 0 1 1 ? S 0 0:00 " + "a" * 1_000_000,
    "launch": "python -m sglang.launch_server " + "--tp-size 8 " * 80_000,
    "brackets": "(" * 500_000 + "[" * 500_000,
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_megabyte_lines_parse_in_bounded_time(fmt):
    for name, line in _MEGA_LINES.items():
        t0 = time.perf_counter()
        check_parse(fmt, line + "\n" + line[:1000])
        # seconds, not minutes: a quadratic scan of a 1 MB line would take hours
        assert time.perf_counter() - t0 < 20, f"{fmt} on a 1 MB {name} line"


def test_transcript_on_megabyte_lines():
    for name, line in _MEGA_LINES.items():
        t0 = time.perf_counter()
        check_transcript("$ nvidia-smi\n" + line + "\n$ free -g\n" + line[:5000])
        assert time.perf_counter() - t0 < 20, name


@_small
@given(data=st.binary(max_size=2000) | _real_format_text().map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_whole_timeline_on_any_file(data):
    """A loose file of anything through the real assembly and the detectors: no exception — except the one clear
    input error for bytes that open as a compressed stream or an archive and are cut or corrupt (the CLI prints it
    as one line with its exit code)."""
    from forensics.detectors import run_all
    from forensics.inputs import InputError
    from forensics.inputs.unpack import MAGIC, ZIP_MAGIC
    from forensics.timeline import build_timeline

    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "input.log"
        p.write_bytes(data)
        try:
            tl = build_timeline([p])
        except InputError:
            assert data.startswith((*MAGIC.values(), *ZIP_MAGIC)), data[:16]
            return
        assert dict(tl.events.schema) == EVENT_SCHEMA
        run_all(tl)


# ----------------------------------------------------------------------------------------------
# Long profile: FORENSICS_FUZZ=1 or -m fuzz


@pytest.mark.fuzz
@pytest.mark.parametrize("fmt", FORMATS)
@_long
@given(text=_TEXTS)
def test_fuzz_parser_long(fmt, text):
    check_parse(fmt, text)


@pytest.mark.fuzz
@_long
@given(text=_TEXTS)
def test_fuzz_transcript_long(text):
    check_transcript(text)

"""Bad input never raises anything but NotThisFormat from the nvidia-smi parsers, and lines add up."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shared_data import SHARED, SKIP_REASON

from parsers.nvidia_smi import csv as nvidia_smi_csv
from parsers.nvidia_smi import q as nvidia_smi_q
from parsers.nvidia_smi import table as nvidia_smi_table
from parsers.nvidia_smi import xml as nvidia_smi_xml
from parsers.nvidia_smi.common import split_lines
from parsers.schema import NotThisFormat

MODULES = (nvidia_smi_table, nvidia_smi_csv, nvidia_smi_q, nvidia_smi_xml)
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia_smi"

SEEDS = [p.read_text() for p in sorted(FIXTURES.iterdir())] + [
    "index, memory.used [MiB]\n0, 96413 MiB\n1, [N/A]\n",
    "pid, process_name, used_gpu_memory [MiB]\n1, a, b, 2 MiB\n",
    "0, 96413 MiB\n1, 99 MiB\n",
]
COMMANDS = [None, "nvidia-smi", "nvidia-smi -q", "nvidia-smi -q -x -i 0",
            "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader",
            "nvidia-smi --query-compute-apps=pid,used_memory --format=csv"]


def check(text: str, command: str | None = None) -> None:
    for mod in MODULES:
        try:
            r = mod.parse(text, path="x", command=command)
        except NotThisFormat:
            continue
        assert r.lines == len(split_lines(text))
        assert r.recognized + r.unrecognized == r.lines
        assert 0 <= r.unrecognized <= r.lines
        assert len(r.unrecognized_examples) <= 20
        assert r.events.filter(r.events["line"].is_null()).height == 0
        mod.sniff(text[:65536])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=400), st.sampled_from(COMMANDS))
def test_arbitrary_text(text, command):
    check(text, command)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SEEDS), st.integers(min_value=0, max_value=10_000), st.integers(min_value=0, max_value=10_000),
       st.sampled_from(["", "\x00", "\r", "\n", "|", " : ", "<", "&x;", ", ", "MiB", "N/A", "\ufffd", "]>"]),
       st.sampled_from(COMMANDS))
def test_mutated_real_formats(seed, cut, at, insert, command):
    text = seed[: max(cut, 1) * 7 % (len(seed) + 1)]
    pos = at % (len(text) + 1)
    check(text[:pos] + insert + text[pos:], command)


@pytest.mark.parametrize("mod", MODULES, ids=lambda m: m.FORMAT)
def test_one_megabyte_lines_are_cheap(mod):
    for junk in ("|" + " " * 1_000_000 + "On |", "0, " + "9" * 1_000_000 + " MiB", " " * 1_000_000 + ": x",
                 "<nvidia_smi_log>" + "<a>" * 50_000):
        start = time.perf_counter()
        try:
            r = mod.parse(junk + "\n" + SEEDS[0])
            assert r.recognized + r.unrecognized == r.lines
        except NotThisFormat:
            pass
        mod.sniff(junk[:65536])
        assert time.perf_counter() - start < 5


def test_arbitrary_bytes_decoded_as_text():
    import random

    rnd = random.Random(7)
    for _ in range(200):
        raw = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 600)))
        check(raw.decode("utf-8", errors="replace"))
        check(raw.decode("latin-1"))


def test_real_samples_cut_at_every_line_boundary():
    samples = SHARED / "research_samples" / "nvidia_smi"
    if not samples.is_dir():
        pytest.skip(f"{SKIP_REASON}: samples absent")
    for p in sorted(samples.iterdir())[:40]:
        lines = p.read_text().split("\n")
        step = max(1, len(lines) // 25)
        for n in range(0, len(lines), step):
            check("\n".join(lines[:n]))

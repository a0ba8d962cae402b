"""parsers.routing: the one pass that tells the auxiliary readers which lines they can use never keeps a
line from a reader that would have used it, and it is built from the readers' own gates."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest
from shared_data import ROOT, SHARED, skip_unless

from parsers import failures, gpu_models, launch, routing, stack_dumps


def _texts(base: Path) -> list[Path]:
    out = []
    for p in sorted(base.rglob("*")):
        if not p.is_file() or p.stat().st_size > 4 << 20:
            continue
        try:
            p.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            continue
        out.append(p)
    return out


def _read_both_ways(text: str) -> None:
    """Each routed reader gives what it gives on the whole text; each text gate holds where its reader finds."""
    routes = routing.route(text)
    cand = routes.for_lines("failures")
    assert cand is not None, "the failure scan's gate is routed"
    if routes.plain_breaks:
        whole = failures.parse(text, "f").events
        routed = failures.parse(text, "f", candidates=[i for i, _ in cand]).events
        assert routed.equals(whole)
    names = routes.for_lines("gpu_models")
    assert names is not None, "the GPU-name gate is routed"
    assert gpu_models.parse(text, "f", candidates=names).events.equals(gpu_models.parse(text, "f").events)
    if not routes.maybe("launch"):
        assert not launch.mentions_launch(text)
    if not routes.maybe("stack_dumps"):
        assert stack_dumps.parse(text, "f").events.is_empty()


def _check_files(paths: list[Path]) -> int:
    n = 0
    for p in paths:
        text = p.read_text(encoding="utf-8")
        try:
            _read_both_ways(text)
        except AssertionError as e:
            raise AssertionError(f"{p}: {e}") from None
        n += 1
    return n


def test_every_fixture_read_both_ways(monkeypatch):
    monkeypatch.setattr(routing, "SLICE_CHARS", 997)  # many slices a file: the slice edges are tested too
    assert _check_files(_texts(ROOT / "fixtures")) > 300


@pytest.mark.parametrize("where", ["incidents", "research_samples", "sglang_real_logs", "seeds", "reference"])
def test_every_real_sample_read_both_ways(where):
    skip_unless(SHARED / where)
    assert _check_files(_texts(SHARED / where)) > 0


_WORDS = ["CUDA out of memory", "Traceback (most recent call last):", '  File "x.py", line 3, in f', "Killed",
          "NVIDIA H100 80GB HBM3", "H200", "A100-SXM4-40GB", "RTX 4090", "MI300X", "python -m sglang.launch_server",
          "-m\nsglang.launch_server", "vllm serve", "Thread 0x1 (idle)", "SchedulerStats(", "Decode batch, #token: 5",
          "NCCL error", "exit code 1", "\x1c", "\u00a0", "\u2028", "\r", "\r\n", "²", "Ⅻ", "٣", "H²00", "timeout",
          "  ^^^^", "RuntimeError: x", "oom-killer", "Time out", "Connection refused", "\t", " ", "ECC"]


def test_random_texts_read_both_ways(monkeypatch):
    """Random texts of the readers' words, routed in slices of a few characters (every slice edge tested)."""
    rng = random.Random(26)
    monkeypatch.setattr(routing, "SLICE_CHARS", 7)
    for _ in range(400):
        parts = [rng.choice(_WORDS) if rng.random() < 0.6 else "".join(rng.choice("ab 1\n:") for _ in range(5))
                 for _ in range(rng.randint(1, 30))]
        text = "".join(p + (rng.choice(["\n", " ", ""])) for p in parts)
        _read_both_ways(text)


def test_native_superset_matches_where_python_does():
    """The widened gates match every string the readers' own patterns match, on characters where the two
    engines' classes differ (Python's \\s takes \\x1c-\\x1f, its \\w every number)."""
    import re

    for pattern, s in ((r"a\s+b", "a\x1cb"), (r"x\w", "x²"), (r"\bH100\b", "H100"), (r"H\d{2}(?!\d)", "H20 x")):
        assert re.search(pattern, s)
        assert pl.Series([s]).str.contains(routing.native_superset(pattern)).item(), pattern
    readers = {"failures": failures.TRIGGER, "gpu_models": gpu_models.PREFILTER}
    rng = random.Random(7)
    alphabet = ["-m", "sglang", ".launch_server", "serve", "vllm", " ", "\x1c", "\x1f", "\u00a0", "\n", "²", "1",
                "NVIDIA", "H", "100", "B", "20", "0", "x", "_", "Kill", "exit"]
    for g in routing.gates():
        if not g.pattern or g.scope != "line":
            continue
        rust = routing.native_superset(g.pattern)
        assert rust is not None, g.name
        py = readers[g.name]  # the reader's own engine (re or regex), whose classes differ too
        for _ in range(3000):
            s = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
            if py.search(s):
                assert pl.Series([s]).str.contains(rust).item(), (g.name, s)


def test_every_launch_command_holds_one_of_its_gates_strings():
    """The launch reader's gate is routed as the strings one of which every match of its pattern holds."""
    lits = routing.required_literals(launch.ANCHOR_RE.pattern)
    assert lits
    rng = random.Random(3)
    alphabet = ["-m", " ", "\n", "\x1c", "sglang", "_router", ".launch_server", "serve", "vllm", ".entrypoints.",
                "openai.", "api_server", "dynamo", "-run", " run ", "out=", "/vllm-openai", "x"]
    hits = 0
    for _ in range(20000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 7)))
        if launch.ANCHOR_RE.search(s):
            hits += 1
            assert any(x in s for x in lits), s
    assert hits > 50


def test_a_pattern_added_to_a_reader_is_routed_without_a_change_here(monkeypatch):
    """The gates are the readers' own: a word added to the failure scan's gate reaches it through the router."""
    import re

    text = "ok\nthe zorblax broke\nok\n"
    assert routing.route(text).for_lines("failures") == []
    monkeypatch.setattr(failures, "TRIGGER", re.compile(failures.TRIGGER.pattern + "|zorblax"))
    assert routing.route(text).for_lines("failures") == [(1, "the zorblax broke")]


def test_a_gate_that_cannot_be_widened_reads_everything(monkeypatch):
    import re

    monkeypatch.setattr(gpu_models, "PREFILTER", re.compile(r"(H)\1"))  # a back-reference: no Rust form
    routes = routing.route("NVIDIA H100\n")
    assert routes.for_lines("gpu_models") is None  # not routed: gpu_models reads the whole text
    assert routes.for_lines("failures") is not None


def test_timeline_of_every_scenario_is_the_same_unrouted(monkeypatch):
    """End to end: the timeline of each scenario with the readers routed and with every reader reading all."""
    from test_scenarios import inputs_of, scenario_dirs

    import forensics.timeline as timeline
    from forensics.timeline import build_timeline

    monkeypatch.setattr(timeline, "ROUTE_CHARS", 0)  # every text routed, however short
    routed = {}
    for d in scenario_dirs():
        inputs = inputs_of(d)
        routed[d.name] = (inputs, build_timeline(inputs).events)
    monkeypatch.setattr(routing, "route", lambda text: routing.Routes({}, {}, True))
    for name, (inputs, events) in routed.items():
        assert build_timeline(inputs).events.equals(events), name

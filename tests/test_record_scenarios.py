"""The recorder scenarios: their rings are what the recorder's own writer makes (tests/record_scenarios.py),
and the findings use the recorded series as observed evidence."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from record_scenarios import RINGS, SCENARIOS, write_ring

from forensics.detectors import run_all
from forensics.timeline import build_timeline


@pytest.mark.parametrize("name", sorted(RINGS))
def test_committed_ring_is_what_the_writer_makes(name: str, tmp_path: Path) -> None:
    write_ring(name, tmp_path / "ring")
    committed = SCENARIOS / name / "input" / "record"
    # the text, not the bytes: another zlib may compress the same text differently
    want = {p.name: gzip.decompress(p.read_bytes()) for p in sorted((tmp_path / "ring").iterdir())}
    have = {p.name: gzip.decompress(p.read_bytes()) for p in sorted(committed.iterdir())}
    assert have == want, "run `python tests/record_scenarios.py` to rewrite the rings"


def _findings(name: str):
    tl = build_timeline([SCENARIOS / name / "input"])
    findings, root = run_all(tl)
    return {f.rule_id: f for f in findings}, root


def test_pools_pinned_rank_after_rank_are_observed_in_the_recorded_series() -> None:
    by_rule, root = _findings("record_pools_pinned_until_oom")
    f = by_rule["SGL-HOST-001"]
    assert root == "SGL-HOST-001"
    assert f.figures["observed_climb_steps"] == 8
    assert f.figures["observed_from"].startswith("recorded series")
    assert f.figures["observed_min_available_bytes"] < 1 << 30
    recorded = [e for e in f.evidence if "record/rec-" in e.file]
    assert len(recorded) >= 3 and any("MemAvailable" in e.text for e in recorded)
    assert "Observed (forensics record)" in f.summary and "8 steps" in f.summary
    assert f.figures["host_available_before_bytes"] is not None  # the pre-launch sample is the baseline


def test_leak_is_not_an_allocation_step() -> None:
    by_rule, _ = _findings("record_rss_leak_until_oom")
    f = by_rule["SGL-REC-001"]
    assert f.figures["pid"] == 7001 and f.figures["growth_per_hour_bytes"] > 60 << 30
    assert "2026-11-21 08:23 UTC" in f.summary


def test_stranded_names_the_minute_and_the_gpu() -> None:
    by_rule, _ = _findings("record_gpu_held_after_owner_died")
    f = by_rule["SGL-REC-002"]
    assert f.gpus == [1] and f.figures["stranded_since"].startswith("2026-11-22T03:10")

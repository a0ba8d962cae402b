"""Findings made without a deciding fact say which fact would confirm them and the command that gets it."""

from __future__ import annotations

from pathlib import Path

from forensics.detectors import run_all
from forensics.timeline import build_timeline

SCENARIOS = Path(__file__).resolve().parents[1] / "fixtures" / "scenarios"


def _finding(folder: str, rule: str):
    findings, _root = run_all(build_timeline([SCENARIOS / folder / "input"]))
    return next(f for f in findings if f.rule_id == rule)


def test_a_pin_failure_without_free_asks_for_free(tmp_path: Path) -> None:
    f = _finding("fragment_pin_failed", "SGL-HOST-007")
    facts = [m["fact"] for m in f.figures["missing_facts"]]
    assert facts[0] == "host RAM" and f.remediation.actions[0].startswith("To confirm: host RAM — `free -g`")


def test_the_same_evidence_with_free_asks_for_nothing_about_ram(tmp_path: Path) -> None:
    src = SCENARIOS / "fragment_pin_failed" / "input"
    for p in src.iterdir():
        (tmp_path / p.name).write_text(p.read_text())
    (tmp_path / "free.txt").write_text("$ free -g\n               total        used        free      shared  buff/cache   "
                                       "available\nMem:             251          30         215           0           5  "
                                       "       219\n")
    findings, _root = run_all(build_timeline([tmp_path]))
    f = next(f for f in findings if f.rule_id == "SGL-HOST-007")
    assert "host RAM" not in [m["fact"] for m in f.figures.get("missing_facts", [])]


def test_high_confidence_findings_are_left_alone() -> None:
    f = _finding("nodes_disagree_on_rendezvous", "SGL-NCCL-003")
    assert f.confidence == "high" and "missing_facts" not in f.figures

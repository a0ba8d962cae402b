"""The rule catalog: ids unique and well formed, every rule documented, reachable from a detector,
and exercised by at least one positive and one negative scenario."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from forensics import rules
from forensics.model import CATEGORIES, SEVERITIES

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "fixtures" / "scenarios"
DETECTORS = ROOT / "forensics" / "detectors"


def test_ids_unique_and_well_formed() -> None:
    ids = [r.id for r in rules.load_catalog()]
    assert len(ids) == len(set(ids))
    assert all(rules.RULE_ID_RE.match(i) for i in ids)
    raw = (ROOT / "forensics" / "rules" / "catalog.toml").read_text(encoding="utf-8")
    assert len(re.findall(r'^id = "', raw, re.MULTILINE)) == len(ids)


@pytest.mark.parametrize("rule", rules.load_catalog(), ids=lambda r: r.id)
def test_rule_documented(rule: rules.Rule) -> None:
    assert rule.category in CATEGORIES and rule.severity in SEVERITIES
    for part in (rule.title, rule.what, rule.how, rule.action):
        assert len(part.split()) >= 4, rule.id
    text = rules.format_rule(rule.id)
    assert rule.id in text and "What to do" in text


@pytest.mark.parametrize("rule", rules.load_catalog(), ids=lambda r: r.id)
def test_rule_reachable_from_its_detector(rule: rules.Rule) -> None:
    source = (DETECTORS / f"{rule.detector}.py").read_text(encoding="utf-8")
    assert f'"{rule.id}"' in source or rule.id[:-3] in source


def _scenarios() -> list[dict]:
    # the pre-launch rules (SGL-CHK-*) are exercised by `forensics check` cases (tests/test_check.py)
    paths = sorted(SCENARIOS.glob("*/expected.json")) + sorted((ROOT / "fixtures" / "check").glob("*/expected.json"))
    return [json.loads(p.read_text(encoding="utf-8")) for p in paths]


@pytest.mark.parametrize("rule", rules.load_catalog(), ids=lambda r: r.id)
def test_every_rule_has_positive_and_negative_scenario(rule: rules.Rule) -> None:
    docs = _scenarios()
    assert any(rule.id in d.get("expect", []) for d in docs), f"no scenario expects {rule.id}"
    assert any(rule.id in d.get("forbid", []) for d in docs), f"no scenario forbids {rule.id}"


def test_scenarios_name_only_known_rules() -> None:
    known = {r.id for r in rules.load_catalog()}
    for d in _scenarios():
        named = set(d.get("expect", [])) | set(d.get("forbid", [])) | {d.get("root_cause")} - {None}
        assert named <= known, named - known


def test_table_and_explain() -> None:
    table = rules.format_rules_table()
    assert all(r.id in table for r in rules.load_catalog())
    with pytest.raises(KeyError):
        rules.format_rule("SGL-HOST-999")
    with pytest.raises(KeyError):
        rules.get("nope")

"""Scenario tests as data: every fixtures/scenarios/<name>/ is run end to end.

Each folder holds ``input/`` (or names its inputs in ``inputs``) (logs, snapshots, transcripts, launch scripts in the real formats)
and ``expected.json``:

* ``expect`` / ``forbid`` — rule ids that must / must not fire;
* ``root_cause`` — the rule id judged the cause (null for healthy input);
* ``root_severity``, ``categories``, ``max_severity`` (healthy input);
* ``flags`` — corrected flag values: a range (``{"--hicache-size": {"min": 40, "max": 52}}``), a size's bounds
  (``{"--shm-size": {"min_bytes": 1073741824}}``) or the one right value (``{"--speculative-algorithm":
  {"value": "(remove)"}}``); ``old`` the value it replaces. A flag that names no fix is an error;
* ``forbid_flags`` — flags no finding may propose (they would not fix this: ``--watchdog-timeout`` for a hang);
* ``actions`` — phrases the root cause's remediation actions must say (the fix when it is not a flag);
* ``gpus`` — GPUs a finding must name, e.g. ``{"SGL-GPU-005": [0, 2]}``;
* ``consequences`` — ``{"symptom rule": "cause rule"}``;
* ``confidence`` — ``{"rule": ["medium", "low"]}``, the confidences allowed;
* ``runs`` — ``{"rule": 1}``: the server run (of a log holding several) the rule's finding is about;
  a flag range may name the ``old`` value, which must come from that run's args.
* ``hosts`` — ``{"rule": ["host"]}``: the hosts the rule's (first) finding is about; ``root_host`` — the
  host ``input.host`` names (several hosts' evidence: the root cause's);
* ``gaps_contain`` — words the facts' gaps must hold (a node whose evidence is missing);
* ``command`` — ``{"contains": [...], "lacks": [...]}``: words the report's corrected launch command (with the
  configuration keys it names for a compose service or a manifest) must hold / must not hold.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forensics.detectors import run_all
from forensics.model import SEVERITY_RANK
from forensics.report.document import launch_fix, normalise_document
from forensics.report.findings import dumps_document, to_document
from forensics.timeline import build_timeline
from parsers.units import parse_cli_size

SCENARIOS = Path(__file__).resolve().parents[1] / "fixtures" / "scenarios"


def scenario_dirs() -> list[Path]:
    return sorted(p for p in SCENARIOS.iterdir() if (p / "expected.json").is_file())


def inputs_of(folder: Path) -> list[Path]:
    """``input/``, or the paths listed in expected.json ``inputs`` (relative to the scenario folder),
    so the shipped example bundle and the scenarios share one copy of the seed's text."""
    exp = json.loads((folder / "expected.json").read_text(encoding="utf-8"))
    return [(folder / p).resolve() for p in exp.get("inputs", ["input"])]


def analyse(folder: Path):
    tl = build_timeline(inputs_of(folder))
    findings, root = run_all(tl)
    return tl, findings, root


@pytest.mark.parametrize("folder", scenario_dirs(), ids=lambda p: p.name)
def test_scenario(folder: Path) -> None:
    exp = json.loads((folder / "expected.json").read_text(encoding="utf-8"))
    tl, findings, root = analyse(folder)
    by_rule: dict = {}
    for f in findings:  # the same rule in several runs: the first is the incident run's
        by_rule.setdefault(f.rule_id, f)
    fired = set(by_rule)
    report = "; ".join(f"{f.rule_id}/{f.severity}/{f.confidence}: {f.summary}" for f in findings)

    missing = set(exp.get("expect", [])) - fired
    assert not missing, f"expected rules did not fire: {sorted(missing)} — fired: {report}"
    unwanted = set(exp.get("forbid", [])) & fired
    assert not unwanted, f"forbidden rules fired: {sorted(unwanted)} — {report}"
    if "root_cause" in exp:
        assert root == exp["root_cause"], report
    if exp.get("root_severity"):
        assert by_rule[root].severity == exp["root_severity"]
    if "max_severity" in exp:
        worst = [f for f in findings if SEVERITY_RANK[f.severity] < SEVERITY_RANK[exp["max_severity"]]]
        assert not worst, f"above {exp['max_severity']}: {report}"
    for cat in exp.get("categories", []):
        assert cat in {f.category for f in findings}, report
    for flag, rng in exp.get("flags", {}).items():
        news = [c.new for f in findings for c in f.remediation.flags if c.flag == flag]
        assert news, f"no corrected {flag} — {report}"
        root_news = [c.new for c in by_rule[root].remediation.flags if c.flag == flag] if root else []
        new = (root_news or news)[0]
        if "value" in rng:  # a word or a fixed setting: "(remove)", "true"
            assert new == rng["value"], f"{flag} = {new!r}, expected {rng['value']!r}"
        elif "min_bytes" in rng or "max_bytes" in rng:  # a size ("16g"): which way it moves
            size = parse_cli_size(new)
            assert size is not None, f"{flag} = {new!r} is not a size"
            assert rng.get("min_bytes", 0) <= size <= rng.get("max_bytes", size), f"{flag} = {new}, expected {rng}"
        else:
            assert "min" in rng and "max" in rng, f"{flag}: say which fix is right (min/max, value, min_bytes/max_bytes)"
            assert rng["min"] <= float(new) <= rng["max"], f"{flag} = {new}, expected {rng}"
        if "old" in rng:
            olds = [c.old for c in (by_rule[root] if root else findings[0]).remediation.flags if c.flag == flag]
            assert olds == [rng["old"]], (flag, olds)
    for flag in exp.get("forbid_flags", []):
        wrong = [f.rule_id for f in findings for c in f.remediation.flags if c.flag == flag]
        assert not wrong, f"{flag} proposed by {wrong}, which does not fix this — {report}"
    if exp.get("actions"):
        said = " ".join(by_rule[root].remediation.actions)
        for words in exp["actions"]:
            assert words in said, f"the fix does not say {words!r}: {by_rule[root].remediation.actions}"
    for rule, gpus in exp.get("gpus", {}).items():
        assert by_rule[rule].gpus == sorted(gpus), by_rule[rule].gpus
    for rule, run in exp.get("runs", {}).items():
        assert by_rule[rule].figures.get("run") == run, by_rule[rule].figures
        started = str(by_rule[rule].figures.get("run_started"))
        assert by_rule[rule].summary.startswith(f"Run {run} (started {started})"), by_rule[rule].summary
        first = [r for r in tl.events.select("file", "line", "run").iter_rows(named=True)
                 if f"{r['file']}:{r['line']}" == started]
        assert first and all(r["run"] == run for r in first), (started, first)
    for symptom, cause in exp.get("consequences", {}).items():
        assert by_rule[symptom].consequence_of == cause
    for rule, hosts in exp.get("hosts", {}).items():
        assert by_rule[rule].hosts == hosts, (rule, by_rule[rule].hosts)
    if "root_host" in exp:
        assert to_document(findings, root, tl)["input"]["host"] == exp["root_host"], tl.facts.host
    for words in exp.get("gaps_contain", []):
        assert any(words in g for g in tl.facts.gaps), (words, tl.facts.gaps)
    for rule, words in exp.get("summary_contains", {}).items():
        for w in words:
            assert w in by_rule[rule].summary, (rule, w, by_rule[rule].summary)
    for rule, words in exp.get("summary_lacks", {}).items():  # a look-alike's finding must not say these
        for w in words:
            assert rule not in by_rule or w not in by_rule[rule].summary, (rule, w, by_rule[rule].summary)
    for rule, allowed in exp.get("confidence", {}).items():
        assert by_rule[rule].confidence in allowed, (rule, by_rule[rule].confidence, by_rule[rule].confidence_reason)
    if "command" in exp:  # the corrected launch as the report shows it
        fix = launch_fix(normalise_document(json.loads(dumps_document(to_document(findings, root, tl)))), tl)
        said = "\n".join([fix.command or fix.flags_only, *fix.env_notes])
        for w in exp["command"].get("contains", []):
            assert w in said, (w, said)
        for w in exp["command"].get("lacks", []):
            assert w not in said, (w, said)


def test_healthy_vllm_is_held_to_the_same_bar_as_healthy_sglang():
    """A healthy vLLM run may fire no more than a healthy SGLang run: the same ceiling, the same
    forbidden rules, and every vLLM rule besides."""
    from forensics.rules import load_catalog

    sglang = json.loads((SCENARIOS / "healthy_start" / "expected.json").read_text(encoding="utf-8"))
    vllm_rules = {r.id for r in load_catalog() if r.id.startswith("VLLM-")}
    for name in ("vllm_healthy_start", "vllm_healthy_busy"):
        exp = json.loads((SCENARIOS / name / "expected.json").read_text(encoding="utf-8"))
        assert exp["max_severity"] == sglang["max_severity"] and exp["root_cause"] is None, name
        assert set(sglang["forbid"]) | vllm_rules <= set(exp["forbid"]), name


@pytest.mark.parametrize("folder", scenario_dirs()[:3], ids=lambda p: p.name)
def test_findings_json_is_deterministic(folder: Path) -> None:
    docs = []
    for _ in range(2):
        tl, findings, root = analyse(folder)
        docs.append(dumps_document(to_document(findings, root, tl)))
    assert docs[0] == docs[1]
    doc = json.loads(docs[0])
    assert doc["schema_version"] == 1
    assert doc["root_cause"] in {f["rule_id"] for f in doc["findings"]} | {None}
    for f in doc["findings"]:
        assert f["evidence"], f["rule_id"]
        assert all(e["file"] and e["line"] >= 1 for e in f["evidence"])

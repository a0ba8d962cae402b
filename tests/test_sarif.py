"""findings.sarif: SARIF 2.1.0 shape, levels, locations, rules from the catalog, stable fingerprints."""

from __future__ import annotations

import json

import report_fixture as rf

from forensics.report.catalog import catalog_rules
from forensics.report.sarif import LEVELS, SARIF_VERSION, fingerprint, to_sarif


def sarif():
    return to_sarif(rf.document(), rf.catalog())


def test_top_level_shape():
    s = sarif()
    assert s["version"] == SARIF_VERSION == "2.1.0"
    assert s["$schema"].endswith("sarif-schema-2.1.0.json")
    assert len(s["runs"]) == 1
    driver = s["runs"][0]["tool"]["driver"]
    assert driver["name"] == "forensics" and driver["version"] == rf.document()["tool"]["version"]
    json.dumps(s, allow_nan=False)  # serialisable as strict JSON


def test_rules_come_from_the_catalog_with_descriptions():
    rules = sarif()["runs"][0]["tool"]["driver"]["rules"]
    ids = [r["id"] for r in rules]
    assert ids == sorted(ids) and len(ids) == len(set(ids))
    catalog = catalog_rules(rf.catalog())
    if catalog:
        assert {r.id for r in catalog} <= set(ids)
    for r in rules:
        assert r["shortDescription"]["text"] and r["fullDescription"]["text"] and r["help"]["text"]
        assert r["defaultConfiguration"]["level"] in ("error", "warning", "note")
    for f in rf.document()["findings"]:
        assert f["rule_id"] in ids


def test_one_result_per_finding_with_levels_and_locations():
    doc = rf.document()
    run = sarif()["runs"][0]
    results = run["results"]
    assert sorted(r["ruleId"] for r in results) == sorted(f["rule_id"] for f in doc["findings"])
    assert results[0]["ruleId"] == doc["root_cause"] and results[0]["properties"]["rootCause"] is True
    rules = run["tool"]["driver"]["rules"]
    by_id = {f["rule_id"]: f for f in doc["findings"]}
    for r in results:
        f = by_id[r["ruleId"]]
        assert r["level"] == LEVELS[f["severity"]]
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
        locs = [(loc["physicalLocation"]["artifactLocation"]["uri"], loc["physicalLocation"]["region"]["startLine"])
                for loc in r["locations"]]
        assert locs == [(e["file"], e["line"]) for e in f["evidence"]]
        assert r["message"]["text"].startswith(f["summary"])


def test_levels_map_severities():
    assert LEVELS == {"critical": "error", "high": "error", "medium": "warning", "low": "note", "info": "note"}


def test_fingerprints_are_stable_and_distinct():
    a, b = sarif(), sarif()
    fa = [r["partialFingerprints"] for r in a["runs"][0]["results"]]
    assert fa == [r["partialFingerprints"] for r in b["runs"][0]["results"]]
    assert len({f["forensicsFinding/v1"] for f in fa}) == len(fa)
    doc = rf.document()
    f = doc["findings"][0]
    before = fingerprint(f)
    f["summary"] = "reworded"  # wording changes do not move the fingerprint
    assert fingerprint(f) == before
    f["evidence"][0]["line"] += 1
    assert fingerprint(f) != before


def test_without_catalog_rules_are_made_from_findings():
    s = to_sarif(rf.document(), None)
    rules = s["runs"][0]["tool"]["driver"]["rules"]
    assert sorted(r["id"] for r in rules) == sorted(f["rule_id"] for f in rf.document()["findings"])
    host = next(r for r in rules if r["id"] == "SGL-HOST-001")
    assert host["defaultConfiguration"]["level"] == "error"


def test_odd_paths_and_lines():
    doc = rf.document()
    doc["findings"][0]["evidence"] = [{"file": "logs/tp 0#x.log", "line": 0, "text": "t"},
                                      {"file": "", "line": 3, "text": "t"}]
    r = next(x for x in to_sarif(doc, None)["runs"][0]["results"] if x["ruleId"] == doc["findings"][0]["rule_id"])
    assert r["locations"] == [{"physicalLocation": {"artifactLocation": {"uri": "logs/tp%200%23x.log"}}}]

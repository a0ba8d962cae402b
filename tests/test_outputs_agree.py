"""The four outputs tell the same story: rule ids, severities, root cause and corrected flag values."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
import report_fixture as rf

from forensics.report import write_outputs


class Findings(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.findings: dict[str, str] = {}
        self.flags: dict[str, str] = {}
        self.root: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "article" and "data-rule" in a:
            self.findings[a["data-rule"]] = a["data-severity"]
        if tag == "tr" and "data-flag" in a:
            self.flags[a["data-flag"]] = a["data-new"]
        if tag == "span" and a.get("id") == "root-rule":
            self.root = a["data-rule"]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    write_outputs(rf.document(), rf.timeline(), out, {"html", "md", "json", "sarif", "parquet"},
                  catalog=rf.catalog())
    return out


def _from_json(out):
    doc = json.loads((out / "findings.json").read_text(encoding="utf-8"))
    flags = {}
    for f in doc["findings"]:  # the root cause's value wins, as in the report
        for ch in f["remediation"]["flags"]:
            if f["rule_id"] == doc["root_cause"] or ch["flag"] not in flags:
                flags[ch["flag"]] = ch["new"]
    return doc, {f["rule_id"]: f["severity"] for f in doc["findings"]}, flags


def test_html_agrees_with_json(outputs):
    doc, severities, flags = _from_json(outputs)
    page = Findings()
    page.feed((outputs / "report.html").read_text(encoding="utf-8"))
    assert page.findings == severities
    assert page.root == doc["root_cause"]
    assert page.flags == flags


def test_sarif_agrees_with_json(outputs):
    doc, severities, flags = _from_json(outputs)
    run = json.loads((outputs / "findings.sarif").read_text(encoding="utf-8"))["runs"][0]
    assert {r["ruleId"]: r["properties"]["severity"] for r in run["results"]} == severities
    assert run["properties"]["rootCause"] == doc["root_cause"]
    sarif_flags = {ch["flag"]: ch["new"] for r in run["results"] for ch in r["properties"]["remediation"]["flags"]}
    assert sarif_flags == flags


def test_markdown_agrees_with_json(outputs):
    doc, severities, flags = _from_json(outputs)
    md = (outputs / "summary.md").read_text(encoding="utf-8")
    root = next(f for f in doc["findings"] if f["rule_id"] == doc["root_cause"])
    assert md.splitlines()[0] == f"## Root cause: {root['title']}"
    assert f"**{root['severity'].upper()}**" in md and f"`{root['rule_id']}`" in md
    for rule_id, severity in severities.items():
        if rule_id != root["rule_id"]:
            assert re.search(rf"{severity} `{re.escape(rule_id)}`", md)
    md_flags = dict(re.findall(r"^\| `(--[\w-]+)` \| `[^`]*` \| `([^`]*)` \|", md, re.M))
    assert md_flags == flags


def test_same_input_same_bytes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        write_outputs(rf.document(), rf.timeline(), out, {"json", "md", "sarif", "html"}, catalog=rf.catalog())
    for name in ("findings.json", "summary.md", "findings.sarif", "report.html"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert json.loads((a / "findings.json").read_text()) == rf.document()

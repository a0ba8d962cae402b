"""The shipped Xid catalog: complete, total severity, consistent with NVIDIA's CSV and with the Xids we parse."""

from __future__ import annotations

import csv
import importlib.util
import re
from pathlib import Path

import pytest
from shared_data import SHARED, SKIP_REASON

from forensics.facts import xid
from forensics.model import SEVERITIES
from parsers import kernel

ROOT = Path(__file__).resolve().parents[1]
CATALOG_SRC = SHARED / "research_samples" / "xid_catalog"
NVRM_SAMPLES = SHARED / "research_samples" / "nvrm_xid"


def _builder():
    spec = importlib.util.spec_from_file_location("build_xid_catalog", ROOT / "tools" / "build_xid_catalog.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _csv_rows() -> list[list[str]]:
    path = CATALOG_SRC / "01_xid_catalog_xids.csv"
    if not path.exists():
        pytest.skip(f"{SKIP_REASON}: NVIDIA Xid catalog CSV not available")
    with path.open(encoding="utf-8", newline="") as f:
        return [r for r in csv.reader(f)][1:]


def test_catalog_loads_and_covers_every_csv_code():
    cat = xid.load_catalog()
    codes = {int(r[1]) for r in _csv_rows() if r[1].strip().isdigit()}
    assert set(cat) == codes
    for r in _csv_rows():
        entry = cat[int(r[1])]
        assert entry.mnemonic == " ".join(r[2].split())
        assert entry.immediate_action == (" ".join(r[8].split()) or None)


def test_severity_mapping_is_total_and_follows_the_bucket():
    doc = xid.catalog_document()
    assert set(doc["severity_by_bucket"].values()) <= set(SEVERITIES)
    overrides = _builder().SEVERITY_OVERRIDES
    for entry in xid.load_catalog().values():
        assert entry.severity in SEVERITIES, entry.code
        assert entry.severity_reason
        if entry.code in overrides:
            assert entry.severity == overrides[entry.code][0]
        elif entry.has("unused"):
            assert entry.severity == "info"
        else:
            assert entry.severity == doc["severity_by_bucket"][entry.immediate_action], entry.code
        if entry.immediate_action:
            assert entry.action == doc["buckets"][entry.immediate_action]


def test_json_is_what_the_builder_makes_from_the_csvs():
    if not CATALOG_SRC.exists():
        pytest.skip(f"{SKIP_REASON}: NVIDIA Xid catalog CSVs not available")
    b = _builder()
    committed = (ROOT / "forensics" / "data" / "xid_catalog.json").read_text(encoding="utf-8")
    assert b.render(b.build(CATALOG_SRC)) == committed, "rerun tools/build_xid_catalog.py"


def test_every_xid_in_the_samples_is_in_the_catalog():
    files = sorted(NVRM_SAMPLES.glob("*.txt")) if NVRM_SAMPLES.exists() else []
    if not files:
        pytest.skip(f"{SKIP_REASON}: nvrm_xid samples not available")
    seen = set()
    for path in files:
        text = "\n".join(x for x in path.read_text(encoding="utf-8").split("\n") if not x.startswith("# "))
        ev = kernel.parse(text).events
        parsed = set(ev.filter(ev["kind"] == "xid")["code"].to_list())
        assert parsed == {int(c) for c in re.findall(r"NVRM: Xid \([^)]*\): (\d+)", text)}, path.name
        seen |= parsed
    assert seen and all(xid.lookup(c) is not None for c in seen), sorted(c for c in seen if xid.lookup(c) is None)


def test_facts_detectors_rely_on():
    rows = {int(r[1]): r for r in _csv_rows() if r[1].strip().isdigit()}
    for code in (43, 45):  # logged when a process is killed or torn down: noise next to an OOM kill
        assert xid.lookup(code).has("noise_after_kill")
    assert "preemptive cleanup" in rows[45][3].lower() and "kill" in rows[45][11].lower()
    assert not any(e.has("noise_after_kill") for c, e in xid.load_catalog().items() if c not in (43, 45))
    assert rows[79][8].strip() == "RESTART_BM" and xid.lookup(79).severity == "critical"
    assert rows[13][8].strip() == "RESTART_APP" and xid.lookup(13).has("app_fault")
    assert xid.lookup(48).has("memory_ecc") and xid.lookup(149).has("nvlink") and xid.lookup(119).has("gsp")
    assert xid.lookup("not a code") is None and xid.lookup(10_000) is None

"""The bundle `forensics collect` writes is the one `forensics report` reads (issue: collect)."""

from __future__ import annotations

import json
import subprocess
import sys

from test_collect import host, options  # noqa: F401 - the fake host fixture and its options

from forensics.collect import collect


def test_collected_bundle_goes_through_report(host, tmp_path):  # noqa: F811
    bundle = collect(options(host))
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "report", str(bundle), "-o", str(out), "-q"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    doc = json.loads((out / "findings.json").read_text())
    formats = {c["file"]: c["format"] for c in doc["coverage"]}
    # every artifact the collector labelled is read by the parser it named
    assert formats["host/free.txt"] == "free"
    assert formats["host/ps.txt"] == "ps"
    assert formats["host/nvidia-smi-query-gpu.csv"] == "nvidia_smi_csv"
    assert any(f.startswith("logs/") and fmt == "sglang" for f, fmt in formats.items())
    free = next(c for c in doc["coverage"] if c["file"] == "host/free.txt")
    assert free["unrecognized"] == 0 and free["recognized"] == free["lines"] > 0
    # the manifest's facts reach the report
    assert doc["input"]["host"]
    assert doc["input"]["collected_at"].endswith("Z")
    for name in ("report.html", "summary.md", "findings.sarif", "timeline.parquet"):
        assert (out / name).stat().st_size > 0

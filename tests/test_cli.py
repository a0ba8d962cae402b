"""The command line contract of DESIGN.md §3: commands, outputs, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.resources import example_bundle

SEED = example_bundle()


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "forensics.cli", *args], capture_output=True, text=True, cwd=cwd)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("Try ")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_fail_on_sets_exit_1_only_at_or_above_threshold(tmp_path):
    hit = cli("report", str(SEED), "-o", str(tmp_path / "a"), "--format", "json", "--fail-on", "critical", "-q")
    assert hit.returncode == 1
    doc = json.loads((tmp_path / "a" / "findings.json").read_text())
    assert any(f["severity"] == "critical" for f in doc["findings"])
    # a threshold above nothing: info findings only would pass; with "none" nothing fails
    never = cli("report", str(SEED), "-o", str(tmp_path / "b"), "--format", "json", "--fail-on", "none", "-q")
    assert never.returncode == 0


def test_format_selection_writes_only_what_is_asked(tmp_path):
    proc = cli("report", str(SEED), "-o", str(tmp_path), "--format", "md,sarif", "-q")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["findings.sarif", "summary.md"]


def test_dash_writes_one_format_to_stdout(tmp_path):
    proc = cli("report", str(SEED), "-o", "-", "--format", "json", "-q", cwd=tmp_path)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["schema_version"] == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args,needle", [
    (("report", "X", "--format", "pdf"), "unknown format"),
    (("report", "X", "--fail-on", "fatal"), "unknown severity"),
    (("report", "X", "-o", "-"), "exactly one --format"),
    (("explain", "SGL-NOPE-999"), "unknown rule"),
    (("report",), "Missing argument"),
    (("frobnicate",), "No such command"),
])
def test_usage_errors_exit_2_with_one_line(tmp_path, args, needle):
    args = tuple(str(SEED) if a == "X" else a for a in args)
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert needle in one_line_error(proc)


@pytest.mark.parametrize("content", [b"", b"\x00\x01\x02 not text at all \xff" * 50])
def test_input_with_nothing_readable_still_reports(tmp_path, content):
    f = tmp_path / "mystery.bin"
    f.write_bytes(content)
    proc = cli("report", str(f), "-o", str(tmp_path / "out"), "--format", "json", "-q")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "out" / "findings.json").read_text())
    assert doc["findings"] == [] and doc["root_cause"] is None


def test_missing_input_exits_3(tmp_path):
    proc = cli("report", str(tmp_path / "absent.tar.gz"), "-o", str(tmp_path / "out"))
    assert proc.returncode == 3
    assert "no such file" in one_line_error(proc)
    assert not (tmp_path / "out").exists()


def test_rules_and_explain_read_the_catalog():
    from forensics.rules import load_catalog

    listing = cli("rules")
    assert listing.returncode == 0
    ids = [r.id for r in load_catalog()]
    assert all(i in listing.stdout for i in ids)
    one = cli("explain", ids[0])
    assert one.returncode == 0 and "What it means" in one.stdout and "What to do" in one.stdout


def test_demo_writes_the_full_report(tmp_path):
    proc = cli("demo", "-o", str(tmp_path / "d"))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [
        "findings.json", "findings.sarif", "report.html", "summary.md", "timeline.parquet"]
    assert "report.html" in proc.stdout
    assert "root cause" in proc.stderr


def test_version_and_help():
    out = cli("--version").stdout
    assert out.startswith("forensics ") and "native scanner: " in out
    helped = cli("--help")
    assert helped.returncode == 0
    for cmd in ("collect", "report", "timeline", "rules", "explain", "demo"):
        assert cmd in helped.stdout


def test_python_dash_m_forensics_is_the_command():
    # a host without the console script on PATH (a venv not activated) still runs the tool, with its exit codes
    ok = subprocess.run([sys.executable, "-m", "forensics", "--version"], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.startswith("forensics ")
    missing = subprocess.run([sys.executable, "-m", "forensics", "report", "/nonexistent/bundle"],
                             capture_output=True, text=True)
    assert missing.returncode == 3 and one_line_error(missing).startswith("forensics: error:")

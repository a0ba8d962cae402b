"""The same input gives byte-identical outputs: findings.json, summary.md, timeline.parquet (and the
SARIF and HTML with them), whatever the hash seed, the machine's time zone, the locale, the output
folder, and the files' modification times.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "fixtures" / "seed_bundle"
SCENARIO = REPO / "fixtures" / "scenarios" / "oom_killer_after_overallocation" / "input"
OUTPUTS = ("findings.json", "summary.md", "timeline.parquet", "findings.sarif", "report.html")

# Two runs differ in everything that must not matter.
ENVS = [
    {"PYTHONHASHSEED": "1", "TZ": "UTC", "LC_ALL": "C.UTF-8"},
    {"PYTHONHASHSEED": "4242", "TZ": "Asia/Shanghai", "LC_ALL": "C"},
]


def run_report(inputs: list[Path], out: Path, env_extra: dict) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), **env_extra)
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "report", *map(str, inputs), "-o", str(out), "-q"],
                          capture_output=True, text=True, cwd=out.parent, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr


def assert_identical(a: Path, b: Path) -> None:
    for name in OUTPUTS:
        x, y = (a / name).read_bytes(), (b / name).read_bytes()
        assert len(x) > 100, name
        assert x == y, f"{name} differs between two runs on the same input"


@pytest.mark.parametrize("case", ["seed_bundle+scenario", "scenario"])
def test_same_input_gives_identical_bytes(tmp_path, case):
    inputs = [SEED, SCENARIO] if case != "scenario" else [SCENARIO]
    run_report(inputs, tmp_path / "first", ENVS[0])
    run_report(inputs, tmp_path / "second-run", ENVS[1])
    assert_identical(tmp_path / "first", tmp_path / "second-run")


def test_modification_times_do_not_matter(tmp_path):
    """The same bytes copied again later (new mtimes) at the same path: the same report."""
    work = tmp_path / "in"
    shutil.copytree(SCENARIO, work)
    run_report([work], tmp_path / "a", ENVS[0])
    shutil.rmtree(work)
    time.sleep(1.1)
    shutil.copytree(SCENARIO, work, copy_function=shutil.copyfile)  # no copystat: fresh mtimes
    run_report([work], tmp_path / "b", ENVS[0])
    assert_identical(tmp_path / "a", tmp_path / "b")


def test_bundle_archive_read_twice(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        tf.add(SEED, arcname="forensics-seed")
    bundle = tmp_path / "bundle.tar.gz"
    bundle.write_bytes(buf.getvalue())
    run_report([bundle], tmp_path / "a", ENVS[0])
    run_report([bundle], tmp_path / "b", ENVS[1])
    assert_identical(tmp_path / "a", tmp_path / "b")

"""A fresh clone's suite (issue 22, item 1): tests find ../shared through one place and skip without it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from shared_data import ROOT, SKIP_REASON

TESTS = ROOT / "tests"
# a path built towards the shared folder: `... / "shared"`, `parents[2] / "shared"`, "../shared/..."
_SHARED_PATH = re.compile(r'/\s*"shared"|"\.\./shared/')


def test_only_shared_data_says_where_shared_is():
    """One place to point elsewhere (FORENSICS_SHARED) or away (.ci/run's run without it)."""
    offenders = [p.name for p in sorted(TESTS.glob("*.py"))
                 if p.name not in ("shared_data.py", Path(__file__).name) and _SHARED_PATH.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


def test_forensics_shared_moves_it_and_the_summary_counts_the_skips(tmp_path):
    absent = tmp_path / "no-shared"
    env = dict(os.environ, FORENSICS_SHARED=str(absent))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           str(TESTS / "test_seeds_as_written.py"), str(TESTS / "test_parser_kernel.py"),
                           "-k", "seed or sniff_takes"],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:]
    counted = re.search(r"(\d+) test\(s\) skipped for want of \.\./shared \((.*): absent\)", proc.stdout)
    assert counted and int(counted[1]) >= 2 and counted[2] == str(absent), proc.stdout[-2000:]
    assert f"{SKIP_REASON}" in proc.stdout

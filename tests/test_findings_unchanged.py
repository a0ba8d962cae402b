"""findings.json unchanged by a refactoring (issue 23, item 5): every scenario and real case analysed by
this checkout and by an earlier revision, byte for byte (``bench/compare_findings.py``).

Opt-in: ``FORENSICS_SAME_FINDINGS_AS=<rev>`` (a commit, ``HEAD^``, the tag ``layers-moved``) names the
revision to compare with. It is not run on every commit because most commits are meant to change
findings — a wording, a recommended value — and compared with their parent they would all fail; a
change that only moves code (the layer moves of issue 23) sets it and must pass. The comparison costs a
second analysis of the scenarios and cases (about 30 s here). What always runs is the bench's own
machinery on a few scenarios, so that it keeps working for the day it is needed.
"""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.shared_data import SHARED

ROOT = Path(__file__).resolve().parents[1]
REV = os.environ.get("FORENSICS_SAME_FINDINGS_AS")


def _bench():
    spec = importlib.util.spec_from_file_location("compare_findings", ROOT / "bench" / "compare_findings.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_comparison_runs_and_finds_a_checkout_equal_to_itself() -> None:
    bench = _bench()
    todo = dict(list(bench.cases(ROOT / "fixtures" / "scenarios", None).items())[:4])
    first, second = bench.documents(ROOT, todo), bench.documents(ROOT, todo)
    assert set(first) == set(todo) and all(v.startswith("{") for v in first.values()), first
    assert first == second


@pytest.mark.skipif(not REV, reason="set FORENSICS_SAME_FINDINGS_AS=<rev> to compare with that revision")
def test_findings_are_byte_identical_to_those_of_the_earlier_revision(tmp_path) -> None:
    bench = _bench()
    tree = tmp_path / "base"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", REV], capture_output=True,
                             timeout=120, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")
    todo = bench.cases(ROOT / "fixtures" / "scenarios", SHARED / "incidents")
    base, new = bench.documents(tree, todo), bench.documents(ROOT, todo)
    differ = [k for k in todo if base.get(k) != new.get(k)]
    assert not differ, f"{len(differ)} of {len(todo)} findings documents differ from {REV}: {differ[:20]}"

"""The accuracy harness (bench/accuracy.py) over the real-incident corpus in ../shared/incidents.

The corpus is real incidents with the expected answer; the floors below are what the report scores
today and only ever rise. Skipped when the corpus is absent.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from shared_data import SHARED, SKIP_REASON

ROOT = Path(__file__).resolve().parents[1]
CORPUS = SHARED / "incidents"

#: project → (root-cause category right, flags right) as shares of its scored cases, on the whole
#: corpus (105 cases). They only rise.
FLOORS = {"sglang": (0.85, 0.72), "vllm": (0.90, 0.84)}

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"{SKIP_REASON}: incidents")


def _harness():
    spec = importlib.util.spec_from_file_location("accuracy", ROOT / "bench" / "accuracy.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules["accuracy"] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def results():
    acc = _harness()
    res = acc.run([CORPUS])
    return acc, res, acc.totals(res)


@pytest.mark.parametrize("project", sorted(FLOORS))
def test_score_does_not_drop_below_the_floor(results, project: str) -> None:
    acc, res, tot = results
    t = tot["by_project"].get(project)
    assert t, f"no scored {project} case"
    cat_floor, flag_floor = FLOORS[project]
    misses = [f"{r.case}: wanted {r.wanted}, got {r.got}" for r in res if r.scored and r.project == project
              and not r.category_ok]
    assert t["category_ok"] / t["cases"] >= cat_floor, misses
    assert t["flags_ok"] / max(t["flag_cases"], 1) >= flag_floor, [
        f"{r.case}: {r.flag_notes or r.proposed}" for r in res if r.project == project and r.flags_ok is False]


def test_healthy_controls_stay_quiet(results) -> None:
    _acc, res, _tot = results
    loud = [f"{r.case}: {r.severe}" for r in res if r.wanted == "healthy" and not r.category_ok]
    assert not loud


def test_no_case_with_a_failure_line_ends_with_no_findings(results) -> None:
    """Every case whose evidence holds a failure line (the failure scan finds one) gets a finding."""
    from parsers import failures

    acc, res, _tot = results
    by_case = {r.case: r for r in res}
    silent = []
    for case in acc.load_cases(CORPUS):
        texts = [p.read_text(encoding="utf-8", errors="replace") for p in acc.evidence_files(case)]
        if any(failures.parse(t).events.height for t in texts) and by_case[case.name].got == "none":
            silent.append(case.name)
    assert not silent


def test_the_split_is_stable_and_about_a_third() -> None:
    """The validation split depends on the folder name only: never on order, corpus or run."""
    acc = _harness()
    names = [f"{i:02d}_case-{i}" for i in range(300)]
    held = [n for n in names if acc.split_of(n) == "validate"]
    assert 0.25 < len(held) / len(names) < 0.42
    assert [acc.split_of(n) for n in reversed(names)] == [acc.split_of(n) for n in names][::-1]
    assert acc.split_of("01_sglang-hicache-pin-fails-low-host-mem") == acc.split_of("01_sglang-hicache-pin-fails-low-host-mem")


def test_the_harness_scores_what_it_says() -> None:
    """Direction and bounds: a lowered flag within its maximum is right, a raised one is wrong."""
    acc = _harness()
    want = {"flag": "--mem-fraction-static", "direction": "lower", "max": 0.9}
    assert acc._flag_verdict(want, {"old": "0.93", "new": "0.88"})[0]
    assert not acc._flag_verdict(want, {"old": "0.93", "new": "0.95"})[0]
    assert not acc._flag_verdict(want, {"old": None, "new": "0.91"})[0]
    assert acc._flag_verdict({"flag": "X", "direction": "remove"}, {"old": "1", "new": "(remove)"})[0]
    assert acc.canon_flag("-tp") == acc.canon_flag("--tensor-parallel-size") == "--tp-size"

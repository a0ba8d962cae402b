"""``forensics check``'s text tells one story, as the report does (tests/test_report_consistency.py):
one unit per comparison, one value per flag (the same in the fix lines and the corrected command), no
step said twice, no line cut with "…", and a last line that says what to run next — a command that,
where it checks the corrected launch, finds nothing left to fix."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forensics.cli import app
from tests.story import cut_formulas, mixed_units

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "check"
SEED = CASES / "seed_first_launch" / "launch.sh"
FIX_LINE = re.compile(r"^\s+fix: (\S+) (.+?) → (\S+)   \(")


def _runs() -> list[tuple[str, Path, list[str], bool]]:
    out = []
    for d in sorted(p for p in CASES.iterdir() if (p / "expected.json").is_file()):
        exp = json.loads((d / "expected.json").read_text(encoding="utf-8"))
        args = [(d / a[6:-1]).read_text(encoding="utf-8") if a.startswith("{text:") else a.replace("{dir}", str(d))
                for a in exp["args"]]
        out.append((d.name, d, args, bool(exp.get("live"))))
    # the seed's launch against hosts of other sizes: other budgets, the same story
    for size in ("256GiB", "1TiB", "3TiB"):
        out.append((f"seed on {size}", SEED.parent, [str(SEED), "--host-memory", size, "--gpus", "8",
                                                     "--gpu-memory", "80GiB"], False))
    out.append(("seed as --cmd", SEED.parent, ["--cmd", SEED.read_text(encoding="utf-8"), "--host-memory", "449GiB",
                                               "--gpus", "8", "--gpu-memory", "97887MiB", "--engine-version", "0.5.6"],
                False))
    out.append(("pool fits only past 0.5.4", SEED.parent, [
        "--cmd", SEED.read_text(encoding="utf-8").replace("--hicache-size 300", "--hicache-size 48"),
        "--host-memory", "449GiB", "--gpus", "8", "--gpu-memory", "97887MiB", "--fail-on", "medium"], False))
    return out


RUNS = _runs()


def _check(args: list[str], folder: Path, live: bool, monkeypatch: pytest.MonkeyPatch):
    if live:
        monkeypatch.setenv("PATH", str(folder / "bin"))
    monkeypatch.setenv("FORENSICS_CHECK_PROC", str(folder / "no-proc"))
    return CliRunner().invoke(app, ["check", *args])


@pytest.mark.parametrize("name, folder, args, live", RUNS, ids=[r[0] for r in RUNS])
def test_check_text_tells_one_story(name, folder, args, live, monkeypatch):
    res = _check(args, folder, live, monkeypatch)
    assert res.exit_code in (0, 1), res.output
    text = res.output
    lines = text.splitlines()
    assert not mixed_units(text), mixed_units(text)
    assert not cut_formulas(text) and "…" not in text, text
    # one value per flag, and the corrected command (or config) carries that value
    values: dict[str, set[str]] = {}
    for line in lines:
        m = FIX_LINE.match(line)
        if m:
            values.setdefault(m.group(1), set()).add(m.group(3))
    assert all(len(v) == 1 for v in values.values()), values
    if "Corrected command" in text:
        fixed = text.split("Corrected command", 1)[1].split("\n\n", 1)[0]
        for flag, (new,) in values.items():
            if not flag.isupper() and flag != "--shm-size":
                # the value is the flag's argument, or a field of it when the argument is JSON (a connector's config)
                arg = re.search(rf"{re.escape(flag)}[ =]('[^']*'|\"[^\"]*\"|\S+)", fixed)
                assert arg and re.search(rf"(?<![\w.]){re.escape(new)}(?![\w.])", arg.group(1)), (flag, new, fixed)
    # nothing said twice: no step, no finding, no fact
    said = [line.strip() for line in lines if line.strip()]
    assert len(said) == len(set(said)), [s for s in said if said.count(s) > 1]
    # the last line is what to run next, complete
    assert lines[-1].startswith("Next: "), lines[-1]
    assert lines[-2].startswith("Result: ") and "(s)" not in lines[-2]
    if "fix before launching" in lines[-2]:  # the next step never contradicts the result
        assert not re.match(r"Next: launch (as written|the command as given)", lines[-1]), lines[-2:]
    assert "None" not in text


def _next_command(text: str) -> list[str] | None:
    m = re.search(r"`(forensics check [^`]+)`\s*$", text.strip())
    return shlex.split(m.group(1))[1:] if m else None


def test_the_next_step_after_a_cmd_checks_the_corrected_command_and_it_passes(monkeypatch):
    """With --cmd the next step is the check of the corrected command: run as printed, it finds nothing
    at or above high (exit 0)."""
    name, folder, args, live = next(r for r in RUNS if r[0] == "seed as --cmd")
    first = _check(args, folder, live, monkeypatch)
    assert first.exit_code == 1, first.output
    again = _next_command(first.output)
    assert again and again[:2] == ["check", "--cmd"] and "--hicache-size 48" in again[2], first.output
    second = _check(again[1:], folder, live, monkeypatch)
    assert second.exit_code == 0, second.output
    assert second.output.splitlines()[-1].startswith("Next: launch the command as given")


def test_the_next_step_of_a_file_repeats_the_file_and_the_facts(monkeypatch):
    name, folder, args, live = next(r for r in RUNS if r[0] == "seed_first_launch")
    out = _check(args, folder, live, monkeypatch).output
    assert _next_command(out) == ["check", str(SEED), "--host-memory", "449GiB", "--gpus", "8",
                                  "--gpu-memory", "97887MiB"], out
    assert f"put the corrected command in {SEED} (lines 4–10)" in out


def test_an_engine_config_correction_names_its_line(monkeypatch):
    name, folder, args, live = next(r for r in RUNS if r[0] == "engine_config_yaml")
    out = _check(args, folder, live, monkeypatch).output
    assert "hicache-size: 48   (line 6)" in out, out


def test_a_pool_that_fits_only_past_the_rounding_versions_is_sized_for_them(monkeypatch):
    """The launch already asks 48 GB, which fits unless the version rounds pools up: the fix is the size
    that fits either way, never the value the launch has."""
    name, folder, args, live = next(r for r in RUNS if r[0] == "pool fits only past 0.5.4")
    out = _check(args, folder, live, monkeypatch).output
    fix = next(FIX_LINE.match(line) for line in out.splitlines() if FIX_LINE.match(line))
    assert fix.group(2) == "48" and int(fix.group(3)) < 48, out
    assert "fits unless SGLang is 0.4.5–0.5.4" in out

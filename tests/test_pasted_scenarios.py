"""Every scenario, pasted as people paste: inside a Markdown code fence, hard-wrapped by a terminal, and as grep
printed its logs (``grep -Hn``: each line after its file's name and number).

A ticket's log arrives in a ```` ``` ```` fence, or copied from a terminal that cut every long line at its
width. parsers/pasted.py takes both marks off, line for line; here each scenario's text inputs are rewritten
so and must give the same root cause as the files as written. A scenario is skipped for a variant that
leaves its files unchanged (no line longer than the width). The exceptions say why the variant cannot read
the same.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from forensics.detectors import run_all
from forensics.timeline import build_timeline
from tests.test_scenarios import inputs_of, scenario_dirs

WIDTH = 160
#: (scenario, variant) → why its root cause may differ
EXCEPTIONS = {
    # a file named memory.max holds the cgroup's number: a copy of that file is never fenced
    ("cgroup_file_copied_beside_vllm_command", "fence"): "a fenced memory.max is no longer that file",
    # CSV rows are not log records: a terminal that cut them is not repaired (tables stay as they are)
    ("gpu_counters_uncorrectable_ecc", "wrap"): "a cut CSV header loses its columns",
    # a ticket that holds fences of its own, fenced again: a fence inside a fence is no Markdown
    ("vllm_start_check_wrapped_in_a_ticket", "fence"): "nested fences",
}


def fence(text: str) -> str:
    return "```text\n" + text + ("" if text.endswith("\n") else "\n") + "```\n"


def hard_wrap(text: str) -> str:
    out = []
    for line in text.split("\n"):
        while len(line) > WIDTH:
            out.append(line[:WIDTH])
            line = line[WIDTH:]
        out.append(line)
    return "\n".join(out)


def grepped(text: str, name: str) -> str:
    """The text as ``grep -Hn '' <name>`` prints it (every line a match)."""
    lines = text.split("\n")
    tail = lines.pop() if lines and lines[-1] == "" else None
    out = [f"{name}:{k}:{line}" for k, line in enumerate(lines, 1)]
    return "\n".join(out) + ("\n" if tail is not None else "")


#: files a user greps: logs and text captures, not structured files read by their name or shape
GREP_SUFFIXES = (".log", ".txt", ".out", ".err")

VARIANTS = {"fence": fence, "wrap": hard_wrap, "grep": grepped}


def _text_files(folder: Path) -> list[Path]:
    files = []
    for top in inputs_of(folder):
        files += [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
    return files


def _rewritten(folder: Path, variant: str, into: Path) -> list[Path] | None:
    """The scenario's inputs with every text file rewritten; None when nothing changed (or binary inputs)."""
    changed = False
    out = []
    for top in inputs_of(folder):
        base = top.parent if top.is_file() else top
        for src in ([top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())):
            dst = into / top.name / src.relative_to(base) if top.is_dir() else into / src.name
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                text = src.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                return None  # pickles, archives: not pasted
            # a bundle's manifest is read by its name and shape, never pasted
            if src.name == "manifest.json" or (variant == "grep" and src.suffix not in GREP_SUFFIXES):
                new = text
            elif variant == "grep":
                new = grepped(text, f"logs/{src.name}")
            else:
                new = VARIANTS[variant](text)
            changed |= new != text
            dst.write_text(new, encoding="utf-8")
        out.append(into / top.name if top.is_dir() else into / top.name)
    return out if changed else None


def _root(paths: list[Path]) -> str | None:
    return run_all(build_timeline(paths))[1]


CASES = [(d, v) for d in scenario_dirs() for v in VARIANTS if (d.name, v) not in EXCEPTIONS
         and (v in ("fence", "grep") or any(len(ln) > WIDTH for p in _text_files(d) if p.suffix not in (".pkl", ".gz", ".zst")
                                  for ln in p.read_bytes().split(b"\n")))]


@pytest.mark.parametrize("folder, variant", CASES, ids=lambda x: x.name if isinstance(x, Path) else x)
def test_a_pasted_scenario_reads_as_written(folder: Path, variant: str, tmp_path: Path) -> None:
    paths = _rewritten(folder, variant, tmp_path)
    if paths is None:
        pytest.skip("the variant leaves these inputs as they are")
    assert _root(paths) == _root(inputs_of(folder)), variant
    shutil.rmtree(tmp_path, ignore_errors=True)

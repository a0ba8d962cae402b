#!/usr/bin/env python3
"""Do two checkouts write the same findings.json? Every scenario and every real case, byte for byte.

    python bench/compare_findings.py ../old-checkout            # this checkout against another
    python bench/compare_findings.py ../old ../new --corpus ../shared/incidents

A refactoring that moves code (issue 23) must leave every document byte-identical; a change of
behaviour shows here case by case. Each checkout runs in its own interpreter (its own modules), over
``fixtures/scenarios/*`` (the inputs its ``expected.json`` names) and the corpus' cases (every
evidence file). Prints the cases that differ and exits 1 when any does.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_CORPUS = HERE.parent.parent / "shared" / "incidents"

#: Runs inside the checkout being measured: name → findings.json text for every case given on stdin.
_CHILD = r"""
import contextlib, io, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
try:
    from forensics.analysis import analyse
except ImportError:  # before the analysis had its own module
    from forensics.cli import _analyse as analyse
try:
    from forensics.report.findings import dumps_document
except ImportError:
    from forensics.findings import dumps_document
out = {}
for name, paths in json.load(sys.stdin).items():
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            _tl, doc = analyse([Path(p) for p in paths], None, quiet=True)
        doc.get("tool", {}).pop("version", None)
        out[name] = dumps_document(doc)
    except Exception as e:  # a crash is a difference too
        out[name] = f"error: {type(e).__name__}: {e}"
json.dump(out, sys.stdout)
"""


def cases(scenarios: Path, corpus: Path | None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for d in sorted(p for p in scenarios.iterdir() if (p / "expected.json").is_file()):
        spec = json.loads((d / "expected.json").read_text(encoding="utf-8"))
        names = spec.get("inputs") or sorted(p.name for p in d.iterdir() if p.name != "expected.json")
        out[f"scenario/{d.name}"] = [str(d / n) for n in names]
    if corpus is not None and corpus.is_dir():
        for d in sorted(p for p in corpus.iterdir() if (p / "case.toml").is_file()):
            files = sorted(str(p) for p in d.rglob("*") if p.is_file() and p.name != "case.toml")
            out[f"case/{d.name}"] = files
    return out


def documents(checkout: Path, todo: dict[str, list[str]]) -> dict[str, str]:
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(checkout.resolve())], input=json.dumps(todo),
                          capture_output=True, text=True, cwd=checkout, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"compare_findings: {checkout}: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", type=Path, help="the checkout to compare against")
    ap.add_argument("new", type=Path, nargs="?", default=HERE.parent, help="the checkout under test (this one)")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="real cases (skipped when absent)")
    args = ap.parse_args()
    todo = cases(args.new / "fixtures" / "scenarios", args.corpus)
    base, new = documents(args.base, todo), documents(args.new, todo)
    differ = [k for k in todo if base.get(k) != new.get(k)]
    for k in differ:
        print(f"differs: {k}")
    print(f"{len(todo) - len(differ)} of {len(todo)} findings documents identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

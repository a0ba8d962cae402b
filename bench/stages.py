#!/usr/bin/env python3
"""Where `forensics report`'s time goes: the timeline, the detectors (facts included) and the outputs.

    python bench/stages.py                       # the 256 MB synthetic rank-log set of bench/run.py
    python bench/stages.py --size 1GB
    python bench/stages.py --root ../old-checkout # the same stages of another checkout (before/after)
    python bench/stages.py --input DIR_OR_FILE    # any evidence instead of the synthetic set

Runs the stages in one process on a warm cache, three times, and prints each stage's median seconds
and its share of the whole; the detectors' share is the figure issue 23 asks to compare before and
after the facts layer. Shares are what to compare across machines; seconds are this machine's.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _import_first(*names: str):
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(f"none of {names}")


def stages(inputs: list[Path], runs: int = 3) -> dict[str, float]:
    from forensics.detectors import run_all
    from forensics.report import write_outputs
    from forensics.timeline import build_timeline

    findings_mod = _import_first("forensics.report.findings", "forensics.findings")  # after / before the move
    times: dict[str, list[float]] = {"timeline": [], "detectors": [], "outputs": []}
    for _ in range(runs):
        t0 = time.perf_counter()
        tl = build_timeline(inputs)
        t1 = time.perf_counter()
        findings, root = run_all(tl)
        t2 = time.perf_counter()
        doc = findings_mod.to_document(findings, root, tl)
        with tempfile.TemporaryDirectory() as out:
            write_outputs(doc, tl, Path(out), {"html", "md", "json", "sarif"})
        t3 = time.perf_counter()
        times["timeline"].append(t1 - t0)
        times["detectors"].append(t2 - t1)
        times["outputs"].append(t3 - t2)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="256MB", help="size of bench/run.py's synthetic set (default 256MB)")
    ap.add_argument("--input", type=Path, action="append", help="evidence to read instead of the synthetic set")
    ap.add_argument("--root", type=Path, default=HERE.parent, help="the checkout whose forensics to measure")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(args.root.resolve()))
    if args.input:
        inputs = args.input
    else:
        sys.path.insert(0, str(HERE))
        import run as bench_run  # the synthetic set's generator

        inputs = [Path(p) for p in bench_run.files_of(bench_run.dataset(bench_run.parse_size(args.size)))]
    got = stages(inputs, args.runs)
    total = sum(got.values())
    print(f"checkout {args.root.resolve()}; {len(inputs)} input(s); median of {args.runs} runs")
    for name, secs in got.items():
        print(f"  {name:<10} {secs:7.2f} s  {100 * secs / total:5.1f} %")
    print(f"  {'all':<10} {total:7.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

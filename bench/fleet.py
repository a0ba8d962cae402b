#!/usr/bin/env python3
"""Benchmark: `forensics fleet` — incidents per second on local cores, and Ray against the process pool.

    python bench/fleet.py                     # 200 bundles: 1 worker, all cores, Ray local (when installed)
    python bench/fleet.py -n 1000 --workers 1 --workers 4 --workers 16
    python bench/fleet.py --no-ray --json

The bundles are generated once per N under bench/_data/fleet-<N>/ from the scenario fixtures (mixed
causes, both engines; hosts, days and GPU identities varied: tests/fleet_bundles.py). Each
configuration runs `forensics fleet` in a child process into a fresh output folder and is timed end to
end (start-up, hashing, analysis, writing every report folder, the dataset and index.html). Printed:
wall time, incidents per second, peak RSS of the driver and of the largest worker, and whether the
dataset equals the first configuration's (it must: same incidents, same rows, whatever ran them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "_data"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

_CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from forensics.fleet import run_fleet
args = json.loads(sys.argv[1])
t0 = time.perf_counter()
res = run_fleet([args["bundles"]], Path(args["out"]), workers=args["workers"], ray=args["ray"])
wall = time.perf_counter() - t0
print(json.dumps({"wall_s": wall, "incidents": len(res.analysed), "failed": len(res.failed),
                  "driver_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "worker_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def bundles(n: int) -> Path:
    from fleet_bundles import make_bundles

    folder = DATA / f"fleet-{n}"
    if not (folder / ".complete").exists():
        shutil.rmtree(folder, ignore_errors=True)
        make_bundles(folder, n, seed=n)
        (folder / ".complete").write_text("")
    return folder


def dataset(out: Path):
    import polars as pl

    inc = pl.read_parquet(out / "incidents.parquet")
    keys = ["incident_id", "rule_id", "evidence_file", "evidence_line"]
    fnd = pl.scan_parquet(str(out / "findings" / "**" / "*.parquet"), hive_partitioning=True).collect().sort(keys)
    return inc, fnd


def run(folder: Path, workers: int, ray: str | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        out = Path(tmp) / "out"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        arg = json.dumps({"bundles": str(folder), "out": str(out), "workers": workers, "ray": ray})
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", _CHILD, arg], capture_output=True, text=True, env=env)
        total = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"fleet run failed ({workers} workers, ray={ray}):\n{proc.stderr[-2000:]}")
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        r.update(workers=workers, ray=ray, process_s=total, per_s=r["incidents"] / r["wall_s"], data=dataset(out))
        return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=200, help="bundles (default 200)")
    ap.add_argument("--workers", type=int, action="append", help="pool sizes to time (default: 1 and all cores)")
    ap.add_argument("--no-ray", action="store_true", help="skip Ray local mode")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    from forensics.fleet import default_workers

    cores = default_workers()
    sizes = a.workers or sorted({1, cores})
    folder = bundles(a.n)
    configs: list[tuple[int, str | None]] = [(w, None) for w in sizes]
    try:
        import ray  # noqa: F401

        if not a.no_ray:
            configs.append((cores, "local"))
    except ImportError:
        if not a.no_ray:
            print("ray is not installed: Ray local mode skipped (pip install 'forensics[ray]')", file=sys.stderr)
    results = [run(folder, w, r) for w, r in configs]
    ref_inc, ref_fnd = results[0]["data"]
    for r in results:
        inc, fnd = r.pop("data")
        r["same_dataset"] = bool(inc.equals(ref_inc) and fnd.equals(ref_fnd))
    if a.json:
        print(json.dumps({"bundles": a.n, "cores": cores, "results": results}, indent=2))
        return 0
    print(f"{a.n} bundles (bench/_data/fleet-{a.n}), {cores} core(s)")
    print(f"{'engine':<14} {'workers':>7} {'wall s':>8} {'incidents/s':>12} {'driver MB':>10} {'worker MB':>10}  same dataset")
    for r in results:
        name = f"ray {r['ray']}" if r["ray"] else "process pool"
        print(f"{name:<14} {r['workers']:>7} {r['wall_s']:>8.1f} {r['per_s']:>12.1f} {r['driver_peak_mb']:>10.0f} "
              f"{r['worker_peak_mb']:>10.0f}  {'yes' if r['same_dataset'] else 'NO'}")
    return 0 if all(r["same_dataset"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

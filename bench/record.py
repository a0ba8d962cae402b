#!/usr/bin/env python3
"""The flight recorder's own cost: CPU (share of one core) and RSS at 1 s and 5 s intervals.

    python bench/record.py                 # 60 s at each interval, this host's /proc and GPUs
    python bench/record.py --seconds 20    # shorter
    python bench/record.py --json

Each run starts ``forensics record`` as its own process on a scratch ring, lets it settle (imports and
the first samples are not the steady state), then reads its CPU time from ``/proc/PID/stat`` and its
resident set from ``/proc/PID/status`` over the measured window. The targets (issue 28): under 1% of
one core at the default 5 s interval, under 60 MB RSS, the ring never past its cap.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTLE_S = 3.0
TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def _rss_mb(pid: int, key: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(interval: float, seconds: float, max_mib: int) -> dict:
    ring = Path(tempfile.mkdtemp(prefix="forensics-record-bench-"))
    cmd = [sys.executable, "-m", "forensics.cli", "record", "--dir", str(ring), "--interval", f"{interval:g}",
           "--max-mib", str(max_mib)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(SETTLE_S)
        c0, t0 = _cpu_s(proc.pid), time.monotonic()
        peak, biggest_ring = 0.0, 0
        end = t0 + seconds
        while time.monotonic() < end:
            time.sleep(min(1.0, end - time.monotonic()))
            peak = max(peak, _rss_mb(proc.pid))
            biggest_ring = max(biggest_ring, sum(p.stat().st_size for p in ring.iterdir() if p.is_file()))
        c1, t1 = _cpu_s(proc.pid), time.monotonic()
        hwm = _rss_mb(proc.pid, "VmHWM")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    gpu = next((line.split("GPU: ", 1)[1] for line in err.decode(errors="replace").splitlines() if "GPU: " in line), "?")
    shutil.rmtree(ring, ignore_errors=True)
    return {"interval_s": interval, "window_s": round(t1 - t0, 1), "cpu_pct_of_one_core": round(100 * (c1 - c0) / (t1 - t0), 3),
            "rss_mb": round(peak, 1), "rss_high_water_mb": round(hwm, 1), "ring_bytes_max": biggest_ring,
            "ring_cap_bytes": max_mib * 2**20, "gpu": gpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="measured window per interval")
    ap.add_argument("--intervals", default="1,5", help="comma-separated sampling intervals (s)")
    ap.add_argument("--max-mib", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results = [measure(float(i), args.seconds, args.max_mib) for i in args.intervals.split(",")]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"forensics record, {os.cpu_count()} CPUs, GPU source: {results[0]['gpu']}")
    print(f"{'interval':>9} {'window':>8} {'CPU (% of a core)':>18} {'RSS':>9} {'RSS peak':>9} {'ring on disk':>13}")
    for r in results:
        print(f"{r['interval_s']:>8g}s {r['window_s']:>7g}s {r['cpu_pct_of_one_core']:>17.3f}% "
              f"{r['rss_mb']:>7.1f}MB {r['rss_high_water_mb']:>7.1f}MB {r['ring_bytes_max'] / 1024:>10.1f}KiB")


if __name__ == "__main__":
    main()

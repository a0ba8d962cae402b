#!/usr/bin/env python3
"""Fuzz the input layer for longer than the suite does: generated hostile archives, zips, compressed
streams, manifests and envelope lines (tests/hostile_inputs.py), each read and built into a timeline.

    python bench/fuzz_inputs.py                 # 5 minutes, a random seed (printed)
    python bench/fuzz_inputs.py --budget 3600 --seed 7

Every input must be read or refused with the one-line InputError within the per-example budget;
anything else is printed with the seed and ends the run with exit status 1. The last line counts
the outcomes, so a generator that only ever produces refusals shows.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=float, default=300, help="seconds to run (default 300)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: a fresh one, printed)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"seed {seed}, budget {args.budget:.0f} s", flush=True)

    from hostile_inputs import hostile_file
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    from test_fuzz_inputs import check_one

    outcomes: Counter[str] = Counter()
    deadline = time.monotonic() + args.budget

    @hseed(seed)
    @settings(max_examples=10**9, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(hostile_file())
    def run(case):
        if time.monotonic() > deadline:
            raise _Done
        name, data = case
        outcomes[f"{name.split('.', 1)[1] if '.' in name else name}: {check_one(name, data)}"] += 1

    try:
        run()
    except _Done:
        pass
    except Exception:  # noqa: BLE001 - the point: anything but InputError is a finding
        traceback.print_exc()
        print(f"FAILED with seed {seed}", file=sys.stderr)
        return 1
    print(", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    return 0


class _Done(BaseException):
    """The budget is spent (a BaseException: hypothesis must not take it for a failing example)."""


if __name__ == "__main__":
    sys.exit(main())

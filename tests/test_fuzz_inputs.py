"""The input layer fed generated hostile structures (tests/hostile_inputs.py): archives whose headers
lie, zips with overlapping entries, damaged compressed streams, manifests of any shape, envelope lines
nested deep or holding lone surrogates.

Whatever the input, reading it and building its timeline either succeeds or stops with the one-line
InputError (exit 3), within a bounded time; never another exception. The suite runs a small profile
with a fixed seed; ``FORENSICS_FUZZ=1`` runs 10,000 examples, ``python bench/fuzz_inputs.py`` for as
long as it is given.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from hostile_inputs import hostile_file
from hypothesis import HealthCheck, given, settings

from forensics.inputs import InputError
from forensics.timeline import build_timeline

SMALL = 60
#: One example's budget on a loaded two-core runner (they take tens of milliseconds).
EXAMPLE_S = 30


def check_one(name: str, data: bytes) -> str:
    """Read one hostile file as ``forensics report`` would; 'read' or 'refused', else the exception."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        t = time.monotonic()
        try:
            build_timeline([path], spill_dir=tmp)
            outcome = "read"
        except InputError as e:
            assert "\n" not in str(e)
            outcome = "refused"
        assert time.monotonic() - t < EXAMPLE_S
    return outcome


@settings(max_examples=SMALL, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(hostile_file())
def test_hostile_inputs_are_read_or_refused(case):
    name, data = case
    check_one(name, data)

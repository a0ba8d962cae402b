"""Generated bundles for the fleet tests and bench/fleet.py: scenario fixtures packed as `collect` would.

Each bundle is a ``.tar.gz`` with one top folder ``forensics-<host>-<stamp>/``, a ``manifest.json``
(docs/bundle.md: host, started/ended, tool) and the scenario's input files under ``added/``. What
varies between bundles of one scenario is what varies between real incidents of one cause: the host,
the day it was collected, the bundle's name; so every bundle has its own bytes (and sha256) while its
evidence, and hence its root cause, stays the scenario's.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as d:
...     made = make_bundles(Path(d), 3, seed=1)
...     [b.path.name.endswith(".tar.gz") for b in made], len({b.host for b in made}) >= 1
([True, True, True], True)
"""

from __future__ import annotations

import io
import json
import random
import re
import tarfile
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "fixtures" / "scenarios"

#: A mix of causes across categories and both engines; each keeps its root cause when bundled
#: (tests/test_fleet.py checks that against expected.json for every one of them).
MIX = (
    "seed_phase1_hicache_per_rank",
    "seed_phase2_graph_headroom",
    "oom_killer_after_overallocation",
    "xid_gpu_fallen_off_bus",
    "nccl_startup_timeout",
    "kv_pool_exhausted",
    "weights_do_not_fit",
    "vllm_graph_capture_oom",
    "vllm_ecc_uncorrectable",
    "healthy_start",
)

#: scenarios whose cause is the GPU itself (SGL-XID-001: fallen off the bus)
HARDWARE = ("xid_gpu_fallen_off_bus",)
BAD_HOST = "gpu-node-07"


@dataclass(frozen=True)
class Bundle:
    path: Path
    scenario: str
    host: str
    root_cause: str | None  # the scenario's expected root-cause rule id


def scenario_inputs(name: str) -> list[Path]:
    """The scenario's input files (``input/`` or the ``inputs`` its expected.json names)."""
    folder = SCENARIOS / name
    exp = json.loads((folder / "expected.json").read_text(encoding="utf-8"))
    files: list[Path] = []
    for rel in exp.get("inputs", ["input"]):
        p = (folder / rel).resolve()
        files.extend(sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p])
    return files


def expected_root(name: str) -> str | None:
    exp = json.loads((SCENARIOS / name / "expected.json").read_text(encoding="utf-8"))
    return exp.get("root_cause")


_GPU_UUID = re.compile(rb"GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def on_host(data: bytes, host: str) -> bytes:
    """The text as the same host would print it: every GPU UUID becomes that host's board's UUID (one
    per host and original UUID), so a board keeps its identity across a host's incidents and two hosts
    never share one."""
    return _GPU_UUID.sub(lambda m: f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, host + m.group().decode())}".encode(), data)


def write_bundle(path: Path, files: list[Path], host: str, started: datetime, extra: dict | None = None) -> None:
    """A bundle of these files as ``added/<name>`` with a manifest naming the host and collection time
    (``extra``: more manifest keys, e.g. ``tag``)."""
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    top = f"forensics-{host}-{stamp}"
    manifest = {
        "schema_version": 1,
        "tool": {"name": "forensics", "version": "0.1.0"},
        "host": host,
        "started_at": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "ended_at": (started + timedelta(seconds=41)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "gaps": [],
        "artifacts": [],
        **(extra or {}),
    }
    mtime = int(started.timestamp())
    with tarfile.open(path, "w:gz") as tar:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mtime, info.mode = len(data), mtime, 0o644
            tar.addfile(info, io.BytesIO(data))

        add("manifest.json", json.dumps(manifest, indent=2).encode())
        seen: set[str] = set()
        for f in files:
            name = f.name if f.name not in seen else f"{f.parent.name}-{f.name}"
            seen.add(name)
            add(f"added/{name}", on_host(f.read_bytes(), host))


def make_bundles(out: Path, n: int, seed: int = 0, scenarios: tuple[str, ...] = MIX, hosts: int = 12,
                 start: datetime = datetime(2026, 10, 1, tzinfo=UTC), days: int = 60) -> list[Bundle]:
    """``n`` bundles cycling through ``scenarios``, on ``hosts`` host names over ``days`` days.

    Hardware faults follow the board, as in a real fleet: two of every three bundles of a scenario
    whose cause is an Xid come from one bad host, the rest from anywhere."""
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    made = []
    hw_seen = 0
    for i in range(n):
        scen = scenarios[i % len(scenarios)]
        host = f"gpu-node-{rng.randrange(1, hosts + 1):02d}"
        if scen in HARDWARE:
            host = BAD_HOST if hw_seen % 3 != 2 else host
            hw_seen += 1
        started = start + timedelta(days=rng.randrange(days), seconds=rng.randrange(86400))
        path = out / f"forensics-{host}-{started:%Y%m%dT%H%M%SZ}-{i:04d}.tar.gz"
        write_bundle(path, scenario_inputs(scen), host, started)
        made.append(Bundle(path, scen, host, expected_root(scen)))
    return made

"""Recorder rings for the scenarios, written through the recorder's own writer (``RingWriter``) with a
simulated clock. ``python tests/record_scenarios.py`` rewrites them under fixtures/scenarios/;
tests/test_record_scenarios.py checks the committed files are what this writes.

Figures are our own and self-consistent: /proc/meminfo in kB, RSS and GPU memory in bytes.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forensics.record.ring import RingWriter  # noqa: E402

GIB = 1 << 30
KB = 1024
TOTAL_KB = 470_000_000  # 448.2 GiB
SCENARIOS = ROOT / "fixtures" / "scenarios"


def _t(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def _meminfo(used: float, shmem: float = 0.0) -> dict[str, int]:
    avail_kb = max(int(TOTAL_KB - used / KB), 0)
    return {"MemTotal": TOTAL_KB, "MemFree": max(avail_kb - 2_000_000, 0), "MemAvailable": avail_kb,
            "Buffers": 4096, "Cached": 2_100_000 + int(shmem / KB), "Shmem": int(shmem / KB),
            "SwapTotal": 0, "SwapFree": 0, "HugePages_Total": 0}


def _proc(pid: int, cmd: str, rss: float, ppid: int = 1, state: str = "S") -> dict:
    return {"pid": pid, "ppid": ppid, "state": state, "rss": int(rss), "comm": cmd.split(" ")[0][:15], "cmd": cmd}


def _sample(t: float, used: float, procs: list[dict], oom_kill: int = 0, shm_used: float = 0.0,
            shm_total: float = 64 * GIB, gpus: dict | None = None) -> dict:
    rec = {"t": t, "k": "sample", "meminfo": _meminfo(used, shm_used), "vmstat": {"oom_kill": oom_kill},
           "cgroups": [{"path": "/system.slice/sglang.service", "v": 2, "current": int(sum(p["rss"] for p in procs)),
                        "max": None, "events": {"low": 0, "high": 0, "max": 0, "oom": oom_kill, "oom_kill": 0}}],
           "shm": {"total": int(shm_total), "used": int(shm_used)}, "procs": procs}
    if gpus is not None:
        rec["gpus"] = gpus
    else:
        rec["gaps"] = {"gpus": "no GPU source: no NVML and no nvidia-smi on PATH"}
    return rec


def _write(folder: Path, host: str, records: Iterator[dict], interval_s: float, segment_s: float = 300.0) -> None:
    if folder.exists():
        shutil.rmtree(folder)
    clock = {"t": 0.0}
    w = RingWriter(folder, host, segment_s=segment_s, interval_s=interval_s, clock=lambda: clock["t"], pid=0)
    for rec in records:
        clock["t"] = rec["t"]
        w.append(rec)
    w.close(now=clock["t"])


LAUNCH = ("python3 -m sglang.launch_server --model-path /models/llama-70b --tp 8 "
          "--enable-hierarchical-cache --hicache-size 60")
POOL = 60e9


def pools_pinned_until_oom() -> Iterator[dict]:
    """TP8 with 60 GB pools per rank on a 448 GiB host: each rank pins its pool twenty seconds after the
    one before; the eighth runs the host out and the OOM killer takes rank 7 (the counter rises, it exits)."""
    t0, launch, first_pool = _t("2026-11-20T10:00:00"), _t("2026-11-20T10:01:00"), _t("2026-11-20T10:02:00")
    base, per_proc, ceiling = 12 * GIB, 2.5 * GIB, TOTAL_KB * KB - 0.3 * GIB
    yield {"t": t0, "k": "event", "event": "start", "note": "oom_score_adj -900", "interval_s": 5.0}
    killed = False
    for i in range(80):
        t = t0 + 5 * i
        procs, used, cut = [], base, False
        if t == launch:
            for pid, cmd in [(5000, LAUNCH)] + [(5001 + r, f"sglang::scheduler_TP{r}") for r in range(8)]:
                yield {"t": t, "k": "event", "event": "spawn", "pid": pid, "ppid": 1 if pid == 5000 else 5000,
                       "comm": cmd.split(" ")[0][:15], "cmd": cmd}
        if t >= launch:
            procs.append(_proc(5000, LAUNCH, 1.5 * GIB))
            used += 1.5 * GIB
            for r in range(8):
                if killed and r == 7:
                    continue
                start = first_pool + 20 * r
                rss = per_proc + (0.0 if t < start else (POOL / 2 if t < start + 5 else POOL))
                if used + rss > ceiling:  # the host has run out: the pool gets only what is left
                    rss, cut = ceiling - used, True
                procs.append(_proc(5001 + r, f"sglang::scheduler_TP{r}", rss, ppid=5000))
                used += rss
        yield _sample(t, used, procs, oom_kill=1 if killed else 0)
        if cut and not killed:  # the OOM killer takes the rank that was pinning
            victim = procs[-1]
            yield {"t": t + 4, "k": "event", "event": "exit", "pid": victim["pid"], "comm": victim["comm"],
                   "cmd": victim["cmd"], "rss": victim["rss"]}
            killed = True


def rss_leak_until_oom() -> Iterator[dict]:
    """A scheduler whose RSS grows about 66 GiB an hour for six hours until the OOM killer takes it."""
    t0 = _t("2026-11-21T02:00:00")
    base = 20 * GIB
    launcher = _proc(7000, "python3 -m sglang.launch_server --model-path /models/qwen-32b --tp 1", 1.2 * GIB)
    yield {"t": t0 - 60, "k": "event", "event": "start", "note": "oom_score_adj -900", "interval_s": 60.0}
    for i in range(0, 7 * 60):
        t = t0 + 60 * i
        rss = 6 * GIB + i * 1.1 * GIB + (0.2 * GIB if i % 7 == 3 else 0.0)  # steady, with a little noise
        used = base + launcher["rss"] + rss
        if used > TOTAL_KB * KB - 0.4 * GIB:
            yield {"t": t, "k": "event", "event": "exit", "pid": 7001, "comm": "sglang::schedul",
                   "cmd": "sglang::scheduler_TP0", "rss": int(rss - 0.5 * GIB)}
            yield _sample(t, base + launcher["rss"], [launcher], oom_kill=1)
            yield {"t": t + 30, "k": "event", "event": "exit", "pid": 7000, "comm": launcher["comm"],
                   "cmd": launcher["cmd"], "rss": launcher["rss"]}
            yield _sample(t + 60, base, [], oom_kill=1)
            return
        yield _sample(t, used, [launcher, _proc(7001, "sglang::scheduler_TP0", rss, ppid=7000)])


def _gpus(used: list[float], owners: list[tuple[int, int, float]]) -> dict:
    return {"source": "nvml",
            "gpus": [{"index": i, "uuid": f"GPU-1111111{i}-2222-3333-4444-555555555555", "name": "NVIDIA H200",
                      "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0", "used": int(u), "total": 150_754_820_096,
                      "util": 0.0} for i, u in enumerate(used)],
            "procs": [{"gpu": g, "pid": pid, "used": int(b)} for g, pid, b in owners]}


def gpu_held_after_owner_died() -> Iterator[dict]:
    """TP2: at 03:10 both schedulers are killed; rank 0 exits and frees GPU 0, rank 1 is left in D state
    and GPU 1 keeps 130 GiB for the ten minutes after."""
    t0, kill = _t("2026-11-22T03:00:00"), _t("2026-11-22T03:10:00")
    launcher = _proc(6000, "python3 -m sglang.launch_server --model-path /models/m --tp 2", 1.1 * GIB)
    yield {"t": t0 - 10, "k": "event", "event": "start", "note": "oom_score_adj -900", "interval_s": 10.0}
    for i in range(0, 120):
        t = t0 + 10 * i
        if t < kill:
            procs = [launcher, _proc(6001, "sglang::scheduler_TP0", 9 * GIB, 6000),
                     _proc(6002, "sglang::scheduler_TP1", 9 * GIB, 6000)]
            gpus = _gpus([130 * GIB, 130 * GIB], [(0, 6001, 129.5 * GIB), (1, 6002, 129.5 * GIB)])
        else:
            if t == kill:
                for p in (launcher, {"pid": 6001, "comm": "sglang::schedul", "cmd": "sglang::scheduler_TP0",
                                     "rss": 9 * GIB}):
                    yield {"t": t, "k": "event", "event": "exit", "pid": p["pid"], "comm": p["comm"],
                           "cmd": p["cmd"], "rss": int(p["rss"])}
            procs = [_proc(6002, "sglang::scheduler_TP1", 8.7 * GIB, 1, state="D")]
            gpus = _gpus([0.5 * GIB, 130 * GIB], [(1, 6002, 129.5 * GIB)])
        yield _sample(t, 14 * GIB + sum(p["rss"] for p in procs), procs, gpus=gpus)


def shm_fills_across_restarts() -> Iterator[dict]:
    """Four runs of twenty minutes, each SIGKILLed and leaving 3.5 GiB in a 16 GiB /dev/shm."""
    t0 = _t("2026-11-23T08:00:00")
    yield {"t": t0 - 30, "k": "event", "event": "start", "note": "oom_score_adj -900", "interval_s": 30.0}
    left = 0.5 * GIB
    for run in range(4):
        start = t0 + run * 1500
        base_pid = 8000 + run * 10
        procs = [_proc(base_pid, "python3 -m sglang.launch_server --model-path /models/m --tp 2", 1.0 * GIB),
                 _proc(base_pid + 1, "sglang::scheduler_TP0", 6 * GIB, base_pid),
                 _proc(base_pid + 2, "sglang::scheduler_TP1", 6 * GIB, base_pid)]
        for i in range(40):  # twenty minutes at 30 s
            shm = left + min(i, 7) * 0.5 * GIB
            yield _sample(start + 30 * i, 16 * GIB + 13 * GIB + shm, procs, shm_used=shm, shm_total=16 * GIB)
        left += 3.5 * GIB
        for p in procs:
            yield {"t": start + 1200, "k": "event", "event": "exit", "pid": p["pid"], "comm": p["comm"],
                   "cmd": p["cmd"], "rss": p["rss"]}
        for i in range(1, 10):  # five minutes with nothing running, the segments left behind
            yield _sample(start + 1200 + 30 * i, 16 * GIB + left, [], shm_used=left, shm_total=16 * GIB)


RINGS: dict[str, tuple[Callable[[], Iterator[dict]], str, float]] = {
    "record_pools_pinned_until_oom": (pools_pinned_until_oom, "gpu-node-17", 5.0),
    "record_rss_leak_until_oom": (rss_leak_until_oom, "gpu-node-18", 60.0),
    "record_gpu_held_after_owner_died": (gpu_held_after_owner_died, "gpu-node-19", 10.0),
    "record_shm_fills_across_restarts": (shm_fills_across_restarts, "gpu-node-20", 30.0),
}


def write_ring(name: str, folder: Path) -> None:
    fn, host, interval = RINGS[name]
    _write(folder, host, fn(), interval, segment_s=300.0 if interval <= 10 else 3600.0)


if __name__ == "__main__":
    for scenario in RINGS:
        write_ring(scenario, SCENARIOS / scenario / "input" / "record")
        print(f"wrote {SCENARIOS / scenario / 'input' / 'record'}")

"""SGL-REC-001 / 002 / 003: what only a history shows — the flight recorder's series (``forensics record``).

* SGL-REC-001 — an inference process whose RSS grew steadily (hours, not one pool's allocation) until
  the OOM killer took it: a host memory leak over time. The kernel's victim line (``oom_kill`` rows) or
  the recorder's own OOM-kill counter (``/proc/vmstat`` ``oom_kill``, a cgroup's ``memory.events``) rising
  while the process disappeared says it was the OOM killer (proc(5), the kernel's cgroup-v2 docs).
* SGL-REC-002 — GPU memory still held after its owner died: the GPU's compute processes exited, or were
  left in D/Z state, and the GPU kept its memory for the samples after; the finding names the minute.
  A CUDA context is released when its process exits; memory that outlives the owner is a stranded
  context (a process stuck in the driver; ``reference/nvidia-smi.md``: compute-apps lists no owner).
* SGL-REC-003 — ``/dev/shm`` filling across restarts: each run of the server leaves files behind
  (NCCL and PyTorch shared-memory segments of killed processes are not unlinked), so the used space at
  each start is higher than at the one before.

:func:`recorded_climb` serves SGL-HOST-001: host memory climbing step by step as the ranks pinned their
pools, read from the series (observed, not inferred from the flags).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from forensics.facts.rows import Row, attrs, rows
from forensics.model import Finding, Timeline

from ._common import GIB, fmt_gib, make_finding

RECORD = "record"
LEAK_MIN_SPAN_S = 1800.0  # a leak is a trend over half an hour at least, not one allocation
LEAK_MIN_GROWTH = 2 * GIB
LEAK_MAX_STEP_SHARE = 0.5  # no single sample-to-sample jump holds more than half of the growth
LEAK_RISING_QUARTERS = 3  # of the four quarters of the series, at least three rose
STRANDED_MIN_BYTES = GIB
STRANDED_MIN_S = 60.0  # held this long after the owner died (a context is freed in a second or two)
SHM_MIN_RESTARTS = 2
SHM_MIN_GROWTH = GIB


def _recorded(tl: Timeline, *kinds: str) -> list[Row]:
    out = [r for r in rows(tl, *kinds) if r.get("source") == RECORD and r.get("ts") is not None]
    out.sort(key=lambda r: r["ts"])
    return out


def _hm(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%d %H:%M UTC")


# -- host memory climbing while the pools were pinned (for SGL-HOST-001)


@dataclass
class Climb:
    """Host memory's rise in the recorded series: the steps, the samples that show them, how low it got."""

    steps: int
    rise_bytes: int
    before: Row
    peak: Row
    step_rows: list[Row]
    min_avail_bytes: int | None


def recorded_climb(tl: Timeline, step_bytes: float, since: datetime | None = None,
                   until: datetime | None = None) -> Climb | None:
    """Steps of at least ``step_bytes`` (a run of rising samples is one step) in the recorded host memory
    between ``since`` and ``until``; None without a recorded series there."""
    series = [r for r in _recorded(tl, "host_memory") if r.get("used_bytes") is not None
              and (until is None or r["ts"] <= until)]
    if since is not None:
        before = [r for r in series if r["ts"] < since]
        series = before[-1:] + [r for r in series if r["ts"] >= since]
    if len(series) < 2:
        return None
    steps, step_rows = 0, []
    run_start = None
    for a, b in zip(series, series[1:], strict=False):
        if b["used_bytes"] > a["used_bytes"]:
            run_start = a if run_start is None else run_start
            continue
        if run_start is not None and a["used_bytes"] - run_start["used_bytes"] >= step_bytes:
            steps += 1
            step_rows.append(a)
        run_start = None
    last = series[-1]
    if run_start is not None and last["used_bytes"] - run_start["used_bytes"] >= step_bytes:
        steps += 1
        step_rows.append(last)
    if not steps:
        return None
    peak = max(series, key=lambda r: r["used_bytes"])
    avails = [r["avail_bytes"] for r in series if r.get("avail_bytes") is not None]
    return Climb(steps, int(peak["used_bytes"] - series[0]["used_bytes"]), series[0], peak, step_rows,
                 min(avails) if avails else None)


# -- SGL-REC-001: a process that grew until the OOM killer took it


def _oom_evidence(tl: Timeline, pid: int, gone_at: datetime, interval_s: float) -> Row | None:
    """The kernel's kill of ``pid``, else a recorded OOM-kill counter rise at the sample it disappeared."""
    for r in rows(tl, "oom_kill"):
        if r.get("pid") == pid:
            return r
    for r in _recorded(tl, "oom_kill_count"):
        if abs((r["ts"] - gone_at).total_seconds()) <= 2 * interval_s + 1:
            return r
    return None


def _steady(series: list[Row]) -> bool:
    vals = [r["used_bytes"] for r in series]
    growth = vals[-1] - vals[0]
    if growth < LEAK_MIN_GROWTH:
        return False
    biggest = max(b - a for a, b in zip(vals, vals[1:], strict=False))
    if biggest > LEAK_MAX_STEP_SHARE * growth:
        return False
    q = len(vals) // 4
    if q < 2:
        return False
    rising = sum(vals[min((i + 1) * q, len(vals) - 1)] > vals[i * q] for i in range(4))
    return rising >= LEAK_RISING_QUARTERS


def _leaks(tl: Timeline) -> list[Finding]:
    by_pid: dict[int, list[Row]] = {}
    for r in _recorded(tl, "process_sample"):
        if r.get("pid") is not None and r.get("used_bytes") is not None:
            by_pid.setdefault(int(r["pid"]), []).append(r)
    exits = {int(r["pid"]): r for r in _recorded(tl, "process_exit") if r.get("pid") is not None}
    out = []
    for pid, series in by_pid.items():
        gone = exits.get(pid)
        if gone is None or len(series) < 8:
            continue
        span = (series[-1]["ts"] - series[0]["ts"]).total_seconds()
        if span < LEAK_MIN_SPAN_S or not _steady(series):
            continue
        interval = span / max(len(series) - 1, 1)
        oom = _oom_evidence(tl, pid, gone["ts"], interval)
        if oom is None:
            continue
        first, last = series[0], series[-1]
        growth = last["used_bytes"] - first["used_bytes"]
        rate = growth / (span / 3600)
        who = attrs(last).get("args") or last.get("comm") or str(pid)
        killer = ("the kernel OOM killer killed it" if oom.get("kind") == "oom_kill"
                  else "it disappeared as the OOM-kill counter rose")
        quarter = [series[i * (len(series) // 4)] for i in range(4)]
        out.append(make_finding(
            "SGL-REC-001",
            summary=(f"Process {pid} ({str(who)[:80]}) grew steadily from {fmt_gib(first['used_bytes'])} to "
                     f"{fmt_gib(last['used_bytes'])} RSS over {span / 3600:.1f} h (about {fmt_gib(rate)} an hour) "
                     f"until {killer} at {_hm(gone['ts'])}: host memory leaked over time, recorded by forensics "
                     "record."),
            evidence=[first, *quarter[1:], last, gone, oom],
            ranks=[last["tp_rank"]] if last.get("tp_rank") is not None else [],
            figures={"pid": pid, "rss_first_bytes": int(first["used_bytes"]), "rss_last_bytes": int(last["used_bytes"]),
                     "growth_bytes": int(growth), "growth_per_hour_bytes": int(rate), "span_s": round(span),
                     "samples": len(series), "killed_at": gone["ts"].isoformat(), "observed": "recorded series"},
            actions=[
                f"Find what grows in process {pid}: the recorded RSS rose {fmt_gib(rate)} an hour. Compare the "
                "engine version's changelog for host-memory leaks (tokenizer caches, request state kept after "
                "abort, metrics) and upgrade; `py-spy dump`/`memray` on a live process shows the holder.",
                "Until fixed: restart the server on a schedule shorter than the time to exhaustion, or cap it with "
                "a cgroup memory limit so the kill is contained.",
            ],
        ))
    return out


# -- SGL-REC-002: GPU memory still held after its owner died


def _stranded(tl: Timeline) -> list[Finding]:
    gpu_rows = [r for r in _recorded(tl, "gpu_memory") if r.get("gpu") is not None and r.get("used_bytes") is not None]
    if not gpu_rows:
        return []
    owners: dict[int, set[int]] = {}
    for r in _recorded(tl, "gpu_process_sample"):
        if r.get("gpu") is not None and r.get("pid") is not None:
            owners.setdefault(int(r["gpu"]), set()).add(int(r["pid"]))
    exits = {int(r["pid"]): r for r in _recorded(tl, "process_exit") if r.get("pid") is not None}
    stuck: dict[int, Row] = {}  # pid → its first sample in D or Z state
    for r in _recorded(tl, "process_sample"):
        if attrs(r).get("state") in ("D", "Z") and r.get("pid") is not None:
            stuck.setdefault(int(r["pid"]), r)
    out = []
    for gpu, pids in sorted(owners.items()):
        deaths = [exits.get(p) or stuck.get(p) for p in pids]
        if not deaths or any(d is None for d in deaths):
            continue  # an owner still alive and well: its memory is its own
        died = max(deaths, key=lambda d: d["ts"])
        after = [r for r in gpu_rows if r["gpu"] == gpu and r["ts"] > died["ts"]]
        before = [r for r in gpu_rows if r["gpu"] == gpu and r["ts"] <= died["ts"]]
        if len(after) < 2 or (after[-1]["ts"] - died["ts"]).total_seconds() < STRANDED_MIN_S:
            continue
        floor = max(STRANDED_MIN_BYTES, 0.5 * (before[-1]["used_bytes"] if before else 0))
        if any(r["used_bytes"] < floor for r in after):
            continue  # released (or mostly) after the death
        held = min(r["used_bytes"] for r in after)
        several = len(pids) > 1
        how = ("exited" if all(d.get("kind") == "process_exit" for d in deaths)
               else ("were" if several else "was") + " left in D/Z state")
        out.append(make_finding(
            "SGL-REC-002",
            summary=(f"GPU {gpu} still held {fmt_gib(held)} from {_hm(died['ts'])}, when its owner"
                     f"{'s' if several else ''} ({', '.join(map(str, sorted(pids)))}) {how}, to the last "
                     f"recorded sample at {_hm(after[-1]['ts'])}: a stranded CUDA context; a relaunch on this "
                     "GPU will fail until it is freed."),
            evidence=[*(before[-1:]), *deaths, after[0], after[-1]],
            gpus=[gpu],
            figures={"gpu": gpu, "held_bytes": int(held), "stranded_since": died["ts"].isoformat(),
                     "owner_pids": sorted(pids), "last_sample": after[-1]["ts"].isoformat(),
                     "observed": "recorded series"},
            actions=[
                f"Find who still has the device open: `fuser -v /dev/nvidia{gpu}`; a process in D state is stuck in "
                "the driver and cannot be killed — the GPU needs a reset (`nvidia-smi -r -i N` with nothing on it) "
                "or the host a reboot.",
                "Before relaunching, check `nvidia-smi --query-compute-apps=pid,used_memory --format=csv` is empty.",
            ],
        ))
    return out


# -- SGL-REC-003: /dev/shm filling across restarts


def _starts(tl: Timeline) -> list[datetime]:
    """When each set of engine processes first appeared: a new pid after an exit that followed the last start."""
    exits = sorted(r["ts"] for r in _recorded(tl, "process_exit"))
    seen: set[int] = set()
    starts: list[datetime] = []
    for r in _recorded(tl, "process_sample"):
        pid = r.get("pid")
        if pid is None or pid in seen:
            continue
        seen.add(pid)
        if not starts or any(starts[-1] < t <= r["ts"] for t in exits):
            starts.append(r["ts"])
    return starts


def _shm_filling(tl: Timeline) -> list[Finding]:
    shm = [r for r in _recorded(tl, "shm_usage") if r.get("used_bytes") is not None and r.get("total_bytes")]
    starts = _starts(tl)
    if len(shm) < 2 or len(starts) < SHM_MIN_RESTARTS + 1:
        return []
    at_start = []
    for t in starts:
        prior = [r for r in shm if r["ts"] <= t]
        if prior:
            at_start.append(prior[-1])
    if len(at_start) < SHM_MIN_RESTARTS + 1:
        return []
    used = [r["used_bytes"] for r in at_start]
    if any(b <= a for a, b in zip(used, used[1:], strict=False)):
        return []  # not filling at every restart
    growth = used[-1] - used[0]
    total = at_start[-1]["total_bytes"]
    if growth < max(SHM_MIN_GROWTH, 0.1 * total):
        return []
    last = shm[-1]
    full = last["used_bytes"] / total
    return [make_finding(
        "SGL-REC-003",
        summary=(f"/dev/shm filled across {len(at_start) - 1} restarts: {fmt_gib(used[0])} used at the first start, "
                 f"{fmt_gib(used[-1])} at the last, {full:.0%} of {fmt_gib(total)} at the last sample. Killed runs "
                 "leave their shared-memory segments behind; the next run that needs /dev/shm dies of SIGBUS or "
                 "hangs in NCCL setup."),
        evidence=[*at_start, last],
        severity="high" if full >= 0.9 else None,
        figures={"restarts": len(at_start) - 1, "used_at_starts_bytes": [int(u) for u in used],
                 "shm_total_bytes": int(total), "used_last_bytes": int(last["used_bytes"]), "observed": "recorded series"},
        actions=["List what is left: `ls -la /dev/shm` (torch_*, nccl-*, sem.* of processes that no longer exist) and "
                 "remove the files of dead processes before relaunching.",
                 "Stop the server with SIGTERM and wait for it (a SIGKILL leaves the segments); in containers give "
                 "each run its own /dev/shm (`--shm-size`, an emptyDir with medium Memory)."],
    )]


def detect(tl: Timeline) -> list[Finding]:
    if not any(r.get("source") == RECORD for r in rows(tl, "host_memory", "process_sample", "gpu_memory", "shm_usage")):
        return []
    return [*_leaks(tl), *_stranded(tl), *_shm_filling(tl)]

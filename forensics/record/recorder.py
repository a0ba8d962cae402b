"""The recorder's loop: one sample per interval into the ring, GPU and process probes under timeouts.

Host figures (meminfo, vmstat, /dev/shm) are read on the loop itself: they are kernel-global and never
wait on another process. The engine-process scan (``/proc/PID/cmdline`` takes the target's memory-map
lock) and the GPU query (a wedged driver blocks NVML and nvidia-smi alike) each run on a
:class:`~forensics.record.gpu.TimedProbe`, so neither can stall the host samples; a probe that does not
answer in time is recorded as a ``stall`` event and a gap, and is not called again until it returns.

Time is injected (``clock``, ``sleep``) so the tests drive a simulated day without sleeping.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import gpu as gpu_mod
from .ring import DEFAULT_DIR, DEFAULT_MAX_AGE_S, DEFAULT_MAX_BYTES, DEFAULT_SEGMENT_S, RingWriter
from .sampler import HostSampler

#: what the recorder asks of the kernel's OOM killer: spare it (−1000 = never) where permitted
OOM_SCORE_ADJ = -900


@dataclass
class RecordOptions:
    folder: Path = DEFAULT_DIR
    interval_s: float = 5.0
    max_bytes: int = DEFAULT_MAX_BYTES
    max_age_s: float = DEFAULT_MAX_AGE_S
    segment_s: float = DEFAULT_SEGMENT_S
    duration_s: float | None = None  # stop after this long (tests, the benchmark, `--duration`)
    gpu: str = "auto"  # auto | nvml | smi | none
    gpu_timeout_s: float = 5.0
    proc_timeout_s: float = 5.0
    proc_root: Path = Path("/proc")
    cgroup_root: Path = Path("/sys/fs/cgroup")
    shm: Path = Path("/dev/shm")
    nvml_module: Any = None  # tests inject a fake NVML
    nvidia_smi: str | None = None
    host: str = field(default_factory=lambda: socket.gethostname() or "unknown-host")
    progress: Callable[[str], None] | None = None


def lower_oom_score(proc_root: Path = Path("/proc"), value: int = OOM_SCORE_ADJ) -> str:
    """Ask not to be the OOM killer's victim; lowering needs CAP_SYS_RESOURCE, so say what happened."""
    try:
        (proc_root / "self" / "oom_score_adj").write_text(str(value))
        return f"oom_score_adj {value}"
    except OSError as exc:
        return f"oom_score_adj unchanged ({exc.strerror or exc})"


class Recorder:
    """Samples into a :class:`RingWriter`; ``step(now)`` takes one sample (the loop calls it)."""

    def __init__(self, opts: RecordOptions, clock: Callable[[], float] = time.time) -> None:
        self.opts, self.clock = opts, clock
        self.writer = RingWriter(opts.folder, opts.host, max_bytes=opts.max_bytes, max_age_s=opts.max_age_s,
                                 segment_s=opts.segment_s, interval_s=opts.interval_s, clock=clock)
        self.host = HostSampler(opts.proc_root, opts.cgroup_root, opts.shm)
        self.proc_probe = gpu_mod.TimedProbe(self.host.processes, opts.proc_timeout_s)
        self.gpu_source: Any = None
        self.gpu_gap: str | None = None
        self.gpu_probe: gpu_mod.TimedProbe | None = None
        if opts.gpu == "none":
            self.gpu_gap = "GPU sampling off (--gpu none)"
        else:
            try:
                self.gpu_source = gpu_mod.open_source(opts.gpu, opts.nvml_module, opts.nvidia_smi, opts.gpu_timeout_s)
                self.gpu_probe = gpu_mod.TimedProbe(self.gpu_source.query, opts.gpu_timeout_s)
            except gpu_mod.NoGpu as exc:
                self.gpu_gap = f"no GPU source: {exc}"
        self.samples = 0
        self._last_procs: dict[int, dict[str, Any]] | None = None  # None until the first scan

    def start_event(self, note: str) -> None:
        self.writer.append({"t": self.clock(), "k": "event", "event": "start", "note": note,
                            "gpu_source": getattr(self.gpu_source, "name", None), "interval_s": self.opts.interval_s,
                            "pid": os.getpid()})

    def step(self, now: float | None = None) -> dict[str, Any]:
        now = self.clock() if now is None else now
        rec: dict[str, Any] = {"t": now, "k": "sample", **self.host.host()}
        gaps = rec["gaps"]
        status, got = self.proc_probe.call(now)
        if status == "ok":
            rec.update(got)
            self._process_events(now, got["procs"])
        else:
            gaps["procs"] = self._gap_words("process scan", status, got)
            if status == "stalled":
                self.writer.append({"t": now, "k": "event", "event": "stall", "probe": "procs",
                                    "seconds": round(float(got), 3)})
        if self.gpu_probe is not None:
            status, got = self.gpu_probe.call(now)
            if status == "ok":
                rec["gpus"] = {"source": self.gpu_source.name, **got}
            else:
                gaps["gpus"] = self._gap_words(f"GPU query ({self.gpu_source.name})", status, got)
                if status == "stalled":
                    self.writer.append({"t": now, "k": "event", "event": "stall", "probe": "gpus",
                                        "seconds": round(float(got), 3)})
        else:
            gaps["gpus"] = self.gpu_gap
        if not gaps:
            del rec["gaps"]
        self.writer.append(rec)
        self.samples += 1
        return rec

    def _gap_words(self, what: str, status: str, got: Any) -> str:
        if status == "stalled":
            return f"{what} did not answer in {float(got):.1f} s (driver or process stuck?)"
        if status == "busy":
            return f"{what} still stuck since {float(got):.0f} s"
        return f"{what} failed: {got}"

    def _process_events(self, now: float, procs: list[dict[str, Any]]) -> None:
        """``spawn`` / ``exit`` events for engine processes that appeared / were there last sample and are gone."""
        current = {p["pid"]: p for p in procs}
        if self._last_procs is not None:
            for pid, p in current.items():
                if pid not in self._last_procs:
                    self.writer.append({"t": now, "k": "event", "event": "spawn", "pid": pid, "ppid": p.get("ppid"),
                                        "comm": p.get("comm"), "cmd": p.get("cmd")})
            for pid, p in self._last_procs.items():
                if pid not in current:
                    self.writer.append({"t": now, "k": "event", "event": "exit", "pid": pid, "comm": p.get("comm"),
                                        "cmd": p.get("cmd"), "rss": p.get("rss")})
        self._last_procs = current

    def close(self) -> None:
        self.writer.append({"t": self.clock(), "k": "event", "event": "stop"})
        self.writer.close()
        if self.gpu_source is not None:
            with contextlib.suppress(Exception):
                self.gpu_source.close()


def run(opts: RecordOptions, clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep, should_stop: Callable[[], bool] = lambda: False) -> Recorder:
    """Sample every ``interval_s`` until stopped (SIGTERM/SIGINT, ``duration_s``, ``should_stop``)."""
    stop = {"now": False}

    def _stop(_sig: int, _frame: Any) -> None:
        stop["now"] = True

    with contextlib.suppress(ValueError):  # not the main thread: the caller stops us
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    note = lower_oom_score(opts.proc_root)
    rec = Recorder(opts, clock)
    rec.start_event(note)
    say = opts.progress or (lambda _line: None)
    say(f"record: {opts.folder}, every {opts.interval_s:g} s, {note}, "
        f"GPU: {getattr(rec.gpu_source, 'name', None) or rec.gpu_gap}")
    started = clock()
    next_at = started
    try:
        while not stop["now"] and not should_stop():
            now = clock()
            if opts.duration_s is not None and now - started >= opts.duration_s:
                break
            if now >= next_at:
                rec.step(now)
                next_at += opts.interval_s
                if next_at < now:  # we fell behind (a stall, a suspended host): do not burst to catch up
                    next_at = now + opts.interval_s
            wait = next_at - clock()
            if opts.duration_s is not None:
                wait = min(wait, started + opts.duration_s - clock())
            if wait > 0:
                sleep(wait)
    finally:
        rec.close()
    return rec

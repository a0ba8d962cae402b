"""One sample of the host, read from files and libraries (no shell, no child process but nvidia-smi).

A sample is one JSON-ready dict::

    {"t": 1764584100.0, "k": "sample",
     "meminfo": {"MemTotal": 482000000, …},           # /proc/meminfo as printed: kB, HugePages_* counts
     "vmstat": {"oom_kill": 3},                        # /proc/vmstat (Linux 4.13+): the OOM-kill counter
     "cgroups": [{"path": "/system.slice/sglang.service", "v": 2, "current": …, "max": … | None,
                  "events": {"oom_kill": 0, …}}],      # memory.current/max/events; v1 usage/limit/oom_control
     "shm": {"total": …, "used": …},                   # statvfs("/dev/shm")
     "procs": [{"pid": 4242, "ppid": 1, "state": "S", "rss": …, "comm": "sglang::schedul",
                "cmd": "sglang::scheduler_TP0"}],      # SGLang/vLLM processes only, by title and argv
     "gpus": {"source": "nvml", "gpus": […], "procs": […]},
     "gaps": {"gpus": "no NVML and no nvidia-smi on PATH"}}

Sources: proc(5) for ``meminfo``, ``vmstat``, ``PID/statm`` (resident pages), ``PID/stat`` (state, ppid),
``PID/cmdline``, ``PID/comm``, ``PID/cgroup``; the kernel's cgroup v2 docs (``memory.current``,
``memory.max``, ``memory.events``) and v1 (``memory.usage_in_bytes``, ``memory.limit_in_bytes``,
``memory.oom_control``). Process identity: the rules ``ps`` rows use
(:func:`parsers.proc_titles.process_identity`): titles ``sglang::scheduler_TP3``, ``VLLM::Worker_TP1``, the launchers' argv.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from parsers.proc_titles import process_identity

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
MAX_CMD = 512  # characters of argv kept per process
MAX_PROCS = 256  # engine processes kept per sample (the largest by RSS)
MAX_CGROUPS = 4
CGROUP_V2_FILES = ("memory.current", "memory.max", "memory.peak", "memory.high", "memory.swap.current")
CGROUP_V1_FILES = {"memory.usage_in_bytes": "current", "memory.limit_in_bytes": "max",
                   "memory.max_usage_in_bytes": "peak", "memory.failcnt": "failcnt"}
#: v1 reports "no limit" as a page-rounded LONG_MAX
V1_UNLIMITED = 1 << 62


def _read(path: Path | str, limit: int = 64 * 1024) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode(errors="replace")
    except OSError:
        return None


def read_meminfo(proc: Path) -> dict[str, int] | None:
    text = _read(proc / "meminfo")
    if text is None:
        return None
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if key and parts and parts[0].isdigit():
            out[key.strip()] = int(parts[0])
    return out or None


def read_vmstat(proc: Path) -> dict[str, int] | None:
    text = _read(proc / "vmstat")
    if text is None:
        return None
    for line in text.splitlines():
        key, _, val = line.partition(" ")
        if key == "oom_kill" and val.strip().isdigit():
            return {"oom_kill": int(val)}
    return None


def _int_or_max(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    if text == "max" or not text.isdigit():
        return None
    n = int(text)
    return None if n >= V1_UNLIMITED else n


def _keyed(text: str | None) -> dict[str, int]:
    out = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def cgroup_memory_entries(cgroup_text: str, root: Path) -> list[tuple[str, int, Path]]:
    """Every memory-controller line of a ``/proc/PID/cgroup`` text: (its path, cgroup version, the folder
    under ``root``), v2's unified line and v1's memory line alike (``collect`` takes all of them)."""
    out = []
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hier, controllers, path = parts
        rel = path.strip().lstrip("/")
        if hier == "0" and controllers == "":
            out.append(("/" + rel, 2, root / rel if rel else root))
        elif "memory" in controllers.split(","):
            out.append(("/" + rel, 1, root / "memory" / rel if rel else root / "memory"))
    return out


def cgroup_dirs(cgroup_text: str, root: Path) -> list[tuple[str, int, Path]]:
    """(cgroup path, version, folder) of the memory controller named by a ``/proc/PID/cgroup`` text.

    >>> cgroup_dirs("0::/system.slice/sglang.service\\n", Path("/sys/fs/cgroup"))
    [('/system.slice/sglang.service', 2, PosixPath('/sys/fs/cgroup/system.slice/sglang.service'))]
    >>> cgroup_dirs("5:memory:/docker/abc\\n", Path("/sys/fs/cgroup"))[0][1:]
    (1, PosixPath('/sys/fs/cgroup/memory/docker/abc'))
    """
    out = cgroup_memory_entries(cgroup_text, root)
    # a v1 memory controller wins over the v2 line of a hybrid host
    return sorted(out, key=lambda x: x[1])[:1] if len(out) > 1 and any(v == 1 for _, v, _ in out) else out


def read_cgroup(path: str, version: int, folder: Path) -> dict[str, Any] | None:
    if version == 2:
        cur = _read(folder / "memory.current")
        if cur is None:
            return None
        rec: dict[str, Any] = {"path": path, "v": 2, "current": _int_or_max(cur), "max": _int_or_max(_read(folder / "memory.max"))}
        for name in ("memory.peak", "memory.high", "memory.swap.current"):
            v = _read(folder / name)
            if v is not None:
                rec[name.split(".", 1)[1].replace(".", "_")] = _int_or_max(v)
        rec["events"] = _keyed(_read(folder / "memory.events"))
        return rec
    cur = _read(folder / "memory.usage_in_bytes")
    if cur is None:
        return None
    rec = {"path": path, "v": 1}
    for name, key in CGROUP_V1_FILES.items():
        rec[key] = _int_or_max(_read(folder / name))
    oom = _keyed(_read(folder / "memory.oom_control"))
    rec["events"] = {k: v for k, v in oom.items() if k in ("oom_kill", "under_oom", "oom_kill_disable")}
    return rec


def read_shm(shm: Path) -> dict[str, int] | None:
    try:
        st = os.statvfs(shm)
    except OSError:
        return None
    total = st.f_blocks * st.f_frsize
    return {"total": total, "used": total - st.f_bfree * st.f_frsize}


def _stat_fields(text: str | None) -> tuple[str | None, int | None, int | None]:
    """(state, ppid, starttime ticks) from ``/proc/PID/stat``; comm may hold spaces and parentheses."""
    if not text or ")" not in text:
        return None, None, None
    rest = text.rsplit(")", 1)[1].split()
    try:
        return rest[0], int(rest[1]), int(rest[19])
    except (IndexError, ValueError):
        return None, None, None


class ProcScanner:
    """Finds SGLang/vLLM processes and reads their RSS. ``cmdline`` is read once per (pid, start time):
    reading it takes the process's memory-map lock, which a rank pinning a large pool holds for long."""

    def __init__(self, proc: Path) -> None:
        self.proc = proc
        self._ident: dict[tuple[int, int | None], tuple[str, str, bool]] = {}  # → (comm, cmd, engine)

    def scan(self) -> list[dict[str, Any]]:
        out = []
        seen: set[tuple[int, int | None]] = set()
        try:
            pids = [int(n) for n in os.listdir(self.proc) if n.isdigit()]
        except OSError:
            return []
        root = str(self.proc)
        for pid in pids:
            # plain strings, not Path: pathlib interns every part, and pids churn all day
            base = f"{root}/{pid}/"
            state, ppid, start = _stat_fields(_read(base + "stat", 4096))
            key = (pid, start)
            seen.add(key)
            ident = self._ident.get(key)
            if ident is None:
                comm = (_read(base + "comm", 256) or "").strip()
                raw = _read(base + "cmdline", MAX_CMD * 4) or ""
                cmd = " ".join(raw.split("\0")).strip()[:MAX_CMD]
                ident = (comm, cmd, bool(process_identity(comm, cmd).get("engine")))
                self._ident[key] = ident
            if not ident[2]:
                continue
            statm = (_read(base + "statm", 256) or "").split()
            rss = int(statm[1]) * PAGE if len(statm) > 1 and statm[1].isdigit() else None
            out.append({"pid": pid, "ppid": ppid, "state": state, "rss": rss, "comm": ident[0], "cmd": ident[1]})
        for key in set(self._ident) - seen:  # bounded by the live processes, not by the day's churn
            del self._ident[key]
        out.sort(key=lambda p: -(p["rss"] or 0))
        return out[:MAX_PROCS]

    def cgroups(self, procs: list[dict[str, Any]], root: Path) -> list[tuple[str, int, Path]]:
        """The memory cgroups of the engine processes (the recorder's own when there are none)."""
        found: dict[str, tuple[str, int, Path]] = {}
        for p in [*procs, {"pid": "self"}]:
            if p["pid"] == "self" and found:
                break
            text = _read(f"{self.proc}/{p['pid']}/cgroup", 8192)
            for path, v, folder in cgroup_dirs(text or "", root):
                found.setdefault(path, (path, v, folder))
            if len(found) >= MAX_CGROUPS:
                break
        return list(found.values())


class HostSampler:
    """Everything but the GPUs: meminfo, vmstat, cgroups, /dev/shm, engine processes."""

    def __init__(self, proc: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup"),
                 shm: Path = Path("/dev/shm")) -> None:
        self.proc, self.cgroup_root, self.shm = Path(proc), Path(cgroup_root), Path(shm)
        self.procs = ProcScanner(self.proc)

    def host(self) -> dict[str, Any]:
        """The kernel-global figures: never blocked by another process's locks."""
        rec: dict[str, Any] = {}
        gaps = {}
        mem = read_meminfo(self.proc)
        if mem is None:
            gaps["meminfo"] = f"{self.proc / 'meminfo'} unreadable"
        rec["meminfo"] = mem
        rec["vmstat"] = read_vmstat(self.proc)
        rec["shm"] = read_shm(self.shm)
        if rec["shm"] is None:
            gaps["shm"] = f"{self.shm}: no such file system"
        rec["gaps"] = gaps
        return rec

    def processes(self) -> dict[str, Any]:
        procs = self.procs.scan()
        cgroups = []
        for path, v, folder in self.procs.cgroups(procs, self.cgroup_root):
            with contextlib.suppress(OSError):
                c = read_cgroup(path, v, folder)
                if c:
                    cgroups.append(c)
        return {"procs": procs, "cgroups": cgroups}

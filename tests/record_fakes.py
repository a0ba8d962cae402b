"""Fakes for the recorder's tests: a /proc tree, cgroup trees, an NVML module, and a simulated clock."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import SimpleNamespace

from forensics.record.sampler import PAGE

KIB = 1024


def write_meminfo(proc: Path, total_kb: int, avail_kb: int, free_kb: int | None = None) -> None:
    free_kb = avail_kb - 1000 if free_kb is None else free_kb
    (proc / "meminfo").write_text(
        f"MemTotal:       {total_kb} kB\nMemFree:        {free_kb} kB\nMemAvailable:   {avail_kb} kB\n"
        "Buffers:            1000 kB\nCached:           200000 kB\nShmem:              5000 kB\n"
        "SwapTotal:             0 kB\nSwapFree:              0 kB\nHugePages_Total:       0\n")


def write_vmstat(proc: Path, oom_kill: int) -> None:
    (proc / "vmstat").write_text(f"nr_free_pages 12345\npgfault 99\noom_kill {oom_kill}\n")


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)


def add_process(proc: Path, pid: int, comm: str, argv: list[str], rss_bytes: int, ppid: int = 1,
                state: str = "S", cgroup: str = "0::/system.slice/sglang.service\n", start: int = 1000) -> None:
    # plain strings, not Path: pathlib interns every part, which would charge the fake's pids to the
    # recorder's memory in the simulated day
    d = f"{proc}/{pid}"
    os.makedirs(d, exist_ok=True)
    _write(f"{d}/comm", (comm + "\n").encode())
    _write(f"{d}/cmdline", b"\0".join(a.encode() for a in argv) + b"\0")
    fields = [state, str(ppid)] + ["0"] * 17 + [str(start)] + ["0"] * 5
    _write(f"{d}/stat", (f"{pid} ({comm}) " + " ".join(fields) + "\n").encode())
    _write(f"{d}/statm", f"999999 {rss_bytes // PAGE} 100 1 0 500 0\n".encode())
    _write(f"{d}/cgroup", cgroup.encode())


def remove_process(proc: Path, pid: int) -> None:
    d = f"{proc}/{pid}"
    for name in os.listdir(d):
        os.unlink(f"{d}/{name}")
    os.rmdir(d)


def fake_host(root: Path, total_kb: int = 470_000_000, avail_kb: int = 460_000_000) -> tuple[Path, Path]:
    """A /proc with meminfo, vmstat, self/cgroup and one unrelated process; a cgroup v2 tree."""
    proc, cg = root / "proc", root / "cgroup"
    proc.mkdir(parents=True)
    write_meminfo(proc, total_kb, avail_kb)
    write_vmstat(proc, 0)
    (proc / "self").mkdir()
    (proc / "self" / "cgroup").write_text("0::/system.slice/forensics-record.service\n")
    add_process(proc, 77, "sshd", ["/usr/sbin/sshd", "-D"], 8 << 20, cgroup="0::/system.slice/ssh.service\n")
    for rel in ("system.slice/sglang.service", "system.slice/forensics-record.service"):
        d = cg / rel
        d.mkdir(parents=True)
        (d / "memory.current").write_text("123456789\n")
        (d / "memory.max").write_text("max\n")
        (d / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    return proc, cg


class FakeNvml:
    """The functions of ``pynvml`` the recorder calls; ``hang`` makes every query block until released."""

    def __init__(self, gpus: list[dict], procs: dict[int, list[tuple[int, int]]] | None = None) -> None:
        self.gpus, self.procs = gpus, procs or {}
        self.hang = threading.Event()  # set → block
        self.release = threading.Event()
        self.calls = 0

    def nvmlInit(self) -> None:  # noqa: N802 - NVML's names
        pass

    def nvmlShutdown(self) -> None:  # noqa: N802
        pass

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        self.calls += 1
        if self.hang.is_set():
            self.release.wait(30)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        return i

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:  # noqa: N802
        g = self.gpus[h]
        return SimpleNamespace(used=g["used"], total=g["total"], free=g["total"] - g["used"])

    def nvmlDeviceGetUUID(self, h: int) -> str:  # noqa: N802
        return f"GPU-0000000{h}-aaaa-bbbb-cccc-dddddddddddd"

    def nvmlDeviceGetName(self, h: int) -> bytes:  # noqa: N802
        return b"NVIDIA H200"

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(busId=f"00000000:{0x18 + h:02X}:00.0".encode())

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(gpu=self.gpus[h].get("util", 0), memory=0)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:  # noqa: N802
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.procs.get(h, [])]


class Clock:
    """Simulated time: ``sleep`` advances it, nothing waits."""

    def __init__(self, t: float = 1_764_583_200.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += max(s, 0.0)

"""GPU samples for the recorder: NVML through ``nvidia-ml-py`` where the driver is there, else
``nvidia-smi --query-*`` under a timeout, else nothing (the sample says why).

Both answer the same shape::

    {"gpus": [{"index": 0, "uuid": "GPU-…", "name": "NVIDIA H200", "pci_bus_id": "00000000:18:00.0",
               "used": <bytes>, "total": <bytes>, "util": 0.93}],
     "procs": [{"gpu": 0, "pid": 4242, "used": <bytes>, "name": "python3"}]}

NVML reference: ``nvmlDeviceGetMemoryInfo`` (bytes), ``nvmlDeviceGetUtilizationRates`` (percent),
``nvmlDeviceGetComputeRunningProcesses`` (``usedGpuMemory`` in bytes, None where the driver hides it).
nvidia-smi's CSV prints MiB (``reference/nvidia-smi.md``, ``--query-gpu`` / ``--query-compute-apps``).
The import of ``pynvml`` happens only when a recorder asks for GPUs (the package is the optional extra
``forensics[record]``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

MIB = 1 << 20
QUERY_GPU = "index,uuid,name,pci.bus_id,memory.used,memory.total,utilization.gpu"
QUERY_APPS = "gpu_uuid,pid,process_name,used_memory"


class NoGpu(Exception):
    """No GPU source answers on this host (the reason is the message)."""


class NvmlSource:
    """NVML via ``pynvml``; ``module`` is injected by tests (a fake with the same functions)."""

    name = "nvml"

    def __init__(self, module: Any = None) -> None:
        if module is None:
            try:
                import pynvml as module  # noqa: PLC0415 - optional extra, imported only when sampling GPUs
            except ImportError as exc:
                raise NoGpu("nvidia-ml-py is not installed (pip install 'forensics[record]')") from exc
        self.nv = module
        try:
            self.nv.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded …
            raise NoGpu(f"NVML: {exc}") from exc

    def query(self) -> dict[str, Any]:
        nv = self.nv
        gpus, procs = [], []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            g: dict[str, Any] = {"index": i, "used": int(mem.used), "total": int(mem.total)}
            for key, fn in (("uuid", "nvmlDeviceGetUUID"), ("name", "nvmlDeviceGetName")):
                with contextlib.suppress(Exception):
                    g[key] = _text(getattr(nv, fn)(h))
            with contextlib.suppress(Exception):
                g["pci_bus_id"] = _text(nv.nvmlDeviceGetPciInfo(h).busId)
            with contextlib.suppress(Exception):
                g["util"] = nv.nvmlDeviceGetUtilizationRates(h).gpu / 100.0
            gpus.append(g)
            try:
                running = nv.nvmlDeviceGetComputeRunningProcesses(h)
            except Exception:
                continue
            for p in running:
                used = getattr(p, "usedGpuMemory", None)
                procs.append({"gpu": i, "pid": int(p.pid), "used": int(used) if isinstance(used, int) else None})
        return {"gpus": gpus, "procs": procs}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.nv.nvmlShutdown()


def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _number(cell: str) -> float | None:
    cell = cell.strip().split(" ")[0]
    try:
        return float(cell)
    except ValueError:
        return None  # [N/A], [Not Supported]


def run_bounded(argv: list[str], timeout_s: float) -> str:
    """Run ``argv`` (no shell) in its own process group; kill the group at the timeout and never wait on
    a child the kernel will not reap (a call stuck in a wedged driver)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            start_new_session=True, env=dict(os.environ, LC_ALL="C"))
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)
        raise TimeoutError(f"{os.path.basename(argv[0])} did not answer in {timeout_s:g} s") from None
    if proc.returncode != 0 and not out:
        raise NoGpu(f"{os.path.basename(argv[0])} exited {proc.returncode}")
    return out.decode(errors="replace")


def _csv_rows(text: str) -> list[dict[str, str]]:
    """``--format=csv`` output (header and units) → rows keyed by the header's field names."""
    lines = [x for x in text.splitlines() if x.strip()]
    if not lines:
        return []
    head = [h.strip().split(" [")[0] for h in lines[0].split(",")]
    return [dict(zip(head, (c.strip() for c in line.split(",")), strict=False)) for line in lines[1:]]


class SmiSource:
    """``nvidia-smi --query-gpu`` and ``--query-compute-apps``, each under ``timeout_s``."""

    name = "nvidia-smi"

    def __init__(self, binary: str | None = None, timeout_s: float = 5.0) -> None:
        self.binary = binary or shutil.which("nvidia-smi")
        if not self.binary:
            raise NoGpu("no NVML and no nvidia-smi on PATH")
        self.timeout_s = timeout_s

    def query(self) -> dict[str, Any]:
        gpus, by_uuid = [], {}
        for row in _csv_rows(run_bounded([self.binary, f"--query-gpu={QUERY_GPU}", "--format=csv"], self.timeout_s)):
            idx = _number(row.get("index", ""))
            if idx is None:
                continue
            g: dict[str, Any] = {"index": int(idx), "uuid": row.get("uuid"), "name": row.get("name"),
                                 "pci_bus_id": row.get("pci.bus_id")}
            for key, field, scale in (("used", "memory.used", MIB), ("total", "memory.total", MIB),
                                      ("util", "utilization.gpu", 0.01)):
                v = _number(row.get(field, ""))
                if v is not None:
                    g[key] = int(v * scale) if scale == MIB else v * scale
            gpus.append(g)
            by_uuid[g["uuid"]] = g["index"]
        procs = []
        text = run_bounded([self.binary, f"--query-compute-apps={QUERY_APPS}", "--format=csv"], self.timeout_s)
        for row in _csv_rows(text):
            pid = _number(row.get("pid", ""))
            if pid is None:
                continue
            used = _number(row.get("used_gpu_memory", row.get("used_memory", "")))
            procs.append({"gpu": by_uuid.get(row.get("gpu_uuid")), "pid": int(pid),
                          "used": int(used * MIB) if used is not None else None, "name": row.get("process_name")})
        return {"gpus": gpus, "procs": procs}

    def close(self) -> None:
        pass


def open_source(prefer: str = "auto", nvml_module: Any = None, smi: str | None = None,
                timeout_s: float = 5.0) -> NvmlSource | SmiSource:
    """The first GPU source that answers: NVML, then nvidia-smi (``prefer`` = ``nvml`` | ``smi`` | ``auto``)."""
    reasons = []
    if prefer in ("auto", "nvml"):
        try:
            return NvmlSource(nvml_module)
        except NoGpu as exc:
            reasons.append(str(exc))
    if prefer in ("auto", "smi"):
        try:
            return SmiSource(smi, timeout_s)
        except NoGpu as exc:
            reasons.append(str(exc))
    raise NoGpu("; ".join(reasons))


class TimedProbe:
    """Run ``fn`` on a worker thread and wait at most ``timeout_s`` for its answer.

    A call that does not return in time is left running (a thread stuck in a wedged driver cannot be
    killed) and the probe reports ``stalled`` until it does; no second call is started meanwhile, so a
    wedged driver costs one stuck thread, never one per interval.
    """

    def __init__(self, fn: Callable[[], Any], timeout_s: float) -> None:
        self.fn, self.timeout_s = fn, timeout_s
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        self.stalled_since: float | None = None

    def _work(self) -> None:
        try:
            self._result, self._error = self.fn(), None
        except BaseException as exc:  # noqa: BLE001 - reported to the caller as a gap
            self._result, self._error = None, exc
        self._done.set()

    def call(self, now: float) -> tuple[str, Any]:
        """``("ok", result)``, ``("error", exc)``, ``("stalled", seconds stuck)`` or ``("busy", seconds)``."""
        if self._thread is not None and self._thread.is_alive() and not self._done.wait(0):
            return "busy", now - (self.stalled_since or now)
        self._done.clear()
        self._thread = threading.Thread(target=self._work, name="forensics-record-probe", daemon=True)
        started = time.monotonic()
        self._thread.start()
        if not self._done.wait(self.timeout_s):
            self.stalled_since = now
            return "stalled", time.monotonic() - started
        self.stalled_since = None
        if self._error is not None:
            return "error", self._error
        return "ok", self._result

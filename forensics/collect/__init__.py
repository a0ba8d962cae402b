"""``forensics collect``: one bundle from a host that may be wedged, every step bounded.

The engine walks the sources table (:mod:`forensics.collect.sources`) and enforces, in one place:

* **never hang** — each command runs in its own process group under a timeout; on expiry the group
  gets SIGTERM, then SIGKILL after a short grace; a child that cannot be reaped (D state) is
  abandoned after a bounded wait and recorded ``abandoned: true``. Pipes are drained by threads, so
  a descendant holding them open cannot wedge us. Reads that can block in the kernel (the driver's
  procfs, other processes' ``/proc/PID/*``) happen in bounded child processes too. Once one
  ``nvidia-smi`` times out the driver is taken as wedged and the other GPU sources are skipped
  (each hung call would leave another process stuck in the driver). The whole run has a budget;
  when it ends the bundle is written with what there is and the rest recorded as gaps.
* **only read** — nothing on the host is changed or killed, except our own timed-out children.
* **redaction** of every artifact (argv, environment, logs) by default, counted per artifact;
  optional obfuscation of host names and IPs with the mapping written next to the bundle.
* **the manifest** (``docs/bundle.md``) and an atomic write (temporary name, then ``os.replace``).

A run against a fake proc tree and no GPU, as the tests do (real ``free``/``ps`` when present)::

    >>> import tarfile, tempfile
    >>> out = Path(tempfile.mkdtemp()) / "b.tar"
    >>> fake_proc = Path(tempfile.mkdtemp())
    >>> _ = (fake_proc / "meminfo").write_text("MemTotal:       1024 kB\\n")
    >>> path = collect(CollectOptions(output=out, proc_root=fake_proc, safe_mode=True, timeout_s=5, budget_s=30))
    >>> with tarfile.open(path) as tar:
    ...     manifest = json.load(tar.extractfile(tar.getmembers()[0]))
    >>> [a["format"] for a in manifest["artifacts"] if a["source"] == "meminfo"]
    ['meminfo']
    >>> any("safe mode" in gap for gap in manifest["gaps"])
    True
    >>> import shutil; shutil.rmtree(out.parent); shutil.rmtree(fake_proc)
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import io
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import forensics
from forensics.collect.sources import SOURCES, Source
from forensics.redact import Obfuscator, redact_bytes, redact_text

SCHEMA_VERSION = 1
KILL_GRACE_S = 1.0  # SIGTERM → SIGKILL
REAP_WAIT_S = 2.0  # after SIGKILL: a child still not reaped is in D state; abandon it
CHUNK = 4 * 1024**2

# Popen objects of children we gave up on; kept so their destructors do not warn or wait.
_ABANDONED: list[subprocess.Popen[bytes]] = []


@dataclass
class CollectOptions:
    """What ``forensics collect`` was asked to do (the CLI maps its flags onto this)."""

    output: Path | None = None  # default ./forensics-<host>-<UTCstamp>.tar.gz ; "-" = stdout
    logs: list[str] = field(default_factory=list)  # --log: files, dirs, globs
    adds: list[str] = field(default_factory=list)  # --add: any other file
    snapshots: int = 1
    interval_s: float = 0.0
    timeout_s: float = 10.0
    budget_s: float = 120.0
    redact: bool = True
    safe_mode: bool = False  # skip everything touching the GPU driver
    obfuscate: bool = False  # host names / IPs; the mapping goes NEXT TO the bundle, not inside
    max_log_bytes: int = 512 * 1024**2
    proc_root: Path = Path("/proc")  # tests point this at a fake /proc tree
    progress: Callable[[str], None] | None = None  # human progress lines → stderr
    cgroup_root: Path = Path("/sys/fs/cgroup")  # tests point this at a fake cgroup tree
    #: an incident tag shared by every node's bundle (``--tag INCIDENT-123``): in the name and the manifest
    tag: str | None = None
    #: the flight recorder's ring (``forensics record --dir``) and how far back to take it (``--record-since``)
    record_dir: Path = Path("/var/lib/forensics/record")
    record_since_s: float = 3600.0


#: What a tag may be: it goes into a file name on every node.
TAG_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_tag(tag: str) -> str:
    """The tag, or ValueError saying what a tag may be.

    >>> check_tag("INCIDENT-123")
    'INCIDENT-123'
    >>> check_tag("../x")
    Traceback (most recent call last):
    ValueError: --tag '../x': use 1-64 letters, digits, '.', '_' or '-' (it becomes part of the bundle's name)
    """
    if not TAG_PATTERN.fullmatch(tag):
        raise ValueError(f"--tag {tag!r}: use 1-64 letters, digits, '.', '_' or '-' (it becomes part of the bundle's name)")
    return tag


# ----------------------------------------------------------------------------------------------
# Time


def utc_stamp(t: float | None = None) -> str:
    """ISO 8601 UTC with microseconds and ``Z``.

    >>> utc_stamp(0)
    '1970-01-01T00:00:00.000000Z'
    """
    return datetime.fromtimestamp(time.time() if t is None else t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def host_timezone() -> str | None:
    """The host's zone name (TZ, /etc/localtime link, /etc/timezone), else the abbreviation."""
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz:
        return tz
    with contextlib.suppress(OSError):
        link = os.readlink("/etc/localtime")
        if "zoneinfo/" in link:
            return link.split("zoneinfo/", 1)[1]
    with contextlib.suppress(OSError):
        name = Path("/etc/timezone").read_text().strip()
        if name:
            return name
    return time.tzname[0] or None


# ----------------------------------------------------------------------------------------------
# Bounded capture of commands and files


@dataclass
class Captured:
    """Output of one command or file read, and how it went."""

    data: bytes = b""
    stderr: bytes | None = None
    rc: int | None = None
    timed_out: bool = False
    abandoned: bool = False
    truncated: bool = False
    error: str | None = None
    started: str = ""
    ended: str = ""
    original_bytes: int | None = None


class TailBuffer:
    """Keeps the last ``cap`` bytes written; :meth:`result` cuts the head at a line boundary.

    >>> buf = TailBuffer(8)
    >>> buf.write(b"line1\\nline2\\nl3\\n")
    >>> buf.result()
    (b'l3\\n', True)
    """

    def __init__(self, cap: int) -> None:
        self.cap = max(1, cap)
        self.buf = bytearray()
        self.dropped = False
        self.total = 0

    def write(self, data: bytes) -> None:
        self.buf += data
        self.total += len(data)
        if len(self.buf) > 2 * self.cap:
            del self.buf[: len(self.buf) - self.cap]
            self.dropped = True

    def result(self) -> tuple[bytes, bool]:
        data = bytes(self.buf)
        truncated = self.dropped or len(data) > self.cap
        if not truncated:
            return data, False
        # one byte more than the cap: if it is a newline the tail starts on a whole line
        data = cut_to_line_start(data[-(self.cap + 1) :])
        return data[-self.cap :], True


def cut_to_line_start(data: bytes) -> bytes:
    """Drop a partial first line (what is left of a line cut by a tail).

    >>> cut_to_line_start(b"rtial\\nwhole\\n")
    b'whole\\n'
    >>> cut_to_line_start(b"no newline at all")
    b'no newline at all'
    """
    nl = data.find(b"\n")
    return data[nl + 1 :] if nl >= 0 else data


class _Drain(threading.Thread):
    """Reads a pipe to EOF into a TailBuffer (a daemon thread: it may outlive a stuck child)."""

    def __init__(self, pipe: io.BufferedReader, cap: int) -> None:
        super().__init__(daemon=True)
        self.pipe, self.tail = pipe, TailBuffer(cap)

    def run(self) -> None:
        fd = self.pipe.fileno()
        with contextlib.suppress(OSError, ValueError):
            while chunk := os.read(fd, 65536):
                self.tail.write(chunk)


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _poll_until(proc: subprocess.Popen[bytes], deadline: float) -> int | None:
    """Poll (never a blocking wait) until the child exits or the deadline passes."""
    while True:
        rc = proc.poll()
        if rc is not None or time.monotonic() >= deadline:
            return rc
        time.sleep(min(0.02, max(0.0, deadline - time.monotonic())))


def _join_all(threads: list[_Drain], deadline: float) -> bool:
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return not any(t.is_alive() for t in threads)


def run_command(
    argv: list[str],
    timeout_s: float,
    max_bytes: int,
    env: dict[str, str] | None = None,
    merge_stderr: bool = True,
    grace_s: float = KILL_GRACE_S,
    reap_s: float = REAP_WAIT_S,
) -> Captured:
    """Run ``argv`` in a new session, bounded by ``timeout_s``; never raises, never blocks for long.

    >>> r = run_command(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout_s=5, max_bytes=1024)
    >>> r.data, r.rc, r.timed_out
    (b'out\\nerr\\n', 3, False)
    >>> run_command(["no-such-command-xyz"], 5, 1024).error
    'command not found'
    """
    cap = Captured(started=utc_stamp())
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            start_new_session=True,  # its own process group: a timeout kills all it spawned
            env=env,
            close_fds=True,
        )
    except FileNotFoundError:
        cap.error, cap.ended = "command not found", utc_stamp()
        return cap
    except PermissionError:
        cap.error, cap.ended = "permission denied", utc_stamp()
        return cap
    except (OSError, ValueError) as exc:
        cap.error, cap.ended = f"cannot start: {exc}", utc_stamp()
        return cap

    drains = [_Drain(proc.stdout, max_bytes)]  # type: ignore[arg-type]
    if not merge_stderr:
        drains.append(_Drain(proc.stderr, max_bytes))  # type: ignore[arg-type]
    for d in drains:
        d.start()
    deadline = time.monotonic() + max(0.0, timeout_s)
    try:
        rc = _poll_until(proc, deadline)
        if rc is None:
            cap.timed_out = True
            _kill_group(proc.pid, signal.SIGTERM)
            rc = _poll_until(proc, time.monotonic() + grace_s)
            if rc is None:
                _kill_group(proc.pid, signal.SIGKILL)
                rc = _poll_until(proc, time.monotonic() + reap_s)
                if rc is None:  # uninterruptible sleep: leave it, record it
                    cap.abandoned = True
                    _ABANDONED.append(proc)
        # The child is gone, but a descendant may still hold the pipes: wait until the deadline at
        # most, then kill our own group and give the readers a moment more.
        if not _join_all(drains, max(deadline, time.monotonic() + 0.2)):
            _kill_group(proc.pid, signal.SIGKILL)
            if not _join_all(drains, time.monotonic() + 0.5):
                cap.error = "output pipe held open by a descendant; output may be incomplete"
    except BaseException:  # Ctrl-C or SIGTERM (cli raises it): leave no child of ours running
        _kill_group(proc.pid, signal.SIGKILL)
        raise
    cap.rc = rc
    cap.data, cap.truncated = drains[0].tail.result()
    if not merge_stderr:
        cap.stderr, err_truncated = drains[1].tail.result()
        cap.truncated = cap.truncated or err_truncated
    cap.ended = utc_stamp()
    return cap


def _os_error(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "not found"
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, IsADirectoryError):
        return "is a directory"
    return f"{type(exc).__name__}: {exc.strerror or exc}"


def read_file_tail(path: Path | str, max_bytes: int) -> Captured:
    """Read the last ``max_bytes`` of a file in-process (cut at a line boundary); never raises.

    >>> read_file_tail("/nonexistent/file", 10).error
    'not found'
    """
    cap = Captured(started=utc_stamp())
    tail = TailBuffer(max_bytes)
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > max_bytes:  # regular file: seek; procfs files report 0 and are read whole
                fh.seek(size - max_bytes - 1)
                tail.dropped = True
            while chunk := fh.read(CHUNK):
                tail.write(chunk)
                if size and tail.total > size + CHUNK:  # a growing file: stop somewhere
                    break
        cap.data, cap.truncated = tail.result()
        cap.original_bytes = max(size, tail.total)
        cap.rc = 0
    except OSError as exc:
        cap.error = _os_error(exc)
    cap.ended = utc_stamp()
    return cap


# A child that reads one file, so a read stuck in the kernel strands the child, not us.
_READ_SCRIPT = (
    "import sys\n"
    "cap = int(sys.argv[2])\n"
    "try:\n"
    "    with open(sys.argv[1], 'rb') as fh:\n"
    "        sys.stdout.buffer.write(fh.read(cap))\n"
    "except FileNotFoundError:\n"
    "    sys.stderr.write('not found'); sys.exit(2)\n"
    "except PermissionError:\n"
    "    sys.stderr.write('permission denied'); sys.exit(3)\n"
    "except OSError as e:\n"
    "    sys.stderr.write(str(e)); sys.exit(4)\n"
)


def read_file_bounded(path: Path | str, max_bytes: int, timeout_s: float) -> Captured:
    """Read a file that may block in the kernel (driver procfs) in a bounded child process."""
    cap = run_command([sys.executable, "-c", _READ_SCRIPT, str(path), str(max_bytes)],
                      timeout_s, max_bytes, merge_stderr=False)
    if cap.rc not in (0, None) and not cap.error:
        cap.error = (cap.stderr or b"").decode("utf-8", "replace").strip() or f"exit status {cap.rc}"
    cap.stderr = None
    return cap


# ----------------------------------------------------------------------------------------------
# SGLang process discovery (runs in a bounded child process: reading /proc/PID/* of a process
# stuck in the kernel can block the reader)

_TITLE_PREFIX = "sglang::"


def is_sglang_argv(argv: list[str], comm: str = "") -> bool:
    """Is this the argv (or process title) of an SGLang server process?

    >>> is_sglang_argv(["python3", "-m", "sglang.launch_server", "--tp", "8"])
    True
    >>> is_sglang_argv(["/venv/bin/sglang", "serve", "--model-path", "m"])
    True
    >>> is_sglang_argv(["sglang::scheduler_TP3"]), is_sglang_argv([], comm="sglang::schedul")
    (True, True)
    >>> is_sglang_argv(["grep", "sglang.launch_server"])
    False
    """
    if comm.startswith(_TITLE_PREFIX) or (argv and argv[0].startswith(_TITLE_PREFIX)):
        return True
    for i, arg in enumerate(argv):
        if arg == "sglang.launch_server" and i > 0 and argv[i - 1] == "-m":
            return True
        if arg.endswith("sglang/launch_server.py") and i <= 2:
            return True
        if i <= 1 and os.path.basename(arg) == "sglang" and argv[i + 1 : i + 2] == ["serve"]:
            return True
    return False


_VLLM_TITLES = ("VLLM::", "ray::RayWorkerWrapper", "ray::RayWorkerProc")
_VLLM_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server", "vllm.entrypoints.cli.main")


def is_vllm_argv(argv: list[str], comm: str = "") -> bool:
    """Is this the argv (or process title) of a vLLM server process (API server, engine core, worker)?

    >>> is_vllm_argv(["/venv/bin/vllm", "serve", "meta-llama/Llama-3.1-8B"])
    True
    >>> is_vllm_argv(["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"])
    True
    >>> is_vllm_argv(["VLLM::EngineCore"]), is_vllm_argv([], comm="VLLM::Worker_TP")
    (True, True)
    >>> is_vllm_argv(["grep", "vllm serve"])
    False
    """
    if comm.startswith(_VLLM_TITLES) or (argv and argv[0].startswith(_VLLM_TITLES)):
        return True
    for i, arg in enumerate(argv):
        if arg in _VLLM_MODULES and i > 0 and argv[i - 1] == "-m":
            return True
        if i <= 1 and os.path.basename(arg) == "vllm" and argv[i + 1 : i + 2] == ["serve"]:
            return True
    return False


def engine_of_process(argv: list[str], comm: str = "") -> str | None:
    """``sglang`` or ``vllm`` for a server process of that engine, else None."""
    if is_sglang_argv(argv, comm):
        return "sglang"
    if is_vllm_argv(argv, comm):
        return "vllm"
    return None


def _read_proc_text(path: Path, errors: dict[str, str], key: str) -> str | None:
    try:
        return path.read_bytes().decode("utf-8", "surrogateescape")
    except OSError as exc:
        errors[key] = _os_error(exc)
        return None


def _readlink(path: Path, errors: dict[str, str], key: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError as exc:
        errors[key] = _os_error(exc)
        return None


def describe_process(pid_dir: Path) -> dict | None:
    """Everything we keep about one process if it is an inference server's (SGLang, vLLM), else None.
    Never raises."""
    errors: dict[str, str] = {}
    cmdline = _read_proc_text(pid_dir / "cmdline", errors, "cmdline")
    comm = (_read_proc_text(pid_dir / "comm", {}, "comm") or "").strip()
    argv = [a for a in (cmdline or "").split("\x00")]
    while argv and argv[-1] == "":
        argv.pop()
    engine = engine_of_process(argv, comm)
    if engine is None:
        return None
    stat_text = _read_proc_text(pid_dir / "stat", {}, "stat") or ""
    m = re.search(r"\)\s+(\S)\s+(\d+)", stat_text)
    info: dict = {
        "pid": int(pid_dir.name),
        "engine": engine,
        "comm": comm,
        "state": m.group(1) if m else None,
        "ppid": int(m.group(2)) if m else None,
        "cmdline": cmdline,
        "environ": _read_proc_text(pid_dir / "environ", errors, "environ"),
        "cwd": _readlink(pid_dir / "cwd", errors, "cwd"),
        "exe": _readlink(pid_dir / "exe", {}, "exe"),  # only used to pick the python for versions
        "cgroup": _read_proc_text(pid_dir / "cgroup", errors, "cgroup"),
        "localtime": _readlink(pid_dir / "root" / "etc" / "localtime", {}, "localtime"),
        "fds": {},
        "errors": errors,
    }
    for fd in ("0", "1", "2"):
        target = _readlink(pid_dir / "fd" / fd, errors, f"fd/{fd}")
        if target is None:
            continue
        entry: dict = {"target": target, "regular": False}
        with contextlib.suppress(OSError):
            st = os.stat(pid_dir / "fd" / fd)  # follows the magic link to the open file itself
            entry.update(regular=stat.S_ISREG(st.st_mode), size=st.st_size, dev=st.st_dev, ino=st.st_ino)
        info["fds"][fd] = entry
    return info


def discover_sglang(proc_root: Path) -> list[dict]:
    """Describe every SGLang process under ``proc_root`` (in-process; see :func:`_discovery_main`).

    >>> discover_sglang(Path("/nonexistent"))
    []
    """
    found = []
    try:
        entries = sorted((p for p in proc_root.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    except OSError:
        return []
    for pid_dir in entries:
        with contextlib.suppress(OSError, ValueError):
            info = describe_process(pid_dir)
            if info is not None:
                found.append(info)
    return found


def _discovery_main() -> None:
    """Child-process entry: print one JSON line per SGLang process found (partial output survives)."""
    proc_root = Path(sys.argv[1])
    try:
        entries = sorted((p for p in proc_root.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    except OSError:
        return
    for pid_dir in entries:
        with contextlib.suppress(OSError, ValueError):
            info = describe_process(pid_dir)
            if info is not None:
                sys.stdout.write(json.dumps(info) + "\n")
                sys.stdout.flush()


# ----------------------------------------------------------------------------------------------
# The bundle being built (a staging folder; packed into the archive at the end)


def _transform_file(src: Path, dst: Path, transform: Callable[[bytes], tuple[bytes, Counter[str]]],
                    start: int = 0, limit: int | None = None) -> tuple[int, str, Counter[str]]:
    """Copy ``src`` from ``start`` (``limit`` bytes at most) through ``transform`` in line-aligned
    chunks; return bytes written, sha256 and counts."""
    counts: Counter[str] = Counter()
    digest = hashlib.sha256()
    written = 0
    remaining = limit
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        fin.seek(start)
        pending = b""
        while True:
            want = CHUNK if remaining is None else min(CHUNK, remaining)
            chunk = fin.read(want) if want > 0 else b""
            if remaining is not None:
                remaining -= len(chunk)
            if not chunk:
                block, pending = pending, b""
            else:
                pending += chunk
                cut = pending.rfind(b"\n") + 1
                if cut == 0 and len(pending) < 4 * CHUNK:  # keep a line whole unless it is absurd
                    continue
                cut = cut or len(pending)
                block, pending = pending[:cut], pending[cut:]
            if block:
                out, c = transform(block)
                counts.update(c)
                fout.write(out)
                digest.update(out)
                written += len(out)
            if not chunk:
                break
    return written, digest.hexdigest(), counts


def _no_redaction(data: bytes) -> tuple[bytes, Counter[str]]:
    return data, Counter()


class Bundle:
    """Files under a staging folder plus their manifest entries and the run's gaps."""

    def __init__(self, staging: Path, redact: bool) -> None:
        self.staging = staging
        self.transform = redact_bytes if redact else _no_redaction
        self.artifacts: list[dict] = []
        self.gaps: list[str] = []
        self.taken: set[str] = set()

    def unique(self, rel: str) -> str:
        if rel not in self.taken:
            return rel
        stem, dot, ext = rel.rpartition(".") if "." in rel.rsplit("/", 1)[-1] else (rel, "", "")
        n = 2
        while f"{stem}-{n}{dot}{ext}" in self.taken:
            n += 1
        return f"{stem}-{n}{dot}{ext}"

    def _entry(self, rel: str, source: str, fmt: str | None, cap: Captured, argv: list[str] | None,
               snapshot: int, nbytes: int, sha: str, counts: Counter[str], **extra: object) -> dict:
        entry = {
            "path": rel, "source": source, "format": fmt, "argv": argv, "snapshot": snapshot,
            "started": cap.started, "ended": cap.ended, "rc": cap.rc, "timed_out": cap.timed_out,
            "abandoned": cap.abandoned, "truncated": cap.truncated, "bytes": nbytes, "sha256": sha,
            "redactions": sum(counts.values()), "redaction_kinds": dict(sorted(counts.items())),
            "error": cap.error,
        }
        entry.update({k: v for k, v in extra.items() if v is not None})
        self.artifacts.append(entry)
        return entry

    def add_bytes(self, rel: str, data: bytes, source: str, fmt: str | None, cap: Captured,
                  argv: list[str] | None = None, snapshot: int = 0,
                  transform: Callable[[bytes], tuple[bytes, Counter[str]]] | None = None, **extra: object) -> dict:
        rel = self.unique(rel)
        self.taken.add(rel)
        out, counts = (transform or self.transform)(data)
        dst = self.staging / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(out)
        return self._entry(rel, source, fmt, cap, argv, snapshot, len(out), hashlib.sha256(out).hexdigest(),
                           counts, **extra)

    def add_prepared(self, rel: str, data: bytes, source: str, fmt: str | None, cap: Captured,
                     counts: Counter[str], **extra: object) -> dict:
        """Bytes already redacted by the caller (a compressed artifact whose text it redacted)."""
        rel = self.unique(rel)
        self.taken.add(rel)
        dst = self.staging / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data)
        return self._entry(rel, source, fmt, cap, None, 0, len(data), hashlib.sha256(data).hexdigest(), counts,
                           **extra)

    def add_file(self, rel: str, src: Path | str, source: str, fmt: str | None, max_bytes: int,
                 **extra: object) -> dict | None:
        """Copy the last ``max_bytes`` of a (possibly huge) file, cut at a line, redacted in chunks."""
        cap = Captured(started=utc_stamp())
        rel = self.unique(rel)
        dst = self.staging / rel
        try:
            with open(src, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                start = 0
                if size > max_bytes:
                    fh.seek(size - max_bytes - 1)
                    head = fh.read(min(CHUNK, max_bytes + 1))
                    nl = head.find(b"\n")
                    start = size - max_bytes - 1 + (nl + 1 if nl >= 0 else 1)
                    cap.truncated = True
            dst.parent.mkdir(parents=True, exist_ok=True)
            nbytes, sha, counts = _transform_file(Path(src), dst, self.transform, start, size - start)
        except OSError as exc:
            cap.error = _os_error(exc)
            self.gaps.append(f"{source}: {src}: {cap.error}")
            with contextlib.suppress(OSError):
                dst.unlink()
            return None
        self.taken.add(rel)
        cap.rc, cap.ended = 0, utc_stamp()
        return self._entry(rel, source, fmt, cap, None, 0, nbytes, sha, counts,
                           original_bytes=size, **extra)


# ----------------------------------------------------------------------------------------------
# The run


class _Run:
    def __init__(self, opts: CollectOptions, bundle: Bundle, host: str) -> None:
        self.opts, self.bundle, self.host = opts, bundle, host
        self.t0 = time.monotonic()
        self.deadline = self.t0 + max(0.0, opts.budget_s)
        self.env = dict(os.environ, LC_ALL="C")
        self.wedged: str | None = None  # id of the GPU source that timed out
        self.python: str | None = None
        self.processes: list[dict] = []
        self.process_summaries: list[dict] = []
        self.log_identities: dict[tuple[int, int] | str, str] = {}
        self.versions: dict[str, str] = {}
        self.boot_time: str | None = None

    # -- helpers
    def say(self, line: str) -> None:
        if self.opts.progress:
            with contextlib.suppress(Exception):
                self.opts.progress(line)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def gap(self, text: str) -> None:
        self.bundle.gaps.append(text)
        self.say(f"collect: gap: {text}")

    def expand(self, arg: str) -> str:
        return arg.replace("{proc}", str(self.opts.proc_root)).replace("{python}", self.python or "python3")

    def skip_reason(self, src: Source) -> str | None:
        if src.gpu and self.opts.safe_mode:
            return "skipped: safe mode (touches the GPU driver)"
        if src.gpu and self.wedged:
            return f"skipped: {self.wedged} timed out earlier (GPU driver likely wedged)"
        if self.remaining() <= 0.05:
            return "skipped: budget exhausted"
        return None

    # -- one table row
    def capture(self, src: Source) -> tuple[Captured, list[str] | None]:
        timeout = max(0.1, min(src.timeout_s or self.opts.timeout_s, self.remaining()))
        if src.path:
            path = self.expand(src.path)
            if src.bounded_read:
                return read_file_bounded(path, src.max_bytes, timeout), None
            return read_file_tail(path, src.max_bytes), None
        argv = [self.expand(a) for a in src.argv]
        if src.glob_arg:
            matches = sorted(glob.glob(src.glob_arg))
            if not matches:
                return Captured(error=f"no files match {src.glob_arg}", started=utc_stamp(), ended=utc_stamp()), argv
            argv += matches
        if shutil.which(argv[0], path=self.env.get("PATH")) is None:
            return Captured(error="command not found", started=utc_stamp(), ended=utc_stamp()), argv
        cap = run_command(argv, timeout, src.max_bytes, env=self.env, merge_stderr=src.stderr == "merge")
        if src.gpu and (cap.timed_out or cap.abandoned) and argv[0].endswith("nvidia-smi"):
            self.wedged = src.id
        return cap, argv

    def store(self, src: Source, cap: Captured, argv: list[str] | None, snapshot: int, dest: str,
              **extra: object) -> dict:
        # a probe asks about this host's software (which sglang is installed?): its output is read for
        # the answer only, so a failed probe is a gap in the inventory, never evidence (docs/bundle.md)
        entry = self.bundle.add_bytes(dest, cap.data, src.id, src.format, cap, argv, snapshot,
                                      sensitivity=src.sensitivity, original_bytes=cap.original_bytes,
                                      role="probe" if src.version_of else None, **extra)
        if cap.stderr:
            err_cap = Captured(rc=cap.rc, started=cap.started, ended=cap.ended, timed_out=cap.timed_out,
                               abandoned=cap.abandoned)
            self.bundle.add_bytes(dest + ".stderr", cap.stderr, f"{src.id}:stderr", None, err_cap, argv, snapshot)
        return entry

    def describe(self, cap: Captured, timeout: float) -> str | None:
        """The gap line for a capture, or None when it went fine."""
        if cap.abandoned:
            return f"timed out after {timeout:g} s; the child could not be killed (D state) and was abandoned"
        if cap.timed_out:
            return f"timed out after {timeout:g} s"
        if cap.error:
            return cap.error
        if cap.rc not in (0, None):
            return f"exit status {cap.rc}"
        return None

    def one(self, src: Source, snapshot: int = 0, dest: str | None = None) -> bool:
        label = f"{src.id} (snapshot {snapshot})" if snapshot else src.id
        reason = self.skip_reason(src)
        if reason:
            self.gap(f"{label}: {reason}")
            return False
        timeout = max(0.1, min(src.timeout_s or self.opts.timeout_s, self.remaining()))
        self.say(f"collect: {label} …")
        cap, argv = self.capture(src)
        problem = self.describe(cap, timeout)
        if cap.error in ("command not found", "not found") or (cap.error and not cap.data and cap.rc is None):
            self.gap(f"{label}: {problem}")
            return False
        self.store(src, cap, argv, snapshot, dest or src.dest)
        if problem:
            said = cap.stderr if cap.stderr else cap.data  # the error is on stderr when kept apart
            last = said.decode("utf-8", "replace").strip().splitlines()[-1:] if cap.rc else []
            self.gap(f"{label}: {problem}" + (f" ({last[0][:200]})" if last else ""))
        self.note_version(src, cap)
        return problem is None

    def group(self, members: list[Source]) -> None:
        """Alternatives: the first that exits 0 with some output wins; failures are remembered."""
        tried: list[str] = []
        for src in members:
            reason = self.skip_reason(src)
            if reason:
                tried.append(f"{src.id}: {reason}")
                if "budget" in reason or "safe mode" in reason:
                    break
                continue
            timeout = max(0.1, min(src.timeout_s or self.opts.timeout_s, self.remaining()))
            self.say(f"collect: {src.id} …")
            cap, argv = self.capture(src)
            problem = self.describe(cap, timeout) or (None if cap.data.strip() else "empty output")
            if problem is None:
                self.store(src, cap, argv, 0, src.dest, fallback_from=tried or None)
                self.note_version(src, cap)
                return
            tried.append(f"{src.id}: {problem}")
        self.gap(f"{members[0].group}: no source worked ({'; '.join(tried)})")

    def note_version(self, src: Source, cap: Captured) -> None:
        if not src.version_of or cap.rc != 0:
            return
        version = parse_version(src.version_of, cap.data.decode("utf-8", "replace"))
        if version:
            self.versions.setdefault(src.version_of, version)

    # -- builtins
    def builtin(self, src: Source) -> None:
        reason = self.skip_reason(src)
        if reason:
            self.gap(f"{src.id}: {reason}")
            return
        self.say(f"collect: {src.id} …")
        {"uptime": self.uptime, "container": self.container, "cgroup_memory": self.cgroup_memory,
         "sglang": self.sglang, "logs": self.user_logs, "added": self.added,
         "crash_artifacts": self.crash_artifacts, "record": self.record}[src.builtin](src)

    def crash_artifacts(self, src: Source) -> None:
        """The engines' crash dumps and flight-recorder files the discovered processes name (capped)."""
        from parsers.safe_pickle import UnsafePickle, looks_like_pickle

        from . import crash_artifacts

        for found in crash_artifacts.find(self.processes, self.opts.proc_root, self.gap):
            if self.remaining() <= 0.05:
                self.gap(f"{src.id}: {found.origin}: skipped: budget exhausted")
                continue
            cap = Captured(rc=0, started=utc_stamp())
            try:
                data = found.path.read_bytes()[: crash_artifacts.MAX_FILE_BYTES]
            except OSError as exc:
                self.gap(f"{src.id}: {found.origin}: {_os_error(exc)}")
                continue
            transform = None
            if self.opts.redact and looks_like_pickle(data[:2]):
                try:  # a text substitution would break the pickle's length prefixes: rewrite its strings
                    data = crash_artifacts.redact_pickle(data, redact_bytes)
                except UnsafePickle as exc:
                    self.gap(f"{src.id}: {found.origin}: not collected, cannot be redacted: {exc}")
                    continue
                transform = _no_redaction
            cap.ended = utc_stamp()
            self.bundle.add_bytes(found.dest, data, src.id, None, cap, transform=transform, origin=found.origin,
                                  sensitivity=src.sensitivity)

    def text_artifact(self, src: Source, text: str, started: str) -> None:
        cap = Captured(rc=0, started=started, ended=utc_stamp())
        self.bundle.add_bytes(src.dest, text.encode("utf-8", "surrogateescape"), src.id, src.format, cap,
                              sensitivity=src.sensitivity)

    def uptime(self, src: Source) -> None:
        started = utc_stamp()
        proc = self.opts.proc_root
        lines = []
        up = read_file_tail(proc / "uptime", 4096)
        lines.append(f"uptime {up.data.decode(errors='replace').strip()}" if not up.error
                     else f"uptime unavailable: {up.error}")
        st = read_file_tail(proc / "stat", 1024**2)
        m = re.search(rb"^btime\s+(\d+)", st.data, re.M)
        if m:
            btime = int(m.group(1))
            self.boot_time = utc_stamp(btime).replace(".000000Z", "Z")
            lines += [f"btime {btime}", f"boot_time {self.boot_time}"]
        else:
            lines.append(f"btime unavailable: {st.error or 'no btime line'}")
            self.gap(f"{src.id}: boot time unknown ({st.error or 'no btime line'})")
        lines += [f"utc_offset_s {time.localtime().tm_gmtoff}", f"timezone {host_timezone()}",
                  f"captured_at {utc_stamp()}"]
        self.text_artifact(src, "\n".join(lines) + "\n", started)

    def container(self, src: Source) -> None:
        started = utc_stamp()
        proc = self.opts.proc_root
        lines = [f"{marker}: {'present' if os.path.exists(marker) else 'absent'}"
                 for marker in ("/.dockerenv", "/run/.containerenv")]
        # systemd-nspawn, podman and lxc set a lower-case `container` variable
        lines.append(f"container env (collector): {os.environ.get('container', '')}")  # noqa: SIM112
        env1 = read_file_tail(proc / "1" / "environ", 1024**2)
        if env1.error:
            lines.append(f"/proc/1/environ: {env1.error}")
            self.gap(f"{src.id}: /proc/1/environ: {env1.error}")
        else:
            values = [v.split(b"=", 1)[1].decode(errors="replace") for v in env1.data.split(b"\x00")
                      if v.startswith(b"container=")]
            lines.append(f"container env (pid 1): {values[0] if values else ''}")
        for pid in ("1", "self"):
            cg = read_file_tail(proc / pid / "cgroup", 1024**2)
            lines.append(f"/proc/{pid}/cgroup: {cg.error}" if cg.error else f"/proc/{pid}/cgroup:")
            lines += ["  " + ln for ln in cg.data.decode(errors="replace").splitlines()]
        self.text_artifact(src, "\n".join(lines) + "\n", started)

    def cgroup_memory(self, src: Source) -> None:
        started = utc_stamp()
        proc = self.opts.proc_root
        pids = [str(p["pid"]) for p in self.processes] + ["self"]
        lines: list[str] = []
        seen: set[Path] = set()
        for pid in pids:
            text = next((p.get("cgroup") for p in self.processes if str(p["pid"]) == pid), None)
            if text is None:
                cap = read_file_tail(proc / pid / "cgroup", 1024**2)
                if cap.error:
                    lines.append(f"# pid {pid}: cgroup {cap.error}")
                    continue
                text = cap.data.decode(errors="replace")
            for folder in cgroup_memory_dirs(text, self.opts.cgroup_root):
                if folder in seen:
                    continue
                seen.add(folder)
                lines.append(f"# pid {pid}: {folder}")
                lines += read_cgroup_memory(folder)
        self.text_artifact(src, "\n".join(lines) + "\n", started)

    def sglang(self, src: Source) -> None:
        timeout = max(0.1, min(self.opts.timeout_s, self.remaining()))
        pkg_root = str(Path(forensics.__file__).resolve().parents[1])
        env = dict(self.env, PYTHONPATH=os.pathsep.join(filter(None, [pkg_root, self.env.get("PYTHONPATH")])))
        cap = run_command([sys.executable, "-c", "from forensics.collect import _discovery_main; _discovery_main()",
                           str(self.opts.proc_root)], timeout, 64 * 1024**2, env=env, merge_stderr=False)
        problem = self.describe(cap, timeout)
        if problem:
            detail = (cap.stderr or b"").decode("utf-8", "replace").strip().splitlines()[-1:]
            self.gap(f"sglang-discovery: {problem}{': ' + detail[0] if detail else ''} (processes found before it: kept)")
        for raw in cap.data.splitlines():
            with contextlib.suppress(ValueError):
                self.processes.append(json.loads(raw))
        by_engine = {e: sum(p.get("engine", "sglang") == e for p in self.processes) for e in ("sglang", "vllm")}
        self.say("collect: " + ", ".join(f"{n} {'SGLang' if e == 'sglang' else 'vLLM'} process(es)"
                                         for e, n in by_engine.items() if n or e == "sglang") + " found")
        for info in self.processes:
            self.one_process(info, cap)

    def one_process(self, info: dict, cap: Captured) -> None:
        pid = info["pid"]
        engine = info.get("engine") or "sglang"
        base = f"{engine}/{pid}"
        pcap = Captured(rc=0, started=cap.started, ended=cap.ended)
        errors = info.get("errors") or {}
        for key, err in errors.items():
            self.gap(f"{engine} pid {pid}: {key}: {err}")
        cmdline = info.get("cmdline")
        argv_redacted: list[str] = []
        if cmdline is not None:
            entry = self.bundle.add_bytes(f"{base}/cmdline", cmdline.encode("utf-8", "surrogateescape"),
                                          f"{engine}-cmdline", "launch", pcap, sensitivity="secret")
            data = (self.bundle.staging / entry["path"]).read_bytes()
            argv_redacted = [a.decode("utf-8", "replace") for a in data.split(b"\x00") if a]
        environ = info.get("environ")
        tz = None
        if environ is not None:
            env_lines = [v for v in environ.split("\x00") if v]
            tz = next((v[3:] for v in env_lines if v.startswith("TZ=")), None)
            self.bundle.add_bytes(f"{base}/environ.txt", ("\n".join(env_lines) + "\n").encode(
                "utf-8", "surrogateescape"), f"{engine}-environ", None, pcap, sensitivity="secret")
        if info.get("cwd") is not None:
            self.bundle.add_bytes(f"{base}/cwd.txt", (info["cwd"] + "\n").encode("utf-8", "surrogateescape"),
                                  f"{engine}-cwd", None, pcap)
        fds = info.get("fds") or {}
        fd_lines = []
        logs: list[str] = []
        for fd, e in sorted(fds.items()):
            kind = f"regular file, {e.get('size')} bytes" if e.get("regular") else "not a file"
            fd_lines.append(f"{fd} -> {e['target']} ({kind})")
            if fd in ("1", "2") and e.get("regular"):
                path = self.log_from_fd(pid, fd, e, engine)
                if path and path not in logs:
                    logs.append(path)
        if fd_lines:
            self.bundle.add_bytes(f"{base}/fds.txt", ("\n".join(fd_lines) + "\n").encode("utf-8", "surrogateescape"),
                                  f"{engine}-fds", None, pcap)
        if fds and not any(e.get("regular") for fd, e in fds.items() if fd in ("1", "2")):
            self.gap(f"{engine} pid {pid}: stdout/stderr are not files ({fds.get('1', {}).get('target')}); "
                     "pass its log with --log")
        exe = info.get("exe")
        if self.python is None and exe and os.path.isabs(exe) and os.access(exe, os.X_OK) and \
                "python" in os.path.basename(exe):
            self.python = exe
        self.process_summaries.append({
            "pid": pid, "ppid": info.get("ppid"), "comm": info.get("comm"), "state": info.get("state"),
            "argv": argv_redacted, "cwd": info.get("cwd"), "exe": exe, "tz": tz,
            "localtime": info.get("localtime"), "logs": logs,
        })

    def log_from_fd(self, pid: int, fd: str, e: dict, engine: str) -> str | None:
        identity: tuple[int, int] | str = (e["dev"], e["ino"]) if "ino" in e else e["target"]
        if identity in self.log_identities:
            return self.log_identities[identity]
        if self.remaining() <= 0.05:
            self.gap(f"logs: {e['target']}: skipped: budget exhausted")
            return None
        name = os.path.basename(e["target"].replace(" (deleted)", "")) or f"pid{pid}-fd{fd}.log"
        # read through the fd link: it reaches the open file even inside another mount namespace
        # the engine discovery found is the format hint (report decides by content, docs/bundle.md)
        entry = self.bundle.add_file(f"logs/{name}", self.opts.proc_root / str(pid) / "fd" / fd, f"{engine}-log",
                                     engine, self.opts.max_log_bytes, origin=e["target"], pid=pid, fd=int(fd))
        if entry is None:
            return None
        self.log_identities[identity] = entry["path"]
        self.note_truncation(entry)
        return entry["path"]

    def note_truncation(self, entry: dict) -> None:
        if entry.get("truncated"):
            self.gap(f"{entry['path']}: truncated to the last {entry['bytes']} of {entry['original_bytes']} bytes")

    def user_files(self, patterns: list[str], folder: str, source: str, fmt: str | None) -> None:
        for path in expand_paths(patterns, self.gap, source):
            if self.remaining() <= 0.05:
                self.gap(f"{source}: {path}: skipped: budget exhausted")
                continue
            try:
                st = os.stat(path)
                identity: tuple[int, int] | str = (st.st_dev, st.st_ino)
            except OSError:
                identity = path
            if identity in self.log_identities:
                continue
            entry = self.bundle.add_file(f"{folder}/{os.path.basename(path)}", path, source, fmt,
                                         self.opts.max_log_bytes, origin=path)
            if entry:
                self.log_identities[identity] = entry["path"]
                self.note_truncation(entry)

    def user_logs(self, src: Source) -> None:
        self.user_files(self.opts.logs, "logs", "log", None)  # any engine's log: content decides its format

    def added(self, src: Source) -> None:
        self.user_files(self.opts.adds, "added", "add", None)

    def record(self, src: Source) -> None:
        """The recorder's last ``record_since_s`` seconds, as sealed segments (each record redacted)."""
        from forensics.record.ring import export_window

        folder = Path(self.opts.record_dir)
        if not folder.is_dir():
            self.say(f"collect: record: no ring at {folder} (forensics record is not running here)")
            return
        started, now = utc_stamp(), time.time()
        counts: Counter[str] = Counter()

        def scrub(text: str) -> str:
            out, c = redact_text(text)
            counts.update(c)
            return out

        try:
            segments = export_window(folder, now - self.opts.record_since_s, now,
                                     transform=scrub if self.opts.redact else None)
        except OSError as exc:
            self.gap(f"{src.id}: {folder}: {_os_error(exc)}")
            return
        if not segments:
            self.gap(f"{src.id}: the ring at {folder} holds nothing from the last {self.opts.record_since_s:g} s")
            return
        for name, data, n in segments:
            cap = Captured(rc=0, started=started, ended=utc_stamp())
            self.bundle.add_prepared(f"{src.dest}{name}", data, src.id, src.format, cap, counts,
                                     sensitivity=src.sensitivity, records=n, compression="gzip")
            counts = Counter()

    # -- the whole table
    def sweep(self, sources: tuple[Source, ...]) -> None:
        snap_sources = [s for s in sources if s.snapshot]
        multi = self.opts.snapshots > 1
        snapshot_t0: float | None = None
        done_groups: set[str] = set()
        for src in sources:
            if src.group:
                if src.group not in done_groups:
                    done_groups.add(src.group)
                    self.group([s for s in sources if s.group == src.group])
                continue
            if src.snapshot:
                if snapshot_t0 is None:
                    snapshot_t0 = time.monotonic()
                self.one(src, 0, snapshot_dest(src, 0) if multi else None)
            elif src.builtin:
                self.builtin(src)
            else:
                self.one(src)
        for index in range(1, max(1, self.opts.snapshots)):
            due = (snapshot_t0 or time.monotonic()) + index * max(0.0, self.opts.interval_s)
            if due > self.deadline:
                for s in snap_sources:
                    self.gap(f"{s.id} (snapshot {index}): skipped: budget exhausted")
                continue
            time.sleep(max(0.0, due - time.monotonic()))
            self.say(f"collect: snapshot {index + 1}/{self.opts.snapshots}")
            for s in snap_sources:
                self.one(s, index, snapshot_dest(s, index))
        self.versions_fallback()

    def versions_fallback(self) -> None:
        """Driver and CUDA versions from nvidia-smi's own output when the direct sources failed."""
        for a in self.bundle.artifacts:
            if a["source"] not in ("nvidia-smi-table", "nvidia-smi-q-xml"):
                continue
            text = (self.bundle.staging / a["path"]).read_text(errors="replace")
            for name, pattern in (("driver", r"(?:Driver Version|KMD Version|<driver_version>):?\s*([\d.]+)"),
                                  ("cuda", r"(?:CUDA Version|CUDA UMD Version|<cuda_version>):?\s*([\d.]+)")):
                m = re.search(pattern, text)
                if m:
                    self.versions.setdefault(name, m.group(1))


def snapshot_dest(src: Source, index: int) -> str:
    """Where a snapshot source goes when there are several snapshots.

    >>> from forensics.collect.sources import by_id
    >>> snapshot_dest(by_id("free"), 1)
    'snapshots/001/free.txt'
    """
    return f"snapshots/{index:03d}/{src.dest.rsplit('/', 1)[-1]}"


def parse_version(component: str, text: str) -> str | None:
    """The version number of ``component`` in the text its source printed.

    >>> parse_version("driver", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar 5 2024")
    '550.54.15'
    >>> parse_version("cuda", "Cuda compilation tools, release 12.4, V12.4.131")
    '12.4.131'
    >>> parse_version("sglang", "0.4.6.post1\\n")
    '0.4.6.post1'
    """
    patterns = {
        "driver": r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)",
        "cuda": r"(?:release \S+, V|\"cuda\"\s*:\s*\{[^}]*?\"version\"\s*:\s*\"|CUDA Version\s+)(\d+(?:\.\d+)+)",
    }
    if component in patterns:
        m = re.search(patterns[component], text)
        return m.group(1) if m else None
    first = text.strip().splitlines()[-1].strip() if text.strip() else ""
    return first if re.fullmatch(r"\d+(?:\.\w+)+(?:[+-][\w.]+)?", first) else None


def cgroup_memory_dirs(cgroup_text: str, root: Path) -> list[Path]:
    """Memory-controller folders named by a ``/proc/PID/cgroup`` text (v2 unified or v1 memory).

    >>> [str(p) for p in cgroup_memory_dirs("0::/system.slice/sglang.service\\n", Path("/sys/fs/cgroup"))]
    ['/sys/fs/cgroup/system.slice/sglang.service']
    >>> [str(p) for p in cgroup_memory_dirs("4:memory:/docker/abc\\n", Path("/sys/fs/cgroup"))]
    ['/sys/fs/cgroup/memory/docker/abc']
    """
    from forensics.record.sampler import cgroup_memory_entries

    return [folder for _path, _version, folder in cgroup_memory_entries(cgroup_text, root)]


CGROUP_MEMORY_FILES = (
    "memory.max", "memory.high", "memory.current", "memory.peak", "memory.swap.max", "memory.swap.current",
    "memory.events", "memory.limit_in_bytes", "memory.usage_in_bytes", "memory.max_usage_in_bytes",
    "memory.failcnt", "memory.memsw.limit_in_bytes", "memory.oom_control",
)


def read_cgroup_memory(folder: Path) -> list[str]:
    """``<file>: <value>`` lines for the memory files present in ``folder``."""
    lines = []
    for name in CGROUP_MEMORY_FILES:
        cap = read_file_tail(folder / name, 64 * 1024)
        if cap.error:
            if cap.error != "not found":
                lines.append(f"{name}: unreadable ({cap.error})")
            continue
        values = cap.data.decode(errors="replace").strip().splitlines()
        if len(values) == 1:
            lines.append(f"{name}: {values[0]}")
        else:
            lines.append(f"{name}:")
            lines += ["  " + v for v in values]
    return lines or ["(no memory controller files)"]


def unmatched(pattern: str) -> str | None:
    """Why a ``--log``/``--add`` argument names no file we could read, or None when it names some.

    >>> unmatched("/nonexistent/sglang.log")
    'no such file'
    >>> unmatched("/nonexistent/*.log")
    'no file matches this pattern'
    """
    if os.path.isdir(pattern):
        files = [p for p in Path(pattern).rglob("*") if p.is_file()]
        if not files:
            return "the folder holds no file"
        return None if any(os.access(p, os.R_OK) for p in files) else "no file in the folder is readable"
    if os.path.exists(pattern):
        return None if os.access(pattern, os.R_OK) else "not readable (permission denied)"
    if glob.has_magic(pattern):
        return None if any(os.path.isfile(p) for p in glob.iglob(pattern, recursive=True)) else \
            "no file matches this pattern"
    return "no such file"


def expand_paths(patterns: list[str], gap: Callable[[str], None], source: str) -> list[str]:
    """Files named by ``--log``/``--add`` arguments: files, folders (recursively) and globs."""
    out: list[str] = []
    for pattern in patterns:
        if os.path.isdir(pattern):
            found = sorted(str(p) for p in Path(pattern).rglob("*") if p.is_file())
        elif os.path.exists(pattern):
            found = [pattern]
        else:
            found = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
        if not found:
            gap(f"{source}: {pattern}: no such file")
        out += [p for p in found if p not in out]
    return out


# ----------------------------------------------------------------------------------------------
# Packing


def known_hostnames(host: str) -> list[str]:
    """Names the obfuscator should replace: ours, its short form, and /etc/hosts names."""
    names = {host, host.split(".")[0]}
    with contextlib.suppress(OSError):
        names.add(Path("/etc/hostname").read_text().strip())
    with contextlib.suppress(OSError):
        for line in Path("/etc/hosts").read_text(errors="replace").splitlines():
            fields = line.split("#", 1)[0].split()
            if len(fields) >= 2 and not fields[0].startswith(("127.", "::1", "fe00:", "ff0")):
                names.update(fields[1:])
    return sorted(n for n in names if n)


def _argv_hosts(processes: list[dict]) -> list[str]:
    """Host names in --host / --dist-init-addr (--nccl-init-addr) values of an engine's argv, spelt any way its
    argparse reads (an abbreviation such as ``--nccl-init`` too: parsers/launch/vocab.py::resolve).

    >>> _argv_hosts([{"argv": ["python", "-m", "sglang.launch_server", "--nccl-init", "head-0:5000", "--host=h1"]}])
    ['head-0', 'h1']
    """
    from parsers.launch import canonical_flag, engine_of_argv

    hosts = []
    for p in processes:
        argv = p.get("argv") or []
        engine = engine_of_argv(argv)
        for i, arg in enumerate(argv):
            written, _, value = arg.partition("=")
            if not written.startswith("--"):
                continue
            if canonical_flag(written, engine) not in ("--host", "--dist-init-addr"):
                continue
            if not value and i + 1 < len(argv):
                value = argv[i + 1]
            if value:
                hosts.append(value.rsplit(":", 1)[0].strip("[]"))
    return hosts


def obfuscate_staging(bundle: Bundle, ob: Obfuscator) -> None:
    """Rewrite every staged artifact (names too) through the obfuscator; refresh sizes and hashes."""
    def transform(data: bytes) -> tuple[bytes, Counter[str]]:
        return ob.apply_bytes(data), Counter()

    for a in bundle.artifacts:
        src = bundle.staging / a["path"]
        new_rel = ob.apply(a["path"])
        tmp = src.with_name(src.name + ".obf")
        a["bytes"], a["sha256"], _ = _transform_file(src, tmp, transform)
        dst = bundle.staging / new_rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, dst)
        if dst != src:
            src.unlink()
        a["path"] = new_rel


def _tar_mode(name: str) -> str:
    if name.endswith(".tar.zst") or name.endswith(".tzst"):
        return "zst"
    if name.endswith(".tar"):
        return "tar"
    return "gz"


def pack(staging: Path, top: str, manifest_bytes: bytes, members: list[str], fileobj: io.BufferedIOBase,
         mode: str) -> None:
    """Write the archive: manifest.json first, then the artifacts, under one top folder."""
    now = time.time()

    def info(name: str, size: int) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(f"{top}/{name}")
        ti.size, ti.mtime, ti.mode, ti.uname, ti.gname = size, int(now), 0o644, "", ""
        return ti

    def write(tar: tarfile.TarFile) -> None:
        tar.addfile(info("manifest.json", len(manifest_bytes)), io.BytesIO(manifest_bytes))
        for rel in members:
            path = staging / rel
            with open(path, "rb") as fh:
                tar.addfile(info(rel, os.fstat(fh.fileno()).st_size), fh)

    if mode == "zst":
        import zstandard

        with zstandard.ZstdCompressor(level=10).stream_writer(fileobj, closefd=False) as zw, \
                tarfile.open(fileobj=zw, mode="w|") as tar:
            write(tar)
    elif mode == "tar":
        with tarfile.open(fileobj=fileobj, mode="w") as tar:
            write(tar)
    else:
        with tarfile.open(fileobj=fileobj, mode="w:gz", compresslevel=6) as tar:
            write(tar)


def _write_atomically(out: Path, writer: Callable[[io.BufferedIOBase], None]) -> None:
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            writer(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def _write_private_json(path: Path, obj: object) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True)
    os.chmod(path, 0o600)


# ----------------------------------------------------------------------------------------------
# Entry point


def collect(opts: CollectOptions) -> Path:
    """Collect one bundle; return its path (``Path("-")`` when written to stdout)."""
    started_at = utc_stamp()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    host = socket.gethostname() or "unknown-host"
    ob = Obfuscator(known_hostnames(host)) if opts.obfuscate else None
    to_stdout = str(opts.output) == "-"
    host_label = ob.apply(host) if ob else host
    if opts.tag:  # every node's bundle of one incident sorts together: forensics-INCIDENT-123-gpu-b-…
        host_label = f"{check_tag(opts.tag)}-{host_label}"
    if to_stdout:
        out = Path("-")
        work_dir = Path.cwd() if os.access(Path.cwd(), os.W_OK) else Path(tempfile.gettempdir())
    else:
        out = Path(opts.output) if opts.output else Path.cwd() / f"forensics-{host_label}-{stamp}.tar.gz"
        work_dir = out.parent
        work_dir.mkdir(parents=True, exist_ok=True)
    # staging beside the output, not in /tmp: /tmp is often tmpfs, i.e. RAM, on a host short of it
    staging = Path(tempfile.mkdtemp(prefix=".forensics-staging-", dir=work_dir))
    try:
        bundle = Bundle(staging, opts.redact)
        run = _Run(opts, bundle, host)
        run.say(f"collect: host {host_label}, budget {opts.budget_s:g} s, timeout {opts.timeout_s:g} s per source")
        run.sweep(SOURCES)
        if ob:
            for name in _argv_hosts(run.process_summaries):
                ob.add_hostname(name)
            obfuscate_staging(bundle, ob)
        manifest = build_manifest(opts, run, started_at, host)
        manifest_text = json.dumps(manifest, indent=2, ensure_ascii=False)
        if opts.redact:
            manifest_text = redact_text(manifest_text)[0]
        if ob:
            manifest_text = ob.apply(manifest_text)
        top = f"forensics-{host_label}-{stamp}"
        members = [a["path"] for a in bundle.artifacts]
        mode = _tar_mode(out.name)
        if to_stdout:
            pack(staging, top, manifest_text.encode(), members, sys.stdout.buffer, mode)
            sys.stdout.buffer.flush()
        else:
            _write_atomically(out, lambda fh: pack(staging, top, manifest_text.encode(), members, fh, mode))
        if ob:
            map_path = (work_dir / f"forensics-{stamp}.obfuscation-map.json" if to_stdout
                        else out.with_name(out.name + ".obfuscation-map.json"))
            _write_private_json(map_path, {"bundle": str(out), "mapping": ob.mapping})
            run.say(f"collect: obfuscation map (keep it private): {map_path}")
        run.say(f"collect: wrote {out} ({len(members)} artifacts, {len(bundle.gaps)} gaps, "
                f"{time.monotonic() - run.t0:.1f} s)")
        return out
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def build_manifest(opts: CollectOptions, run: _Run, started_at: str, host: str) -> dict:
    artifacts = run.bundle.artifacts
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "forensics", "version": forensics.__version__},
        "host": host,
        **({"tag": opts.tag} if opts.tag else {}),
        "started_at": started_at,
        "ended_at": utc_stamp(),
        "utc_offset_s": time.localtime().tm_gmtoff,
        "timezone": host_timezone(),
        "boot_time": run.boot_time,
        "options": {
            "timeout_s": opts.timeout_s, "budget_s": opts.budget_s, "safe_mode": opts.safe_mode,
            "redact": opts.redact, "obfuscate": opts.obfuscate, "snapshots": opts.snapshots,
            "interval_s": opts.interval_s, "max_log_bytes": opts.max_log_bytes,
            "logs": list(opts.logs), "adds": list(opts.adds),
        },
        "versions": dict(sorted(run.versions.items())),
        "gaps": list(run.bundle.gaps),
        "redactions": sum(a["redactions"] for a in artifacts),
        "sglang_processes": run.process_summaries,
        "artifacts": artifacts,
    }

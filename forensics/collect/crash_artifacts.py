"""Where the engines leave their own crash artifacts, found from the server processes collect discovered.

* SGLang's ``--crash-dump-folder DIR`` (``server_args.py``): ``DIR/<hostname>/crash_dump_*.pkl``
  (``tokenizer_manager.py``) and, with ``SGLANG_DEBUG_CRASH_SNAPSHOT=1``,
  ``DIR/<hostname>/crash_snapshot_*.json`` (``debug_utils/crash_snapshot.py``; without the flag,
  ``/tmp/sglang_crash_snapshot``).
* PyTorch's NCCL flight recorder: each rank writes ``<prefix><rank>``, the prefix from
  ``TORCH_FR_DUMP_TEMP_FILE`` (newer) or ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``, default
  ``/tmp/nccl_trace_rank_`` (``torch/csrc/distributed/c10d/FlightRecorder.hpp``), read from the
  rank processes' environment.

Paths are resolved inside each process's root (``/proc/<pid>/root``: a containerised server's
``/tmp`` is not ours), relative ones against its cwd. Caps: :data:`MAX_FILES` files, newest first,
:data:`MAX_FILE_BYTES` each and :data:`MAX_TOTAL_BYTES` in all; what is left out is a gap.
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MAX_FILES = 64
MAX_FILE_BYTES = 128 << 20
MAX_TOTAL_BYTES = 512 << 20
DEFAULT_FR_PREFIX = "/tmp/nccl_trace_rank_"
SNAPSHOT_DEFAULT_FOLDER = "/tmp/sglang_crash_snapshot"
_CRASH_GLOBS = ("crash_dump_*.pkl", "crash_snapshot_*.json")


@dataclass(frozen=True)
class Found:
    path: Path  # where to read it on this host
    origin: str  # the path as the process named it
    dest: str  # where it goes in the bundle
    size: int
    mtime: float


def crash_dump_folder(argv: list[str]) -> str | None:
    """The ``--crash-dump-folder`` of an SGLang argv.

    >>> crash_dump_folder(["python3", "-m", "sglang.launch_server", "--crash-dump-folder", "/var/crash"])
    '/var/crash'
    >>> crash_dump_folder(["sglang", "serve", "--crash-dump-folder=dumps"]), crash_dump_folder(["x"])
    ('dumps', None)
    """
    for i, a in enumerate(argv):
        if a == "--crash-dump-folder" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--crash-dump-folder="):
            return a.split("=", 1)[1]
    return None


def environ_dict(environ: str | None) -> dict[str, str]:
    out = {}
    for item in (environ or "").split("\x00"):
        k, eq, v = item.partition("=")
        if eq:
            out[k] = v
    return out


def flight_recorder_prefix(env: dict[str, str]) -> str | None:
    """The prefix a rank's flight-recorder dump is written to, if the recorder is on.

    >>> flight_recorder_prefix({"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"})
    '/tmp/nccl_trace_rank_'
    >>> flight_recorder_prefix({"TORCH_FR_DUMP_TEMP_FILE": "/fr/trace_"}), flight_recorder_prefix({})
    ('/fr/trace_', None)
    """
    for key in ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
        if env.get(key):
            return env[key]
    size = env.get("TORCH_FR_BUFFER_SIZE") or env.get("TORCH_NCCL_TRACE_BUFFER_SIZE") or "0"
    return DEFAULT_FR_PREFIX if size.strip().isdigit() and int(size) > 0 else None


def _in_root(proc_root: Path, pid: int, path: str, cwd: str | None) -> Path:
    """``path`` as the process sees it: inside its root when that is readable, relative to its cwd."""
    if not os.path.isabs(path) and cwd:
        path = os.path.join(cwd, path)
    rooted = proc_root / str(pid) / "root" / path.lstrip("/")
    with contextlib.suppress(OSError):
        if rooted.exists():
            return rooted
    return Path(path)


def _matches(base: Path, pattern: str) -> list[Path]:
    # the names are the engines' own; escape the folder so a bracket in it is not a glob
    return [Path(p) for p in glob.glob(os.path.join(glob.escape(str(base)), pattern))[:1000]]


def find(processes: list[dict], proc_root: Path, gap: Callable[[str], None]) -> list[Found]:
    """Every crash artifact the discovered processes name, newest first, within the caps."""
    seen: dict[str, Found] = {}
    for info in processes:
        pid = info.get("pid")
        if not isinstance(pid, int):
            continue
        argv = [a for a in (info.get("cmdline") or "").split("\x00") if a]
        env = environ_dict(info.get("environ"))
        cwd = info.get("cwd")
        folders = []
        folder = crash_dump_folder(argv)
        if folder:
            folders.append(folder)
        if env.get("SGLANG_DEBUG_CRASH_SNAPSHOT", "").lower() in ("1", "true") and not folder:
            folders.append(SNAPSHOT_DEFAULT_FOLDER)
        for f in folders:
            base = _in_root(proc_root, pid, f, cwd)
            for host_dir in _matches(base, "*"):
                for pattern in _CRASH_GLOBS:
                    for p in _matches(host_dir, pattern):
                        _add(seen, p, str(p), f"crash/{host_dir.name}/{p.name}")
        prefix = flight_recorder_prefix(env)
        if prefix:
            where = _in_root(proc_root, pid, os.path.dirname(prefix) or ".", cwd)
            for p in _matches(where, glob.escape(os.path.basename(prefix)) + "*"):
                if p.name[len(os.path.basename(prefix)):].split(".")[0].isdigit():
                    _add(seen, p, os.path.join(os.path.dirname(prefix), p.name), f"flight_recorder/{p.name}")
    found = sorted(seen.values(), key=lambda f: -f.mtime)
    out: list[Found] = []
    total = 0
    for f in found:
        if len(out) >= MAX_FILES:
            gap(f"crash-artifacts: {len(found) - MAX_FILES} more file(s) left out (at most {MAX_FILES}, newest first)")
            break
        if f.size > MAX_FILE_BYTES:
            gap(f"crash-artifacts: {f.origin}: {f.size:,} bytes, over the {MAX_FILE_BYTES:,}-byte cap; not collected")
            continue
        if total + f.size > MAX_TOTAL_BYTES:
            gap(f"crash-artifacts: {f.origin}: left out, the {MAX_TOTAL_BYTES:,}-byte total is reached")
            continue
        total += f.size
        out.append(f)
    return out


def _add(seen: dict[str, Found], path: Path, origin: str, dest: str) -> None:
    try:
        st = path.stat()
    except OSError:
        return
    if not path.is_file():
        return
    key = f"{st.st_dev}:{st.st_ino}"
    if key not in seen:
        seen[key] = Found(path, origin, dest, st.st_size, st.st_mtime)


#: Strings longer than this in a collected pickle (prompts, generated text) are replaced by their length.
LONG_TEXT_CHARS = 256


def redact_pickle(data: bytes, redact: Callable[[bytes], tuple[bytes, object]]) -> bytes:
    """The pickle with every string redacted (``redact`` as for any artifact) and long texts — the
    requests' prompts and outputs — reduced to ``<redacted: N characters>``, which the crash-dump parser
    reads as a length. Raises ``UnsafePickle`` on a stream that cannot be rewritten."""
    from parsers.safe_pickle import rewrite_strings

    def one(s: str) -> str:
        if len(s) > LONG_TEXT_CHARS:
            return f"<redacted: {len(s)} characters>"
        out, _counts = redact(s.encode("utf-8", "surrogatepass"))
        return out.decode("utf-8", "replace")

    return rewrite_strings(data, one)

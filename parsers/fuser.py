"""``fuser -v /dev/nvidia*``: which processes hold the GPU device files open (psmisc).

Sources: fuser(1) (psmisc: ``-v`` table ``USER PID ACCESS COMMAND``, access letters ``c e f F r m``,
``kernel`` users) and nvidia-modprobe(1) (the ``/dev/nvidiaN`` device files).

fuser writes its table to stderr; the collector keeps stdout and stderr together. The verbose
form names the device once and continues with indented rows; ``kernel`` stands where a pid would
for kernel users (``mount``, ``swap``). Sample::

                         USER        PID ACCESS COMMAND
    /dev/nvidia0:        root      41300 F...m sglang::schedul
                         root      41207 F...m python3
    /dev/nvidiactl:      root      41300 F...m sglang::schedul
    /dev/nvidia-uvm-tools:
                         root      41300 F.... sglang::schedul

The terse form (``fuser /dev/nvidia*``) puts pids with access letters after the name:
``/dev/nvidia0:  41300m 41207``. Access letters: ``f``/``F`` open file (F = for writing),
``r`` root dir, ``c`` cwd, ``e`` executable, ``m`` mmap'ed, ``.`` none.

One ``gpu_device_user`` event per (device, pid): ``pid``, ``comm``, ``gpu`` (N of /dev/nvidiaN);
attrs ``device``, ``access``, ``user`` (and ``kernel: true`` for kernel users). Just a header, or
nothing, means no process holds the devices: zero events, not an error.

>>> text = ("                     USER        PID ACCESS COMMAND\\n"
...         "/dev/nvidia2:        root      41302 F...m sglang::schedul\\n"
...         "                     alice     41207 F.... python3\\n")
>>> parse(text).events.select("pid", "comm", "gpu").rows()
[(41302, 'sglang::schedul', 2), (41207, 'python3', 2)]
>>> parse("/dev/nvidia0:  41300m 41207\\n").events.select("pid", "gpu").rows()
[(41300, 0), (41207, 0)]
"""

from __future__ import annotations

from typing import Any

import regex as re

from .proc_titles import process_identity, rank_columns
from .schema import MAX_UNRECOGNIZED_EXAMPLES, NotThisFormat, ParseResult

FORMAT = "fuser"

# fuser(1) (psmisc: ``-v`` table, terse ``/dev/x: pid[access]``, access letters, ``kernel``)
_HEADER_RE = re.compile(r"^\s*USER\s+PID\s+ACCESS\s+COMMAND\s*$")
# "/dev/nvidia0:" then optionally one verbose entry on the same line
_VERBOSE_RE = re.compile(
    r"^(?:(?P<dev>/\S*?):)?\s+(?P<user>\S+)\s+(?P<pid>\d+|kernel)\s+(?P<access>[.a-zA-Z]{1,8})(?:\s+(?P<cmd>.*?))?\s*$"
)
_DEVICE_ONLY_RE = re.compile(r"^(?P<dev>/\S*?):\s*$")
_TERSE_RE = re.compile(r"^(?P<dev>/\S*?):(?P<pids>(?:\s+\d+[a-zA-Z]*)+)\s*$")
_PIDS_ONLY_RE = re.compile(r"^(?:\s*\d+[a-zA-Z]*)+\s*$")
_TERSE_PID_RE = re.compile(r"(\d+)([a-zA-Z]*)")
# fuser(1) (its complaints); ``/dev/nvidiaN`` as nvidia-modprobe(1) creates them
_GPU_DEV_RE = re.compile(r"^/dev/nvidia(\d+)$")
# fuser's own complaints: a glob that matched nothing, a missing file
_ERROR_RE = re.compile(r"^(?:Specified filename .* does not exist\.|(?:/dev/|fuser: ).*: No such file or directory|"
                       r"Cannot stat /dev/.*|No process specification given)\s*$")


def gpu_index(device: str | None) -> int | None:
    """``/dev/nvidia3`` → 3; ``/dev/nvidiactl``, ``/dev/nvidia-uvm`` → None.

    >>> gpu_index("/dev/nvidia3"), gpu_index("/dev/nvidiactl")
    (3, None)
    """
    m = _GPU_DEV_RE.match(device or "")
    return int(m.group(1)) if m else None


def _split_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def _row(line_no: int, text: str, device: str | None, pid: int | None, **attrs: Any) -> dict[str, Any]:
    a = {"device": device, **{k: v for k, v in attrs.items() if v is not None}}
    # a kernel user's "command" is the mount point, not a process name
    comm = None if attrs.get("kernel") else attrs.get("command")
    ident = process_identity(comm) if comm else {}
    a.update(ident)
    return {
        "line": line_no, "kind": "gpu_device_user", "pid": pid, "comm": comm,
        "gpu": gpu_index(device), "text": text, "attrs": a, **rank_columns(ident),
    }


def sniff(head: str) -> float:
    """0.95 for fuser's verbose header; 0.9 for ``/dev/nvidia…:`` entry lines."""
    lines = [ln for ln in _split_lines(head)[:200] if ln.strip()]
    if not lines:
        return 0.0
    if any(_HEADER_RE.match(ln) for ln in lines[:3]):
        return 0.95
    dev_lines = [ln for ln in lines if ln.startswith("/dev/") and (_TERSE_RE.match(ln) or _VERBOSE_RE.match(ln)
                                                                   or _DEVICE_ONLY_RE.match(ln))]
    if dev_lines and len(dev_lines) >= 0.5 * len(lines) and any("nvidia" in ln for ln in dev_lines):
        return 0.9
    return 0.0


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    """One ``gpu_device_user`` row per (device, pid)."""
    lines = _split_lines(text)
    rows: list[dict[str, Any]] = []
    unrec: list[tuple[int, str]] = []
    notes: list[str] = []
    n_unrec = 0
    device: str | None = None
    ours = False  # saw anything of fuser's own shape
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if _HEADER_RE.match(line):
            ours = True
            continue
        m = _VERBOSE_RE.match(line)
        if m and (m.group("dev") or device is not None):
            ours = True
            device = m.group("dev") or device
            kernel = m.group("pid") == "kernel"
            rows.append(_row(i, line, device, None if kernel else int(m.group("pid")), user=m.group("user"),
                             access=m.group("access"), command=m.group("cmd") or None,
                             kernel=True if kernel else None))
            continue
        m = _TERSE_RE.match(line)
        if m:
            ours = True
            device = m.group("dev")
            for pid, access in _TERSE_PID_RE.findall(m.group("pids")):
                # text: this entry only; one line may carry thousands of pids
                rows.append(_row(i, f"{device}: {pid}{access}", device, int(pid), access=access or None))
            continue
        m = _DEVICE_ONLY_RE.match(line)
        if m:
            ours, device = True, m.group("dev")  # a long name: its entries follow on the next lines
            continue
        if ours and _PIDS_ONLY_RE.match(line):
            # stdout's pids kept apart from stderr's names: the device is unknown
            notes.append(f"line {i}: pids without a device name (stdout and stderr stored apart)")
            for pid, access in _TERSE_PID_RE.findall(line):
                rows.append(_row(i, f"{pid}{access}", None, int(pid), access=access or None))
            continue
        if _ERROR_RE.match(line.strip()):
            ours = True
            notes.append(f"fuser: {line.strip()}")
            continue
        n_unrec += 1
        if len(unrec) < MAX_UNRECOGNIZED_EXAMPLES:
            unrec.append((i, line[:500]))
    if not ours and n_unrec:
        raise NotThisFormat("no fuser header and no device entries")
    return ParseResult.from_rows(
        rows, source=FORMAT, path=path, lines=len(lines), recognized=len(lines) - n_unrec,
        unrecognized=n_unrec, unrecognized_examples=unrec, notes=notes,
    )

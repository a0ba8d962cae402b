"""Wrap a bare log in the envelopes real tools write (our own writers, after each tool's documented format).

Each wrapper takes the program's lines and gives the text a log driver, cluster tool or journal would
have stored. The time a driver stamps is when it read the line: here the program's own stamp when the
line has one (read as UTC), else the previous one, plus a microsecond per line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

_STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
BASE = datetime(2025, 11, 20, 9, 14, 2, tzinfo=UTC)
HOST = "gpu-node-7"
UNIT = "sglang.service"
PID = 4242


def stamps(lines: list[str]) -> list[datetime]:
    """Per line, when a driver would have read it."""
    out, last = [], BASE
    for i, line in enumerate(lines):
        m = _STAMP.search(line)
        if m:
            last = datetime.fromisoformat(m.group(1)).replace(tzinfo=UTC)
        out.append(last + timedelta(microseconds=i))
    return out


def _nano(t: datetime, fixed: bool = True) -> str:
    """RFC 3339 with nanoseconds: docker prints nine digits, kubelet trims trailing zeros."""
    frac = f"{t.microsecond:06d}123"
    if not fixed:
        frac = frac.rstrip("0")
    return t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def docker_json(lines: list[str], split: int = 16384, stream: str = "stderr") -> str:
    """Docker's json-file driver; a line longer than ``split`` is written as partial records whose
    ``log`` has no trailing newline (dockerd splits at 16 KiB)."""
    out = []
    for line, t in zip(lines, stamps(lines), strict=True):
        body = line + "\n"
        parts = [body[i:i + split] for i in range(0, len(body), split)] or ["\n"]
        if parts[-1] == "\n" and len(parts) > 1 and len(parts[-2]) == split:
            pass  # the newline alone in the last record, as dockerd does at an exact multiple
        for p in parts:
            out.append(json.dumps({"log": p, "stream": stream, "time": _nano(t)}, separators=(",", ":")))
    return "\n".join(out) + "\n"


def docker_t(lines: list[str]) -> str:
    """``docker logs -t``."""
    return "".join(f"{_nano(t)} {line}\n" for line, t in zip(lines, stamps(lines), strict=True))


def kubectl_ts(lines: list[str]) -> str:
    """``kubectl logs --timestamps`` (RFC3339Nano: trailing zeros trimmed)."""
    return "".join(f"{_nano(t, fixed=False)} {line}\n" for line, t in zip(lines, stamps(lines), strict=True))


def kubectl_prefix(lines: list[str]) -> str:
    """``kubectl logs --prefix --timestamps``."""
    return "".join(f"[pod/sglang-0/server] {_nano(t, fixed=False)} {line}\n"
                   for line, t in zip(lines, stamps(lines), strict=True))


def cri(lines: list[str], split: int = 16384) -> str:
    """The CRI file under /var/log/pods: ``TIME STREAM P|F text``."""
    out = []
    for line, t in zip(lines, stamps(lines), strict=True):
        parts = [line[i:i + split] for i in range(0, len(line), split)] or [""]
        for k, p in enumerate(parts):
            out.append(f"{_nano(t)} stdout {'F' if k == len(parts) - 1 else 'P'} {p}")
    return "\n".join(out) + "\n"


def _short(t: datetime, precise: bool = False) -> str:
    s = t.strftime("%b %d %H:%M:%S").replace(" 0", "  ", 1) if t.day < 10 else t.strftime("%b %d %H:%M:%S")
    return s + (f".{t.microsecond:06d}" if precise else "")


def journal_short(lines: list[str], precise: bool = False, tag: str = "python3") -> str:
    """``journalctl -o short`` / ``short-precise`` (and rsyslog's traditional RFC 3164 file format)."""
    return "".join(f"{_short(t, precise)} {HOST} {tag}[{PID}]: {line}\n"
                   for line, t in zip(lines, stamps(lines), strict=True))


def syslog_year(lines: list[str]) -> str:
    """An rsyslog template that prints the year after the day."""
    return "".join(f"{t.strftime('%b %d %Y %H:%M:%S')} {HOST} python3[{PID}]: {line}\n"
                   for line, t in zip(lines, stamps(lines), strict=True))


def journal_short_iso(lines: list[str]) -> str:
    """``journalctl -o short-iso`` (offset without a colon, systemd 252)."""
    return "".join(f"{t.strftime('%Y-%m-%dT%H:%M:%S')}+0000 {HOST} python3[{PID}]: {line}\n"
                   for line, t in zip(lines, stamps(lines), strict=True))


def journal_short_full(lines: list[str]) -> str:
    """``journalctl -o short-full``."""
    return "".join(f"{t.strftime('%a %Y-%m-%d %H:%M:%S')} UTC {HOST} python3[{PID}]: {line}\n"
                   for line, t in zip(lines, stamps(lines), strict=True))


def journal_short_monotonic(lines: list[str]) -> str:
    """``journalctl -o short-monotonic``: seconds since boot."""
    return "".join(f"[{1000 + i * 0.25:12.6f}] {HOST} python3[{PID}]: {line}\n" for i, line in enumerate(lines))


def journal_short_unix(lines: list[str]) -> str:
    """``journalctl -o short-unix``."""
    return "".join(f"{t.timestamp():.6f} {HOST} python3[{PID}]: {line}\n"
                   for line, t in zip(lines, stamps(lines), strict=True))


def syslog_iso(lines: list[str]) -> str:
    """rsyslog's RFC 3339 file format (RSYSLOG_FileFormat)."""
    return "".join(f"{t.isoformat(timespec='microseconds')} {HOST} python3[{PID}]: {line}\n"
                   for line, t in zip(lines, stamps(lines), strict=True))


def syslog_5424(lines: list[str]) -> str:
    """RFC 5424 (rsyslog RSYSLOG_SyslogProtocol23Format)."""
    return "".join(f"<14>1 {t.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} {HOST} python3 {PID} - "
                   f'[origin software="sglang"] {line}\n' for line, t in zip(lines, stamps(lines), strict=True))


def _journal_fields(line: str, t: datetime, i: int) -> dict[str, str]:
    return {"__CURSOR": f"s=0f1e;i={i:x};b=1a2b;m={i:x}", "__REALTIME_TIMESTAMP": str(int(t.timestamp() * 1e6)),
            "__MONOTONIC_TIMESTAMP": str(1_000_000 + i), "_BOOT_ID": "1a2b3c", "PRIORITY": "6",
            "_TRANSPORT": "stdout", "_HOSTNAME": HOST, "_SYSTEMD_UNIT": UNIT, "SYSLOG_IDENTIFIER": "python3",
            "_PID": str(PID), "MESSAGE": line}


def journal_json(lines: list[str]) -> str:
    """``journalctl -o json``; a message that is not plain ASCII is written as a byte array, as journald
    does for one that is not valid UTF-8."""
    out = []
    for i, (line, t) in enumerate(zip(lines, stamps(lines), strict=True)):
        rec: dict = _journal_fields(line, t, i)
        if not line.isascii():
            rec["MESSAGE"] = list(line.encode())
        keys = sorted(rec, reverse=bool(i % 2))  # key order changes from record to record
        out.append(json.dumps({k: rec[k] for k in keys}, ensure_ascii=False))
    return "\n".join(out) + "\n"


def journal_export_bytes(lines: list[str], binary_every: int = 4) -> bytes:
    """``journalctl -o export``: KEY=VALUE lines, records apart by a blank line; every ``binary_every``-th
    message (and any that is not plain text) as a binary field (name, 64-bit LE length, data)."""
    out = bytearray()
    for i, (line, t) in enumerate(zip(lines, stamps(lines), strict=True)):
        for k, v in _journal_fields(line, t, i).items():
            if k == "MESSAGE" and (i % binary_every == 0 or not line.isprintable()):
                data = v.encode()
                out += b"MESSAGE\n" + len(data).to_bytes(8, "little") + data + b"\n"
            else:
                out += f"{k}={v}\n".encode()
        out += b"\n"
    return bytes(out)


def compose(lines: list[str], ansi: bool = False, crlf: bool = False) -> str:
    """``docker compose logs``: the service name padded, `` | ``; colours on a terminal."""
    pre = "\x1b[36msglang-1  |\x1b[0m " if ansi else "sglang-1  | "
    end = "\r\n" if crlf else "\n"
    return "".join(f"{pre}{line}{end}" for line in lines)


def srun_label(lines: list[str], task: int = 0) -> str:
    """``srun --label``."""
    return "".join(f"{task}: {line}\n" for line in lines)


def ray_worker(lines: list[str]) -> str:
    """Ray's driver output of a worker's lines."""
    return "".join(f"(RayWorkerWrapper pid={PID}, ip=10.0.0.7) {line}\n" for line in lines)


def switch(lines: list[str]) -> str:
    """A container restarted under another driver: the first half docker JSON, the rest ``docker logs -t``."""
    half = len(lines) // 2
    return docker_json(lines[:half]) + docker_t(lines[half:])


def compose_t(lines: list[str]) -> str:
    """``docker compose logs -t``: prefix, then the time stamp."""
    return "".join(f"sglang-1  | {_nano(t)} {line}\n" for line, t in zip(lines, stamps(lines), strict=True))


#: name → (writer of text or bytes, whether every original line stays one line)
WRAPPERS: dict[str, tuple[Callable[[list[str]], str | bytes], bool]] = {
    "docker-json": (docker_json, True),
    "docker-json-partial": (lambda ls: docker_json(ls, split=48), False),
    "docker-t": (docker_t, True),
    "kubectl-ts": (kubectl_ts, True),
    "kubectl-prefix": (kubectl_prefix, True),
    "cri-partial": (lambda ls: cri(ls, split=40), False),
    "journal-short": (journal_short, True),
    "journal-short-precise": (lambda ls: journal_short(ls, precise=True), True),
    "syslog-year": (syslog_year, True),
    "journal-short-iso": (journal_short_iso, True),
    "journal-short-full": (journal_short_full, True),
    "journal-short-monotonic": (journal_short_monotonic, True),
    "journal-short-unix": (journal_short_unix, True),
    "syslog-iso": (syslog_iso, True),
    "syslog-5424": (syslog_5424, True),
    "journal-json": (journal_json, True),
    "journal-export": (journal_export_bytes, False),
    "compose-ansi-crlf": (lambda ls: compose(ls, ansi=True, crlf=True), True),
    "compose-t": (compose_t, True),
    "srun": (srun_label, True),
    "ray": (ray_worker, True),
    "switch": (switch, True),
}

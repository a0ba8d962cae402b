"""The recorder's ring: sealed, compressed segments on disk, oldest dropped first.

Layout of the ring folder (``/var/lib/forensics/record/`` by default)::

    open.jsonl                                      the segment being written (one JSON record a line)
    rec-20261201T101500Z-20261201T102000Z.jsonl.gz  sealed segments, named by their first and last sample

A sealed segment is gzip of JSON lines: a header (``{"forensics_record": 1, …}``), the records, and a
footer (``{"forensics_record_end": {"records": N, "sha256": …}}``) whose digest covers every byte before
it. It is written under a temporary name, fsynced, renamed into place and the folder fsynced, so after a
crash of the recorder or of the host a segment is there whole or not at all; a reader that finds a
footer missing or wrong ignores the segment (``decode_segment`` says why). The open segment is appended
one line per sample and flushed; a torn last line (the host died mid-write) is dropped when it is
salvaged, which happens when the recorder starts again and when ``collect`` takes a copy.

The ring is capped by size (sealed segments plus the open one) and by age (a segment whose last sample
is older than the cap goes); the oldest segment is dropped first.

>>> import tempfile
>>> d = Path(tempfile.mkdtemp())
>>> w = RingWriter(d, host="h", max_bytes=1 << 20, max_age_s=3600, segment_s=60, clock=lambda: 1000.0)
>>> for t in range(1000, 1130, 10):
...     w.append({"t": float(t), "k": "sample"})
>>> w.close(now=1130.0)
>>> [p.name for p in sealed_segments(d)]
['rec-19700101T001640Z-19700101T001730Z.jsonl.gz', 'rec-19700101T001740Z-19700101T001830Z.jsonl.gz', \
'rec-19700101T001840Z-19700101T001840Z.jsonl.gz']
>>> len(read_records(d))
13
>>> import shutil; shutil.rmtree(d)
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from parsers.record_format import FOOTER_KEY, FORMAT_VERSION, HEADER_KEY, check_text

OPEN_NAME = "open.jsonl"
SEGMENT_RE = re.compile(r"^rec-(\d{8}T\d{6}Z)-(\d{8}T\d{6}Z)(?:-\d+)?\.jsonl\.gz$")
DEFAULT_DIR = Path("/var/lib/forensics/record")
DEFAULT_MAX_BYTES = 64 * 1024**2
DEFAULT_MAX_AGE_S = 24 * 3600.0
DEFAULT_SEGMENT_S = 300.0
#: a record line longer than this is not ours (a corrupt or foreign file): never held whole in memory twice
MAX_LINE = 1 << 20

_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def stamp(t: float) -> str:
    """``20261201T101500Z`` for epoch seconds ``t``.

    >>> stamp(0.0)
    '19700101T000000Z'
    """
    return datetime.fromtimestamp(t, UTC).strftime("%Y%m%dT%H%M%SZ")


def parse_stamp(text: str) -> float:
    return datetime.strptime(text, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()


def encode_line(record: dict[str, Any]) -> bytes:
    return _ENCODER.encode(record).encode() + b"\n"


def encode_segment(header: dict[str, Any], records: Iterable[dict[str, Any]] | Iterable[bytes]) -> bytes:
    """The bytes of one sealed segment: gzip (mtime 0, so equal input gives equal bytes) of the header,
    the records (dicts, or lines already encoded) and the footer over both."""
    body = bytearray(encode_line({HEADER_KEY: FORMAT_VERSION, **header}))
    n = 0
    for rec in records:
        body += rec if isinstance(rec, bytes | bytearray) else encode_line(rec)
        n += 1
    footer = {FOOTER_KEY: {"records": n, "sha256": hashlib.sha256(body).hexdigest()}}
    return gzip.compress(bytes(body) + encode_line(footer), compresslevel=6, mtime=0)


@dataclass
class Segment:
    """One segment read back: its header, records, and why it was refused (None when whole)."""

    header: dict[str, Any] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    refused: str | None = None


def decode_segment(data: bytes) -> Segment:
    """A sealed segment's bytes (gzip) → :class:`Segment`; torn gzip or a bad footer → refused."""
    try:
        text = gzip.decompress(data).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile) as exc:
        return Segment(refused=f"unreadable gzip ({type(exc).__name__}): the segment was cut")
    checked = check_text(text)
    return Segment(checked.header, [r for _, r in checked.records], checked.refused)


def read_open(path: Path) -> tuple[dict[str, Any], list[bytes]]:
    """The header and the complete record lines of an open segment; a torn last line is dropped."""
    try:
        data = path.read_bytes()
    except OSError:
        return {}, []
    lines = data.split(b"\n")
    lines.pop()  # after the last "\n": empty, or a line the crash cut
    header: dict[str, Any] = {}
    out: list[bytes] = []
    for i, line in enumerate(lines):
        if len(line) > MAX_LINE:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        if i == 0 and HEADER_KEY in rec:
            header = rec
            continue
        out.append(line + b"\n")
    return header, out


def sealed_segments(folder: Path) -> list[Path]:
    """Sealed segment files, oldest first (by the first sample in their name)."""
    try:
        names = [p for p in folder.iterdir() if SEGMENT_RE.match(p.name) and p.is_file()]
    except OSError:
        return []
    return sorted(names, key=lambda p: p.name)


def segment_span(path: Path) -> tuple[float, float] | None:
    m = SEGMENT_RE.match(path.name)
    return (parse_stamp(m[1]), parse_stamp(m[2])) if m else None


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Temporary name, fsync, rename, fsync the folder: ``path`` is whole or absent after a crash."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class RingWriter:
    """Appends records to the open segment, seals it every ``segment_s``, enforces the caps.

    ``clock`` returns epoch seconds; tests drive it. Nothing here sleeps.
    """

    def __init__(self, folder: Path, host: str, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 max_age_s: float = DEFAULT_MAX_AGE_S, segment_s: float = DEFAULT_SEGMENT_S,
                 interval_s: float | None = None, clock: Callable[[], float] = time.time,
                 fsync_each: bool = False, pid: int | None = None) -> None:
        self.folder = Path(folder)
        self.host = host
        self.max_bytes, self.max_age_s, self.segment_s = max_bytes, max_age_s, segment_s
        self.interval_s = interval_s
        self.clock = clock
        self.fsync_each = fsync_each
        self.pid = os.getpid() if pid is None else pid  # 0: none in the header (rings made by tests)
        #: the open segment's share of the cap: sealed segments keep below the rest, so the whole never exceeds it
        self.open_limit = max(max_bytes // 8, 4096)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.open_path = self.folder / OPEN_NAME
        self._fh: Any = None
        self._first: float | None = None
        self._last: float | None = None
        self._open_bytes = 0
        self.dropped: list[str] = []  # names of segments the caps removed (for the status and the tests)
        self.salvage()

    # -- the open segment
    def salvage(self) -> int:
        """Seal what a previous run left in the open segment (its complete lines); return how many."""
        if not self.open_path.exists():
            return 0
        header, lines = read_open(self.open_path)
        n = len(lines)
        if lines:
            times = [_time_of(line) for line in lines]
            known = [t for t in times if t is not None]
            if known:
                self._seal(header or {"host": self.host}, lines, min(known), max(known), salvaged=True)
        with contextlib.suppress(OSError):
            self.open_path.unlink()
        return n

    def _start_open(self, t: float) -> None:
        self._fh = open(self.open_path, "ab", buffering=0)  # noqa: SIM115 - held across appends
        self._first, self._last = t, t
        header = {HEADER_KEY: FORMAT_VERSION, "open": True, "host": self.host, "started": t}
        if self.pid:
            header["pid"] = self.pid
        if self.interval_s:
            header["interval_s"] = self.interval_s
        line = encode_line(header)
        self._fh.write(line)
        self._open_bytes = len(line)

    def append(self, record: dict[str, Any]) -> None:
        """Add one record (it must carry ``t``, epoch seconds); seal and cap when the segment is due."""
        t = float(record.get("t") or self.clock())
        line = encode_line(record)
        # a burst (many processes, many GPUs) never lets the open segment outgrow its share of the cap
        full = self._open_bytes + len(line) > self.open_limit
        if self._fh is not None and self._first is not None and (t - self._first >= self.segment_s or full):
            self.seal()
        if self._fh is None:
            self._start_open(t)
        self._fh.write(line)
        if self.fsync_each:
            os.fsync(self._fh.fileno())
        self._open_bytes += len(line)
        self._last = max(self._last or t, t)

    def seal(self) -> Path | None:
        """Compress the open segment into a sealed one and start afresh; apply the caps."""
        if self._fh is None:
            return None
        self._fh.close()
        self._fh = None
        header, lines = read_open(self.open_path)
        path = None
        if lines and self._first is not None:
            path = self._seal(header or {"host": self.host}, lines, self._first, self._last or self._first)
        with contextlib.suppress(OSError):
            self.open_path.unlink()
        self._first = self._last = None
        self._open_bytes = 0
        self.enforce_caps()
        return path

    def _seal(self, header: dict[str, Any], lines: list[bytes], first: float, last: float,
              salvaged: bool = False) -> Path:
        header = {k: v for k, v in header.items() if k not in (HEADER_KEY, "open")}
        header.update({"first": first, "last": last, "salvaged": salvaged or None})
        header = {k: v for k, v in header.items() if v is not None}
        name = f"rec-{stamp(first)}-{stamp(last)}.jsonl.gz"
        path = self.folder / name
        n = 2
        while path.exists():
            path = self.folder / f"rec-{stamp(first)}-{stamp(last)}-{n}.jsonl.gz"
            n += 1
        write_atomically(path, encode_segment(header, lines))
        return path

    def close(self, now: float | None = None) -> None:
        self.seal()
        self.enforce_caps(now)

    # -- caps
    def enforce_caps(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        segs = sealed_segments(self.folder)
        sizes = {}
        for p in segs:
            with contextlib.suppress(OSError):
                sizes[p] = p.stat().st_size
        keep = [p for p in segs if p in sizes]
        for p in list(keep):
            span = segment_span(p)
            if span and now - span[1] > self.max_age_s:
                self._drop(p)
                keep.remove(p)
        total = sum(sizes[p] for p in keep)
        while keep and total > self.max_bytes - self.open_limit:
            p = keep.pop(0)
            total -= sizes[p]
            self._drop(p)

    def _drop(self, p: Path) -> None:
        with contextlib.suppress(OSError):
            p.unlink()
            self.dropped.append(p.name)


def _time_of(line: bytes) -> float | None:
    try:
        t = json.loads(line).get("t")
    except (ValueError, AttributeError):
        return None
    return float(t) if isinstance(t, int | float) else None


def read_records(folder: Path, since: float | None = None) -> list[dict[str, Any]]:
    """Every record of the ring (sealed segments, then the open one) at or after ``since``, in order.

    A refused segment is skipped (:func:`ring_status` says which and why).
    """
    out: list[dict[str, Any]] = []
    for p in sealed_segments(folder):
        span = segment_span(p)
        if since is not None and span and span[1] < since:
            continue
        try:
            seg = decode_segment(p.read_bytes())
        except OSError:
            continue
        out += [r for r in seg.records if since is None or float(r.get("t") or 0) >= since]
    _header, lines = read_open(folder / OPEN_NAME)
    for line in lines:
        rec = json.loads(line)
        if since is None or float(rec.get("t") or 0) >= since:
            out.append(rec)
    return out


@dataclass
class RingStatus:
    folder: Path
    segments: int = 0
    refused: list[tuple[str, str]] = field(default_factory=list)
    sealed_bytes: int = 0
    open_bytes: int = 0
    open_records: int = 0
    first: float | None = None
    last: float | None = None
    hosts: set[str] = field(default_factory=set)
    interval_s: float | None = None
    sections: dict[str, int] = field(default_factory=dict)  # what the samples held: meminfo, gpus, …
    gaps: dict[str, str] = field(default_factory=dict)  # latest gap per source


def ring_status(folder: Path, deep: bool = True) -> RingStatus:
    """What the ring holds: segments, bytes, the span of time, what the samples recorded."""
    st = RingStatus(Path(folder))
    recs: list[dict[str, Any]] = []
    for p in sealed_segments(st.folder):
        try:
            data = p.read_bytes()
        except OSError:
            continue
        st.sealed_bytes += len(data)
        span = segment_span(p)
        if span:
            st.first = span[0] if st.first is None else min(st.first, span[0])
            st.last = span[1] if st.last is None else max(st.last, span[1])
        if deep:
            seg = decode_segment(data)
            if seg.refused:
                st.refused.append((p.name, seg.refused))
                continue
            st.segments += 1
            st.hosts.add(str(seg.header.get("host") or ""))
            st.interval_s = seg.header.get("interval_s") or st.interval_s
            recs = seg.records[-50:]
        else:
            st.segments += 1
    open_path = st.folder / OPEN_NAME
    if open_path.exists():
        with contextlib.suppress(OSError):
            st.open_bytes = open_path.stat().st_size
        header, lines = read_open(open_path)
        st.open_records = len(lines)
        if header:
            st.hosts.add(str(header.get("host") or ""))
            st.interval_s = header.get("interval_s") or st.interval_s
        if lines:
            recs = [json.loads(x) for x in lines[-50:]]
            times = [t for t in (_time_of(x) for x in lines) if t is not None]
            if times:
                st.first = min(times) if st.first is None else min(st.first, min(times))
                st.last = max(times) if st.last is None else max(st.last, max(times))
    for r in recs:
        for key in ("meminfo", "cgroups", "gpus", "procs", "shm", "vmstat"):
            if r.get(key):  # an empty process list is "none running", not "recorded"
                st.sections[key] = st.sections.get(key, 0) + 1
        for key, why in (r.get("gaps") or {}).items():
            st.gaps[key] = why
    st.hosts.discard("")
    return st


def export_window(folder: Path, since: float, now: float, host: str | None = None,
                  transform: Callable[[str], str] | None = None) -> list[tuple[str, bytes, int]]:
    """The ring's records at or after ``since`` as sealed segments for a bundle: (name, bytes, records).

    Sealed segments are re-sealed with only the window's records, the open segment's complete lines
    become one more, and a ``collect`` event closes the last, so the report can mark the moment.
    ``transform`` rewrites each record's JSON text (redaction); a record that is no longer JSON is left out.
    """
    out: list[tuple[str, bytes, int]] = []
    pending: list[tuple[dict[str, Any], list[bytes]]] = []
    for p in sealed_segments(folder):
        span = segment_span(p)
        if span and span[1] < since:
            continue
        try:
            seg = decode_segment(p.read_bytes())
        except OSError:
            continue
        if seg.refused:
            continue
        lines = [encode_line(r) for r in seg.records if float(r.get("t") or 0) >= since]
        if lines:
            pending.append((seg.header, lines))
    header, open_lines = read_open(folder / OPEN_NAME)
    open_lines = [x for x in open_lines if (_time_of(x) or 0) >= since]
    if open_lines:
        pending.append(({k: v for k, v in header.items() if k not in (HEADER_KEY, "open")} or {"host": host},
                        open_lines))
    if not pending:
        return out
    pending[-1][1].append(encode_line({"t": now, "k": "event", "event": "collect"}))
    for head, lines in pending:
        if transform is not None:
            kept = []
            for line in lines:
                text = transform(line.decode())
                try:
                    json.loads(text)
                except ValueError:
                    continue
                kept.append(text.encode() if text.endswith("\n") else text.encode() + b"\n")
            lines = kept
        times = [t for t in (_time_of(x) for x in lines) if t is not None]
        if not times:
            continue
        first, last = min(times), max(times)
        head = {**{k: v for k, v in head.items() if k != HEADER_KEY}, "first": first, "last": last}
        name = f"rec-{stamp(first)}-{stamp(last)}.jsonl.gz"
        if any(n == name for n, _, _ in out):
            name = f"rec-{stamp(first)}-{stamp(last)}-{len(out) + 1}.jsonl.gz"
        out.append((name, encode_segment(head, lines), len(lines)))
    return out

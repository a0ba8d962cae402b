"""Log envelopes: what a log driver, a cluster tool or a journal wrapped around a program's lines.

Most servers do not write a bare log: Docker's json-file driver, ``docker logs -t``, ``kubectl logs
--timestamps``/``--prefix``, the CRI files under ``/var/log/pods``, journald (``short``, ``short-precise``,
``short-iso``, ``short-full``, ``short-monotonic``, ``short-unix``, ``json``, ``export``), rsyslog (RFC 3164
with or without a year, RFC 3339 stamps, RFC 5424), ``docker compose logs`` (``svc-1  | ``), ``srun --label``
(``3: ``) and Ray (``(RayWorkerWrapper pid=1, ip=…) ``) each add their own prefix or encoding. This module
finds them BY CONTENT, line by line (a file may switch envelope mid-way: a container restarted under
another driver), and peels them: :func:`peel` returns the inner text, exactly what the program wrote,
plus per inner line its ORIGINAL 1-based line and what the envelope knew (format, time stamp, host,
unit, container, pod, pid, stream). ANSI colour codes and CRLF line ends are removed on the way.

Kernel lines in a journal or syslog are not peeled: ``parsers.kernel`` reads those containers itself
(and needs their stamps and boot markers), so they go, as written, to a separate ``raw`` stream that
is sniffed on its own. A file that is nothing but kernel lines, or that has no envelope at all, is
returned as None: the caller reads it as before.

Weak prefixes (compose, srun labels) are only peeled where most lines of a segment carry them, so a
pasted table with a ``|`` or a numbered list is left alone.

>>> p = peel('{"log":"[2025-11-20 09:14:02 TP0] Load weight begin.\\\\n","stream":"stderr",'
...          '"time":"2025-11-20T09:14:02.123456789Z"}\\n')
>>> s = p.streams[0]
>>> s.text, s.lines, s.meta[0].envelope, s.meta[0].stream, s.meta[0].ts.isoformat()
('[2025-11-20 09:14:02 TP0] Load weight begin.\\n', [1], 'docker-json', 'stderr', '2025-11-20T09:14:02.123456+00:00')
>>> peel("[2025-11-20 09:14:02 TP0] Load weight begin.\\n") is None
True
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone

import polars as pl

from parsers import jsontext

#: Format names as they appear in the ``envelope`` column (stacked envelopes are joined with ``+``).
FORMATS = (
    "docker-json", "cri", "timestamp", "kubectl-prefix", "journal-json", "journal-export", "journal-short",
    "journal-short-iso", "journal-short-full", "journal-short-monotonic", "journal-short-unix",
    "syslog-iso", "syslog-5424", "compose", "srun", "ray",
)

# ---------------------------------------------------------------------------------------- regexes
# ECMA-48 (CSI and OSC sequences); rsyslog writes a received control character as ``#`` and three octal digits
# (rsyslog.conf ``parser.escapeControlCharactersOnReceive``, on by default; ``#033`` is ESC), so a coloured
# line in /var/log/syslog reads ``#033[33m``
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|#033\[[0-9;?]{0,32}[A-Za-z]")
_ESCAPED_ESC = "#033["
_MON = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
_MONTHS = {m: i for i, m in enumerate(_MON.split("|"), 1)}
#: host, then tag[pid]: — a tag starts with a letter (``usb 1-1:`` or ``pci 0000:…`` in dmesg is no tag)
_HT = r"(?P<host>[\w.-]{1,255}) (?P<tag>[A-Za-z_][^:\[\s]{0,127})(?:\[(?P<pid>\d{1,10})\])?:(?: |$)"
_ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?P<frac>\.\d{1,9})?(?P<zone>Z|[+-]\d\d:?\d\d)"
# docker-logs(1) ``-t`` and kubectl logs ``--timestamps`` (RFC 3339 stamps); the CRI line of kubernetes
# pkg/kubelet/kuberuntime/logs/logs.go (1.x); syslog RFC 3164 and RFC 5424; journalctl(1) ``short-*`` forms;
# reference/system_formats.md §3
_TS_PREFIX = re.compile(r"(?P<iso>" + _ISO + r") ")
_CRI = re.compile(r"(?P<iso>" + _ISO + r") (?P<stream>stdout|stderr) (?P<tag>[FP]) ?")
_ISO_SYSLOG = re.compile(r"(?:<\d{1,3}>)?(?P<iso>" + _ISO + r") " + _HT)
_SYSLOG = re.compile(
    r"(?:<\d{1,3}>)?(?P<mon>" + _MON + r") (?P<day>[ \d]\d)(?: (?P<year>\d{4}))? "
    r"(?P<time>\d\d:\d\d:\d\d(?:\.\d{1,6})?) " + _HT)
_SHORT_FULL = re.compile(
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<date>\d{4}-\d\d-\d\d) (?P<time>\d\d:\d\d:\d\d(?:\.\d{1,6})?) "
    r"(?P<tz>[A-Z]{1,5}|[+-]\d{4}) " + _HT)
_MONO = re.compile(r"\[\s*(?P<up>\d{1,10}\.\d{1,9})\] " + _HT)
# journalctl(1) (``-o short-unix``: epoch seconds), RFC 5424 (``<PRI>1 stamp host app procid msgid [SD] msg``)
_UNIX = re.compile(r"(?P<epoch>\d{9,11}\.\d{1,9}) " + _HT)
_RFC5424 = re.compile(
    r"<\d{1,3}>1 (?P<iso>" + _ISO + r"|-) (?P<host>\S{1,255}) (?P<tag>\S{1,48}) (?P<pid>\S{1,128}) \S{1,32} "
    r"(?P<sd>-|(?:\[(?:[^\]\\]|\\.)*\])+)(?: (?P<msg>.*))?$")
# kubernetes staging/src/k8s.io/kubectl/pkg/cmd/logs/logs.go (1.x: ``--prefix``), docker-compose(1) ``logs``
# (``svc-1  | ``), reference/vllm_formats.md §1.3 (Ray prefixes), srun(1) ``--label``, journalctl(1) markers,
# systemd docs/JOURNAL_EXPORT_FORMATS.md (250+)
_MONO_STAMP = re.compile(r"\[\s*\d{1,10}\.\d{1,9}\]")
_KUBECTL_PREFIX = re.compile(r"\[pod/(?P<pod>[^/\s\]]{1,253})/(?P<container>[^/\s\]]{1,253})\] ")
_COMPOSE = re.compile(r"(?P<svc>[A-Za-z0-9][\w.-]{0,80}?) *\| ?")
_RAY = re.compile(r"\((?:(?P<actor>[A-Za-z_][\w.]{0,80})(?:, | ))?pid=(?P<pid>\d{1,10})(?:, ip=(?P<ip>[^)\s]{1,60}))?\) ")
_SRUN = re.compile(r" {0,5}(?P<task>\d{1,5}): ")
_JOURNAL_MARK = re.compile(r"-- (?:Logs begin at|Journal begins at|Journal ends|Boot [0-9a-f]+|Reboot|No entries)")
# systemd docs/JOURNAL_EXPORT_FORMATS.md (250+: ``__CURSOR=``, ``__REALTIME_TIMESTAMP=``, ``KEY=value`` fields)
_EXPORT_START = re.compile(r"^(?:__CURSOR|__REALTIME_TIMESTAMP|__MONOTONIC_TIMESTAMP|__SEQNUM)=", re.M)
_EXPORT_FIELD = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_]{0,63})(?:=(?P<value>.*))?$")
#: Cheap test over the whole text: could any line start an envelope at all?
#: the containers above (reference/system_formats.md §3)
_ANY = re.compile(
    r"^(?:\{|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|<\d{1,3}>|(?:" + _MON + r") [ \d]\d |"
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \d{4}-|\[\s*\d+\.\d+\] [\w.-]+ [A-Za-z_]|\d{9,11}\.\d+ |\[pod/|"
    r"[A-Za-z0-9][\w.-]{0,80}? *\| |\((?:[\w.]+(?:, | ))?pid=\d| {0,5}\d{1,5}: |__CURSOR=|__REALTIME_TIMESTAMP=)",
    re.M)

#: A text where fewer than one line in this many could start an envelope is taken as bare.
RARE = 200
#: A segment's weak prefix is peeled only when at least this share of its non-blank lines carry it.
WEAK_SHARE = {"compose": 0.5, "srun": 0.8}
#: Of the syslog-like lines of a text, the commonest host must hold this share (dmesg lines are no syslog).
HOST_SHARE = 0.6


@dataclass(slots=True)
class Meta:
    """What the envelope(s) around one inner line knew; None where it said nothing."""

    envelope: str
    ts: datetime | None = None  # an absolute instant (UTC) when the envelope's stamp has a zone
    ts_local: datetime | None = None  # a zone-less wall clock (syslog, journal ``short``)
    uptime_s: float | None = None  # journal ``short-monotonic``
    stamp: str | None = None  # a stamp without a year, as printed
    host: str | None = None
    unit: str | None = None  # systemd unit, or syslog tag
    container: str | None = None  # docker/compose/k8s container or service, Ray actor
    ray_actor: str | None = None  # Ray's actor name, and its ``ip=`` (an actor on another node than the driver's)
    ray_ip: str | None = None
    pod: str | None = None
    pid: int | None = None
    stream: str | None = None  # stdout | stderr
    task: int | None = None  # srun --label task id

    def add(self, name: str) -> None:
        self.envelope = f"{self.envelope}+{name}" if self.envelope else name


@dataclass
class Stream:
    """Inner text and, per inner line, its original line and envelope metadata (None: bare line)."""

    text: str
    lines: list[int]
    meta: list[Meta | None]
    raw: bool = False  # lines kept as written (kernel lines for the kernel parser)

    def ray_tagged_head(self, max_lines: int = 200) -> str:
        """The first lines with Ray's tag put back as Ray prints it (``(actor pid=N) ``), or "" when none had one.

        A fragment with no record headers (a traceback, a bare message) says which program wrote it only in that
        tag: vLLM names its processes ``EngineCore_DP0``, ``VllmWorker TP0``, ``APIServer`` (vllm_formats.md §1.3),
        which the format sniffers recognise (parsers/vllm.py ``_SNIFF_PREFIX``) and the peeled text no longer has.

        >>> Stream("Traceback\\n", [1], [Meta("ray", pid=7, ray_actor="EngineCore_DP0")]).ray_tagged_head()
        '(EngineCore_DP0 pid=7) Traceback\\n'
        """
        out: list[str] = []
        tagged = False
        # only the head is split: a big stream's whole text is not copied into lines to sniff its start
        for text, meta in zip(self.text.split("\n", max_lines)[:max_lines], self.meta[:max_lines], strict=False):
            if meta is not None and "ray" in meta.envelope and meta.pid is not None:
                tagged = True
                actor = f"{meta.ray_actor} " if meta.ray_actor else ""
                out.append(f"({actor}pid={meta.pid}) {text}")
            else:
                out.append(text)
        return "\n".join(out) + "\n" if tagged else ""


@dataclass
class Peeled:
    streams: list[Stream]
    #: original lines consumed by the envelopes themselves (journal export fields, docker partial
    #: continuations, journal boot markers): read, and nothing of the program's
    structural: int = 0
    counts: Counter = field(default_factory=Counter)  # envelope → inner lines

    def summary(self) -> str:
        return ", ".join(f"{k} ×{n}" for k, n in sorted(self.counts.items()))


# ---------------------------------------------------------------------------------------- stamps
def _iso(value: str) -> datetime | None:
    """RFC 3339 / journald ISO to UTC; nanoseconds cut to microseconds.

    >>> _iso("2025-11-20T09:14:02.123456789+0800").isoformat()
    '2025-11-20T01:14:02.123456+00:00'
    >>> _iso("2025-11-20T09:14:02Z").isoformat(), _iso("2025-11-20T09:14:02.5"), _iso("yesterday")
    ('2025-11-20T09:14:02+00:00', None, None)
    """
    rest = value[19:]
    frac = ""
    if rest[:1] == ".":
        j = 1
        while j < len(rest) and rest[j].isdigit():
            j += 1
        frac, rest = rest[1:j], rest[j:]
        if not frac or len(frac) > 9:
            return None
    dt = _iso_second(value[:19], rest)
    if dt is None or not frac:
        return dt
    return dt.replace(microsecond=int(frac[:6].ljust(6, "0")))


@functools.lru_cache(maxsize=4096)
def _iso_second(base: str, zone: str) -> datetime | None:
    """One whole second of an RFC 3339 stamp, in UTC (cached: a busy log prints many lines a second)."""
    if len(base) != 19 or base[10] != "T" or not _ZONE.fullmatch(zone):
        return None
    try:
        dt = datetime.fromisoformat(base)
    except ValueError:
        return None
    if zone == "Z":
        return dt.replace(tzinfo=UTC)
    sign = -1 if zone[0] == "-" else 1
    off = timedelta(hours=int(zone[1:3]), minutes=int(zone[-2:]))
    return dt.replace(tzinfo=timezone(sign * off)).astimezone(UTC)


# RFC 3339 (``Z`` or ``±hh:mm``)
_ZONE = re.compile(r"Z|[+-]\d\d:?\d\d")


def _epoch_us(value: object) -> datetime | None:
    try:
        return datetime.fromtimestamp(int(str(value)) / 1e6, UTC)
    except (ValueError, OverflowError, OSError):
        return None


def _naive(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _syslog_meta(name: str, m: re.Match) -> Meta:
    tag = m.group("tag")
    pid = m.group("pid")
    return Meta(name, host=m.group("host"), unit=tag,
                pid=int(pid) if pid and pid.isdigit() else None)


# ---------------------------------------------------------------------------------------- one record
@dataclass(slots=True)
class _Rec:
    line: int
    msg: str
    meta: Meta | None
    raw: bool = False  # a kernel line: kept as written, for the kernel parser
    alt: tuple[str, Meta] | None = None  # another reading should the syslog host rule reject this one
    prefix_len: int = 0  # journal short: continuation lines are indented this far


def _journal_obj(n: int, obj: dict, raw_line: str) -> _Rec | None:
    if "MESSAGE" not in obj and "__REALTIME_TIMESTAMP" not in obj:
        return None
    if obj.get("_TRANSPORT") == "kernel" or _kernel_tag(obj.get("SYSLOG_IDENTIFIER")):
        return _Rec(n, raw_line, None, raw=True)
    msg = obj.get("MESSAGE")
    if isinstance(msg, list):  # not valid UTF-8 (or binary): journald writes the bytes
        try:
            msg = bytes(int(b) & 0xFF for b in msg).decode("utf-8", errors="replace")
        except (TypeError, ValueError):
            msg = ""
    msg = "" if msg is None else str(msg)
    pid = obj.get("_PID") or obj.get("SYSLOG_PID")
    stream = None
    if obj.get("_TRANSPORT") == "stdout":
        stream = "stdout"
    meta = Meta("journal-json", ts=_epoch_us(obj.get("__REALTIME_TIMESTAMP")), host=obj.get("_HOSTNAME"),
                unit=obj.get("_SYSTEMD_UNIT") or obj.get("SYSLOG_IDENTIFIER"),
                container=obj.get("CONTAINER_NAME"), pid=int(pid) if str(pid or "").isdigit() else None,
                stream=stream)
    return _Rec(n, msg, meta)


def _docker_obj(obj: dict) -> tuple[str, str | None, datetime | None] | None:
    log = obj.get("log")
    if not isinstance(log, str) or not ("time" in obj or "stream" in obj):
        return None
    stream = obj.get("stream") if isinstance(obj.get("stream"), str) else None
    return log, stream, _iso(obj["time"]) if isinstance(obj.get("time"), str) else None


def _line_rec(n: int, s: str) -> _Rec | None:
    """The outer envelope of one line (no JSON, no export), or None."""
    c = s[:1]
    if c.isdigit():
        m = _CRI.match(s)
        if m:
            meta = Meta("cri", ts=_iso(m.group("iso")), stream=m.group("stream"))
            return _Rec(n, s[m.end():], meta, alt=("P", meta) if m.group("tag") == "P" else None)
        m = _TS_PREFIX.match(s)
        if m:
            iso, frac, zone = m.group("iso"), m.group("frac") or "", m.group("zone")
            ts_meta = Meta("timestamp", ts=_iso(iso))
            ts_rec = _Rec(n, s[m.end():], ts_meta)
            if len(frac) == 10 and zone == "Z":
                return ts_rec  # docker logs -t: nine digits and Z, never a syslog writer's stamp
            sm = _ISO_SYSLOG.match(s)
            if sm:
                name = "journal-short-iso" if ":" not in zone and zone != "Z" else "syslog-iso"
                meta = _syslog_meta(name, sm)
                meta.ts = ts_meta.ts
                return _Rec(n, s[sm.end():], meta, alt=(ts_rec.msg, ts_meta), prefix_len=sm.end())
            return ts_rec
        m = _UNIX.match(s)
        if m:
            meta = _syslog_meta("journal-short-unix", m)
            meta.ts = datetime.fromtimestamp(float(m.group("epoch")), UTC)
            return _Rec(n, s[m.end():], meta, prefix_len=m.end())
        return None
    if c == "<":
        m = _RFC5424.match(s)
        if m:
            pid = m.group("pid")
            iso = m.group("iso")
            meta = Meta("syslog-5424", ts=_iso(iso) if iso != "-" else None, host=m.group("host"),
                        unit=m.group("tag") if m.group("tag") != "-" else None,
                        pid=int(pid) if pid.isdigit() else None)
            return _Rec(n, (m.group("msg") or "").removeprefix("\ufeff"), meta)  # MSG may open with a BOM
        m = _ISO_SYSLOG.match(s)
        if m:
            meta = _syslog_meta("syslog-iso", m)
            meta.ts = _iso(m.group("iso"))
            return _Rec(n, s[m.end():], meta, prefix_len=m.end())
    if c == "[":
        m = _MONO.match(s)
        if m:
            meta = _syslog_meta("journal-short-monotonic", m)
            meta.uptime_s = float(m.group("up"))
            return _Rec(n, s[m.end():], meta, prefix_len=m.end())
        return None
    if c.isupper() or c == "<":
        m = _SYSLOG.match(s)
        if m:
            name = "journal-short"
            meta = _syslog_meta(name, m)
            t = m.group("time")
            if m.group("year"):
                meta.ts_local = _naive(f"{m.group('year')}-{_MONTHS[m.group('mon')]:02d}-"
                                       f"{int(m.group('day')):02d} {t}")
            else:
                meta.stamp = f"{m.group('mon')} {int(m.group('day')):02d} {t}"
            return _Rec(n, s[m.end():], meta, prefix_len=m.end())
        m = _SHORT_FULL.match(s)
        if m:
            meta = _syslog_meta("journal-short-full", m)
            local = _naive(f"{m.group('date')} {m.group('time')}")
            tz = m.group("tz")
            if local is not None and tz in ("UTC", "GMT", "Z"):
                meta.ts = local.replace(tzinfo=UTC)
            elif local is not None and tz[0] in "+-":
                meta.ts = _iso(f"{m.group('date')}T{m.group('time').split('.')[0]}{tz}")
                if meta.ts is not None and "." in m.group("time"):
                    meta.ts = meta.ts.replace(microsecond=local.microsecond)
            else:
                meta.ts_local = local  # a zone abbreviation (CST…) names no unique offset
            return _Rec(n, s[m.end():], meta, prefix_len=m.end())
    return None


#: Journal/syslog lines left as written: the kernel's and NVIDIA daemons' (parsers.kernel reads them) and
#: the system's own daemons' (parsers.kernel reads them as well-formed lines of a kernel log).
#: syslog identifiers as journalctl(1) prints them (``SYSLOG_IDENTIFIER``, systemd.journal-fields(7));
#: reference/system_formats.md §3
_RAW_TAG = re.compile(
    r"kernel|nvidia.*|systemd(?:-.+)?|rsyslogd|r?syslog-ng|cron|CRON|crond|anacron|atd|sshd|sudo|su|login|"
    r"dbus.*|polkitd|NetworkManager|dhclient|chronyd|ntpd|snapd|audit.*|udisksd|avahi-daemon|multipathd|"
    r"irqbalance|smartd|lvm|mdadm|thermald|rtkit-daemon|accounts-daemon|ModemManager|wpa_supplicant")


def _kernel_tag(tag: object) -> bool:
    """Lines the kernel parser reads from a journal or syslog (see :data:`_RAW_TAG`)."""
    return isinstance(tag, str) and _RAW_TAG.fullmatch(tag) is not None


def _is_kernel(rec: _Rec) -> bool:
    return rec.meta is not None and _kernel_tag(rec.meta.unit) and rec.meta.envelope.startswith(("journal", "syslog"))


# ---------------------------------------------------------------------------------------- export
def _export_records(lines: list[str], i: int, out: list[_Rec]) -> int:
    """Read journal export records from line ``i`` (0-based) on; returns the index after them.

    Binary fields are ``KEY\\n`` + 8-byte little-endian length + data + ``\\n``; the data may hold line
    ends, so it is read by its length (in UTF-8 bytes) across lines."""
    n = len(lines)
    while i < n and _EXPORT_START.match(lines[i]):
        fields: dict[str, str] = {}
        msg_line = i + 1
        while i < n and lines[i] != "":
            raw = lines[i]
            m = _EXPORT_FIELD.match(raw)
            if m is None:
                i += 1
                continue
            key, value = m.group("key"), m.group("value")
            if key == "MESSAGE":
                msg_line = i + 1
            if value is None and i + 1 < n:  # binary field: length, data across lines
                value, i = _export_binary(lines, i + 1)
            else:
                i += 1
            fields[key] = value or ""
        i += 1  # the blank line after the record
        if fields.get("_TRANSPORT") == "kernel" or _kernel_tag(fields.get("SYSLOG_IDENTIFIER")):
            # the kernel parser reads journal JSON: hand it the same record in that form
            out.append(_Rec(msg_line, json.dumps(fields, ensure_ascii=False), None, raw=True))
            continue
        if "MESSAGE" not in fields:
            continue
        rec = _journal_obj(msg_line, fields, "")
        if rec is not None and rec.meta is not None:
            rec.meta.envelope = "journal-export"
            out.append(rec)
    return i


def _export_binary(lines: list[str], j: int) -> tuple[str, int]:
    """The value of a binary export field whose length starts line ``j``; the index of the line after.

    The 8 length bytes may themselves hold a ``\\n`` (a length of 10), so lines are joined first."""
    window = lines[j]
    k = j + 1
    while len(window) < 8 and k < len(lines):
        window += "\n" + lines[k]
        k += 1
    if len(window) < 8 or any(ord(ch) >= 0x80 for ch in window[:8]):
        return _export_binary_unsized(lines, j)
    size = int.from_bytes(window[:8].encode("latin-1"), "little")
    while len(window) < 8 + size and k < len(lines):
        window += "\n" + lines[k]
        k += 1
    pos, got = 8, 0
    while pos < len(window) and got < size:
        got += len(window[pos].encode("utf-8", errors="replace"))
        pos += 1
    return window[8:pos], j + window[:pos].count("\n") + 1


def _export_binary_unsized(lines: list[str], j: int) -> tuple[str, int]:
    """A binary field whose length bytes did not survive decoding (a byte >= 0x80 became U+FFFD): skip
    what were 8 bytes, then take lines up to the next ``KEY=`` field or the record's end."""
    head = lines[j]
    got = pos = 0
    while pos < len(head) and got < 8:
        ch = head[pos]
        got += 1 if ch == "\ufffd" else len(ch.encode("utf-8", errors="replace"))
        pos += 1
    parts = [head[pos:]]
    k = j + 1
    while k < len(lines) and lines[k] != "" and not _EXPORT_NEXT.match(lines[k]):
        parts.append(lines[k])
        k += 1
    return "\n".join(parts), k


# systemd docs/JOURNAL_EXPORT_FORMATS.md (250+)
_EXPORT_NEXT = re.compile(r"[A-Z_][A-Z0-9_]{0,63}(?:=|$)")


# ---------------------------------------------------------------------------------------- peel
def _outer(lines: list[str]) -> tuple[list[_Rec], int]:
    """Outer envelopes of every line (docker JSON partial lines joined, export records read)."""
    recs: list[_Rec] = []
    structural = 0
    pending: dict[tuple[str, str | None], _Rec] = {}  # (format, stream) → partial line being joined
    prev: _Rec | None = None
    i, n = 0, len(lines)
    while i < n:
        s = lines[i]
        ln = i + 1
        if s[:1] == "{" and s.rstrip().endswith("}"):
            try:
                obj = jsontext.loads(s)
            except ValueError:
                obj = None
            if isinstance(obj, dict):
                d = _docker_obj(obj)
                if d is not None:
                    log, stream, ts = d
                    key = ("docker-json", stream)
                    part = pending.pop(key, None)
                    if part is not None:
                        part.msg += log
                        structural += 1
                    else:
                        part = _Rec(ln, log, Meta("docker-json", ts=ts, stream=stream))
                    if log.endswith("\n"):  # a whole line; without its "\n" it is a 16 KiB partial
                        part.msg = part.msg[:-1].removesuffix("\r")
                        recs.append(part)
                    else:
                        pending[key] = part
                    prev = None
                    i += 1
                    continue
                rec = _journal_obj(ln, obj, s)
                if rec is not None:
                    recs.append(rec)
                    prev = None
                    i += 1
                    continue
        if _EXPORT_START.match(s):
            before = len(recs)
            j = _export_records(lines, i, recs)
            structural += (j - i) - (len(recs) - before)
            i = j
            prev = None
            continue
        rec = _line_rec(ln, s)
        if rec is not None and rec.meta is not None and rec.meta.envelope == "cri":
            key = ("cri", rec.meta.stream)
            part = pending.pop(key, None)
            if part is not None:
                part.msg += rec.msg
                structural += 1
            else:
                part = rec
            if rec.alt is not None:  # "P": a partial line, more follows
                part.alt = None
                pending[key] = part
            else:
                recs.append(part)
            prev = None
            i += 1
            continue
        if rec is None and prev is not None and prev.prefix_len and s[:prev.prefix_len].isspace() \
                and len(s) > prev.prefix_len:
            # journalctl short: a multi-line message goes on indented under its first line
            cont = _Rec(ln, s[prev.prefix_len:], prev.meta, raw=prev.raw, alt=None, prefix_len=0)
            recs.append(cont)
            i += 1
            continue
        if rec is None and _JOURNAL_MARK.match(s):
            recs.append(_Rec(ln, s, Meta("journal-mark")))
            prev = None
            i += 1
            continue
        if rec is None:
            recs.append(_Rec(ln, s, None))
            prev = None
        else:
            recs.append(rec)
            prev = rec
        i += 1
    for part in pending.values():  # a file cut in the middle of a partial line
        part.msg = part.msg.removesuffix("\n")
        recs.append(part)
    recs.sort(key=lambda r: r.line)
    return recs, structural


def _host_rule(recs: list[_Rec], lines: list[str]) -> None:
    """Syslog-like readings stand only when one host holds most of them (and, for ``[ 123.4] host tag:``,
    when most ``[ 123.4]`` lines read so: dmesg's ``[ 1.2] Call Trace:`` is no journal line); a
    kernel-tagged one goes raw."""
    n_mono = sum(1 for s in lines if s[:1] == "[" and _MONO_STAMP.match(s))
    mono = sum(1 for r in recs if r.meta is not None and r.meta.envelope == "journal-short-monotonic" and r.prefix_len)
    if mono and mono < 0.5 * n_mono:
        for r in recs:
            if r.meta is not None and r.meta.envelope == "journal-short-monotonic":
                r.msg, r.meta, r.prefix_len = _orig_line_placeholder, None, 0
    hosts = Counter(r.meta.host for r in recs if r.meta is not None and r.prefix_len and r.meta.host)
    total = sum(hosts.values())
    top = hosts.most_common(1)[0] if hosts else (None, 0)
    ok_host = top[0] if total and top[1] >= HOST_SHARE * total else None
    for r in recs:
        if r.meta is None or not r.meta.envelope.startswith(("journal-short", "syslog")):
            continue
        if r.meta.host is not None and r.prefix_len and r.meta.host != ok_host:
            if r.alt is not None:
                r.msg, r.meta = r.alt
            else:
                r.msg, r.meta = _orig_line_placeholder, None
            r.alt, r.prefix_len = None, 0
            continue
        if _is_kernel(r):
            r.raw, r.msg = True, lines[r.line - 1]


#: Marks a record whose original line must be restored (see :func:`peel`).
_orig_line_placeholder = "\x00orig"


def _inner(recs: list[_Rec]) -> None:
    """Inner prefixes, up to three layers: a time stamp, kubectl's ``[pod/…]``, Ray's ``(… pid=…)``, and,
    where most lines of a segment carry them, compose's ``svc  | `` and srun's ``3: ``."""
    for _layer in range(3):
        found: list[tuple[str, re.Match] | None] = []
        for r in recs:
            if r.raw or r.msg is _orig_line_placeholder:
                found.append(None)
                continue
            s = r.msg
            env = r.meta.envelope if r.meta else ""
            hit: tuple[str, re.Match] | None = None
            c = s[:1]
            if c == "[":
                m = _KUBECTL_PREFIX.match(s)
                if m and "kubectl-prefix" not in env:
                    hit = ("kubectl-prefix", m)
            elif c == "(":
                m = _RAY.match(s)
                if m and "ray" not in env:
                    hit = ("ray", m)
            elif c.isdigit() or c == " ":
                m = _TS_PREFIX.match(s) if c.isdigit() else None
                if m and (r.meta is None or (r.meta.ts is None and r.meta.ts_local is None)):
                    hit = ("timestamp", m)
                elif "srun" not in env:
                    m = _SRUN.match(s)
                    if m:
                        hit = ("srun", m)
            if hit is None and c.isalnum() and "compose" not in env and "|" in s[:90]:
                m = _COMPOSE.match(s)
                if m:
                    hit = ("compose", m)
            found.append(hit)
        _gate_weak(recs, found)
        if not any(found):
            return
        for r, hit in zip(recs, found, strict=True):
            if hit is None:
                continue
            name, m = hit
            meta = r.meta if r.meta is not None else Meta("")
            if r.meta is None:
                r.meta = meta
            meta.add(name)
            r.msg = r.msg[m.end():]
            if name == "timestamp":
                meta.ts = _iso(m.group("iso"))
            elif name == "kubectl-prefix":
                meta.pod, meta.container = m.group("pod"), m.group("container")
            elif name == "ray":
                meta.pid = int(m.group("pid"))
                if m.group("actor"):
                    meta.container = m.group("actor")
                meta.ray_actor, meta.ray_ip = m.group("actor"), m.group("ip")  # the innermost tag's: the writer's
                if m.group("ip") and meta.host is None:
                    meta.host = m.group("ip")
            elif name == "compose":
                meta.container = m.group("svc")
            elif name == "srun":
                meta.task = int(m.group("task"))


def _gate_weak(recs: list[_Rec], found: list[tuple[str, re.Match] | None]) -> None:
    """Drop compose/srun hits in segments (runs of one outer envelope) where too few lines carry them."""
    start = 0
    n = len(recs)
    while start < n:
        outer = _outer_name(recs[start])
        end = start
        while end < n and _outer_name(recs[end]) == outer:
            end += 1
        nonblank = sum(1 for r in recs[start:end] if r.msg.strip() and not r.raw)
        for name, share in WEAK_SHARE.items():
            mine = [h[1] for h in found[start:end] if h is not None and h[0] == name]
            hits = len(mine)
            if hits and (hits < share * max(nonblank, 1) or (name == "compose" and not _compose_like(mine))):
                for k in range(start, end):
                    h = found[k]
                    if h is not None and h[0] == name:
                        found[k] = None
        start = end


def _compose_like(hits: list[re.Match]) -> bool:
    """``docker compose logs`` pads every service name to one width, and names replicas ``svc-1``/``svc_1``:
    a table's ``name | value`` rows do neither."""
    return all(re.search(r"[-_]\d+$", m.group("svc")) for m in hits) or len({m.end() for m in hits}) == 1


def _outer_name(r: _Rec) -> str:
    if r.meta is None:
        return ""
    return r.meta.envelope.split("+", 1)[0]


def peel(text: str) -> Peeled | None:
    """The text without its envelopes, or None when it has none (nor ANSI codes, nor CRLF) or when all
    it has is kernel lines in a journal/syslog (``parsers.kernel`` reads those as they are).

    >>> p = peel("2025-11-20T09:14:02.000000001Z [2025-11-20 09:14:02] hello\\r\\n"
    ...          "2025-11-20T09:14:03.5Z \\x1b[32mworld\\x1b[0m\\n")
    >>> p.streams[0].text, [m.envelope for m in p.streams[0].meta]
    ('[2025-11-20 09:14:02] hello\\nworld\\n', ['timestamp', 'timestamp'])
    >>> peel("Nov 29 08:27:48 vm kernel: Out of memory: Killed process 1 (python3)\\n") is None
    True
    """
    if not text:
        return None
    has_ansi = "\x1b" in text or _ESCAPED_ESC in text
    has_cr = "\r\n" in text
    if not has_ansi and not has_cr:
        # an envelope wraps (nearly) every line: a few lines that merely look like one in a long bare log
        # are not worth a line-by-line pass
        n_any = sum(1 for _ in _ANY.finditer(text))
        if not n_any or n_any * RARE < text.count("\n"):
            return None
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    clean = [_clean(s) for s in lines] if has_ansi or has_cr else lines
    recs, structural = _outer(clean)
    _host_rule(recs, clean)
    _inner(recs)
    peeled = any(not r.raw and r.meta is not None and r.meta.envelope != "journal-mark" for r in recs)
    converted = any(r.raw and r.msg != clean[r.line - 1] for r in recs)  # journal export → JSON
    if not peeled and not converted:
        # nothing wrapped, or only kernel lines in their journal/syslog: the kernel parser's own job
        if clean is lines:
            return None
        return Peeled([Stream(_join(clean), list(range(1, len(clean) + 1)), [None] * len(clean))])
    main_text: list[str] = []
    main_lines: list[int] = []
    main_meta: list[Meta | None] = []
    raw_text: list[str] = []
    raw_lines: list[int] = []
    counts: Counter[str] = Counter()
    has_raw = any(r.raw for r in recs)
    for r in recs:
        if r.msg is _orig_line_placeholder:
            r.msg, r.meta = clean[r.line - 1], None
        if r.meta is not None and r.meta.envelope == "journal-mark":
            if has_raw:  # boot markers split the kernel parser's boots
                raw_text.append(r.msg)
                raw_lines.append(r.line)
            else:
                structural += 1
            continue
        if r.raw:
            raw_text.append(r.msg)
            raw_lines.append(r.line)
            continue
        msg = r.msg
        if r.meta is not None and "\x1b" in msg:  # colours inside a JSON envelope's message
            msg = _ANSI.sub("", msg)
        parts = msg.split("\n") if "\n" in msg else [msg]
        for p in parts:
            main_text.append(p.removesuffix("\r") if "\r" in p else p)
            main_lines.append(r.line)
            main_meta.append(r.meta)
        if r.meta is not None:
            counts[r.meta.envelope] += len(parts)
    streams = []
    if main_text:
        streams.append(Stream(_join(main_text), main_lines, main_meta))
    if raw_text:
        streams.append(Stream(_join(raw_text), raw_lines, [None] * len(raw_lines), raw=True))
    return Peeled(streams, structural=structural, counts=counts)


def _clean(s: str) -> str:
    if s.endswith("\r"):
        s = s[:-1]
    if "\x1b" in s or _ESCAPED_ESC in s:
        s = _ANSI.sub("", s)
    return s


def _join(lines: list[str]) -> str:
    return "\n".join(lines) + "\n" if lines else ""


# ---------------------------------------------------------------------------------------- columns
#: The columns :func:`meta_frame` gives (besides ``line``, the inner 1-based line, and ``orig_line``).
META_SCHEMA: dict[str, pl.DataType] = {
    "envelope": pl.Utf8,
    "env_ts": pl.Datetime("us", "UTC"),
    "env_ts_local": pl.Datetime("us"),
    "env_stamp": pl.Utf8,  # "Nov 20 09:14:02": a syslog stamp without a year
    "env_uptime_s": pl.Float64,
    "env_host": pl.Utf8,
    "unit": pl.Utf8,
    "container": pl.Utf8,
    "pod": pl.Utf8,
    "env_pid": pl.Int64,
    "stream": pl.Utf8,
    "task": pl.Int32,
}


def meta_frame(stream: Stream, first_line: int = 1) -> pl.DataFrame:
    """One row per inner line of ``stream``: ``line`` (inner, from ``first_line``), ``orig_line`` and the
    envelope's fields (:data:`META_SCHEMA`).

    >>> p = peel("[pod/web-0/sglang] 2025-11-20T09:14:02Z hi\\n")
    >>> meta_frame(p.streams[0]).select("line", "orig_line", "envelope", "pod", "container").row(0)
    (1, 1, 'kubectl-prefix+timestamp', 'web-0', 'sglang')
    """
    ms = stream.meta
    n = len(ms)

    def col(attr: str) -> list:
        return [getattr(m, attr) if m is not None else None for m in ms]

    data = {
        "line": pl.Series("line", range(first_line, first_line + n), dtype=pl.Int64),
        "orig_line": pl.Series("orig_line", stream.lines, dtype=pl.Int64),
        "envelope": pl.Series("envelope", col("envelope"), dtype=pl.Utf8),
        "env_ts": pl.Series("env_ts", col("ts"), dtype=pl.Datetime("us", "UTC")),
        "env_ts_local": pl.Series("env_ts_local", col("ts_local"), dtype=pl.Datetime("us")),
        "env_stamp": pl.Series("env_stamp", col("stamp"), dtype=pl.Utf8),
        "env_uptime_s": pl.Series("env_uptime_s", col("uptime_s"), dtype=pl.Float64),
        "env_host": pl.Series("env_host", col("host"), dtype=pl.Utf8),
        "unit": pl.Series("unit", col("unit"), dtype=pl.Utf8),
        "container": pl.Series("container", col("container"), dtype=pl.Utf8),
        "pod": pl.Series("pod", col("pod"), dtype=pl.Utf8),
        "env_pid": pl.Series("env_pid", col("pid"), dtype=pl.Int64),
        "stream": pl.Series("stream", col("stream"), dtype=pl.Utf8),
        "task": pl.Series("task", col("task"), dtype=pl.Int32),
    }
    return pl.DataFrame(data)


def carry_split(chunk: str) -> tuple[str, str]:
    """Cut a chunk of a streamed file before its trailing partial lines (docker JSON without ``\\n`` in
    ``log``, CRI ``P``), which must be joined with lines of the next chunk.

    >>> carry_split('{"log":"a\\\\n","stream":"stdout","time":"x"}\\n{"log":"b","stream":"stdout","time":"x"}\\n')[1]
    '{"log":"b","stream":"stdout","time":"x"}\\n'
    """
    end = len(chunk)
    blank = chunk.rfind("\n\n")
    tail_at = blank + 2 if blank >= 0 else 0
    if _EXPORT_START.search(chunk, tail_at):
        return chunk[:tail_at], chunk[tail_at:]  # a journal export record goes on in the next chunk
    cut = end
    while cut > 0:
        start = chunk.rfind("\n", 0, cut - 1) + 1
        line = chunk[start:cut].rstrip("\r\n")
        if (line.startswith("{") and '"log"' in line and not line.rstrip().endswith('\\n"}')
                and _partial_docker(line)) or (_CRI.match(line) and _CRI.match(line).group("tag") == "P"):  # type: ignore[union-attr]
            cut = start
            continue
        break
    return chunk[:cut], chunk[cut:]


def _partial_docker(line: str) -> bool:
    try:
        obj = jsontext.loads(line)
    except ValueError:
        return False
    d = _docker_obj(obj) if isinstance(obj, dict) else None
    return d is not None and not d[0].endswith("\n")

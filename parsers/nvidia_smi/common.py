"""Helpers shared by the four nvidia-smi parsers: placeholders, MiB, bus ids, failure messages.

Sources: reference/system_formats.md §2.1-§2.5 and nvidia-smi(1) (MiB figures, placeholders, the failure
lines, ``--query-gpu``/``--format``/``-i``), ctime(3) (the timestamp), the PCI bus id
``domain:bus:device.function``.

nvidia-smi prints every memory figure in MiB (2^20 bytes) in all of its forms (table, CSV, ``-q``,
``-q -x``). A value it cannot give is a *placeholder* — ``[N/A]``, ``N/A``, ``[Not Supported]``,
``[Insufficient Permissions]``, ``[Unknown Error]``, ``[GPU is lost]``,
``[Requested functionality has been deprecated]`` — and must become null, never 0.

When the driver or one GPU is broken, nvidia-smi prints a failure line instead of (or before) its
output, e.g.::

    Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error
    NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure ...

>>> placeholder("[Not Supported]"), placeholder(" N/A "), placeholder("0")
('not supported', 'n/a', None)
>>> mib_to_bytes("96413 MiB"), mib_to_bytes("[N/A]")
(101096357888, None)
>>> normalize_bus_id("00000000:83:00.0"), normalize_bus_id("0000:3B:00")
('0000:83:00.0', '0000:3b:00')
>>> f = match_failure("Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error")
>>> f["error"], f["gpu"], f["pci_bus_id"]
('unknown_error', 1, '0000:34:00.0')
>>> smi_invocations("ssh h 'free -g; nvidia-smi --query-gpu=index,memory.used --format=csv,noheader'")[0].fields
['index', 'memory.used']
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from parsers.units import mib, to_float

#: Lines longer than this are never matched against a regex (nvidia-smi never prints them;
#: a 1 MB line of garbage must not cost quadratic time).
MAX_LINE = 65536

#: Placeholder spellings, compared lower-case with brackets stripped.
PLACEHOLDERS = frozenset({
    "n/a",
    "na",
    "not supported",
    "insufficient permissions",
    "unknown error",
    "gpu is lost",
    "requested functionality has been deprecated",
    "not available",
    "err!",
    "unknown",
    "gpu requires reset",
    "no permission",
})


def split_lines(text: str) -> list[str]:
    """The text's lines as ``wc -l`` would count them (+1 for an unterminated last line).

    Only ``\\n`` separates lines; a trailing ``\\r`` (CRLF) is dropped from each.

    >>> split_lines("a\\r\\nb\\n"), split_lines("a\\nb"), split_lines("")
    (['a', 'b'], ['a', 'b'], [])
    """
    if not text:
        return []
    parts = text.split("\n")
    if parts[-1] == "":
        parts.pop()
    return [p[:-1] if p.endswith("\r") else p for p in parts]


def placeholder(value: str | None) -> str | None:
    """The canonical placeholder (lower case, no brackets) if ``value`` is one, else None.

    An empty string is not a placeholder (it is an empty value, e.g. ``platform.chassis_serial_number``).
    """
    if value is None:
        return None
    v = value.strip()
    if v.startswith("[") and v.endswith("]"):
        v = v[1:-1].strip()
    v = v.lower()
    return v if v in PLACEHOLDERS else None


# reference/system_formats.md §2.1-§2.4 (figures with units: MiB, W, %, C)
_NUM_UNIT = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*([A-Za-z%/()]*)\s*$")


def number(value: str | None) -> float | None:
    """The leading number of ``"628W"``, ``"52 C"``, ``"100 %"``, ``"3072 bank(s)"``; None otherwise."""
    if value is None or len(value) > 64:
        return None
    m = _NUM_UNIT.match(value)
    if not m:
        return None
    return to_float(m.group(1))


def integer(value: str | None) -> int | None:
    n = number(value)
    return int(n) if n is not None and n == int(n) else None


def mib_to_bytes(value: str | None, *, unit_known_mib: bool = True) -> int | None:
    """``"32362MiB"`` / ``"32362 MiB"`` / ``"32362"`` (a field known to be MiB) → bytes; None otherwise.

    nvidia-smi's memory unit is always MiB (2^20); another unit letter is converted by its meaning.
    """
    if value is None or len(value) > 64:
        return None
    m = _NUM_UNIT.match(value)
    if not m:
        return None
    num = to_float(m.group(1))
    unit = m.group(2).lower()
    if num is None:
        return None
    if unit in ("mib", "mb", "m"):  # nvidia-smi never prints decimal MB; "MB" in hand-made pastes means MiB
        return mib(num)
    if unit in ("gib", "gb", "g"):
        return mib(num * 1024)
    if unit in ("kib", "kb", "k"):
        return mib(num / 1024)
    if unit == "" and unit_known_mib:
        return mib(num)
    return None


# the PCI address ``domain:bus:device.function`` as nvidia-smi(1) prints it (8 hex digits of domain in -q, 4 in CSV)
_BUS_RE = re.compile(r"^(?:([0-9A-Fa-f]{4,8}):)?([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.([0-7]))?$")
BUS_ID_PATTERN = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"


def normalize_bus_id(value: str | None) -> str | None:
    """PCI address → ``dddd:bb:dd[.f]`` in lower case (4-digit domain, as the kernel prints it)."""
    if not value:
        return None
    m = _BUS_RE.match(value.strip())
    if not m:
        return None
    dom, bus, dev, fn = m.groups()
    dom4 = (dom or "0000")[-4:].lower()
    out = f"{dom4}:{bus.lower()}:{dev.lower()}"
    return f"{out}.{fn}" if fn is not None else out


# ctime(3) (the table's and -q's timestamp)
_CTIME_RE = re.compile(r"^\s*(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\s+([A-Z][a-z]{2})\s+(\d{1,2})\s+(\d{2}):(\d{2}):(\d{2})\s+(\d{4})\s*$")
_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}


def parse_ctime(value: str) -> datetime | None:
    """``Fri Jul  3 22:11:09 2026`` (the table's first line, ``-q``'s Timestamp) → naive datetime.

    >>> parse_ctime("Fri Jul  3 22:11:09 2026       ")
    datetime.datetime(2026, 7, 3, 22, 11, 9)
    """
    if len(value) > 80:
        return None
    m = _CTIME_RE.match(value)
    if not m or m.group(1) not in _MONTHS:
        return None
    try:
        return datetime(int(m.group(6)), _MONTHS[m.group(1)], int(m.group(2)),
                        int(m.group(3)), int(m.group(4)), int(m.group(5)))
    except ValueError:
        return None


# --- failure messages (system_formats.md §2.5) ---------------------------------------------------

_HANDLE_RE = re.compile(
    r"^Unable to determine the device handle for GPU ?(?:(?P<idx>\d+): )?(?P<bdf>" + BUS_ID_PATTERN
    + r")?:? ?(?P<err>.*?)\s*$"
)
_NVML_INIT_RE = re.compile(r"^Failed to initialize NVML: ?(?P<detail>.*?)\s*$")
# reference/system_formats.md §2.2 (a field the driver does not know fails the whole query)
_INVALID_FIELD_RE = re.compile(r'^Field "(?P<field>[^"]*)" is not a valid field to query\.?\s*$')


def _handle_error_kind(detail: str) -> str:
    d = detail.lower()
    if "gpu is lost" in d:
        return "gpu_lost"
    if "unknown error" in d:
        return "unknown_error"
    if "insufficient" in d and "power" in d:
        return "insufficient_power"
    if "reset" in d:
        return "reset_required"
    if "timeout" in d or "timed out" in d:
        return "timeout"
    if "permission" in d:
        return "no_permission"
    if "blocked" in d:
        return "blocked_by_os"
    return "handle_error"


def match_failure(line: str) -> dict[str, Any] | None:
    """A failure line of nvidia-smi → ``{"error", "gpu", "pci_bus_id", "detail"}``; None otherwise.

    ``error`` is one of ``no_driver``, ``nvml_init_failed``, ``driver_library_mismatch``,
    ``nvml_not_found``, ``no_devices``, ``gpu_lost``, ``unknown_error``, ``insufficient_power``,
    ``reset_required``, ``timeout``, ``no_permission``, ``blocked_by_os``, ``handle_error``,
    ``invalid_field``, ``not_installed``.

    >>> match_failure("No devices were found")["error"]
    'no_devices'
    >>> match_failure("Failed to initialize NVML: Driver/library version mismatch")["error"]
    'driver_library_mismatch'
    """
    if len(line) > 2048:
        return None
    s = line.strip()
    if not s:
        return None
    out: dict[str, Any] = {"gpu": None, "pci_bus_id": None, "detail": s}
    if s.startswith("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"):
        out["error"] = "no_driver"
        return out
    if s.startswith("NVIDIA-SMI couldn't find libnvidia-ml.so"):
        out["error"] = "nvml_not_found"
        return out
    if s == "No devices were found" or s == "No devices found.":
        out["error"] = "no_devices"
        return out
    if re.match(r"^(?:bash: |-bash: |sh: )?(?:\S+: )?nvidia-smi(?:\.exe)?: (?:command )?not found$", s):
        out["error"] = "not_installed"
        return out
    m = _NVML_INIT_RE.match(s)
    if m:
        detail = m.group("detail")
        out["detail"] = detail
        out["error"] = "driver_library_mismatch" if "mismatch" in detail.lower() else "nvml_init_failed"
        return out
    m = _HANDLE_RE.match(s)
    if m:
        detail = m.group("err")
        out["detail"] = detail
        out["error"] = _handle_error_kind(detail)
        out["gpu"] = int(m.group("idx")) if m.group("idx") else None
        out["pci_bus_id"] = normalize_bus_id(m.group("bdf"))
        if m.group("bdf"):
            out["bus_id"] = m.group("bdf")
        return out
    m = _INVALID_FIELD_RE.match(s)
    if m:
        out["error"] = "invalid_field"
        out["field"] = m.group("field")
        return out
    return None


def failure_row(line_no: int, raw: str, failure: dict[str, Any], *, ts_local: datetime | None = None) -> dict[str, Any]:
    """The ``gpu_error`` event for one failure line."""
    attrs = {k: v for k, v in failure.items() if v is not None and k != "gpu"}
    if failure.get("gpu") is not None:
        attrs["gpu"] = failure["gpu"]
    return {"line": line_no, "kind": "gpu_error", "gpu": failure.get("gpu"), "text": raw,
            "ts_local": ts_local, "attrs": attrs}


def missing_gpu_rows(seen: list[int], *, expected: int | None, line_no: int, why: str,
                     reported: set[int] | None = None) -> list[dict[str, Any]]:
    """``gpu_error``/``missing_from_table`` events for indices a GPU listing silently skipped.

    A gap in the index sequence (0, 2, 3 → 1) names the missing index. When a count (``Attached
    GPUs``, an error line) says more GPUs exist than are listed and no gap explains it, the missing
    ones are those above the highest index seen.

    >>> [r["gpu"] for r in missing_gpu_rows([0, 2, 3], expected=None, line_no=5, why="gap")]
    [1]
    >>> [r["gpu"] for r in missing_gpu_rows([0, 1], expected=4, line_no=5, why="count")]
    [2, 3]
    """
    if not seen and not expected:
        return []
    seen_set = set(seen)
    top = max(seen_set) if seen_set else -1
    missing = [i for i in range(top + 1) if i not in seen_set]
    if expected is not None and expected > len(seen_set):
        extra = expected - len(seen_set) - len(missing)
        missing += list(range(top + 1, top + 1 + max(extra, 0)))
    rows = []
    for idx in missing:
        attrs: dict[str, Any] = {"error": "missing_from_table", "gpu": idx, "why": why,
                                 "seen_gpus": sorted(seen_set)}
        if expected is not None:
            attrs["expected_count"] = expected
        if reported and idx in reported:
            attrs["reported_by_error_line"] = True
        rows.append({"line": line_no, "kind": "gpu_error", "gpu": idx,
                     "text": f"GPU {idx} missing from nvidia-smi output", "attrs": attrs})
    return rows


# --- the command that produced a text ------------------------------------------------------------

# nvidia-smi(1) (``--query-*=``, ``--format=``, ``-i``/``--id``); bash(1) prompt
_PROMPT_PREFIX_RE = re.compile(r"\s*(?:\S*[$#%>]\s*)?(?:\S*/)?")
_QUERY_RE = re.compile(r"--query-(?P<what>[a-z-]+)(?:=|\s+)['\"]?(?P<fields>[A-Za-z0-9_.,]+)")
_FORMAT_RE = re.compile(r"--format(?:=|\s+)['\"]?(?P<fmt>[A-Za-z,]+)")
_ID_RE = re.compile(r"(?:^|\s)(?:-i|--id)(?:=|\s*)['\"]?(?P<id>[^\s'\"]+)")


@dataclass
class SmiCommand:
    """One ``nvidia-smi`` invocation as typed: what it asks for and how it formats it."""

    raw: str
    query: str | None = None  # "gpu", "compute-apps", "retired-pages", ...
    fields: list[str] = field(default_factory=list)
    csv: bool = False
    noheader: bool = False
    nounits: bool = False
    q: bool = False
    xml: bool = False
    ids: list[str] = field(default_factory=list)

    @property
    def single_index(self) -> int | None:
        """The GPU index when ``-i N`` selects exactly one GPU by index."""
        if len(self.ids) == 1 and self.ids[0].isdigit():
            return int(self.ids[0])
        return None


def smi_invocations(command: str | None) -> list[SmiCommand]:
    """Every ``nvidia-smi`` invocation inside a (possibly compound, ssh-quoted) command line."""
    if not command or len(command) > MAX_LINE:
        return []
    out = []
    for m in re.finditer(r"nvidia-smi(?:\.exe)?\b", command):
        rest = re.split(r"[;|&\n]|\s--\s", command[m.end():], maxsplit=1)[0]
        cmd = SmiCommand(raw="nvidia-smi" + rest)
        q = _QUERY_RE.search(rest)
        if q:
            cmd.query = q.group("what")
            cmd.fields = [f for f in q.group("fields").split(",") if f]
        f = _FORMAT_RE.search(rest)
        if f:
            opts = f.group("fmt").lower().split(",")
            cmd.csv = "csv" in opts
            cmd.noheader = "noheader" in opts
            cmd.nounits = "nounits" in opts
        tokens = rest.replace("'", " ").replace('"', " ").split()
        cmd.q = any(t in ("-q", "--query", "-qx", "-xq") or re.fullmatch(r"-q[a-zA-Z]*", t) is not None
                    for t in tokens)
        cmd.xml = any(t in ("-x", "--xml-format", "-qx", "-xq") for t in tokens)
        i = _ID_RE.search(rest)
        if i:
            cmd.ids = [x for x in i.group("id").split(",") if x]
        out.append(cmd)
    return out


def prompt_command(line: str) -> str | None:
    """The nvidia-smi command of a shell prompt line (``$ nvidia-smi -q``, ``u@h:~$ nvidia-smi``)."""
    if len(line) > MAX_LINE:
        return None
    at = line.find("nvidia-smi")
    # The prompt before the command is short; matching only that slice keeps a long line linear.
    if at < 0 or at > 200 or not _PROMPT_PREFIX_RE.fullmatch(line[:at]):
        return None
    cmd = line[at:]
    if not re.match(r"nvidia-smi(?:\.exe)?(?:\s|$)", cmd):
        return None
    return cmd.strip()

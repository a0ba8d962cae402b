"""``nvidia-smi pmon`` (per-process series) and ``nvidia-smi dmon`` (per-GPU series).

Sources: nvidia-smi(1) (``pmon``/``dmon`` and ``-o DT``), reference/system_formats.md §7 (``-`` for no value).

Both print two ``#`` header lines (column names, then units) and one row per process or GPU per
sample; the headers repeat every few samples. A ``-`` is "no value" (an idle engine, no process) and
becomes null, never 0. ``-o D``/``-o T``/``-o DT`` put ``Date`` (``YYYYMMDD``) and/or ``Time``
(``HH:MM:SS``) columns first. The columns depend on the driver and on ``-s``::

    # gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command
    # Idx           #    C/G      %      %      %      %      %      %    name
        0      10291     C      -      -      -      -      -      -    memhog
        0      10309     C     99      7      -      -      -      -    gpu_burn

    #Date       Time        gpu        pid  type     fb   ccpm     sm    mem    enc    dec   command
    #YYYYMMDD   HH:MM:SS    Idx          #   C/G     MB     MB      %      %      %      %   name
     20261129   08:50:41      1      41300     C  81234      0     97     41      -      -   sglang::schedul

    # gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk
    # Idx      W      C      C      %      %      %      %      %      %    MHz    MHz
        0    630     53     41    100      8      0      0      0      0   3201   1980

pmon rows become ``gpu_process_sample``: ``gpu``, ``pid`` (null on an idle GPU's ``-`` row, with
``attrs.no_process``), ``comm``, ``used_bytes`` = ``fb`` (MiB) when printed; attrs ``type``, the
``<col>_pct`` utilisations, ``ccpm_bytes``, engine identity of the command (``engine``,
``sglang_role``/``vllm_role``, ranks). dmon rows become ``gpu_sample``: ``gpu``, ``ratio`` = sm/100,
``used_bytes`` = ``fb`` (MiB); attrs ``power_w``, ``temperature_c`` (gtemp),
``memory_temperature_c`` (mtemp), ``<col>_pct``, ``mclk_mhz``/``pclk_mhz``, ``bar1_bytes``,
``sbecc_count``/``dbecc_count``/``pci_replay_count``, ``rxpci_mb_s``/``txpci_mb_s``,
``pviol_pct``/``tviol_pct``; a column we do not know is kept under its own name. Both carry
``sample`` (0, 1 … counted from the rows: a GPU or a (GPU, pid) seen again starts the next sample),
``ts_local`` with ``-o DT``, ``time_text`` with ``-o T`` alone, ``placeholders`` for ``-`` cells.

>>> r = parse('''# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec   mclk   pclk
... # Idx      W      C      C      %      %      %      %    MHz    MHz
...     0    630     53     41    100      8      0      0   3201   1980
...     1     75     30      -      0      0      0      0    405    345''')
>>> r.events.select("kind", "gpu", "ratio").rows()
[('gpu_sample', 0, 1.0), ('gpu_sample', 1, 0.0)]
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from parsers.nvidia_smi.common import (
    failure_row,
    match_failure,
    mib_to_bytes,
    number,
    prompt_command,
    split_lines,
)
from parsers.proc_titles import process_identity, rank_columns
from parsers.schema import MAX_UNRECOGNIZED_EXAMPLES, NotThisFormat, ParseResult

FORMAT = "nvidia_smi_mon"

_MAX = 2048
#: column → (attr, how): pct → ``<col>_pct``; mib → bytes; num → float as printed
_DMON_COLS: dict[str, tuple[str, str]] = {
    "pwr": ("power_w", "num"), "gtemp": ("temperature_c", "num"), "temp": ("temperature_c", "num"), "mtemp": ("memory_temperature_c", "num"),
    "sm": ("sm_pct", "num"), "mem": ("mem_pct", "num"), "enc": ("enc_pct", "num"), "dec": ("dec_pct", "num"),
    "jpg": ("jpg_pct", "num"), "ofa": ("ofa_pct", "num"), "mclk": ("mclk_mhz", "num"),
    "pclk": ("pclk_mhz", "num"), "pviol": ("pviol_pct", "num"), "tviol": ("tviol_pct", "num"),
    "fb": ("fb_bytes", "mib"), "bar1": ("bar1_bytes", "mib"), "ccpm": ("ccpm_bytes", "mib"),
    "sbecc": ("sbecc_count", "num"), "dbecc": ("dbecc_count", "num"), "pci": ("pci_replay_count", "num"),
    "rxpci": ("rxpci_mb_s", "num"), "txpci": ("txpci_mb_s", "num"),
}
_LEAD = ("date", "time")
_HEADER_RE = re.compile(r"^\s*#\s*(?:date\s+)?(?:time\s+)?gpu\b", re.IGNORECASE)
_DATE_RE = re.compile(r"^\d{8}$")
_TIME_RE = re.compile(r"^\d{2}:\d{2}:\d{2}$")


def _header(line: str) -> list[str] | None:
    """The column names of a pmon/dmon header line (``# gpu pid type …``), lower case."""
    if len(line) > _MAX or not _HEADER_RE.match(line):
        return None
    cols = line.strip().lstrip("#").lower().split()
    if "gpu" not in cols or len(cols) < 2:
        return None
    if not all(re.fullmatch(r"[a-z][a-z0-9_]*", c) for c in cols):
        return None
    return cols


def _units_line(line: str) -> bool:
    s = line.strip()
    return s.startswith("#") and bool(re.search(r"\bIdx\b", s))


def sniff(head: str) -> float:
    """0.95 when a pmon/dmon header comes first (after a prompt) and rows follow its columns.

    >>> sniff("# gpu        pid  type    sm   mem   enc   dec   command\\n# Idx          #   C/G     %     %     %     %   name\\n")
    0.95
    >>> sniff("# this is a comment\\nMem: 1 2 3")
    0.0
    """
    lines = [ln for ln in head.splitlines()[:300] if ln.strip()]
    lines = [ln for ln in lines if prompt_command(ln) is None]
    for ln in lines[:3]:
        cols = _header(ln)
        if cols and (("pid" in cols and ("command" in cols or "type" in cols))
                     or any(c in _DMON_COLS for c in cols)):
            return 0.95
    return 0.0


def _ts(date: str | None, time: str | None) -> datetime | None:
    if not (date and time):
        return None
    try:
        return datetime.strptime(f"{date} {time}", "%Y%m%d %H:%M:%S")
    except ValueError:
        return None


class _Series:
    """Counts samples: a GPU (dmon) or a (GPU, pid) (pmon) seen again, or a new time, starts the next."""

    def __init__(self) -> None:
        self.sample = -1
        self.seen: set[tuple[Any, ...]] = set()
        self.stamp: tuple[str | None, str | None] | None = None

    def place(self, key: tuple[Any, ...], stamp: tuple[str | None, str | None]) -> int:
        if self.sample < 0 or key in self.seen or (stamp != (None, None) and stamp != self.stamp):
            self.sample += 1
            self.seen = set()
        self.seen.add(key)
        self.stamp = stamp
        return self.sample


def _row(cols: list[str], line: str, i: int, series: _Series) -> dict[str, Any] | None:
    words = line.split()
    is_pmon = "pid" in cols
    if is_pmon and cols[-1] == "command":
        # the command name may hold spaces; everything after the fixed columns is the name
        head = words[:len(cols) - 1]
        name = " ".join(words[len(cols) - 1:])
        if len(head) != len(cols) - 1:
            return None
        cells = dict(zip(cols[:-1], head, strict=True))
        cells["command"] = name
    else:
        if len(words) != len(cols):
            return None
        cells = dict(zip(cols, words, strict=True))
    date, time = cells.get("date"), cells.get("time")
    if date is not None and not _DATE_RE.match(date) or time is not None and not _TIME_RE.match(time):
        return None
    if not cells.get("gpu", "").isdigit():
        return None
    gpu = int(cells["gpu"])
    attrs: dict[str, Any] = {}
    placeholders: dict[str, str] = {}
    row: dict[str, Any] = {"line": i, "gpu": gpu, "text": line, "ts_local": _ts(date, time)}
    if time is not None and date is None:
        attrs["time_text"] = time
    for c, v in cells.items():
        if c in ("gpu", "date", "time", "pid", "type", "command"):
            continue
        attr, how = _DMON_COLS.get(c, (c, "num"))
        if v == "-":
            placeholders[attr] = v
            continue
        val = mib_to_bytes(v) if how == "mib" else number(v)
        if val is None:
            return None  # a word where a figure belongs: not a row of this table
        attrs[attr] = int(val) if how == "num" and val == int(val) else val
    if is_pmon:
        pid_text = cells.get("pid", "-")
        if pid_text != "-" and not pid_text.isdigit():
            return None
        pid = int(pid_text) if pid_text.isdigit() else None
        row.update(kind="gpu_process_sample", pid=pid)
        if pid is None:
            attrs["no_process"] = True
        ptype = cells.get("type")
        if ptype and ptype != "-":
            attrs["type"] = ptype
        name = cells.get("command")
        if name and name != "-":
            row["comm"] = name
            ident = process_identity(name)
            attrs.update(ident)
            row.update(rank_columns(ident))
        key: tuple[Any, ...] = (gpu, pid)
    else:
        row["kind"] = "gpu_sample"
        if attrs.get("sm_pct") is not None:
            row["ratio"] = attrs["sm_pct"] / 100
        key = (gpu,)
    if attrs.get("fb_bytes") is not None:
        row["used_bytes"] = attrs["fb_bytes"]
    if placeholders:
        attrs["placeholders"] = placeholders
    attrs["sample"] = series.place(key, (date, time))
    row["attrs"] = attrs
    return row


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    """One row per process (pmon) or GPU (dmon) per sample; headers may repeat and change."""
    lines = split_lines(text)
    rows: list[dict[str, Any]] = []
    unrec: list[tuple[int, str]] = []
    n_unrec = 0
    cols: list[str] | None = None
    series = _Series()
    saw_header = False
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if prompt_command(line) is not None:
            continue
        h = _header(line)
        if h is not None:
            if h != cols:
                series = _Series() if cols is not None and ("pid" in h) != ("pid" in cols) else series
            cols, saw_header = h, True
            continue
        if _units_line(line):
            continue
        row = _row(cols, line, i, series) if cols is not None and len(line) <= _MAX else None
        if row is not None:
            rows.append(row)
            continue
        failure = match_failure(line)
        if failure:
            rows.append(failure_row(i, line, failure))
            continue
        n_unrec += 1
        if len(unrec) < MAX_UNRECOGNIZED_EXAMPLES:
            unrec.append((i, line[:500]))
    if not saw_header and not rows:
        raise NotThisFormat("no pmon/dmon header")
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=len(lines),
                                 recognized=len(lines) - n_unrec, unrecognized=n_unrec,
                                 unrecognized_examples=unrec)

"""``nvidia-smi --query-gpu=… / --query-compute-apps=… / --query-*=… --format=csv[,noheader][,nounits]``.

Sources: reference/system_formats.md §2.2 and nvidia-smi(1) (``--help-query-gpu``, ``--help-query-compute-
apps``: field names, ``[MiB]`` units, the ``YYYY/MM/DD HH:MM:SS.fff`` timestamp, ``GPU-``/``MIG-`` UUIDs, bus
ids).

Real format (driver 590; fields come in the order requested, units in brackets in the header and
after each value unless ``nounits``; ``noheader`` drops the header line)::

    index, name, memory.used [MiB], memory.total [MiB], utilization.gpu [%]
    0, NVIDIA H200, 32362 MiB, 143771 MiB, 100 %

    pid, process_name, used_gpu_memory [MiB]
    10291, /root/tools/memhog, 2566 MiB

The columns are read from the header; without one, from the ``command`` argument
(``--query-gpu=index,memory.used``); with neither, only the unambiguous ``N, NNNN MiB`` shape is
read, as ``index, memory.used`` with ``attrs.assumed_columns``, and header-less compute-apps rows
whose cells have the shapes of a pid, a process name and a memory or UUID (:func:`guess_app_fields`). Placeholders (``[N/A]``,
``[Not Supported]``, ``[Insufficient Permissions]``, ``[Requested functionality has been
deprecated]`` …) become null, never 0, and are kept in ``attrs.placeholders``.

Events: ``gpu_memory`` per ``--query-gpu`` row, ``gpu_process`` per ``--query-compute-apps`` row
(``gpu`` from a ``--query-gpu`` block of the same text that maps the uuid/bus id to an index, else
null with ``attrs.gpu_uuid``), ``gpu_process_none`` for an empty compute-apps list (header only, or
empty output of a known command), ``gpu_query_row`` for other queries (retired pages, accounted
apps …), ``gpu_error`` for failure lines and GPUs missing from the listing.

>>> r = parse("0, 96413 MiB\\n1, 99 MiB\\n", command="nvidia-smi --query-gpu=index,memory.used --format=csv,noheader")
>>> r.events.select("gpu", "used_bytes").rows()
[(0, 101096357888), (1, 103809024)]
>>> r = parse("pid, process_name, used_gpu_memory [MiB]\\n")
>>> r.events["kind"].to_list()
['gpu_process_none']
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from parsers.nvidia_smi.common import (
    MAX_LINE,
    SmiCommand,
    failure_row,
    integer,
    match_failure,
    mib_to_bytes,
    missing_gpu_rows,
    normalize_bus_id,
    number,
    placeholder,
    prompt_command,
    smi_invocations,
    split_lines,
)
from parsers.proc_titles import process_identity, rank_columns
from parsers.schema import NotThisFormat, ParseResult

FORMAT = "nvidia_smi_csv"

# reference/system_formats.md §2.2, nvidia-smi(1) (``--help-query-gpu``: dotted field names with ``[unit]`` headers;
# ``noheader`` rows of ``index, memory.used``; the ``YYYY/MM/DD HH:MM:SS.fff`` timestamp)
_FIELD_RE = re.compile(r"^[a-z][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*(?: \[[^\]]{1,16}\])?$")
_KNOWN_PLAIN = frozenset({"index", "name", "uuid", "serial", "count", "pstate", "timestamp", "pid",
                          "hostname", "time"})
_ASSUMED_ROW = re.compile(r"^\s*(\d{1,3})\s*,\s*(\d+)\s*MiB\s*$")
_TIMESTAMP_RE = re.compile(r"^(\d{4})/(\d{2})/(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?$")

#: Aliases from ``--help-query-*`` → one spelling.
_GPU_ALIASES = {"gpu_name": "name", "gpu_serial": "serial", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id",
                "inforom.image": "inforom.img", "inforom.power": "inforom.pwr"}
_APP_ALIASES = {"used_memory": "used_gpu_memory", "name": "process_name"}
_PROCESS_FIELDS = frozenset({"pid", "process_name", "used_gpu_memory", "used_memory"})
#: Fields whose values are MiB (with or without the unit printed).
_MIB_FIELDS = frozenset({"memory.total", "memory.used", "memory.free", "memory.reserved", "used_gpu_memory",
                         "protected_memory.total", "protected_memory.used", "protected_memory.free",
                         "max_memory_usage"})
#: Free-text fields that may themselves contain ", " (Windows paths, GPU names).
_FREE_TEXT = ("process_name", "name", "hostname")

#: --query-gpu field → gpu_memory attr (first listed wins when several are present).
_GPU_ATTRS: list[tuple[str, str, str]] = [  # field, attr, how
    ("name", "name", "str"), ("uuid", "uuid", "str"), ("serial", "serial", "str"),
    ("pci.bus_id", "bus_id", "str"), ("driver_version", "driver_version", "str"),
    ("temperature.gpu", "temperature_c", "num"), ("temperature.memory", "memory_temperature_c", "num"),
    ("power.draw", "power_w", "num"), ("power.draw.average", "power_w", "num"),
    ("power.draw.instant", "power_w", "num"), ("power.limit", "power_cap_w", "num"),
    ("enforced.power.limit", "power_cap_w", "num"), ("persistence_mode", "persistence", "str"),
    ("pstate", "perf", "str"), ("mig.mode.current", "mig", "str"), ("ecc.mode.current", "ecc", "str"),
    ("fan.speed", "fan_pct", "num"), ("utilization.gpu", "util_pct", "num"),
    ("utilization.memory", "memory_util_pct", "num"), ("compute_mode", "compute_mode", "str"),
    ("memory.reserved", "reserved_bytes", "mib"), ("count", "count", "int"),
    ("ecc.errors.uncorrected.volatile.total", "ecc_uncorrected_volatile", "int"),
    ("ecc.errors.uncorrected.aggregate.total", "ecc_uncorrected_aggregate", "int"),
    ("remapped_rows.uncorrectable", "remapped_rows_uncorrectable", "int"),
    ("remapped_rows.pending", "remapped_rows_pending", "str"),
    ("remapped_rows.failure", "remapped_rows_failure", "str"),
    ("retired_pages.pending", "retired_pages_pending", "str"),
    ("gpu_recovery_action", "gpu_recovery_action", "str"),
    ("clocks_event_reasons.active", "clocks_event_reasons_active", "str"),
]


# reference/system_formats.md §2.2 (``--query-compute-apps`` cells: GPU-/MIG- UUIDs, bus ids, ``N MiB``), §2.1
# (model names)
_UUID_CELL = re.compile(r"^(?:GPU|MIG)-[0-9A-Za-z/-]+$")
_BUS_CELL = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_MIB_CELL = re.compile(r"^\d+ ?MiB$")
#: a model name in the place of a process name: the row is --query-gpu's (index, name, memory …)
_GPU_MODEL = re.compile(r"^(?:NVIDIA|Tesla|GeForce|Quadro|TITAN|RTX|A\d{2,3}|H\d{3}|L\d{1,2}S?)\b")
#: below this a number is a GPU index more likely than a pid (pids under 300 are the kernel's and init's)
_MIN_GUESSED_PID = 300


def guess_app_fields(line: str) -> list[str] | None:
    """The ``--query-compute-apps`` fields of a header-less row, guessed from each cell's shape.

    A pid (the first bare number), a process name, and a ``NNN MiB`` memory (or its placeholder)
    and/or a ``GPU-…`` uuid; a bus id and a timestamp are recognised too. Names with ``", "`` in them
    (Windows paths) stay one name. None when the row does not have that shape.

    >>> guess_app_fields("41300, sglang::scheduler_TP0, 81234 MiB")
    ['pid', 'process_name', 'used_gpu_memory']
    >>> guess_app_fields("41300, /usr/bin/python3, 81234 MiB, GPU-5b1e3c2a-0000-4000-8000-00000000a001")
    ['pid', 'process_name', 'used_gpu_memory', 'gpu_uuid']
    >>> guess_app_fields("0, NVIDIA H200, 32362 MiB") is None
    True
    """
    if len(line) > MAX_LINE or ", " not in line:
        return None
    fields: list[str] = []
    for cell in (c.strip() for c in line.strip().split(", ")):
        if _UUID_CELL.match(cell):
            f = "gpu_uuid"
        elif _BUS_CELL.match(cell):
            f = "gpu_bus_id"
        elif _TIMESTAMP_RE.match(cell):
            f = "timestamp"
        elif _MIB_CELL.match(cell) or (placeholder(cell) is not None and "process_name" in fields):
            f = "used_gpu_memory"
        elif cell.isdigit() and "pid" not in fields:
            if int(cell) < _MIN_GUESSED_PID:
                return None
            f = "pid"
        elif cell and not cell.isdigit() and placeholder(cell) is None:
            if fields and fields[-1] == "process_name":
                continue  # ", " inside the name
            if _GPU_MODEL.match(cell):
                return None  # index, name, memory of --query-gpu: a GPU's name, not a process's
            f = "process_name"
        else:
            return None
        if f in fields:
            return None
        fields.append(f)
    if "pid" not in fields or "process_name" not in fields:
        return None
    if "used_gpu_memory" not in fields and "gpu_uuid" not in fields:
        return None
    return fields


def _split_header(line: str) -> list[str] | None:
    """The raw header cells when ``line`` is a --query-* CSV header, else None."""
    if len(line) > MAX_LINE:
        return None
    cells = [c.strip() for c in line.strip().split(",")]
    if not cells or not all(_FIELD_RE.match(c) for c in cells):
        return None
    names = [c.split(" [")[0] for c in cells]
    if not any("." in n or "_" in n or n in _KNOWN_PLAIN for n in names):
        return None
    return cells


def sniff(head: str) -> float:
    """0.95 with a ``--query-…--format=csv`` prompt or a field header, 0.75 for ``N, NNN MiB`` rows.

    >>> sniff("index, memory.used [MiB]\\n0, 96413 MiB")
    0.95
    >>> sniff("0, 96413 MiB\\n1, 99 MiB")
    0.75
    >>> sniff("| NVIDIA-SMI 590.48.01   Driver Version: 590.48.01   CUDA Version: 13.1 |")
    0.0
    """
    assumed = 0
    seen = 0
    for line in head.splitlines()[:200]:
        s = line.strip()
        if not s:
            continue
        cmd = prompt_command(line)
        if cmd is not None:
            if any(c.query and c.csv for c in smi_invocations(cmd)):
                return 0.95
            continue
        if match_failure(s):
            continue
        seen += 1
        if seen == 1 and _split_header(s):
            return 0.95
        if _ASSUMED_ROW.match(s) or guess_app_fields(s):
            assumed += 1
        elif seen <= 3:
            return 0.0
        if seen >= 8:
            break
    return 0.75 if assumed and assumed == min(seen, 8) else 0.0


def _ts(value: str | None) -> datetime | None:
    m = _TIMESTAMP_RE.match(value or "")
    if not m:
        return None
    y, mo, d, h, mi, s, frac = m.groups()
    try:
        return datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), int((frac or "0").ljust(6, "0")))
    except ValueError:
        return None


class _Block:
    """One CSV listing: its fields (canonical names), their units, and which query it answers."""

    def __init__(self, cells: list[str], query: str | None, *, source: str, nounits: bool = False):
        self.raw_cells = cells
        self.units = {}
        names = []
        for c in cells:
            name, _, unit = c.partition(" [")
            names.append(name)
            if unit:
                self.units[name] = unit.rstrip("]")
        self.query = query or _infer_query(names)
        aliases = _APP_ALIASES if self.query in ("compute-apps", "accounted-apps") else _GPU_ALIASES
        self.fields = [aliases.get(n, n) for n in names]
        self.source = source  # header | command | assumed
        self.nounits = nounits
        self.rows = 0
        free = [i for i, f in enumerate(self.fields) if f in _FREE_TEXT]
        self.free_idx = free[0] if len(free) == 1 else None

    def split(self, line: str) -> list[str] | None:
        n = len(self.fields)
        parts = line.split(", ")
        if len(parts) == n:
            return [p.strip() for p in parts]
        if len(parts) > n and self.free_idx is not None:
            k, right = self.free_idx, n - self.free_idx - 1
            mid = parts[k:len(parts) - right]
            return [p.strip() for p in parts[:k]] + [", ".join(mid).strip()] + \
                [p.strip() for p in parts[len(parts) - right:]]
        if len(parts) == 1 and n > 1:  # a paste with the spaces after commas removed
            bare = [p.strip() for p in line.split(",")]
            if len(bare) == n:
                return bare
        return None


def _infer_query(names: list[str]) -> str:
    s = set(names)
    if "retired_pages.address" in s or "retired_pages.cause" in s:
        return "retired-pages"
    if "remapped_rows.correctable" in s and "index" not in s and "pid" not in s and "memory.used" not in s:
        return "gpu"
    if s & {"max_memory_usage", "is_running", "gpu_utilization"}:
        return "accounted-apps"
    if s & _PROCESS_FIELDS and not s & {"index", "memory.used", "memory.total"}:
        return "compute-apps"
    return "gpu"


def _values(block: _Block, cells: list[str]) -> tuple[dict[str, str | None], dict[str, str], dict[str, str]]:
    """field → value (None for placeholders), field → placeholder as printed, field → raw."""
    vals: dict[str, str | None] = {}
    ph: dict[str, str] = {}
    raw: dict[str, str] = {}
    for f, c in zip(block.fields, cells, strict=True):
        raw[f] = c
        if placeholder(c) is not None:
            ph[f] = c
            vals[f] = None
        else:
            vals[f] = c
    return vals, ph, raw


def _gpu_row(block: _Block, i: int, line: str, cells: list[str], ordinal: int,
             skip: set[int]) -> dict[str, Any]:
    vals, ph, raw = _values(block, cells)
    attrs: dict[str, Any] = {"fields": raw, "query": "gpu"}
    placeholders: dict[str, str] = {}
    for field, attr, how in _GPU_ATTRS:
        if field not in block.fields or attr in attrs:
            continue
        v = vals.get(field)
        if v is None:
            if field in ph:
                placeholders[attr] = ph[field]
            continue
        attrs[attr] = (number(v) if how == "num" else integer(v) if how == "int"
                       else mib_to_bytes(v) if how == "mib" else v)
    if "bus_id" in attrs:
        attrs["pci_bus_id"] = normalize_bus_id(attrs["bus_id"])
    gpu = integer(vals.get("index")) if "index" in block.fields else None
    if gpu is None and "index" not in block.fields:
        # Rows come in index order; skip indices an error line already reported as unreachable.
        gpu = ordinal
        while gpu in skip:
            gpu += 1
        attrs["index_source"] = "row_order"
    elif gpu is None:
        placeholders["gpu"] = ph.get("index", raw.get("index", ""))
    if block.source == "assumed":
        attrs["assumed_columns"] = True
    row: dict[str, Any] = {"line": i, "kind": "gpu_memory", "gpu": gpu, "text": line,
                           "ts_local": _ts(vals.get("timestamp"))}
    for field, col in (("memory.used", "used_bytes"), ("memory.total", "total_bytes"), ("memory.free", "free_bytes")):
        if field in block.fields:
            row[col] = mib_to_bytes(vals.get(field))
            if vals.get(field) is None:
                placeholders[col] = ph.get(field, raw.get(field, ""))
    if row.get("free_bytes") is None and row.get("used_bytes") is not None and row.get("total_bytes") is not None:
        row["free_bytes"] = row["total_bytes"] - row["used_bytes"]
    if attrs.get("util_pct") is not None:
        row["ratio"] = attrs["util_pct"] / 100
    for col in ("used_bytes", "total_bytes", "free_bytes"):
        if row.get(col) is not None:
            attrs[col] = row[col]
    if placeholders:
        attrs["placeholders"] = placeholders
    row["attrs"] = attrs
    return row


def _app_row(block: _Block, i: int, line: str, cells: list[str]) -> dict[str, Any]:
    vals, ph, raw = _values(block, cells)
    placeholders = {f: p for f, p in ph.items()}
    attrs: dict[str, Any] = {"fields": raw, "query": block.query}
    for f in ("gpu_uuid", "gpu_bus_id", "gpu_name", "gpu_serial", "process_name"):
        if vals.get(f) is not None:
            attrs[f] = vals[f]
    if vals.get("gpu_bus_id"):
        attrs["pci_bus_id"] = normalize_bus_id(vals["gpu_bus_id"])
    mem_field = "used_gpu_memory" if block.query == "compute-apps" else "max_memory_usage"
    used = mib_to_bytes(vals.get(mem_field)) if mem_field in block.fields else None
    if used is not None:
        attrs["used_bytes"] = used
    if mem_field in ph:
        placeholders["used_bytes"] = ph[mem_field]
    if placeholders:
        attrs["placeholders"] = placeholders
    if block.source == "assumed":
        attrs["assumed_columns"] = block.fields
    ident = process_identity(vals.get("process_name"))
    attrs.update(ident)
    kind = "gpu_process" if block.query == "compute-apps" else "gpu_query_row"
    return {"line": i, "kind": kind, "pid": integer(vals.get("pid")), "comm": vals.get("process_name"),
            "used_bytes": used, "text": line, "ts_local": _ts(vals.get("timestamp")), "attrs": attrs,
            **rank_columns(ident)}


def _other_row(block: _Block, i: int, line: str, cells: list[str]) -> dict[str, Any]:
    vals, ph, raw = _values(block, cells)
    attrs: dict[str, Any] = {"fields": raw, "query": block.query}
    for f in ("uuid", "pci.bus_id", "name"):
        if vals.get(f) is not None:
            attrs[{"pci.bus_id": "bus_id"}.get(f, f)] = vals[f]
    if vals.get("pci.bus_id"):
        attrs["pci_bus_id"] = normalize_bus_id(vals["pci.bus_id"])
    if ph:
        attrs["placeholders"] = ph
    return {"line": i, "kind": "gpu_query_row", "text": line, "ts_local": _ts(vals.get("timestamp")),
            "attrs": attrs}


def _command_block(cmds: list[SmiCommand]) -> _Block | None:
    for c in cmds:
        if c.query and c.fields:
            return _Block(c.fields, _query_name(c.query), source="command", nounits=c.nounits)
    return None


def _query_name(q: str) -> str:
    return "gpu" if q == "gpu" else q


def _resolve_gpus(rows: list[dict[str, Any]]) -> None:
    """Give process/query rows the GPU index that a --query-gpu block of the same text maps them to."""
    by_uuid, by_bus = {}, {}
    for r in rows:
        if r["kind"] == "gpu_memory" and r.get("gpu") is not None:
            a = r["attrs"]
            if a.get("uuid"):
                by_uuid[a["uuid"]] = r["gpu"]
            if a.get("pci_bus_id"):
                by_bus[a["pci_bus_id"]] = r["gpu"]
    for r in rows:
        if r["kind"] in ("gpu_process", "gpu_query_row") and r.get("gpu") is None:
            a = r["attrs"]
            uuid = a.get("gpu_uuid") or a.get("uuid")
            gpu = by_uuid.get(uuid) if uuid else None
            if gpu is None and a.get("pci_bus_id"):
                gpu = by_bus.get(a["pci_bus_id"])
            if gpu is not None:
                r["gpu"] = gpu
                a["gpu_index_from"] = "query-gpu block in the same text"


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    """Parse one or more --query-* CSV listings (a header line starts a new listing)."""
    lines = split_lines(text)
    cmds = smi_invocations(command)
    cmd_block = _command_block(cmds)
    notes: list[str] = []
    rows: list[dict[str, Any]] = []
    unrec: list[tuple[int, str]] = []
    n_unrec = 0
    block: _Block | None = None
    blocks: list[tuple[_Block, int]] = []  # (block, header line or 0)
    errors: list[dict[str, Any]] = []
    understood = 0

    content = [(i, ln) for i, ln in enumerate(lines, start=1) if ln.strip()]
    if not content:
        if cmd_block is not None:
            if cmd_block.query == "compute-apps":
                rows.append({"line": 1, "kind": "gpu_process_none", "text": "",
                             "attrs": {"empty_output": True, "command": cmd_block.raw_cells}})
            return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=len(lines),
                                         recognized=len(lines), notes=["nvidia-smi printed no rows"])
        raise NotThisFormat("empty text and no --query command")

    gpu_ordinal = 0
    for i, line in content:
        if len(line) > MAX_LINE:
            n_unrec += 1
            unrec.append((i, line[:200]))
            continue
        pc = prompt_command(line)
        if pc is not None:
            inv = smi_invocations(pc)
            new = _command_block(inv)
            if new is not None or not cmds:
                cmd_block, cmds, block = new, inv, None
            continue
        failure = match_failure(line)
        if failure:
            understood += 1
            rows.append(failure_row(i, line, failure))
            errors.append(failure)
            continue
        header = _split_header(line)
        if header:
            if cmd_block is not None and [c.split(" [")[0] for c in header] != cmd_block.raw_cells:
                notes.append(f"line {i}: header fields differ from the command's; the header wins")
            nounits = cmd_block.nounits if cmd_block else False
            block = _Block(header, cmd_block.query if cmd_block else None, source="header", nounits=nounits)
            blocks.append((block, i))
            gpu_ordinal = 0
            understood += 1
            continue
        if block is None and cmd_block is not None:
            block = cmd_block
            blocks.append((block, 0))
        guessed = guess_app_fields(line) if block is None or block.source == "assumed" else None
        if block is None and _ASSUMED_ROW.match(line):
            block = _Block(["index", "memory.used"], "gpu", source="assumed")
            blocks.append((block, 0))
            notes.append("no header and no command: columns assumed to be index, memory.used [MiB]")
        elif block is None and guessed:
            block = _Block(guessed, "compute-apps", source="assumed")
            blocks.append((block, 0))
            notes.append(f"no header and no command: compute-apps columns guessed from their shapes: {', '.join(guessed)}")
        cells = block.split(line) if block is not None else None
        if block is not None and block.source == "assumed":
            fits = _ASSUMED_ROW.match(line) if block.query == "gpu" else guessed == block.fields
            cells = cells if fits else None
        if cells is None:
            n_unrec += 1
            unrec.append((i, line[:500]))
            continue
        assert block is not None
        understood += 1
        block.rows += 1
        if block.query == "gpu":
            skip = {e["gpu"] for e in errors if e.get("gpu") is not None}
            rows.append(_gpu_row(block, i, line, cells, gpu_ordinal, skip))
            gpu_ordinal = rows[-1]["gpu"] + 1 if rows[-1]["gpu"] is not None else gpu_ordinal + 1
        elif block.query in ("compute-apps", "accounted-apps"):
            rows.append(_app_row(block, i, line, cells))
        else:
            rows.append(_other_row(block, i, line, cells))

    if understood == 0:
        raise NotThisFormat("no --query CSV header, rows or failure line")
    for b, header_line in blocks:
        if b.query == "compute-apps" and b.rows == 0:
            rows.append({"line": header_line or 1, "kind": "gpu_process_none", "text": lines[header_line - 1]
                         if header_line else "", "attrs": {"fields": b.raw_cells}})
    if not blocks and cmd_block is not None and cmd_block.query == "compute-apps" and not errors:
        rows.append({"line": 1, "kind": "gpu_process_none", "text": "", "attrs": {"empty_output": True}})
    _resolve_gpus(rows)
    _notice_missing(rows, errors)
    rows.sort(key=lambda r: r["line"])
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=len(lines),
                                 recognized=len(lines) - n_unrec, unrecognized=n_unrec,
                                 unrecognized_examples=unrec, notes=notes)


def _notice_missing(rows: list[dict[str, Any]], errors: list[dict[str, Any]]) -> None:
    gpus = [r for r in rows if r["kind"] == "gpu_memory" and r.get("gpu") is not None]
    if not gpus:
        return
    seen = [r["gpu"] for r in gpus]
    counts = [r["attrs"]["count"] for r in gpus if isinstance(r["attrs"].get("count"), int)]
    seen_bus = {r["attrs"].get("pci_bus_id") for r in gpus}
    unexplained = [e for e in errors if (e.get("gpu") is not None or e.get("pci_bus_id")) and
                   e.get("gpu") not in seen and e.get("pci_bus_id") not in seen_bus]
    expected = max(counts) if counts else None
    if unexplained:
        expected = max(expected or 0, len(set(seen)) + len(unexplained))
    reported = {e["gpu"] for e in errors if e.get("gpu") is not None}
    rows.extend(missing_gpu_rows(seen, expected=expected, line_no=gpus[0]["line"],
                                 why="index gap, count field or error line", reported=reported))

"""``nvidia-smi`` default table (no arguments): per-GPU memory, MIG devices, processes, failures.

Real format (driver 590; R530+ is 89 columns, R525 and older 79 columns with 2-3 lines per GPU;
R610+ writes ``KMD Version``/``CUDA UMD Version``; Windows shows ``WDDM``/``TCC``)::

    Fri Jul  3 22:11:09 2026
    +-----------------------------------------------------------------------------------------+
    | NVIDIA-SMI 590.48.01              Driver Version: 590.48.01      CUDA Version: 13.1     |
    |=========================================+========================+======================|
    |   0  NVIDIA H200                    On  |   00000000:83:00.0 Off |                    0 |
    | N/A   52C    P0            628W /  700W |   32362MiB / 143771MiB |    100%      Default |
    |                                         |                        |             Disabled |
    | Processes:                                                                              |
    |    0   N/A  N/A           10291      C   /root/tools/memhog                     2566MiB |
    |  No running processes found                                                             |

Events: ``gpu_memory`` per GPU (``used/total/free_bytes`` from MiB, ``ratio`` = GPU-Util),
``gpu_mig_device`` per row of the ``MIG devices:`` box, ``gpu_process`` per process row,
``gpu_process_none`` for ``No running processes found``, ``gpu_process_cut`` for a cut mark inside the
process box (the list is partial: an unlisted GPU is not shown, not ownerless), ``version`` (driver, cuda) from the header,
``gpu_error`` for failure lines and for GPU indices the table silently skips
(``Unable to determine the device handle for GPU1: …`` followed by a table of GPUs 0, 2, 3).
Process rows are also read from a list pasted without its box (``attrs.boxless``); a row cut short
is counted as unrecognised and the others are kept.
``ts_local`` is the table's own date line.

>>> text = '''Fri Jul  3 22:11:09 2026
... | NVIDIA-SMI 590.48.01              Driver Version: 590.48.01      CUDA Version: 13.1     |
... |   0  NVIDIA H200                    On  |   00000000:83:00.0 Off |                    0 |
... | N/A   52C    P0            628W /  700W |   32362MiB / 143771MiB |    100%      Default |
... |                                         |                        |             Disabled |
... |  No running processes found                                                             |'''
>>> r = parse(text)
>>> r.events.filter(kind="gpu_memory").select("gpu", "used_bytes", "total_bytes", "ratio").row(0)
(0, 33934016512, 150754820096, 1.0)
>>> r.events["kind"].to_list()
['version', 'version', 'gpu_memory', 'gpu_process_none']
>>> (r.lines, r.recognized)
(6, 6)
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from parsers.elision import is_elision
from parsers.nvidia_smi.common import (
    BUS_ID_PATTERN,
    failure_row,
    integer,
    match_failure,
    mib_to_bytes,
    missing_gpu_rows,
    normalize_bus_id,
    number,
    parse_ctime,
    placeholder,
    prompt_command,
    smi_invocations,
    split_lines,
)
from parsers.proc_titles import process_identity, rank_columns
from parsers.schema import NotThisFormat, ParseResult

FORMAT = "nvidia_smi_table"

#: Table lines are under 130 characters; longer lines are never fed to the regexes below.
_MAX_TABLE_LINE = 1024

# reference/system_formats.md §2.1 (the default table: header, GPU cells, memory, MIG devices, processes)
_HEADER_RE = re.compile(
    r"^\|\s*NVIDIA-SMI\s+(?P<smi>\S+)"
    r"(?:\s+(?P<drv_label>Driver|KMD)\s+Version:\s*(?P<drv>\S+))?"
    r"(?:\s+CUDA(?P<umd>\s+UMD)?\s+Version:\s*(?P<cuda>\S+))?\s*\|?\s*$"
)
_BORDER_RE = re.compile(r"^[+|][-=+|]*[+|]$")
_GPU_CELL0 = re.compile(r"^\s*(?P<idx>\d+)\s+(?P<name>.*?)\s*(?P<persist>\bOn|\bOff|WDDM|TCC|\bN/A)\s*$")
_GPU_CELL1 = re.compile(r"^\s*(?P<bus>" + BUS_ID_PATTERN + r")\s+(?P<disp>\S+)\s*$")
_L2_CELL0 = re.compile(r"^\s*(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>\S+)\s+(?P<pwr>\S+)\s*/\s*(?P<cap>\S+)\s*$")
_MEM_CELL = re.compile(r"^\s*(?P<used>[^\s/]+)\s*/\s*(?P<total>[^\s/]+)\s*$")
# reference/system_formats.md §2.1 (MIG devices box)
_MIG_CELL0 = re.compile(r"^\s*(?P<gpu>\d+)\s+(?P<gi>\d+|N/A)\s+(?P<ci>\d+|N/A)\s+(?P<dev>\d+|N/A)\s*$")
# reference/system_formats.md §2.1 (the Processes box: GPU, GI, CI, PID, Type, name, usage)
_PROC_RE = re.compile(
    r"^\|\s+(?P<gpu>\d+)\s+(?:(?P<gi>\d+|N/A)\s+(?P<ci>\d+|N/A)\s+)?(?P<pid>\d+)\s+"
    r"(?P<type>C\+G|M\+C|C|G|M)\s+(?P<name>.*?)\s*(?P<mem>\d+MiB|N/A)\s*\|$"
)
#: The same row pasted without the box (or with the right border cut off): the name needs a blank on
#: both sides and the memory its ``MiB``, so a row cut inside the name or the figure is not read.
#: A ticket's copy may drop the Type column (and write ``100998 MiB`` with a space): the other columns keep their
#: order, so the row still reads.
_BARE_PROC_RE = re.compile(
    r"^\|?\s*(?P<gpu>\d+)\s+(?:(?P<gi>\d+|N/A)\s+(?P<ci>\d+|N/A)\s+)?(?P<pid>\d+)\s+"
    r"(?:(?P<type>C\+G|M\+C|C|G|M)\s+)?(?P<name>\S.*?)\s+(?P<mem>\d+ ?MiB|N/A)\s*\|?\s*$"
)
#: Column headings and titles of a process list pasted without its box.
_BARE_HEADING_RE = re.compile(
    r"^\s*(?:GPU\s+(?:GI\s+CI\s+)?PID\s+(?:Type\s+)?Process name(?:\s+(?:GPU Memory|Usage))?"
    r"|(?:ID\s+ID\s+)?Usage|Processes:(?:\s+GPU Memory)?|=+)\s*$")
# reference/system_formats.md §2.1 (the process box and its placeholders), §2.5 (failure output)
_NOPROC_RE = re.compile(r"^\|\s+No running processes found\s+\|$")
_NOT_SUPPORTED_PROC_RE = re.compile(r"^\|\s+(?P<gpu>\d+)?\s*Not Supported\s+\|$")
_BOX_TITLE_RE = re.compile(r"^\|\s*(?P<title>Processes|MIG devices):")

#: The memory column is read from a number's first digit: a later one fails as the first did (issue 25)
# reference/system_formats.md §2.1
_STRONG = re.compile(
    r"^\|\s*NVIDIA-SMI\s+\d|^\|\s+\d+\s+.*\|\s+" + BUS_ID_PATTERN + r"\s|(?<!\d)\d+MiB\s*/\s*\d+MiB\s*\||"
    r"^\|\s+Processes:|^\|\s+No running processes found",
    re.MULTILINE,
)


def sniff(head: str) -> float:
    """0.97 for a header box, 0.85 for GPU/process rows, 0.6 for nvidia-smi failure lines alone.

    >>> sniff("| NVIDIA-SMI 440.33.01    Driver Version: 440.33.01    CUDA Version: 10.2     |")
    0.97
    >>> sniff("Mem:  449  318  130  0  0  130")
    0.0
    """
    lines = [ln for ln in head.splitlines()[:2000] if len(ln) <= _MAX_TABLE_LINE]
    if any(_HEADER_RE.match(ln.strip()) for ln in lines if "NVIDIA-SMI" in ln):
        return 0.97
    if any(_STRONG.search(ln) for ln in lines if ln.startswith("|")):
        return 0.85
    # a process list pasted without its box: rows (and headings) make up the text
    content = [ln for ln in lines[:200] if ln.strip() and prompt_command(ln) is None]
    bare = sum(1 for ln in content if _BARE_PROC_RE.match(ln.rstrip()))
    headings = sum(1 for ln in content if _BARE_HEADING_RE.match(ln) or _BORDER_RE.match(ln.strip()))
    if bare and len(content) - bare - headings <= max(1, len(content) // 5):  # one row may be cut short
        return 0.8
    # Failure output alone ("NVIDIA-SMI has failed …", "No devices were found"): only when such lines
    # are most of the text, so a kernel log quoting one handle error stays the kernel parser's.
    content = [ln for ln in head.splitlines()[:60] if ln.strip() and not ln.startswith("#")]
    failures = sum(1 for ln in content[:40] if match_failure(ln))
    if failures and failures * 2 >= min(len(content), 40):
        return 0.6
    return 0.0


def _cells(line: str) -> list[str] | None:
    s = line.rstrip()
    if len(s) < 2 or not (s.startswith("|") and s.endswith("|")):
        return None
    return s[1:-1].split("|")


def _val(raw: str, attr: str, placeholders: dict[str, str]) -> str | None:
    """The cell value, or None with the placeholder remembered under the attr it would fill."""
    p = placeholder(raw)
    if p is not None:
        placeholders[attr] = raw.strip()
        return None
    return raw.strip()


class _Table:
    """State of one rendered table (one ``nvidia-smi`` run)."""

    def __init__(self, header_line: int | None = None):
        self.header_line = header_line
        self.driver_version: str | None = None
        self.cuda_version: str | None = None
        self.ts_local: datetime | None = None
        self.gpus: list[dict[str, Any]] = []  # gpu_memory rows, attrs still a dict
        self.section = "gpus"
        self.pending: dict[str, Any] | None = None  # GPU row awaiting its 2nd/3rd line
        self.pending_stage = 0
        self.last_mig: dict[str, Any] | None = None


def _gpu_line1(line_no: int, line: str, cells: list[str], table: _Table) -> dict[str, Any] | None:
    if len(cells) != 3:
        return None
    m0, m1 = _GPU_CELL0.match(cells[0]), _GPU_CELL1.match(cells[1])
    if not (m0 and m1):
        return None
    ph: dict[str, str] = {}
    name = m0.group("name").strip()
    ecc = _val(cells[2], "ecc", ph)
    attrs: dict[str, Any] = {
        "name": name,
        "name_truncated": name.endswith("..."),
        "persistence": m0.group("persist"),
        "bus_id": m1.group("bus"),
        "pci_bus_id": normalize_bus_id(m1.group("bus")),
        "display_active": m1.group("disp"),
        "ecc": ecc,
        "placeholders": ph,
    }
    if m0.group("persist") in ("WDDM", "TCC"):
        attrs["driver_model"] = m0.group("persist")
    if ecc is not None and ecc.isdigit():
        attrs["ecc_uncorrected_volatile"] = int(ecc)
    if table.driver_version:
        attrs["driver_version"] = table.driver_version
    if table.cuda_version:
        attrs["cuda_version"] = table.cuda_version
    return {"line": line_no, "line_end": line_no, "kind": "gpu_memory", "gpu": int(m0.group("idx")),
            "ts_local": table.ts_local, "text": line, "attrs": attrs}


def _gpu_line2(row: dict[str, Any], line_no: int, line: str, cells: list[str]) -> bool:
    if len(cells) != 3 or "MiB" not in cells[1]:
        return False
    attrs, ph = row["attrs"], row["attrs"]["placeholders"]
    m = _L2_CELL0.match(cells[0])
    if m:
        fan = _val(m.group("fan"), "fan_pct", ph)
        temp = _val(m.group("temp"), "temperature_c", ph)
        perf = _val(m.group("perf"), "perf", ph)
        pwr = _val(m.group("pwr"), "power_w", ph)
        cap = _val(m.group("cap"), "power_cap_w", ph)
        attrs.update(fan_pct=number(fan), temperature_c=number(temp), perf=perf,
                     power_w=number(pwr), power_cap_w=number(cap))
    else:
        attrs["fan_temp_perf_power_raw"] = cells[0].strip()
    mm = _MEM_CELL.match(cells[1])
    if mm:
        used = _val(mm.group("used"), "used_bytes", ph)
        total = _val(mm.group("total"), "total_bytes", ph)
        row["used_bytes"] = mib_to_bytes(used)
        row["total_bytes"] = mib_to_bytes(total)
        if row["used_bytes"] is not None and row["total_bytes"] is not None:
            row["free_bytes"] = row["total_bytes"] - row["used_bytes"]
    parts = cells[2].split()
    if parts:
        util = _val(parts[0], "ratio", ph)
        util_pct = number(util)
        attrs["util_pct"] = util_pct
        row["ratio"] = util_pct / 100 if util_pct is not None else None
    if len(parts) > 1:
        attrs["compute_mode"] = " ".join(parts[1:])
    for col in ("used_bytes", "total_bytes", "free_bytes"):
        attrs[col] = row.get(col)
    row["line_end"] = line_no
    row["text"] += "\n" + line
    return True


def _gpu_line3(row: dict[str, Any], line_no: int, line: str, cells: list[str]) -> bool:
    if len(cells) != 3 or cells[0].strip() or cells[1].strip() or not cells[2].strip():
        return False
    mig = _val(cells[2], "mig", row["attrs"]["placeholders"])
    row["attrs"]["mig"] = mig
    row["line_end"] = line_no
    row["text"] += "\n" + line
    return True


def _mig_row(line_no: int, line: str, cells: list[str], table: _Table) -> dict[str, Any] | None:
    if len(cells) < 2:
        return None
    m0, mm = _MIG_CELL0.match(cells[0]), _MEM_CELL.match(cells[1])
    if not (m0 and mm):
        return None
    used, total = mib_to_bytes(mm.group("used")), mib_to_bytes(mm.group("total"))
    attrs: dict[str, Any] = {
        "gi_id": integer(m0.group("gi")), "ci_id": integer(m0.group("ci")),
        "mig_dev": integer(m0.group("dev")), "used_bytes": used, "total_bytes": total,
        # R525+ label the column "Shared Memory-Usage": CIs of one GI show the same GI memory.
        "memory_shared_by_gi": True,
    }
    if len(cells) > 2:
        sm = cells[2].split()
        if sm:
            attrs["sm_count"] = integer(sm[0])
        if len(sm) > 1:
            attrs["ecc_uncorrected_volatile"] = integer(sm[1])
    row = {"line": line_no, "line_end": line_no, "kind": "gpu_mig_device", "gpu": int(m0.group("gpu")),
           "used_bytes": used, "total_bytes": total,
           "free_bytes": total - used if used is not None and total is not None else None,
           "ts_local": table.ts_local, "text": line, "attrs": attrs}
    return row


def _mig_bar1(row: dict[str, Any], line_no: int, line: str, cells: list[str]) -> bool:
    if len(cells) < 2 or cells[0].strip():
        return False
    mm = _MEM_CELL.match(cells[1])
    if not mm:
        return False
    row["attrs"]["bar1_used_bytes"] = mib_to_bytes(mm.group("used"))
    row["attrs"]["bar1_total_bytes"] = mib_to_bytes(mm.group("total"))
    row["line_end"] = line_no
    row["text"] += "\n" + line
    return True


def _process_row(line_no: int, line: str, table: _Table, regex: re.Pattern[str] = _PROC_RE
                 ) -> dict[str, Any] | None:
    m = regex.match(line.rstrip())
    if not m:
        return None
    ph: dict[str, str] = {}
    mem = _val(m.group("mem"), "used_bytes", ph)
    name = m.group("name")
    attrs: dict[str, Any] = {
        "type": m.group("type"), "name": name, "name_truncated": name.startswith("..."),
        "used_bytes": mib_to_bytes(mem), "placeholders": ph,
    }
    if m.group("gi") is not None:
        attrs["gi_id"] = integer(m.group("gi"))
        attrs["ci_id"] = integer(m.group("ci"))
        if attrs["gi_id"] is None:
            ph["gi_id"] = m.group("gi")
        if attrs["ci_id"] is None:
            ph["ci_id"] = m.group("ci")
    if regex is _BARE_PROC_RE:
        attrs["boxless"] = True
    ident = process_identity(name.lstrip("."))
    attrs.update(ident)
    return {"line": line_no, "kind": "gpu_process", "gpu": int(m.group("gpu")), "pid": int(m.group("pid")),
            "comm": name, "used_bytes": attrs["used_bytes"], "ts_local": table.ts_local, "text": line,
            "attrs": attrs, **rank_columns(ident)}


def _version_rows(line_no: int, line: str, m: re.Match[str], table: _Table) -> list[dict[str, Any]]:
    rows = []
    smi = m.group("smi")
    if m.group("drv"):
        rows.append({"line": line_no, "kind": "version", "text": line, "ts_local": table.ts_local,
                     "attrs": {"component": "driver", "version": m.group("drv"), "nvidia_smi_version": smi,
                               "label": f"{m.group('drv_label')} Version"}})
    if m.group("cuda"):
        label = "CUDA UMD Version" if m.group("umd") else "CUDA Version"
        rows.append({"line": line_no, "kind": "version", "text": line, "ts_local": table.ts_local,
                     "attrs": {"component": "cuda", "version": m.group("cuda"), "label": label}})
    return rows


def _finish_table(table: _Table, errors: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    """Emit the table's GPU rows and notice GPUs it skipped (gaps, or fewer than error lines imply)."""
    seen = [g["gpu"] for g in table.gpus]
    for g in table.gpus:
        if not g["attrs"].get("placeholders"):
            g["attrs"].pop("placeholders", None)
    if not seen:
        return
    seen_bus = {g["attrs"].get("pci_bus_id") for g in table.gpus}
    unexplained = [e for e in errors if e.get("gpu") not in seen and
                   (e.get("pci_bus_id") is None or e["pci_bus_id"] not in seen_bus)]
    reported = {e["gpu"] for e in errors if e.get("gpu") is not None}
    expected = len(set(seen)) + len(unexplained) if unexplained else None
    line_no = table.header_line or table.gpus[0]["line"]
    rows.extend(missing_gpu_rows(seen, expected=expected, line_no=line_no,
                                 why="index gap or GPU named by an error line absent from the table",
                                 reported=reported))


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    """Parse one or more default tables (a ``watch``/loop capture holds several)."""
    lines = split_lines(text)
    invocations = smi_invocations(command)
    if not any(ln.strip() for ln in lines):
        if invocations and not any(c.query or c.q for c in invocations):
            return ParseResult.from_rows([], source=FORMAT, path=path, lines=len(lines),
                                         recognized=len(lines), notes=["nvidia-smi printed nothing"])
        raise NotThisFormat("empty text")

    rows: list[dict[str, Any]] = []
    table_rows: list[dict[str, Any]] = []  # gpu_memory rows are appended when a table ends
    unrec: list[tuple[int, str]] = []
    n_unrec = 0
    strong = 0
    table = _Table()
    errors: list[dict[str, Any]] = []  # handle errors not yet matched against a table

    def close_table() -> None:
        nonlocal table, errors
        _finish_table(table, errors, rows)
        table_rows.extend(table.gpus)
        if table.gpus:
            errors = []
        table = _Table()

    for i, line in enumerate(lines, start=1):
        if len(line) > _MAX_TABLE_LINE:
            n_unrec += 1
            unrec.append((i, line[:200]))
            continue
        stripped = line.strip()
        if not stripped:
            continue
        if table.section == "procs" and is_elision(line):
            # A cut inside the process box: GPUs it does not list may still have owners below the cut, so the
            # list says nothing about them (an unlisted GPU is "not shown", not "no process").
            rows.append({"line": i, "kind": "gpu_process_cut", "ts_local": table.ts_local, "text": line,
                         "attrs": {}})
            continue
        cells = _cells(line)

        # A table still waiting for its 2nd/3rd GPU line takes this line first.
        if table.pending is not None and cells is not None:
            if table.pending_stage == 1 and _gpu_line2(table.pending, i, line, cells):
                table.pending_stage = 2
                continue
            if table.pending_stage == 2 and _gpu_line3(table.pending, i, line, cells):
                table.pending, table.pending_stage = None, 0
                continue
            table.pending, table.pending_stage = None, 0

        if prompt_command(line) and cells is None:
            continue
        failure = match_failure(line) if cells is None else None
        if failure:
            strong += 1
            rows.append(failure_row(i, line, failure))
            if failure["gpu"] is not None or failure["pci_bus_id"] is not None:
                errors.append(failure)
            continue
        ts = parse_ctime(line) if cells is None else None
        if ts is not None:
            if table.gpus:
                close_table()
            table.ts_local = ts
            continue
        if _BORDER_RE.match(stripped):
            continue
        if cells is None:
            p = _process_row(i, line, table, _BARE_PROC_RE)  # pasted without the box
            if p:
                strong += 1
                if not p["attrs"]["placeholders"]:
                    del p["attrs"]["placeholders"]
                rows.append(p)
                continue
            if stripped == "No running processes found":
                strong += 1
                rows.append({"line": i, "kind": "gpu_process_none", "ts_local": table.ts_local, "text": line,
                             "attrs": {"message": "No running processes found", "boxless": True}})
                continue
            if _BARE_HEADING_RE.match(line):
                continue
            n_unrec += 1
            unrec.append((i, line[:500]))
            continue
        m = _HEADER_RE.match(stripped)
        if m:
            strong += 1
            if table.gpus:
                close_table()
            table.header_line = i
            table.driver_version = m.group("drv")
            table.cuda_version = m.group("cuda")
            rows.extend(_version_rows(i, line, m, table))
            continue
        t = _BOX_TITLE_RE.match(stripped)
        if t:
            table.section = "procs" if t.group("title") == "Processes" else "mig"
            continue

        if table.section == "gpus":
            g = _gpu_line1(i, line, cells, table)
            if g:
                strong += 1
                table.gpus.append(g)
                table.pending, table.pending_stage = g, 1
                continue
        elif table.section == "mig":
            if table.last_mig is not None and _mig_bar1(table.last_mig, i, line, cells):
                table.last_mig = None
                continue
            mig = _mig_row(i, line, cells, table)
            if mig:
                strong += 1
                rows.append(mig)
                table.last_mig = mig
                continue
        if table.section != "mig":  # process rows are also read in pastes that lost the box title
            p = _process_row(i, line, table)
            if p:
                strong += 1
                if not p["attrs"]["placeholders"]:
                    del p["attrs"]["placeholders"]
                rows.append(p)
                continue
            if _NOPROC_RE.match(stripped):
                strong += 1
                rows.append({"line": i, "kind": "gpu_process_none", "ts_local": table.ts_local, "text": line,
                             "attrs": {"message": "No running processes found"}})
                continue
            if _NOT_SUPPORTED_PROC_RE.match(stripped):
                continue  # old GeForce drivers: the process list is not available at all
        if not re.search(r"\d", stripped.replace("BAR1", "")):
            continue  # column headings and empty box lines
        n_unrec += 1
        unrec.append((i, line[:500]))

    close_table()
    if strong == 0:
        raise NotThisFormat("no nvidia-smi table, process list or failure line")
    rows.extend(table_rows)
    rows.sort(key=lambda r: (r["line"], _KIND_ORDER.get(r["kind"], 9)))
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=len(lines),
                                 recognized=len(lines) - n_unrec, unrecognized=n_unrec,
                                 unrecognized_examples=unrec)


_KIND_ORDER = {"gpu_error": 0, "version": 1, "gpu_memory": 2, "gpu_mig_device": 3, "gpu_process": 4,
               "gpu_process_none": 5, "gpu_process_cut": 6}

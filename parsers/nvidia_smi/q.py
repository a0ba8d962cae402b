"""``nvidia-smi -q`` text: the per-GPU ``Key : Value`` report, nested by 4-space indentation.

Sources: reference/system_formats.md §2.3 (the ``-q`` text report) and nvidia-smi(1).

Real format (driver 590; R610+ adds ``KMD Version``/``CUDA UMD Version`` and marks ``Driver
Version`` deprecated; the colon column is not fixed — the Processes block uses a narrower one)::

    ==============NVSMI LOG==============
    Timestamp                                              : Fri Jul  3 22:11:09 2026
    Driver Version                                         : 590.48.01
    Attached GPUs                                          : 1
    GPU 00000000:83:00.0
        Product Name                                       : NVIDIA H200
        FB Memory Usage
            Total                                          : 143771 MiB
            Reserved                                       : 614 MiB
            Used                                           : 32362 MiB
            Free                                           : 110796 MiB
        Processes
            GPU instance ID                   : N/A
            Compute instance ID               : N/A
            Process ID                        : 10291
                Type                          : C
                Name                          : /root/tools/memhog
                Used GPU Memory               : 2566 MiB

Events: ``gpu_memory`` per GPU block, ``gpu_mig_device`` per ``MIG Device`` block, ``gpu_process``
per process record, ``gpu_process_none`` for ``Processes : None`` (``gpu`` = that GPU),
``version`` rows, ``gpu_error`` for failure lines and GPUs missing against ``Attached GPUs``.

**GPU index.** ``-q`` prints no index; GPU blocks come in NVML index order, so the index is the
block's position — unless ``-i N`` in the command picked one GPU (index N), or fewer blocks than
``Attached GPUs`` were printed, where ``Minor Number`` is used (``attrs.index_source`` says which).

>>> text = '''==============NVSMI LOG==============
... Attached GPUs                         : 1
... GPU 00000000:83:00.0
...     FB Memory Usage
...         Total                         : 143771 MiB
...         Used                          : 32362 MiB
...         Free                          : 110796 MiB
...     Processes                         : None'''
>>> r = parse(text)
>>> r.events.select("kind", "gpu", "used_bytes").rows()
[('gpu_memory', 0, 33934016512), ('gpu_process_none', 0, None)]
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

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

FORMAT = "nvidia_smi_q"

_MAX_Q_LINE = 4096
_BANNER_RE = re.compile(r"^=+\s*NVSMI LOG\s*=+$")
_GPU_RE = re.compile(r"^GPU (?P<bus>" + BUS_ID_PATTERN + r")\s*$")
#: The indent and the value are taken whole (issue 25): a key cannot open with a blank, and the value
#: is everything up to its last non-blank (the lazy ``.*?\s*$`` rescanned the blanks from each one).
_KV_RE = re.compile(r"^(?P<indent> *+)(?P<key>[^:]*?\S)\s+: ?(?P<value>(?>(?:[^\S\n]*\S)*))\s*$")
_SECTION_RE = re.compile(r"^(?P<indent> *)(?P<key>\S.*?)\s*$")


def sniff(head: str) -> float:
    """0.98 with the ``NVSMI LOG`` banner, 0.8 for a ``GPU 00000000:83:00.0`` block with key : value lines.

    >>> sniff("==============NVSMI LOG==============\\n")
    0.98
    >>> sniff("index, memory.used [MiB]")
    0.0
    """
    if re.search(r"^=+NVSMI LOG=+\s*$", head, re.MULTILINE):
        return 0.98
    if re.search(r"^GPU " + BUS_ID_PATTERN + r"\s*\n\s{4}(Product Name|FB Memory Usage|[A-Z][\w ]+)\s+: ",
                 head, re.MULTILINE):
        return 0.8
    return 0.0


class _Gpu:
    def __init__(self, line: int, bus: str, header: str):
        self.line = line
        self.line_end = line
        self.bus = bus
        self.header = header
        self.values: dict[str, str] = {}  # "FB Memory Usage/Used" → "32362 MiB" (first wins)
        self.value_lines: dict[str, int] = {}
        self.migs: list[dict[str, Any]] = []
        self.procs: list[dict[str, Any]] = []
        self.procs_none_line: int | None = None


def _clean(value: str) -> str:
    # R610: "610.57.04 [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]"
    return re.sub(r"\s*\[Deprecated[^\]]*\]\s*$", "", value)


def _first(values: dict[str, str], *keys: str) -> tuple[str | None, str | None]:
    """(value, key) of the first key present; the value is None if it is a placeholder."""
    for k in keys:
        if k in values:
            v = values[k]
            return (None if placeholder(v) is not None else v), k
    return None, None


def _gpu_row(g: _Gpu, index: int, index_source: str, top: dict[str, str], ts: datetime | None) -> dict[str, Any]:
    v = g.values
    ph: dict[str, str] = {}

    def pick(attr: str, *keys: str) -> str | None:
        val, key = _first(v, *keys)
        if val is None and key is not None:
            ph[attr] = v[key]
        return val

    used = mib_to_bytes(pick("used_bytes", "FB Memory Usage/Used"))
    total = mib_to_bytes(pick("total_bytes", "FB Memory Usage/Total"))
    free = mib_to_bytes(pick("free_bytes", "FB Memory Usage/Free"))
    reserved = mib_to_bytes(pick("reserved_bytes", "FB Memory Usage/Reserved"))
    if free is None and used is not None and total is not None:
        free = total - used
    util = number(pick("util_pct", "Utilization/GPU", "Utilization/Gpu"))
    attrs: dict[str, Any] = {
        "name": pick("name", "Product Name"),
        "uuid": pick("uuid", "GPU UUID"),
        "bus_id": v.get("PCI/Bus Id", g.bus),
        "pci_bus_id": normalize_bus_id(v.get("PCI/Bus Id", g.bus)),
        "minor_number": integer(v.get("Minor Number")),
        "temperature_c": number(pick("temperature_c", "Temperature/GPU Current Temp")),
        "power_w": number(pick("power_w", "GPU Power Readings/Average Power Draw",
                               "GPU Power Readings/Instantaneous Power Draw", "GPU Power Readings/Power Draw",
                               "Power Readings/Average Power Draw", "Power Readings/Power Draw")),
        "power_cap_w": number(pick("power_cap_w", "GPU Power Readings/Current Power Limit",
                                   "GPU Power Readings/GPU Ceiling Power Limit/Current Power Limit",
                                   "Power Readings/Enforced Power Limit", "Power Readings/Power Limit",
                                   "Power Readings/Current Power Limit")),
        "persistence": pick("persistence", "Persistence Mode"),
        "perf": pick("perf", "Performance State"),
        "mig": pick("mig", "MIG Mode/Current"),
        "ecc": pick("ecc", "ECC Mode/Current"),
        "fan_pct": number(pick("fan_pct", "Fan Speed")),
        "util_pct": util,
        "compute_mode": pick("compute_mode", "Compute Mode"),
        "reserved_bytes": reserved,
        "used_bytes": used, "total_bytes": total, "free_bytes": free,
        "index_source": index_source,
        "driver_version": top.get("driver"),
        "cuda_version": top.get("cuda"),
        "ecc_errors": {k.split("/", 1)[1]: x for k, x in v.items() if k.startswith("ECC Errors/")},
        "remapped_rows": {k.split("/", 1)[1]: x for k, x in v.items() if k.startswith("Remapped Rows/")},
        "retired_pages": {k.split("/", 1)[1]: x for k, x in v.items() if k.startswith("Retired Pages/")},
    }
    attrs["fb_memory_used_line"] = g.value_lines.get("FB Memory Usage/Used")
    attrs = {k: x for k, x in attrs.items() if x is not None and x != {}}
    if ph:
        attrs["placeholders"] = ph
    return {"line": g.line, "line_end": g.line_end, "kind": "gpu_memory", "gpu": index, "used_bytes": used,
            "total_bytes": total, "free_bytes": free, "ratio": util / 100 if util is not None else None,
            "ts_local": ts, "text": g.header, "attrs": attrs}


def _mig_row(mig: dict[str, Any], gpu: int, ts: datetime | None) -> dict[str, Any]:
    v = mig["values"]
    mem = next((p for p in ("Shared FB Memory Usage", "FB Memory Usage") if f"{p}/Total" in v), "FB Memory Usage")
    used = mib_to_bytes(v.get(f"{mem}/Used"))
    total = mib_to_bytes(v.get(f"{mem}/Total"))
    free = mib_to_bytes(v.get(f"{mem}/Free"))
    attrs = {"mig_dev": integer(v.get("Index")), "gi_id": integer(v.get("GPU Instance ID")),
             "ci_id": integer(v.get("Compute Instance ID")), "used_bytes": used, "total_bytes": total,
             "free_bytes": free, "reserved_bytes": mib_to_bytes(v.get(f"{mem}/Reserved")),
             "memory_shared_by_gi": mem.startswith("Shared"),
             "bar1_used_bytes": mib_to_bytes(v.get("BAR1 Memory Usage/Used")),
             "bar1_total_bytes": mib_to_bytes(v.get("BAR1 Memory Usage/Total"))}
    return {"line": mig["line"], "line_end": mig["line_end"], "kind": "gpu_mig_device", "gpu": gpu,
            "used_bytes": used, "total_bytes": total, "free_bytes": free, "ts_local": ts, "text": "MIG Device",
            "attrs": {k: x for k, x in attrs.items() if x is not None}}


def _proc_row(p: dict[str, Any], gpu: int, ts: datetime | None) -> dict[str, Any]:
    v = p["values"]
    ph = {k: x for k, x in v.items() if placeholder(x) is not None}
    used = mib_to_bytes(v.get("Used GPU Memory")) if "Used GPU Memory" not in ph else None
    attrs: dict[str, Any] = {"type": v.get("Type"), "name": v.get("Name"), "used_bytes": used,
                             "gi_id": integer(v.get("GPU instance ID")),
                             "ci_id": integer(v.get("Compute instance ID"))}
    attrs = {k: x for k, x in attrs.items() if x is not None}
    if ph:
        attrs["placeholders"] = ph
    ident = process_identity(v.get("Name"))
    attrs.update(ident)
    return {"line": p["line"], "line_end": p["line_end"], "kind": "gpu_process", "gpu": gpu,
            "pid": integer(v.get("Process ID")), "comm": v.get("Name"), "used_bytes": used, "ts_local": ts,
            "text": "\n".join(p["text"]), "attrs": attrs, **rank_columns(ident)}


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    """Parse one ``nvidia-smi -q`` report (several, when concatenated)."""
    lines = split_lines(text)
    cmds = smi_invocations(command)
    if not any(ln.strip() for ln in lines):
        if any(c.q and not c.xml for c in cmds):
            return ParseResult.from_rows([], source=FORMAT, path=path, lines=len(lines),
                                         recognized=len(lines), notes=["nvidia-smi -q printed nothing"])
        raise NotThisFormat("empty text")

    rows: list[dict[str, Any]] = []
    unrec: list[tuple[int, str]] = []
    n_unrec = 0
    top: dict[str, str] = {}
    top_lines: dict[str, int] = {}
    gpus: list[_Gpu] = []
    gpu: _Gpu | None = None
    stack: list[tuple[int, str]] = []  # (indent, name) of the open sections inside a GPU block
    mig: dict[str, Any] | None = None
    proc: dict[str, Any] | None = None
    strong = 0
    errors: list[dict[str, Any]] = []

    for i, line in enumerate(lines, start=1):
        if len(line) > _MAX_Q_LINE:
            n_unrec += 1
            unrec.append((i, line[:200]))
            continue
        if not line.strip():
            continue
        if _BANNER_RE.match(line.strip()):
            strong += 1
            gpu = None
            continue
        if prompt_command(line):
            continue
        failure = match_failure(line)
        if failure:
            strong += 1
            rows.append(failure_row(i, line, failure))
            errors.append(failure)
            continue
        m = _GPU_RE.match(line)
        if m:
            strong += 1
            gpu = _Gpu(i, m.group("bus"), line)
            gpus.append(gpu)
            stack, mig, proc = [], None, None
            continue
        kv = _KV_RE.match(line)
        indent = len(line) - len(line.lstrip(" "))
        if gpu is None:
            if kv and indent == 0:
                key, value = kv.group("key"), _clean(kv.group("value"))
                top.setdefault(key, value)
                top_lines.setdefault(key, i)
                continue
            n_unrec += 1
            unrec.append((i, line[:500]))
            continue
        if indent == 0:  # a GPU block's lines are indented; something else follows it
            gpu = None
            n_unrec += 1
            unrec.append((i, line[:500]))
            continue
        gpu.line_end = i
        while stack and stack[-1][0] >= indent:
            stack.pop()
        names = [s for _, s in stack]
        if kv:
            key, value = kv.group("key").strip(), kv.group("value")
        else:
            key, value = line.strip(), None
        path_names = names + [key]
        if "MIG Device" in path_names[:-1] or key == "MIG Device":
            if key == "MIG Device" and value is None:
                mig = {"line": i, "line_end": i, "values": {}}
                gpu.migs.append(mig)
            elif mig is not None:
                rel = path_names[path_names.index("MIG Device") + 1:]
                mig["values"].setdefault("/".join(rel), value or "")
                mig["line_end"] = i
        elif path_names[0] == "Processes":
            if len(path_names) == 1:
                if value is not None and value.strip().lower() == "none":
                    gpu.procs_none_line = i
            else:
                rec_key = key
                if proc is None or rec_key in proc["values"] or (
                        rec_key == "Process ID" and "Process ID" in proc["values"]):
                    proc = {"line": i, "line_end": i, "values": {}, "text": []}
                    gpu.procs.append(proc)
                proc["values"][rec_key] = value or ""
                proc["line_end"] = i
                proc["text"].append(line)
        elif value is not None:
            full = "/".join(path_names)
            gpu.values.setdefault(full, value)
            gpu.value_lines.setdefault(full, i)
        stack.append((indent, key))

    if strong == 0 and not gpus:
        raise NotThisFormat("no NVSMI LOG banner, GPU block or failure line")

    ts = parse_ctime(top.get("Timestamp", ""))
    driver = top.get("KMD Version") or top.get("Driver Version")
    cuda = top.get("CUDA UMD Version") or top.get("CUDA Version")
    top_info = {"driver": driver, "cuda": cuda}
    for comp, label in (("driver", "KMD Version" if "KMD Version" in top else "Driver Version"),
                        ("cuda", "CUDA UMD Version" if "CUDA UMD Version" in top else "CUDA Version")):
        if top_info[comp] and placeholder(top_info[comp]) is None:
            rows.append({"line": top_lines[label], "kind": "version", "ts_local": ts, "text": f"{label} : {top[label]}",
                         "attrs": {"component": comp, "version": top_info[comp], "label": label}})

    attached = integer(top.get("Attached GPUs"))
    single = next((c.single_index for c in cmds if c.q and c.single_index is not None), None)
    minors = [integer(g.values.get("Minor Number")) for g in gpus]
    use_minor = (attached is not None and len(gpus) < attached and single is None
                 and all(x is not None for x in minors) and len(set(minors)) == len(minors))
    seen: list[int] = []
    for pos, g in enumerate(gpus):
        if single is not None and len(gpus) == 1:
            idx, src = single, "command -i"
        elif use_minor:
            idx, src = minors[pos], "minor_number"
        else:
            idx, src = pos, "block_order"
        seen.append(idx)
        rows.append(_gpu_row(g, idx, src, top_info, ts))
        rows.extend(_mig_row(m, idx, ts) for m in g.migs)
        rows.extend(_proc_row(p, idx, ts) for p in g.procs)
        if g.procs_none_line is not None:
            rows.append({"line": g.procs_none_line, "kind": "gpu_process_none", "gpu": idx, "ts_local": ts,
                         "text": lines[g.procs_none_line - 1], "attrs": {"message": "Processes : None"}})
    if gpus and single is None and (attached is not None or len(seen) > 1):
        expected = attached if attached is not None and attached > len(gpus) else None
        if use_minor or expected is None:
            rows.extend(missing_gpu_rows(seen, expected=expected, line_no=top_lines.get("Attached GPUs", gpus[0].line),
                                         why="fewer GPU blocks than Attached GPUs",
                                         reported={e["gpu"] for e in errors if e.get("gpu") is not None}))
        else:
            rows.append({"line": top_lines.get("Attached GPUs", gpus[0].line), "kind": "gpu_error",
                         "text": f"Attached GPUs : {attached}, {len(gpus)} GPU blocks printed",
                         "attrs": {"error": "missing_from_table", "expected_count": attached,
                                   "seen_count": len(gpus), "why": "fewer GPU blocks than Attached GPUs; "
                                   "which index is missing is unknown"}})
    rows.sort(key=lambda r: (r["line"], 0 if r["kind"] == "gpu_memory" else 1))
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=len(lines),
                                 recognized=len(lines) - n_unrec, unrecognized=n_unrec,
                                 unrecognized_examples=unrec)

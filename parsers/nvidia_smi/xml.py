"""``nvidia-smi -q -x``: the XML report (DTD v11 before R535, v12 and later after).

Sources: reference/system_formats.md §2.4 (the ``-q -x`` XML report, its DTD).

Real format (A100, driver 535, DTD v12; values are strings with units, ``N/A`` for placeholders,
an empty process list is ``<processes />`` or ``<processes>\\n</processes>``)::

    <?xml version="1.0" ?>
    <!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
    <nvidia_smi_log>
        <driver_version>535.54.03</driver_version>
        <attached_gpus>4</attached_gpus>
        <gpu id="00000000:01:00.0">
            <product_name>NVIDIA A100-SXM4-80GB</product_name>
            <minor_number>1</minor_number>
            <fb_memory_usage><total>81920 MiB</total><used>19 MiB</used><free>81300 MiB</free></fb_memory_usage>
            <processes>
                <process_info><pid>28543</pid><type>C</type><process_name>python</process_name>
                    <used_memory>4 MiB</used_memory></process_info>
            </processes>
        </gpu>
    </nvidia_smi_log>

Safety: the DOCTYPE (and any internal subset with ENTITY declarations) is removed before parsing,
so no DTD is fetched and no entity is expanded; an undefined entity then fails the parse. A
document cut short (a collector timeout) still yields every ``<gpu>`` that closed before the cut.

**GPU index.** The XML has no index element. GPUs are printed in NVML index order, so the index is
the ``<gpu>`` element's position — unless ``-i N`` in the command picked one GPU, or fewer ``<gpu>``
elements than ``<attached_gpus>`` are present (a GPU failed, or the document was trimmed); then
``<minor_number>`` (the ``/dev/nvidiaN`` number, usually equal to the index) is used.
``attrs.index_source`` says which.

Events as for ``nvidia_smi_q``: ``gpu_memory``, ``gpu_mig_device``, ``gpu_process``,
``gpu_process_none``, ``version``, ``gpu_error``.

>>> doc = '''<?xml version="1.0" ?>
... <!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
... <nvidia_smi_log><driver_version>535.54.03</driver_version><attached_gpus>1</attached_gpus>
... <gpu id="00000000:01:00.0"><fb_memory_usage><total>81920 MiB</total><used>19 MiB</used>
... <free>81300 MiB</free></fb_memory_usage><processes /></gpu></nvidia_smi_log>'''
>>> parse(doc).events.select("kind", "gpu", "used_bytes").rows()
[('version', None, None), ('gpu_memory', 0, 19922944), ('gpu_process_none', 0, None)]
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import datetime
from typing import Any

from parsers.nvidia_smi.common import (
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

FORMAT = "nvidia_smi_xml"

_GPU_TAG = re.compile(r"<gpu[\s>/]")


def sniff(head: str) -> float:
    """0.98 for an ``<nvidia_smi_log>`` document, 0.7 for ``<?xml`` with ``<gpu id=``.

    >>> sniff('<?xml version="1.0" ?>\\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v11.dtd">')
    0.98
    >>> sniff("==============NVSMI LOG==============")
    0.0
    """
    if "<nvidia_smi_log" in head or re.search(r"<!DOCTYPE\s+nvidia_smi_log", head):
        return 0.98
    if "<?xml" in head and re.search(r"<gpu id=", head):
        return 0.7
    return 0.0


def _strip_doctype(body: str) -> tuple[str, bool]:
    """Blank out the DOCTYPE (keeping its newlines so line numbers hold); True if it had a subset."""
    start = body.find("<!DOCTYPE")
    if start < 0:
        return body, False
    gt, br = body.find(">", start), body.find("[", start)
    internal = br != -1 and (gt == -1 or br < gt)
    if internal:
        close = body.find("]", br)
        end = body.find(">", close) if close != -1 else -1
    else:
        end = gt
    if end == -1:
        end = len(body) - 1
    removed = body[start:end + 1]
    return body[:start] + "\n" * removed.count("\n") + body[end + 1:], internal


def _text(el: ET.Element | None, path: str) -> str | None:
    if el is None:
        return None
    found = el.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip()


def _pick(el: ET.Element, ph: dict[str, str], attr: str, *paths: str) -> str | None:
    """The first present value among paths; a placeholder is remembered under ``attr`` and gives None."""
    for p in paths:
        v = _text(el, p)
        if v is None:
            continue
        if placeholder(v) is not None:
            ph[attr] = v
            return None
        return v
    return None


def _gpu_row(g: ET.Element, idx: int, src: str, line: int, line_end: int, top: dict[str, str | None],
             ts: datetime | None) -> dict[str, Any]:
    ph: dict[str, str] = {}
    used = mib_to_bytes(_pick(g, ph, "used_bytes", "fb_memory_usage/used"))
    total = mib_to_bytes(_pick(g, ph, "total_bytes", "fb_memory_usage/total"))
    free = mib_to_bytes(_pick(g, ph, "free_bytes", "fb_memory_usage/free"))
    if free is None and used is not None and total is not None:
        free = total - used
    util = number(_pick(g, ph, "util_pct", "utilization/gpu_util"))
    bus = _text(g, "pci/pci_bus_id") or g.get("id")
    attrs: dict[str, Any] = {
        "name": _pick(g, ph, "name", "product_name"),
        "uuid": _pick(g, ph, "uuid", "uuid"),
        "bus_id": bus, "pci_bus_id": normalize_bus_id(bus),
        "minor_number": integer(_text(g, "minor_number")),
        "temperature_c": number(_pick(g, ph, "temperature_c", "temperature/gpu_temp")),
        "power_w": number(_pick(g, ph, "power_w", "gpu_power_readings/power_draw",
                                "gpu_power_readings/average_power_draw", "gpu_power_readings/instant_power_draw",
                                "power_readings/power_draw", "power_readings/average_power_draw")),
        "power_cap_w": number(_pick(g, ph, "power_cap_w", "gpu_power_readings/current_power_limit",
                                    "gpu_power_readings/power_limit", "power_readings/enforced_power_limit",
                                    "power_readings/power_limit", "power_readings/current_power_limit")),
        "persistence": _pick(g, ph, "persistence", "persistence_mode"),
        "perf": _pick(g, ph, "perf", "performance_state"),
        "mig": _pick(g, ph, "mig", "mig_mode/current_mig"),
        "ecc": _pick(g, ph, "ecc", "ecc_mode/current_ecc"),
        "fan_pct": number(_pick(g, ph, "fan_pct", "fan_speed")),
        "util_pct": util,
        "compute_mode": _pick(g, ph, "compute_mode", "compute_mode"),
        "reserved_bytes": mib_to_bytes(_pick(g, ph, "reserved_bytes", "fb_memory_usage/reserved")),
        "ecc_uncorrected_volatile": integer(_text(g, "ecc_errors/volatile/dram_uncorrectable")
                                            or _text(g, "ecc_errors/volatile/double_bit/total")),
        "used_bytes": used, "total_bytes": total, "free_bytes": free,
        "index_source": src, "driver_version": top.get("driver"), "cuda_version": top.get("cuda"),
    }
    rr = g.find("remapped_rows")
    if rr is not None:
        attrs["remapped_rows"] = {c.tag: (c.text or "").strip() for c in rr if len(c) == 0} or (rr.text or "").strip()
    attrs = {k: v for k, v in attrs.items() if v is not None and v != {} and v != ""}
    if ph:
        attrs["placeholders"] = ph
    return {"line": line, "line_end": line_end, "kind": "gpu_memory", "gpu": idx, "used_bytes": used,
            "total_bytes": total, "free_bytes": free, "ratio": util / 100 if util is not None else None,
            "ts_local": ts, "text": f'<gpu id="{g.get("id", "")}">', "attrs": attrs}


def _mig_rows(g: ET.Element, idx: int, lines: list[int], ts: datetime | None) -> list[dict[str, Any]]:
    rows = []
    for n, m in enumerate(g.findall("mig_devices/mig_device")):
        used = mib_to_bytes(_text(m, "fb_memory_usage/used"))
        total = mib_to_bytes(_text(m, "fb_memory_usage/total"))
        free = mib_to_bytes(_text(m, "fb_memory_usage/free"))
        attrs = {"mig_dev": integer(_text(m, "index")), "gi_id": integer(_text(m, "gpu_instance_id")),
                 "ci_id": integer(_text(m, "compute_instance_id")), "used_bytes": used, "total_bytes": total,
                 "free_bytes": free, "reserved_bytes": mib_to_bytes(_text(m, "fb_memory_usage/reserved")),
                 "bar1_used_bytes": mib_to_bytes(_text(m, "bar1_memory_usage/used")),
                 "bar1_total_bytes": mib_to_bytes(_text(m, "bar1_memory_usage/total"))}
        line = lines[n] if n < len(lines) else lines[-1] if lines else 1
        rows.append({"line": line, "kind": "gpu_mig_device", "gpu": idx, "used_bytes": used,
                     "total_bytes": total, "free_bytes": free, "ts_local": ts, "text": "<mig_device>",
                     "attrs": {k: v for k, v in attrs.items() if v is not None}})
    return rows


def _proc_rows(g: ET.Element, idx: int, lines: list[int], gpu_line: int, ts: datetime | None) -> list[dict[str, Any]]:
    procs = g.find("processes")
    if procs is None:
        return []
    infos = procs.findall("process_info")
    if not infos:
        if (procs.text or "").strip():
            return []  # "N/A": the list is unknown, not empty
        line = lines[0] if lines else gpu_line
        return [{"line": line, "kind": "gpu_process_none", "gpu": idx, "ts_local": ts, "text": "<processes />",
                 "attrs": {"message": "empty <processes>"}}]
    rows = []
    for n, p in enumerate(infos):
        ph: dict[str, str] = {}
        mem = _pick(p, ph, "used_bytes", "used_memory")
        used = mib_to_bytes(mem)
        name = _text(p, "process_name")
        attrs: dict[str, Any] = {"type": _text(p, "type"), "name": name, "used_bytes": used,
                                 "gi_id": integer(_text(p, "gpu_instance_id")),
                                 "ci_id": integer(_text(p, "compute_instance_id"))}
        attrs = {k: v for k, v in attrs.items() if v is not None}
        if ph:
            attrs["placeholders"] = ph
        ident = process_identity(name)
        attrs.update(ident)
        line = lines[n + 1] if n + 1 < len(lines) else gpu_line
        rows.append({"line": line, "kind": "gpu_process", "gpu": idx, "pid": integer(_text(p, "pid")),
                     "comm": name, "used_bytes": used, "ts_local": ts, "text": "<process_info>", "attrs": attrs,
                     **rank_columns(ident)})
    return rows


def _tag_lines(body_lines: list[str], offset: int) -> dict[str, list[int]]:
    """1-based line numbers of each ``<gpu>``, ``</gpu>``, ``<processes``/``<process_info>``, ``<mig_device>``."""
    out: dict[str, list[int]] = {"gpu": [], "/gpu": [], "proc": [], "mig": []}
    for n, ln in enumerate(body_lines, start=offset + 1):
        if "<" not in ln:
            continue
        if _GPU_TAG.search(ln):
            out["gpu"].append(n)
        if "</gpu>" in ln:
            out["/gpu"].append(n)
        if "<processes" in ln or "<process_info>" in ln:
            out["proc"].append(n)
        if "<mig_device>" in ln:
            out["mig"].append(n)
    return out


def _within(lines: list[int], lo: int, hi: int) -> list[int]:
    return [n for n in lines if lo <= n <= hi]


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    """Parse one ``nvidia-smi -q -x`` document (failure lines before it are read too)."""
    lines = split_lines(text)
    cmds = smi_invocations(command)
    rows: list[dict[str, Any]] = []
    unrec: list[tuple[int, str]] = []
    notes: list[str] = []
    errors: list[dict[str, Any]] = []

    # Lines before the document: a prompt, failure lines (stderr merged), anything else is unknown.
    start = next((n for n, ln in enumerate(lines) if ln.lstrip().startswith("<")), len(lines))
    for n in range(start):
        ln = lines[n]
        if not ln.strip() or prompt_command(ln):
            continue
        f = match_failure(ln)
        if f:
            rows.append(failure_row(n + 1, ln, f))
            errors.append(f)
        else:
            unrec.append((n + 1, ln[:500]))
    n_unrec = len(unrec)

    if start == len(lines):
        if rows:
            return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=len(lines),
                                         recognized=len(lines) - n_unrec, unrecognized=n_unrec,
                                         unrecognized_examples=unrec)
        if not any(ln.strip() for ln in lines) and any(c.xml for c in cmds):
            return ParseResult.from_rows([], source=FORMAT, path=path, lines=len(lines), recognized=len(lines),
                                         notes=["nvidia-smi -q -x printed nothing"])
        raise NotThisFormat("no XML document")

    body_lines = lines[start:]
    body = "\n".join(body_lines).lstrip()
    lead = len(body_lines) - len(body.split("\n"))  # blank lines swallowed by lstrip
    if "<nvidia_smi_log" not in body[:65536] and "<gpu" not in body[:65536]:
        raise NotThisFormat("XML, but not an nvidia_smi_log document")
    body, had_subset = _strip_doctype(body)
    if had_subset:
        notes.append("DOCTYPE internal subset (entity declarations) removed unparsed")

    parser = ET.XMLPullParser(events=("start", "end"))
    error: ET.ParseError | None = None
    events: list[tuple[str, ET.Element]] = []
    try:
        parser.feed(body)
        events.extend(parser.read_events())
        parser.close()
        events.extend(parser.read_events())
    except ET.ParseError as e:
        error = e
        events.extend(parser.read_events())
    except (ValueError, RecursionError) as e:  # odd input (lone surrogates) — treat as malformed
        error = ET.ParseError(str(e))
        error.position = (1, 0)

    root: ET.Element | None = None
    depth = 0
    gpus: list[ET.Element] = []
    top: dict[str, str | None] = {}
    closed: set[int] = set()
    for ev, el in events:
        if ev == "start":
            if depth == 0:
                root = el
            elif depth == 1 and el.tag == "gpu":
                gpus.append(el)  # children that closed before a cut are kept
            depth += 1
            continue
        depth -= 1
        if depth == 1 and root is not None:
            if el.tag == "gpu":
                closed.add(id(el))
            elif el.tag in ("driver_version", "kmd_version", "cuda_version", "cuda_umd_version",
                            "attached_gpus", "timestamp"):
                top[el.tag] = re.sub(r"\s*\[Deprecated[^\]]*\]\s*$", "", (el.text or "").strip())
    if root is None or root.tag != "nvidia_smi_log":
        if error is not None and root is None and not rows:
            raise NotThisFormat(f"not parseable XML: {error}")
        if root is not None and root.tag != "nvidia_smi_log":
            raise NotThisFormat(f"XML root is <{root.tag}>, not <nvidia_smi_log>")

    body_first = start + lead + 1  # 1-based line of the document's first line
    if error is not None:
        err_line = body_first + max(getattr(error, "position", (1, 0))[0], 1) - 1
        notes.append(f"XML ends early or is malformed at line {err_line}: {error}; "
                     f"{len(closed)} complete and {len(gpus) - len(closed)} cut <gpu> element(s) read")
        bad = [(n, lines[n - 1]) for n in range(err_line, len(lines) + 1) if lines[n - 1].strip()]
        n_unrec += len(bad)
        unrec.extend((n, ln[:500]) for n, ln in bad)

    ts = parse_ctime(top.get("timestamp") or "")
    driver = top.get("kmd_version") or top.get("driver_version")
    cuda = top.get("cuda_umd_version") or top.get("cuda_version")
    top_info = {"driver": driver, "cuda": cuda}
    for comp, val, tag in (("driver", driver, "kmd_version" if top.get("kmd_version") else "driver_version"),
                           ("cuda", cuda, "cuda_umd_version" if top.get("cuda_umd_version") else "cuda_version")):
        if val and placeholder(val) is None:
            line = next((n for n, ln in enumerate(lines, start=1) if f"<{tag}>" in ln), body_first)
            rows.append({"line": line, "kind": "version", "ts_local": ts, "text": f"<{tag}>{val}</{tag}>",
                         "attrs": {"component": comp, "version": val, "label": tag}})

    tags = _tag_lines(body_lines, start)
    attached = integer(top.get("attached_gpus"))
    single = next((c.single_index for c in cmds if c.single_index is not None), None)
    minors = [integer(_text(g, "minor_number")) for g in gpus]
    use_minor = (attached is not None and len(gpus) < attached and single is None
                 and all(x is not None for x in minors) and len(set(minors)) == len(minors))
    seen = []
    for pos, g in enumerate(gpus):
        if single is not None and len(gpus) == 1:
            idx, src = single, "command -i"
        elif use_minor:
            idx, src = minors[pos], "minor_number"
        else:
            idx, src = pos, "element_order"
        seen.append(idx)
        gl = tags["gpu"][pos] if pos < len(tags["gpu"]) else body_first
        ge = tags["/gpu"][pos] if pos < len(tags["/gpu"]) else gl
        rows.append(_gpu_row(g, idx, src, gl, ge, top_info, ts))
        if id(g) not in closed:
            rows[-1]["attrs"]["truncated"] = True
        rows.extend(_mig_rows(g, idx, _within(tags["mig"], gl, ge), ts))
        rows.extend(_proc_rows(g, idx, _within(tags["proc"], gl, ge), gl, ts))
    if gpus and single is None and attached is not None and attached > len(gpus):
        line = next((n for n, ln in enumerate(lines, start=1) if "<attached_gpus>" in ln), body_first)
        if use_minor:
            rows.extend(missing_gpu_rows(seen, expected=attached, line_no=line,
                                         why="fewer <gpu> elements than <attached_gpus>",
                                         reported={e["gpu"] for e in errors if e.get("gpu") is not None}))
        else:
            rows.append({"line": line, "kind": "gpu_error", "text": f"<attached_gpus>{attached}</attached_gpus>",
                         "attrs": {"error": "missing_from_table", "expected_count": attached,
                                   "seen_count": len(gpus), "why": "fewer <gpu> elements than <attached_gpus>; "
                                   "which index is missing is unknown"}})
    elif len(seen) > 1:
        rows.extend(missing_gpu_rows(seen, expected=None, line_no=body_first, why="index gap"))
    rows.sort(key=lambda r: (r["line"], 0 if r["kind"] == "gpu_memory" else 1))
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=len(lines),
                                 recognized=len(lines) - n_unrec, unrecognized=n_unrec,
                                 unrecognized_examples=unrec, notes=notes)

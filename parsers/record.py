"""``forensics record`` segments (decompressed: JSON lines) → host, cgroup, /dev/shm, GPU and process rows.

The format is our own (``forensics/record/ring.py`` writes it; docs/record.md): a header line holding
``"forensics_record": 1``, one JSON record a line, and a footer ``{"forensics_record_end": {"records": N,
"sha256": …}}`` whose digest covers every byte before it. A sealed segment whose footer is missing or
wrong is ignored whole (a note says why): after a crash a segment is there complete or not at all. The
segment being written (header ``"open": true``) has no footer: its complete lines are read, a torn last
line is dropped. Sample::

    {"first":1764584100.0,"forensics_record":1,"host":"gpu-a","interval_s":5}
    {"k":"sample","meminfo":{"MemAvailable":400000000,"MemFree":390000000,"MemTotal":470000000},"t":1764584100.0}
    {"forensics_record_end":{"records":1,"sha256":"…"}}

Rows (``ts`` from each record's epoch ``t``: UTC, ``source = record``), in the kinds the snapshot
parsers use so the detectors and charts read them alike:

* ``host_memory`` / ``host_swap`` — as ``meminfo`` builds them (``/proc/meminfo``'s kB is KiB; used =
  MemTotal − MemAvailable), every key in ``attrs`` (``mem_available_bytes``);
* ``gpu_memory`` — ``gpu``, ``used_bytes``, ``total_bytes``, ``free_bytes``, ``ratio`` = utilisation;
  ``attrs.uuid``, ``name``, ``pci_bus_id`` (``dddd:bb:dd``), ``gpu_source`` (``nvml`` | ``nvidia-smi``);
* ``gpu_process_sample`` — ``gpu``, ``pid``, ``comm``, ``used_bytes`` (as pmon rows);
* ``process_sample`` — an SGLang/vLLM process: ``pid``, ``comm``, ``used_bytes`` = RSS, the rank columns;
  ``attrs.args``, ``ppid``, ``state`` and the engine identity (``parsers/proc_titles.py``);
* ``cgroup_memory`` — ``used_bytes`` = memory.current (v1 usage_in_bytes), ``total_bytes`` = memory.max
  (null = no limit), ``count`` = the oom_kill events; ``attrs.cgroup``, ``cgroup_version``, ``events``;
* ``shm_usage`` — ``/dev/shm``: ``used_bytes``, ``total_bytes``, ``free_bytes``;
* ``oom_kill_count`` — the kernel's ``oom_kill`` counter (``/proc/vmstat``, or a cgroup's
  ``memory.events``) rose since the previous sample: ``count`` = by how much; ``attrs.scope``
  (``host`` | the cgroup); the victim is not named (the kernel log does that);
* ``process_exit`` — an engine process seen at the previous sample is gone: ``pid``, ``comm``,
  ``used_bytes`` = its last RSS; ``process_start`` — one not there at the previous sample (the rank
  columns and identity as for ``process_sample``);
* ``record_start`` / ``record_stop`` / ``record_collect`` / ``record_stall`` (a GPU query or process
  scan that did not answer in time: ``seconds``, ``attrs.probe``).

>>> import hashlib, json
>>> from parsers.record_format import FOOTER_KEY
>>> body = (json.dumps({"forensics_record": 1, "host": "h"}) + "\\n" + json.dumps({"t": 0.0, "k": "sample",
...         "meminfo": {"MemTotal": 1000, "MemFree": 400, "MemAvailable": 600}}) + "\\n")
>>> text = body + json.dumps({FOOTER_KEY: {"records": 1, "sha256": hashlib.sha256(body.encode()).hexdigest()}})
>>> parse(text).events.select("kind", "total_bytes", "used_bytes", "host").row(0)
('host_memory', 1024000, 409600, 'h')
>>> parse(text[:-30]).notes
['record segment ignored: no footer: the segment was cut (a crash mid-write)']
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from .meminfo import attr_name
from .proc_titles import process_identity, rank_columns
from .record_format import HEADER_KEY, check_text, load_line
from .schema import NotThisFormat, ParseResult
from .units import KIB

FORMAT = "record"


def sniff(head: str) -> float:
    """Sure when the first line is a recorder header.

    >>> sniff('{"first":1.0,"forensics_record":1,"host":"h"}\\n{"t":1}'), sniff('{"t": 1}')
    (1.0, 0.0)
    """
    first = head.split("\n", 1)[0]
    if f'"{HEADER_KEY}"' not in first:
        return 0.0
    rec = load_line(first)
    return 1.0 if isinstance(rec, dict) and HEADER_KEY in rec else 0.0


def _ts(t: Any) -> datetime | None:
    if not isinstance(t, int | float) or not 0 <= t < 32503680000:  # before year 3000
        return None
    return datetime.fromtimestamp(float(t), UTC)


def _int(v: Any) -> int | None:
    """An integer that fits the timeline's int64 columns (bytes, pids, counts), else None."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not -(1 << 62) < v < (1 << 62):
        return None
    return int(v)


def _pci(raw: Any) -> str | None:
    """``00000000:18:00.0`` → ``0000:18:00`` (the timeline's form)."""
    if not isinstance(raw, str) or raw.count(":") != 2:
        return None
    dom, bus, dev = raw.strip().lower().split(":")
    return f"{dom[-4:].rjust(4, '0')}:{bus[-2:].rjust(2, '0')}:{dev.split('.', 1)[0]}"


def _meminfo_rows(base: dict[str, Any], mem: dict[str, Any]) -> list[dict[str, Any]]:
    attrs: dict[str, Any] = {}
    vals: dict[str, int] = {}
    for key, v in mem.items():
        n = _int(v)
        if n is None or not isinstance(key, str) or not 0 <= n < (1 << 52):  # kB beyond 2^52 overflow int64 bytes
            continue
        if key.startswith("HugePages_"):
            attrs[attr_name(key)] = n
        else:
            vals[key] = n * KIB
            attrs[f"{attr_name(key)}_bytes"] = n * KIB
    rows = []
    total = vals.get("MemTotal")
    if total is not None:
        avail = vals.get("MemAvailable")
        if avail is not None:
            used, how = total - avail, "MemTotal - MemAvailable"
        else:
            used = total - sum(vals.get(k, 0) for k in ("MemFree", "Buffers", "Cached", "SReclaimable"))
            how = "MemTotal - MemFree - Buffers - Cached - SReclaimable"
        rows.append({**base, "kind": "host_memory", "total_bytes": total, "free_bytes": vals.get("MemFree"),
                     "avail_bytes": avail, "used_bytes": used,
                     "text": f"recorded /proc/meminfo: MemTotal {mem.get('MemTotal')} kB, MemAvailable "
                             f"{mem.get('MemAvailable')} kB",
                     "attrs": {**attrs, "used_definition": how}})
    st, sf = vals.get("SwapTotal"), vals.get("SwapFree")
    if st is not None and sf is not None:
        rows.append({**base, "kind": "host_swap", "total_bytes": st, "free_bytes": sf, "used_bytes": st - sf,
                     "text": f"recorded /proc/meminfo: SwapTotal {mem.get('SwapTotal')} kB, SwapFree {mem.get('SwapFree')} kB",
                     "attrs": {"swap_total_bytes": st, "swap_free_bytes": sf, "swap_configured": st > 0}})
    return rows


def _identity_cols(comm: str, cmd: str) -> tuple[dict[str, Any], dict[str, Any]]:
    ident = process_identity(comm, cmd)
    return rank_columns(ident), ident


class _State:
    """What one segment's reading carries from record to record: counters, process names."""

    def __init__(self) -> None:
        self.oom_host: int | None = None
        self.oom_cgroup: dict[str, int] = {}
        self.comm: dict[int, str] = {}


def _sample_rows(base: dict[str, Any], rec: dict[str, Any], st: _State) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    mem = rec.get("meminfo")
    if isinstance(mem, dict):
        rows += _meminfo_rows(base, mem)
    vm = rec.get("vmstat")
    if isinstance(vm, dict) and _int(vm.get("oom_kill")) is not None:
        n = int(vm["oom_kill"])
        if st.oom_host is not None and n > st.oom_host:
            rows.append({**base, "kind": "oom_kill_count", "count": n - st.oom_host,
                         "text": f"recorded /proc/vmstat oom_kill {st.oom_host} → {n}",
                         "attrs": {"scope": "host", "counter": n}})
        st.oom_host = n
    for c in rec.get("cgroups") or []:
        if not isinstance(c, dict):
            continue
        events = c.get("events") if isinstance(c.get("events"), dict) else {}
        path = str(c.get("path") or "")
        kills = _int(events.get("oom_kill"))
        rows.append({**base, "kind": "cgroup_memory", "used_bytes": _int(c.get("current")),
                     "total_bytes": _int(c.get("max")), "count": kills,
                     "text": f"recorded cgroup {path}: memory.current {c.get('current')}, memory.max {c.get('max') or 'max'}",
                     "attrs": {"cgroup": path, "cgroup_version": _int(c.get("v")), "events": events,
                               **{k: _int(c.get(k)) for k in ("peak", "high", "failcnt") if c.get(k) is not None}}})
        if kills is not None:
            before = st.oom_cgroup.get(path)
            if before is not None and kills > before:
                rows.append({**base, "kind": "oom_kill_count", "count": kills - before,
                             "text": f"recorded cgroup {path} memory.events oom_kill {before} → {kills}",
                             "attrs": {"scope": path, "counter": kills}})
            st.oom_cgroup[path] = kills
    shm = rec.get("shm")
    if isinstance(shm, dict) and _int(shm.get("total")) is not None:
        total, used = int(shm["total"]), _int(shm.get("used"))
        rows.append({**base, "kind": "shm_usage", "total_bytes": total, "used_bytes": used,
                     "free_bytes": total - used if used is not None else None,
                     "text": f"recorded /dev/shm: {used} of {total} bytes used", "attrs": {"mount": "/dev/shm"}})
    for p in rec.get("procs") or []:
        if not isinstance(p, dict) or _int(p.get("pid")) is None:
            continue
        pid, comm, cmd = int(p["pid"]), str(p.get("comm") or ""), str(p.get("cmd") or "")
        st.comm[pid] = comm
        cols, ident = _identity_cols(comm, cmd)
        rows.append({**base, **cols, "kind": "process_sample", "pid": pid, "comm": comm,
                     "used_bytes": _int(p.get("rss")), "text": f"recorded process {pid} {cmd[:200]}",
                     "attrs": {**ident, "args": cmd, "ppid": _int(p.get("ppid")), "state": p.get("state"),
                               "rss_bytes": _int(p.get("rss"))}})
    gpus = rec.get("gpus")
    if isinstance(gpus, dict):
        src = gpus.get("source")
        for g in gpus.get("gpus") or []:
            if not isinstance(g, dict) or _int(g.get("index")) is None:
                continue
            used, total = _int(g.get("used")), _int(g.get("total"))
            util = g.get("util") if isinstance(g.get("util"), int | float) else None
            rows.append({**base, "kind": "gpu_memory", "gpu": int(g["index"]), "used_bytes": used, "total_bytes": total,
                         "free_bytes": total - used if used is not None and total is not None else None,
                         "ratio": util, "text": f"recorded GPU {g['index']}: {used} of {total} bytes used",
                         "attrs": {k: v for k, v in (("uuid", g.get("uuid")), ("name", g.get("name")),
                                                     ("pci_bus_id", _pci(g.get("pci_bus_id"))),
                                                     ("gpu_source", src)) if v is not None}})
        for p in gpus.get("procs") or []:
            if not isinstance(p, dict) or _int(p.get("pid")) is None:
                continue
            pid = int(p["pid"])
            comm = st.comm.get(pid) or str(p.get("name") or "")
            cols, ident = _identity_cols(comm, "")
            rows.append({**base, **cols, "kind": "gpu_process_sample", "gpu": _int(p.get("gpu")), "pid": pid,
                         "comm": comm or None, "used_bytes": _int(p.get("used")),
                         "text": f"recorded GPU {p.get('gpu')} process {pid}: {p.get('used')} bytes",
                         "attrs": {**ident, "gpu_source": src}})
    return rows


_EVENT_KINDS = {"start": "record_start", "stop": "record_stop", "collect": "record_collect",
                "stall": "record_stall", "exit": "process_exit", "spawn": "process_start"}


def _event_rows(base: dict[str, Any], rec: dict[str, Any]) -> list[dict[str, Any]]:
    kind = _EVENT_KINDS.get(str(rec.get("event")))
    if kind is None:
        return []
    row: dict[str, Any] = {**base, "kind": kind}
    attrs = {k: v for k, v in rec.items() if k not in ("t", "k", "event") and isinstance(v, str | int | float | bool)}
    if kind in ("process_exit", "process_start"):
        comm, cmd = str(rec.get("comm") or ""), str(rec.get("cmd") or "")
        cols, ident = _identity_cols(comm, cmd)
        verb = "exited" if kind == "process_exit" else "started"
        row.update(cols, pid=_int(rec.get("pid")), comm=comm or None, used_bytes=_int(rec.get("rss")),
                   text=f"recorded: process {rec.get('pid')} ({cmd[:200] or comm}) {verb}")
        attrs = {**ident, "args": cmd, "last_rss_bytes": _int(rec.get("rss")), "ppid": _int(rec.get("ppid"))}
        attrs = {k: v for k, v in attrs.items() if v is not None}
    elif kind == "record_stall":
        row.update(seconds=rec.get("seconds") if isinstance(rec.get("seconds"), int | float) else None,
                   text=f"recorded: the {rec.get('probe')} probe did not answer in {rec.get('seconds')} s")
    else:
        row["text"] = f"recorder {rec.get('event')}" + (f": {rec['note']}" if rec.get("note") else "")
    row["attrs"] = attrs
    return [row]


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    checked = check_text(text)
    n_lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    if checked.refused == "no header":
        raise NotThisFormat("no forensics record header")
    if checked.refused:
        return ParseResult.from_rows([], source=FORMAT, path=path, lines=n_lines, recognized=1,
                                     unrecognized=n_lines - 1,
                                     notes=[f"record segment ignored: {checked.refused}"])
    host = checked.header.get("host") if isinstance(checked.header.get("host"), str) else None
    st = _State()
    rows: list[dict[str, Any]] = []
    gaps: dict[str, str] = {}
    for no, rec in checked.records:
        ts = _ts(rec.get("t"))
        if ts is None:
            continue
        base = {"line": no, "ts": ts, "host": host}
        if rec.get("k") == "event":
            rows += _event_rows(base, rec)
        else:
            rows += _sample_rows(base, rec, st)
            recorded_gaps = rec.get("gaps")
            for key, why in (recorded_gaps.items() if isinstance(recorded_gaps, dict) else ()):
                if isinstance(why, str) and len(gaps) < 50:
                    gaps.setdefault(str(key)[:40], why[:300])
    notes = [f"recorder gap ({k}): {v}" for k, v in sorted(gaps.items())]
    if checked.torn_lines:
        notes.append(f"record segment being written: {checked.torn_lines} torn line(s) dropped")
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=n_lines,
                                 recognized=n_lines - checked.torn_lines, unrecognized=checked.torn_lines, notes=notes)

"""PyTorch's NCCL flight recorder dump: each rank's ring of its last collectives.

Sources: pytorch torch/csrc/distributed/c10d/FlightRecorder.hpp (2.5+): the dump file is ``<prefix><rank>``, a
pickle or JSON.

With ``TORCH_NCCL_TRACE_BUFFER_SIZE=N`` and ``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` every rank writes, when
its watchdog fires, ``${TORCH_NCCL_DEBUG_INFO_TEMP_FILE}<rank>`` (default ``/tmp/nccl_trace_rank_<rank>``;
``TORCH_FR_DUMP_TEMP_FILE`` in later releases). Format (``torch/csrc/distributed/c10d/FlightRecorder.hpp``
/ ``FlightRecorderDetail.hpp``, read by ``tools/flight_recorder/components/loader.py``; version "2.x")::

    {"version": "2.5",
     "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
     "pg_status": {"0": {"last_enqueued_collective": 2, "last_started_collective": -1,
                         "last_completed_collective": 2}},
     "entries": [{"record_id": 0, "pg_id": 0, "process_group": ("0", "default_pg"),
                  "collective_seq_id": 1, "p2p_seq_id": 0, "op_id": 1, "profiling_name": "nccl:all_reduce",
                  "time_created_ns": 1724779239936775119, "input_sizes": [[3, 4]], "output_sizes": [[3, 4]],
                  "state": "completed", "duration_ms": 0.02, "timeout_ms": 600000, "is_p2p": False,
                  "frames": [{"name": "all_reduce", "filename": "…/distributed_c10d.py", "line": 2696}]}]}

It is a pickle (PyTorch's C++ pickler: dicts, lists, tuples, strings, numbers only) or, from
``_dump_nccl_trace_json``, JSON of the same shape. The analyser takes the rank from the file name
after the prefix; so do we, else a ``rank`` key. Read with :mod:`parsers.safe_pickle`.

Rows: one ``fr_dump`` per file (``attrs.pgs``: each process group's ranks and its last enqueued,
started and completed sequence numbers) and one ``fr_entry`` per collective (``count`` = its
``collective_seq_id``, ``seconds`` = its duration, ``ts`` = its creation).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from . import safe_pickle
from .safe_pickle import int64, short_text
from .schema import NotThisFormat, ParseResult

FORMAT = "nccl_flight_recorder"
#: Entries kept per dump (the ring is TORCH_NCCL_TRACE_BUFFER_SIZE long; 2000 is the documented advice).
MAX_ENTRIES = 20_000
_RANK_RE = re.compile(r"(?<!\d)(\d{1,9})(?:\.(?:pkl|pickle|json))?$")


def sniff_bytes(head: bytes) -> float:
    """A pickle (or JSON) whose head holds the recorder's keys.

    >>> import pickle
    >>> sniff_bytes(pickle.dumps({"version": "2.5", "pg_config": {}, "pg_status": {}, "entries": []}))
    0.9
    """
    keys = (b"pg_config", b"entries", b"collective_seq_id", b"pg_status")
    hits = sum(k in head for k in keys)
    if safe_pickle.looks_like_pickle(head) and hits >= 2:
        return 0.9
    if head.lstrip()[:1] == b"{" and hits >= 2 and b'"version"' in head:
        return 0.9
    return 0.0


def rank_from_name(path: str) -> int | None:
    """The rank the file name ends with, as the dumping rank appends it.

    >>> rank_from_name("tmp/nccl_trace_rank_5"), rank_from_name("fr/trace_12.json"), rank_from_name("x/dump")
    (5, 12, None)
    """
    m = _RANK_RE.search(path.replace("\\", "/").rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def _ranks(v: Any) -> list[int] | None:
    if isinstance(v, list | tuple):
        return [x for x in v if int64(x) is not None]
    if isinstance(v, str):
        return [int(x) for x in re.findall(r"-?\d{1,18}\b", v[:100_000])]
    return None


def _int(v: Any) -> int | None:
    return int64(v)


def _ts(ns: Any) -> datetime | None:
    if isinstance(ns, int) and 10**17 < ns < 10**20:
        return datetime.fromtimestamp(ns / 1e9, tz=UTC)
    return None


def _load(data: bytes) -> Any:
    if safe_pickle.looks_like_pickle(data[:2]):
        return safe_pickle.loads(data)
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, an integer past the digit limit
        raise NotThisFormat("not a flight-recorder dump (neither pickle nor JSON)") from None


def parse_bytes(data: bytes, path: str = "") -> ParseResult:
    doc = _load(data)
    if not (isinstance(doc, dict) and isinstance(doc.get("entries"), list) and ("pg_config" in doc or "version" in doc)):
        raise NotThisFormat("not a flight-recorder dump (no entries)")
    rank = rank_from_name(path)
    if rank is None:
        rank = _int(doc.get("rank"))
    version = short_text(doc.get("version") or "", 40)
    pgs: dict[str, dict[str, Any]] = {}
    for pg_id, cfg in (doc.get("pg_config") or {}).items() if isinstance(doc.get("pg_config"), dict) else ():
        c = cfg if isinstance(cfg, dict) else {}
        pgs[short_text(pg_id)] = {"name": short_text(c.get("name", pg_id)), "desc": short_text(c.get("desc", "")),
                                  "ranks": _ranks(c.get("ranks"))}
    for pg_id, st in (doc.get("pg_status") or {}).items() if isinstance(doc.get("pg_status"), dict) else ():
        s = st if isinstance(st, dict) else {}
        pgs.setdefault(short_text(pg_id), {"name": short_text(pg_id), "desc": "", "ranks": None}).update(
            last_enqueued=_int(s.get("last_enqueued_collective")), last_started=_int(s.get("last_started_collective")),
            last_completed=_int(s.get("last_completed_collective")))
    label = f"rank{rank}" if rank is not None else None
    rows: list[dict[str, Any]] = []
    entries = doc["entries"][-MAX_ENTRIES:]
    last: datetime | None = None
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            continue
        pg = e.get("process_group")
        pg_name = short_text(pg[0]) if isinstance(pg, list | tuple) and pg else short_text(e.get("pg_id", ""))
        pg_desc = short_text(pg[1]) if isinstance(pg, list | tuple) and len(pg) > 1 else ""
        seq = _int(e.get("collective_seq_id"))
        op = short_text(e.get("profiling_name") or "", 100)
        state = short_text(e.get("state") or "", 40)
        ts = _ts(e.get("time_created_ns"))
        if ts and (last is None or ts > last):
            last = ts
        dur = e.get("duration_ms")
        frames = e.get("frames") if isinstance(e.get("frames"), list) else []
        top = [f"{short_text(f.get('name'))} at {short_text(f.get('filename'))}:{short_text(f.get('line'))}"
               for f in frames[:3] if isinstance(f, dict)]
        sizes = safe_pickle.to_plain(e.get("input_sizes"), limit=1000)
        rows.append({
            "line": i + 1, "kind": "fr_entry", "ts": ts, "ts_basis": "source-utc" if ts else "none",
            "rank": label, "count": seq,
            "seconds": float(dur) / 1000 if isinstance(dur, float) or int64(dur) is not None else None,
            "text": (f"{label or 'rank ?'} pg {pg_name}" + (f" ({pg_desc})" if pg_desc else "")
                     + f" #{seq} {op} {state}" + (f" input_sizes={json.dumps(sizes)}" if sizes else "")),
            "attrs": {"global_rank": rank, "pg_id": short_text(e.get("pg_id", pg_name)), "pg_name": pg_name,
                      "pg_desc": pg_desc,
                      "seq": seq, "p2p_seq_id": _int(e.get("p2p_seq_id")), "op": op, "state": state,
                      "input_sizes": sizes, "output_sizes": safe_pickle.to_plain(e.get("output_sizes"), limit=1000),
                      "is_p2p": bool(e.get("is_p2p")), "timeout_ms": _int(e.get("timeout_ms")),
                      "retired": e.get("retired") if isinstance(e.get("retired"), bool) else None, "frames": top},
        })
    rows.insert(0, {
        "line": 1, "kind": "fr_dump", "ts": last, "ts_basis": "source-utc" if last else "none", "rank": label,
        "count": len(entries),
        "text": f"NCCL flight recorder dump of {label or 'an unnamed rank'}: {len(entries)} collective(s), "
                + ", ".join(f"pg {p['name']} last enqueued {p.get('last_enqueued')} completed {p.get('last_completed')}"
                            for p in list(pgs.values())[:8]),
        "attrs": {"global_rank": rank, "version": version, "pgs": pgs, "entries": len(entries)},
    })
    n = max(1, len(entries))
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=n, recognized=n)

"""SGLang's crash snapshot (``SGLANG_DEBUG_CRASH_SNAPSHOT=1``): the scheduler's CPU-side state at a crash.

Written by ``srt/debug_utils/crash_snapshot.py::dump_crash_snapshot`` to
``<crash_dump_folder>/<hostname>/crash_snapshot_<%Y-%m-%d_%H-%M-%S>_<pid>.json`` when the scheduler
handles a crash (``json.dump(payload, indent=2, default=str)``)::

    {"reason": "...", "timestamp": "2026-11-30T10:00:00.123456",   # datetime.now(): host-local, no zone
     "hostname": "gpu-node-07", "pid": 4242,
     "scheduler": {"forward_ct": 91234, "num_running_reqs": 12, "waiting_queue_len": 3,
                   "max_total_num_tokens": 20480, "tp_rank": 3, "pp_rank": 0},
     "recent_host_pool_io": [{"kind": "backup", "t": 1796032799.9, "pid": 4242, ...}],
     "extra": {}, "traceback": "Traceback (most recent call last): ..."}

Every ``scheduler`` field is optional (only those the scheduler had). Rows: one ``crash_snapshot``
(``tokens`` = ``max_total_num_tokens``, the KV pool of that rank; ``count`` = running requests), and
one ``host_pool_io`` per recorded transfer (``ts`` from its epoch ``t``).

>>> r = parse('{"reason": "x", "timestamp": "2026-11-30T10:00:00", "hostname": "h", "pid": 1, '
...           '"scheduler": {"max_total_num_tokens": 20480, "tp_rank": 3}, "recent_host_pool_io": []}')
>>> r.events.select("kind", "tokens", "tp_rank").row(0)
('crash_snapshot', 20480, 3)
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from .safe_pickle import int64
from .schema import NotThisFormat, ParseResult

FORMAT = "sglang_crash_snapshot"
MAX_IO_RECORDS = 10_000
_KEYS = ('"reason"', '"scheduler"', '"recent_host_pool_io"', '"hostname"')


def sniff(head: str) -> float:
    if not head.lstrip().startswith("{"):
        return 0.0
    return 0.95 if sum(k in head for k in _KEYS) >= 3 else 0.0


def _int(v: Any) -> int | None:
    return int64(v)


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError, an integer past the digit limit
        raise NotThisFormat("not JSON") from None
    if not (isinstance(doc, dict) and isinstance(doc.get("scheduler"), dict) and "reason" in doc):
        raise NotThisFormat("not an SGLang crash snapshot")
    sched = doc["scheduler"]
    try:
        local = datetime.fromisoformat(str(doc.get("timestamp")))
    except ValueError:
        local = None
    stamp = local.replace(tzinfo=None) if local is not None else None
    tp = _int(sched.get("tp_rank"))
    pool = _int(sched.get("max_total_num_tokens"))
    running, waiting = _int(sched.get("num_running_reqs")), _int(sched.get("waiting_queue_len"))
    reason = str(doc.get("reason") or "")[:500]
    tb = str(doc.get("traceback") or "")
    last_tb = next((ln.strip() for ln in reversed(tb.splitlines()) if ln.strip()), "")
    rows: list[dict[str, Any]] = [{
        "line": 1, "kind": "crash_snapshot", "ts_local": stamp, "rank": f"TP{tp}" if tp is not None else None,
        "tp_rank": tp, "pp_rank": _int(sched.get("pp_rank")), "pid": _int(doc.get("pid")), "tokens": pool,
        "count": running,
        "text": (f"SGLang crash snapshot: {reason}" + (f"; {running} running" if running is not None else "")
                 + (f", {waiting} waiting" if waiting is not None else "")
                 + (f", KV pool {pool} tokens" if pool is not None else "") + (f"; {last_tb[:300]}" if last_tb else "")),
        "attrs": {"reason": reason, "hostname": str(doc.get("hostname") or "") or None, "forward_ct": _int(sched.get("forward_ct")),
                  "num_running_reqs": running, "waiting_queue_len": waiting, "max_total_num_tokens": pool,
                  "traceback_last_line": last_tb[:500] or None},
    }]
    io = doc.get("recent_host_pool_io")
    for rec in (io if isinstance(io, list) else [])[-MAX_IO_RECORDS:]:
        if not isinstance(rec, dict):
            continue
        t = rec.get("t")
        ts = datetime.fromtimestamp(float(t), tz=UTC) if isinstance(t, int | float) and 1e8 < t < 1e11 else None
        rows.append({"line": 1, "kind": "host_pool_io", "ts": ts, "ts_basis": "source-utc" if ts else None,
                     "pid": _int(rec.get("pid")), "text": f"host-pool transfer {rec.get('kind')}",
                     "attrs": {k: v for k, v in rec.items() if isinstance(v, bool | int | float | str)}})
    n = text.count("\n") + 1
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=n, recognized=n)

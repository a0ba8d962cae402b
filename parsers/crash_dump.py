"""SGLang's crash dump (``--crash-dump-folder``): the requests of the last minutes before a crash.

Sources: sglang python/sglang/srt/managers/tokenizer_manager.py::dump_requests_before_crash (0.4.9+) writes
the pickle; the launch scripts are sglang python/sglang/launch_server.py (0.4+) and
python/sglang/bench_serving.py; the ``<redacted: N characters>`` marker is our own collector's,
docs/crash_artifacts.md.

Written by ``TokenizerManager.dump_requests_before_crash`` (``srt/managers/tokenizer_manager.py``,
0.4.9+) to ``<crash_dump_folder>/<hostname>/crash_dump_<%Y-%m-%d_%H-%M-%S>.pkl``: one pickle of ::

    {"server_args": ServerArgs(...) or None,   # None when it failed to pickle (--trust-remote-code)
     "requests": [(obj, out, created, finished), ...],
     "launch_command": " ".join(sys.argv)}     # later releases

``obj`` is the request as received (``sglang.srt.managers.io_struct.GenerateReqInput``: ``text``,
``input_ids``, ``sampling_params`` with ``max_new_tokens``, ``rid``); ``out`` the last output (its
``meta_info`` has ``prompt_tokens``, ``completion_tokens``, ``finish_reason``) — ``{}`` for a request
still unfinished in releases before the output was kept; ``created`` / ``finished`` are epoch seconds
(``time.time()``, later ``convert_time_to_realtime``). Finished requests come first (the 5-minute ring
``crash_dump_request_list``), then the unfinished ones (``rid_to_state`` entries not finished).

The pickle is read by :mod:`parsers.safe_pickle`: nothing in it runs. Rows: one ``crash_dump``
summary, one ``crash_request`` per request (``tokens`` = input tokens, ``ts`` = arrival), the
``server_args`` the dump holds and the ``launch_command`` it names (parsed as a launch command is).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from . import safe_pickle
from .safe_pickle import Obj, int64
from .schema import NotThisFormat, ParseResult

FORMAT = "sglang_crash_dump"
#: Requests read from one dump (the ring is five minutes; a busy server may hold many thousands).
MAX_REQUESTS = 50_000
_SCRIPT_RE = re.compile(r"^\s*\S*?sglang/(launch_server|bench_serving)\.py\b")


def sniff_bytes(head: bytes) -> float:
    """A pickle whose head names SGLang's dump keys and classes.

    >>> import pickle
    >>> sniff_bytes(pickle.dumps({"server_args": None, "requests": [], "launch_command": "x"}))
    0.9
    """
    if not safe_pickle.looks_like_pickle(head):
        return 0.0
    has_requests = b"requests" in head
    if has_requests and (b"server_args" in head or b"sglang.srt" in head):
        return 0.9
    return 0.0


def _epoch(v: Any) -> datetime | None:
    if isinstance(v, int | float) and 1e8 < v < 1e11:
        return datetime.fromtimestamp(float(v), tz=UTC)
    return None


def _fields(obj: Any) -> dict:
    if isinstance(obj, Obj):
        return obj.fields()
    return obj if isinstance(obj, dict) else {}


def _plain_args(server_args: Any) -> dict[str, Any] | None:
    """The scalar fields of a pickled ServerArgs (lists of scalars kept, nested records dropped)."""
    if not isinstance(server_args, Obj):
        return server_args if isinstance(server_args, dict) else None
    out: dict[str, Any] = {}
    for k, v in server_args.fields().items():
        if not isinstance(k, str):
            continue
        if v is None or isinstance(v, bool | float | str) or int64(v) is not None:
            out[k] = v
        elif isinstance(v, list | tuple) and all(x is None or isinstance(x, bool | float | str) or int64(x) is not None
                                                 for x in v):
            out[k] = list(v)
    return out


def _lengths(req: dict, out: dict, index: int) -> list[tuple[int | None, int | None]]:
    """(input tokens, input characters) for each prompt of the request (a batch request has several)."""
    meta = _fields(out.get("meta_info")) if isinstance(out, dict) else {}
    prompt_tokens = meta.get("prompt_tokens")
    ids = req.get("input_ids")
    text = req.get("text")
    if isinstance(ids, list) and ids and isinstance(ids[0], list):
        return [(len(x), None) for x in ids if isinstance(x, list)]
    if isinstance(text, list) and not isinstance(ids, list):
        return [(None, _chars(t)) for t in text if isinstance(t, str)]
    tokens = int64(prompt_tokens) if int64(prompt_tokens) is not None else (len(ids) if isinstance(ids, list) else None)
    return [(tokens, _chars(text) if isinstance(text, str) else None)]


#: What ``forensics collect`` leaves of a long text when it redacts a dump (forensics/collect/crash_artifacts.py).
_REDACTED_RE = re.compile(r"<redacted: (\d+) characters>")


def _chars(text: str) -> int:
    m = _REDACTED_RE.fullmatch(text)
    return int(m.group(1)) if m else len(text)


def _max_new(req: dict) -> int | None:
    sp = req.get("sampling_params")
    if isinstance(sp, list):
        sp = sp[0] if sp else None
    v = _fields(sp).get("max_new_tokens")
    return int64(v)


def dump_host(path: str) -> str | None:
    """The host folder SGLang wrote the dump under (``<folder>/<hostname>/crash_dump_*.pkl``).

    >>> dump_host("crash/node-3/crash_dump_2026-11-30_10-00-00.pkl")
    'node-3'
    """
    parts = path.replace("\\", "/").split("/")
    return parts[-2] if len(parts) >= 2 and parts[-2] else None


def parse_bytes(data: bytes, path: str = "") -> ParseResult:
    """Rows from one crash dump; :class:`NotThisFormat` for a pickle that is not one, the reader's
    :class:`~parsers.safe_pickle.UnsafePickle` for one that cannot be read safely."""
    doc = safe_pickle.loads(data)
    if not (isinstance(doc, dict) and isinstance(doc.get("requests"), list | tuple)):
        raise NotThisFormat("not an SGLang crash dump (no requests list)")
    requests = list(doc["requests"])[:MAX_REQUESTS]
    rows: list[dict[str, Any]] = []
    host = dump_host(path)
    unfinished = finished = 0
    last_ts: datetime | None = None
    for i, item in enumerate(requests):
        if not (isinstance(item, tuple | list) and len(item) >= 4):
            continue
        obj, out, created, ended = item[0], item[1], item[2], item[3]
        req = _fields(obj)
        out_d = out if isinstance(out, dict) else {}
        meta = _fields(out_d.get("meta_info"))
        reason = meta.get("finish_reason")
        done = reason is not None
        finished += done
        unfinished += not done
        arrived, end = _epoch(created), _epoch(ended)
        if end and (last_ts is None or end > last_ts):
            last_ts = end
        max_new = _max_new(req)
        completion = int64(meta.get("completion_tokens"))
        if completion is None:
            ids = out_d.get("output_ids")
            completion = len(ids) if isinstance(ids, list) else None
        rid = req.get("rid")
        rid = rid if isinstance(rid, str) else (rid[0] if isinstance(rid, list) and rid and isinstance(rid[0], str) else None)
        for tokens, chars in _lengths(req, out_d, i):
            size = f"{tokens} input tokens" if tokens is not None else (f"{chars} input characters" if chars else "input size unknown")
            text = (f"crash dump request {i + 1} of {len(requests)}" + (f" (rid {rid[:40]})" if rid else "")
                    + f": {size}" + (f", max_new_tokens={max_new}" if max_new is not None else "")
                    + (f", {completion} tokens generated" if completion is not None else "")
                    + (f", arrived {arrived:%Y-%m-%d %H:%M:%S} UTC" if arrived else "")
                    + (", unfinished at the crash" if not done else f", finished ({_reason_text(reason)})"))
            rows.append({
                "line": i + 1, "kind": "crash_request", "ts": arrived, "ts_basis": "source-utc" if arrived else "none",
                "tokens": tokens, "count": max_new, "seconds": (end - arrived).total_seconds() if arrived and end else None,
                "text": text,
                "attrs": {"rid": rid, "input_tokens": tokens, "input_chars": chars, "max_new_tokens": max_new,
                          "output_tokens": completion, "finished": done, "finish_reason": _reason_text(reason) if done else None,
                          "arrived": arrived.isoformat() if arrived else None, "ended": end.isoformat() if end else None,
                          "dump_host": host},
            })
    args = _plain_args(doc.get("server_args"))
    launch = doc.get("launch_command") if isinstance(doc.get("launch_command"), str) else None
    summary = {"line": 1, "kind": "crash_dump", "ts": last_ts, "ts_basis": "source-utc" if last_ts else "none",
               "count": len(requests),
               "text": (f"SGLang crash dump: {finished} finished and {unfinished} unfinished request(s)"
                        + (f" on {host}" if host else "") + ("" if args is not None else "; server_args not in the dump")),
               "attrs": {"requests": len(requests), "finished": finished, "unfinished": unfinished, "dump_host": host,
                         "has_server_args": args is not None, "launch_command": launch[:4096] if launch else None,
                         "truncated_to": MAX_REQUESTS if len(doc["requests"]) > MAX_REQUESTS else None}}
    rows.insert(0, summary)
    if args is not None:
        rows.append({"line": 1, "kind": "server_args", "ts": last_ts, "ts_basis": "source-utc" if last_ts else "none",
                     "text": "server_args from the crash dump", "attrs": {"args": args, "from": "crash_dump"}})
    rows += _launch_rows(launch, last_ts)
    n = max(1, len(requests))
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=n, recognized=n)


def _reason_text(reason: Any) -> str:
    f = _fields(reason)
    if isinstance(f.get("type"), str):
        return f["type"][:80]
    return reason[:80] if isinstance(reason, str) else type(reason).__name__


def _launch_rows(launch: str | None, ts: datetime | None) -> list[dict[str, Any]]:
    """The dump's ``launch_command`` as the launch parser reads a typed command."""
    if not launch:
        return []
    from . import launch as launch_parser

    # ``sys.argv`` joined: the script path stands where the typed command had ``python -m sglang.launch_server``
    cmd = _SCRIPT_RE.sub(lambda m: "python3 -m sglang." + m.group(1), launch[:16384], count=1)
    try:
        ev = launch_parser.parse(cmd, "").events
    except NotThisFormat:
        return []
    out = []
    for r in ev.filter(ev["kind"] == "launch_command").iter_rows(named=True):
        out.append({"line": 1, "kind": "launch_command", "ts": ts, "ts_basis": "source-utc" if ts else "none",
                    "text": r["text"], "attrs": r["attrs"]})
    return out

"""Write the engines' crash artifacts as they write them, from our own figures (for tests and scenarios).

* :func:`sglang_crash_dump` pickles the dict ``TokenizerManager.dump_requests_before_crash`` writes,
  with instances of small stand-in classes registered, only while pickling, under SGLang's module
  paths (``sglang.srt.server_args.ServerArgs``, ``sglang.srt.managers.io_struct.GenerateReqInput``),
  so the stream names the classes exactly as a real dump does.
* :func:`flight_recorder_dump` pickles the dict PyTorch's flight recorder dumps (version 2.5 shape:
  ``pg_config``, ``pg_status``, ``entries``), protocol 2 as its C++ pickler writes.

``python tests/crash_artifacts.py`` rewrites the scenario inputs under ``fixtures/scenarios/`` that
are made of these files; ``tests/test_crash_artifacts.py`` checks the committed files are what this
module writes.
"""

from __future__ import annotations

import contextlib
import pickle
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "fixtures" / "scenarios"
#: Epoch of the incidents below: 2026-11-30 10:00:00 UTC.
T0 = 1_796_032_800.0


@dataclass
class ServerArgs:
    model_path: str = "/models/demo-70b"
    tp_size: int = 8
    context_length: int | None = None
    mem_fraction_static: float = 0.88
    max_running_requests: int | None = None
    chunked_prefill_size: int = 8192
    crash_dump_folder: str | None = "/var/crash/sglang"
    extra: dict = field(default_factory=dict)


@dataclass
class GenerateReqInput:
    text: str | None = None
    input_ids: list[int] | None = None
    sampling_params: dict | None = None
    rid: str | None = None
    stream: bool = False


@contextlib.contextmanager
def engine_paths() -> Iterator[None]:
    """Register the stand-ins under SGLang's module paths for as long as pickling takes."""
    saved = {}
    placed = {"sglang.srt.server_args": ServerArgs, "sglang.srt.managers.io_struct": GenerateReqInput}
    for mod_name, cls in placed.items():
        for parent in _parents(mod_name):
            saved.setdefault(parent, sys.modules.get(parent))
            sys.modules.setdefault(parent, types.ModuleType(parent))
        setattr(sys.modules[mod_name], cls.__name__, cls)
        cls.__module__ = mod_name
        cls.__qualname__ = cls.__name__
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
        for cls in placed.values():
            cls.__module__ = __name__


def _parents(mod_name: str) -> list[str]:
    parts = mod_name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def request(rid: str, input_tokens: int, max_new_tokens: int, arrived: float, ended: float,
            finished: bool, output_tokens: int = 0) -> tuple:
    """One ``(obj, out, created, finished)`` entry as the dump holds it.

    A finished request is the text it was sent and its last output, whose ``meta_info`` counts the
    prompt's tokens; an unfinished one was sent as token ids and has only what it generated so far
    (``ReqState.get_crash_dump_output``), as a non-streaming request's state holds it."""
    params = {"max_new_tokens": max_new_tokens, "temperature": 0.0}
    if finished:
        obj = GenerateReqInput(text=f"question {rid}", sampling_params=params, rid=rid)
        meta = {"id": rid, "prompt_tokens": input_tokens, "completion_tokens": output_tokens,
                "finish_reason": {"type": "length", "length": max_new_tokens}}
        return obj, {"text": "answer", "output_ids": [11] * 4, "meta_info": meta}, arrived, ended
    obj = GenerateReqInput(input_ids=[(7 * i) % 251 for i in range(input_tokens)], sampling_params=params, rid=rid)
    return obj, {"output_ids": [13] * output_tokens} if output_tokens else {}, arrived, ended


def sglang_crash_dump(requests: list[tuple], server_args: ServerArgs | None, launch_command: str | None) -> bytes:
    doc: dict[str, Any] = {"server_args": server_args, "requests": requests}
    if launch_command is not None:
        doc["launch_command"] = launch_command
    with engine_paths():
        return pickle.dumps(doc, protocol=4)  # Python 3.8-3.13 default, as SGLang writes it


def fr_entry(record_id: int, seq: int, op: str, state: str, created_ns: int, sizes: list, pg: tuple = ("0", "default_pg"),
             duration_ms: float | None = 0.4) -> dict:
    return {"record_id": record_id, "pg_id": int(pg[0]), "process_group": pg, "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": op, "time_created_ns": created_ns,
            "input_sizes": sizes, "input_dtypes": ["BFloat16"], "output_sizes": sizes, "output_dtypes": ["BFloat16"],
            "state": state, "time_discovered_started_ns": created_ns + 1000 if state != "scheduled" else None,
            "time_discovered_completed_ns": created_ns + 400_000 if state == "completed" else None,
            "retired": state == "completed", "timeout_ms": 600000, "is_p2p": False,
            "duration_ms": duration_ms if state == "completed" else None,
            "frames": [{"name": "all_reduce", "filename": "torch/distributed/distributed_c10d.py", "line": 2696},
                       {"name": "forward", "filename": "sglang/srt/layers/linear.py", "line": 1290}]}


def flight_recorder_dump(world: int, entries: list[dict], last_enqueued: int, last_started: int,
                         last_completed: int) -> bytes:
    doc = {"version": "2.5",
           "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}},
           "pg_status": {"0": {"last_enqueued_collective": last_enqueued, "last_started_collective": last_started,
                               "last_completed_collective": last_completed}},
           "entries": entries}
    return pickle.dumps(doc, protocol=2)


# ---------------------------------------------------------------------------------------------
# the scenarios made of these files


def rank5_behind() -> dict[str, bytes]:
    """Eight ranks; seven entered all-reduce #1580 and wait in it, rank 5 completed #1579 and never issued #1580."""
    files = {}
    base_ns = int(T0 * 1e9)
    for rank in range(8):
        entries = []
        last = 1580 if rank != 5 else 1579
        for i, seq in enumerate(range(1571, last + 1)):
            state = "completed" if seq < 1580 else "started"
            entries.append(fr_entry(i, seq, "nccl:all_reduce", state, base_ns + seq * 25_000_000 + rank * 1000,
                                    [[4096, 8192]]))
        files[f"nccl_trace_rank_{rank}"] = flight_recorder_dump(
            8, entries, last_enqueued=last, last_started=1580 if rank != 5 else 1579, last_completed=1579)
    return files


def desync_at_812() -> dict[str, bytes]:
    """Eight ranks enter collective #812; rank 7 issued an all-gather where the others issued an all-reduce."""
    files = {}
    base_ns = int(T0 * 1e9)
    for rank in range(8):
        entries = [fr_entry(i, seq, "nccl:all_reduce", "completed", base_ns + seq * 25_000_000, [[4096, 8192]])
                   for i, seq in enumerate(range(805, 812))]
        op, sizes = ("nccl:all_gather", [[512, 8192]]) if rank == 7 else ("nccl:all_reduce", [[4096, 8192]])
        entries.append(fr_entry(len(entries), 812, op, "started", base_ns + 812 * 25_000_000, sizes))
        files[f"fr/trace_{rank}"] = flight_recorder_dump(8, entries, last_enqueued=812, last_started=812,
                                                         last_completed=811)
    return files


def long_request_dump() -> dict[str, bytes]:
    """A crash dump: 40 finished short requests, then three unfinished, the longest 24,000 input tokens
    (the scenario's log gives the pool: 20,480 tokens per rank)."""
    reqs = [request(f"ok-{i:03d}", 900 + 37 * i, 512, T0 - 240 + 5 * i, T0 - 230 + 5 * i, True, 512) for i in range(40)]
    reqs += [request("long-ctx-1", 24_000, 4096, T0 - 20.0, T0, False),
             request("chat-17", 3_200, 1024, T0 - 6.5, T0, False, 40),
             request("chat-18", 1_100, 1024, T0 - 2.0, T0, False, 3)]
    args = ServerArgs(context_length=32768, max_running_requests=64)
    launch = ("/usr/local/lib/python3.12/dist-packages/sglang/launch_server.py --model-path /models/demo-70b "
              "--tp 8 --context-length 32768 --mem-fraction-static 0.88 --max-running-requests 64 "
              "--crash-dump-folder /var/crash/sglang")
    return {"crash/gpu-node-07/crash_dump_2026-11-30_10-00-00.pkl": sglang_crash_dump(reqs, args, launch),
            "crash/gpu-node-07/crash_snapshot_2026-11-30_10-00-00_4242.json": crash_snapshot(
                "Scheduler hit an exception", pool=20480, running=2, waiting=1, tp_rank=0)}


def crash_snapshot(reason: str, pool: int, running: int, waiting: int, tp_rank: int) -> bytes:
    """The JSON ``crash_snapshot.dump_crash_snapshot`` writes (``indent=2``), host-local stamp."""
    import json

    payload = {"reason": reason, "timestamp": "2026-11-30T10:00:00.412000", "hostname": "gpu-node-07", "pid": 4242,
               "scheduler": {"forward_ct": 91234, "num_running_reqs": running, "waiting_queue_len": waiting,
                             "max_total_num_tokens": pool, "tp_rank": tp_rank, "pp_rank": 0},
               "recent_host_pool_io": [], "extra": {},
               "traceback": "Traceback (most recent call last):\n  File \"scheduler.py\", line 2710, in "
                            "run_scheduler_process\n    scheduler.event_loop_overlap()\nRuntimeError: stuck"}
    return (json.dumps(payload, indent=2) + "\n").encode()


SCENARIO_FILES = {
    "nccl_flight_recorder_rank_behind": rank5_behind,
    "crash_dump_request_longer_than_pool": long_request_dump,
    "nccl_flight_recorder_desync": desync_at_812,
}


def write_scenarios() -> None:
    for name, build in SCENARIO_FILES.items():
        for rel, data in build().items():
            path = SCENARIOS / name / "input" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)


if __name__ == "__main__":
    write_scenarios()

"""Where each process was when something dumped it: ``py-spy dump`` stacks, and vLLM's input dump.

Sources: py-spy src/dump.rs (0.3+: ``Process N: cmd``, ``Thread 0x… (idle): "MainThread"``, indented ``func
(file:line)`` frames), vllm vllm/logging_utils/dump_input.py (0.9+: ``Dumping input data for V1 LLM engine
(v…) with config:``, ``total_num_scheduled_tokens=``).

**py-spy dump** (``py-spy dump --pid N``; SGLang's watchdog runs it and logs ``Pyspy dump for PID N:``
followed by the tool's output, ``utils/cudacore_pyspy_dump_utils.py`` / ``scheduler.py::watchdog_thread``,
reference sglang_formats "watchdog"). py-spy's text output (``src/dump.rs``)::

    Process 4242: sglang::scheduler_TP3
    Python v3.12.3 (/usr/bin/python3.12)

    Thread 4242 (active): "MainThread"
        all_reduce (torch/distributed/distributed_c10d.py:2501)
        forward (sglang/srt/layers/linear.py:1290)
    Thread 0x7F2A2B8FF740 (idle): "Thread-1"          # older py-spy: the thread id in hex

One ``pyspy_stack`` row per thread: ``pid``, the process title as ``comm``, its TP rank when the
title names it (``sglang::scheduler_TP3``), the innermost frames, and what the innermost frame is
waiting in (:func:`waiting_in`: a collective, a CUDA synchronisation, an idle wait).

A paste often keeps only the frames: two or more consecutive lines of py-spy's frame form
(``func (path.py:line)``, innermost first) with no ``Thread`` header above them are one stack of an
unnamed process (``attrs.headerless``; thread, state and pid unknown). A Python traceback's frames
(``File "…", line N, in func``) and log records never take that form.

**vLLM's input dump** on a fatal engine error (``vllm/logging_utils/dump_input.py``, reference
vllm_formats §2.2 "crash re-dump", 0.9.2–0.33): ``Dumping input data for V1 LLM engine (v%s) with
config: %s, `` (older: ``Dumping input data`` then ``V1 LLM engine (v%s) with config: %s, ``), then
``Dumping scheduler output for model execution: SchedulerOutput(...)`` (older: the repr on the next
record) and ``Dumping scheduler stats: SchedulerStats(...)``. Rows: ``engine_input_dump`` (the
version), ``engine_scheduler_output`` (``count`` = new requests scheduled, ``tokens`` = tokens
scheduled, the prompt lengths of the new requests) and ``engine_scheduler_stats`` (running,
waiting, KV usage as ``ratio``).

>>> r = parse('Process 7: sglang::scheduler_TP3\\n\\nThread 7 (active): "MainThread"\\n'
...           '    all_reduce (torch/distributed/distributed_c10d.py:2501)\\n')
>>> r.events.select("kind", "tp_rank", "pid").row(0), waiting_in(["all_reduce (x.py:1)"])
(('pyspy_stack', 3, 7), 'collective')
>>> parse('    recv (torch/distributed/distributed_c10d.py:10)\\n    step (engine/loop.py:4)\\n').events.select(
...     "kind", "line", "line_end").row(0)
('pyspy_stack', 1, 2)
"""

from __future__ import annotations

import re
from typing import Any

from .proc_titles import process_identity
from .schema import ParseResult

FORMAT = "stack_dumps"
MAX_FRAMES = 12
MAX_THREADS = 2000

# py-spy src/dump.rs (0.3+: ``Process N: cmd``, ``Thread 0x… (idle): "name"``, ``func (file:line)`` frames); the TP
# label of reference/sglang_formats.md §1
_PROCESS_RE = re.compile(r"^Process (\d{1,10}): (.{0,300})$")
_THREAD_RE = re.compile(r'^Thread (0x[0-9A-Fa-f]+|\d+) \((active|idle|active\+gil|gil)\)(?:: "([^"]{0,200})")?')
_FRAME_RE = re.compile(r"^\s{2,}(\S.{0,300}?) \(([^()]{1,300}):(\d+)\)\s*$")
# the torch.distributed collectives (pytorch torch/distributed/distributed_c10d.py (2.x)), CUDA synchronisation
# (``.item``, ``synchronize``) and the blocking calls an idle worker waits in
# (any frame in distributed_c10d.py is one of its collectives or point-to-point calls: send, recv, isend, …)
_COLLECTIVE = re.compile(r"all_reduce|all_gather|reduce_scatter|broadcast|barrier|all_to_all|alltoall|\bnccl|"
                         r"_all_reduce|custom_all_reduce|ncclComm|recv_object|send_object|distributed_c10d\.py", re.I)
_SYNC = re.compile(r"synchronize|\.item\b|_local_scalar_dense|cudaStreamSynchronize|tolist|\bcpu\b", re.I)
_IDLE = re.compile(r"\b(?:recv|recv_pyobj|poll|select|wait|sleep|accept|get|_wait_for_tstate_lock|epoll)\b", re.I)
_NEEDLES = ("Thread ", "Dumping input data", "SchedulerOutput(", "SchedulerStats(", ".py:")
# py-spy src/dump.rs (0.3+) frame line ``func (file:line)`` standing alone, as a paste without its Thread header keeps
# it: the whole line is one frame of a Python file
_BARE_FRAME_RE = re.compile(r"^[ \t]*([\w.<>]{1,200}) \(([^()\n]{1,300}\.py):(\d{1,7})\)[ \t]*$", re.M)
#: frames in a row that make a headerless stack (one alone could be any line that ends in a location)
_MIN_BARE_FRAMES = 2
#: texts longer than this are logs, not pasted stacks: the headerless scan is skipped (it reads every line)
_MAX_BARE_TEXT = 4 << 20

# vllm vllm/logging_utils/dump_input.py (0.9+: ``Dumping input data for V1 LLM engine (v…) with config:``,
# SchedulerOutput/SchedulerStats fields)
_VLLM_HEAD_RE = re.compile(r"(?:Dumping input data for )?V1 LLM engine \(v([^)\s]{1,40})\) with config:")
_NEW_REQ_LEN_RE = re.compile(r"prompt_token_ids_len=(\d{1,12})\b")
_TOTAL_TOKENS_RE = re.compile(r"total_num_scheduled_tokens=(\d{1,12})\b")
_STATS_RE = {k: re.compile(rf"\b{k}=(\d{{1,12}}(?:\.\d{{1,12}})?)\b") for k in
             ("num_running_reqs", "num_waiting_reqs", "kv_cache_usage", "gpu_cache_usage")}


def waiting_in(frames: list[str]) -> str:
    """What the innermost frames are waiting in: ``collective``, ``cuda_sync``, ``idle`` or ``running``."""
    top = " ".join(frames[:3])
    if _COLLECTIVE.search(top):
        return "collective"
    if _SYNC.search(frames[0] if frames else ""):
        return "cuda_sync"
    if frames and _IDLE.search(frames[0].split(" (", 1)[0]):
        return "idle"
    return "running"


#: The strings one of which every text this reader reads holds, public for ``parsers.routing``.
NEEDLES = _NEEDLES
_VLLM_NEEDLES = ("Dumping input data", "V1 LLM engine (v", "Dumping scheduler output", "SchedulerOutput(", "SchedulerStats(")


def _line_starts_of(text: str, needles: tuple[str, ...], limit: int = 100_000) -> list[int]:
    """Offsets of the starts of the lines holding any needle, in order (a literal search: C speed)."""
    starts: set[int] = set()
    for needle in needles:
        pos = text.find(needle)
        while pos >= 0 and len(starts) < limit:
            start = text.rfind("\n", 0, pos) + 1
            starts.add(start)
            nl = text.find("\n", pos)
            if nl < 0:
                break
            pos = text.find(needle, nl)
    return sorted(starts)


def _line_at(text: str, start: int, cap: int = 4_000_000) -> str:
    end = text.find("\n", start)
    return text[start: end if end >= 0 else len(text)][:cap]


class _Lines:
    """1-based line numbers of offsets in one text, for offsets visited in increasing order (linear)."""

    def __init__(self, text: str) -> None:
        self.text, self.pos, self.line = text, 0, 1

    def at(self, offset: int) -> int:
        if offset < self.pos:  # not in order: count afresh (rare)
            self.pos, self.line = 0, 1
        self.line += self.text.count("\n", self.pos, offset)
        self.pos = offset
        return self.line


def _stack_rows(text: str) -> list[dict[str, Any]]:
    """Thread blocks found by their header line; only those lines and the frames under them are read."""
    procs = [(p, _line_at(text, p, 1000)) for p in _line_starts_of(text, ("Process ",))]
    lines = _Lines(text)
    rows: list[dict[str, Any]] = []
    p_i = -1
    for start in _line_starts_of(text, ("Thread ",)):
        if len(rows) >= MAX_THREADS:
            break
        header = _line_at(text, start, 1000).rstrip()
        at = header.find("Thread ")
        tm = _THREAD_RE.match(header[at:]) if 0 <= at < 200 else None
        if not tm:
            continue
        while p_i + 1 < len(procs) and procs[p_i + 1][0] < start:
            p_i += 1
        pid = comm = None
        if p_i >= 0:
            head = procs[p_i][1]
            pm = _PROCESS_RE.match(head[head.find("Process "):].rstrip())
            if pm:
                pid, comm = int(pm.group(1)), pm.group(2).strip()
        end = text.find("\n", start)
        frames: list[str] = []
        first = lines.at(start)
        last = first
        pos = end + 1 if end >= 0 else len(text)
        while pos < len(text) and len(frames) < MAX_FRAMES + 50:
            nl = text.find("\n", pos)
            line = text[pos: nl if nl >= 0 else len(text)]
            f = _FRAME_RE.match(line.rstrip()) if len(line) < 1000 else None
            if not f:
                if line.strip() and not line.startswith((" ", "\t")):
                    break
                if not line.strip():
                    break
                pos = nl + 1 if nl >= 0 else len(text)  # an indented line py-spy adds (locals, native): skip
                last += 1
                continue
            if len(frames) < MAX_FRAMES:
                frames.append(f"{f.group(1)} ({f.group(2)}:{f.group(3)})")
            last += 1
            pos = nl + 1 if nl >= 0 else len(text)
        if not frames:
            continue
        tp = process_identity(None, comm).get("tp_rank")  # the engine's title: sglang::scheduler_DP1_TP1_EP1_PP0
        thread, state, tid = tm.group(3) or tm.group(1), tm.group(2), tm.group(1)
        who = f"TP{tp}" if tp is not None else (f"pid {pid}" if pid is not None else "a process")
        rows.append({
            "line": first, "line_end": last, "kind": "pyspy_stack", "pid": pid, "comm": comm,
            "tp_rank": tp, "rank": f"TP{tp}" if tp is not None else None,
            "text": f"{who} {thread} ({state}) in {frames[0]}" + (f" ← {frames[1]}" if len(frames) > 1 else ""),
            "attrs": {"thread": thread, "thread_id": tid, "state": state, "frames": frames, "top_frame": frames[0],
                      "waiting_in": waiting_in(frames), "process": comm},
        })
    return rows


def _bare_rows(text: str, taken: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """Stacks pasted without their Thread header: runs of consecutive frame lines outside the blocks already read."""
    runs: list[list[re.Match[str]]] = []
    for m in _BARE_FRAME_RE.finditer(text):
        prev = runs[-1][-1] if runs else None
        # the same run while only the newline separates this frame from the last one
        if prev is not None and text.count("\n", prev.end(), m.start()) == 1 and not text[prev.end():m.start()].strip():
            runs[-1].append(m)
        else:
            runs.append([m])
        if len(runs) > MAX_THREADS:
            break
    lines = _Lines(text)
    rows: list[dict[str, Any]] = []
    for run in runs:
        if len(run) < _MIN_BARE_FRAMES:
            continue
        first = lines.at(run[0].start())
        last = first + len(run) - 1
        if any(a <= first <= b for a, b in taken):
            continue
        frames = [f"{m.group(1)} ({m.group(2)}:{m.group(3)})" for m in run[:MAX_FRAMES]]
        rows.append({
            "line": first, "line_end": last, "kind": "pyspy_stack", "pid": None, "comm": None,
            "tp_rank": None, "rank": None,
            "text": f"a stack without its header in {frames[0]} ← {frames[1]}",
            "attrs": {"thread": None, "thread_id": None, "state": None, "frames": frames, "top_frame": frames[0],
                      "waiting_in": waiting_in(frames), "process": None, "headerless": True},
        })
    return rows


def _vllm_rows(text: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    want_output = False
    lines = _Lines(text)
    prev = ""
    for start in _line_starts_of(text, _VLLM_NEEDLES):
        line = _line_at(text, start)
        i = lines.at(start) - 1
        h = _VLLM_HEAD_RE.search(line[:2000])
        if h and ("Dumping input data" in line or "Dumping input data" in prev):
            rows.append({"line": i + 1, "kind": "engine_input_dump", "text": line[:500],
                         "attrs": {"engine": "vllm", "version": h.group(1)}})
            prev = line[:2000]
            continue
        prev = line[:2000]
        if "Dumping scheduler output for model execution" in line:
            want_output = "SchedulerOutput(" not in line
            if want_output:
                continue
        if "SchedulerOutput(" in line and (want_output or "Dumping scheduler output" in line):
            want_output = False
            lens = [int(x) for x in _NEW_REQ_LEN_RE.findall(line)[:10_000]]
            total = _TOTAL_TOKENS_RE.search(line)
            rows.append({"line": i + 1, "kind": "engine_scheduler_output", "count": len(lens),
                         "tokens": int(total.group(1)) if total else None,
                         "text": (f"vLLM scheduler output at the crash: {len(lens)} new request(s)"
                                  + (f", prompts of {', '.join(map(str, sorted(lens, reverse=True)[:5]))} tokens" if lens else "")
                                  + (f", {total.group(1)} tokens scheduled" if total else "")),
                         "attrs": {"engine": "vllm", "new_request_prompt_lens": lens[:1000],
                                   "total_num_scheduled_tokens": int(total.group(1)) if total else None}})
            continue
        if "SchedulerStats(" in line:
            vals = {k: float(m2.group(1)) for k, rx in _STATS_RE.items() if (m2 := rx.search(line))}
            usage = vals.get("kv_cache_usage", vals.get("gpu_cache_usage"))
            rows.append({"line": i + 1, "kind": "engine_scheduler_stats", "ratio": usage,
                         "count": int(vals["num_running_reqs"]) if "num_running_reqs" in vals else None,
                         "text": line[:500],
                         "attrs": {"engine": "vllm", "num_running_reqs": vals.get("num_running_reqs"),
                                   "num_waiting_reqs": vals.get("num_waiting_reqs"), "kv_cache_usage": usage}})
    return rows


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    """Rows of every stack dump and input dump in the text; lines it did not read are not claimed."""
    rows = _stack_rows(text) if "Thread " in text else []
    if ".py:" in text and len(text) <= _MAX_BARE_TEXT:
        rows += _bare_rows(text, [(int(r["line"]), int(r["line_end"])) for r in rows])
    if any(n in text for n in _NEEDLES[1:4]):
        rows += _vllm_rows(text)
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    read = sum(int(r.get("line_end") or r["line"]) - int(r["line"]) + 1 for r in rows)
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=lines, recognized=read)

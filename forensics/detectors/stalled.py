"""SGL-NCCL-010 / SGL-RUN-003: a server that stopped at a start-up stage, or at its first requests, and went silent.

The stages each rank reaches, in order, and what each waits on are facts (forensics/facts/stages.py). A stage whose
wait never ends leaves no error: the log just stops, until a timeout fires (c10d's 600 s NCCL default,
failure_messages.md §4.4) or forever.

A log that merely ends is not proof of a hang — an excerpt ends too. A stall is measured by one of:

* **silence measured**: the run's last line is at least :data:`STALL_S` before the end of the evidence (the
  bundle's collection time, or a later line of another file) and the server was not seen exiting, or before
  an operator stopped it by hand (SGLang's ``SIGTERM received`` record, sglang_formats.md §7; a Ctrl-C's
  ``KeyboardInterrupt``);
* **the engine saying it waits**: vLLM's ``No available shared memory broadcast block found in 60 seconds``
  (vllm_formats.md §3.8, "the hang signature") repeated :data:`WAIT_REPEATS` times after the last stage;
* **vLLM's front-end waiting on its engine cores**: ``Waiting for L local, R remote core engine proc(s) to start``
  (v1/engine/utils.py ``wait_for_engine_startup``, every 10 s) for :data:`STALL_S` or more after the last stage,
  or its own start-up timeout (vllm_formats.md §3.6, ``Timed out waiting for engine core processes to start``,
  ``VLLM_ENGINE_READY_TIMEOUT_S``); remote cores say the server spans nodes;
* **requests that never finish**: the offline requests' bar (``Processed prompts``, one update per finished
  request, vllm/entrypoints/llm.py) is the run's last line with requests unfinished — the log's end is then the
  state of the run when it was copied, though how long it had been there is not known.

* **the log merely ending** in a start-up stage, with no clock outside it (no collection time, no later line of
  another file), nothing saying the server exited or was stopped: the same hang, unmeasured — or an excerpt cut
  there. It is a finding at low severity and low confidence that names the stage, what it waits on and the command
  that measures the silence. The stages include the ranks' start (the engine's ``server_args=`` line with no stage
  after it) and, when NCCL's INFO lines are all the input holds, the communicator's set-up (``Init START`` without
  ``Init COMPLETE``).

A server that reached ready (or served a batch) and then is quiet is idle, not hung: it never fires here; nor
does a node other than the head past graph capture (its ready lines are node 0's, or the head's API server's under
vLLM's ``--headless``). With several nodes, multihost.py puts each node's furthest stage in the finding.
With more than one rank or node the stage waits on the others (SGL-NCCL-010, ``nccl_timeout``); one rank alone
waits on its storage or its own work (SGL-RUN-003, ``other``). A rank that said its custom all-reduce is off because
its process group spans across nodes (vllm_formats.md §3.8; SGLang's copy of the same code) says the server has
ranks on several nodes, whatever else the input leaves out. Over several nodes the ranks' set-up also connects the
groups' broadcast queues (ZeroMQ, vllm vllm/distributed/device_communicators/shm_broadcast.py (0.5-0.11) and
sglang python/sglang/srt/distributed/device_communicators/shm_broadcast.py (0.4-0.5), ``wait_until_ready``) to
the address each node advertises (VLLM_HOST_IP / SGLANG_HOST_IP, else the one auto-detected): an address the other
nodes cannot reach hangs there with no error.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl

from forensics.facts.launch import launch_rows, server_config
from forensics.facts.lifecycle import end_events, group_snapshots, is_sglang_process
from forensics.facts.rows import Row, attrs, rank_of, rows, to_number
from forensics.facts.runs import iter_runs
from forensics.facts.stages import (
    ENGINE_CORES,
    LAUNCHED,
    POST_LOAD,
    STAGES,
    furthest,
    launched,
    ranks_behind,
    served,
    spans_nodes_said,
    stage_of,
)
from forensics.facts.stages import REQUESTS as _REQUESTS
from forensics.facts.versions import sglang_version
from forensics.facts.vllm import settings as vllm_settings
from forensics.facts.vllm import vllm_runs
from forensics.model import Finding, FlagChange, Timeline, iso_z
from parsers.failures import store_poll_warning

from ._common import make_finding, tag_run
from .nccl_timeout import channel_transports, transport_test

#: silence past c10d's default NCCL timeout (600 s) is past every start-up wait the engines time out on their own
STALL_S = 600.0
#: vLLM repeats its shared-memory wait every 60 s; five in a row is the documented hang signature (§3.8 rule 4)
WAIT_REPEATS = 5

_RANKS = "the other ranks"
#: rows that say the run failed: other rules explain those
_FAILED = ("failure", "scheduler_exception", "exception", "cuda_oom", "cuda_error_oom", "rank_dead", "engine_dead",
           "init_failed", "nccl_watchdog", "watchdog_timeout", "ranks_not_loaded", "kv_cache_too_small", "kv_no_room",
           "not_enough_memory", "weights_no_kv_room", "cuda_graph_failed", "sigquit", "subprocess_crashed",
           "nccl_error", "rpc_timeout", "gpu_memory_short", "memory_imbalance", "hicache_insufficient", "sigterm")


def _order(row: Row) -> tuple:
    return (row.get("file") or "", row.get("line") or 0)


_stage_of = stage_of


def _evidence_end(tl: Timeline) -> tuple[datetime | None, str]:
    """The latest moment the evidence speaks for: the collection, else the last stamped line of any file."""
    ev = tl.events
    last = ev.get_column("ts").drop_nulls().max() if not ev.is_empty() and "ts" in ev.columns else None
    collected = tl.facts.collected_at
    if collected is not None and (last is None or collected >= last):  # type: ignore[operator]
        return collected, f"the collection at {iso_z(collected)}"
    if isinstance(last, datetime):
        clock = [r for r in rows(tl, "clock") if r.get("ts") == last]
        if clock:  # what ``date`` printed beside the log: the moment the operator looked
            return last, f"the host's clock at {iso_z(last)} (`date`, {clock[0].get('file')}:{clock[0].get('line')})"
        return last, f"the input's last stamped line at {iso_z(last)}"
    return None, ""


_YEARLESS = re.compile(r"^(\d\d)-?(\d\d) (\d\d):(\d\d):(\d\d)")


def _stamp_of(row: Row, tl: Timeline) -> datetime | None:
    """A row's moment in UTC: its resolved stamp, else its year-less one (vLLM ``MM-DD HH:MM:SS``, c10d ``MMDD …``)
    in the collection's year on the host's stated clock (None when the bundle does not state them)."""
    ts = row.get("ts")
    if isinstance(ts, datetime):
        return ts
    collected, offset = tl.facts.collected_at, tl.facts.utc_offset_s
    m = _YEARLESS.match(str(attrs(row).get("stamp") or ""))
    if m is None:
        return None
    if collected is None or offset is None:
        return _on_pasted_clock(m, tl)
    try:
        local = datetime(collected.year, *(int(g) for g in m.groups()))
    except ValueError:
        return None
    at = (local - timedelta(seconds=offset)).replace(tzinfo=UTC)
    return at.replace(year=at.year - 1) if at > collected + timedelta(days=1) else at  # the stamp was last year's


def _on_pasted_clock(m: re.Match[str], tl: Timeline) -> datetime | None:
    """A year-less stamp read against the last ``date`` pasted beside the log: the year is the clock's (the one
    before when the stamp would fall after it), and the stamp is as far before the clock's moment as it is before
    the clock's wall time — the same host's un-zoned wall clock, which its logs print (``date -u`` beside a log in
    local time would be off by the zone; the finding says which clock measured)."""
    clocks = [r for r in rows(tl, "clock") if isinstance(r.get("ts"), datetime) and attrs(r).get("wall")]
    if not clocks:
        return None
    clock = max(clocks, key=lambda r: r["ts"])
    try:
        wall = datetime.fromisoformat(str(attrs(clock)["wall"]))
        local = datetime(wall.year, *(int(g) for g in m.groups()))
    except ValueError:
        return None
    if local > wall + timedelta(days=1):
        local = local.replace(year=local.year - 1)
    return clock["ts"] - (wall - local)


def _server_gone(tl: Timeline) -> bool:
    """A ps snapshot without the engine: the server had exited, so its silence is not a hang."""
    snaps = group_snapshots(rows(tl, "process"))
    return bool(snaps) and not any(is_sglang_process(r.get("comm"), attrs(r).get("args"))
                                   or "vllm" in str(attrs(r).get("args") or r.get("comm") or "").lower()
                                   for snap in snaps for r in snap)


def _ranks_of(tl: Timeline, run: list[Row]) -> int:
    """How many ranks the server has: its parallel sizes, the ranks its lines name, NCCL's ``nranks``."""
    cfg = server_config(tl, run)
    world = 1
    for key in ("tp_size", "pp_size", "tensor_parallel_size", "pipeline_parallel_size"):
        world *= int(to_number(cfg.get(key)) or 1)
    if any(r.get("source") == "vllm" for r in run):
        s = vllm_settings(tl, run)
        world = max(world, int((s.num("tensor_parallel_size") or 1) * (s.num("pipeline_parallel_size") or 1)))
    world = max(world, int(to_number(cfg.get("nnodes")) or 1))
    named = {x for x in (rank_of(r) for r in run) if x is not None}
    # a line of rank TPk says the TP group has at least k+1 ranks (sglang_formats.md §1, the rank prefix), even when
    # the excerpt kept only that rank's lines
    named |= set(range(max(named) + 1)) if named else set()
    nranks = [int(attrs(r)["nranks"]) for r in run if r.get("kind") == "nccl_info" and attrs(r).get("nranks")]
    # engine cores on other nodes that the front-end waits for: several nodes (this one's and theirs), so several ranks
    cores = [max(2, int(attrs(r).get("local") or 0) + int(attrs(r).get("remote") or 0)) for r in run
             if r.get("kind") == "engine_startup_wait" and attrs(r).get("remote")]
    return max([world, len(named), *nranks, *cores])


def _other_node(tl: Timeline, run: list[Row]) -> bool:
    """A node of a multi-node server other than node rank 0: its ranks run schedulers only — the HTTP server, the
    warm-up request and the ready line are node 0's (sglang_formats.md §3, the start-up order's TP0-only lines)."""
    cfg = server_config(tl, run)
    if (cfg.num("nnodes") or 1) > 1 and (cfg.num("node_rank") or 0) > 0:
        return True
    # vLLM's ``--headless`` node runs engine cores only; the API server and its ready lines are the head node's
    return any(r.get("source") == "vllm" for r in run) and \
        str(vllm_settings(tl, run).text("headless")).lower() in ("true", "1")


def _world_stated(tl: Timeline, run: list[Row]) -> bool:
    """The input states the server's size: its parallel sizes, or ranks its lines name."""
    cfg = server_config(tl, run)
    if any(cfg.get(k) is not None for k in ("tp_size", "tensor_parallel_size")):
        return True
    if any(r.get("source") == "vllm" for r in run) and vllm_settings(tl, run).num("tensor_parallel_size") is not None:
        return True
    return any(rank_of(r) is not None for r in run)


def _stopped_by_hand(r: Row) -> bool:
    """SIGTERM or Ctrl-C: someone stopped the server (and what its processes print as they go)."""
    return r.get("kind") in ("sigterm", "sigquit") or "KeyboardInterrupt" in (r.get("text") or "")


#: vLLM's front-end giving up on its engine cores at start-up (vllm_formats.md §3.6, core_client / v1/engine/utils.py:
#: ``Timed out waiting for engines to send initial message on input socket.`` 0.9.2-0.16, ``Timed out waiting for
#: engine core processes to start. … Waited {N}s (configured by VLLM_ENGINE_READY_TIMEOUT_S)`` 0.17+, 600 s): the
#: engine's own timeout on a start-up that never finished — the stall, not a failure of its own
_START_TIMEOUT = re.compile(r"Timed out waiting for engines? ?(?:core processes to start|to send ?initial message)")
_WAITED = re.compile(r"Waited (\d+)s")
#: the front-end's start-up poll period (v1/engine/utils.py ``STARTUP_POLL_PERIOD_MS``): each wait line is 10 s
STARTUP_POLL_S = 10.0


def _start_timeout(row: Row) -> bool:
    return bool(_START_TIMEOUT.search(str(attrs(row).get("reason") or "") + " " + (row.get("text") or "")))


def _span_s(first: Row, last: Row, tl: Timeline) -> float | None:
    """Seconds from one row to a later one of the same log by the engine's own stamps (year-less ones compare within
    one year: only their difference is used), else by their resolved times (an envelope's)."""
    ma, mb = (_YEARLESS.match(str(attrs(r).get("stamp") or "")) for r in (first, last))
    if ma is not None and mb is not None:
        try:
            da, db = (datetime(2001, *(int(g) for g in m.groups())) for m in (ma, mb))
        except ValueError:
            return None
        return (db - da).total_seconds() if db >= da else None
    a, b = _stamp_of(first, tl), _stamp_of(last, tl)
    return (b - a).total_seconds() if a is not None and b is not None else None


def _stall(tl: Timeline, run: list[Row]) -> dict[str, Any] | None:
    stops = [r for r in run if _stopped_by_hand(r)]
    timeouts = [r for r in run if r.get("kind") in _FAILED and _start_timeout(r)]
    # c10d's store client polling (parsers/failures.py ``store_poll_warning``): a rank waiting, no failure of its own
    failed = [r for r in run if r.get("kind") in _FAILED and not store_poll_warning(r.get("text") or "")]
    if served(run) or any(r not in stops and r not in timeouts for r in failed) or \
            (stops and not any(r.get("kind") == "sigterm" or "KeyboardInterrupt" in (r.get("text") or "")
                               for r in stops)):
        return None
    core_waits = [r for r in run if r.get("kind") == "engine_startup_wait"]
    staged = [r for r in run if _stage_of(r) is not None]
    start = launched(run)
    if not staged and start is None and not core_waits:
        mine = {_order(r) for r in run}
        started = [r for r in _ranks_started(tl, run) if _order(r) not in mine]
        if started or (run and all(_is_chatter(r) for r in run)):
            started = started or run  # the ranks are up and logging, and not one logged its first stage
            run = sorted([*run, *started], key=_order)
            start = started[-1]
    if not staged and not (core_waits or timeouts or start):
        return None
    if staged:
        reached = furthest(staged, key=_order)
        assert reached is not None
        last_row, order, stage, waits = reached.row, reached.order, reached.stage, reached.waits_on
    elif core_waits or timeouts:  # the front-end's lines alone: the engine cores' stages are not in the input
        last_row = min(core_waits or timeouts, key=_order)
        order, stage, waits = ENGINE_CORES
    else:  # launched, and not one rank logged its first stage
        last_row, (order, stage, waits) = start, LAUNCHED
    if order >= STAGES["cuda_graph_end"][0] and _other_node(tl, run):
        return None  # a node other than the head's is up once its graphs are captured: the rest is node 0's to log
    tail = max(run, key=_order)
    waits_rows = [r for r in run if r.get("kind") == "shm_wait" and _order(r) > _order(last_row)]
    core_after = [r for r in core_waits if _order(r) >= _order(last_row)]
    # a kill typed in a transcript or the kernel's OOM kill of the server also ended the wait (what each proves is
    # another rule's; here it only bounds the silence, and without a stamp it cannot be measured)
    stops += [e for e in end_events(tl) if e.get("kind") in ("command", "oom_kill") and e not in stops]
    first_stop = min(stops, key=lambda r: (_stamp_of(r, tl) is None,
                                            _stamp_of(r, tl) or datetime.min.replace(tzinfo=UTC), _order(r))) \
        if stops else None
    stop_at = _stamp_of(first_stop, tl) if first_stop is not None else None
    stamped = [t for r in run if r not in stops and (t := _stamp_of(r, tl)) is not None
               and (first_stop is None or (stop_at is not None and t <= stop_at)
                    or (stop_at is None and r.get("file") == first_stop.get("file") and _order(r) < _order(first_stop)))]
    end, end_words = _evidence_end(tl)
    if first_stop is not None:  # stopped: the silence ends where someone (or the kernel) ended the wait
        end = _stamp_of(first_stop, tl)
        end_words = (f"the kernel killed it ({first_stop.get('file')}:{first_stop.get('line')})"
                     if first_stop.get("kind") == "oom_kill" else
                     f"it was stopped by hand ({first_stop.get('file')}:{first_stop.get('line')})")
    silent_s = (end - max(stamped)).total_seconds() if end is not None and stamped else None
    out: dict[str, Any] = {"run": run, "row": last_row, "stage": stage, "waits_on": waits, "order": order, "silent_s": silent_s,
                           "end_words": end_words, "waits": waits_rows or core_after or timeouts}
    # how long the front-end waited on its engine cores after the last stage: their stamps, else 10 s a line
    core_s = (_span_s(last_row, core_after[-1], tl) if core_after and staged else None)
    if core_after and core_s is None:
        core_s = len(core_after) * STARTUP_POLL_S
    waited = [int(m.group(1)) for r in timeouts if (m := _WAITED.search(r.get("text") or ""))]
    if timeouts:
        out["how"], out["waited_s"] = "engine_timeout", float(max(waited)) if waited else None
    elif core_s is not None and core_s >= STALL_S:
        out["how"], out["waited_s"] = "core_waits", core_s
    elif silent_s is not None and silent_s >= STALL_S and first_stop is None and not _server_gone(tl) or \
            silent_s is not None and silent_s >= STALL_S and first_stop is not None and end is not None:
        out["how"] = "silence"
    elif len(waits_rows) >= WAIT_REPEATS:
        out["how"] = "engine_waits"
    elif order == _REQUESTS[0] and tail is last_row and \
            (attrs(last_row).get("steps_done") or 0) < (attrs(last_row).get("steps_total") or 0):
        out["how"] = "requests_unfinished"
    elif not _measured(tl, run, max(stamped) if stamped else None) and not _log_continues(tl, run) and \
            first_stop is None and not _server_gone(tl) and order < _REQUESTS[0]:
        # the log just ends in a start-up stage: a hang there, or an excerpt cut there — the input cannot say which
        out["how"], out["silent_s"] = "unmeasured", None
    else:
        return None
    return out


def silence_measured(tl: Timeline, run: list[Row]) -> bool:
    """Whether this run's start-up stall is measured (a timeout, the engine's own waits, silence up to the end of
    the evidence), not merely a log that ends: what a rule that explains the stall needs to stand as its root."""
    st = _stall(tl, run)
    return st is not None and st.get("how") not in (None, "unmeasured")


#: at most this many of the ranks' own lines stand for their start (the last ones of each file say where they stopped)
STARTED_ROWS = 64


def _ranks_started(tl: Timeline, run: list[Row]) -> list[Row]:
    """SGLang's rank-prefixed lines of the run's log that mark no stage (sglang_formats.md §1, the ``[time TPn]``
    prefix; §3: each rank's first stage line is ``Init torch distributed begin``): a rank that logs is running, and
    one that logged no stage yet is still in its own start-up (the model's config, the tokenizer), before the
    rendezvous. Empty when the run's rows come from no log of their own."""
    files = sorted({f for r in run if (f := r.get("file"))})
    return _chatter(tl, files) if files else []


def _chatter(tl: Timeline, files: list[str] | None = None) -> list[Row]:
    """The last :data:`STARTED_ROWS` rank-prefixed SGLang lines that mark nothing (of these files, or of all)."""
    ev = tl.events
    if ev.is_empty() or not {"kind", "source", "rank", "file", "line"} <= set(ev.columns):
        return []
    keep = (pl.col("kind") == "log") & (pl.col("source") == "sglang") & pl.col("rank").is_not_null()
    if files is not None:
        keep &= pl.col("file").is_in(files)
    return list(ev.filter(keep).sort("file", "line").tail(STARTED_ROWS).iter_rows(named=True))


def _is_chatter(row: Row) -> bool:
    return row.get("kind") == "log" and row.get("source") == "sglang" and row.get("rank") is not None


def _measured(tl: Timeline, run: list[Row], last: datetime | None) -> bool:
    """The silence after ``last`` (the run's last stamp) was measured by a clock outside its log: the collection's
    time, or a later stamped line of another file. The log's own later lines measure nothing: an excerpt ends too."""
    if tl.facts.collected_at is not None:
        return True
    if last is None or tl.events.is_empty() or "ts" not in tl.events.columns:
        return False
    files = {f for f in {r.get("file") for r in run} if f}
    for cov in tl.coverage:  # a rotation set is one log: its members' lines are the run's own, not another clock
        members = set(cov.get("members") or ())
        if members & files:
            files |= members | {cov.get("file")}
    ev = tl.events.filter(pl.col("ts").is_not_null() & ~pl.col("file").is_in(sorted(f for f in files if f)))
    later = ev.get_column("ts").max() if not ev.is_empty() else None
    return isinstance(later, datetime) and later > last


def _log_continues(tl: Timeline, run: list[Row]) -> bool:
    """A later member of the run's rotation set (coverage's ``members``, oldest first) holds rows: the log goes on
    after the run's last line, so its end is not where the log stops."""
    files = {r.get("file") for r in run}
    for cov in tl.coverage:
        members = list(cov.get("members") or ())
        mine = [i for i, m in enumerate(members) if m in files]
        if mine:
            later = set(members[max(mine) + 1:])
            return bool(later) and not tl.events.filter(pl.col("file").is_in(sorted(later))).is_empty()
    return False


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min" if seconds < 7200 else \
        f"{seconds / 3600:.1f} h"


def _capture_left_empty(run: list[Row], st: dict[str, Any]) -> list[Row]:
    """The ranks whose custom all-reduce registered no graph address in a capture that never ended.

    SGLang's custom all-reduce wraps the whole capture loop (sglang python/sglang/srt/distributed/
    device_communicators/custom_all_reduce.py (0.4-0.5) ``capture()``: ``try: yield`` / ``finally:
    register_graph_buffers()``), which logs ``Registering N cuda graph addresses`` and then broadcasts every rank's
    handles over the group. Zero addresses with no ``Capture cuda graph end`` is a loop left before its first graph
    was captured: an exception on those ranks, held back while the finally-block's broadcast waits on ranks still
    capturing.
    """
    if st["order"] != STAGES["cuda_graph_begin"][0] or any(r.get("kind") == "cuda_graph_end" for r in run):
        return []
    begun = [r for r in run if r.get("kind") == "cuda_graph_begin"]
    first = min(begun, key=_order) if begun else None
    return [r for r in run if r.get("kind") == "notice" and attrs(r).get("message_id") == "cuda_graph_registered"
            and attrs(r).get("addresses") == 0 and (first is None or _order(r) > _order(first))]


def _finding(tl: Timeline, run: list[Row], st: dict[str, Any]) -> Finding:
    run = st.get("run") or run  # with the ranks' own lines when they alone say the ranks started
    world = _ranks_of(tl, run)
    spans = spans_nodes_said(run)
    nodes_only = spans is not None and world < 2  # several nodes said, their ranks not counted
    world = max(world, 2) if spans is not None else world
    rule = "SGL-NCCL-010" if world > 1 else "SGL-RUN-003"
    row = st["row"]
    lagging = ranks_behind(run)
    behind = sorted({x for v in lagging.values() if (x := rank_of(v.row)) is not None})
    waits = st["waits_on"] if world > 1 else st["waits_on"].replace(f"{_RANKS}' collectives", "its own work") \
        .replace(f"{_RANKS} finishing their load", "its own set-up")
    if st["order"] == LAUNCHED[0] and world == 1:
        waits = "its own start-up (the scheduler process spawning, the model's config and tokenizer)"
    addr = server_config(tl, run).get("dist_init_addr")
    if addr and st["order"] <= STAGES["dist_init_end"][0]:
        waits = waits.replace("(--dist-init-addr, the TCPStore", f"(--dist-init-addr {addr}, the TCPStore")
    if st["how"] == "silence":
        how = f"its last stamped line is {_duration(st['silent_s'])} before {st['end_words']}" + \
            ("" if "by hand" in st["end_words"] else ", and nothing says it exited")
    elif st["how"] == "engine_timeout":
        how = ("vLLM's front-end gave up waiting for its engine core(s) to start"
               + (f" after {_duration(st['waited_s'])} (VLLM_ENGINE_READY_TIMEOUT_S)" if st.get("waited_s") else ""))
    elif st["how"] == "core_waits":
        how = (f"the front-end logged for {_duration(st['waited_s'])} after it that its engine core(s) had not "
               "started, and no later stage came")
    elif st["how"] == "engine_waits":
        how = (f"the engine logged {len(st['waits'])} times that it found no shared-memory broadcast block: its "
               "workers stopped answering")
    elif st["how"] == "unmeasured":
        how = ("its log ends there with no error, no exit and no ready line, and how long it had been silent is not "
               "in the input (no snapshot's time, no later line of another file)")
    else:
        a = attrs(row)
        how = (f"the offline requests' bar is its last line at {a.get('steps_done')} of {a.get('steps_total')} "
               "finished: no request completed after it")
    opening = ("The server came up but its first requests never finished" if st["order"] == _REQUESTS[0]
               else f"The log ends at {st['stage']}, before the server said it was ready" if st["how"] == "unmeasured"
               else f"The server stopped at {st['stage']} and never became ready")
    size = f"{world} rank{'s' if world > 1 else ''}" if world > 1 or _world_stated(tl, run) else \
        "its parallel size not in the input"
    if nodes_only:
        size = "ranks on several nodes: its custom all-reduce said the process group spans across nodes"
    summary = f"{opening} ({size}): {how}. That stage waits on {waits}."
    pool = row.get("bytes") if row.get("kind") == "hicache_alloc" else None
    if isinstance(pool, int | float) and pool > 0:
        # the host pool's size is per rank (sglang_formats.md §4, --hicache-size): every rank on the host pins its own
        summary += (f" Each rank allocates its own host pool: {world} × {pool / 1e9:.2f} GB = "
                    f"{world * pool / 1e9:.2f} GB of pinned host memory on the ranks' host"
                    + (" (the ranks per host are not in the input: all counted)" if world > 1 else "")
                    + "; against the host's free memory (`free -g`, the container's limit) that decides whether "
                    "pinning it can finish.")
    if st["how"] == "unmeasured":
        summary += (" If the server is still running with no new line, it hangs at this stage; if the excerpt was "
                    "only cut here, nothing failed. How long it has been silent decides: more than 600 s (c10d's "
                    "default NCCL timeout) with the " + ("ranks" if world > 1 else "process") + " alive and no new "
                    "line is a hang.")
    for label, v in lagging.items():
        summary += f" {label} got only as far as {v.stage}: it is the one the others wait on."
    empty = _capture_left_empty(run, st)
    if empty:
        who = sorted({x for r in empty if (x := rank_of(r)) is not None})
        summary += (f" {len(empty)} rank{'s' if len(empty) > 1 else ''} logged 'Registering 0 cuda graph addresses'"
                    + (f" (rank{'s' if len(who) > 1 else ''} {', '.join(map(str, who))})" if who else "")
                    + " with no capture end: the custom all-reduce's capture context was left before a single graph "
                    "was captured — an exception in the first captured batch, which its registration broadcast (a "
                    "collective over every rank) holds back while the other ranks are still capturing.")
    polls = [r for r in st["waits"] if r.get("kind") == "engine_startup_wait"]
    remote = int(attrs(polls[-1]).get("remote") or 0) if polls else 0
    if remote and attrs(polls[-1]).get("until") == "connect":
        summary += (f" The front-end's last poll still waits for {remote} engine core(s) on other nodes to connect at "
                    "all: those nodes never reached its handshake (--data-parallel-address and --data-parallel-rpc-port "
                    "on every node, the network between them, the headless nodes not started).")
    elif remote:
        summary += (f" The front-end's last poll still waits for {remote} engine core(s) on other nodes: their "
                    "nodes' logs say how far they got (loading from slower storage, a failure, never started).")
    reasons = []
    if st["how"] == "requests_unfinished":
        reasons.append("how long the requests had been waiting is not in the input: a later snapshot (the "
                       "collection's time, nvidia-smi or py-spy while it hangs) would say")
    if st["how"] == "unmeasured":
        reasons.append("the log ends at this stage; whether the server hung there or the excerpt was cut there is "
                       "not in the input — the time it had been silent decides")
    if st["how"] == "silence" and not tl.facts.collected_at:
        reasons.append("the silence is measured against a `date` pasted beside the log, assumed taken on the server's "
                       "host on the clock its log stamps (a `date -u` where the log is in local time would be off by "
                       "the zone)" if "(`date`," in str(st.get("end_words")) else
                       "the silence is measured against another file's later line, not a snapshot of the host")
    flags, actions = [], []
    vllm = any(r.get("source") == "vllm" for r in run)
    if st["how"] == "unmeasured":  # the deciding fact first
        actions.append("Measure the silence on the host: `date -u` against the stamp of the log's last line "
                       f"(`tail -n 1 <log>`), and `ps -eo pid,etime,args | grep -i {'vllm' if vllm else 'sglang'}` "
                       "for the ranks still alive; "
                       "or `forensics collect` while it is silent, which records the snapshot's time.")
    if world > 1 and st["order"] >= STAGES["memory_profile"][0] and row.get("kind") != "hicache_alloc" and \
            st["how"] != "unmeasured":  # a flag needs more than an excerpt that ends
        cfg = server_config(tl, run)
        flags = transport_test(tl, cfg)
        if flags and channel_transports(tl) == {"SHM"}:
            summary += (" Every rank is on one node and none failed, and NCCL's channels already go through shared "
                        "memory (NCCL did not use P2P between these GPUs): the engine's custom all-reduce, which "
                        "still uses CUDA peer-to-peer, is the suspect (PCIe P2P under ACS or an IOMMU).")
        elif flags:
            summary += (" Every rank is on one node and none failed: the GPUs' peer-to-peer path (PCIe P2P under ACS "
                        "or an IOMMU) is the suspect.")
    v6 = _ipv6_rendezvous(tl, addr) if addr and st["order"] <= STAGES["dist_init_end"][0] else None
    if v6 is not None:
        summary += " " + v6[0]
        flags = [*flags, v6[1]]
    if world > 1:
        actions.append("`py-spy dump --pid <pid>` of every rank while it hangs: the rank in a different frame (not "
                       "in the collective, or still loading) is the one the others wait on.")
        actions.append("Rerun with NCCL_DEBUG=INFO: the last NCCL line of each rank says how far the communicator "
                       "got; on one node try NCCL_P2P_DISABLE=1 and check ACS/IOMMU (`lspci -vvv | grep ACSCtl`).")
    if STAGES["weight_load_begin"][0] <= st["order"] <= STAGES["weight_load_end"][0]:
        # the loader reads the shards through the page cache, and a quantised model's post-load step may stage them in
        # host memory too: both are charged to the container's cgroup, whose limit stalls the load by reclaim and swap
        actions.append("Check host RAM on the loading node while it is stuck: `free -g`, and the container's "
                       "`cat /sys/fs/cgroup/memory.current /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory.swap.current`"
                       " (cgroup v1: memory.usage_in_bytes, memory.limit_in_bytes): usage at the limit, or swap "
                       "growing under `vmstat 1`, is a load starved of memory, not of storage.")
    # a rank joining a group's broadcast queue is past the rendezvous and before the load: storage is not its wait
    if st["order"] <= STAGES["weight_load_end"][0] and st["order"] not in (POST_LOAD[0], STAGES["broadcast_queue"][0]):
        actions.append("Time a read of the weights from the model path on every node (`dd`/`cat` a shard to "
                       "/dev/null): slow or stalled storage holds the load"
                       + (", and the ranks that finished wait for it at the barrier." if world > 1 else "."))
    if st["order"] == POST_LOAD[0]:
        actions.append("The shards were read; the step after them converts the weights for the quantisation's kernels. "
                       "`py-spy dump --pid <pid>` of a worker says whether it is in process_weights_after_loading "
                       "(GPU busy in `nvidia-smi`: slow, not hung) or waiting on host memory.")
    if empty:
        actions.append("Rerun once with --disable-custom-all-reduce: the capture's own exception then surfaces instead "
                       "of the registration's wait (an out-of-memory in the first, largest batch is the common one: "
                       "check `avail mem` at `Capture cuda graph begin`).")
    if world > 1 and STAGES["cuda_graph_begin"][0] <= st["order"] < STAGES["cuda_graph_end"][0] and \
            st["stage"] == STAGES["cuda_graph_begin"][1]:
        # a capture replays each batch's forward with its collectives: one that never returns hangs the capture
        # (sglang_formats.md §8 --disable-cuda-graph; vllm_formats.md §2.2 enforce_eager): eager mode isolates it
        eager = "--enforce-eager" if vllm else "--disable-cuda-graph"
        actions.append(f"Isolate the capture: restart once with {eager}. If it then comes up and serves, the hang is a "
                       "collective inside capture (the custom all-reduce's P2P path first: "
                       "--disable-custom-all-reduce); if it hangs at the first requests "
                       "instead, the collective itself is stuck, capture or not.")
    # up to the groups' broadcast queues, whose readers on other nodes connect to the writer's advertised address
    multinode_sglang = not vllm and st["order"] <= STAGES["broadcast_queue"][0] and spans is None and \
        (server_config(tl, run).num("nnodes") or 1) > 1
    reach = ("`nc -zv <dist-init-addr> <port>` from every node, and the same --dist-init-addr and --nnodes and a "
             "distinct --node-rank on each")
    if multinode_sglang:
        # SGLang's ranks bind their groups to the address each node advertises (SGLANG_HOST_IP, else auto-detected:
        # sglang python/sglang/srt/distributed/device_communicators/shm_broadcast.py (0.4-0.5) ``wait_until_ready``)
        actions.append(f"Across nodes the rendezvous waits on node rank 0's --dist-init-addr and on every other node "
                       f"joining it: {reach}, and SGLANG_HOST_IP on each node set to the address the others reach it "
                       "on (NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME naming that network).")
    elif st["order"] <= STAGES["dist_init_begin"][0]:
        actions.append(f"Check the rendezvous: {reach}.")
    if spans is not None and st["order"] <= STAGES["broadcast_queue"][0]:
        host_ip = _host_ip_flag(tl, vllm)
        if host_ip is not None:
            flags = [*flags, host_ip]
        actions.append("The ranks were setting up their groups over several nodes: each node must advertise the "
                       "address the others reach it on (SGLANG_HOST_IP / VLLM_HOST_IP, the same network NCCL_SOCKET_IFNAME "
                       "and GLOO_SOCKET_IFNAME name); an auto-detected address on another interface leaves the groups' "
                       "message queues waiting with no error.")
    actions.append("Collect while it hangs (`forensics collect`): the snapshot's time against the last line measures "
                   "the silence, and nvidia-smi shows whether the GPUs spin in a kernel.")
    finding = make_finding(
        rule,
        summary=summary,
        evidence=[row, *(v.row for v in lagging.values()), *st["waits"][:3], *empty[:2],
                  *([spans] if spans not in (None, row) else [])],
        confidence="low" if st["how"] in ("requests_unfinished", "unmeasured") else "medium",
        confidence_reason="; ".join(reasons) or "the log says where the server stopped, not why; a stack of each "
                                                "rank while it hangs would",
        severity="medium" if st["how"] == "requests_unfinished" else "low" if st["how"] == "unmeasured" else None,
        ranks=behind,
        figures={"stage": st["stage"], "waits_on": waits, "silent_s": round(st["silent_s"], 1)
                 if st["silent_s"] is not None else None, "evidence_of_stall": st["how"], "ranks": world,
                 "lagging_ranks": sorted(lagging) or None, "last_line": f"{row.get('file')}:{row.get('line')}"},
        flags=flags,
        actions=actions,
    )
    if st["how"] == "unmeasured":  # the catalog's title says it stopped; here only the log's end is known
        finding.title = "A server's log ends at a start-up stage with no error; whether it hung there is not measured"
    return finding


#: the variables each engine reads for the address a node advertises to the others, its own first (sglang
#: python/sglang/srt/utils/common.py::get_local_ip_auto (0.5.x) reads SGLANG_HOST_IP, then HOST_IP; vllm
#: vllm/envs.py (0.5-0.11) VLLM_HOST_IP)
_HOST_IP_VARS = {"sglang": ("SGLANG_HOST_IP", "HOST_IP"), "vllm": ("VLLM_HOST_IP",)}


def _host_ip_flag(tl: Timeline, vllm: bool) -> FlagChange | None:
    """The advertised address to pin when ranks spanning nodes stop while connecting their groups.

    Past the custom all-reduce's spans-nodes line the group's broadcast queue binds the auto-detected address
    (shm_broadcast.py ``MessageQueue``: ``get_local_ip_auto`` / ``get_ip`` when a reader is remote) and waits for the
    remote readers; on a multi-homed node that address may sit on a network the peers do not share, and the wait
    has no timeout or error. None when the launch already sets one of the engine's variables.
    """
    env: dict[str, str] = {}
    for r in launch_rows(tl):
        env.update({str(k): str(v) for k, v in (attrs(r).get("env") or {}).items()})
    names = _HOST_IP_VARS["vllm" if vllm else "sglang"]
    if any(env.get(n) for n in names):
        return None
    return FlagChange(names[0], None, "<this node's inter-node address>",
                      "unset in the input: over several nodes each group's broadcast queue binds the auto-detected "
                      "address, which on a node with several interfaces may be one the others cannot reach")


#: SGLang before 0.4.4 split --dist-init-addr on ":" into host and port (sglang
#: python/sglang/srt/server_args.py::PortArgs.init_new (0.4.1-0.4.3), and the tcp:// init URL of the process
#: groups built from it): an IPv6 literal, bracketed or not, gives no host the other nodes can reach, and the
#: ranks wait at the rendezvous with no error. 0.4.4 parses the bracketed form.
IPV6_DIST_INIT_FROM = (0, 4, 4)
#: the bracketed host of RFC 3986 (an IPv6 literal, whatever a redaction put inside), or bare hex groups with two colons
_IPV6_LITERAL = re.compile(r"^\[[^\]\s]{1,64}\](?::\d+)?$|^[0-9A-Fa-f]*:[0-9A-Fa-f]*:[0-9A-Fa-f:.]*$")


def _ipv6_rendezvous(tl: Timeline, addr: object) -> tuple[str, FlagChange] | None:
    """An IPv6 literal as --dist-init-addr on a release that cannot parse one: the sentence and the flag."""
    text = str(addr).strip()
    if len(text) > 200 or not _IPV6_LITERAL.match(text):
        return None
    version, _where = sglang_version(tl)
    if version is not None and version >= IPV6_DIST_INIT_FROM:
        return None
    port = text.rsplit("]:", 1)[1] if "]:" in text else "<port>"
    release = "this release" if version else "the release is not in the input; SGLang"
    sentence = (f"--dist-init-addr {text} is an IPv6 literal: {release} before 0.4.4 splits the address on \":\" "
                "into host and port, so the ranks of the other nodes have no address to reach node rank 0 at and "
                "wait at the rendezvous with no error.")
    flag = FlagChange("--dist-init-addr", text, f"<node rank 0's IPv4 address or hostname>:{port}",
                      "an IPv4 address or a hostname every node resolves; or SGLang 0.4.4+, which parses the "
                      "bracketed IPv6 form")
    return sentence, flag


def _relaunched(run: list[Row], later_runs: dict[str, int]) -> bool:
    """A later run starts in the same log: this one ended (it was stopped and the server launched again), so its
    end is not a silence."""
    return any(int(r.get("run") or 0) < later_runs.get(r.get("file") or "", -1) for r in run[:1])


def detect(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    seen: set[tuple] = set()
    runs = iter_runs(tl)
    vruns = vllm_runs(tl)
    last_run: dict[str, int] = {}
    for r in [row for _ref, rs in runs for row in rs[:1]] + [rs[0] for rs in vruns if rs]:
        f = r.get("file") or ""
        last_run[f] = max(last_run.get(f, 0), int(r.get("run") or 0))
    node_stalls: list[tuple[list[Row], dict[str, Any], Finding]] = []
    for ref, run in runs:
        files = {r.get("file") for r in run}
        # lines the run's rows leave out: the HTTP server's, requests served, NCCL's
        extra = [r for r in rows(tl, "uvicorn", "http_access", "nccl_info")
                 if r.get("file") in files and int(r.get("run") or 0) == ref.key[1]]
        seen |= {_order(r) for r in run} | {_order(r) for r in extra}
        if served(run):  # more lines cannot unserve it: no stall, and a big run's rows are not sorted for nothing
            continue
        run = sorted([*run, *extra], key=_order)
        st = None if _relaunched(run, last_run) else _stall(tl, run)
        if st is not None:
            node_stalls.append((run, st, tag_run(_finding(tl, run, st), ref)))
    out.extend(_one_per_server(tl, node_stalls))
    for run in vruns:
        if any(_order(r) in seen for r in run) or _relaunched(run, last_run):
            continue
        st = _stall(tl, run)
        if st is not None:
            out.append(_finding(tl, run, st))
    if not runs and not vruns:
        # NCCL's own lines alone, else the ranks' own chatter with no stage line (a worker node's log cut early)
        run = _nccl_only_run(tl) or _chatter(tl)
        st = _stall(tl, run) if run else None
        if st is not None:
            out.append(_finding(tl, run, st))
    return out


def _server_key(tl: Timeline, run: list[Row]) -> tuple[str, int] | None:
    """The multi-node server a run is one node of: its rendezvous address and node count (every node of one server
    is launched with the same --dist-init-addr and --nnodes, and its own --node-rank)."""
    cfg = server_config(tl, run)
    nnodes, addr = cfg.num("nnodes"), cfg.get("dist_init_addr")
    return (str(addr), int(nnodes)) if addr and nnodes and nnodes > 1 else None


def _one_per_server(tl: Timeline, stalls: list[tuple[list[Row], dict[str, Any], Finding]]) -> list[Finding]:
    """One finding for the nodes of one multi-node server that each stopped: the node furthest behind is the one
    the others wait on (every start-up stage after the rendezvous ends in a collective over all ranks: the post-load
    barrier, the KV pool's all-reduce of free memory, the capture), so its finding stands and says where each other
    node stopped; a node's own log says nothing of another's."""
    groups: dict[tuple[str, int], list[tuple[list[Row], dict[str, Any], Finding]]] = {}
    out: list[Finding] = []
    for item in stalls:
        key = _server_key(tl, item[0])
        if key is None:
            out.append(item[2])
        else:
            groups.setdefault(key, []).append(item)
    for (_addr, _nnodes), items in groups.items():
        nodes = {int(server_config(tl, run).num("node_rank") or 0) for run, _st, _f in items}
        if len(items) < 2 or len(nodes) < len(items):
            out.extend(f for _run, _st, f in items)
            continue
        items.sort(key=lambda it: (it[1]["order"], -(it[1].get("silent_s") or 0)))
        run, st, finding = items[0]
        node = int(server_config(tl, run).num("node_rank") or 0)
        others = [(int(server_config(tl, r).num("node_rank") or 0), s, f) for r, s, f in items[1:]]
        ahead = [(n, s) for n, s, _f in others if s["order"] > st["order"]]
        if ahead:
            finding.summary = finding.summary.replace("The server stopped at", f"Node {node} of the server stopped at", 1)
            finding.summary += (" " + "; ".join(f"Node {n} ({s['row'].get('file')}) reached {s['stage']}"
                                                for n, s in ahead)
                                + f": node {node} ({st['row'].get('file')}), which got only as far as {st['stage']}, "
                                "is the one the others wait on.")
        else:
            finding.summary += (" " + "; ".join(f"Node {n} ({s['row'].get('file')}) stopped at the same stage"
                                                for n, s, _f in others) + ".")
        finding.evidence = [*finding.evidence, *(e for _n, _s, f in others for e in f.evidence[:1])]
        finding.figures = {**finding.figures, "lagging_node": node if ahead else None,
                           "node_stages": {str(n): s["stage"] for n, s in [(node, st), *[(n, s) for n, s, _f in others]]}}
        out.append(finding)
    return out


def _nccl_only_run(tl: Timeline) -> list[Row]:
    """NCCL's INFO lines of a communicator that started (``Init START``, the interface it bound) and never logged
    ``Init COMPLETE`` nor an error, with the launch command: the server's only trace is a set-up that did not end."""
    nccl = rows(tl, "nccl_info")
    if not nccl or any("Init COMPLETE" in str(attrs(r).get("message") or r.get("text") or "")
                       or attrs(r).get("level") not in (None, "INFO") for r in nccl):
        return []
    return sorted(nccl, key=_order)

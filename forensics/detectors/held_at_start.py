"""SGL-GPU-006: a launch found the GPU (or its port) still held by another process.

Sources: SGL-GPU-006 reads the allocator OOM's per-process clauses (reference/failure_messages.md §1.3, ``{Q}
per process``) and the port refusal of sglang python/sglang/srt/utils/network.py::wait_port_available (0.5.x;
utils.py in 0.4.x); SGL-GPU-008 reads ps(1)'s PPID 1 for a worker titled as in reference/vllm_formats.md §1.6;
SGL-GPU-009 reads nvidia-smi's memory against its process list (reference/system_formats.md §2.1, §2.2) and
vLLM's start-up check (reference/vllm_formats.md §3.3).

The other half of a stranded context: the next launch. A scheduler orphaned by an earlier run (its
parent gone, PPID 1) keeps its CUDA context and its ports, so the new server dies at start-up:

    torch.OutOfMemoryError: ... Process 40211 has 52.75 GiB memory in use. Including non-PyTorch memory, this
        process has 9.10 GiB memory in use. ...
    ValueError: nccl_port at 31005 is not available in 30 seconds. nccl_port is used by a process already. …
        (SGLang's ``wait_port_available``, python/sglang/srt/utils/network.py)

Evidence: a CUDA OOM before the server was up whose per-process clauses name memory that is not the
failing process's own (PyTorch prints every NVML process on that GPU: "Process N has X memory in use",
and the failing one as "this process has"), a port already taken, SGLang's CI harness finding the GPUs not
idle before a test (``GPU(s) still not idle after waiting``).
"""

from __future__ import annotations

import polars as pl

from forensics.facts.gpu import gpu_holders, target_load_rows
from forensics.facts.oom import startup_phase_of_frames, traceback_frames
from forensics.facts.rows import Row, attrs, rank_of, rows
from forensics.facts.rows import before as happened_before
from forensics.facts.runs import iter_runs, of_kind
from forensics.facts.stages import Reached, furthest
from forensics.model import Finding, FlagChange, Timeline

from ._common import GIB, fmt_gib, make_finding, tag_run
from .fatal_other import failure_class, in_dist_init
from .stranded_context import ESCALATION, held_threshold
from .vllm_start_memory import holders_words

#: the failing process's memory beyond what its allocator reserved (CUDA context, NCCL/cuBLAS buffers, IPC
#: buffers): "usually a few hundred MiB to a few GiB" (failure_messages.md §1.4, "This process's non-PyTorch
#: memory"); a lone clause larger than the reservation by more than this is another process's
NON_PYTORCH_MAX = 4 * GIB


def foreign_processes(row: Row) -> list[dict]:
    """The ``Process N has X`` entries of a CUDA OOM that are not the failing process itself.

    PyTorch prints every NVML process on the GPU; the failing one as ``this process has`` (2.1+), except in
    a container with its own PID namespace, where its entry is an ordinary ``Process {hostpid} has …``
    (failure_messages.md §1.3). Then the failing process is the entry closest above what its own allocator
    reserved (Q_self ≥ R); every other entry is someone else's. A clause pasted alone says nothing of whose
    memory it is.
    """
    a = attrs(row)
    procs = [p for p in a.get("processes") or [] if isinstance(p, dict) and p.get("used_bytes")]
    if not procs or a.get("fragment"):
        return []
    if row.get("used_bytes") is not None:  # "this process has …" printed separately: every Process clause is another
        return procs
    own = a.get("allocated_by_pytorch_bytes")
    if own is None:
        return []
    own += (a.get("reserved_unallocated_bytes") or 0) + (a.get("private_pools_bytes") or 0)
    candidates = sorted((p for p in procs if p["used_bytes"] >= own), key=lambda p: p["used_bytes"])
    if not candidates:
        return []  # no entry can hold this process's reservation: the figures disagree, nothing to conclude
    mine = candidates[0]
    if len(procs) == 1 and mine["used_bytes"] - own > NON_PYTORCH_MAX:
        return procs  # the only entry holds far more than this process's allocator: another process, NVML-hidden self
    return [p for p in procs if p is not mine]


def unlisted_bytes(row: Row) -> int | None:
    """GPU memory in use that no clause of a CUDA OOM accounts for: total − free − this process − every listed
    ``Process N`` (failure_messages.md §1.4, "invisible use": processes NVML cannot see, e.g. other containers, and
    driver reservations). Needs the ``this process has`` clause; None without it.

    >>> import json
    >>> unlisted_bytes({"total_bytes": 83 * GIB, "free_bytes": GIB // 8, "used_bytes": 23 * GIB, "attrs": "{}"}) // GIB
    59
    """
    total, free, own = row.get("total_bytes"), row.get("free_bytes"), row.get("used_bytes")
    if not total or free is None or not own:
        return None
    listed = sum(p.get("used_bytes") or 0 for p in attrs(row).get("processes") or [] if isinstance(p, dict))
    return max(0, int(total - free - own - listed))


def held_unlisted(row: Row) -> int | None:
    """Unlisted memory that is the GPU's main user: at least what the failing process holds and enough to count as
    held (stranded_context.held_threshold). Less is the display server, the driver, another small tenant."""
    hidden = unlisted_bytes(row)
    if hidden is None or hidden < max(row["used_bytes"], held_threshold(row["total_bytes"])):
        return None
    return hidden


def measured_capacity(tl: Timeline, run: list[Row]) -> int | None:
    """The GPU's total memory as the device reported it (a CUDA OOM of the run, nvidia-smi), never a model name's
    nominal size: a MIG slice or a variant with more memory would make the difference below wrong."""
    totals = [r["total_bytes"] for r in of_kind(run, "cuda_oom") if r.get("total_bytes")]
    totals += [r["total_bytes"] for r in rows(tl, "gpu_memory") if r.get("total_bytes")]
    return int(min(totals)) if totals else None


def held_before_load(tl: Timeline, run: list[Row]) -> tuple[int, Row] | None:
    """GPU memory in use before SGLang loaded anything, and the line that shows it: total − the device-wide free
    memory of ``Load weight begin. avail mem=`` (sglang_formats.md: every ``avail mem`` is ``mem_get_info``'s free,
    other processes counted) − what distributed init took (``Init torch distributed ends. mem usage=``). None when
    that is below what counts as held (stranded_context.held_threshold: the CUDA context and NCCL buffers fit)."""
    total = measured_capacity(tl, run)
    # each rank's first load: a draft model's (speculative decoding) loads after the target's weights took memory
    first: dict[object, Row] = {}
    for r in target_load_rows(run, "weight_load_begin"):
        if r.get("avail_bytes"):
            first.setdefault(rank_of(r), r)
    if not total or not first:
        return None
    row = min(first.values(), key=lambda r: r["avail_bytes"])
    own = max((r.get("bytes") or 0 for r in of_kind(run, "dist_init_end")), default=0)
    held = int(total - row["avail_bytes"] - own)
    return (held, row) if held >= held_threshold(total) else None


#: what a server holds on a GPU before it loads anything: its CUDA context and NCCL's buffers, with room to spare
PRE_LOAD_OWN_MAX = 2 * NON_PYTORCH_MAX
#: the run's rows that say the weights had begun loading (or later): from then on the server's own memory grows
_LOADING_OR_LATER = ("weight_load_begin", "weight_load_end", "kv_cache_allocated", "memory_pool_end", "cuda_graph_begin",
                     "cuda_graph_end", "server_ready", "prefill_batch", "decode_batch")


def held_in_snapshot(tl: Timeline, run: list[Row]) -> list[Row]:
    """nvidia-smi's GPUs mostly in use while the run died of a memory failure before its weights began to load:
    the server then holds only its CUDA context and NCCL buffers (a few GiB at most), so a GPU far fuller than that
    is held by someone else — whenever the snapshot was taken, before the launch or after the death."""
    if of_kind(run, *_LOADING_OR_LATER):
        return []
    return [r for r in rows(tl, "gpu_memory") if r.get("used_bytes") and r.get("total_bytes")
            and r["used_bytes"] >= max(held_threshold(r["total_bytes"]), PRE_LOAD_OWN_MAX)]


def _failed_in_dist_init(tl: Timeline, run: list[Row], failed: list[Row]) -> tuple[Row, Reached] | None:
    """The first memory failure of a start-up that had reached no further than distributed initialisation.

    Until the weights load a rank has allocated its CUDA context, NCCL's communicator buffers and the custom
    all-reduce's IPC buffers (sglang python/sglang/srt/model_executor/model_runner.py (0.4-0.5) ``init_torch_distributed``
    runs before ``load_model``): a few hundred MiB to about 2 GiB. Running out of memory there says the GPU was nearly
    full before the server began, not that the server asked too much. Not when nvidia-smi measured the GPUs (it
    decides: :func:`held_in_snapshot`), nor when a traceback places the failure later (NCCL's unstamped WARN lines
    sit above the stage lines of a capture that created its communicators lazily)."""
    if rows(tl, "gpu_memory"):
        return None
    for row in failed:
        if row.get("kind") not in ("cuda_oom", "cuda_error_oom"):
            continue
        reached = furthest([r for r in run if happened_before(r, row) is True])
        if reached is None or not in_dist_init(reached):
            continue
        # the rows that carry a traceback (a run's index: its batch rows are not walked)
        placed = {startup_phase_of_frames(fr, served=False)
                  for r in of_kind(run, "scheduler_exception", "exception", "failure", "cuda_oom", "cuda_error_oom")
                  if (fr := traceback_frames(run, r))}
        return None if placed - {None, "dist_init", "init"} else (row, reached)
    return None


def detect(tl: Timeline) -> list[Finding]:
    return _collisions(tl) + detect_orphans(tl) + detect_unexplained_full_gpu(tl)


def _collisions(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    for ref, run in iter_runs(tl):
        if of_kind(run, "decode_batch", "prefill_batch", "server_ready"):
            continue  # it was serving: a later OOM is no start-up collision
        ooms = [(r, foreign_processes(r)) for r in of_kind(run, "cuda_oom")]
        ooms = [(r, f) for r, f in ooms if f]
        hidden = [(r, h) for r in of_kind(run, "cuda_oom") if not foreign_processes(r) and (h := held_unlisted(r))]
        busy = [r for r in of_kind(run, "failure") if failure_class(r) in ("gpu_busy", "port_in_use")]
        busy += [r for r in of_kind(run, "scheduler_exception") if _port_taken(r)]  # raised in a rank's traceback
        # memory others held explains a memory failure only (a config error at start-up is no collision)
        failed = of_kind(run, "cuda_oom", "cuda_error_oom", "not_enough_memory", "weights_no_kv_room")
        before = held_before_load(tl, run) if failed and not ooms and not hidden else None
        snap = held_in_snapshot(tl, run) if failed and not ooms and not hidden and not before else []
        early = _failed_in_dist_init(tl, run, failed) if failed and not ooms and not hidden and not before and not snap \
            else None
        if not ooms and not busy and not hidden and not before and not snap and not early:
            continue
        died = [r for r in of_kind(run, "failure", "rank_dead", "sigquit")
                if r.get("kind") != "failure" or failure_class(r) in ("startup_failed", "process_exit", "exception")]
        held = sum(p["used_bytes"] for _r, f in ooms for p in f)
        pids = sorted({p["pid"] for _r, f in ooms for p in f if p.get("pid")} |
                      {r["pid"] for r in busy if r.get("pid")})
        ports = sorted({attrs(r).get("port") for r in busy if attrs(r).get("port")})
        what = []
        if ooms:
            what.append(f"process(es) {', '.join(map(str, pids)) or '?'} held {fmt_gib(held)} of the GPU the new server "
                        "needed")
        if hidden:
            what.append(f"{fmt_gib(max(h for _r, h in hidden))} of the GPU was in use by processes the CUDA OOM "
                        "message could not list (another container, or a process NVML cannot see)")
        if before:
            what.append(f"{fmt_gib(before[0])} of the GPU was already in use before the weights loaded (free "
                        f"{fmt_gib(before[1]['avail_bytes'])} of {fmt_gib(measured_capacity(tl, run))})")
        if snap:
            what.append("nvidia-smi shows " + ", ".join(f"GPU {r.get('gpu')} with {fmt_gib(r['used_bytes'])} of "
                                                        f"{fmt_gib(r['total_bytes'])} in use" for r in snap[:4])
                        + " while the server died of a memory error before loading any weights, when it holds no "
                        "more than its CUDA context and NCCL buffers")
        if early:
            what.append(f"the GPU ran out of memory during {early[1].stage}, before any weights loaded ("
                        f"{(early[0].get('file') or '?')}:{early[0].get('line')}), when the server holds no more than its "
                        "CUDA context and its NCCL and all-reduce buffers: the GPU was already nearly full")
        if any(failure_class(r) == "gpu_busy" for r in busy):
            what.append("GPUs were not idle before the run")
        if any(_port_taken(r) for r in busy):
            what.append("a port it needed was already bound" + (f" ({', '.join(map(str, ports))})" if ports else ""))
        listed = [p for p in gpu_holders(tl, exclude_pids=frozenset(int(r["pid"]) for r in run if r.get("pid")))
                  if p.get("used_bytes")] if before or hidden or snap else []
        evidence = [r for r, _f in [*ooms, *hidden]][:3] + listed[:2] + ([before[1], *failed[:1]] if before else []) \
            + ([*failed[:1], *of_kind(run, "scheduler_exception")[:1], *snap[:2]] if snap else []) \
            + ([early[0], early[1].row] if early else []) + busy[:3] + died[:2]
        flags = _port_wait_flags(busy)
        if flags:
            what.append("its holder was an earlier server still shutting down")
        out.append(tag_run(make_finding(
            "SGL-GPU-006",
            summary=("The server could not start because resources of an earlier run were still held: "
                     + "; ".join(what) + ". A process from a previous launch (often a scheduler orphaned when its "
                     "parent was killed: PPID 1) survived." if ooms or busy else
                     "The server could not start because another process held the GPU: " + "; ".join(what)
                     + (f". nvidia-smi lists {holders_words(listed)}." if listed else
                        ". Another container sharing the GPU, or a process of an earlier run that NVML cannot see "
                        "from here, holds it." if hidden else
                        ". A co-tenant, or a process of an earlier run that never exited, holds it.")),
            evidence=evidence,
            confidence="medium" if ooms or hidden or before or snap or len(busy) > 1 else "low",
            confidence_reason=("no process table (`ps -eo pid,ppid,stat,etime,cmd`, nvidia-smi's process list) in the "
                               "input shows the holder itself"
                               + ("; only the stage of the failure says the memory was taken before the server "
                                  "allocated any" if early and not listed else "")),
            ranks=[x for x in (rank_of(r) for r in evidence) if x is not None],
            gpus=[r["gpu"] for r in [*[o for o, _f in [*ooms, *hidden]], *busy, *snap] if r.get("gpu") is not None],
            figures={"holder_pids": pids, "held_bytes": int(held) if held else None, "ports": ports or None,
                     "unlisted_bytes": max(h for _r, h in hidden) if hidden else None,
                     "held_before_load_bytes": before[0] if before else None},
            flags=flags,
            actions=[
                "Find the holder: `nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv`, "
                "`ps -o pid,ppid,stat,etime,cmd -p <pid>`, and `ss -ltnp` for a port; an orphaned `sglang::scheduler` "
                "has PPID 1.",
                "Kill it and check the GPU is empty before relaunching; then stop servers by process group "
                "(`kill -- -<pgid>`, or the container) so no scheduler outlives its parent.",
                *ESCALATION[:2],
            ],
        ), ref))
    return out


#: what SGLang's own CI waits for a killed server's ports (python/sglang/test/test_utils.py sets
#: SGLANG_WAIT_PORT_TIMEOUT=120: a killed server keeps its ports while it releases its GPUs, > 30 s on large nodes)
PORT_WAIT_CI_S = 120
#: process states of a holder that is still alive (psutil's status names): running, or stuck in teardown
_ALIVE = {"running", "sleeping", "disk-sleep", "stopped"}


def _port_taken(row: Row) -> bool:
    """A port already bound: the failure line's class, or a scheduler's traceback that ended in it (the c10d store
    that cannot listen, failure_messages.md §4.6)."""
    return failure_class(row) == "port_in_use" or (row.get("kind") == "scheduler_exception"
                                                   and attrs(row).get("failure") == "port_in_use")


def _port_wait_flags(busy: list[Row]) -> list[FlagChange]:
    """SGLANG_WAIT_PORT_TIMEOUT when SGLang gave up waiting for a port whose holder is an engine still alive: a
    previous server in teardown (network.py's ``wait_port_available`` waits that many seconds, default 30)."""
    for r in busy:
        a = attrs(r)
        waited = a.get("waited_s")
        if failure_class(r) == "port_in_use" and waited and a.get("holder_is_engine") \
                and a.get("holder_status", "running") in _ALIVE and waited < PORT_WAIT_CI_S:
            return [FlagChange("SGLANG_WAIT_PORT_TIMEOUT", str(waited), str(PORT_WAIT_CI_S),
                               f"SGLang waited {waited} s for {a.get('port_name') or 'the port'} {a.get('port') or ''}"
                               f" while an earlier {a.get('holder_status', 'live')} server still held it; a killed "
                               "server releases its ports only after its GPUs (SGLang's CI waits "
                               f"{PORT_WAIT_CI_S} s). Better still: wait until the old server's pids are gone before "
                               "relaunching.")]
    return []


# ---------------------------------------------------------------------------------------------
# SGL-GPU-008: orphaned engine processes


_WORKER_ROLES = {"scheduler", "detokenizer", "tokenizer", "data_parallel_controller", "engine_core", "worker",
                 "ray_worker", "dp_coordinator"}


def _role(row: Row) -> str | None:
    a = attrs(row)
    return a.get("sglang_role") or a.get("vllm_role")


def detect_orphans(tl: Timeline) -> list[Finding]:
    """Engine workers whose launcher is gone (reparented to PID 1) and that still hold GPU memory.

    A server's parent killed with SIGKILL cannot tell its children; schedulers and workers survive as
    orphans, keep their CUDA contexts and ports, and the next launch on those GPUs fails (SGL-GPU-006)."""
    from forensics.facts.lifecycle import group_snapshots
    from forensics.facts.rows import rows

    out: list[Finding] = []
    gpu_rows = rows(tl, "gpu_process")
    holding = {int(g["pid"]) for g in gpu_rows if g.get("pid") is not None and g.get("used_bytes")}
    for snap in group_snapshots(rows(tl, "process")):
        live = [r for r in snap if _role(r) in _WORKER_ROLES and attrs(r).get("state") not in ("Z", "X")]
        orphans = [r for r in live if attrs(r).get("orphaned")]
        # a listing without PID 1 (``ps -p <pid>``) says only that the worker's parent is init: with GPU memory
        # held by it, that is the orphan too — unless the server is a container's entry point (PID 1 itself)
        unsure = [r for r in live if not orphans and attrs(r).get("reparented_to_init")
                  and "orphaned" not in attrs(r) and r.get("pid") is not None and int(r["pid"]) in holding]
        orphans = orphans or unsure
        if not orphans:
            continue
        pids = {int(r["pid"]) for r in orphans if r.get("pid") is not None}
        held_rows = [g for g in gpu_rows if g.get("pid") is not None and int(g["pid"]) in pids]
        held = sum(int(g.get("used_bytes") or 0) for g in held_rows)
        reason = (None if held else "no GPU process list in the same snapshot shows what they hold")
        if unsure:
            reason = ("the process listing does not show PID 1: a container whose entry point is the server would "
                      "show the same parent; `ps -p 1 -o pid,args` tells them apart")
        engines = sorted({str(attrs(r).get("engine")) for r in orphans if attrs(r).get("engine")})
        out.append(make_finding(
            "SGL-GPU-008",
            summary=(f"{len(orphans)} {'/'.join(engines) or 'engine'} worker process(es) "
                     f"({', '.join(sorted({str(r.get('comm')) for r in orphans})[:4])}) lost their launcher and were "
                     "reparented to PID 1" + (f"; they still hold {fmt_gib(held)} of GPU memory" if held else "")
                     + ". The next launch on these GPUs will fail until they are killed."),
            evidence=[*orphans[:6], *held_rows[:4]],
            confidence="high" if held and not unsure else "medium",
            confidence_reason=reason,
            severity="high" if held or not gpu_rows else "medium",
            gpus=[g["gpu"] for g in held_rows if g.get("gpu") is not None],
            figures={"orphan_pids": sorted(pids), "held_bytes": held or None},
            actions=[f"kill -9 {' '.join(map(str, sorted(pids)[:16]))}  (then check `nvidia-smi` shows the GPUs "
                     "empty)",
                     "Stop servers by process group or container, not by the launcher's pid, so workers cannot outlive "
                     "it; SGLang's `kill_process_tree` and vLLM's shutdown do so on a clean exit only.",
                     *ESCALATION[:2]],
        ))
    return out


# ---------------------------------------------------------------------------------------------
# SGL-GPU-009: a GPU holding memory with nothing in the input running on it


def detect_unexplained_full_gpu(tl: Timeline) -> list[Finding]:
    """An nvidia-smi snapshot alone (no engine log, no process table naming a server) with GPUs holding most of
    their memory: asked about after a shutdown, that is memory a survivor holds."""
    from forensics.facts.rows import rows
    from forensics.facts.runs import sglang_runs

    if sglang_runs(tl) or rows(tl, "process", "launch_command", "gpu_process_none", "process_sample") \
            or not tl.events.height:
        return []  # an engine, a process table (ps's or the recorder's), or a process list said empty says more
    if tl.events.filter(pl.col("source") == "vllm").height:
        return []
    # the threshold every stranded-memory rule uses: a GPU "holds memory" from max(1 GiB, 5 % of its total)
    full = [r for r in rows(tl, "gpu_memory") if r.get("used_bytes") and r.get("total_bytes")
            and r["used_bytes"] >= held_threshold(r["total_bytes"])]
    if not full:
        return []
    gpus = sorted({int(r["gpu"]) for r in full if r.get("gpu") is not None})
    owners = [p for p in rows(tl, "gpu_process") if p.get("used_bytes") and p["used_bytes"] >= GIB]
    busy = [r for r in full if (r.get("ratio") or 0) > 0]
    return [make_finding(
        "SGL-GPU-009",
        summary=(f"GPU {', '.join(map(str, gpus)) or '?'} hold{'s' if len(gpus) == 1 else ''} "
                 + ", ".join(fmt_gib(r["used_bytes"]) + " of " + fmt_gib(r["total_bytes"]) for r in full[:4])
                 + (" and is computing (utilisation above 0)" if busy else "")
                 + ", and nothing in the input says what runs there. If no server should be running, a process of an "
                 "earlier one survived and holds the memory (a stranded context)."),
        evidence=full[:6] + owners[:4],
        confidence="low",
        confidence_reason="only a GPU snapshot: no log, launch or process table says whether a server was meant to run",
        severity="medium",
        gpus=gpus,
        figures={"held_bytes": int(sum(r["used_bytes"] for r in full)), "owner_pids": [p.get("pid") for p in owners]},
        actions=["`nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv` and "
                 "`ps -o pid,ppid,stat,etime,cmd -p <pid>`: who holds it, and whether its launcher is gone (PPID 1).",
                 *ESCALATION[:2]],
    )]

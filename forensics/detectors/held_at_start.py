"""SGL-GPU-006: a launch found the GPU (or its port) still held by another process.

The other half of a stranded context: the next launch. A scheduler orphaned by an earlier run (its
parent gone, PPID 1) keeps its CUDA context and its ports, so the new server dies at start-up:

    RuntimeError: Worker <model> (PID ...) died during startup
    torch.OutOfMemoryError: ... Process 6791 has 69.40 GiB memory in use. ...
    rpc_port 30001 is used by a process already
    GPU 2 uses 25.30 GiB (pid=1117859 24.81 GiB)

Evidence: a CUDA OOM before the server was up whose per-process clauses name memory that is not the
failing process's own (PyTorch prints every NVML process on that GPU: "Process N has X memory in use",
and the failing one as "this process has"), a port already taken, a harness that found GPUs not idle.
"""

from __future__ import annotations

import polars as pl

from forensics.facts.rows import Row, attrs, rank_of
from forensics.facts.runs import iter_runs, of_kind
from forensics.model import Finding, Timeline

from ._common import GIB, fmt_gib, make_finding, tag_run
from .fatal_other import failure_class
from .stranded_context import ESCALATION

#: a Process clause this far above what PyTorch says the failing process allocated is someone else's
FOREIGN_SLACK = 3 * GIB


def foreign_processes(row: Row) -> list[dict]:
    """The ``Process N has X`` entries of a CUDA OOM that are not the failing process itself."""
    a = attrs(row)
    procs = [p for p in a.get("processes") or [] if isinstance(p, dict) and p.get("used_bytes")]
    if not procs:
        return []
    if row.get("used_bytes") is not None:  # "this process has …" printed separately: every Process clause is another
        return procs
    own = a.get("allocated_by_pytorch_bytes")
    if own is None:
        return procs if a.get("fragment") else []
    own += a.get("reserved_unallocated_bytes") or 0
    return [p for p in procs if p["used_bytes"] > own + FOREIGN_SLACK]


def detect(tl: Timeline) -> list[Finding]:
    return _collisions(tl) + detect_orphans(tl) + detect_unexplained_full_gpu(tl)


def _collisions(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    for ref, run in iter_runs(tl):
        if of_kind(run, "decode_batch", "prefill_batch", "server_ready"):
            continue  # it was serving: a later OOM is no start-up collision
        ooms = [(r, foreign_processes(r)) for r in of_kind(run, "cuda_oom")]
        ooms = [(r, f) for r, f in ooms if f]
        busy = [r for r in of_kind(run, "failure") if failure_class(r) in ("gpu_busy", "port_in_use")]
        if not ooms and not busy:
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
        if any(failure_class(r) == "port_in_use" for r in busy):
            what.append("a port it needed was already bound" + (f" ({', '.join(map(str, ports))})" if ports else ""))
        if any(failure_class(r) == "gpu_busy" for r in busy):
            what.append("GPUs were not idle before the run")
        evidence = [r for r, _f in ooms][:3] + busy[:3] + died[:2]
        out.append(tag_run(make_finding(
            "SGL-GPU-006",
            summary=("The server could not start because resources of an earlier run were still held: "
                     + "; ".join(what) + ". A process from a previous launch (often a scheduler orphaned when its "
                     "parent was killed: PPID 1) survived."),
            evidence=evidence,
            confidence="medium" if ooms or len(busy) > 1 else "low",
            confidence_reason=("no process table (`ps -eo pid,ppid,stat,etime,cmd`, nvidia-smi's process list) in the "
                               "input shows the holder itself"),
            ranks=[x for x in (rank_of(r) for r in evidence) if x is not None],
            gpus=[r["gpu"] for r in [*[o for o, _f in ooms], *busy] if r.get("gpu") is not None],
            figures={"holder_pids": pids, "held_bytes": int(held) if held else None, "ports": ports or None},
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
    for snap in group_snapshots(rows(tl, "process")):
        orphans = [r for r in snap if attrs(r).get("orphaned") and _role(r) in _WORKER_ROLES
                   and attrs(r).get("state") not in ("Z", "X")]
        if not orphans:
            continue
        pids = {int(r["pid"]) for r in orphans if r.get("pid") is not None}
        held_rows = [g for g in gpu_rows if g.get("pid") is not None and int(g["pid"]) in pids]
        held = sum(int(g.get("used_bytes") or 0) for g in held_rows)
        engines = sorted({str(attrs(r).get("engine")) for r in orphans if attrs(r).get("engine")})
        out.append(make_finding(
            "SGL-GPU-008",
            summary=(f"{len(orphans)} {'/'.join(engines) or 'engine'} worker process(es) "
                     f"({', '.join(sorted({str(r.get('comm')) for r in orphans})[:4])}) lost their launcher and were "
                     "reparented to PID 1" + (f"; they still hold {fmt_gib(held)} of GPU memory" if held else "")
                     + ". The next launch on these GPUs will fail until they are killed."),
            evidence=[*orphans[:6], *held_rows[:4]],
            confidence="high" if held else "medium",
            confidence_reason=None if held else "no GPU process list in the same snapshot shows what they hold",
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
# SGL-GPU-009: a GPU full with nothing in the input running on it

#: a GPU "full" from this share of its memory
FULL_SHARE = 0.5


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
    full = [r for r in rows(tl, "gpu_memory") if r.get("used_bytes") and r.get("total_bytes")
            and r["used_bytes"] >= FULL_SHARE * r["total_bytes"]]
    if not full:
        return []
    gpus = sorted({int(r["gpu"]) for r in full if r.get("gpu") is not None})
    owners = [p for p in rows(tl, "gpu_process") if p.get("used_bytes") and p["used_bytes"] >= GIB]
    busy = [r for r in full if (r.get("ratio") or 0) >= 0.5]
    return [make_finding(
        "SGL-GPU-009",
        summary=(f"GPU {', '.join(map(str, gpus)) or '?'} hold{'s' if len(gpus) == 1 else ''} "
                 + ", ".join(fmt_gib(r["used_bytes"]) + " of " + fmt_gib(r["total_bytes"]) for r in full[:4])
                 + (" at high utilisation" if busy else "")
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

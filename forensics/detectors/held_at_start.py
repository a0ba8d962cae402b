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

from forensics.model import Finding, Timeline

from ._common import GIB, Row, attrs, fmt_gib, iter_runs, make_finding, of_kind, rank_of, tag_run
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

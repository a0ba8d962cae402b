"""SGL-HOST-013: a multi-GPU server whose /dev/shm was measured too small for it, before anything failed.

The engines' processes on one host talk through POSIX shared memory in /dev/shm: NCCL's intra-node
transport and proxy buffers (``/dev/shm/nccl-*``, tens of MB per rank pair: reference/failure_messages.md,
NCCL's ``failed to extend /dev/shm/nccl-… to {n} bytes``), vLLM's shm-broadcast ring buffer (``psm_*``,
24 MiB × 10 chunks by default; vLLM PR #48879 makes vLLM refuse to start below it), SGLang's tokenizer and
multimodal IPC. A container's tmpfs is 64 MiB unless ``--shm-size`` (or ``--ipc=host``) says otherwise
(docker-run(1); a Kubernetes pod without a memory-backed ``emptyDir``). When the input measures /dev/shm
below that and the server runs several ranks on the host, the start-up or the first large request dies
of it (NCCL ``unhandled system error``, SIGBUS) even when this excerpt stops before the failure.

The measure is one a program printed: Ray's start-up warning ``… because /dev/shm has only 67108864
bytes available`` (ray ``_private/services.py``), which every Ray-backed vLLM start prints in such a
container. A /dev/shm failure line is SGL-HOST-006's; this rule stays quiet then.
"""

from __future__ import annotations

from forensics.facts import engines
from forensics.facts.launch import launch_rows, server_config
from forensics.facts.rows import Row, attrs, rows
from forensics.model import Finding, FlagChange, Timeline

from ._common import fmt_gib, make_finding
from .shm_exhausted import SMALL_SHM, SUGGESTED_SHM, is_sigbus

#: rows that show the server got past start-up on this /dev/shm (it served, so the size sufficed so far)
_SERVING_KINDS = ("engine_metrics", "decode_batch", "prefill_batch", "http_access", "server_ready")


def _local_ranks(tl: Timeline) -> tuple[int, str]:
    """Processes of one server that share the host's /dev/shm: tensor × pipeline parallel ranks (per node)."""
    cfg = server_config(tl)
    engine = engines.engine_of(launch_rows(tl) + rows(tl, "server_args")) or "vllm"
    tp = engines.value_for(engine, "tensor_parallel", cfg.values)
    pp = engines.value_for(engine, "pipeline_parallel", cfg.values)
    try:
        n_tp, n_pp = int(tp or 1), int(pp or 1)
    except (TypeError, ValueError):
        return 1, "no rank count known"
    flag = engines.flag_for(engine, "tensor_parallel") or "--tensor-parallel-size"
    return n_tp * n_pp, f"{flag} {n_tp}" + (f" × pipeline {n_pp}" if n_pp > 1 else "")


def detect(tl: Timeline) -> list[Finding]:
    measured = [r for r in rows(tl, "shm_capacity") if isinstance(r.get("free_bytes"), int | float)]
    small = [r for r in measured if r["free_bytes"] < SMALL_SHM]
    if not small:
        return []
    if any(is_sigbus(r) for r in rows(tl, "failure", "rank_dead", "subprocess_crashed")):
        return []  # the failure itself is in the input: SGL-HOST-006 reports it
    ranks, how = _local_ranks(tl)
    if ranks < 2:
        return []  # one process: no NCCL peer and no broadcast ring on this host
    row: Row = min(small, key=lambda r: r["free_bytes"])
    free = int(row["free_bytes"])
    served = bool(rows(tl, *_SERVING_KINDS))
    launch = launch_rows(tl)[-1:]
    flags = [FlagChange("--shm-size", None, SUGGESTED_SHM,
                        f"/dev/shm had {fmt_gib(free)} available for {ranks} ranks on the host; NCCL's per-rank "
                        "segments and the engine's IPC buffers need gigabytes (docker-run(1) --shm-size; compose "
                        "shm_size; a memory-backed emptyDir on /dev/shm in Kubernetes)")]
    return [make_finding(
        "SGL-HOST-013",
        summary=(f"/dev/shm had only {fmt_gib(free)} available ({_source(row)}) while the server runs {ranks} ranks "
                 f"on the host ({how}): NCCL's shared-memory segments and the engine's broadcast buffers need more, "
                 "so the start-up (or the first large request) fails with an NCCL system error or SIGBUS. "
                 + ("The log shows it serving, so the size sufficed so far." if served else
                    "The input stops before any failure line: this is the precondition, not the failure itself.")),
        evidence=[row, *launch],
        severity="low" if served else None,
        confidence="medium",
        confidence_reason="the /dev/shm size is measured, the failure it causes is not in the input",
        figures={"shm_free_bytes": free, "local_ranks": ranks, "served": served},
        flags=flags,
        actions=["`df -h /dev/shm` inside the container; start it with `--shm-size 16g` (or a memory-backed "
                 "emptyDir on /dev/shm in Kubernetes)."],
    )]


def _source(row: Row) -> str:
    if attrs(row).get("source") == "ray_object_store":
        return "Ray's start-up check of /dev/shm"
    return "measured"

"""Affected ranks the launch implies: a finding about the server's configuration concerns every rank
that configuration started.

A KV pool too small for the context, a fraction that leaves no headroom, weights that do not fit, a
per-rank host pool: each is the same on every rank of the launch, even when the log that showed it
was one rank's (or a fragment naming none). With ``--tp-size 4`` the finding names ranks 0–3; on node
``k`` of a multi-node launch, that node's ranks. Findings that already name their ranks, and findings
about one process, GPU or host event (an Xid, an OOM kill, a stranded GPU), are left as they are.
"""

from __future__ import annotations

from forensics.facts.launch import ranks_per_host, server_config
from forensics.model import Finding, Timeline

#: Categories whose findings are about the launch configuration itself, hence about all its ranks.
CONFIG_CATEGORIES = ("per_rank_overallocation", "cuda_graph_headroom", "kv_cache_capacity", "weights_do_not_fit")


def fill_implied_ranks(tl: Timeline, findings: list[Finding]) -> None:
    """Name the launch's ranks on configuration findings that name none (in place)."""
    todo = [f for f in findings if not f.ranks and f.category in CONFIG_CATEGORIES]
    if not todo:
        return
    cfg = server_config(tl)
    if cfg.get("tp_size") is not None:
        n, how = ranks_per_host(cfg)
    elif cfg.get("tensor_parallel_size") is not None:  # vLLM's names: one worker per GPU of TP × PP
        tp, pp = int(cfg.num("tensor_parallel_size") or 1), int(cfg.num("pipeline_parallel_size") or 1)
        n, how = tp * pp, f"--tensor-parallel-size {tp}" + (f" × --pipeline-parallel-size {pp}" if pp > 1 else "")
    else:
        return  # nothing says how many ranks there were
    node = int(cfg.num("node_rank") or 0)
    ranks = list(range(node * n, (node + 1) * n))
    for f in todo:
        f.ranks = ranks
        f.figures.setdefault("ranks_from", f"the launch ({how})")

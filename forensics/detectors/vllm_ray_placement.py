"""VLLM-NCCL-002: vLLM on Ray waits for GPUs its Ray cluster cannot give: the placement group is never created.

With the Ray executor the engine asks Ray for one GPU bundle per rank (tensor × pipeline parallel) in a placement
group and blocks until Ray can place all of them (vllm vllm/executor/ray_utils.py (0.4-0.11) ``_wait_until_pg_ready``).
While it waits it logs, with an exponential back-off, how long it has waited and the bundles it asked for; after
``PG_WAIT_TIMEOUT`` (1800 s) it raises ``Cannot provide a placement group of placement_group_specs=… within 1800
seconds``::

    INFO 03-11 04:13:15 [ray_utils.py:335] Waiting for creating a placement group of specs for 30 seconds.
    specs=[{'node:10.2.0.11': 0.001, 'GPU': 1.0}, {'GPU': 1.0}, …]. Check `ray status` …

Nothing after it starts: no worker, no NCCL, no weights. The cluster Ray sees has fewer free GPUs than the bundles
(another node never joined, or vLLM started its own local Ray instance instead of joining the cluster: Ray's
``Started a local Ray instance.``), or the first bundle's ``node:<ip>`` names an address no Ray node registered under
(``VLLM_HOST_IP`` different from the IP the node joined Ray with). The waits are a finding when the engine says it
gave up, or when they are the run's last start-up record and the back-off has printed at least twice (the first
line alone can be a slow autoscaler). The line says how long the engine had waited when it printed: the back-off
prints first at 10 s and next at 30 s, so one line of :data:`MIN_WAITED_S` or more is a wait that already outlasted
two prints (a paste that kept only the last of them). The newer timeout's wording (vllm vllm/v1/executor/ray_utils.py
(main, 2026): ``Cannot provide a placement group requiring N GPUs (placement_group_specs=…) within S seconds``) is
read by parsers/vllm.py the same.
"""

from __future__ import annotations

from forensics.facts.rows import Row, attrs, rows
from forensics.facts.vllm import of_kind, settings, vllm_runs
from forensics.model import Finding, Timeline

from ._common import make_finding

#: the back-off's second line (10 s, then 20 s more): one line can be a cold cluster, two are a wait that persists
MIN_WAIT_LINES = 2
#: one line's own elapsed time past the back-off's second print (10 s, then 20 s more: printed at 30 s)
MIN_WAITED_S = 40.0
#: records that say the start-up went on past the placement group: workers came up
_PROGRESS = ("weight_load_begin", "weight_load_end", "memory_profile", "kv_memory", "kv_sizing", "cuda_graph_begin",
             "cuda_graph_end", "engine_metrics", "server_ready", "nccl_info")


def _order(r: Row) -> tuple[str, int]:
    return (str(r.get("file") or ""), int(r.get("line") or 0))


def detect(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    for run in vllm_runs(tl):
        waits = of_kind(run, "ray_pg_wait")
        if not waits:
            continue
        gave_up = [r for r in waits if attrs(r).get("timed_out")]
        last = max(waits, key=_order)
        progressed = any(_order(r) > _order(last) for r in of_kind(run, *_PROGRESS))
        waited = max(float(attrs(r).get("waited_s") or 0) for r in waits)
        if not gave_up and (progressed or (len(waits) < MIN_WAIT_LINES and waited < MIN_WAITED_S)):
            continue
        gpus = max(int(attrs(r).get("gpus") or 0) for r in waits)
        node = next((attrs(r).get("driver_node") for r in waits if attrs(r).get("driver_node")), None)
        notes = {attrs(r).get("message_id") for r in of_kind(run, "notice")}
        cfg = settings(tl, run)
        tp, pp = cfg.num("tensor_parallel_size"), cfg.num("pipeline_parallel_size")
        world = f"TP {tp:g} × PP {pp or 1:g} = {int(tp * (pp or 1))}" if tp else None
        why = []
        if "ray_local_instance" in notes:
            why.append("vLLM started a local Ray instance instead of joining the cluster, so it sees this node's GPUs "
                       "only: start it on a node of the running cluster (`ray start --address=<head>:6379` there, or "
                       "RAY_ADDRESS) ")
        if "ray_gpus_short" in notes:
            why.append("vLLM itself warned that the GPUs it needs exceed those Ray has")
        # what `ray status` printed: the cluster's own count of GPUs and nodes
        status = next((r for r in reversed(rows(tl, "ray_resources")) if attrs(r).get("gpus_total") is not None), None)
        if status is not None and gpus:
            a = attrs(status)
            # the node count from the same paste's node list (a transcript splits the output at its rules)
            active = next((attrs(r)["nodes_active"] for r in rows(tl, "ray_resources") if r.get("file") == status.get(
                "file") and attrs(r).get("nodes_active") is not None), None)
            total = float(a["gpus_total"])
            on = f" on {active} node{'s' if active != 1 else ''}" if active is not None else ""
            if total < gpus:
                why.append(f"`ray status` shows {total:g} GPUs{on}, "
                           f"{gpus - total:g} fewer than the bundles: the node(s) that hold them never joined the "
                           "cluster (start Ray on them with `ray start --address=<head>:6379`)")
            elif a.get("gpus_used") is not None and total - float(a["gpus_used"]) < gpus:
                why.append(f"`ray status` shows {total:g} GPUs but {float(a['gpus_used']):g} of them in use: another "
                           "job holds what the bundles need")
        actions = [
            f"`ray status` on the head: the cluster's GPU total must reach the {gpus} bundles"
            + (f" ({world})" if world else "") + "; a node that never joined (`ray list nodes`) leaves it short.",
            *([f"The first bundle must land on node {node}: every node's VLLM_HOST_IP must be the address it joined "
               "Ray with (`ray start --node-ip-address`), or Ray never has a node of that name."] if node else []),
            "Or ask for fewer GPUs: a smaller --tensor-parallel-size / --pipeline-parallel-size that the cluster holds.",
        ]
        out.append(make_finding(
            "VLLM-NCCL-002",
            summary=(f"vLLM waited {waited:.0f} s for Ray to place {gpus} GPU bundle(s)"
                     + (f" ({world})" if world else "")
                     + (" and gave up" if gave_up else " and got no further: no worker started") + "; "
                     + ("; ".join(why) if why else
                        "the Ray cluster has fewer free GPUs than that, or no node registered under the first "
                        "bundle's address") + "."),
            evidence=[*waits[:2], *([last] if last not in waits[:2] else []),
                      *[r for r in of_kind(run, "notice") if attrs(r).get("message_id") in ("ray_local_instance",
                                                                                          "ray_gpus_short")][:2],
                      *([status] if status is not None and why else []),
                      # the engine's teardown after it gave up: the timeout raised and the failed start
                      *(of_kind(run, "exception", "init_failed", "engine_dead")[:3] if gave_up else [])],
            confidence="high" if gave_up or why else "medium",
            confidence_reason=None if gave_up or why else
            "the cluster's GPU count and node addresses are not in the input (`ray status` decides)",
            figures={"waited_s": waited, "gpu_bundles": gpus, "driver_node": node, "gave_up": bool(gave_up),
                     "tensor_parallel_size": tp, "pipeline_parallel_size": pp},
            actions=actions,
        ))
    return out

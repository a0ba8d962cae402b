"""Run every detector over a timeline, link symptoms to their cause and pick the root cause
(:mod:`forensics.detectors.causes`), then give each flag one value and name the launch's ranks.

One module per rule family; each exposes ``detect(tl) -> list[Finding]`` and never reads files.
When several findings fire, the cause wins over its symptoms: an OOM kill that follows a per-rank
HiCache overallocation, or a stranded context after a headroom crash, gets ``consequence_of`` and a
sentence that says how it follows.

>>> from forensics.model import Timeline
>>> from parsers.schema import empty_frame
>>> run_all(Timeline(events=empty_frame()))
([], None)
"""

from __future__ import annotations

from forensics.detectors.causes import incident_run, link_consequences, pick_root_cause, sort_key
from forensics.detectors.implied_ranks import fill_implied_ranks
from forensics.detectors.launch_spelling import respell
from forensics.detectors.reconcile import reconcile_flags
from forensics.model import Finding, Timeline

from . import (
    _prose,
    build_compat,
    context_sizing,
    crash_requests,
    cuda_graph_headroom,
    deepep_dispatch,
    fatal_other,
    flight_recorder,
    gloo_transport,
    gpu_driver,
    hang,
    held_at_start,
    hicache_host_pool,
    host_memory_not_reclaimed,
    host_pinning,
    kernel_oom_killer,
    kernel_resources,
    kv_cache_capacity,
    kv_pool_leak,
    launch_refusals,
    memory_balance,
    memory_saver,
    missing_facts,
    model_fit,
    multimodal_tokens,
    nccl_timeout,
    nccl_transport,
    per_rank_overallocation,
    recorded_history,
    rendezvous,
    request_refusals,
    shm_capacity,
    shm_exhausted,
    stacks,
    stalled,
    start_settings,
    stopped_starting,
    stranded_context,
    tpu_compile_oom,
    vllm_accounting,
    vllm_graph_estimate,
    vllm_headroom,
    vllm_host_memory,
    vllm_kv_cache,
    vllm_launch_refusals,
    vllm_ray_placement,
    vllm_shared_gpu,
    vllm_sleep_colocated,
    vllm_sleep_mode,
    vllm_sleep_release,
    vllm_start_memory,
    weights_do_not_fit,
    weights_mmap,
    xid,
)

DETECTORS = (
    per_rank_overallocation,
    cuda_graph_headroom,
    weights_do_not_fit,
    stranded_context,
    host_memory_not_reclaimed,
    kernel_oom_killer,
    xid,
    nccl_timeout,
    flight_recorder,
    nccl_transport,
    gloo_transport,
    kv_cache_capacity,
    context_sizing,
    model_fit,
    held_at_start,
    shm_exhausted,
    shm_capacity,
    stopped_starting,
    host_pinning,
    rendezvous,
    hang,
    stalled,
    vllm_kv_cache,
    vllm_graph_estimate,
    vllm_headroom,
    vllm_host_memory,
    vllm_accounting,
    request_refusals,
    memory_balance,
    kernel_resources,
    deepep_dispatch,
    hicache_host_pool,
    kv_pool_leak,
    launch_refusals,
    vllm_launch_refusals,
    vllm_start_memory,
    vllm_ray_placement,
    recorded_history,
    gpu_driver,
    build_compat,
    start_settings,
    memory_saver,
    vllm_sleep_colocated,
    vllm_shared_gpu,
    vllm_sleep_mode,
    vllm_sleep_release,
    weights_mmap,
    multimodal_tokens,
    tpu_compile_oom,
)

def run_all(tl: Timeline) -> tuple[list[Finding], str | None]:
    """Every finding, sorted by severity then rule id, and the root cause's rule id (or None).

    Runs of one log stay apart: findings name their run, the root cause comes from the run that failed
    last, and earlier runs' findings stay as context.
    """
    if len(tl.facts.hosts) > 1:
        from . import multihost

        findings, root = multihost.run_hosts(tl, _detect)
        reconcile_flags(findings, root)
        respell(tl, findings)
        return findings, root
    findings = _detect(tl)
    incident = incident_run(findings, tl)
    findings.sort(key=lambda f: sort_key(f, incident))
    link_consequences(findings, incident)
    missing_facts.annotate(tl, findings)
    from . import multihost

    multihost.note_missing_nodes(tl, {tl.facts.host or "": tl})
    root = pick_root_cause(findings, incident)
    reconcile_flags(findings, root)
    respell(tl, findings)  # after reconciling: one value per engine flag, then the user's spelling of it
    return findings, root


def _detect(tl: Timeline) -> list[Finding]:
    """Every rule's findings over one host's timeline (not yet linked)."""
    findings: list[Finding] = []
    for det in DETECTORS:
        findings.extend(det.detect(tl))
    findings.extend(fatal_other.detect(tl, findings))  # only what no other rule explains
    crash_requests.annotate(findings, tl)  # a serving-time failure names the requests in flight
    stacks.annotate(findings, tl)  # a hang says where each rank was
    flight_recorder.advise(findings, tl)  # a collective timeout without dumps: how to get them
    fill_implied_ranks(tl, findings)
    _prose.weigh(findings, tl)  # what rests on sentences weighs less than program output
    if tl.facts.host:
        for f in findings:
            f.hosts = f.hosts or [tl.facts.host]
    return findings

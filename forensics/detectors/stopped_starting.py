"""SGL-HOST-014: the server was stopped from outside while it was still starting — on Kubernetes, by a probe.

A model server opens its HTTP port only once the weights are loaded, compiled and the CUDA graphs captured,
which takes minutes. Kubernetes probes the container all the while: a startup or liveness probe that fails
``failureThreshold`` times makes the kubelet kill the container (SIGTERM, then SIGKILL after the grace period)
and start it again, which loads the model from the start, fails the same probe, and loops into CrashLoopBackOff
(Kubernetes docs, "Configure Liveness, Readiness and Startup Probes": a startupProbe holds the liveness and
readiness probes back until it succeeds, so its failureThreshold × periodSeconds is the start-up budget; a
readiness failure only takes the pod out of its Service, it restarts nothing). The evidence, from either side:

* the kubelet's events (parsers/failures.py ``kubelet_restart``): ``Startup probe failed: … connect: connection
  refused`` (the port is not open yet: the server is still starting), ``Container X failed liveness probe, will be
  restarted`` (the kill itself), ``Back-off restarting failed container`` / ``CrashLoopBackOff``;
* the engine's own record of a SIGTERM during start-up: vLLM's API server installs a handler that turns SIGTERM into
  ``KeyboardInterrupt("terminated")`` until uvicorn replaces it (vllm vllm/entrypoints/openai/api_server.py (0.6-0.11)
  ``run_server``: "Interrupt server on sigterm while initializing"), and its engine core logs ``EngineCore exiting.``
  when a SIGTERM/SIGINT ends it (vllm vllm/v1/engine/core.py ``run_engine_core``; parsers/vllm.py ``_CORE_EXITING``).
  SGLang prints nothing for a SIGTERM while it loads: its launch phase installs only a SIGQUIT handler (sglang
  python/sglang/srt/entrypoints/engine.py ``_set_envs_and_config``), and the tokenizer manager's
  ``SIGTERM received. … Draining requests and shutting down...`` (managers/tokenizer_manager.py
  ``SignalHandler.sigterm_handler``) is installed by ``auto_create_handle_loop``, which the first request calls
  (``generate_request``): the warm-up request of ``http_server._execute_server_warmup``, after load and capture.
  So that line before ``The server is fired up and ready to roll!`` is a stop during the warm-up; earlier in the
  start a SIGTERM leaves no SGLang line at all (the kubelet's events or the exit code 143 say it).

Not when the engine failed on its own first (an OOM kill, a CUDA OOM, an exception of its own): the probe then fails
because the server is dead, and the rule that explains the death is the cause. Not for a server that had come up
(the liveness probe of a serving server is a hang question).
"""

from __future__ import annotations

from datetime import datetime

from forensics.facts.probes import startup_probe_failures
from forensics.facts.rows import Row, attrs, before, rows
from forensics.facts.stages import STAGES, furthest, furthest_in, served
from forensics.model import Finding, Timeline

from ._common import make_finding
from .stalled import STALL_S

_KUBE = ("probe_failed", "probe_restart", "crash_backoff")
#: failure classes that say the engine failed on its own (then a probe failing is the consequence)
_OWN_FAILURES = frozenset({"oom_killed", "host_oom", "ray_oom", "illegal_memory_access", "ecc_error", "nvlink_error",
                           "launch_failure", "cuda_error", "device_unavailable", "nccl_error", "collective_timeout",
                           "store_timeout", "shm_exhausted", "port_in_use", "kernel_map_failed", "arch_unsupported",
                           "abi_mismatch", "host_register_refused"})
_OWN_KINDS = ("cuda_oom", "cuda_error_oom", "init_failed", "engine_dead", "scheduler_exception", "cuda_error",
              "memory_profiling_error", "rank_dead", "oom_kill", "kv_exhausted", "weights_no_kv_room",
              "not_enough_memory")
#: exceptions a stop raises rather than a failure (KeyboardInterrupt from the handler, SystemExit, the cancelled tasks)
_STOP_EXCEPTIONS = frozenset({"KeyboardInterrupt", "SystemExit", "CancelledError", "asyncio.exceptions.CancelledError"})
#: rows that say a server came up or served
_UP_KINDS = ("server_ready", "decode_batch", "engine_metrics", "prefill_batch", "http_access", "notice", "uvicorn")


def _sigterm_in_init(r: Row) -> bool:
    """vLLM's start-up SIGTERM handler's exception: ``KeyboardInterrupt: terminated``."""
    a = attrs(r)
    return (a.get("exception_type") == "KeyboardInterrupt" and a.get("exception_message") == "terminated") or \
        "KeyboardInterrupt: terminated" in (r.get("text") or "")


def _sglang_warmup_stops(tl: Timeline) -> list[Row]:
    """SGLang's ``SIGTERM received`` during the warm-up: the engine's lines before it reach the warm-up request
    (the HTTP server's start and on) and none says it was ready or serving. The health-check variant (``Signal
    SIGTERM received while health check failed``) and the drain's ``Gracefully exiting`` are a running server's."""
    engine = [r for r in rows(tl, *STAGES, *_UP_KINDS, "progress_bar", "version") if r.get("source") == "sglang"]
    out = []
    for r in rows(tl, "sigterm"):
        if r.get("source") != "sglang" or attrs(r).get("phase") or attrs(r).get("health_check_failed"):
            continue
        earlier = [e for e in engine if before(e, r)]
        reached = furthest(earlier)
        if reached is None or reached.order < STAGES["uvicorn"][0] or served(earlier):
            continue
        # a warm-up is one request, seconds long: a stop after silence past a stall is a hang stopped by hand,
        # SGL-NCCL-010's (forensics/detectors/stalled.py)
        stamps = [e["ts"] for e in earlier if isinstance(e.get("ts"), datetime)]
        if stamps and isinstance(r.get("ts"), datetime) and (r["ts"] - max(stamps)).total_seconds() < STALL_S:
            out.append(r)
    return out


def _own_failures(tl: Timeline) -> list[Row]:
    own = [r for r in rows(tl, *_OWN_KINDS)]
    own += [r for r in rows(tl, "failure") if attrs(r).get("failure") in _OWN_FAILURES
            or (attrs(r).get("failure") == "exception" and not _sigterm_in_init(r)
                and str(attrs(r).get("exception_type") or "") not in _STOP_EXCEPTIONS)]
    own += [r for r in rows(tl, "exception") if attrs(r).get("exception_type")
            and str(attrs(r).get("exception_type")) not in _STOP_EXCEPTIONS]
    return own


def detect(tl: Timeline) -> list[Finding]:
    kube = [r for r in rows(tl, "failure") if attrs(r).get("failure") in _KUBE]
    kills = [r for r in kube if attrs(r).get("failure") == "probe_restart"]
    noise = {(r.get("file"), r.get("line")) for r in startup_probe_failures(tl)}  # a start that then came up
    probes = [r for r in kube if attrs(r).get("failure") == "probe_failed" and attrs(r).get("probe") in
              ("startup", "liveness") and (r.get("file"), r.get("line")) not in noise]
    backoff = [r for r in kube if attrs(r).get("failure") == "crash_backoff"]
    init_stops = [r for r in rows(tl, "exception", "failure") if _sigterm_in_init(r)]
    core_exits = [r for r in rows(tl, "sigterm") if attrs(r).get("phase") == "engine_core_exiting"]
    warmup_stops = _sglang_warmup_stops(tl)
    if not (kills or probes or init_stops or core_exits or warmup_stops):
        return []
    own = _own_failures(tl)
    if own:
        return []  # the engine failed first: the probe failing (or the stop) is its consequence
    engine_rows = [r for r in rows(tl, *_UP_KINDS) if r.get("source") in ("sglang", "vllm")]
    if served(engine_rows) and not (kills or probes or warmup_stops):
        return []  # a stop after the server came up is an operator's or a rollout's, not a start-up budget
    killed_by_probe = bool(kills) or (bool(probes) and bool(backoff or init_stops or core_exits or warmup_stops))
    kinds = sorted({str(attrs(r).get("probe")) for r in [*kills, *probes]})
    refused = any(attrs(r).get("refused") for r in probes)
    restarts = max((int(attrs(r).get("restarts") or 0) for r in backoff), default=0) or None
    reached = furthest_in(tl)
    where = f" It had got as far as {reached.stage}." if reached is not None else ""
    if kills or probes:
        what = " and ".join(f"{k} probe" for k in kinds) or "probe"
        summary = (f"Kubernetes restarted the container while the server was still starting: its {what} failed"
                   + (" with the port not yet open (connection refused)" if refused else "")
                   + (" and the kubelet killed it to restart it" if kills else "")
                   + (f"; the pod is in CrashLoopBackOff ({restarts} restarts)" if restarts else
                      "; the pod is backing off restarts (CrashLoopBackOff)" if backoff else "")
                   + ". A model server opens its port only after loading, compiling and capturing, so a probe budget "
                     "shorter than that start-up kills every attempt; each restart begins the load again." + where)
    elif init_stops:
        summary = ("The server received SIGTERM while it was still initialising (vLLM's start-up handler raised "
                   "KeyboardInterrupt: terminated): it was stopped from outside, not failed. On Kubernetes that is "
                   "a startup or liveness probe whose budget ran out before the load finished; elsewhere `docker "
                   "stop`, a job scheduler's time limit or an operator." + where)
    elif warmup_stops:
        summary = ("SGLang received SIGTERM during its warm-up request, before it was fired up and ready (its "
                   "tokenizer manager's `SIGTERM received` — a handler the first request installs, after the load "
                   "and the graph capture — with no error before it): the server was stopped from outside while "
                   "still starting — on Kubernetes, a startup or liveness probe whose budget ran out just before "
                   "the server came up; elsewhere `docker stop`, a job scheduler or an operator." + where)
    else:
        summary = ("vLLM's engine core was ended by a signal while the server was still starting (EngineCore "
                   "exiting., its SIGTERM/SIGINT handler's exit, with no error before it): the server was stopped "
                   "from outside during start-up — on Kubernetes, a startup or liveness probe that expired before "
                   "the load finished; elsewhere `docker stop`, a job scheduler or an operator." + where)
    reasons = []
    if not killed_by_probe:
        reasons.append("the input shows the stop but not who sent it: the pod's events (`kubectl describe pod`) would "
                       "say whether a probe failed" if not probes else
                       "the probes failed, but the input shows neither the kill nor the restart loop")
    confidence = "high" if killed_by_probe else "medium" if (probes or init_stops or warmup_stops) else "low"
    actions = [
        "Read the pod's events and last state: `kubectl describe pod <pod>` (Startup/Liveness probe failed, Killing … "
        "will be restarted; Last State: Terminated, Exit Code 143 = SIGTERM, 137 = killed after the grace period) "
        "and `kubectl logs <pod> --previous` for how far the last attempt got.",
        "Give the container a startupProbe on the server's health endpoint (vLLM `/health`, SGLang `/health`) whose "
        "failureThreshold × periodSeconds is longer than the whole start-up — download, weight load, compilation, "
        "CUDA-graph capture (e.g. periodSeconds 10, failureThreshold 60-180) — and let liveness start only after "
        "it; an initialDelaySeconds is not a start-up budget.",
        "Shorten what each attempt repeats: weights pre-staged on a volume instead of downloaded at start, the "
        "compile cache on a persistent volume, no tracing/debug settings that slow start-up (VLLM_TRACE_FUNCTION).",
    ]
    return [make_finding(
        "SGL-HOST-014",
        summary=summary,
        evidence=[*kills[:2], *probes[:3], *backoff[:2], *init_stops[:1], *core_exits[:1], *warmup_stops[:1]],
        confidence=confidence,
        confidence_reason="; ".join(reasons) or None,
        figures={"probes_failed": kinds or None, "probe_failures": sum(int(attrs(r).get("count") or 1) for r in probes)
                 or None, "kubelet_kills": len(kills) or None, "restarts": restarts,
                 "stage_reached": reached.stage if reached is not None else None},
        actions=actions,
    )]

"""Kubernetes probe failures that are the start-up's own: the kubelet probing a server still loading.

A model server opens its HTTP port only once it has loaded, and answers ``/health`` only once it is up (SGLang's
``health_generate`` returns 503 while its status is ``Starting``: sglang python/sglang/srt/entrypoints/http_server.py;
vLLM's API server starts listening after the engine is built: vllm vllm/entrypoints/openai/api_server.py
``run_server``). The kubelet probes it all the while and records each failure as an event (kubernetes
pkg/kubelet/prober/prober.go ``%s probe failed: %s``, parsers/failures.py ``kubelet_restart``). A readiness failure
only holds the pod out of its Service, and a startup probe holds the others back until it first succeeds
(Kubernetes docs, "Configure Liveness, Readiness and Startup Probes"), so failures before the server came up, with no
kill and no restart loop, are what every start looks like, not a failure. The kill itself, the restart loop, and
failures of a start that never came up are SGL-HOST-014's.
"""

from __future__ import annotations

from forensics.facts.rows import Row, attrs, before, rows
from forensics.facts.stages import SERVING, VLLM_UP, served
from forensics.model import Timeline

#: rows that say a server came up or served
UP_KINDS = ("server_ready", "decode_batch", "engine_metrics", "prefill_batch", "http_access", "notice", "uvicorn")


def _marks_up(r: Row) -> bool:
    return r.get("kind") in SERVING or (r.get("source") == "vllm" and bool(VLLM_UP.search(r.get("text") or "")))


def startup_probe_failures(tl: Timeline) -> list[Row]:
    """The probe-failure events of a start that then came up: before the engine's first line that says it was up
    (same file: by line; else by stamp), or, where the order is not known (a ``kubectl describe`` event's age is
    relative), a startup probe's (it runs only until the server first answers) or one refused at the port (a server
    that had come up holds its port open). None when the kubelet killed or restarted the container, or the server
    never came up.
    """
    kube = [r for r in rows(tl, "failure")
            if attrs(r).get("failure") in ("probe_failed", "probe_restart", "crash_backoff")]
    probes = [r for r in kube if attrs(r).get("failure") == "probe_failed"]
    if not probes or len(probes) < len(kube):
        return []
    engine = [r for r in rows(tl, *UP_KINDS) if r.get("source") in ("sglang", "vllm")]
    up = next((r for r in engine if _marks_up(r)), None)
    if up is None or not served(engine):
        return []
    out = []
    for p in probes:
        order = before(p, up)
        if order or (order is None and (attrs(p).get("probe") == "startup" or attrs(p).get("refused"))):
            out.append(p)
    return out

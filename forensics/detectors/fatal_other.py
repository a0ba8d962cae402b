"""SGL-RUN-001: the server died and no specific rule explains why.

Sources: SGL-RUN-001 and SGL-RUN-002 take the failure lines of reference/failure_messages.md §8 (the triage
table) that no mechanism explains.

Catch-all so that an incident never yields "no findings": a scheduler exception, a dead rank, a
failed initialisation, the scheduler watchdog, ranks that did not finish loading, a crashed
subprocess or a SIGQUIT in a run where no other rule found a critical/high cause. It names the
line SGLang printed and what to look at next, at medium confidence when the log says what failed
(an exception with its message, a specific death line) and low when it does not (a cut traceback,
a bare SIGQUIT). Sample::

    [2025-03-17 17:15:55 TP1] Scheduler hit an exception: Traceback (most recent call last):
    ...
    ValueError: TP rank 1 could finish the model loading, but there are other ranks that didn't finish loading.

Runs in ``run_all`` after every other detector, with their findings.

>>> innermost_frame('  File "/x/sglang/srt/model_executor/model_runner.py", line 417, in load_model\\n    raise ValueError(')
('model_runner.py', 'load_model')
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from forensics.facts.engines import engine_of, flag_for
from forensics.facts.launch import server_config
from forensics.facts.oom import phase_of_frames
from forensics.facts.probes import startup_probe_failures
from forensics.facts.rows import Row, attrs, before, rank_of, rows
from forensics.facts.runs import RunRef, iter_runs, of_kind
from forensics.facts.stages import STAGES, WEIGHT_BARS, furthest, served
from forensics.model import SEVERITY_RANK, Finding, FlagChange, Timeline
from parsers.failures import classify, compiled_user_frames, compiler_failure, store_poll_warning

from ._common import make_finding, tag_run
from .crash_site import COMPONENTS, crash_site, outside_forward
from .crash_site import where as site_where

#: What counts as the server dying, most telling first (the first kind present leads the finding).
FATAL_KINDS = (
    "ranks_not_loaded", "watchdog_timeout", "rank_dead", "init_failed", "scheduler_exception", "cuda_graph_failed",
    "cuda_oom", "cuda_error_oom", "failure", "subprocess_crashed", "health_check_failed", "nccl_watchdog", "sigquit",
    # vLLM's (parsers/vllm.py)
    "exception", "engine_dead", "cuda_error", "memory_profiling_error",
)
#: ``failure`` classes (parsers.failures) that say a process or the server died, not a refused request
FATAL_CLASSES = frozenset({
    "exception", "traceback_cut", "illegal_memory_access", "device_assert", "arch_unsupported", "abi_mismatch", "ecc_error", "nvlink_error", "launch_failure", "cuda_error",
    "device_unavailable", "nccl_error", "collective_timeout", "store_timeout", "shm_exhausted", "signal", "process_exit",
    "oom_killed", "ray_oom", "host_oom", "port_in_use", "kv_pool_leak", "dispatch_cap", "hicache_host_smaller",
    "kernel_map_failed", "startup_failed",
    "host_register_refused", "peer_exited",
})
#: classes that name what failed; the rest (a cut traceback, a bare abort) only say that something did
_TELLING = frozenset(FATAL_CLASSES - {"traceback_cut", "signal", "process_exit", "startup_failed"})
#: Every kind that reports a failure, fatal or not: each such line backs a finding or is listed by SGL-RUN-002.
FAILURE_LINE_KINDS = (*FATAL_KINDS, "kv_exhausted", "hicache_insufficient", "not_enough_memory", "weights_no_kv_room",
                      "memory_leak", "oom_kill", "xid", "gpu_fallen_off_bus", "hung_task", "gpu_error", "amdgpu_fault",
                      # vLLM's (parsers/vllm.py)
                      "exception", "engine_dead", "cuda_error", "kv_no_room", "kv_cache_too_small", "gpu_memory_short",
                      "swap_space_too_large", "swap_exhausted", "nccl_error", "rpc_timeout", "memory_profiling_error")
#: a traceback's frame line (cpython Lib/traceback.py (3.x))
_FRAME_RE = re.compile(r'File "([^"]*)", line \d+, in (\w+)')
#: the custom all-reduce named in a capture error's own text (the capture hint's markers:
#: sglang python/sglang/srt/model_executor/cuda_graph_backend_utils/__init__.py (0.5.x))
_CUSTOM_AR_RE = re.compile(r"custom_all_reduce|custom all-reduce|cudaipc", re.IGNORECASE)


def innermost_frame(text: str) -> tuple[str, str] | None:
    """(file name, function) of a traceback's last frame."""
    frames = _FRAME_RE.findall(text)
    if not frames:
        return None
    path, func = frames[-1]
    return path.rsplit("/", 1)[-1], func


def failure_class(row: Row) -> str | None:
    return attrs(row).get("failure") if row.get("kind") == "failure" else None


# source: none (the engines' and their libraries' package names, as they appear in a frame's path)
_ENGINE_FRAME = re.compile(r"sglang|vllm|torch|ray/|triton|flashinfer|nccl|deep_gemm|sgl_kernel", re.I)


def client_side(row: Row) -> bool:
    """A traceback whose frames are all outside the engine and its libraries: a client or a script, not the
    server (a load generator losing its connection is no server death)."""
    if row.get("kind") != "failure":
        return False
    frames = _FRAME_RE.findall(row.get("text") or "")
    return bool(frames) and not any(_ENGINE_FRAME.search(path) for path, _fn in frames)


def warned_only(row: Row) -> bool:
    """c10d's ``[W…]`` line that its store client's poll came back empty or ran out (parsers/failures.py
    ``store_poll_warning``): the client waiting on the TCPStore, neither a death nor a failure line a finding must
    back — the wait that then fails raises its own error, and one that the ranks got past was no failure at all."""
    return row.get("kind") in ("nccl_watchdog", "failure") and store_poll_warning(row.get("text") or "")


def is_fatal(row: Row) -> bool:
    if row.get("kind") not in FATAL_KINDS:
        return False
    if row.get("kind") == "failure" and (failure_class(row) not in FATAL_CLASSES or client_side(row)):
        return False
    if row.get("kind") == "watchdog_timeout" and attrs(row).get("soft"):
        return False  # sglang srt/utils/watchdog.py (0.5.7+): a soft watchdog only dumps, it sends no SIGQUIT
    if warned_only(row):
        return False
    # '# ' lines are notes pasted around an excerpt, never an SGLang record
    return not (row.get("text") or "").lstrip().startswith("#")


def _lead_key(row: Row) -> tuple:
    """Most telling first, then earliest: a failure that names what broke leads a bare teardown line."""
    kind = row["kind"]
    told_where = failure_class(row) == "signal" and bool(attrs(row).get("crashed_file"))  # a faulthandler dump
    generic = kind in ("sigquit", "health_check_failed") \
        or (kind == "failure" and failure_class(row) not in _TELLING and not told_where) \
        or (kind == "scheduler_exception" and not attrs(row).get("exception_type")) \
        or (kind == "init_failed" and row.get("source") == "vllm")  # "EngineCore failed to start": the traceback says why
    ts = row.get("ts")
    return (generic, ts.timestamp() if hasattr(ts, "timestamp") else float("inf"), FATAL_KINDS.index(kind),
            row.get("file") or "", row.get("line") or 0)


def _explained(ref: RunRef, findings: Iterable[Finding]) -> bool:
    """A critical/high finding about this run (or about the host, untagged) already explains the death."""
    for f in findings:
        if SEVERITY_RANK[f.severity] > SEVERITY_RANK["high"] or f.rule_id == "SGL-RUN-001":
            continue
        if f.figures.get("run_started") in (None, ref.started):
            return True
    return False


def detect(tl: Timeline, findings: Iterable[Finding] = ()) -> list[Finding]:
    findings = list(findings)
    out = []
    for ref, run in iter_runs(tl):
        fatal = [r for r in of_kind(run, *FATAL_KINDS) if is_fatal(r)]
        if not fatal or _explained(ref, findings):
            continue
        out.append(tag_run(_finding(fatal, run, tl), ref))
    out += _vllm_deaths(tl, [*findings, *out])
    leftover = _unexplained_lines(tl, [*findings, *out])
    if leftover:
        out.append(leftover)
    return out


def _vllm_deaths(tl: Timeline, findings: list[Finding]) -> list[Finding]:
    """SGL-RUN-001 for a vLLM server that died of something no rule explains (its runs are vLLM's own)."""
    from forensics.facts.vllm import vllm_runs

    if any(SEVERITY_RANK[f.severity] <= SEVERITY_RANK["high"] and f.rule_id not in ("SGL-RUN-001", "SGL-RUN-002")
           for f in findings):
        return []
    out = []
    for run in vllm_runs(tl):
        fatal = [r for r in run if is_fatal(r)]
        if fatal:
            out.append(_finding(fatal, run))
            break  # one server's death; its other runs' lines are listed by SGL-RUN-002
    return out


def _unexplained_lines(tl: Timeline, findings: list[Finding]) -> Finding | None:
    """SGL-RUN-002: failure lines that back no finding, so that none is lost.

    A line is explained when it is a finding's evidence, or repeats what such a line said (same kind and
    failure class in the same file: the 200 identical NCCL warnings behind one finding)."""
    cited = {(e.file, e.line) for f in findings for e in f.evidence}
    # what comes after a failure that a serious finding cites, in the same file, is its teardown
    first_cited: dict[str, int] = {}
    for f in findings:
        if SEVERITY_RANK[f.severity] <= SEVERITY_RANK["high"] and f.rule_id != "SGL-RUN-002":
            for e in f.evidence:
                first_cited[e.file] = min(first_cited.get(e.file, e.line), e.line)
    # the kubelet probing a server that then came up: every start's own noise, counted, not listed
    noise = {(r.get("file"), r.get("line")) for r in startup_probe_failures(tl)}
    all_rows = [r for r in rows(tl, *FAILURE_LINE_KINDS) if (r.get("file"), r.get("line")) not in noise
                and not warned_only(r)]
    by_pos = {(r.get("file"), r.get("line")): r for r in all_rows}
    explained_kinds = {(r.get("file"), r.get("kind"), failure_class(r))
                       for pos in cited if (r := by_pos.get(pos)) is not None}
    explained_any_file = {(k, c) for _f, k, c in explained_kinds}
    left = []
    for r in all_rows:
        if (r.get("file"), r.get("line")) in cited or (r.get("text") or "").lstrip().startswith("#"):
            continue
        if (r.get("file"), r.get("kind"), failure_class(r)) in explained_kinds:
            continue
        if (r.get("line") or 0) > first_cited.get(r.get("file"), 1 << 62):
            continue
        # the engine's own header for the traceback on the next line ("EngineCore encountered a fatal error.",
        # vllm_formats.md §3) says the same death as the traceback a finding cites
        if r.get("kind") == "engine_dead" and (r.get("file"), (r.get("line") or 0) + 1) in cited:
            continue
        if r.get("kind") in ("xid", "oom_kill", "hung_task", "gpu_error") and (r.get("kind"), None) in explained_any_file:
            continue
        left.append(r)
    if not left:
        return None
    where = [f"{r.get('file')}:{r.get('line')}" for r in left]
    first = left[0]
    return make_finding(
        "SGL-RUN-002",
        summary=(f"{len(left)} failure line(s) back no finding; the first is {where[0]}: "
                 f"{_first_line(first)[:160]}. Read them before closing the incident."),
        evidence=left,
        confidence="high",
        confidence_reason=None,
        figures={"unexplained_lines": where[:500], "unexplained_count": len(left),
                 "startup_probe_failures": len(noise) or None,
                 "kinds": sorted({r["kind"] if r["kind"] != "failure" else f"failure:{failure_class(r)}" for r in left})},
        actions=["Each line is listed as file:line; the first one in time on the first rank that failed is usually the "
                 "one to read. If it explains the incident, `forensics explain SGL-RUN-002` says how to report it."],
    )


def _first_line(row: Row) -> str:
    """The line that says what failed: a whole traceback's exception line, else the record's first line."""
    lines = (row.get("text") or "").strip().splitlines()
    if not lines:
        return row.get("kind", "")
    whole_traceback = lines[0].startswith("Traceback") and failure_class(row) not in (None, "traceback_cut")
    return lines[-1] if whole_traceback else lines[0]


def _exception_words(row: Row) -> tuple[str | None, bool]:
    """What a scheduler exception says, and whether its message is in the input."""
    a = attrs(row)
    etype, emsg = a.get("exception_type"), a.get("exception_message")
    text = row.get("text") or ""
    during_init = "Scheduler(" in text or "__init__" in text
    where = " during start-up" if during_init else ""
    who = _who(a.get("component"), text)
    if etype:
        said = str(emsg or "").strip()[:200]
        return f"{who} raised {etype}{where}" + (f": {said}" if said else " (with no message)"), True
    site = crash_site(text)
    if site is not None:
        ruled_out = outside_forward(site)
        return (f"{who} raised an exception{where}; the traceback is cut before its exception line — it stopped "
                f"{site_where(site)}" + (f"; {ruled_out}" if ruled_out else "")), False
    return f"{who} raised an exception{where}", False


def _exception_class(a: dict) -> str | None:
    """The failure class of a traceback's exception line (parsers.failures.classify), when it has one."""
    if not a.get("exception_type"):
        return None
    found = classify(f"{a['exception_type']}: {str(a.get('exception_message') or '')[:2000]}")
    return found[2].get("failure") if found and found[0] == "failure" else None


def _who(component: object, text: str) -> str:
    """The process that raised, in words (sglang_formats.md §7), from the row's component or the header line."""
    site = crash_site(text)
    name = component if isinstance(component, str) and component in COMPONENTS else (site.component if site else None)
    return COMPONENTS.get(name or "", "a scheduler")


def _words(row: Row) -> tuple[str, bool, list[str]]:
    """The death in words, whether the input says what failed, and what to do next."""
    kind = row.get("kind")
    a = attrs(row)
    generic = ["Read the first traceback of the first rank that failed (the other ranks die after it) and the kernel "
               "log of the same minutes (`dmesg -T`) for OOM kills and Xids."]
    if kind == "ranks_not_loaded":
        rank = a.get("named_tp_rank", rank_of(row))
        return (f"TP rank {rank if rank is not None else '?'} finished loading the weights but other ranks did not "
                "(one ran out of memory while loading, crashed, or a node was slow)", True,
                ["Read the logs of the other ranks and nodes: the first one that failed (an OOM while loading, a "
                 "traceback, an OOM kill in dmesg) is the cause; a slow node needs a longer --dist-timeout.", *generic])
    if kind == "watchdog_timeout" and a.get("component", "Scheduler") != "Scheduler":
        # sglang srt/utils/watchdog.py (0.5.7+): ``{debug_name} watchdog timeout (…)`` for a CPU-side process
        secs = row.get("seconds")
        return (f"the {a['component']} watchdog fired{f' after {secs:g} s' if secs else ''}: that process (CPU "
                "side, no GPU step) stopped making progress and SGLang took the server down", True,
                [f"py-spy dump --pid <{a['component']} pid>: it shows where that process is stuck (a tokenizer or "
                 "detokenizer call on a huge input or output, a blocked socket, a held lock); the GPU ranks are not "
                 "the cause.", *generic])
    if kind == "watchdog_timeout":
        secs = row.get("seconds")
        return (f"the scheduler watchdog fired{f' after {secs:g} s' if secs else ''}: a forward pass or a collective "
                "hung", True,
                ["py-spy dump --pid <scheduler pid> on a hung rank; check the kernel log for Xids and NCCL for a dead "
                 "peer; --watchdog-timeout only changes how long SGLang waits.", *generic])
    if kind == "rank_dead" and a.get("cause") == "ray_worker_exited":
        # Ray's worker-exit notice lists possible causes (OOM killer, `ray stop --force`, a crash): none observed
        return ("a Ray worker process died and Ray does not say of what (it lists the OOM killer, `ray stop --force` "
                "or a crash as possibilities); the kernel log of the same minutes decides", False,
                ["`dmesg -T | grep -i 'killed process'` on the worker's node: a kill there is host memory (weights "
                 "loaded by every rank at once, swap or offload per GPU); a segfault or an Xid is a crash.", *generic])
    if kind == "rank_dead":
        code = row.get("code")
        return (f"the rank {rank_of(row) if rank_of(row) is not None else ''} scheduler died".replace("rank  ", "rank ")
                + (f" with exit code {code}" if code is not None else ""), code is not None,
                ["A negative exit code is the signal that killed it (-9 SIGKILL: kernel OOM killer, `kill -9`, the "
                 "container runtime; -6 SIGABRT: a C++ abort, -11 SIGSEGV: a crash in a kernel or extension).",
                 *generic])
    if kind == "init_failed":
        return "the server failed to initialise", False, generic
    if kind == "scheduler_exception":
        words, said = _exception_words(row)
        if (refused := _refusal_words(a)) is not None:
            return f"{words} — {refused[0]}", said, [*refused[1], *generic]
        # a class the engine's parser read in its message, or the exception line's own (failure_messages.md §2.2)
        told = _CLASS_WORDS.get(str(a.get("failure") or "")) or _CLASS_WORDS.get(_exception_class(a) or "")
        return (f"{words} — {told[0]}" if told else words), said, \
            [*(told[1] if told else []), *([] if said else [_FIND_FULL_TRACEBACK]), *generic]
    if kind == "cuda_graph_failed" and a.get("graph") == "piecewise":
        said = str(a.get("message") or "").strip()[:200]
        return ((f"the piecewise CUDA graph (SGLang's graphs of prefill/extend, on by default) failed: {said}" if said
                 else "the piecewise CUDA graph (SGLang's graphs of prefill/extend, on by default) failed"), bool(said),
                ["Not a memory problem: the engine's own hint is --disable-piecewise-cuda-graph, which keeps the "
                 "decode graphs; report the error with the SGLang version and the model.", *generic])
    if kind == "cuda_graph_failed":
        said = str(a.get("message") or "").strip()[:200]
        return ((f"CUDA-graph capture failed: {said}" if said else
                 "CUDA-graph capture failed and SGLang printed no error with it (the exception it wrapped had an "
                 "empty message)"), bool(said),
                [("Not a memory problem: try another --attention-backend, or --disable-cuda-graph to confirm the "
                  "capture is what fails; report the error with the SGLang and driver versions." if said else
                  "What failed is not in the log (no OOM text, no CUDA error): the first rank's full traceback, or one "
                  "run with CUDA_LAUNCH_BLOCKING=1, names it; report it with the SGLang and driver versions."),
                 *generic])
    if kind == "subprocess_crashed":
        return (f"the {a.get('name') or 'sub'}process crashed" + (f" (exit code {row['code']})" if row.get("code") is not None
                                                                   else ""), True, generic)
    if kind == "health_check_failed":
        return "the health check failed: the server stopped answering", False, generic
    if kind == "exception":  # vLLM's traceback row
        etype, emsg = a.get("exception_type"), str(a.get("exception_message") or "").strip()
        # the class the exception line's own words name (failure_messages.md §2.2), as for SGLang's scheduler
        told = _CLASS_WORDS.get(_exception_class(a) or "")
        return ((f"{etype}: {emsg[:200]}" if etype and emsg else f"{etype or 'an exception'} was raised")
                # a capture says so in the finding's own words ("while CUDA graphs were being captured")
                + (f" (during {a['during']})" if a.get("during") and a["during"] != "graph_capture" else "")
                + (f" — {told[0]}" if told else ""),
                bool(emsg), [*(told[1] if told else []), *generic])
    if kind == "memory_profiling_error":
        # vllm_formats.md §3.5: ``assert`` in the profiling step (V0 0.2–0.10 ``profile_run``, V1 0.7+
        # ``determine_available_memory``) that the GPU's free memory did not rise while vLLM profiled
        return ("vLLM's memory profiling failed its own check: the GPU had more free memory after profiling than "
                "before, so memory another process (or an earlier instance) held was released while vLLM measured",
                True, ["nvidia-smi before the launch: start vLLM only on a GPU no other process is using or releasing "
                       "(a previous instance still shutting down, a co-tenant in the same container).", *generic])
    if kind == "engine_dead":
        return f"the vLLM engine core died ({a.get('reason') or 'no reason given'})", False, generic
    if kind == "cuda_error":
        return f"CUDA error: {str(a.get('message') or a.get('error') or '')[:200]}", True, generic
    if kind in ("cuda_oom", "cuda_error_oom"):
        msg = (str(a.get("message") or row.get("text") or "").strip().splitlines() or ["(no text)"])[0][:200]
        return (f"a GPU allocation failed and no rule could place it (start-up, capture or serving): {msg}", True,
                ["Read the lines before it: the start-up stage it happened in decides the fix (weights: more GPUs or a "
                 "higher --mem-fraction-static; serving: a lower one).", *generic])
    if kind == "failure":
        return _failure_words(row, generic)
    if kind == "nccl_watchdog":
        return (f"a collective or barrier failed ({a.get('event') or 'watchdog'}): "
                f"{str(a.get('message') or row.get('text') or '').strip()[:160]}", False,
                ["The rank it names (or the one missing) failed first: read its log.", *generic])
    return "a child process failed and SGLang sent SIGQUIT to tear the server down", False, generic


#: CUDA's own errors for an operation a stream capture forbids (failure_messages.md §2.2, the stream-capture errors;
#: cudaErrorStreamCaptureUnsupported and cudaErrorStreamCaptureInvalidated): raised only while a graph is captured
_CAPTURE_ONLY_RE = re.compile(r"operation not permitted when stream is capturing|"
                              r"operation failed due to a previous error during capture|"
                              # SGLang's own capture-failure message (sglang_formats.md §5, graph capture failure
                              # row: cuda_graph_runner.py, 0.5.15+ the decode and prefill runners)
                              r"Capture (?:cuda|prefill CUDA|decode CUDA) graph failed")


def _capture_frames(lead: Row, run: list[Row]) -> list[tuple[str, str]]:
    """The frames of ``lead`` and of the tracebacks chained to it (the same file, "During handling of the above
    exception…" follows within a few lines) when one of them places the failure in graph capture."""
    chained = [r for r in run if r.get("file") == lead.get("file") and r.get("kind") in FATAL_KINDS
               and 0 <= (r.get("line") or 0) - (lead.get("line_end") or lead.get("line") or 0) <= 6]
    frames = [f for r in (lead, *chained) for f in _FRAME_RE.findall((r.get("text") or "")[:20000])]
    return frames if phase_of_frames(frames) == "graph_capture" else []


def during_capture(lead: Row, run: list[Row]) -> bool:
    """Did ``lead`` happen while CUDA graphs were being captured (after a capture began, before it ended)?"""
    if attrs(lead).get("during") == "graph_capture" or lead.get("kind") == "cuda_graph_failed":
        return True
    if _CAPTURE_ONLY_RE.search(lead.get("text") or "") or _capture_frames(lead, run):
        return True
    same = [r for r in run if r.get("file") == lead.get("file") and (r.get("line") or 0) < (lead.get("line") or 0)]
    loaded = [r for r in same if r.get("kind") == "weight_load_end"]
    begun = [r for r in same if r.get("kind") in ("cuda_graph_begin", "capture_progress")
             or (r.get("kind") == "progress_bar" and attrs(r).get("label") not in WEIGHT_BARS
                 and any(w["line"] < r["line"] for w in loaded))]
    if not begun:
        return False
    last = max(r["line"] for r in begun)
    return not any(r.get("kind") == "cuda_graph_end" and r["line"] > last for r in same)


def _torch_compile_flag(tl: Timeline | None, run: list[Row], fatal: list[Row] = ()) -> FlagChange | None:
    """Remove --enable-torch-compile when the launch set it, or the failure is the compiler's, and the capture died
    of something that is no OOM.

    SGLang compiles the model inside the capture (sglang cuda_graph_runner.py, 0.3+: ``patch_model(…,
    enable_compile=bs in compile_bs)`` for batch sizes up to --torch-compile-max-bs), so a compiler or Inductor
    failure surfaces as a capture failure; its own capture-failure advice lists "disable torch compile by not using
    --enable-torch-compile" (sglang_formats.md §2, graph capture failure row). Dropping it keeps the graphs. Without
    the launch in the input, a failure the compiler raised (``parsers.failures.compiler_failure``) says the compiler
    ran, which SGLang does only when asked (--enable-torch-compile; piecewise graphs, 0.5.4+, compile too).
    """
    if tl is None:
        return None
    cfg = server_config(tl, run)
    texts = [f"{r.get('text') or ''}\n{attrs(r).get('message') or ''}" for r in (*fatal, *run)
             if r.get("kind") in _COMPILER_KINDS]
    if cfg.enabled("enable_torch_compile"):
        old = "(set)"
    elif not (cfg.has_server_args or cfg.has_launch) and any(compiler_failure(t) for t in texts):
        if _helper_compiled(texts):
            return None
        old = None
    else:
        return None
    return FlagChange("--enable-torch-compile", old, "(remove)",
                      "SGLang compiles the model inside the CUDA-graph capture (batch sizes up to "
                      "--torch-compile-max-bs), so a compile failure shows as a capture failure; without it the graphs "
                      "are still captured, only not compiled — try this before giving up the graphs"
                      + ("" if old else " (the launch is not in the input: the failure is the compiler's own, so the "
                                        "compiler ran; with piecewise CUDA graphs, --enable-piecewise-cuda-graph "
                                        "instead)"))


def _deepep_normal_flag(tl: Timeline | None, run: list[Row]) -> FlagChange | None:
    """``--deepep-mode auto`` for a CUDA-graph capture that failed in a launch with DeepEP in normal mode and graphs on.

    DeepEP's normal mode (CPU-synchronised dispatch) cannot be captured in a CUDA graph: SGLang added a hint saying
    so (sglang PR #5014, April 2025) and later turns the graphs off for that mode itself, sglang
    python/sglang/srt/server_args.py (0.5.x) ``_handle_a2a_moe``: "Cuda graph is disabled because
    deepep_mode=`normal`". A build that still captures runs its decode graphs through the normal dispatch and fails
    there. ``auto`` sends decode batches through the low-latency mode, which captures, and prefill through normal.
    """
    if tl is None:
        return None
    cfg = server_config(tl, run)
    mode = str(cfg.get("deepep_mode") or "").strip().lower()
    deepep = cfg.enabled("enable_deepep_moe") or str(cfg.get("moe_a2a_backend") or "").strip().lower() == "deepep"
    if mode != "normal" or not deepep or cfg.enabled("disable_cuda_graph"):
        return None
    return FlagChange("--deepep-mode", "normal", "auto",
                      "DeepEP's normal mode cannot be captured in a CUDA graph (newer SGLang disables the graphs for "
                      "it); auto decodes through the low-latency mode, which captures, and keeps normal for prefill "
                      "(a build that refuses auto with DP attention: low_latency)")


#: rows whose text may carry the compiler's failure (a traceback, a capture failure, a loose failure line)
_COMPILER_KINDS = ("scheduler_exception", "cuda_graph_failed", "failure", "exception")


def _helper_compiled(texts: list[str]) -> bool:
    """Whether the compiler failed on one of SGLang's own compiled helpers, not the model: dynamo's user frames name no
    model file. SGLang compiles small kernels' helpers whatever the launch says (``@torch.compile`` on them, e.g.
    sglang python/sglang/srt/layers/moe/fused_moe_triton/fused_moe.py::moe_sum_reduce_torch_compile (0.4.6+; under
    layers/moe/moe_runner/triton_utils/ in 0.5.x), used for batches of at most 32 tokens, the captured sizes), so
    without the launch a compiler failure there does not say --enable-torch-compile was set."""
    frames = [f for t in texts for f in compiled_user_frames(t)]
    return bool(frames) and not any("/models/" in path for path, _func in frames)


def _custom_all_reduce_flag(lead: Row, run: list[Row], tl: Timeline | None) -> FlagChange | None:
    """--disable-custom-all-reduce when the failure is inside the custom all-reduce (during capture, or its own
    native CUDA check at any time).

    SGLang's custom all-reduce (sglang srt/distributed/device_communicators/custom_all_reduce.py, 0.3+; the same in
    vLLM) registers every captured graph's buffers with its peers over CUDA IPC when a capture ends
    (``register_graph_buffers``); a failure there (``invalid argument`` from the IPC handles) is that kernel's, and
    --disable-custom-all-reduce hands the all-reduce to NCCL, which needs no such registration. SGLang's own capture
    hint says the same from the error's text (sglang python/sglang/srt/model_executor/cuda_graph_backend_utils/
    __init__.py, 2026: markers ``custom_all_reduce``, ``custom all-reduce``, ``cudaipc`` → "The failure came from
    custom all-reduce sharing buffers between GPUs through CUDA IPC, not from a GPU memory shortage").
    """
    frames = [f for r in (lead, *run) if r.get("file") == lead.get("file")
              for f in _FRAME_RE.findall((r.get("text") or "")[:20000])] + (
        [tuple(str(attrs(lead).get("innermost_frame") or "").split(":", 1))] if attrs(lead).get("innermost_frame") else [])
    in_frames = any("custom_all_reduce" in path or func == "register_graph_buffers" for path, *rest in frames
                    for func in (rest or [""]))
    if not in_frames and not _CUSTOM_AR_RE.search((lead.get("text") or "")[:20000]):
        return None
    if tl is not None and server_config(tl, run).enabled("disable_custom_all_reduce"):
        return None
    return FlagChange("--disable-custom-all-reduce", None, "true",
                      "the failure is inside the custom all-reduce, which shares its buffers (and each captured "
                      "graph's) with its peers over CUDA IPC; with it off NCCL does the all-reduce and nothing is "
                      "shared or registered")


def _no_graphs_flag(fatal: list[Row]) -> FlagChange:
    """Run once without CUDA graphs, in the engine's own words: SGLang's --disable-cuda-graph (its capture-failure
    advice, sglang_formats.md §2), vLLM's --enforce-eager (vllm_formats.md §2.2 enforce_eager: "To run the model in
    eager mode, … use '--enforce-eager'", the capture line's own advice)."""
    why = ("the server died during CUDA-graph capture of something that is no OOM: run once without graphs to confirm "
           "the capture path is what fails (slower decode), then report the kernel")
    return FlagChange(flag_for("vllm" if engine_of(fatal) == "vllm" else "sglang", "eager") or "--disable-cuda-graph",
                      None, "true", why)


def _piecewise_flag(lead: Row, tl: Timeline | None, run: list[Row] | None) -> FlagChange | None:
    """Turn the piecewise CUDA graph off after it failed with something that is no OOM: its own hint
    (sglang python/sglang/srt/compilation/piecewise_context_manager.py, 0.5.10+: "To work around this error, add
    --disable-piecewise-cuda-graph") — the decode graphs stay. Before it was on by default (0.5.4–0.5.9) it was asked
    for with --enable-piecewise-cuda-graph, which is then what to drop."""
    cfg = server_config(tl, run or []) if tl is not None else None
    if cfg is not None and cfg.enabled("disable_piecewise_cuda_graph"):
        return None
    why = ("the piecewise CUDA graph (prefill/extend) failed with something that is no OOM; without it the decode "
           "graphs still run — the engine's own workaround")
    if cfg is not None and cfg.enabled("enable_piecewise_cuda_graph"):
        return FlagChange("--enable-piecewise-cuda-graph", "(set)", "(remove)", why)
    named = next((m.group(1) for r in (lead, *(run or [])) if r.get("file") == lead.get("file")
                  and (m := _WORKAROUND_RE.search(str(r.get("text") or "")[:4000]))), None)
    return FlagChange(named or "--disable-piecewise-cuda-graph", None, "true", why)


#: the flag the piecewise failure's own hint names (sglang python/sglang/srt/compilation/piecewise_context_manager.py
#: (0.5.10+): "To work around this error, add --disable-piecewise-cuda-graph to your launch command"); a later
#: release may name another
_WORKAROUND_RE = re.compile(r"To work around this error, add (--[a-z0-9][a-z0-9-]{2,60}) to your launch command")


#: an engine failure that prescribes its own environment setting, ``Try SGLANG_X=v``: sglang
#: python/sglang/srt/layers/moe/moe_runner/flashinfer_cutedsl.py (2026 main) raises ``AssertionError("NVFP4 dispatch scale has stride(-1)=…; .view(float8_e4m3fn)
#: requires stride(-1)==1. Try SGLANG_MOE_NVFP4_DISPATCH=0 or check DeepEP version.")``; only SGLANG_* names, the
#: engine's own switches, are taken
_PRESCRIBED_ENV_RE = re.compile(r"\bTry (SGLANG_[A-Z0-9_]{3,60})=([A-Za-z0-9_.-]{1,20})\b")


def _prescribed_env(fatal: list[Row]) -> FlagChange | None:
    """The environment setting the failure's own message prescribes, as a change."""
    for r in fatal:
        m = _PRESCRIBED_ENV_RE.search(str(r.get("text") or "")[:4000])
        if m:
            return FlagChange(m.group(1), None, m.group(2).rstrip("."),
                              f"the failure's own message prescribes {m.group(1)}={m.group(2).rstrip('.')}")
    return None


#: the other failure lines of the same death, as a reader names them
_KIND_WORDS = {
    "sigquit": "the launcher's SIGQUIT (its teardown after a child failed)",
    "init_failed": "the engine's start-up failure line",
    "engine_dead": "the engine core's death notice",
    "rank_dead": "a rank's exit",
    "cuda_oom": "a CUDA out-of-memory line",
    "cuda_error_oom": "a CUDA 'out of memory' error",
    "scheduler_exception": "a scheduler traceback",
    "exception": "a traceback",
    "failure": "other failure lines",
    "nccl_watchdog": "an NCCL watchdog line",
    "subprocess_crashed": "a subprocess crash",
    "health_check_failed": "a failed health check",
    "watchdog_timeout": "a watchdog timeout",
    "cuda_graph_failed": "a CUDA-graph capture failure",
    "cuda_error": "a CUDA error",
}


def _finding(fatal: list[Row], run: list[Row] | None = None, tl: Timeline | None = None) -> Finding:
    lead = min(fatal, key=_lead_key)
    words, said, actions = _words(lead)
    flags = []
    if attrs(lead).get("graph") == "piecewise":
        if (pw := _piecewise_flag(lead, tl, run)) is not None:
            flags.append(pw)
    elif run is not None and lead.get("kind") not in ("cuda_oom", "cuda_error_oom") and during_capture(lead, run):
        if lead.get("kind") != "cuda_graph_failed":  # its own words already say so
            words += " while CUDA graphs were being captured"
        if (normal := _deepep_normal_flag(tl, run)) is not None:
            # a capture through DeepEP's normal mode is the launch's own contradiction: the mode, not the kernel
            flags.append(normal)
            actions = ["Or keep --deepep-mode normal and run without CUDA graphs (--disable-cuda-graph), as SGLang "
                       "later does on its own for that mode.", *actions]
        elif (ar_flag := _custom_all_reduce_flag(lead, run, tl)) is not None:
            flags.append(ar_flag)
            actions = ["If the capture still fails with NCCL doing the all-reduce, one run with --disable-cuda-graph "
                       "confirms the capture path is what fails (slower decode).", *actions]
        elif engine_of(fatal) != "vllm" and (compile_flag := _torch_compile_flag(tl, run, fatal)) is not None:
            # the cheaper step first; giving up the graphs is what to try only if the capture still fails
            flags.append(compile_flag)
            actions = ["If the capture still fails without torch.compile, one run with --disable-cuda-graph confirms "
                       "the capture path is what fails (slower decode); report the kernel.", *actions]
        else:
            flags.append(_no_graphs_flag(fatal))
    if not flags and attrs(lead).get("failure") == "cuda_error" and _CUSTOM_AR_RE.search(
            str(attrs(lead).get("source_file") or "")) and (ar := _custom_all_reduce_flag(lead, run or [], tl)):
        # the custom all-reduce's own CUDA check failed (its CUDACHECK prints the file and exits): its IPC buffers or
        # peer access, not the model — NCCL does the all-reduce without them
        words += " (a CUDA call inside the engine's custom all-reduce, which shares buffers between the GPUs over CUDA IPC)"
        flags.append(ar)
    if not flags and (env := _prescribed_env(fatal)) is not None:
        flags.append(env)
    others = sorted({_KIND_WORDS.get(r["kind"], r["kind"].replace("_", " ")) for r in fatal if r["kind"] != lead["kind"]})
    # the stage the run had reached when it died (forensics/facts/stages.py): where it failed, when not what
    reached = furthest([r for r in run if before(r, lead) is True]) if run is not None else None
    if reached is not None and not served([r for r in run or [] if before(r, lead) is True]):
        words += f", at {reached.stage} (its last start-up stage, {reached.row.get('file')}:{reached.row.get('line')})"
    if not said and run is not None and reached is not None and in_dist_init(reached) \
            and len({rank_of(r) for r in run if rank_of(r) is not None}) > 1 \
            and not any(native_crash(r) for r in fatal):
        return _died_in_dist_init(lead, fatal, reached)
    reason = ("no rule explains this failure: it is reported as SGLang printed it"
              + ("" if said else f"; the input does not say what failed ({_missing(lead)})"
                 + (f" — its exception line would decide which of the failures of {reached.stage} it was "
                    f"(that stage waits on {reached.waits_on})" if reached is not None else "")))
    return make_finding(
        "SGL-RUN-001",
        summary=f"The server died: {words.rstrip('.')}." + (f" Also seen: {', '.join(others)}." if others else ""),
        evidence=[lead, *[r for r in fatal if r is not lead][:5]],
        confidence="medium" if said else "low",
        confidence_reason=reason,
        ranks=[x for x in (rank_of(r) for r in fatal) if x is not None],
        flags=flags,
        figures={"first_failure_kind": lead["kind"], "first_failure_class": failure_class(lead),
                 "exception_type": attrs(lead).get("exception_type"),
                 "exit_code": lead.get("code") if lead["kind"] in ("rank_dead", "subprocess_crashed") else None,
                 "failure_kinds": sorted({r["kind"] for r in fatal})},
        actions=actions,
    )


def _missing(lead: Row) -> str:
    """What the input lacks that would say what failed, for a death it does not explain."""
    if lead.get("kind") in ("scheduler_exception", "exception") or failure_class(lead) == "traceback_cut":
        return "the traceback is cut before its exception line"
    if lead.get("kind") in ("sigquit", "rank_dead", "subprocess_crashed") or failure_class(lead) in (
            "signal", "process_exit"):
        return "only the teardown lines are in the input, not the first failing process's traceback"
    return "a line without the traceback or log around it"


def native_crash(row: Row) -> bool:
    """A process that crashed (SIGSEGV, SIGBUS, SIGABRT: failure_messages.md §5.1) rather than waited or was killed:
    at distributed initialisation that is the library crashing, not a connection that never completed."""
    return failure_class(row) == "signal" and attrs(row).get("signal") in ("Segmentation fault", "Bus error", "Aborted")


#: the stages of distributed initialisation (forensics/facts/stages.py): from ``Init torch distributed begin``
#: through ``sglang is using nccl==…`` (sglang_formats.md §3; SGLang prints the NCCL version as it sets up pynccl,
#: after the TCPStore rendezvous) to before ``Init torch distributed ends``
def in_dist_init(reached) -> bool:
    return STAGES["dist_init_begin"][0] <= reached.order < STAGES["dist_init_end"][0]


#: a wait this long at that stage is a connection or rendezvous that never completed, not a quick crash
_DIST_WAIT_S = 60.0


def _died_in_dist_init(lead: Row, fatal: list[Row], reached) -> Finding:
    """SGL-NCCL-012: the ranks died at distributed initialisation and the exception is not in the input — the stage
    is the fact: it waits only on the rendezvous and the network between the ranks (failure_messages.md §4.6)."""
    waited = None
    if reached.row.get("ts") is not None and lead.get("ts") is not None:
        waited = (lead["ts"] - reached.row["ts"]).total_seconds()
    long_wait = waited is not None and waited >= _DIST_WAIT_S
    at = f"{reached.row.get('file')}:{reached.row.get('line')}"
    return make_finding(
        "SGL-NCCL-012",
        summary=(f"The ranks died at {reached.stage} ({at}"
                 + (f", {waited:.0f} s before the failure" if waited is not None else "")
                 + "): that stage only waits on the rendezvous and on the network between the ranks, so the failure "
                 "is the connection the ranks never completed (a blocked port, the wrong interface or address), "
                 "not memory."
                 + (" The wait is a connection timing out." if long_wait else "")),
        evidence=[lead, reached.row, *[r for r in fatal if r is not lead][:3]],
        confidence="medium" if long_wait else "low",
        confidence_reason=("the traceback is cut before its exception line, which would name the failure (an NCCL "
                           "socket or IB error, a store timeout)"),
        ranks=[x for x in (rank_of(r) for r in fatal) if x is not None],
        figures={"stage": reached.stage, "waited_s": round(waited, 1) if waited is not None else None,
                 "first_failure_kind": lead["kind"]},
    )


_FIND_FULL_TRACEBACK = ("Which fact decides: the exception line that follows the last frame — the whole traceback, in "
                        "the same process's log (`docker logs`, the launcher's stdout) — names the error.")
#: what an end-of-file from a peer means (parsers/failures.py ``peer_exited``)
_PEER_EXIT_WHY = ("the process at the other end — another rank, or the TCPStore's host (rank 0's node, the launcher) — "
                  "had exited, so this rank's failure is a consequence of that exit, and why it exited is not in the "
                  "input")
_CLASS_WORDS = {
    "illegal_memory_access": ("a kernel made an illegal memory access (the CUDA context is dead; every later error on "
                              "that rank follows from it)",
                              ["A software fault in a kernel (attention backend, custom op), not memory pressure: try "
                               "another --attention-backend or --disable-cuda-graph to isolate it; check dmesg for Xid "
                               "13/31/43 on the same GPU; report it with the engine and driver versions."]),
    "device_assert": ("a CUDA kernel's device-side assertion failed (an index or size out of the range it checks): "
                      "the CUDA context is dead and every later error on that rank follows from it",
                      ["A software or configuration fault, not memory: the assertion names the kernel and the "
                       "condition. An index past a table's end is often token ids outside the vocabulary (a draft "
                       "model or tokenizer that does not match the target, a bad request's ids) — check that first; "
                       "rerun with CUDA_LAUNCH_BLOCKING=1 to get the Python frame of the kernel that asserted."]),
    "ecc_error": ("the GPU reported an uncorrectable ECC error", ["Check `nvidia-smi -q -d ECC,PAGE_RETIREMENT` and dmesg for "
                                                                  "Xid 48/63/64/94/95; drain the GPU and reset it."]),
    "nvlink_error": ("an uncorrectable NVLink error", ["`nvidia-smi nvlink -s` and dmesg Xid 74; drain the node."]),
    "launch_failure": ("a kernel crashed or timed out (unspecified launch failure)",
                       ["Check dmesg for Xids at the same minute; try another attention backend."]),
    "cuda_forked": ("a worker forked from a parent that had already initialised CUDA cannot use it (the start "
                    "method, not memory or the GPU)",
                    ["Start the workers with spawn: VLLM_WORKER_MULTIPROC_METHOD=spawn for vLLM (it switches on its "
                     "own only when it sees CUDA initialised first); in your own script, nothing may touch CUDA "
                     "before the engine starts, and the entry point needs `if __name__ == '__main__':`."]),
    "device_unavailable": ("no usable GPU: not detected, busy, or a driver mismatch",
                           ["`nvidia-smi`; the container's `--gpus`/`NVIDIA_VISIBLE_DEVICES`; the driver version."]),
    "nccl_error": ("a NCCL call failed", ["Run with NCCL_DEBUG=INFO; the WARN before it names the cause (a peer that "
                                          "died, /dev/shm, out of memory)."]),
    "collective_timeout": ("a rank timed out in a collective", ["The rank that never arrived failed first: read its log."]),
    "store_timeout": ("the ranks never met at rendezvous (TCPStore/Gloo timed out)",
                      ["Check --dist-init-addr and --nnodes/--node-rank on every node and that the port is reachable."]),
    "peer_exited": ("a peer closed its connection to this rank (the socket read end-of-file: Gloo's 'Connection closed "
                    "by peer', TCPStore's 'Failed to recv, got 0 bytes'): " + _PEER_EXIT_WHY,
                    ["Which fact decides: the log of the peer the line names (its address and port; for TCPStore the "
                     "node of rank 0) for the minute before — a traceback, an OOM kill in its `dmesg -T`, an Xid, or an "
                     "operator's stop is the cause; this line is its echo."]),
    "host_oom": ("a host (CPU) memory allocation failed in that process: host RAM, the container's memory limit or a "
                 "ulimit ran out, not the GPU's memory",
                 ["Which fact decides: `free -g` and the container's memory limit (`cat /sys/fs/cgroup/memory.max`) "
                  "at the time, and `ulimit -v`; the process's size in `ps -o rss` against them."]),
    "kv_pool_leak": ("the KV pool's self-check found leaked slots (an allocator bug, not a capacity problem)",
                     ["Not a sizing problem: do not change --mem-fraction-static for it. Upgrade the engine or disable "
                      "the feature named in the traceback (speculative decoding, hierarchical cache), and report it."]),
    "dispatch_cap": ("a batch of more tokens per rank than DeepEP's low-latency dispatch cap "
                     "(SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK): a capacity, not GPU memory",
                     ["Keep --cuda-graph-max-bs and the running requests per DP rank within the cap, or raise it "
                      "(at most 1024)."]),
    "hicache_host_smaller": ("the HiCache host pool is not larger than the device KV pool it backs",
                             ["Raise --hicache-ratio above 1 (2 is the default) or --hicache-size per rank."]),
    "kernel_map_failed": ("the kernel could not map a host memory range for pinning", ["`free -g`; `ulimit -l`."]),
    "host_register_refused": ("CUDA refused to register (pin) a host buffer, with an error code that is not "
                              "out-of-memory (rc=1 is cudaErrorInvalidValue: the driver rejected the range)",
                              ["Which fact decides: `free -g`, `ulimit -l` and the container's memory limit against "
                               "the ranks × per-rank host pool — if they fit, the registration itself failed (a "
                               "driver-side limit on one large registration: register in smaller chunks); if not, "
                               "shrink the pool."]),
    "port_in_use": ("a port the server needs was already taken", ["`ss -ltnp` to find the owner; a previous server's "
                                                                  "process may still be alive."]),
}


#: the kernel and the condition of a device-side assertion (parsers/failures.py ``device_assert``: CUDA's assert() in
#: device code, failure_messages.md §2.1)
_DEVICE_ASSERT_AT = re.compile(r": ([\w()<>~]{1,100}): block: \[[\d,]+\], thread: \[[\d,]+\] Assertion `([^`]{1,200})` failed")
#: the far end a peer_exited line names: reference/failure_messages.md §4.6 (Gloo's ``Connection closed by peer
#: [ip]:port``); pytorch torch/csrc/distributed/c10d/TCPStore.cpp (2.9+: ``recvValue failed on SocketImpl(…,
#: remote=[host]:port)``)
_PEER = re.compile(r"closed by peer \[([^\]\s]{1,100})\]:(\d+)|remote=\[([^\]\s]{1,100})\]:(\d+)")
#: host registrations refused for a reason that is not memory (failure_messages.md §2.2): what each code proves
_REGISTER_RC_WORDS = {
    712: ("cudaHostRegister refused a range that is already registered (cudaErrorHostMemoryAlreadyRegistered): the "
          "same host buffer was pinned twice: a bug in the code that registers it, not a shortage of host memory",
          ["Not a sizing problem: do not shrink the host pool for it. Look for a second registration of the same "
           "buffer (a retried start-up in the same process, two pools over one mapping); upgrade the engine or "
           "report it with the traceback."]),
    801: ("cudaHostRegister is not supported on this platform (cudaErrorNotSupported): the host memory cannot be "
          "pinned at all (some VMs and WSL), whatever its size; not a shortage of host memory",
          ["Not a sizing problem: run where host registration works (bare metal or a GPU-passthrough VM) or turn "
           "off the feature that pins host memory (the hierarchical cache, CPU offload)."]),
}


def _refusal_words(a: dict) -> tuple[str, list[str]] | None:
    return _REGISTER_RC_WORDS.get(a.get("rc")) if a.get("failure") == "host_register_refused" else None


def _failure_words(row: Row, generic: list[str]) -> tuple[str, bool, list[str]]:
    a = attrs(row)
    cls = a.get("failure")
    etype, emsg = a.get("exception_type"), str(a.get("exception_message") or "").strip()
    if cls == "peer_exited" and (peer := _PEER.search(str(a.get("message") or row.get("text") or ""))):
        acts = _CLASS_WORDS[cls][1]
        who = "the TCPStore's host" if peer.group(1) is None else "the peer"
        return (f"{who} at {peer.group(1) or peer.group(3)}:{peer.group(2) or peer.group(4)} closed its connection "
                f"to this rank (its socket read end-of-file): {_PEER_EXIT_WHY}"), True, [*acts, *generic]
    if (refused := _refusal_words(a)) is not None:
        return refused[0], True, [*refused[1], *generic]
    if cls == "device_assert" and (da := _DEVICE_ASSERT_AT.search(str(a.get("message") or ""))) is not None:
        words, acts = _CLASS_WORDS[cls]
        return f"{words} — {da.group(1)}: `{da.group(2)}`", True, [*acts, *generic]
    if cls in _CLASS_WORDS:
        words, acts = _CLASS_WORDS[cls]
        return words, True, [*acts, *generic]
    if cls == "traceback_cut":
        site = crash_site(row.get("text") or "")
        if site is not None:
            ruled_out = outside_forward(site)
            who = COMPONENTS.get(site.component or "", "a process")
            return (f"{who} raised an exception and the traceback is cut before its exception line — it stopped "
                    f"{site_where(site)}" + (f"; {ruled_out}" if ruled_out else ""), False,
                    [_FIND_FULL_TRACEBACK, *generic])
        frame = a.get("innermost_frame")
        return ("a traceback is cut before its exception line" + (f" (innermost frame: {frame})" if frame else ""),
                False, [_FIND_FULL_TRACEBACK, *generic])
    if cls == "signal":
        sig = a.get("signal")
        if sig == "Killed":  # failure_messages.md §5: SIGKILL proves a kill, not who sent it
            return ("a process was killed with SIGKILL (the shell's `Killed`): by the kernel or cgroup OOM killer, "
                    "an orchestrator or a `kill -9` — the input does not say which", False,
                    ["The kernel log of the same minutes decides: `Killed process <pid>` (dmesg, `journalctl -k`) or "
                     "the cgroup's oom_kill count (memory.events, `OOMKilled` in docker inspect or the pod's status) "
                     "is host memory — then size the per-rank host pools (HiCache, swap, CPU offload) × ranks to "
                     "the host; without any of them the kill came from a supervisor or the orchestrator.", *generic])
        if a.get("crashed_file"):  # the faulthandler dump names where the native code crashed
            at = f"{a['crashed_in']} ({a['crashed_file']})" if a.get("crashed_in") else a["crashed_file"]
            return (f"a process died of {sig or 'a signal'} in {at}: a crash in native code (the library or kernel "
                    "extension that frame calls), not a timeout and not an out-of-memory", True,
                    [f"Which fact decides: the library behind {at} — its version against the driver, the GPU and the "
                     "torch build (an extension built for another version crashes this way); run once with the "
                     "library's debug output (NCCL_DEBUG=INFO for NCCL) to see the last step before the crash.",
                     *generic])
        return f"a process died of {sig or 'a signal'}", False, generic
    if cls == "process_exit":
        code = row.get("code")
        return (f"{a.get('process') or 'a process'} exited" + (f" with code {code}" if code is not None else ""), False,
                generic)
    if etype:
        site = crash_site(row.get("text") or "")
        if emsg:
            return f"{etype}: {emsg[:200]}" + (f" ({site_where(site)})" if site else ""), True, generic
        # an exception without a message still says what failed when the frames say where it was raised (its own
        # traceback's, or the frames pasted above it without their header: parsers.failures ``innermost_frame``)
        if site is not None:
            return f"{etype} was raised {site_where(site)}", True, generic
        if (frame := str(a.get("innermost_frame") or "")) and ":" in frame:
            file, func = frame.rsplit(":", 1)
            return f"{etype} was raised in {func} ({file})", True, generic
        return f"{etype} was raised", False, generic
    return (str(a.get("message") or row.get("text") or cls or "a failure").strip().splitlines() or ["a failure"])[0][:200], \
        False, generic

"""SGL-NCCL-004: the schedulers hung — the watchdog dumped them while no batch made progress.

SGLang's watchdog prints ``Scheduler debug info:`` (the batch each rank is stuck on, its pools) or
raises its timeout when a forward pass or a collective does not return. All ranks stuck on the same
request, with no batch line after the dump, is a hang inside the step: a collective some rank never
entered, or a kernel that does not finish. A py-spy dump of a controller while batches still flow is
the soft watchdog's noise, not a hang.

VLLM-NCCL-001 is vLLM's side of the same: the engine's RPC to its workers times out (``RPC call to
execute_model timed out.``, ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS``, 300 s, 0.9.2+), usually after
``No available shared memory broadcast block found`` repeated every 60 s (vllm_formats.md §3.6 and §3.8
rule 4): a worker did not return from its step — stuck in a collective, a deadlock, or a long compile.

A py-spy dump whose main thread sits inside a torch.distributed call (sglang_formats.md §3: the watchdog's
``Pyspy dump for PID …`` before its SIGQUIT; py-spy src/dump.rs (0.3+) for the format; pytorch
torch/distributed/distributed_c10d.py (2.x) for the calls) is the same hang seen from the stack: the rank
waits for a peer that never posted the matching collective or receive. Read alone — without the watchdog's
own line, which may be cut from a paste — it is medium confidence.

c10d's heartbeat monitor (``ProcessGroupNCCL's watchdog got stuck for {n} seconds…``, ``Heartbeat monitor timed
out!``, failure_messages.md §4.5, 2.3+) is the same hang seen from PyTorch: the NCCL watchdog thread itself blocked
in a CUDA or NCCL call, unless a collective had already timed out (then it stuck tearing that one down).
"""

from __future__ import annotations

import re

from forensics.facts.crash_artifacts import main_threads
from forensics.facts.launch import server_config
from forensics.facts.rows import Row, attrs, before, rank_of, rows
from forensics.facts.runs import iter_runs, of_kind
from forensics.facts.vllm import settings as vllm_settings
from forensics.facts.vllm import vllm_runs
from forensics.model import Finding, FlagChange, Timeline
from parsers.failures import HEARTBEAT_MONITOR

from ._common import make_finding, tag_run
from .nccl_timeout import rank_failures, transport_test

#: the worker calls whose timeout means a step did not return (vllm_formats.md §3.6)
_STEP_CALLS = ("execute_model", "sample_tokens")


def _stuck_dumps(run: list[Row]) -> list[Row]:
    dumps = [r for r in of_kind(run, "notice") if attrs(r).get("message_id") == "watchdog_debug"
             and "Scheduler debug info" in (r.get("text") or "")]
    # only the scheduler's watchdog counts forward passes; the same ProcessWatchdog guards the tokenizer and
    # detokenizer managers and the DP controller (sglang srt/utils/watchdog.py, 0.5.7+), whose stall is no step's
    hard = [r for r in of_kind(run, "watchdog_timeout") if not attrs(r).get("soft")
            and attrs(r).get("component", "Scheduler") == "Scheduler"]
    return dumps + hard


def detect(tl: Timeline) -> list[Finding]:
    found = _sglang(tl) + _vllm_steps(tl) + _heartbeat(tl)
    return found or _blocked_stacks(tl)


def _collective_timeouts(tl: Timeline) -> list[Row]:
    """The rows saying a collective timed out (the watchdog's line, or a failure the parsers read as one)."""
    return [r for r in rows(tl, "nccl_watchdog", "failure")
            if "collective_timeout" in (attrs(r).get("event"), attrs(r).get("failure"))]


def _blocked_stacks(tl: Timeline) -> list[Finding]:
    """Ranks whose dumped main thread waits inside a torch.distributed call, when no line of the engine's or
    PyTorch's says the step hung (a collective timeout has its own rules, which cite the same stacks)."""
    blocked = [r for r in main_threads(tl) if attrs(r).get("waiting_in") == "collective"]
    if not blocked:
        return []
    if _collective_timeouts(tl):
        return []
    who = sorted({_who(r) for r in blocked})
    ranks = sorted({int(r["tp_rank"]) for r in blocked if r.get("tp_rank") is not None})
    calls = sorted({str(attrs(r).get("top_frame") or "?").split(" (", 1)[0] for r in blocked})
    procs = sorted({str(attrs(r).get("process") or r.get("comm") or "") for r in blocked} - {""})
    # the engine frame that issued each wait (the first frame outside torch.distributed): two dumps waiting in
    # collectives issued from different places are ranks that took different paths through the step
    waits = sorted({_wait(r) for r in blocked})
    # ranks of one group issue the same collectives in the same order: dumps caught in different collectives (or
    # the same one issued from different code) took different paths. Pipeline stages wait in point-to-point calls
    # at different places by design, so those do not count.
    diverged = len(waits) > 1 and not any(_P2P.search(c) for c in calls)
    return [make_finding(
        "SGL-NCCL-004",
        summary=(f"A stack dump caught {', '.join(who)} blocked inside torch.distributed "
                 f"({', '.join(calls)})" + (f" in {', '.join(procs[:3])}" if procs else "")
                 + (f": the dumps wait in different collectives ({' vs '.join(waits[:3])}) — "
                    "the ranks took different paths through the step and each waits for a collective the others "
                    "never issue, a divergence in the engine, not a slow link or a dead peer." if diverged else
                    ": the rank waits for a peer that never entered the matching collective or receive — a hang "
                    "inside the step (ranks that diverged on whether they had work, a peer stuck elsewhere or dead), "
                    "not a slow link.")
                 + " Raising a timeout only makes it wait longer."),
        evidence=blocked[:4],
        confidence="medium",
        confidence_reason=("the dumps show where the ranks waited and that they waited in different places, not "
                           "which decision split them; the code between the two call sites names it" if diverged else
                           "the dump shows where this rank waited, not why its peer never arrived; the other ranks' "
                           "stacks (the one outside the collective is the culprit) would decide"),
        ranks=ranks,
        figures={"stuck_ranks": ranks, "blocked_in": calls, "diverged": diverged, "waits": waits[:4]},
        actions=["`py-spy dump --pid <pid>` on every rank of the group while it hangs: the rank in a different "
                 "frame is the one the others wait for.",
                 "Check whether the ranks took different code paths (data-parallel attention, pipeline stages with "
                 "no work, a request only some ranks saw): a divergence is an engine bug — upgrade or report it "
                 "with the stacks.",
                 "Check dmesg for Xids and `nvidia-smi` for a GPU stuck at 100 % utilisation."],
    )]


def _who(r: Row) -> str:
    """The rank or process a dumped stack belongs to; a stack pasted without its header is named by where it is."""
    if r.get("tp_rank") is not None:
        return f"TP{r['tp_rank']}"
    if r.get("pid") is not None:
        return f"pid {r['pid']}"
    return f"the stack at {r.get('file')}:{r.get('line')}"


#: torch.distributed's point-to-point calls (pytorch torch/distributed/distributed_c10d.py, 2.x)
_P2P = re.compile(r"^(?:i?send|i?recv|send_object_list|recv_object_list|batch_isend_irecv)$")


def _wait(r: Row) -> str:
    """The collective a dumped stack waits in and the first frame outside torch.distributed that issued it."""
    frames = [str(f).split(" (", 1)[0] for f in attrs(r).get("frames") or []]
    outside = [str(f).split(" (", 1)[0] for f in attrs(r).get("frames") or [] if "distributed_c10d.py" not in str(f)]
    top = frames[0] if frames else "?"
    return f"{top} ← {outside[0]}" if outside and outside[0] != top else top


#: c10d's heartbeat monitor on a watchdog thread that stopped making progress (failure_messages.md §4.5; PyTorch
#: ``ProcessGroupNCCL.cpp`` ``HeartbeatMonitor``, 2.3+): the watchdog polls each collective's CUDA events, so a
#: watchdog stuck for ``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`` is blocked inside a CUDA or NCCL call — the GPU or the
#: communicator hung — and the monitor terminates the process after dumping its debug info (the lines:
#: parsers.failures.HEARTBEAT_MONITOR)
def _heartbeat(tl: Timeline) -> list[Finding]:
    hits = [r for r in rows(tl, "nccl_watchdog", "failure", "exception", "scheduler_exception")
            if HEARTBEAT_MONITOR.search(r.get("text") or "") and not (r.get("text") or "").lstrip().startswith("#")]
    if not hits:
        return []
    first = min(hits, key=lambda r: (r.get("file") or "", r.get("line") or 0))
    if any(before(r, first) for r in _collective_timeouts(tl)):
        return []  # the watchdog stuck while it tore down a collective that had timed out: that timeout's rule reads it
    ranks = sorted({x for x in (rank_of(r) if rank_of(r) is not None else attrs(r).get("rank") for r in hits)
                    if x is not None})
    stuck = max((int(m.group(1)) for r in hits if (m := HEARTBEAT_MONITOR.search(r.get("text") or "")) and m.group(1)),
                default=None)
    return [make_finding(
        "SGL-NCCL-004",
        summary=(f"PyTorch's heartbeat monitor found the NCCL watchdog thread of rank(s) "
                 f"{', '.join(map(str, ranks)) or '?'} stuck"
                 + (f" for {stuck} s" if stuck else "")
                 + " and terminated the process: the watchdog was itself blocked inside a CUDA or NCCL call, so a "
                 "collective or a kernel on that GPU never completed — a hang inside the step, not a slow peer "
                 "(a peer that only stopped joining trips the collective timeout instead)."),
        evidence=hits[:4],
        confidence="medium",
        confidence_reason="the monitor says the watchdog hung, not which kernel or collective held it; a py-spy "
                          "--native stack of the rank, or the flight recorder's dump it wrote, would",
        ranks=ranks,
        figures={"stuck_ranks": ranks, "watchdog_stuck_s": stuck},
        actions=["Read the debug dump the monitor wrote (TORCH_NCCL_DEBUG_INFO_TEMP_FILE, the flight recorder) and "
                 "`py-spy dump --native --pid <rank pid>` while it hangs: the frame the watchdog is blocked in names "
                 "the call.",
                 "Check dmesg for Xids and `nvidia-smi` for a GPU stuck at 100 % utilisation: a hung GPU blocks every "
                 "CUDA call on it, the watchdog's first."],
    )]


def _vllm_steps(tl: Timeline) -> list[Finding]:
    out = []
    for run in vllm_runs(tl):
        # the record, or the same TimeoutError as a traceback's last line
        timeouts = [r for r in run if (r.get("kind") == "rpc_timeout" and attrs(r).get("method") in _STEP_CALLS)
                    or (r.get("kind") in ("exception", "failure") and _step_timeout(r))
                    or (r.get("kind") == "engine_dead" and attrs(r).get("reason") == _V0_ITERATION)]
        s = vllm_settings(tl, run)
        stated = [n for n in (s.num("tensor_parallel_size"), s.num("pipeline_parallel_size")) if n is not None]
        world = int((s.num("tensor_parallel_size") or 1) * (s.num("pipeline_parallel_size") or 1))
        if stated and world < 2:
            continue  # one worker: no collective to wait in (the unexplained-failure rule reports it)
        if not timeouts:
            if (stuck := _stuck_while_serving(run)) is not None:
                out.append(_stuck_finding(*stuck, world if stated else None))
            continue
        waits = [r for r in run if r.get("kind") == "shm_wait"]
        flags = transport_test(tl, server_config(tl, run)) if not rank_failures(tl) else []
        out.append(make_finding(
            "VLLM-NCCL-001",
            summary=(f"vLLM's engine timed out waiting for its {f'{world} workers' if stated else 'workers'} to "
                     f"finish a step ({_what(timeouts[0])})"
                     + (f", after logging {len(waits)} times that they took no broadcast block" if waits else "")
                     + ": a worker did not return — stuck in a collective some rank never entered, a deadlock, or "
                     "a kernel that does not finish."
                     + (" Every rank is on one node and none failed first: the GPUs' peer-to-peer path (custom "
                        "all-reduce, NCCL P2P under ACS/IOMMU) is the suspect." if flags else "")),
            evidence=[*timeouts[:2], *waits[:3]],
            confidence="medium",
            confidence_reason="the timeout says a worker did not answer, not which or why; a py-spy stack of each "
                              "worker while it hangs would"
                              + ("" if stated else "; the parallel sizes are not in the input"),
            flags=flags,
            actions=["`py-spy dump --pid <worker pid>` on every worker while it hangs: the one not in the collective "
                     "is the culprit; NCCL_DEBUG=INFO for the communicator's state.",
                     "On PCIe-only hosts try --disable-custom-all-reduce and NCCL_P2P_DISABLE=1; raise "
                     "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS only when a long compile is the reason."],
        ))
    return out


#: consecutive broadcast waits that, once the server has served, say a step never returned: each is one
#: VLLM_RINGBUFFER_WARNING_INTERVAL (60 s) of the engine waiting on its workers (vllm_formats.md §3.8 rule 4, the hang
#: signature; the RPC timeout that ends it comes at 300 s and a paste may stop before it)
_SERVING_WAITS = 3


def _stuck_while_serving(run: list[Row]) -> tuple[list[Row], Row | None] | None:
    """The broadcast waits after the server produced tokens with no token produced after the first of them, and the
    engine's stats line that still counts requests running then (None when no stats line follows)."""
    def moved(r: Row) -> bool:
        a = attrs(r)
        return r.get("kind") == "engine_metrics" and ((a.get("generation_throughput_tps") or 0) > 0
                                                       or (a.get("prompt_throughput_tps") or 0) > 0)
    served = [r for r in run if moved(r)]
    if not served:
        return None  # start-up waits are compiles and loads: the stall rule reads those
    waits = [r for r in run if r.get("kind") == "shm_wait" and before(served[0], r) is True]
    if len(waits) < _SERVING_WAITS:
        return None
    if any(before(waits[0], r) is True for r in served):
        return None  # tokens flowed again: a slow step, not a stuck one
    running = [r for r in run if r.get("kind") == "engine_metrics" and before(waits[0], r) is True
               and (r.get("count") or 0) > 0]
    return waits, (running[0] if running else None)


def _stuck_finding(waits: list[Row], running: Row | None, world: int | None) -> Finding:
    minutes = sum(float(attrs(r).get("waited_s") or 60) for r in waits) / 60
    return make_finding(
        "VLLM-NCCL-001",
        summary=(f"vLLM's engine served, then logged {len(waits)} times (about {minutes:.0f} min) that its "
                 f"{f'{world} workers' if world else 'workers'} took no broadcast block, and no token was produced "
                 "after the first" + (f" while {running.get('count')} request(s) were still running" if running else "")
                 + ": a worker did not return from its step — stuck in a collective some rank never entered, a "
                 "deadlock, or a kernel that does not finish. The RPC timeout that ends such a wait is not in the input."),
        evidence=[*waits[:3], *([running] if running else [])],
        severity=None if running else "medium",
        confidence="medium" if running else "low",
        confidence_reason=("the waits say the engine waited on its workers, not which worker or why; a py-spy stack "
                           "of each worker while it hangs would" if running else
                           "no stats line after the waits says requests were still running: an idle engine does not "
                           "wait like this, but the input does not show the requests"),
        actions=["`py-spy dump --pid <worker pid>` on every worker while it hangs: the one not in the collective "
                 "is the culprit; NCCL_DEBUG=INFO for the communicator's state.",
                 "On PCIe-only hosts try --disable-custom-all-reduce and NCCL_P2P_DISABLE=1."],
    )


#: V0's engine loop (vllm/engine/async_llm_engine.py ``run_engine_loop``, 0.4-0.10): one step past
#: ``VLLM_ENGINE_ITERATION_TIMEOUT_S`` (60 s) — vllm_formats.md §3.6, the V0 death chain
_V0_ITERATION = "Engine iteration timed out"


def _what(row: Row) -> str:
    if row.get("kind") == "engine_dead":
        return "V0's engine iteration, past VLLM_ENGINE_ITERATION_TIMEOUT_S"
    return str(attrs(row).get("method") or _step_timeout(row))


_RPC_STEP = re.compile(r"RPC call to (execute_model|sample_tokens) timed out")


#: the Ray executor's step (vllm vllm/v1/executor/ray_distributed_executor.py, 0.8+: ``ray.get(ref,
#: timeout=RAY_CGRAPH_get_timeout)``, logged as ``RAY_CGRAPH_get_timeout is set to N``): Ray's compiled graph raises
#: ``RayChannelTimeoutError`` naming the timeout when a worker's output never arrives — the same unanswered step
_RAY_STEP = re.compile(r"increase RAY_CGRAPH_get_timeout which is currently (\d+) seconds")


def _step_timeout(row: Row) -> str | None:
    text = str(attrs(row).get("exception_message") or row.get("text") or "")
    m = _RPC_STEP.search(text)
    if m:
        return m.group(1)
    ray = _RAY_STEP.search(text)
    return f"a Ray compiled-graph step, past RAY_CGRAPH_get_timeout = {ray.group(1)} s" if ray else None


def _sglang(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    for ref, run in iter_runs(tl):
        stuck = _stuck_dumps(run)
        if not stuck:
            continue
        batches = of_kind(run, "decode_batch", "prefill_batch")
        first = min(stuck, key=lambda r: (r.get("file") or "", r.get("line") or 0))
        if any(before(first, b) for b in batches):
            continue  # batches after the dump: the server kept serving
        cfg = server_config(tl, run)
        ranks = sorted({x for x in (rank_of(r) for r in stuck) if x is not None})
        spec = cfg.get("speculative_algorithm") or cfg.get("speculative_algo")
        flags = []
        if spec:
            flags.append(FlagChange("--speculative-algorithm", str(spec), "(remove)",
                                    "a decode hang with every rank on one request: relaunch without speculative decoding "
                                    "to tell an engine-side divergence of the ranks from a fabric or hardware hang"))
        out.append(tag_run(make_finding(
            "SGL-NCCL-004",
            summary=(f"The scheduler watchdog found rank(s) {', '.join(map(str, ranks)) or '?'} stuck"
                     + (" on the same batch" if len(ranks) > 1 else "")
                     + " and no batch made progress after it: a hang inside the step (a collective some rank never "
                     "entered, or a kernel that does not return)"
                     + (f", with speculative decoding ({spec}) on" if spec else "") + "."),
            evidence=[*stuck[:6], *cfg.evidence_rows("speculative_algorithm", "speculative_algo")],
            confidence="medium",
            confidence_reason="the watchdog's dump shows where ranks waited, not why; no py-spy stack of a rank is in "
                              "the input",
            ranks=ranks,
            figures={"stuck_ranks": ranks, "dumps": len(stuck), "speculative_algorithm": spec},
            flags=flags,
            actions=["`py-spy dump --pid <scheduler pid>` on every rank while it hangs: the rank in a different frame "
                     "(not in the collective) is the culprit.",
                     "Check dmesg for Xids and `nvidia-smi` for a GPU at 100% with low power (a spinning kernel).",
                     "Compare the ranks' pool counters in the dump: ranks of one batch that disagree have diverged."],
        ), ref))
    return out

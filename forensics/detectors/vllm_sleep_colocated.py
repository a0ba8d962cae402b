"""VLLM-GPU-014: a vLLM engine could not wake up because other vLLM engines share its GPU.

Sleep mode is also how several vLLM servers take turns on one GPU (model swapping): each starts with
``--enable-sleep-mode``, ``POST /sleep`` releases the weights and KV cache its CuMemAllocator mapped and
``POST /wake_up`` maps them back (vllm vllm/entrypoints/openai/api_server.py (0.7.3+) ``/sleep``, ``/wake_up``;
vllm/v1/engine/core.py ``EngineCore.wake_up`` → vllm/v1/worker/gpu_worker.py ``Worker.wake_up`` →
vllm/device_allocator/cumem.py ``CuMemAllocator.wake_up`` → ``create_and_map``). Waking re-creates every
region the sleep released with ``cuMemCreate``; when the device does not have them free, the allocator raises
``RuntimeError: CUDA Error: out of memory at …/cumem_allocator.cpp:N`` (vllm csrc/cumem_allocator.cpp
``CUDA_CHECK``) and EngineCore logs ``Invocation of wake_up method failed`` (vllm/v1/engine/core.py, 0.8+).

``--gpu-memory-utilization`` is a share of the whole device per instance (vllm vllm/config/cache.py (0.10+)
``gpu_memory_utilization``: "a per-instance limit … if you have two vLLM instances running on the same GPU, you can
set the GPU memory utilization to 0.5 for each instance"), and what a wake-up maps back is that share less what
the sleep kept. A sleeping engine is not gone: it keeps its CUDA context and every buffer it allocated outside the
sleep-mode pool on the GPU (``Sleep mode freed F GiB memory, U GiB memory is still in use.``, Worker.sleep), and at
level 1 its weights' copy in host memory. So a wake-up fits only when the waking engine's share plus what every
other engine on that GPU holds at that moment — an awake one its whole share, a sleeping one its residue — is no
more than the device. The process list says who they are: nvidia-smi's (system_formats.md §2.1-2.4, the engine
named by its process title ``VLLM::EngineCore``/``VLLM::Worker…`` or command), the CUDA OOM message's ``Process N
has X memory in use`` clauses (failure_messages.md §1.1) matched to other engines' log lines, or several engines'
sleep lines in an input that places them on one GPU.

An engine alone on its GPU whose wake-up fails is VLLM-GPU-011's (a colocated trainer holds the memory).

>>> fits_share(0.55, 40.2 * GIB, 79.6 * GIB)
False
>>> fits_share(0.45, 2.1 * GIB, 79.6 * GIB)
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from forensics.facts.gpu import gpu_capacity
from forensics.facts.launch import server_config
from forensics.facts.oom import traceback_frames
from forensics.facts.rows import Row, attrs, before, rows
from forensics.model import Finding, FlagChange, Timeline

from ._common import GIB, fmt_gib, make_finding

#: what a process that holds no more than a CUDA context shows (a launcher or API process that touched the GPU):
#: below it a process in the list is not an engine's share or residue
CONTEXT_ONLY = 1 * GIB
#: the slack left under a share computed from the figures: allocator rounding and a context's growth
MARGIN = 0.02
STEP = 0.05


def fits_share(share: float, others_hold: float, total: float) -> bool:
    """Whether a waking engine's whole share fits beside what the other engines on its GPU hold."""
    return share * total + others_hold <= total


@dataclass
class Engine:
    pid: int
    held: float | None = None  # bytes it holds on the GPU now (the process list), None when unknown
    gpu: int | None = None
    file: str | None = None
    share: float | None = None  # its --gpu-memory-utilization, where its own log states it
    asleep: bool | None = None
    evidence: list[Row] = field(default_factory=list)


def wake_up_failures(tl: Timeline) -> list[Row]:
    """Rows of a wake-up that ran out of GPU memory: the sleep-mode allocator's out of memory (with a wake-up in its
    frames or in the log), or a CUDA OOM whose traceback passes ``wake_up``."""
    out = [r for r in rows(tl, "failure") if attrs(r).get("failure") == "memory_saver_oom"
           and attrs(r).get("allocator") == "vllm_cumem"]
    for r in rows(tl, "cuda_oom"):
        if attrs(r).get("during") == "wake_up" or any(fn == "wake_up" for _p, fn in traceback_frames(rows(tl), r)):
            out.append(r)
    return out


def engine_pids(tl: Timeline) -> dict[int, str]:
    """Each pid a vLLM log line names, with its file (``(EngineCore_DP0 pid=N)``, a worker's or a Ray actor's tag)."""
    out: dict[int, str] = {}
    for r in tl.events.filter(tl.events["source"] == "vllm").select("pid", "file").iter_rows():
        if r[0] is not None and r[1] is not None:
            out.setdefault(int(r[0]), str(r[1]))
    return out


def _state_of(tl: Timeline, file: str | None, at: Row) -> bool | None:
    """Whether the engine of a log was asleep at ``at``: its last sleep or wake line before it says."""
    if file is None:
        return None
    marks = [r for r in rows(tl, "sleep_report") if r.get("file") == file and before(r, at) is not False]
    wakes = [r for r in rows(tl, "log", "notice", "exception") if r.get("file") == file
             and "to wake up" in (r.get("text") or "") and before(r, at) is not False]
    if not marks:
        return False if rows(tl, "engine_metrics") and any(r.get("file") == file for r in rows(tl, "engine_metrics")) \
            else None
    last_sleep = max(marks, key=lambda r: r.get("line") or 0)
    return not any((w.get("line") or 0) > (last_sleep.get("line") or 0) for w in wakes)


def share_of(tl: Timeline, file: str | None) -> float | None:
    if file is None:
        return None
    mine = [r for r in rows(tl, "server_args") if r.get("file") == file]
    return server_config(tl, mine).num("gpu_memory_utilization") if mine else None


def colocated(tl: Timeline, failed: list[Row]) -> tuple[list[Engine], str]:
    """The other vLLM engines on the failing engine's GPU and where the input says so; ([], "") when it does not."""
    pids = engine_pids(tl)
    mine = {int(r["pid"]) for r in failed if r.get("pid") is not None}
    my_files = {r.get("file") for r in failed}
    at = failed[0]
    # nvidia-smi's process list: vLLM's processes on one GPU
    procs = [r for r in rows(tl, "gpu_process") if r.get("pid") is not None and r.get("gpu") is not None]
    vllm = [r for r in procs if attrs(r).get("engine") == "vllm" or int(r["pid"]) in pids]
    my_gpus = {r["gpu"] for r in vllm if int(r["pid"]) in mine}
    out: list[Engine] = []
    for r in vllm:
        pid = int(r["pid"])
        if pid in mine or (my_gpus and r["gpu"] not in my_gpus) or (r.get("used_bytes") or 0) < CONTEXT_ONLY:
            continue
        file = pids.get(pid)
        if file in my_files:
            continue  # the same server's other process (its API server or a worker of its own)
        out.append(Engine(pid, float(r["used_bytes"]), r["gpu"], file, share_of(tl, file), _state_of(tl, file, at),
                          [r]))
    if out and (my_gpus or len({e.gpu for e in out}) == 1 and len(vllm) > len(out)):
        return out, "nvidia-smi's process list"
    # the CUDA OOM message's other processes, when another engine's log names the pid
    seen: dict[int, Engine] = {}
    for r in failed:
        for p in attrs(r).get("processes") or []:
            pid, held = p.get("pid"), p.get("used_bytes")
            file = pids.get(int(pid)) if pid is not None else None
            if file is None or file in my_files or pid in mine or (held or 0) < CONTEXT_ONLY:
                continue
            seen[int(pid)] = Engine(int(pid), float(held), None, file, share_of(tl, file), _state_of(tl, file, at), [r])
    if seen:
        return list(seen.values()), "the CUDA OOM message's process list"
    # several engines' sleep lines, in an input that places them on one GPU
    sleepers = {}
    for r in rows(tl, "sleep_report"):
        if r.get("file") not in my_files and r.get("pid") is not None and int(r["pid"]) not in mine:
            sleepers.setdefault(r.get("file"), r)
    gpus = {r.get("gpu") for r in rows(tl, "gpu_memory") if r.get("gpu") is not None}
    if sleepers and len(gpus) == 1:
        return [Engine(int(r["pid"]), None, next(iter(gpus)), f, share_of(tl, f), _state_of(tl, f, at), [r])
                for f, r in sleepers.items()], "the other engines' sleep lines, on a host with one GPU"
    return [], ""


def _my_residue(tl: Timeline, failed: list[Row]) -> float | None:
    mine = {int(r["pid"]) for r in failed if r.get("pid") is not None}
    held = [float(r["used_bytes"]) for r in rows(tl, "gpu_process") if r.get("pid") is not None
            and int(r["pid"]) in mine and r.get("used_bytes")]
    return max(held) if held else None


def detect(tl: Timeline) -> list[Finding]:
    failed = wake_up_failures(tl)
    if not failed:
        return []
    others, where = colocated(tl, failed)
    if not others:
        return []
    file = failed[0].get("file")
    share = share_of(tl, file)
    total, total_from = gpu_capacity(tl, [], [r for r in failed if r.get("kind") == "cuda_oom"])
    held = [e.held if e.held is not None else (e.share * total if e.share and total and not e.asleep else None)
            for e in others]
    others_hold = sum(h for h in held if h is not None) if all(h is not None for h in held) else None
    pid = failed[0].get("pid")
    who = f"vLLM engine pid {pid}" if pid is not None else "A vLLM engine"
    gpu = next((e.gpu for e in others if e.gpu is not None), None)
    on = f"GPU {gpu}" if gpu is not None else "its GPU"

    def named(e: Engine, h: float | None) -> str:
        state = "asleep" if e.asleep else "awake" if e.asleep is False else "state unknown"
        bits = [state] + ([f"{fmt_gib(h)} held"] if h is not None else []) + \
            ([f"--gpu-memory-utilization {e.share:g}"] if e.share is not None else [])
        return f"pid {e.pid} ({', '.join(bits)})"

    listed = "; ".join(named(e, h) for e, h in zip(others, held, strict=True))
    summary = (f"{who} could not wake up: cuMemCreate ran out of memory on {on}"
               + (f" ({fmt_gib(total)})" if total else "")
               + f", which it shares with {'another vLLM engine' if len(others) == 1 else f'{len(others)} other vLLM engines'}"
               + f", {listed}. ")
    if share is not None and others_hold is not None and total:
        need = share * total
        summary += (f"Its --gpu-memory-utilization {share:g} share is {fmt_gib(need)}; with the {fmt_gib(others_hold)} "
                    f"the other{'s hold' if len(others) > 1 else ' holds'}, {fmt_gib(need + others_hold)} is asked of "
                    f"{fmt_gib(total)}. ")
    elif share is not None:
        summary += f"Waking maps back its --gpu-memory-utilization {share:g} share of the whole device. "
    summary += ("A utilization is a share of the whole GPU, and a sleeping engine still holds its CUDA context and "
                "its buffers outside the sleep-mode pool: the shares of the engines awake at once plus the residue "
                "of those asleep must fit the device.")
    flags: list[FlagChange] = []
    fit = None
    if others_hold is not None and total:
        fit = math.floor(((total - others_hold) / total - MARGIN) / STEP + 1e-9) * STEP
    weights = [float(r["bytes"]) for r in rows(tl, "weight_load_end") if r.get("file") == file and r.get("bytes")]
    room = fit is not None and fit > 0 and (not weights or fit * (total or 0) > max(weights) + _residue_floor(tl, failed))
    if share is not None and fit is not None and room and fit < share:
        flags.append(FlagChange(
            "--gpu-memory-utilization", f"{share:g}", f"{fit:g}",
            f"the other engines on {on} hold {fmt_gib(others_hold)} of {fmt_gib(total)}: "
            f"({fmt_gib(total)} − {fmt_gib(others_hold)}) ÷ {fmt_gib(total)} − {MARGIN:g} margin, rounded down to "
            f"{STEP:g}; the KV cache shrinks with it"))
    awake = [e for e in others if e.asleep is not True]
    actions = [
        (f"Put the awake engine(s) to sleep before waking this one (`curl -X POST 'http://HOST:PORT/sleep?level=1'` "
         f"on pid {', '.join(str(e.pid) for e in awake)}'s server), or wake this one only when they are asleep"
         if awake else "Wake the engines one at a time and check what each sleeping one still holds"),
        "Size the engines that share a GPU together: the shares of those awake at once plus every sleeping "
        "engine's residue (its 'U GiB memory is still in use' after its own sleep, minus the others') at most 1.",
        "List who holds the GPU at the wake-up: `nvidia-smi --query-compute-apps=pid,process_name,used_memory "
        "--format=csv`.",
    ]
    if fit is not None and not room:
        actions.insert(0, f"The weights alone do not fit beside what the others hold ({fmt_gib(others_hold)} of "
                          f"{fmt_gib(total)}): these engines cannot be awake at once on {on}; sleep the others first.")
    reasons = [m for m, bad in (("the input does not say what the other engines hold", others_hold is None),
                                ("the waking engine's --gpu-memory-utilization is not in the input", share is None),
                                ("the engines are placed on one GPU by the host having one, not by a process list",
                                 where.startswith("the other engines' sleep")))
               if bad]
    return [make_finding(
        "VLLM-GPU-014",
        summary=summary,
        evidence=[*failed[:2], *[r for e in others for r in e.evidence][:4]],
        confidence="high" if not reasons else "medium" if len(reasons) == 1 else "low",
        confidence_reason="; ".join(reasons) or None,
        gpus=[gpu] if gpu is not None else [],
        figures={"waking_pid": pid, "gpu_memory_utilization": share, "total_bytes": int(total) if total else None,
                 "total_from": total_from if total else None, "others_hold_bytes": int(others_hold) if others_hold else None,
                 "colocated_from": where,
                 "colocated": [{"pid": e.pid, "held_bytes": int(e.held) if e.held else None, "asleep": e.asleep,
                                "gpu_memory_utilization": e.share, "log": e.file} for e in others]},
        flags=flags,
        actions=actions,
    )]


def _residue_floor(tl: Timeline, failed: list[Row]) -> float:
    """What the waking engine keeps beside its weights: its residue in the process list, else a context's worth."""
    return _my_residue(tl, failed) or CONTEXT_ONLY

"""VLLM-GPU-021: vLLM found no memory for its KV cache because another process holds part of its GPU.

vLLM sizes its KV cache as ``total × --gpu-memory-utilization − non-KV memory`` and refuses to start when that
is zero or less (``No available memory for the cache blocks. Try increasing `gpu_memory_utilization` …``, raised
by vllm vllm/worker/worker.py::raise_if_cache_size_invalid (0.2-0.10.2) and vllm/v1/core/kv_cache_utils.py
``check_enough_kv_cache_memory`` (0.6.4+); reference/vllm_formats.md §3.2). The non-KV memory is measured on the
device, not per process: V1 up to 0.9.0 takes ``total − free`` after the profile run as used
(vllm vllm/v1/worker/gpu_worker.py::determine_available_memory (0.6.4-0.9.0)), so everything another process
holds on the GPU is charged to this engine; later releases and V0 charge what the device's use grew by while
this engine loaded and profiled (vllm vllm/utils.py::memory_profiling (0.6.5+), ``non_torch_increase``), so a
second server that starts beside it is charged the same way (vllm_formats.md §5.1, ``--gpu-memory-utilization``).

The utilization is a share of the whole device per instance (vllm vllm/config/cache.py (0.10+)
``gpu_memory_utilization``: two instances on one GPU get 0.5 each). With another server holding its share,
the refusal's advice — a higher utilization — asks for memory that server already has: the two shares then sum
above the device, and vLLM 0.9.1+ refuses at the next start because less is free than asked (VLLM-GPU-003).
The fix is the other server's memory: stop or move it, or give the two shares that sum below 1 and start
them one at a time.

Evidence that another process holds the GPU, read the way VLLM-GPU-014 reads its co-located engines
(:mod:`.vllm_sleep_colocated`): nvidia-smi's process list (reference/system_formats.md §2.1-2.4) with a process
over a context's worth on the refusing engine's GPU — the GPU its own pid is listed on, else the host's only GPU,
where a log that prints no pid of its own (V0) needs the other pid named by another server's log — or a profile
line charging more memory outside PyTorch (V0's ``non_torch_memory takes X GiB``, vllm_formats.md §2.4; V1's
non-torch figure, §2.5-2.6) than a CUDA context and NCCL take (failure_messages.md §1.4: a few GiB at most).

>>> beside(40.2 * GIB, 79.6 * GIB)
0.47
>>> beside(76.0 * GIB, 79.6 * GIB) is None
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from forensics.facts.rows import Row, attrs, rank_of, rows
from forensics.facts.versions import parse_version
from forensics.facts.vllm import VllmSettings, first_attr, gpu_total_bytes, of_kind, settings, vllm_runs
from forensics.model import Finding, Timeline

from ._common import GIB, fmt_gib, make_finding
from .held_at_start import NON_PYTORCH_MAX
from .vllm_sleep_colocated import CONTEXT_ONLY, MARGIN, engine_pids, share_of

MIN_SHARE = 0.05  # below this the engine could not even hold a context and a small model
MIN_KV_RESERVE = GIB // 2  # KV room an engine needs at least to serve one short request


def beside(others_hold: float, total: float) -> float | None:
    """The largest share (0.01 steps) left for this engine beside what other processes hold, less a margin."""
    share = math.floor(round(((total - others_hold) / total - MARGIN) * 100, 6)) / 100
    return share if share >= MIN_SHARE else None


def no_room_rows(run: list[Row]) -> tuple[list[Row], list[Row], list[Row]]:
    """The refusal (``kv_no_room``), a profile row with a negative KV share, V0's ``# GPU blocks: 0``."""
    return (of_kind(run, "kv_no_room"),
            [r for r in of_kind(run, "memory_profile") if (attrs(r).get("kv_cache_bytes") or 0) < 0],
            [r for r in of_kind(run, "kv_sizing") if attrs(r).get("gpu_blocks") == 0])


@dataclass
class Tenant:
    pid: int | None
    held: float | None  # bytes on the GPU
    gpu: int | None = None
    name: str | None = None
    share: float | None = None  # its --gpu-memory-utilization, where its own log states it
    evidence: list[Row] = field(default_factory=list)


#: the last V1 release whose profile charges every byte in use on the device to the engine
#: (vllm vllm/v1/worker/gpu_worker.py::determine_available_memory (0.6.4-0.9.0), ``total_allocated_bytes``)
DEVICE_WIDE_UNTIL = (0, 9, 0)


def device_wide(run: list[Row], cfg: VllmSettings) -> bool:
    """Whether the run is a V1 release that charges all memory in use on the GPU to itself."""
    versions = [parse_version(attrs(r).get("version")) for r in of_kind(run, "version")
                if attrs(r).get("component") in (None, "vllm")]
    v = next((x for x in versions if x), None)
    return v is not None and v <= DEVICE_WIDE_UNTIL and cfg.engine_generation != "V0"


def _own_pids(tl: Timeline, run: list[Row]) -> tuple[set[int], set[str]]:
    files = {str(r["file"]) for r in run if r.get("file")}
    pids = {int(r["pid"]) for r in run if r.get("pid") is not None}
    pids |= {p for p, f in engine_pids(tl).items() if f in files}
    return pids, files


def other_tenants(tl: Timeline, run: list[Row]) -> tuple[list[Tenant], str]:
    """The other processes that hold memory on the GPU of a vLLM run, and where the input says so."""
    mine, my_files = _own_pids(tl, run)
    pids = engine_pids(tl)
    procs = [r for r in rows(tl, "gpu_process") if r.get("pid") is not None and r.get("gpu") is not None]
    my_gpus = {r["gpu"] for r in procs if int(r["pid"]) in mine}
    if not my_gpus:
        # the engine that refused has usually exited before the snapshot: a host with one GPU places it
        gpus = {r["gpu"] for r in procs} | {r.get("gpu") for r in rows(tl, "gpu_memory") if r.get("gpu") is not None}
        my_gpus = gpus if len(gpus) == 1 else set()
    out: list[Tenant] = []
    for r in procs:
        pid = int(r["pid"])
        if pid in mine or r["gpu"] not in my_gpus or (r.get("used_bytes") or 0) < CONTEXT_ONLY:
            continue
        file = pids.get(pid)
        if file in my_files or (not mine and file is None):
            continue  # its own process, or (no pid of its own in the log, as V0 prints none) maybe its own
        out.append(Tenant(pid, float(r["used_bytes"]), r["gpu"], r.get("comm") or attrs(r).get("name"),
                          share_of(tl, file), [r]))
    if out:
        return out, "nvidia-smi's process list"
    prof = [r for r in of_kind(run, "memory_profile") if (attrs(r).get("non_torch_bytes") or 0) > NON_PYTORCH_MAX]
    if prof:
        return [Tenant(None, float(attrs(prof[0])["non_torch_bytes"]), None, None, None, [prof[0]])], \
            "vLLM's profile, which charged more memory outside PyTorch than a CUDA context and NCCL take"
    return [], ""


def shared_refusal(tl: Timeline, run: list[Row]) -> tuple[list[Tenant], str]:
    """The other tenants when this run refused for want of KV memory; ([], "") otherwise (VLLM-KV-002's case)."""
    if not any(no_room_rows(run)):
        return [], ""
    return other_tenants(tl, run)


def detect(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    for run in vllm_runs(tl):
        others, where = shared_refusal(tl, run)
        if others:
            out.append(_finding(tl, run, settings(tl, run), others, where))
    return out


def _finding(tl: Timeline, run: list[Row], cfg: VllmSettings, others: list[Tenant], where: str) -> Finding:
    hits, prof, zero = no_room_rows(run)
    util, util_seen = cfg.value_or_default("gpu_memory_fraction")
    total, total_row, _how = gpu_total_bytes(tl, run)
    held = sum(t.held or 0 for t in others)
    from_profile = others[0].pid is None
    gpu = next((t.gpu for t in others if t.gpu is not None), None)
    on = f"GPU {gpu}" if gpu is not None else "its GPU"
    kv = next((attrs(r).get("available_kv_bytes") for r in hits if attrs(r).get("available_kv_bytes") is not None),
              None)
    if kv is None and prof:
        kv = attrs(prof[0]).get("kv_cache_bytes")

    def named(t: Tenant) -> str:
        bits = [x for x in (t.name, f"{fmt_gib(t.held)}" if t.held else None,
                            f"--gpu-memory-utilization {t.share:g}" if t.share is not None else None) if x]
        return f"pid {t.pid} ({', '.join(bits)})" if t.pid is not None else ", ".join(bits)

    if from_profile:
        lead = (f"vLLM refused to start with no memory for its KV cache: its profile charged {fmt_gib(held)} outside "
                f"PyTorch (non_torch_memory), far more than a CUDA context and NCCL take, so another process was taking "
                f"memory on {on} while this engine loaded.")
    else:
        lead = (f"vLLM refused to start with no memory for its KV cache on {on}"
                + (f" ({fmt_gib(total)})" if total else "")
                + f", which {'another process holds part of' if len(others) == 1 else f'{len(others)} other processes share'}"
                + f": {'; '.join(named(t) for t in others[:4])}.")
    summary = lead + (" vLLM counts the device's memory in use, not only its own, so the other process's memory was "
                      "charged to this engine's budget.")
    shares = [t.share if t.share is not None else (t.held / total if t.held and total else None) for t in others]
    other_share = sum(s for s in shares if s is not None) if all(s is not None for s in shares) else None
    fit = beside(held, total) if total and held else None
    wide = device_wide(run, cfg)
    if util is not None and other_share is not None:
        total_share = util + other_share
        summary += (f" Its --gpu-memory-utilization {util:g} and the other's {other_share:.2f} of the device sum to "
                    f"{total_share:.2f}" + (", more than the device" if total_share > 1 else "") + ".")
    summary += (" Raising the utilization, as the error suggests, makes no room: this release (V1 up to 0.9.0) caps "
                "the memory in use on the whole device at that share, so a higher one takes what the other server "
                "needs at its next start." if wide else
                " Raising the utilization, as the error suggests, asks for memory the other process already holds"
                + (f": {fit:.2f} of the device is left beside it." if fit is not None else "."))
    actions = [
        (f"Stop the other process on {on}" + (f" (pid {', '.join(str(t.pid) for t in others if t.pid is not None)})"
                                              if not from_profile else "")
         + " or move one server to a GPU of its own (CUDA_VISIBLE_DEVICES), then start this one again unchanged."),
    ]
    weights, _ = first_attr(run, "weights_bytes", "memory_profile", "weight_load_end")
    if fit is not None:
        need = (weights or 0) + MIN_KV_RESERVE
        if weights and total and need / total > fit:
            actions.append(f"They cannot share {on}: beside the {fmt_gib(held)} held, {fit:.2f} of the device is left "
                           f"({fmt_gib(total)} × {fit:.2f} = {fmt_gib(total * fit)}), less than this engine's "
                           f"{fmt_gib(weights)} of weights plus a minimal KV cache.")
        elif wide:
            actions.append(f"This release (vLLM V1 up to 0.9.0) charges everything in use on the GPU to the engine, "
                           f"so even shares that sum below 1 leave this one no KV cache beside the {fmt_gib(held)} "
                           f"held: give each server a GPU of its own, or upgrade to 0.9.1+ and give this one at most "
                           f"({fmt_gib(total)} − {fmt_gib(held)}) ÷ {fmt_gib(total)} − {MARGIN:g} = {fit:.2f}.")
        else:
            actions.append(f"To share {on}, give the two servers --gpu-memory-utilization values that sum below 1: "
                           f"beside the {fmt_gib(held)} held, ({fmt_gib(total)} − {fmt_gib(held)}) ÷ "
                           f"{fmt_gib(total)} − {MARGIN:g} = {fit:.2f} at most for this one"
                           + (f", or lower the other's {other_share:.2f} and restart both" if other_share else "")
                           + ".")
    else:
        actions.append("To share the GPU, give the two servers --gpu-memory-utilization values that sum below 1 "
                       "(e.g. 0.45 each); `nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv` "
                       "shows what the other holds.")
    if not wide:
        actions.append("Start the servers one at a time, the second after the first logged its KV cache size: memory "
                       "another process takes while an engine loads and profiles is charged to that engine, and vLLM "
                       "V1 before 0.9.1 charges all of it.")
    reasons = []
    if from_profile:
        reasons.append("who holds the memory is not in the input (the profile's figure only): nvidia-smi names it")
    if not util_seen:
        reasons.append(f"the utilization is vLLM's default ({util:g}), not read from the input")
    first = (hits or prof or zero)[0]
    return make_finding(
        "VLLM-GPU-021",
        summary=summary,
        evidence=[*hits[:2], *prof[:1], *zero[:1], *[r for t in others for r in t.evidence][:4],
                  *([total_row] if total_row is not None and total_row in run else []),
                  *cfg.evidence_rows("gpu_memory_utilization")],
        confidence="medium" if reasons else "high",
        confidence_reason="; ".join(reasons) or None,
        ranks=[x for x in (rank_of(first),) if x is not None],
        gpus=[gpu] if gpu is not None else [],
        figures={"available_kv_bytes": kv, "others_hold_bytes": int(held) if held else None,
                 "gpu_total_bytes": int(total) if total else None, "gpu_memory_utilization": util,
                 "others_share": round(other_share, 4) if other_share is not None else None,
                 "share_left": fit, "colocated_from": where,
                 "colocated": [{"pid": t.pid, "held_bytes": int(t.held) if t.held else None, "name": t.name,
                                "gpu_memory_utilization": t.share} for t in others]},
        actions=actions,
    )

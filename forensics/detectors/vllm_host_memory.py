"""VLLM-HOST-001: vLLM's per-GPU host memory (``--swap-space``, ``--cpu-offload-gb``) × ranks exceeds the host.

Sources: VLLM-HOST-001 reads ``--swap-space`` and ``--cpu-offload-gb`` per GPU worker
(reference/vllm_formats.md §5.1) and vLLM's own swap check (reference/vllm_formats.md §3.7, vllm
vllm/config.py::CacheConfig.verify_with_parallel_config (0.4-0.10)).

Both flags are GiB *per GPU worker*: ``--tensor-parallel-size 4 --swap-space 16`` pins 4 × 16 GiB of
host RAM (V0; PyTorch's pinned allocator rounds each layer's block up to a power of two), and
``--cpu-offload-gb 40`` at TP 2 pins 80 GiB. vLLM's own check only compares swap × TP with 70 % of
*total* RAM and ignores offload, PP and other tenants. Sample::

    ValueError: Too large swap space. 64.00 GiB out of the 62.79 GiB total CPU memory is allocated for the swap space.

>>> corrected_per_gpu(host_total=62.79 * 2**30, ranks=4, offload_per_gpu=0)
4
>>> corrected_per_gpu(host_total=196 * 2**30, ranks=2, offload_per_gpu=80 * 2**30)
8
"""

from __future__ import annotations

from forensics.facts import engines
from forensics.facts.host_memory import host_memory
from forensics.facts.launch import launch_rows
from forensics.facts.rows import Row, attrs, rows
from forensics.facts.vllm import VllmSettings, is_vllm_launch, of_kind, settings, vllm_runs
from forensics.model import Finding, FlagChange, Timeline

from ._common import GIB, fmt_gib, make_finding

SWAP_SHARE = 0.3  # of host RAM for all ranks' swap together (vLLM warns above 0.4, refuses above 0.7)
RESERVE_SHARE = 0.1  # of host RAM kept for the OS, weight loading and the processes themselves
MIN_RESERVE = 8 * GIB


def reserve_of(total: float) -> float:
    return max(RESERVE_SHARE * total, MIN_RESERVE)


def corrected_per_gpu(*, host_total: float, ranks: int, offload_per_gpu: float) -> int | None:
    """The largest whole GiB of swap per GPU that fits beside the offloaded weights; None if nothing fits."""
    room = host_total - reserve_of(host_total) - ranks * offload_per_gpu
    if room <= 0:
        return None
    return int(min(SWAP_SHARE * host_total, room) // ranks // GIB)


def _host(tl: Timeline, run: list[Row]) -> tuple[float | None, list[Row], str]:
    """What the ranks could pin at most: the host's facts (:mod:`forensics.facts.host_memory`, the same total and
    limit every host-memory finding shows), else vLLM's own account of total CPU memory."""
    host = host_memory(tl)
    told = [r for r in of_kind(run, "swap_space_too_large") if r.get("total_bytes")]
    if host.limit and (host.total is None or host.limit < host.total):
        return float(host.limit), [r for r in (host.limit_row,) if r is not None], "the container's memory limit"
    if host.total:
        return float(host.total), [r for r in (host.total_row,) if r is not None], "host MemTotal"
    if told:
        return float(told[0]["total_bytes"]), [told[0]], "vLLM's own account of total CPU memory"
    return None, [], "unknown"


def lmcache_cpu_size(tl: Timeline) -> tuple[Row | None, float]:
    """LMCache's per-worker CPU backend size (``LMCACHE_MAX_LOCAL_CPU_SIZE``, "CPU memory limit in GB": NVIDIA
    Dynamo's LMCache page, vLLM's examples/offline_inference/cpu_offload_lmcache.py) from a launch's environment;
    its "GB" is GiB: LMCache's engine builder allocates ``max_local_cpu_size * 1024**3`` bytes
    (``lmcache/v1/cache_engine.py``, ``MixedMemoryAllocator``),
    unless ``LMCACHE_LOCAL_CPU`` turns the CPU backend off; the vLLM connector builds one per worker."""
    for row in reversed(launch_rows(tl)):
        env = attrs(row).get("env") or {}
        raw = env.get("LMCACHE_MAX_LOCAL_CPU_SIZE")
        if raw is None or str(env.get("LMCACHE_LOCAL_CPU", "True")).strip("\"'").lower() in ("false", "0", "no"):
            continue
        try:
            return row, float(str(raw).strip("\"'"))
        except ValueError:
            continue
    return None, 0.0


def ranks_of(cfg: VllmSettings) -> tuple[int, str]:
    tp, tp_seen = cfg.value_or_default("tensor_parallel")
    pp = cfg.num("pipeline_parallel_size") or 1
    dp = cfg.num("data_parallel_size") or 1
    n = int((tp or 1) * pp * dp)
    how = f"tp {int(tp or 1)}" + (f" × pp {int(pp)}" if pp > 1 else "") + (f" × dp {int(dp)}" if dp > 1 else "")
    return n, how + ("" if tp_seen else " (assumed)")


def detect(tl: Timeline) -> list[Finding]:
    return [*_overallocated(tl), *detect_killed(tl)]


def _overallocated(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    seen = False
    # a launch command alone (a ticket, `forensics check`) is a run with no log rows of its own
    runs = vllm_runs(tl) or ([[]] if any(is_vllm_launch(r) for r in launch_rows(tl)) else [])
    for run in runs:
        if seen:
            break
        cfg = settings(tl, run)
        told = of_kind(run, "swap_space_too_large")
        swap = cfg.num("swap_space")
        offload = cfg.num("cpu_offload_gb") or 0.0
        kv_off = cfg.num("kv_offloading_size") or 0.0  # GiB for a whole TP group (vllm/config/cache.py)
        lmc_row, lmc = lmcache_cpu_size(tl)
        if swap is None and not offload and not told and not kv_off and not lmc:
            continue
        ranks, how = ranks_of(cfg)
        groups = max(ranks // int(cfg.value_or_default("tensor_parallel")[0] or 1), 1)  # engines (TP groups) on the host
        total, host_rows, host_how = _host(tl, run)
        swap_b = (swap if swap is not None else float(engines.default_for("vllm", "host_kv_per_gpu") or 0)) * GIB
        v1 = cfg.engine_generation == "V1"
        pools = groups * kv_off * GIB + ranks * lmc * GIB  # the KV offload buffers and LMCache's CPU backends
        demand = ranks * ((0 if v1 else swap_b) + offload * GIB) + pools
        refused = [r for r in told if not (r.get("attrs") and '"warning_only": true' in r["attrs"])]
        if total is None and not told:
            continue
        over = total is not None and demand > total - reserve_of(total)
        check = total is not None and ranks * swap_b > 0.7 * total  # vLLM's own refusal
        if not (over or check or told):
            continue
        seen = True
        kills = rows(tl, "oom_kill") + [r for r in rows(tl, "failure") if attrs(r).get("failure") == "oom_killed"]
        flags: list[FlagChange] = []
        new = corrected_per_gpu(host_total=total, ranks=ranks, offload_per_gpu=offload * GIB) if total else None
        swap_flag = engines.flag_for("vllm", "host_kv_per_gpu") or "--swap-space"
        if new is not None and new < (swap if swap is not None else swap_b / GIB):  # never raise it
            flags.append(FlagChange(swap_flag, f"{swap:g}" if swap is not None else None, str(new),
                                    f"{ranks} ranks ({how}) × {new} GiB ≤ {SWAP_SHARE:.0%} of {fmt_gib(total)} "
                                    f"({host_how}), beside {ranks} × {offload:g} GiB offloaded weights; 0 is valid "
                                    "when beam search / n > 1 are not used" + (" (V1 never allocates it)" if v1 else "")))
        off_flag = engines.flag_for("vllm", "cpu_offload_per_gpu") or "--cpu-offload-gb"
        if offload and total and ranks * offload * GIB > total - reserve_of(total):
            fit = int((total - reserve_of(total)) // ranks // GIB)
            flags.append(FlagChange(off_flag, f"{offload:g}", str(max(fit, 0)),
                                    f"{ranks} ranks × {fit} GiB pinned ≤ {fmt_gib(total)} − reserve"))
        if total and pools and over:
            room = total - reserve_of(total) - ranks * ((0 if v1 else swap_b) + offload * GIB)
            if kv_off:  # the other pools' share of the room stays theirs
                fit = int(max(room - ranks * lmc * GIB, 0) // groups // GIB)
                flags.append(FlagChange("--kv-offloading-size", f"{kv_off:g}", str(fit),
                                        f"the buffer is GiB for the whole TP group; {groups} group(s) × {fit} GiB fit "
                                        f"{fmt_gib(total)} ({host_how}) − reserve beside the other host pools; "
                                        "PyTorch's pinned allocator rounds each block up to a power of two, so "
                                        "leave room for up to 2×"))
            if lmc:
                lmc_room = max(room - groups * kv_off * GIB, 0)
                fit = int(lmc_room // ranks // GIB)
                flags.append(FlagChange("LMCACHE_MAX_LOCAL_CPU_SIZE", f"{lmc:g}", str(fit),
                                        f"the size is GiB (× 2^30 bytes) per worker: {ranks} workers ({how}) × {fit} GiB "
                                        f"= {fmt_gib(ranks * fit * GIB)} ≤ {fmt_gib(lmc_room)} left of {fmt_gib(total)} "
                                        f"({host_how}) after a {fmt_gib(reserve_of(total))} reserve and the other host "
                                        "pools"))
        severity = "critical" if kills or refused else "high"
        out.append(make_finding(
            "VLLM-HOST-001",
            summary=(f"{ranks} vLLM ranks × per-GPU host memory ({swap_flag} {swap_b / GIB:g} GiB"
                     + (f" + {off_flag} {offload:g}" if offload else "")
                     + (f" + --kv-offloading-size {kv_off:g} per TP group" if kv_off else "")
                     + (f" + LMCACHE_MAX_LOCAL_CPU_SIZE {lmc:g} GiB per worker" if lmc else "")
                     + f") ask {fmt_gib(demand or ranks * swap_b)}"
                     + (f" of {fmt_gib(total)} ({host_how})" if total else "")
                     + ("; vLLM refused to start" if refused else "")
                     + ("; the kernel OOM killer fired" if kills else "") + "."
                     + (f" Set {flags[0].flag} {flags[0].new}." if flags else "")),
            evidence=[*told[:2], *cfg.evidence_rows("swap_space", "cpu_offload_gb", "kv_offloading_size",
                                                    "tensor_parallel_size"),
                      *([lmc_row] if lmc_row is not None and lmc else []), *host_rows, *kills[:2]],
            severity=severity,
            confidence="high" if cfg.observed("swap_space") or offload or told or pools else "medium",
            confidence_reason=None if cfg.observed("swap_space") or offload or told or pools else
            f"{swap_flag} is vLLM's default ({swap_b / GIB:g} GiB), not read from the input",
            figures={"ranks_per_host": ranks, "swap_space_gib_per_gpu": swap_b / GIB, "cpu_offload_gib_per_gpu": offload,
                     "host_total_bytes": host_memory(tl).total or next((int(r["total_bytes"]) for r in told
                                                                        if r.get("total_bytes")), None),
                     "capacity_bytes": int(total) if total else None, "demand_bytes": int(demand) or None,
                     "engine_generation": cfg.engine_generation},
            flags=flags,
            actions=["Per-GPU host flags multiply by the ranks on the host: size them as host budget ÷ ranks. "
                     "PyTorch pins each layer's swap block rounded up to a power of two, so the real figure can be "
                     "up to 2× the flag."],
        ))
    return out


# ----------------------------------------------------------------------------------------------
# VLLM-HOST-002: a worker SIGKILLed by the OOM killer, seen from vLLM's (or Ray's) side


def _sigkilled(run: list[Row]) -> list[Row]:
    """Workers that died of SIGKILL (exit -9 / 137), that Ray's memory monitor says it killed, or that Ray says
    died without saying why (its list of *potential* causes is not an observation: the phase decides below)."""
    out = []
    for r in of_kind(run, "rank_dead", "init_failed"):
        a = attrs(r)
        procs = a.get("failed_procs") or {}
        if a.get("cause") in ("ray_oom_killer", "ray_worker_exited") or r.get("code") in (-9, 137) \
                or any(v in (-9, 137) for v in procs.values() if isinstance(v, int)):
            out.append(r)
    return out


def detect_killed(tl: Timeline) -> list[Finding]:
    if rows(tl, "oom_kill"):
        return []  # the kernel's own report: SGL-HOST-004 names the victims
    out: list[Finding] = []
    for run in vllm_runs(tl):
        dead = _sigkilled(run)
        if not dead:
            continue
        first = dead[0]
        ray = [r for r in dead if attrs(r).get("cause") == "ray_oom_killer"]
        loaded = [r for r in of_kind(run, "weight_load_end") if (r.get("line") or 0) < (first.get("line") or 0)]
        cfg = settings(tl, run)
        ranks, how = ranks_of(cfg)
        unexplained = all(attrs(r).get("cause") == "ray_worker_exited" for r in dead)
        if unexplained and (loaded or ranks < 2):
            continue  # a worker died and nothing says of what: not a host-memory finding (fatal_other has it)
        flags: list[FlagChange] = []
        loading_flag = engines.flag_for("vllm", "parallel_loading_workers") or "--max-parallel-loading-workers"
        if not loaded and (ranks > 1 or ray):
            flags.append(FlagChange(loading_flag, cfg.text("max_parallel_loading_workers"), "1",
                                    "the worker died before the weights were loaded: every worker reads its "
                                    "checkpoint through host RAM at the same time; one at a time bounds the peak "
                                    "(slower start-up)"))
        out.append(make_finding(
            "VLLM-HOST-002",
            summary=(("A Ray worker of vLLM died while the weights were loading, and Ray does not say why: with "
                      f"{ranks} workers each reading the checkpoint through host RAM at once, the likeliest cause is "
                      "the kernel OOM killer (the first of Ray's possible causes)") if unexplained else
                     ("A vLLM worker was killed by SIGKILL"
                      + (" — Ray's memory monitor killed it (host memory above its threshold)" if ray else
                         " (exit code -9): most often the kernel OOM killer")
                      + (" while the weights were loading" if not loaded else ""))
                     + ". The input holds no kernel log to confirm it."),
            evidence=dead[:4],
            confidence="medium" if ray else "low",
            confidence_reason="no kernel log in the input: " + (
                "Ray's memory monitor reports the kill" if ray else
                "Ray lists possible causes only; the phase (all ranks loading at once) points to host memory"
                if unexplained else "exit code -9 only"),
            figures={"ranks_per_host": ranks, "killed_before_weights_loaded": not loaded},
            flags=flags,
            actions=["Check the kernel log of the same minutes (`dmesg -T | grep -i 'killed process'`, "
                     "`journalctl -k`); size per-GPU host memory (VLLM-HOST-001) and weight loading to the host, "
                     "or give the host / container more memory."],
        ))
        break
    return out

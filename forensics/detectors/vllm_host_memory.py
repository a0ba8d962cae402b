"""VLLM-HOST-001: vLLM's per-GPU host memory (``--swap-space``, ``--cpu-offload-gb``) × ranks exceeds the host.

Sources: VLLM-HOST-001 reads ``--swap-space`` and ``--cpu-offload-gb`` per GPU worker
(reference/vllm_formats.md §5.1) and vLLM's own swap check (reference/vllm_formats.md §3.7, vllm
vllm/config.py::CacheConfig.verify_with_parallel_config (0.4-0.10)).

What each host pool is per, from the engines' sources:

* ``--swap-space``: "CPU swap space size (GiB) per GPU" (vllm vllm/engine/arg_utils.py (0.2-0.10); V0's
  ``CacheEngine`` pins ``num_cpu_blocks`` per worker; V1 allocates none but 0.8–0.17 still run the check).
* ``--cpu-offload-gb``: "The space in GiB to offload to CPU, per GPU" (vllm vllm/config/cache.py (0.5.3-0.11),
  later vllm vllm/config/offload.py::UVAOffloadConfig (main)): every worker pins its own share of the weights.
* ``--kv-offloading-size`` (reference/vllm_formats.md §5.1: 0.11.2+, total across the TP ranks): one engine's
  budget, split over its TP × PP ranks — vllm vllm/config/vllm.py::VllmConfig._post_init_kv_transfer_config
  (0.11.2-main) sets ``cpu_bytes_to_use = kv_offloading_size * (1 << 30)`` for the ``OffloadingConnector`` and
  the ``lmcache`` backend's per-rank ``max_local_cpu_size = kv_offloading_size / (TP × PP)``; vLLM's config
  test: "bytes per rank: 8.0 GiB / (2 * 2) = 2.0 GiB". Data-parallel replicas each have their own.
* LMCache's ``max_local_cpu_size`` (``LMCACHE_MAX_LOCAL_CPU_SIZE``): per worker — lmcache
  lmcache/v1/cache_engine.py::LMCacheEngineBuilder (main) gives every engine its
  ``MixedMemoryAllocator(int(max_local_cpu_size * 1024**3))`` and vLLM's connector builds one engine per worker
  (:func:`lmcache_cpu_size`).

``--tensor-parallel-size 4 --swap-space 16`` pins 4 × 16 GiB of host RAM (PyTorch's pinned allocator
rounds each layer's block up to a power of two), and ``--cpu-offload-gb 40`` at TP 2 pins 80 GiB. vLLM's
own check only compares swap × TP with 70 % of *total* RAM and ignores offload, PP and other tenants.
With no host size in the input (no free/meminfo, no container or pod limit) the pools the input sets are still
added up when the run ends the way an over-committed host ends it — a kill for memory, a death with no traceback,
a start-up log that stops — and the finding names the capacity as the fact that decides (:func:`_capacity_unknown`).
The OffloadingConnector's ``cpu_bytes_to_use`` is one engine's: vllm vllm/v1/kv_offload/cpu.py::CPUOffloadingSpec
(0.11-main) counts ``page_size_bytes × layers × parallel_config.world_size`` per offloaded block and maps one shared
region of ``cpu_bytes_to_use`` bytes for the engine's workers.
VLLM-HOST-002 reads the deaths of reference/vllm_formats.md §3.6 and Ray's (§3.7). Sample::

    ValueError: Too large swap space. 64.00 GiB out of the 62.79 GiB total CPU memory is allocated for the swap space.

>>> corrected_per_gpu(host_total=62.79 * 2**30, ranks=4, offload_per_gpu=0)
4
>>> corrected_per_gpu(host_total=196 * 2**30, ranks=2, offload_per_gpu=80 * 2**30)
8
"""

from __future__ import annotations

import dataclasses
import re

from forensics.facts import engines, lmcache
from forensics.facts.host_memory import host_memory
from forensics.facts.launch import launch_rows
from forensics.facts.rows import Row, attrs, before, rank_of, rows
from forensics.facts.stages import served
from forensics.facts.vllm import VllmSettings, is_vllm_launch, of_kind, settings, vllm_runs
from forensics.model import Finding, FlagChange, Timeline

from ._common import GIB, fmt_gib, make_finding
from .fatal_other import FAILURE_LINE_KINDS, failure_class
from .kernel_oom_killer import MEMORY_KILL_CLASSES
from .stalled import silence_measured

SWAP_SHARE = 0.3  # of host RAM for all ranks' swap together (vLLM warns above 0.4, refuses above 0.7)
#: with no host figures, propose at most this share of what failed to pin
BLIND_SHARE = 0.5
RESERVE_SHARE = 0.1  # of host RAM kept for the OS, weight loading and the processes themselves
MIN_RESERVE = 8 * GIB



def _ranks(n: int, kind: str = "") -> str:
    """``1 vLLM rank``, ``4 vLLM ranks``."""
    return f"{n} {kind}rank{'' if n == 1 else 's'}"

def reserve_of(total: float) -> float:
    """What stays for the OS and the processes themselves; a small host (a laptop, a 4 GiB container) keeps half
    rather than a fixed 8 GiB it does not have, else nothing would ever fit there."""
    return max(RESERVE_SHARE * total, min(MIN_RESERVE, total / 2))


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
    """LMCache's per-worker CPU backend size in GiB and the row that says it (:func:`forensics.facts.lmcache.cpu_pool`:
    the launch's ``LMCACHE_MAX_LOCAL_CPU_SIZE``, else the configuration file's ``max_local_cpu_size``, else the
    workers' own log); the vLLM connector builds one LMCache engine, with its own CPU backend, per worker."""
    pool = lmcache.cpu_pool(tl)
    return pool.row, pool.gib


def lmcache_logged(tl: Timeline) -> list[Row]:
    """The workers' ``LMCache Configuration`` lines with the CPU backend on: one per worker's engine."""
    return lmcache.logged(tl)


#: vLLM's OffloadingConnector configured by hand (``--kv-transfer-config '{"kv_connector": "OffloadingConnector",
#: "kv_connector_extra_config": {"cpu_bytes_to_use": N}}'``): the key ``--kv-offloading-size`` writes for the native
#: backend (``cpu_bytes_to_use = kv_offloading_size * (1 << 30)``, vllm/config/vllm.py), so the same engine-wide
#: budget, in bytes; JSON on a command line, a dict or KVTransferConfig repr in a log's args
_OFFLOAD_CONNECTOR = re.compile(r"""kv_connector['"]?\s{0,5}[:=]\s{0,5}['"]OffloadingConnector['"]""")
_CPU_BYTES = re.compile(r"""cpu_bytes_to_use['"]?\s{0,5}[:=]\s{0,5}['"]?(\d{1,20}(?:\.\d{1,6})?(?:[eE]\d{1,2})?)""")
CPU_BYTES_FLAG = "--kv-transfer-config kv_connector_extra_config.cpu_bytes_to_use"


def connector_offload_bytes(cfg: VllmSettings) -> float:
    """Bytes of the OffloadingConnector's CPU buffer for one engine, when the KV transfer config sets them."""
    text = str(cfg.text("kv_transfer_config") or "")[:4000]
    m = _CPU_BYTES.search(text) if _OFFLOAD_CONNECTOR.search(text) else None
    return float(m.group(1)) if m else 0.0


def engine_ranks(cfg: VllmSettings) -> int:
    """The ranks of one engine (TP × PP), over which vLLM splits ``--kv-offloading-size``."""
    return max(int(cfg.value_or_default("tensor_parallel")[0] or 1) * int(cfg.num("pipeline_parallel_size") or 1), 1)


def ranks_of(cfg: VllmSettings) -> tuple[int, str]:
    tp, tp_seen = cfg.value_or_default("tensor_parallel")
    pp = cfg.num("pipeline_parallel_size") or 1
    dp = cfg.num("data_parallel_size") or 1
    n = int((tp or 1) * pp * dp)
    how = f"tp {int(tp or 1)}" + (f" × pp {int(pp)}" if pp > 1 else "") + (f" × dp {int(dp)}" if dp > 1 else "")
    return n, how + ("" if tp_seen else " (assumed)")


def detect(tl: Timeline) -> list[Finding]:
    fails = pinning_failures(tl) if vllm_runs(tl) else []
    over = _overallocated(tl, fails)
    return [*over, *([_pinning_failed(tl, fails)] if fails and not over else []), *detect_killed(tl)]


def pinning_failures(tl: Timeline) -> list[Row]:
    """Pinned host allocations that failed: the runtime's ``out of memory`` with the pinned allocator in its frames
    (:func:`parsers.failures.pinned_host_oom`) and the NVIDIA kernel module's ``Cannot map memory`` line."""
    return ([r for r in rows(tl, "cuda_error_oom") if attrs(r).get("host_pinned")]
            + [r for r in rows(tl, "failure") if failure_class(r) == "kernel_map_failed"])


def _tracebacks_of(tl: Timeline, fails: list[Row]) -> list[Row]:
    """The traceback rows that hold these failures (the exception whose lines span them)."""
    at = {(r.get("file"), r.get("line")) for r in fails}
    return [r for r in rows(tl, "exception") if any(
        f == r.get("file") and (r.get("line") or 0) <= n <= (r.get("line_end") or r.get("line") or 0) for f, n in at)][:2]


def _pinning_failed(tl: Timeline, fails: list[Row]) -> Finding:
    """vLLM's pinned host memory could not be allocated: its per-GPU host pools (V0's ``--swap-space`` blocks,
    ``pin_memory=True`` per layer: vllm_formats.md; ``--cpu-offload-gb``) × the ranks are more than the host can
    lock (vllm_formats.md §3.7, "pinning failures": ``RuntimeError: CUDA error: out of memory`` from ``cudaHostAlloc``
    when pinning swap/offload buffers; failure_messages.md §2.1: the pinned frames say host, not GPU). With the
    host's size known :func:`_overallocated` does the arithmetic; this says which pool and what to lower
    meanwhile."""
    runs = vllm_runs(tl)
    cfg = settings(tl, runs[-1] if runs else [])
    ranks, how = ranks_of(cfg)
    swap, seen = cfg.value_or_default("host_kv_per_gpu")
    offload = cfg.num("cpu_offload_gb") or 0.0
    flags: list[FlagChange] = []
    if swap and cfg.engine_generation != "V1":
        new = int(swap * BLIND_SHARE)
        flags.append(FlagChange("--swap-space", cfg.text("swap_space"), str(new),
                                f"{_ranks(ranks)} ({how}) × {swap:g} GiB of pinned swap blocks{'' if seen else ' (default)'}"
                                " could not be pinned; half, until `free -g` shows what the host can lock for all "
                                "ranks (0 is valid without beam search / n > 1)"))
    elif offload:
        flags.append(FlagChange("--cpu-offload-gb", cfg.text("cpu_offload_gb"), str(int(offload * BLIND_SHARE)),
                                f"{_ranks(ranks)} × {offload:g} GiB of pinned offloaded weights; half, until `free -g` "
                                "shows the budget"))
    return make_finding(
        "VLLM-HOST-001",
        summary=("Pinning host memory failed (the pinned host allocator ran out, not the GPU): vLLM's per-GPU host "
                 + (f"memory × {ranks} ranks ({how})" if ranks > 1 else
                    "memory × the ranks on the host (the tensor-parallel size is not in the input)")
                 + " is more than the host can lock"
                 + (f"; lower {flags[0].flag} to {flags[0].new}" if flags else "") + "."),
        evidence=fails[:4] + _tracebacks_of(tl, fails) + cfg.evidence_rows("swap_space", "cpu_offload_gb",
                                                                             "tensor_parallel_size"),
        confidence="low",
        confidence_reason="host memory not in the input: the pinned pools cannot be set against it",
        ranks=[x for x in (rank_of(r) for r in fails) if x is not None],
        figures={"ranks_per_host": ranks, "swap_space_gib_per_gpu": swap, "cpu_offload_gib_per_gpu": offload},
        flags=flags,
        actions=["`free -g` and the container's memory limit against ranks × (--swap-space + --cpu-offload-gb); "
                 "PyTorch rounds each pinned block up to a power of two."],
    )



def _overallocated(tl: Timeline, fails: list[Row]) -> list[Finding]:
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
        kv_off = cfg.num("kv_offloading_size") or 0.0  # GiB for one engine's TP × PP ranks together
        conn_bytes = 0.0 if kv_off else connector_offload_bytes(cfg)
        kv_off = kv_off or conn_bytes / GIB
        lmc_pool = lmcache.cpu_pool(tl)
        lmc_row, lmc = lmc_pool.row, lmc_pool.gib
        if swap is None and not offload and not told and not kv_off and not lmc:
            continue
        ranks, how = ranks_of(cfg)
        # the refusal states swap × TP, vLLM's own sum (vllm_formats.md §3.7): with the flag known it gives TP
        told_swap = max((float(r["bytes"]) for r in told if r.get("bytes")), default=0.0)
        tp_seen = cfg.value_or_default("tensor_parallel")[1]
        if told_swap and swap and not tp_seen and round(told_swap / (swap * GIB)) >= 1:
            tp_told = round(told_swap / (swap * GIB))
            ranks, how = ranks // max(int(cfg.value_or_default("tensor_parallel")[0] or 1), 1) * tp_told, \
                f"tp {tp_told}: the refusal's {fmt_gib(told_swap)} ÷ {swap:g} GiB per GPU"
        default_swap = float(engines.default_for("vllm", "host_kv_per_gpu") or 0)
        # no flag and no TP read: a refusal that sums exactly vLLM's default is one GPU at the default
        # (vllm_formats.md §3.7: swap_space × tensor_parallel_size is what the check sums); any larger sum
        # could be any split of a value the user set, so it stays unsplit
        if told_swap and swap is None and not tp_seen and default_swap \
                and abs(told_swap / (default_swap * GIB) - 1) < 0.01:
            ranks, tp_seen = 1, True
            how = (f"tp 1: the refusal's {fmt_gib(told_swap)} is vLLM's default {default_swap:g} GiB for one GPU, "
                       "assumed since neither --swap-space nor the tensor-parallel size was read")
        per_gpu_known = swap is not None or tp_seen or not told_swap
        workers = {r.get("pid") or r.get("rank") for r in [*lmcache_logged(tl), *(
            r for r in rows(tl, "notice") if attrs(r).get("message_id") == "lmcache_engine")]} - {None} if lmc else set()
        if len(workers) > ranks and not tp_seen:  # every worker logs its own LMCache engine's configuration
            ranks, how = len(workers), f"at least {len(workers)}: the workers that started an LMCache engine"
        groups = max(ranks // engine_ranks(cfg), 1)  # engines (data-parallel replicas) on the host
        total, host_rows, host_how = _host(tl, run)
        swap_b = (swap if swap is not None else float(engines.default_for("vllm", "host_kv_per_gpu") or 0)) * GIB
        if swap is None and told_swap and tp_seen:
            swap_b = told_swap / max(ranks, 1)
        v1 = cfg.engine_generation == "V1"
        pools = groups * kv_off * GIB + ranks * lmc * GIB  # the KV offload buffers and LMCache's CPU backends
        demand = max(ranks * ((0 if v1 else swap_b) + offload * GIB) + pools, told_swap)
        refused = [r for r in told if not (r.get("attrs") and '"warning_only": true' in r["attrs"])]
        if total is None and not told:
            requested = _requested_pools(cfg, ranks, groups, swap, offload, kv_off, conn_bytes, lmc, v1,
                                         lmc_pool.words())
            found = _capacity_unknown(tl, run, cfg, ranks, how, requested, lmc_row, fails) if requested else None
            if found is not None:
                out.append(found)
                seen = True
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
        if new is not None and per_gpu_known and new < (swap if swap is not None else swap_b / GIB):  # never raise
            flags.append(FlagChange(swap_flag, f"{swap:g}" if swap is not None else None, str(new),
                                    f"{ranks} ranks ({how}) × {new} GiB ≤ {SWAP_SHARE:.0%} of {fmt_gib(total)} "
                                    f"({host_how}), beside {ranks} × {offload:g} GiB offloaded weights; 0 is valid "
                                    "when beam search / n > 1 are not used" + (" (V1 never allocates it)" if v1 else "")))
        off_flag = engines.flag_for("vllm", "cpu_offload_per_gpu") or "--cpu-offload-gb"
        if offload and total and ranks * offload * GIB > total - reserve_of(total):
            fit = int((total - reserve_of(total)) // ranks // GIB)
            flags.append(FlagChange(off_flag, f"{offload:g}", str(max(fit, 0)),
                                    f"{_ranks(ranks)} × {fit} GiB pinned ≤ {fmt_gib(total)} − reserve"))
        if total and pools and over:
            room = total - reserve_of(total) - ranks * ((0 if v1 else swap_b) + offload * GIB)
            if kv_off:  # the other pools' share of the room stays theirs
                fit = int(max(room - ranks * lmc * GIB, 0) // groups // GIB)
                flags.append(FlagChange(*((CPU_BYTES_FLAG, str(int(conn_bytes)), str(fit * GIB)) if conn_bytes else
                                          ("--kv-offloading-size", f"{kv_off:g}", str(fit))),
                                        f"the buffer is one engine's, split over its TP × PP ranks "
                                        f"({'bytes' if conn_bytes else 'GiB'}); {groups} engine(s) × {fit} GiB fit "
                                        f"{fmt_gib(total)} ({host_how}) − reserve beside the other host pools; "
                                        "PyTorch's pinned allocator rounds each block up to a power of two, so "
                                        "leave room for up to 2×"))
            if lmc:
                lmc_room = max(room - groups * kv_off * GIB, 0)
                fit = int(lmc_room // ranks // GIB)
                flags.append(FlagChange(lmc_pool.flag, f"{lmc:g}", str(fit),
                                        f"the size is GiB (× 2^30 bytes) per worker: {ranks} workers ({how}) × {fit} GiB "
                                        f"= {fmt_gib(ranks * fit * GIB)} ≤ {fmt_gib(lmc_room)} left of {fmt_gib(total)} "
                                        f"({host_how}) after a {fmt_gib(reserve_of(total))} reserve and the other host "
                                        "pools" + lmc_pool.fix_note()))
        severity = "critical" if kills or refused else "high"
        out.append(make_finding(
            "VLLM-HOST-001",
            summary=((f"vLLM refused to start: {swap_flag} × the tensor-parallel size asks {fmt_gib(told_swap)} of "
                      f"swap space, over 70 % of the {fmt_gib(total or 0)} total CPU memory it counts (vLLM checks "
                      "total RAM and TP only; each GPU worker pins its own). The flag is GiB per GPU: lower it so "
                      f"that it × TP stays below {fmt_gib(SWAP_SHARE * (total or 0))} ({SWAP_SHARE:.0%}); 0 is valid "
                      "without beam search / n > 1.") if refused and told_swap and not per_gpu_known else
                     f"{_ranks(ranks, 'vLLM ')} × per-GPU host memory ("
                     + " + ".join([*([f"{swap_flag} {swap_b / GIB:g} GiB"] if not v1 or swap is not None else []),
                                   *([f"{off_flag} {offload:g}"] if offload else []),
                                   *([f"OffloadingConnector's cpu_bytes_to_use {fmt_gib(conn_bytes)} per engine"]
                                     if conn_bytes else [f"--kv-offloading-size {kv_off:g} per engine"] if kv_off
                                     else []),
                                   *([f"{lmc_pool.words()} per worker"] if lmc else [])])
                     + f") ask {fmt_gib(demand or ranks * swap_b)}"
                     + (f" of {fmt_gib(total)} ({host_how})" if total else "")
                     + ("; vLLM refused to start" if refused else "")
                     + ("; the kernel OOM killer fired" if kills else "") + "."
                     + (f" Set {flags[0].flag} {flags[0].new}." if flags else "")),
            evidence=[*fails[:2], *told[:2], *cfg.evidence_rows("swap_space", "cpu_offload_gb", "kv_offloading_size",
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


def _requested_pools(cfg: VllmSettings, ranks: int, groups: int, swap: float | None, offload: float, kv_off: float,
                     conn_bytes: float, lmc: float, v1: bool,
                     lmc_words: str = "") -> list[tuple[str, float]]:
    """The host pools the input itself sets, each with the bytes it asks on the host: (words, bytes).

    Only what a flag, an environment variable or the engine's own log states: vLLM's default swap is no one's
    choice (and V1 allocates none), so it never stands alone in a finding whose capacity is unknown."""
    swap_flag = engines.flag_for("vllm", "host_kv_per_gpu") or "--swap-space"
    out: list[tuple[str, float]] = []
    if swap and cfg.observed("swap_space") and not v1:
        out.append((f"{ranks} × {swap_flag} {swap:g} GiB (per GPU)", ranks * swap * GIB))
    if offload:
        out.append((f"{ranks} × --cpu-offload-gb {offload:g} GiB (per GPU)", ranks * offload * GIB))
    if conn_bytes:
        out.append((f"{groups} × OffloadingConnector cpu_bytes_to_use {fmt_gib(conn_bytes)} (per engine, split over "
                    "its TP × PP ranks)", groups * conn_bytes))
    elif kv_off:
        out.append((f"{groups} × --kv-offloading-size {kv_off:g} GiB (per engine, split over its TP × PP ranks)",
                    groups * kv_off * GIB))
    if lmc:
        out.append((f"{ranks} × {lmc_words or f'{lmcache.ENV_SIZE} {lmc:g} GiB'} (per worker: one LMCache engine each)",
                    ranks * lmc * GIB))
    return out


def _bad_end(tl: Timeline, run: list[Row]) -> tuple[str, str, list[Row]] | None:
    """How the run ended, when it ended in a kill, a death nothing explains or a start-up that stops: ("killed" |
    "died" | "stopped", words, rows).

    A failure line that explains the end (a Python error, a GPU OOM, NCCL) is another mechanism's, not the host
    pools'; a run that served is past the point where vLLM pins its pools (at start-up: V0 ``CacheEngine``, the
    offloaded weights at load, the KV-offload buffers and LMCache's backends when the KV cache is registered)."""
    if rows(tl, "oom_kill"):
        return None  # the kernel's own report names the victim and what it held: SGL-HOST-009 / SGL-HOST-004
    kills = [r for r in rows(tl, "failure") if attrs(r).get("failure") in MEMORY_KILL_CLASSES]
    if kills:
        return "killed", "a process was killed for memory", kills[:2]
    if _explained(tl, run):
        return None
    dead = _sigkilled(run) or _died_silently(tl, run)
    if dead:
        return "died", "a process died without a traceback (killed from outside)", dead[:2]
    last = max(run, key=lambda r: (r.get("file") or "", r.get("line") or 0)) if run else None
    if last is not None and _allocates_pool(last) and not served(run):
        # stopped where the pools are made, not merely somewhere in start-up (a cut excerpt, a slow load: the
        # stall rules' business)
        return "stopped", "the log stops as the workers create their host pools, before the engine served", [last]
    return None


#: the host pools vLLM pins while the weights load: ``--cpu-offload-gb`` (the offloaded parameters are pinned as
#: each layer is built: vllm vllm/model_executor/models/utils.py ``maybe_offload_to_cpu``, ``pin_memory``). The
#: others come after the load: V0's swap blocks when the cache is initialised (vllm vllm/worker/worker.py
#: ``Worker.initialize_cache`` → ``CacheEngine._allocate_kv_cache(num_cpu_blocks, "cpu")``, run by the executor's
#: ``_initialize_kv_caches`` after ``load_model``; 0.2–0.10), the KV-offload region and LMCache's backend when the
#: KV cache is registered with the connector. A worker killed before its weights were in never held those.
_AT_LOAD_POOLS = ("--cpu-offload-gb",)


def _loaded_before(run: list[Row], deaths: list[Row]) -> bool:
    """Whether the run shows the weights in (the load's end, the engine serving) before the first of ``deaths``."""
    if not deaths:
        return True
    first = min(deaths, key=lambda r: (r.get("file") or "", r.get("line") or 0))
    return any((r.get("line") or 0) < (first.get("line") or 0)
               and (r.get("kind") != "notice" or attrs(r).get("message_id") in ("weights_read", "init_engine_done"))
               for r in of_kind(run, *_PAST_LOADING))


def _allocates_pool(row: Row) -> bool:
    """A record of a worker creating a host pool: vLLM's (parsers/vllm.py ``host_pool``: the offloaded weights,
    the KV-offload region, LMCache's CPU backend) or LMCache's ``Creating LMCacheEngine instance``."""
    return row.get("kind") == "host_pool" or attrs(row).get("message_id") == "lmcache_engine"


def _capacity_unknown(tl: Timeline, run: list[Row], cfg: VllmSettings, ranks: int, how: str,
                      requested: list[tuple[str, float]], lmc_row: Row | None, fails: list[Row]) -> Finding | None:
    """VLLM-HOST-001 without the host's size: the ranks' host pools add up to a total the input never sets against
    a capacity, and the run ended the way an over-committed host ends it. The total is stated; the fact that decides
    (MemTotal, or the container's limit) is named, and no size is proposed without it."""
    if fails:
        return None  # a failed pin is its own observation (_pinning_failed)
    end = _bad_end(tl, run)
    if end is None:
        return None
    how_ended, words, end_rows = end
    if how_ended == "died" and not _loaded_before(run, end_rows):
        # the death came before the weights were in: only the pools made while loading existed then
        requested = [(w, b) for w, b in requested if any(f in w for f in _AT_LOAD_POOLS)]
        if not requested:
            return None
    demand = sum(b for _w, b in requested)
    stall = how_ended == "stopped"
    # a silence the stall rule measures is an observed hang at the pools, which it links under this rule: then this
    # must be able to stand as the root; a log that merely ends there stays low
    measured = stall and silence_measured(tl, run)
    if measured:
        words += ", and stayed silent until the end of the evidence"
    found = make_finding(
        "VLLM-HOST-001",
        summary=(f"{ranks} vLLM ranks ({how}) ask {fmt_gib(demand)} of host memory for their pools ("
                 + " + ".join(w for w, _b in requested) + f"), and {words}. The input does not state the host's "
                 "memory or the container's limit, which decides it: more than that total minus a reserve for the "
                 "OS, weight loading and the processes themselves, and the host (or cgroup) kills or stalls the ranks."),
        evidence=[*cfg.evidence_rows("swap_space", "cpu_offload_gb", "kv_offloading_size", "kv_transfer_config",
                                     "tensor_parallel_size"),
                  *([lmc_row] if lmc_row is not None else []), *end_rows],
        # a death is observed and nothing else in the input explains it: the kill follows from the pools
        # (causes.py links VLLM-HOST-002 under this rule), so the finding must be able to stand as the root; the
        # capacity it lacks is said in the confidence. A log that merely stops stays low, like SGL-RUN-003's.
        severity="low" if stall and not measured else "high",
        confidence="low",
        confidence_reason="no free/meminfo and no container or pod memory limit in the input: the requested total "
                          "cannot be set against a capacity" + ("; the log may merely be cut there"
                                                                 if stall and not measured else ""),
        figures={"ranks_per_host": ranks, "ranks_counted": how, "demand_bytes": int(demand), "capacity_bytes": None,
                 "engine_generation": cfg.engine_generation},
        actions=[f"Compare {fmt_gib(demand)} with the host's MemTotal (`free -g`) and the container's limit "
                 "(`cat /sys/fs/cgroup/memory.max`, `docker inspect --format '{{.HostConfig.Memory}}'`, the pod's "
                 "resources.limits.memory); size each per-rank pool as (that − a reserve) ÷ the ranks on the host, "
                 "an engine-wide one as (that − a reserve) ÷ the engines.",
                 "Check the kernel log of the same minutes (`dmesg -T | grep -i 'killed process'`) for the kill."],
    )
    # the catalog's title says the total exceeds the host; here the host's size is the unknown
    return dataclasses.replace(found, title="vLLM's per-GPU host pools times the ranks, against a host size the "
                                            "input does not state")


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


#: the engine's own death chain: lines that say a process died, never why (vllm_formats.md §3.6)
_DEATH_CHAIN = frozenset({"rank_dead", "engine_dead", "init_failed"})
#: rows that say the weights were already in: the load's end, the engine serving
_PAST_LOADING = ("weight_load_end", "engine_metrics", "notice")
#: notices of an orderly stop: a death after one is the shutdown's, not a kill
_SHUTDOWN_NOTICES = frozenset({"shutdown", "worker_shutdown"})


def _explained(tl: Timeline, run: list[Row]) -> bool:
    """Whether the input says why a process died: a failure line outside the death chain that is not known to
    come after the first death (the other ranks' NCCL errors once a peer is gone are its consequences), an exit
    code that is not SIGKILL's (1: a Python exception), or an orderly shutdown noticed before the first death."""
    deaths = of_kind(run, "rank_dead")
    first_death = min(deaths, key=lambda r: (r.get("file") or "", r.get("line") or 0)) if deaths else None
    if any(r.get("kind") not in _DEATH_CHAIN and attrs(r).get("failure") not in MEMORY_KILL_CLASSES
           and (first_death is None or before(first_death, r) is not True) for r in rows(tl, *FAILURE_LINE_KINDS)):
        return True
    codes = [r.get("code") for r in of_kind(run, "init_failed")] + [
        v for r in of_kind(run, "init_failed") for v in (attrs(r).get("failed_procs") or {}).values()]
    if any(isinstance(c, int) and c not in (-9, 137) for c in codes):
        return True
    dead = [r.get("line") or 0 for r in of_kind(run, "rank_dead")]
    first = min(dead) if dead else 0
    return any(attrs(r).get("message_id") in _SHUTDOWN_NOTICES and (r.get("line") or 0) < first
               for r in of_kind(run, "notice"))


def _died_silently(tl: Timeline, run: list[Row]) -> list[Row]:
    """Worker or engine-core deaths that vLLM noticed with no exit code, in an input where nothing says why.

    ``"Worker proc %s died unexpectedly, shutting down executor."`` (``v1/executor/multiproc_executor.py``,
    0.8.5–0.25.0) and ``"Engine core proc %s died unexpectedly, shutting down client."`` (``v1/engine/
    core_client.py``, 0.10.1–0.19.0) are the parent's monitor thread seeing the child's process sentinel fire
    (vllm_formats.md §3.6). A Python error inside the child is logged by the child first (``WorkerProc hit an
    exception.``, ``EngineCore encountered a fatal error.``) and exits 1; a process that vanishes with nothing
    logged was killed from outside, by a signal it cannot catch: SIGKILL, which the kernel's (or the cgroup's)
    OOM killer sends (§3.7, rule 3: "Worker death without traceback … ⇒ host RAM"). Ray's ``Worker exit type:
    SYSTEM_ERROR`` (the worker's connection closed with no exit through Ray) is the same observation: an
    exception in an actor comes back as the task's error with its traceback, it does not end the process."""
    silent = [r for r in of_kind(run, "rank_dead") if r.get("code") is None
              and attrs(r).get("cause") in (None, "ray_worker_exited")]
    return [] if not silent or _explained(tl, run) else silent


def _confirmation(row: Row) -> str:
    a = attrs(row)
    if a.get("cgroup_file"):
        return f"The cgroup's {a['cgroup_file']} counts {a.get('oom_kills')} OOM kill(s), which"
    return f"`{str(a.get('message') or row.get('text') or '').strip()[:120]}`"


def _who(row: Row) -> str:
    name = attrs(row).get("process_name")
    return f"process {name}" if name else "worker"



def _ray_figures(ray: list[Row]) -> str:
    """Ray's own figures of the node's memory at the kill (failure_messages.md §5.4: host RAM, Ray's GB = GiB)."""
    a = next((attrs(r) for r in ray if attrs(r).get("host_used_bytes") and attrs(r).get("host_total_bytes")), None)
    if a is None:
        return ""
    return f": {fmt_gib(a['host_used_bytes'])} of the node's {fmt_gib(a['host_total_bytes'])} in use"

def detect_killed(tl: Timeline) -> list[Finding]:
    if rows(tl, "oom_kill"):
        return []  # the kernel's own report: SGL-HOST-004 names the victims
    out: list[Finding] = []
    for run in vllm_runs(tl):
        killed = [r for r in _sigkilled(run) if attrs(r).get("cause") != "ray_worker_exited"]
        silent = [] if killed else _died_silently(tl, run)
        dead = killed or silent
        if not dead:
            continue
        first = dead[0]
        ray = [r for r in dead if attrs(r).get("cause") == "ray_oom_killer"]
        # a cgroup's oom_kill count, a runtime's OOMKilled, systemd's oom-kill: the kill tied to memory
        confirmed = [r for r in rows(tl, "failure") if attrs(r).get("failure") in MEMORY_KILL_CLASSES]
        loaded = [r for r in of_kind(run, *_PAST_LOADING) if (r.get("line") or 0) < (first.get("line") or 0)
                  and (r.get("kind") != "notice" or attrs(r).get("message_id") in ("weights_read", "init_engine_done"))]
        cfg = settings(tl, run)
        ranks, how = ranks_of(cfg)
        ray_exited = [r for r in dead if attrs(r).get("cause") == "ray_worker_exited"]
        if ray_exited and ranks < 2 and not cfg.observed("tensor_parallel_size"):
            # vLLM starts Ray workers only for a world size above 1 (ParallelConfig, vllm/config.py 0.1–0.4:
            # ``if self.world_size > 1: self.worker_use_ray = True``)
            ranks, how = 2, "at least 2: vLLM runs Ray workers when the world size is above 1"
        unexplained = bool(ray_exited) and len(ray_exited) == len(dead)
        flags: list[FlagChange] = []
        loading_flag = engines.flag_for("vllm", "parallel_loading_workers") or "--max-parallel-loading-workers"
        if not loaded and (ranks > 1 or ray):
            flags.append(FlagChange(loading_flag, cfg.text("max_parallel_loading_workers"), "1",
                                    "the worker died before the weights were loaded: every worker reads its "
                                    "checkpoint through host RAM at the same time; one at a time bounds the peak "
                                    "(slower start-up)"))
        out.append(make_finding(
            "VLLM-HOST-002",
            summary=((("A Ray worker of vLLM died with no traceback, and Ray does not say why (exit type SYSTEM_ERROR; "
                      "its list of possible causes is not a diagnosis)"
                      + (f" before the log shows the weights loaded: with {ranks} workers each reading the checkpoint "
                         "through host RAM at once," if not loaded else ": a process that ends without an exception "
                         "was killed from outside;")
                      + " the likeliest cause is a SIGKILL from the kernel OOM killer") if unexplained else
                     (f"vLLM's {_who(first)} died without a traceback or an exit code"
                      + (" while the weights were loading" if not loaded else "")
                      + ": nothing inside the process reported an error, so it was killed from outside — SIGKILL, "
                        "most often the kernel or cgroup OOM killer (host or container memory)") if silent else
                     ("A vLLM worker was killed by SIGKILL"
                      + (" — Ray's memory monitor killed it (host memory above its threshold"
                         + _ray_figures(ray) + ")" if ray else " (exit code -9): most often the kernel OOM killer")
                      + (" while the weights were loading" if not loaded else "")))
                     + (f". {_confirmation(confirmed[0])} ties it to memory." if confirmed else
                        "." if ray else ". The input holds no kernel log to confirm it.")),
            evidence=[*dead[:4], *confirmed[:2]],
            confidence="medium" if ray or confirmed else "low",
            confidence_reason=("the kill is tied to memory but not to this worker: no kernel `Killed process <pid>` "
                               "line names the victim") if confirmed else "no kernel log in the input: " + (
                "Ray's memory monitor reports the kill" if ray else
                "Ray lists possible causes only; no traceback in the input"
                + ("; the phase (all ranks loading at once) points to host memory" if not loaded else "")
                + "; a kernel `Killed process <pid>` line (dmesg) would confirm the OOM killer" if unexplained else
                "vLLM saw the process exit and logged no code; a kernel `Killed process <pid>` line (dmesg) or "
                "the cgroup's oom_kill count (memory.events, `OOMKilled` in docker inspect or the pod's status) "
                "would confirm the OOM killer, a `segfault at` line would rule it out" if silent else
                "exit code -9 only"),
            figures={"ranks_per_host": ranks, "ranks_counted": how, "killed_before_weights_loaded": not loaded},
            flags=flags,
            actions=["Check the kernel log of the same minutes (`dmesg -T | grep -i 'killed process'`, "
                     "`journalctl -k`); size per-GPU host memory (VLLM-HOST-001) and weight loading to the host, "
                     "or give the host / container more memory."],
        ))
        break
    return out

"""SGL-HOST-001 / SGL-HOST-002: HiCache host pools sized per rank that do not fit the host.

Sources: SGL-HOST-001 reads reference/sglang_formats.md §4 (the per-rank host pool, ``--hicache-size`` in 10^9
bytes, the 10 GiB reserve, the power-of-two pinning of 0.4.5-0.5.4) and sglang
python/sglang/srt/mem_cache/memory_pool_host.py (0.4.5-0.5.18: each rank checks its own pool against the whole
host's available memory); SGL-HOST-002 is the refusal of reference/sglang_formats.md §4.

``--hicache-size`` is 10^9 bytes *per scheduler rank*; up to 0.5.18 every rank checks only its
own request against the whole host, so TP8 × 300 GB passes eight checks and asks 2.4 TB of a
449 GiB host. 0.4.5–0.5.4 pin each pool rounded up to a power of two. From 0.5.19 SGLang divides
the budget by the ranks per host and refuses cleanly (``hicache_insufficient``).

>>> pinned_bytes(48e9, True) == 1 << 36, pinned_bytes(48e9, False) == 48e9
(True, True)
>>> largest_hicache_gb(48.9e9, pow2=False), largest_hicache_gb(48.9e9, pow2=True)
(48, 34)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import timedelta

from forensics.facts.host_memory import HostMemory, host_memory
from forensics.facts.launch import (
    ServerConfig,
    flag_key,
    is_prose,
    launch_rows,
    ranks_per_host,
    server_config,
)
from forensics.facts.rows import Row, attrs, before, rank_label, rank_of, rows
from forensics.facts.runs import RunRef, iter_runs, of_kind
from forensics.facts.versions import sglang_version, version_text, version_window
from forensics.model import Finding, FlagChange, Timeline

from ._common import GIB, evidence_list, fmt_gb, fmt_gib, make_finding, tag_run
from .recorded_history import recorded_climb

SGLANG_RESERVE = 10 * GIB  # SGLang's own host reserve in the allocation check (0.4.10+)
RESERVE_FRACTION = 0.10  # our reserve: max(10 GiB, 10% of capacity)
PER_PROCESS_BYTES = 3 * GIB  # host RSS of one scheduler process (CUDA context, torch, Python)
POW2_FIRST, POW2_LAST = (0, 4, 5), (0, 5, 4)
SPLIT_FIRST = (0, 5, 19)  # SGLang divides the host budget by the ranks per host
#: ``--hicache-size N`` is ``N * 1e9`` bytes per rank (reference/sglang_formats.md, "HiCache host GB = 10^9 B")
HICACHE_UNIT = "--hicache-size is in GB, 10^9 bytes"


def pinned_bytes(requested: float, pow2: bool) -> float:
    """Bytes actually pinned for one pool: PyTorch's host allocator rounds up to 2^k on 0.4.5–0.5.4."""
    if not pow2 or requested <= 0:
        return requested
    return float(1 << math.ceil(math.log2(requested)))


def largest_hicache_gb(per_rank_budget: float, pow2: bool) -> int:
    """The largest whole ``--hicache-size`` (GB) whose pinned pool fits ``per_rank_budget`` bytes."""
    if per_rank_budget < 1e9:
        return 0
    if pow2:
        return int((1 << int(math.floor(math.log2(per_rank_budget)))) // 1e9)
    return int(per_rank_budget // 1e9)


def pow2_state(tl: Timeline) -> tuple[str, str]:
    """Does the power-of-two pinning apply? ("yes" | "likely" | "unknown" | "no", and the version text).

    "likely": no version stated, but the log's line formats only exist up to 0.5.4 or earlier.
    """
    return version_state(tl, POW2_FIRST, POW2_LAST)


def version_state(tl: Timeline, first: tuple[int, ...], last: tuple[int, ...]) -> tuple[str, str]:
    """Is the SGLang release in [first, last]? ("yes" | "likely" | "unknown" | "no", and the version text)."""
    exact, where = sglang_version(tl)
    if exact:
        inside = first <= exact <= last
        return ("yes" if inside else "no"), f"{version_text(exact)} ({where})"
    lo, hi = version_window(tl)
    if (lo and lo > last) or (hi and hi < first):
        bound = f"≥ {version_text(lo)}" if lo and lo > last else f"≤ {version_text(hi)}"
        return "no", f"unknown, {bound} from the log's line formats"
    if hi and hi <= last:
        return "likely", f"unknown, ≤ {version_text(hi)} from the log's line formats"
    return "unknown", "unknown (not stated in the input)"


#: SGLang 0.4.8–0.5.14 assert each rank's host pool is larger than its device KV pool (SGL-HOST-011; sglang
#: python/sglang/srt/mem_cache/memory_pool_host.py ``HostKVCache.__init__``); 0.5.15+ only warns
HOST_ABOVE_DEVICE = ((0, 4, 8), (0, 5, 14))


def device_pool_bytes(run: list[Row]) -> float | None:
    """One rank's device KV pool, from ``KV Cache is allocated`` (the largest rank's)."""
    sizes = [float(r["bytes"]) for r in of_kind(run, "kv_cache_allocated") if r.get("bytes")]
    return max(sizes) if sizes else None


def splits_budget(tl: Timeline) -> bool:
    exact, _ = sglang_version(tl)
    if exact:
        return exact >= SPLIT_FIRST
    lo, _ = version_window(tl)
    return bool(lo and lo >= SPLIT_FIRST)


@dataclass
class Request:
    """What one run asked per rank, and how we know."""

    per_rank: float
    source: str  # "log" | "flags" | "ratio"
    evidence: list[Row]
    ranks_seen: int
    rank_ids: list[int]
    pools: dict[str, float] | None = None  # one rank's pools by name, when the log shows several


def fit_hicache_gb(pools: dict[str, float] | None, flag_gb: float | None, per_rank_budget: float, pow2: bool) -> int:
    """The largest whole ``--hicache-size`` whose pools, together, fit ``per_rank_budget`` bytes.

    One rank may pin several pools the flag sizes: on hybrid models SGLang passes the same ``hicache_size`` to the
    KV and the Mamba host pool (sglang python/sglang/srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py
    (0.5.10-0.5.16) ``build_hybrid_mamba_stack``), and pools sized from the same host token count (DSA indexer,
    draft) grow with it; each pool scales with the flag, so the fit divides the budget among them.

    >>> fit_hicache_gb({"kv": 40e9, "mamba": 40e9}, 40, 54e9, False)
    27
    """
    if not pools or len(pools) < 2 or not flag_gb:
        return largest_hicache_gb(per_rank_budget, pow2)
    shares = [b / (flag_gb * 1e9) for b in pools.values()]  # each pool per GB of the flag
    g = int(per_rank_budget // (sum(shares) * 1e9))
    while g >= 1 and sum(pinned_bytes(sh * g * 1e9, pow2) for sh in shares) > per_rank_budget:
        g -= 1  # rounding each pool up to a power of two
    return max(g, 0)


def _request_from_log(run: list[Row]) -> Request | None:
    allocs = [r for r in of_kind(run, "hicache_alloc") if r.get("bytes")]
    refused = [r for r in of_kind(run, "hicache_insufficient") if r.get("bytes")]
    if not allocs and not refused:
        return None
    per_pool: dict[tuple[str, str], float] = {}
    first_row: dict[str, Row] = {}
    for r in allocs + refused:
        label = rank_label(r) or "?"
        pool = str(attrs(r).get("pool") or attrs(r).get("kind") or "kv")
        per_pool[(label, pool)] = max(per_pool.get((label, pool), 0.0), float(r["bytes"]))
        first_row.setdefault(label, r)
    per_rank: dict[str, float] = {}
    for (label, _pool), b in per_pool.items():
        per_rank[label] = per_rank.get(label, 0.0) + b
    labels = [k for k in per_rank if k != "?"]
    ids = sorted({i for i in (rank_of(first_row[k]) for k in labels) if i is not None})
    top = max(per_rank, key=lambda k: per_rank[k])
    pools = {pool: b for (label, pool), b in per_pool.items() if label == top}
    return Request(per_rank[top], "log", list(first_row.values()), len(labels), ids,
                   pools if len(pools) > 1 else None)


def _request_from_config(cfg: ServerConfig, run: list[Row], tl: Timeline) -> Request | None:
    size = cfg.num("hicache_size")
    if not cfg.enabled("enable_hierarchical_cache"):
        return None
    if size and size > 0:
        return Request(size * 1e9, "flags", cfg.evidence_rows("hicache_size"), 0, [])
    kv = [r for r in of_kind(run, "kv_cache_allocated") if r.get("tokens") and r.get("bytes")]
    ratio = cfg.num("hicache_ratio")
    if kv:
        ratio = ratio if ratio is not None else 2.0  # the default up to 0.5.19
        row = kv[0]
        per_token = row["bytes"] / row["tokens"]
        return Request(ratio * row["tokens"] * per_token, "ratio", [row, *cfg.evidence_rows("hicache_ratio")], 0, [])
    return None


def _launch_config(row: Row) -> ServerConfig:
    """The settings of one launch command (not overlaid by any log)."""
    cfg = ServerConfig(has_launch=True)
    for k, v in (attrs(row).get("flags") or {}).items():
        cfg.values[flag_key(k)] = v
        cfg.origin[flag_key(k)] = row
    return cfg


def detect(tl: Timeline) -> list[Finding]:
    findings: list[Finding] = []
    cases: list[tuple[ServerConfig, list[Row], Request, RunRef | None]] = []
    for ref, run in iter_runs(tl):
        cfg = server_config(tl, run)
        req = _request_from_log(run) or _request_from_config(cfg, run, tl)
        if req:
            cases.append((cfg, run, req, ref))
    if all(run and all(is_prose(r) for r in run) for _cfg, run, _req, _ref in cases):
        # no log: predict from each launch configuration written down (a ticket may hold a command and a
        # recipe), the latest first; a configuration told only in prose has its own run above
        asked: set[tuple] = set()
        for row in reversed([r for r in launch_rows(tl) if not is_prose(r) and attrs(r).get("engine") != "vllm"]):
            cfg = _launch_config(row)
            req = _request_from_config(cfg, [], tl)
            if req and (round(req.per_rank), cfg.get("tp_size")) not in asked:
                asked.add((round(req.per_rank), cfg.get("tp_size")))
                cases.append((cfg, [], req, None))
    if any(not cfg.from_prose("hicache_size") for cfg, _run, _req, _ref in cases):
        # a log or a command line says what ran: sentences only stand in where nothing better exists
        cases = [c for c in cases if not c[0].from_prose("hicache_size")]
    if any(run and not all(is_prose(r) for r in run) for _cfg, run, _req, _ref in cases):
        # nor does a write-up's own run beside a log's, whatever launch its settings are read from (facts/launch
        # fills a sentence's run from the command line that states them, so its size is no longer the sentence's)
        cases = [c for c in cases if not (c[1] and all(is_prose(r) for r in c[1]))]
    host = host_memory(tl)
    pow2, version = pow2_state(tl)
    split = splits_budget(tl)
    told: dict[tuple, Finding] = {}  # one finding per configuration told in several write-ups
    for cfg, run, req, ref in cases:
        if cfg.from_prose("hicache_size") and req.source == "flags":
            ranks, _how = ranks_per_host(cfg, req.ranks_seen)
            if cfg.get("tp_size") is None and not req.ranks_seen:
                continue  # a sentence's size without a rank count: nothing to multiply
            found = None if split else _overallocation(tl, cfg, run, req, host, pow2, version)
            if found is None:
                continue
            key = (round(req.per_rank), ranks)
            if key in told:
                told[key].evidence = evidence_list([*told[key].evidence, *found.evidence])
                continue
            told[key] = found
            findings.append(found)  # runs of a write-up are its sentences' order, not the incident's
            continue
        refused = [r for r in of_kind(run, "hicache_insufficient") if r.get("bytes")]
        found = None if split else _overallocation(tl, cfg, run, req, host, pow2, version)
        if found is None and not split and not refused and host.capacity is None:
            found = _capacity_unknown(tl, cfg, run, req, pow2)
        if found:
            findings.append(tag_run(found, ref))
        elif refused:
            findings.append(tag_run(_refusal(tl, cfg, refused, host, split, version), ref))
    return findings


def _served_without_failure(tl: Timeline, run: list[Row]) -> bool:
    """The pools were allocated and batches were served after them, with no kill or death anywhere."""
    pools = of_kind(run, "hicache_alloc")
    batches = of_kind(run, "decode_batch", "prefill_batch")
    if not pools or not batches:
        return False
    last_pool = max(pools, key=lambda r: (r.get("file") or "", r.get("line") or 0))
    if not any(b.get("file") == last_pool.get("file") and (b.get("line") or 0) > (last_pool.get("line") or 0)
               or (b.get("file") != last_pool.get("file")) for b in batches):
        return False
    bad = rows(tl, "oom_kill", "rank_dead", "sigquit", "hicache_insufficient", "subprocess_crashed")
    bad += [r for r in rows(tl, "failure") if attrs(r).get("failure") in ("oom_killed", "signal", "process_exit",
                                                                            "kernel_map_failed")]
    return not bad


def _capacity_unknown(tl: Timeline, cfg: ServerConfig, run: list[Row], req: Request, pow2: str) -> Finding | None:
    """SGL-HOST-001 without the host's size: every rank pins its own HiCache pool, and the log stops at the ranks'
    ``Allocating … GB host memory for hierarchical KV cache.`` lines (sglang python/sglang/srt/mem_cache/
    memory_pool_host.py::HostKVCache (0.4.5-0.5.18) logs it before it allocates and pins the pool) with nothing
    served after. The ranks' total is stated; the fact that decides it (MemTotal, the container's limit) is named
    and no size is proposed without it, as vLLM's VLLM-HOST-001 does. A log that merely stops there stays low."""
    ranks, ranks_how = ranks_per_host(cfg, req.ranks_seen)
    pools = of_kind(run, "hicache_alloc")
    if ranks < 2 or not pools or not run or rows(tl, "oom_kill"):
        return None
    # the log stops at the pools: nothing of the run after the last allocation (by line in its file, else by time:
    # a rotated log's older member sorts after the newer by name)
    last_alloc = pools[-1]
    if any(r.get("kind") != "hicache_alloc" and before(last_alloc, r) for r in run) \
            or of_kind(run, "decode_batch", "prefill_batch"):
        return None  # the ranks went past their pools: not where an over-committed host stops them
    parts = list((req.pools or {"": req.per_rank}).values())
    pinned = sum(pinned_bytes(b, pow2 in ("yes", "likely")) for b in parts)
    demand = ranks * pinned
    found = make_finding(
        "SGL-HOST-001",
        summary=(f"{ranks} ranks ({ranks_how}) each pin their own HiCache host pool of {fmt_gb(req.per_rank)} "
                 f"({HICACHE_UNIT}): {fmt_gib(demand)} of host memory together, and the log stops as they allocate "
                 "it. The input does not state the host's memory or the container's limit, which decides it: above "
                 "that total minus a reserve, pinning stalls or the kernel kills a rank."),
        evidence=[*pools[:4], *cfg.evidence_rows("hicache_size", "hicache_ratio", "tp_size")],
        severity="low",
        confidence="low",
        confidence_reason="no free/meminfo and no container or pod memory limit in the input; the log may merely "
                          "be cut there",
        ranks=[x for x in (rank_of(r) for r in pools) if x is not None],
        figures={"ranks_per_host": ranks, "per_rank_bytes": int(req.per_rank), "demand_bytes": int(demand),
                 "capacity_bytes": None},
        actions=[f"Compare {fmt_gib(demand)} with the host's MemTotal (`free -g`) and the container's limit; size "
                 "--hicache-size as (that − max(10 GiB, 10 %) − the processes' own memory) ÷ the ranks on the host.",
                 "Check the kernel log of the same minutes (`dmesg -T | grep -i 'killed process'`) for a kill."],
    )
    return dataclasses.replace(found, title="HiCache host pools times the ranks, against a host size the input does "
                                            "not state")


def _overallocation(tl: Timeline, cfg: ServerConfig, run: list[Row], req: Request, host: HostMemory,
                    pow2: str, version: str) -> Finding | None:
    ranks, ranks_how = ranks_per_host(cfg, req.ranks_seen)
    capacity = host.capacity
    if capacity is None:
        return None
    parts = list((req.pools or {"": req.per_rank}).values())  # PyTorch rounds each pool, not their sum
    pinned = sum(pinned_bytes(b, pow2 in ("yes", "likely")) for b in parts)
    pinned_if_pow2 = sum(pinned_bytes(b, True) for b in parts)
    base = host.baseline(capacity)
    baseline, baseline_how = base.used, base.how
    usable = capacity - baseline
    limit_for_pools = usable - SGLANG_RESERVE
    demand = ranks * pinned
    demand_if_pow2 = ranks * pinned_if_pow2
    if demand <= limit_for_pools and not (pow2 == "unknown" and demand_if_pow2 > limit_for_pools):
        return None
    if _served_without_failure(tl, run):
        return None  # the ranks pinned their pools and then served: what happened outweighs the arithmetic
    only_if_pow2 = demand <= limit_for_pools  # fires only because an unknown version might pin powers of two

    reserve = max(10 * GIB, int(RESERVE_FRACTION * capacity))
    processes = PER_PROCESS_BYTES * ranks
    budget = capacity - baseline - reserve - processes
    per_rank_budget = max(budget, 0) / ranks
    # a finding that fires only because the version may round pools up must size for that rounding, or its
    # "fix" would be the value the launch already has
    size_for_pow2 = pow2 in ("yes", "likely") or only_if_pow2
    flag_gb = cfg.num("hicache_size") if req.source != "ratio" else None
    new_gb = fit_hicache_gb(req.pools, flag_gb, per_rank_budget, size_for_pow2)
    plain_gb = fit_hicache_gb(req.pools, flag_gb, per_rank_budget, False)
    several = bool(req.pools and flag_gb and new_gb != largest_hicache_gb(per_rank_budget, size_for_pow2))
    pools_words = (" + ".join(f"{name} {b / 1e9:g} GB" for name, b in req.pools.items()) if req.pools else "")
    # where the limit was stated: a limit row says it as limit_from, a launch row as container_memory_from
    stated = (attrs(host.limit_row).get("limit_from") or attrs(host.limit_row).get("container_memory_from")
              if host.limit_row is not None else None)
    # the capacity's name, and where it is stated after its figure: "memory limit 400.00 GiB (resources.limits.memory)"
    is_limit = bool(host.limit and capacity == host.limit)
    cap_name = "memory limit" if is_limit else "host total"
    cap_where = f" ({stated or 'container --memory'})" if is_limit else ""
    cap_said = f"{cap_name}: {stated or 'container --memory'}" if is_limit else cap_name
    old = cfg.flag_text("hicache_size") if req.source != "ratio" else None
    if old is None and req.source == "log":
        old = f"{req.per_rank / 1e9:g}"

    # every comparison in GiB: the flag's value is GB (10^9 bytes), said once and converted (DESIGN.md §5)
    arithmetic = (
        f"budget {fmt_gib(budget)} = {cap_name} {fmt_gib(capacity)}{cap_where} − baseline {fmt_gib(baseline)} ({baseline_how}) "
        f"− reserve {fmt_gib(reserve)} (max(10 GiB, 10% of capacity)) − {ranks} scheduler processes × 3 GiB; "
        f"÷ {ranks} ranks = {fmt_gib(per_rank_budget)} per rank"
    )
    if several:
        per_new = sum(b / (flag_gb * 1e9) for b in req.pools.values()) * new_gb
        why = (f"each rank pins {len(req.pools)} pools the flag sizes ({pools_words} at --hicache-size {flag_gb:g}); "
               f"at {new_gb} GB they take {per_new:g} GB per rank, {ranks} ranks × {per_new:g} GB = "
               f"{ranks * per_new:g} GB = {fmt_gib(ranks * per_new * 1e9)} ≤ {arithmetic}")
    elif size_for_pow2:
        pinned_new = pinned_bytes(new_gb * 1e9, True)
        why = (f"{ranks} ranks × {new_gb} GB ({HICACHE_UNIT}), each pinned as {fmt_gib(pinned_new)} = "
               f"{fmt_gib(ranks * pinned_new)} ≤ {arithmetic}; SGLang {version}: 0.4.5–0.5.4 pin each pool rounded up "
               f"to a power of two; on ≥ 0.5.5 up to {plain_gb} GB fits")
    else:
        why = (f"{ranks} ranks × {new_gb} GB ({HICACHE_UNIT}) = {ranks * new_gb:g} GB = {fmt_gib(ranks * new_gb * 1e9)} "
               f"≤ {arithmetic}")
        if pow2 == "unknown":
            pow2_gb = largest_hicache_gb(per_rank_budget, True)
            why += (f". SGLang version not found: on 0.4.5–0.5.4 each pool is pinned rounded up to a power of two "
                    f"and only {pow2_gb} GB fits — check `pip show sglang`")
    flags = [FlagChange("--hicache-size", old, str(new_gb), why)] if new_gb >= 1 else []
    ratio = cfg.num("hicache_ratio") or 2.0
    by_ratio = cfg.num("hicache_size") is None and (req.source == "ratio" or cfg.num("hicache_ratio") is not None)
    logged_device = device_pool_bytes(run)
    if by_ratio and new_gb >= 1 and ratio > 0 and (req.source == "ratio" or logged_device):
        # the launch sizes the pool by --hicache-ratio × the device KV pool (sglang_formats.md §4): correct the flag
        # it set, to the ratio whose pool is the size that fits; SGLang's ratio must stay above 1 (a host pool smaller
        # than the device's is refused), below that only --hicache-size can say it
        device = req.per_rank / ratio if req.source == "ratio" else logged_device
        new_ratio = math.floor(new_gb * 1e9 / device * 100) / 100
        if 1 < new_ratio < ratio:
            flags = [FlagChange("--hicache-ratio", cfg.flag_text("hicache_ratio") or f"{ratio:g} (default)",
                                f"{new_ratio:g}", f"the host pool is --hicache-ratio × the device KV pool "
                                f"({device / 1e9:.2f} GB per rank): {new_ratio:g} × {device / 1e9:.2f} GB = "
                                f"{new_ratio * device / 1e9:.2f} GB ≤ {new_gb} GB per rank, where {why}")]

    # the size that fits the host may be one SGLang refuses: not larger than the rank's device KV pool
    device = logged_device
    floor_state = version_state(tl, *HOST_ABOVE_DEVICE)[0]
    smaller_than_device = bool(device and new_gb >= 1 and new_gb * 1e9 <= device)
    below_device = smaller_than_device and floor_state in ("yes", "likely")
    if below_device:
        flags = []
    elif smaller_than_device and floor_state == "unknown" and flags:
        flags = [FlagChange(c.flag, c.old, c.new, c.why + f"; on SGLang 0.4.8–0.5.14 a host pool not larger than the "
                            f"device KV pool ({fmt_gib(device)} per rank) is refused at start-up — check `pip show "
                            "sglang`") for c in flags]
    actions = [
        f"Set --hicache-size per rank, not per server: the {ranks} ranks on this host each pin their own pool "
        f"({ranks} × {req.per_rank / 1e9:g} GB = {ranks * req.per_rank / 1e9:g} GB = {fmt_gib(ranks * req.per_rank)} "
        "requested).",
        "Upgrade to SGLang ≥ 0.5.19, which divides the host budget by the ranks per host and refuses cleanly.",
        "Before relaunching, check that the killed schedulers released their memory: free -g; nvidia-smi "
        "(see SGL-HOST-003 / SGL-GPU-005).",
    ]
    if new_gb < 1:
        actions.insert(0, "No HiCache pool fits this host with the reserve: disable --enable-hierarchical-cache "
                          "or run fewer ranks per host.")
    elif below_device:
        actions.insert(0, f"No HiCache pool both fits this host and exceeds the device pool: disable "
                          f"--enable-hierarchical-cache, run fewer ranks per host, or shrink each rank's device KV pool "
                          f"below {new_gb} GB (lower --mem-fraction-static); SGLang ≥ 0.5.15 only warns about a host "
                          "pool smaller than the device's.")
    if host.limit:
        actions.append(f"The container is limited to {fmt_gib(host.limit)} (docker --memory): raise the "
                       "limit or size the pools to it.")

    reasons = []
    if req.source != "log":
        reasons.append("no 'Allocating … host memory' lines: the request is predicted from the "
                       + ("launch flags" if req.source == "flags" else "KV pool × --hicache-ratio"))
    if host.total is None:
        reasons.append("no free/meminfo snapshot: capacity is the container limit")
    if host.avail_before is None:
        reasons.append("no host snapshot before the launch: the baseline is assumed")
    if only_if_pow2:
        reasons.append(f"fits unless SGLang is 0.4.5–0.5.4 (version {version})")
    prose = cfg.from_prose("hicache_size", "tp_size")
    if prose:
        reasons.append("the configuration is read from sentences (" + ", ".join(dict.fromkeys(
            f"{r.get('file')}:{r.get('line')}" for r in prose)) + "), not from a command line or a log")
    gaps = (req.source != "log") + (host.total is None) + (host.avail_before is None) + bool(prose)
    confidence = "low" if only_if_pow2 or gaps >= 2 else ("medium" if gaps else "high")
    severity = "medium" if only_if_pow2 else None
    consequence_rows = of_kind(run, "rank_dead", "sigquit", "hicache_insufficient")
    climb = _observed_climb(tl, req, consequence_rows, pinned)
    summary = (
        (f"The HiCache host pool is per rank (--hicache-ratio {cfg.num('hicache_ratio') or 2:g} × the rank's device "
         f"KV pool): {ranks} ranks × {req.per_rank / 1e9:g} GB" if by_ratio else
         f"--hicache-size is per rank and in GB (10^9 bytes): {ranks} ranks × {req.per_rank / 1e9:g} GB")
        + (f" ({pools_words})" if req.pools else "")
        # the product in the flag's unit, then in GiB; a power-of-two pool is converted first, then multiplied
        + (f" (SGLang {version} rounds each pool up to a power of two), pinned as {ranks} × {fmt_gib(pinned)}"
           f" = {fmt_gib(demand)} of host memory" if pinned != req.per_rank
           else f" = {ranks * req.per_rank / 1e9:g} GB = {fmt_gib(demand)} of pinned host memory")
        + f" against {fmt_gib(capacity)} ({cap_said})"
        + (f": it fits unless SGLang is 0.4.5–0.5.4, which pins each pool rounded up to a power of two "
           f"({ranks} × {fmt_gib(pinned_if_pow2)} = {fmt_gib(demand_if_pow2)}); version: {version}. "
           if only_if_pow2 else ". ")
        + (f"Set --hicache-ratio {flags[0].new} (a host pool of at most {new_gb} GB per rank) to fit all {ranks} ranks "
           "with a reserve." if flags and flags[0].flag == "--hicache-ratio" else
           f"Set --hicache-size {new_gb} (per rank) to fit all {ranks} ranks with a reserve."
           if new_gb >= 1 and not below_device else
           f"The {new_gb} GB per rank that fit are not larger than each rank's device KV pool ({fmt_gib(device)} = "
           f"{device / 1e9:.2f} GB), "
           f"which SGLang 0.4.8–0.5.14 refuses (version {version}): no HiCache pool fits as launched."
           if below_device else "No per-rank pool fits with the reserve.")
    )
    if climb:
        summary += (f" Observed (forensics record): host memory used rose {fmt_gib(climb.rise_bytes)} in {climb.steps} "
                    f"step{'s' if climb.steps > 1 else ''} as the ranks pinned their pools, from {fmt_gib(climb.before['used_bytes'])} "
                    f"to {fmt_gib(climb.peak['used_bytes'])}"
                    + (f", {fmt_gib(climb.min_avail_bytes)} available at the lowest" if climb.min_avail_bytes is not None
                       else "") + ".")
    figures = {
        "ranks_per_host": ranks,
        "ranks_per_host_from": ranks_how,
        "tp_size": int(cfg.num("tp_size")) if cfg.num("tp_size") else None,
        "hicache_size_gb_per_rank": round(req.per_rank / 1e9, 2),
        "request_from": req.source,
        "requested_total_bytes": int(ranks * req.per_rank),
        "pinned_per_rank_bytes": int(pinned),
        "host_total_bytes": host.total,
        "host_available_before_bytes": host.avail_before,
        "docker_memory_bytes": host.limit,
        "capacity_bytes": capacity,
        "baseline_bytes": int(baseline),
        "reserve_bytes": int(reserve),
        "process_allowance_bytes": int(processes),
        "budget_bytes": int(budget),
        "corrected_hicache_size_gb": new_gb if not below_device else None,
        "device_pool_bytes_per_rank": int(device) if device else None,
        "sglang_version": version,
        "power_of_two_pinning": pow2,
    }
    ev = [*req.evidence, *cfg.evidence_rows("hicache_size", "tp_size", "enable_hierarchical_cache")]
    if climb:
        figures.update({"observed_climb_steps": climb.steps, "observed_climb_bytes": climb.rise_bytes,
                        "observed_used_before_bytes": int(climb.before["used_bytes"]),
                        "observed_used_peak_bytes": int(climb.peak["used_bytes"]),
                        "observed_min_available_bytes": climb.min_avail_bytes,
                        "observed_from": "recorded series (forensics record)"})
        # the recorded samples are the observation: keep room for them and for the consequence
        ev = [*req.evidence[:4], *cfg.evidence_rows("hicache_size", "tp_size")[:2], climb.before,
              *climb.step_rows[:1], *climb.step_rows[-1:], climb.peak]
    ev += [r for r in (host.total_row, host.before_row, host.limit_row) if r]
    ev += consequence_rows[:3]
    return make_finding(
        "SGL-HOST-001",
        summary=summary,
        evidence=ev,
        confidence=confidence,
        confidence_reason="; ".join(reasons) or None,
        severity=severity,
        ranks=req.rank_ids,
        figures=figures,
        flags=flags,
        actions=actions,
    )


def _observed_climb(tl: Timeline, req: Request, consequences: list[Row], pinned: float):
    """The recorder's host-memory series over the pools' allocation: steps of at least a quarter of a pool."""
    stamps = [r["ts"] for r in req.evidence if r.get("ts") is not None and r.get("kind") in ("hicache_alloc",
                                                                                             "hicache_insufficient")]
    ends = [r["ts"] for r in consequences if r.get("ts") is not None]
    if not stamps:
        return None
    since = min(stamps) - timedelta(seconds=10)  # the sample just before the first pool, after the launch
    until = max(ends) + timedelta(seconds=60) if ends else None
    return recorded_climb(tl, 0.25 * pinned, since, until)  # the last pool may be cut short by the OOM


def _refusal(tl: Timeline, cfg: ServerConfig, refused: list[Row], host: HostMemory, split: bool,
             version: str) -> Finding:
    row = max(refused, key=lambda r: r["bytes"])
    requested = float(row["bytes"])
    only_have = float(row["avail_bytes"]) if row.get("avail_bytes") is not None else None
    ranks, _ = ranks_per_host(cfg, len({rank_label(r) for r in refused if rank_label(r)}))
    _lo, hi = version_window(tl)
    flags: list[FlagChange] = []
    new_gb = None
    reserve_words = ""
    if only_have is not None:
        if split:
            per_rank = only_have
            why = f"SGLang {version} already divides the host budget by the ranks: 'only have' {fmt_gb(only_have)} is per rank"
        elif (hi and hi <= (0, 4, 9)) or requested <= only_have:
            per_rank = (only_have - SGLANG_RESERVE) / ranks
            # SGLang ≤ 0.4.9 printed psutil's available memory and compared the request with it less its 10 GiB
            # reserve (reference/sglang_formats.md, HiCache check table); a refusal of less than "only have" can
            # only come from that form, whatever version the input states
            how = ("on SGLang ≤ 0.4.9" if hi and hi <= (0, 4, 9) else
                   f"(a refusal of {fmt_gb(requested)} against {fmt_gb(only_have)} 'free' means the message is "
                   "SGLang ≤ 0.4.9's, printed before the check's reserve is taken off)")
            why = (f"'only have' {fmt_gb(only_have)} is the whole host's available memory {how}: "
                   f"({fmt_gb(only_have)} − {fmt_gb(SGLANG_RESERVE)} reserve) ÷ {ranks} ranks")
            reserve_words = f" less SGLang's {fmt_gb(SGLANG_RESERVE)} reserve"
        else:
            per_rank = only_have / ranks
            why = f"every rank measures the whole host: {fmt_gb(only_have)} ÷ {ranks} ranks"
        new_gb = largest_hicache_gb(per_rank, False)
        if new_gb * 1e9 >= requested:  # the pool was refused: a size at or above it cannot be the fix
            new_gb = None
        if new_gb and new_gb >= 1:
            flags.append(FlagChange("--hicache-size", cfg.flag_text("hicache_size") or f"{requested / 1e9:g}",
                                    str(new_gb), f"{why} = {fmt_gb(per_rank)} → {new_gb} GB"))
    summary = (f"A scheduler refused its HiCache host pool: requested {fmt_gb(requested)} per rank, only "
               f"{fmt_gb(only_have)} available to it{reserve_words}. " + (f"Set --hicache-size {new_gb}." if new_gb else ""))
    return make_finding(
        "SGL-HOST-002",
        summary=summary,
        evidence=[*refused[:4], *cfg.evidence_rows("hicache_size")],
        confidence="high" if only_have is not None else "medium",
        confidence_reason=None if only_have is not None else "the refusal does not say what was available",
        ranks=[r for r in (rank_of(x) for x in refused) if r is not None],
        figures={"requested_bytes": int(requested), "only_have_bytes": int(only_have) if only_have else None,
                 "ranks_per_host": ranks, "corrected_hicache_size_gb": new_gb, "sglang_version": version},
        flags=flags,
        actions=["Lower --hicache-size (per rank) or free the host memory held by earlier runs (SGL-HOST-003)."],
    )

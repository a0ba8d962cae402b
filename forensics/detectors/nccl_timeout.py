"""SGL-NCCL-001/002: an NCCL collective timed out; the sequence number tells start-up from mid-run.

Sample (c10d, stderr of each rank)::

    [rank3]:[E421 04:13:43.426633564 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective
    operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, ...) ran for 600060 milliseconds before timing out.

A low SeqNum (< 100) means the ranks barely started talking (rendezvous, network); a high one
means one rank stopped joining mid-run.

When every rank is on one node and no rank failed first (no OOM, Xid, crash in the input), the
collective waited on the GPUs' own path to each other: CUDA peer-to-peer over PCIe, which PCI ACS or
an IOMMU (VT-d/AMD-Vi) redirects through the CPU root complex and can hang outright (NCCL user guide,
Troubleshooting, "PCI Access Control Services (ACS)"), and vLLM's/SGLang's custom all-reduce, which
uses the same P2P path (vllm_formats.md §3.8 and rule T: ``--disable-custom-all-reduce`` on PCIe-only
hosts with failing P2P). ``NCCL_P2P_DISABLE=1`` (NCCL falls back to shared memory) and
``--disable-custom-all-reduce`` are then the test that tells a transport hang from a peer that hung.

DeepEP's expert all-to-all has its own fixed timeouts (parsers/failures.py ``_DEEPEP_TIMEOUT``: the CPU's
``DeepEP error: timeout (dispatch CPU)``, the kernels' ``DeepEP dispatch … timeout`` lines): the same wait on peers,
read here as the collective timeout it is, without a sequence number. c10d's watchdog frames with the timeout line
cut away (``Exception raised from checkTimeout/ncclCommWatchdog at …ProcessGroupNCCL.cpp``) are read the same, at
lower confidence.

A start-up collective whose ranks logged ``Load weight end`` and nothing later is the first collective after
loading (SGLang all-reduces the ranks' free memory before it sizes the KV pool): the ranks it waited on had not
finished loading. SGLang's ``--dist-timeout`` (server_args ``dist_timeout``, seconds, handed to
``init_process_group``'s timeout) then needs room for the slowest node's load.

c10d's watchdog also says how far the group had got: ``last completed NCCL work: N`` (ProcessGroupNCCL.cpp,
``Exception (either an error or timeout) detected by watchdog at work: …`` and the ``PG status: … last completed
work: N`` form; the counter starts at -1, so a first collective that never finished reads -1). A start-up timeout
after the group had completed collectives is no rendezvous problem: the ranks had talked over the same transport.
A peer stopped joining early in the run — still loading on a slower node or storage, still compiling, or dead — and
with no rank failing in the input, the process-group timeout (SGLang's ``--dist-timeout``) needs room for it.

>>> phase_of(3), phase_of(1580)
('SGL-NCCL-001', 'SGL-NCCL-002')
"""

from __future__ import annotations

import re

from forensics.facts.engines import engine_of
from forensics.facts.launch import ServerConfig, launch_rows, server_config
from forensics.facts.oom import traceback_frames
from forensics.facts.rows import Row, attrs, before, rank_of, rows
from forensics.facts.runs import iter_runs, of_kind
from forensics.model import Finding, FlagChange, Timeline
from parsers.failures import process_tag

from ._common import make_finding, tag_run

STARTUP_SEQ = 100  # SeqNum below this: the collective was among the first few of the run


def phase_of(seq: int) -> str:
    return "SGL-NCCL-001" if seq < STARTUP_SEQ else "SGL-NCCL-002"


def _seq(row: Row) -> int | None:
    if row.get("count") is not None:
        return int(row["count"])
    v = attrs(row).get("seq_num")
    if isinstance(v, int | float):
        return int(v)
    m = re.search(r"SeqNum=(\d+)|work sequence id: (\d+)|at work: (\d+)", row.get("text") or "")
    return int(next(g for g in m.groups() if g)) if m else None


def _rank(row: Row) -> int | None:
    r = rank_of(row)
    if r is not None:
        return r
    m = re.search(r"\[(?:PG \d+ )?Rank (\d+)\]|\[rank(\d+)\]", row.get("text") or "")
    return int(m.group(1) or m.group(2)) if m else None


#: A second node in the evidence: NCCL's inter-node transport on a channel (``via NET/IB``, ``via NET/Socket``),
#: vLLM's custom all-reduce refusing a group that spans nodes (vllm_formats.md §3.8), c10d's inter-node store.
_SPANS_NODES = re.compile(r"\bvia NET/|this process group spans across nodes|NET/IB : Got completion")
#: Failure classes (parsers.failures) that say a rank broke on its own, before its peers waited on it.
_RANK_FAILED = frozenset({"oom_killed", "ray_oom", "host_oom", "illegal_memory_access", "ecc_error", "nvlink_error",
                          "launch_failure", "cuda_error", "shm_exhausted", "device_unavailable"})
#: What the watchdog's own teardown prints after a collective timed out (failure_messages.md §4.4-4.5)
#: and what vLLM's engine prints when a worker's step never returned (vllm_formats.md §3.6: the RPC timeout, then
#: the generic EngineDeadError of every vLLM death)
_WATCHDOG_WORDS = re.compile(r"[Ww]atchdog|DistBackendError|NCCL communicator was aborted|collective operation timeout|"
                             r"DeepEP error: timeout|"
                             r"NCCL work|ProcessGroupNCCL|RPC call to \w+ timed out|EngineDeadError|"
                             r"EngineCore encountered|"
                             # NCCL's own failure surfacing in the rank (§4.3); an OOM inside NCCL is its own row
                             r"NCCL error|ncclSystemError|ncclRemoteError|unhandled system error")



def spans_nodes(tl: Timeline, cfg: ServerConfig) -> bool | None:
    """Whether the server's ranks span several nodes: True / False when the input says, None when it is silent.

    Several nodes: ``--nnodes`` > 1, several hosts' evidence, an inter-node NCCL channel, a Ray actor on another
    node. One node: ``nnodes`` 1 stated, a launch or server_args without ``--nnodes`` (its default is 1), Ray
    actors all on the driver's node."""
    nnodes = cfg.num("nnodes")
    if (nnodes or 0) > 1 or len(tl.facts.hosts) > 1:
        return True
    texts = rows(tl, "nccl_info", "notice", "failure", "nccl_error", "nccl_watchdog", "exception", "rank_dead")
    if any(_SPANS_NODES.search(r.get("text") or "") for r in texts):
        return True
    # Ray's tag, still on the line or taken off it by a parser into attrs (parsers/failures.py ``process_tag``,
    # parsers/sglang.py): Ray adds ``ip=`` only for an actor on another node than the driver's (vllm_formats.md §1)
    ray = [t for r in texts if (t := process_tag(r.get("text") or "") or
                                {k: v for k, v in attrs(r).items() if k in ("ray_actor", "ip") and v}
                                or _peeled_ray_tag(r))]
    if any(t.get("ip") for t in ray):
        return True
    if nnodes == 1 or ray or (cfg.has_launch or cfg.has_server_args) or channel_transports(tl) & {"P2P", "SHM"}:
        return False
    return None


def _peeled_ray_tag(row: Row) -> dict:
    """Ray's tag as the envelope layer kept it for a row its engine's parser read (parsers/envelopes.py: the actor
    in ``container``, its ``ip=`` in ``host`` when Ray's is the only envelope that names a host)."""
    layers = str(row.get("envelope") or "").split("+")
    if "ray" not in layers:
        return {}
    ip = row.get("host") if layers == ["ray"] else None
    return {"ray_actor": row.get("container") or "", **({"ip": ip} if ip else {})}


def channel_transports(tl: Timeline) -> set[str]:
    """The transports NCCL's channel lines name (``Channel 00 : 0[0] -> 1[1] via P2P/IPC``): P2P and SHM join GPUs
    of one node, NET the nodes (failure_messages.md §4.1, NCCL INFO lines)."""
    return {str(t) for r in rows(tl, "nccl_info") if (t := attrs(r).get("transport"))}


def rank_failures(tl: Timeline) -> list[Row]:
    """Rows where a rank failed on its own (OOM, Xid, a kernel fault, an exception that is not the watchdog's)."""
    out = rows(tl, "cuda_oom", "cuda_error_oom", "xid", "gpu_fallen_off_bus", "oom_kill")
    out += [r for r in rows(tl, "failure") if attrs(r).get("failure") in _RANK_FAILED]
    out += [r for r in rows(tl, "scheduler_exception", "exception")
            if not _WATCHDOG_WORDS.search(r.get("text") or "")]
    return out


def transport_test(tl: Timeline, cfg: ServerConfig) -> list[FlagChange]:
    """The flags that isolate a hang in the GPUs' peer-to-peer path, for ranks the input places on one node, none
    of which failed first."""
    if spans_nodes(tl, cfg) is not False or rank_failures(tl):
        return []
    env = {}
    for r in launch_rows(tl):
        env.update(attrs(r).get("env") or {})
    flags = []
    # channels that already go through shared memory: NCCL does not use P2P, only the custom all-reduce does
    nccl_p2p_off = channel_transports(tl) == {"SHM"}
    if str(env.get("NCCL_P2P_DISABLE", "0")) != "1" and not nccl_p2p_off:
        flags.append(FlagChange(
            "NCCL_P2P_DISABLE", env.get("NCCL_P2P_DISABLE"), "1",
            "every rank on one node and none failed first: the collective waited on CUDA peer-to-peer between the "
            "GPUs, which PCI ACS or an IOMMU can hang; with P2P off NCCL uses shared memory — if the hang goes, the "
            "PCIe P2P path is the cause (disable ACS/IOMMU in the BIOS or kernel to get P2P back)"))
    if not cfg.enabled("disable_custom_all_reduce"):
        flags.append(FlagChange(
            "--disable-custom-all-reduce", None, "true",
            "the engine's custom all-reduce uses the same peer-to-peer path and bypasses NCCL_P2P_DISABLE"))
    return flags


#: the whole line of a watchdog timeout without a sequence number (failure_messages.md §4.4 1.8-1.10, §4.5 1.4-1.8):
#: a sentence that only names the message (a ticket's title, a note) is no timeout
_NO_SEQ_LINE = re.compile(r"collective operation timeout: WorkNCCL\(|ProcessGroupNCCL\.cpp:\d+\] Operation timed out!")


#: failure rows whose timeout the engine stated without c10d's WorkNCCL line (parsers/failures.py)
_TIMEOUT_ENGINES = ("deepep", "c10d_watchdog")


def _timed_out(row: Row) -> bool:
    """A collective that timed out: a watchdog line with its sequence number, or one of the releases whose line has
    none (1.8-1.10's ``WorkNCCL(OpType=…, Timeout(ms)=…)``, 1.4-1.8's blocking-wait ``Operation timed out!``;
    failure_messages.md §4.4-4.5). ``# `` lines are notes pasted around an excerpt, never the engine's."""
    text = row.get("text") or ""
    if text.lstrip().startswith("#"):
        return False
    # read by the failure scan from the engine's own timeout (parsers/failures.py: DeepEP's all-to-all timeouts, the
    # exception raised from c10d's checkTimeout with its timeout line cut away)
    engine_said = attrs(row).get("failure") == "collective_timeout" and attrs(row).get("engine") in _TIMEOUT_ENGINES
    return _seq(row) is not None or engine_said or (
        "collective_timeout" in (attrs(row).get("event"), attrs(row).get("failure"))
        and _NO_SEQ_LINE.search(text) is not None)


#: rows that say the server had served (sglang_formats.md §4 batch lines, vllm_formats.md §3 metrics and ready)
_SERVED = ("decode_batch", "server_ready", "engine_metrics")
#: start-up stages (sglang_formats.md §3, vllm_formats.md §2)
_STARTUP = ("dist_init_begin", "dist_init_end", "weight_load_begin", "weight_load_end", "kv_cache_allocated",
            "memory_pool_end", "cuda_graph_begin", "cuda_graph_end")


def _phase(row: Row, context: list[Row]) -> str:
    """Start-up or mid-run: by the sequence number when the line has one, else by what the run did before it (a
    batch served or the server ready: mid-run; only start-up stages: start-up). Unknown reads as mid-run."""
    seq = _seq(row)
    if seq is not None:
        return phase_of(seq)
    earlier = [r for r in context if r.get("kind") in (*_SERVED, *_STARTUP) and before(r, row)]
    if earlier and not any(r.get("kind") in _SERVED for r in earlier):
        return "SGL-NCCL-001"
    return "SGL-NCCL-002"


def _in_capture(run: list[Row] | None, row: Row) -> bool:
    """A DeepEP timeout raised inside CUDA-graph capture: the normal (CPU-synchronised) dispatch cannot be captured,
    so its host wait gives up there whatever the peers do (fatal_other.py's ``--deepep-mode`` reading), not a peer
    that stopped."""
    if attrs(row).get("engine") != "deepep":
        return False
    frames = traceback_frames(run, row) if run is not None else []
    text = row.get("text") or ""
    return any(func == "capture_one_batch_size" or path.endswith("cuda_graph_runner.py") for path, func in frames) \
        or "capture_one_batch_size" in text


def detect(tl: Timeline) -> list[Finding]:
    hits = [r for r in rows(tl, "nccl_watchdog") if _seq(r) is not None or attrs(r).get("event") == "collective_timeout"]
    # the same watchdog line in a fragment or a vLLM log, read by the failure scan
    hits += [r for r in rows(tl, "failure") if attrs(r).get("failure") == "collective_timeout" and _timed_out(r)]
    # a scheduler's traceback ending in an engine's own timeout (parsers/sglang.py reads DeepEP's into the row)
    hits += [r for r in rows(tl, "scheduler_exception", "exception") if attrs(r).get("failure") == "collective_timeout"
             and _timed_out(r)]
    if not hits:
        return []
    out: list[Finding] = []
    seen: set[tuple[str, int]] = set()
    for ref, run in iter_runs(tl):  # each run with its own world size
        # the c10d lines and the failure scan's reading of the same watchdog text (its ``what():``): one finding
        mine = [r for r in of_kind(run, "nccl_watchdog", "failure", "scheduler_exception", "exception") if _timed_out(r)
                and (r.get("kind") == "nccl_watchdog" or attrs(r).get("failure") == "collective_timeout")]
        seen |= {(r["file"], r["line"]) for r in mine}
        mine = [r for r in mine if not _in_capture(run, r)]
        out += [tag_run(f, ref) for f in _detect_run(tl, mine, server_config(tl, run), run)] if mine else []
    rest = [r for r in hits if (r["file"], r["line"]) not in seen]
    if rest:
        out += _detect_run(tl, rest, server_config(tl))
    return out


#: SGLang's start-up records after the weights are loaded (sglang_formats.md §3)
_AFTER_LOAD = ("kv_cache_allocated", "memory_pool_end", "cuda_graph_begin", "cuda_graph_end", "server_ready",
               "prefill_batch", "decode_batch")
#: c10d's process-group timeout before torch 2.2 and a common explicit value (failure_messages.md §4.4)
LONG_DIST_TIMEOUT_S = 1800


def waited_after_load(run: list[Row] | None, hits: list[Row]) -> bool:
    """The run's ranks logged ``Load weight end`` and nothing of a later stage before the collective timed out: the
    collective that waited is the first one after loading (SGLang all-reduces the ranks' free memory before it
    sizes the KV pool), so the ranks it waited on had not finished loading — on slower storage, another node, or
    failed while loading."""
    if not run:
        return False
    first = min(hits, key=lambda r: (r.get("file") or "", r.get("line") or 0))
    loaded = of_kind(run, "weight_load_end")
    later = [r for r in of_kind(run, *_AFTER_LOAD) if before(first, r) is not True]
    return bool(loaded) and not later


#: c10d's count of the group's finished collectives on the watchdog's lines (ProcessGroupNCCL.cpp: ``last completed
#: NCCL work: N`` after ``detected by watchdog at work``/``Timeout at NCCL work``, ``PG status: … last completed work: N``)
_LAST_COMPLETED = re.compile(r"last completed (?:NCCL )?work: (-?\d+)")


def completed_before(group: list[Row]) -> int | None:
    """The most collectives the timed-out group reports as completed before the one that waited, or None when its
    lines do not say (older releases, a cut excerpt)."""
    seen = [int(m.group(1)) for r in group for t in (r.get("text") or "", str(attrs(r).get("message") or ""))
            for m in _LAST_COMPLETED.finditer(t)]
    return max(seen) if seen else None


_LOAD_WAIT_WHY = ("the ranks that finished loading gave up waiting for ranks still loading: a process-group timeout "
                  "longer than the slowest rank's load lets it finish (fix slow storage first)")
_STARTUP_WAIT_WHY = ("the group had worked and then waited on a peer early in the run: a process-group timeout longer "
                     "than the slowest node's start-up lets a peer still loading finish (a peer that died needs its "
                     "own fix; slow storage first)")


def _load_wait_flag(cfg: ServerConfig, timeout_s: float | None, why: str = _LOAD_WAIT_WHY) -> FlagChange:
    old = cfg.num("dist_timeout")
    wait = max(float(LONG_DIST_TIMEOUT_S), 2 * (old or timeout_s or 0))
    return FlagChange("--dist-timeout", cfg.flag_text("dist_timeout"), f"{wait:g}", why)


def _detect_run(tl: Timeline, hits: list[Row], cfg: ServerConfig, run: list[Row] | None = None) -> list[Finding]:
    by_rule: dict[str, list[Row]] = {}
    context = run if run is not None else rows(tl, *_SERVED, *_STARTUP)
    for r in hits:
        by_rule.setdefault(_phase(r, context), []).append(r)
    world = int((cfg.num("tp_size") or 1) * (cfg.num("pp_size") or 1)) if cfg.get("tp_size") else None
    p2p_flags = transport_test(tl, cfg)
    out = []
    for rule_id, group in sorted(by_rule.items()):
        ranks = sorted({x for x in (_rank(r) for r in group) if x is not None})
        seqs = sorted({_seq(r) for r in group if _seq(r) is not None})
        ops = sorted({str(attrs(r).get("op_type")) for r in group if attrs(r).get("op_type")})
        deepep = bool(ops) and all(attrs(r).get("engine") == "deepep" for r in group)
        what = "DeepEP's expert all-to-all" if deepep else f"NCCL {'/'.join(ops) or 'collective'}"
        at = f"at SeqNum {seqs[0]}" if seqs else \
            "(DeepEP's timeout carries no sequence number)" if deepep else \
            "(a release whose line carries no sequence number)"
        served = any(r.get("kind") in _SERVED and any(before(r, h) for h in group) for r in context)
        silent = sorted(set(range(world)) - set(ranks)) if world and ranks and len(ranks) < world else []
        after_load = rule_id == "SGL-NCCL-001" and waited_after_load(run, group)
        flags: list[FlagChange] = []
        talked = False
        if after_load:
            timeout = max((float(attrs(r).get("timeout_s") or 0) for r in group), default=0) or None
            summary = (f"{what} timed out {at} on rank(s) "
                       f"{', '.join(map(str, ranks)) or '?'}, the first collective after they finished loading the "
                       "weights (the free-memory all-reduce before the KV pool): the ranks they waited on had not "
                       "finished loading — slower storage or a slower node, or a rank that failed while loading.")
            actions = ["Read the log of the ranks not seen here (the other node's): a traceback or OOM while loading "
                       "is the cause; shard progress at seconds per shard means slow storage.",
                       "Put the weights on local NVMe (or warm the page cache) on every node; give --dist-timeout "
                       "room for the slowest node's load."]
            # SGLang's --dist-timeout sets the process group's timeout (vLLM has no such flag)
            flags = [_load_wait_flag(cfg, timeout)] if any(r.get("source") == "sglang" for r in run or []) else []
        elif rule_id == "SGL-NCCL-001" and p2p_flags:
            summary = (f"{what} timed out {at} on rank(s) "
                       f"{', '.join(map(str, ranks)) or '?'}, one of the first collectives, with every rank on one node "
                       "and none failing first: the GPUs could not reach each other over their peer-to-peer path "
                       "(PCIe P2P blocked or hanging under ACS/IOMMU, consumer GPUs without working P2P).")
            actions = ["Rerun with NCCL_P2P_DISABLE=1 (and --disable-custom-all-reduce): if it starts, P2P is the "
                       "cause. Check `lspci -vvv | grep ACSCtl` (SrcValid+ means ACS is on), the IOMMU (`dmesg | grep "
                       "-i -e DMAR -e IOMMU`), and `nvidia-smi topo -p2p r`.",
                       "Run nccl-tests' all_reduce_perf across the same GPUs to reproduce it outside the engine."]
        elif rule_id == "SGL-NCCL-001" and (done := completed_before(group) or 0) >= 1:
            # the group had finished collectives over this transport: not a rendezvous problem, a peer that stopped
            # joining early in the run (still loading or compiling on another node, or dead)
            timeout = max((float(attrs(r).get("timeout_s") or 0) for r in group), default=0) or None
            summary = (f"{what} timed out {at} on rank(s) "
                       f"{', '.join(map(str, ranks)) or '?'} after the group had completed {done} collective(s) "
                       "(c10d's last completed work): the ranks had already talked, so rendezvous and the network "
                       "worked; early in the run a peer stopped joining — still loading the weights on a slower node "
                       "or storage, still compiling, or dead.")
            actions = ["Read the log of the ranks not seen here (the other node's): a traceback, an OOM kill or an Xid "
                       "there is the cause; shard progress at seconds per shard or a late 'Load weight end' means "
                       "slow loading.",
                       "Put the weights on local NVMe (or warm the page cache) on every node; give --dist-timeout "
                       "room for the slowest node's start-up."]
            # a rank that failed in the input is the cause, not the wait; vLLM has no process-group timeout flag
            waited = not rank_failures(tl) and engine_of(run or list(context)) != "vllm"
            flags = [_load_wait_flag(cfg, timeout, _STARTUP_WAIT_WHY)] if waited else []
            talked = True
        elif rule_id == "SGL-NCCL-001":
            summary = (f"{what} timed out {at} on rank(s) "
                       f"{', '.join(map(str, ranks)) or '?'}: the ranks never got to talk (start-up/rendezvous).")
            actions = ["Rerun with NCCL_DEBUG=INFO; check NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME, the firewall between "
                       "nodes, --dist-init-addr reachability, the same image on every node, and that every rank started."]
        else:
            span = (f"SeqNum {seqs[0]}" + (f"–{seqs[-1]}" if len(seqs) > 1 else "")) if seqs else \
                ("after the run had served" if served else "phase not stated") + \
                ("; DeepEP's timeout carries no sequence number" if deepep else
                 "; this release's line carries no sequence number")
            summary = (f"{what} timed out mid-run ({span}) on rank(s) "
                       f"{', '.join(map(str, ranks)) or '?'}"
                       + (f"; rank(s) {', '.join(map(str, silent))} did not report and are the suspects" if silent else "")
                       + ": one rank stopped joining collectives (crash, hang or hardware fault).")
            actions = ["Find the first rank that failed (its traceback, an OOM kill, an Xid) and fix that; py-spy dump a "
                       "hung rank. --watchdog-timeout only changes how long the others wait."]
            if deepep:
                actions.append("DeepEP's dispatch waits a fixed time for every peer's tokens: a peer still JIT-compiling "
                               "kernels at its first MoE forward (DeepGEMM), a hung or dead rank, or NVSHMEM/IBGDA not "
                               "moving data between the nodes (NVSHMEM_* settings, the NICs it uses) all read the same; "
                               "the peers' logs at that moment decide.")
            if p2p_flags:
                summary += (" No rank failed first in the input and every rank is on one node, so the peer-to-peer "
                            "path between the GPUs (PCIe P2P under ACS/IOMMU, the custom all-reduce) is the suspect.")
                actions.insert(0, "Rerun with NCCL_P2P_DISABLE=1 and --disable-custom-all-reduce: if the hang goes, "
                                  "P2P is the cause; check `lspci -vvv | grep ACSCtl` and the IOMMU (`dmesg | grep -i "
                                  "-e DMAR -e IOMMU`).")
        reasons = [m for m, bad in (("the timeout lines do not name their rank", not ranks),
                                    ("the world size is unknown (no server_args or launch command): the rank that "
                                     "stopped joining cannot be named", rule_id == "SGL-NCCL-002" and world is None),
                                    ("the peers' logs are not in the input: that they were still starting rather "
                                     "than failed is inferred from the group having worked", talked and not any(
                                         r.get("kind") in _STARTUP for r in context)),
                                    ("the timeout line carries no sequence number and nothing before it says whether "
                                     "the run had started serving", not seqs and rule_id == "SGL-NCCL-002" and not served),
                                    ("only the watchdog's frames are in the input: it took the process down for a "
                                     "collective that timed out or failed (NCCL's asynchronous error); the line that "
                                     "says which is cut", any(attrs(r).get("raised_from") not in (None, "checkTimeout")
                                                              for r in group)))
                   if bad]
        out.append(make_finding(
            rule_id,
            summary=summary,
            evidence=group,
            confidence="high" if not reasons else "medium" if len(reasons) == 1 else "low",
            confidence_reason="; ".join(reasons) or None,
            ranks=ranks,
            figures={"seq_nums": seqs, "op_types": ops, "reporting_ranks": ranks, "silent_ranks": silent,
                     "timeout_s": max((float(attrs(r).get("timeout_s") or 0) for r in group), default=None) or None},
            actions=actions,
            flags=flags if after_load or talked else p2p_flags,
        ))
    return out

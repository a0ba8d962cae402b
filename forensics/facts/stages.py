"""The start-up stages a server's ranks reach, in order, and what each waits on — per rank, per node.

A server comes up through stages each rank logs in order (sglang_formats.md §3: ``Init torch distributed
begin`` → ``Load weight begin/end`` → ``KV Cache is allocated`` → ``Capture cuda graph begin/end`` → the HTTP
server → the warm-up request → ``The server is fired up and ready to roll!``; vllm_formats.md §2: weights,
memory profiling, KV cache, graph capture, ``init engine … took``, the API server). Several of these stages wait
on something outside the rank: distributed initialisation on every rank of every node reaching the rendezvous;
loading on the weights' storage and, after it, on the other ranks at the post-load barrier; profiling, capture
and the warm-up request on collectives across the ranks. The detectors read where each rank and each node got
to from here (stalled starts, collective timeouts placed by the stage before them).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from forensics.facts.rows import Row, attrs, before, rank_label, rows
from forensics.model import Timeline

_RANKS = "the other ranks"
#: kind → (order, the stage, what it waits on). Order: later stages are larger.
STAGES: dict[str, tuple[int, str, str]] = {
    "dist_init_begin": (10, "distributed initialisation",
                        "every rank of every node reaching the rendezvous (--dist-init-addr, the TCPStore on node "
                        "rank 0) and NCCL's communicator set-up"),
    # a rank joining a process group's ZeroMQ broadcast queue (parsers/sglang.py ``_BROADCAST_QUEUE``): after the
    # rendezvous and the group's NCCL communicator, before the groups are done (``Init torch distributed ends``)
    "broadcast_queue": (17, "joining a process group's broadcast queue",
                        "every rank of the group subscribing to the queue's writer (rank 0 of the group): readers on "
                        "other nodes connect to the address the writer's node advertises (SGLANG_HOST_IP, else the "
                        "one auto-detected), and an address they cannot reach waits with no error"),
    "nccl_info": (15, "the NCCL communicator's set-up and first collective",
                  "every rank joining the communicator over the network or the GPUs' peer-to-peer path"),
    "dist_init_end": (20, "the start of the weight load", "the weights' storage"),
    "weight_load_begin": (30, "loading the weights",
                          "the weights' storage (the model path: a network filesystem or object store that stalled) "
                          "and host RAM (the shards are read through the page cache, which counts against the "
                          "container's memory limit: a host short of it swaps or reclaims instead of loading)"),
    "weight_load_end": (40, "the post-load barrier and memory profiling",
                        f"{_RANKS} finishing their load (free memory is all-reduced over the ranks before the KV "
                        "pool is sized)"),
    "memory_profile": (45, "memory profiling", "a dummy forward over all ranks (its collectives)"),
    "kv_memory": (50, "the KV cache's allocation", f"{_RANKS}' collectives"),
    "kv_sizing": (50, "the KV cache's allocation and CUDA graph capture", f"{_RANKS}' collectives"),
    "kv_cache_allocated": (50, "the KV pool's set-up", f"{_RANKS}' collectives"),
    "memory_pool_end": (55, "the set-up of CUDA graph capture", f"{_RANKS}' collectives"),
    "cuda_graph_begin": (60, "CUDA graph capture",
                         "each captured batch's collectives across the ranks (custom all-reduce, NCCL over P2P)"),
    "capture_progress": (60, "CUDA graph capture",
                         "each captured batch's collectives across the ranks (custom all-reduce, NCCL over P2P)"),
    "cuda_graph_end": (70, "the warm-up and the HTTP server's start",
                       "the warm-up request's forward: the first collectives of serving"),
    "hicache_alloc": (72, "the host cache's allocation", "pinning host memory"),
    "uvicorn": (75, "the warm-up request", "the warm-up request's forward: the first collectives of serving"),
    "http_access": (76, "the warm-up request", "the warm-up request's forward: the first collectives of serving"),
    "prefill_batch": (78, "the warm-up request's decode", "the warm-up's decode steps: collectives across the ranks"),
}
#: vLLM's ``Loading weights took S seconds`` (vllm_formats.md §2.3): the shards are read, and the loader then runs each
#: layer's post-load step (vllm vllm/model_executor/model_loader/base_loader.py (0.8-0.11) ``load_model``:
#: ``load_weights`` then ``process_weights_after_loading``: the quantisation methods' repacking, dequantisation or
#: re-quantisation for their kernels) before ``Model loading took`` — a log that ends between the two is in that step
POST_LOAD = (35, "the post-load weight processing (each layer's quantisation method repacking or converting the "
                 "weights for its kernels)",
             "the GPU's conversion kernels and host RAM (a conversion that stages the weights in host memory "
             "swaps on a host short of it)")
#: SGLang's weight loader draws its bar while it reads the shards (sglang python/sglang/srt/model_loader/weight_utils.py
#: (0.4.x-0.5.x), ``Loading safetensors checkpoint shards: … N/M``), then runs the same post-load step
#: (python/sglang/srt/model_loader/loader.py (0.4.x-0.5.x) ``load_weights_and_postprocess``: ``load_weights`` then each
#: module's ``process_weights_after_loading``) before ``Load weight end``: a complete bar is POST_LOAD, a partial one
#: the load itself
WEIGHT_BARS = frozenset({"Loading safetensors checkpoint shards", "Loading pt checkpoint shards",
                         "Multi-thread loading shards"})
#: the first requests of an offline run (vLLM's ``Processed prompts`` bar)
REQUESTS = (90, "serving the first requests", "each step's collectives across the ranks")
#: the stage of a front-end that waits for its engine cores before any of their lines (vllm_formats.md §3.6: the
#: engine cores' start-up, which the front-end cannot see into)
ENGINE_CORES = (5, "the engine cores' start-up (none of their stage lines is in the input)",
                "the engine cores loading the weights (the weights' storage) and, with several nodes, the other "
                "nodes' engine cores")
#: a run whose only line is the engine's own ``server_args=`` record (sglang_formats.md §2, logged by the launching
#: process before it spawns the ranks; §3's first stage line, ``Init torch distributed begin``, is each rank's): the
#: ranks were started and not one logged its first stage — with several nodes they wait at the rendezvous
LAUNCHED = (5, "the ranks' start (no stage line after the launch)",
            "every rank of every node starting and reaching the rendezvous (--dist-init-addr, the TCPStore on node "
            "rank 0)")
#: vLLM's engine past its start-up (vllm_formats.md §2, the start-up order: ``init engine (profile, create kv cache,
#: warmup model) took X`` once the engine core warmed up, then the front-end's ``Starting vLLM API server …`` /
#: ``Starting vLLM server on …``): nothing is left to wait on but requests
VLLM_UP = re.compile(r"init engine \(profile, create kv cache, warmup model\) took|Starting vLLM (?:API )?server")
#: rows that say the run got to serve (idle afterwards is health)
SERVING = ("server_ready", "decode_batch", "engine_metrics")
#: SGLang's warm-up is one request (sglang_formats.md §3: uvicorn → ``GET /get_model_info``, ``POST /generate``
#: → a ``Prefill batch`` on TP0 → ready): more than that is traffic, so the server was serving
WARMUP_BATCHES, WARMUP_REQUESTS = 1, 2
#: stages every rank logs (sglang_formats.md §3 "every rank"; vLLM's workers' load and KV lines, §2): only these
#: compare ranks — capture bars and the warm-up are rank 0's alone
EVERY_RANK = ("dist_init_begin", "dist_init_end", "weight_load_begin", "weight_load_end", "kv_cache_allocated",
              "memory_pool_end", "kv_memory")


#: the custom all-reduce's own refusal for a group over several nodes (vllm_formats.md §3.8, 0.5.0+: ``Custom
#: allreduce is disabled because this process group spans across nodes.``; SGLang's custom_all_reduce.py derives from
#: vLLM's and prints the same), logged by each rank while the parallel groups are set up
_SPANS_NODES = re.compile(r"this process group spans across nodes")


def spans_nodes_said(run: list[Row]) -> Row | None:
    """The row where a rank said its process group spans nodes: the server's ranks are on several nodes."""
    for r in run:
        if r.get("kind") == "notice" and attrs(r).get("message_id") == "custom_allreduce_disabled" and (
                attrs(r).get("reason") == "spans_nodes" or _SPANS_NODES.search(r.get("text") or "")):
            return r
    return None


def stage_of(row: Row) -> tuple[int, str, str] | None:
    """(order, stage, what it waits on) of a row that marks a stage, else None."""
    kind = row.get("kind") or ""
    if kind == "progress_bar" and attrs(row).get("label") == "Processed prompts":
        return REQUESTS
    if kind == "notice" and attrs(row).get("message_id") == "weights_read":
        return POST_LOAD
    if kind == "progress_bar" and attrs(row).get("label") in WEIGHT_BARS:
        a = attrs(row)
        done = a.get("steps_total") and a.get("steps_done") == a.get("steps_total")
        return POST_LOAD if done else STAGES["weight_load_begin"]
    if kind == "progress_bar":
        return STAGES["capture_progress"]  # SGLang's unlabelled bar after the weights: the capture's
    if kind == "version" and attrs(row).get("component") == "nccl":
        # ``sglang/vLLM is using nccl==X`` (pynccl's communicator created, inside distributed initialisation:
        # sglang_formats.md §3 "nccl", vllm_formats.md §3.6): the communicator's set-up across the ranks
        return STAGES["nccl_info"]
    if kind == "notice" and attrs(row).get("message_id") == "custom_allreduce_disabled":
        return STAGES["nccl_info"]  # decided while the parallel groups are set up, after the NCCL communicator
    if kind == "notice" and attrs(row).get("message_id") == "broadcast_queue":
        return STAGES["broadcast_queue"]
    return STAGES.get(kind)


def launched(run: list[Row]) -> Row | None:
    """The engine's own ``server_args=`` line of the run (not a shell's echo of the command), else None."""
    for r in run:
        if r.get("kind") == "server_args" and r.get("source") == "sglang" and "server_args=" in (r.get("text") or ""):
            return r
    return None


def served(run: list[Row]) -> bool:
    """The run reached ready or served traffic beyond SGLang's one warm-up request (or vLLM's engine came up)."""
    kinds = [r.get("kind") for r in run]
    return (any(k in SERVING for k in kinds) or kinds.count("prefill_batch") > WARMUP_BATCHES
            or kinds.count("http_access") > WARMUP_REQUESTS
            or any(r.get("source") == "vllm" and VLLM_UP.search(r.get("text") or "") for r in run))


@dataclass(frozen=True)
class Reached:
    """The furthest stage one rank (or one node) logged: the stage, what it waits on, and the row that says so."""

    order: int
    stage: str
    waits_on: str
    row: Row


def _key(row: Row) -> tuple:
    return (row.get("file") or "", row.get("line") or 0)


#: the capture stage and the one its end opens: a rank captures several graph sets one after another (the target's
#: decode graphs, then under speculative decoding the draft's and the draft-extend's: sglang
#: python/sglang/srt/speculative/eagle_worker.py (0.4.4+) ``init_cuda_graphs`` logs ``Capture draft cuda graph
#: begin/end`` and ``Capture draft extend cuda graph begin/end`` after the target's ``Capture cuda graph end``), so a
#: capture that begins after an end is a later stage than that end, not an earlier one
_CAPTURING, _CAPTURED = STAGES["cuda_graph_begin"][0], STAGES["cuda_graph_end"][0]


def _recaptured(st: tuple[int, str, str], row: Row, later: tuple[int, str, str], lrow: Row,
                key: Callable[[Row], Any] = _key) -> bool:
    """Whether ``lrow`` begins another capture after the capture end ``row`` (by line in one file, else by time:
    across files a name says nothing of order, a rotated log's older member sorts after the newer)."""
    if not (st[0] == _CAPTURED and later[0] == _CAPTURING):
        return False
    after = before(row, lrow)
    return after if after is not None else key(lrow) > key(row) and lrow.get("file") == row.get("file")


def furthest(run: list[Row], key: Callable[[Row], Any] = _key) -> Reached | None:
    """The furthest stage any row of the run marks (the latest such row by ``key`` among equals); a capture begun
    after the last capture end is where the run is (the next graph set's capture)."""
    staged = [(st, r) for r in run if (st := stage_of(r)) is not None]
    if not staged:
        return None
    st, row = max(staged, key=lambda sr: (sr[0][0], key(sr[1])))
    again = [(s2, r2) for s2, r2 in staged if _recaptured(st, row, s2, r2, key)]
    if again:
        st, row = max(again, key=lambda sr: key(sr[1]))
    return Reached(st[0], st[1], st[2], row)


def furthest_in(tl: Timeline) -> Reached | None:
    """The furthest stage the engine lines of one host's evidence mark (a host view: one node of the server)."""
    return furthest([r for r in rows(tl, *STAGES, "progress_bar", "version") if r.get("source") in ("sglang", "vllm")])


def reached_by_rank(run: list[Row]) -> dict[str, Reached]:
    """Each rank's furthest stage among those every rank logs, by its label (``TP3``, ``PP1 TP0``)."""
    last: dict[str, Reached] = {}
    for r in run:
        st, rank = stage_of(r), rank_label(r)
        if st is None or rank is None or r.get("kind") not in EVERY_RANK:
            continue
        if rank not in last or st[0] >= last[rank].order or _recaptured(
                (last[rank].order, last[rank].stage, last[rank].waits_on), last[rank].row, st, r):
            last[rank] = Reached(st[0], st[1], st[2], r)
    return dict(sorted(last.items()))


def ranks_behind(run: list[Row]) -> dict[str, Reached]:
    """Ranks whose furthest stage is behind the furthest rank's: the ones the others wait on."""
    last = reached_by_rank(run)
    if len(last) < 2:
        return {}
    top = max(v.order for v in last.values())
    return {k: v for k, v in last.items() if v.order < top}


def nodes_behind(reached: dict[str, Reached]) -> dict[str, Reached]:
    """Of each node's furthest stage (host → :class:`Reached`), the nodes behind the furthest node."""
    if len(reached) < 2:
        return {}
    top = max(v.order for v in reached.values())
    return {h: v for h, v in sorted(reached.items()) if v.order < top}

"""SGL-NCCL-003: the nodes of one server never met — rendezvous misconfigured or unreachable.

A server over several nodes starts only when every node reaches the same rendezvous address
(``--dist-init-addr``, the TCPStore on node rank 0). Launch commands that give the nodes different
addresses, the same ``--node-rank`` twice, or a different ``--nnodes`` leave the start-up waiting in
silence until a timeout; the store's own messages say the same from the other side::

    # node 0:  ... --dist-init-addr 10.0.0.1:5000 --nnodes 2 --node-rank 0
    # node 1:  ... --dist-init-addr 10.0.0.2:5000 --nnodes 2 --node-rank 1
    torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.
"""

from __future__ import annotations

import re

from forensics.facts.launch import launch_rows
from forensics.facts.rows import Row, attrs, before, rows
from forensics.facts.stages import SERVING, STAGES, stage_of
from forensics.model import Finding, FlagChange, Timeline
from parsers.failures import c10d_warning

from ._common import make_finding
from .fatal_other import failure_class

#: vLLM's engine core waiting for its front-end's handshake (vllm vllm/v1/engine/core.py::EngineCoreProc.startup_handshake
#: (0.9+, ``HANDSHAKE_TIMEOUT_MINS``)): an engine core (a headless node's, under data parallelism) that never heard
#: from the API server — the nodes never met (the data-parallel address and RPC port, the network, the head node down)
_HANDSHAKE = re.compile(r"Did not receive response from front-end process within (\d+) minutes?")
#: What c10d and its store raise when the rendezvous does not complete (failure_messages.md §4.6; PyTorch
#: ``torch/csrc/distributed/c10d/socket.cpp`` ``waitForInput: socket {} timed out after {}ms``, ``TCPStore.cpp``,
#: ``distributed_c10d.py`` ``_store_based_barrier``), and vLLM's handshake above. Read on a failure's own message,
#: never on its frames: a traceback through ``init_torch_distributed`` that raises something else (SGLang's
#: memory-imbalance check, an OOM) is not a rendezvous that failed.
#: The poll itself warns while ``SocketImpl::waitForInput`` goes round (pytorch torch/csrc/distributed/c10d/socket.cpp
#: (2.4+): ``waitForInput: poll for socket {} returned 0, likely a timeout``, ``… returned operation_in_progress before
#: a timeout``): the same client waiting on the same store.
_STORE_MESSAGE = re.compile(r"DistStoreError|DistNetworkError|TCPStore|store based barrier|"
                            r"waitForInput: socket .* timed out|"
                            r"waitForInput: poll for socket .* returned (?:0, likely a|operation_in_progress before a) "
                            r"timeout|"
                            r"client socket has (?:timed out|failed to connect)|"
                            r"in rendezvous\b|waiting for clients\. \d+/\d+ clients joined|" + _HANDSHAKE.pattern)
# source: none (elision marks; the same class as parsers/elision.py ELISION_LINE)
_CUT = re.compile(r"^\s*(?:\[\.\.\.[^\]]*\]|\.\.\.|<snip>|\(truncated\))\s*$", re.I)


#: Gloo on rank 0 when ``monitored_barrier(wait_all_ranks=True)`` times out (failure_messages.md §4.6), as SGLang's
#: post-load barrier calls it (model_runner ``load_model``: ``UNBALANCED_MODEL_LOADING_TIMEOUT_S``)
_BARRIER_FAILED = re.compile(r"Ranks? ([\d, ]{1,4000}) failed to pass monitoredBarrier")  # one class: linear
#: and on the other ranks, which did reach it (the culprit is named only in rank 0's log)
_BARRIER_REACHED = re.compile(r"Rank (\d+) successfully reached monitoredBarrier")


# reference/failure_messages.md §4.6 (Gloo's ``Connection closed by peer``, TCPStore's ``Failed to recv, got 0 bytes``),
# errno(3) ECONNRESET (``Connection reset by peer``): a peer's socket closed or reset after the ranks had met — the
# store was reached, so no rendezvous failed
_PEER_GONE = re.compile(r"Connection (?:closed|reset) by peer|Failed to recv, got 0 bytes")


def _failure_line(row: Row) -> str:
    """The line that says what failed: a traceback's exception line (its last line that is not a cut marker),
    a one-line failure's text."""
    lines = [ln for ln in (row.get("text") or "").splitlines() if ln.strip() and not _CUT.match(ln)]
    if not lines:
        return ""
    last = lines[-1]
    return "" if last.lstrip().startswith(("File \"", "raise ", "return ")) or last[:1].isspace() else last


def _flag(row: Row, key: str) -> str | None:
    a = attrs(row)
    flags = a.get("flags") or (a.get("args") if isinstance(a.get("args"), dict) else None) or {}
    for k in (key, key.replace("_", "-"), f"--{key.replace('_', '-')}"):
        if k in flags and flags[k] not in (None, True):
            return str(flags[k])
    return None


def _node_launches(tl: Timeline) -> list[Row]:
    """Launch commands of a multi-node server (``--nnodes`` > 1), one per node as given."""
    out = []
    # without a launch command, each node's own server_args dump (a node's log and its command would count it twice)
    # (the last per file: a log that holds a relaunch dumps them again, for the same node)
    dumps = {r.get("file"): r for r in rows(tl, "server_args") if r.get("source") == "sglang"}
    for r in launch_rows(tl) or list(dumps.values()):
        nnodes = _flag(r, "nnodes")
        if nnodes and nnodes.isdigit() and int(nnodes) > 1:
            out.append(r)
    return out


def _mismatches(launches: list[Row]) -> tuple[list[str], str | None]:
    """What the nodes' commands disagree on, and the address node rank 0 was given."""
    addrs = {_flag(r, "dist_init_addr") for r in launches}
    ranks = [_flag(r, "node_rank") for r in launches]
    nnodes = {_flag(r, "nnodes") for r in launches}
    problems = []
    if len(addrs) > 1:
        problems.append("different --dist-init-addr (" + ", ".join(sorted(str(a) for a in addrs)) + ")")
    elif addrs == {None}:
        problems.append("no --dist-init-addr")
    dup = sorted({r for r in ranks if r is not None and ranks.count(r) > 1})
    if dup:
        problems.append(f"--node-rank {', '.join(dup)} given to more than one node")
    if len(nnodes) > 1:
        problems.append("different --nnodes (" + ", ".join(sorted(str(n) for n in nnodes)) + ")")
    head = next((r for r in launches if _flag(r, "node_rank") == "0"), None)
    return problems, _flag(head, "dist_init_addr") if head is not None else None


def detect(tl: Timeline) -> list[Finding]:
    return _never_met(tl) + detect_unbalanced_loading(tl)


#: c10d's store: ``Timed out after N seconds waiting for clients. k/n clients joined.`` (failure_messages.md §4.6)
_JOINED = re.compile(r"(?<!\d)(\d+)/(\d+) clients joined")
_WAITED = re.compile(r"Timed out after (\d+) seconds")


#: the store client's socket in c10d's poll warnings (pytorch torch/csrc/distributed/c10d/socket.cpp (2.4+): the
#: ``SocketImpl(fd={}, addr={}, remote={})`` formatter, ``waitForInput: socket {} timed out after {}ms``)
_POLL_REMOTE = re.compile(r"waitForInput: (?:poll for )?socket SocketImpl\([^)]{0,300}?remote=([^)\s]{1,120})\)")
_POLL_WAITED = re.compile(r"waitForInput: socket .{0,400}? timed out after (\d+)ms")


def _polled(store: list[Row]) -> tuple[str | None, int | None] | None:
    """The store's address and how long the client polled it, from c10d's poll warnings (None without one)."""
    texts = [r.get("text") or "" for r in store if "waitForInput" in (r.get("text") or "")]
    if not texts:
        return None
    # ``remote=none``: a socket with no peer recorded (the formatter's placeholder), no address to name
    remote = next((m.group(1) for t in texts if (m := _POLL_REMOTE.search(t)) and m.group(1) != "none"), None)
    ms = max((int(m.group(1)) for t in texts if (m := _POLL_WAITED.search(t))), default=None)
    return remote, ms


#: vLLM's ``rank N in world size M is assigned as …`` (vllm vllm/distributed/parallel_state.py (0.9+)
#: ``initialize_model_parallel``): logged once ``init_process_group`` returned, the ranks met
_RANKS_MET = ("rank_assigned",)


def _past_rendezvous(tl: Timeline) -> list[Row]:
    """Rows that say a rank got past the rendezvous: a start-up stage after distributed initialisation began (the
    communicator's set-up, the end of the initialisation, the weights, …), vLLM's rank assignment, serving."""
    begun = STAGES["dist_init_begin"][0]
    staged = [r for r in rows(tl, *STAGES, "progress_bar", "version", "notice")
              if r.get("source") in ("sglang", "vllm") and (st := stage_of(r)) is not None and st[0] > begun]
    return staged + rows(tl, *_RANKS_MET, *SERVING)


def _never_met(tl: Timeline) -> list[Finding]:
    launches = _node_launches(tl)
    store = [r for r in rows(tl, "failure") if failure_class(r) == "store_timeout"]
    # a rank that failed inside the process-group set-up, or c10d's store socket timing out, is the same wait
    store += [r for r in rows(tl, "scheduler_exception", "failure", "nccl_watchdog", "exception")
              if r not in store and _STORE_MESSAGE.search(_failure_line(r))]
    # a monitored barrier that some ranks did not pass: the ranks met, then some did not arrive (SGL-NCCL-005)
    store = [r for r in store if "monitoredBarrier" not in (r.get("text") or "")]
    # a peer's connection closed or reset: the ranks had met (SGL-NCCL-009 reads it)
    store = [r for r in store if not _PEER_GONE.search(r.get("text") or "")]
    # the store's server could not bind its port (``… failed to listen … name: EADDRINUSE``, failure_messages.md
    # §4.6): another process holds it, which the port rules read (class port_in_use), not a rendezvous that timed out
    store = [r for r in store if "EADDRINUSE" not in _failure_line(r)]
    # a c10d warning (the store client's poll, a connect retried) that the ranks got past: they met after all
    met = _past_rendezvous(tl)
    store = [r for r in store if not (c10d_warning(r.get("text") or "") and any(before(r, m) for m in met))]
    problems, head_addr = _mismatches(launches) if len(launches) > 1 else ([], None)
    if not problems and not store:
        return []
    flags: list[FlagChange] = []
    if any(p.startswith("different --dist-init-addr") for p in problems) and head_addr:
        olds = sorted({str(_flag(r, "dist_init_addr")) for r in launches if _flag(r, "dist_init_addr") != head_addr})
        flags.append(FlagChange("--dist-init-addr", ", ".join(olds), head_addr,
                                "every node must name the same rendezvous: node rank 0's address and port"))
    joined = [(r["count"], attrs(r)["world_size"]) for r in store
              if r.get("count") is not None and attrs(r).get("world_size")]
    # the same figures in a rank's traceback of the store's error (``DistStoreError: … k/n clients joined``)
    joined += [(int(m.group(1)), int(m.group(2))) for r in store if r.get("count") is None
               and (m := _JOINED.search(_failure_line(r) + " " + (r.get("text") or ""))) is not None]
    waited = next((int(m.group(1)) for r in store if (m := _WAITED.search(r.get("text") or ""))), None)
    hs = next((m for r in store if (m := _HANDSHAKE.search(r.get("text") or ""))), None)
    polled = _polled(store)
    words = []
    if problems:
        words.append("The nodes' launch commands disagree: " + "; ".join(problems))
    if joined:
        count, world = joined[0]
        words.append(f"{'only' if problems else 'Only'} {count} of {world} processes joined the rendezvous"
                     + (f" at {head_addr}" if head_addr else "")
                     + (f" in {waited} s" if waited else "")
                     + (f": {world - count} never connected (a node that did not start, or cannot reach it)"
                        if 0 < count < world else ""))
    elif hs is not None:
        words.append(f"{'a' if problems else 'A'} vLLM engine core waited {hs.group(1)} min for its front-end's "
                     "handshake and never got it: the engine core's node and the API server's never met (the "
                     "data-parallel address and RPC port, the network between them, or the head node not running)")
    elif polled is not None:
        remote, ms = polled
        words.append(f"{'the' if problems else 'The'} rendezvous store{f' at {remote}' if remote else ''} never "
                     f"answered: c10d's store client polled it" + (f" for {ms / 1000:g} s" if ms else "")
                     + " and timed out")
    elif store:
        words.append(f"{'the' if problems else 'The'} rendezvous store timed out or could not be reached")
    return [make_finding(
        "SGL-NCCL-003",
        summary=("; and ".join(words) + ". The ranks wait at initialisation until a timeout, with no error of their "
                 "own."),
        evidence=[*launches[:4], *store[:3]],
        confidence="high" if problems else "medium",
        confidence_reason=None if problems else (
            "the nodes' launch commands agree: the network between them or a node that never started decides"
            if len(launches) > 1 else "the launch commands of the nodes are not in the input"),
        figures={"nodes_given": len(launches), "problems": problems or None, "head_dist_init_addr": head_addr},
        flags=flags,
        actions=[*([] if hs is None else [
                     "vLLM: give every node the same --data-parallel-address (the head node's IP) and "
                     "--data-parallel-rpc-port, start the head node first, and `nc -zv <address> <port>` from the "
                     "headless node."]),
                 "Give every node the same --dist-init-addr (node rank 0's IP and a free port) and --nnodes, and each "
                 "node its own --node-rank 0…N-1.",
                 "From every node: `nc -zv <addr> <port>` to the rendezvous, and the same interface for NCCL and Gloo "
                 "(NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME) on a routable subnet."],
    )]


# ---------------------------------------------------------------------------------------------
# SGL-NCCL-005: ranks that loaded their weights waited for others that did not


def detect_unbalanced_loading(tl: Timeline) -> list[Finding]:
    """``TP rank N could finish the model loading, but there are other ranks that didn't finish loading``: the
    ranks that finished waited at SGLang's post-load barrier, whose timeout is a constant of its own (300 s,
    later 480 s, ``SGLANG_UNBALANCED_MODEL_LOADING_TIMEOUT_S`` where it exists), not ``--dist-timeout``."""
    from forensics.facts.rows import rank_of
    from forensics.facts.runs import iter_runs, of_kind

    from ._common import tag_run

    out = []
    for ref, run in iter_runs(tl):
        waits = [r for r in of_kind(run, "ranks_not_loaded") if not (r.get("text") or "").lstrip().startswith("#")]
        barrier = [r for r in of_kind(run, "failure", "nccl_watchdog") if "monitoredBarrier" in (r.get("text") or "")]
        if not waits and not barrier:
            continue
        ranks = sorted({x for x in (attrs(r).get("named_tp_rank") for r in waits) if x is not None}
                       | {x for x in (rank_of(r) for r in waits) if x is not None})
        absent = sorted({int(x) for r in barrier if (m := _BARRIER_FAILED.search(r.get("text") or ""))
                         for x in re.findall(r"\d+", m.group(1))})
        ranks = sorted(set(ranks) | {int(m.group(1)) for r in barrier
                                     if (m := _BARRIER_REACHED.search(r.get("text") or ""))})
        summary = (f"Rank(s) {', '.join(map(str, ranks)) or '?'} finished loading the weights and gave up waiting "
                   "for ranks that had not: a rank that crashed or ran out of memory while loading, or a node "
                   "loading from slower storage, held the others at SGLang's post-load barrier until its timeout.")
        if absent:
            summary = (f"Rank 0's barrier names rank(s) {', '.join(map(str, absent))} as never arriving at SGLang's "
                       "post-load barrier (Gloo's monitoredBarrier): they had not finished loading the weights when "
                       "the others gave up — crashed or out of memory while loading, or on slower storage or a "
                       "slower node.")
        quits = of_kind(run, "sigquit")  # the launcher's SIGQUIT: this failure reaching the parent
        if quits:
            summary += " The SIGQUIT the launcher then received is this failure reaching the parent, not a cause."
        out.append(tag_run(make_finding(
            "SGL-NCCL-005",
            summary=summary,
            evidence=[*waits[:6], *barrier[:2], *quits[:1]],
            confidence="medium",
            confidence_reason=("the log of the ranks that did not arrive is not in the input: it says which of the "
                               "two") if absent else
                              "the ranks that did not finish are not in the input: their log says which of the two",
            ranks=absent or ranks,
            figures={"waiting_ranks": ranks or None, "absent_ranks": absent or None},
            actions=["Read the log of the ranks (and nodes) not named here: an OOM or a traceback while loading is the "
                     "cause; if they were only slow (`Loading safetensors checkpoint shards` at seconds per shard), "
                     "put the weights on local disk or page cache before the launch.",
                     "On versions that have it, raise SGLANG_UNBALANCED_MODEL_LOADING_TIMEOUT_S; --dist-timeout does "
                     "not govern this barrier."],
        ), ref))
    return out

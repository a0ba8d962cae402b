"""Xid, NCCL and KV-cache detectors, root-cause selection, findings.json, and robustness."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from test_detectors_common import GIB, fired, timeline

from forensics.detectors import kv_cache_capacity, nccl_timeout, run_all
from forensics.facts.runs import SGLANG_KINDS
from forensics.report.findings import dumps_document, to_document
from parsers.failures import classify


def _watchdog(rank: int, seq: int) -> dict:
    return {"kind": "nccl_watchdog", "count": seq, "text": f"[rank{rank}]:[E1120 17:31:10.4 ProcessGroupNCCL.cpp:632] "
            f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE)",
            "attrs": {"seq_num": seq, "op_type": "ALLREDUCE", "timeout_s": 600.0, "rank": rank}}


def test_nccl_sequence_number_separates_startup_from_midrun():
    assert set(fired(nccl_timeout.detect(timeline(_watchdog(0, 2), _watchdog(1, 2))))) == {"SGL-NCCL-001"}
    tl = timeline({"kind": "server_args", "attrs": {"args": {"tp_size": 4}}}, *(_watchdog(r, 9000) for r in (0, 1, 3)))
    f = fired(nccl_timeout.detect(tl))["SGL-NCCL-002"]
    assert f.ranks == [0, 1, 3] and f.figures["silent_ranks"] == [2]


def test_nccl_timeout_after_a_crash_is_a_consequence():
    crash = {"kind": "cuda_oom", "rank": "TP2", "tp_rank": 2, "gpu": 2, "bytes": 2 * GIB, "free_bytes": GIB // 2}
    tl = timeline({"kind": "prefill_batch", "tokens": 8192, "ratio": 0.5}, crash, _watchdog(0, 9000))
    findings, root = run_all(tl)
    assert root == "SGL-GPU-001"
    assert fired(findings)["SGL-NCCL-002"].consequence_of == "SGL-GPU-001"


def _p2p_flags(*extra: dict) -> set[str]:
    findings = nccl_timeout.detect(timeline(*extra, *(_watchdog(r, 9000) for r in (0, 1, 2, 3))))
    return {c.flag for f in findings for c in f.remediation.flags}


def test_one_node_collective_hang_proposes_the_p2p_test_only_when_no_rank_failed_first():
    one_node = {"kind": "server_args", "attrs": {"args": {"tp_size": 4, "nnodes": 1}}}
    assert _p2p_flags(one_node) == {"NCCL_P2P_DISABLE", "--disable-custom-all-reduce"}
    # a rank that ran out of memory first is what the others waited on: P2P is not the suspect
    oom = {"kind": "cuda_oom", "rank": "TP2", "tp_rank": 2, "gpu": 2, "bytes": 2 * GIB, "free_bytes": GIB // 2}
    assert _p2p_flags(one_node, oom) == set()
    # ranks over two nodes wait on the network between them, not on peer-to-peer inside one
    assert _p2p_flags({"kind": "server_args", "attrs": {"args": {"tp_size": 8, "nnodes": 2}}}) == set()
    # nothing says where the ranks run: no guess
    assert _p2p_flags() == set()


def test_a_peer_that_ran_out_of_memory_explains_its_closed_nccl_connections():
    crash = {"kind": "cuda_oom", "rank": "TP2", "tp_rank": 2, "gpu": 2, "bytes": 2 * GIB, "free_bytes": GIB // 2}
    closed = {"kind": "failure", "text": "gpu-a:901:944 [0] NCCL WARN socketProgress: Connection closed by remote peer "
              "gpu-b<39112>", "attrs": {"failure": "nccl_error"}}
    tl = timeline({"kind": "prefill_batch", "tokens": 8192, "ratio": 0.5}, crash, closed)
    findings, root = run_all(tl)
    transport = fired(findings)["SGL-NCCL-009"]
    assert root == "SGL-GPU-001" and transport.consequence_of == "SGL-GPU-001"
    assert transport.confidence == "low"  # a peer went away: the message alone does not say whether it or the link


def test_a_startup_timeout_right_after_loading_asks_for_a_longer_dist_timeout_only_then():
    args = {"kind": "server_args", "attrs": {"args": {"tp_size": 8, "nnodes": 2, "node_rank": 1}}}
    loaded = {"kind": "weight_load_end", "rank": "TP8", "tp_rank": 8}
    pool = {"kind": "kv_cache_allocated", "rank": "TP8", "tp_rank": 8}

    def dist_timeouts(*lifecycle: dict) -> list[str]:
        findings = nccl_timeout.detect(timeline(args, *lifecycle, _watchdog(8, 2), _watchdog(9, 2)))
        return [c.new for f in findings for c in f.remediation.flags if c.flag == "--dist-timeout"]

    assert dist_timeouts(loaded) == ["1800"]
    assert dist_timeouts(loaded, pool) == []  # the pool was sized: the collective was a later one
    assert dist_timeouts() == []  # nothing was loaded: a rendezvous or network problem


def test_the_post_load_barrier_names_the_ranks_that_never_arrived():
    from forensics.detectors import rendezvous

    gloo = {"kind": "failure", "text": "[rank0]:[E1119 15:39:47.9 ProcessGroupGloo.cpp:143] Ranks 5, 7 failed to pass "
            "monitoredBarrier in 480000 ms", "attrs": {"failure": "store_timeout"}}
    findings = rendezvous.detect(timeline({"kind": "weight_load_end", "rank": "TP0", "tp_rank": 0}, gloo))
    assert [f.rule_id for f in findings] == ["SGL-NCCL-005"]  # not "the nodes never met": they met, then waited
    assert findings[0].ranks == [5, 7] and findings[0].figures["absent_ranks"] == [5, 7]


def test_a_gloo_peer_that_closed_its_connection_is_a_peer_that_exited_not_nodes_that_never_met():
    text = "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.3.1.22]:27114"
    kind, _cols, attrs = classify(text)
    assert (kind, attrs["failure"]) == ("failure", "peer_exited")
    closed = {"kind": "failure", "text": text, "attrs": attrs}
    findings, root = run_all(timeline({"kind": "decode_batch", "rank": "TP0", "tp_rank": 0, "ratio": 0.2}, closed))
    assert root == "SGL-RUN-001" and not {"SGL-NCCL-003", "SGL-NCCL-009"} & set(fired(findings))
    assert "10.3.1.22:27114" in fired(findings)["SGL-RUN-001"].summary  # the peer whose log says why it exited


def test_a_gloo_connection_reset_is_still_read_as_the_link():
    reset = {"kind": "failure", "text": "Read error [10.3.1.22]:27114: Connection reset by peer",
             "attrs": {"failure": "store_timeout"}}
    findings, root = run_all(timeline({"kind": "decode_batch", "rank": "TP0", "tp_rank": 0, "ratio": 0.2}, reset))
    assert root == "SGL-NCCL-009"


def _decode(use: float, queue: int) -> dict:
    return {"kind": "decode_batch", "rank": "TP0", "tp_rank": 0, "ratio": use, "attrs": {"queue_req": queue}}


def test_one_retraction_is_low_and_a_growing_queue_is_medium():
    one = timeline({"kind": "retract", "rank": "TP0", "tp_rank": 0, "count": 2, "ts_local": None})
    assert fired(kv_cache_capacity.detect(one))["SGL-KV-001"].severity == "low"
    growing = timeline(*(_decode(0.97, q) for q in (3, 8, 15)))
    assert fired(kv_cache_capacity.detect(growing))["SGL-KV-001"].severity == "medium"
    calm = timeline(*(_decode(0.6, q) for q in (3, 2, 0)))
    assert kv_cache_capacity.detect(calm) == []


def test_kv_exhaustion_and_context_longer_than_pool():
    tl = timeline({"kind": "kv_sizing", "tokens": 100000, "attrs": {"context_len": 131072}},
                  {"kind": "kv_exhausted", "tokens": 9000, "attrs": {"phase": "prefill", "available_tokens": 4521}})
    got = fired(kv_cache_capacity.detect(tl))
    assert got["SGL-KV-002"].figures["tokens_available"] == 4521
    assert got["SGL-KV-003"].figures == {"kv_pool_tokens": 100000, "context_len": 131072}


def test_findings_document_is_byte_stable_and_schema_shaped():
    tl = timeline({"kind": "kv_exhausted", "tokens": 9000, "attrs": {"phase": "prefill", "available_tokens": 1}})
    tl.coverage = [{"file": "b.log", "format": "sglang", "lines": 3, "recognized": 3, "unrecognized": 0},
                   {"file": "a.log", "format": "sglang", "lines": 1, "recognized": 0, "unrecognized": 1}]
    findings, root = run_all(tl)
    text = dumps_document(to_document(findings, root, tl))
    assert text == dumps_document(to_document(*run_all(tl), tl))
    doc = json.loads(text)
    assert [c["file"] for c in doc["coverage"]] == ["a.log", "b.log"]
    assert set(doc) == {"schema_version", "tool", "input", "root_cause", "findings", "coverage"}
    f = doc["findings"][0]
    for key in ("rule_id", "category", "severity", "title", "summary", "confidence", "ranks", "gpus", "evidence",
                "figures", "remediation"):
        assert key in f
    assert doc["root_cause"] == "SGL-KV-002"


KINDS = [*SGLANG_KINDS, "host_memory", "gpu_memory", "gpu_process", "gpu_process_none", "oom_kill", "xid_never",
         "process", "command", "launch_command", "nccl_watchdog", "version", "xid", "gpu_fallen_off_bus"]
NUM = st.one_of(st.none(), st.integers(min_value=-(2**40), max_value=2**45))


@st.composite
def event_rows(draw):
    rows = []
    for i in range(draw(st.integers(0, 14))):
        rows.append({
            "kind": draw(st.sampled_from(KINDS)), "line": i + 1, "file": draw(st.sampled_from(["a.log", "b.txt"])),
            "bytes": draw(NUM), "avail_bytes": draw(NUM), "used_bytes": draw(NUM), "total_bytes": draw(NUM),
            "tokens": draw(NUM), "count": draw(NUM), "run": draw(st.one_of(st.none(), st.integers(0, 2))),
            "code": draw(st.one_of(st.none(), st.sampled_from([-9, 79, 45, 137]))), "gpu": draw(st.one_of(st.none(), st.integers(0, 7))),
            "ratio": draw(st.one_of(st.none(), st.floats(-1, 2, allow_nan=False))),
            "rank": draw(st.one_of(st.none(), st.sampled_from(["TP0", "TP3", "DP1 TP3"]))),
            "text": draw(st.text(max_size=40)),
            "attrs": draw(st.sampled_from(['{"args": {"tp_size": 0, "mem_fraction_static": "x"}}', "not json", "[]",
                                           '{"flags": {"--hicache-size": "300", "--enable-hierarchical-cache": true}}',
                                           '{"state": "D"}', '{"pci_bus_id": "0000:9B:00.0"}', None])),
        })
    return rows


@settings(max_examples=60, deadline=None)
@given(event_rows())
def test_run_all_never_raises_on_odd_events(rows):
    tl = timeline(*rows)
    findings, root = run_all(tl)
    assert root is None or root in {f.rule_id for f in findings}
    dumps_document(to_document(findings, root, tl))


def test_xid_detector_uses_the_catalog():
    from forensics.facts import xid

    hard = {"kind": "xid", "source": "kernel", "code": 79, "attrs": {"pci_bus_id": "0000:9b:00"},
            "text": "NVRM: Xid (PCI:0000:9b:00): 79, GPU has fallen off the bus."}
    noise = {"kind": "xid", "source": "kernel", "code": 45, "file": "s.txt", "line": 5, "text": "NVRM: Xid 45"}
    kill = {"kind": "command", "source": "transcript", "file": "s.txt", "line": 1, "text": "pkill -9 -f sglang",
            "attrs": {"command": "pkill -9 -f sglang"}}
    findings, root = run_all(timeline(hard, kill, noise))
    got = fired(findings)
    assert got["SGL-XID-001"].severity == xid.lookup(79).severity
    assert got["SGL-XID-001"].figures["xid_counts"] == {"79": 1}
    assert got["SGL-XID-002"].severity == "info" and got["SGL-XID-002"].figures["xid_counts"] == {"45": 1}
    assert root == "SGL-XID-001"
    # the same Xid 45 with no kill before it is judged by the catalog, not dismissed
    alone = fired(run_all(timeline(noise))[0])
    assert set(alone) == {"SGL-XID-001"} and alone["SGL-XID-001"].severity == xid.lookup(45).severity


def test_one_collective_timeout_is_one_finding_though_its_teardown_repeats_the_watchdog_line(tmp_path):
    from forensics.analysis import analyse

    log = tmp_path / "server.log"
    log.write_text(
        "[2025-07-02 10:00:00 TP0] Decode batch, #running-req: 4, #token: 900, token usage: 0.02, "
        "gen throughput (token/s): 120.00, #queue-req: 0,\n"
        "[rank2]:[E702 10:20:00.100000000 ProcessGroupNCCL.cpp:632] [Rank 2] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=4410, OpType=ALLGATHER, NumelIn=512, NumelOut=4096, Timeout(ms)=1200000) ran for "
        "1200310 milliseconds before timing out.\n"
        "terminate called after throwing an instance of 'c10::DistBackendError'\n"
        "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread terminated with exception: "
        "[Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4410, OpType=ALLGATHER, NumelIn=512, "
        "NumelOut=4096, Timeout(ms)=1200000) ran for 1200310 milliseconds before timing out.\n", encoding="utf-8")
    _, doc = analyse([log], tz="UTC", quiet=True)
    assert [f["rule_id"] for f in doc["findings"]].count("SGL-NCCL-002") == 1, doc["findings"]


def test_a_note_that_names_the_watchdog_message_is_no_timeout(tmp_path):
    from forensics.analysis import analyse

    log = tmp_path / "server.log"
    log.write_text("# thread title: NCCL 'Watchdog caught collective operation timeout' on a 4-node deploy\n"
                   "[2025-07-02 10:00:00 TP0] Load weight begin. avail mem=76.20 GB\n", encoding="utf-8")
    _, doc = analyse([log], tz="UTC", quiet=True)
    assert not [f for f in doc["findings"] if f["rule_id"].startswith("SGL-NCCL")], doc["findings"]


def test_a_store_timeout_in_a_ranks_traceback_says_how_many_joined_where_and_how_long(tmp_path):
    """Two nodes' logs whose server_args agree, and a rank's traceback of c10d's store giving up: the summary carries
    the store's own figures and the address both dumps name, and the confidence says the commands agree."""
    from forensics.timeline import build_timeline

    dump = ("[2025-06-10 14:20:0{n}] server_args=ServerArgs(model_path='org/model-671b', tp_size=16, nnodes=2, "
            "node_rank={n}, dist_init_addr='10.9.0.7:25000')\n")
    (tmp_path / "node0.log").write_text(dump.format(n=0) + "[2025-06-10 14:20:15 TP0] Init torch distributed begin.\n",
                                        encoding="utf-8")
    (tmp_path / "node1.log").write_text(
        dump.format(n=1) + "[2025-06-10 14:20:16 TP8] Init torch distributed begin.\n"
        "[2025-06-10 14:35:17 TP8] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/opt/sglang/python/sglang/srt/distributed/parallel_state.py", line 1100, in '
        "init_distributed_environment\n"
        "    torch.distributed.init_process_group(\n"
        "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 12/16 clients joined.\n",
        encoding="utf-8")
    findings, _root = run_all(build_timeline([tmp_path / "node0.log", tmp_path / "node1.log"]))
    f = fired(findings)["SGL-NCCL-003"]
    assert "Only 12 of 16 processes joined the rendezvous at 10.9.0.7:25000 in 901 s: 4 never connected" in f.summary
    assert "launch commands agree" in (f.confidence_reason or ""), f.confidence_reason

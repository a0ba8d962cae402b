"""Xid, NCCL and KV-cache detectors, root-cause selection, findings.json, and robustness."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from test_detectors_common import GIB, fired, timeline

from forensics.detectors import kv_cache_capacity, nccl_timeout, run_all
from forensics.facts.runs import SGLANG_KINDS
from forensics.report.findings import dumps_document, to_document


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

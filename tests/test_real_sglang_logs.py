"""parsers/sglang.py on the real user logs of ../shared/sglang_real_logs/ (excerpts from public threads).

Lines starting with ``# `` in those files are the curator's notes, not log: they are blanked (line
numbers kept) before parsing. The expected figures below are the numbers printed in those files.
Run with ``-s`` to see the per-file coverage table.
"""

from __future__ import annotations

from datetime import datetime

import pytest
from shared_data import SHARED, SKIP_REASON

from parsers import sglang
from parsers.schema import row_attrs
from parsers.units import gb_decimal, gib, mib

LOGS = SHARED / "sglang_real_logs"

pytestmark = pytest.mark.skipif(not LOGS.is_dir(), reason=f"{SKIP_REASON}: sglang_real_logs not present")


def log_text(name_start: str) -> str:
    matches = sorted(LOGS.glob(f"{name_start}*.log"))
    if not matches:
        pytest.skip(f"{SKIP_REASON}: {name_start}*.log not present")
    raw = matches[0].read_text(encoding="utf-8", errors="replace")
    return "\n".join("" if ln.startswith("# ") or ln == "#" else ln for ln in raw.split("\n"))


def events(name_start: str) -> list[dict]:
    out = []
    for r in sglang.parse(log_text(name_start), name_start).events.iter_rows(named=True):
        r["attrs"] = row_attrs(r)
        out.append(r)
    return out


def of_kind(rows: list[dict], kind: str) -> list[dict]:
    return [r for r in rows if r["kind"] == kind]


def test_every_real_log_parses_and_sglang_records_are_recognised():
    files = sorted(LOGS.glob("*.log"))
    assert files
    total_record = total_ok = 0
    print(f"\n{'file':60} {'lines':>5} {'recog':>5} {'sglang':>6} {'ok':>4}")
    for f in files:
        text = log_text(f.name[:3])
        res = sglang.parse(text, f.name)  # must not raise
        assert res.recognized + res.unrecognized == res.lines
        statuses = sglang.classify_lines(text)
        assert len(statuses) == res.lines
        ok = statuses.count("record")
        n = ok + statuses.count("record_unknown")
        total_record += n
        total_ok += ok
        print(f"{f.name[:60]:60} {res.lines:5} {res.recognized:5} {n:6} {ok:4}")
    share = total_ok / total_record
    print(f"SGLang record lines recognised: {total_ok}/{total_record} = {share:.1%}")
    assert share >= 0.90


def test_01_graph_capture_oom_figures():
    rows = events("01_")
    oom = of_kind(rows, "cuda_oom")
    assert len(oom) == 1
    # "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 7 has a total
    #  capacity of 95.00" (the excerpt is cut there)
    # the unit of "95.00" is cut off, so the total stays unknown rather than guessed
    assert (oom[0]["bytes"], oom[0]["gpu"], oom[0]["total_bytes"]) == (mib(448), 7, None)
    assert oom[0]["attrs"]["during"] == "graph_capture"
    exc = of_kind(rows, "scheduler_exception")[0]
    assert (exc["line"], exc["line_end"]) == (10, oom[0]["line"])
    assert exc["attrs"]["exception_type"] == "Exception"
    assert of_kind(rows, "cuda_graph_failed")[0]["line"] == oom[0]["line"]


def test_02_v03_format():
    rows = events("02_")
    pool, begin, exc = rows
    assert (pool["kind"], pool["tp_rank"], pool["avail_bytes"]) == ("memory_pool_end", 0, gib(8.38))
    assert pool["ts_local"] == datetime(2024, 10, 22, 6, 31, 49)
    assert begin["kind"] == "cuda_graph_begin" and begin["avail_bytes"] is None  # v0.3: no avail mem yet
    assert exc["kind"] == "scheduler_exception" and exc["attrs"]["component"] == "traceback"
    assert exc["rank"] == "TP0" and exc["line"] == 12 and exc["line_end"] == 25
    assert exc["text"].count("\n") == 13


def test_03_kv_pool_per_rank():
    rows = events("03_")
    kv = of_kind(rows, "kv_cache_allocated")
    assert {r["tp_rank"] for r in kv} == {1, 3, 5, 6}
    assert all(r["tokens"] == 2795207 and r["bytes"] == 2 * gib(53.31) for r in kv)
    bs = of_kind(rows, "cuda_graph_bs")[0]
    assert bs["tp_rank"] == 0 and bs["attrs"]["bs"][:4] == [1, 2, 4, 8] and bs["attrs"]["bs"][-1] == 512


def test_04_tqdm_glued_record_is_found():
    rows = events("04_")
    glued = [r for r in rows if r["line"] == 16]
    assert [r["kind"] for r in glued] == ["capture_progress", "notice"]
    assert glued[1]["tp_rank"] == 1 and glued[1]["attrs"]["addresses"] == 30
    assert glued[0]["avail_bytes"] == gib(6.91)
    ends = of_kind(rows, "cuda_graph_end")
    assert {r["attrs"]["capture_name"] for r in ends} == {"draft"} and ends[0]["seconds"] == 5.48


def test_06_eight_ranks_allocate_120_gb_each():
    rows = of_kind(events("06_"), "hicache_alloc")
    assert len(rows) == 8
    assert sorted(r["tp_rank"] for r in rows) == list(range(8))
    assert all(r["attrs"]["attn_cp_rank"] == r["tp_rank"] for r in rows)
    assert all(r["bytes"] == gb_decimal(120) for r in rows)
    assert sum(r["bytes"] for r in rows) == 960 * 10**9
    assert {r["ts_local"] for r in rows} == {datetime(2026, 7, 18, 3, 3, 6)}


@pytest.mark.parametrize("name,requested,only", [("07_", 40.00, 44.87), ("08_", 7.05, 2.04)])
def test_07_08_hicache_not_enough_host_memory(name, requested, only):
    (row,) = events(name)
    assert row["kind"] == "hicache_insufficient"
    assert (row["bytes"], row["avail_bytes"]) == (gb_decimal(requested), gb_decimal(only))
    assert row["attrs"]["exception_type"] == "ValueError"


def test_09_not_enough_memory_names_the_fraction():
    row = of_kind(events("09_"), "not_enough_memory")[0]
    assert row["ratio"] == 0.2


@pytest.mark.parametrize("name,tried,available", [("11_", 8192, 8070656), ("12_", 2048, 704), ("13_", 4096, 320512)])
def test_11_12_13_prefill_kv_exhaustion(name, tried, available):
    rows = of_kind(events(name), "kv_exhausted")
    assert len(rows) == 1
    assert rows[0]["tokens"] == tried and rows[0]["attrs"]["available_tokens"] == available
    assert rows[0]["attrs"]["phase"] == "prefill"


def test_14_and_16_decode_batches():
    rows = of_kind(events("14_"), "decode_batch")
    assert len(rows) == 6  # the 6th is cut after "#to": a partial row
    assert (rows[5]["count"], rows[5]["tokens"]) == (6, None)
    rows = rows[:5]
    assert all((r["tokens"], r["ratio"], r["count"], r["attrs"]["queue_req"]) == (1920, 0.94, 6, 5) for r in rows)
    assert [r["attrs"]["gen_throughput"] for r in rows][:2] == [446.45, 445.85]
    rows16 = of_kind(events("16_"), "decode_batch")
    assert [r["attrs"]["cuda_graph"] for r in rows16[:3]] == [False, False, True]
    assert rows16[0]["tokens"] == 34901 and rows16[0]["rank"] is None


def test_15_old_retraction_line():
    (row,) = of_kind(events("15_"), "retract")
    assert row["count"] == 1 and row["attrs"]["form"] == "decode_oom"
    assert (row["attrs"]["new_token_ratio_from"], row["attrs"]["new_token_ratio_to"]) == (0.8024, 0.9085)


def test_17_sigquit_gloo_and_exception():
    rows = events("17_")
    assert [r["kind"] for r in rows] == ["sigquit", "nccl_watchdog", "scheduler_exception"]
    assert rows[0]["attrs"]["phase"] == "launch"
    assert rows[1]["attrs"]["rank"] == 3 and rows[1]["attrs"]["event"] == "monitored_barrier"
    assert rows[2]["tp_rank"] == 3


def test_18_ranks_not_loaded_inside_traceback():
    rows = events("18_")
    nl = of_kind(rows, "ranks_not_loaded")
    assert len(nl) == 1 and nl[0]["tp_rank"] == 1 and nl[0]["attrs"]["named_tp_rank"] == 1
    assert of_kind(rows, "nccl_info")[0]["host"] == "sglang-0"


def test_19_rank_dead_exit_code_multimodal_prefix():
    (dead,) = of_kind(events("19_"), "rank_dead")
    assert (dead["tp_rank"], dead["code"], dead["line_end"] - dead["line"]) == (0, -9, 1)
    assert dead["ts_local"] is None and dead["attrs"]["stamp"] == "12-11 17:52:52"


def test_21_multinode_weight_load():
    rows = events("21_")
    begins = of_kind(rows, "weight_load_begin")
    assert sorted(r["tp_rank"] for r in begins) == list(range(24, 32))
    ends = {r["tp_rank"]: r for r in of_kind(rows, "weight_load_end")}
    assert ends[26]["avail_bytes"] == gib(37.21) and ends[24]["avail_bytes"] == gib(37.23)
    assert ends[26]["bytes"] is None  # v0.4.0-0.4.3: no mem usage yet


def test_22_compose_prefix():
    rows = events("22_")
    v = of_kind(rows, "version")[0]
    assert v["attrs"] == {"component": "nccl", "version": "2.27.3", "container": "sglang-1"}
    assert v["tp_rank"] == 0


def test_23_v0518_capture_and_glued_sizing():
    rows = events("23_")
    begin = of_kind(rows, "cuda_graph_begin")[0]
    assert begin["attrs"]["bs"] == [1, 2, 4, 8, 12, 16, 24, 32] and begin["avail_bytes"] == gib(7.10)
    sizing = of_kind(rows, "kv_sizing")[0]
    assert (sizing["tokens"], sizing["avail_bytes"]) == (2980168, gib(6.95))
    assert sizing["attrs"]["max_running_requests"] == 4096


def test_24_tp1_without_rank_prefix():
    rows = events("24_")
    end = of_kind(rows, "weight_load_end")[0]
    assert end["rank"] is None and (end["avail_bytes"], end["bytes"]) == (gib(163.13), gib(14.53))
    assert of_kind(rows, "scheduler_exception")[0]["line"] == 13


def test_25_v02_server_args_and_gpu_id_prefix():
    rows = events("25_")
    sa = of_kind(rows, "server_args")[0]
    args = sa["attrs"]["args"]
    assert sa["attrs"]["truncated"] is False
    assert (args["tp_size"], args["mem_fraction_static"], args["additional_ports"]) == (1, 0.89, [30001, 30002, 30003, 30004])
    begin = of_kind(rows, "weight_load_begin")[0]
    assert (begin["gpu"], begin["avail_bytes"]) == (0, gib(78.94))

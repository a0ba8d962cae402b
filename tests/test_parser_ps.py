"""ps parser: the collector's -eo layout, ps aux, ps -ef, header-less rows, SGLang roles."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shared_data import SHARED, SKIP_REASON

from parsers import fuser, ps
from parsers.schema import NotThisFormat

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "host"


def by_pid(result):
    return {row["pid"]: {**row, "a": json.loads(row["attrs"])} for row in result.events.iter_rows(named=True)}


def test_collector_layout_every_field():
    r = ps.parse((FIX / "ps_eo.txt").read_text(), "host/ps.txt")
    assert (r.lines, r.recognized, r.unrecognized) == (10, 10, 0)
    rows = by_pid(r)
    assert sorted(rows) == [1, 2, 812, 41207, 41290, 41300, 41303, 41400, 50001]
    main = rows[41207]
    assert (main["kind"], main["source"], main["line"], main["comm"]) == ("process", "ps", 5, "python3")
    assert main["used_bytes"] == 2097152 * 1024 and main["seconds"] == 3600.0
    assert main["a"]["vsz_bytes"] == 9437184 * 1024 and main["a"]["ppid"] == 1
    assert main["a"]["start"] == "2026-11-29T08:50:41" and main["a"]["state"] == "S" and main["a"]["stat"] == "Sl"
    assert main["a"]["sglang_role"] == "launch_server"
    assert main["a"]["args"].startswith("python3 -m sglang.launch_server --model-path /models/Kimi-K2")
    s0, s3 = rows[41300], rows[41303]
    assert (s0["comm"], s0["rank"], s0["tp_rank"], s0["dp_rank"]) == ("sglang::schedul", "TP0", 0, None)
    assert (s3["rank"], s3["tp_rank"], s3["dp_rank"], s3["a"]["state"]) == ("DP1 TP3", 3, 1, "D")
    assert s3["used_bytes"] == 97000000 * 1024
    assert rows[41290]["a"]["sglang_role"] == "detokenizer"
    zombie = rows[41400]
    assert zombie["a"]["state"] == "Z" and zombie["a"]["zombie"] is True and zombie["used_bytes"] == 0
    assert zombie["a"]["start"] == "2026-11-01T08:50:52"  # "Nov  1": the double space of lstart
    assert rows[2]["a"]["kernel_thread"] is True and rows[812]["a"]["state"] == "I"
    assert rows[812]["comm"] == "kworker/R-nvme-"


def test_ps_aux_layout():
    rows = by_pid(ps.parse((FIX / "ps_aux.txt").read_text()))
    s = rows[41300]
    assert s["a"]["user"] == "alice" and s["used_bytes"] == 98765432 * 1024 and s["seconds"] is None
    assert s["a"]["vsz_bytes"] == 123456789 * 1024 and s["tp_rank"] == 0 and s["a"]["sglang_role"] == "scheduler"
    assert s["a"]["start_text"] == "08:50" and "start" not in s["a"]
    assert rows[41400]["comm"] == "python3" and rows[41400]["a"]["state"] == "Z"
    assert rows[1]["comm"] == "init" and rows[2]["comm"] == "kthreadd"


def test_ps_ef_layout():
    rows = by_pid(ps.parse((FIX / "ps_ef.txt").read_text()))
    assert rows[41301]["a"]["ppid"] == 41207 and rows[41301]["tp_rank"] == 1
    assert rows[41302]["a"]["sglang_role"] == "data_parallel_controller"
    assert rows[41207]["a"]["user"] == "alice" and rows[41207]["used_bytes"] is None


def test_etime_form_and_more_rank_parts():
    text = ("  PID  PPID STAT ELAPSED   RSS COMMAND\n"
            "  900     1 Sl   1-02:03:04 2048 sglang::scheduler_DP0_PP1_TP3_EP3\n"
            "  901     1 Sl   05:06  1024 sglang::scheduler_ATTN_CP5_TP5\n"
            "  902     1 Sl   05:06  1024 sglang::scheduler\n")
    rows = by_pid(ps.parse(text))
    assert rows[900]["seconds"] == 93784.0 and rows[900]["used_bytes"] == 2048 * 1024
    assert (rows[900]["dp_rank"], rows[900]["pp_rank"], rows[900]["tp_rank"], rows[900]["ep_rank"]) == (0, 1, 3, 3)
    assert rows[900]["rank"] == "DP0 PP1 TP3 EP3"
    assert rows[901]["rank"] == "ATTN_CP5 TP5" and rows[901]["tp_rank"] == 5
    assert rows[902]["a"]["sglang_role"] == "scheduler" and rows[902]["tp_rank"] is None


def test_headerless_rows_by_shape_and_by_command():
    aux = "alice      41300 99.0 20.0 123456789 98765432 pts/3 Rl 08:50  59:01 sglang::scheduler_TP7\n"
    row = ps.parse(aux).events.row(0, named=True)
    assert (row["pid"], row["tp_rank"], row["used_bytes"]) == (41300, 7, 98765432 * 1024)
    eo = " 41207 1 Sl Sun Nov 29 08:50:41 2026 3600 2097152 9437184 python3 python3 -m sglang.launch_server\n"
    row = ps.parse(eo).events.row(0, named=True)
    assert (row["pid"], row["seconds"], row["comm"]) == (41207, 3600.0, "python3")
    custom = "41207 2097152 python3\n"
    row = ps.parse(custom, command="ps -o pid=,rss=,comm= -p 41207").events.row(0, named=True)
    assert (row["pid"], row["used_bytes"], row["comm"]) == (41207, 2097152 * 1024, "python3")


def test_unrecognized_lines_are_counted_and_kept():
    text = (FIX / "ps_ef.txt").read_text() + "this is not a process line\n"
    r = ps.parse(text)
    assert (r.lines, r.recognized, r.unrecognized) == (6, 5, 1)
    assert r.unrecognized_examples == [(6, "this is not a process line")]


def test_sniff_and_not_this_format():
    assert ps.sniff((FIX / "ps_eo.txt").read_text()) >= 0.9
    assert ps.sniff((FIX / "ps_aux.txt").read_text()) >= 0.9
    assert ps.sniff((FIX / "fuser_v.txt").read_text()) == 0.0
    assert fuser.sniff((FIX / "ps_eo.txt").read_text()) == 0.0
    assert ps.sniff("|  GPU   GI   CI        PID   Type   Process name    GPU Memory |\n") == 0.0
    with pytest.raises(NotThisFormat):
        ps.parse("Mem:  449  318  131\nSwap: 0 0 0\n")
    assert ps.parse("").events.height == 0
    assert ps.parse("    PID    PPID STAT COMMAND\n").events.height == 0  # header only: no processes


@pytest.mark.parametrize("text", [
    "  PID  PPID STAT ELAPSED   RSS COMMAND\r\n  900     1 Sl   12  2048 python3\r\n",
    "  PID  PPID STAT ELAPSED   RSS COMMAND\n  900\n",
    "  PID  PPID STAT ELAPSED   RSS COMMAND\n  900  1 S 1 99999999999999999999999 x\n",
    "PID STARTED COMMAND\n1 Sun Nov 99 99:99:99 2026 x\n",
    "PID COMMAND\n1 " + "x" * 1_000_000 + "\n",
    "\0PID\0COMMAND\n",
])
def test_bad_input_never_raises_other_errors(text):
    with contextlib.suppress(NotThisFormat):
        ps.parse(text)
    ps.sniff(text)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("PIDPRSSVZCOMANTUE 0123456789:-[]<>\n\r\0SunNov%")), max_size=300))
def test_fuzz_never_raises_other_errors(text):
    with contextlib.suppress(NotThisFormat):
        ps.parse(text)
    ps.sniff(text)


def test_real_samples_are_not_ps():
    """Real outputs of other programs never sniff as ps; a real ps listing (an incident's ``ps*.txt``)
    always does."""
    if not SHARED.is_dir():
        pytest.skip(SKIP_REASON)
    for p in sorted(SHARED.rglob("*")):
        if p.is_file() and p.suffix != ".toml":
            score = ps.sniff(p.read_text(errors="replace")[:65536])
            if p.name.startswith("ps") and p.parent.parent.name == "incidents":
                assert score >= 0.5, p
            else:
                assert score < 0.5, p


def test_comm_with_a_space_is_read_by_its_fixed_width():
    text = ("    PID    PPID STAT                  STARTED ELAPSED   RSS    VSZ COMMAND         COMMAND\n"
            "   2001       1 Ss   Fri Nov 20 01:02:03 2026  805118  4000  20000 tmux: server    tmux new -s sglang\n"
            "    900       1 S    Fri Nov 20 01:02:03 2026  805118  1000   2000 sshd            sshd: alice [priv]\n")
    rows = by_pid(ps.parse(text))
    assert (rows[2001]["comm"], rows[2001]["a"]["args"]) == ("tmux: server", "tmux new -s sglang")
    assert (rows[900]["comm"], rows[900]["a"]["args"]) == ("sshd", "sshd: alice [priv]")

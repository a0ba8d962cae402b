"""Engine process titles (SGLang, vLLM, Ray) in ps, nvidia-smi and fuser rows; ps fragments as pasted
(with or without header) keeping PPID and the title; engine children reparented to init.

Our own text in the real formats (procps, psmisc, nvidia-smi); titles as the engines set them
(sglang_formats.md "Process titles", vllm_formats.md §1.6).
"""

from __future__ import annotations

import json

import pytest

from parsers import fuser, ps, registry
from parsers.nvidia_smi import csv as nvidia_smi_csv
from parsers.nvidia_smi import table as nvidia_smi_table
from parsers.proc_titles import process_identity


def rows(result) -> list[dict]:
    return [{**r, "a": json.loads(r["attrs"])} for r in result.events.iter_rows(named=True)]


@pytest.mark.parametrize(("comm", "args", "want"), [
    ("sglang::schedul", "sglang::scheduler_DP3_TP3_EP3",
     {"engine": "sglang", "sglang_role": "scheduler", "rank": "DP3 TP3 EP3", "dp_rank": 3, "tp_rank": 3, "ep_rank": 3}),
    ("", "sglang::scheduler_TP0", {"engine": "sglang", "sglang_role": "scheduler", "rank": "TP0", "tp_rank": 0}),
    ("sglang::detokenizer", "", {"engine": "sglang", "sglang_role": "detokenizer"}),
    ("sglang::schedul", "", {"engine": "sglang", "sglang_role": "scheduler", "title_truncated": True}),
    ("sglang::data_pa", "", {"engine": "sglang", "sglang_role": "data_parallel_controller", "title_truncated": True}),
    ("python3", "/usr/bin/python3 -m sglang.launch_server --model-path m --tp 8",
     {"engine": "sglang", "sglang_role": "launch_server"}),
    ("VLLM::EngineCore", "", {"engine": "vllm", "vllm_role": "engine_core"}),
    ("VLLM::EngineCor", "", {"engine": "vllm", "vllm_role": "engine_core", "title_truncated": True}),
    ("", "VLLM::EngineCore_DP1", {"engine": "vllm", "vllm_role": "engine_core", "rank": "DP1", "dp_rank": 1}),
    ("", "VLLM::DPEngineCore_2", {"engine": "vllm", "vllm_role": "engine_core", "rank": "DP2", "dp_rank": 2}),
    ("", "VLLM::Worker_TP0", {"engine": "vllm", "vllm_role": "worker", "rank": "TP0", "tp_rank": 0}),
    ("", "VLLM::Worker_PP1_TP3", {"engine": "vllm", "vllm_role": "worker", "rank": "PP1 TP3", "pp_rank": 1, "tp_rank": 3}),
    ("VLLM::Worker_TP", "", {"engine": "vllm", "vllm_role": "worker", "title_truncated": True}),
    ("VLLM::Worker", "", {"engine": "vllm", "vllm_role": "worker"}),
    ("", "VLLM::APIServer_1", {"engine": "vllm", "vllm_role": "api_server", "api_server_index": 1}),
    ("VLLM::DPCoordin", "", {"engine": "vllm", "vllm_role": "dp_coordinator", "title_truncated": True}),
    ("vllm", "/opt/venv/bin/python3 /opt/venv/bin/vllm serve org/model --tensor-parallel-size 4",
     {"engine": "vllm", "vllm_role": "api_server"}),
    ("", "ray::RayWorkerWrapper", {"engine": "vllm", "vllm_role": "ray_worker", "ray_actor": "RayWorkerWrapper"}),
    ("ray::RayWorkerW", "", {"engine": "vllm", "vllm_role": "ray_worker", "ray_actor": "RayWorkerWrapper",
                             "title_truncated": True}),
    ("", "ray::IDLE", {"ray_actor": "IDLE"}),
    ("python3", "python3 train.py --lr 1e-4", {}),
    ("pt_main_thread", "", {}),
])
def test_process_identity(comm, args, want):
    assert process_identity(comm, args) == want


# --- ps fragments as pasted ----------------------------------------------------------------------

EO_HEADER = """    PID    PPID STAT     ELAPSED   RSS COMMAND
  61200    1840 Sl     02:11:09 2301212 python3 -m sglang.launch_server --model-path /models/m --tp 4 --dp 4
  61310       1 Sl     02:10:58 9123400 sglang::scheduler_DP0_TP0_EP0
  61311       1 Dl     02:10:58 9120012 sglang::scheduler_DP1_TP1_EP1
  61390   61200 S      02:10:40 410220 sglang::detokenizer
"""

EO_BARE = "\n".join(EO_HEADER.splitlines()[1:]) + "\n"

EF_BARE = """root        1       0  0 Nov29 ?        00:00:41 /sbin/init splash
root    61310       1 99 Nov29 ?        1-04:11:07 sglang::scheduler_TP0
root    61311       1 99 Nov29 ?        1-04:11:02 sglang::scheduler_TP1
"""

AUX_BARE = """root       61310 99.1  1.7 96420112 9123400 ?   Rl   Nov29 1690:11 VLLM::Worker_TP0
root       61311 98.7  1.7 96420100 9120012 ?   Rl   Nov29 1688:40 VLLM::Worker_TP1
"""


@pytest.mark.parametrize("text", [EO_HEADER, EO_BARE], ids=["header", "no-header"])
def test_eo_pid_ppid_stat_etime_rss_args_with_or_without_header(text):
    assert registry.best_format(text)[0] == "ps"
    r = ps.parse(text)
    got = {x["pid"]: x for x in rows(r)}
    assert r.unrecognized == 0 and set(got) == {61200, 61310, 61311, 61390}
    sched = got[61311]
    assert sched["a"]["ppid"] == 1 and sched["a"]["state"] == "D"
    assert (sched["rank"], sched["dp_rank"], sched["tp_rank"]) == ("DP1 TP1 EP1", 1, 1)
    assert sched["used_bytes"] == 9120012 * 1024 and sched["seconds"] == 2 * 3600 + 10 * 60 + 58
    assert got[61390]["a"]["sglang_role"] == "detokenizer" and got[61390]["a"]["ppid"] == 61200
    assert got[61200]["a"]["sglang_role"] == "launch_server"


def test_ps_ef_fragment_without_header_marks_orphans_when_pid_1_is_init():
    r = ps.parse(EF_BARE)
    got = {x["pid"]: x["a"] for x in rows(r)}
    assert got[61310]["ppid"] == 1 and got[61310]["reparented_to_init"] is True and got[61310]["orphaned"] is True
    assert "orphaned" not in got[1] and "reparented_to_init" not in got[1]


def test_pid_1_being_the_launcher_is_a_container_not_an_orphan():
    text = """    PID    PPID STAT     ELAPSED   RSS COMMAND
      1       0 Ss     02:11:09 2301212 python3 -m sglang.launch_server --model-path /models/m --tp 2
     88       1 Sl     02:10:58 9123400 sglang::scheduler_TP0
"""
    got = {x["pid"]: x["a"] for x in rows(ps.parse(text))}
    assert got[88]["reparented_to_init"] is True and got[88]["orphaned"] is False


def test_without_pid_1_in_the_fragment_only_the_reparenting_is_said():
    got = {x["pid"]: x["a"] for x in rows(ps.parse(EO_BARE))}
    assert got[61310]["reparented_to_init"] is True and "orphaned" not in got[61310]
    assert "reparented_to_init" not in got[61390]  # its parent is alive


def test_ps_aux_fragment_with_vllm_workers():
    got = rows(ps.parse(AUX_BARE))
    assert [(x["pid"], x["tp_rank"], x["a"]["engine"], x["a"]["vllm_role"]) for x in got] == [
        (61310, 0, "vllm", "worker"), (61311, 1, "vllm", "worker")]


def test_ambiguous_header_less_columns_are_not_guessed():
    # pid, ppid, stat, then one number: rss or etimes? Not read rather than read wrong.
    r = ps.parse("  61310       1 Sl 9123400 sglang::scheduler_TP0\n  61311  1 Sl 9120012 sglang::scheduler_TP1\n"
                 "   PID  PPID STAT   RSS COMMAND\n  61312  1 Sl 9120000 sglang::scheduler_TP2\n")
    assert [x["pid"] for x in rows(r)] == [61312] and r.unrecognized == 2


def test_ps_signature_does_not_claim_other_tables():
    for text in ("    0      10291     C     99      7      -      -    gpu_burn\n",
                 "Mem:            449         318         130           0           0         130\n",
                 "[2026-11-29 08:50:41 TP0] Decode batch. #running-req: 12\n"):
        assert ps.sniff(text) < 0.5


# --- titles in nvidia-smi and fuser rows ---------------------------------------------------------

def test_titles_in_nvidia_smi_table_rows():
    text = """|    0   N/A  N/A           61310      C   sglang::scheduler_DP0_TP0_EP0        96413MiB |
|    1   N/A  N/A           71310      C   VLLM::Worker_TP1                     70113MiB |
|    2   N/A  N/A           81310      C   ray::RayWorkerWrapper                70113MiB |
"""
    got = rows(nvidia_smi_table.parse(text))
    assert [(x["gpu"], x["a"].get("engine"), x["tp_rank"]) for x in got] == [(0, "sglang", 0), (1, "vllm", 1),
                                                                            (2, "vllm", None)]
    assert got[2]["a"]["vllm_role"] == "ray_worker"


def test_titles_in_compute_apps_csv_rows():
    text = "pid, process_name, used_gpu_memory [MiB]\n61310, sglang::scheduler_TP3, 96413 MiB\n"
    (x,) = rows(nvidia_smi_csv.parse(text))
    assert (x["a"]["sglang_role"], x["tp_rank"], x["rank"]) == ("scheduler", 3, "TP3")


def test_truncated_comm_in_fuser_rows():
    text = ("                     USER        PID ACCESS COMMAND\n"
            "/dev/nvidia2:        root      61312 F...m sglang::schedul\n"
            "                     root      71310 F...m VLLM::Worker_TP\n")
    got = rows(fuser.parse(text))
    assert [(x["a"]["engine"], x["a"].get("title_truncated")) for x in got] == [("sglang", True), ("vllm", True)]
    assert all(x["tp_rank"] is None for x in got)  # the digits were cut: the rank is not made up


def test_truncated_comm_in_kernel_oom_and_xid_lines():
    from parsers import kernel

    text = ("[ 5021.330122] NVRM: Xid (PCI:0000:1b:00): 31, pid=61310, name=sglang::schedul, Ch 00000008, "
            "intr 00000000. MMU Fault\n"
            "[ 6000.100000] Out of memory: Killed process 71310 (VLLM::Worker_TP) total-vm:1000kB, anon-rss:900kB, "
            "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:100kB oom_score_adj:0\n")
    got = {x["kind"]: x["a"] for x in rows(kernel.parse(text))}
    assert (got["xid"]["engine"], got["xid"]["sglang_role"]) == ("sglang", "scheduler")
    assert (got["oom_kill"]["engine"], got["oom_kill"]["vllm_role"], got["oom_kill"]["title_truncated"]) == \
        ("vllm", "worker", True)


TOP_B = """top - 08:50:41 up 3 days,  2:11,  1 user,  load average: 8.01, 8.02, 8.00
Tasks: 812 total,   2 running, 808 sleeping,   0 stopped,   0 zombie
%Cpu(s):  3.1 us,  0.4 sy,  0.0 ni, 96.5 id,  0.0 wa,  0.0 hi,  0.0 si,  0.0 st
MiB Mem : 515603.2 total, 123456.7 free, 325678.9 used,  66467.6 buff/cache
MiB Swap:      0.0 total,      0.0 free,      0.0 used. 180987.2 avail Mem

    PID USER      PR  NI    VIRT    RES    SHR S  %CPU  %MEM     TIME+ COMMAND
  61310 root      20   0   95.0g  40.2g   1.2g D   0.0   7.8 100:11.22 sglang::schedul
   2041 root      rt   0  280012  21504  10240 S   0.3   0.0   5:12.01 nvidia-persiste
"""


def test_top_batch_rows_with_truncated_comm_and_suffixed_sizes():
    assert registry.best_format(TOP_B)[0] == "ps"
    r = ps.parse(TOP_B)
    got = {x["pid"]: x for x in rows(r)}
    sched = got[61310]
    assert sched["a"]["state"] == "D" and sched["a"]["sglang_role"] == "scheduler" and sched["a"]["title_truncated"]
    assert sched["used_bytes"] == int(40.2 * (1 << 30)) and sched["a"]["sizes_rounded"] is True
    assert got[2041]["used_bytes"] == 21504 * 1024 and "sizes_rounded" not in got[2041]["a"]
    assert r.unrecognized == 5  # top's summary lines are not process rows: counted, not hidden

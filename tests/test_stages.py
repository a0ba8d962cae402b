"""The start-up stages as facts (forensics/facts/stages.py) and the rules that place a failure or a stall by them."""

from __future__ import annotations

import json

from test_detectors_common import fired, timeline

from forensics.detectors import run_all
from forensics.facts.stages import Reached, furthest, nodes_behind, ranks_behind, reached_by_rank


def _row(kind: str, rank: str | None = None, **extra) -> dict:
    r = {"kind": kind, **extra}
    if rank is not None:
        r.update(rank=rank, tp_rank=int(rank[2:]))
    return r


def test_each_rank_has_its_furthest_stage_and_the_ranks_behind_are_named():
    run = [{**_row("dist_init_begin", f"TP{r}"), "file": "a", "line": r + 1} for r in range(4)]
    run += [{**_row("weight_load_begin", f"TP{r}"), "file": "a", "line": 10 + r} for r in range(4)]
    run += [{**_row("weight_load_end", f"TP{r}"), "file": "a", "line": 20 + r} for r in (0, 1, 3)]
    got = reached_by_rank(run)
    assert got["TP2"].stage == "loading the weights" and got["TP0"].stage.startswith("the post-load barrier")
    assert list(ranks_behind(run)) == ["TP2"]
    assert furthest(run).row["line"] == 23  # the latest row of the furthest stage


def test_the_nccl_version_line_marks_the_communicator_stage():
    run = [{**_row("dist_init_begin", "TP0"), "file": "a", "line": 1},
           {"kind": "version", "attrs": json.dumps({"component": "nccl"}), "file": "a", "line": 2},
           {"kind": "version", "attrs": json.dumps({"component": "sglang"}), "file": "a", "line": 3}]
    assert furthest(run).row["line"] == 2


def test_nodes_behind_are_those_short_of_the_furthest_node():
    row = {"file": "x", "line": 1}
    reached = {"n0": Reached(40, "the post-load barrier", "", row), "n1": Reached(30, "loading the weights", "", row),
               "n2": Reached(40, "the post-load barrier", "", row)}
    assert list(nodes_behind(reached)) == ["n1"]
    assert nodes_behind({"n0": reached["n0"], "n2": reached["n2"]}) == {}


def test_an_unexplained_death_names_the_stage_it_happened_in():
    tl = timeline(_row("dist_init_begin", "TP0", ts_local=None),
                  {"kind": "version", "attrs": {"component": "nccl", "version": "2.21.5"}},
                  _row("scheduler_exception", "TP0", text="Scheduler hit an exception: Traceback (most recent call "
                       "last):\n  File \"/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py\", line 9, in x"))
    findings, root = run_all(tl)
    assert root == "SGL-RUN-001"
    f = fired(findings)["SGL-RUN-001"]
    assert "the NCCL communicator's set-up" in f.summary
    assert "its exception line would decide" in (f.confidence_reason or "")


def test_remote_engine_cores_that_never_connect_are_nodes_that_never_reached_the_front_end(tmp_path):
    from forensics.analysis import analyse

    log = tmp_path / "vllm.log"
    log.write_text(
        "(APIServer pid=300) INFO 08-04 12:00:00 [api_server.py:1800] vLLM API server version 0.10.2\n"
        "(EngineCore_DP0 pid=410) INFO 08-04 12:00:40 [gpu_model_runner.py:2007] Model loading took 14.2 GiB and "
        "30.10 seconds\n"
        + "".join(f"(APIServer pid=300) DEBUG 08-04 12:{m:02d}:{sec:02d} [v1/engine/utils.py:776] Waiting for 0 local, "
                  "2 remote core engine proc(s) to connect.\n" for m, sec in ((1, 0), (1, 10), (12, 0), (12, 10))),
        encoding="utf-8")
    _, doc = analyse([log], tz="UTC", quiet=True)
    f = next(f for f in doc["findings"] if f["rule_id"] == "SGL-NCCL-010")
    assert doc["root_cause"] == "SGL-NCCL-010" and "to connect at all" in f["summary"], f["summary"]


def _stall_actions(tmp_path, name: str, text: str):
    from forensics.analysis import analyse

    log = tmp_path / name
    log.write_text(text, encoding="utf-8")
    _, doc = analyse([log], tz="UTC", quiet=True)
    f = next(f for f in doc["findings"] if f["rule_id"] in ("SGL-NCCL-010", "SGL-RUN-003"))
    return f, " ".join(f["remediation"]["actions"])


_SGL_TP2 = ("[2025-03-04 10:00:00] server_args=ServerArgs(model_path='/models/m', tp_size=2, nnodes=1, node_rank=0)\n"
            + "".join(f"[2025-03-04 10:00:10 TP{r}] Init torch distributed begin.\n" for r in (0, 1))
            + "".join(f"[2025-03-04 10:00:12 TP{r}] Load weight begin. avail mem=78.50 GB\n" for r in (0, 1)))


def test_a_log_ending_in_the_load_points_at_host_ram_as_well_as_storage(tmp_path):
    f, said = _stall_actions(tmp_path, "server.log", _SGL_TP2)
    assert "loading the weights" in f["summary"] and "host RAM" in f["summary"]
    assert "memory.current" in said and "free -g" in said and "dd" in said


def test_a_log_ending_in_capture_names_the_engines_eager_switch(tmp_path):
    sgl = _SGL_TP2 + "".join(f"[2025-03-04 10:02:00 TP{r}] Load weight end. type=X, dtype=torch.bfloat16, avail mem="
                             "60.00 GB, mem usage=18.50 GB.\n" for r in (0, 1)) + \
        "".join(f"[2025-03-04 10:02:05 TP{r}] Capture cuda graph begin. This can take up to several minutes. avail "
                "mem=11.10 GB\n" for r in (0, 1))
    f, said = _stall_actions(tmp_path, "server.log", sgl)
    assert "CUDA graph capture" in f["summary"] and "--disable-cuda-graph" in said and "--enforce-eager" not in said
    _, after_load = _stall_actions(tmp_path, "server2.log", _SGL_TP2)
    assert "--disable-cuda-graph" not in after_load  # only capture is isolated by eager mode


def test_vllm_capture_bar_is_capture_and_names_enforce_eager(tmp_path):
    head = ("INFO 03-04 10:00:00 [api_server.py:1040] vLLM API server version 0.9.1\n"
            "INFO 03-04 10:00:00 [cli_args.py:325] non-default args: {'model': '/m', 'tensor_parallel_size': 2}\n"
            + "".join(f"(VllmWorker rank={r} pid=10{r}) INFO 03-04 10:01:33 [gpu_model_runner.py:1624] Model loading "
                      "took 16.10 GiB and 81.50 seconds\n" for r in (0, 1))
            + "INFO 03-04 10:01:51 [kv_cache_utils.py:715] GPU KV cache size: 822,000 tokens\n")
    f, said = _stall_actions(tmp_path, "vllm.log", head + "Capturing CUDA graphs:  40%|████      | 27/67 [00:10<00:15,"
                             "  2.60it/s]\n")
    assert "CUDA graph capture" in f["summary"] and "--enforce-eager" in said and "grep -i vllm" in said


def test_sglang_dist_init_across_nodes_names_the_advertised_address(tmp_path):
    log = ("[2025-03-04 10:00:00] server_args=ServerArgs(model_path='/m', tp_size=4, nnodes=2, node_rank=1, "
           "dist_init_addr='10.0.0.1:5000')\n"
           + "".join(f"[2025-03-04 10:00:10 TP{r}] Init torch distributed begin.\n" for r in (2, 3)))
    f, said = _stall_actions(tmp_path, "server.log", log)
    assert "10.0.0.1:5000" in f["summary"] and "SGLANG_HOST_IP" in said and "nc -zv" in said
    one = log.replace("nnodes=2, node_rank=1", "nnodes=1, node_rank=0")
    _, said1 = _stall_actions(tmp_path, "one.log", one)
    assert "SGLANG_HOST_IP" not in said1

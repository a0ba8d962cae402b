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

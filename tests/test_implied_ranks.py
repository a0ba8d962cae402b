"""Configuration findings name the ranks their launch started (forensics.detectors.implied_ranks)."""

from __future__ import annotations

import polars as pl

from forensics.detectors.implied_ranks import fill_implied_ranks
from forensics.model import Evidence, Finding, Timeline
from parsers import launch


def _timeline(command: str) -> Timeline:
    return Timeline(events=launch.parse(command + "\n", "launch.sh").events)


def _finding(category: str, ranks: list[int] | None = None) -> Finding:
    return Finding(rule_id="X", category=category, severity="high", title="t", summary="s", confidence="high",
                   evidence=[Evidence(file="launch.sh", line=1, text="x")], ranks=list(ranks or []))


def test_tp4_names_ranks_0_to_3_on_a_configuration_finding():
    tl = _timeline("python -m sglang.launch_server --model-path /m --tp 4 --mem-fraction-static 0.9")
    kv, xid, named = _finding("kv_cache_capacity"), _finding("xid"), _finding("cuda_graph_headroom", [2])
    fill_implied_ranks(tl, [kv, xid, named])
    assert kv.ranks == [0, 1, 2, 3] and "tp 4" in kv.figures["ranks_from"]
    assert xid.ranks == [] and named.ranks == [2]


def test_the_second_node_of_a_two_node_launch_names_its_own_ranks():
    tl = _timeline("python -m sglang.launch_server --model-path /m --tp 16 --nnodes 2 --node-rank 1")
    f = _finding("per_rank_overallocation")
    fill_implied_ranks(tl, [f])
    assert f.ranks == list(range(8, 16))


def test_vllm_tensor_and_pipeline_parallel():
    tl = _timeline("vllm serve /m --tensor-parallel-size 2 --pipeline-parallel-size 2")
    f = _finding("weights_do_not_fit")
    fill_implied_ranks(tl, [f])
    assert f.ranks == [0, 1, 2, 3]


def test_without_a_launch_nothing_is_guessed():
    f = _finding("kv_cache_capacity")
    fill_implied_ranks(Timeline(events=pl.DataFrame()), [f])
    assert f.ranks == []

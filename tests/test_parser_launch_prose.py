"""Launch settings and stated figures read from sentences (parsers/launch_prose.py).

Our own sentences, in the ways people write tickets and post-mortems: what ran counts (at prose
confidence), what is only planned, advised, asked or rejected is kept apart as discussion.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsers.launch import prose as launch_prose
from parsers.units import GIB, MIB


def rows(text: str, kind: str | None = None) -> list[dict]:
    ev = launch_prose.parse(text, "t.txt").events
    out = []
    for r in ev.iter_rows(named=True):
        r["a"] = json.loads(r["attrs"]) if r["attrs"] else {}
        if kind is None or r["kind"] == kind:
            out.append(r)
    return out


def configs(text: str) -> list[dict]:
    return [r["a"]["flags"] for r in rows(text, "launch_command")]


def discussed(text: str) -> list[tuple[str, str]]:
    return [(r["a"]["flag"], r["a"]["value"]) for r in rows(text, "launch_flag_discussed")]


# ---------------------------------------------------------------------------------------------
# what ran


@pytest.mark.parametrize("sentence, flag, value", [
    ("We started the server with --tp-size 4 yesterday.", "--tp-size", "4"),
    ("The pod ran with --mem-fraction-static=0.88 for a week.", "--mem-fraction-static", "0.88"),
    ("It was deployed using mem_fraction_static=0.91 on the new nodes.", "--mem-fraction-static", "0.91"),
    ("The box came up with hicache-size=64 per rank.", "--hicache-size", "64"),
    ("Our launch line had `--tp 2` in it.", "--tp-size", "2"),
    ("We lowered --mem-fraction-static to 0.8 and relaunched.", "--mem-fraction-static", "0.8"),
    ("It started fine with --kv-cache-dtype fp8_e5m2 on Hopper.", "--kv-cache-dtype", "fp8_e5m2"),
    ("The engine was running with gpu_memory_utilization=0.95.", "--gpu-memory-utilization", "0.95"),
])
def test_stated_flags_count_at_prose_confidence(sentence, flag, value) -> None:
    got = rows(sentence, "launch_command")
    assert len(got) == 1, got
    a = got[0]["a"]
    assert a["flags"][flag] == value
    assert a["confidence"] == "prose" and a["launcher"] == "prose" and a["argv"] == []
    assert a["mentions"][flag]["line"] == 1 and sentence[:20] in a["mentions"][flag]["text"]
    assert not discussed(sentence)


def test_vllm_only_flags_name_the_engine() -> None:
    a = rows("The service ran with --gpu-memory-utilization 0.9 and --max-model-len 32768.", "launch_command")[0]["a"]
    assert a["engine"] == "vllm"
    assert a["flags"] == {"--gpu-memory-utilization": "0.9", "--max-model-len": "32768"}


def test_other_programs_flags_are_not_server_settings() -> None:
    text = "We ran nvidia-smi --query-gpu=index,memory.used --format=csv,noheader and free -g --si to check."
    assert configs(text) == [] and discussed(text) == []


def test_a_flag_named_without_a_value_is_no_setting() -> None:
    text = "The --hicache-size parameter is specified per rank, which the docs do not say."
    assert configs(text) == []


# ---------------------------------------------------------------------------------------------
# what was only discussed


@pytest.mark.parametrize("sentence, cue_part", [
    ("The next attempt will use --hicache-size 48.", "will"),
    ("We could try --mem-fraction-static 0.85 if it happens again.", "try"),
    ("Maybe --tp-size 4 is enough for this model.", "maybe"),
    ("Should we set --mem-fraction-static 0.8?", "question"),
    ("I'd suggest --hicache-size 40 for TP8 on this host.", "suggest"),
    ("Use 48 instead of --hicache-size 300 next time.", "instead of"),
    ("The plan was to back off to mem_fraction_static=0.85 after the crash.", "back off to"),
    ("The plan is to lower --mem-fraction-static to 0.85.", "lower"),
    ("In hindsight --hicache-size 37.5 would have given 300 GB in total.", "would"),
    ("If you run --tp-size 8 each rank pins its own pool.", "if"),
    ("We never used --enable-hierarchical-cache on that cluster.", "never used"),
    # the engines' own advice, in the imperative
    ("Input length (9000 tokens) exceeds the maximum allowed length (4090 tokens). Use a shorter input or enable "
     "--allow-auto-truncate.", "or enable"),
    ("Enable --enable-mixed-chunk to overlap the two.", "imperative"),
    ("Please set --max-running-requests 64 to bound the batch.", "please set"),
])
def test_discussion_is_not_the_configuration(sentence, cue_part) -> None:
    assert configs(sentence) == []
    got = rows(sentence, "launch_flag_discussed")
    assert got and got[0]["a"]["discussed"] is True and got[0]["a"]["confidence"] == "prose"
    assert cue_part in got[0]["a"]["cue"], got[0]["a"]["cue"]


def test_a_forward_looking_sentence_frames_its_paragraph() -> None:
    text = ("The host is clean again and ready for the next attempt. With --hicache-size 40 the pools take "
            "320 GB, which leaves room.\n\nWe launched with --hicache-size 300 last night.\n")
    assert discussed(text) == [("--hicache-size", "40")]
    assert configs(text) == [{"--enable-hierarchical-cache": True, "--hicache-size": "300"}]


def test_past_ability_is_not_a_hypothesis() -> None:
    text = "The pool could only hold 90,000 tokens at --mem-fraction-static 0.8 on those cards."
    assert configs(text) == [{"--mem-fraction-static": "0.8"}]


# ---------------------------------------------------------------------------------------------
# several configurations


def test_a_changed_value_starts_the_next_configuration_and_keeps_the_rest() -> None:
    text = ("First we launched with --tp-size 8 and --hicache-size 300.\n"
            "It hung, so we tried again with --hicache-size 48.\n"
            "The second run kept --tp-size 8 as before.\n")
    got = rows(text, "launch_command")
    assert [r["a"]["flags"]["--hicache-size"] for r in got] == ["300", "48"]
    second = got[1]
    assert second["a"]["flags"]["--tp-size"] == "8"
    assert "--tp-size" in second["a"]["carried"] or second["a"]["mentions"]["--tp-size"]["line"] == 3
    assert second["line"] == 2
    runs = [(r["run"], r["a"]["args"].get("hicache_size")) for r in rows(text, "server_args")]
    assert runs == [(0, "300"), (1, "48")]


def test_hicache_size_implies_hicache_on() -> None:
    a = rows("The server started with --hicache-size 100.", "launch_command")[0]["a"]
    assert a["flags"]["--enable-hierarchical-cache"] is True
    assert a["implied"] == ["--enable-hierarchical-cache"]


def test_a_line_wrapped_sentence_keeps_each_flags_own_line() -> None:
    text = "We launched the server with --tp-size 2 and,\nafter some thought, --mem-fraction-static 0.9.\n"
    a = rows(text, "launch_command")[0]["a"]
    assert a["mentions"]["--tp-size"]["line"] == 1
    assert a["mentions"]["--mem-fraction-static"]["line"] == 2


# ---------------------------------------------------------------------------------------------
# stated figures


def test_memory_left_after_graph_capture_belongs_to_its_configuration() -> None:
    text = ("We started with --mem-fraction-static 0.9 and then with --mem-fraction-static 0.94.\n"
            "With 0.94 the log said only 0.6 GB was left after CUDA graph capture.\n")
    g = rows(text, "cuda_graph_end")
    assert len(g) == 1
    assert g[0]["avail_bytes"] == int(0.6 * GIB) and g[0]["run"] == 1
    assert g[0]["a"]["stated"] is True and g[0]["a"]["confidence"] == "prose" and "unit_assumed" in g[0]["a"]


def test_a_hypothetical_headroom_is_no_figure() -> None:
    assert rows("A higher fraction would leave only 0.5 GiB after graph capture.", "cuda_graph_end") == []


@pytest.mark.parametrize("sentence, gib", [
    ("The node has 1.5 TB of RAM and eight GPUs.", 1.5 * 1024),
    ("It is a machine with 768 GiB and two sockets.", 768),
    ("Everything ran on a 256 GB host in the lab.", 256),
    ("free showed 12 GB used out of 503 GB total.", 503),
])
def test_host_ram_capacity(sentence, gib) -> None:
    got = rows(sentence, "host_memory")
    assert [r["total_bytes"] for r in got] == [int(round(gib * GIB))]
    assert got[0]["used_bytes"] is None


@pytest.mark.parametrize("sentence", [
    "The ranks requested 2.4 TB of RAM in total.",
    "After the kill 300 GB of RAM was still allocated.",
    "Memory usage climbed to 420 GB of RAM within a minute.",
    "A host with 2 TB would fit this configuration.",
    "The 318 GB system RAM figure is what worried us.",
])
def test_used_requested_or_hypothetical_ram_is_no_capacity(sentence) -> None:
    assert rows(sentence, "host_memory") == []


def test_gpu_capacity_statement() -> None:
    got = rows("The cards are nearly full: 79,000 of their 81,559 MiB capacity are used.", "gpu_memory")
    assert [r["total_bytes"] for r in got] == [81559 * MIB]
    assert got[0]["gpu"] is None


def test_kill_commands_told_in_a_sentence() -> None:
    text = ("We cleaned up with pkill -9 -f launch_server and killall python3.\n"
            "Next time we would rather run fuser -k /dev/nvidia* first.\n")
    got = rows(text, "command")
    assert [r["a"]["command"] for r in got] == ["pkill -9 -f launch_server", "killall python3"]
    assert all(r["line"] == 1 and r["a"]["confidence"] == "prose" for r in got)


def test_kill_words_that_are_not_targets() -> None:
    assert rows("The pkill and fuser commands did not help.", "command") == []


def test_nothing_stated_nothing_returned() -> None:
    res = launch_prose.parse("A quiet paragraph about nothing in particular.\n", "t.txt")
    assert res.events.height == 0 and res.lines == 1


def test_engine_log_key_values_keep_vllm_names_and_skip_off_values() -> None:
    text = ("INFO engine.py:100] Initializing an LLM engine with config: tensor_parallel_size=2, "
            "gpu_memory_utilization=0.92, enforce_eager=False, download_dir=None, max_model_len=4096\n")
    (a,) = [r["a"] for r in rows(text, "launch_command")]
    assert a["engine"] == "vllm"
    assert a["flags"] == {"--tensor-parallel-size": "2", "--gpu-memory-utilization": "0.92", "--max-model-len": "4096"}


def test_a_quotient_of_settings_is_neither_setting() -> None:
    # our own line in the shape of vLLM's multimodal profiling warning: "= 8192" is the ratio, not max_num_seqs
    text = ("WARNING 03-02 11:20:01 [profiling.py:247] The sequence length used for profiling "
            "(max_num_batched_tokens / max_num_seqs = 8192) is too short to hold the multi-modal embeddings in "
            "the worst case (40960 tokens in total).\n")
    assert all("--max-num-seqs" not in f and "--max-num-batched-tokens" not in f for f in configs(text))
    assert configs("Before the crash max_num_seqs = 64 was set.\n") == [{"--max-num-seqs": "64"}]


@pytest.mark.parametrize("sentence, flags", [
    ("Launch flags: --tp 8 --ep 8 --enable-dp-attention --dp 8", {"--tp-size": "8", "--ep-size": "8",
                                                                  "--enable-dp-attention": True, "--dp-size": "8"}),
    ("mem_fraction_static was 0.92 when it crashed.", {"--mem-fraction-static": "0.92"}),
])
def test_flag_runs_and_worded_values(sentence, flags) -> None:
    assert configs(sentence) == [flags]


def test_a_requirement_is_advice() -> None:
    assert configs("You need --tp 2 for this model.") == [] and discussed("You need --tp 2 for this model.")


def test_markdown_table_rows_of_settings() -> None:
    text = "| flag | value |\n|---|---|\n| --tp-size | 8 |\n| --mem-fraction-static | 0.88 |\n"
    assert configs(text) == [{"--tp-size": "8", "--mem-fraction-static": "0.88"}]
    got = rows(text, "launch_command")[0]["a"]["mentions"]
    assert got["--tp-size"]["line"] == 3 and got["--mem-fraction-static"]["line"] == 4


@pytest.mark.parametrize("sentence, tp", [
    ("We launched with --hicache-size 300 on TP8.", "8"),
    ("It is a TP-4 deployment on two nodes.", "4"),
    ("Tensor parallelism was set to 8 for this model.", "8"),
    ("The TP size of 2 was used throughout.", "2"),
])
def test_tensor_parallel_size_said_without_the_flag(sentence, tp) -> None:
    (flags,) = configs(sentence)
    assert flags["--tp-size"] == tp


@pytest.mark.parametrize("sentence", [
    "TP3 crashed first and the others waited.",
    "The log of [TP2] shows the OOM.",
    "Rank TP0 printed the traceback.",
])
def test_a_rank_label_is_no_size(sentence) -> None:
    assert configs(sentence) == []


_PIECES = ["--tp-size 8", "--hicache-size=300", "mem_fraction_static=0.9", " will ", " could ", "?", ". ", "\n", "\n\n",
           "449 GB of RAM", "0.82 GB left after CUDA graph capture", "pkill -9 -f sglang", "TP8", "on TP-4", "|", "—",
           "next attempt", "instead of", "\x00", "\r\n", "1e309", "--enable-hicache", "capacity of 80 GiB", "é"]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=12)), max_size=60).map("".join))
def test_never_raises_and_rows_point_at_lines_that_exist(text) -> None:
    res = launch_prose.parse(text, "f.txt")
    ev = res.events
    n = len(launch_prose._split_lines(text))
    if ev.height:
        assert ev["line"].min() >= 1 and ev["line"].max() <= n
        assert (ev["line_end"] >= ev["line"]).all()
        for a in ev["attrs"]:
            assert isinstance(json.loads(a), dict)


@pytest.mark.parametrize("sentence, gib", [
    ("We have 2x A100 80GB GPUs and plenty of disk.", 80),
    ("Hardware: 4 x L40S (48 GB each), nothing else.", 48),
    ("Running on an A100-SXM4-80GB.", 80),
])
def test_gpu_capacity_from_the_model_name_as_written(sentence, gib) -> None:
    assert [r["total_bytes"] for r in rows(sentence, "gpu_memory")] == [gib * GIB]


def test_gpu_memory_taken_is_no_capacity() -> None:
    assert rows("The KV cache took 60 GB of GPU memory each time.", "gpu_memory") == []


@pytest.mark.parametrize("sentence, gib", [
    ("After graph capture, free memory was 1.1 GB on every rank.", 1.1),
    ("Only 700 MiB remained after the CUDA graphs were captured.", 700 / 1024),
    ("CUDA graph capture finished with 0.6 GiB of free memory.", 0.6),
])
def test_headroom_after_capture_in_other_words(sentence, gib) -> None:
    assert [r["avail_bytes"] for r in rows(sentence, "cuda_graph_end")] == [int(round(gib * GIB))]


def test_each_gpus_capacity() -> None:
    got = rows("It runs on two A100 cards, each with a capacity of 80 GiB.", "gpu_memory")
    assert [r["total_bytes"] for r in got] == [80 * GIB]


@pytest.mark.parametrize("listing, gib", [
    ("Python: 3.11.9\nGPU 0,1: NVIDIA L40S\nMem: 192GB\n", 192),
    ("OS: Ubuntu 22.04\nRAM: 1 TB\n", 1024),
    ("Host memory = 768 GiB\n", 768),
])
def test_host_ram_in_an_environment_listing(listing, gib) -> None:
    assert [r["total_bytes"] for r in rows(listing, "host_memory")] == [gib * GIB]


def test_a_gpus_memory_key_is_not_the_hosts() -> None:
    assert rows("GPU Memory: 48GB\n", "host_memory") == []


@pytest.mark.parametrize("listing, version", [
    ("PyTorch: 2.6.0+cu124\nsglang: 0.4.7.post1\nsgl_kernel: 0.1.5\n", "0.4.7.post1"),
    ("SGLang version: 0.5.9\n", "0.5.9"),
    ("Environment: sglang0.5.2\n", "0.5.2"),
])
def test_the_sglang_version_a_listing_states(listing, version) -> None:
    assert [json.loads(r["attrs"])["version"] for r in rows(listing, "version")] == [version]


@pytest.mark.parametrize("text", [
    "sgl_kernel: 0.1.5\nsglang-router: 0.2.3\n",
    "We upgraded to sglang 0.5.6 and it went away.\n",
    "sglang: Module Not Found\n",
])
def test_no_sglang_version_where_none_is_stated(text) -> None:
    assert rows(text, "version") == []

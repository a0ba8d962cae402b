"""A log pasted in a ticket (quoted or indented) reads as the log; text that only looks indented stays."""

from __future__ import annotations

import pytest

from parsers.pasted import unwrap

VLLM = [
    "(EngineCore_DP0 pid=812) ERROR 09-01 10:00:00 [core.py:700] EngineCore failed to start.",
    "(EngineCore_DP0 pid=812) ERROR 09-01 10:00:00 [core.py:700] ValueError: No available memory for the cache blocks.",
]


def test_quoted_and_indented_pastes_lose_their_markers_line_for_line() -> None:
    quoted = "We saw this:\n\n" + "".join(f"> {x}\n" for x in VLLM) + "\nIdeas?\n"
    indented = "Log:\n\n" + "".join(f"    {x}\n" for x in VLLM) + "\nThanks\n"
    for text in (quoted, indented):
        out = unwrap(text)
        assert out.splitlines()[2:4] == VLLM
        assert out.count("\n") == text.count("\n")  # line numbers stay the file's


def test_a_traceback_keeps_its_indentation() -> None:
    tb = ("[2025-01-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
          '  File "/x/scheduler.py", line 10, in run\n    foo()\nRuntimeError: boom\n')
    assert unwrap(tb) == tb
    # the same traceback indented as a code block keeps its own two levels under the block's
    block = "See:\n\n" + "".join(f"    {x}\n" for x in tb.splitlines()) + "\n"
    assert unwrap(block).splitlines()[2:6] == tb.splitlines()


def test_text_that_only_looks_pasted_stays() -> None:
    repl = ">>> import torch\n>>> torch.cuda.mem_get_info()\n(1024, 2048)\n"
    free = "               total        used        free\nMem:       2063720     1020000     1043720\n"
    one_line = "Log:\n\n    Load weight begin. avail mem=78.50 GB\n\nend\n"
    manifest = ("spec:\n  containers:\n    - name: sglang\n\n      args:\n        - --tp-size\n        - \"8\"\n"
                "      resources:\n        limits:\n          memory: 400Gi\n")
    for text in (repl, free, one_line, manifest):
        assert unwrap(text) == text


def test_the_fences_around_a_text_that_is_one_block_become_empty_lines() -> None:
    text = "```yaml\nservices:\n  sglang:\n    image: lmsysorg/sglang\n```\n"
    assert unwrap(text).split("\n") == ["", "services:", "  sglang:", "    image: lmsysorg/sglang", "", ""]
    # among prose the fences cut the paste into segments: the transcript reader's
    ticket = "Compose file:\n```yaml\nservices:\n  sglang:\n```\nThanks"
    assert unwrap(ticket) == ticket


def test_a_terminal_hard_wrap_is_joined_at_the_first_piece() -> None:
    whole = ("[2025-03-01 10:00:00 TP0] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
             "GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this "
             "process has 78.12 GiB memory in use.")
    width = 80
    pieces = [whole[i:i + width] for i in range(0, len(whole), width)]
    text = "\n".join(["[2025-03-01 09:59:59 TP0] Prefill batch. #new-seq: 1, #new-token: 8192", *pieces, "next"])
    out = unwrap(text).split("\n")
    assert out[1] == whole and out[2:1 + len(pieces)] == [""] * (len(pieces) - 1) and out[-1] == "next"
    assert len(out) == len(text.split("\n"))


@pytest.mark.parametrize("text", [
    # a table is cut at the width too, but its rows are no records
    "               total        used        free      shared  buff/cache   available\n"
    "Mem:             449         318          12           1         118         127\n"
    "Swap:              0           0           0",
    # ps cut at the terminal's width: each row is its own
    "root      4121 99.0  2.1 812341 123 ?  Rl   10:00  12:01 python3 -m sglang.launch_server --model-path /m/Qwen2\n"
    "root      4122 98.0  2.1 812341 123 ?  Rl   10:00  12:01 python3 -m sglang.launch_server --model-path /m/Qwen2",
    # a sentence after the longest record is not the rest of it
    "[412907.551203] Memory cgroup out of memory: Killed process 88120 (sglang::schedul) total-vm:611203448kB\n"
    "Our node died overnight; we ran --tp-size 4.",
    # two records of one width
    "[2025-03-01 10:00:00 TP0] Decode batch. #running-req: 12, #token: 51234, token usage: 0.41, gen throughput\n"
    "[2025-03-01 10:00:01 TP0] Decode batch. #running-req: 12, #token: 51246, token usage: 0.41, gen throughput",
    # fixed-width records: the width is theirs, so an unknown line after one is not the rest of it
    "[2025-03-01 10:00:00 TP0] Decode batch. #running-req: 12, #token: 51234, token usage: 0.41, gen throughput\n"
    "[2025-03-01 10:00:01 TP0] Decode batch. #running-req: 12, #token: 51246, token usage: 0.41, gen throughput\n"
    "[2025-03-01 10:00:02 TP0] Decode batch. #running-req: 12, #token: 51258, token usage: 0.41, gen throughput\n"
    "a line nobody knows",
    # a shell prompt and NCCL's own prefix start lines of their own
    "[2025-03-01 10:00:00 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=41.2 GB\n"
    "user@gpu-07:~$ nvidia-smi\n"
    "[2025-03-01 10:00:00 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=41.2 GB\n"
    "gpu-07:4121:4121 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>",
])
def test_lines_that_are_not_wrapped_stay(text) -> None:
    assert unwrap(text) == text


# grep(1)'s prefixes: -Hn, -n, -H, context lines and group separators go; look-alikes stay
@pytest.mark.parametrize("text, want", [
    ("a/rank1.log:7:[2026-02-01 01:00:00 TP1] x\na/rank1.log:9:[2026-02-01 01:00:02 TP1] y\n",
     "[2026-02-01 01:00:00 TP1] x\n[2026-02-01 01:00:02 TP1] y\n"),
    ("w.log-3-ctx line\nw.log:4:match line\n--\nw.log-40-ctx two\nw.log:41:match two",
     "ctx line\nmatch line\n\nctx two\nmatch two"),
    ("88:INFO 03-01 10:00:00 a\n90:INFO 03-01 10:00:01 b\n97:WARNING 03-01 10:00:09 c", "INFO 03-01 10:00:00 a\n"
     "INFO 03-01 10:00:01 b\nWARNING 03-01 10:00:09 c"),
    ("node0.txt:[  12.5] NVRM: Xid 79\nnode0.txt:[  12.6] NVRM: Xid 79", "[  12.5] NVRM: Xid 79\n[  12.6] NVRM: Xid 79"),
    ("dmesg.txt:2041:[Mon Mar  2 01:00:00 2026] Out of memory: Killed process 1",
     "[Mon Mar  2 01:00:00 2026] Out of memory: Killed process 1"),
])
def test_grep_prefixes_come_off(text: str, want: str) -> None:
    assert unwrap(text) == want


@pytest.mark.parametrize("text", [
    "10:00:01 start\n10:00:02 next\n10:00:03 more\n",  # a clock, not line numbers
    "12:3 ratio\n13:4 ratio\n14:5 ratio\n",
    "5:a\n9:b\n",  # two numbered lines prove nothing
    "30:a\n20:b\n10:c\n",  # numbers that fall are not grep's
    "model.safetensors:  10%|#   | 1G/9G\nmodel.safetensors:  20%|##  | 2G/9G\n",  # a download bar's label
    "socket.timeout: timed out\nsocket.timeout: timed out\n",  # an exception's type
    "/opt/venv/torch/cuda/__init__.py:123: UserWarning: x\n",  # a warning's source file
    "Error: one\nError: two\n",
])
def test_grep_look_alikes_stay(text: str) -> None:
    assert unwrap(text) == text


def test_grep_prefixes_judged_by_the_whole_file_like_hard_wraps() -> None:
    # a piece of a long log read in pieces is not a paste: its prefixes stay, as they do when the file is read whole
    piece = "a.log:1:[2026-01-01 00:00:00 TP0] x\na.log:2:[2026-01-01 00:00:01 TP0] y\n"
    assert unwrap(piece) == "[2026-01-01 00:00:00 TP0] x\n[2026-01-01 00:00:01 TP0] y\n"
    assert unwrap(piece, whole_chars=64 << 20) == piece

"""A log pasted in a ticket (quoted or indented) reads as the log; text that only looks indented stays."""

from __future__ import annotations

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

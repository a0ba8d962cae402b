"""forensics/facts/launch.py: which row's value a setting takes when several state it.

The command line the process ran wins over a sentence and over a partial ``server_args=ServerArgs(...)``
reprint; the engine's whole dump (its resolved values) wins over the command; what only a weaker row
states still fills the configuration.
"""

from __future__ import annotations

from pathlib import Path

from forensics.facts.launch import server_config
from forensics.timeline import build_timeline

LAUNCH = """#!/bin/bash
python3 -m sglang.launch_server --model-path /models/Qwen3-32B --tp-size 2 \\
    --mem-fraction-static 0.80 --port 30000
"""
#: a reporter's sentence and a cut reprint of the start-up dump, both naming other fractions
REPORT = """The server ran with --mem-fraction-static 0.95 and a long context, as far as I remember.
Here is part of what it printed at start-up:
server_args=ServerArgs(model_path='/models/Qwen3-32B', tokenizer_path='/models/Qwen3-32B', tp_size=2, \
mem_fraction_static=0.93, context_length=40960, ...
"""
#: the engine's own whole dump, as the log prints it
WHOLE = ("[2026-11-20 10:00:01] server_args=ServerArgs(model_path='/models/Qwen3-32B', tp_size=2, "
         "mem_fraction_static=0.78, context_length=40960, port=30000)\n")


def _cfg(tmp_path: Path, files: dict[str, str]):
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return server_config(build_timeline([tmp_path]))


def test_command_line_wins_over_sentence_and_partial_reprint(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, {"launch.sh": LAUNCH, "report.md": REPORT})
    assert cfg.get("mem_fraction_static") == "0.80"
    assert cfg.origin["mem_fraction_static"].get("source") == "launch"
    assert cfg.num("context_length") == 40960  # only the reprint says it: it still fills the gap


def test_sentence_alone_is_read(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, {"report.md": REPORT.splitlines()[0] + "\n"})
    assert cfg.num("mem_fraction_static") == 0.95


def test_partial_reprint_wins_over_sentence(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, {"report.md": REPORT})
    assert cfg.num("mem_fraction_static") == 0.93


def test_engine_whole_dump_wins_over_command(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, {"launch.sh": LAUNCH, "report.md": REPORT, "server.log": WHOLE})
    assert cfg.num("mem_fraction_static") == 0.78
    assert cfg.origin["mem_fraction_static"].get("source") == "sglang"

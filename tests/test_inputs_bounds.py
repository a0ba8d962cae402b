"""Bounds on what one file can do: giant lines are cut and counted, binary files are listed and never
parsed, and long reads report progress (a bar on a terminal, plain lines otherwise, nothing with -q)."""

from __future__ import annotations

import gzip
import io
import os
import random
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from forensics import inputs, timeline
from forensics.inputs import InputFile, cut_long_lines, looks_binary
from forensics.progress import Reporter, byte_task
from forensics.timeline import build_timeline

REPO = Path(__file__).resolve().parents[1]
BEGIN = b"[2026-11-30 10:00:00 TP0] Load weight begin. avail mem=70.00 GB\n"
END = b"[2026-11-30 10:00:09 TP0] Load weight end. type=M, dtype=torch.bfloat16, avail mem=20.00 GB, mem usage=50.00 GB.\n"


def _giant(n: int) -> bytes:
    return b"[2026-11-30 10:00:05 TP0] Receive: obj=GenerateReqInput(text='" + b"a" * n + b"')\n"


@pytest.mark.parametrize("streamed", [False, True])
def test_giant_line_is_cut_and_counted(tmp_path: Path, monkeypatch, streamed: bool) -> None:
    if streamed:
        monkeypatch.setattr(inputs.limits, "STREAM_BYTES", 1 << 20)
        monkeypatch.setattr(timeline, "CHUNK_BYTES", 300_000)  # the line spans many chunks
    p = tmp_path / "server.log"
    p.write_bytes(BEGIN + _giant(3 << 20) + END + _giant(5 << 20) + BEGIN)
    tl = build_timeline([p])
    cov = tl.coverage[0]
    assert cov["cut_lines"] == 2 and cov["lines"] == 5
    kinds = tl.events.sort("line").select("kind", "line").rows()
    assert ("weight_load_end", 3) in kinds and ("weight_load_begin", 5) in kinds
    assert tl.events.get_column("text").str.len_bytes().max() <= inputs.limits.MAX_LINE_BYTES


def test_streamed_chunks_hold_at_most_one_cut_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(inputs.limits, "MAX_LINE_BYTES", 1000)
    lines = [b"x" * random.Random(i).choice([10, 999, 1000, 1001, 5000, 40_000]) for i in range(300)]
    p = tmp_path / "a.log"
    p.write_bytes(b"\n".join(lines) + b"\n")
    f = InputFile(name="a.log", data=b"", origin=str(p), path=p, size=p.stat().st_size)
    pieces = list(f.chunks(size=777))
    got = b"".join(pieces).split(b"\n")[:-1]
    assert got == [ln[:1000] for ln in lines]
    assert f.cut_lines == sum(len(ln) > 1000 for ln in lines)
    assert max(len(x) for x in pieces) < 777 + 1001 + 1
    same, n = cut_long_lines(b"\n".join(lines) + b"\n", limit=1000)
    assert bytes(same) == b"".join(pieces) and n == f.cut_lines


def test_report_inventory_shows_the_cut(tmp_path: Path) -> None:
    p = tmp_path / "server.log"
    p.write_bytes(BEGIN + _giant(2 << 20) + END)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "report", str(p), "-o", str(tmp_path / "out"),
                           "--format", "html,json"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    assert "1 cut at 1 MiB" in (tmp_path / "out" / "report.html").read_text()


def test_random_bytes_are_binary_not_a_format(tmp_path: Path) -> None:
    rng = random.Random(5)
    for i in range(20):
        assert looks_binary(rng.randbytes(8192)), i
    p = tmp_path / "mystery.log"
    p.write_bytes(rng.randbytes(200_000))
    (tmp_path / "ok.log").write_bytes(BEGIN)
    tl = build_timeline([tmp_path])
    cov = {c["file"]: c for c in tl.coverage}
    assert cov["mystery.log"]["binary"] and cov["mystery.log"]["format"] is None
    assert tl.events.filter(pl.col("file") == "mystery.log").is_empty()
    assert [a.error for a in tl.artifacts if a.path == "mystery.log"] == ["binary file, not read"]


@pytest.mark.parametrize(("head", "binary"), [
    (BEGIN * 20 + b"\0" * 3000 + BEGIN, False),  # NULs where the host crashed: still a log
    ("[2026-11-30 10:00:00] 模型加载完成 — ok\n".encode() * 50, False),  # text that is not ASCII
    (b"\x1b[32mINFO\x1b[0m started\r\n" * 50, False),  # colour codes and CRLF
    (b"\0" * 4096, True),
    (b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 8, True),
])
def test_binary_judgement(head: bytes, binary: bool) -> None:
    assert looks_binary(head[:8192]) is binary


def test_progress_plain_lines_and_a_bar_on_a_terminal() -> None:
    plain = io.StringIO()
    r = Reporter(plain, bar=False)
    task = byte_task(r, "big.log", 10 << 20)
    assert task is not None
    task.t0 = task.said = -10.0  # as if it had run for a while
    task(5 << 20)
    assert "big.log: 5 of 10 MiB" in plain.getvalue()
    tty = io.StringIO()
    r = Reporter(tty, bar=True)
    task = byte_task(r, "big.log", 10 << 20)
    task(5 << 20)
    task.done()
    r.close()
    assert "big.log" in tty.getvalue() and "MiB" in tty.getvalue() and "━" in tty.getvalue()
    assert byte_task(None, "x", 1) is None


def test_cli_progress_on_a_pipe_and_quiet(tmp_path: Path) -> None:
    p = tmp_path / "server.log.gz"
    p.write_bytes(gzip.compress(BEGIN * 17_000))  # 1.1 MB once decompressed: worth a progress line
    env = dict(os.environ, PYTHONPATH=str(REPO))

    def run(*extra: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "forensics.cli", "timeline", str(p), "-o",
                               str(tmp_path / "t.parquet"), *extra], capture_output=True, text=True, env=env,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr

    said = run()
    assert "reading server.log.gz" in said and "\x1b[" not in said  # plain lines, no terminal codes
    assert run("-q") == ""

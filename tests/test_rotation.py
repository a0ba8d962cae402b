"""Rotation sets (x.log, x.log.1, x.log.2.gz, x.log-20261130.gz, x.log.2026-11-30 …) are one log, read
oldest first, and every row still names its real member file and that file's own line."""

from __future__ import annotations

import gzip
import zipfile
from pathlib import Path

import polars as pl
import pytest

from forensics.inputs import read_inputs
from forensics.inputs.rotation import rotation_key
from forensics.timeline import build_timeline


def _line(sec: int, msg: str) -> str:
    return f"[2026-11-30 10:{sec // 60:02d}:{sec % 60:02d} TP0] {msg}\n"


def _decode(sec: int, tokens: int) -> str:
    return _line(sec, f"Decode batch. #running-req: 4, #token: {tokens}, token usage: 0.10, "
                      "gen throughput (token/s): 50.00, #queue-req: 0")


ARGS = "server_args=ServerArgs(model_path='/models/m', tp_size=1, mem_fraction_static=0.88)"


@pytest.mark.parametrize(("names", "oldest_first"), [
    (["x.log", "x.log.1", "x.log.2.gz", "x.log.10"], ["x.log.10", "x.log.2.gz", "x.log.1", "x.log"]),
    (["x.log", "x.log-20261129.gz", "x.log-20261130"], ["x.log-20261129.gz", "x.log-20261130", "x.log"]),
    (["syslog.2026-11-30", "syslog.2026-11-28.xz", "syslog"], ["syslog.2026-11-28.xz", "syslog.2026-11-30", "syslog"]),
])
def test_members_are_ordered_oldest_first(tmp_path: Path, names: list[str], oldest_first: list[str]) -> None:
    for i, n in enumerate(names):
        data = f"line from {n} {i}\n".encode()
        (tmp_path / n).write_bytes(gzip.compress(data) if n.endswith(".gz") else data)
    files = read_inputs([tmp_path]).files
    assert len(files) == 1
    assert [m for m, _start in files[0].parts] == oldest_first
    assert files[0].data.decode().splitlines() == [f"line from {n} {names.index(n)}" for n in oldest_first]


def test_numbered_from_zero_and_other_names_are_not_joined(tmp_path: Path) -> None:
    for n in ("server.log.0", "server.log.1", "free.1", "free.2", "notes.txt"):
        (tmp_path / n).write_text("x\n")
    assert sorted(f.name for f in read_inputs([tmp_path]).files) == [
        "free.1", "free.2", "notes.txt", "server.log.0", "server.log.1"]
    assert rotation_key("nvidia-smi.3") is None


def test_a_run_spanning_a_rotation_stays_one_run_and_rows_name_their_member(tmp_path: Path) -> None:
    oldest = _line(0, ARGS) + "".join(_decode(s, 1000 + s) for s in range(1, 6))
    middle = "".join(_decode(s, 1000 + s) for s in range(6, 10)) + "a line nobody knows\n"
    newest = "".join(_decode(s, 1000 + s) for s in range(10, 13))
    (tmp_path / "sglang.log.2.gz").write_bytes(gzip.compress(oldest.encode()))
    (tmp_path / "sglang.log.1").write_text(middle)
    (tmp_path / "sglang.log").write_text(newest)
    # given as loose files, in any order
    tl = build_timeline([tmp_path / "sglang.log", tmp_path / "sglang.log.2.gz", tmp_path / "sglang.log.1"])
    ev = tl.events.filter(pl.col("source") == "sglang")
    assert ev.get_column("run").unique().to_list() == [ev.filter(pl.col("kind") == "server_args")["run"][0]]
    where = {tok: (f, ln) for tok, f, ln in ev.filter(pl.col("kind") == "decode_batch")
             .select("tokens", "file", "line").iter_rows()}
    assert where[1001] == ("sglang.log.2.gz", 2)
    assert where[1006] == ("sglang.log.1", 1) and where[1009] == ("sglang.log.1", 4)
    assert where[1010] == ("sglang.log", 1) and where[1012] == ("sglang.log", 3)
    cov = [c for c in tl.coverage if c["file"] == "sglang.log"]
    assert len(cov) == 1 and cov[0]["members"] == ["sglang.log.2.gz", "sglang.log.1", "sglang.log"]
    assert cov[0]["lines"] == 6 + 5 + 3 and cov[0]["unrecognized"] == 1
    assert [ln for ln, _t in tl.unrecognized_examples["sglang.log"]] == ["sglang.log.1:5"]


def test_a_member_without_a_final_line_end_does_not_glue_lines(tmp_path: Path) -> None:
    (tmp_path / "a.log.1").write_text(_decode(1, 2001).rstrip("\n"))
    (tmp_path / "a.log").write_text(_decode(2, 2002))
    ev = build_timeline([tmp_path]).events.filter(pl.col("kind") == "decode_batch")
    assert ev.select("tokens", "file", "line").rows() == [(2001, "a.log.1", 1), (2002, "a.log", 1)]


def test_rotation_set_inside_a_zip(tmp_path: Path) -> None:
    p = tmp_path / "ticket.zip"
    with zipfile.ZipFile(p, "w") as zf:
        zf.writestr("logs/sglang.log.1.gz", gzip.compress((_line(0, ARGS) + _decode(1, 3001)).encode()))
        zf.writestr("logs/sglang.log", _decode(2, 3002))
    ev = build_timeline([p]).events.filter(pl.col("kind") == "decode_batch")
    assert ev.select("tokens", "file", "line").rows() == [(3001, "sglang.log.1.gz", 2), (3002, "sglang.log", 1)]


def test_a_big_rotation_set_streams_and_still_names_members(tmp_path: Path, monkeypatch) -> None:
    from forensics import inputs, timeline

    (tmp_path / "s.log.2.gz").write_bytes(gzip.compress((_line(0, ARGS) + "".join(
        _decode(s % 3000, 10_000 + s) for s in range(1, 400))).encode()))
    (tmp_path / "s.log.1").write_text("".join(_decode(s % 3000, 10_000 + s) for s in range(400, 800)))
    (tmp_path / "s.log").write_text("".join(_decode(s % 3000, 10_000 + s) for s in range(800, 900)))
    whole = build_timeline([tmp_path]).events
    monkeypatch.setattr(inputs.limits, "STREAM_BYTES", 20_000)  # the joined log (~90 KB) is spooled and streamed
    monkeypatch.setattr(timeline, "CHUNK_BYTES", 7_777)
    streamed = build_timeline([tmp_path]).events
    cols = ["kind", "run", "tokens", "file", "line"]
    assert streamed.select(cols).sort("tokens").rows() == whole.select(cols).sort("tokens").rows()
    assert whole.filter(pl.col("tokens") == 10_400).select("file", "line").rows() == [("s.log.1", 1)]

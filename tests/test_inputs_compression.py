"""Every real SGLang log in ../shared/sglang_real_logs, compressed (gzip, bzip2, xz, zstd, under honest
and misleading names), rotated into three parts (the oldest gzipped, as logrotate's delaycompress
leaves them) and zipped, reads like the bare file: the same SGLang rows (kind, run, rank, figures,
text), at the same lines of the real member files, and the same findings. Read at test time, never
copied; skips when ../shared is absent. Plus single-file decompression on our own text.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import re
import zipfile
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
import zstandard
from shared_data import SHARED, SKIP_REASON

from forensics.detectors import run_all
from forensics.inputs import InputError, read_inputs
from forensics.timeline import build_timeline

REAL = SHARED / "sglang_real_logs"
REAL_LOGS = sorted(REAL.glob("*.log")) if REAL.is_dir() else []

#: what a row says, whatever file or line it came from
ROW = ["kind", "run", "rank", "tp_rank", "dp_rank", "ts", "bytes", "avail_bytes", "tokens", "ratio", "seconds",
       "count", "code", "text"]


def _analyse(paths: list[Path]) -> tuple[pl.DataFrame, list[tuple], object]:
    tl = build_timeline(paths)
    findings, root = run_all(tl)
    # figures that cite file:line name the file as given (server.log.gz, a rotation member): compare the lines
    sig = sorted((f.rule_id, f.category, f.severity, _unnamed(str(sorted(f.figures.items())), tl),
                  tuple(f.ranks), tuple(f.gpus)) for f in findings)
    return tl.events.filter(pl.col("source") == "sglang"), sig, root


def _unnamed(text: str, tl) -> str:
    """file:line citations in figures name the file (and, for a rotation member, its own line) as given"""
    return re.sub(r"'[^'\s]+:\d+'", "'LOC'", text)


def _rows(ev: pl.DataFrame) -> Counter:
    return Counter(ev.select(ROW).iter_rows())


def _split3(data: bytes) -> list[bytes]:
    lines = data.splitlines(keepends=True)
    a, b = len(lines) // 3, 2 * len(lines) // 3
    return [b"".join(lines[:a]), b"".join(lines[a:b]), b"".join(lines[b:])]


def _variants(src: Path, d: Path) -> dict[str, tuple[list[Path], dict[str, int] | None]]:
    """name → (the paths to read, for a rotation set the line each member starts at in the bare file)."""
    raw = src.read_bytes()
    out: dict[str, tuple[list[Path], dict[str, int] | None]] = {}

    def put(name: str, data: bytes) -> Path:
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        return p

    out["gzip"] = ([put("gz/server.log.gz", gzip.compress(raw))], None)
    out["bzip2"] = ([put("bz/server.log.bz2", bz2.compress(raw))], None)
    out["xz misnamed .txt"] = ([put("xz/notes.txt", lzma.compress(raw))], None)
    out["zstd misnamed .log"] = ([put("zst/server.log", zstandard.ZstdCompressor().compress(raw))], None)
    oldest, middle, newest = _split3(raw)
    members = {"sglang.log.2.gz": gzip.compress(oldest), "sglang.log.1": middle, "sglang.log": newest}
    starts = {"sglang.log.2.gz": 0, "sglang.log.1": oldest.count(b"\n"),
              "sglang.log": oldest.count(b"\n") + middle.count(b"\n")}
    for n, data in members.items():
        put(f"rot/{n}", data)
    out["rotated folder"] = ([d / "rot"], starts)
    out["rotated loose"] = ([d / "rot" / n for n in ("sglang.log", "sglang.log.1", "sglang.log.2.gz")], starts)
    zp = d / "zip" / "ticket.zip"
    zp.parent.mkdir()
    with zipfile.ZipFile(zp, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("attachments/" + src.name, raw)
    out["zip"] = ([zp], None)
    return out


@pytest.mark.skipif(not REAL_LOGS, reason=f"{SKIP_REASON}: sglang_real_logs not present")
@pytest.mark.parametrize("src", REAL_LOGS, ids=lambda p: p.name[:3])
def test_wrapped_real_log_reads_like_the_bare_one(src: Path, tmp_path: Path) -> None:
    bare, bare_findings, bare_root = _analyse([src])
    bare_lines = Counter(bare.select("kind", "line").iter_rows())
    for name, (paths, starts) in _variants(src, tmp_path).items():
        ev, found, root = _analyse(paths)
        assert _rows(ev) == _rows(bare), name
        assert (found, root) == (bare_findings, bare_root), name
        if starts is None:
            assert Counter(ev.select("kind", "line").iter_rows()) == bare_lines, name
            continue
        # provenance: each row names a real member and its own line, which is the bare file's line
        assert set(ev.get_column("file").unique()) <= set(starts), name
        mapped = Counter((k, starts[f] + ln) for k, f, ln in ev.select("kind", "file", "line").iter_rows())
        assert mapped == bare_lines, name


def test_a_lone_gzipped_log_is_a_log_whatever_its_name(tmp_path: Path) -> None:
    text = b"".join(b"[2026-11-30 10:00:%02d TP0] Decode batch. #running-req: 1, #token: %d, token usage: 0.01, "
                    b"gen throughput (token/s): 5.0, #queue-req: 0\n" % (i, 100 + i) for i in range(30))
    for name, data in {"server.log.gz": gzip.compress(text), "evidence.dat": bz2.compress(text),
                       "x.zst": zstandard.ZstdCompressor().compress(text)}.items():
        p = tmp_path / name
        p.write_bytes(data)
        inp = read_inputs([p])
        assert [(f.name, f.data, f.compression is not None) for f in inp.files] == [(name, text, True)]
        tl = build_timeline([p])
        assert tl.events.filter(pl.col("kind") == "decode_batch").height == 30
        assert tl.events.get_column("file").unique().to_list() == [name]


def test_zstd_of_several_frames_is_read_to_the_end(tmp_path: Path) -> None:
    c = zstandard.ZstdCompressor()
    p = tmp_path / "a.log"
    p.write_bytes(c.compress(b"one\n") + c.compress(b"two\n"))
    assert read_inputs([p]).files[0].data == b"one\ntwo\n"


@pytest.mark.parametrize("kind", ["gzip", "bzip2", "xz", "zstd"])
def test_truncated_stream_is_refused_in_one_line(tmp_path: Path, kind: str) -> None:
    text = b"".join(b"line %d of a log that goes on for a while\n" % i for i in range(20000))
    comp = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress,
            "zstd": zstandard.ZstdCompressor().compress}[kind](text)
    p = tmp_path / "server.log"
    p.write_bytes(comp[: len(comp) // 2])
    with pytest.raises(InputError, match="truncated or corrupt") as e:
        read_inputs([p])
    assert "\n" not in str(e.value) and kind in str(e.value)


def test_big_decompressed_file_is_spooled_not_held(tmp_path: Path, monkeypatch) -> None:
    from forensics import inputs

    monkeypatch.setattr(inputs.limits, "STREAM_BYTES", 10_000)
    text = b"[2026-11-30 10:00:00 TP0] Load weight begin. avail mem=10.00 GB\n" * 2000
    p = tmp_path / "big.log.xz"
    p.write_bytes(lzma.compress(text))
    with read_inputs([p]) as inp:
        f = inp.files[0]
        assert f.streamed and f.nbytes == len(text) and b"".join(f.chunks()) == text


def test_compressed_bomb_stops_past_the_ratio_cap(tmp_path: Path, monkeypatch) -> None:
    from forensics import inputs

    monkeypatch.setattr(inputs.limits, "RATIO_CHECK_AFTER", 1 << 20)
    monkeypatch.setattr(inputs.limits, "MAX_RATIO", 50)
    for name, data in {"a.gz": gzip.compress(b"\0" * (8 << 20)),
                       "b.zst": zstandard.ZstdCompressor().compress(b"\0" * (8 << 20))}.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(InputError, match="decompression bomb"):
            read_inputs([p])


def test_tar_xz_and_tar_bz2_bundles_are_read(tmp_path: Path) -> None:
    import io
    import tarfile

    for suffix, mode in ((".tar.xz", "w:xz"), (".tar.bz2", "w:bz2"), (".bin", "w:xz")):
        p = tmp_path / f"bundle{suffix}"
        with tarfile.open(p, mode) as tf:
            data = b"[2026-11-30 10:00:00 TP0] Init torch distributed begin.\n"
            ti = tarfile.TarInfo("forensics-host/logs/sglang.log")
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
        assert [f.name for f in read_inputs([p]).files] == ["logs/sglang.log"], suffix


def test_truncated_gzip_log_through_the_cli_is_one_line_and_exit_3(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    comp = gzip.compress(b"".join(b"line %d of a log\n" % i for i in range(50_000)))
    p = tmp_path / "server.log.gz"
    p.write_bytes(comp[: len(comp) // 2])
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "report", str(p), "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 3 and len(lines) == 1 and "truncated or corrupt" in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()

"""Big archive members are spooled to private temporary files, not held in memory (issue 8).

The thresholds are lowered so the archives stay small; the rank logs of tests/test_streaming.py
(~60 KB each) then stand in for multi-GB ones.
"""

from __future__ import annotations

import gc
import gzip
import io
import os
import re
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from forensics import inputs, timeline
from forensics.inputs import InputError, read_inputs
from tests.test_hostile_archives import _file, _gz, _tar_bytes, _tree, _zst, assert_refused
from tests.test_streaming import _write_set

REPO = Path(__file__).resolve().parents[1]
TOP = "forensics-gpu-7-20251120T091411Z"


def _bundle(src: Path, dest: Path) -> Path:
    """The files under ``src`` as a collect-style bundle (one top folder), gzip or zstd by suffix."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for p in sorted(src.rglob("*")):
            if p.is_file():
                tf.add(p, arcname=f"{TOP}/{p.relative_to(src).as_posix()}", recursive=False)
    raw = buf.getvalue()
    dest.write_bytes(_zst(raw) if dest.name.endswith(".zst") else _gz(raw))
    return dest


def _spools(where: Path) -> list[Path]:
    return sorted(where.glob(".forensics-spool-*")) if where.exists() else []


@pytest.fixture
def spied(monkeypatch):
    """Lowered thresholds; every spool file made is recorded with its mode and its folder's."""
    monkeypatch.setattr(inputs.limits, "STREAM_BYTES", 10_000)
    made: list[tuple[Path, int, int]] = []
    real = inputs.files.Spool.new_file

    def new_file(self):
        fd, p = real(self)
        made.append((p, stat.S_IMODE(os.stat(p).st_mode), stat.S_IMODE(os.stat(p.parent).st_mode)))
        return fd, p

    monkeypatch.setattr(inputs.files.Spool, "new_file", new_file)
    return made


@pytest.mark.parametrize("suffix", ["tar.gz", "tar.zst"])
def test_spooled_bundle_parses_like_the_same_directory(tmp_path, monkeypatch, spied, suffix):
    src = tmp_path / "set"
    _write_set(src, 21)
    bundle = _bundle(src, tmp_path / f"b.{suffix}")
    monkeypatch.setattr(timeline, "CHUNK_BYTES", 9_999)  # chunk cuts inside records
    spill = tmp_path / "spill"
    spill.mkdir()
    d = timeline.build_timeline([src], spill_dir=tmp_path / "spill-dir")
    assert spied == []  # directory files are streamed in place, never copied
    b = timeline.build_timeline([bundle], spill_dir=spill)

    # the two rank logs (~60 KB) were spooled next to the output, under anonymous names, private
    assert len(spied) == 2
    for p, fmode, dmode in spied:
        assert p.parent.parent == spill and p.parent.name.startswith(".forensics-spool-")
        assert fmode == 0o600 and dmode == 0o700
        # mkstemp's anonymous name only: no part of the member's name reaches the filesystem
        assert re.fullmatch(r"tmp[a-z0-9_]{8}\.member", p.name), p.name
    assert _spools(spill) == [] and not any(p.exists() for p, _, _ in spied)

    assert_frame_equal(d.events, b.events)
    assert_frame_equal(pl.read_parquet(d.parquet_path), pl.read_parquet(b.parquet_path))
    assert d.coverage == b.coverage and d.kind_counts == b.kind_counts
    assert d.unrecognized_examples == b.unrecognized_examples
    assert [(a.path, a.bytes, a.lines, a.format) for a in d.artifacts] == \
        [(a.path, a.bytes, a.lines, a.format) for a in b.artifacts]
    assert d.facts.notes == b.facts.notes
    assert b.events.filter(pl.col("kind") == "decode_batch").height > 150


def test_threshold_drops_once_the_declared_sizes_pass_stream_bytes(tmp_path, monkeypatch, spied):
    monkeypatch.setattr(inputs.limits, "STREAM_BYTES", 50_000)
    monkeypatch.setattr(inputs.limits, "STREAM_BYTES_BIG_INPUT", 20_000)
    log = b"[2025-11-20 09:14:11 TP0] Decode batch, #running-req: 1, #token: 9, token usage: 0.01, \n"
    big, small = log * 340, log * 100  # ~30 KB and ~9 KB
    raw = _tar_bytes([_file(f"{TOP}/manifest.json", b'{"schema_version": 1, "artifacts": []}' + b" " * 10_000),
                      _file(f"{TOP}/a.log", big), _file(f"{TOP}/b.log", big), _file(f"{TOP}/c.log", small),
                      _file(f"{TOP}/d.log", big)])
    p = tmp_path / "b.tar.zst"
    p.write_bytes(_zst(raw))
    assert p.stat().st_size < 50_000  # small on disk: only the declared sizes can tell
    with read_inputs([p], spool_dir=tmp_path) as got:
        # manifest (10 KB) and a.log (40 KB declared so far) read into memory; once b.log passes 50 KB
        # everything over 20 KB is spooled, a.log included, as a directory of that size would stream it
        assert got.manifest is not None
        assert [(f.name, f.streamed) for f in got.files] == [("a.log", True), ("b.log", True),
                                                             ("c.log", False), ("d.log", True)]
        assert [b"".join(f.chunks()) for f in got.files] == [big, big, small, big]
        assert [f.nbytes for f in got.files] == [len(big), len(big), len(small), len(big)]
        assert len(_spools(tmp_path)) == 1
    assert _spools(tmp_path) == []


def test_spooled_file_outlives_a_dropped_set_then_goes(tmp_path, spied):
    p = tmp_path / "b.tar.gz"
    p.write_bytes(_gz(_tar_bytes([_file("top/x.log", b"line\n" * 5000)])))
    f = read_inputs([p], spool_dir=tmp_path).files[0]  # the set is garbage at once
    gc.collect()
    assert f.streamed and f.head(5) == b"line\n"
    del f
    gc.collect()
    assert _spools(tmp_path) == []


@pytest.mark.parametrize("failure", ["parse", "interrupt", "truncated"])
def test_spool_removed_when_reading_or_parsing_fails(tmp_path, monkeypatch, spied, failure):
    src = tmp_path / "set"
    _write_set(src, 22)
    data = _bundle(src, tmp_path / "b.tar.gz").read_bytes()
    if failure == "parse":
        def boom(*a, **k):
            raise RuntimeError("parser bug")
        monkeypatch.setattr(timeline, "_stream_log", boom)
        exc: type[BaseException] = RuntimeError
    elif failure == "interrupt":
        calls = iter(range(10**6))
        real = inputs.files.check_expansion

        def ctrl_c(*a):
            if next(calls) == 2:  # free.txt, tp0.log spooled, then inside tp1.log
                raise KeyboardInterrupt
            return real(*a)
        monkeypatch.setattr(inputs.files, "check_expansion", ctrl_c)
        exc = KeyboardInterrupt
    else:
        whole = gzip.decompress(data)
        cut = whole.index(b"Decode batch", len(whole) // 2)  # inside the second rank log
        (tmp_path / "b.tar.gz").write_bytes(_gz(whole[:cut]))
        exc = InputError
    spill = tmp_path / "spill"
    spill.mkdir()
    with pytest.raises(exc):
        timeline.build_timeline([tmp_path / "b.tar.gz"], spill_dir=spill)
    assert spied, "nothing was spooled: the test proves nothing"
    assert list(spill.iterdir()) == []


# ----------------------------------------------------------------------------------------------
# Through the real command line, with the threshold lowered in the child


def _run(sandbox: Path, record: Path, evil: Path, **over: int) -> tuple[subprocess.CompletedProcess, set[str]]:
    """``forensics report EVIL -o sandbox/out`` with STREAM_BYTES (and ``over``) lowered; every spool
    file made is written to ``record`` (outside the sandbox, so the sandbox shows what was left)."""
    sets = "".join(f"inputs.limits.{k} = {v}\n" for k, v in {"STREAM_BYTES": 10_000, **over}.items())
    code = ("import sys\n"
            "from forensics import inputs\n" + sets +
            f"rec = open({str(record)!r}, 'a')\n"
            "real = inputs.files.Spool.new_file\n"
            "def new_file(self):\n"
            "    fd, p = real(self)\n"
            "    rec.write(str(p) + '\\n'); rec.flush()\n"
            "    return fd, p\n"
            "inputs.files.Spool.new_file = new_file\n"
            "sys.argv = ['forensics'] + sys.argv[1:]\n"
            "from forensics.cli import main\n"
            "main()\n")
    before = _tree(sandbox)
    env = dict(os.environ, HOME=str(sandbox / "home"), TMPDIR=str(sandbox / "tmp"), PYTHONPATH=str(REPO),
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("FORENSICS_DEBUG", None)
    proc = subprocess.run([sys.executable, "-c", code, "report", str(evil), "-o", str(sandbox / "out")],
                          capture_output=True, text=True, cwd=sandbox, env=env, timeout=300)
    return proc, _tree(sandbox) - before - {evil.name}


@pytest.fixture
def sandbox(tmp_path):
    work = tmp_path / "work"
    for d in ("home", "tmp"):
        (work / d).mkdir(parents=True)
    return work


def _spooled(record: Path) -> list[str]:
    return record.read_text().splitlines() if record.exists() else []


BIG = b"[2025-11-20 09:14:11 TP0] Decode batch, #running-req: 1, #token: 9, token usage: 0.01, \n" * 400


def test_cli_report_on_a_spooled_bundle_leaves_only_the_report(sandbox, tmp_path):
    src = tmp_path / "set"
    _write_set(src, 23)
    evil = _bundle(src, sandbox / "b.tar.zst")
    proc, created = _run(sandbox, tmp_path / "rec", evil)
    assert proc.returncode == 0, proc.stderr
    spooled = _spooled(tmp_path / "rec")
    assert len(spooled) == 2 and all(Path(s).parent.parent == sandbox for s in spooled)  # next to the output
    assert {c.split("/")[0] for c in created} == {"out"}


@pytest.mark.parametrize("suffix", ["tar.gz", "tar.zst"])
def test_cli_refuses_truncation_inside_a_spooled_member(sandbox, tmp_path, suffix):
    raw = _tar_bytes([_file("b/logs/tp0.log", BIG), _file("b/logs/tp1.log", BIG)])
    cut = raw[: len(raw) - len(BIG) // 2]
    evil = sandbox / f"cut.{suffix}"
    evil.write_bytes(_gz(cut) if suffix == "tar.gz" else _zst(cut))
    proc, created = _run(sandbox, tmp_path / "rec", evil)
    assert_refused(proc, created, "truncated")
    assert len(_spooled(tmp_path / "rec")) == 2


def test_cli_refuses_a_bomb_while_spooling(sandbox, tmp_path):
    evil = sandbox / "bomb.tar.zst"
    evil.write_bytes(_zst(_tar_bytes([_file("b/zeros.log", b"\0" * (8 << 20))])))
    proc, created = _run(sandbox, tmp_path / "rec", evil, RATIO_CHECK_AFTER=1 << 20, MAX_RATIO=50)
    assert_refused(proc, created, "decompression bomb")
    assert len(_spooled(tmp_path / "rec")) == 1


def test_cli_refuses_a_member_over_the_cap_while_spooling(sandbox, tmp_path):
    evil = sandbox / "big.tar.gz"
    evil.write_bytes(_gz(_tar_bytes([_file("b/ok.log", BIG), _file("b/big.log", BIG * 3)])))
    proc, created = _run(sandbox, tmp_path / "rec", evil, MAX_MEMBER_BYTES=len(BIG) * 2)
    assert_refused(proc, created, "b/big.log", "cap")
    assert len(_spooled(tmp_path / "rec")) == 1  # ok.log; big.log is refused on its declared size


def test_cli_dotdot_member_after_a_spooled_one_never_touches_disk(sandbox, tmp_path):
    evil = sandbox / "evil.tar.gz"
    evil.write_bytes(_gz(_tar_bytes([_file("b/ok.log", BIG), _file("b/../../pwned.log", BIG),
                                     _file("b/x/../../../escaped.log", BIG)])))
    proc, created = _run(sandbox, tmp_path / "rec", evil)
    assert_refused(proc, created, "'..'")
    spooled = _spooled(tmp_path / "rec")
    # the one spooled member is ok.log, under a name of mkstemp's that carries nothing of the member's
    # (a random "tmp…" name may well contain "ok": test the name's form, not the absence of two letters)
    assert len(spooled) == 1 and re.fullmatch(r"tmp[a-z0-9_]{8}\.member", Path(spooled[0]).name), spooled
    for root in (tmp_path, tmp_path.parent, sandbox):
        assert not list(root.rglob("pwned.log")) and not list(root.rglob("escaped.log"))


def test_archive_inside_a_directory_is_spooled_too(tmp_path, spied):
    d = tmp_path / "ticket"
    d.mkdir()
    (d / "notes.txt").write_text("free -g pasted below\n")
    (d / "bundle.tar.gz").write_bytes(_gz(_tar_bytes([_file(f"{TOP}/logs/tp0.log", BIG)])))
    with read_inputs([d], spool_dir=tmp_path) as got:
        assert [(f.name, f.streamed) for f in got.files] == [("bundle.tar.gz/logs/tp0.log", True), ("notes.txt", False)]
        assert b"".join(got.files[0].chunks()) == BIG
    assert len(spied) == 1 and _spools(tmp_path) == []


def test_cli_sigterm_while_spooling_cleans_up(sandbox, tmp_path):
    """`timeout`/systemd stop a run with SIGTERM: the spool goes as for Ctrl-C, exit 143, one line."""
    src = tmp_path / "set"
    _write_set(src, 23)
    evil = _bundle(src, sandbox / "b.tar.zst")
    record = tmp_path / "rec"
    code = ("import os, signal, sys\n"
            "from forensics import inputs\n"
            "inputs.limits.STREAM_BYTES = 10_000\n"
            f"rec = open({str(record)!r}, 'a')\n"
            "real = inputs.files.Spool.new_file\n"
            "def new_file(self):\n"
            "    fd, p = real(self)\n"
            "    rec.write(str(p) + '\\n'); rec.flush()\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    return fd, p\n"
            "inputs.files.Spool.new_file = new_file\n"
            "sys.argv = ['forensics'] + sys.argv[1:]\n"
            "from forensics.cli import main\n"
            "main()\n")
    before = _tree(sandbox)
    env = dict(os.environ, HOME=str(sandbox / "home"), TMPDIR=str(sandbox / "tmp"), PYTHONPATH=str(REPO))
    env.pop("FORENSICS_DEBUG", None)
    proc = subprocess.run([sys.executable, "-c", code, "report", str(evil), "-o", str(sandbox / "out")],
                          capture_output=True, text=True, cwd=sandbox, env=env, timeout=300)
    assert proc.returncode == 143, proc.stderr
    assert proc.stderr.strip().splitlines() == ["forensics: terminated"]
    assert _spooled(record), "nothing was spooled: the test proves nothing"
    assert all(not Path(p).exists() for p in _spooled(record))
    assert not any(".forensics-spool" in c for c in _tree(sandbox) - before)

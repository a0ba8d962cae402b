"""Input reading: archives streamed safely, directories, loose files; unsafe input refused with exit 3."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import zstandard

from forensics import inputs
from forensics.inputs import InputError, read_inputs

LOG = b"[2025-11-20 09:14:11 TP0] Init torch distributed begin.\n"


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    return ti, data


def _special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.linkname = linkname
    return ti, None


def test_bundle_top_folder_is_stripped_and_manifest_read(tmp_path):
    manifest = b'{"schema_version": 1, "host": "gpu-7", "artifacts": []}'
    p = _tar(tmp_path / "b.tar.gz", [_file("forensics-gpu-7-x/manifest.json", manifest),
                                     _file("forensics-gpu-7-x/logs/tp0.log", LOG)])
    got = read_inputs([p])
    assert [f.name for f in got.files] == ["logs/tp0.log"]
    assert got.manifest["host"] == "gpu-7"
    assert got.files[0].data == LOG


@pytest.mark.parametrize("suffix,mode", [(".tar", "w"), (".tgz", "w:gz"), (".tar.gz", "w:gz")])
def test_plain_and_gzip_archives(tmp_path, suffix, mode):
    p = _tar(tmp_path / f"b{suffix}", [_file("a/x.log", LOG), _file("a/y.txt", b"hello\n")], mode)
    assert sorted(f.name for f in read_inputs([p]).files) == ["x.log", "y.txt"]


def test_zstd_archive(tmp_path):
    raw = io.BytesIO()
    _tar_to(raw, [_file("top/logs/tp0.log", LOG)])
    p = tmp_path / "b.tar.zst"
    p.write_bytes(zstandard.ZstdCompressor().compress(raw.getvalue()))
    got = read_inputs([p])
    assert [(f.name, f.data) for f in got.files] == [("logs/tp0.log", LOG)]


def _tar_to(buf: io.BytesIO, members):
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)


@pytest.mark.parametrize(
    "member,why",
    [
        (_file("../x", b"owned"), "'..'"),
        (_file("a/../../x", b"owned"), "'..'"),
        (_file("/etc/x", b"owned"), "absolute"),
        (_special("a/link", tarfile.SYMTYPE, "/etc/passwd"), "symlink pointing outside"),
        (_special("a/link", tarfile.SYMTYPE, "../../etc/passwd"), "symlink pointing outside"),
        (_special("a/hard", tarfile.LNKTYPE, "/etc/shadow"), "hardlink pointing outside"),
        (_special("a/dev", tarfile.CHRTYPE), "device or FIFO"),
        (_special("a/fifo", tarfile.FIFOTYPE), "device or FIFO"),
    ],
)
def test_unsafe_members_are_refused_naming_member(tmp_path, member, why):
    p = _tar(tmp_path / "evil.tar.gz", [_file("a/ok.log", LOG), member])
    with pytest.raises(InputError) as e:
        read_inputs([p])
    assert why in str(e.value)
    assert member[0].name in str(e.value)


def test_link_inside_tree_is_skipped_not_followed(tmp_path):
    p = _tar(tmp_path / "b.tar", [_file("a/ok.log", LOG), _special("a/alias.log", tarfile.SYMTYPE, "ok.log")], "w")
    got = read_inputs([p])
    assert [f.name for f in got.files] == ["ok.log"]
    assert any("alias.log" in s for s in got.skipped)


def test_truncated_gzip_is_refused(tmp_path):
    p = _tar(tmp_path / "b.tar.gz", [_file("a/x.log", LOG * 5000)])
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="truncated or corrupt|truncated inside"):
        read_inputs([p])


def test_truncated_zstd_is_refused(tmp_path):
    raw = io.BytesIO()
    _tar_to(raw, [_file("a/x.log", bytes(range(256)) * 4000)])
    comp = zstandard.ZstdCompressor().compress(raw.getvalue())
    p = tmp_path / "b.tar.zst"
    p.write_bytes(comp[: len(comp) // 2])
    with pytest.raises(InputError):
        read_inputs([p])


def test_not_an_archive_and_empty_archive(tmp_path):
    fake = tmp_path / "notes.tar.gz"
    fake.write_text("free -g output pasted here\n")
    with pytest.raises(InputError, match="not a readable tar archive"):
        read_inputs([fake])
    empty = _tar(tmp_path / "empty.tar.gz", [])
    with pytest.raises(InputError, match="empty archive"):
        read_inputs([empty])


def test_decompression_bomb_stops_past_ratio_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(inputs.limits, "RATIO_CHECK_AFTER", 1 << 20)
    monkeypatch.setattr(inputs.limits, "MAX_RATIO", 50)
    p = _tar(tmp_path / "bomb.tar.gz", [_file("a/zeros.log", b"\0" * (8 << 20))])
    assert p.stat().st_size < (8 << 20) // 50
    with pytest.raises(InputError, match="decompression bomb"):
        read_inputs([p])


def test_member_over_size_cap_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(inputs.limits, "MAX_MEMBER_BYTES", 1000)
    p = _tar(tmp_path / "big.tar", [_file("a/big.log", b"x" * 5000)], "w")
    with pytest.raises(InputError, match="cap"):
        read_inputs([p])


def test_directory_and_loose_files_several_at_once(tmp_path):
    d = tmp_path / "bundle"
    (d / "logs").mkdir(parents=True)
    (d / "logs" / "tp0.log").write_bytes(LOG)
    (d / "outside_link").symlink_to("/etc/hostname")
    loose = tmp_path / "notes.txt"
    loose.write_text("free -g\n")
    got = read_inputs([d, loose])
    names = sorted(f.name for f in got.files)
    assert names == ["bundle/logs/tp0.log", "notes.txt"]
    assert any("outside_link" in s for s in got.skipped)


def test_missing_input_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_inputs([tmp_path / "nope.tar.gz"])


def test_cli_refuses_dotdot_member_with_exit_3_and_writes_nothing_outside(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    evil = _tar(work / "evil.tar", [_file("../x", b"owned\n")], "w")
    out = work / "out"
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "timeline", str(evil), "-o", str(out / "t.parquet")],
                          capture_output=True, text=True, cwd=work)
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "'../x'" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "x").exists() and not (work / "x").exists()
    assert not out.exists()


"""Zip attachments under the tar rules, and archives nested one level deep.

Attacks run through the real command line (``python -m forensics.cli report EVIL -o OUT``): exit code
3, one line on stderr, no traceback, no output written. Nesting and caps are checked at the
read_inputs/build_timeline level, on archives built here from our own text.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from forensics import inputs
from forensics.inputs import InputError, read_inputs
from forensics.timeline import build_timeline

REPO = Path(__file__).resolve().parents[1]
LOG = b"[2026-11-30 10:00:00 TP0] Init torch distributed begin.\n"


def _zip(path: Path, members: list[tuple[zipfile.ZipInfo | str, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for info, data in members:
            zf.writestr(info, data)
    return path


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in members.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def _zip_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _cli(evil: Path, tmp: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), HOME=str(tmp), TMPDIR=str(tmp))
    return subprocess.run([sys.executable, "-m", "forensics.cli", "report", str(evil), "-o", str(tmp / "out")],
                          capture_output=True, text=True, cwd=tmp, env=env, timeout=120)


def _bomb(path: Path) -> Path:
    """One member of 300 MiB of zeros, honestly declared: past the 200× ratio cap once past 256 MiB."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zi = zipfile.ZipInfo("logs/zeros.log")
        zi.compress_type = zipfile.ZIP_DEFLATED
        with zf.open(zi, "w", force_zip64=True) as w:
            block = bytes(1 << 20)
            for _ in range(300):
                w.write(block)
    return path


def _symlink(path: Path) -> Path:
    zi = zipfile.ZipInfo("logs/sglang.log")
    zi.external_attr = (stat.S_IFLNK | 0o777) << 16
    return _zip(path, [("logs/ok.log", LOG), (zi, b"/etc/shadow")])


def _encrypted(path: Path) -> Path:
    """The encryption flag (what `zip -e` sets) in the local and the central header: the reader must
    refuse before trying to inflate (zipfile cannot write encrypted members; the flag is what counts)."""
    data = bytearray(_zip_bytes({"logs/sglang.log": LOG}))
    for sig, at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        i = data.find(sig)
        data[i + at] |= 0x1
    path.write_bytes(bytes(data))
    return path


ATTACKS = {
    "zip bomb": (_bomb, "decompression bomb"),
    "zip-slip ..": (lambda p: _zip(p, [("logs/ok.log", LOG), ("../../etc/cron.d/x", LOG)]), "'..' in path"),
    "zip-slip absolute": (lambda p: _zip(p, [("/etc/cron.d/x", LOG)]), "absolute path"),
    "symlink member": (_symlink, "symbolic link"),
    "encrypted member": (_encrypted, "encrypted"),
    "not a zip": (lambda p: (p.write_bytes(b"PK\x03\x04 but nothing after"), p)[1], "not a readable zip"),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_zip_attack_exits_3_with_one_line(tmp_path: Path, attack: str) -> None:
    build, words = ATTACKS[attack]
    evil = build(tmp_path / "ticket.zip")
    proc = _cli(evil, tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 3, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("forensics: error: ") and words in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def test_zip_total_size_cap(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(inputs.limits, "MAX_TOTAL_BYTES", 5000)
    p = _zip(tmp_path / "t.zip", [(f"logs/{i}.log", os.urandom(2000)) for i in range(4)])
    with pytest.raises(InputError, match="past"):
        read_inputs([p])


def test_zip_members_compressed_and_plain_are_read(tmp_path: Path) -> None:
    p = _zip(tmp_path / "ticket.zip", [("a/server.log.gz", gzip.compress(LOG)), ("a/notes.txt", b"hello\n"),
                                       ("a/", b"")])
    inp = read_inputs([p])
    assert sorted((f.name, f.data) for f in inp.files) == [("notes.txt", b"hello\n"), ("server.log.gz", LOG)]


def test_bundle_inside_a_ticket_zip_is_read_one_level_deep(tmp_path: Path) -> None:
    manifest = {"schema_version": 1, "host": "gpu-node-7",
                "artifacts": [{"path": "logs/sglang.log", "format": "sglang"}]}
    bundle = _tar_gz({"forensics-gpu-node-7/manifest.json": json.dumps(manifest).encode(),
                      "forensics-gpu-node-7/logs/sglang.log": LOG})
    p = _zip(tmp_path / "ticket.zip", [("notes.txt", b"see attached\n"), ("bundle.tar.gz", bundle)])
    tl = build_timeline([p])
    assert sorted(a.path for a in tl.artifacts) == ["bundle.tar.gz/logs/sglang.log", "notes.txt"]
    assert tl.facts.host == "gpu-node-7"  # the nested bundle's manifest speaks for its files
    ev = tl.events.filter(tl.events.get_column("kind") == "dist_init_begin")
    assert ev.select("file", "line").rows() == [("bundle.tar.gz/logs/sglang.log", 1)]


def test_archive_two_levels_deep_is_listed_as_skipped(tmp_path: Path) -> None:
    inner = _tar_gz({"x/deep.log": LOG})
    middle = _zip_bytes({"inner.tar.gz": inner, "middle.log": LOG})
    p = _zip(tmp_path / "ticket.zip", [("middle.zip", middle), ("top.log", LOG)])
    inp = read_inputs([p])
    assert sorted(f.name for f in inp.files) == ["middle.zip/middle.log", "top.log"]
    assert any("middle.zip/inner.tar.gz" in s and "nested" in s for s in inp.skipped), inp.skipped
    tl = build_timeline([p])
    assert any("inner.tar.gz" in g and "skipped" in g for g in tl.facts.gaps)


def test_zip_in_a_folder_is_opened(tmp_path: Path) -> None:
    d = tmp_path / "case"
    d.mkdir()
    _zip(d / "attachment.zip", [("logs/sglang.log", LOG)])
    (d / "notes.txt").write_bytes(b"hello\n")
    assert sorted(f.name for f in read_inputs([d]).files) == ["attachment.zip/sglang.log", "notes.txt"]

"""Archives from strangers, through the real command line.

Every case runs ``python -m forensics.cli report EVIL -o OUT`` in a subprocess with its working
directory, HOME and TMPDIR inside a scratch folder, then checks: exit code 3, exactly one line on
stderr naming the problem, no traceback, and not one file created anywhere (the output folder
included, since nothing was analysed). tests/test_inputs.py covers the same refusals at the
read_inputs level; this file proves the whole command holds.
"""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import tarfile
import uuid
import zlib
from pathlib import Path

import pytest
import zstandard

LOG = b"[2025-11-20 09:14:11 TP0] Init torch distributed begin.\n"
REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------
# Building archives


def _file(name: str, data: bytes = LOG) -> tuple[tarfile.TarInfo, bytes]:
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    return ti, data


def _special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.linkname = linkname
    return ti, None


def _tar_bytes(members) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _gz(raw: bytes) -> bytes:
    return gzip.compress(raw, mtime=0)


def _zst(raw: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(raw)


def _header_only(name: str, size: int) -> bytes:
    """A tar header declaring ``size`` bytes, followed by almost nothing (a liar's header)."""
    ti = tarfile.TarInfo(name)
    ti.size = size
    return ti.tobuf(format=tarfile.GNU_FORMAT) + b"x" * 512


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def sandbox(tmp_path):
    """A scratch working folder with its own HOME and TMPDIR, so stray writes are visible."""
    work = tmp_path / "work"
    for d in ("home", "tmp"):
        (work / d).mkdir(parents=True)
    return work


def run_report(sandbox: Path, evil: Path, *extra: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    before = _tree(sandbox)
    env = dict(os.environ, HOME=str(sandbox / "home"), TMPDIR=str(sandbox / "tmp"),
               PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1")
    env.pop("FORENSICS_DEBUG", None)
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "report", str(evil), "-o", str(sandbox / "out"),
                           *extra], capture_output=True, text=True, cwd=sandbox, env=env, timeout=300)
    return proc, _tree(sandbox) - before


def assert_refused(proc: subprocess.CompletedProcess, created: set[str], *needles: str) -> str:
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.strip("\n").splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("forensics: error: ") and "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert created == set(), f"files appeared: {sorted(created)}"
    assert proc.stdout == ""
    return lines[0]


# ----------------------------------------------------------------------------------------------
# Members that point out of the tree, or are not files


_OUTSIDE = f"/tmp/forensics-pwned-{uuid.uuid4().hex}"


@pytest.mark.parametrize(
    "members,needles",
    [
        ([_file("b/ok.log"), _file(_OUTSIDE)], ["absolute path", _OUTSIDE]),
        ([_file("b/ok.log"), _file("../../pwned.log")], ["'..'", "../../pwned.log"]),
        ([_file("b/ok.log"), _file("b/logs/../../../pwned.log")], ["'..'"]),
        ([_file("b/ok.log"), _file("C:\\Windows\\pwned.log")], ["absolute path"]),
        ([_file("b/ok.log"), _special("b/etc", tarfile.SYMTYPE, "/etc"), _file("b/etc/pwned")],
         ["symlink pointing outside", "'/etc'"]),
        ([_file("b/ok.log"), _special("b/up", tarfile.SYMTYPE, "../../..")], ["symlink pointing outside"]),
        ([_file("b/ok.log"), _special("b/x/y", tarfile.SYMTYPE, "../../../etc/passwd")], ["symlink pointing outside"]),
        ([_file("b/ok.log"), _special("b/shadow", tarfile.LNKTYPE, "/etc/shadow")], ["hardlink pointing outside"]),
        ([_file("b/ok.log"), _special("b/h", tarfile.LNKTYPE, "../../etc/shadow")], ["hardlink pointing outside"]),
        ([_file("b/ok.log"), _special("b/nvidia0", tarfile.CHRTYPE)], ["device or FIFO", "b/nvidia0"]),
        ([_file("b/ok.log"), _special("b/sda", tarfile.BLKTYPE)], ["device or FIFO"]),
        ([_file("b/ok.log"), _special("b/pipe", tarfile.FIFOTYPE)], ["device or FIFO"]),
    ],
    ids=["absolute", "dotdot", "dotdot-inner", "drive-letter", "symlink-abs-then-write-through", "symlink-up",
         "symlink-rel-out", "hardlink-abs", "hardlink-rel-out", "chardev", "blockdev", "fifo"],
)
def test_unsafe_members_are_refused_end_to_end(sandbox, members, needles):
    _refuse_unsafe(sandbox, members, needles, "tar.gz")


# The plain and zstd streams take the same member checks; one escape of each kind is enough there.
@pytest.mark.parametrize("compress", ["tar", "tar.zst"])
@pytest.mark.parametrize("members,needles", [
    ([_file("b/ok.log"), _file("../../pwned.log")], ["'..'"]),
    ([_file("b/ok.log"), _special("b/etc", tarfile.SYMTYPE, "/etc"), _file("b/etc/pwned")], ["symlink pointing"]),
], ids=["dotdot", "symlink"])
def test_unsafe_members_in_other_containers(sandbox, members, needles, compress):
    _refuse_unsafe(sandbox, members, needles, compress)


def _refuse_unsafe(sandbox, members, needles, compress):
    raw = _tar_bytes(members)
    data = {"tar": raw, "tar.gz": _gz(raw), "tar.zst": _zst(raw)}[compress]
    evil = sandbox / f"evil.{compress}"
    evil.write_bytes(data)
    proc, created = run_report(sandbox, evil)
    assert_refused(proc, created - {f"evil.{compress}"}, *needles)
    assert not Path(_OUTSIDE).exists()
    assert not (sandbox.parent / "pwned.log").exists() and not (sandbox / "pwned.log").exists()


def test_member_name_with_newline_and_escapes_stays_one_line(sandbox):
    evil = sandbox / "evil.tar"
    evil.write_bytes(_tar_bytes([_file("b/ok.log"), _file("../x\nforensics: all good\x1b[2J")]))
    proc, created = run_report(sandbox, evil)
    line = assert_refused(proc, created, "'..'")
    assert "\x1b" not in proc.stderr and "\\n" in line  # the name is quoted, not replayed


def test_unsafe_archive_inside_a_directory_input(sandbox):
    d = sandbox / "ticket"
    d.mkdir()
    (d / "notes.txt").write_text("free -g pasted below\n")
    (d / "bundle.tar.gz").write_bytes(_gz(_tar_bytes([_file("b/ok.log"), _file("../../pwned")])))
    proc, created = run_report(sandbox, d)
    assert_refused(proc, created, "bundle.tar.gz", "'..'")


# ----------------------------------------------------------------------------------------------
# Sizes: lying headers and decompression bombs


def test_declared_size_over_the_member_cap(sandbox):
    evil = sandbox / "huge.tar.gz"
    evil.write_bytes(_gz(_header_only("b/huge.log", 100 << 30)))
    proc, created = run_report(sandbox, evil)
    assert_refused(proc, created - {"huge.tar.gz"}, "b/huge.log", "cap")


def test_declared_size_under_the_cap_but_data_missing(sandbox):
    evil = sandbox / "liar.tar.zst"
    evil.write_bytes(_zst(_header_only("b/liar.log", 3 << 30)))
    proc, created = run_report(sandbox, evil)
    assert_refused(proc, created - {"liar.tar.zst"}, "truncated")


def _zstd_bomb(members: int, member_bytes: int) -> bytes:
    """Each member is one zstd frame of zeros a few KB long; zstd reads the frames as one stream."""
    ti = tarfile.TarInfo("b/zeros.log")
    ti.size = member_bytes
    frame = _zst(ti.tobuf(format=tarfile.GNU_FORMAT) + b"\0" * member_bytes)
    return frame * members + _zst(b"\0" * 1024)


def test_many_member_zstd_bomb_stops_at_the_ratio_cap(sandbox):
    evil = sandbox / "bomb.tar.zst"
    evil.write_bytes(_zstd_bomb(members=64, member_bytes=64 << 20))  # 4 GiB from ~150 KB
    assert evil.stat().st_size < 1 << 20
    proc, created = run_report(sandbox, evil)
    assert_refused(proc, created - {"bomb.tar.zst"}, "decompression bomb")


def test_many_member_gzip_bomb_stops_at_the_ratio_cap(sandbox):
    one = tarfile.TarInfo("b/zeros.log")
    one.size = 40 << 20
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip container
    out = [comp.compress(b"")]
    for i in range(10):  # 400 MiB of zeros in ten members, ~400 KB compressed
        one.name = f"b/zeros{i}.log"
        out.append(comp.compress(one.tobuf(format=tarfile.GNU_FORMAT)))
        for _ in range(40):
            out.append(comp.compress(b"\0" * (1 << 20)))
    out.append(comp.compress(b"\0" * 1024) + comp.flush())
    evil = sandbox / "bomb.tar.gz"
    evil.write_bytes(b"".join(out))
    proc, created = run_report(sandbox, evil)
    assert_refused(proc, created - {"bomb.tar.gz"}, "decompression bomb")


def _peak_rss_of(cmd: list[str], cwd: Path, env: dict) -> tuple[subprocess.CompletedProcess, int]:
    """Run ``cmd`` under a small launcher that reports its child's peak RSS (KiB), so the number
    is this command's and not that of whatever else this test worker ran before."""
    launcher = ("import resource, subprocess, sys\n"
                "p = subprocess.run(sys.argv[1:])\n"
                "sys.stdout.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
                "sys.exit(p.returncode)\n")
    proc = subprocess.run([sys.executable, "-c", launcher, *cmd], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)
    return proc, int(proc.stdout.strip() or 0)


def test_single_member_bomb_is_stopped_while_streaming(sandbox):
    evil = sandbox / "bomb.tar.zst"
    evil.write_bytes(_zstd_bomb(members=1, member_bytes=600 << 20))
    env = dict(os.environ, HOME=str(sandbox / "home"), TMPDIR=str(sandbox / "tmp"), PYTHONPATH=str(REPO))
    proc, peak_kib = _peak_rss_of([sys.executable, "-m", "forensics.cli", "report", str(evil), "-o",
                                   str(sandbox / "out")], sandbox, env)
    assert proc.returncode == 3 and "decompression bomb" in proc.stderr
    # the ratio cap trips after RATIO_CHECK_AFTER (256 MiB); holding more than that is the bug
    assert peak_kib < 450 * 1024, f"peak RSS {peak_kib // 1024} MiB"


# ----------------------------------------------------------------------------------------------
# Broken and fake archives


def _good_tar() -> bytes:
    return _tar_bytes([_file(f"b/logs/tp{i}.log", LOG * 4000) for i in range(3)])


# Cuts inside the member data. (Cutting only a plain tar's trailing zero padding loses nothing and
# is read as complete, which is right.)
@pytest.mark.parametrize("fraction", [0.01, 0.5])
@pytest.mark.parametrize("suffix", ["tar.gz", "tar.zst", "tar"])
def test_truncated_archives(sandbox, suffix, fraction):
    raw = _good_tar()
    data = {"tar": raw, "tar.gz": _gz(raw), "tar.zst": _zst(raw)}[suffix]
    cut = data[: int(len(data) * fraction)]
    evil = sandbox / f"cut.{suffix}"
    evil.write_bytes(cut)
    proc, created = run_report(sandbox, evil)
    assert_refused(proc, created - {f"cut.{suffix}"})


@pytest.mark.parametrize(
    "name,data,needle",
    [
        ("notes.tar.gz", b"free -g output pasted here\n", "not a readable tar archive"),
        ("random.tar.gz", b"\x1f\x8b\x08\x00" + bytes(range(256)) * 8, ""),
        ("random.tar.zst", b"\x28\xb5\x2f\xfd" + bytes(range(255, -1, -1)) * 8, ""),
        ("random.tar", bytes(range(256)) * 8, ""),
        ("zero.tar.gz", b"", ""),
        ("html.tgz", b"<html><body>404 Not Found</body></html>\n", ""),
        ("bz2.tar.gz", b"BZh91AY&SY" + b"\0" * 100, ""),
    ],
)
def test_not_an_archive_at_all(sandbox, name, data, needle):
    evil = sandbox / name
    evil.write_bytes(data)
    proc, created = run_report(sandbox, evil)
    assert_refused(proc, created - {name}, name, needle)


@pytest.mark.parametrize(
    "members,needle",
    [
        ([], "empty archive"),
        ([_special("b/", tarfile.DIRTYPE), _special("b/logs/", tarfile.DIRTYPE)], "no regular files"),
        ([_special("b/alias", tarfile.SYMTYPE, "other")], "no regular files"),
    ],
    ids=["no-members", "only-directories", "only-an-inside-link"],
)
def test_empty_archives(sandbox, members, needle):
    _refuse_empty(sandbox, members, needle, "tar.gz")


@pytest.mark.parametrize("compress", ["tar", "tar.zst"])
def test_empty_archives_other_containers(sandbox, compress):
    _refuse_empty(sandbox, [], "empty archive", compress)


def _refuse_empty(sandbox, members, needle, compress):
    raw = _tar_bytes(members)
    data = {"tar": raw, "tar.gz": _gz(raw), "tar.zst": _zst(raw)}[compress]
    evil = sandbox / f"empty.{compress}"
    evil.write_bytes(data)
    proc, created = run_report(sandbox, evil)
    assert_refused(proc, created - {f"empty.{compress}"}, needle)


def test_good_archive_next_to_the_hostile_ones_still_reports(sandbox):
    """The control: the same command on a sane bundle exits 0 and writes only into -o."""
    good = sandbox / "good.tar.gz"
    good.write_bytes(_gz(_good_tar()))
    proc, created = run_report(sandbox, good, "-q")
    assert proc.returncode == 0, proc.stderr
    assert created - {"good.tar.gz"} and all(c == "out" or c.startswith("out/") for c in created - {"good.tar.gz"})
    assert (sandbox / "out" / "findings.json").exists() and not list((sandbox / "tmp").iterdir())


# ----------------------------------------------------------------------------------------------
# Not a file at all, given as INPUT


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # a bug here must not take the runner down


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_fifo_or_device_as_input_is_refused_promptly(sandbox, kind):
    if kind == "fifo":
        target = sandbox / "evidence.log"
        os.mkfifo(target)
    else:
        target = Path("/dev/zero")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "report", str(target), "-o", str(sandbox / "out")],
                          capture_output=True, text=True, cwd=sandbox, env=env, timeout=6, preexec_fn=_limit_memory)
    assert proc.returncode == 3 and len(proc.stderr.strip().splitlines()) == 1
    assert "MemoryError" not in proc.stderr  # refused, not read until memory ran out
    assert not (sandbox / "out").exists()

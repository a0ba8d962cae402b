"""Read every input the commands accept: bundles (tar, tar.gz/tgz, tar.zst, tar.xz, tar.bz2, zip), directories,
loose files, each possibly compressed (gzip, bzip2, xz, zstd: see :mod:`forensics.inputs.unpack`, which also opens
archives nested one level deep), and rotation sets read as one log (:mod:`forensics.inputs.rotation`).

Archives are streamed member by member; no member is ever written under its own name. Small
members are read into memory. A member over the streaming threshold (see :func:`read_archive`) is
spooled, as it streams out of the archive and under the same caps, into an anonymous file
(``mkstemp``, mode 0600) in a private folder (``mkdtemp``, mode 0700) next to the output when one is
known, else in the system's temp folder; the timeline then streams it like a big loose file. The
folder goes when the :class:`InputSet` is closed (``with read_inputs(...) as inp``), when nothing
refers to it any more, or at exit, whichever comes first, and on every error while reading.

A member that could escape (absolute path, ``..``, a link pointing outside, a device or FIFO), a member or archive
whose decompressed size passes the caps (decompression bombs), a truncated or corrupt archive,
or an archive with nothing in it stops the command: :class:`InputError` carries one line for
stderr and the CLI exits with code 3.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import posixpath
import re
import shutil
import stat
import tarfile
import tempfile
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import zstandard

from .tar_headers import BoundedTarInfo, HeaderRefused

#: Caps on what one input may expand to. A 2 GB rank log must pass; a zip bomb must not.
MAX_MEMBER_BYTES = 8 << 30
MAX_TOTAL_BYTES = 32 << 30
#: Decompressed/compressed ratio above which a large archive is treated as a bomb.
MAX_RATIO = 200
RATIO_CHECK_AFTER = 256 << 20
#: Regular files above this size are streamed in chunks instead of read whole.
STREAM_BYTES = 64 << 20
#: When all inputs together pass STREAM_BYTES, files above this size are streamed too: eight 32 MiB
#: rank logs are as big an input as one 256 MiB log and must not be held whole either.
STREAM_BYTES_BIG_INPUT = 1 << 20
#: Files one input may hold, all its folders and archives together (nested ones included): a host's
#: bundle holds tens; each file costs milliseconds to sort and parse, so 200,000 tiny members in a
#: 3 MB .tar.gz would run for many minutes and write a report of 100+ MB.
MAX_FILES = 10_000

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.zstd", ".tzst", ".tar.xz", ".txz", ".tar.bz2",
                    ".tbz2", ".tbz", ".zip")
#: Lines longer than this are cut here (the rest of the line is dropped and the cut counted): a
#: request body logged whole must not take the parse, or memory, with it.
MAX_LINE_BYTES = 1 << 20


class InputError(Exception):
    """Input unreadable or unsafe. ``str(e)`` is the one line shown to the user."""


@dataclass
class InputFile:
    """One file of the input, named as it is inside the bundle (forward slashes, no leading ./)."""

    name: str
    data: bytes
    origin: str  # the INPUT argument it came from
    mtime: float | None = None
    #: a regular file over STREAM_BYTES is not read here: ``data`` stays empty and readers stream ``path``
    path: Path | None = None
    size: int | None = None
    #: the spool a spooled archive member's ``path`` lies in: kept alive as long as the file is
    spool: _Spool | None = field(default=None, repr=False, compare=False)
    #: how many archives enclose it (0: loose or in a folder; 1: in an archive; 2: in an archive in one)
    depth: int = 0
    #: the compression it was read out of (gzip, bzip2, xz, zstd), if any
    compression: str | None = None
    #: lines cut at MAX_LINE_BYTES by the last full read (:meth:`chunks`)
    cut_lines: int = 0
    #: a rotation set read as one log: (member name, its first line in this file), oldest first
    parts: list[tuple[str, int]] | None = None

    @property
    def streamed(self) -> bool:
        return self.path is not None

    @property
    def nbytes(self) -> int:
        return self.size if self.size is not None else len(self.data)

    def head(self, n: int) -> bytes:
        if self.path is None:
            return self.data[:n]
        with open(self.path, "rb") as fh:
            return fh.read(n)

    def chunks(self, size: int = 32 << 20) -> Iterator[bytes | bytearray]:
        """The content in pieces of about ``size`` bytes, each ending at a line end (but the last), with
        every line longer than MAX_LINE_BYTES cut there (counted in ``cut_lines`` once read through).

        Each piece is a fresh buffer (callers may keep views into it), read straight into place: the
        carried-over tail is the only thing copied, and it never holds more than one cut line."""
        if self.path is None:
            data, self.cut_lines = cut_long_lines(self.data)
            yield data
            return
        carry = b""
        skipping = False  # inside a line already cut: drop bytes up to its end
        cuts = 0
        try:
            with open(self.path, "rb", buffering=0) as fh:
                while True:
                    buf = bytearray(len(carry) + size)
                    buf[:len(carry)] = carry
                    got = fh.readinto(memoryview(buf)[len(carry):])
                    if not got:
                        break
                    end = len(carry) + got
                    if skipping:
                        nl = buf.find(b"\n", len(carry), end)
                        if nl < 0:
                            continue
                        del buf[len(carry):nl]
                        end -= nl - len(carry)
                        skipping = False
                    cut = buf.rfind(b"\n", 0, end) + 1
                    tail = buf[cut:end]
                    if len(tail) > MAX_LINE_BYTES:
                        tail, skipping = tail[:MAX_LINE_BYTES], True
                        cuts += 1
                    carry = bytes(tail)
                    if cut == 0:
                        continue
                    del buf[cut:]
                    out, n = cut_long_lines(buf)
                    cuts += n
                    yield out
        except OSError as e:
            raise InputError(f"{self.path}: unreadable ({_why(e)})") from None
        self.cut_lines = cuts
        if carry:
            yield carry


def cut_long_lines(buf: bytes | bytearray, limit: int | None = None) -> tuple[bytes | bytearray, int]:
    """``buf`` with every line longer than ``limit`` (MAX_LINE_BYTES) cut to it; and how many were cut.

    Only stretches of ``limit // 2`` bytes without a line end are looked at closely (a longer line holds
    one wherever it starts), so a buffer of ordinary lines costs a few ``find`` calls, not one a line.

    >>> data, n = cut_long_lines(b"ok\\n" + b"x" * 10 + b"\\nok\\n", limit=4)
    >>> bytes(data), n
    (b'ok\\nxxxx\\nok\\n', 1)
    """
    limit = MAX_LINE_BYTES if limit is None else limit
    n = len(buf)
    if n <= limit:
        return buf, 0
    half = max(limit // 2, 1)
    spans: list[tuple[int, int]] = []
    p = 0
    while p + half <= n:
        if buf.find(b"\n", p, p + half) >= 0:
            p += half
            continue
        start = buf.rfind(b"\n", 0, p) + 1
        end = buf.find(b"\n", p + half)
        end = n if end < 0 else end
        if end - start > limit:
            spans.append((start + limit, end))
        p = end + 1
    if not spans:
        return buf, 0
    out = bytearray()
    prev = 0
    for a, b in spans:
        out += buf[prev:a]
        prev = b
    out += buf[prev:]
    return out, len(spans)


def looks_binary(head: bytes) -> bool:
    """Whether a file's first bytes are not text: mostly invalid UTF-8 or control characters once NULs
    are set aside (a log with a run of NULs where the host crashed is still a log), or nothing but NULs.

    >>> looks_binary(b"[2026-11-30 10:00:00] ok\\n" + b"\\0" * 100), looks_binary(bytes(range(256)) * 4)
    (False, True)
    >>> looks_binary(b"\\xa5" * 4096)  # invalid to the end: not "a character cut by the end"
    True
    """
    if not head:
        return False
    rest = head.replace(b"\0", b"")
    if not rest:
        return True
    text = rest.decode("utf-8", errors="replace")
    if len(rest) >= 4 and text.endswith("\ufffd"):  # a character cut by the end of the head (one, not a run)
        text = text[:-1]
    bad = text.count("\ufffd") + sum(1 for c in text if c < " " and c not in "\t\n\r\f\v\x1b\x08")
    return bad > len(text) // 10


class _Spool:
    """A private folder for big archive members, made on first use. ``close()`` removes it; so does
    the garbage collector once no InputSet or InputFile refers to it, and the interpreter at exit."""

    def __init__(self, where: str | os.PathLike | None) -> None:
        self.where = where
        self.dir: str | None = None
        self._gone: weakref.finalize | None = None

    def new_file(self) -> tuple[int, Path]:
        if self.dir is None:
            # next to the output when it exists, not a folder made here that could outlive the run
            where = self.where if self.where is not None and os.path.isdir(self.where) else None
            self.dir = tempfile.mkdtemp(prefix=".forensics-spool-", dir=where)
            self._gone = weakref.finalize(self, shutil.rmtree, self.dir, True)
        # an anonymous name: nothing from the archive reaches the filesystem
        fd, name = tempfile.mkstemp(suffix=".member", dir=self.dir)
        return fd, Path(name)

    def close(self) -> None:
        if self._gone is not None:
            self._gone()


@dataclass
class InputSet:
    files: list[InputFile] = field(default_factory=list)
    manifest: dict | None = None
    skipped: list[str] = field(default_factory=list)  # links inside the tree, empty files… in words
    spool: _Spool | None = field(default=None, repr=False, compare=False)

    def close(self) -> None:
        """Remove the spooled archive members (their InputFiles cannot be read afterwards)."""
        if self.spool is not None:
            self.spool.close()

    def __enter__(self) -> InputSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_SURROGATE = re.compile("[\ud800-\udfff]")


def text_name(name: str) -> str:
    """A name as text every writer accepts: the bytes a file system or tar header held that are not
    UTF-8 (Python keeps them as lone surrogates, which polars, JSON and HTML writers refuse) shown as
    ``\\xNN``, any other lone surrogate as U+FFFD.

    >>> text_name(os.fsdecode(b"rank0-\\xff.log")), text_name("ok.log")
    ('rank0-\\\\xff.log', 'ok.log')
    """
    if not _SURROGATE.search(name):
        return name
    return _SURROGATE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}" if 0xDC80 <= ord(m.group()) <= 0xDCFF
                          else "\ufffd", name)


def is_archive_name(path: str | os.PathLike) -> bool:
    name = str(path).lower()
    return name.endswith(ARCHIVE_SUFFIXES)


def _safe_member_name(name: str, archive: str) -> str:
    """Normalise a member name or refuse it."""
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise InputError(f"{archive}: refusing member {name!r}: absolute path")
    parts = name.replace("\\", "/").split("/")
    if ".." in parts:
        raise InputError(f"{archive}: refusing member {name!r}: '..' in path")
    norm = posixpath.normpath("/".join(p for p in parts if p not in ("", ".")))
    return "" if norm == "." else norm


class _CountingReader(io.RawIOBase):
    """Counts compressed bytes read so the decompression ratio can be checked while streaming."""

    def __init__(self, raw: io.BufferedIOBase):
        self.raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        data = self.raw.read(len(b))
        n = len(data)
        b[:n] = data
        self.count += n
        return n


def _open_archive_stream(path: Path | None, stream=None,
                         label: str | None = None) -> tuple[tarfile.TarFile, _CountingReader, object]:
    raw = stream if stream is not None else open(path, "rb")  # noqa: SIM115 - closed by the caller
    counter = _CountingReader(raw)
    buffered = io.BufferedReader(counter, buffer_size=1 << 20)
    head = raw.read(6)
    raw.seek(0)
    name = (label or path.name).lower() if (label or path) else ""
    try:
        if name.endswith((".tar.zst", ".tar.zstd", ".tzst")) or head.startswith(b"\x28\xb5\x2f\xfd"):
            dctx = zstandard.ZstdDecompressor()
            stream = dctx.stream_reader(buffered, read_across_frames=True)
            tf = tarfile.open(fileobj=stream, mode="r|", tarinfo=BoundedTarInfo)  # noqa: SIM115 - streamed; raw is closed by the caller
        else:
            # r|* sniffs gzip/bz2/xz/plain from the magic bytes
            tf = tarfile.open(fileobj=buffered, mode="r|*", tarinfo=BoundedTarInfo)  # noqa: SIM115 - as above
    except HeaderRefused as e:
        raw.close()
        raise InputError(f"{label or path}: refusing archive: {e}") from None
    except (tarfile.TarError, zstandard.ZstdError, OSError, EOFError, ValueError) as e:  # ValueError: a bad pax field
        raw.close()
        raise InputError(f"{label or path}: not a readable tar archive ({_why(e)})") from None
    return tf, counter, raw


def _why(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return msg[:200]


def read_archive(path: Path | None, spool: _Spool | None = None, big: bool = False, *, stream=None,
                 label: str | None = None, depth: int = 1, tick=None) -> tuple[list[InputFile], list[str]]:
    """Stream one tar archive (``path``, or the seekable binary ``stream`` called ``label``); return its
    regular files (``depth`` archives deep) and what was skipped (in words). ``tick``, if given, hears
    the compressed bytes read so far (a progress bar's counter).

    With a ``spool``, a member declaring more than STREAM_BYTES is spooled to a private file instead
    of read into memory; so is one over STREAM_BYTES_BIG_INPUT once the input is ``big`` (the inputs
    on disk pass STREAM_BYTES) or the sizes the archive's headers declared so far, this member's
    included, pass STREAM_BYTES; members already read by then that are over STREAM_BYTES_BIG_INPUT are
    spooled at that point. What stays in memory is then, as for a directory, the whole input when it is
    at most STREAM_BYTES, else only members under STREAM_BYTES_BIG_INPUT.
    """
    files: list[InputFile] = []
    skipped: list[str] = []
    total = 0
    declared = 0
    tf, counter, raw = _open_archive_stream(path, stream, label)
    arch = label or str(path)
    try:
        members_seen = 0
        for member in tf:
            members_seen += 1
            if members_seen > MAX_FILES:
                raise InputError(f"{arch}: refusing archive: more than {MAX_FILES:,} members")
            name = _safe_member_name(member.name, arch)
            if member.isdir() or not name:
                continue
            if member.issym() or member.islnk():
                target = member.linkname
                base = posixpath.dirname(name) if member.issym() else ""
                resolved = posixpath.normpath(posixpath.join(base, target)) if not target.startswith("/") else target
                if target.startswith("/") or resolved == ".." or resolved.startswith("../"):
                    kind = "symlink" if member.issym() else "hardlink"
                    raise InputError(f"{arch}: refusing member {member.name!r}: {kind} pointing outside the archive ({target!r})")
                skipped.append(f"{name}: link to {target} not followed")
                continue
            if member.ischr() or member.isblk() or member.isfifo() or member.isdev():
                raise InputError(f"{arch}: refusing member {member.name!r}: device or FIFO")
            if not member.isreg():
                raise InputError(f"{arch}: refusing member {member.name!r}: not a regular file")
            if member.size > MAX_MEMBER_BYTES:
                raise InputError(f"{arch}: refusing member {member.name!r}: declares {member.size} bytes, over the {MAX_MEMBER_BYTES >> 30} GiB cap")
            declared += member.size
            over = min(STREAM_BYTES, STREAM_BYTES_BIG_INPUT) if big or declared > STREAM_BYTES else STREAM_BYTES
            if spool is not None and over < STREAM_BYTES:
                _spool_held(files, over, arch, spool)
            # a bundle's manifest is read whole (it is small; a huge one is spooled and not taken as one)
            manifest = posixpath.basename(name) == "manifest.json" and member.size <= STREAM_BYTES
            fobj = tf.extractfile(member)
            if spool is not None and fobj is not None and member.size > over and not manifest:
                got, where = _spool_capped(fobj, member.size, arch, member.name, total, counter, spool, tick)
                total += got
                files.append(InputFile(name=name, data=b"", origin=arch, mtime=float(member.mtime), path=where,
                                       size=got, spool=spool, depth=depth))
                continue
            data = _read_capped(fobj, member.size, arch, member.name, total, counter, tick) if fobj else b""
            total += len(data)
            files.append(InputFile(name=name, data=data, origin=arch, mtime=float(member.mtime), depth=depth))
        if members_seen == 0:
            raise InputError(f"{arch}: empty archive: nothing to read")
    except InputError:
        raise
    except HeaderRefused as e:
        raise InputError(f"{arch}: refusing archive: {e}") from None
    except (tarfile.TarError, zstandard.ZstdError, OSError, EOFError, ValueError) as e:
        raise InputError(f"{arch}: archive is truncated or corrupt ({_why(e)})") from None
    finally:
        raw.close()
    if not files:
        raise InputError(f"{arch}: archive holds no regular files")
    return files, skipped


def _spool_held(files: list[InputFile], over: int, arch: str, spool: _Spool) -> None:
    """The input just turned out big: members read into memory while it looked small go to the spool
    too, as a directory's files would have streamed, so that what stays in memory is small files only
    (else the first 64 MiB of members were parsed whole, a peak of several hundred MB)."""
    for i, f in enumerate(files):
        if f.streamed or len(f.data) <= over or posixpath.basename(f.name) == "manifest.json":
            continue
        _got, where = _to_spool(spool, arch, f.name, [f.data])
        files[i] = InputFile(name=f.name, data=b"", origin=f.origin, mtime=f.mtime, path=where, size=len(f.data),
                             spool=spool, depth=f.depth)


def _check_expansion(total: int, counter: _CountingReader, arch: str) -> None:
    """Stop a decompression bomb while it expands, not after it has filled memory."""
    if total > MAX_TOTAL_BYTES:
        raise InputError(f"{arch}: refusing archive: expands past {MAX_TOTAL_BYTES >> 30} GiB")
    if total > RATIO_CHECK_AFTER and counter.count and total / counter.count > MAX_RATIO:
        raise InputError(f"{arch}: refusing archive: expands {total // max(counter.count, 1)}× (decompression bomb?)")


def _capped_chunks(fobj, declared: int, arch: str, member: str, before: int,
                   counter: _CountingReader, tick=None) -> Iterator[bytes]:
    """One member in 1 MiB steps, checking the size and ratio caps after every step."""
    got = 0
    while chunk := fobj.read(1 << 20):
        got += len(chunk)
        if got > MAX_MEMBER_BYTES:
            raise InputError(f"{arch}: refusing member {member!r}: over the {MAX_MEMBER_BYTES >> 30} GiB cap")
        _check_expansion(before + got, counter, arch)
        if tick is not None:
            tick(counter.count)
        yield chunk
    if got < declared:
        raise InputError(f"{arch}: archive is truncated inside member {member!r}")


def _read_capped(fobj, declared: int, arch: str, member: str, before: int, counter: _CountingReader,
                 tick=None) -> bytes:
    return b"".join(_capped_chunks(fobj, declared, arch, member, before, counter, tick))


def _spool_capped(fobj, declared: int, arch: str, member: str, before: int, counter: _CountingReader,
                  spool: _Spool, tick=None) -> tuple[int, Path]:
    """Copy one member to a new file in the spool, under the caps of _read_capped."""
    return _to_spool(spool, arch, member, _capped_chunks(fobj, declared, arch, member, before, counter, tick))


def _to_spool(spool: _Spool, arch: str, member: str, chunks: Iterable[bytes]) -> tuple[int, Path]:
    """Write ``chunks`` to a new file in the spool; its size and path. A partial copy never stays."""
    fd, where = spool.new_file()
    got = 0
    try:
        with open(fd, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
                got += len(chunk)
    except OSError as e:
        with contextlib.suppress(OSError):
            where.unlink()
        raise InputError(f"{arch}: cannot spool member {member!r} to {where.parent} ({_why(e)})") from None
    except BaseException:
        with contextlib.suppress(OSError):  # the folder goes too; the partial copy need not wait for it
            where.unlink()
        raise
    return got, where


def _strip_common_top(files: list[InputFile]) -> None:
    """Bundles have one top folder (forensics-host-stamp/); names inside the bundle drop it."""
    tops = {f.name.split("/", 1)[0] for f in files}
    if len(tops) == 1 and all("/" in f.name for f in files):
        cut = len(next(iter(tops))) + 1
        for f in files:
            f.name = f.name[cut:]


def read_directory(root: Path, stream_over: int = STREAM_BYTES,
                   spool: _Spool | None = None) -> tuple[list[InputFile], list[str]]:
    files: list[InputFile] = []
    skipped: list[str] = []
    root_real = root.resolve()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for fn in sorted(filenames):
            p = Path(dirpath) / fn
            rel = p.relative_to(root).as_posix()
            try:
                st = p.lstat()
            except OSError as e:
                skipped.append(f"{rel}: unreadable ({_why(e)})")
                continue
            if stat.S_ISLNK(st.st_mode):
                try:
                    target = p.resolve(strict=True)
                except RuntimeError:  # Python before 3.13 raises this for a loop (3.13: OSError ELOOP)
                    skipped.append(f"{rel}: symbolic link loop")
                    continue
                except OSError:
                    skipped.append(f"{rel}: dangling link")
                    continue
                if not target.is_relative_to(root_real):
                    skipped.append(f"{rel}: link pointing outside {root} not followed")
                    continue
                try:
                    st = target.stat()
                except OSError as e:
                    skipped.append(f"{rel}: unreadable ({_why(e)})")
                    continue
            if not stat.S_ISREG(st.st_mode):
                skipped.append(f"{rel}: not a regular file")
                continue
            if len(files) >= MAX_FILES:
                raise InputError(f"{root}: refusing folder: more than {MAX_FILES:,} files")
            # archives and compressed files are opened by the caller (forensics.inputs.unpack), by content
            if st.st_size > stream_over and fn != "manifest.json":
                files.append(InputFile(name=rel, data=b"", origin=str(root), mtime=st.st_mtime, path=p,
                                       size=st.st_size))
                continue
            try:
                data = p.read_bytes()
            except OSError as e:
                skipped.append(f"{rel}: unreadable ({_why(e)})")
                continue
            files.append(InputFile(name=rel, data=data, origin=str(root), mtime=st.st_mtime))
    return files, skipped


def read_inputs(paths: list[str | os.PathLike], spool_dir: str | os.PathLike | None = None,
                progress=None) -> InputSet:
    """Read all INPUT arguments into one set of named files (plus the bundle manifest, if any).

    Big archive members are spooled into a private folder under ``spool_dir`` (the system's temp
    folder if None or missing); close the set, or use it as a context manager, to remove it.
    ``progress`` (a callable taking one line, see :mod:`forensics.progress`) hears of long decompressions."""
    if not paths:
        raise InputError("no input given")
    out = InputSet(spool=_Spool(spool_dir))
    try:
        _read_into(out, paths, progress)
    except BaseException:  # a refusal, an unreadable file, Ctrl-C: nothing spooled stays behind
        out.close()
        raise
    return out


def _read_into(out: InputSet, paths: list[str | os.PathLike], progress=None) -> None:
    from forensics.inputs import rotation, unpack
    from forensics.progress import byte_task

    big = _total_size(paths) > STREAM_BYTES
    stream_over = min(STREAM_BYTES, STREAM_BYTES_BIG_INPUT) if big else STREAM_BYTES
    used_names: set[str] = set()
    multi = len(paths) > 1
    tasks = (lambda label, total: byte_task(progress, label, total)) if progress else None
    expander = unpack.Expander(out.spool, stream_over, big, tasks)
    for arg in paths:
        p = Path(arg)
        try:
            st = p.stat()
        except FileNotFoundError:
            raise InputError(f"{arg}: no such file or directory") from None
        except OSError as e:
            raise InputError(f"{arg}: unreadable ({_why(e)})") from None
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            # a FIFO would block the read forever, /dev/zero never ends: only files and folders
            raise InputError(f"{arg}: not a regular file or directory (device, FIFO or socket)")
        if p.is_dir():
            files, skipped = read_directory(p, stream_over, out.spool)
            files = expander.expand(files)
            prefix = f"{p.name}/" if multi else ""
        else:
            # by content, whatever the name: an archive's members, a decompressed file, or the file itself
            loose = InputFile(name=p.name, data=b"", origin=str(arg), mtime=st.st_mtime, path=p, size=st.st_size)
            files, skipped = expander.one(loose, prefix_members=False), []
            prefix = f"{p.name}/" if multi and any(f.depth for f in files) else ""
            if len(files) == 1 and files[0] is loose and (st.st_size <= stream_over or p.name == "manifest.json"):
                try:
                    loose.data, loose.path, loose.size = p.read_bytes(), None, None
                except OSError as e:
                    raise InputError(f"{arg}: unreadable ({_why(e)})") from None
        skipped = skipped + expander.skipped
        expander.skipped = []
        for f in files:
            if out.manifest is None and _manifest_place(f, expander.roots) is not None:
                out.manifest, notes = bundle_manifest(_load_manifest(f, arg))
                out.skipped.extend(notes)
                if out.manifest is not None:
                    _place_manifest(out.manifest, _manifest_place(f, expander.roots) or "")
                    continue
            name = text_name(prefix + f.name)
            f.origin = text_name(f.origin)
            base, n = name, 2
            while name in used_names:
                name = f"{base}~{n}"
                n += 1
            used_names.add(name)
            f.name = name
            out.files.append(f)
        out.skipped.extend(text_name(s) for s in skipped)
        if len(out.files) > MAX_FILES:
            raise InputError(f"refusing input: more than {MAX_FILES:,} files in all")
    if not out.files:
        raise InputError("input holds no files to read")
    out.files = rotation.join_sets(out.files, out.spool, stream_over)


def _manifest_place(f: InputFile, roots: set[str]) -> str | None:
    """The folder a bundle's manifest.json speaks for: "" at the top, a nested bundle's name inside a
    ticket's archive; None when ``f`` is no bundle manifest."""
    if f.name == "manifest.json":
        return ""
    where, base = posixpath.split(f.name)
    return where if base == "manifest.json" and where in roots else None


def _place_manifest(manifest: dict, where: str) -> None:
    """A nested bundle's artifacts are named under the archive that held it."""
    if not where:
        return
    for a in manifest.get("artifacts") or []:
        if isinstance(a, dict) and isinstance(a.get("path"), str):
            a["path"] = f"{where}/{a['path']}"


def _total_size(paths: list[str | os.PathLike]) -> int:
    """Bytes of the regular files under all inputs (stat only, links not followed)."""
    total = 0
    for arg in paths:
        p = Path(arg)
        try:
            if p.is_dir():
                for dirpath, _dirs, names in os.walk(p, followlinks=False):
                    for n in names:
                        with contextlib.suppress(OSError):
                            st = os.lstat(os.path.join(dirpath, n))
                            if stat.S_ISREG(st.st_mode):
                                total += st.st_size
            elif p.is_file():
                total += p.stat().st_size
        except OSError:
            continue
    return total


def _load_manifest(f: InputFile, arg) -> dict | None:
    if f.streamed:  # too big to be a manifest
        return None
    try:
        doc = json.loads(f.data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def bundle_manifest(doc: object) -> tuple[dict | None, list[str]]:
    """A parsed ``manifest.json`` checked field by field (:func:`forensics.inputs.manifest.validate`),
    or None when it is no bundle manifest; and the notes on the fields ignored."""
    from .manifest import validate

    if isinstance(doc, dict) and "schema_version" in doc and "artifacts" in doc:
        return validate(doc)
    return None, []


def iter_text(files: list[InputFile]) -> Iterator[tuple[InputFile, str]]:
    """Decode each file for the parsers: UTF-8 with replacement, never an exception.

    Streamed files are read whole here; the timeline streams them itself where their parser can. Lines
    over MAX_LINE_BYTES are cut (``f.cut_lines`` says how many)."""
    for f in files:
        if f.streamed:
            yield f, b"".join(f.chunks()).decode("utf-8", errors="replace")
            continue
        data, f.cut_lines = cut_long_lines(f.data)
        yield f, data.decode("utf-8", errors="replace")

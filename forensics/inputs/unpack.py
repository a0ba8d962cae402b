"""What a file's bytes are wrapped in: gzip, bzip2, xz or zstd compression, and tar or zip archives.

:mod:`forensics.inputs` hands every file it read (a loose file, a folder's file, an archive member) to
:func:`expand`, which looks at its first bytes, never its name: a compressed file is decompressed (a
lone ``server.log.gz`` is a log, whatever it is called), a compressed or plain tar and a zip are
opened and their members expanded in turn. Archives nest one level: a bundle ``.tar.gz`` inside a
ticket's ``.zip`` is read, an archive inside that one is listed as skipped. A name that says archive
over bytes that say nothing known is still opened as one, so a damaged bundle is refused, not parsed
as text.

Decompression streams under the caps of :mod:`forensics.inputs.limits` (size and ratio, checked at every
MiB); what expands past the streaming threshold goes to the input's private spool, not to memory. A
truncated or corrupt stream, and every zip refusal (a path that escapes, a link, an encrypted member,
a bomb by ratio or total size) raise :class:`InputError`: one line, exit code 3.
"""

from __future__ import annotations

import bz2
import gzip
import io
import itertools
import lzma
import posixpath
import stat
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO

import zstandard

from . import limits, tar
from .files import (
    CountingReader,
    InputError,
    InputFile,
    Spool,
    capped_chunks,
    error_line,
    is_archive_name,
    safe_member_name,
    to_spool,
)

#: Magic bytes of the single-file compressions (bzip2's is followed by a block size digit).
MAGIC = {"gzip": b"\x1f\x8b", "bzip2": b"BZh", "xz": b"\xfd7zXZ\x00", "zstd": b"\x28\xb5\x2f\xfd"}
#: A zip starts with a local file header, or (empty) with the end-of-central-directory record.
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
ZIP_SUFFIXES = (".zip",)
#: Members of an archive nested in an archive lie this deep; an archive there is not opened.
MAX_DEPTH = 2
#: Errors a damaged compressed stream raises while being read.
STREAM_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError, zstandard.ZstdError, ValueError)

Tick = Callable[[int], None]


def compression_of(head: bytes) -> str | None:
    """The compression the first bytes announce, or None.

    >>> compression_of(gzip.compress(b"x")), compression_of(b"BZh91AY"), compression_of(b"[2026-11-30")
    ('gzip', 'bzip2', None)
    """
    for kind, magic in MAGIC.items():
        if head.startswith(magic) and (kind != "bzip2" or head[3:4] in b"123456789"):
            return kind
    return None


def is_tar(head: bytes) -> bool:
    return len(head) >= 262 and head[257:262] == b"ustar"


def is_zip(head: bytes) -> bool:
    return head.startswith(ZIP_MAGIC)


class _ZstdReader(io.RawIOBase):
    """zstd frames, one after another, as a stream that raises EOFError when the data ends inside a
    frame (python-zstandard's stream_reader then just stops). Compressed input is fed in small steps,
    grown while the ratio is modest, so one step of a bomb cannot expand to gigabytes at once."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.dobj = zstandard.ZstdDecompressor().decompressobj()
        self.pending = b""
        self.step = 1 << 10
        self.started = False
        self.done = False

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        while not self.pending and not self.done:
            data = self.raw.read(self.step)
            if not data:
                if self.started and not self.dobj.eof:
                    raise EOFError("zstd data ends inside a frame")
                self.done = True
                break
            self.started = True
            out = self.dobj.decompress(data)
            while self.dobj.eof and self.dobj.unused_data:  # the next frame
                rest = self.dobj.unused_data
                self.dobj = zstandard.ZstdDecompressor().decompressobj()
                out += self.dobj.decompress(rest)
            self.pending = out
            # aim at about 1 MiB of output a step
            self.step = max(1 << 10, min(1 << 20, (1 << 20) * len(data) // max(len(out), 1)))
        n = min(len(b), len(self.pending))
        b[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n


def open_decompressed(kind: str, raw: BinaryIO) -> BinaryIO:
    """A reader of the decompressed bytes of ``raw``; truncation raises EOFError while reading."""
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if kind == "bzip2":
        return bz2.BZ2File(raw)  # type: ignore[return-value]
    if kind == "xz":
        return lzma.LZMAFile(raw)  # type: ignore[return-value]
    return io.BufferedReader(_ZstdReader(raw), 1 << 20)  # type: ignore[return-value]


def _source(f: InputFile) -> BinaryIO:
    return io.BytesIO(f.data) if f.path is None else open(f.path, "rb")  # noqa: SIM115 - caller closes


def label_of(f: InputFile) -> str:
    """How messages name a file: its path when loose, else archive or folder and the name inside."""
    if f.origin == f.name or f.origin.endswith("/" + f.name):
        return f.origin
    return f"{f.origin}: {f.name}"


def _decompressed_head(f: InputFile, kind: str, n: int = 512) -> bytes:
    with _source(f) as raw:
        try:
            with open_decompressed(kind, raw) as z:
                return z.read(n)
        except STREAM_ERRORS:
            return b""  # the full read says what is wrong


def _check(total: int, compressed: int, label: str) -> None:
    if total > limits.MAX_MEMBER_BYTES:
        raise InputError(f"{label}: refusing compressed file: expands past the {limits.MAX_MEMBER_BYTES >> 30} GiB cap")
    if total > limits.RATIO_CHECK_AFTER and compressed and total / compressed > limits.MAX_RATIO:
        raise InputError(f"{label}: refusing compressed file: expands {total // compressed}× (decompression bomb?)")


def decompress(f: InputFile, kind: str, spool: Spool | None, keep_under: int, tick: Tick | None = None) -> InputFile:
    """``f`` decompressed, under the caps; in memory up to ``keep_under`` bytes, else spooled."""
    label = label_of(f)
    raw = _source(f)
    counter = CountingReader(raw)  # type: ignore[arg-type]
    buffered = io.BufferedReader(counter, buffer_size=1 << 20)

    def pieces() -> Iterator[bytes]:
        total = 0
        try:
            with open_decompressed(kind, buffered) as z:  # type: ignore[arg-type]
                while chunk := z.read(1 << 20):
                    total += len(chunk)
                    _check(total, counter.count, label)
                    if tick is not None:
                        tick(counter.count)
                    yield chunk
            if tick is not None and hasattr(tick, "done"):
                tick.done()
        except InputError:
            raise
        except STREAM_ERRORS as e:
            raise InputError(f"{label}: {kind} data is truncated or corrupt ({error_line(e)})") from None

    try:
        it = pieces()
        held: list[bytes] = []
        size = 0
        for chunk in it:
            held.append(chunk)
            size += len(chunk)
            if spool is not None and size > keep_under:
                got, where = to_spool(spool, label, f.name, itertools.chain(held, it))
                return InputFile(name=f.name, data=b"", origin=f.origin, mtime=f.mtime, path=where, size=got,
                                 spool=spool, depth=f.depth, compression=kind)
        return InputFile(name=f.name, data=b"".join(held), origin=f.origin, mtime=f.mtime, depth=f.depth,
                         compression=kind)
    finally:
        raw.close()


# ----------------------------------------------------------------------------------------------
# zip


def _zip_member_name(info: zipfile.ZipInfo, arch: str) -> str:
    return safe_member_name(info.orig_filename if hasattr(info, "orig_filename") else info.filename, arch)


def read_zip(source: BinaryIO | str, arch: str, spool: Spool | None, big: bool, depth: int,
             tick: Tick | None = None) -> tuple[list[InputFile], list[str]]:
    """The regular files of one zip, checked as tar members are (see :func:`forensics.inputs.tar.read_archive`).

    Everything the central directory declares is checked before a byte is inflated: names that
    escape, links, encrypted members, members or a total over the caps, ratios of a bomb. Members
    are then read under the same caps while they inflate (a lying header cannot pass either: zipfile
    stops at the declared size and checks the CRC)."""
    try:
        zf = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
        raise InputError(f"{arch}: not a readable zip archive ({error_line(e)})") from None
    files: list[InputFile] = []
    skipped: list[str] = []
    with zf:
        infos = zf.infolist()
        if not infos:
            raise InputError(f"{arch}: empty archive: nothing to read")
        if len(infos) > limits.MAX_FILES:
            raise InputError(f"{arch}: refusing archive: more than {limits.MAX_FILES:,} members")
        _check_no_overlap(zf, infos, arch)
        declared = 0
        for info in infos:
            name = _zip_member_name(info, arch)
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise InputError(f"{arch}: refusing member {info.filename!r}: symbolic link")
            if info.flag_bits & 0x1:
                raise InputError(f"{arch}: refusing member {info.filename!r}: encrypted (decrypt the zip first)")
            if info.is_dir() or not name:
                continue
            if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):  # 0: no Unix type recorded
                raise InputError(f"{arch}: refusing member {info.filename!r}: not a regular file")
            if info.file_size > limits.MAX_MEMBER_BYTES:
                raise InputError(f"{arch}: refusing member {info.filename!r}: declares {info.file_size} bytes, "
                                 f"over the {limits.MAX_MEMBER_BYTES >> 30} GiB cap")
            if info.file_size > limits.RATIO_CHECK_AFTER and info.file_size > limits.MAX_RATIO * max(info.compress_size, 1):
                raise InputError(f"{arch}: refusing member {info.filename!r}: expands "
                                 f"{info.file_size // max(info.compress_size, 1)}× (decompression bomb?)")
            declared += info.file_size
        if declared > limits.MAX_TOTAL_BYTES:
            raise InputError(f"{arch}: refusing archive: declares {declared} bytes, past {limits.MAX_TOTAL_BYTES >> 30} GiB")
        counter = CountingReader(io.BytesIO())  # type: ignore[arg-type]
        total = 0
        seen = 0
        for info in infos:
            name = _zip_member_name(info, arch)
            if info.is_dir() or not name:
                continue
            seen += info.file_size
            over = limits.STREAM_BYTES_BIG_INPUT if big or seen > limits.STREAM_BYTES else limits.STREAM_BYTES
            counter.count += info.compress_size  # what zipfile may read for it, at most
            try:
                with zf.open(info) as fobj:
                    chunks = capped_chunks(fobj, info.file_size, arch, info.filename, total, counter, tick)
                    if spool is not None and info.file_size > over:
                        got, where = to_spool(spool, arch, info.filename, chunks)
                        files.append(InputFile(name=name, data=b"", origin=arch, mtime=_zip_mtime(info), path=where,
                                               size=got, spool=spool, depth=depth))
                    else:
                        data = b"".join(chunks)
                        got = len(data)
                        files.append(InputFile(name=name, data=data, origin=arch, mtime=_zip_mtime(info), depth=depth))
            except InputError:
                raise
            except NotImplementedError as e:
                raise InputError(f"{arch}: cannot read member {info.filename!r} ({error_line(e)})") from None
            except (zipfile.BadZipFile, *STREAM_ERRORS) as e:
                raise InputError(f"{arch}: archive is truncated or corrupt ({error_line(e)})") from None
            total += got
    if not files:
        raise InputError(f"{arch}: archive holds no regular files")
    return files, skipped


_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature; file name and extra field lengths (APPNOTE 4.3.7)


def _check_no_overlap(zf: zipfile.ZipFile, infos: list[zipfile.ZipInfo], arch: str) -> None:
    """Refuse a zip whose entries share compressed bytes: the central directory may point many
    entries at one stream (40 entries on one 1 MB stream passed every per-entry ratio and spooled
    10 GB), or nest one entry's local header inside another's data. Each entry's local header and
    data (APPNOTE 4.3.6-4.3.7) must lie before the next entry's header, all of it inside the file."""
    fp = zf.fp
    if fp is None:
        return
    size = fp.seek(0, 2)
    spans = []
    for info in infos:
        fp.seek(info.header_offset)
        head = fp.read(_LOCAL_HEADER.size)
        if len(head) < _LOCAL_HEADER.size or head[:4] != b"PK\x03\x04":
            raise InputError(f"{arch}: archive is truncated or corrupt (no local header for {info.filename!r})")
        _sig, name_len, extra_len = _LOCAL_HEADER.unpack(head)
        end = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len + info.compress_size
        if end > size:
            raise InputError(f"{arch}: archive is truncated or corrupt ({info.filename!r} ends past the file)")
        spans.append((info.header_offset, end, info.filename))
    spans.sort()
    for (_a, end, name), (start, _b, nxt) in itertools.pairwise(spans):
        if start < end:
            raise InputError(f"{arch}: refusing archive: entries {name!r} and {nxt!r} overlap "
                             "(one compressed stream counted twice: a zip bomb?)")


def _zip_mtime(info: zipfile.ZipInfo) -> float | None:
    import datetime as _dt

    try:
        return _dt.datetime(*info.date_time).timestamp()
    except (ValueError, OverflowError):
        return None


# ----------------------------------------------------------------------------------------------
# Expansion


class Expander:
    """Expand the files of one input: decompress, open archives one level deep (see the module)."""

    def __init__(self, spool: Spool | None, keep_under: int, big: bool,
                 progress: Callable[[str, int], Tick | None] | None = None) -> None:
        self.spool = spool
        self.keep_under = keep_under
        self.big = big
        #: progress(label, total bytes) → a callback taking the bytes read so far, or None
        self.progress = progress
        self.skipped: list[str] = []
        #: the names of the archives opened inside the input (where a nested bundle's files lie)
        self.roots: set[str] = set()
        #: members read out of archives so far, nested ones included (bounded by MAX_FILES in all)
        self.members = 0

    def expand(self, files: list[InputFile], prefix_members: bool = True) -> list[InputFile]:
        out: list[InputFile] = []
        for f in files:
            out.extend(self.one(f, prefix_members))
        return out

    def one(self, f: InputFile, prefix_members: bool = True) -> list[InputFile]:
        """``f`` itself, decompressed, or the expanded members of the archive it is. A loose archive
        given on the command line (``prefix_members`` False) names its members as they are inside."""
        head = f.head(512)
        kind = compression_of(head)
        if kind is not None:
            tarname = is_archive_name(f.name.lower()) and not f.name.lower().endswith(ZIP_SUFFIXES)
            if tarname or is_tar(_decompressed_head(f, kind)):  # the name may speak for an empty tar
                return self._archive(f, "tar", prefix_members)
            tick = self.progress(f"decompressing {f.name}", f.nbytes) if self.progress and f.nbytes >= (1 << 20) \
                else None
            f = decompress(f, kind, self.spool, self.keep_under, tick)
            head = f.head(512)
        if is_zip(head):
            return self._archive(f, "zip", prefix_members)
        if is_tar(head):
            return self._archive(f, "tar", prefix_members)
        if kind is None and compression_of(head) is None:
            name = f.name.lower()
            if name.endswith(ZIP_SUFFIXES):
                return self._archive(f, "zip", prefix_members)
            if is_archive_name(name):
                return self._archive(f, "tar", prefix_members)
        return [f]

    def _archive(self, f: InputFile, kind: str, prefix_members: bool) -> list[InputFile]:
        if f.depth >= MAX_DEPTH:
            self.skipped.append(f"{f.name}: archive nested more than one level deep, not opened")
            return []
        arch = label_of(f)
        task = self.progress(f"reading {f.name}", f.nbytes) if self.progress and f.nbytes >= (1 << 20) else None
        with _source(f) as src:
            if kind == "zip":
                members, skipped = read_zip(src, arch, self.spool, self.big, f.depth + 1, task)
            else:
                members, skipped = tar.read_archive(None, self.spool, self.big, stream=src, label=arch,
                                                    depth=f.depth + 1, tick=task)
        if task is not None and hasattr(task, "done"):
            task.done()
        self.members += len(members)
        if self.members > limits.MAX_FILES:
            raise InputError(f"{arch}: refusing archive: more than {limits.MAX_FILES:,} members in all its archives")
        tar.strip_common_top(members)
        if prefix_members:
            self.roots.add(f.name)
            for m in members:
                m.name = posixpath.join(f.name, m.name)
            skipped = [f"{f.name}/{s}" for s in skipped]
        self.skipped.extend(skipped)
        return self.expand(members, prefix_members=True)

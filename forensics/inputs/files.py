"""The input layer's file model and its guards: :class:`InputFile` (one file of the input, in memory or
streamed from disk), the :class:`Spool` big archive members are copied into, the refusal
:class:`InputError`, and the checks that keep an archive or a compressed file inside the caps of
:mod:`forensics.inputs.limits` while it expands. Shared by the readers of folders
(:mod:`forensics.inputs`), tar archives (:mod:`forensics.inputs.tar`), zips and compressed files
(:mod:`forensics.inputs.unpack`) and rotation sets (:mod:`forensics.inputs.rotation`); it imports none of them.
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import re
import shutil
import tempfile
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from . import limits

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.zstd", ".tzst", ".tar.xz", ".txz", ".tar.bz2",
                    ".tbz2", ".tbz", ".zip")


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
    spool: Spool | None = field(default=None, repr=False, compare=False)
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
                    if len(tail) > limits.MAX_LINE_BYTES:
                        tail, skipping = tail[:limits.MAX_LINE_BYTES], True
                        cuts += 1
                    carry = bytes(tail)
                    if cut == 0:
                        continue
                    del buf[cut:]
                    out, n = cut_long_lines(buf)
                    cuts += n
                    yield out
        except OSError as e:
            raise InputError(f"{self.path}: unreadable ({error_line(e)})") from None
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
    limit = limits.MAX_LINE_BYTES if limit is None else limit
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


class Spool:
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


def safe_member_name(name: str, archive: str) -> str:
    """Normalise a member name or refuse it."""
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise InputError(f"{archive}: refusing member {name!r}: absolute path")
    parts = name.replace("\\", "/").split("/")
    if ".." in parts:
        raise InputError(f"{archive}: refusing member {name!r}: '..' in path")
    norm = posixpath.normpath("/".join(p for p in parts if p not in ("", ".")))
    return "" if norm == "." else norm


class CountingReader(io.RawIOBase):
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


def error_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return msg[:200]


def check_expansion(total: int, counter: CountingReader, arch: str) -> None:
    """Stop a decompression bomb while it expands, not after it has filled memory."""
    if total > limits.MAX_TOTAL_BYTES:
        raise InputError(f"{arch}: refusing archive: expands past {limits.MAX_TOTAL_BYTES >> 30} GiB")
    if total > limits.RATIO_CHECK_AFTER and counter.count and total / counter.count > limits.MAX_RATIO:
        raise InputError(f"{arch}: refusing archive: expands {total // max(counter.count, 1)}× (decompression bomb?)")


def capped_chunks(fobj, declared: int, arch: str, member: str, before: int,
                   counter: CountingReader, tick=None) -> Iterator[bytes]:
    """One member in 1 MiB steps, checking the size and ratio caps after every step."""
    got = 0
    while chunk := fobj.read(1 << 20):
        got += len(chunk)
        if got > limits.MAX_MEMBER_BYTES:
            raise InputError(f"{arch}: refusing member {member!r}: over the {limits.MAX_MEMBER_BYTES >> 30} GiB cap")
        check_expansion(before + got, counter, arch)
        if tick is not None:
            tick(counter.count)
        yield chunk
    if got < declared:
        raise InputError(f"{arch}: archive is truncated inside member {member!r}")


def read_capped(fobj, declared: int, arch: str, member: str, before: int, counter: CountingReader,
                 tick=None) -> bytes:
    return b"".join(capped_chunks(fobj, declared, arch, member, before, counter, tick))


def to_spool(spool: Spool, arch: str, member: str, chunks: Iterable[bytes]) -> tuple[int, Path]:
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
        raise InputError(f"{arch}: cannot spool member {member!r} to {where.parent} ({error_line(e)})") from None
    except BaseException:
        with contextlib.suppress(OSError):  # the folder goes too; the partial copy need not wait for it
            where.unlink()
        raise
    return got, where

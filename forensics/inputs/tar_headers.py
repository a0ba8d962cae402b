"""Tar's extended headers (pax records, GNU long names) bounded before :mod:`tarfile` reads them.

``tarfile`` reads an extended header whole, at the size its block declares, while iterating the
members, before any cap of ours sees a member: a 4 GiB pax header inside an 18 MB ``.tar.gz`` took
8 GB of memory. Python 3.11's pax parser also searches the header with a pattern that backtracks on
a long run of digits (CVE-2024-6232: 64 KiB of digits take half a minute). :class:`BoundedTarInfo`
is handed to ``tarfile.open(tarinfo=...)``: it refuses a header over :data:`MAX_HEADER_BYTES` before
the read, and a pax header holding a digit run longer than any number a record carries (a length,
a time, a size) before ``tarfile`` parses it. Both raise :class:`HeaderRefused`, which the archive
reader turns into its one-line refusal (exit 3).

POSIX.1-2008 ``pax`` (the extended header format) and GNU tar's manual (``L``/``K`` long-name
blocks) define the types; real bundles carry a few hundred bytes in them (a long path, a time).
"""

from __future__ import annotations

import re
import tarfile

#: An extended header (pax record block, GNU long name or link) larger than this is refused.
MAX_HEADER_BYTES = 64 << 10
#: The longest digit run a pax header may hold: a record length, an mtime with nanoseconds, a size.
MAX_DIGIT_RUN = 40

_GNU_LONG = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
_PAX = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
_LONG_DIGITS = re.compile(rb"\d{%d}" % (MAX_DIGIT_RUN + 1))


class HeaderRefused(Exception):
    """An extended header too big, or shaped to make ``tarfile``'s parser backtrack."""


class _Replay:
    """The tar stream with one already-read block put back in front (for ``tarfile`` to read again)."""

    def __init__(self, head: bytes, raw) -> None:
        self.head, self.raw = head, raw

    def read(self, n: int = -1) -> bytes:
        if not self.head:
            return self.raw.read(n)
        if n is None or n < 0:
            out, self.head = self.head + self.raw.read(), b""
            return out
        out, self.head = self.head[:n], self.head[n:]
        return out + (self.raw.read(n - len(out)) if len(out) < n else b"")

    def tell(self) -> int:
        return self.raw.tell() - len(self.head)

    def __getattr__(self, name: str):
        return getattr(self.raw, name)


class BoundedTarInfo(tarfile.TarInfo):
    """A ``TarInfo`` whose extended headers are checked before ``tarfile`` reads or parses them.

    ``_proc_member`` is where ``tarfile`` (3.11 to 3.13) dispatches on a header's type; the checks
    run there and hand back to it."""

    def _proc_member(self, tarfile_obj):  # type: ignore[override]
        if self.type in _GNU_LONG or self.type in _PAX:
            if self.size > MAX_HEADER_BYTES:
                raise HeaderRefused(f"extended header of {self.size} bytes (more than {MAX_HEADER_BYTES >> 10} KiB)")
            if self.type in _PAX:
                raw = tarfile_obj.fileobj
                block = raw.read(self._block(self.size))
                if _LONG_DIGITS.search(block, 0, self.size):
                    raise HeaderRefused(f"pax header with a run of more than {MAX_DIGIT_RUN} digits")
                tarfile_obj.fileobj = _Replay(block, raw)
                try:
                    return super()._proc_member(tarfile_obj)
                finally:
                    tarfile_obj.fileobj = raw
        return super()._proc_member(tarfile_obj)

"""Rotation sets: ``x.log``, ``x.log.1``, ``x.log.2.gz``, ``x.log-20261130.gz``, ``x.log.2026-11-30`` …
given together (loose, in a folder or in an archive) are one log, read oldest first.

Design: the members (already decompressed by :mod:`forensics.inputs.unpack`) are joined, oldest first and
each ending with a line end, into ONE logical file named after the current log (``x.log``), so that
the parser sees one stream and a server run that spans a rotation stays one run. The logical file
keeps ``parts``: each member's name and the logical line it starts at. The timeline maps every row's
``line``/``line_end`` back through it (:func:`member_lines`), so evidence names the real member and
its own line; nothing else in the pipeline needs to know about rotation.

Order: dated members (``-YYYYMMDD``, ``.YYYY-MM-DD``) by date, then numbered ones from the highest
number (oldest) down to ``.1``, then the current log. Names numbered from ``.0`` are rank or worker
logs, not a rotation, and stay apart. Only names that look like logs take part (a
``log`` in the name, or ``.out``, ``.err``, ``.txt``, ``messages``), so numbered snapshots of other
outputs are never joined.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator

from .files import InputFile, Spool, to_spool

_COMPRESSED = re.compile(r"\.(gz|bz2|xz|zst|zstd)$", re.I)
_NUMBERED = re.compile(r"^(?P<base>.+)\.(?P<n>\d{1,4})$")
_DATED = re.compile(r"^(?P<base>.+?)[.-](?P<date>\d{4}-?\d{2}-?\d{2}(?:[T_.-]?\d{2}(?::?\d{2}){0,2})?)$")
_LOGLIKE = re.compile(r"log|\.out$|\.err$|\.txt$|messages", re.I)
#: Members are copied into the joined file this much at a time.
COPY_BYTES = 8 << 20


def rotation_key(name: str) -> tuple[str, tuple] | None:
    """(the current log's name, order key) for a rotated member's name; None for other names.

    >>> rotation_key("logs/x.log.2.gz"), rotation_key("x.log-20261130.gz")[1], rotation_key("free.txt")
    (('logs/x.log', (1, -2)), (0, '20261130'), None)
    """
    where, base = posixpath.split(name)
    stem = _COMPRESSED.sub("", base)
    m = _DATED.match(stem)
    if m:
        key: tuple = (0, re.sub(r"\D", "", m["date"]))
    else:
        m = _NUMBERED.match(stem)
        if not m:
            return None
        key = (1, -int(m["n"]))
    if not _LOGLIKE.search(m["base"]):
        return None
    return posixpath.join(where, m["base"]), key


def join_sets(files: list[InputFile], spool: Spool | None, keep_under: int) -> list[InputFile]:
    """``files`` with every rotation set (two or more members) replaced by one logical file, placed
    where its first member was."""
    by_name = {f.name: f for f in files}
    sets: dict[str, list[tuple[tuple, InputFile]]] = {}
    for f in files:
        rk = rotation_key(f.name)
        if rk is not None:
            sets.setdefault(rk[0], []).append((rk[1], f))
    for current, members in sets.items():
        if current in by_name and not _COMPRESSED.search(current):
            members.append(((2,), by_name[current]))
    joined: dict[int, InputFile] = {}
    gone: set[int] = set()
    for current, members in sets.items():
        # numbered from .0 is a set of rank or worker logs (server.log.0 … .7), not a rotation
        if len(members) < 2 or any(k == (1, 0) for k, _f in members):
            continue
        members.sort(key=lambda kf: kf[0])
        ordered = [f for _k, f in members]
        logical = _join(current, ordered, spool, keep_under)
        first = min(files.index(f) for f in ordered)
        joined[first] = logical
        gone.update(id(f) for f in ordered)
    if not joined:
        return files
    out: list[InputFile] = []
    for i, f in enumerate(files):
        if i in joined:
            out.append(joined[i])
        if id(f) not in gone:
            out.append(f)
    return out


def _raw_pieces(f: InputFile) -> Iterator[bytes]:
    if f.path is None:
        yield f.data
        return
    with open(f.path, "rb") as fh:
        while piece := fh.read(COPY_BYTES):
            yield piece


def _join(name: str, members: list[InputFile], spool: Spool | None, keep_under: int) -> InputFile:
    parts: list[tuple[str, int]] = []
    line = 1

    def pieces() -> Iterator[bytes]:
        nonlocal line
        for m in members:
            parts.append((m.name, line))
            last = b""
            for piece in _raw_pieces(m):
                if piece:
                    line += piece.count(b"\n")
                    last = piece[-1:]
                    yield piece
            if last and last != b"\n":  # the next member starts on a line of its own
                line += 1
                yield b"\n"

    total = sum(m.nbytes for m in members)
    newest = max((m.mtime for m in members if m.mtime is not None), default=None)
    base = dict(name=name, origin=members[-1].origin, mtime=newest, depth=max(m.depth for m in members))
    if spool is not None and total > keep_under:
        got, where = to_spool(spool, members[-1].origin, name, pieces())
        return InputFile(data=b"", path=where, size=got, spool=spool, parts=parts, **base)  # type: ignore[arg-type]
    return InputFile(data=b"".join(pieces()), parts=parts, **base)  # type: ignore[arg-type]


def member_examples(examples: list[tuple[int, str]], parts: list[tuple[str, int]]) -> list[tuple[str, str]]:
    """Unrecognised-line examples of a joined file, their line named as ``member:line``.

    >>> member_examples([(1, "a"), (5, "b")], [("x.log.1", 1), ("x.log", 4)])
    [('x.log.1:1', 'a'), ('x.log:2', 'b')]
    """
    out = []
    for ln, text in examples:
        name, start = parts[0]
        for n, s in parts:
            if s <= ln:
                name, start = n, s
        out.append((f"{name}:{ln - start + 1}", text))
    return out

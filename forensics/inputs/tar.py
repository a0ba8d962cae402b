"""Tar archives (plain, gzip, bzip2, xz, zstd) streamed member by member under the caps of
:mod:`forensics.inputs.limits`: a member that could escape, a bomb, a truncated archive is refused
(:class:`~forensics.inputs.files.InputError`); big members go to the spool as they stream."""

from __future__ import annotations

import io
import posixpath
import tarfile
from pathlib import Path

import zstandard

from . import limits
from .files import (
    CountingReader,
    InputError,
    InputFile,
    Spool,
    capped_chunks,
    error_line,
    read_capped,
    safe_member_name,
    to_spool,
)
from .tar_headers import BoundedTarInfo, HeaderRefused


def _open_archive_stream(path: Path | None, stream=None,
                         label: str | None = None) -> tuple[tarfile.TarFile, CountingReader, object]:
    raw = stream if stream is not None else open(path, "rb")  # noqa: SIM115 - closed by the caller
    counter = CountingReader(raw)
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
        raise InputError(f"{label or path}: not a readable tar archive ({error_line(e)})") from None
    return tf, counter, raw


def read_archive(path: Path | None, spool: Spool | None = None, big: bool = False, *, stream=None,
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
            if members_seen > limits.MAX_FILES:
                raise InputError(f"{arch}: refusing archive: more than {limits.MAX_FILES:,} members")
            name = safe_member_name(member.name, arch)
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
            if member.size > limits.MAX_MEMBER_BYTES:
                raise InputError(f"{arch}: refusing member {member.name!r}: declares {member.size} bytes, over the {limits.MAX_MEMBER_BYTES >> 30} GiB cap")
            declared += member.size
            over = min(limits.STREAM_BYTES, limits.STREAM_BYTES_BIG_INPUT) if big or declared > limits.STREAM_BYTES else limits.STREAM_BYTES
            if spool is not None and over < limits.STREAM_BYTES:
                _spool_held(files, over, arch, spool)
            # a bundle's manifest is read whole (it is small; a huge one is spooled and not taken as one)
            manifest = posixpath.basename(name) == "manifest.json" and member.size <= limits.STREAM_BYTES
            fobj = tf.extractfile(member)
            if spool is not None and fobj is not None and member.size > over and not manifest:
                got, where = _spool_capped(fobj, member.size, arch, member.name, total, counter, spool, tick)
                total += got
                files.append(InputFile(name=name, data=b"", origin=arch, mtime=float(member.mtime), path=where,
                                       size=got, spool=spool, depth=depth))
                continue
            data = read_capped(fobj, member.size, arch, member.name, total, counter, tick) if fobj else b""
            total += len(data)
            files.append(InputFile(name=name, data=data, origin=arch, mtime=float(member.mtime), depth=depth))
        if members_seen == 0:
            raise InputError(f"{arch}: empty archive: nothing to read")
    except InputError:
        raise
    except HeaderRefused as e:
        raise InputError(f"{arch}: refusing archive: {e}") from None
    except (tarfile.TarError, zstandard.ZstdError, OSError, EOFError, ValueError) as e:
        raise InputError(f"{arch}: archive is truncated or corrupt ({error_line(e)})") from None
    finally:
        raw.close()
    if not files:
        raise InputError(f"{arch}: archive holds no regular files")
    return files, skipped


def _spool_held(files: list[InputFile], over: int, arch: str, spool: Spool) -> None:
    """The input just turned out big: members read into memory while it looked small go to the spool
    too, as a directory's files would have streamed, so that what stays in memory is small files only
    (else the first 64 MiB of members were parsed whole, a peak of several hundred MB)."""
    for i, f in enumerate(files):
        if f.streamed or len(f.data) <= over or posixpath.basename(f.name) == "manifest.json":
            continue
        _got, where = to_spool(spool, arch, f.name, [f.data])
        files[i] = InputFile(name=f.name, data=b"", origin=f.origin, mtime=f.mtime, path=where, size=len(f.data),
                             spool=spool, depth=f.depth)


def _spool_capped(fobj, declared: int, arch: str, member: str, before: int, counter: CountingReader,
                  spool: Spool, tick=None) -> tuple[int, Path]:
    """Copy one member to a new file in the spool, under the caps of read_capped."""
    return to_spool(spool, arch, member, capped_chunks(fobj, declared, arch, member, before, counter, tick))


def strip_common_top(files: list[InputFile]) -> None:
    """Bundles have one top folder (forensics-host-stamp/); names inside the bundle drop it."""
    tops = {f.name.split("/", 1)[0] for f in files}
    if len(tops) == 1 and all("/" in f.name for f in files):
        cut = len(next(iter(tops))) + 1
        for f in files:
            f.name = f.name[cut:]

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
import json
import os
import posixpath
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from . import limits, rotation, unpack
from .files import (
    ARCHIVE_SUFFIXES,
    InputError,
    InputFile,
    Spool,
    cut_long_lines,
    error_line,
    is_archive_name,
    looks_binary,
    text_name,
)
from .tar import read_archive

__all__ = ["ARCHIVE_SUFFIXES", "InputError", "InputFile", "InputSet", "cut_long_lines", "is_archive_name",
           "iter_text", "limits", "looks_binary", "read_archive", "read_directory", "read_inputs", "text_name"]



@dataclass
class InputSet:
    files: list[InputFile] = field(default_factory=list)
    manifest: dict | None = None
    skipped: list[str] = field(default_factory=list)  # links inside the tree, empty files… in words
    spool: Spool | None = field(default=None, repr=False, compare=False)

    def close(self) -> None:
        """Remove the spooled archive members (their InputFiles cannot be read afterwards)."""
        if self.spool is not None:
            self.spool.close()

    def __enter__(self) -> InputSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_directory(root: Path, stream_over: int | None = None,
                   spool: Spool | None = None) -> tuple[list[InputFile], list[str]]:
    files: list[InputFile] = []
    skipped: list[str] = []
    stream_over = limits.STREAM_BYTES if stream_over is None else stream_over
    root_real = root.resolve()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for fn in sorted(filenames):
            p = Path(dirpath) / fn
            rel = p.relative_to(root).as_posix()
            try:
                st = p.lstat()
            except OSError as e:
                skipped.append(f"{rel}: unreadable ({error_line(e)})")
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
                    skipped.append(f"{rel}: unreadable ({error_line(e)})")
                    continue
            if not stat.S_ISREG(st.st_mode):
                skipped.append(f"{rel}: not a regular file")
                continue
            if len(files) >= limits.MAX_FILES:
                raise InputError(f"{root}: refusing folder: more than {limits.MAX_FILES:,} files")
            # archives and compressed files are opened by the caller (forensics.inputs.unpack), by content
            if st.st_size > stream_over and fn != "manifest.json":
                files.append(InputFile(name=rel, data=b"", origin=str(root), mtime=st.st_mtime, path=p,
                                       size=st.st_size))
                continue
            try:
                data = p.read_bytes()
            except OSError as e:
                skipped.append(f"{rel}: unreadable ({error_line(e)})")
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
    out = InputSet(spool=Spool(spool_dir))
    try:
        _read_into(out, paths, progress)
    except BaseException:  # a refusal, an unreadable file, Ctrl-C: nothing spooled stays behind
        out.close()
        raise
    return out


def _read_into(out: InputSet, paths: list[str | os.PathLike], progress=None) -> None:
    from forensics.progress import byte_task

    big = _total_size(paths) > limits.STREAM_BYTES
    stream_over = min(limits.STREAM_BYTES, limits.STREAM_BYTES_BIG_INPUT) if big else limits.STREAM_BYTES
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
            raise InputError(f"{arg}: unreadable ({error_line(e)})") from None
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
                    raise InputError(f"{arg}: unreadable ({error_line(e)})") from None
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
        if len(out.files) > limits.MAX_FILES:
            raise InputError(f"refusing input: more than {limits.MAX_FILES:,} files in all")
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

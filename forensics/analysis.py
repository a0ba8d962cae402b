"""The one analysis that ``report``, ``fleet`` and the accuracy harness share: inputs → timeline →
findings → the findings document.

``check`` runs the detectors' arithmetic on a launch configuration instead of a timeline; everything
that reads evidence goes through :func:`analyse`.
"""

from __future__ import annotations

import contextlib
import ctypes
from pathlib import Path

from forensics.detectors import run_all
from forensics.facts.rows import release
from forensics.model import Timeline
from forensics.progress import for_stderr
from forensics.report.findings import to_document
from forensics.timeline import build_timeline


def release_free_memory() -> None:
    """Hand the allocators' cached free pages back before the analysis builds its rows: after a big
    input's parse they hold ~60 MB that would otherwise add to the analysis's peak (report on 4 GB
    went past 512 MB)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    with contextlib.suppress(AttributeError, OSError):  # glibc only; elsewhere the allocator decides
        ctypes.CDLL(None).malloc_trim(0)


def analyse(inputs: list[Path], tz: str | None = None, quiet: bool = False, spill: Path | None = None,
            hosts: dict[str, str] | None = None) -> tuple[Timeline, dict]:
    """The timeline of ``inputs`` and the findings document (findings.json) drawn from it.

    ``tz`` is the zone assumed for stamps without one where no manifest gives it; ``spill`` a folder
    for the timeline's spilled rows on big inputs; ``hosts`` maps an input path to the host it is
    (``--host NAME=PATH``). Raises :class:`forensics.inputs.InputError` for unreadable or unsafe input.
    """
    progress = for_stderr(quiet)  # a bar per big file on a terminal, plain lines otherwise
    try:
        tl = build_timeline(inputs, tz=tz, progress=progress, spill_dir=spill, hosts=hosts)
    finally:
        if progress is not None:
            progress.close()
    release_free_memory()
    findings, root = run_all(tl)
    doc = to_document(findings, root, tl)
    release(tl)
    return tl, doc

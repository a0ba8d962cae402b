"""Where the package's data files live, in a checkout and in an installed wheel.

The wheel force-includes the repository's ``templates/`` as ``forensics/_templates``
(pyproject.toml); a source checkout has them at ``<repo>/templates``.

>>> (templates_dir() / "report.html.j2").is_file()
True
"""

from __future__ import annotations

from pathlib import Path

import forensics


def templates_dir() -> Path:
    """The folder holding ``report.html.j2`` and ``summary.md.j2``."""
    package = Path(forensics.__file__).resolve().parent
    installed = package / "_templates"
    if installed.is_dir():
        return installed
    return package.parent / "templates"


def example_bundle() -> Path:
    """The seed incident's bundle that ``forensics demo`` reports on.

    The wheel carries ``fixtures/seed_bundle`` as ``forensics/_examples/seed_bundle``.

    >>> (example_bundle() / "manifest.json").is_file()
    True
    """
    package = Path(forensics.__file__).resolve().parent
    installed = package / "_examples" / "seed_bundle"
    if installed.is_dir():
        return installed
    return package.parent / "fixtures" / "seed_bundle"

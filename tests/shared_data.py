"""Where the suite finds ``../shared`` (the real-incident corpus, reference samples, real logs), in one place.

``../shared`` beside the repository is the default; ``FORENSICS_SHARED`` overrides it (``.ci/run``
points it at a folder that does not exist for its second run, which is what a fresh clone sees).
Tests read it at test time, never copy it, and skip with :data:`SKIP_REASON` when it is absent, so
the run's summary can say how many tests skipped for want of it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ["FORENSICS_SHARED"]) if os.environ.get("FORENSICS_SHARED") else ROOT.parent / "shared"

#: Every skip for want of ../shared starts with this, and conftest.py counts them by it.
SKIP_REASON = "needs ../shared"


def reason(what: str = "") -> str:
    """The skip reason for a test that reads ``SHARED / what``."""
    return f"{SKIP_REASON}/{what}" if what else SKIP_REASON


def skip_unless(path: Path, what: str = "") -> None:
    """Skip the calling test when ``path`` (under SHARED) is not there."""
    if not path.exists():
        pytest.skip(reason(what or _relative(path)))


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(SHARED))
    except ValueError:
        return str(path)


def params(items: list, what: str) -> list:
    """Parameters read from SHARED, or one that skips for want of it (never an empty parameter set,
    whose skip would not say why)."""
    return list(items) or [pytest.param(None, marks=pytest.mark.skip(reason=reason(what)))]

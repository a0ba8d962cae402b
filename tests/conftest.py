"""Suite-wide switches: hypothesis profiles and the opt-in markers for long runs.

* ``fuzz`` tests (the 10,000-examples-per-parser profile) run only with ``FORENSICS_FUZZ=1`` or when
  ``-m`` names the marker; the default suite runs a small profile of the same properties.
* ``slow`` tests (2 GB logs, 10 million lines) run only with ``FORENSICS_SLOW=1`` or ``-m slow``;
  the default suite carries scaled-down copies of the same checks.
* Tests that read ``../shared`` (``FORENSICS_SHARED`` overrides where, see ``shared_data.py``) skip
  without it; the summary's last line says how many did, and where the suite looked.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings
from shared_data import SHARED, SKIP_REASON

#: Examples per parser and property in the long profile (the issue asks for at least 10,000).
FUZZ_EXAMPLES = 10_000

# deadline=None: a parse of a 1 MB line on a loaded 2-core CI runner can take a second; that is
# not a bug, a hang is (and the suite-level timeouts catch those).
# derandomize: the default suite is deterministic (the same examples every run, no example database);
# the fuzz profile is where new inputs are searched for.
settings.register_profile("default", deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", deadline=None, max_examples=FUZZ_EXAMPLES,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                 HealthCheck.filter_too_much])
settings.load_profile("fuzz" if os.environ.get("FORENSICS_FUZZ") else "default")

_OPT_IN = {"fuzz": "FORENSICS_FUZZ", "slow": "FORENSICS_SLOW"}


def _env_on(name: str) -> bool:
    return os.environ.get(name, "").strip() not in ("", "0", "false", "no")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    markexpr = config.getoption("markexpr", default="") or ""
    for marker, env in _OPT_IN.items():
        if _env_on(env) or marker in markexpr:
            continue
        skip = pytest.mark.skip(reason=f"long run: set {env}=1 or pass -m {marker}")
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (file, line, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr or "")


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """How many tests skipped for want of ../shared: a fresh clone's run says so instead of hiding it."""
    skipped = terminalreporter.stats.get("skipped", [])
    n = sum(1 for r in skipped if _skip_reason(r).startswith(SKIP_REASON))
    where = "present" if SHARED.is_dir() else "absent"
    terminalreporter.write_line(f"{n} test(s) skipped for want of ../shared ({SHARED}: {where})")

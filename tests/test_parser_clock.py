"""``date`` output read as the moment a snapshot was taken (parsers/clock.py): the formats GNU date prints, and
what must not be taken for one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from parsers import clock
from parsers.schema import NotThisFormat


@pytest.mark.parametrize("line, at, basis", [
    ("Tue Mar 10 04:18:51 UTC 2026", datetime(2026, 3, 10, 4, 18, 51, tzinfo=UTC), "source-utc"),
    ("Tue Mar  3 04:18:51 GMT 2026", datetime(2026, 3, 3, 4, 18, 51, tzinfo=UTC), "source-utc"),
    ("Tue, 10 Mar 2026 06:18:51 +0200", datetime(2026, 3, 10, 4, 18, 51, tzinfo=UTC), "local+offset"),
    ("2026-03-10T04:18:51+00:00", datetime(2026, 3, 10, 4, 18, 51, tzinfo=UTC), "source-utc"),
    ("2026-03-09 23:18:51-05:00", datetime(2026, 3, 10, 4, 18, 51, tzinfo=UTC), "local+offset"),
    # a zone's name says only that it is the host's wall clock: read as its logs' un-zoned stamps are
    ("Tue Mar 10 12:18:51 CST 2026", datetime(2026, 3, 10, 12, 18, 51, tzinfo=UTC), "local-assumed"),
])
def test_the_formats_date_prints(line, at, basis):
    assert clock.read(line) == (at, basis)
    assert clock.sniff(line + "\n") >= 0.5


@pytest.mark.parametrize("text", [
    "Mar 10 04:18:51 gpu-07 kernel: NVRM: Xid (PCI:0000:3b:00): 79",  # syslog: a stamp with a message
    "[2026-03-10 04:18:51 TP0] Decode batch.",                          # an engine's stamp
    "2026-03-10 04:18:51",                                              # no zone: a log stamp, not date's output
    "Tue Feb 30 04:18:51 UTC 2026",                                     # no such day
    "Tue Mar 10 04:18:51 UTC 2026\n" * 40,                              # a file of them is not one snapshot
])
def test_what_is_not_a_clock(text):
    assert clock.sniff(text) == 0.0
    with pytest.raises(NotThisFormat):
        clock.parse(text)

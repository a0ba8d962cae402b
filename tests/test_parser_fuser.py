"""fuser parser: verbose table with continuations, kernel users, long names, terse form, empty output."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shared_data import SHARED, SKIP_REASON

from parsers import fuser
from parsers.schema import NotThisFormat

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "host"


def rows_of(result):
    return [{**row, "a": json.loads(row["attrs"])} for row in result.events.iter_rows(named=True)]


def test_verbose_table_with_continuations():
    r = fuser.parse((FIX / "fuser_v.txt").read_text(), "host/fuser.txt")
    assert (r.lines, r.recognized, r.unrecognized) == (11, 11, 0)
    rows = rows_of(r)
    assert [(x["a"]["device"], x["pid"]) for x in rows] == [
        ("/dev/nvidia0", 41300), ("/dev/nvidia0", 41207), ("/dev/nvidia2", 41302),
        ("/dev/nvidiactl", 41300), ("/dev/nvidiactl", 41302), ("/dev/nvidiactl", 51234),
        ("/dev/nvidia-uvm", None), ("/dev/nvidia-uvm", 41300), ("/dev/nvidia-uvm-tools", 41302),
    ]
    assert [x["gpu"] for x in rows[:4]] == [0, 0, 2, None]
    first = rows[0]
    assert (first["kind"], first["source"], first["line"], first["comm"]) == ("gpu_device_user", "fuser", 2, "sglang::schedul")
    assert first["a"]["access"] == "F...m" and first["a"]["user"] == "root"
    assert rows[5]["a"]["user"] == "1001" and rows[5]["a"]["access"] == "f...." and rows[5]["comm"] == "nvtop"
    kernel = rows[6]
    assert kernel["a"]["kernel"] is True and kernel["a"]["access"] == "mount" and kernel["comm"] is None
    assert rows[8]["line"] == 11  # entry under a name too long for the name column


def test_terse_form():
    r = fuser.parse("/dev/nvidia0:        41300m 41207\n/dev/nvidia3:  5001\n/dev/nvidiactl:   41300m\n")
    rows = rows_of(r)
    assert [(x["pid"], x["gpu"], x["a"].get("access")) for x in rows] == [
        (41300, 0, "m"), (41207, 0, None), (5001, 3, None), (41300, None, "m")]


def test_empty_output_is_nothing_here():
    assert fuser.parse("").events.height == 0
    r = fuser.parse("                     USER        PID ACCESS COMMAND\n")
    assert (r.events.height, r.lines, r.recognized) == (0, 1, 1)
    r = fuser.parse("Specified filename /dev/nvidia* does not exist.\n")
    assert r.events.height == 0 and r.unrecognized == 0 and r.notes


def test_pids_stored_apart_from_names():
    r = fuser.parse("/dev/nvidia0:\n 41300 41207m\n")
    assert [(x["pid"], x["a"]["device"]) for x in rows_of(r)] == [(41300, None), (41207, None)]
    assert r.notes


def test_sniff_and_not_this_format():
    assert fuser.sniff((FIX / "fuser_v.txt").read_text()) >= 0.9
    assert fuser.sniff("/dev/nvidia0:  41300m\n") >= 0.9
    assert fuser.sniff("hello\nworld\n") == 0.0
    with pytest.raises(NotThisFormat):
        fuser.parse("Mem:  449  318  131\n")
    with pytest.raises(NotThisFormat):
        fuser.parse((FIX / "ps_ef.txt").read_text())


@pytest.mark.parametrize("text", [
    "/dev/nvidia0:        root      41300 F...m python3\r\n                     root      1 F.... x\r\n",
    "/dev/nvidia0:        root      " + "9" * 30 + " F...m python3\n",
    "/dev/nvidia0:" + " 1m" * 30_000 + "\n",
    "/dev/nvidia0:        root      41300 F...m " + "x" * 1_000_000 + "\n",
    "\0/dev/nvidia0:\0\n",
])
def test_bad_input_never_raises_other_errors(text):
    with contextlib.suppress(NotThisFormat):
        fuser.parse(text)
    fuser.sniff(text)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("/devnvidia0123:. Fm\n\r\0USERPIDACCESSCOMMANDkernel")), max_size=300))
def test_fuzz_never_raises_other_errors(text):
    with contextlib.suppress(NotThisFormat):
        fuser.parse(text)
    fuser.sniff(text)


def test_real_samples_are_not_fuser():
    if not SHARED.is_dir():
        pytest.skip(SKIP_REASON)
    for p in sorted(SHARED.rglob("*")):
        if p.is_file():
            assert fuser.sniff(p.read_text(errors="replace")[:65536]) < 0.5, p

"""The compiled bulk-line scanner (parsers/_native/bulkscan.c) reads a line exactly as the Python
scanner does, or leaves it to the scanner: generated batch and access lines full of edge cases
(stamps that are not dates, keys that snake-case alike, values of every class and of none) must give
the same rows through parsers.sglang_fast as through parsers.sglang."""

from __future__ import annotations

import os
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from parsers import bulkscan, sglang, sglang_fast
from parsers.schema import NotThisFormat

pytestmark = pytest.mark.skipif(not bulkscan.available(), reason=f"native scanner: {bulkscan.why_not}")


def test_built_where_ci_requires_it() -> None:
    """CI sets FORENSICS_REQUIRE_NATIVE=1: there a silent fall-back to the slow path is a failure."""
    if os.environ.get("FORENSICS_REQUIRE_NATIVE") != "1":
        pytest.skip("FORENSICS_REQUIRE_NATIVE not set")
    assert bulkscan.available(), bulkscan.why_not


def _check(text: str) -> None:
    try:
        a = sglang.parse(text, "r.log")
    except NotThisFormat:
        with pytest.raises(NotThisFormat):
            sglang_fast.parse(text, "r.log")
        return
    b = sglang_fast.parse(text, "r.log")
    assert_frame_equal(a.events, b.events)
    assert (a.lines, a.recognized, a.unrecognized_examples) == (b.lines, b.recognized, b.unrecognized_examples)


STAMPS = st.sampled_from([
    "2025-11-20 11:02:41", "2024-02-29 23:59:59", "2025-02-29 10:00:00", "2025-04-31 10:00:00",
    "2025-11-20 24:00:00", "2025-11-20 23:60:00", "2025-11-20 23:59:60", "0000-01-01 00:00:00",
    "0001-01-01 00:00:00", "9999-12-31 23:59:59", "1970-01-01 00:00:00", "2025-13-01 00:00:00",
])
FRACS = st.sampled_from(["", ".5", ",123", ".123456", ".1234567", ".", ","])
LABELS = st.sampled_from(["", " TP0", " DP0 TP0 EP0", " PP1 TP3", " ATTN_CP1 TP0", " MOE_DP2 TP1", " tp0",
                          " T P", " A B C D E F G H", " A B C D E F G H I", " TP0:"])
KEYS = st.sampled_from([
    "#running-req", "#token", "token usage", "cuda graph", "gen throughput (token/s)", "#queue-req",
    "#new-seq", "#new-token", "#cached-token", "#full token", "full token usage", "accept len",
    "est. decode TFLOPS/s (per GPU)", "a/b", "iteration", "Iteration", "X", " #token", "tflops/s",
    "#running_req", "running req", "--", "__", "input throughput (token/s)",
]) | st.text(alphabet=string.ascii_letters + string.digits + " #-_./()%", min_size=1, max_size=10)
VALUES = st.one_of(
    st.integers(-10**17, 10**17).map(str),
    st.integers(0, 999).map(lambda n: f"{n:05d}"),
    st.sampled_from(["0", "-0", "007", "1234567890123456789", "12345678901234567890", " 42 ", "42 ",
                     "True", "False", "true", "", " ", "nan", "inf", "-inf", "1e-05", "1e5", "0.000001",
                     "0.0001", "0.00012", "5.", ".5", "5.0", "-0.0", "0.10", "100.000", "12.34%", "100%",
                     "0.005%", "5.%", "-5%", "abc%", "1234567%", '"q"', "a\\b", "word", "two words",
                     "b: c", "Infinity", "+5", "0x10", "1_000", "3.141592653589793", "0.1000000000000001"]),
    st.decimals(min_value=-10**6, max_value=10**6, places=4, allow_nan=False).map(str),
    st.floats(min_value=0, max_value=1, allow_nan=False).map(lambda f: f"{f:.2f}"),
    st.text(alphabet=string.ascii_letters + string.digits + " .%-+", max_size=8),
)
HEADS = st.sampled_from(["", ",", ".", ":", " [123]", " [0123]", " [1234567890123456789]", " [12", " []",
                         "(mixed #running-req: 2)", " [7],", " ,", ", "])
SEPS = st.sampled_from([", ", ", ", ", ", ",", ",  "])
TAILS = st.sampled_from(["", ", ", ",", " ", ",  ", ", x"])


@st.composite
def batch_lines(draw) -> str:
    fields = draw(st.lists(st.tuples(KEYS, VALUES), max_size=9))
    body = "".join((draw(SEPS) if i else "") + f"{k}: {v}" for i, (k, v) in enumerate(fields))
    head = draw(HEADS)
    sep = " " if head in ("", ",", ".", ":") and body else ""
    kind = draw(st.sampled_from(["Decode batch", "Prefill batch"]))
    return f"[{draw(STAMPS)}{draw(FRACS)}{draw(LABELS)}] {kind}{head}{sep}{body}{draw(TAILS) if fields else ''}"


@st.composite
def same_key_lines(draw) -> list[str]:
    """Lines sharing their keys (as a server prints them) but not their values, separators or tails: the
    scanner predicts a line's fields from the previous line's and must fall back exactly."""
    keys = draw(st.lists(KEYS, min_size=1, max_size=7))
    kind = draw(st.sampled_from(["Decode batch", "Prefill batch"]))
    out = []
    for _ in range(draw(st.integers(2, 5))):
        body = "".join((draw(SEPS) if i else "") + f"{k}: {draw(VALUES)}" for i, k in enumerate(keys))
        head = draw(st.sampled_from([",", ", ", " [12],", ":", ""]))
        sep = " " if head in (",", ":", "") else ""
        out.append(f"[{draw(STAMPS)}{draw(LABELS)}] {kind}{head}{sep}{body}{draw(TAILS)}")
    return out


@given(same_key_lines(), st.sampled_from([1 << 20, 1]))
def test_lines_of_one_shape_read_identically(lines: list[str], split: int) -> None:
    bulkscan.SPLIT_BYTES, before = split, bulkscan.SPLIT_BYTES
    try:
        _check("\n".join(lines) + "\n")
    finally:
        bulkscan.SPLIT_BYTES = before


@st.composite
def access_lines(draw) -> str:
    level = draw(st.sampled_from(["INFO", "WARNING", "ERROR", "DEBUG", "CRITICAL", "TRACE", "NOTICE"]))
    pad = draw(st.sampled_from([" ", "     ", ""]))
    client = draw(st.sampled_from(["127.0.0.1:5555", "10.0.0.1:1", "a\\b:1", "host:80", ""]))
    method = draw(st.sampled_from(["GET", "POST", "get", ""]))
    path = draw(st.sampled_from(["/generate", "/health", "", "/v1/chat?x=1&y=2", '/a"b', "/a\\b"]))
    proto = draw(st.sampled_from([" HTTP/1.1", "", " HTTP/1.1 x", "  "]))
    status = draw(st.sampled_from(["200", "503", "20", "2000"]))
    rest = draw(st.sampled_from([" OK", "", " Service Unavailable", ' "x"']))
    return (f"[{draw(STAMPS)}{draw(FRACS)}{draw(LABELS)}] {level}:{pad}{client} - "
            f'"{method} {path}{proto}" {status}{rest}')


@given(st.lists(batch_lines() | access_lines(), min_size=1, max_size=6), st.sampled_from(["\n", "\r\n"]),
       st.sampled_from([1 << 20, 1]))
def test_generated_lines_read_identically(lines: list[str], eol: str, split: int) -> None:
    bulkscan.SPLIT_BYTES, before = split, bulkscan.SPLIT_BYTES  # 1: every chunk in two halves
    try:
        _check(eol.join(lines) + eol)
    finally:
        bulkscan.SPLIT_BYTES = before


def test_common_lines_are_all_taken() -> None:
    """Lines as SGLang prints them must not fall back to the scanner (that is what makes it fast)."""
    lines = [
        "[2025-11-20 09:19:03 DP0 TP0] Decode batch, #running-req: 20, #token: 129178, token usage: 0.42, "
        "cuda graph: True, gen throughput (token/s): 1925.94, #queue-req: 4, ",
        "[2025-11-20 09:19:03 TP1] Prefill batch, #new-seq: 8, #new-token: 2374, #cached-token: 39908, "
        "token usage: 0.98, #running-req: 15, #queue-req: 32, ",
        "[2025-11-20 09:19:03.123 TP1] Decode batch [1234], #running-req: 3, #token: 40, token usage: 0.10, "
        "accept len: 3.10, fwd occupancy: 85.3%, est. decode TFLOPS/s (per GPU): 12.5",
        '[2025-11-20 09:19:03] INFO:     127.0.0.1:5555 - "POST /generate HTTP/1.1" 200 OK',
    ]
    n, bulk, _py_i, others = sglang_fast._native_chunk(("\n".join(lines) + "\n").encode())
    assert (n, bulk.height, others) == (4, 4, [])
    _check("\n".join(lines) + "\n")


def test_stale_library_is_not_used(monkeypatch, tmp_path) -> None:
    src = tmp_path / "bulkscan.c"
    src.write_text("/* another revision */\n")
    monkeypatch.setattr(bulkscan, "SOURCE", src)
    monkeypatch.setattr(bulkscan, "_tried", False)
    monkeypatch.setattr(bulkscan, "_lib", None)
    monkeypatch.setattr(bulkscan, "why_not", None)  # registered first, so the reason set below is undone
    assert bulkscan._load() is None
    assert "stale" in (bulkscan.why_not or "")


@given(st.lists(st.one_of(st.none(), st.text(alphabet='"queu_r: -0123456789,}{ax\\', max_size=40),
                          st.builds(lambda pre, v, post: f'{pre}"queue_req": {v}{post}',
                                    st.sampled_from(["{", '{"a": 1, ', '{"s": "\\"queue_req\\": 9", ', ""]),
                                    st.sampled_from(["0", "-3", "007", "1234567890123456", "123456789012345",
                                                     '"x"', "", "-", "1.5", "12"]),
                                    st.sampled_from(["}", ", ", ",", "", " }", "x"]))), max_size=8),
       st.integers(0, 3))
def test_json_int_finds_what_the_regex_finds(values, cut) -> None:
    import re

    import pyarrow as pa

    arr = pa.array(values, type=pa.large_string()).slice(min(cut, len(values)))
    got = bulkscan.json_int(arr, "queue_req").to_pylist()
    rx = re.compile(r'"queue_req": (-?[0-9]{1,15})[,}]')
    want = [None if v is None or not (m := rx.search(v)) else int(m.group(1)) for v in arr.to_pylist()]
    assert got == want

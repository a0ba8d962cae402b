"""The compiled row filter of redaction (fx_may_secret, parsers.bulkscan.may_hold_secret): a row it lets
skip the prefilters must be one that none of them matches, and redact_frame must give the same frame
and counts with it as without it."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shared_data import SHARED

import forensics.redact as redact
from parsers import bulkscan

pytestmark = pytest.mark.skipif(not bulkscan.available(), reason=f"native scanner: {bulkscan.why_not}")

ROOT = Path(__file__).resolve().parents[1]

#: Pieces of every anchor and special character, in both cases and cut short, and batch-line text
_PIECES = ["sk-", "SK-", "s", "k", "-", "akia", "AKIA", "aki", "asia", "AsIa", "bearer", "BEARER", "beare", "api",
           "API", "ap", "-token", "-TOKEN", "-toke", "token", "ken", "secret", "SECRET", "secre", "passw", "PASSW",
           "pass", "x-", "X-", "authorization", "Authorization", "authorizatio", "auth-token", "access-token",
           "=", "@", "'", '"', "\n", "\x00", "_", " ", "\t", "\x0b", "\x0c", "\r", "\x1c", "\x1f", ",", ":", "/",
           "é", "ſ", "K", "\u212a", "\u00a0", "\u0085", "#new-token: 12", "token usage: 0.5", "#cached-token: 7",
           "[2025-11-20 11:02:41 DP0 TP0] Decode batch, #running-req: 41", "gen throughput (token/s): 1.5",
           "Prefill batch", "cuda graph: True", "0123456789", "abcdefghijklmnopqrstuvwxyz"]

_ROWS = st.lists(st.sampled_from(_PIECES), max_size=14).map("".join) | st.text(max_size=40)

#: Every regex redact_frame may ask of a row, as polars runs them (the same engine)
_PREFILTERS = (redact.FRAME_PREFILTER, redact.FRAME_PREFILTER_PLAIN, redact.BATCH_ATTRS_PREFILTER,
               redact.JOINED_PREFILTER)


def _unflagged_matches(rows: list[str | None]) -> list[str]:
    """Rows fx_may_secret does not flag that a prefilter matches (must be none)."""
    col = pl.Series("t", rows, dtype=pl.Utf8)
    flags = pl.Series(bulkscan.may_hold_secret(col.to_arrow())).cast(pl.Boolean)
    assert flags.len() == col.len()
    bad = []
    for pattern in _PREFILTERS:
        hit = col.str.contains(pattern).fill_null(False)
        bad += col.filter(hit & ~flags).to_list()
    return bad


@given(st.lists(_ROWS | st.none(), min_size=1, max_size=30))
@settings(max_examples=400, deadline=None)
def test_rows_left_unflagged_match_no_prefilter(rows):
    assert _unflagged_matches(rows) == []


def test_anchors_at_every_offset_are_flagged():
    """Each literal at every position of a row of every length (the 16-byte blocks and the tail)."""
    for lit in ("sk-", "akia", "asia", "bearer", "api", "secret", "passw", "x-", "authorization", "auth-token",
                "access-token", "-token ", "-token,", "-TOKEN\t", "=", "@", "_", "\n", "é"):
        for n in range(0, 40):
            row = "." * n + lit.upper() if n % 2 else "." * n + lit
            for tail in ("", "." * 7, "." * 21):
                got = pl.Series(bulkscan.may_hold_secret(pl.Series([row + tail]).to_arrow())).to_list()
                assert got == [1], (row + tail)


def test_batch_lines_are_no_candidates():
    """What makes it pay: SGLang's batch lines (most of a big log) skip the prefilters."""
    rows = ["[2025-11-20 12:58:50 DP0 TP0] Decode batch, #running-req: 62, #token: 86242, token usage: 0.51, "
            "cuda graph: True, gen throughput (token/s): 63.32, #queue-req: 15, ",
            "[2025-11-20 12:58:50 DP0 TP0] Prefill batch, #new-seq: 4, #new-token: 2465, #cached-token: 21878, "
            "token usage: 0.67, #running-req: 35, #queue-req: 35, "]
    assert pl.Series(bulkscan.may_hold_secret(pl.Series(rows).to_arrow())).to_list() == [0, 0]


def _fixture_lines() -> list[str]:
    lines: list[str] = []
    for d in (ROOT / "fixtures", SHARED / "sglang_real_logs", SHARED / "research_samples"):  # what is there
        if not d.is_dir():
            continue
        for p in sorted(d.rglob("*")):
            if p.is_file() and p.stat().st_size < 4 << 20:
                lines += p.read_bytes().decode("utf-8", "replace").splitlines()
    return lines


def test_fixture_and_sample_lines_left_unflagged_match_no_prefilter():
    lines = _fixture_lines()
    assert lines
    assert _unflagged_matches(lines) == []


@given(st.lists(_ROWS, min_size=1, max_size=40), st.sampled_from(["decode_batch", "log", "server_args"]))
@settings(max_examples=150, deadline=None)
def test_redact_frame_is_the_same_without_the_filter(rows, kind):
    """With the compiled filter and without it (FORENSICS_NATIVE=0): the same frame, the same counts; the
    joined-string shortcut off, so the per-row path is what is compared."""
    import os

    batch = "[2025-11-20 11:02:41 TP0] Decode batch, #running-req: 41, #token: 199472, token usage: 0.90"
    text = rows + [batch] * 20
    attrs = [json.dumps({"args": r}) if i % 3 == 0 else None for i, r in enumerate(rows)] + [None] * 20
    df = pl.DataFrame({"kind": [kind] * len(rows) + ["decode_batch"] * 20, "text": text, "attrs": attrs})
    old = redact._JOINED_ROWS
    redact._JOINED_ROWS = 0
    try:
        fast, fast_counts = redact.redact_frame(df)
        os.environ["FORENSICS_NATIVE"] = "0"
        try:
            slow, slow_counts = redact.redact_frame(df)
        finally:
            del os.environ["FORENSICS_NATIVE"]
    finally:
        redact._JOINED_ROWS = old
    assert fast.equals(slow) and fast_counts == slow_counts


def test_sliced_and_chunked_columns_are_read_at_their_rows():
    """A slice (an offset into the buffers) and a column of several chunks: the flags of their own rows."""
    rows = ["plain row", "HF_TOKEN=x", None, "plain again", "--api-key s3cret", "last"]
    whole = pl.Series(rows, dtype=pl.Utf8)
    want = [0, 1, 0, 0, 1, 0]
    assert pl.Series(bulkscan.may_hold_secret(whole.to_arrow())).to_list() == want
    assert pl.Series(bulkscan.may_hold_secret(whole.to_arrow().slice(3))).to_list() == want[3:]
    chunked = pl.concat([whole.slice(0, 2), whole.slice(2)], rechunk=False)
    assert chunked.n_chunks() == 2
    assert pl.Series(bulkscan.may_hold_secret(chunked.to_arrow())).to_list() == want
    df = pl.DataFrame({"text": chunked})
    out, counts = redact.redact_frame(df)
    assert out["text"].to_list()[1] == "HF_TOKEN=[REDACTED:env_secret]" and sum(counts.values()) == 2

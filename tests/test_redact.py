"""Redaction and obfuscation: every secret shape, no false alarms on SGLang text, idempotent."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shared_data import SHARED, SKIP_REASON

from forensics.redact import Obfuscator, marker, redact_bytes, redact_text

HF = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567"
API = "launch-" + "s3cret-42"
SK = "sk-" + "abcdefghijklmnopqrstuvwxyzABCD1234"
SK_PROJ = "sk-proj-" + "Abc123_def456-GHI789jkl012MNO345"
AKIA = "AKIA" + "IOSFODNN7EXAMPLE"
ASIA = "ASIA" + "Y3FAKEKEYID12345"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize(
    ("text", "secret", "kind"),
    [
        (f"token {HF} end", HF, "hf_token"),
        (f"key={SK}", SK, "openai_key"),
        (f"OPENAI key {SK_PROJ}", SK_PROJ, "openai_key"),
        (f"id {AKIA} used", AKIA, "aws_key_id"),
        (f"session {ASIA}", ASIA, "aws_key_id"),
        (f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET, "aws_secret"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "eyJhbGciOiJIUzI1NiJ9.payload.sig", "bearer"),
        ("curl -H 'authorization: bearer abc123def456ghi789'", "abc123def456ghi789", "bearer"),
        ("--api-key s3cret-value --port 30000", "s3cret-value", "cli_secret"),
        ("--api-key=s3cret-value", "s3cret-value", "cli_secret"),
        ("--admin-api-key 'quoted secret'", "quoted secret", "cli_secret"),
        ("python\x00-m\x00sglang.launch_server\x00--api-key\x00nulsep-secret\x00--tp\x008", "nulsep-secret",
         "cli_secret"),
        ("HF_TOKEN=plainvalue123", "plainvalue123", "env_secret"),
        ("GITHUB_TOKEN=ghp_whatever", "ghp_whatever", "env_secret"),
        ("DB_PASSWORD=hunter2", "hunter2", "env_secret"),
        ("MY_SERVICE_SECRET=abc", "MY_SERVICE_SECRET=abc"[-3:], "env_secret"),
        ("OPENAI_API_KEY=notshaped", "notshaped", "env_secret"),
        ("server_args=ServerArgs(model_path='m', api_key='sglang-key-1', tp_size=8)", "sglang-key-1",
         "kwarg_secret"),
        ('{"hf_token": "tok-in-json", "tp_size": 8}', "tok-in-json", "kwarg_secret"),
        ("fetch https://user:p4ss@example.com/x", "p4ss", "url_password"),
        ("redis://:onlypass@cache:6379/0", "onlypass", "url_password"),
    ],
)
def test_each_secret_shape_is_replaced_by_its_marker(text, secret, kind):
    out, counts = redact_text(text)
    assert secret not in out
    assert marker(kind) in out
    assert counts[kind] >= 1


@pytest.mark.parametrize(
    "text",
    [
        "--max-total-tokens 4096 --tokenizer-path /models/x --skip-tokenizer-init",
        "TOKENIZERS_PARALLELISM=false CUDA_VISIBLE_DEVICES=0,1",
        "server_args=ServerArgs(api_key='', admin_api_key=None, max_total_tokens=None, tokenizer_path='m')",
        "Decode batch. #running-req: 8, #token: 81664, token usage: 0.97, gen throughput (token/s): 1200",
        "the bearer of this message uses basic authentication",
        "http://127.0.0.1:30000/generate and grpc://host:50051",
        "KV Cache is allocated. #tokens: 1234567, K size: 10.00 GB, V size: 10.00 GB",
    ],
)
def test_ordinary_sglang_text_is_untouched(text):
    assert redact_text(text) == (text, {})


def test_counts_are_per_secret():
    text = f"{HF} and {HF} and --api-key x1y2z3 and {AKIA}"
    _, counts = redact_text(text)
    assert dict(counts) == {"hf_token": 2, "cli_secret": 1, "aws_key_id": 1}


def test_bytes_that_are_not_utf8_survive():
    data = b"\xff\xfe garbage " + HF.encode() + b" \x00\x01 tail\n"
    out, counts = redact_bytes(data)
    assert out == b"\xff\xfe garbage [REDACTED:hf_token] \x00\x01 tail\n"
    assert counts["hf_token"] == 1


def test_the_real_sglang_logs_keep_their_lines():
    """Redaction on the real rank logs never changes the line count, and only touches secret-shaped text."""
    logs = sorted((SHARED / "sglang_real_logs").glob("*.log")) if SHARED.exists() else []
    if not logs:
        pytest.skip(f"{SKIP_REASON}: shared/sglang_real_logs not available")
    for path in logs:
        data = path.read_bytes()
        out, counts = redact_bytes(data)
        assert out.count(b"\n") == data.count(b"\n"), path.name
        assert redact_bytes(out)[0] == out
        assert set(counts) <= {"kwarg_secret", "cli_secret", "env_secret", "hf_token", "url_password"}, path.name


_pieces = st.sampled_from([
    HF, SK, SK_PROJ, AKIA, "--api-key ", "--api-key=", "HF_TOKEN=", "api_key='", "'", '"', "http://u:",
    "@host", "Bearer ", "Authorization: ", "aws_secret_access_key=", AWS_SECRET, "[REDACTED:", "]", " ", "\n",
    "\x00", "=", ":", "x", "value1234567890123456", "_TOKEN", "MY", "sk-", "hf_",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_pieces, st.text(max_size=8)), max_size=25).map("".join))
def test_redaction_is_idempotent(text):
    once, _ = redact_text(text)
    twice, counts = redact_text(once)
    assert twice == once
    assert not counts


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_redact_bytes_never_raises(data):
    out, _ = redact_bytes(data)
    assert isinstance(out, bytes)


def test_obfuscator_is_consistent_and_keeps_loopback():
    ob = Obfuscator(["gpu-node-17", "gpu-node-17.cluster.local"])
    a = ob.apply("gpu-node-17.cluster.local 10.0.0.5 gpu-node-17 10.0.0.6 10.0.0.5 127.0.0.1 fe80::1 ::1")
    assert a == "host-1 ip-1 host-2 ip-2 ip-1 127.0.0.1 ip-3 ::1"
    assert ob.apply("again 10.0.0.6 on gpu-node-17") == "again ip-2 on host-2"
    assert ob.mapping["gpu-node-17.cluster.local"] == "host-1"


def test_obfuscator_leaves_versions_and_times_alone():
    ob = Obfuscator(["node"])
    text = "driver 550.54.15, at 08:27:07, version 1.2.3.4.5, mac aa:bb:cc:dd:ee:ff, nodes 3"
    assert ob.apply(text) == text
    assert ob.mapping == {}


def test_obfuscator_idempotent():
    ob = Obfuscator(["gpu-node-17"])
    once = ob.apply("gpu-node-17 192.168.1.20")
    assert ob.apply(once) == once


@pytest.mark.parametrize("unit", [b"a", b"-", b"=", b"A_", b"hf_", b"x://", b"bearer ", b":", b"-token ", b"TOKEN=",
                                  b"token='", b"--api-key ", b"\x00", b"\xff"])
def test_megabyte_lines_stay_linear(unit):
    import time

    data = unit * (1_000_000 // len(unit))
    t0 = time.monotonic()
    out, _ = redact_bytes(data)
    assert time.monotonic() - t0 < 5
    assert out.count(b"\n") == 0


# ----------------------------------------------------------------------------------------------
# Frames: the prefilter must never hide a line the rules would redact

_FRAGMENTS = ["hf_", "Q7xK2mZpL9vR4tYwB8nC3dF6gH1jS5aE0u", "sk-proj-", "AKIA", "Z7Q2M5X8N3L6P9R4", "Bearer ",
              "Authorization: ", "--api-key", "=", " ", "'", '"', "api_key", "HF_TOKEN", "password", "secret",
              "http://bob:", "pw@host", "aws_secret_access_key", ": ", "token", "_KEY", "\n", "- name: A_TOKEN",
              "value: ", "x1y2z3w4v5u6t7s8", "#token: 12", "token usage: 0.5", "--hf-token", ",", "[", "]"]


@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=12).map("".join))
@settings(max_examples=400, deadline=None)
def test_frame_prefilter_is_a_superset_of_the_rules(text):
    import re as _re

    from forensics.redact import FRAME_PREFILTER

    red, counts = redact_text(text)
    if counts:
        assert _re.search(FRAME_PREFILTER.replace("(?i)", ""), text, _re.IGNORECASE), text


def test_redact_frame_changes_only_secret_rows():
    import polars as pl

    from forensics.redact import redact_frame

    rows = ["[2025-11-20 11:02:41 TP0] Decode batch, #running-req: 41, #token: 199472, token usage: 0.90",
            f"[2025-11-20 09:14:02] server_args=ServerArgs(model_path='/m', api_key='{API}', tp_size=8)",
            f"python3 -m sglang.launch_server --api-key {API} --hf-token {HF}"]
    df = pl.DataFrame({"text": rows, "attrs": [None, json.dumps({"args": {"api_key": API}}), None]})
    out, counts = redact_frame(df)
    assert out["text"][0] == rows[0]
    assert all(API not in (v or "") and HF not in (v or "") for v in out["text"].to_list() + out["attrs"].to_list())
    assert json.loads(out["attrs"][1])["args"]["api_key"].startswith("[REDACTED:")
    assert sum(counts.values()) == 4


_PLAIN_FRAGMENTS = ["Bearer ", "bearer", "Authorization: ", "authorization", "--api-key", "--apikey", "--hf-token",
                    "--admin-secret", "--password", "--passwd", "-TOKEN", " ", "\t", "sk-", "SK-", "AKIA", "asia",
                    "Z7Q2M5X8N3L6P9R4", "Q7xK2mZpL9vR4tYwB8nC3dF6gH1jS5aE0u", "x1y2z3w4v5u6t7s8", "#token: 12",
                    "#new-token: 7", "token usage: 0.5", ":", ",", "[", "]", "-", "proj-", "ant-"]


@given(st.lists(st.sampled_from(_PLAIN_FRAGMENTS + _FRAGMENTS), max_size=12).map("".join))
@settings(max_examples=400, deadline=None)
def test_plain_prefilter_covers_rows_without_special_characters(text):
    """A row with none of FRAME_SPECIAL's characters that a rule would redact matches the plain prefilter."""
    import re as _re

    from forensics.redact import FRAME_PREFILTER_PLAIN, FRAME_SPECIAL

    if _re.search(FRAME_SPECIAL, text) or not redact_text(text)[1]:
        return
    assert _re.search(FRAME_PREFILTER_PLAIN.replace("(?i-u)", ""), text, _re.IGNORECASE | _re.ASCII), text


def test_redact_frame_mixes_plain_and_special_rows():
    import polars as pl

    from forensics.redact import redact_frame

    batch = "[2025-11-20 11:02:41 TP0] Prefill batch, #new-seq: 1, #new-token: 8, #cached-token: 0, token usage: 0.05"
    rows = [batch] * 10 + [f"launch --api-key {API} --port 1", f"HF_TOKEN={HF}", f"Authorization: Bearer {SK}"]
    out, counts = redact_frame(pl.DataFrame({"text": rows}))
    got = out["text"].to_list()
    assert got[:10] == [batch] * 10
    assert all(API not in v and HF not in v and SK not in v for v in got)
    assert sum(counts.values()) == 3


_BATCH_KEYS = ["#running-req", "#token", "token usage", "hf abcdefghijklmnopqrstuvwxyz0", "HF-ABCDEFGHIJKLMNOPQRSTUVWX12",
               "aws secret access key", "AWS_SECRET_ACCESS_KEY", "secret", "password", "api key", "api-key",
               "Authorization", "bearer", "token", "sk", "AKIAZ7Q2M5X8N3L6P9R4", "x", "passwd", "--api-key"]
_BATCH_VALUES = ["12", "0", "-5", "0.5", "1234567890123456", "12.5%", "True", "False", "", "Bearer", "s3cret",
                 "hf_Q7xK2mZpL9vR4tYwB8nC3dF6gH1jS5aE0u", "AKIAZ7Q2M5X8N3L6P9R4", "sk-proj-Q7xK2mZpL9vR4tYwB8nC3dF",
                 "x1y2z3w4v5u6t7s8", "a=b", "u@h", "1e-05", "-0.0"]


@given(st.lists(st.tuples(st.sampled_from(_BATCH_KEYS), st.sampled_from(_BATCH_VALUES)), min_size=1, max_size=6),
       st.sampled_from(["Decode batch", "Prefill batch"]))
@settings(max_examples=400, deadline=None)
def test_batch_attrs_prefilter_covers_numeric_batch_rows(fields, kind):
    """Batch rows as the parser writes them: when attrs holds no string value, every attrs a rule would
    redact matches BATCH_ATTRS_PREFILTER (the premise of redact_frame's cheap path)."""
    import re as _re

    from forensics.redact import BATCH_ATTRS_PREFILTER, BATCH_KINDS
    from parsers import sglang

    line = f"[2025-11-20 11:02:41 TP0] {kind}, " + ", ".join(f"{k}: {v}" for k, v in fields)
    for row in sglang.parse(line + "\n", "r.log").events.iter_rows(named=True):
        attrs = row["attrs"]
        if row["kind"] not in BATCH_KINDS or attrs is None or '": "' in attrs:
            continue
        if redact_text(attrs)[1]:
            assert _re.search(BATCH_ATTRS_PREFILTER, attrs), attrs


def test_redact_frame_batch_rows_keep_numbers_and_lose_secrets():
    import polars as pl

    from forensics.redact import redact_frame

    numeric = '{"running_req": 41, "token": 199472, "token_usage": 0.9}'
    rows = [numeric] * 20 + ['{"hf_q7xk2mzpl9vr4tywb8nc3df": 5}', '{"aws_secret_access_key": 1234567890123456}',
                             '{"note": "' + HF + '"}', '{"args": {"api_key": "' + API + '"}}']
    kinds = ["decode_batch"] * 23 + ["server_args"]
    out, counts = redact_frame(pl.DataFrame({"kind": kinds, "attrs": rows}))
    got = out["attrs"].to_list()
    assert got[:20] == [numeric] * 20
    assert all("REDACTED" in v for v in got[20:]), got[20:]
    assert sum(counts.values()) == 4


@given(st.lists(st.sampled_from(_PLAIN_FRAGMENTS + _FRAGMENTS), min_size=1, max_size=8).map("".join))
@settings(max_examples=150, deadline=None)
def test_columns_searched_whole_redact_as_row_by_row(secret_row):
    """A small frame's column is searched as one string first (clean: skipped); with or without that
    shortcut, the same rows change the same way and the counts agree."""
    import polars as pl

    import forensics.redact as redact

    batch = "[2025-11-20 11:02:41 TP0] Decode batch, #running-req: 41, #token: 199472, token usage: 0.90"
    text = [batch] * 500
    attrs = ['{"running_req": 41, "token": 199472, "token_usage": 0.9}'] * 500
    text[123], attrs[432] = secret_row, json.dumps({"args": secret_row})
    df = pl.DataFrame({"kind": ["decode_batch"] * 500, "text": text, "attrs": attrs})
    fast, fast_counts = redact.redact_frame(df)
    clean, clean_counts = redact.redact_frame(df.with_columns(text=pl.lit(batch), attrs=pl.lit(attrs[0])))
    assert clean_counts == {} and clean.equals(df.with_columns(text=pl.lit(batch), attrs=pl.lit(attrs[0])))
    old = redact._JOINED_ROWS
    redact._JOINED_ROWS = 0  # off: the row-by-row path alone
    try:
        slow, slow_counts = redact.redact_frame(df)
    finally:
        redact._JOINED_ROWS = old
    assert fast.equals(slow) and fast_counts == slow_counts


def test_an_authorization_header_in_a_row_with_special_characters_is_redacted():
    """'Authorization: Basic …' holds neither 'bearer' nor a key word: the full prefilter must still send a
    row that holds it (and '=', so the plain prefilter is not the one asked) to the rules."""
    import polars as pl

    from forensics.redact import redact_frame

    row = "curl -H 'Authorization: Basic dXNlcjpwYXNzd29yZA==' http://api"
    out, counts = redact_frame(pl.DataFrame({"text": [row, "x=1"]}))
    assert "dXNlcjpwYXNzd29yZA" not in out["text"][0] and sum(counts.values()) == 1

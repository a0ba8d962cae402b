"""Secrets planted in every kind of artifact never reach a bundle, nor any report made from it.

A fake host (fake commands first on PATH, a fake /proc and cgroup tree, as tests/test_collect.py
does) carries HF/OpenAI/AWS keys, bearer tokens, ``--api-key`` values and URL passwords in the rank
log, the server's cmdline and environment, ``ps`` output, ``dmesg``, an added launch file and an
added pasted transcript. ``forensics collect`` bundles it, ``forensics report`` reads the bundle,
and no planted value may appear in any bundle member or any output file (the Parquet decoded,
since it is compressed). Redaction is also checked to be idempotent on text shaped like these.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_collect import make_proc

from forensics.collect import CollectOptions, collect
from forensics.redact import redact_bytes, redact_text

REPO = Path(__file__).resolve().parents[1]
FAKEBIN = Path(__file__).resolve().parent / "fakebin"

# Built by concatenation so no scanner mistakes this file for a leak.
HF = "hf_" + "Tq4Lw8Zr2Xc6Vb0Nm3Kj7Hg5Fd1Sa9Pe"
SK = "sk-proj-" + "Pw2Ex9Rt5Yu1Io7Ap3Sd6Fg0Hj4Kl8Zx"
AKIA = "AKIA" + "Q4W7E2R9T5Y1U8I3"
AWS = "kH8s/Lm2Qw9Xz" + "+Pf4Rt7Yb1Nc6Vd3Ge5Ja0"
BEARER = "eyJhbGciOiJIUzI1" + "NiJ9.c2VjcmV0.x7Kp2Qm9"
API_KEY = "sgl-" + "admin-9f3c2e71b5"
URL_PW = "Hunter2-" + "wg77q"
DB_PW = "pgpass-" + "k2m9z"
SECRETS = {"hf": HF, "sk": SK, "akia": AKIA, "aws": AWS, "bearer": BEARER, "api_key": API_KEY, "url_pw": URL_PW,
           "db_pw": DB_PW}

SERVER_ARGV = ["python3", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-70B", "--tp-size", "8",
               f"--api-key={API_KEY}", "--mem-fraction-static", "0.88",
               "--hicache-storage-backend-extra-config", f"postgres://sgl:{DB_PW}@10.0.0.5:5432/kv"]


def _log_text() -> str:
    stamp = "[2026-11-29 08:27:{:02d} TP{}]"
    lines = [
        f"{stamp.format(1, 0)} server_args=ServerArgs(model_path='meta-llama/Llama-3.1-70B', tp_size=8, "
        f"api_key='{API_KEY}', mem_fraction_static=0.88, hf_token='{HF}')",
        f"{stamp.format(2, 0)} Load weight begin. avail mem=78.50 GB",
        f"{stamp.format(3, 1)} fetching https://user:{URL_PW}@hub.example.com/models/x",
        f"{stamp.format(4, 2)} request headers {{'Authorization': 'Bearer {BEARER}'}}",
        f"{stamp.format(5, 3)} boto3 using {AKIA} / aws_secret_access_key={AWS}",
        f"{stamp.format(6, 0)} openai fallback key {SK}",
        f"{stamp.format(7, 0)} Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=12.00 GB, "
        "mem usage=66.50 GB.",
        f"{stamp.format(8, 0)} KV Cache is allocated. #tokens: 81664, K size: 4.98 GB, V size: 4.98 GB",
        f"{stamp.format(9, 0)} Scheduler hit an exception: Traceback (most recent call last):",
        f"  File \"/srv/run.py\", line 9, in <module> main(['--api-key', '{API_KEY}', '--hf-token', '{HF}'])",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.10 GiB of which 1.20 GiB is free.",
    ]
    return "\n".join(lines) + "\n"


def _fake_commands(bindir: Path) -> None:
    """ps and dmesg that print secrets the way the real ones would show them."""
    bindir.mkdir()
    args = " ".join(SERVER_ARGV)
    ps_lines = [
        "    PID    PPID STAT                  STARTED ELAPSED   RSS    VSZ COMMAND         COMMAND",
        "      1       0 Ss   Sun Nov 29 08:00:00 2026    1620  12000 170000 systemd         /sbin/init",
        f"   4242    4000 Sl   Sun Nov 29 08:26:55 2026      25 9000000 90000000 python3         {args}",
        f"   4300       1 S    Sun Nov 29 08:26:50 2026      30  3000  12000 curl            curl -H "
        f"Authorization: Bearer {BEARER} https://admin:{URL_PW}@10.0.0.9/v1",
        f"   4301       1 S    Sun Nov 29 08:26:51 2026      29  3000  12000 env             env HF_TOKEN={HF} "
        f"OPENAI_API_KEY={SK} AWS_ACCESS_KEY_ID={AKIA} python3 tool.py",
    ]
    (bindir / "ps").write_text("#!/bin/sh\ncat <<'EOF'\n" + "\n".join(ps_lines) + "\nEOF\n")
    dmesg = [
        "2026-11-29T08:27:07,634951+00:00 python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0",
        f"2026-11-29T08:27:08,000001+00:00 audit: type=1123 msg='cmd=\"sglang --api-key {API_KEY} --token {HF}\"'",
        f"2026-11-29T08:27:08,100001+00:00 usb: serial AKIA-like {AKIA} password={URL_PW}",
    ]
    (bindir / "dmesg").write_text("#!/bin/sh\ncat <<'EOF'\n" + "\n".join(dmesg) + "\nEOF\n")
    for p in bindir.iterdir():
        p.chmod(0o755)


def _fake_proc(root: Path, log: Path) -> Path:
    return make_proc(root, log, argv=SERVER_ARGV, state="S", init_environ=[
        "container=docker", f"HUGGING_FACE_HUB_TOKEN={HF}"], environ=[
        "PATH=/usr/bin", f"HF_TOKEN={HF}", f"OPENAI_API_KEY={SK}", f"AWS_ACCESS_KEY_ID={AKIA}",
        f"AWS_SECRET_ACCESS_KEY={AWS}", f"SGLANG_API_KEY={API_KEY}", f"DATABASE_URL=postgres://u:{DB_PW}@db/x",
        f"HTTP_AUTH=Bearer {BEARER}", "TZ=UTC"])


def _added_files(root: Path) -> list[Path]:
    compose = root / "compose.yaml"
    compose.write_text(
        "services:\n  sglang:\n    image: lmsysorg/sglang:v0.4.6\n    environment:\n"
        f"      - HF_TOKEN={HF}\n      - OPENAI_API_KEY={SK}\n"
        "    command: [\"python3\", \"-m\", \"sglang.launch_server\", \"--tp-size\", \"8\",\n"
        f"              \"--api-key\", \"{API_KEY}\", \"--model-path\", \"m\"]\n")
    k8s = root / "deploy.yaml"
    k8s.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nspec:\n  template:\n    spec:\n      containers:\n"
        "      - name: sglang\n        command: [\"python3\", \"-m\", \"sglang.launch_server\"]\n        args:\n"
        f"        - --tp-size\n        - \"8\"\n        - --api-key\n        - {API_KEY}\n        env:\n"
        f"        - name: HF_TOKEN\n          value: {HF}\n        - name: AWS_SECRET_ACCESS_KEY\n"
        f"          value: \"{AWS}\"\n")
    transcript = root / "session.txt"
    transcript.write_text(
        "$ export HF_TOKEN=" + HF + "\n"
        f"$ curl -s -H 'Authorization: Bearer {BEARER}' http://admin:{URL_PW}@127.0.0.1:30000/get_server_info\n"
        "{\"status\": \"ok\"}\n"
        "$ free -g\n"
        "               total        used        free      shared  buff/cache   available\n"
        "Mem:             440         431           8           0           1           3\n"
        "Swap:              0           0           0\n")
    return [compose, k8s, transcript]


@pytest.fixture
def planted_host(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    _fake_commands(bindir)
    monkeypatch.setenv("PATH", os.pathsep.join([str(bindir), str(FAKEBIN), os.environ.get("PATH", "")]))
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "ok")
    monkeypatch.delenv("FAKE_DMESG", raising=False)
    log = tmp_path / "sglang-tp0.log"
    log.write_text(_log_text())
    rank1 = tmp_path / "ranks" / "tp1.log"
    rank1.parent.mkdir()
    rank1.write_text(_log_text().replace("TP0]", "TP1]"))
    proc = _fake_proc(tmp_path, log)
    cg = tmp_path / "cgroup" / "system.slice" / "sglang.service"
    cg.mkdir(parents=True)
    (cg / "memory.max").write_text("max\n")
    out = tmp_path / "out"
    out.mkdir()
    return {"tmp": tmp_path, "proc": proc, "cgroup": tmp_path / "cgroup", "out": out, "logs": [str(rank1.parent)],
            "adds": [str(p) for p in _added_files(tmp_path)]}


def _members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(bundle.read_bytes())) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _leaks(name: str, data: bytes) -> list[str]:
    return [f"{kind} in {name}" for kind, s in SECRETS.items() if s.encode() in data]


def _parquet_text(path: Path) -> bytes:
    """Every string cell and the file metadata of a Parquet, as bytes to search."""
    import pyarrow.parquet as pq

    frame = pl.read_parquet(path)
    cells = [str(v) for c in frame.columns if frame[c].dtype == pl.Utf8 for v in frame[c].drop_nulls()]
    meta = pq.read_schema(path).metadata or {}
    return ("\n".join(cells) + "\n" + "\n".join(v.decode() for v in meta.values())).encode()


def test_planted_secrets_reach_neither_bundle_nor_report(planted_host):
    h = planted_host
    bundle = collect(CollectOptions(output=h["out"] / "bundle.tar.gz", proc_root=h["proc"], cgroup_root=h["cgroup"],
                                    logs=h["logs"], adds=h["adds"], timeout_s=5, budget_s=40))
    members = _members(bundle)
    names = "\n".join(members)
    # every artifact kind is really in the bundle, so the check below means something
    for want in ("logs/sglang-tp0.log", "logs/tp1.log", "sglang/4242/cmdline", "sglang/4242/environ.txt",
                 "host/ps.txt", "host/dmesg.txt", "added/compose.yaml", "added/deploy.yaml", "added/session.txt"):
        assert any(n.endswith(want) for n in members), f"{want} missing from {names}"
    leaks = [leak for name, data in members.items() for leak in _leaks(name, data)]
    assert leaks == [], "\n".join(leaks)
    manifest = json.loads(next(d for n, d in members.items() if n.endswith("manifest.json")))
    assert manifest["redactions"] >= 30
    # the report, through the real CLI, on the bundle
    report_dir = h["tmp"] / "report"
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "report", str(bundle), "-o", str(report_dir), "-q"],
                          capture_output=True, text=True, cwd=h["tmp"], env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 0, proc.stderr
    outputs = sorted(report_dir.iterdir())
    assert {p.name for p in outputs} == {"report.html", "summary.md", "findings.json", "findings.sarif",
                                         "timeline.parquet"}
    leaks = []
    for p in outputs:
        leaks += _leaks(p.name, p.read_bytes())
        if p.suffix == ".parquet":
            text = _parquet_text(p)
            assert b"[REDACTED:" in text  # the markers, decoded, are there: the search saw the text
            leaks += _leaks(p.name + " (decoded)", text)
    assert leaks == []
    assert proc.stdout == "" and not any(s in proc.stderr for s in SECRETS.values())


# ----------------------------------------------------------------------------------------------
# Redaction on its own: every planted shape, idempotent


_SHAPES = [
    lambda s: f"--api-key {s}", lambda s: f"--api-key={s}", lambda s: f"--api-key\x00{s}\x00",
    lambda s: f"'--api-key', '{s}'", lambda s: f'"--api-key", "{s}"', lambda s: f"- --api-key\n        - {s}\n",
    lambda s: f"api_key='{s}'", lambda s: f'"api_key": "{s}"', lambda s: f"SGLANG_API_KEY={s}",
    lambda s: f"Authorization: Bearer {s}", lambda s: f"http://u:{s}@host/x", lambda s: f"postgres://sgl:{s}@10.0.0.5:5432/kv",
]
_TOKENS = [HF, SK, AKIA, BEARER, API_KEY, URL_PW]


@pytest.mark.parametrize("shape", range(len(_SHAPES)))
def test_every_shape_is_redacted_for_every_secret_kind(shape):
    for secret in (API_KEY, BEARER, DB_PW):
        text = "prefix " + _SHAPES[shape](secret) + " suffix"
        out, counts = redact_text(text)
        assert secret not in out, out
        assert counts and redact_text(out) == (out, {})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_SHAPES).flatmap(lambda f: st.sampled_from(_TOKENS).map(f)),
                          st.sampled_from(_TOKENS), st.text(max_size=10),
                          st.sampled_from(["\n", "\x00", " ", "'", '"', "=", ":", "[REDACTED:x]", "@", "- "])),
                max_size=20).map(" ".join))
def test_redaction_of_planted_shapes_is_idempotent_and_complete(text):
    once, _ = redact_text(text)
    twice, counts = redact_text(once)
    assert twice == once and not counts
    for secret in (HF, SK, AKIA):  # shapes that are secrets wherever they stand
        assert secret not in once
    raw = text.encode()
    b_once, _ = redact_bytes(raw)
    assert redact_bytes(b_once)[0] == b_once

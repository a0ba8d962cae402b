"""`forensics timeline`: one zstd Parquet file that DuckDB and polars read, with provenance and UTC."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest
from shared_data import SHARED, SKIP_REASON

from forensics.timeline import build_timeline

REPO = Path(__file__).resolve().parents[1]
REAL_LOGS = SHARED / "sglang_real_logs"

LOG = """[2025-11-20 09:14:02] server_args=ServerArgs(model_path='/m', tp_size=2, mem_fraction_static=0.9)
[2025-11-20 09:14:11 TP0] Load weight begin. avail mem=94.61 GB
[2025-11-20 09:14:11 TP1] Load weight begin. avail mem=94.61 GB
"""


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "forensics.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_real_logs_folder_to_parquet_read_by_duckdb_and_polars(tmp_path):
    if not REAL_LOGS.is_dir():
        pytest.skip(f"{SKIP_REASON}: sglang_real_logs not present")
    out = tmp_path / "t.parquet"
    proc = run_cli("timeline", str(REAL_LOGS), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert pq.ParquetFile(out).metadata.row_group(0).column(0).compression == "ZSTD"
    df = pl.read_parquet(out)
    # every real log yields events, and nothing is nameless
    assert df.height >= 100
    assert df["file"].null_count() == 0 and df["line"].null_count() == 0
    assert (df["line"] >= 1).all()
    files = {p.name for p in REAL_LOGS.glob("*.log")}
    assert set(df["file"].unique()) == files
    n, bad = duckdb.sql(f"select count(*), count(*) filter (where line is null or file is null) from '{out}'").fetchall()[0]
    assert (n, bad) == (df.height, 0)
    # a row's file:line points at the very line it came from
    row = df.filter(pl.col("kind") == "weight_load_end").row(0, named=True)
    line = (REAL_LOGS / row["file"]).read_text(errors="replace").splitlines()[row["line"] - 1]
    assert "Load weight end" in line


def test_naive_stamps_read_as_utc_and_said_so(tmp_path):
    (tmp_path / "rank.log").write_text(LOG)
    tl = build_timeline([tmp_path])
    row = tl.of_kind("server_args").row(0, named=True)
    assert row["ts"] == datetime(2025, 11, 20, 9, 14, 2, tzinfo=UTC)
    assert row["ts_basis"] == "local-assumed"
    assert any("--tz" in n for n in tl.facts.notes)


def test_tz_option_converts_host_local_stamps(tmp_path):
    (tmp_path / "rank.log").write_text(LOG)
    tl = build_timeline([tmp_path], tz="Asia/Shanghai")
    row = tl.of_kind("server_args").row(0, named=True)
    assert row["ts"] == datetime(2025, 11, 20, 1, 14, 2, tzinfo=UTC)
    assert row["ts_local"] == datetime(2025, 11, 20, 9, 14, 2)


def test_manifest_offset_and_capture_time(tmp_path):
    b = tmp_path / "bundle"
    (b / "logs").mkdir(parents=True)
    (b / "host").mkdir()
    (b / "logs" / "rank.log").write_text(LOG)
    (b / "host" / "free.txt").write_text(
        "               total        used        free      shared     buffers       cache   available\n"
        "Mem:    482163445760 341906771968 139762585600   21004288          0    494088192 140210331648\n"
        "Swap:              0           0           0\n")
    manifest = {"schema_version": 1, "host": "gpu-9", "utc_offset_s": 8 * 3600, "artifacts": [
        {"path": "logs/rank.log", "format": "sglang"},
        {"path": "host/free.txt", "format": "free", "argv": ["free", "-b", "-w"], "snapshot": 0,
         "started": "2025-11-20T02:00:00Z"}]}
    (b / "manifest.json").write_text(json.dumps(manifest))
    tl = build_timeline([b])
    sa = tl.of_kind("server_args").row(0, named=True)
    assert sa["ts"] == datetime(2025, 11, 20, 1, 14, 2, tzinfo=UTC) and sa["ts_basis"] == "local+offset"
    mem = tl.of_kind("host_memory").row(0, named=True)
    assert mem["ts"] == datetime(2025, 11, 20, 2, 0, tzinfo=UTC) and mem["ts_basis"] == "capture"
    assert mem["snapshot"] == 0 and mem["host"] == "gpu-9"
    assert mem["total_bytes"] == 482163445760


def test_unrecognised_lines_are_counted_not_lost(tmp_path):
    (tmp_path / "rank.log").write_text(LOG + "[2025-11-20 09:14:12 TP0] a message no release ever printed\n")
    tl = build_timeline([tmp_path])
    (cov,) = tl.coverage
    assert (cov["lines"], cov["recognized"], cov["unrecognized"]) == (4, 3, 1)
    assert tl.unrecognized_examples["rank.log"] == [(4, "[2025-11-20 09:14:12 TP0] a message no release ever printed")]


def test_stdout_output_and_unknown_zone(tmp_path):
    (tmp_path / "rank.log").write_text(LOG)
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "timeline", str(tmp_path), "-o", "-", "-q"],
                          capture_output=True)
    assert proc.returncode == 0 and proc.stdout[:4] == b"PAR1"
    bad = run_cli("timeline", str(tmp_path), "-o", str(tmp_path / "x.parquet"), "--tz", "Mars/Olympus")
    # a bad option value is a usage error (issue 22), with the valid form
    assert bad.returncode == 2 and "not a time zone" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_raw_input_handed_to_report_leaks_no_secret(tmp_path):
    """Redaction is not only collect's job: a raw log given straight to report is masked too."""
    key, hf = "launch-" + "k3y-9931", "hf_" + "Zz8Yy7Xx6Ww5Vv4Uu3Tt2Ss1Rr0Qq9Pp"
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "rank.log").write_text(
        f"[2025-11-20 09:14:02] server_args=ServerArgs(model_path='/m', api_key='{key}', tp_size=2)\n"
        f"[2025-11-20 09:14:03 TP0] export HF_TOKEN={hf} and --api-key {key}\n"
        "[2025-11-20 09:14:11 TP0] Load weight begin. avail mem=94.61 GB\n")
    (tmp_path / "in" / "launch.sh").write_text(f"python3 -m sglang.launch_server --model-path /m --api-key {key} --tp 2\n")
    out = tmp_path / "out"
    proc = run_cli("report", str(tmp_path / "in"), "-o", str(out), "-q")
    assert proc.returncode == 0, proc.stderr
    written = {p.name: p.read_bytes() for p in out.iterdir()}
    assert set(written) == {"report.html", "summary.md", "findings.json", "findings.sarif", "timeline.parquet"}
    text_cols = pl.read_parquet(out / "timeline.parquet").select("text", "attrs").to_dicts()
    for secret in (key, hf):
        for name, data in written.items():
            assert secret.encode() not in data, name
        assert not any(secret in (r["text"] or "") + (r["attrs"] or "") for r in text_cols)
    assert any("credential" in n for n in json.loads(pq.read_schema(out / "timeline.parquet")
                                                     .metadata[b"forensics.facts"])["notes"])


def test_capture_time_dates_snapshots_only(tmp_path):
    b = tmp_path / "bundle"
    (b / "added").mkdir(parents=True)
    (b / "added" / "notes.txt").write_text(
        "$ free -g\n               total        used        free      shared  buff/cache   available\n"
        "Mem:             449          40         396           0          13         408\n")
    (b / "manifest.json").write_text(json.dumps({"schema_version": 1, "artifacts": [
        {"path": "added/notes.txt", "format": None, "started": "2025-11-20T09:41:01Z"}]}))
    tl = build_timeline([b])
    row = tl.of_kind("host_memory").row(0, named=True)
    # an operator's paste is not from the moment of collection
    assert row["ts"] is None and row["ts_basis"] == "none"

"""`forensics fleet` on generated bundles of mixed scenarios (tests/fleet_bundles.py).

One fleet run over ~20 bundles (plus a corrupt one, an unsafe one and a tagged pair) is shared by the
tests of this file; the 200-bundle run is the ``slow`` test at the end (FORENSICS_SLOW=1).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
import zstandard

from forensics import rules
from forensics.analysis import analyse
from forensics.fleet import FleetUsageError, expand_inputs, identify, run_fleet
from forensics.fleet.dataset import FINDINGS_SCHEMA, INCIDENTS_SCHEMA
from forensics.fleet.index import build_view

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet_bundles import BAD_HOST, make_bundles, scenario_inputs, write_bundle  # noqa: E402
from shared_data import SHARED, SKIP_REASON

ROOT = Path(__file__).resolve().parents[1]
TAG = "INC-4711"
EVIL_HOST = "gpu-<img src=x onerror=alert(1)>"


def _month_start() -> datetime:
    today = datetime.now(UTC)
    return datetime(today.year, today.month, 1, tzinfo=UTC)


def _category(rule_id: str | None) -> str | None:
    return rules.get(rule_id).category if rule_id else None


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "forensics.cli", "fleet", *args], capture_output=True, text=True,
                          env=env, timeout=600, cwd=ROOT)


def _corrupt(path: Path) -> None:
    path.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00" + b"not deflate data " * 64)


def _unsafe(path: Path) -> None:
    with tarfile.open(path, "w:gz") as tar:
        data = b"root:x:0:0::/root:/bin/bash\n"
        info = tarfile.TarInfo("../../etc/passwd-evil")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """The bundles, what each should give, and one CLI run over the folder with two workers."""
    base = tmp_path_factory.mktemp("fleet")
    bundles_dir = base / "bundles"
    made = make_bundles(bundles_dir, 20, seed=7, start=_month_start(), days=27)
    # a host name that must be escaped on the page
    evil = bundles_dir / "evil-host.tar.gz"
    write_bundle(evil, scenario_inputs("healthy_start"), EVIL_HOST, _month_start() + timedelta(days=2))
    # two hosts of one incident, joined by the manifest's tag
    pair = [bundles_dir / "tagged-a.tar.gz", bundles_dir / "tagged-b.tar.gz"]
    write_bundle(pair[0], scenario_inputs("seed_phase1_hicache_per_rank"), "gpu-node-31",
                 _month_start() + timedelta(days=3), {"tag": TAG})
    write_bundle(pair[1], scenario_inputs("healthy_start"), "gpu-node-32",
                 _month_start() + timedelta(days=3, minutes=5), {"tag": TAG})
    _corrupt(bundles_dir / "corrupt.tar.gz")
    _unsafe(bundles_dir / "unsafe.tar.gz")
    out = base / "out"
    proc = _cli(str(bundles_dir), "-o", str(out), "--workers", "2")
    return {"base": base, "dir": bundles_dir, "made": made, "evil": evil, "pair": pair, "out": out, "proc": proc}


def _incidents(out: Path) -> pl.DataFrame:
    return pl.read_parquet(out / "incidents.parquet")


def _findings(out: Path) -> pl.DataFrame:
    return pl.scan_parquet(str(out / "findings" / "**" / "*.parquet"), hive_partitioning=True).collect()


def _row_of(inc: pl.DataFrame, path: Path) -> dict:
    rows = [r for r in inc.iter_rows(named=True) if str(path.absolute()) in r["inputs"]]
    assert len(rows) == 1, (path, rows)
    return rows[0]


def test_counts_by_root_cause_category_match_the_scenarios(fleet) -> None:
    inc = _incidents(fleet["out"])
    got = Counter(_row_of(inc, b.path)["root_cause_category"] for b in fleet["made"])
    want = Counter(_category(b.root_cause) for b in fleet["made"])
    assert got == want
    assert len(want) >= 6  # a real mix, healthy (None) included
    assert got[None] >= 1


def test_each_incident_is_analysed_by_reports_function(fleet) -> None:
    out, inc, fnd = fleet["out"], _incidents(fleet["out"]), _findings(fleet["out"])
    for b in fleet["made"][:10]:
        row = _row_of(inc, b.path)
        folder = out / row["report"]
        doc = json.loads((folder / "findings.json").read_text(encoding="utf-8"))
        assert (folder / "report.html").is_file() and (folder / "summary.md").is_file()
        _tl, direct = analyse([b.path], None, quiet=True)
        assert doc["root_cause"] == direct["root_cause"] == row["root_cause_rule"]
        assert [f["rule_id"] for f in doc["findings"]] == [f["rule_id"] for f in direct["findings"]]
        mine = fnd.filter(pl.col("incident_id") == row["incident_id"])
        assert mine.height == len(doc["findings"]) == row["n_findings"]
        assert mine.get_column("is_root_cause").sum() == (1 if doc["root_cause"] else 0)
        assert set(mine.get_column("input_sha256")) <= set(row["input_sha256"])
        assert row["hosts"] == [b.host] and row["date"] is not None


def test_flags_and_evidence_are_in_the_rows(fleet) -> None:
    fnd = _findings(fleet["out"])
    hicache = fnd.filter(pl.col("rule_id") == "SGL-HOST-001").row(0, named=True)
    flags = {c["flag"]: c for c in hicache["flags_corrected"]}
    assert flags["--hicache-size"]["old"] == "300" and 40 <= float(flags["--hicache-size"]["new"]) <= 52
    assert hicache["evidence_file"] and hicache["evidence_line"] >= 1
    assert hicache["engine"] == "sglang"
    vllm = fnd.filter(pl.col("rule_id") == "VLLM-GPU-001")
    assert vllm.height and set(vllm.get_column("engine")) == {"vllm"}


def test_bad_inputs_are_listed_with_their_error_and_the_rest_analysed(fleet) -> None:
    proc, inc = fleet["proc"], _incidents(fleet["out"])
    assert proc.returncode == 3, proc.stderr
    failed = {Path(r["inputs"][0]).name: r for r in inc.iter_rows(named=True) if r["error"]}
    assert set(failed) == {"corrupt.tar.gz", "unsafe.tar.gz"}
    assert "corrupt.tar.gz" in failed["corrupt.tar.gz"]["error"]
    assert re.search(r"unsafe|outside|\.\.", failed["unsafe.tar.gz"]["error"])
    assert all(r["report"] is None and r["n_findings"] is None for r in failed.values())
    assert inc.filter(pl.col("error").is_null()).height == len(fleet["made"]) + 2  # + evil host + tagged pair
    assert "Traceback" not in proc.stderr


def test_tagged_bundles_are_one_incident(fleet) -> None:
    inc = _incidents(fleet["out"])
    tagged = inc.filter(pl.col("tag") == TAG)
    assert tagged.height == 1
    row = tagged.row(0, named=True)
    assert sorted(row["inputs"]) == sorted(str(p.absolute()) for p in fleet["pair"])
    assert len(set(row["input_sha256"])) == 2
    _tl, direct = analyse(fleet["pair"], None, quiet=True)
    assert row["root_cause_rule"] == direct["root_cause"]


def test_rerun_adds_nothing_and_new_inputs_append(fleet, tmp_path) -> None:
    out = tmp_path / "out"
    shutil.copytree(fleet["out"], out)
    before = _incidents(out)
    again = run_fleet([str(fleet["dir"] / "*.tar.gz")], out, workers=1)
    assert again.analysed == [] and again.skipped == before.height
    assert _incidents(out).equals(before)
    extra = tmp_path / "new" / "late.tar.gz"
    extra.parent.mkdir()
    write_bundle(extra, scenario_inputs("nccl_startup_timeout"), "gpu-node-40", _month_start() + timedelta(days=9))
    more = run_fleet([str(fleet["dir"]), str(extra)], out, workers=1)
    after = _incidents(out)
    assert len(more.analysed) == 1 and after.height == before.height + 1
    assert _row_of(after, extra)["root_cause_category"] == "nccl_timeout"


def _readme_query(out: Path) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"Top recurring root causes this month.*?```sql\n(.*?)```", text, re.S)
    assert m, "README: the DuckDB query for top recurring root causes this month"
    return m.group(1).replace("fleet-out/", f"{out.as_posix()}/").rstrip().rstrip(";")


def test_readme_query_top_recurring_root_causes_this_month(fleet) -> None:
    duckdb = pytest.importorskip("duckdb")
    rows = duckdb.sql(_readme_query(fleet["out"])).fetchall()
    inc = _incidents(fleet["out"]).filter(pl.col("root_cause_rule").is_not_null())
    want = Counter(inc.get_column("root_cause_rule"))  # every generated bundle is dated this month
    assert [(r[0], r[2]) for r in rows] == sorted(want.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    assert rows[0][0] == "SGL-HOST-001"  # the seed's cause, in the mix twice plus the tagged incident


def test_documented_queries_and_schema(fleet) -> None:
    duckdb = pytest.importorskip("duckdb")
    doc = (ROOT / "docs" / "fleet.md").read_text(encoding="utf-8")
    tables = re.findall(r"\| column \| type \| meaning \|\n\|[-|]+\|\n((?:\|.*\n)+)", doc)
    assert len(tables) == 2
    documented = [[re.match(r"\| `([^`]+)`", line).group(1) for line in t.splitlines()] for t in tables]
    assert documented[0] == FINDINGS_SCHEMA.names + ["date"]
    assert documented[1] == INCIDENTS_SCHEMA.names
    out = fleet["out"].as_posix()
    for q in re.findall(r"```sql\n(.*?)```", doc, re.S):
        duckdb.sql(q.replace("DIR/", f"{out}/").rstrip().rstrip(";")).fetchall()
    hw = duckdb.sql(re.findall(r"```sql\n(.*?)```", doc, re.S)[1].replace("DIR/", f"{out}/")).fetchall()
    assert hw and hw[0][1] == [BAD_HOST] and hw[0][2] >= 2


def test_index_page(fleet) -> None:
    out = fleet["out"]
    html = (out / "index.html").read_text(encoding="utf-8")
    assert not re.search(r"<(?:link|img|iframe)\b|src=\"https?:", html)  # self-contained
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    for row in _incidents(out).filter(pl.col("error").is_null()).iter_rows(named=True):
        href = f'href="incidents/{row["incident_id"]}/report.html"'
        assert href in html and (out / "incidents" / row["incident_id"] / "report.html").is_file()
    assert "corrupt.tar.gz" in html and "Inputs that could not be analysed" in html
    view = build_view(_incidents(out).to_dicts(), _findings(out).to_dicts())
    repeat = [g for g in view.gpus if len(g.incidents) > 1]
    assert repeat and repeat[0].hosts == [BAD_HOST] and repeat[0].gpu.startswith("GPU-")
    assert view.recurring[0].rule_id == "SGL-HOST-001"
    assert view.flags and any(f.flag == "--hicache-size" for f in view.flags)
    assert any("faulted in more than one incident" in line for line in view.headline)


def test_ray_local_mode_gives_the_same_dataset(fleet, tmp_path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "ray"
    res = run_fleet([str(fleet["dir"])], out, workers=2, ray="local")
    assert {Path(r["inputs"][0]).name for r in res.failed} == {"corrupt.tar.gz", "unsafe.tar.gz"}
    assert _incidents(out).equals(_incidents(fleet["out"]))
    keys = ["incident_id", "rule_id", "evidence_file", "evidence_line"]
    assert _findings(out).sort(keys).equals(_findings(fleet["out"]).sort(keys))


# ---------------------------------------------------------------------------------------------
# Inputs: expansion, identity, usage errors
# ---------------------------------------------------------------------------------------------


def test_expand_inputs(tmp_path) -> None:
    bundles = tmp_path / "bundles"
    made = make_bundles(bundles, 2, seed=1)
    unpacked = bundles / "unpacked"
    (unpacked / "logs").mkdir(parents=True)
    (unpacked / "manifest.json").write_text("{}")
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    (evidence / "sglang.log").write_text("x\n")
    got = expand_inputs([str(bundles), str(evidence), str(bundles / "*.tar.gz")])
    assert got == [made[0].path, made[1].path, unpacked, evidence]  # folder of bundles; duplicates dropped
    with pytest.raises(FleetUsageError):
        expand_inputs([str(tmp_path / "nothing-*.tgz")])
    with pytest.raises(FleetUsageError):
        expand_inputs([str(tmp_path / "missing.tgz")])


def _tar_bytes(manifest: dict) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("top/logs/a.log", b"x" * 300_000), ("top/manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("suffix", [".tar.gz", ".tar.zst", ".zip", ".tar"])
def test_identify_hashes_every_byte_and_reads_the_tag(tmp_path, suffix) -> None:
    import gzip
    import hashlib

    raw = _tar_bytes({"host": "h", "tag": "T-1"})
    p = tmp_path / f"b{suffix}"
    if suffix == ".tar.gz":
        p.write_bytes(gzip.compress(raw))
    elif suffix == ".tar.zst":
        p.write_bytes(zstandard.ZstdCompressor().compress(raw))
    elif suffix == ".zip":
        with zipfile.ZipFile(p, "w") as z:
            z.writestr("top/manifest.json", json.dumps({"tag": "T-1"}))
    else:
        p.write_bytes(raw)
    ident = identify(str(p))
    assert ident["sha256"] == hashlib.sha256(p.read_bytes()).hexdigest()
    assert ident["tag"] == "T-1"


def test_cli_usage_errors(tmp_path) -> None:
    proc = _cli(str(tmp_path / "no-such-*.tar.gz"), "-o", str(tmp_path / "o"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no file matches" in proc.stderr
    proc = _cli(str(tmp_path), "-o", str(tmp_path / "o"), "--since", "last week")
    assert proc.returncode == 2 and "--since" in proc.stderr


def test_same_bytes_twice_is_one_incident_and_a_busy_dir_is_refused(tmp_path) -> None:
    from forensics import fleet

    made = make_bundles(tmp_path / "b", 1, seed=3)
    shutil.copy(made[0].path, tmp_path / "b" / "copy-of-it.tar.gz")
    res = run_fleet([str(tmp_path / "b")], tmp_path / "out", workers=1, index=False)
    assert len(res.analysed) == 1
    held = fleet._lock(tmp_path / "out")
    try:
        with pytest.raises(FleetUsageError, match="another"):
            run_fleet([str(tmp_path / "b")], tmp_path / "out", workers=1, index=False)
    finally:
        held.close()


def test_since_leaves_out_older_inputs(tmp_path) -> None:
    made = make_bundles(tmp_path / "b", 2, seed=2)
    old = made[0].path
    os.utime(old, (0, 0))
    res = run_fleet([str(tmp_path / "b")], tmp_path / "out", workers=1, since=date(2000, 1, 1), index=False)
    assert [r["inputs"] for r in res.analysed] == [[str(made[1].path)]]


def test_pool_is_renewed_in_batches_and_gives_the_same_rows(tmp_path, monkeypatch) -> None:
    """Memory per worker stays flat because pools are replaced every TASKS_PER_WORKER incidents per
    worker; the rows do not depend on which pool ran them."""
    from forensics import fleet

    made = make_bundles(tmp_path / "b", 5, seed=5)
    one = run_fleet([str(tmp_path / "b")], tmp_path / "one", workers=1, index=False)
    monkeypatch.setattr(fleet, "TASKS_PER_WORKER", 1)
    pools = []
    real_pool = fleet._pool
    monkeypatch.setattr(fleet, "_pool", lambda w: pools.append(w) or real_pool(w))
    two = run_fleet([str(tmp_path / "b")], tmp_path / "two", workers=2, index=False)
    assert len(pools) == 3 and len(two.analysed) == len(made)
    assert _incidents(tmp_path / "two").equals(_incidents(tmp_path / "one")) and not one.failed


REAL_CORPUS = SHARED / "incidents"


@pytest.mark.skipif(not REAL_CORPUS.is_dir(), reason=f"{SKIP_REASON}: incidents is not here")
def test_real_incident_corpus(tmp_path) -> None:
    """Every real case folder (a glob of evidence folders) is one incident, analysed as `report` would."""
    cases = sorted(p for p in REAL_CORPUS.iterdir() if p.is_dir() and not p.name.startswith("."))
    res = run_fleet([str(REAL_CORPUS / "*") + "/"], tmp_path / "out", workers=1)
    assert not res.failed, [r["error"] for r in res.failed]
    inc = _incidents(tmp_path / "out")
    assert inc.height == len(cases)
    for case in cases[:: max(1, len(cases) // 8)]:
        _tl, direct = analyse([case], None, quiet=True)
        assert _row_of(inc, case)["root_cause_rule"] == direct["root_cause"], case.name
    html = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    assert html.count('href="incidents/') == len(cases)


# ---------------------------------------------------------------------------------------------
# The scale: 200 bundles (FORENSICS_SLOW=1)
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_hundred_bundles(tmp_path) -> None:
    made = make_bundles(tmp_path / "b", 200, seed=17)
    _corrupt(tmp_path / "b" / "corrupt.tar.gz")
    out = tmp_path / "out"
    proc = _cli(str(tmp_path / "b"), "-o", str(out))
    assert proc.returncode == 3, proc.stderr
    inc = _incidents(out)
    assert inc.height == 201 and inc.filter(pl.col("error").is_not_null()).height == 1
    ok = inc.filter(pl.col("error").is_null())
    assert Counter(ok.get_column("root_cause_category")) == Counter(_category(b.root_cause) for b in made)
    proc = _cli(str(tmp_path / "b"), "-o", str(out))
    assert proc.returncode == 0 and _incidents(out).equals(inc)


def test_plotly_js_is_written_once_for_the_whole_dataset(fleet) -> None:
    """Twenty incidents' pages load the dataset's one plotly.js instead of carrying 4.6 MB each."""
    from forensics.report import PLOTLY_JS

    out = fleet["out"]
    shared = out / PLOTLY_JS
    assert shared.is_file() and shared.stat().st_size > 1_000_000
    pages = sorted(out.glob("incidents/*/report.html"))
    assert len(pages) >= 20
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert f'<script src="../../{PLOTLY_JS}"></script>' in html
        assert page.stat().st_size < shared.stat().st_size / 10, page
    assert f'<script src="{PLOTLY_JS}"></script>' in (out / "index.html").read_text(encoding="utf-8")
    assert [p.name for p in out.rglob("*.js")] == [PLOTLY_JS]


def test_a_single_report_stays_one_self_contained_file(tmp_path) -> None:
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "report", str(ROOT / "fixtures" / "seed_bundle"),
                           "-o", str(tmp_path), "-q", "--format", "html"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "<script src=" not in html and "Plotly" in html


def _rows_at(moments: list[datetime]) -> list[dict]:
    return [{"incident_id": f"i{k}", "date": t.date(), "collected_at": t, "root_cause_rule": "SGL-HOST-001",
             "root_cause_category": "host_memory", "hosts": ["h"], "inputs": []} for k, t in enumerate(moments)]


@pytest.mark.parametrize("spread, most_axis, word", [
    (timedelta(hours=3), timedelta(hours=4), "10 minutes"),      # an afternoon: an axis of hours, not months
    (timedelta(hours=30), timedelta(days=3), "hour"),
    (timedelta(days=27), timedelta(days=40), "day"),
    (timedelta(days=400), timedelta(days=500), "week"),
])
def test_the_time_axis_spans_the_incidents_real_span(spread, most_axis, word) -> None:
    t0 = datetime(2026, 11, 20, 13, 7)
    moments = [t0 + spread * k / 5 for k in range(6)]
    view = build_view(_rows_at(moments), [])
    lo, hi = (datetime.fromisoformat(x) for x in view.figure["layout"]["xaxis"]["range"])
    assert lo <= min(moments) and hi >= max(moments)
    assert hi - lo <= most_axis, (hi - lo, word)
    assert view.figure_bin == word and word in view.figure["layout"]["xaxis"]["title"]["text"]
    assert view.figure["layout"]["yaxis"]["title"]["text"] == f"incidents per {word}"
    assert sum(sum(tr["y"]) for tr in view.figure["data"]) == len(moments)


def test_one_incident_is_one_bar_on_a_short_axis() -> None:
    view = build_view(_rows_at([datetime(2026, 11, 20, 15, 0)]), [])
    lo, hi = (datetime.fromisoformat(x) for x in view.figure["layout"]["xaxis"]["range"])
    assert timedelta(hours=1) <= hi - lo <= timedelta(hours=3)

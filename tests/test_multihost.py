"""Incidents that span hosts: each input's host, per-host facts and budgets, causes across hosts, the report.

The scenarios themselves (fixtures/scenarios/multihost_*) run in test_scenarios.py; here: that the same
evidence read folder by folder or bundle by bundle gives the same findings, how hosts are named, the
tightest host's correction, the clock skew, the report's host sections and ``collect --tag``.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from shared_data import SHARED, SKIP_REASON
from typer.testing import CliRunner

from forensics.cli import EXIT_USAGE, Fail, app
from forensics.detectors import run_all
from forensics.report.findings import to_document
from forensics.timeline import build_timeline
from forensics.timeline.hosts import group_inputs, parse_host_specs
from parsers.hostname import stated_host

SCENARIOS = Path(__file__).resolve().parents[1] / "fixtures" / "scenarios"
TWO = SCENARIOS / "multihost_hicache_small_node"
FOUR = SCENARIOS / "multihost_four_nodes_hicache"


def _analyse(paths, **kw):
    tl = build_timeline(paths, **kw)
    findings, root = run_all(tl)
    return tl, findings, root


def _digest(findings) -> list[tuple]:
    """What a finding says, without the words that may name an input path."""
    return sorted((f.rule_id, tuple(f.hosts), f.severity, f.confidence, f.consequence_of, tuple(f.ranks), tuple(f.gpus),
                   tuple((c.flag, c.old, c.new) for c in f.remediation.flags),
                   tuple(sorted((e.file, e.line, e.ts) for e in f.evidence))) for f in findings)


def _bundle(folder: Path, host: str, out: Path, tag: str | None = None) -> Path:
    """A collect-style bundle of one host's folder: one top folder, the manifest naming the host."""
    manifest = {"schema_version": 1, "host": host, "gaps": [], "artifacts": [], **({"tag": tag} if tag else {})}
    top = f"forensics-{host}-20251120T163000Z"
    with tarfile.open(out, "w:gz") as tar:
        data = json.dumps(manifest).encode()
        info = tarfile.TarInfo(f"{top}/manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                tar.add(p, arcname=f"{top}/{p.relative_to(folder).as_posix()}")
    return out


# ---------------------------------------------------------------------------------------------
# which host an input is


@pytest.mark.parametrize("text, host", [
    ("root@gpu-b:~# nvidia-smi\n", "gpu-b"),
    ("[admin@node-12 logs]$ tail sglang.log\n", "node-12"),
    ("Dec  3 13:44:03 dgx-07 kernel: NVRM: Xid (PCI:0000:9b:00): 79, pid=1\n", "dgx-07"),
    ("2025-12-03T13:44:03+0000 dgx-07 kernel: NVRM: Xid (PCI:0000:9b:00): 79, pid=1\n", "dgx-07"),
    ("dgx-08:3108:3108 [0] NCCL INFO Bootstrap : Using eth0\n", "dgx-08"),
    ("Name:         sglang-0\nNode:         a100-pool-3/10.0.4.7\n", "a100-pool-3"),
    ("$ hostname\nh100-n2\n", "h100-n2"),
])
def test_the_host_a_text_names(text, host):
    assert stated_host(text) == host


def test_an_address_or_a_placeholder_is_not_a_host():
    # ssh into an address names the machine reached; "user@host" in a how-to names none
    assert stated_host("[bash] ssh root@10.1.230.174 'free -g'\n") is None
    assert stated_host("user@localhost:~$ ls\n") is None
    assert stated_host("[2025-11-20 17:14:02 TP0] Load weight begin.\n") is None


def test_host_specs_are_checked():
    assert parse_host_specs(["a=x/", "b=y"]) == {"x": "a", "y": "b"}
    for bad in ("x", "=x", "a="):
        with pytest.raises(ValueError):
            parse_host_specs([bad])


def test_how_each_input_is_named(tmp_path):
    # folders whose content names no host are named by the folder; a loose file naming none joins the
    # one host the others name
    for name in ("left", "right"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "sglang.log").write_text("[2025-11-20 16:10:02 TP0] Load weight begin. avail mem=78.50 GB\n")
    found = group_inputs([tmp_path / "left", tmp_path / "right"], {})
    assert [(h.host, h.how) for h in found] == [("left", "folder"), ("right", "folder")]
    note = tmp_path / "note.txt"
    note.write_text("restarted at 16:00\n")
    found = group_inputs([TWO / "node0", note], {})
    assert [(h.host, h.how) for h in found] == [("gpu-a", "content"), ("gpu-a", "joined")]
    found = group_inputs([TWO / "node0", TWO / "node1"], {str(TWO / "node1"): "b-override"})
    assert [(h.host, h.how) for h in found] == [("gpu-a", "content"), ("b-override", "--host")]


def test_one_hosts_inputs_stay_one_timeline():
    # several inputs of one host (the log and the transcripts of the seed) are read as before: no host split
    seed = Path(__file__).resolve().parents[1] / "fixtures" / "seed_bundle"
    tl = build_timeline([seed / "logs" / "sglang.log", seed / "added" / "launch.sh"])
    assert tl.facts.hosts == {}
    tl = build_timeline([TWO / "node0"])
    assert tl.facts.hosts == {} and tl.facts.host == "gpu-a"


# ---------------------------------------------------------------------------------------------
# the same evidence, folder by folder or bundle by bundle


def test_folders_and_bundles_give_the_same_findings(tmp_path):
    tl_f, findings_f, root_f = _analyse([TWO / "node0", TWO / "node1"])
    bundles = [_bundle(TWO / "node0", "gpu-a", tmp_path / "a.tar.gz", "INC-1"),
               _bundle(TWO / "node1", "gpu-b", tmp_path / "b.tar.gz", "INC-1")]
    tl_b, findings_b, root_b = _analyse(bundles)
    assert {h: hf.how for h, hf in tl_f.facts.hosts.items()} == {"gpu-a": "content", "gpu-b": "content"}
    assert {h: hf.how for h, hf in tl_b.facts.hosts.items()} == {"gpu-a": "manifest", "gpu-b": "manifest"}
    assert {hf.tag for hf in tl_b.facts.hosts.values()} == {"INC-1"}
    assert root_f == root_b == "SGL-HOST-001"
    assert _digest(findings_f) == _digest(findings_b)
    doc_f, doc_b = to_document(findings_f, root_f, tl_f), to_document(findings_b, root_b, tl_b)
    assert doc_f["input"]["host"] == doc_b["input"]["host"] == "gpu-b"
    # every row names its host, and its file under its host
    ev = tl_b.events
    assert ev.get_column("host").null_count() == 0
    assert all(f.split("/", 1)[0] == h for f, h in ev.select("file", "host").iter_rows())


def test_host_overrides_name_unnamed_folders(tmp_path):
    # the same logs with nothing in them naming a host: --host names them, and the result is unchanged
    for src, dst in (("node0", "x"), ("node1", "y")):
        shutil.copytree(TWO / src, tmp_path / dst)
    (tmp_path / "x" / "session.txt").write_text((TWO / "node0" / "session.txt").read_text()
                                               .replace("root@gpu-a:~# ", "$ ").replace("$ hostname\ngpu-a\n", ""))
    (tmp_path / "y" / "kern.log").write_text("".join(
        "[Thu Nov 20 16:17:31 2025] " + ln.split(" kernel: ", 1)[1] + "\n"
        for ln in (TWO / "node1" / "kern.log").read_text().splitlines()))
    tl, findings, root = _analyse([tmp_path / "x", tmp_path / "y"],
                                  hosts={str(tmp_path / "x"): "gpu-a", str(tmp_path / "y"): "gpu-b"})
    assert {h: hf.how for h, hf in tl.facts.hosts.items()} == {"gpu-a": "--host", "gpu-b": "--host"}
    assert root == "SGL-HOST-001" and tl.facts.host == "gpu-b"
    # without --host the folders' own names stand in
    tl2, _f, _r = _analyse([tmp_path / "x", tmp_path / "y"])
    assert set(tl2.facts.hosts) == {"x", "y"}


# ---------------------------------------------------------------------------------------------
# per-host budgets, clocks, topology


def test_the_corrected_size_fits_the_tightest_host(tmp_path):
    # both nodes too small, node 1 smaller: both findings propose node 1's size, and say why
    shutil.copytree(TWO, tmp_path / "s")
    session = tmp_path / "s" / "node0" / "session.txt"
    session.write_text(session.read_text().replace(
        "Mem:            2015          38        1968           2          9        1971",
        "Mem:             880          38         833           2          9         836"))
    _tl, findings, root = _analyse([tmp_path / "s" / "node0", tmp_path / "s" / "node1"])
    over = [f for f in findings if f.rule_id == "SGL-HOST-001"]
    assert sorted(f.hosts[0] for f in over) == ["gpu-a", "gpu-b"]
    news = {f.hosts[0]: [c.new for c in f.remediation.flags if c.flag == "--hicache-size"][0] for f in over}
    assert news["gpu-a"] == news["gpu-b"]
    gpu_a = next(f for f in over if f.hosts == ["gpu-a"])
    assert "tightest host (gpu-b)" in gpu_a.remediation.flags[0].why
    assert gpu_a.figures["tightest_host"] == "gpu-b"


def test_clock_skew_and_topology_per_host():
    tl, _findings, _root = _analyse([FOUR / f"h100-n{i}" for i in range(4)])
    hosts = tl.facts.hosts
    # node 2 writes UTC+8 (its manifest says so): no skew once converted; node 3 runs 4 s fast
    assert hosts["h100-n2"].utc_offset_s == 8 * 3600 and abs(hosts["h100-n2"].clock_skew_s) < 0.5
    assert hosts["h100-n3"].clock_skew_s == pytest.approx(4.0, abs=0.5)
    assert "the same collective timing out" in hosts["h100-n3"].clock_skew_from
    assert any("h100-n3's clock reads 4.0 s ahead" in n for n in tl.facts.notes)
    topo = hosts["h100-n2"].topology
    assert (topo["nnodes"], topo["node_rank"], topo["ranks_per_node"]) == (4, 2, 8)
    assert topo["ranks_seen"] == list(range(16, 24))
    assert not tl.facts.gaps or not any("have no log here" in g for g in tl.facts.gaps)


# ---------------------------------------------------------------------------------------------
# the report and the command line


def test_report_names_hosts_everywhere(tmp_path):
    out = tmp_path / "r"
    res = CliRunner().invoke(app, ["report", str(TWO / "node0"), str(TWO / "node1"), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "findings.json").read_text())
    assert doc["schema_version"] == 1 and doc["input"]["host"] == "gpu-b"
    assert set(doc["input"]["hosts"]) == {"gpu-a", "gpu-b"}
    assert {tuple(f["hosts"]) for f in doc["findings"]} >= {("gpu-a",), ("gpu-b",)}
    md = (out / "summary.md").read_text()
    assert "host `gpu-b` (of 2: gpu-a, gpu-b)" in md
    assert "on `gpu-a` (follows from `SGL-HOST-001` on `gpu-b`)" in md
    html = (out / "report.html").read_text()
    assert 'id="host-section-gpu-a"' in html and 'id="host-section-gpu-b"' in html
    # the start-up table holds both nodes' ranks in one group
    assert 'data-rank="gpu-a TP0"' in html and 'data-rank="gpu-b TP15"' in html
    assert "the root cause&#39;s host, of 2 hosts" in html or "the root cause's host, of 2 hosts" in html


def test_report_host_option(tmp_path):
    out = tmp_path / "r"
    res = CliRunner().invoke(app, ["report", str(TWO / "node0"), "--host", f"small={TWO / 'node1'}",
                                   "-o", str(out), "--format", "json", "-q"])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "findings.json").read_text())
    assert doc["input"]["host"] == "small" and doc["input"]["hosts"]["small"]["how"] == "--host"
    res = CliRunner().invoke(app, ["report", str(TWO / "node0"), "--host", "nonsense", "-o", str(out)])
    assert isinstance(res.exception, Fail) and res.exception.code == EXIT_USAGE  # main() prints it, exits 2


def test_bundles_with_different_tags_are_said(tmp_path):
    bundles = [_bundle(TWO / "node0", "gpu-a", tmp_path / "a.tar.gz", "INC-1"),
               _bundle(TWO / "node1", "gpu-b", tmp_path / "b.tar.gz", "INC-2")]
    tl = build_timeline(bundles)
    assert any("different incident tags" in n and "INC-1: gpu-a" in n for n in tl.facts.notes)


def test_collect_tag_goes_into_name_and_manifest(tmp_path, monkeypatch):
    from forensics import collect as collect_mod

    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["collect", "--tag", "../evil"])
    assert isinstance(res.exception, Fail) and res.exception.code == EXIT_USAGE and "--tag" in str(res.exception)
    seen = {}

    def fake_collect(opts):
        seen["tag"] = opts.tag
        return Path("-")

    monkeypatch.setattr(collect_mod, "collect", fake_collect)
    res = CliRunner().invoke(app, ["collect", "--tag", "INCIDENT-123", "-o", "-"])
    assert res.exit_code == 0, res.output
    assert seen["tag"] == "INCIDENT-123"


def test_collect_names_the_bundle_by_tag(tmp_path, monkeypatch):
    # the real collector, on a fake host (the fixtures of test_collect)
    test_collect = pytest.importorskip("test_collect")
    host = test_collect.host.__wrapped__(tmp_path, monkeypatch) if hasattr(test_collect.host, "__wrapped__") else None
    if host is None:
        pytest.skip("test_collect's host fixture is not callable here")
    monkeypatch.chdir(host["out"])
    path = collect_run(test_collect.options(host, output=None, tag="INCIDENT-123"))
    assert path.name.startswith("forensics-INCIDENT-123-")
    manifest, _members = test_collect.read_bundle(path)
    assert manifest["tag"] == "INCIDENT-123"


def collect_run(opts):
    from forensics.collect import collect

    return collect(opts)


def test_other_ranks_did_not_finish_loading_follows_from_the_other_node():
    # node 1's ranks loaded and then waited for ranks that never did (alone: no cause in sight); with the
    # node where a scheduler was OOM-killed beside it, the wait is that failure's consequence
    from forensics.model import SEVERITY_RANK

    other = SCENARIOS / "ranks_not_loaded_other_node" / "input"
    _tl, alone, alone_root = _analyse([other])
    assert alone_root is not None and all(f.consequence_of is None for f in alone if f.rule_id == alone_root)
    tl, findings, root = _analyse([TWO / "node1", other])
    assert root == "SGL-HOST-001" and tl.facts.host == "gpu-b"
    waited = [f for f in findings if f.hosts == ["sglang-1"] and SEVERITY_RANK[f.severity] <= SEVERITY_RANK["high"]]
    assert waited and all(f.consequence_of == "SGL-HOST-001" for f in waited), [(f.rule_id, f.consequence_of)
                                                                               for f in waited]


def test_streamed_hosts_merge_into_one_parquet(tmp_path, monkeypatch):
    # each host's log big enough to be streamed: the merged timeline.parquet holds every row of every host
    import polars as pl

    from forensics import inputs, timeline

    whole_tl, whole, _root = _analyse([TWO / "node0", TWO / "node1"])
    monkeypatch.setattr(inputs.limits, "STREAM_BYTES", 1_000)
    monkeypatch.setattr(timeline, "CHUNK_BYTES", 999)
    tl, streamed, _root = _analyse([TWO / "node0", TWO / "node1"], spill_dir=tmp_path)
    assert tl.parquet_path and _digest(streamed) == _digest(whole)
    out = tmp_path / "t.parquet"
    timeline.write_parquet(tl, out)
    rows = pl.read_parquet(out)
    assert rows.height == whole_tl.events.height
    assert sorted(rows.get_column("host").unique().to_list()) == ["gpu-a", "gpu-b"]
    import pyarrow.parquet as pq

    meta = json.loads(pq.read_schema(out).metadata[b"forensics.facts"])
    assert set(meta["hosts"]) == {"gpu-a", "gpu-b"}


def test_each_hosts_resources_are_its_own():
    tl, findings, root = _analyse([TWO / "node0", TWO / "node1"])
    doc = to_document(findings, root, tl)
    hosts = doc["input"]["hosts"]
    # free -g on gpu-a (GiB, truncated), meminfo on gpu-b (KiB)
    assert hosts["gpu-a"]["ram_bytes"] == 2015 * 2**30
    assert hosts["gpu-b"]["ram_bytes"] == 791_702_000 * 1024
    assert hosts["gpu-b"]["topology"]["ranks_seen"] == list(range(8, 16))
    assert hosts["gpu-b"]["clock_skew_s"] == pytest.approx(3.0)


@pytest.mark.parametrize("sample, host", [
    ("research_samples/kernel_log/10_journalctl_k_json_and_verbose.txt", "vm"),  # journald json/verbose
    ("research_samples/kernel_log/09_journalctl_k_short_iso_precise_live_oom.txt", "vm"),
    ("research_samples/kernel_log/12_kern_log_rsyslog_traditional_rfc3164_oom.txt", "vm"),
    ("sglang_real_logs/18_other-ranks-did-not-finish-loading_v0.4.4.log", "sglang-0"),  # NCCL's host prefix
    ("sglang_real_logs/21_load-weight-begin-end_deepseek-r1-4node_nccl-watchdog.log", None),  # names none
])
def test_real_texts_name_their_host(sample, host):
    path = SHARED / sample
    if not path.is_file():
        pytest.skip(f"{SKIP_REASON}: {sample} not present")
    assert stated_host(path.read_text(errors="replace")) == host


def test_real_node_logs_as_two_hosts():
    # two real logs of multi-node servers, each given as a host: every finding names its host, the
    # ranks of the TP24-31 node stay that node's
    logs = [SHARED / "sglang_real_logs" / n for n in ("18_other-ranks-did-not-finish-loading_v0.4.4.log",
                                                      "21_load-weight-begin-end_deepseek-r1-4node_nccl-watchdog.log")]
    if not all(p.is_file() for p in logs):
        pytest.skip(f"{SKIP_REASON}: real logs not present")
    tl, findings, _root = _analyse(logs, hosts={str(logs[0]): "node0", str(logs[1]): "node3"})
    assert set(tl.facts.hosts) == {"node0", "node3"}
    assert findings and all(len(f.hosts) == 1 for f in findings)
    assert tl.facts.hosts["node3"].topology["ranks_seen"] == list(range(24, 32))


def test_bad_inputs_among_hosts_are_one_line_errors(tmp_path):
    from forensics.inputs import InputError

    with pytest.raises(InputError, match="no such file"):
        build_timeline([TWO / "node0", tmp_path / "missing"])
    unreadable = tmp_path / "locked.log"
    unreadable.write_text("x\n")
    unreadable.chmod(0)
    try:
        if os.access(unreadable, os.R_OK):
            pytest.skip("running as root: the file is readable anyway")
        with pytest.raises(InputError):
            build_timeline([TWO / "node0", unreadable], hosts={str(unreadable): "gpu-z"})
    finally:
        unreadable.chmod(0o644)


def test_startup_table_compares_ranks_across_hosts(tmp_path):
    # TP11 on gpu-b never finished loading: against every rank of both nodes, its row stalls there
    from forensics.report import startup_table

    shutil.copytree(TWO, tmp_path / "s")
    log = tmp_path / "s" / "node1" / "sglang.log"
    log.write_text("".join(ln + "\n" for ln in log.read_text().splitlines()
                           if not ("TP11]" in ln and ("Load weight end" in ln or "Allocating" in ln))))
    tl = build_timeline([tmp_path / "s" / "node0", tmp_path / "s" / "node1"])
    table = startup_table(tl)
    assert {r.group for r in table} == {"all hosts"}
    assert len(table) == 16
    stalled = {r.rank: r.stalled_at for r in table if r.stalled_at}
    assert list(stalled) == ["gpu-b TP11"]

"""What `collect` gathered is the same evidence however it reaches `report`, and what `collect` ran
itself is never evidence (issue 22, items 2 and 3).

* The same vLLM log and its launch script as loose files, as a folder, as a `collect` bundle (with
  `--log`/`--add`), as that bundle with the older collector's wrong "sglang" label on the log, and as
  a `fleet` input: the same findings, each time read as vLLM.
* A quiet host (no server, no GPU, the version probes failing with ModuleNotFoundError): its bundle
  reports nothing at or above medium, in `report` and in `fleet`.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

import forensics.collect as collect_mod
from forensics.cli import app
from forensics.collect import CollectOptions, collect
from forensics.collect.sources import by_id

ROOT = Path(__file__).resolve().parents[1]
VLLM_LOG = ROOT / "fixtures" / "scenarios" / "vllm_graph_capture_oom" / "input" / "server.log"
# the launch that log's own "non-default args" line records (TP2, utilisation 0.95, 32k context)
SERVE = "#!/bin/bash\nvllm serve Qwen/Qwen2.5-32B-Instruct --tensor-parallel-size 2 " \
        "--gpu-memory-utilization 0.95 --max-model-len 32768 --port 8000\n"

# the probe as a host without the package answers it (the traceback `python3 -c VERSION_SCRIPT` prints)
FAILING_PYTHON = """#!/bin/sh
for last in "$@"; do :; done
echo 'Traceback (most recent call last):'
echo '  File "<string>", line 7, in <module>'
echo "ModuleNotFoundError: No module named '$last'"
exit 1
"""
QUIET_DMESG = """#!/bin/sh
echo "2026-12-01T08:00:01,000000+00:00 Linux version 6.8.0-49-generic (buildd@lcy02-amd64-103) #49-Ubuntu SMP"
echo "2026-12-01T08:00:02,120000+00:00 systemd[1]: Started Journal Service."
"""
QUIET_PS = """#!/bin/sh
echo "    PID    PPID STAT                  STARTED ELAPSED   RSS    VSZ COMMAND         COMMAND"
echo "      1       0 Ss   Tue Dec  1 08:00:00 2026  3600 12000 168000 systemd         /sbin/init"
echo "    812       1 Ss   Tue Dec  1 08:00:04 2026  3596  6100  15400 sshd            sshd: /usr/sbin/sshd -D"
"""


def _fake_bin(folder: Path, scripts: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in scripts.items():
        (folder / name).write_text(body)
        (folder / name).chmod(0o755)
    return folder


def _quiet_proc(root: Path) -> Path:
    """A /proc with init only: no server of any engine is running."""
    proc = root / "proc"
    (proc / "1").mkdir(parents=True)
    (proc / "meminfo").write_text("MemTotal:       65536000 kB\nMemFree:        60000000 kB\n"
                                  "MemAvailable:   62000000 kB\n")
    (proc / "stat").write_text("cpu  1 2 3 4\nbtime 1796112000\n")
    (proc / "uptime").write_text("3600.00 7000.00\n")
    (proc / "1" / "cmdline").write_bytes(b"/sbin/init\x00")
    (proc / "1" / "comm").write_text("systemd\n")
    (proc / "1" / "cgroup").write_text("0::/init.scope\n")
    return proc


def _collect(tmp: Path, monkeypatch, sources: tuple | None = None, **kw) -> Path:
    monkeypatch.setenv("PATH", f"{_fake_bin(tmp / 'bin', {'python3': FAILING_PYTHON, 'dmesg': QUIET_DMESG, 'ps': QUIET_PS})}"
                               f":/usr/bin:/bin")
    if sources is not None:
        monkeypatch.setattr(collect_mod, "SOURCES", sources)
    cg = tmp / "cgroup"
    cg.mkdir(exist_ok=True)
    return collect(CollectOptions(output=tmp / "bundle.tar.gz", proc_root=_quiet_proc(tmp), cgroup_root=cg,
                                  timeout_s=5, budget_s=40, safe_mode=True, **kw))


def _report(*inputs: Path, out: Path) -> dict:
    res = CliRunner().invoke(app, ["report", *map(str, inputs), "-o", str(out), "--format", "json", "-q"])
    assert res.exit_code == 0, res.output
    return json.loads((out / "findings.json").read_text())


def _fleet(bundle: Path, out: Path) -> list[dict]:
    res = CliRunner().invoke(app, ["fleet", str(bundle), "-o", str(out), "--format", "json", "--workers", "1", "-q"])
    assert res.exit_code == 0, res.output
    return [json.loads(p.read_text()) for p in sorted((out / "incidents").glob("*/findings.json"))]


def _what_it_says(doc: dict) -> list[tuple]:
    """The findings as a reader acts on them: rule, severity, root cause, and the flags to change."""
    return sorted((f["rule_id"], f["severity"], f["rule_id"] == doc.get("root_cause"),
                   tuple((x["flag"], x["old"], x["new"]) for x in (f.get("remediation") or {}).get("flags", [])))
                  for f in doc["findings"])


def _manifest(bundle: Path) -> dict:
    with tarfile.open(bundle) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/manifest.json"))
        return json.loads(tar.extractfile(member).read())


def _relabel(bundle: Path, out: Path, path: str, fmt: str) -> Path:
    """The bundle with one artifact's manifest format changed (what an older collector wrote)."""
    with tarfile.open(bundle) as src, tarfile.open(out, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else None
            if m.name.endswith("/manifest.json"):
                man = json.loads(data)
                for a in man["artifacts"]:
                    if a["path"] == path:
                        a["format"] = fmt
                data = json.dumps(man).encode()
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    return out


def test_the_same_evidence_gives_the_same_findings_in_every_form(tmp_path, monkeypatch):
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    log = shutil.copy(VLLM_LOG, evidence / "server.log")
    serve = evidence / "serve.sh"
    serve.write_text(SERVE)

    loose = _report(Path(log), serve, out=tmp_path / "loose")
    # the capture OOM: the lower utilization, and eager mode as vLLM's capture message offers
    assert ("VLLM-GPU-001", "high", True, (("--gpu-memory-utilization", "0.95", "0.92"), ("--enforce-eager", None, "true"))) \
        in _what_it_says(loose)
    assert not any(f["rule_id"].startswith("SGL-") for f in loose["findings"])

    folder = _report(evidence, out=tmp_path / "folder")
    # a collect run that gathered only these two files (plus the failing version probes): the bundle's
    # other evidence would be this machine's, and it is not what is being compared
    only = (by_id("logs"), by_id("added"), by_id("version-sglang"), by_id("version-vllm"))
    bundle = _collect(tmp_path / "host", monkeypatch, only, logs=[str(log)], adds=[str(serve)])
    collected = _report(bundle, out=tmp_path / "bundle")
    formats = {c["file"]: c["format"] for c in collected["coverage"]}
    assert formats["logs/server.log"].startswith("vllm"), formats
    # the collector's own label on the log is no label: content decides
    assert next(a for a in _manifest(bundle)["artifacts"] if a["path"] == "logs/server.log")["format"] is None
    mislabelled = _report(_relabel(bundle, tmp_path / "old.tar.gz", "logs/server.log", "sglang"),
                          out=tmp_path / "old")
    fleet = _fleet(bundle, tmp_path / "fleet")
    assert len(fleet) == 1

    want = _what_it_says(loose)
    for name, doc in [("folder", folder), ("bundle", collected), ("bundle labelled sglang", mislabelled),
                      ("fleet", fleet[0])]:
        assert _what_it_says(doc) == want, name


def test_a_quiet_host_reports_nothing_at_or_above_medium(tmp_path, monkeypatch):
    bundle = _collect(tmp_path, monkeypatch)
    doc = _report(bundle, out=tmp_path / "report")
    loud = [(f["rule_id"], f["severity"]) for f in doc["findings"] if f["severity"] in ("critical", "high", "medium")]
    assert loud == [] and doc.get("root_cause") is None
    # the failed probes are gaps in the inventory, and their output is not read as a log
    formats = {c["file"]: c["format"] for c in doc["coverage"]}
    assert formats["versions/sglang.txt"] == "collector probe"
    assert any(g.startswith("version-sglang:") and "ModuleNotFoundError" in g for g in doc["input"]["gaps"])
    fleet = _fleet(bundle, tmp_path / "fleet")
    assert [f["rule_id"] for d in fleet for f in d["findings"] if f["severity"] in ("critical", "high", "medium")] == []


@pytest.mark.parametrize("legacy", [True, False])
def test_a_probe_is_known_by_its_role_or_by_an_older_bundles_source_name(legacy):
    from forensics.timeline import is_probe

    art = {"path": "versions/sglang.txt", "source": "version-sglang", "rc": 1}
    if not legacy:
        art["role"] = "probe"
    assert is_probe(art)
    assert not is_probe({"path": "logs/server.log", "source": "log"})
    assert not is_probe(None)

"""``forensics check``: every fixtures/check/<case>/ run through the command, plus the contract.

A case folder holds the launch file(s) and ``expected.json``: ``args`` (``{dir}`` = the folder,
``{text:NAME}`` = that file's text), ``exit``, ``expect`` / ``forbid`` rule ids, ``flags`` (corrected
values as ranges, ``old`` = the value the command had), ``gpus``, ``severity``, ``text`` (phrases the
text output must contain) and ``live`` (read "this host" through the case's ``bin/`` fake commands).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forensics.check import CheckOptions, corrected_argv, run_check
from forensics.cli import app
from forensics.model import CATEGORIES, CONFIDENCES, SEVERITIES
from parsers.units import GIB

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "check"
SEED_SCRIPT = CASES / "seed_first_launch" / "launch.sh"


def case_dirs() -> list[Path]:
    return sorted(p for p in CASES.iterdir() if (p / "expected.json").is_file())


def _args(folder: Path, args: list[str]) -> list[str]:
    out = []
    for a in args:
        if a.startswith("{text:"):
            out.append((folder / a[6:-1]).read_text(encoding="utf-8"))
        else:
            out.append(a.replace("{dir}", str(folder)))
    return out


def invoke(args: list[str], monkeypatch: pytest.MonkeyPatch, folder: Path | None = None, live: bool = False):
    """The command in-process; live cases see only their fake ``bin/`` and no cgroup limit."""
    if live:
        monkeypatch.setenv("PATH", str(folder / "bin"))
    monkeypatch.setenv("FORENSICS_CHECK_PROC", str((folder or CASES) / "no-proc"))
    return CliRunner().invoke(app, ["check", *args])


@pytest.mark.parametrize("folder", case_dirs(), ids=lambda p: p.name)
def test_case(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exp = json.loads((folder / "expected.json").read_text(encoding="utf-8"))
    args = _args(folder, exp["args"])
    text = invoke(args, monkeypatch, folder, exp.get("live", False))
    assert text.exit_code == exp["exit"], text.output
    for phrase in exp.get("text", []):
        assert phrase in text.output, text.output
    res = invoke([*args, "--format", "json"], monkeypatch, folder, exp.get("live", False))
    assert res.exit_code == exp["exit"], res.output
    doc = json.loads(res.stdout)
    by_rule = {f["rule_id"]: f for f in doc["findings"]}
    summary = "; ".join(f"{f['rule_id']}/{f['severity']}: {f['summary']}" for f in doc["findings"])
    assert set(exp.get("expect", [])) <= set(by_rule), summary
    assert not set(exp.get("forbid", [])) & set(by_rule), summary
    for rule, sev in exp.get("severity", {}).items():
        assert by_rule[rule]["severity"] == sev, summary
    for rule, gpus in exp.get("gpus", {}).items():
        assert by_rule[rule]["gpus"] == gpus, summary
    for flag, rng in exp.get("flags", {}).items():
        changes = [c for f in doc["findings"] for c in f["remediation"]["flags"] if c["flag"] == flag]
        assert changes, f"no corrected {flag}: {summary}"
        if "equals" in rng:
            assert changes[0]["new"] == rng["equals"], changes[0]
        else:
            assert rng["min"] <= float(changes[0]["new"]) <= rng["max"], changes[0]
        if "old" in rng:
            assert changes[0]["old"] == rng["old"]
        if flag.startswith("--") and "{text:" not in " ".join(exp["args"]):
            # the corrected command carries the new value
            assert changes[0]["new"] in text.output


def test_seed_first_command_fits_eight_ranks_with_a_reserve(monkeypatch: pytest.MonkeyPatch) -> None:
    host = 449 * GIB
    res = run_check(CheckOptions(files=[str(SEED_SCRIPT)], host_memory=host, gpus=8, gpu_memory=97887 << 20))
    f = next(f for f in res.findings if f.rule_id == "SGL-HOST-001")
    new = int(f.remediation.flags[0].new)
    # eight pools of the proposed size, even rounded up to a power of two, stay under the host with room left
    assert 8 * new * 1e9 <= host - max(10 * GIB, 0.1 * host)
    assert f.figures["ranks_per_host"] == 8 and f.severity == "critical"
    # the corrected command is the user's own, with only that flag changed
    text = invoke([str(SEED_SCRIPT), "--host-memory", "449GiB", "--gpus", "8", "--gpu-memory", "97887MiB"],
                  monkeypatch).output
    assert f"--hicache-size {new}" in text and "--model-path /models/Qwen2.5-72B-Instruct" in text
    assert "--hicache-size 300" not in text.split("Corrected command:")[1]


def test_the_limit_not_the_host_bounds_the_kubernetes_value() -> None:
    manifest = CASES / "k8s_limit_below_request" / "deployment.yaml"
    small = run_check(CheckOptions(files=[str(manifest)], host_memory=1 << 40, gpus=8))
    big = run_check(CheckOptions(files=[str(manifest)], host_memory=4 << 40, gpus=8))
    values = [int(next(f for f in r.findings if f.rule_id == "SGL-HOST-001").remediation.flags[0].new)
              for r in (small, big)]
    assert values[0] == values[1]  # the host's size does not matter: the pod's limit does
    assert 8 * values[0] * 1e9 <= 400 * GIB


def test_version_trap_power_of_two() -> None:
    relaunch = CASES / "seed_relaunch" / "launch.sh"
    old = run_check(CheckOptions(files=[str(relaunch)], host_memory=449 * GIB, gpus=8, engine_version="0.5.2"))
    f = next(f for f in old.findings if f.rule_id == "SGL-HOST-001")
    assert f.figures["power_of_two_pinning"] == "yes"
    assert int(f.remediation.flags[0].new) < 48


def test_stdin_and_cmd_are_launches(monkeypatch: pytest.MonkeyPatch) -> None:
    text = SEED_SCRIPT.read_text(encoding="utf-8")
    res = CliRunner().invoke(app, ["check", "-", "--host-memory", "449GiB", "--gpus", "8"], input=text)
    assert res.exit_code == 1 and "SGL-HOST-001" in res.output
    res = CliRunner().invoke(app, ["check", "--cmd", "python -m sglang.launch_server --tp 8 --enable-hicache "
                                   "--hicache-size 40", "--host-memory", "449GiB", "--engine-version", "0.5.6"])
    assert res.exit_code == 0, res.output


def test_json_is_the_findings_document(monkeypatch: pytest.MonkeyPatch) -> None:
    res = invoke([str(SEED_SCRIPT), "--host-memory", "449GiB", "--gpus", "8", "--format", "json"], monkeypatch)
    doc = json.loads(res.stdout)
    assert doc["schema_version"] == 1 and doc["tool"]["name"] == "forensics"
    assert set(doc) >= {"input", "root_cause", "findings", "coverage"}
    assert doc["root_cause"] == "SGL-HOST-001"
    assert any("--engine-version" in g or "SGLang version" in g for g in doc["input"]["gaps"])
    for f in doc["findings"]:
        assert f["category"] in CATEGORIES and f["severity"] in SEVERITIES and f["confidence"] in CONFIDENCES
        assert f["evidence"] and all(e["file"] and e["line"] >= 1 for e in f["evidence"])
        for c in f["remediation"]["flags"]:
            assert set(c) == {"flag", "old", "new", "why"}
    assert doc["coverage"][0]["format"] == "launch"


def test_corrected_argv_keeps_the_users_spelling() -> None:
    from forensics.check import Launch

    launch = Launch("x", 1, 1, "", ["python3", "-m", "sglang.launch_server", "--mem-frac=0.93", "--tp", "8"],
                    {}, {"--mem-fraction-static": "--mem-frac", "--tp-size": "--tp"}, {})
    assert corrected_argv(launch, {"--mem-fraction-static": "0.88"})[3] == "--mem-frac=0.88"


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "forensics.cli", "check", *args], capture_output=True, text=True,
                          input=stdin)


def _one_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("Try ")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize("args", [
    ["--host-memory", "lots"],
    ["--format", "yaml"],
    ["--fail-on", "bad"],
    [],
    ["--gpus", "0"],
    ["--engine-version", "latest", "--host-memory", "1TiB"],
], ids=["size", "format", "fail-on", "no-input", "gpus", "version"])
def test_usage_errors_exit_2(args: list[str]) -> None:
    proc = cli(*(args if args == [] else [str(SEED_SCRIPT), *args]))
    assert proc.returncode == 2, proc.stderr
    _one_line(proc)


def test_unreadable_input_exits_3(tmp_path: Path) -> None:
    proc = cli(str(tmp_path / "missing.sh"), "--host-memory", "1TiB")
    assert proc.returncode == 3 and "missing.sh" in _one_line(proc)
    notes = tmp_path / "notes.txt"
    notes.write_text("nothing to launch here\n")
    proc = cli(str(notes), "--host-memory", "1TiB")
    assert proc.returncode == 3 and "no SGLang or vLLM launch command" in _one_line(proc)
    proc = cli(str(tmp_path), "--host-memory", "1TiB")
    assert proc.returncode == 3
    _one_line(proc)


def test_live_mode_without_gpus_says_so_through_the_real_command(tmp_path: Path) -> None:
    bin_dir = CASES / "no_gpus_live" / "bin"
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "check", str(CASES / "no_gpus_live" / "launch.sh")],
                          capture_output=True, text=True,
                          env={"PATH": str(bin_dir), "FORENSICS_CHECK_PROC": str(tmp_path)})
    assert proc.returncode == 1, proc.stderr
    assert "no nvidia-smi on this host" in proc.stdout and "Traceback" not in proc.stderr


def test_live_mode_reads_the_cgroup_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a container the cgroup's memory.max, not the host's RAM, bounds the pools."""
    case = CASES / "no_gpus_live"
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text("0::/kubepods/pod1/ctr\n")
    folder = tmp_path / "cg" / "kubepods" / "pod1" / "ctr"
    folder.mkdir(parents=True)
    (folder / "memory.max").write_text(f"{200 * GIB}\n")
    monkeypatch.setenv("PATH", str(case / "bin"))
    res = run_check(CheckOptions(files=[str(case / "launch.sh")], proc_root=tmp_path / "proc",
                                 cgroup_root=tmp_path / "cg"))
    f = next(f for f in res.findings if f.rule_id == "SGL-HOST-001")
    assert f.figures["capacity_bytes"] == 200 * GIB
    assert 2 * int(f.remediation.flags[0].new) * 1e9 <= 200 * GIB
    assert any(x.name == "memory limit" and x.how == "read" for x in res.facts)


def test_compose_without_shm_or_ipc_assumes_the_default(tmp_path: Path) -> None:
    compose = tmp_path / "compose.yaml"
    compose.write_text((CASES / "compose_ipc_host" / "compose.yaml").read_text().replace("    ipc: host\n", ""))
    res = run_check(CheckOptions(files=[str(compose)], host_memory=449 * GIB, gpus=8))
    f = next(f for f in res.findings if f.rule_id == "SGL-CHK-002")
    assert f.figures["shm_assumed_default"] is True and f.confidence == "medium"
    compose.write_text(compose.read_text().replace("services:\n  sglang:\n", "services:\n  sglang:\n    shm_size: 32gb\n"))
    res = run_check(CheckOptions(files=[str(compose)], host_memory=449 * GIB, gpus=8))
    assert "SGL-CHK-002" not in {f.rule_id for f in res.findings}


def test_kubernetes_limit_is_read_by_the_launch_parser() -> None:
    from parsers import launch

    cmd = launch.find_commands((CASES / "k8s_limit_below_request" / "deployment.yaml").read_text())[-1]
    assert cmd.container_memory_bytes == 400 * GIB and cmd.flags["--hicache-size"] == "64"


def test_vllm_swap_space_per_gpu_over_the_host() -> None:
    proc = cli("--cmd", "vllm serve /models/x --tensor-parallel-size 8 --swap-space 64", "--host-memory", "256GiB")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "--swap-space" in proc.stdout
    assert "SGLang version" not in proc.stdout  # a vLLM launch is not asked for SGLang's
    new = int(proc.stdout.split("--swap-space 64 → ")[1].split()[0]) if "--swap-space 64 → " in proc.stdout else None
    proc_ok = cli("--cmd", "vllm serve /models/x --tensor-parallel-size 8 --swap-space 16", "--host-memory", "256GiB")
    assert proc_ok.returncode == 0, proc_ok.stdout
    assert new is None or 8 * new <= 256 * 0.9


def test_more_ranks_than_gpus_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    res = run_check(CheckOptions(cmd="python -m sglang.launch_server --tp 8", host_memory=449 * GIB, gpus=4))
    assert any("needs 8 GPUs per host" in n for n in res.notes)


def test_a_limit_written_above_the_command_in_a_paste_bounds_the_pools(tmp_path: Path) -> None:
    # the docker run line cut from the command by a writer's "..." (issue 21.7): its --memory is the budget
    paste = tmp_path / "paste.txt"
    paste.write_text("docker run -d --gpus all --memory=240g -v /w:/w lmsysorg/sglang:v0.5.8 \\\n"
                     "...\n"
                     "python3 -m sglang.launch_server --model-path /w/m --tp 4 --enable-hierarchical-cache "
                     "--hicache-size 70\n")
    res = run_check(CheckOptions(files=[str(paste)], gpus=4, gpu_memory=80 * GIB, engine_version="0.5.8"))
    f = next(f for f in res.findings if f.rule_id == "SGL-HOST-001")
    assert f.figures.get("docker_memory_bytes") == 240 * GIB
    new = next(c for c in f.remediation.flags if c.flag == "--hicache-size").new
    assert 40 <= int(new) <= 56
    assert any(x.name == "memory limit" and "240.00 GiB" in x.value for x in res.facts)


def test_offline_the_host_ram_a_paste_states_in_words(tmp_path: Path) -> None:
    """Offline, a paste that says the host's RAM on the line before its command is checked against it."""
    paste = tmp_path / "ticket.txt"
    paste.write_text("The box has 384 GB of RAM.\n"
                     "python3 -m sglang.launch_server --model-path Qwen/Qwen2.5-32B-Instruct --tp 4 "
                     "--enable-hierarchical-cache --hicache-size 120\n", encoding="utf-8")
    res = run_check(CheckOptions(files=[str(paste)], gpus=4, gpu_memory=80 * GIB))
    f = next(f for f in res.findings if f.rule_id == "SGL-HOST-001")
    assert f.figures["host_total_bytes"] == 384 * GIB
    assert 4 * int(f.remediation.flags[0].new) * 1e9 <= 384 * GIB
    given = run_check(CheckOptions(files=[str(paste)], host_memory=4 << 40, gpus=4, gpu_memory=80 * GIB))
    assert not [f for f in given.findings if f.rule_id == "SGL-HOST-001"]  # --host-memory says more than a sentence


_DESCRIBE = """$ kubectl describe pod sglang-{name}-0
Name:             sglang-{name}-0
Containers:
  server:
    Image:         lmsysorg/sglang:v0.5.6-cu126
    Args:
      --model-path
      /models/m
      --tp
      4
      --enable-hierarchical-cache
      --hicache-size
      {size}
    Limits:
      memory:          160Gi
      nvidia.com/gpu:  4
"""


@pytest.mark.parametrize(("size", "over"), [("60", True), ("20", False)])
def test_a_kubectl_describe_is_checked_as_report_reads_it(tmp_path: Path, size: str, over: bool) -> None:
    """`check` reads a pod's Args and its Limits.memory from `kubectl describe` as `report` does (issue 21.7):
    4 ranks × 60 GB is over the 160 GiB limit, 4 × 20 GB fits it, whatever this machine's RAM."""
    pod = tmp_path / "describe.txt"
    pod.write_text(_DESCRIBE.format(name=size, size=size))
    res = run_check(CheckOptions(files=[str(pod)], host_memory=1 << 40, gpus=4, gpu_memory=80 * GIB))
    found = [f for f in res.findings if f.rule_id == "SGL-HOST-001"]
    assert bool(found) is over, [f.summary for f in res.findings]
    if over:
        assert found[0].figures.get("container_memory_bytes", found[0].figures.get("docker_memory_bytes")) == 160 * GIB \
            or "160.00 GiB" in found[0].summary, found[0].summary
        assert 4 * int(found[0].remediation.flags[0].new) * 1e9 <= 160 * GIB


_LMCACHE_START = """#!/bin/bash
docker run --gpus all --memory 160g -e LMCACHE_CONFIG_FILE=/cfg/lmc.yaml -v /cfg:/cfg vllm/vllm-openai:v0.10.1 \\
    --model Qwen/Qwen3-32B --tensor-parallel-size 2 \\
    --kv-transfer-config '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'
"""


@pytest.mark.parametrize(("gb", "over"), [("90.0", True), ("30.0", False)])
def test_an_lmcache_yaml_given_beside_the_launch_sizes_its_pools(tmp_path: Path, gb: str, over: bool) -> None:
    """The YAML that LMCACHE_CONFIG_FILE names, given to `check` beside the launch, is read as `report` reads it: 2
    workers × 90 GiB is over the container's 160 GiB, 2 × 30 GiB fits; the YAML alone is no launch to check."""
    start, yaml = tmp_path / "start.sh", tmp_path / "lmc.yaml"
    start.write_text(_LMCACHE_START)
    yaml.write_text(f"chunk_size: 256\nlocal_cpu: True\nmax_local_cpu_size: {gb}\n")
    res = run_check(CheckOptions(files=[str(start), str(yaml)], host_memory=1 << 40, gpus=2, gpu_memory=80 * GIB))
    host = [f for f in res.findings if f.rule_id == "VLLM-HOST-001"]
    assert bool(host) is over, [f.summary for f in res.findings]
    assert any(c["file"] == str(yaml) for c in res.timeline.coverage)
    with pytest.raises(Exception, match="no SGLang or vLLM launch"):
        run_check(CheckOptions(files=[str(yaml), str(yaml)], host_memory=1 << 40))

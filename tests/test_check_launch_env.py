"""``forensics check``'s corrected command puts an environment setting where the launcher reads it, as the
report's does (tests/test_report_launch_env.py): a docker run's ``-e`` option before the image (the old one
replaced), a compose service's ``environment:`` key said in words, a shell's ``VAR=value`` before the
command with its other assignments kept."""

from __future__ import annotations

import re
import shlex

from forensics.check import CheckOptions, corrected_argv, env_notes, render_text, run_check

# a vLLM server with LMCache's CPU pool per worker: four workers × 80 GiB do not fit 256 GiB (VLLM-HOST-001)
_KV = "'{\"kv_connector\":\"LMCacheConnectorV1\",\"kv_role\":\"kv_both\"}'"
_DOCKER = ("docker run -d --gpus all --memory=240g --ipc=host -e HF_HOME=/cache/hf "
           "-e LMCACHE_MAX_LOCAL_CPU_SIZE=80 vllm/vllm-openai:v0.10.1 --model acme/Ledger-32B "
           f"--tensor-parallel-size 4 --kv-transfer-config {_KV}")
_HOST = {"host_memory": 256 << 30, "gpus": 4}


def _text(res) -> str:
    return render_text(res, "high")


def _corrected_block(text: str) -> str:
    block = text.split("Corrected command:\n", 1)[1].split("\n\n", 1)[0]
    return " ".join(w.strip().rstrip("\\").strip() for w in block.splitlines())


def test_a_docker_run_gets_the_variable_as_its_e_option_before_the_image():
    res = run_check(CheckOptions(cmd=_DOCKER, **_HOST))
    fix = next(c for f in res.findings for c in f.remediation.flags if c.flag == "LMCACHE_MAX_LOCAL_CPU_SIZE")
    words = corrected_argv(res.launch, {fix.flag: fix.new})
    image = words.index("vllm/vllm-openai:v0.10.1")
    assert words[:2] == ["docker", "run"] and f"LMCACHE_MAX_LOCAL_CPU_SIZE={fix.new}" in words[:image]
    assert words[words.index(f"LMCACHE_MAX_LOCAL_CPU_SIZE={fix.new}") - 1] == "-e"
    assert "LMCACHE_MAX_LOCAL_CPU_SIZE=80" not in words and "-e" in words and "HF_HOME=/cache/hf" in words[:image]
    assert not any(w.startswith("LMCACHE_") for w in words[image:])  # no assignment run as the program
    shown = _corrected_block(_text(res))
    assert shown.startswith("docker run -d") and f"-e LMCACHE_MAX_LOCAL_CPU_SIZE={fix.new} vllm/vllm-openai" in shown
    assert env_notes(res.launch, {fix.flag: fix.new}) == []


def test_the_next_step_checks_the_corrected_docker_run_and_it_passes():
    res = run_check(CheckOptions(cmd=_DOCKER, **_HOST))
    nxt = _text(res).rsplit("Next: ", 1)[1]
    cmd = shlex.split(re.search(r"`(forensics check .*)`", nxt).group(1))
    again = cmd[cmd.index("--cmd") + 1]
    assert again.startswith("docker run ") and "-e LMCACHE_MAX_LOCAL_CPU_SIZE=" in again
    res2 = run_check(CheckOptions(cmd=again, **_HOST))
    assert not [f.rule_id for f in res2.findings if f.severity in ("critical", "high")], _text(res2)


def test_a_compose_service_is_told_which_environment_key_to_set(tmp_path):
    compose = tmp_path / "compose.yaml"
    compose.write_text("services:\n  ledger:\n    image: vllm/vllm-openai:v0.10.1\n    environment:\n"
                       "      - LMCACHE_MAX_LOCAL_CPU_SIZE=80\n"
                       f"    command: --model acme/Ledger-32B --tensor-parallel-size 4 --kv-transfer-config {_KV}\n",
                       encoding="utf-8")
    text = _text(run_check(CheckOptions(files=[str(compose)], **_HOST)))
    assert re.search(r'set `LMCACHE_MAX_LOCAL_CPU_SIZE: "\d+"` under `environment:`', text), text
    assert "LMCACHE_MAX_LOCAL_CPU_SIZE=" not in text.split("Facts:", 1)[0].split("fix:", 1)[1], text
    assert "Corrected command" not in text  # the command itself is unchanged
    assert "put the changes above in" in text


def test_a_shell_launch_keeps_its_assignments_before_the_command():
    cmd = ("HF_HOME=/cache/hf LMCACHE_MAX_LOCAL_CPU_SIZE=80 vllm serve acme/Ledger-32B --tensor-parallel-size 4 "
           f"--kv-transfer-config {_KV}")
    res = run_check(CheckOptions(cmd=cmd, **_HOST))
    shown = _corrected_block(_text(res))
    assert re.match(r"HF_HOME=/cache/hf LMCACHE_MAX_LOCAL_CPU_SIZE=\d+ vllm serve acme/Ledger-32B", shown), shown
    assert "-e " not in shown and "LMCACHE_MAX_LOCAL_CPU_SIZE=80" not in shown


def test_a_launch_that_fits_gets_no_environment_correction():
    res = run_check(CheckOptions(cmd=_DOCKER.replace("SIZE=80", "SIZE=40"), **_HOST))
    text = _text(res)
    assert "Corrected command" not in text and "Environment (" not in text and "-e LMCACHE" not in text

"""An environment setting in the corrected launch: a docker run's ``-e`` option, a compose or manifest key,
a shell's ``VAR=value`` before the command — as report.html and summary.md show it."""

from __future__ import annotations

import html as html_lib
import re
from pathlib import Path

import pytest

from forensics import report
from forensics.analysis import analyse
from forensics.report.launch_env import env_note, env_style, set_docker_env
from forensics.rules import load_catalog


def _outputs(tmp_path: Path, name: str, text: str, log: str | None = None) -> tuple[str, str]:
    (tmp_path / name).write_text(text, encoding="utf-8")
    if log is not None:
        (tmp_path / "server.log").write_text(log, encoding="utf-8")
    tl, doc = analyse([tmp_path], None, quiet=True)
    page = report.render_html(doc, tl, load_catalog())
    return page, report.render_markdown(doc, load_catalog(), tl)


def _copied_command(page: str) -> str:
    found = re.search(r'<textarea id="cmd-new-text" hidden readonly>(.*?)</textarea>', page, re.S)
    assert found, "no corrected command"
    return html_lib.unescape(found.group(1))


_DOCKER = """#!/bin/bash
docker run -d --gpus all --memory=256g --ipc=host \\
  -e LMCACHE_MAX_LOCAL_CPU_SIZE=80 \\
  vllm/vllm-openai:v0.10.1 \\
  --model acme/Notes-32B --tensor-parallel-size 4 \\
  --kv-transfer-config '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'
"""

# numactl's own refusal before the scheduler starts: the fix is SGLANG_NUMA_BIND_V2=0 (SGL-RUN-007)
_NUMA_LOG = """[2026-06-03 11:20:00] server_args=ServerArgs(model_path='/models/notes-7b', tp_size=1, port=30000)
setting membind: Invalid argument
[2026-06-03 11:20:02] Received sigquit from a child process. It usually means the child failed.
"""


def test_a_docker_run_gets_the_variable_as_its_e_option_in_html_and_summary(tmp_path):
    page, md = _outputs(tmp_path, "run.sh", _DOCKER)
    cmd = _copied_command(page)
    assert cmd.startswith("docker run -d --gpus all --memory=256g --ipc=host -e LMCACHE_MAX_LOCAL_CPU_SIZE=")
    assert " vllm/vllm-openai:v0.10.1 --model acme/Notes-32B" in cmd and "=80" not in cmd
    assert not re.search(r"(?<!-e )LMCACHE_MAX_LOCAL_CPU_SIZE=", cmd)  # no assignment word of its own
    assert re.search(r"<mark>LMCACHE_MAX_LOCAL_CPU_SIZE=\d+</mark>", page)  # the changed word is highlighted
    assert re.search(r"<del>LMCACHE_MAX_LOCAL_CPU_SIZE=80</del>", page)  # ... and the old one struck out
    assert re.search(r"Relaunch with the corrected command: `-e LMCACHE_MAX_LOCAL_CPU_SIZE=\d+`", md), md


def test_a_compose_service_is_told_which_environment_key_to_set(tmp_path):
    compose = """services:
  notes:
    image: lmsysorg/sglang:v0.5.3-cu126
    environment:
      - HF_HOME=/cache/hf
    command: python3 -m sglang.launch_server --model-path /models/notes-7b --port 30000
"""
    page, md = _outputs(tmp_path, "compose.yaml", compose, _NUMA_LOG)
    assert "SGLANG_NUMA_BIND_V2" not in _copied_command(page)
    note = re.search(r'<ul id="env-notes">(.*?)</ul>', page, re.S)
    assert note and "<code>SGLANG_NUMA_BIND_V2: &#34;0&#34;</code> under <code>environment:</code>" in note.group(1)
    assert '- In the compose service, set `SGLANG_NUMA_BIND_V2: "0"` under `environment:`.' in md, md
    assert '`SGLANG_NUMA_BIND_V2: "0"` under `environment:`' in md.split("### Next steps", 1)[1]


def test_a_shell_launch_keeps_the_assignment_before_the_command(tmp_path):
    script = "#!/bin/bash\nSGLANG_NUMA_BIND_V2=1 HF_HOME=/cache/hf python3 -m sglang.launch_server " \
             "--model-path /models/notes-7b --port 30000\n"
    page, md = _outputs(tmp_path, "start.sh", script, _NUMA_LOG)
    assert _copied_command(page).startswith("SGLANG_NUMA_BIND_V2=0 HF_HOME=/cache/hf python3 -m sglang.launch_server")
    assert 'id="env-notes"' not in page and "-e SGLANG" not in md
    assert "Relaunch with the corrected command: `SGLANG_NUMA_BIND_V2=0`" in md, md


@pytest.mark.parametrize(("words", "name", "value", "expected"), [
    (["docker", "run", "--env", "A=1", "img"], "A", "2", ["docker", "run", "--env", "A=2", "img"]),
    (["docker", "run", "-e", "A", "img"], "A", "2", ["docker", "run", "-e", "A=2", "img"]),  # a pass-through
    (["docker", "run", "--env=A=1", "img"], "A", "", ["docker", "run", "img"]),  # removed
    (["docker", "run", "--gpus", "all", "img"], "B", "3", ["docker", "run", "-e", "B=3", "--gpus", "all", "img"]),
    (["docker", "run", "-e", "AB=1", "img"], "A", "2", ["docker", "run", "-e", "AB=1", "-e", "A=2", "img"]),
])
def test_docker_env_option_forms(words, name, value, expected):
    assert set_docker_env(words, name, value)[0] == expected


def test_where_a_setting_goes_follows_the_launcher():
    assert env_style({"launcher": "docker run"}) == "shell"  # typed inside a container: a shell's assignment
    assert env_style({"launcher": "kubernetes"}) == "kubernetes"
    assert env_note("shell", "A", "1") is None and "`env:`" in (env_note("kubernetes", "A", "1") or "")

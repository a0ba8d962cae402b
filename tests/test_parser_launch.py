"""Launch-command parser: scripts, cmdline, ps lines, docker run, compose; aliases and sizes."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shared_data import SHARED, SKIP_REASON

from parsers import launch
from parsers.schema import NotThisFormat

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "host"
GIB = 1 << 30


def attrs_of(result, i=0):
    return json.loads(result.events["attrs"][i])


def test_script_with_continuations_env_nohup_and_comments():
    r = launch.parse((FIX / "launch_script.sh").read_text(), "added/relaunch.sh")
    assert r.events.height == 1  # the commented-out old launch is not a command
    row = r.events.row(0, named=True)
    assert (row["line"], row["line_end"], row["kind"], row["source"]) == (9, 18, "launch_command", "launch")
    a = attrs_of(r)
    assert a["launcher"] == "python -m"
    assert a["env"] == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "NCCL_DEBUG": "WARN"}
    assert a["flags"] == {
        "--model-path": "/models/Kimi-K2-Instruct-0905-int4",
        "--tp-size": "8",
        "--mem-fraction-static": "0.93",
        "--enable-hierarchical-cache": True,
        "--hicache-size": "48",
        "--cuda-graph-bs": "1 2 4 8",
        "--chunked-prefill-size": "-1",
        "--host": "0.0.0.0",
        "--port": "30000",
        "--trust-remote-code": True,
    }
    assert a["argv"][:3] == ["python3", "-m", "sglang.launch_server"]
    assert a["argv"][-1] == "--trust-remote-code"  # redirections and & are not argv
    assert a["spellings"]["--tp-size"] == "--tp"
    assert (r.lines, r.recognized, r.unrecognized) == (19, 19, 0)


def test_docker_run_sizes_gpus_env_and_repeated_flag():
    r = launch.parse((FIX / "docker_run.sh").read_text())
    a = attrs_of(r)
    assert a["launcher"] == "docker run"
    assert a["docker_memory_bytes"] == 400 * GIB
    assert a["docker_shm_size_bytes"] == 32 * GIB
    assert a["docker_gpus"] == "device=0,1"
    assert a["env"] == {"HF_TOKEN": "redacted", "SGLANG_LOG_MS": "1"}
    assert a["flags"]["--tp-size"] == "2" and a["repeated"] == ["--tp-size"]
    assert a["argv"][0] == "python3"
    assert (r.events["line"][0], r.events["line_end"][0]) == (1, 4)


def test_compose_string_list_folded_and_flow_forms():
    r = launch.parse((FIX / "compose.yaml").read_text(), "added/compose.yaml")
    r.events = r.events.filter(r.events["kind"] == "launch_command")  # limit rows: test_parser_launch_anywhere.py
    assert r.events.height == 4 and r.unrecognized == 0
    first, listed, folded, flow = (attrs_of(r, i) for i in range(4))
    assert first["launcher"] == "compose"
    assert first["argv"][:3] == ["python3", "-m", "sglang.launch_server"]
    assert first["flags"] == {"--model-path": "meta-llama/Llama-3.1-8B-Instruct", "--host": "0.0.0.0",
                              "--port": "30000", "--dp-size": "2"}
    assert first["docker_memory_bytes"] == 200 * GIB  # deploy.resources.limits.memory: 200G
    assert first["docker_shm_size_bytes"] == 32 * GIB
    assert first["docker_gpus"] == "0,1"
    assert first["env"] == {"CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": "redacted"}
    assert listed["flags"] == {"--model-path": "/models/Qwen3-8B", "--pp-size": "2",
                               "--enable-hierarchical-cache": True}
    assert listed["docker_memory_bytes"] == 64 * GIB  # mem_limit: 64g
    assert listed["env"] == {"HF_HOME": None, "SGLANG_LOG_MS": "1"}
    assert folded["flags"] == {"--model-path": "/m", "--ep-size": "4", "--cuda-graph-max-bs-decode": "256"}
    assert flow["argv"][:2] == ["sglang", "serve"] and flow["flags"]["--tp-size"] == "4"
    assert list(r.events["line"]) == [11, 31, 44, 49]  # entrypoint line starts service 1


def test_proc_cmdline_with_nul_separators():
    text = "python3\0-m\0sglang.launch_server\0--model-path\0/models/Qwen3-32B\0--tp-size\0004\0--port=30001\0"
    r = launch.parse(text, "sglang/41207/cmdline")
    a = attrs_of(r)
    assert a["argv"] == ["python3", "-m", "sglang.launch_server", "--model-path", "/models/Qwen3-32B",
                         "--tp-size", "4", "--port=30001"]
    assert a["flags"] == {"--model-path": "/models/Qwen3-32B", "--tp-size": "4", "--port": "30001"}
    assert launch.sniff(text) >= 0.9
    assert (r.lines, r.recognized) == (1, 1)


def test_ps_line_and_sglang_serve_and_router():
    text = ("  41207       1 Sl   Sun Nov 29 08:50:41 2026  3600 2097152 9437184 python3  "
            "/usr/bin/python3.11 -u -m sglang.launch_server --model /m --tensor-parallel-size 8 "
            "--data-parallel-size 2 --pipeline-parallel-size 2 --expert-parallel-size 8\n"
            "sglang serve --model-path /m2 --mem-frac 0.8 --max-total-tokens 128k\n"
            "python -m sglang_router.launch_server --model-path /m3 --dp 4\n")
    cmds = launch.find_commands(text)
    assert [c.launcher for c in cmds] == ["python -m", "sglang serve", "python -m"]
    assert cmds[0].argv[0] == "/usr/bin/python3.11" and cmds[0].env == {}
    assert cmds[0].flags == {"--model-path": "/m", "--tp-size": "8", "--dp-size": "2", "--pp-size": "2",
                             "--ep-size": "8"}
    assert cmds[1].flags == {"--model-path": "/m2", "--mem-fraction-static": "0.8", "--max-total-tokens": "128k"}
    assert cmds[2].module == "sglang_router.launch_server" and cmds[2].flags["--dp-size"] == "4"
    assert [c.line for c in cmds] == [1, 2, 3]


def test_bash_c_wrapper_and_pipe_to_tee():
    text = ('docker run --rm --gpus all --memory=1.5t --shm-size=16gb img bash -c '
            '"NCCL_DEBUG=INFO python3 -m sglang.launch_server --model-path /m --tp 2 2>&1 | tee /log/s.log"\n')
    (c,) = launch.find_commands(text)
    assert c.launcher == "docker run"
    assert c.docker_memory_bytes == int(1.5 * (1 << 40))
    assert c.docker_shm_size_bytes == 16 * GIB
    assert c.docker_gpus == "all"
    assert c.env == {"NCCL_DEBUG": "INFO"}
    assert c.argv[-1] == "2" and c.flags == {"--model-path": "/m", "--tp-size": "2"}


def test_docker_ipc_mode_is_kept_in_either_spelling():
    # docker-run(1) --ipc takes its value after "=" or as the next word; "host" shares the host's /dev/shm
    (c,) = launch.find_commands("docker run --gpus all --ipc host lmsysorg/sglang:v0.5.6 "
                                "python3 -m sglang.launch_server --model-path /m --tp 4\n")
    assert c.docker_ipc == "host" and c.flags["--tp-size"] == "4"
    (c,) = launch.find_commands("docker run --ipc=private --shm-size 8g img vllm serve /m\n")
    assert c.docker_ipc == "private" and c.docker_shm_size_bytes == 8 * GIB


def test_comment_line_ends_a_continued_command_like_bash():
    text = ("python -m sglang.launch_server \\\n"
            "  --model-path /m \\\n"
            "  # --tp 8 \\\n"
            "  --port 30000\n")
    r = launch.parse(text)
    a = attrs_of(r)
    assert a["flags"] == {"--model-path": "/m"}
    assert (r.events["line"][0], r.events["line_end"][0]) == (1, 2)
    assert any("line 3" in n for n in r.notes)


def test_unbalanced_quote_falls_back_to_whitespace_split():
    (c,) = launch.find_commands('python3 -m sglang.launch_server --model-path "/m --tp 4\n')
    assert c.flags["--tp-size"] == "4" and c.flags["--model-path"] == '"/m'


def test_parse_argv_helper_and_canonical_names():
    assert launch.parse_argv(["--tp", "2", "--tp=4", "--disable-cuda-graph", "--mem_fraction_static", "0.7"]) == {
        "--disable-cuda-graph": True, "--mem-fraction-static": "0.7", "--tp-size": "4"}
    assert launch.canonical_flag("--cuda-graph-max-bs-decode") == "--cuda-graph-max-bs-decode"
    assert launch.canonical_flag("--enable-hicache") == "--enable-hierarchical-cache"
    assert launch.docker_size("512m") == 512 * (1 << 20) and launch.docker_size("2k") == 2048


def test_sniff_levels():
    assert launch.sniff((FIX / "launch_script.sh").read_text()) >= 0.9
    assert launch.sniff((FIX / "compose.yaml").read_text()) >= 0.9
    mixed = "\n".join(["[2026-11-29 08:50:41] log line"] * 10 + ["$ python3 -m sglang.launch_server --tp 8"])
    assert 0.2 <= launch.sniff(mixed) < 0.5
    assert launch.sniff((FIX / "ps_eo.txt").read_text()) < 0.5  # the ps parser's text
    assert launch.sniff("free -g\n              total        used\nMem:  449  318\n") == 0.0


def test_text_that_merely_contains_a_command_counts_only_its_lines():
    mixed = "\n".join(["[2026-11-29 08:50:41] some log line"] * 4 + ["$ python3 -m sglang.launch_server --tp 8"])
    r = launch.parse(mixed)
    assert (r.lines, r.recognized, r.unrecognized) == (5, 1, 4)
    assert r.unrecognized_examples[0] == (1, "[2026-11-29 08:50:41] some log line")


def test_not_this_format_and_nothing_here():
    with pytest.raises(NotThisFormat):
        launch.parse("Mem:  449  318  131\n")
    assert launch.parse("").events.height == 0
    assert launch.parse("#!/bin/sh\necho hello\n").events.height == 0  # a script without a launch


@pytest.mark.parametrize("text", [
    "python3 -m sglang.launch_server\r\n--tp 2\r\n",
    "python3 -m sglang.launch_server \\\r\n  --tp 2\r\n",
    "\0\0\0sglang\0",
    "services:\n  a:\n    command: [\"python3\", \"-m\", \"sglang.launch_server\"\n",
    "services:\n  a:\n    image: x\n    command: 'python3 -m sglang.launch_server --tp 2\n",
    "python3 -m sglang.launch_server --tp " + "9" * 1_000_000 + "\n",
    "bash -c " + "\"bash -c " * 50 + "python3 -m sglang.launch_server\n",
    "docker run -m\n",
    "docker run python3 -m sglang.launch_server --memory\n",
])
def test_bad_input_never_raises_other_errors(text):
    with contextlib.suppress(NotThisFormat):
        launch.parse(text)
    launch.sniff(text)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("python3 -msglang.launch_server\\\n\r\0\"'#=-:[]|>&{}services: command")),
               max_size=300))
def test_fuzz_never_raises_other_errors(text):
    with contextlib.suppress(NotThisFormat):
        launch.parse(text)
    launch.sniff(text)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_bytes(data):
    text = data.decode("utf-8", errors="replace")
    with contextlib.suppress(NotThisFormat):
        launch.parse(text)


def test_real_samples_never_mistaken_for_launch_files():
    if not SHARED.is_dir():
        pytest.skip(SKIP_REASON)
    for p in sorted(SHARED.rglob("*")):
        if p.is_file() and p.suffix in {".log", ".txt", ".md", ".csv"} and not p.stem.startswith("launch"):
            assert launch.sniff(p.read_text(errors="replace")[:65536]) < 0.5, p


def test_kubernetes_container_command_plus_args():
    text = ("apiVersion: apps/v1\nkind: Deployment\nspec:\n  template:\n    spec:\n      containers:\n"
            "        - name: sglang\n          image: lmsysorg/sglang:v0.5.6\n"
            '          command: ["python3", "-m", "sglang.launch_server"]\n'
            "          args:\n            - --model-path\n            - /models/m\n            - --tp\n"
            '            - "8"\n        - name: sidecar\n          image: busybox\n')
    assert launch.sniff(text) >= 0.9
    r = launch.parse(text)
    a = attrs_of(r)
    assert a["flags"] == {"--model-path": "/models/m", "--tp-size": "8"}
    assert (r.events["line"][0], r.events["line_end"][0]) == (9, 14)


def test_compose_flow_command_keeps_a_nested_flow_item_whole():
    """A flow item that is itself a flow mapping (YAML 1.2 §7.4) is one argv word, its commas included."""
    text = ("services:\n  vllm:\n    image: vllm/vllm-openai:v0.11.0\n"
            '    command: ["--model", "acme/m", "--tensor-parallel-size", "2", "--kv-transfer-config",\n'
            "              {kv_connector: OffloadingConnector, kv_role: kv_both}]\n")
    a = attrs_of(launch.parse(text))
    assert a["flags"]["--tensor-parallel-size"] == "2"
    assert a["flags"]["--kv-transfer-config"] == "{kv_connector: OffloadingConnector, kv_role: kv_both}"


def test_lmcache_config_file_is_read_from_a_cat_and_a_heredoc() -> None:
    """LMCache's YAML (lmcache/v1/config.py option names): a ``cat`` of it names the file; a heredoc names its
    target; a mapping of other keys is not LMCache's."""
    import json

    from parsers import launch

    cat = launch.parse("chunk_size: 256\nlocal_cpu: true\nmax_local_cpu_size: 70\n", "t.md",
                       command="cat /opt/lmcache/offload.yaml")
    row = cat.events.row(0, named=True)
    a = json.loads(row["attrs"])
    assert row["kind"] == "lmcache_config" and row["line"] == 3
    assert (a["max_local_cpu_size"], a["local_cpu"], a["path"]) == (70.0, True, "/opt/lmcache/offload.yaml")
    script = ("#!/bin/bash\ncat > /etc/lmc.yaml <<'EOF'\nlocal_cpu: False\nmax_local_cpu_size: 80\nEOF\n"
              "LMCACHE_CONFIG_FILE=/etc/lmc.yaml vllm serve m --tensor-parallel-size 2\n")
    kinds = {r["kind"]: json.loads(r["attrs"]) for r in launch.parse(script, "s.sh").events.iter_rows(named=True)}
    assert kinds["lmcache_config"]["path"] == "/etc/lmc.yaml" and kinds["lmcache_config"]["local_cpu"] is False
    assert "launch_command" in kinds
    assert launch.sniff("chunk_size: 256\nlocal_cpu: true\nmax_local_cpu_size: 70\n") >= 0.5
    assert launch.sniff("chunk_size: 256\nmax_model_len: 4096\n") == 0.0

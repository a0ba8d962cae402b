"""Launch configuration wherever it is written (issue 13 item 4): manifests, recipes, Slurm, Dockerfiles,
the Python API, exported variables, vLLM launches, a ticket's fenced blocks — and the host limits they set.

Every input is our own text in the real format (fixtures/launch/).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.timeline import build_timeline
from parsers import launch
from parsers.launch import config as launch_config
from parsers.launch import yaml_recipe as launch_yaml
from parsers.schema import NotThisFormat

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "launch"
GIB = 1 << 30


def parsed(name: str) -> list[dict]:
    text = (FIX / name).read_text()
    assert launch.sniff(text) >= 0.5, name
    res = launch.parse(text, name)
    assert res.unrecognized == 0, res.unrecognized_examples
    out = []
    for r in res.events.iter_rows(named=True):
        r["a"] = json.loads(r["attrs"])
        out.append(r)
    return out


def of_kind(rows: list[dict], kind: str) -> list[dict]:
    return [r for r in rows if r["kind"] == kind]


# ---------------------------------------------------------------------------------------------
# Kubernetes


def test_k8s_statefulset_flow_args_env_limits_and_gpus() -> None:
    rows = parsed("k8s_statefulset_two_docs.yaml")
    (cmd,) = of_kind(rows, "launch_command")
    a = cmd["a"]
    assert a["launcher"] == "kubernetes" and a["confidence"] == "config" and a["engine"] == "sglang"
    assert a["flags"] == {"--model-path": "/models/kimi", "--tp-size": "8", "--hicache-size": "300",
                          "--enable-hierarchical-cache": True}
    assert a["env"] == {"HF_TOKEN": None, "SGLANG_ENABLE_TORCH_COMPILE": "0"}  # valueFrom: not known here
    assert a["container_memory_bytes"] == 400 * GIB and a["container_memory_request_bytes"] == 380 * GIB
    assert a["gpu_count"] == 8 and a["container"] == "server"
    assert (cmd["line"], cmd["line_end"]) == (22, 28)  # command: … through the multi-line flow args
    (mem,) = of_kind(rows, "container_memory_limit")
    assert mem["bytes"] == 400 * GIB and "kubernetes" in mem["a"]["limit_from"]
    (gpu,) = of_kind(rows, "gpu_count")
    assert gpu["count"] == 8


def test_k8s_vllm_image_with_args_only_and_decimal_limit() -> None:
    rows = parsed("k8s_vllm_image_args_only.yaml")
    (cmd,) = of_kind(rows, "launch_command")
    a = cmd["a"]
    assert a["engine"] == "vllm" and a["image"].startswith("vllm/vllm-openai")
    assert a["flags"] == {"--model": "meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size": "4",
                          "--gpu-memory-utilization": "0.92"}
    assert a["spellings"] == {"--tensor-parallel-size": "-tp"}
    assert of_kind(rows, "container_memory_limit")[0]["bytes"] == 256 * 10**9  # "256G" is decimal in k8s
    assert of_kind(rows, "gpu_count")[0]["count"] == 4


def test_k8s_container_that_runs_something_else_is_no_launch() -> None:
    text = ("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: web\n    image: nginx:1.27\n"
            "    args: [\"--port\", \"80\"]\n    resources:\n      limits: {memory: 1Gi}\n")
    assert launch.sniff(text) < 0.5
    with contextlib.suppress(NotThisFormat):
        assert of_kind(launch.parse(text).events.to_dicts(), "launch_command") == []


def test_yaml_reader_subset() -> None:
    doc = launch_yaml.load("a: 1\nb:\n- x\n- 'y z'\nc: |\n  one\n  two\nd: >-\n  f\n  g\ne: {k: [1, 2]}\n")[0]
    assert launch_yaml.plain(doc) == {"a": "1", "b": ["x", "y z"], "c": "one\ntwo\n", "d": "f g",
                                      "e": {"k": ["1", "2"]}}
    assert doc.get("c").line == 5 and doc.get("b").line_end == 4
    assert launch_yaml.load("::: [unclosed\n  - : :\n") is not None  # never raises


@pytest.mark.parametrize("q, n", [("400Gi", 400 * GIB), ("1.5Ti", int(1.5 * (1 << 40))), ("129e6", 129 * 10**6),
                                  ("512M", 512 * 10**6), ("64k", 64000), ("x", None)])
def test_k8s_quantities(q, n) -> None:
    assert launch_yaml.k8s_quantity(q) == n


# ---------------------------------------------------------------------------------------------
# recipes (--config)


def test_sglang_recipe_kebab_snake_alias_list_and_false() -> None:
    rows = parsed("recipe_sglang_config.yaml")
    (cmd,) = of_kind(rows, "launch_command")
    a = cmd["a"]
    assert a["launcher"] == "config" and a["confidence"] == "config" and a["argv"] == []
    assert a["flags"] == {"--model-path": "/models/Qwen3-235B-A22B", "--tp-size": "8", "--mem-fraction-static": "0.95",
                          "--enable-hierarchical-cache": True, "--hicache-size": "60", "--cuda-graph-bs": "1 2 4 8"}
    assert a["spellings"]["--tp-size"] == "tp" and a["spellings"]["--mem-fraction-static"] == "mem_fraction_static"
    assert (cmd["line"], cmd["line_end"]) == (2, 8)


def test_vllm_recipe_uses_vllm_names() -> None:
    a = of_kind(parsed("recipe_vllm_config.yaml"), "launch_command")[0]["a"]
    assert a["engine"] == "vllm"
    assert a["flags"] == {"--model": "mistralai/Mistral-Small-3.1-24B-Instruct-2503", "--tensor-parallel-size": "2",
                          "--gpu-memory-utilization": "0.93", "--max-model-len": "65536", "--enforce-eager": True}


def test_recipe_nested_under_server_args() -> None:
    a = of_kind(parsed("recipe_nested_server_args.yaml"), "launch_command")[0]["a"]
    assert a["flags"]["--tp-size"] == "8" and a["flags"]["--hicache-ratio"] == "2"
    assert "--name" not in a["flags"]


def test_disaggregated_recipe_is_one_launch_per_role_in_file_order() -> None:
    """srt-slurm/Dynamo-style ``prefill:``/``decode:`` sections: each role's own fraction, not one of them for both."""
    cmds = of_kind(parsed("recipe_disaggregated_prefill_decode.yaml"), "launch_command")
    assert [c["a"]["flags"]["--disaggregation-mode"] for c in cmds] == ["prefill", "decode"]
    prefill, decode = (c["a"]["flags"] for c in cmds)
    assert prefill["--mem-fraction-static"] == "0.82" and prefill["--tp-size"] == "4"
    assert decode["--mem-fraction-static"] == "0.93" and decode["--cuda-graph-max-bs"] == "256"
    assert "--chunked-prefill-size" not in decode and "--model-path" not in decode
    assert [(c["line"], c["line_end"]) for c in cmds] == [(4, 7), (9, 12)]


def test_recipe_environment_sections_feed_each_role() -> None:
    """srt-slurm's ``environment`` (every server) and ``<role>_environment`` sections are the workers' variables."""
    text = ("environment:\n  NCCL_DEBUG: WARN\n  HOME_DIR: /x\ndecode_environment:\n"
            "  SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK: \"512\"\n"
            "prefill:\n  tp-size: 4\n  mem-fraction-static: 0.8\ndecode:\n  tp-size: 8\n  mem-fraction-static: 0.9\n")
    prefill, decode = launch_config.recipe_commands(text)
    assert prefill.env == {"NCCL_DEBUG": "WARN"}
    assert decode.env == {"NCCL_DEBUG": "WARN", "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "512"}


def test_recipe_of_environment_sections_only() -> None:
    text = "decode_environment:\n  SGLANG_MOE_NVFP4_DISPATCH: \"1\"\n"
    assert launch_config.looks_like_recipe(text)
    (cmd,) = launch_config.recipe_commands(text)
    assert cmd.env == {"SGLANG_MOE_NVFP4_DISPATCH": "1"} and cmd.flags == {"--disaggregation-mode": "decode"}
    assert not launch_config.looks_like_recipe("environment:\n  HOME: /root\n")


def test_yaml_that_is_not_a_recipe() -> None:
    text = "name: ci\non: push\njobs:\n  build:\n    runs-on: ubuntu-latest\n    port: 8000\n"
    assert launch.sniff(text) < 0.5
    assert not launch_config.looks_like_recipe(text)


# ---------------------------------------------------------------------------------------------
# Slurm, exports, Dockerfile


def test_slurm_job_mem_gres_srun_and_exports() -> None:
    rows = parsed("slurm_srun_job.sh")
    (cmd,) = of_kind(rows, "launch_command")
    a = cmd["a"]
    assert a["wrapper"] == "srun" and a["flags"]["--tp-size"] == "8"
    assert a["env"] == {"SGLANG_LOG_LEVEL": "debug"} and a["env_exported"] == ["SGLANG_LOG_LEVEL"]  # HF_HOME: not engine's
    assert a["slurm"]["mem_bytes"] == 500 * GIB and a["slurm"]["gpus"] == 8
    mem = of_kind(rows, "container_memory_limit")[0]
    assert mem["bytes"] == 500 * GIB and mem["line"] == 5 and "slurm" in mem["a"]["limit_from"]
    assert of_kind(rows, "gpu_count")[0]["count"] == 8


@pytest.mark.parametrize("val, n", [("gpu:8", 8), ("gpu:a100:4(S:0-1)", 4), ("gpu", 1), ("shard:2", None)])
def test_gres_gpu_counts(val, n) -> None:
    assert launch_config._gres_gpus(val) == n


def test_slurm_mem_zero_means_the_whole_node() -> None:
    d = launch_config.slurm_directives(["#SBATCH --mem=0", "#SBATCH --gpus-per-node=4"])
    assert d["mem_bytes"] is None and d["mem_all"] is True and d["gpus"] == 4


def test_dockerfile_env_both_forms_and_json_cmd() -> None:
    a = of_kind(parsed("Dockerfile"), "launch_command")[0]["a"]
    assert a["launcher"] == "dockerfile" and a["confidence"] == "config"
    assert a["env"] == {"HF_HOME": "/cache", "SGLANG_DISABLE_CUDNN_CHECK": "1", "SGL_ENABLE_JIT_DEEPGEMM": "0"}
    assert a["flags"] == {"--model-path": "/m", "--tp-size": "2"}


# ---------------------------------------------------------------------------------------------
# Python API


def test_sgl_engine_keyword_arguments() -> None:
    (cmd,) = of_kind(parsed("python_api_sglang.py"), "launch_command")
    a = cmd["a"]
    assert a["launcher"] == "python api" and a["engine"] == "sglang" and a["call"] == "sgl.Engine"
    assert a["flags"] == {"--model-path": "/models/Llama-3.1-8B", "--mem-fraction-static": "0.9", "--tp-size": "4",
                          "--enable-hierarchical-cache": True, "--cuda-graph-max-bs": "160"}
    assert (cmd["line"], cmd["line_end"]) == (5, 6)  # the call's own lines, 1-based


def test_vllm_llm_keyword_arguments() -> None:
    a = of_kind(parsed("python_api_vllm.py"), "launch_command")[0]["a"]
    assert a["engine"] == "vllm"
    assert a["flags"] == {"--model": "Qwen/Qwen2.5-7B", "--tensor-parallel-size": "2", "--gpu-memory-utilization": "0.9",
                          "--max-model-len": "8192"}


def test_sglang_engine_long_name_and_non_literal_values() -> None:
    text = ("import sglang\nimport os\n\nengine = sglang.Engine(model_path=os.environ['M'], tp_size=2,\n"
            "                       mem_fraction_static=0.85, disable_cuda_graph=False)\n")
    a = launch.parse(text).events.to_dicts()[0]
    flags = json.loads(a["attrs"])["flags"]
    assert flags == {"--model-path": "os.environ['M']", "--tp-size": "2", "--mem-fraction-static": "0.85"}


def test_a_traceback_quoting_the_api_is_no_launch_file() -> None:
    text = ('Traceback (most recent call last):\n  File "run.py", line 4, in <module>\n'
            "    llm = sgl.Engine(model_path='/m', tp_size=8)\n    import sglang\nRuntimeError: boom\n")
    assert launch.sniff(text) < 0.5


# ---------------------------------------------------------------------------------------------
# vLLM command lines and docker limits


def test_vllm_serve_module_and_image() -> None:
    rows = parsed("vllm_launches.sh")
    serve, module, image = of_kind(rows, "launch_command")
    assert serve["a"]["launcher"] == "vllm serve" and serve["a"]["engine"] == "vllm"
    assert serve["a"]["flags"]["--tensor-parallel-size"] == "2" and serve["a"]["env"] == {"VLLM_USE_V1": "1"}
    assert serve["a"]["positional"] == ["meta-llama/Llama-3.1-8B"] and serve["a"]["model_tag"] == "meta-llama/Llama-3.1-8B"
    assert module["a"]["module"] == "vllm.entrypoints.openai.api_server" and module["a"]["flags"]["--model"] == "/m"
    assert image["a"]["launcher"] == "docker run" and image["a"]["flags"]["--tensor-parallel-size"] == "8"
    assert image["a"]["env"] == {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}
    mem = of_kind(rows, "container_memory_limit")
    assert [m["bytes"] for m in mem] == [300 * GIB] and mem[0]["line"] == 3
    assert of_kind(rows, "gpu_count") == []  # --gpus all: the host's count, not stated here


def test_sglang_launches_say_engine_and_confidence() -> None:
    a = json.loads(launch.parse("python3 -m sglang.launch_server --tp 2\n").events["attrs"][0])
    assert (a["engine"], a["confidence"]) == ("sglang", "command")
    r = launch.parse("docker run --gpus '\"device=0,1\"' -m 64g lmsysorg/sglang:v0.5.6 python3 -m "
                     "sglang.launch_server --tp 2\n")
    kinds = dict(zip(r.events["kind"], r.events.to_dicts(), strict=True))
    assert kinds["container_memory_limit"]["bytes"] == 64 * GIB and kinds["gpu_count"]["count"] == 2


# ---------------------------------------------------------------------------------------------
# in a ticket


def test_ticket_fenced_command_and_recipe_through_the_timeline() -> None:
    tl = build_timeline([FIX / "ticket_with_fenced_launch.md"])
    rows = [dict(r, a=json.loads(r["attrs"] or "{}")) for r in tl.events.iter_rows(named=True)]
    launches = [r for r in rows if r["kind"] == "launch_command" and r["source"] == "launch"]
    assert [(r["line"], r["a"]["confidence"]) for r in launches] == [(6, "command"), (23, "config")]
    told = [r["a"]["flags"] for r in rows if r["kind"] == "launch_command" and r["source"] == "prose"]
    assert told == [{"--tp-size": "8"}]  # the title: "… with HiCache on TP8"
    assert launches[0]["a"]["flags"]["--hicache-size"] == "200"
    assert any(r["kind"] == "host_memory" and r["source"] == "free" for r in rows)
    disc = [r for r in rows if r["kind"] == "launch_flag_discussed"]
    assert [(r["line"], r["a"]["value"]) for r in disc] == [(28, "100")]


# ---------------------------------------------------------------------------------------------
# robustness


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([*"abk:-[]{}\"' \n#|>0123456789.", "containers:", "kind: Pod", "apiVersion: v1",
                                  "- name: x", "  "]), max_size=120).map("".join))
def test_yaml_reader_and_k8s_never_raise(text) -> None:
    for doc in launch_yaml.load(text):
        launch_yaml.k8s_containers(doc, launch.tokenize)
    with contextlib.suppress(NotThisFormat):
        launch.parse("apiVersion: v1\nkind: Pod\n" + text)


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=200))
def test_python_and_recipe_paths_never_raise(text) -> None:
    for prefix in ("import sglang\nsgl.Engine(", "from vllm import LLM\nLLM(", "tp: 8\nmem-fraction-static: "):
        with contextlib.suppress(NotThisFormat):
            launch.parse(prefix + text)


def test_a_line_of_arguments_without_the_program() -> None:
    text = "--num-scheduler-steps 8 --gpu-memory-utilization 0.95\n"
    assert launch.sniff(text) >= 0.5
    (row,) = launch.parse(text).events.to_dicts()
    a = json.loads(row["attrs"])
    assert a["launcher"] == "args" and a["engine"] == "vllm"
    assert a["flags"] == {"--num-scheduler-steps": "8", "--gpu-memory-utilization": "0.95"}


def test_placeholders_and_a_cut_paste() -> None:
    text = ("python3 -m sglang.launch_server --model-path <model-dir> \\\n    --tp 4 --dist-init-addr <head-node>:5000 \\\n"
            "[... trimmed ...]\n")
    r = launch.parse(text)
    a = json.loads(r.events["attrs"][0])
    assert a["flags"] == {"--model-path": "<model-dir>", "--tp-size": "4", "--dist-init-addr": "<head-node>:5000"}
    assert any("cut" in n for n in r.notes)


def test_flags_continued_without_backslashes_and_templates() -> None:
    text = ("      python3 -m sglang.launch_server\n      --model-path {{ model }}\n      --tp {{ tp }}\n"
            "      --mem-fraction-static 0.8\n")
    a = json.loads(launch.parse(text).events["attrs"][0])
    assert a["flags"] == {"--model-path": "{{ model }}", "--tp-size": "{{ tp }}", "--mem-fraction-static": "0.8"}


def test_dynamo_runs_the_engine_in_process() -> None:
    a = json.loads(launch.parse("dynamo-run in=http out=sglang --model-path /m --tp 2\n").events["attrs"][0])
    assert a["launcher"] == "dynamo-run" and a["engine"] == "sglang" and a["flags"]["--tp-size"] == "2"
    b = json.loads(launch.parse("python -m dynamo.vllm --model /m -tp 2\n").events["attrs"][0])
    assert b["engine"] == "vllm" and b["flags"] == {"--model": "/m", "--tensor-parallel-size": "2"}


def test_newer_vllm_image_takes_the_model_as_its_first_argument() -> None:
    text = ("apiVersion: apps/v1\nkind: Deployment\nspec:\n  template:\n    spec:\n      containers:\n"
            "      - name: vllm\n        image: docker.io/vllm/vllm-openai:v0.10.1\n"
            "        args: [\"Qwen/Qwen3-32B\", \"--tensor-parallel-size\", \"2\", \"--max-num-seqs\", \"64\"]\n")
    a = json.loads(launch.parse(text).events["attrs"][0])
    assert a["model_tag"] == "Qwen/Qwen3-32B" and a["flags"] == {"--tensor-parallel-size": "2", "--max-num-seqs": "64"}


def test_a_launch_quoted_for_ssh() -> None:
    text = "ssh gpu-07 'cd /srv && SGLANG_LOG_MS=1 nohup python3 -m sglang.launch_server --tp 8 > s.log 2>&1 &'\n"
    a = json.loads(launch.parse(text).events["attrs"][0])
    assert a["flags"] == {"--tp-size": "8"} and a["env"] == {"SGLANG_LOG_MS": "1"}


def test_dynamo_run_names_its_engine_anywhere_among_its_arguments() -> None:
    # dynamo_run.md: `dynamo-run in=… out=<engine> [--flags] [model]`; the wheel spells it `dynamo run`
    a = json.loads(launch.parse("dynamo-run --http-port 8081 in=http --context-length 16384 --model-path /w/q14 "
                                "out=vllm --tensor-parallel-size 2\n").events["attrs"][0])
    assert (a["engine"], a["flags"]["--tensor-parallel-size"], a["flags"]["--http-port"]) == ("vllm", "2", "8081")
    b = json.loads(launch.parse("dynamo run out=sglang --model-path /w/q7 --tp 4\n").events["attrs"][0])
    assert b["launcher"] == "dynamo-run" and b["engine"] == "sglang" and b["flags"]["--tp-size"] == "4"
    # another engine of dynamo's (mistral.rs, llama.cpp) is not ours
    assert launch.find_commands("dynamo-run in=http out=mistralrs /w/q7.gguf\n") == []

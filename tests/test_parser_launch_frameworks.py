"""parsers/launch/frameworks.py and the launch reader: RL frameworks' spellings of the engines' flags.

The launch command of a training job that starts SGLang or vLLM as its rollout engine is read in the
engine's canonical flags, with the spelling the user typed kept beside each; words that are the
framework's own (its trainer settings, its engine counts) are not taken for engine flags.
"""

from __future__ import annotations

import json

from parsers import launch
from parsers.launch.frameworks import engine_flag, framework_command, spelling_for


def _one(text: str) -> dict:
    res = launch.parse(text)
    rows = [json.loads(a) for k, a in zip(res.events["kind"], res.events["attrs"], strict=True)
            if k == "launch_command"]
    assert len(rows) == 1, rows
    return rows[0]


def test_verl_script_reads_rollout_keys_for_sglang() -> None:
    a = _one("#!/bin/bash\npython3 -m verl.trainer.main_ppo \\\n  actor_rollout_ref.rollout.name=sglang \\\n"
             "  actor_rollout_ref.rollout.gpu_memory_utilization=0.55 \\\n"
             "  actor_rollout_ref.rollout.tensor_model_parallel_size=4 \\\n  trainer.nnodes=2 $@\n")
    assert (a["engine"], a["launcher"], a["framework"]) == ("sglang", "rl framework", "verl")
    assert a["flags"] == {"--mem-fraction-static": "0.55", "--tp-size": "4"}
    assert a["spellings"]["--mem-fraction-static"] == "actor_rollout_ref.rollout.gpu_memory_utilization"


def test_verl_default_engine_is_vllm() -> None:
    fc = framework_command(["python3", "-m", "verl.trainer.main_ppo",
                            "actor_rollout_ref.rollout.gpu_memory_utilization=0.4"])
    assert fc is not None and fc.engine == "vllm" and fc.flags == {"--gpu-memory-utilization": "0.4"}


def test_engine_kwargs_and_areal_keys_pass_engine_arguments() -> None:
    fc = framework_command(["python", "-m", "areal.launcher.local", "sglang.mem_fraction_static=0.8",
                            "+sglang.context_length=16384", "actor.path=/m"])
    assert fc is not None and fc.framework == "areal"
    assert fc.flags == {"--mem-fraction-static": "0.8", "--context-length": "16384"}
    fc = framework_command(["python3", "-m", "verl.trainer.main_ppo", "actor_rollout_ref.rollout.name=sglang",
                            "+actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=triton"])
    assert fc is not None and fc.flags == {"--attention-backend": "triton"}


def test_slime_prefix_and_tp() -> None:
    a = _one("python3 train.py --colocate --rollout-num-gpus-per-engine 4 --sglang-mem-fraction-static=0.6 "
             "--sglang-cuda-graph-max-bs 128 --sglang-router-ip 10.1.2.3\n")
    assert (a["engine"], a["framework"]) == ("sglang", "slime")
    assert a["flags"] == {"--tp-size": "4", "--mem-fraction-static": "0.6", "--cuda-graph-max-bs": "128"}


def test_openrlhf_vllm_options() -> None:
    a = _one("python3 -m openrlhf.cli.train_ppo_ray --vllm_num_engines 2 --vllm_tensor_parallel_size 4 "
             "--vllm_gpu_memory_utilization 0.5 --enforce_eager --vllm_sync_backend nccl\n")
    assert (a["engine"], a["framework"]) == ("vllm", "openrlhf")
    assert a["flags"] == {"--tensor-parallel-size": "4", "--gpu-memory-utilization": "0.5", "--enforce-eager": True}


def test_framework_words_without_engine_settings_are_no_launch() -> None:
    """A trainer's own overrides, or a framework's engine counts, set nothing in the engine."""
    assert framework_command(["python3", "-m", "verl.trainer.main_ppo", "trainer.nnodes=2", "data.max_len=9"]) is None
    assert framework_command(["python", "-m", "openrlhf.cli.train_ppo_ray", "--vllm_num_engines", "4"]) is None
    assert not launch.mentions_launch("export CUDA_VISIBLE_DEVICES=0,1\npython train.py --lr 1e-6\n")


def test_plain_engine_launch_is_unchanged() -> None:
    a = _one("python3 -m sglang.launch_server --model-path /m --mem-fraction-static 0.8\n")
    assert a["launcher"] == "python -m" and "framework" not in a


def test_spellings_both_ways() -> None:
    assert engine_flag("--sglang-mem-fraction-static") == "--mem-fraction-static"
    assert engine_flag("actor_rollout_ref.rollout.gpu_memory_utilization", "sglang") == "--mem-fraction-static"
    assert engine_flag("--vllm_gpu_memory_utilization") == "--gpu-memory-utilization"
    assert engine_flag("--hicache-size") is None
    assert spelling_for("verl", "sglang", "--mem-fraction-static", {}) == \
        "actor_rollout_ref.rollout.gpu_memory_utilization"
    assert spelling_for("slime", "sglang", "--tp-size", {}) == "--rollout-num-gpus-per-engine"
    assert spelling_for("openrlhf", "vllm", "--max-num-seqs", {}) is None  # OpenRLHF does not pass it


def test_unnamed_trainer_keeps_the_spelling_form() -> None:
    """TRL's GRPO script under accelerate names no framework: the ``--vllm_`` form is still read and kept."""
    fc = framework_command(["accelerate", "launch", "grpo.py", "--use_vllm", "--vllm_mode", "colocate",
                            "--vllm_gpu_memory_utilization", "0.3"])
    assert fc is not None and fc.form == "openrlhf" and fc.framework == "the training launcher"
    assert fc.flags == {"--gpu-memory-utilization": "0.3"}

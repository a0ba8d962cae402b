"""VLLM-RUN-001: vLLM refused its own launch arguments (sizes or a layout that do not fit together).

Sources (the messages as the engine raises them; read in vllm-project/vllm):
- vllm vllm/config.py::SchedulerConfig._verify_args (0.4-0.10; vllm/config/scheduler.py::verify_max_model_len
  0.11+): ``max_num_batched_tokens (B) is smaller than max_model_len (L). This effectively limits the maximum
  sequence length …`` (raised only with chunked prefill off: a prompt must fit one step) and
  ``max_num_batched_tokens (B) must be greater than or equal to max_num_seqs (S).`` (each running sequence
  takes at least one token of the step's budget).
- vllm vllm/config.py::ModelConfig.verify_with_parallel_config (0.4-0.10; vllm/config/model.py later):
  ``Total number of attention heads (H) must be divisible by tensor parallel size (T).``
- vllm vllm/config.py::ParallelConfig (0.6-0.10; vllm/config/parallel.py later): ``Tensor parallel size (T)
  cannot be larger than the number of available GPUs (G).`` (the GPUs this process sees).
- vllm vllm/config.py::CacheConfig._verify_args (0.4-0.10; vllm/config/cache.py later, a pydantic bound):
  ``GPU memory utilization must be less than 1.0. Got U.`` (a percentage given where a fraction is meant).

Each is a ValueError raised while the engine's config is built, before a weight is loaded: nothing ran out,
so the kernel log and the GPUs have nothing to say (the catch-all SGL-RUN-001 sends the reader there), and
the fix is the argument the message names. The figures come from the message itself.

>>> tp_that_divides(40, 3)
2
>>> tp_that_divides(64, 6)
4
"""

from __future__ import annotations

import re
from collections.abc import Callable

from forensics.facts.launch import ServerConfig
from forensics.model import Finding, FlagChange, Timeline

from .launch_refusals import Refusal, refusal_findings

# vllm vllm/config.py::SchedulerConfig._verify_args (0.4-0.10); vllm/config/scheduler.py (0.11+)
BATCH_BELOW_LEN = re.compile(r"max_num_batched_tokens \((\d+)\) is smaller than max_model_len \((\d+)\)")
# vllm vllm/config.py::SchedulerConfig._verify_args (0.4-0.10); vllm/config/scheduler.py (0.11+)
BATCH_BELOW_SEQS = re.compile(
    r"max_num_batched_tokens \((\d+)\) must be greater than or equal to max_num_seqs \((\d+)\)")
# vllm vllm/config.py::ModelConfig.verify_with_parallel_config (0.4-0.10); vllm/config/model.py later
HEADS_TP = re.compile(r"Total number of attention heads \((\d+)\) must be divisible by tensor parallel size \((\d+)\)")
# vllm vllm/config.py::ParallelConfig (0.6-0.10); vllm/config/parallel.py later
TP_GPUS = re.compile(r"Tensor parallel size \((\d+)\) cannot be larger than the number of available GPUs \((\d+)\)")
# vllm vllm/config.py::CacheConfig._verify_args (0.4-0.10)
UTIL_RANGE = re.compile(r"GPU memory utilization must be less than 1\.0\. Got (\d+(?:\.\d+)?)")


def tp_that_divides(heads: int, tp: int) -> int:
    """The largest tensor-parallel size not above ``tp`` that splits ``heads`` evenly."""
    return next(t for t in range(max(tp, 1), 0, -1) if heads % t == 0)



def _batch_below_len(m: re.Match, cfg: ServerConfig) -> Refusal:
    batch, length = (int(x) for x in m.groups())
    return Refusal(
        f"vLLM refused the launch: --max-num-batched-tokens {batch} is below --max-model-len {length}. Without "
        "chunked prefill a prompt is scheduled in one step, so a step's token budget must hold the longest prompt. "
        "A launch argument checked before any weight is loaded, not a memory shortage.",
        [FlagChange("--max-num-batched-tokens", str(batch), str(length),
                    "at least --max-model-len: a whole prompt fits one step without chunked prefill")],
        [f"Raise --max-num-batched-tokens to {length} or more, or add --enable-chunked-prefill (prompts are then "
         f"split over steps), or lower --max-model-len to {batch}."],
        {"max_num_batched_tokens": batch, "max_model_len": length})


def _batch_below_seqs(m: re.Match, cfg: ServerConfig) -> Refusal:
    batch, seqs = (int(x) for x in m.groups())
    return Refusal(
        f"vLLM refused the launch: --max-num-batched-tokens {batch} is below --max-num-seqs {seqs}. Every running "
        "sequence takes at least one token of a step's budget, so the budget must cover the sequence cap. A launch "
        "argument checked before any weight is loaded.",
        [FlagChange("--max-num-seqs", str(seqs), str(batch),
                    "no more sequences than tokens per step (or raise --max-num-batched-tokens instead)")],
        [f"Lower --max-num-seqs to {batch} or less, or raise --max-num-batched-tokens to at least {seqs}."],
        {"max_num_batched_tokens": batch, "max_num_seqs": seqs})


def _heads_tp(m: re.Match, cfg: ServerConfig) -> Refusal:
    heads, tp = (int(x) for x in m.groups())
    fit = tp_that_divides(heads, tp)
    return Refusal(
        f"vLLM refused the launch: the model's {heads} attention heads do not split evenly over "
        f"--tensor-parallel-size {tp}; each GPU of a tensor-parallel group holds heads ÷ tp of them. A layout "
        "argument checked before any weight is loaded.",
        [FlagChange("--tensor-parallel-size", str(tp), str(fit),
                    f"the largest size not above {tp} that divides {heads} heads")],
        [f"Use a --tensor-parallel-size that divides {heads} ({fit} here); to use more GPUs, combine it with "
         "--pipeline-parallel-size (tp × pp GPUs) rather than an uneven tp."],
        {"attention_heads": heads, "tensor_parallel_size": tp, "proposed_tensor_parallel_size": fit})


def _tp_gpus(m: re.Match, cfg: ServerConfig) -> Refusal:
    tp, gpus = (int(x) for x in m.groups())
    return Refusal(
        f"vLLM refused --tensor-parallel-size {tp}: this process sees {gpus} GPU(s) (CUDA_VISIBLE_DEVICES, the "
        "container's --gpus), and a single-node tensor-parallel group needs one GPU per rank. Checked before "
        "any weight is loaded.",
        [FlagChange("--tensor-parallel-size", str(tp), str(gpus), "no more ranks than visible GPUs")],
        [f"Expose {tp} GPUs to the server (CUDA_VISIBLE_DEVICES, docker --gpus) or lower --tensor-parallel-size "
         f"to {gpus} or a divisor of the model's attention heads below it; across nodes, start Ray first."],
        {"tensor_parallel_size": tp, "visible_gpus": gpus})


def _util_range(m: re.Match, cfg: ServerConfig) -> Refusal:
    given = float(m.group(1))
    # 30-100 reads as a percentage; anything else gets vLLM's default fraction
    new = f"{given / 100:.2f}" if 30 <= given <= 100 else "0.90"
    return Refusal(
        f"vLLM refused --gpu-memory-utilization {m.group(1)}: it is the fraction of each GPU's memory the engine "
        "may use (0 < u ≤ 1), not a percentage or a size. Checked before any weight is loaded.",
        [FlagChange("--gpu-memory-utilization", m.group(1), new, "a fraction of the GPU's memory, not a percentage")],
        [f"Pass a fraction: --gpu-memory-utilization {new}."],
        {"gpu_memory_utilization": given})


CHECKS: tuple[tuple[re.Pattern, Callable[[re.Match, ServerConfig], Refusal]], ...] = (
    (BATCH_BELOW_LEN, _batch_below_len), (BATCH_BELOW_SEQS, _batch_below_seqs), (HEADS_TP, _heads_tp),
    (TP_GPUS, _tp_gpus), (UTIL_RANGE, _util_range),
)


def detect(tl: Timeline) -> list[Finding]:
    return refusal_findings(tl, "VLLM-RUN-001", CHECKS)

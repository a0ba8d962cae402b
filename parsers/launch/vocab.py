"""Engine flag vocabularies: which names are SGLang's or vLLM's server arguments, and their aliases.

Command lines keep every flag they carry; text that is not a command (a sentence, a YAML recipe, a
Python call) is read against these lists so that ``--format=csv`` in a sentence about nvidia-smi or
``name: worker`` in a manifest is never taken for a server setting. Flags are canonical as the
engine writes them: SGLang's ``--tp`` → ``--tp-size``; vLLM's ``-tp`` → ``--tensor-parallel-size``.

>>> canonical("--tp", "sglang"), canonical("-tp", "vllm"), canonical("tensor_parallel_size", "vllm")
('--tp-size', '--tensor-parallel-size', '--tensor-parallel-size')
>>> engine_of_flag("--gpu-memory-utilization"), engine_of_flag("--hicache-size"), engine_of_flag("--dtype")
('vllm', 'sglang', None)
>>> known("--mem-fraction-static"), known("--format"), known("mem_fraction_static")
(True, False, True)

A command line is read the way the engine's argparse parser reads it (Python argparse docs, "Argument
abbreviations (prefix matching)": ``allow_abbrev`` is on by default, and neither engine turns it off): an
option string the engine registers is that option; a long option that is the prefix of exactly one option
string is that option; a prefix of several is an error (``ambiguous option: --pp could match …``), never a
guess. The option strings are every one the engines' releases register (``engine_options.json``):

>>> resolve("--nccl-init", "sglang"), resolve("--mem-frac=0.8".split("=")[0], "sglang").flag
(Resolved(flag='--dist-init-addr', how='prefix', candidates=()), '--mem-fraction-static')
>>> resolve("--pp", "sglang").how, resolve("--max_model_len", "vllm").flag, resolve("--cuda-graph-max-bs").how
('ambiguous', '--max-model-len', 'exact')
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

#: SGLang's spellings → the canonical long flag (server_args.py aliases and the short forms the docs use).
SGLANG_ALIASES: dict[str, str] = {
    "--tp": "--tp-size",
    "--tensor-parallel-size": "--tp-size",
    "--dp": "--dp-size",
    "--data-parallel-size": "--dp-size",
    "--pp": "--pp-size",  # in a sentence only: a command's --pp is ambiguous from 0.5.4 (``resolve``)
    "--pipeline-parallel-size": "--pp-size",
    "--ep": "--ep-size",
    "--expert-parallel-size": "--ep-size",
    "--model": "--model-path",
    "--enable-hicache": "--enable-hierarchical-cache",
    # abbreviations (argparse prefix matching, unique in every sampled release), for text that is not a command
    "--mem-frac": "--mem-fraction-static",
    "--mem-fraction": "--mem-fraction-static",
    # server_args.py: ``"--dist-init-addr", "--nccl-init-addr",  # For backward compatbility`` (0.3.x-0.5.x)
    "--nccl-init-addr": "--dist-init-addr",
}

#: vLLM's short and alternative spellings → its canonical long flag (vllm/engine/arg_utils.py).
VLLM_ALIASES: dict[str, str] = {
    "-tp": "--tensor-parallel-size",
    "--tp": "--tensor-parallel-size",
    "--tp-size": "--tensor-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "--pp": "--pipeline-parallel-size",
    "-dp": "--data-parallel-size",
    "--dp": "--data-parallel-size",
    "-q": "--quantization",
    "-O": "--compilation-config",
    "--model-path": "--model",
}

_COMMON = """
model-path tokenizer-path tokenizer-mode trust-remote-code dtype kv-cache-dtype quantization context-length
served-model-name chat-template revision host port download-dir load-format api-key seed random-seed
disable-custom-all-reduce enable-lora max-lora-rank tool-call-parser reasoning-parser
"""

SGLANG_ONLY = """
tp-size dp-size pp-size ep-size nnodes node-rank dist-init-addr mem-fraction-static max-running-requests
max-total-tokens chunked-prefill-size max-prefill-tokens schedule-policy schedule-conservativeness
cpu-offload-gb page-size stream-interval watchdog-timeout dist-timeout base-gpu-id gpu-id-step log-level
enable-metrics decode-log-interval load-balance-method attention-backend prefill-attention-backend
decode-attention-backend sampling-backend grammar-backend speculative-algorithm speculative-draft-model-path
speculative-num-steps speculative-num-draft-tokens speculative-eagle-topk disable-radix-cache
disable-cuda-graph disable-cuda-graph-padding enable-nccl-nvls enable-dp-attention enable-ep-moe
enable-deepep-moe deepep-mode moe-a2a-backend enable-torch-compile torch-compile-max-bs cuda-graph-max-bs
cuda-graph-max-bs-decode cuda-graph-bs enable-mixed-chunk enable-two-batch-overlap disable-overlap-schedule
enable-hierarchical-cache hicache-ratio hicache-size hicache-write-policy hicache-io-backend
hicache-mem-layout hicache-storage-backend enable-memory-saver allow-auto-truncate max-mamba-cache-size
swa-full-tokens-ratio disaggregation-mode skip-server-warmup enable-p2p-check triton-attention-reduce-in-fp32
num-continuous-decode-steps json-model-override-args lora-paths max-loras-per-batch mm-attention-backend
tokenizer-worker-num is-embedding skip-tokenizer-init enable-cache-report log-requests config
moe-runner-backend fp4-gemm-backend moe-dense-tp-size enable-dp-lm-head disaggregation-transfer-backend
"""

VLLM_ONLY = """
model tokenizer tensor-parallel-size pipeline-parallel-size data-parallel-size gpu-memory-utilization
max-model-len max-num-seqs max-num-batched-tokens swap-space block-size enforce-eager enable-prefix-caching
enable-chunked-prefill distributed-executor-backend enable-expert-parallel max-seq-len-to-capture
kv-cache-memory-bytes disable-log-requests speculative-config compilation-config num-gpu-blocks-override
max-cpu-loras limit-mm-per-prompt uvicorn-log-level preemption-mode num-scheduler-steps scheduling-policy
cuda-graph-sizes async-scheduling kv-transfer-config cpu-offload-gb
"""

def _flags(names: str) -> frozenset[str]:
    """Whitespace-separated names → long flags."""
    return frozenset("--" + f for f in names.split())


#: Flags that take no value (a bare mention in a sentence turns them on).
BOOLEAN = _flags("""
trust-remote-code enable-hierarchical-cache enable-hicache disable-radix-cache disable-cuda-graph
disable-cuda-graph-padding enable-nccl-nvls enable-dp-attention enable-ep-moe enable-deepep-moe
enable-torch-compile enable-mixed-chunk enable-two-batch-overlap disable-overlap-schedule enable-memory-saver
allow-auto-truncate enable-metrics skip-server-warmup enable-p2p-check triton-attention-reduce-in-fp32
enable-lora is-embedding skip-tokenizer-init enable-cache-report log-requests disable-custom-all-reduce
enforce-eager enable-prefix-caching enable-chunked-prefill enable-expert-parallel disable-log-requests
async-scheduling
""")

#: Flags whose value is text (a path, a backend name), not a number.
TEXT_VALUED = _flags("""
model-path model tokenizer tokenizer-path dtype kv-cache-dtype quantization served-model-name attention-backend
prefill-attention-backend decode-attention-backend sampling-backend grammar-backend speculative-algorithm
hicache-write-policy hicache-io-backend hicache-mem-layout hicache-storage-backend load-format
distributed-executor-backend schedule-policy deepep-mode moe-a2a-backend disaggregation-mode host
dist-init-addr chat-template tool-call-parser reasoning-parser config download-dir
""")

_SGLANG = _flags(_COMMON + SGLANG_ONLY)
_VLLM = _flags(_COMMON + VLLM_ONLY)
_COMMON_SET = _flags(_COMMON)


def _dashed(name: str) -> str:
    """``mem_fraction_static`` / ``--mem_fraction_static`` → ``--mem-fraction-static``; ``-tp`` kept."""
    if name.startswith("-") and not name.startswith("--"):
        return name
    return "--" + name.lstrip("-").replace("_", "-")


def canonical(name: str, engine: str | None = "sglang") -> str:
    """The canonical long flag of ``name`` (a flag, a snake_case key or a kebab key) for that engine."""
    flag = _dashed(name)
    if engine == "vllm":
        return VLLM_ALIASES.get(flag, flag)
    return SGLANG_ALIASES.get(flag, flag)


def known(name: str, engine: str | None = None, abbrev: bool = False) -> bool:
    """Is this a server argument of that engine (of either when None)? With ``abbrev`` (a command line's
    words), an abbreviation counts as the one option argparse reads it as (``resolve``).

    >>> known("--nccl-init"), known("--nccl-init", abbrev=True), known("--pp", "sglang", abbrev=True)
    (False, True, False)
    """
    if abbrev:
        return any(resolve(name, e).how in ("exact", "prefix", "alias") and known(resolve(name, e).flag, e)
                   for e in ((engine,) if engine else ("sglang", "vllm")))
    flag = _dashed(name)
    if engine in (None, "sglang") and SGLANG_ALIASES.get(flag, flag) in _SGLANG:
        return True
    return engine in (None, "vllm") and VLLM_ALIASES.get(flag, flag) in _VLLM


def engine_of_flag(name: str) -> str | None:
    """The engine that alone has this flag, or None when both (or neither) do."""
    flag = _dashed(name)
    s = SGLANG_ALIASES.get(flag, flag) in _SGLANG and flag not in _COMMON_SET
    v = VLLM_ALIASES.get(flag, flag) in _VLLM and flag not in _COMMON_SET
    if flag in ("--tp", "--dp", "--pp", "--model", "--tp-size", "--model-path", "--tensor-parallel-size",
                "--pipeline-parallel-size", "--data-parallel-size"):
        return None  # both engines accept these spellings
    if s and not v:
        return "sglang"
    if v and not s:
        return "vllm"
    return None


def is_boolean(flag: str) -> bool:
    return _dashed(flag) in BOOLEAN


def is_text_valued(flag: str) -> bool:
    return _dashed(flag) in TEXT_VALUED


# ---------------------------------------------------------------------------------------------
# command lines: argparse's reading


@cache
def engine_options(engine: str) -> dict[str, tuple[str, str]]:
    """Every option string the engine's launch parser registers → (first, last) sampled release that has it.

    Built by tools/build_engine_options.py from sglang python/sglang/srt/server_args.py::ServerArgs.add_cli_args
    (0.3.4-0.5.23, with srt/arg_groups/fields/*.py from 0.5.15) and vllm vllm/engine/arg_utils.py::EngineArgs.add_cli_args,
    vllm/entrypoints/openai/cli_args.py::make_arg_parser (0.2.0-0.33.0), the releases reference/sglang_formats.md and
    reference/vllm_formats.md were read from.

    >>> engine_options("sglang")["--nccl-init-addr"], "--tp" in engine_options("sglang")
    (('0.3.4', '0.5.23'), False)
    """
    data = json.loads(Path(__file__).with_name("engine_options.json").read_text(encoding="utf-8"))
    return {k: (v[0], v[1]) for k, v in data[engine]["options"].items()}


@dataclass(frozen=True)
class Resolved:
    """What the engine's parser makes of one option as written."""

    flag: str  # the canonical flag; the name as written (dashes for underscores) when unknown or ambiguous
    how: str  # exact | prefix | alias (a spelling of ours the engine does not register) | ambiguous | unknown
    candidates: tuple[str, ...] = ()  # the option strings an ambiguous prefix could be


def _long(name: str) -> str:
    """vLLM's FlexibleArgumentParser turns ``--a_b`` into ``--a-b`` before argparse (vllm vllm/utils.py::
    FlexibleArgumentParser.parse_args (0.5.5-0.9.1; vllm/utils/__init__.py to 0.11.0, vllm/utils/argparse_utils.py
    from 0.11.2)); SGLang's plain argparse would refuse them, but a config key or a paste means the same flag."""
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


@lru_cache(maxsize=4096)
def resolve(written: str, engine: str | None = "sglang") -> Resolved:
    """The option argparse reads for ``written`` (the part before any ``=``) in that engine's launch parser.

    >>> resolve("--tp", "sglang").flag, resolve("--tensor-par", "vllm").flag, resolve("-tp", "vllm").flag
    ('--tp-size', '--tensor-parallel-size', '--tensor-parallel-size')
    >>> resolve("--pp", "sglang").candidates
    ('--pp-async-batch-depth', '--pp-max-micro-batch-size', '--pp-size')
    """
    engine = "vllm" if engine == "vllm" else "sglang"
    aliases = VLLM_ALIASES if engine == "vllm" else SGLANG_ALIASES
    flag = _long(written)
    options = engine_options(engine)
    if flag in options:  # an exact option string wins over the longer ones it is a prefix of
        return Resolved(aliases.get(flag, flag), "exact")
    if flag.startswith("--") and len(flag) > 2:
        hits = tuple(sorted(o for o in options if o.startswith(flag)))
        if len(hits) == 1:
            return Resolved(aliases.get(hits[0], hits[0]), "prefix")
        if hits:  # argparse errors even when two aliases of one option match: it counts option strings
            return Resolved(flag, "ambiguous", hits)
    if flag in aliases:
        return Resolved(aliases[flag], "alias")
    return Resolved(flag, "unknown")

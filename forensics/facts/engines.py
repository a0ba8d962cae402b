"""What each inference engine calls the same thing: flag names, aliases and defaults, in one place.

Detectors reason about mechanisms (the fraction of GPU memory the engine takes, the ranks on a host,
the longest request); the engine decides which flag carries each. Ask here instead of spelling
``--mem-fraction-static`` or ``--gpu-memory-utilization`` in a detector:

>>> flag_for("vllm", "gpu_memory_fraction")
'--gpu-memory-utilization'
>>> flag_for("sglang", "tensor_parallel")
'--tp-size'
>>> canonical_flag("vllm", "-tp"), concept_of("vllm", "--max_model_len")
('--tensor-parallel-size', 'max_context')
>>> default_for("vllm", "max_concurrent", version=(0, 6, 3))
256
>>> engine_of_sources(["vllm", "free"])
'vllm'
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

ENGINES = ("sglang", "vllm")

Version = tuple[int, int, int]


@dataclass(frozen=True)
class Flag:
    """One engine's flag for a concept: its canonical spelling, aliases, unit and scope."""

    name: str
    aliases: tuple[str, ...] = ()
    unit: str = ""  # "fraction", "GiB", "GB", "tokens", "requests", "bool", "ranks"
    per: str = ""  # "gpu" (per rank / per GPU worker), "server", "request"
    note: str = ""


@dataclass(frozen=True)
class Default:
    """A default value valid from ``since`` (inclusive) up to ``until`` (exclusive); None = open."""

    value: Any
    since: Version | None = None
    until: Version | None = None
    note: str = ""

    def applies(self, version: Version | None) -> bool:
        if version is None:
            return True
        return (self.since is None or version >= self.since) and (self.until is None or version < self.until)


@dataclass(frozen=True)
class Engine:
    name: str
    flags: dict[str, Flag] = field(default_factory=dict)  # concept → flag
    defaults: dict[str, tuple[Default, ...]] = field(default_factory=dict)  # concept → defaults by version
    process_names: tuple[str, ...] = ()  # substrings of comm/args that name the engine's processes


#: Concepts both engines share. Each maps to one flag per engine (or none where the engine lacks it).
CONCEPTS = (
    "gpu_memory_fraction", "tensor_parallel", "pipeline_parallel", "data_parallel", "max_context",
    "max_concurrent", "max_batched_tokens", "host_kv_per_gpu", "cpu_offload_per_gpu", "eager",
    "graph_max_batch", "kv_cache_dtype", "kv_cache_bytes", "scheduler_steps", "parallel_loading_workers",
)

SGLANG = Engine(
    "sglang",
    flags={
        "gpu_memory_fraction": Flag("--mem-fraction-static", unit="fraction", per="gpu",
                                    note="weights + KV pool; activations and CUDA graphs live outside it"),
        "tensor_parallel": Flag("--tp-size", ("--tp", "--tensor-parallel-size"), unit="ranks"),
        # ``--pp`` is no spelling of it: a prefix of --pp-max-micro-batch-size too from 0.5.4, which argparse refuses
        "pipeline_parallel": Flag("--pp-size", ("--pipeline-parallel-size",), unit="ranks"),
        "data_parallel": Flag("--dp-size", ("--dp", "--data-parallel-size"), unit="ranks"),
        "max_context": Flag("--context-length", ("--context-len",), unit="tokens", per="request"),
        "max_concurrent": Flag("--max-running-requests", unit="requests", per="server"),
        "max_batched_tokens": Flag("--chunked-prefill-size", unit="tokens", per="server"),
        "host_kv_per_gpu": Flag("--hicache-size", unit="GB", per="gpu", note="10^9 bytes per scheduler rank"),
        "eager": Flag("--disable-cuda-graph", unit="bool"),
        "graph_max_batch": Flag("--cuda-graph-max-bs", unit="requests"),
        "kv_cache_dtype": Flag("--kv-cache-dtype"),
    },
    defaults={
        # what forensics/detectors assume for SGLang today
        "hicache_ratio": (Default(2.0, until=(0, 5, 19), note="the default up to 0.5.19"),),
        "tensor_parallel": (Default(1),),
    },
    process_names=("sglang", "sglang::"),
)

VLLM = Engine(
    "vllm",
    flags={
        "gpu_memory_fraction": Flag("--gpu-memory-utilization", unit="fraction", per="gpu",
                                    note="of each GPU's total memory: weights, activations, KV cache (and on "
                                         "0.18+ the CUDA-graph estimate); the rest stays free"),
        "tensor_parallel": Flag("--tensor-parallel-size", ("-tp",), unit="ranks"),
        "pipeline_parallel": Flag("--pipeline-parallel-size", ("-pp",), unit="ranks"),
        "data_parallel": Flag("--data-parallel-size", ("-dp",), unit="ranks"),
        "max_context": Flag("--max-model-len", unit="tokens", per="request",
                            note="0.8.5+: 32k = 32000, 32K = 32768"),
        "max_concurrent": Flag("--max-num-seqs", unit="requests", per="server"),
        "max_batched_tokens": Flag("--max-num-batched-tokens", unit="tokens", per="server"),
        "host_kv_per_gpu": Flag("--swap-space", unit="GiB", per="gpu",
                                note="pinned CPU KV blocks per GPU worker (V0); flag removed in 0.18"),
        "cpu_offload_per_gpu": Flag("--cpu-offload-gb", unit="GiB", per="gpu", note="weights in pinned host memory"),
        "eager": Flag("--enforce-eager", unit="bool"),
        "graph_max_batch": Flag("--max-seq-len-to-capture", unit="tokens",
                                note="V0 graphs only up to this context (0.4.3–0.10.2); graph batch sizes follow "
                                     "--max-num-seqs"),
        "kv_cache_dtype": Flag("--kv-cache-dtype"),
        "kv_cache_bytes": Flag("--kv-cache-memory-bytes", ("--kv-cache-memory",), unit="bytes", per="gpu"),
        "scheduler_steps": Flag("--num-scheduler-steps", unit="steps", note="V0 multi-step scheduling"),
        "parallel_loading_workers": Flag("--max-parallel-loading-workers", unit="workers"),
    },
    defaults={
        "gpu_memory_fraction": (Default(0.9),),
        "host_kv_per_gpu": (Default(4, until=(0, 18, 0), note="GiB per GPU worker"),),
        "cpu_offload_per_gpu": (Default(0),),
        "tensor_parallel": (Default(1),),
        "max_concurrent": (
            Default(256, until=(0, 8, 0), note="V0"),
            Default(1024, since=(0, 8, 0), until=(0, 8, 5), note="V1 0.8.0"),
            Default(None, since=(0, 8, 5),
                    note="1024 on GPUs with ≥ 70 GiB (not A100 from 0.9), else 256"),
        ),
        "max_batched_tokens": (
            Default(2048, until=(0, 8, 0), note="V0 with chunked prefill; max(max_model_len, 2048) without"),
            Default(None, since=(0, 8, 0), note="V1: 8192 (API server) on ≥ 70 GiB GPUs, else 2048"),
        ),
        "block_size": (Default(16),),
        "graph_max_batch": (Default(8192, since=(0, 4, 3), until=(0, 11, 0)),),
        "eager": (Default(False),),
    },
    process_names=("vllm", "VLLM::", "RayWorkerWrapper", "RayWorkerVllm", "RayWorkerProc"),
)

_BY_NAME = {"sglang": SGLANG, "vllm": VLLM}


def engine(name: str) -> Engine:
    """The engine's knowledge; KeyError for an engine we do not know."""
    return _BY_NAME[name.lower()]


def _norm(flag: str) -> str:
    """``--max_model_len`` → ``--max-model-len`` (vLLM accepts underscores); short aliases stay."""
    f = flag.strip()
    if f.startswith("--"):
        return "--" + f[2:].replace("_", "-")
    return f


def flag_for(engine_name: str, concept: str) -> str | None:
    """The engine's canonical flag for a concept, or None where the engine has no such flag."""
    f = engine(engine_name).flags.get(concept)
    return f.name if f else None


def flag_spec(engine_name: str, concept: str) -> Flag | None:
    return engine(engine_name).flags.get(concept)


def concept_of(engine_name: str, flag: str) -> str | None:
    """The concept a flag (any alias or spelling) carries in this engine.

    >>> concept_of("sglang", "--tp"), concept_of("vllm", "--mem-fraction-static")
    ('tensor_parallel', None)
    """
    f = _norm(flag)
    for concept, spec in engine(engine_name).flags.items():
        if f == spec.name or f in spec.aliases:
            return concept
    return None


def canonical_flag(engine_name: str, flag: str) -> str:
    """The canonical spelling of a flag (aliases and underscores resolved); unknown flags as given."""
    c = concept_of(engine_name, flag)
    return flag_for(engine_name, c) if c else _norm(flag)  # type: ignore[return-value]


def arg_key(flag: str) -> str:
    """The argparse dest of a flag: the key in ``non-default args`` / ``server_args`` dumps.

    >>> arg_key("--gpu-memory-utilization")
    'gpu_memory_utilization'
    """
    return flag.lstrip("-").replace("-", "_")


def default_for(engine_name: str, concept: str, version: Version | None = None) -> Any:
    """The engine's default for a concept at a version (the newest known when the version is unknown).

    None when the default depends on the hardware or is not known here.

    >>> default_for("vllm", "max_concurrent", version=(0, 8, 0))
    1024
    >>> default_for("vllm", "gpu_memory_fraction")
    0.9
    >>> default_for("vllm", "host_kv_per_gpu", version=(0, 20, 0)) is None
    True
    """
    options = engine(engine_name).defaults.get(concept, ())
    if version is None:
        return options[-1].value if options else None
    for d in options:
        if d.applies(version):
            return d.value
    return None


def value_for(engine_name: str, concept: str, values: dict[str, Any]) -> Any:
    """A concept's value from a dict of flags or args (``--flag`` or ``dest`` keys, any alias).

    >>> value_for("vllm", "tensor_parallel", {"-tp": "4"}), value_for("vllm", "max_context", {"max_model_len": 8192})
    ('4', 8192)
    """
    spec = flag_spec(engine_name, concept)
    if spec is None:
        return None
    for name in (spec.name, *spec.aliases):
        for key in (name, _norm(name), arg_key(name)):
            if key in values:
                return values[key]
    return None


def engine_of_sources(sources: Iterable[str | None]) -> str | None:
    """The engine whose log parser read these rows (the first engine named), or None.

    >>> engine_of_sources(["kernel", "sglang"]), engine_of_sources(["free"])
    ('sglang', None)
    """
    for s in sources:
        if s in _BY_NAME:
            return s
    return None


def engine_of_command(argv_or_text: str | Iterable[str]) -> str | None:
    """The engine a launch command starts (``vllm serve``, ``sglang.launch_server``, the docker image …).

    >>> engine_of_command("python -m vllm.entrypoints.openai.api_server --model m")
    'vllm'
    >>> engine_of_command(["python3", "-m", "sglang.launch_server", "--tp-size", "8"])
    'sglang'
    """
    text = argv_or_text if isinstance(argv_or_text, str) else " ".join(argv_or_text)
    low = text.lower()
    hits = {name: min((low.find(p.lower()) for p in e.process_names if p.lower() in low), default=-1)
            for name, e in _BY_NAME.items()}
    found = {k: v for k, v in hits.items() if v >= 0}
    return min(found, key=found.get) if found else None


def engine_of(rows: Iterable[dict[str, Any]]) -> str | None:
    """The engine of a set of timeline rows: a parser's source, else a launch command's ``engine`` attr or text.

    >>> engine_of([{"source": "free"}, {"source": "vllm", "kind": "kv_sizing"}])
    'vllm'
    >>> engine_of([{"source": "launch", "kind": "launch_command", "text": "vllm serve m -tp 2"}])
    'vllm'
    """
    rows = list(rows)
    e = engine_of_sources(r.get("source") for r in rows)
    if e:
        return e
    for r in rows:
        if r.get("kind") != "launch_command":
            continue
        a = r.get("attrs")
        if isinstance(a, str):
            try:
                a = json.loads(a)
            except ValueError:
                a = {}
        if isinstance(a, dict) and a.get("engine") in _BY_NAME:
            return a["engine"]
        e = engine_of_command(r.get("text") or "")
        if e:
            return e
    return None

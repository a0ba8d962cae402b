"""vLLM facts: a log's runs and the settings that apply to each.

Sources: reference/vllm_formats.md §1.3 (the process prefixes ``EngineCore``, ``VllmWorker``, ``Worker_TP1``,
``APIServer``).

Settings come from, in rising precedence: vLLM's defaults (``forensics.facts.engines``, marked assumed),
a ``vllm serve`` launch command, ``args: Namespace(...)`` / ``non-default args: {...}``, the engine's
config line, and the memory-profiling lines (which print the utilization actually used).

>>> s = VllmSettings()
>>> s.values["gpu_memory_utilization"] = 0.95
>>> s.num("gpu_memory_utilization"), s.num("max_num_seqs")
(0.95, None)
>>> s.text("gpu_memory_utilization")
'0.95'
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from forensics.facts import engines
from forensics.facts.launch import flag_key, launch_rows
from forensics.facts.rows import Row, attrs, rows, timeline_memo, to_number
from forensics.model import Timeline

VLLM_KINDS = (
    "engine_config", "server_args", "version", "weight_load_begin", "weight_load_end", "memory_profile",
    "kv_memory", "kv_no_room", "kv_sizing", "kv_concurrency", "kv_cache_too_small", "cuda_graph_begin",
    "cuda_graph_end", "cuda_graph_memory", "capture_progress", "preemption", "engine_metrics", "cuda_oom",
    "cuda_error_oom", "gpu_memory_short", "exception", "init_failed", "engine_dead", "rank_dead", "notice",
    "swap_space_too_large", "swap_exhausted", "rank_assigned", "server_ready", "cuda_error", "nccl_error",
    "memory_profiling_error", "progress_bar", "nccl_info", "shm_wait", "rpc_timeout", "host_pool",
    "engine_startup_wait", "ray_pg_wait",
)

#: config-line keys → argparse dests
_CONFIG_KEYS = {"max_seq_len": "max_model_len", "tensor_parallel_size": "tensor_parallel_size",
                "pipeline_parallel_size": "pipeline_parallel_size", "data_parallel_size": "data_parallel_size",
                "enforce_eager": "enforce_eager", "kv_cache_dtype": "kv_cache_dtype", "quantization": "quantization",
                "model": "model"}


@dataclass
class VllmSettings:
    """A run's settings by argparse dest (``gpu_memory_utilization``), with the row that said each."""

    values: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, Row] = field(default_factory=dict)
    engine_generation: str | None = None  # "V0" | "V1" | None

    def num(self, key: str) -> float | None:
        return to_number(self.values.get(flag_key(key)))

    def text(self, key: str) -> str | None:
        v = self.values.get(flag_key(key))
        if v is None:
            return None
        n = to_number(v)
        return f"{n:g}" if n is not None else str(v)

    def observed(self, key: str) -> bool:
        return flag_key(key) in self.origin

    def evidence_rows(self, *keys: str) -> list[Row]:
        return [self.origin[flag_key(k)] for k in keys if flag_key(k) in self.origin]

    def set(self, key: str, value: Any, row: Row) -> None:
        if value is not None:
            self.values[flag_key(key)] = value
            self.origin[flag_key(key)] = row

    def value_or_default(self, concept: str) -> tuple[float | None, bool]:
        """A concept's value and whether it was observed (False: vLLM's default, assumed)."""
        flag = engines.flag_for("vllm", concept)
        v = self.num(flag) if flag else None
        if v is not None:
            return v, True
        d = engines.default_for("vllm", concept)
        return (float(d) if isinstance(d, int | float) and not isinstance(d, bool) else None), False


#: vLLM's process prefixes, ``(EngineCore_DP0 pid=207) `` and kin (vllm_formats.md §0, failure_messages.md §0
#: "Per-line prefixes"): lines that carry one are vLLM's, even where the envelope layer peeled the prefix off
#: (it reads it as Ray's ``(actor pid=N)``) and the rest of the line was left to the failure scan
VLLM_PROCESS = re.compile(r"^(?:EngineCore|VllmWorker|VllmWorkerProcess|Worker_|Worker\b|APIServer|ApiServer|"
                          r"RayWorkerVllm|DPCoordinator)")


def vllm_files(tl: Timeline) -> set[str]:
    """Files that hold vLLM's own records, or lines under a vLLM process's prefix (read once per analysis:
    a dozen facts and detectors ask, and each answer scans the whole frame)."""
    memo = timeline_memo(tl)
    if "vllm_files" not in memo:
        memo["vllm_files"] = frozenset(_vllm_files(tl))
    return set(memo["vllm_files"])


def _vllm_files(tl: Timeline) -> set[str]:
    ev = tl.events
    if ev.is_empty() or "source" not in ev.columns:
        return set()
    files = set(ev.filter(pl.col("source") == "vllm").get_column("file").unique().to_list())
    if "container" in ev.columns and "envelope" in ev.columns:
        prefixed = ev.filter(pl.col("envelope").str.contains("ray", literal=True)
                             & pl.col("container").is_not_null()).select("file", "container").unique()
        files |= {f for f, c in prefixed.iter_rows() if VLLM_PROCESS.match(c or "")}
    return files | _bare_failures_of_vllm_launch(tl, ev)


def _bare_failures_of_vllm_launch(tl: Timeline, ev: pl.DataFrame) -> set[str]:
    """Files of bare failure lines (a traceback's tail, an allocator OOM pasted alone) when the input's only launch
    commands start vLLM and nothing in it is SGLang's: the failure is that vLLM server's (vllm_formats.md §1: a paste
    keeps the command and the last lines; the OOM line carries no engine prefix of its own)."""
    launches = launch_rows(tl)
    if not launches or not all(is_vllm_launch(r) for r in launches) or (ev.get_column("source") == "sglang").any():
        return set()
    return set(ev.filter(pl.col("source") == "failures").get_column("file").unique().to_list())


def vllm_runs(tl: Timeline) -> list[list[Row]]:
    """vLLM rows grouped by server run, each group in file then line order.

    A file with a start-up record (config line or args) is a launch log: its runs are its own. Files
    without one (per-rank worker logs, excerpts) are pooled by run index, as ranks of one launch, so
    the same failure on eight ranks is one finding.
    """
    files = vllm_files(tl)
    # failure lines the failure scan read in a vLLM log belong to its runs (parsers/failures.py)
    vrows = [r for r in rows(tl, *VLLM_KINDS, "failure") if r.get("source") == "vllm"
             or (r.get("source") == "failures" and r.get("file") in files)]
    launch_files = {r.get("file") for r in vrows if r.get("kind") in ("engine_config", "server_args")}
    groups: dict[tuple[str, int], list[Row]] = {}
    for r in vrows:
        f = r.get("file") or ""
        groups.setdefault((f if f in launch_files else "", int(r.get("run") or 0)), []).append(r)
    return [sorted(g, key=lambda r: (r.get("file") or "", r.get("line") or 0)) for _, g in sorted(groups.items())]


_VLLM_ONLY = ("--gpu-memory-utilization", "--max-model-len", "--max-num-seqs", "--swap-space", "--enforce-eager",
              "--num-scheduler-steps", "--cpu-offload-gb", "--max-num-batched-tokens")


def is_vllm_launch(row: Row) -> bool:
    """A launch command of vLLM: its engine attr, its program, else flags only vLLM has (a bare flag list)."""
    a = attrs(row)
    if a.get("engine") is not None:
        return a.get("engine") == "vllm"
    engine = engines.engine_of_command(row.get("text") or " ".join(a.get("argv") or []))
    if engine is not None:
        return engine == "vllm"
    return any(engines.canonical_flag("vllm", k) in _VLLM_ONLY for k in (a.get("flags") or {}))


def settings(tl: Timeline, run: list[Row]) -> VllmSettings:
    """The settings that apply to a run (its own config rows; the whole input's when it has none)."""
    s = VllmSettings()
    for row in launch_rows(tl):
        if not is_vllm_launch(row):
            continue
        for k, v in (attrs(row).get("flags") or {}).items():
            canon = engines.canonical_flag("vllm", k)
            s.set(canon, v, row)
    own = [r for r in run if r.get("kind") in ("server_args", "engine_config", "memory_profile")]
    if not own:
        own = [r for g in vllm_runs(tl) for r in g if r.get("kind") in ("server_args", "engine_config",
                                                                         "memory_profile")]
    for row in own:
        a = attrs(row)
        if row["kind"] == "server_args":
            for k, v in (a.get("args") or {}).items():
                s.set(k, v, row)
        elif row["kind"] == "engine_config":
            for k, dest in _CONFIG_KEYS.items():
                s.set(dest, (a.get("config") or {}).get(k), row)
            if a.get("engine"):
                s.engine_generation = a["engine"]
        elif a.get("gpu_memory_utilization") is not None:
            s.set("gpu_memory_utilization", a["gpu_memory_utilization"], row)
    for row in run:  # the API server's own account of values it resolved (absent from args when defaulted)
        a = attrs(row) if row.get("kind") == "notice" else {}
        for key in ("max_num_batched_tokens", "max_model_len"):
            if a.get(key) is not None and key not in s.values:
                s.set(key, a[key], row)
    if s.engine_generation is None:
        s.engine_generation = generation(run) or launch_generation(tl)
    return s


#: vLLM's image tag (``vllm/vllm-openai:v0.9.1``) or pip pin (``vllm==0.6.3``) in a launch
_VLLM_RELEASE = re.compile(r"vllm[\w/-]*(?::v?|==)(\d+)\.(\d+)")
#: settings only the V1 engine has: its KV connectors (``…ConnectorV1``, vLLM's ``OffloadingConnector``) and
#: the native offload size (0.11.2+)
_V1_ONLY = re.compile(r"ConnectorV1|OffloadingConnector|--kv[-_]offloading[-_]size")


def launch_generation(tl: Timeline) -> str | None:
    """V0 or V1 from the launch alone: the release (V1 the default from 0.8.0, the only engine from 0.11.0;
    ``VLLM_USE_V1=0`` keeps V0 on 0.8–0.10: vllm_formats.md §1) or a V1-only setting."""
    for row in reversed(launch_rows(tl)):
        if not is_vllm_launch(row):
            continue
        a = attrs(row)
        text = " ".join([row.get("text") or "", str(a.get("image") or ""), *(str(x) for x in a.get("argv") or [])])
        env = a.get("env") or {}
        if _V1_ONLY.search(text) or any(_V1_ONLY.search(f"{k} {v}") for k, v in (a.get("flags") or {}).items()):
            return "V1"
        m = _VLLM_RELEASE.search(text)
        if m:
            release = (int(m.group(1)), int(m.group(2)))
            off = str(env.get("VLLM_USE_V1", "")).strip("\"'") == "0"
            return "V1" if release >= (0, 11) or (release >= (0, 8) and not off) else "V0"
    return None


_V1_PROCESS = ("EngineCore", "VllmWorker rank", "Worker_", "APIServer", "ApiServer")


def generation(run: list[Row]) -> str | None:
    """V0 or V1, from what the run's lines look like (None when nothing says)."""
    for r in run:
        a = attrs(r)
        proc = a.get("process") or ""
        if any(proc.startswith(p) for p in _V1_PROCESS) or r.get("kind") == "kv_memory" \
                or (r.get("kind") == "kv_no_room" and a.get("reason") == "negative_kv_memory"):
            return "V1"
        if r.get("kind") == "memory_profile" and a.get("budget_bytes") is not None \
                or (r.get("kind") == "kv_sizing" and a.get("cpu_blocks") is not None) or r.get("kind") == "preemption":
            return "V0"
    return None


def of_kind(run: list[Row], *kinds: str) -> list[Row]:
    return [r for r in run if r.get("kind") in kinds]


def first_attr(run: list[Row], key: str, *kinds: str) -> tuple[Any, Row | None]:
    """The first value of an attr among rows of these kinds (any kind when none given)."""
    for r in run:
        if kinds and r.get("kind") not in kinds:
            continue
        v = attrs(r).get(key)
        if v is not None:
            return v, r
    return None, None


def gpu_total_bytes(tl: Timeline, run: list[Row]) -> tuple[int | None, Row | None, str]:
    """One GPU's total memory as the evidence states it: the profiling line, an OOM message, nvidia-smi."""
    v, r = first_attr(run, "total_gpu_bytes", "memory_profile", "gpu_memory_short")
    if v:
        return int(v), r, "vLLM's memory profiling line"
    for r in of_kind(run, "cuda_oom"):
        if r.get("total_bytes"):
            return int(r["total_bytes"]), r, "the CUDA OOM message"
    smi = [r for r in rows(tl, "gpu_memory") if r.get("total_bytes")]
    if smi:
        return int(min(r["total_bytes"] for r in smi)), smi[0], "nvidia-smi"
    return None, None, "unknown"

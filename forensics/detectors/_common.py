"""Helpers every detector shares: rows with their attrs, the server's configuration, the SGLang
version, order between events, the end of a run, snapshots, and building findings.

Detectors are pure: they read a :class:`~forensics.model.Timeline` and never touch files.

>>> to_number("0.93"), to_number(True), to_number("n/a")
(0.93, None, None)
>>> flag_key("--hicache-size"), flag_key("hicache_size")
('hicache_size', 'hicache_size')
>>> parse_version("v0.5.6.post2")
(0, 5, 6)
>>> fmt_gib(1 << 30), fmt_gb(48e9)
('1.00 GiB', '48.0 GB')
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from forensics import rules
from forensics.model import Evidence, Finding, FlagChange, Remediation, Timeline

GIB = 1 << 30
MIB = 1 << 20
MAX_EVIDENCE = 12

Row = dict[str, Any]

# ---------------------------------------------------------------------------------------------
# rows


def attrs(row: Row) -> dict[str, Any]:
    """The row's parsed attrs (cached on the row dict)."""
    cached = row.get("_attrs")
    if cached is None:
        raw = row.get("attrs")
        try:
            cached = json.loads(raw) if raw else {}
        except (TypeError, ValueError):
            cached = {}
        if not isinstance(cached, dict):
            cached = {}
        row["_attrs"] = cached
    return cached


def _row_key(r: Row) -> tuple:
    return (r.get("file") or "", r.get("line") or 0, r.get("kind") or "")


def _cache(tl: Timeline) -> dict[str, Any]:
    """Per-Timeline memo of converted rows: ~60 ``rows`` calls per analysis each turned the frame into
    dicts again. Keyed on the events frame itself, so a Timeline given new events is read afresh."""
    memo = tl.__dict__.get("_detector_cache")
    if memo is None or memo["frame"] is not tl.events:
        memo = {"frame": tl.events, "kinds": {}}
        tl.__dict__["_detector_cache"] = memo
    return memo


_REPEATED = ("kind", "file", "source", "rank", "ts_basis", "host", "comm")


def release(tl: Timeline) -> None:
    """Drop the rows converted for the analysis (the report reads the frame, not these)."""
    tl.__dict__.pop("_detector_cache", None)


def rows(tl: Timeline, *kinds: str) -> list[Row]:
    """Rows of these kinds as dicts, in a stable order: file, line, then kind.

    The list is the caller's own; the dicts are shared between calls (only ``attrs`` caches into them)."""
    frame = tl.events
    if frame.is_empty() or "kind" not in frame.columns:
        return []
    by_kind: dict[str, list[Row]] = _cache(tl)["kinds"]
    missing = [k for k in dict.fromkeys(kinds) if k not in by_kind]
    if missing:
        for k in missing:
            by_kind[k] = []
        # one str object per distinct file, kind, rank… instead of one per row: a big input's ~100k rows
        # weigh ~15% less
        shared: dict[str, str] = _cache(tl).setdefault("strings", {})
        for r in frame.filter(pl.col("kind").is_in(missing)).iter_rows(named=True):
            for c in _REPEATED:
                v = r.get(c)
                if v is not None:
                    r[c] = shared.setdefault(v, v)
            by_kind[r["kind"]].append(r)
        for k in missing:  # stable: rows of one kind tied on (file, line) keep the frame's order
            by_kind[k].sort(key=_row_key)
    wanted = list(dict.fromkeys(kinds))
    if len(wanted) == 1:
        return list(by_kind[wanted[0]])
    out = [r for k in wanted for r in by_kind[k]]
    out.sort(key=_row_key)
    return out


def evidence(row: Row, text: str | None = None) -> Evidence:
    return Evidence.from_row(row, text)


def evidence_list(items: Iterable[Row | Evidence], limit: int = MAX_EVIDENCE) -> list[Evidence]:
    """Deduplicated evidence sorted by file and line, at most ``limit`` items."""
    seen: dict[tuple[str, int], Evidence] = {}
    for it in items:
        ev = it if isinstance(it, Evidence) else evidence(it)
        seen.setdefault((ev.file, ev.line), ev)
    return [seen[k] for k in sorted(seen)][:limit]


def to_number(value: Any) -> float | None:
    """A flag or arg value as a float; None for bools, None and text that is not a number."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        return None


def flag_key(name: str) -> str:
    """``--hicache-size`` and ``hicache_size`` → ``hicache_size``."""
    return name.lstrip("-").replace("-", "_")


def flag_name(key: str) -> str:
    return "--" + key.replace("_", "-")


def rank_of(row: Row) -> int | None:
    """The scheduler's TP rank, from the column or the printed label."""
    if row.get("tp_rank") is not None:
        return int(row["tp_rank"])
    m = re.search(r"TP(\d+)", row.get("rank") or "")
    return int(m.group(1)) if m else None


def rank_label(row: Row) -> str | None:
    return row.get("rank") or (f"TP{row['tp_rank']}" if row.get("tp_rank") is not None else None)


# ---------------------------------------------------------------------------------------------
# order between events


def before(a: Row, b: Row) -> bool | None:
    """Is ``a`` earlier than ``b``? Same file: by line; else by UTC stamp; None when unknowable."""
    if a.get("file") is not None and a.get("file") == b.get("file"):
        return (a.get("line") or 0) < (b.get("line") or 0)
    ta, tb = a.get("ts"), b.get("ts")
    if isinstance(ta, datetime) and isinstance(tb, datetime):
        return ta < tb
    return None


# ---------------------------------------------------------------------------------------------
# runs and configuration


def run_groups(sglang_rows: list[Row]) -> dict[tuple[str | None, int], list[Row]]:
    """Group SGLang rows by server run.

    A file that holds a ``server_args`` dump is one launch log: its runs are its own. Files
    without one (per-rank logs, fragments) are pooled by run index, as ranks of one launch.
    """
    files = launch_files(sglang_rows)
    groups: dict[tuple[str | None, int], list[Row]] = {}
    for r in sglang_rows:
        groups.setdefault(run_key(r, files), []).append(r)
    return groups


def launch_files(sglang_rows: list[Row]) -> set[str]:
    return {r["file"] for r in sglang_rows if r.get("kind") == "server_args"}


def run_key(row: Row, files: set[str]) -> tuple[str | None, int]:
    """The run a row belongs to, as :func:`run_groups` keys it."""
    return (row["file"] if row.get("file") in files else None, int(row.get("run") or 0))


@dataclass
class RunRef:
    """One server run: its key, its index in the file, its first row, and whether it needs naming."""

    key: tuple[str | None, int]
    index: int
    first: Row
    multi: bool  # its file (or the pool of rank logs) holds more than one run

    @property
    def started(self) -> str:
        return f"{self.first.get('file')}:{self.first.get('line')}"

    def order(self) -> tuple:
        """Later runs sort higher: by the first row's UTC stamp when known, else by run index."""
        ts = self.first.get("ts")
        return (ts.timestamp() if isinstance(ts, datetime) else float("-inf"), self.index,
                self.first.get("file") or "", self.first.get("line") or 0)


def run_refs(runs: dict[tuple[str | None, int], list[Row]]) -> dict[tuple[str | None, int], RunRef]:
    per_file: dict[str | None, int] = {}
    for key in runs:
        per_file[key[0]] = per_file.get(key[0], 0) + 1
    return {key: RunRef(key, key[1], min(rs, key=lambda r: (r.get("file") or "", r.get("line") or 0)),
                        per_file[key[0]] > 1)
            for key, rs in runs.items()}


def tag_run(finding: Finding, ref: RunRef | None) -> Finding:
    """Name the run a finding is about when its log holds several (figures + the summary's first words)."""
    if ref is None or not ref.multi:
        return finding
    finding.figures["run"] = ref.index
    finding.figures["run_started"] = ref.started
    finding.summary = f"Run {ref.index} (started {ref.started}): {finding.summary}"
    return finding


class Run(list):
    """One server run's rows in order, with where each kind's rows are: a big input's run holds tens of
    thousands of batch rows, and detectors looking for a few start-up records should not walk them all."""

    def __init__(self, rows: list[Row], index: dict[str, list[int]]) -> None:
        super().__init__(rows)
        self.index = index
        self.n = len(rows)


def _kind_index(rows: list[Row]) -> dict[str, list[int]]:
    index: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        index.setdefault(r.get("kind") or "", []).append(i)
    return index


def of_kind(run: list[Row], *kinds: str) -> list[Row]:
    """The rows of ``run`` of these kinds, in run order (through the run's index when it has one)."""
    if isinstance(run, Run) and len(run) == run.n:
        if len(kinds) == 1:
            return [run[i] for i in run.index.get(kinds[0], ())]
        pos = sorted(i for k in dict.fromkeys(kinds) for i in run.index.get(k, ()))
        return [run[i] for i in pos]
    return [r for r in run if r.get("kind") in kinds]


def has_kind(run: list[Row], *kinds: str) -> bool:
    """Whether ``run`` holds a row of one of these kinds."""
    if isinstance(run, Run) and len(run) == run.n:
        return any(run.index.get(k) for k in kinds)
    return any(r.get("kind") in kinds for r in run)


def iter_runs(tl: Timeline) -> list[tuple[RunRef, list[Row]]]:
    """Every SGLang run with its reference, in the order :func:`sglang_runs` gives them."""
    runs = sglang_runs(tl)
    memo = _cache(tl)
    refs = memo.get("run_refs")
    if refs is None:  # each ref scans its whole run for the first row
        refs = memo["run_refs"] = run_refs(runs)
    indexes = memo.setdefault("run_index", {})
    out = []
    for k, rs in runs.items():
        if k not in indexes:
            indexes[k] = _kind_index(rs)
        out.append((refs[k], Run(rs, indexes[k])))
    return out


SGLANG_KINDS = (
    "server_args", "weight_load_begin", "weight_load_end", "kv_cache_allocated", "memory_pool_end",
    "cuda_graph_begin", "cuda_graph_end", "kv_sizing", "hicache_alloc", "hicache_insufficient",
    "server_ready", "prefill_batch", "decode_batch", "retract", "kv_exhausted", "scheduler_exception",
    "cuda_oom", "cuda_error_oom", "cuda_graph_failed", "not_enough_memory", "weights_no_kv_room",
    "ranks_not_loaded", "watchdog_timeout", "sigquit", "rank_dead", "subprocess_crashed", "sigterm",
    "init_failed", "memory_imbalance", "dist_init_begin", "dist_init_end", "nccl_watchdog", "health_check_failed",
    "failure", "notice", "capture_progress", "cuda_graph_bs", "progress_bar",
)
#: Sources whose rows belong to a server run: the engine's own parser, and failure lines found in its
#: log or in a fragment beside it (``parsers.failures``)
RUN_SOURCES = (None, "sglang", "failures", "prose")


def sglang_runs(tl: Timeline) -> dict[tuple[str | None, int], list[Row]]:
    memo = _cache(tl)
    runs = memo.get("sglang_runs")
    if runs is None:
        # "prose": a configuration and the figures a write-up states (parsers/launch_prose.py), as runs of their own file
        from ._vllm import vllm_files

        vfiles = vllm_files(tl)  # failure lines in a vLLM log are that engine's runs, not SGLang's
        runs = run_groups([r for r in rows(tl, *SGLANG_KINDS) if r.get("source") in RUN_SOURCES
                           and not (r.get("source") == "failures" and r.get("file") in vfiles)])
        memo["sglang_runs"] = runs
    return {k: list(v) for k, v in runs.items()}  # callers may reorder or extend their lists


@dataclass
class ServerConfig:
    """Server settings: launch flags overlaid by the resolved ``server_args`` of the run."""

    values: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, Row] = field(default_factory=dict)  # key → the row that said it
    has_server_args: bool = False
    has_launch: bool = False

    def get(self, key: str) -> Any:
        return self.values.get(flag_key(key))

    def num(self, key: str) -> float | None:
        return to_number(self.get(key))

    def flag_text(self, key: str) -> str | None:
        v = self.get(key)
        if v is None:
            return None
        n = to_number(v)
        if n is not None:
            return f"{n:g}"
        return str(v)

    def enabled(self, key: str) -> bool:
        v = self.get(key)
        return v is True or str(v).lower() in ("true", "1", "yes")

    def evidence_rows(self, *keys: str) -> list[Row]:
        return [stated_row(self.origin[flag_key(k)], flag_key(k)) for k in keys if flag_key(k) in self.origin]

    def from_prose(self, *keys: str) -> list[Row]:
        """The rows behind these settings that were read from sentences, not from a command or a log."""
        return [r for r in self.evidence_rows(*keys) if is_prose(r)]


def is_prose(row: Row) -> bool:
    """A row read from a sentence (parsers/launch_prose.py): weaker than program output."""
    return row.get("source") == "prose" or attrs(row).get("confidence") == "prose"


def stated_row(row: Row, key: str) -> Row:
    """For a configuration read from prose, the sentence that stated ``key`` (its own file:line) as evidence."""
    mention = (attrs(row).get("mentions") or {}).get(flag_name(key)) if is_prose(row) else None
    if not isinstance(mention, dict) or not isinstance(mention.get("line"), int):
        return row
    return {**row, "line": mention["line"], "line_end": mention["line"], "text": str(mention.get("text") or "")}


def gpu_capacity(tl: Timeline, run: list[Row], ooms: list[Row] | None = None) -> tuple[float | None, str]:
    """A GPU's total memory and where it came from: a CUDA OOM message, nvidia-smi, else the known memory of a
    GPU model the input names (parsers/gpu_models.py); the smallest when they differ."""
    totals = [r["total_bytes"] for r in (ooms if ooms is not None else of_kind(run, "cuda_oom")) if r.get("total_bytes")]
    if totals:
        return float(min(totals)), "the GPU's total capacity in the CUDA OOM message"
    smi = [r["total_bytes"] for r in rows(tl, "gpu_memory") if r.get("total_bytes")]
    if smi:
        return float(min(smi)), "nvidia-smi total memory"
    named = [r for r in rows(tl, "gpu_model") if r.get("total_bytes")]
    if named:
        r = min(named, key=lambda x: x["total_bytes"])
        return float(r["total_bytes"]), f"the known memory of the {attrs(r).get('model')} the input names"
    return None, "unknown"


def launch_rows(tl: Timeline) -> list[Row]:
    return rows(tl, "launch_command")


def server_config(tl: Timeline, run_rows: list[Row] | None = None) -> ServerConfig:
    """The configuration that applies to a run (or to the input when ``run_rows`` is None)."""
    cfg = ServerConfig()
    launches = launch_rows(tl)
    if launches:
        row = launches[-1]
        cfg.has_launch = True
        for k, v in (attrs(row).get("flags") or {}).items():
            cfg.values[flag_key(k)] = v
            cfg.origin[flag_key(k)] = row
    pool = run_rows if run_rows is not None else rows(tl, "server_args")
    dumps = [r for r in pool if r.get("kind") == "server_args"]
    if dumps:
        row = dumps[-1]
        args = attrs(row).get("args") or {}
        if isinstance(args, dict):
            cfg.has_server_args = True
            for k, v in args.items():
                if v is not None:
                    cfg.values[flag_key(k)] = v
                    cfg.origin[flag_key(k)] = row
    return cfg


def docker_memory_limit(tl: Timeline) -> tuple[int, Row] | None:
    for row in reversed(launch_rows(tl)):
        # docker/compose, and any container or job limit (Kubernetes limits.memory, #SBATCH --mem)
        limit = attrs(row).get("docker_memory_bytes") or attrs(row).get("container_memory_bytes")
        if isinstance(limit, int | float) and limit > 0:
            return int(limit), row
    # a limit stated outside the launch (the cgroup's memory.max, kubectl describe's Limits): the tightest
    stated = [r for r in rows(tl, "container_memory_limit") if isinstance(r.get("bytes"), int | float) and r["bytes"] > 0]
    if stated:
        row = min(stated, key=lambda r: r["bytes"])
        return int(row["bytes"]), row
    return None


def ranks_per_host(cfg: ServerConfig, seen_ranks: int = 0) -> tuple[int, str]:
    """Scheduler processes per host: the larger of ranks seen and what the parallel sizes imply."""
    tp = int(cfg.num("tp_size") or 1)
    pp = int(cfg.num("pp_size") or 1)
    dp = int(cfg.num("dp_size") or 1)
    nnodes = max(int(cfg.num("nnodes") or 1), 1)
    gpus = tp * pp * (1 if cfg.enabled("enable_dp_attention") else dp)
    by_args = max(gpus // nnodes, 1)
    known = cfg.get("tp_size") is not None
    if seen_ranks > by_args or not known:
        if seen_ranks:
            return seen_ranks, f"{seen_ranks} ranks seen in the log"
        return 1, "no rank count known (assumed 1)"
    how = f"tp {tp}" + (f" × pp {pp}" if pp > 1 else "") + (f" × dp {dp}" if gpus > tp * pp else "")
    how += f" ÷ {nnodes} nodes" if nnodes > 1 else ""
    return by_args, how


# ---------------------------------------------------------------------------------------------
# SGLang version


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    if not text:
        return None
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


_IMAGE_TAG_RE = re.compile(r"sglang[^\s:@]*:v?(\d+\.\d+\.\d+)")


def sglang_version(tl: Timeline) -> tuple[tuple[int, int, int] | None, str | None]:
    """The exact SGLang version and where it came from, when the input says."""
    f = tl.facts
    for text, where in ((f.sglang_version, "version facts"), (f.versions.get("sglang"), "version facts")):
        v = parse_version(text)
        if v:
            return v, where
    for row in rows(tl, "version"):
        a = attrs(row)
        if str(a.get("component", "")).lower() == "sglang":
            v = parse_version(a.get("version"))
            if v:
                return v, f"{row.get('file')}:{row.get('line')}"
    for row in launch_rows(tl):
        m = _IMAGE_TAG_RE.search(row.get("text") or "") or _IMAGE_TAG_RE.search(" ".join(attrs(row).get("argv") or [])) \
            or _IMAGE_TAG_RE.search(str(attrs(row).get("image") or ""))  # a manifest's container image
        if m:
            return parse_version(m.group(1)), "docker image tag"
    return None, None


# Log-format markers that bound the version when it is not stated (sglang_formats.md §1–§7).
_VERSION_MARKERS: tuple[tuple[str, str, tuple[int, int, int] | None, tuple[int, int, int] | None], ...] = (
    ("hicache_alloc", r"hierarchical KV host pool", (0, 5, 18), None),
    ("hicache_alloc", r"host memory for hierarchical KV cache", None, (0, 5, 15)),
    ("prefill_batch", r"^Prefill batch, ", (0, 5, 5), None),
    ("decode_batch", r"^Decode batch, ", (0, 5, 5), None),
    ("prefill_batch", r"^Prefill batch\. ", None, (0, 5, 3)),
    ("decode_batch", r"^Decode batch\. ", None, (0, 5, 3)),
    ("weight_load_end", r"Load weight end\. elapsed=", (0, 5, 9), None),
    ("kv_cache_allocated", r"dtype: ", (0, 5, 15), None),
    ("rank_dead", r"died during initialization", (0, 5, 10), None),
    ("rank_dead", r"scheduler is dead", None, (0, 5, 9)),
)


def version_window(tl: Timeline) -> tuple[tuple[int, int, int] | None, tuple[int, int, int] | None]:
    """Lower and upper bounds on the SGLang version implied by the log's line formats."""
    memo = _cache(tl)
    if "version_window" in memo:
        return memo["version_window"]
    lo: tuple[int, int, int] | None = None
    hi: tuple[int, int, int] | None = None
    for row in rows(tl, "server_args"):
        if attrs(row).get("form") == "dict":
            lo = max(lo or (0, 0, 0), (0, 5, 19))
    frame = tl.events
    for kind, pattern, low, high in _VERSION_MARKERS:
        if frame.is_empty():
            break
        # column-wise: a big input holds tens of thousands of batch rows; _message's first line and
        # prefix, then the marker, as for one row
        texts = frame.filter(pl.col("kind") == kind).get_column("text").fill_null("")
        body = texts.str.extract(_FIRST_LINE, 1).str.replace(_PREFIX_RX, "")
        if body.str.contains(pattern).any():
            if low:
                lo = max(lo or (0, 0, 0), low)
            if high:
                hi = min(hi or (99, 0, 0), high)
    memo["version_window"] = (lo, hi)
    return lo, hi


#: The first line as str.splitlines() cuts it, and the ``[stamp rank]`` prefix _message strips.
_FIRST_LINE = "^([^\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]*)"
_PREFIX_RX = r"^\s*\[[^\]]*\]\s*"


def _message(text: str) -> str:
    """The record text without its ``[stamp rank]`` prefix."""
    first = text.splitlines()[0] if text else ""
    return re.sub(_PREFIX_RX, "", first)


def version_text(v: tuple[int, int, int] | None) -> str:
    return ".".join(map(str, v)) if v else "unknown"


# ---------------------------------------------------------------------------------------------
# the end of a run: kills and crashes


KILL_RE = re.compile(
    r"\b(?:pkill|killall|kill\s+-\S+|kill\s+\d+|fuser\s+(?:-\S+\s+)*-k|docker\s+(?:kill|stop|rm\s+-f)|"
    r"podman\s+(?:kill|stop)|pct\s+(?:exec\b.*\bkill|stop|shutdown|reboot)|systemctl\s+(?:stop|restart)\s+\S*sglang|"
    r"kubectl\s+delete\s+pod)"
)
END_KINDS = ("sigquit", "rank_dead", "scheduler_exception", "subprocess_crashed", "sigterm", "init_failed")


@dataclass
class CommandRef:
    """A command typed in a transcript: a ``command`` row or a parsed segment's command."""

    file: str
    line: int
    text: str
    ts: Any = None

    def as_row(self) -> Row:
        return {"file": self.file, "line": self.line, "ts": self.ts, "text": self.text, "kind": "command"}


def commands(tl: Timeline) -> list[CommandRef]:
    """Every command we know was typed, in file/line order."""
    out: dict[tuple[str, int, str], CommandRef] = {}
    for row in rows(tl, "command"):
        text = str(attrs(row).get("command") or row.get("text") or "")
        out[(row["file"], int(row["line"]), text)] = CommandRef(row["file"], int(row["line"]), text, row.get("ts"))
    known = {(f, t) for f, _, t in out}
    for art in tl.artifacts:
        for seg in art.segments or []:
            cmd = seg.get("command")
            if cmd and (art.path, str(cmd)) not in known:
                line = max(int(seg.get("start_line") or 1) - 1, 1)
                out[(art.path, line, str(cmd))] = CommandRef(art.path, line, str(cmd))
    return [out[k] for k in sorted(out)]


def kill_commands(tl: Timeline) -> list[CommandRef]:
    return [c for c in commands(tl) if KILL_RE.search(c.text)]


def is_sglang_process(comm: Any, args: Any = None) -> bool:
    c = str(comm or "").lower()
    return c.startswith("sglang") or "sglang" in str(args or "").lower()


def end_events(tl: Timeline) -> list[Row]:
    """Moments the server stopped: kill commands, SGLang's own death lines, OOM kills of SGLang."""
    out = [c.as_row() for c in kill_commands(tl)]
    out += rows(tl, *END_KINDS)
    out += [r for r in rows(tl, "oom_kill") if is_sglang_process(r.get("comm"), attrs(r).get("args"))
            or (r.get("comm") or "").startswith("python")]
    out += _server_gone_markers(tl)
    out.sort(key=lambda r: (r.get("file") or "", r.get("line") or 0))
    return out


def _server_gone_markers(tl: Timeline) -> list[Row]:
    """A ps snapshot without any SGLang process, on an input where SGLang ran: the server was gone."""
    if not (launch_rows(tl) or sglang_runs(tl)):
        return []
    out = []
    for snap in group_snapshots(rows(tl, "process")):
        if not any(is_sglang_process(r.get("comm"), attrs(r).get("args")) and attrs(r).get("state") not in ("Z", "X")
                   for r in snap):
            out.append(min(snap, key=lambda r: r.get("line") or 0))
    return out


def launch_moments(tl: Timeline) -> list[Row]:
    """Launch commands, typed or written, and the first line of each SGLang run.

    A configuration told in prose is no moment: a write-up's order of sentences is not the order of events."""
    out = [r for r in launch_rows(tl) if not is_prose(r)]
    out += [c.as_row() for c in commands(tl)
            if re.search(r"sglang\.launch_server|sglang\s+serve", c.text)]
    for run in sglang_runs(tl).values():
        first = min(run, key=lambda r: (r.get("line") or 0))
        if not is_prose(first):
            out.append(first)
    return out


def last_end_before(ends: list[Row], row: Row) -> Row | None:
    """The latest end event known to precede ``row``."""
    found = [e for e in ends if before(e, row) or (e.get("kind") == "process" and same_moment(e, row))]
    if not found:
        return None
    same_file = [e for e in found if e.get("file") == row.get("file")]
    pool = same_file or found
    if same_file:
        return max(pool, key=lambda e: e.get("line") or 0)
    return max(pool, key=lambda e: e["ts"].timestamp() if isinstance(e.get("ts"), datetime) else float("-inf"))


def same_moment(a: Row, b: Row, tolerance_s: float = 120.0) -> bool:
    """Collected together: the same snapshot ordinal in a bundle, or stamps within ``tolerance_s``."""
    if a.get("snapshot") is not None and a.get("snapshot") == b.get("snapshot") and a.get("file") != b.get("file"):
        return True
    ta, tb = a.get("ts"), b.get("ts")
    return isinstance(ta, datetime) and isinstance(tb, datetime) and abs((ta - tb).total_seconds()) <= tolerance_s


def relaunched_between(tl: Timeline, start: Row, end: Row) -> bool:
    """Was the server launched again after ``start`` and before ``end``?"""
    return any(before(start, m) and before(m, end) for m in launch_moments(tl))


# ---------------------------------------------------------------------------------------------
# snapshots


def snapshot_key(row: Row) -> tuple[str, int]:
    return (row.get("file") or "", int(row["snapshot"]) if row.get("snapshot") is not None else -1)


def group_snapshots(snap_rows: list[Row]) -> list[list[Row]]:
    """Rows of one snapshot together, snapshots in file/line order."""
    groups: dict[tuple[str, int], list[Row]] = {}
    for r in snap_rows:
        groups.setdefault(snapshot_key(r), []).append(r)
    out = list(groups.values())
    out.sort(key=lambda g: (g[0].get("file") or "", min(r.get("line") or 0 for r in g)))
    return out


def live_sglang_processes(tl: Timeline) -> list[Row]:
    return [r for r in rows(tl, "process")
            if is_sglang_process(r.get("comm"), attrs(r).get("args")) and attrs(r).get("state") not in ("Z", "X")]


# ---------------------------------------------------------------------------------------------
# findings


def make_finding(
    rule_id: str,
    *,
    summary: str,
    evidence: Iterable[Row | Evidence],
    confidence: str = "high",
    confidence_reason: str | None = None,
    severity: str | None = None,
    ranks: Iterable[int] = (),
    gpus: Iterable[int] = (),
    figures: dict[str, Any] | None = None,
    flags: Iterable[FlagChange] = (),
    actions: Iterable[str] = (),
) -> Finding:
    """A finding whose category, title and default severity come from the catalog."""
    rule = rules.get(rule_id)
    return Finding(
        rule_id=rule.id,
        category=rule.category,
        severity=severity or rule.severity,
        title=rule.title,
        summary=summary,
        confidence=confidence,
        evidence=evidence_list(evidence),
        ranks=sorted({int(r) for r in ranks}),
        gpus=sorted({int(g) for g in gpus}),
        figures={k: v for k, v in (figures or {}).items() if v is not None},
        remediation=Remediation(flags=list(flags), actions=list(actions)),
        confidence_reason=confidence_reason,
    )


def fmt_gib(n: float | None) -> str:
    return "?" if n is None else f"{n / GIB:.2f} GiB"


def fmt_gb(n: float | None) -> str:
    return "?" if n is None else f"{n / 1e9:.1f} GB"


def weakest(*levels: str) -> str:
    order = ("high", "medium", "low")
    return max(levels, key=order.index)

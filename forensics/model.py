"""The objects that pass between the pipeline's stages: the timeline and the findings.

parsers → :class:`Timeline` (events + facts + coverage) → detectors → :class:`Finding` → report.
Findings serialise to DESIGN.md §4 (``findings.json`` schema_version 1).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import polars as pl

from parsers.schema import row_attrs

SEVERITIES = ("critical", "high", "medium", "low", "info")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}  # 0 = worst
CATEGORIES = (
    "per_rank_overallocation",
    "cuda_graph_headroom",
    "stranded_context",
    "host_memory_not_reclaimed",
    "kernel_oom_killer",
    "xid",
    "nccl_timeout",
    "kv_cache_capacity",
    "weights_do_not_fit",
    "other",
)
CONFIDENCES = ("high", "medium", "low")


@dataclass
class HostFacts:
    """What one host's evidence says about that host (several hosts: one per node of the incident)."""

    name: str
    how: str = "content"  # how the host was named: --host | manifest | content | folder
    input_paths: list[str] = field(default_factory=list)
    collected_at: datetime | None = None  # UTC
    utc_offset_s: int | None = None
    tz_assumed: str | None = None
    boot_time: datetime | None = None  # UTC
    sglang_version: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    gaps: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    manifest: dict[str, Any] | None = None
    tag: str | None = None  # the incident tag of its bundle (``forensics collect --tag``)
    #: estimated offset of this host's clock from the reference host's, from events both saw (None: not known)
    clock_skew_s: float | None = None
    clock_skew_from: str | None = None
    files: list[str] = field(default_factory=list)  # the timeline's file names that are this host's
    #: nnodes, node rank, parallel sizes, ranks per node and ranks seen (forensics.detectors.multihost)
    topology: dict[str, Any] = field(default_factory=dict)
    ram_bytes: int | None = None  # the largest total a free/meminfo snapshot showed
    gpus: list[int] = field(default_factory=list)  # GPU indexes nvidia-smi listed
    gpu_memory_bytes: int | None = None  # one GPU's memory
    container_limit_bytes: int | None = None  # a docker/k8s/Slurm memory limit of the launch

    def as_dict(self) -> dict[str, Any]:
        """This host's facts for findings.json ``input.hosts`` (no manifest, no file list: those are elsewhere)."""
        return {
            "how": self.how, "paths": list(self.input_paths), "collected_at": iso_z(self.collected_at),
            "utc_offset_s": self.utc_offset_s, "boot_time": iso_z(self.boot_time),
            "sglang_version": self.sglang_version, "versions": dict(sorted(self.versions.items())),
            "gaps": list(self.gaps), "tag": self.tag, "clock_skew_s": self.clock_skew_s,
            "clock_skew_from": self.clock_skew_from, "topology": dict(self.topology), "ram_bytes": self.ram_bytes,
            "gpus": list(self.gpus), "gpu_memory_bytes": self.gpu_memory_bytes,
            "container_limit_bytes": self.container_limit_bytes,
        }


@dataclass
class Facts:
    """What we know about the input as a whole, beyond its events."""

    input_paths: list[str] = field(default_factory=list)
    host: str | None = None
    collected_at: datetime | None = None  # UTC
    utc_offset_s: int | None = None  # host's offset from UTC, when the input says
    tz_assumed: str | None = None  # the zone assumed for naive local stamps when the offset is unknown
    boot_time: datetime | None = None  # UTC
    sglang_version: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    gaps: list[str] = field(default_factory=list)  # missing / timed-out / truncated artifacts, in words
    notes: list[str] = field(default_factory=list)  # clock assumptions and similar caveats
    manifest: dict[str, Any] | None = None
    #: one entry per host when the input is several hosts' evidence (empty for one host: the fields above)
    hosts: dict[str, HostFacts] = field(default_factory=dict)


@dataclass
class Artifact:
    """One input file (or archive member) and how it was read."""

    path: str
    format: str | None  # parser that took it (None: not recognised, kept as unrecognised lines)
    bytes: int = 0
    lines: int = 0
    segments: list[dict[str, Any]] = field(default_factory=list)  # transcript segments: start line, format, command
    timed_out: bool = False
    truncated: bool = False
    rc: int | None = None
    error: str | None = None


@dataclass
class Timeline:
    events: pl.DataFrame
    facts: Facts = field(default_factory=Facts)
    coverage: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    unrecognized_examples: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    #: exact rows per kind in the whole timeline (``events`` may hold fewer of the bulk kinds, see below)
    kind_counts: dict[str, int] = field(default_factory=dict)
    #: when set, the complete timeline.parquet already written (a big input was streamed to it) and
    #: ``events`` keeps every non-bulk row but only a min/max-preserving sample of the batch/access rows
    parquet_path: str | None = None

    @property
    def n_events(self) -> int:
        """Rows in the whole timeline (``events.height`` unless bulk rows were sampled)."""
        return sum(self.kind_counts.values()) if self.parquet_path else self.events.height

    def of_kind(self, *kinds: str) -> pl.DataFrame:
        """Rows of the given kinds, in timeline order."""
        return self.events.filter(pl.col("kind").is_in(list(kinds)))

    @staticmethod
    def attrs(row: dict[str, Any]) -> dict[str, Any]:
        """Every parsed field of one row (from ``frame.iter_rows(named=True)``): ``attrs`` and the typed
        ``fields`` or ``figures`` (parsers.schema.FIELDS, FIGURES) together."""
        return row_attrs(row)


@dataclass
class Evidence:
    file: str
    line: int
    text: str
    ts: str | None = None  # ISO 8601 UTC with Z

    @classmethod
    def from_row(cls, row: dict[str, Any], text: str | None = None) -> Evidence:
        ts = row.get("ts")
        return cls(
            file=row["file"],
            line=int(row["line"]),
            text=(text if text is not None else (row.get("text") or "")).splitlines()[0][:2000]
            if (text or row.get("text"))
            else "",
            ts=iso_z(ts),
        )


@dataclass
class FlagChange:
    flag: str
    old: str | None
    new: str
    why: str


@dataclass
class Remediation:
    flags: list[FlagChange] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)


@dataclass
class Finding:
    rule_id: str
    category: str
    severity: str
    title: str
    summary: str
    confidence: str
    evidence: list[Evidence]
    ranks: list[int] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    remediation: Remediation = field(default_factory=Remediation)
    confidence_reason: str | None = None  # what is missing, what would raise the confidence
    consequence_of: str | None = None  # rule_id of the finding this one follows from
    hosts: list[str] = field(default_factory=list)  # the hosts it is about (several hosts' evidence)

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"unknown category {self.category!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")
        if self.confidence not in CONFIDENCES:
            raise ValueError(f"unknown confidence {self.confidence!r}")
        if not self.evidence:
            raise ValueError(f"finding {self.rule_id} has no evidence (DESIGN.md §5: not emitted)")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ranks"] = sorted(set(self.ranks))
        d["gpus"] = sorted(set(self.gpus))
        return d


def iso_z(ts: Any) -> str | None:
    """A datetime as ISO 8601 UTC with a ``Z``; naive datetimes are taken as UTC already.

    >>> from datetime import datetime, timezone, timedelta
    >>> iso_z(datetime(2025, 11, 20, 17, 14, 2, tzinfo=timezone(timedelta(hours=8))))
    '2025-11-20T09:14:02Z'
    >>> iso_z(datetime(2025, 11, 20, 9, 14, 2, 123000))
    '2025-11-20T09:14:02.123000Z'
    """
    if ts is None:
        return None
    if not isinstance(ts, datetime):
        return str(ts)
    if ts.tzinfo is not None:
        ts = ts.astimezone(timezone.utc).replace(tzinfo=None)
    return ts.isoformat(timespec="microseconds" if ts.microsecond else "seconds") + "Z"


def json_safe(value: Any) -> Any:
    """JSON-safe and stable: floats rounded to 6 places, NaN/inf → None, tuples/sets → lists."""
    if isinstance(value, bool) or value is None or isinstance(value, int | str):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else round(value, 6)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        return [json_safe(v) for v in sorted(value, key=str)]
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return str(value)

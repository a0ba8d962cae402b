"""The server's configuration: launch flags overlaid by the run's resolved ``server_args``, each value
with the row that said it (a sentence in a write-up weighs less than program output), the container's
memory limit, and the scheduler processes per host.

>>> flag_key("--hicache-size"), flag_key("hicache_size")
('hicache_size', 'hicache_size')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forensics.facts.rows import Row, attrs, rows, to_number
from forensics.model import Timeline


def flag_key(name: str) -> str:
    """``--hicache-size`` and ``hicache_size`` → ``hicache_size``."""
    return name.lstrip("-").replace("-", "_")



def flag_name(key: str) -> str:
    return "--" + key.replace("_", "-")



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



def launch_rows(tl: Timeline) -> list[Row]:
    return rows(tl, "launch_command")



#: the parsers whose server_args rows are the engine's own output (a log, SGLang's crash dump)
ENGINE_SOURCES = ("sglang", "vllm", "sglang_crash_dump")

#: How much a row that states a setting is believed, lowest first (issue: a sentence or a partial reprint of
#: ``server_args=ServerArgs(...)`` overrode the command line the process ran). A key takes its value from the
#: strongest row that states it; among rows of one weight, the last.
STATED_BY = ("a sentence", "a partial server_args", "the command line", "the engine's server_args")


def stated_weight(row: Row) -> int:
    """The index in ``STATED_BY`` of what ``row`` is: prose < a cut or hand-copied server_args < the argv that
    ran < the whole ``server_args`` the engine printed (its resolved values, defaults included: sglang
    python/sglang/srt/server_args.py::ServerArgs.__post_init__ (0.4-0.5) fills what the command left out).

    >>> stated_weight({"kind": "server_args", "source": "prose", "attrs": '{"form": "prose"}'})
    0
    >>> stated_weight({"kind": "server_args", "source": "sglang", "attrs": '{"truncated": true}'})
    1
    >>> stated_weight({"kind": "launch_command", "source": "launch", "attrs": "{}"})
    2
    >>> stated_weight({"kind": "server_args", "source": "sglang", "attrs": '{"form": "ServerArgs"}'})
    3
    """
    if is_prose(row) or attrs(row).get("form") == "prose":
        return 0
    if row.get("kind") == "launch_command":
        return 2
    a = attrs(row)
    if a.get("truncated") or a.get("elided") or row.get("source") not in ENGINE_SOURCES:
        return 1  # cut by the log or the writer, or copied into a ticket: what it lacks, it does not say
    return 3


def server_config(tl: Timeline, run_rows: list[Row] | None = None) -> ServerConfig:
    """The configuration that applies to a run (or to the input when ``run_rows`` is None).

    Each setting comes from the strongest row that states it (``stated_weight``): the engine's whole
    ``server_args`` dump, else the last command line, else a partial dump, else the last sentence. An
    earlier launch is not read: it may be of a configuration since changed.
    """
    cfg = ServerConfig()
    launches = launch_rows(tl)
    if launches:
        cfg.has_launch = True
    commands = [r for r in launches if not is_prose(r)]
    sentences = [r for r in launches if is_prose(r)]
    stated: list[tuple[Row, dict[str, Any]]] = [(r, attrs(r).get("flags") or {}) for r in (*commands[-1:],
                                                                                            *sentences[-1:])]
    pool = run_rows if run_rows is not None else rows(tl, "server_args")
    dumps = [r for r in pool if r.get("kind") == "server_args" and isinstance(attrs(r).get("args"), dict)]
    if not dumps and run_rows:
        dumps = _dump_before(tl, run_rows)
    by_weight: dict[int, Row] = {}
    for r in dumps:
        by_weight[stated_weight(r)] = r  # the last dump of each weight
    for r in by_weight.values():
        stated.append((r, attrs(r)["args"]))
        cfg.has_server_args = True
    weight: dict[str, int] = {}
    for row, values in stated:
        w = stated_weight(row)
        for k, v in values.items():
            key = flag_key(k)
            if v is None or weight.get(key, -1) > w:
                continue
            cfg.values[key] = v
            cfg.origin[key] = row
            weight[key] = w
    return cfg



def _dump_before(tl: Timeline, run_rows: list[Row]) -> list[Row]:
    """The server_args dump of the start a run without its own belongs to: one rank's log of a TP group carries no
    dump when the launcher's log (another file) printed it. The last dump stamped at or before the run's first
    stamped row; none when either lacks a stamp (a dump of another day's start must not configure this one)."""
    first = next((r["ts"] for r in run_rows if r.get("ts") is not None), None)
    if first is None:
        return []
    earlier = [r for r in rows(tl, "server_args") if isinstance(attrs(r).get("args"), dict)
               and r.get("ts") is not None and r["ts"] <= first]
    return [max(earlier, key=lambda r: (r["ts"], r.get("file") or "", r.get("line") or 0))] if earlier else []


def docker_memory_limit(tl: Timeline) -> tuple[int, Row] | None:
    for row in reversed(launch_rows(tl)):
        # docker/compose, and any container or job limit (Kubernetes limits.memory, #SBATCH --mem)
        limit = attrs(row).get("docker_memory_bytes") or attrs(row).get("container_memory_bytes")
        if isinstance(limit, int | float) and limit > 0:
            # the line that sets it (a container's ``docker run --memory`` above a command typed inside it)
            own = [r for r in rows(tl, "container_memory_limit") if r.get("file") == row.get("file")
                   and r.get("bytes") == int(limit) and (r.get("line") or 0) < (row.get("line") or 0)]
            return int(limit), (own[-1] if own else row)
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


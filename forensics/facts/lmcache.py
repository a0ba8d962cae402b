"""LMCache's CPU backend: how much host memory each vLLM worker's LMCache engine takes, and who said so.

Sources: lmcache lmcache/v1/config.py::_CONFIG_DEFINITIONS (main) (``max_local_cpu_size``: float, "GB",
default 5.0; ``local_cpu``: default true), lmcache lmcache/v1/config_base.py::create_singleton_config (main) and
``load_config_with_overrides`` (with ``LMCACHE_CONFIG_FILE`` set the YAML is read first and every
``LMCACHE_<NAME>`` variable then overrides its key, ``update_config_from_env``; without it only the variables
and the defaults count), lmcache lmcache/v1/cache_engine.py::LMCacheEngineBuilder (main) (one engine per worker,
each allocating ``max_local_cpu_size * 1024**3`` bytes, so the "GB" is GiB).

The size comes, in LMCache's own precedence, from the launch's KV transfer config (``"kv_connector_extra_config":
{"lmcache.max_local_cpu_size": N}``: lmcache lmcache/integration/vllm/vllm_v1_adapter.py::_apply_extra_config
(main) sets every ``lmcache.``-prefixed key on the loaded configuration, after the file and the variables), else
from the launch's ``LMCACHE_MAX_LOCAL_CPU_SIZE``, else from the
``max_local_cpu_size`` of the configuration file the launch names (parsers/launch/lmcache_config.py: a pasted
file, a ``cat`` of it, a heredoc), else from the workers' own ``LMCache Configuration`` lines. A file counts only
when LMCache is in use: the launch names a file or an LMCache connector, or a worker logged its LMCache engine.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from forensics.facts.launch import launch_rows
from forensics.facts.rows import Row, attrs, rows
from forensics.model import Timeline

ENV_SIZE = "LMCACHE_MAX_LOCAL_CPU_SIZE"
#: the same size given to vLLM's LMCache connector in the launch's KV transfer config
EXTRA_FLAG = "--kv-transfer-config kv_connector_extra_config.lmcache.max_local_cpu_size"
ENV_FILE = "LMCACHE_CONFIG_FILE"
FILE_KEY = "max_local_cpu_size"
#: lmcache/v1/config.py: the size a file that turns the CPU backend on without one gets
DEFAULT_GB = 5.0
#: what turns the CPU backend off (LMCache's ``_to_bool`` takes all but "true"/"1" as false; an unresolved
#: ``${VAR}`` or a passed-through empty value is no one's "off", so only the plain spellings of false count)
_FALSE = ("false", "0", "no", "off")
#: the ``lmcache.``-prefixed keys of ``kv_connector_extra_config`` in the KV transfer config's JSON (or a dict's repr
#: in a log's args); the value quoted or not
_EXTRA_SIZE = re.compile(r"""['"]lmcache\.max_local_cpu_size['"]\s{0,5}:\s{0,5}['"]?(\d{1,6}(?:\.\d{1,6})?)""")
_EXTRA_LOCAL = re.compile(r"""['"]lmcache\.local_cpu['"]\s{0,5}:\s{0,5}['"]?(\w{1,5})""")


@dataclass(frozen=True)
class CpuPool:
    """One worker's LMCache CPU backend: GiB (0 when off or unknown), the row that says it, and what set it (the
    variable, or the file's key and the file)."""

    gib: float = 0.0
    row: Row | None = None
    source: str = ENV_SIZE
    flag: str = ENV_SIZE  # the setting a corrected size goes in

    @property
    def from_file(self) -> bool:
        return self.source.startswith(FILE_KEY)

    def words(self) -> str:
        """The size as the input set it: ``LMCACHE_MAX_LOCAL_CPU_SIZE 80 GiB``, ``max_local_cpu_size 70 GiB of PATH``."""
        if self.from_file:
            return f"LMCache's {FILE_KEY} {self.gib:g} GiB{self.source[len(FILE_KEY):]}"
        return f"{self.source} {self.gib:g} GiB"

    def fix_note(self) -> str:
        """How the corrected size takes effect: the variable always does, since LMCache reads it after the file."""
        return (f"; {ENV_SIZE} overrides the {self.source} (LMCache applies the variables after the file), or set "
                f"{FILE_KEY} there" if self.from_file else "")


def _env(row: Row) -> dict[str, str]:
    return {str(k): str(v if v is not None else "").strip("\"'") for k, v in (attrs(row).get("env") or {}).items()}


def _uses_lmcache(row: Row) -> bool:
    """A launch that starts LMCache: it names the configuration file or sets a variable of LMCache's, or its KV
    transfer config names one of LMCache's connectors (``LMCacheConnectorV1``, ``LMCacheMPConnector``)."""
    if any(k.startswith("LMCACHE_") for k in _env(row)):
        return True
    flags = attrs(row).get("flags") or {}
    return "lmcache" in str(flags.get("--kv-transfer-config") or "").lower()


def logged(tl: Timeline) -> list[Row]:
    """The workers' ``LMCache Configuration`` lines with the CPU backend on: one per worker's engine."""
    return [r for r in rows(tl, "host_pool") if attrs(r).get("pool") == "lmcache_cpu" and r.get("bytes")]


def _file_for(tl: Timeline, named: str | None) -> Row | None:
    """The pasted configuration the launch reads: the one whose file name is the one ``LMCACHE_CONFIG_FILE``
    names, else (no name, or no pasted file of that name) the last one."""
    files = rows(tl, "lmcache_config")
    if not files:
        return None
    if named:
        same = [r for r in files if os.path.basename(str(attrs(r).get("path") or "")) == os.path.basename(named)]
        if same:
            return same[-1]
    return files[-1]


def cpu_pool(tl: Timeline) -> CpuPool:
    """The per-worker size of LMCache's CPU backend (see the module's doc)."""
    launches = [r for r in launch_rows(tl) if _uses_lmcache(r)]
    for row in reversed(launches):
        transfer = str((attrs(row).get("flags") or {}).get("--kv-transfer-config") or "")[:4000]
        off = _EXTRA_LOCAL.search(transfer)
        if off and off.group(1).lower() in _FALSE:
            return CpuPool()
        extra = _EXTRA_SIZE.search(transfer)
        if extra:
            return CpuPool(float(extra.group(1)), row, "kv_connector_extra_config lmcache.max_local_cpu_size",
                           EXTRA_FLAG)
        env = _env(row)
        if env.get("LMCACHE_LOCAL_CPU", "").lower() in _FALSE:
            return CpuPool()  # the variable overrides the file too
        raw = env.get(ENV_SIZE)
        if raw:
            try:
                return CpuPool(float(raw), row, ENV_SIZE)
            except ValueError:
                pass
    in_use = bool(launches) or bool(logged(tl)) or any(
        attrs(r).get("message_id") == "lmcache_engine" for r in rows(tl, "notice"))
    named = next((_env(r)[ENV_FILE] for r in reversed(launches) if _env(r).get(ENV_FILE)), None)
    cfg = _file_for(tl, named) if in_use else None
    if cfg is not None:
        a = attrs(cfg)
        if a.get("local_cpu") is not False:
            size = a.get("max_local_cpu_size")
            where = f"{FILE_KEY} of {a.get('path') or 'the LMCache configuration file'}"
            return CpuPool(float(size) if size is not None else DEFAULT_GB, cfg,
                           where + ("" if size is not None else f" (unset: LMCache's default {DEFAULT_GB:g})"))
        return CpuPool()
    seen = logged(tl)  # LMCache's own account, each worker's (parsers/vllm.py, _LMCACHE_CONFIG)
    if seen:
        return CpuPool(float(attrs(seen[0]).get("size_gib") or 0), seen[0], ENV_SIZE)
    return CpuPool()

"""LMCache's configuration file: the YAML that ``LMCACHE_CONFIG_FILE`` names, wherever it is written down.

Sources: lmcache lmcache/v1/config.py::_CONFIG_DEFINITIONS (main) (``local_cpu`` bool, default true;
``max_local_cpu_size`` float GB, default 5.0; the other option names below) and lmcache
lmcache/v1/config_base.py::load_config_with_overrides (main) (also ``create_singleton_config``: with
``LMCACHE_CONFIG_FILE`` set the file is read with ``yaml.safe_load`` and then every ``LMCACHE_<NAME>`` variable
overrides its key; without it only the variables count), YAML 1.2 (block mappings), bash(1) (here-documents).

The file may be an input of its own (``lmcache.yaml``), the output of ``cat lmcache.yaml`` in a transcript, a
heredoc in a launch script or a ConfigMap's block scalar: a run of ``key: value`` lines at one indentation whose
keys are LMCache's option names, with ``max_local_cpu_size`` or ``local_cpu`` among them. One ``lmcache_config``
row per block: ``attrs.max_local_cpu_size`` (GB as LMCache reads it: GiB, ``* 1024**3`` in its allocator),
``local_cpu`` (true / false / null when unset), ``keys`` and ``path`` (the file, or what ``cat`` was given).

>>> [(b.line, b.line_end, b.cpu_size, b.local_cpu) for b in blocks(["chunk_size: 256", "local_cpu: True",
...                                                                  "max_local_cpu_size: 40.0  # GB"])]
[(1, 3, 40.0, True)]
>>> blocks(["chunk_size: 256", "max_model_len: 4096"])
[]
"""

from __future__ import annotations

from dataclasses import dataclass

import regex as re

#: LMCache's option names (lmcache/v1/config.py ``_CONFIG_DEFINITIONS`` and ``_CONFIG_ALIASES``): a block is
#: LMCache's only when its keys are these
KEYS = frozenset({
    "chunk_size", "local_cpu", "max_local_cpu_size", "local_cpu_use_hugepages", "reserve_local_cpu_size",
    "local_disk", "local_disk_path_sharding", "max_local_disk_size", "remote_url", "remote_serde", "use_layerwise",
    "save_decode_cache", "pre_caching_hash_algorithm", "enable_blending", "blend_recompute_ratios",
    "blend_thresholds", "blend_check_layers", "blend_min_tokens", "blend_special_str", "retrieve_locations",
    "store_location", "enable_p2p", "p2p_host", "p2p_init_ports", "p2p_lookup_ports", "enable_controller",
    "lmcache_instance_id", "controller_pull_url", "controller_reply_url", "controller_url", "lmcache_worker_ports",
    "lmcache_worker_port", "enable_pd", "enable_xpyd", "pd_role", "pd_buffer_size", "pd_buffer_device",
    "pd_peer_host", "pd_peer_init_port", "pd_peer_alloc_port", "pd_proxy_host", "pd_proxy_port",
    "transfer_channel", "nixl_backends", "nixl_buffer_size", "nixl_buffer_device", "nixl_role",
    "nixl_peer_host", "nixl_peer_port", "nixl_receiver_host", "nixl_receiver_port", "nixl_proxy_host",
    "nixl_proxy_port", "gds_path", "gds_buffer_size", "use_gds", "cache_policy", "extra_config", "numa_mode",
    "save_unfull_chunk", "blocking_timeout_secs", "external_lookup_client", "py_enable_gc",
    "enable_async_loading", "enable_lazy_memory_allocator", "lazy_memory_initial_ratio", "priority_limit",
    "internal_api_server_enabled", "internal_api_server_port_start", "storage_plugins", "external_backends",
    "min_retrieve_tokens", "lookup_timeout_ms",
})
#: the keys that say how much host memory the CPU backend takes
_SIZE_KEYS = ("max_local_cpu_size", "local_cpu")

# YAML 1.2 block mapping entry ``key: value`` (a trailing ``# comment``); a nested value (``extra_config:``) has
# its own lines below at a deeper indentation, which do not end the block
_ENTRY_RE = re.compile(r"^(?P<ind>[ \t]*)(?P<key>[a-z][a-z0-9_]{1,40})\s*:(?:\s+(?P<val>[^#\n]*?))?\s*(?:#.*)?$")
# YAML 1.2 plain or quoted scalar holding a number
_NUMBER_RE = re.compile(r"^['\"]?(\d{1,6}(?:\.\d{1,6})?)['\"]?$")
#: ``cat PATH`` (also ``sudo cat``, ``cat -A``) as the command that printed a block: cat(1)
_CAT_RE = re.compile(r"(?:^|[;&|]\s*)(?:sudo\s+)?cat\s+(?:-\w+\s+)*(?P<path>[^\s;&|<>]+)")
#: a YAML 1.2 block scalar's key that names the file the block is (a ConfigMap's ``lmcache.yaml: |``)
_FILE_KEY_RE = re.compile(r"^\s*['\"]?(?P<path>[\w.-]{1,100}\.ya?ml)['\"]?\s*:\s*[|>][+-]?\s*$")
#: a heredoc that writes the file: ``cat > /etc/lmcache.yaml <<EOF`` / ``tee PATH <<'EOF'`` (bash(1), Here Documents)
_HEREDOC_RE = re.compile(r"(?:cat\s*>{1,2}\s*|tee\s+(?:-a\s+)?)(?P<path>[^\s;&|<>]+)\s*<<-?\s*['\"]?\w+")


@dataclass(frozen=True)
class Block:
    line: int  # 1-based, first entry
    line_end: int
    keys: tuple[str, ...]
    cpu_size: float | None  # max_local_cpu_size, GB as LMCache reads it
    local_cpu: bool | None
    text: str
    path: str | None = None


def _truth(value: str) -> bool:
    """LMCache's ``_to_bool``: "true" / "1" (any case) is true, anything else false; YAML's own booleans too."""
    return value.strip().strip("'\"").lower() in ("true", "1", "yes", "on")


def blocks(lines: list[str]) -> list[Block]:
    """The LMCache configuration blocks among these lines (see the module's doc)."""
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _ENTRY_RE.match(lines[i])
        if not m or m.group("key") not in KEYS:
            i += 1
            continue
        ind = m.group("ind")
        entries: dict[str, str] = {}
        first = last = i
        j = i
        while j < len(lines):
            ln = lines[j]
            e = _ENTRY_RE.match(ln)
            if e and e.group("ind") == ind:
                if e.group("key") not in KEYS:
                    break
                entries[e.group("key")] = (e.group("val") or "").strip()
                last = j
            elif ln.strip() and not ln.lstrip().startswith("#") and not (
                    len(ln) - len(ln.lstrip()) > len(ind) and entries):  # a nested value's lines stay inside
                break
            j += 1
        i = max(j, i + 1)
        if not any(k in entries for k in _SIZE_KEYS):
            continue
        size = _NUMBER_RE.match(entries.get("max_local_cpu_size", ""))
        local = entries.get("local_cpu")
        out.append(Block(line=first + 1, line_end=last + 1, keys=tuple(entries),
                         cpu_size=float(size.group(1)) if size else None,
                         local_cpu=None if local is None else _truth(local),
                         text="\n".join(lines[first:last + 1])))
    return out


def looks_like_config(text: str) -> bool:
    """A text that is mostly one LMCache configuration (a file of its own, a ``cat`` of it)."""
    lines = text.split("\n")
    found = blocks(lines)
    content = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#") and ln.strip() != "---"]
    inside = sum(b.line_end - b.line + 1 for b in found)
    return bool(found) and inside * 2 >= len(content)


def config_rows(lines: list[str], path: str = "", command: str | None = None) -> list[dict]:
    """``lmcache_config`` rows, each naming the file it is: a heredoc's target above it, the key of the block scalar
    it is the value of (a ConfigMap's ``lmcache.yaml: |``), the file ``cat`` printed, else the input's own path."""
    rows = []
    cat = _CAT_RE.search(command or "")
    for b in blocks(lines):
        above = lines[max(b.line - 3, 0):b.line - 1]
        where = next((h.group("path") for ln in reversed(above) for h in [_HEREDOC_RE.search(ln)] if h), None) \
            or next((k.group("path") for k in [_FILE_KEY_RE.match(above[-1])] if k), None) if above else None
        where = where or (cat.group("path") if cat else None) or path
        # the row stands at the line that sizes the backend (the evidence a reader checks), spanning the block
        at = next((i for i in range(b.line - 1, b.line_end) for e in [_ENTRY_RE.match(lines[i])]
                   if e and e.group("key") in _SIZE_KEYS and (e.group("key") == "max_local_cpu_size" or b.cpu_size is None)),
                  b.line - 1)
        rows.append({"line": at + 1, "line_end": b.line_end, "kind": "lmcache_config", "text": lines[at].strip(),
                     "attrs": {"max_local_cpu_size": b.cpu_size, "local_cpu": b.local_cpu, "keys": list(b.keys),
                               "path": where or None, "block_line": b.line}})
    return rows

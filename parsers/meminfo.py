"""``/proc/meminfo`` (and ``grep ^Swap /proc/meminfo`` fragments) → ``host_memory`` and ``host_swap``.

Sources: reference/system_formats.md §1.2 and proc(5) (``/proc/meminfo``: keys in CamelCase with ``(anon)``
parts, ``kB`` = KiB).

Each line is ``Key:<spaces>value[ kB]``; ``kB`` is KiB; ``HugePages_Total/Free/Rsvd/Surp`` are page
counts; keys may hold parentheses and underscores; the key set depends on the kernel, so every
key is kept. Per-NUMA-node files (``Node 0 MemTotal: … kB``) and ``grep -H`` prefixes
(``/proc/meminfo:MemTotal: …``) are accepted too. Sample::

    MemTotal:       24684092 kB
    MemFree:        21805672 kB
    MemAvailable:   24191612 kB
    Active(anon):       1536 kB
    HugePages_Total:       0
    SwapTotal:             0 kB
    SwapFree:              0 kB

One ``host_memory`` row per block (a new block starts when ``MemTotal`` repeats): ``total_bytes``
= MemTotal, ``free_bytes`` = MemFree, ``avail_bytes`` = MemAvailable, ``used_bytes`` = MemTotal −
MemAvailable (``attrs.used_definition``; without MemAvailable, kernels before 3.14, procps's
MemTotal − MemFree − Buffers − Cached − SReclaimable). ``attrs`` holds every key in snake case:
``mem_total_bytes``, ``active_anon_bytes``, ``huge_pages_total`` (a count, no suffix). A
``host_swap`` row comes from SwapTotal/SwapFree (used = total − free).

>>> r = parse("MemTotal: 24684092 kB\\nMemFree: 21805672 kB\\nMemAvailable: 24191612 kB\\n"
...           "HugePages_Total: 0\\nSwapTotal: 524284 kB\\nSwapFree: 376172 kB\\n")
>>> r.events.select("kind", "total_bytes", "used_bytes", "free_bytes", "avail_bytes").rows()
[('host_memory', 25276510208, 504299520, 22329008128, 24772210688), ('host_swap', 536866816, 151666688, 385200128, None)]
>>> import json; json.loads(r.events["attrs"][0])["huge_pages_total"]
0
"""

from __future__ import annotations

from typing import Any

import regex as re

from .schema import MAX_UNRECOGNIZED_EXAMPLES, NotThisFormat, ParseResult
from .units import KIB

FORMAT = "meminfo"

_LINE_RE = re.compile(
    r"^\s*(?:/proc/meminfo:)?(?:Node\s+(?P<node>\d{1,4})\s+)?(?P<key>[A-Za-z][A-Za-z0-9_()]{0,63}):"
    r"\s*(?P<val>\d{1,19})(?:\s+(?P<unit>kB))?\s*$")
_SNAKE_RE = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_MAX_LINE = 512
_MAX_VALUE = 1 << 52  # KiB figures beyond this would overflow int64 bytes: not meminfo
#: keys that mean memory (or swap) is being described, not some other "Key: number" listing
_ANCHORS = {"MemTotal", "MemFree", "MemAvailable", "SwapTotal", "SwapFree", "Buffers", "Cached",
            "SwapCached", "Active", "Inactive", "Shmem", "Slab", "CommitLimit", "Committed_AS"}


def attr_name(key: str) -> str:
    """``Active(anon)`` → ``active_anon``, ``SReclaimable`` → ``s_reclaimable``, ``HugePages_Total`` →
    ``huge_pages_total``.

    >>> [attr_name(k) for k in ("MemTotal", "Active(anon)", "Committed_AS", "DirectMap1G", "NFS_Unstable")]
    ['mem_total', 'active_anon', 'committed_as', 'direct_map1g', 'nfs_unstable']
    """
    key = key.replace("(", "_").replace(")", "")
    return "_".join(p for p in _SNAKE_RE.sub("_", key).lower().split("_") if p)


def sniff(head: str) -> float:
    """How sure we are that ``head`` is ``/proc/meminfo`` (or a fragment of it).

    >>> sniff("MemTotal:       24684092 kB\\nMemFree:        21805672 kB\\nMemAvailable:   24191612 kB\\n")
    0.95
    >>> sniff("SwapTotal:        524284 kB\\nSwapFree:         376172 kB\\n")
    0.8
    >>> sniff("Mem:  24684092  492480  21805672  8856  2701032  24191612\\n")
    0.0
    """
    hits = anchors = other = 0
    for i, line in enumerate(head.splitlines()):
        if i > 400:
            break
        if not line.strip():
            continue
        m = _LINE_RE.match(line) if len(line) <= _MAX_LINE else None
        if m:
            hits += 1
            anchors += m["key"] in _ANCHORS and m["unit"] is not None
        else:
            other += 1
    if not anchors:
        return 0.0
    if hits >= 3 and anchors >= 2 and hits >= other:
        return 0.95
    return 0.8 if anchors >= 2 or hits > other else 0.3


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    """Parse every meminfo block in ``text`` (``attrs.table`` = 0, 1 … when ``MemTotal`` repeats)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    blocks: list[dict[str | None, list[tuple[int, str, str, int, bool]]]] = []
    recognized = n_unrec = 0
    unrec: list[tuple[int, str]] = []
    for no, raw in enumerate(lines, 1):
        line = raw.rstrip("\r")
        if not line.strip():
            recognized += 1
            continue
        m = _LINE_RE.match(line) if len(line) <= _MAX_LINE else None
        if not m or int(m["val"]) > _MAX_VALUE:
            n_unrec += 1
            if len(unrec) < MAX_UNRECOGNIZED_EXAMPLES:
                unrec.append((no, line[:500]))
            continue
        recognized += 1
        node = m["node"]
        entry = (no, line, m["key"], int(m["val"]), m["unit"] is not None)
        seen = blocks[-1].get(node, []) if blocks else []
        if not blocks or any(e[2] == m["key"] for e in seen):
            blocks.append({})
        blocks[-1].setdefault(node, []).append(entry)
    if not blocks:
        if n_unrec:
            raise NotThisFormat("no 'Key: value kB' line")
        return ParseResult.from_rows([], source=FORMAT, path=path, lines=len(lines), recognized=recognized)
    if not any(e[2] in _ANCHORS for b in blocks for es in b.values() for e in es):
        raise NotThisFormat("'Key: value' lines, but none of them is a meminfo key")
    rows: list[dict[str, Any]] = []
    for k, block in enumerate(blocks):
        for node, entries in block.items():
            rows.extend(_block_rows(entries, k, node))
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=len(lines), recognized=recognized,
                                 unrecognized=n_unrec, unrecognized_examples=unrec)


def _block_rows(entries: list[tuple[int, str, str, int, bool]], table: int, node: str | None) -> list[dict[str, Any]]:
    values: dict[str, int] = {}
    attrs: dict[str, Any] = {"table": table}
    if node is not None:
        attrs["numa_node"] = int(node)
    for _, _, key, val, has_unit in entries:
        if has_unit:
            values[key] = val * KIB
            attrs[f"{attr_name(key)}_bytes"] = val * KIB
        else:
            values[key] = val
            attrs[attr_name(key)] = val
    first, last = entries[0][0], entries[-1][0]
    text = "\n".join(e[1] for e in entries)
    rows: list[dict[str, Any]] = []
    total = values.get("MemTotal")
    if total is not None or "MemFree" in values or "MemAvailable" in values:
        avail, free = values.get("MemAvailable"), values.get("MemFree")
        used = None
        if total is not None and avail is not None:
            used = total - avail
            attrs["used_definition"] = "MemTotal - MemAvailable"
        elif total is not None and free is not None:
            cache = values.get("Cached", 0) + values.get("SReclaimable", 0)
            used = total - free - values.get("Buffers", 0) - cache
            attrs["used_definition"] = "MemTotal - MemFree - Buffers - Cached - SReclaimable (no MemAvailable)"
        rows.append({"line": first, "line_end": last, "kind": "host_memory", "text": text, "attrs": attrs,
                     "total_bytes": total, "free_bytes": free, "avail_bytes": avail, "used_bytes": used})
    if "SwapTotal" in values or "SwapFree" in values:
        s_total, s_free = values.get("SwapTotal"), values.get("SwapFree")
        s_attrs: dict[str, Any] = {"table": table}
        if node is not None:
            s_attrs["numa_node"] = int(node)
        for key in ("SwapTotal", "SwapFree", "SwapCached"):
            if key in values:
                s_attrs[f"{attr_name(key)}_bytes"] = values[key]
        if s_total is not None:
            s_attrs["swap_configured"] = s_total > 0
        swap_lines = [e for e in entries if e[2].startswith("Swap")]
        rows.append({"line": swap_lines[0][0], "line_end": swap_lines[-1][0], "kind": "host_swap",
                     "text": "\n".join(e[1] for e in swap_lines), "attrs": s_attrs, "total_bytes": s_total,
                     "free_bytes": s_free,
                     "used_bytes": s_total - s_free if s_total is not None and s_free is not None else None})
    return rows

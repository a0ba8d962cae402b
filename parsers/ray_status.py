"""``ray status`` → one ``ray_resources`` row: the nodes the Ray cluster has and the GPUs it can place.

Source: ray python/ray/autoscaler/_private/util.py (1.x–2.x) ``format_info_string``: a header
``======== Autoscaler status: <time> ========``, then ``Node status`` with ``Active:`` / ``Idle:`` /
``Pending:`` lists (one `` <count> <node type or node_id>`` line each, ``(no active nodes)`` when empty),
``Recent failures:``, then ``Resources`` / ``Usage:`` with `` <used>/<total> <resource>`` lines
(`` 0.0/8.0 GPU``) and ``Demands:``.

vLLM on Ray waits for one GPU bundle per rank (VLLM-NCCL-002); what the cluster actually has is what this
says, and our own next step asks for it.

>>> r = parse("======== Autoscaler status: 2025-06-03 10:02:40.123 ========\\nNode status\\n----\\nActive:\\n"
...           " 1 node_a1b2\\n 1 node_c3d4\\nPending:\\n (no pending nodes)\\n\\nResources\\n----\\nUsage:\\n"
...           " 0.0/96.0 CPU\\n 4.0/16.0 GPU\\n")
>>> row = r.events.row(0, named=True)
>>> row["kind"], row["count"], row["attrs"]
('ray_resources', 16, '{"gpus_total": 16.0, "gpus_used": 4.0, "nodes_active": 2, "nodes_pending": 0}')
>>> sniff("Usage:\\n 0.0/8.0 GPU"), sniff("free -g")
(0.6, 0.0)
"""

from __future__ import annotations

import re
from typing import Any

from .schema import NotThisFormat, ParseResult

FORMAT = "ray_status"

# ray python/ray/autoscaler/_private/util.py (2.x) ``format_info_string``: the header, the node lists, the usage lines
_HEADER = re.compile(r"^=+ Autoscaler status: ?(.{0,40}?) ?=+\s*$", re.M)
_SECTION = re.compile(r"^(Active|Idle|Pending|Recent failures|Usage|Demands|Constraints|Total [A-Za-z ]+)\s*:\s*$")
_NODE_LINE = re.compile(r"^\s+(\d{1,6})\s+\S{1,200}\s*$")
_USAGE_LINE = re.compile(r"^\s+([\d.]{1,16}[KMGTP]?i?B?)/([\d.]{1,16}[KMGTP]?i?B?)\s+([A-Za-z_][\w:.-]{0,80})\s*$")


# ray python/ray/autoscaler/_private/util.py (2.x) ``get_usage_report``: `` <used>/<total> <resource>`` lines
_RESOURCE = re.compile(r"^\s+[\d.]+[KMGTP]?i?B?/[\d.]+[KMGTP]?i?B?\s+(CPU|GPU|memory|object_store_memory)\s*$", re.M)
_USAGE_HEAD = re.compile(r"^Usage:\s*\n\s+[\d.]+/[\d.]+\s+(?:CPU|GPU)\s*$", re.M)
_NODES_HEAD = re.compile(r"^(?:Active|Idle|Pending):\s*\n\s+(?:\d+\s+\S+|\(no \w+ nodes\))\s*$", re.M)


def sniff(head: str) -> float:
    """The header, else one of its sections alone (a paste split at its ``-----`` rules: each piece is read with the
    ``ray status`` that printed it)."""
    if _HEADER.search(head):
        return 0.9
    if _USAGE_HEAD.search(head) or _NODES_HEAD.search(head):
        return 0.6
    # the usage lines alone, their ``Usage:`` taken for a sentence: two resources of Ray's own names
    return 0.55 if len({m.group(1) for m in _RESOURCE.finditer(head)}) >= 2 else 0.0


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    if not isinstance(text, str) or not sniff(text[:65536]):
        raise NotThisFormat("ray status: no 'Autoscaler status' header nor one of its sections")
    lines = text.split("\n")
    section = None
    nodes = {"Active": 0, "Idle": 0, "Pending": 0}
    gpus_used = gpus_total = None
    header_line, recognized = 0, 0
    for i, ln in enumerate(lines, 1):
        if _HEADER.match(ln):
            header_line = header_line or i
            recognized += 1
            continue
        if (m := _SECTION.match(ln)) is not None:
            section, recognized = m.group(1), recognized + 1
            continue
        if section in nodes and (m := _NODE_LINE.match(ln)) is not None:
            nodes[section] += int(m.group(1))
            recognized += 1
        elif section in ("Usage", None) and (m := _USAGE_LINE.match(ln)) is not None:
            recognized += 1
            if m.group(3) == "GPU":
                gpus_used, gpus_total = _num(m.group(1)), _num(m.group(2))
        elif ln.strip() and (ln.strip().startswith("(") or set(ln.strip()) <= {"-", "="}
                             or ln.strip() in ("Node status", "Resources")):
            recognized += 1
    seen_nodes = any(_SECTION.match(ln) and _SECTION.match(ln).group(1) in nodes for ln in lines)
    attrs: dict[str, Any] = {"gpus_total": gpus_total, "gpus_used": gpus_used,
                             "nodes_active": nodes["Active"] + nodes["Idle"] if seen_nodes else None,
                             "nodes_pending": nodes["Pending"] if seen_nodes else None}
    row = {"line": header_line or 1, "kind": "ray_resources", "text": lines[(header_line or 1) - 1].strip()[:300],
           "count": int(gpus_total) if gpus_total is not None else None, "attrs": attrs}
    total = text.count("\n") + (0 if not text or text.endswith("\n") else 1)
    blank = sum(1 for ln in lines[:total] if not ln.strip())  # blank lines are the format's own spacing
    return ParseResult.from_rows([row], source=FORMAT, path=path, lines=total,
                                 recognized=min(recognized + blank, total))

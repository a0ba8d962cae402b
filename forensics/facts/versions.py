"""The SGLang version: stated (version facts, a version row, a container image's tag) or bounded by
the log's line formats (sglang_formats.md §1–§7).

Sources: sglang .github/workflows/release-docker.yml (0.4+; _docker-build-and-publish.yml 0.5.x) publishes
the ``lmsysorg/sglang:v<version>[-variant]`` image tags.

>>> parse_version("v0.5.6.post2")
(0, 5, 6)
"""

from __future__ import annotations

import re

import polars as pl

from forensics.facts.launch import launch_rows
from forensics.facts.rows import attrs, kinds_present, rows, timeline_memo
from forensics.model import Timeline
from parsers.launch import vocab


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    if not text:
        return None
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)



IMAGE_TAG_RE = re.compile(r"sglang[^\s:@]*:v?(\d+\.\d+\.\d+)")



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
        m = IMAGE_TAG_RE.search(row.get("text") or "") or IMAGE_TAG_RE.search(" ".join(attrs(row).get("argv") or [])) \
            or IMAGE_TAG_RE.search(str(attrs(row).get("image") or ""))  # a manifest's container image
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



#: the graph settings SGLang split by phase in 0.5.15 (sglang python/sglang/srt/server_args.py: ``cuda_graph_max_bs``
#: became the deprecated alias of ``--cuda-graph-max-bs-decode`` with ``dest="cuda_graph_max_bs_decode"``,
#: ``cuda_graph_bs`` of ``cuda_graph_bs_decode``, the piecewise ones of ``cuda_graph_{max_,}bs_prefill``, and
#: ``--disable-cuda-graph`` of ``--cuda-graph-backend-{decode,prefill}``): a server_args dump or a launch that
#: names one is of a release that has it; the first such release is the option's in parsers/launch/vocab.py
PHASED_GRAPH_FIELDS = ("cuda_graph_max_bs_decode", "cuda_graph_bs_decode", "cuda_graph_max_bs_prefill",
                       "cuda_graph_bs_prefill", "cuda_graph_backend_decode", "cuda_graph_backend_prefill",
                       "cuda_graph_config")


def _field_floor(names: set[str]) -> tuple[int, int, int] | None:
    """The first release that has every one of ``names`` among :data:`PHASED_GRAPH_FIELDS`, if any is."""
    options = vocab.engine_options("sglang")
    firsts = [parse_version(options.get("--" + n.replace("_", "-"), (None,))[0])
              for n in names if n in PHASED_GRAPH_FIELDS]
    return max((v for v in firsts if v), default=None)


def fields_floor(tl: Timeline) -> tuple[tuple[int, int, int] | None, str | None]:
    """The lowest release the server_args fields or launch flags of the input imply, and the field that says so
    (``cuda_graph_max_bs_decode`` in a dump is 0.5.15+)."""
    best: tuple[tuple[int, int, int] | None, str | None] = (None, None)
    for row in [*rows(tl, "server_args"), *launch_rows(tl)]:
        a = attrs(row)
        named = a.get("args") if row.get("kind") == "server_args" else a.get("flags")
        names = {str(k).lstrip("-").replace("-", "_") for k in (named or {})} if isinstance(named, dict) else set()
        floor = _field_floor(names)
        if floor and (best[0] is None or floor > best[0]):
            field = next(n for n in PHASED_GRAPH_FIELDS if n in names)
            best = (floor, field)
    return best


def version_window(tl: Timeline) -> tuple[tuple[int, int, int] | None, tuple[int, int, int] | None]:
    """Lower and upper bounds on the SGLang version implied by the log's line formats."""
    memo = timeline_memo(tl)
    if "version_window" in memo:
        return memo["version_window"]
    lo: tuple[int, int, int] | None = None
    hi: tuple[int, int, int] | None = None
    for row in rows(tl, "server_args"):
        if attrs(row).get("form") == "dict":
            lo = max(lo or (0, 0, 0), (0, 5, 19))
    floor, _field = fields_floor(tl)
    if floor:
        lo = max(lo or (0, 0, 0), floor)
    frame = tl.events
    present = kinds_present(tl) if not frame.is_empty() else frozenset()
    bodies: dict[str, pl.Series] = {}
    for kind, pattern, low, high in _VERSION_MARKERS:
        if kind not in present:
            continue
        # column-wise: a big input holds tens of thousands of batch rows; _message's first line and
        # prefix, then the marker, as for one row; one filter per kind however many markers it has
        body = bodies.get(kind)
        if body is None:
            texts = frame.filter(pl.col("kind") == kind).get_column("text").fill_null("")
            body = bodies[kind] = texts.str.extract(_FIRST_LINE, 1).str.replace(_PREFIX_RX, "")
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


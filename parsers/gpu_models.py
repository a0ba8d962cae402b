"""GPU models named in any text, and the memory each model has.

Sources: nvidia-smi(1) (``-L``: ``GPU 0: NVIDIA H100 80GB HBM3 (UUID: …)``), vllm vllm/collect_env.py (0.4+:
``GPU 0: …`` under ``GPU models and configuration``), vllm vllm/model_executor/layers/fused_moe/configs/
(0.4+: ``device_name=NVIDIA_A100-SXM4-80GB`` file names), reference/system_formats.md §2.1 (the model names
nvidia-smi prints).

A ticket rarely carries nvidia-smi's memory column, but it often names the GPU: vLLM's
``collect_env`` (``GPU 0: NVIDIA H100 80GB HBM3``), ``nvidia-smi -L``, an MoE config file name
(``device_name=NVIDIA_A100-SXM4-80GB``), a sentence ("8x H200"). The model gives the capacity a
detector needs when nothing measured it. Capacities are the usable memory CUDA reports (GiB), rounded
down; a name that states its size (``80GB``) wins over the table.

>>> round(capacity_of("NVIDIA A100-SXM4-40GB") / 2**30, 1)  # 99 % of the size a name states
39.6
>>> round(capacity_of("NVIDIA H200") / 2**30, 1)
139.8
>>> capacity_of("GeForce GTX 480") is None
True
>>> parse("GPU 0: NVIDIA H100 80GB HBM3").events.get_column("total_bytes").to_list() == [round(80 * 0.99 * 2**30)]
True
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .schema import ParseResult
from .units import GIB

FORMAT = "gpu_models"

#: model (as named, case-insensitive, without "NVIDIA ") → usable memory in GiB, for names that do not state it
KNOWN_GIB: dict[str, float] = {
    "H200": 139.8, "H100 NVL": 93.1, "H100": 79.1, "H800": 79.1, "H20": 95.0, "GH200": 94.5, "B200": 178.4,
    "B300": 268.0, "GB200": 184.0, "A100": 79.1, "A800": 79.1, "A40": 44.4, "A30": 23.5, "A10G": 22.0, "A10": 22.0,
    "L40S": 44.4, "L40": 44.4, "L20": 44.4, "L4": 22.0, "RTX 6000 Ada": 47.5, "RTX PRO 6000": 94.9, "RTX A6000": 47.5,
    "RTX 5090": 31.4, "RTX 4090": 23.5, "RTX 3090": 23.6, "RTX 4080": 15.6, "RTX 4060": 7.6, "RTX 5060 Ti": 15.5,
    "V100": 31.7, "T4": 14.6, "GB10": 119.6, "MI300X": 191.5, "MI325X": 255.5, "MI350X": 287.0, "MI355X": 287.0,
    "MI250X": 63.9, "MI210": 63.9,
}
_NAME = re.compile(
    r"(?:NVIDIA[ _-]+|AMD[ _-]+(?:Instinct[ _-]+)?|GeForce[ _-]+)?"
    r"(?P<model>(?:GB|GH|[HBLAVT])\d{1,3}[A-Z]?(?:[ _-]?NVL)?|RTX[ _-]?(?:PRO[ _-]?)?(?:A?\d{4}|\d{4}[ _-]?Ti)(?:[ _-]Ada)?|"
    r"MI\d{3}X?)"
    r"(?:[ _-]+(?:SXM\d?|PCIe|HBM\d?e?|NVL))*(?:[ _-]+(?P<size>\d{2,3})\s?GB)?\b"
)
_NEEDLE = re.compile(r"NVIDIA|GeForce|Instinct|\bMI\d{3}|\b[HBAL]\d{2,3}\b|RTX|GB10|V100")
#: A superset of :data:`_NEEDLE` that Python's engine scans ~20× faster (one leading character class, no
#: leading ``\b``): it finds the few lines worth the exact needle and the name pattern.
_PREFILTER = re.compile(r"[NGIRVMHBAL](?:VIDIA|eForce|nstinct|TX|B10|100|I\d{3}|\d{2,3}(?!\d))")


def _known(model: str) -> float | None:
    key = re.sub(r"[ _-]+", " ", model.upper()).strip()
    for name in sorted(KNOWN_GIB, key=len, reverse=True):
        if key == name.upper() or key.startswith(name.upper() + " ") or key.replace(" ", "") == name.upper().replace(" ", ""):
            return KNOWN_GIB[name]
    return None


def capacity_of(name: str) -> int | None:
    """Usable bytes of the GPU a name denotes, or None for a name not known."""
    m = _NAME.search(name)
    if not m:
        return None
    if m.group("size"):
        size = int(m.group("size"))
        return int(round(size * 0.99 * GIB)) if 8 <= size <= 300 else None
    gib = _known(m.group("model"))
    return int(round(gib * GIB)) if gib else None


def parse(text: str, path: str = "", command: str | None = None,
          candidates: Iterable[tuple[int, str]] | None = None) -> ParseResult:
    """One ``gpu_model`` row per line that names a GPU model with a known capacity.

    One scan of the whole text finds the lines that may name a GPU (a long log names none on almost
    every line); only those lines are read for a model's name. ``candidates``: (0-based index, text) of
    a superset of the lines :data:`PREFILTER` matches, found already (``parsers.routing``): the text is
    then not scanned again.
    """
    rows: list[dict[str, Any]] = []
    n_lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    if candidates is not None:
        for i, line in candidates:
            if _PREFILTER.search(line):
                _read_line(i + 1, line.rstrip("\r"), rows)
        return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=n_lines, recognized=0)
    line_no, counted_to, next_line_start = 1, 0, 0
    for hit in _PREFILTER.finditer(text):
        if hit.start() < next_line_start:  # this line was read already
            continue
        line_no += text.count("\n", counted_to, hit.start())
        counted_to = hit.start()
        start = text.rfind("\n", 0, hit.start()) + 1
        end = text.find("\n", hit.start())
        end = len(text) if end < 0 else end
        next_line_start = end + 1
        _read_line(line_no, text[start:end].rstrip("\r"), rows)
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=n_lines, recognized=0)


def _read_line(line_no: int, line: str, rows: list[dict[str, Any]]) -> None:
    """The row of one line the prefilter flagged, if it names a model of known capacity."""
    if not _NEEDLE.search(line):
        return
    for m in _NAME.finditer(line):
        cap = capacity_of(m.group(0))
        if cap is None:
            continue
        rows.append({"line": line_no, "kind": "gpu_model", "total_bytes": cap, "text": line[:500],
                     "attrs": {"model": m.group(0).strip(), "stated_size": bool(m.group("size"))}})
        return


#: The gate of the name search, public for ``parsers.routing``.
PREFILTER = _PREFILTER

"""NVIDIA's Xid catalog as data: meaning, usual cause, action and a severity per Xid code.

The catalog ships as ``forensics/data/xid_catalog.json``, built from NVIDIA's Xid catalog by
``tools/build_xid_catalog.py`` (which documents how severity follows from the catalog's immediate
resolution bucket: RESTART_BM/WORKFLOW_XID_48 → critical, RESET_GPU/NVLink workflows → high,
RESTART_APP → medium, IGNORE/WORKFLOW_XID_45 → low, unused codes → info, plus a few reasoned
overrides). Flags mark families a detector cares about: ``noise_after_kill`` (Xid 43/45, logged when a
process is killed or torn down, so noise next to an OOM kill or ``pkill``), ``app_fault``,
``memory_ecc``, ``nvlink``, ``gsp``, ``fallen_off_bus`` and ``unused``.

>>> info = lookup(79)
>>> (info.mnemonic, info.severity, info.immediate_action, "fallen_off_bus" in info.flags)
('ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS', 'critical', 'RESTART_BM', True)
>>> lookup(45).has("noise_after_kill"), lookup(13).severity
(True, 'medium')
>>> lookup(99999) is None
True
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

SEVERITIES = ("critical", "high", "medium", "low", "info")


@dataclass(frozen=True)
class XidInfo:
    """One catalog entry."""

    code: int
    mnemonic: str
    description: str  # the meaning, as the catalog words it
    cause: str  # usual cause, in a few words
    immediate_action: str | None  # resolution bucket to get back into service (RESTART_APP, RESET_GPU, …)
    investigatory_action: str | None  # bucket to find the root cause
    action: str | None  # the immediate bucket in words
    severity: str  # critical | high | medium | low | info
    severity_reason: str
    flags: frozenset[str]
    applies_to: tuple[str, ...]  # A100, H100, B100, GB200
    xid154_linkage: str | None
    trigger: str | None  # first paragraph of the catalog's trigger conditions

    @property
    def name(self) -> str:
        return self.mnemonic

    def has(self, flag: str) -> bool:
        return flag in self.flags


def _entry(d: dict) -> XidInfo:
    return XidInfo(
        code=int(d["code"]),
        mnemonic=d["mnemonic"],
        description=d["description"],
        cause=d["cause"],
        immediate_action=d.get("immediate_action"),
        investigatory_action=d.get("investigatory_action"),
        action=d.get("action"),
        severity=d["severity"],
        severity_reason=d.get("severity_reason", ""),
        flags=frozenset(d.get("flags", ())),
        applies_to=tuple(d.get("applies_to", ())),
        xid154_linkage=d.get("xid154_linkage"),
        trigger=d.get("trigger"),
    )


@cache
def catalog_document() -> dict:
    """The raw JSON document (schema_version, source, severity_by_bucket, buckets, xids)."""
    text = resources.files("forensics.data").joinpath("xid_catalog.json").read_text(encoding="utf-8")
    return json.loads(text)


@cache
def load_catalog() -> dict[int, XidInfo]:
    """Xid code → :class:`XidInfo` for every code in the shipped catalog."""
    return {e.code: e for e in map(_entry, catalog_document()["xids"])}


def lookup(code: int) -> XidInfo | None:
    """The catalog entry of one Xid code, or None for a code the catalog does not know."""
    try:
        return load_catalog().get(int(code))
    except (TypeError, ValueError):
        return None

"""Which nvidia-smi GPU index a UUID or PCI bus id names, learnt once from the whole timeline.

Kernel Xid lines name a GPU by PCI address (``NVRM: Xid (PCI:0000:9b:00): 79, …``), the collector's
``--query-compute-apps`` rows and some ``--query-*`` rows by UUID, and ``nvidia-smi -L``, ``-q``,
the CSV and the table say which index each address or UUID has. This module joins them so that a
detector can give such rows their ``gpu``:

* index ↔ UUID and index ↔ bus id from every nvidia-smi row that carries an index (``gpu_memory``,
  ``gpu_device`` of ``-L``/``nvlink -s``, ``gpu_mig_device`` — a MIG UUID names its parent GPU —,
  ``gpu_error``, and process rows whose index is printed);
* UUID ↔ bus id pairs without an index (the kernel's ``NVRM: GPU at PCI:…: GPU-…``, compute-apps
  rows with both ``gpu_uuid`` and ``gpu_bus_id``) carry an index from one to the other.

Only nvidia-smi's own indexes count: a CUDA ordinal (``GPU 0`` in a PyTorch OOM, SGLang's
``gpu_id``) depends on ``CUDA_VISIBLE_DEVICES`` and is never used. Keys are per host; a key that two
rows map to different indexes is dropped as ambiguous rather than guessed.

>>> m = GpuMap()
>>> m.learn(None, 3, uuid="GPU-AB12", pci_bus_id="00000000:9B:00.0", where="smi.txt:4")
>>> m.index_of(pci_bus_id="PCI:0000:9b:00"), m.index_of(uuid="gpu-ab12"), m.index_of(uuid="GPU-FFFF")
(3, 3, None)
>>> fill_gpus([{"kind": "xid", "gpu": None, "attrs": '{"pci_bus_id": "0000:9b:00"}'}], m)[0]["gpu"]
3
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from forensics.model import Timeline
from parsers.kernel import normalize_pci

Row = dict[str, Any]

#: Kinds whose ``gpu`` is nvidia-smi's index (when the row's source is an nvidia-smi parser).
INDEXED_KINDS = ("gpu_memory", "gpu_device", "gpu_mig_device", "gpu_error", "gpu_process", "gpu_query_row",
                 "nvlink_status")
#: Kinds that may pair a UUID with a bus id without naming an index.
PAIR_KINDS = ("nvrm", "xid", "gpu_fallen_off_bus", "gpu_process", "gpu_query_row")
_UUID_KEYS = ("uuid", "gpu_uuid", "parent_uuid")
_BUS_KEYS = ("pci_bus_id", "bus_id", "gpu_bus_id")


def _uuid_key(value: Any) -> str | None:
    s = str(value or "").strip().lower()
    return s if s.startswith(("gpu-", "mig-")) else None


def _bus_key(value: Any) -> str | None:
    s = str(value or "").strip()
    if not s or s.lower() in ("n/a", "none"):
        return None
    key = normalize_pci(s)
    return key if key.count(":") == 2 else None


def _attrs(row: Row) -> dict[str, Any]:
    cached = row.get("_attrs")
    if isinstance(cached, dict):
        return cached
    raw = row.get("attrs")
    try:
        out = json.loads(raw) if isinstance(raw, str) and raw else (raw if isinstance(raw, dict) else {})
    except ValueError:
        out = {}
    return out if isinstance(out, dict) else {}


@dataclass
class GpuMap:
    """(host, UUID or bus id) → nvidia-smi GPU index, with where each was learnt."""

    index: dict[tuple[str | None, str], int] = field(default_factory=dict)
    where: dict[tuple[str | None, str], str] = field(default_factory=dict)
    ambiguous: set[tuple[str | None, str]] = field(default_factory=set)

    def learn(self, host: str | None, gpu: int, *, uuid: Any = None, pci_bus_id: Any = None,
              where: str = "") -> None:
        for key in (_uuid_key(uuid), _bus_key(pci_bus_id)):
            if key is None:
                continue
            k = (host, key)
            if k in self.ambiguous:
                continue
            old = self.index.get(k)
            if old is None:
                self.index[k], self.where[k] = gpu, where
            elif old != gpu:
                self.ambiguous.add(k)
                del self.index[k], self.where[k]

    def _get(self, host: str | None, key: str | None) -> tuple[int, str] | None:
        if key is None:
            return None
        k = (host, key)
        if k in self.index:
            return self.index[k], self.where[k]
        # a row without a host, or a map learnt from rows without one: one unambiguous answer is enough
        found = {(h, i) for (h, kk), i in self.index.items() if kk == key and (host is None or h is None)}
        if len({i for _h, i in found}) == 1:
            h = next(iter(found))[0]
            return self.index[(h, key)], self.where[(h, key)]
        return None

    def lookup(self, *, uuid: Any = None, pci_bus_id: Any = None, host: str | None = None
               ) -> tuple[int, str] | None:
        """``(index, how)``: how = ``"uuid <U> (file:line)"`` or ``"pci_bus_id <B> (file:line)"``."""
        u = _uuid_key(uuid)
        got = self._get(host, u)
        if got:
            return got[0], f"uuid {uuid} ({got[1]})"
        b = _bus_key(pci_bus_id)
        got = self._get(host, b)
        if got:
            return got[0], f"pci_bus_id {b} ({got[1]})"
        return None

    def index_of(self, *, uuid: Any = None, pci_bus_id: Any = None, host: str | None = None) -> int | None:
        got = self.lookup(uuid=uuid, pci_bus_id=pci_bus_id, host=host)
        return got[0] if got else None

    def for_row(self, row: Row) -> tuple[int, str] | None:
        """The index a row's UUID or bus id maps to (its own ``gpu`` is not consulted)."""
        a = _attrs(row)
        uuid = next((a[k] for k in ("gpu_uuid", "uuid") if _uuid_key(a.get(k))), None)
        bus = next((a[k] for k in _BUS_KEYS if _bus_key(a.get(k))), None)
        return self.lookup(uuid=uuid, pci_bus_id=bus, host=row.get("host"))


def build(frame: pl.DataFrame) -> GpuMap:
    """The map from a timeline's events (see the module doc for which rows teach what)."""
    m = GpuMap()
    if frame.is_empty() or "kind" not in frame.columns:
        return m
    wanted = frame.filter(pl.col("kind").is_in(list(dict.fromkeys(INDEXED_KINDS + PAIR_KINDS))))
    pairs: list[tuple[str | None, str | None, str | None, str]] = []
    for r in wanted.sort("file", "line", nulls_last=True).iter_rows(named=True):
        a = _attrs(r)
        where = f"{r.get('file')}:{r.get('line')}"
        uuid = next((a[k] for k in ("uuid", "gpu_uuid") if _uuid_key(a.get(k))), None)
        bus = next((a[k] for k in _BUS_KEYS if _bus_key(a.get(k))), None)
        from_smi = str(r.get("source") or "").startswith("nvidia_smi")
        if r.get("gpu") is not None and from_smi and r["kind"] in INDEXED_KINDS:
            m.learn(r.get("host"), int(r["gpu"]), uuid=uuid, pci_bus_id=bus, where=where)
            if r["kind"] == "gpu_mig_device" and _uuid_key(a.get("parent_uuid")):
                m.learn(r.get("host"), int(r["gpu"]), uuid=a["parent_uuid"], where=where)
        elif uuid and bus:
            pairs.append((r.get("host"), _uuid_key(uuid), _bus_key(bus), where))
    # a UUID ↔ bus pair lends an index from whichever side has one to the other
    for host, u, b, where in pairs:
        got = m.lookup(uuid=u, host=host) or m.lookup(pci_bus_id=b, host=host)
        if got:
            m.learn(host, got[0], uuid=u, pci_bus_id=b, where=f"{where} via {got[1]}")
    return m


def gpu_map(tl: Timeline) -> GpuMap:
    """The map for this timeline, computed once per events frame."""
    memo = tl.__dict__.get("_gpu_map")
    if memo is None or memo[0] is not tl.events:
        memo = (tl.events, build(tl.events))
        tl.__dict__["_gpu_map"] = memo
    return memo[1]


def with_gpu(row: Row, m: GpuMap) -> Row:
    """The row with ``gpu`` filled from its UUID or bus id when the map knows it (a new dict, with
    ``gpu_from`` saying how); the row itself when it has a ``gpu`` or the map does not know it."""
    if row.get("gpu") is not None:
        return row
    got = m.for_row(row)
    if got is None:
        return row
    return {**row, "gpu": got[0], "gpu_from": got[1]}


def fill_gpus(rows: Iterable[Row], m: GpuMap) -> list[Row]:
    """:func:`with_gpu` over rows."""
    return [with_gpu(r, m) for r in rows]

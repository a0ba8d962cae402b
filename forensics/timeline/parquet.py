"""timeline.parquet: the event schema, the facts and coverage as file metadata, written as measured best."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from datetime import UTC, datetime
from typing import Any

from forensics.model import Facts, Timeline, json_safe
from parsers.schema import EVENT_SCHEMA

#: How timeline.parquet is written. Compressing text and attrs is most of the cost of a big input (~40 ms
#: an 8 MiB chunk): zstd level 1 (no slower than lz4 here, and smaller), dictionaries only where values
#: repeat (a dictionary tried on line numbers or token counts is built and thrown away), no min/max
#: statistics of whole log lines, line numbers delta-encoded. Measured 15% faster and 15% smaller than
#: pyarrow's defaults on the benchmark's chunks. Measured again with the typed ``fields`` members
#: (bench/chunk.py --options, one 8 MiB chunk): zstd 3 no smaller, lz4/snappy ~15% faster but 1.8× the
#: bytes, a dictionary on every column slower and 25% bigger, none at all no faster, row groups of 16k
#: rows slower, other page sizes no better; delta-encoding the members' integers 2% smaller, no faster.
PARQUET_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "compression_level": 1,
    "use_dictionary": ["host", "file", "source", "kind", "ts_basis", "rank", "comm"],
    "write_statistics": [c for c in EVENT_SCHEMA if c not in ("text", "attrs")],
    "column_encoding": {"line": "DELTA_BINARY_PACKED", "line_end": "DELTA_BINARY_PACKED"},
}

def write_parquet(tl: Timeline, path: str | os.PathLike) -> None:
    """timeline.parquet: zstd, the event schema, plus the facts as file metadata."""
    import pyarrow.parquet as pq

    if tl.parquet_path:
        place_parquet(tl.parquet_path, path)
        return
    table = tl.events.to_arrow()
    meta = dict(table.schema.metadata or {})
    meta.update(parquet_meta(tl.facts, tl.coverage))
    table = table.replace_schema_metadata(meta)
    pq.write_table(table, str(path), **PARQUET_OPTIONS)


def parquet_meta(facts: Facts, coverage: list[dict[str, Any]]) -> dict[bytes, bytes]:
    return {b"forensics.facts": json.dumps(_facts_json(facts), sort_keys=True).encode(),
            b"forensics.coverage": json.dumps(coverage, sort_keys=True).encode()}


def place_parquet(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Put the streamed timeline.parquet at ``dst``: a hard link when it can (same disk, no copy), else a
    copy; through a temporary name in dst's folder, then renamed over it."""
    dst = os.fspath(dst)
    tmp = os.path.join(os.path.dirname(dst) or ".", f".{os.path.basename(dst)}.{secrets.token_hex(6)}.tmp")
    try:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _facts_json(f: Facts) -> dict[str, Any]:
    def iso(d: datetime | None) -> str | None:
        return d.astimezone(UTC).isoformat().replace("+00:00", "Z") if d else None

    return {
        "input_paths": f.input_paths, "host": f.host, "collected_at": iso(f.collected_at),
        "utc_offset_s": f.utc_offset_s, "tz_assumed": f.tz_assumed, "boot_time": iso(f.boot_time),
        "sglang_version": f.sglang_version, "versions": f.versions, "gaps": f.gaps, "notes": f.notes,
        **({"hosts": _hosts_json(f)} if f.hosts else {}),
    }


def _hosts_json(f: Facts) -> dict[str, Any]:
    return {name: json_safe(h.as_dict()) for name, h in sorted(f.hosts.items())}


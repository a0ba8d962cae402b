"""Each row's instant in UTC: host-local stamps with the input's offset (or the zone assumed, and said),
kernel uptime with the boot time, and the basis of each row's time."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import polars as pl

from forensics.model import Facts
from parsers.schema import EVENT_SCHEMA


def resolve_time(frame: pl.DataFrame, facts: Facts, tz: str | None, capture: datetime | None) -> pl.DataFrame:
    """Fill ``ts`` (UTC) and ``ts_basis`` from whatever clock each row carries."""
    if frame.is_empty():
        return frame
    local = pl.col("ts_local")
    if tz:
        local_utc = local.dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null").dt.convert_time_zone("UTC")
        local_basis = "local+tz"
    elif facts.utc_offset_s is not None:
        local_utc = (local - pl.duration(seconds=facts.utc_offset_s)).dt.replace_time_zone("UTC")
        local_basis = "local+offset"
    else:
        local_utc = local.dt.replace_time_zone("UTC")
        local_basis = "local-assumed"
    if facts.boot_time is not None:
        boot = facts.boot_time.astimezone(UTC).replace(tzinfo=None)
        up_utc = (pl.lit(boot) + pl.duration(microseconds=(pl.col("uptime_s") * 1e6).cast(pl.Int64))
                  ).dt.replace_time_zone("UTC")
    else:
        up_utc = pl.lit(None, dtype=EVENT_SCHEMA["ts"])
    cap = pl.lit(capture.astimezone(UTC).replace(tzinfo=None)).dt.replace_time_zone("UTC") if capture else \
        pl.lit(None, dtype=EVENT_SCHEMA["ts"])
    # each clock as (condition, ts, basis), in the order they are preferred; a clock no row of the frame has
    # is left out (a null count is metadata, no pass): the same result with fewer branches to evaluate
    env = pl.col("env_ts") if "env_ts" in frame.columns else None
    clocks = []
    if frame.get_column("ts").null_count() < frame.height:
        clocks.append((pl.col("ts").is_not_null(), pl.col("ts"), "source-utc"))
    if frame.get_column("ts_local").null_count() < frame.height:
        clocks.append((local.is_not_null(), local_utc, local_basis))
    if facts.boot_time is not None and frame.get_column("uptime_s").null_count() < frame.height:
        clocks.append((pl.col("uptime_s").is_not_null(), up_utc, "uptime+boot"))
    # no clock of the row's own: its envelope's (docker, journald) stamp
    if env is not None and frame.get_column("env_ts").null_count() < frame.height:
        clocks.append((env.is_not_null(), env, "envelope"))
    if capture is not None:
        clocks.append((pl.lit(True), cap, "capture"))
    if not clocks:
        return frame.with_columns(ts=pl.lit(None, dtype=EVENT_SCHEMA["ts"]), ts_basis=pl.lit("none"))
    ts: Any = pl
    basis: Any = pl
    for cond, value, name in clocks:
        ts, basis = ts.when(cond).then(value), basis.when(cond).then(pl.lit(name))
    return frame.with_columns(ts=ts.otherwise(None).cast(EVENT_SCHEMA["ts"]), ts_basis=basis.otherwise(pl.lit("none")))

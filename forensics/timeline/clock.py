"""Each row's instant in UTC: host-local stamps with the input's offset (or the zone assumed, and said),
kernel uptime with the boot time, and the basis of each row's time."""

from __future__ import annotations

from datetime import UTC, datetime

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
    has_ts = pl.col("ts").is_not_null()
    has_local = local.is_not_null()
    has_up = pl.col("uptime_s").is_not_null() & pl.lit(facts.boot_time is not None)
    has_cap = pl.lit(capture is not None)
    # no clock of the row's own: its envelope's (docker, journald) stamp
    env = pl.col("env_ts") if "env_ts" in frame.columns else pl.lit(None, dtype=EVENT_SCHEMA["ts"])
    has_env = env.is_not_null()
    return frame.with_columns(
        ts=pl.when(has_ts).then(pl.col("ts"))
        .when(has_local).then(local_utc)
        .when(has_up).then(up_utc)
        .when(has_env).then(env)
        .when(has_cap).then(cap)
        .otherwise(None).cast(EVENT_SCHEMA["ts"]),
        ts_basis=pl.when(has_ts).then(pl.lit("source-utc"))
        .when(has_local).then(pl.lit(local_basis))
        .when(has_up).then(pl.lit("uptime+boot"))
        .when(has_env).then(pl.lit("envelope"))
        .when(has_cap).then(pl.lit("capture"))
        .otherwise(pl.lit("none")),
    )



"""What the files given to ``check`` beside the launch state: the facts ``report`` would read from them.

A launch is often checked with its companions: the LMCache YAML its ``LMCACHE_CONFIG_FILE`` names, a cgroup's
``memory.max``, a pasted ``free -g``. They hold no command, but they size or bound the launch's host pools; the
same parsers ``report`` runs read them, and only the rows that state a configuration or a limit are kept (a log
given to ``check`` is ``report``'s input, not a fact of a launch that has not happened).
"""

from __future__ import annotations

import polars as pl

from parsers import container_limits
from parsers import free as free_parser
from parsers import launch as launch_parser
from parsers.schema import NotThisFormat

#: the rows that size or bound a launch's pools, by the parser that reads them
_READERS = ((launch_parser, ("lmcache_config",)), (container_limits, ("container_memory_limit",)),
            (free_parser, ("host_memory",)))


def context_frames(text: str, name: str) -> tuple[list[pl.DataFrame], str | None]:
    """The configuration and limit rows of one companion file, and the format that read them (None: nothing)."""
    for module, kinds in _READERS:
        try:
            res = module.parse(text, name)
        except (NotThisFormat, ValueError):
            continue
        frame = res.events.filter(pl.col("kind").is_in(kinds))
        if frame.height:
            return [frame.with_columns(pl.lit(name).alias("file"))], module.FORMAT if hasattr(module, "FORMAT") \
                else module.__name__.rsplit(".", 1)[-1]
    return [], None

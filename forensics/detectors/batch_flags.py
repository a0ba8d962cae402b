"""Smaller batches as a fix: the flags that bound what one forward step holds, set from what the input shows ran.

SGLang's troubleshooting guide (docs/references/troubleshooting.md, "CUDA out of memory" and "KV cache"): a
failure in decode eases with fewer ``--max-running-requests``, one in prefill with a smaller
``--chunked-prefill-size``. Both the activations of a step and the KV tokens its batch adds grow with those
bounds, so half of what last ran is the step taken; a bound already below that is left alone.

>>> halved_running(184, None), halved_running(184, 120), halved_running(1, None)
(92, 60, None)
"""

from __future__ import annotations

from forensics.facts.launch import ServerConfig
from forensics.facts.rows import Row, attrs, before
from forensics.facts.runs import of_kind
from forensics.model import FlagChange

#: SGLang's smallest prefill chunk (server_args.py: the automatic chunk of the smallest GPUs)
MIN_PREFILL_CHUNK = 2048


def halved_running(running: int, cap: float | None) -> int | None:
    """Half the running requests, under the configured cap; None when that changes nothing."""
    new = max(1, min(running, int(cap) if cap else running) // 2)
    return None if running < 2 or (cap and new >= cap) else new


def running_requests_flag(cfg: ServerConfig, run: list[Row], failure: Row, what: str) -> FlagChange | None:
    """``--max-running-requests`` at half the last decode batch's ``#running-req`` before ``failure`` (a prefill
    batch line's ``#running-req`` counts the same decoding requests when no decode line came after it,
    sglang_formats.md §6)."""
    batches = [r for r in of_kind(run, "decode_batch", "prefill_batch") if before(r, failure)
               and (r.get("count") if r.get("kind") == "decode_batch" else attrs(r).get("running_req"))]
    if not batches:
        return None
    last = batches[-1]
    running = int(last["count"] if last.get("kind") == "decode_batch" else attrs(last)["running_req"])
    new = halved_running(running, cfg.num("max_running_requests"))
    if new is None:
        return None
    return FlagChange("--max-running-requests", cfg.flag_text("max_running_requests"), str(new),
                      f"half the {running} requests the last {last['kind'].split('_')[0]} batch before the failure "
                      f"ran: {what}")


def default_prefill_chunk(gpu_bytes: float | None) -> int:
    """The chunk SGLang picks by the GPU's memory when the flag is not set (sglang python/sglang/srt/server_args.py
    (0.4-0.5) ``__post_init__``: 2048 below 35 GiB, 8192 below 160 GiB, 16384 above, 4096 when the size is unknown).

    >>> default_prefill_chunk(24 * 2**30), default_prefill_chunk(80 * 2**30), default_prefill_chunk(None)
    (2048, 8192, 4096)
    """
    if not gpu_bytes:
        return 4096
    mib = gpu_bytes / 2**20
    return 2048 if mib < 35 * 1024 else 8192 if mib < 160 * 1024 else 16384


def prefill_chunk_flag(cfg: ServerConfig, last_prefill: Row | None, what: str,
                       gpu_bytes: float | None = None) -> FlagChange | None:
    """``--chunked-prefill-size`` at half the chunk the input states, else half the last prefill's new tokens
    (which the chunk bounds); never below SGLang's smallest chunk. With chunking turned off (``-1``) a prompt's
    whole prefill is one forward: the fix is chunking again, at the chunk SGLang itself would pick."""
    chunk = cfg.num("chunked_prefill_size")
    if chunk is not None and chunk <= 0:
        new = default_prefill_chunk(gpu_bytes)
        return FlagChange("--chunked-prefill-size", cfg.flag_text("chunked_prefill_size"), str(new),
                          f"chunked prefill is off ({int(chunk)}): each prompt's whole prefill runs in one forward, "
                          f"its activations growing with the prompt; {new} is the chunk SGLang picks itself for "
                          + ("this GPU's size" if gpu_bytes else "a GPU of unknown size") + f": {what}")
    how = "--chunked-prefill-size"
    if not chunk or chunk <= 0:
        chunk, how = (last_prefill or {}).get("tokens"), "the last prefill's new tokens before the failure"
    if not isinstance(chunk, int | float) or chunk < 2 * MIN_PREFILL_CHUNK:
        return None
    new = int(chunk) // 2
    return FlagChange("--chunked-prefill-size", cfg.flag_text("chunked_prefill_size"), str(new),
                      f"half of {int(chunk)} tokens ({how}): {what}")

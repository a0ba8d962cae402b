"""Inputs of the shapes that cost memory rather than time (issue 26: peak RSS ≤ 512 MB whatever the input),
made once under bench/_data/ by ``bench/run.py --shape NAME[=SIZE]``:

- ``unknown``: an SGLang rank log (its start-up lines, then its prefix on every line) whose lines after the
  start-up are a plugin's chatter that no pattern reads: every one is a ``log`` row of the streamed parser.
- ``vllm``: a vLLM server's log (its start-up, then the engine's metrics line every 5 s between request
  lines and uvicorn access lines), the way a server that ran for weeks leaves it.
- ``kernel``: a kernel ring buffer (dmesg) of device chatter, the way a host up for months leaves it.
- ``plain``: text no parser claims (a sidecar's heartbeat lines): only the readers that look anywhere
  (failures, launches, GPU names, dumps) have anything to do with it.

The lines are our own, in the formats the parsers document (vllm_formats.md §1 for vLLM's header).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

DATA = Path(__file__).resolve().parent / "_data"


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def _unknown(rng: random.Random, t0: float) -> Iterator[str]:
    yield f"[{_stamp(t0)} TP0] Load weight begin. avail mem=93.79 GB"
    yield f"[{_stamp(t0 + 1)} TP0] KV Cache is allocated. #tokens: 221628, KV size: 14.50 GB"
    i = 0
    while True:
        i += 1
        yield (f"[{_stamp(t0 + 2 + i * 0.01)} TP0] plugin tick {i} queue={rng.randint(0, 99)} "
               f"note=nothing reads this line {rng.random():.6f}")


def _vllm(rng: random.Random, t0: float) -> Iterator[str]:
    def hdr(t: float, lvl: str = "INFO", src: str = "api_server.py:651") -> str:
        return f"{lvl} {time.strftime('%m-%d %H:%M:%S', time.gmtime(t))} {src}]"

    yield f"{hdr(t0)} vLLM API server version 0.6.6"
    yield (f"{hdr(t0, src='llm_engine.py:234')} Initializing an LLM engine (v0.6.6) with config: "
           "model='meta-llama/Llama-3.1-70B-Instruct', max_seq_len=32768, tensor_parallel_size=2")
    yield f"{hdr(t0 + 60, src='worker.py:241')} Loading model weights took 65.7 GB"
    yield f"{hdr(t0 + 70, src='executor_base.py:56')} # GPU blocks: 4120, # CPU blocks: 1638"
    t = t0 + 100
    while True:
        t += rng.random() * 0.2
        r = rng.random()
        if r < 0.05:
            yield (f"{hdr(t, src='metrics.py:467')} Avg prompt throughput: {rng.uniform(0, 3000):.1f} tokens/s, "
                   f"Avg generation throughput: {rng.uniform(0, 900):.1f} tokens/s, Running: {rng.randint(0, 64)} "
                   f"reqs, Swapped: 0 reqs, Pending: {rng.randint(0, 9)} reqs, GPU KV cache usage: "
                   f"{rng.uniform(0, 99):.1f}%, CPU KV cache usage: 0.0%.")
        elif r < 0.55:
            yield f"{hdr(t, src='engine.py:275')} Added request cmpl-{rng.getrandbits(64):016x}-0."
        else:
            yield (f'INFO:     10.0.0.{rng.randint(2, 250)}:{rng.randint(30000, 60000)} - '
                   '"POST /v1/completions HTTP/1.1" 200 OK')


def _kernel(rng: random.Random, t0: float) -> Iterator[str]:
    i = 0
    while True:
        i += 1
        yield f"[{i * 0.37:12.6f}] usb 1-{i % 4}: new high-speed USB device number {rng.randint(1, 127)} using xhci_hcd"


def _plain(rng: random.Random, t0: float) -> Iterator[str]:
    i = 0
    while True:
        i += 1
        yield (f"{_stamp(t0 + i)} sidecar-{i % 7} heartbeat seq={i} status=ok "
               f"latency_ms={rng.random() * 40:.3f}")


SHAPES: dict[str, tuple[Callable[[random.Random, float], Iterator[str]], str]] = {
    "unknown": (_unknown, "log"), "vllm": (_vllm, "log"), "kernel": (_kernel, "txt"), "plain": (_plain, "txt")}


def shape(name: str, size: int, seed: int = 5) -> Path:
    """The ``name`` input of about ``size`` bytes (made once, atomically)."""
    make, ext = SHAPES[name]
    DATA.mkdir(parents=True, exist_ok=True)
    dest = DATA / f"shape-{name}-{size}.{ext}"
    if dest.exists():
        return dest
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    done = 0
    with open(tmp, "w") as fh:
        for line in make(random.Random(seed), 1_764_000_000.0):
            fh.write(line + "\n")
            done += len(line) + 1
            if done >= size:
                break
    tmp.rename(dest)
    return dest

"""The --mem-fraction-static SGLang picks itself when the launch does not set one.

Source: sglang python/sglang/srt/server_args.py. Before 0.5.3 ``__post_init__`` picks it by the TP size (0.79 at
16+, 0.81 at 8+, 0.85 at 4+, 0.87 at 2+, else 0.88). From 0.5.3 (PR #10975) ``_handle_gpu_memory_settings``
derives it from the GPU's memory: the fraction is (weights + KV pool) ÷ capacity, so it is ``(capacity − reserve)
÷ capacity`` with a reserve (MiB) for what lives outside the pool: 512 of metadata, 1.5 per token of the largest
prefill chunk (at least 2048), 2 per captured batch size, tp × pp / 8 GiB for the parallel groups, 3 per batch
size per DP rank under DP attention (1.5 more above 300), at least 10 GiB on a GPU over 60 GiB, and 2 GiB for a
speculative draft (6 GiB for STANDALONE, none for NGRAM). The chunk and the largest graph batch default by the
GPU's size when unset (the tiers below).

>>> round(default_fraction_for_gpu(80 * 2**30, tp=1)[0], 3)
0.836
>>> round(default_fraction_for_gpu(80 * 2**30, tp=8)[0], 3)
0.819
>>> default_fraction_for_tp(2)
0.87
"""

from __future__ import annotations

MIB = 2**20
GIB = 2**30
#: (below this many GiB, chunked_prefill_size, cuda_graph_max_bs below TP 4, at TP 4+): server_args.py's tiers
_GPU_TIERS = ((20, 2048, 8, 8), (35, 2048, 24, 80), (60, 4096, 32, 160), (90, 8192, 256, 512),
              (160, 8192, 256, 512), (float("inf"), 16384, 512, 512))
#: the releases that derive the fraction from the GPU's memory
FROM_GPU_SINCE = (0, 5, 3)


def default_fraction_for_tp(tp: int) -> float:
    """The TP-size table of the releases before 0.5.3."""
    for at_least, value in ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87)):
        if tp >= at_least:
            return value
    return 0.88


def default_fraction_for_gpu(capacity: float, tp: int = 1, pp: int = 1, chunk: float | None = None,
                             graph_bs: float | None = None, dp_attention: bool = False, dp: int = 1,
                             speculative: str | None = None) -> tuple[float, float]:
    """(fraction, reserve in bytes) as 0.5.3+ picks them for a GPU of ``capacity`` bytes."""
    gib = capacity / GIB
    _, tier_chunk, small_bs, large_bs = next(t for t in _GPU_TIERS if gib < t[0])
    chunk = chunk if chunk else tier_chunk
    graph_bs = graph_bs if graph_bs else (small_bs if tp < 4 else large_bs)
    reserve = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp * pp / 8 * 1024
    if dp_attention:
        reserve += graph_bs * dp * 3 + (graph_bs * dp * 1.5 if graph_bs > 300 else 0)
    if gib > 60:
        reserve = max(reserve, 10 * 1024)
    if speculative:
        reserve += 6 * 1024 if speculative.upper() == "STANDALONE" else 0 if speculative.upper() == "NGRAM" else 2 * 1024
    capacity_mib = capacity / MIB
    return round((capacity_mib - reserve) / capacity_mib, 3), reserve * MIB

"""SGL-CHK-001…004: what ``forensics check`` can see before a launch that the log rules see only after.

Sources: SGL-CHK-001 reads nvidia-smi's memory.used (reference/system_formats.md §2.2); SGL-CHK-002 the
/dev/shm NCCL needs (reference/failure_messages.md §4.1, ``failed to extend /dev/shm/nccl-…``); SGL-CHK-003
the KV pool against the context length (reference/sglang_formats.md §3 and the refusal of
reference/failure_messages.md §6.1); SGL-CHK-004 what ``--mem-fraction-static`` leaves
(reference/sglang_formats.md §5).

These rules read facts only ``forensics check`` puts in a timeline (``attrs.check`` on the rows: this
host's GPUs right now, the container's /dev/shm, the model's config.json), so ``report`` does not run
them; the per-rank HiCache arithmetic is SGL-HOST-001's own and GPUs stranded by a killed server are
SGL-GPU-005's, both run by :func:`forensics.detectors.run_all` on the same timeline.

The thresholds are the log rules': a GPU "holds memory" from :func:`stranded_context.held_threshold`,
the headroom target is :func:`cuda_graph_headroom.margin_bytes`, a corrected fraction is
:func:`cuda_graph_headroom.corrected_fraction`.

>>> kv_bytes_per_token({"num_hidden_layers": 80, "num_key_value_heads": 8, "hidden_size": 8192,
...                     "num_attention_heads": 64}, tp=8, dtype_bytes=2)
40960
>>> kv_bytes_per_token({"num_hidden_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64}, tp=8, dtype_bytes=1)
35136
"""

from __future__ import annotations

import math
from typing import Any

from forensics.facts.launch import launch_rows, ranks_per_host, server_config
from forensics.facts.rows import Row, attrs, rows
from forensics.model import Finding, FlagChange, Timeline

from ._common import GIB, MIB, fmt_gib, make_finding
from .cuda_graph_headroom import corrected_fraction, margin_bytes
from .stranded_context import held_threshold

#: NCCL's shared-memory transport between the GPUs of one host lives in /dev/shm; docker's default is
#: 64 MiB, enough for two ranks at most. Below this a multi-GPU container is flagged.
SHM_MIN_BYTES = GIB
SHM_ADVICE = "32g"  # what SGLang's docker instructions pass
DOCKER_DEFAULT_SHM = 64 * MIB
KV_DTYPE_BYTES = {"fp8_e4m3": 1, "fp8_e5m2": 1, "fp8": 1, "int8": 1, "fp4_e2m1": 0.5,
                  "bfloat16": 2, "float16": 2, "half": 2, "bf16": 2, "fp16": 2, "float32": 4, "auto": None}


def is_check_row(row: Row) -> bool:
    return bool(attrs(row).get("check"))


def detect(tl: Timeline, prior: list[Finding] | None = None) -> list[Finding]:
    prior = prior or []
    out: list[Finding] = []
    for rule in (_busy_gpus, _shm, _headroom, _context):
        found = rule(tl, prior)
        if found:
            out.append(found)
    return out


def _launch(tl: Timeline) -> Row | None:
    launches = launch_rows(tl)
    return launches[-1] if launches else None


# ---------------------------------------------------------------------------------------------
# GPUs in use before the launch


def _busy_gpus(tl: Timeline, prior: list[Finding]) -> Finding | None:
    stranded = {g for f in prior if f.rule_id == "SGL-GPU-005" for g in f.gpus}
    snap = [r for r in rows(tl, "gpu_memory") if is_check_row(r) and r.get("gpu") is not None]
    procs = [p for p in rows(tl, "gpu_process") if is_check_row(p)]
    busy: list[tuple[Row, list[Row]]] = []
    for r in sorted(snap, key=lambda r: r["gpu"]):
        gpu = int(r["gpu"])
        owners = [p for p in procs if p.get("gpu") is not None and int(p["gpu"]) == gpu]
        used = r.get("used_bytes")
        held = used is not None and used >= held_threshold(r.get("total_bytes"))
        if (held or owners) and gpu not in stranded:
            busy.append((r, owners))
    if not busy:
        return None
    gpus = [int(r["gpu"]) for r, _ in busy]
    parts = []
    for r, owners in busy:
        who = ", ".join(f"pid {p.get('pid')} {p.get('comm') or ''}".strip() for p in owners) or "no process listed"
        parts.append(f"GPU {r['gpu']}: {fmt_gib(r.get('used_bytes'))} used ({who})")
    pids = sorted({int(p["pid"]) for _, owners in busy for p in owners if p.get("pid") is not None})
    actions = []
    if pids:
        actions.append(f"See what they are: ps -o pid,stat,etime,args -p {','.join(map(str, pids))}; stop them "
                       f"(kill {' '.join(map(str, pids))}, then kill -9 after a grace period) if they are yours.")
    actions.append(f"Confirm the GPUs are empty before launching: nvidia-smi --query-gpu=index,memory.used "
                   f"--format=csv -i {','.join(map(str, gpus))}")
    actions.append("Memory held with no process listed is a stranded context: fuser -v /dev/nvidia*, then "
                   "see `forensics explain SGL-GPU-005` for the escalation.")
    return make_finding(
        "SGL-CHK-001",
        summary=(f"{len(gpus)} GPU{'s' if len(gpus) > 1 else ''} already in use before the launch — "
                 + "; ".join(parts) + ". SGLang sizes its pools from the free memory and the ranks on these GPUs "
                 "will fail or come up unbalanced: clean up first."),
        evidence=[r for r, _ in busy] + [p for _, owners in busy for p in owners],
        gpus=gpus,
        figures={"busy_gpus": gpus, "used_bytes_per_gpu": {str(r["gpu"]): r.get("used_bytes") for r, _ in busy},
                 "pids": pids or None},
        actions=actions,
    )


# ---------------------------------------------------------------------------------------------
# /dev/shm of a multi-GPU container


def _shm(tl: Timeline, prior: list[Finding]) -> Finding | None:
    row = _launch(tl)
    if row is None:
        return None
    a = attrs(row)
    container = a.get("container")
    if not container or a.get("ipc_host"):
        return None
    cfg = server_config(tl)
    ranks, ranks_how = ranks_per_host(cfg)
    if ranks < 2:
        return None
    size = a.get("docker_shm_size_bytes")
    if size is None and a.get("shm_mount"):
        size = a.get("shm_mount_bytes")  # a memory-backed volume on /dev/shm; None = no size limit
        if size is None:
            return None
    assumed = size is None
    if assumed:
        size = DOCKER_DEFAULT_SHM
    if size >= SHM_MIN_BYTES:
        return None
    how = {"docker": "docker run --shm-size", "compose": "compose shm_size",
           "kubernetes": "an emptyDir volume with medium: Memory mounted at /dev/shm"}.get(container, "--shm-size")
    fix = {"docker": f"add --shm-size {SHM_ADVICE} (or --ipc=host) to the docker run",
           "compose": f"add shm_size: {SHM_ADVICE} (or ipc: host) to the service",
           "kubernetes": "mount an emptyDir {medium: Memory, sizeLimit: 32Gi} at /dev/shm"}.get(container, "")
    flags = [FlagChange("--shm-size", fmt_size(size) if not assumed else None, SHM_ADVICE,
                        f"docker run option: {ranks} ranks ({ranks_how}) share /dev/shm for NCCL's intra-host "
                        f"transport; {fmt_size(size)} < {fmt_size(SHM_MIN_BYTES)}")] if container == "docker" else []
    return make_finding(
        "SGL-CHK-002",
        # "an 8-GPU", "an 11-GPU", "an 18-GPU": the article of the number as it is said
        summary=(f"{'An' if ranks in (11, 18) or str(ranks).startswith('8') else 'A'} {ranks}-GPU server in a {container} container with "
                 + (f"no /dev/shm size set (the default {fmt_size(size)})" if assumed else f"/dev/shm of {fmt_size(size)}")
                 + f": NCCL between the {ranks} ranks needs more; {fix}."),
        evidence=[row],
        confidence="medium" if assumed else "high",
        confidence_reason=("no shm size found in the file: the runtime's 64 MiB default is assumed" if assumed else None),
        figures={"ranks_per_host": ranks, "shm_bytes": size, "shm_assumed_default": assumed, "container": container},
        flags=flags,
        actions=[f"Give the container a larger /dev/shm ({how}), or share the host's IPC namespace."],
    )


# ---------------------------------------------------------------------------------------------
# the memory outside --mem-fraction-static


def _gpu_bytes(tl: Timeline) -> tuple[float | None, Row | None, str]:
    """The smallest GPU's total memory: what SGLang multiplies by the fraction once the GPUs are clean
    (GPUs in use now are SGL-CHK-001's finding, not a reason to shrink the fraction)."""
    snap = [r for r in rows(tl, "gpu_memory") if is_check_row(r) and r.get("total_bytes")]
    if not snap:
        return None, None, "unknown"
    row = min(snap, key=lambda r: r["total_bytes"])
    return float(row["total_bytes"]), row, "GPU total" + (" read" if row.get("used_bytes") is not None else " given")


def fmt_size(n: float) -> str:
    """MiB below a GiB (docker's 64 MiB default reads as what it is), else GiB."""
    return f"{n / MIB:.0f} MiB" if n < GIB else fmt_gib(n)


def _headroom(tl: Timeline, prior: list[Finding]) -> Finding | None:
    row = _launch(tl)
    if row is None:
        return None
    cfg = server_config(tl)
    f = cfg.num("mem_fraction_static")
    if f is None:
        return None  # SGLang picks its own fraction for the GPU: nothing to judge
    gpu, gpu_row, gpu_how = _gpu_bytes(tl)
    if gpu is None:
        return make_finding(
            "SGL-CHK-004", severity="info",
            summary=(f"--mem-fraction-static {f:g} leaves {1 - f:.0%} of each GPU for CUDA graphs, activations and "
                     "NCCL buffers; the GPU's memory is unknown here, so whether that is enough cannot be judged "
                     "(pass --gpu-memory, or run the check on the host)."),
            evidence=[row], confidence="low", confidence_reason="GPU memory unknown",
            figures={"mem_fraction_static": f},
            actions=["After the start, the first log shows 'Capture cuda graph end … avail_mem=X GB': keep X above "
                     "max(1 GiB, 3% of the GPU)."],
        )
    left = (1 - f) * gpu
    target = margin_bytes(gpu)
    graph_bs = cfg.num("cuda_graph_max_bs")
    chunk = cfg.num("chunked_prefill_size")
    if left >= target:
        return make_finding(
            "SGL-CHK-004", severity="info",
            summary=(f"--mem-fraction-static {f:g} leaves {fmt_gib(left)} per GPU ({gpu_how} {fmt_gib(gpu)}) outside "
                     f"the static pool. CUDA-graph capture and prefill activations must fit in it with "
                     f"{fmt_gib(target)} to spare; how much they take is known only after the start."),
            evidence=[r for r in (row, gpu_row) if r], confidence="low",
            confidence_reason="graph and activation sizes are measured at start-up, not predictable from flags",
            figures={"mem_fraction_static": f, "gpu_memory_bytes": int(gpu), "left_outside_static_bytes": int(left),
                     "target_headroom_bytes": int(target)},
            actions=[f"After the start: 'Capture cuda graph end … avail_mem=X GB' must stay above {fmt_gib(target)}; "
                     "`forensics report` on that log (SGL-GPU-003) says by how much to lower the fraction."],
        )
    # less than the after-capture target is left before anything is captured: the log rule (SGL-GPU-003)
    # is certain to fire, whatever the capture takes. Free the missing part plus the margin again for it.
    shortfall = target - left
    new, _freed = corrected_fraction(f, shortfall=shortfall, gpu_bytes=gpu)
    why = (f"(1 − {f:g}) × {fmt_gib(gpu)} = {fmt_gib(left)} < the {fmt_gib(target)} that must stay free after "
           f"capture (max(1 GiB, 3% of the GPU)); {f:g} − ({fmt_gib(shortfall)} short + {fmt_gib(target)} for the "
           f"capture) ÷ {fmt_gib(gpu)} → {new:.2f}")
    alts = []
    if graph_bs:
        alts.append(f"Or lower --cuda-graph-max-bs (now {int(graph_bs)}): smaller captured graphs.")
    if chunk:
        alts.append(f"Or lower --chunked-prefill-size (now {int(chunk)}): a smaller activation peak.")
    return make_finding(
        "SGL-CHK-004",
        summary=(f"--mem-fraction-static {f:g} leaves only {fmt_gib(left)} per GPU ({gpu_how} {fmt_gib(gpu)}) for "
                 f"CUDA-graph capture, activations and NCCL buffers, less than the {fmt_gib(target)} that must "
                 f"still be free after capture: expect a CUDA OOM at capture or at the first large prefill. "
                 f"Set --mem-fraction-static {new:.2f}."),
        evidence=[r for r in (row, gpu_row) if r],
        confidence="high",
        figures={"mem_fraction_static": f, "gpu_memory_bytes": int(gpu), "left_outside_static_bytes": int(left),
                 "target_headroom_bytes": int(target), "corrected_mem_fraction_static": new},
        flags=[FlagChange("--mem-fraction-static", cfg.flag_text("mem_fraction_static"), f"{new:.2f}", why)]
        if new > 0 else [],
        actions=alts,
    )


# ---------------------------------------------------------------------------------------------
# context length against the KV pool


def kv_bytes_per_token(cfg: dict[str, Any], tp: int, dtype_bytes: float) -> int | None:
    """KV bytes one token takes on one rank: K and V per layer for the rank's KV heads (at least one:
    heads are replicated when tp exceeds them), or MLA's one compressed latent + rope key, not split."""
    layers = cfg.get("num_hidden_layers") or cfg.get("n_layer") or cfg.get("num_layers")
    if not isinstance(layers, int) or layers <= 0:
        return None
    if isinstance(cfg.get("kv_lora_rank"), int):
        return int(layers * (cfg["kv_lora_rank"] + int(cfg.get("qk_rope_head_dim") or 0)) * dtype_bytes)
    heads = cfg.get("num_attention_heads") or cfg.get("n_head")
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or (cfg["hidden_size"] // heads if cfg.get("hidden_size") and heads else None)
    if not isinstance(kv_heads, int) or not isinstance(head_dim, int):
        return None
    per_rank_heads = max(1, math.ceil(kv_heads / max(tp, 1)))
    return int(2 * layers * per_rank_heads * head_dim * dtype_bytes)


def _dtype_bytes(flag: str | None, model: dict[str, Any]) -> tuple[float | None, str]:
    if flag and flag != "auto":
        return KV_DTYPE_BYTES.get(flag.lower()), f"--kv-cache-dtype {flag}"
    torch_dtype = str(model.get("torch_dtype") or model.get("dtype") or "bfloat16")
    return KV_DTYPE_BYTES.get(torch_dtype.replace("torch.", ""), 2), f"the model's dtype {torch_dtype}"


def _context(tl: Timeline, prior: list[Finding]) -> Finding | None:
    row = _launch(tl)
    models = [r for r in rows(tl, "model_config") if is_check_row(r)]
    if row is None or not models:
        return None
    mrow = models[-1]
    model = attrs(mrow).get("config") or {}
    weights = attrs(mrow).get("weights_bytes")
    cfg = server_config(tl)
    f = cfg.num("mem_fraction_static")
    tp = int(cfg.num("tp_size") or 1)
    pp = int(cfg.num("pp_size") or 1)
    ctx = cfg.num("context_length") or model.get("max_position_embeddings")
    gpu, gpu_row, gpu_how = _gpu_bytes(tl)
    dtype, dtype_how = _dtype_bytes(cfg.get("kv_cache_dtype"), model)
    per_token = kv_bytes_per_token(model, tp, dtype) if dtype else None
    if None in (f, gpu, per_token, weights, ctx) or not per_token:
        return None
    weights_rank = weights / (tp * pp)
    pool = f * gpu - weights_rank
    layers_share = 1 / pp  # pipeline stages split the layers, and with them each token's KV
    tokens = int(pool / (per_token * layers_share)) if pool > 0 else 0
    if ctx <= tokens:
        return None
    return make_finding(
        "SGL-CHK-003",
        summary=(f"The KV pool would hold about {tokens:,} tokens per rank but the context length is {int(ctx):,}: "
                 f"a full-context request can never be scheduled whole. Cap --context-length at {tokens} or give "
                 "the pool more room."),
        evidence=[r for r in (row, mrow, gpu_row) if r],
        confidence="medium",
        confidence_reason="an estimate from config.json and the weights' size; SGLang's own sizing line is exact",
        figures={"kv_pool_tokens_estimate": tokens, "context_len": int(ctx), "kv_bytes_per_token_per_rank": per_token,
                 "weights_bytes_per_rank": int(weights_rank), "gpu_memory_bytes": int(gpu), "mem_fraction_static": f,
                 "kv_dtype_from": dtype_how},
        flags=[FlagChange("--context-length", cfg.flag_text("context_length"), str(tokens),
                          f"pool ≈ {f:g} × {fmt_gib(gpu)} ({gpu_how}) − weights {fmt_gib(weights_rank)} per rank = "
                          f"{fmt_gib(pool)}; ÷ {per_token:,} B per token ({dtype_how}, tp {tp}) = {tokens:,} tokens")]
        if tokens > 0 else [],
        actions=["Or enlarge the pool: --kv-cache-dtype fp8_e4m3 halves a 16-bit KV, more GPUs (--tp-size) split it, "
                 "a higher --mem-fraction-static if the headroom allows."],
    )

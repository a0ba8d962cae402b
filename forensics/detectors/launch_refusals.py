"""SGL-RUN-005: SGLang refused its own launch arguments (a layout or size that does not fit together).

Sources (the messages as the engine raises them; read in sgl-project/sglang):
- sglang python/sglang/srt/server_args.py::check_server_args (0.3.x-0.5.x; arg_groups checks on main):
  ``tp_size must be divisible by number of nodes`` ((tp × pp) % nnodes, tp alone before 0.4.4),
  ``multi-node data parallel is not supported unless dp attention!``, ``chunked_prefill_size must be
  divisible by page_size``, ``Pipeline parallelism is not compatible with overlap schedule, …``;
  server_args.py::PortArgs.init_new (0.4.x-0.5.x): ``please provide --dist-init-addr as host:port of head node``.
- sglang python/sglang/srt/distributed/parallel_state.py::initialize_model_parallel (0.4.x-0.5.x):
  ``world_size (N) is not equal to tensor_model_parallel_size (T) x pipeline_model_parallel_size (P)``.
- sglang python/sglang/srt/layers/dp_attention.py::compute_dp_attention_world_info (main, 2026): ``tp_size must
  be divisible by dp_size * attn_cp_size for DP attention``.
- sglang python/sglang/srt/managers/tp_worker.py::TpModelWorker.__init__ (0.4.x-0.5.x): ``max_running_request is
  zero`` (the cap is min(--max-running-requests, ÷ dp_size under DP attention; the request-slot pool)) and
  ``Memory pool size is too small`` (the longest request, the token pool minus ~6 tokens, is not positive): this
  rule takes the second only under a stated ``--max-total-tokens``; without one it is the memory after the
  weights (SGL-GPU-004).
- sglang python/sglang/srt/configs/model_config.py::_derive_context_length (0.4.x-0.5.x): the ValueError
  ``User-specified context_length (X) is greater than the derived context_length (Y) … To allow overriding this
  maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1`` (with the variable set it only warns,
  and the server starts: that warning is not a refusal).

Each is an assertion or ValueError raised before a byte of the model is on a GPU: nothing ran out, so the
kernel log, the GPUs and the pools have nothing to say, and the fix is the argument the message names. The
catch-all (SGL-RUN-001) would send the reader to ``dmesg``; this rule names the relation that failed and,
where the flags are in the input, the value that satisfies it.

>>> next_multiple(6, 4)
8
>>> chunk_for_page(4000, 64)
3968
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from forensics.facts.launch import ServerConfig, server_config
from forensics.facts.rows import rank_of, row_words, rows
from forensics.model import Finding, FlagChange, Timeline

from ._common import make_finding

_KINDS = ("scheduler_exception", "exception", "failure", "init_failed", "rank_dead")

# sglang python/sglang/srt/server_args.py::check_server_args (0.4.x-0.5.x)
TP_NODES = re.compile(r"tp_size must be divisible by number of nodes")
# sglang python/sglang/srt/server_args.py::check_server_args (0.4.x-0.5.x)
DP_MULTINODE = re.compile(r"multi-node data parallel is not supported")
# sglang python/sglang/srt/server_args.py::check_server_args (0.4.x-0.5.x)
CHUNK_PAGE = re.compile(r"chunked_prefill_size must be divisible by page_size")
# sglang python/sglang/srt/server_args.py::check_server_args (0.4.6-0.5.x)
PP_OVERLAP = re.compile(r"Pipeline parallelism is not compatible with overlap schedule")
# sglang python/sglang/srt/server_args.py::PortArgs.init_new (0.4.x-0.5.x)
DIST_ADDR = re.compile(r"please provide --dist-init-addr as host:port")
# sglang python/sglang/srt/distributed/parallel_state.py::initialize_model_parallel (0.4.x-0.5.x)
WORLD_SIZE = re.compile(
    r"world_size \((\d+)\) is not equal to tensor_model_parallel_size \((\d+)\) x pipeline_model_parallel_size \((\d+)\)")
# sglang python/sglang/srt/layers/dp_attention.py::compute_dp_attention_world_info (main)
DP_ATTN_TP = re.compile(r"tp_size must be divisible by dp_size")
# sglang python/sglang/srt/managers/tp_worker.py::TpModelWorker.__init__ (0.4.x-0.5.x)
MRR_ZERO = re.compile(r"max_running_request is zero")
# sglang python/sglang/srt/managers/tp_worker.py::TpModelWorker.__init__ (0.4.x-0.5.x)
POOL_TOO_SMALL = re.compile(r"Memory pool size is too small")
# sglang python/sglang/srt/configs/model_config.py::_derive_context_length (0.4.x-0.5.x); only the raising
# form: with SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN set the same sentence is a warning
CONTEXT_LEN = re.compile(
    r"context_length \((\d+)\) is greater than the derived context_length \((\d+)\)[^\n]{0,400}?To allow overriding")


def next_multiple(value: int, base: int) -> int:
    return -(-value // base) * base


def chunk_for_page(chunk: int, page: int) -> int:
    """The largest multiple of ``page`` not above ``chunk`` (at least one page)."""
    return max(page, chunk // page * page)


def _int(cfg: ServerConfig, *keys: str) -> int | None:
    for k in keys:
        n = cfg.num(k)
        if n is not None:
            return int(n)
    return None


@dataclass
class Refusal:
    summary: str
    flags: list[FlagChange]
    actions: list[str]
    figures: dict
    keys: tuple[str, ...] = ()


def _tp_nodes(m: re.Match, cfg: ServerConfig) -> Refusal:
    tp, pp = _int(cfg, "tp_size", "tp", "tensor_parallel_size"), _int(cfg, "pp_size", "pp") or 1
    nnodes = _int(cfg, "nnodes")
    flags, said = [], ""
    if tp and nnodes:
        said = f": --tp-size {tp} × --pp-size {pp} = {tp * pp} ranks do not split evenly over --nnodes {nnodes}"
        if pp == 1:
            flags.append(FlagChange("--tp-size", str(tp), str(next_multiple(tp, nnodes)),
                                    f"the next multiple of --nnodes {nnodes}: each node runs tp × pp / nnodes ranks"))
    return Refusal(
        "SGLang refused the launch: tp_size × pp_size must be a multiple of the number of nodes, since every node "
        f"runs the same number of ranks{said}. A launch argument, checked before any model weight is loaded.",
        flags,
        ["Make tp × pp a multiple of --nnodes (each node then runs tp × pp / nnodes GPUs), or change --nnodes to "
         "the number of nodes that layout fills; give every node the same --tp/--pp/--nnodes."],
        {"tp_size": tp, "pp_size": pp, "nnodes": nnodes}, ("tp_size", "tp", "pp_size", "nnodes"))


def _dp_multinode(m: re.Match, cfg: ServerConfig) -> Refusal:
    dp, nnodes = _int(cfg, "dp_size", "dp"), _int(cfg, "nnodes")
    said = f" (--dp-size {dp} over --nnodes {nnodes})" if dp and nnodes else ""
    return Refusal(
        "SGLang refused the launch: data parallelism across nodes" + said + " is only supported with DP attention. "
        "A launch argument, checked before any model weight is loaded.",
        [],
        ["Add --enable-dp-attention where the model supports it (DeepSeek-style MLA models), or run one server per "
         "node and spread requests over them with SGLang's router (sglang_router) instead of --dp-size across nodes."],
        {"dp_size": dp, "nnodes": nnodes}, ("dp_size", "dp", "nnodes"))


def _chunk_page(m: re.Match, cfg: ServerConfig) -> Refusal:
    chunk, page = _int(cfg, "chunked_prefill_size"), _int(cfg, "page_size")
    flags, said = [], ""
    if chunk and page and chunk > 0:
        new = chunk_for_page(chunk, page)
        said = f": --chunked-prefill-size {chunk} is not a multiple of --page-size {page}"
        flags.append(FlagChange("--chunked-prefill-size", str(chunk), str(new),
                                f"the largest multiple of --page-size {page} not above {chunk} ({new // page} pages)"))
    return Refusal(
        "SGLang refused the launch: a prefill chunk must be a whole number of KV pages" + said + ".",
        flags, ["Set --chunked-prefill-size to a multiple of --page-size (or leave it to SGLang's default)."],
        {"chunked_prefill_size": chunk, "page_size": page}, ("chunked_prefill_size", "page_size"))


def _pp_overlap(m: re.Match, cfg: ServerConfig) -> Refusal:
    return Refusal(
        "SGLang refused the launch: pipeline parallelism (--pp-size > 1) did not run with the overlap scheduler, "
        "speculative decoding or mixed chunked prefill in this release. A launch argument, checked before loading.",
        [FlagChange("--disable-overlap-schedule", None, "set", "required with --pp-size > 1 in this release")],
        ["Add --disable-overlap-schedule and drop --speculative-algorithm / --enable-mixed-chunk while --pp-size > 1, "
         "or use tensor parallelism alone."],
        {"pp_size": _int(cfg, "pp_size", "pp")}, ("pp_size", "pp"))


def _dist_addr(m: re.Match, cfg: ServerConfig) -> Refusal:
    given = cfg.get("dist_init_addr")
    host = str(given).split(":")[0] if given else None
    flags = [FlagChange("--dist-init-addr", str(given), f"{host}:5000",
                        "host:port of node 0; the same on every node (the port is any free one)")] if host else []
    return Refusal(
        "SGLang refused the launch: with DP attention (or several nodes) it needs --dist-init-addr as host:port of "
        f"node 0{f' and got {given!r}' if given else ''}; the port is part of the address.",
        flags, ["Pass --dist-init-addr HOST:PORT (node 0's address and a free port), identical on every node."],
        {"dist_init_addr": given}, ("dist_init_addr",))


def _world_size(m: re.Match, cfg: ServerConfig) -> Refusal:
    world, tp, pp = (int(x) for x in m.groups())
    return Refusal(
        f"The distributed group formed with {world} ranks but this launch's layout is tp {tp} × pp {pp} = {tp * pp}: "
        "the ranks that met at the rendezvous are not the ones this layout expects — nodes launched with different "
        "--tp/--pp/--nnodes, or processes of another launch joined the same --dist-init-addr and port.",
        [], ["Give every node the same --tp-size, --pp-size and --nnodes (world = tp × pp), and make sure no earlier "
             "launch still listens on the --dist-init-addr port (`ss -ltnp`) before starting again."],
        {"world_size": world, "tp_size": tp, "pp_size": pp, "expected_world_size": tp * pp})


def _context_len(m: re.Match, cfg: ServerConfig) -> Refusal:
    asked, derived = (int(x) for x in m.groups())
    return Refusal(
        f"SGLang refused --context-length {asked}: the model's config allows {derived} tokens (its "
        "max_position_embeddings / rope scaling), and a longer context would read positions the model was not "
        "built for. A model limit checked before loading, not a memory shortage.",
        [FlagChange("--context-length", str(asked), str(derived), "the context length the model's config derives")],
        [f"Use --context-length {derived} or less; for a longer context give the model a rope-scaling (YaRN) "
         "override it supports, and only then set SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1."],
        {"context_length": asked, "derived_context_length": derived}, ("context_length",))


def _dp_attn_tp(m: re.Match, cfg: ServerConfig) -> Refusal:
    tp, dp = _int(cfg, "tp_size", "tp", "tensor_parallel_size"), _int(cfg, "dp_size", "dp")
    cp = _int(cfg, "attn_cp_size") or 1
    flags, said = [], ""
    if tp and dp:
        said = f": --tp-size {tp} is not a multiple of --dp-size {dp}" + (f" × attention CP {cp}" if cp > 1 else "")
        fits = [d for d in range(dp, 0, -1) if tp % (d * cp) == 0]
        if fits and fits[0] != dp:
            flags.append(FlagChange("--dp-size", str(dp), str(fits[0]),
                                    f"the largest DP size not above {dp} that divides --tp-size {tp}: each DP rank's "
                                    f"attention runs on tp ÷ dp = {tp // (fits[0] * cp)} GPUs"))
    return Refusal(
        "SGLang refused the launch: DP attention splits the tensor-parallel GPUs into equal attention groups, so "
        "tp_size must be a multiple of dp_size" + said + ".",
        flags, ["Choose --dp-size (× attention context parallelism) as a divisor of --tp-size; with DP attention on "
                "every GPU its own DP rank, --dp-size equals --tp-size."],
        {"tp_size": tp, "dp_size": dp}, ("tp_size", "tp", "dp_size", "dp"))


def _mrr_zero(m: re.Match, cfg: ServerConfig) -> Refusal:
    mrr, dp = _int(cfg, "max_running_requests"), _int(cfg, "dp_size", "dp") or 1
    dp_attn = cfg.enabled("enable_dp_attention")
    flags, said = [], ""
    if mrr is not None and dp_attn and dp > 1 and mrr < dp:
        said = f": --max-running-requests {mrr} ÷ --dp-size {dp} (DP attention splits it per DP rank) = {mrr // dp}"
        flags.append(FlagChange("--max-running-requests", str(mrr), str(next_multiple(max(mrr, 1), dp)),
                                f"at least one request per DP rank: a multiple of --dp-size {dp}"))
    elif mrr is not None and mrr < 1:
        said = f": --max-running-requests {mrr}"
    return Refusal(
        "SGLang refused to start a scheduler that may run no request at all" + said + ". The request cap is "
        "min(--max-running-requests, per DP rank with DP attention; the request-slot pool), and it came out zero.",
        flags, ["Set --max-running-requests to at least --dp-size with DP attention (it is divided among the DP "
                "ranks), or leave it unset so SGLang derives it from the KV pool."],
        {"max_running_requests": mrr, "dp_size": dp}, ("max_running_requests", "dp_size", "dp"))


def _pool_too_small(m: re.Match, cfg: ServerConfig) -> Refusal | None:
    cap = _int(cfg, "max_total_tokens")
    if cap is None:
        return None  # no cap stated: the memory left after the weights (SGL-GPU-004)
    ctx = _int(cfg, "context_length")
    new = ctx if ctx else None
    flags = [FlagChange("--max-total-tokens", str(cap), str(new), "one full-context request must fit the token pool")] \
        if new and new > cap else []
    return Refusal(
        f"SGLang refused a KV token pool capped at --max-total-tokens {cap}: a request needs more tokens than the pool "
        "holds (the longest request is the pool's size minus a few tokens). A launch argument, not the GPU's memory.",
        flags, ["Raise --max-total-tokens to at least the context length, or drop it so SGLang sizes the pool from "
                "--mem-fraction-static."],
        {"max_total_tokens": cap, "context_length": ctx}, ("max_total_tokens", "context_length"))


CHECKS: tuple[tuple[re.Pattern, Callable[[re.Match, ServerConfig], Refusal | None]], ...] = (
    (TP_NODES, _tp_nodes), (DP_MULTINODE, _dp_multinode), (CHUNK_PAGE, _chunk_page), (PP_OVERLAP, _pp_overlap),
    (DIST_ADDR, _dist_addr), (WORLD_SIZE, _world_size), (CONTEXT_LEN, _context_len), (MRR_ZERO, _mrr_zero),
    (DP_ATTN_TP, _dp_attn_tp),
    (POOL_TOO_SMALL, _pool_too_small),
)


Explain = Callable[[re.Match, ServerConfig], "Refusal | None"]


def refusal_findings(tl: Timeline, rule_id: str, checks: tuple[tuple[re.Pattern, Explain], ...]) -> list[Finding]:
    """The first of ``checks`` an engine's failure line matches, as ``rule_id``'s finding (one way for SGLang's
    and vLLM's refusals: the message's own figures, the launch's values it names as evidence)."""
    for pattern, explain in checks:
        hits = [(r, m) for r in rows(tl, *_KINDS) if (m := pattern.search(row_words(r)))]
        if not hits:
            continue
        cfg = server_config(tl)
        found = explain(hits[0][1], cfg)
        if found is None:
            continue
        figures = {k: v for k, v in found.figures.items() if v is not None}
        return [make_finding(
            rule_id, summary=found.summary,
            evidence=[*(r for r, _ in hits[:3]), *cfg.evidence_rows(*(k for k in found.keys if cfg.get(k) is not None))],
            confidence="high", ranks=[x for x in (rank_of(r) for r, _ in hits) if x is not None],
            figures=figures, flags=found.flags, actions=found.actions,
        )]
    return []


def detect(tl: Timeline) -> list[Finding]:
    return refusal_findings(tl, "SGL-RUN-005", CHECKS)

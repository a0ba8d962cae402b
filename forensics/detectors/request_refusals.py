"""SGL-KV-005: requests refused as longer than the context, or than the KV pool can hold.

Both engines refuse, per request, a prompt that cannot be served whole (failure_messages.md §6):

* the **context length**: SGLang ``The input ({N} tokens) is longer than the model's context length ({C}
  tokens).`` (TokenizerManager, HTTP 400, 0.3.6–0.5.23) and ``Requested token count exceeds the model's maximum
  context length of {C} tokens …``; vLLM ``This model's maximum context length is {L} tokens. However, …``
  (OpenAI server) and ``The decoder prompt (length {N}) is longer than the maximum model length of {L}``
  (V1 input processor). The limit is the configured ``--context-length`` / ``--max-model-len`` (or the model's
  own default); the fix for requests that must be served is to raise it, within the model's position range
  (rope scaling) and a KV pool that holds it;
* the **KV pool**: SGLang ``Input length ({N} tokens) exceeds the maximum allowed length ({K} tokens)``, where
  K = min(C − 1, max_total_num_tokens − 1) − 5, so K + 6 is the pool when it is below the context (§6.1), and
  vLLM V0 ``… exceeds the capacity of block_manager``: no context length helps, the pool must grow.

A refusal does not crash the server, but every request past the limit fails: when it is what the input
shows, it is the incident. Sample::

    {"object":"error","message":"The input (9120 tokens) is longer than the model's context length (8192 tokens).","type":"BadRequestError","code":400}

>>> context_that_fits(61709), context_that_fits(8193), context_that_fits(4000)
(65536, 16384, 4096)
"""

from __future__ import annotations

import re

from forensics.facts import engines
from forensics.facts.rows import Row, attrs, rows
from forensics.model import Finding, FlagChange, Timeline

from ._common import make_finding

#: message forms that only vLLM prints (failure_messages.md §6.2); the others are SGLang's (§6.1)
_VLLM_FORMS = re.compile(r"maximum context length is \d+ tokens|maximum model length of \d+|Input prompt \(\d+ tokens\)")


def context_that_fits(tokens: int) -> int:
    """The smallest power of two above the request (room for at least one output token)."""
    return 1 << int(tokens).bit_length()


def _refusals(tl: Timeline) -> list[Row]:
    return [r for r in rows(tl, "failure") if attrs(r).get("failure") == "request_refused"]


def _engine(row: Row) -> str:
    text = f"{attrs(row).get('message') or ''} {row.get('text') or ''}"
    return "vllm" if row.get("source") == "vllm" or _VLLM_FORMS.search(text) else "sglang"


def _context_len(tl: Timeline) -> int | None:
    """The context length the input states: the sizing line's ``context_len=`` or a launch's ``--context-length``."""
    for r in rows(tl, "kv_sizing"):
        c = attrs(r).get("context_len")
        if isinstance(c, int | float) and c > 0:
            return int(c)
    for r in rows(tl, "server_args", "launch_command"):
        a = attrs(r)
        v = (a.get("args") or {}).get("context_length") or (a.get("flags") or {}).get("--context-length")
        if v is not None and str(v).isdigit():
            return int(v)
    return None


def detect(tl: Timeline) -> list[Finding]:
    refused = _refusals(tl)
    if not refused:
        return []
    ctx = _context_len(tl)
    reading: dict[int, tuple[str, int | None]] = {}
    for r in refused:
        a = attrs(r)
        reveals, limit = a.get("reveals"), a.get("limit_tokens")
        # SGLang's K = min(C − 1, pool − 1) − 5: K + 6 ≥ C means the context, not the pool, set the limit (§6.1)
        if reveals == "kv_pool" and ctx and limit and limit + 6 >= ctx:
            reveals, limit = "context_length", ctx
        reading[id(r)] = (reveals, limit)
    out: list[Finding] = []
    for reveals in ("context_length", "kv_pool"):
        group = [r for r in refused if reading[id(r)][0] == reveals]
        if not group:
            continue
        worst = max(group, key=lambda r: r.get("tokens") or 0)
        asked, limit = worst.get("tokens"), reading[id(worst)][1]
        engine = _engine(worst)
        out.append(_context(group, worst, engine, asked, limit) if reveals == "context_length"
                   else _pool(group, worst, engine, asked, limit, ctx))
    return out


#: ``--allow-auto-truncate`` (SGLang 0.5.2+) and vLLM's truncation serve the request cut instead of refusing it
_TRUNCATED = re.compile(r"Truncat(?:ing|ed)")


def _context(group: list[Row], worst: Row, engine: str, asked: int | None, limit: int | None) -> Finding:
    truncated = all(_TRUNCATED.search(f"{attrs(r).get('message') or ''} {r.get('text') or ''}") for r in group)
    flag = engines.flag_for(engine, "max_context") or ("--max-model-len" if engine == "vllm" else "--context-length")
    flags = []
    if asked:
        new = context_that_fits(int(asked))
        flags.append(FlagChange(flag, str(limit) if limit else None, str(new),
                                f"the longest refused request had {asked} tokens; {new} leaves room for its output"))
    return make_finding(
        "SGL-KV-005",
        summary=(f"{len(group)} request(s) " + ("truncated" if truncated else "refused") + " as longer than the context length"
                 + (f" ({limit} tokens)" if limit else "") + (f": the longest had {asked} tokens" if asked else "")
                 + f". The limit is the configured {flag} (or the model's default), not memory: raise it if such "
                 "requests must be served."),
        evidence=group[:4],
        confidence="high",
        severity="medium" if truncated else None,  # served, cut: answers lose context, nothing fails
        figures={"refused_requests": len(group), "request_tokens": asked, "context_limit_tokens": limit,
                 "truncated": truncated or None,
                 "engine": engine},
        flags=flags,
        actions=[f"Raise {flag} only as far as the model's position range allows (its max_position_embeddings, or "
                 "rope scaling such as YaRN configured for the longer window).",
                 "Then check that the KV pool holds one request of the new length (the start-up line "
                 + ("`GPU KV cache size: N tokens`" if engine == "vllm" else "`max_total_num_tokens=`")
                 + "); otherwise the next refusal comes from the pool.",
                 "Or cap the clients' prompts and max_tokens below the limit."],
    )


def _pool(group: list[Row], worst: Row, engine: str, asked: int | None, limit: int | None,
          ctx: int | None) -> Finding:
    pool = limit + 6 if engine == "sglang" and limit else None  # K = min(C − 1, pool − 1) − 5 (§6.1)
    truncated = all(_TRUNCATED.search(f"{attrs(r).get('message') or ''} {r.get('text') or ''}") for r in group)
    return make_finding(
        "SGL-KV-005",
        summary=(f"{len(group)} request(s) " + ("truncated" if truncated else "refused")
                 + " because the KV pool cannot hold them"
                 + (f": the longest had {asked} tokens" if asked else "")
                 + (f", the pool about {pool} tokens" + (f" against a context of {ctx}" if ctx else
                                                           " (if the context length is larger)") if pool else "")
                 + ". No context length helps; the pool must grow or the requests shrink."),
        evidence=group[:4],
        severity="medium" if truncated else None,
        confidence="high" if pool else "medium",
        figures={"refused_requests": len(group), "request_tokens": asked, "kv_pool_tokens": pool, "engine": engine},
        actions=["Enlarge the KV pool: more GPUs (TP), a higher " + ("--gpu-memory-utilization" if engine == "vllm"
                 else "--mem-fraction-static") + " if the headroom allows, or an fp8 KV cache.",
                 "Or cap the context length at the pool's size so such requests are refused up front."],
    )

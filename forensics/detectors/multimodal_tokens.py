"""SGL-RUN-090: a multimodal request's image tokens in the text and the vision encoder's embeddings disagree.

SGLang expands each image (or video frame) of a request into placeholder tokens when it tokenizes the prompt, and the
vision encoder returns one embedding row per placeholder; before the language model runs it scatters the rows into
the placeholders and first compares the counts: sglang python/sglang/srt/managers/mm_utils.py::_adjust_embedding_length
(0.5.x; ``get_embedding_and_mask`` in 0.4.x) logs "Number of tokens in multimodal embedding does
not match those in the input text. Got N tokens in the text but M tokens from multimodal embeddings." on every rank.
With fewer placeholders than rows it keeps the last rows (a compromise the engine names, chunked prefill having split
the image: its hint is to raise ``--chunked-prefill-size`` or disable chunked prefill); with more placeholders than
rows nothing fills them and the scatter that follows fails (a shape mismatch), killing the scheduler.

Either way it is the request's multimodal accounting (the processor's placeholder expansion against the encoder's
output: a processor or chat-template version that does not match the model, an image the processor resizes
differently from the encoder, or chunked prefill cutting an image) and not GPU memory: a memory change does not
touch it. The rule speaks only when a failure follows the warning; the warning alone, when the engine compensates
and serving goes on, is no death to explain.

>>> direction(279, 260), direction(64, 576)
('more', 'fewer')
"""

from __future__ import annotations

from forensics.facts.rows import Row, attrs, rank_of, rows

from ._common import evidence_list, make_finding
from .fatal_other import FATAL_KINDS, is_fatal


def direction(text_tokens: int, embedding_tokens: int) -> str:
    """Whether the text holds more or fewer placeholders than the encoder returned rows."""
    return "more" if text_tokens > embedding_tokens else "fewer"


def _mismatches(tl) -> list[Row]:
    return [r for r in rows(tl, "notice") if attrs(r).get("message_id") == "mm_token_mismatch"]


def _after(r: Row, first: Row) -> bool:
    """Whether a row comes at or after the first mismatch (same file: later line; another file: by time)."""
    if r.get("file") == first.get("file"):
        return (r.get("line") or 0) >= (first.get("line") or 0)
    a, b = r.get("ts"), first.get("ts")
    return a is not None and b is not None and a >= b


def detect(tl) -> list:
    seen = _mismatches(tl)
    if not seen:
        return []
    first = seen[0]
    deaths = [r for r in rows(tl, *FATAL_KINDS) if is_fatal(r) and _after(r, first)]
    if not deaths:
        return []
    a = attrs(first)
    text, emb = a.get("text_tokens"), a.get("embedding_tokens")
    ranks = sorted({x for x in (rank_of(r) for r in seen) if x is not None})
    counts = (f"{text} placeholder tokens in the text against {emb} embedding rows from the vision encoder"
              if text is not None and emb is not None else "the placeholder and embedding counts differ")
    which = direction(text, emb) if text is not None and emb is not None else None
    if which == "more":
        consequence = ("more placeholders than rows: nothing fills the rest, and the scatter of the embeddings into "
                       "the prompt fails")
    elif which == "fewer":
        consequence = ("fewer placeholders than rows: the engine keeps the last rows, which is what chunked prefill "
                       "splitting an image leaves")
    else:
        consequence = "the embeddings cannot be placed into the prompt as they are"
    summary = (f"A multimodal request's image tokens and the vision encoder's output disagree ({counts}"
               + (f", on {len(ranks)} ranks" if len(ranks) > 1 else "")
               + f"); {consequence}. The server died after it. The request's multimodal accounting, not GPU "
                 "memory: a memory fraction or a smaller batch does not change it.")
    actions = [
        "Find the request: the one in the prefill batch at the failure (its image sizes, the chat template it "
        "used); replay it alone to confirm.",
        "Check that the model's processor (transformers version, preprocessor_config.json, chat template) matches "
        "what this SGLang release expects for the model: its placeholder expansion must equal the encoder's rows.",
    ]
    if which != "more":
        actions.append("If chunked prefill cuts the image (fewer placeholders in a chunk than rows), the engine's "
                       "own advice is a larger --chunked-prefill-size or chunked prefill off for this model.")
    actions.append("Report it with the request and the SGLang and transformers versions: the engine should refuse "
                   "such a request, not die of it.")
    return [make_finding(
        "SGL-RUN-090", summary=summary, evidence=evidence_list([*seen[:2], *deaths[:2]]),
        confidence="high" if text is not None else "medium", ranks=ranks,
        figures={"placeholder_tokens": text, "embedding_tokens": emb, "mismatch_ranks": len(ranks) or None},
        actions=actions,
    )]

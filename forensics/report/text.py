"""Text that reaches a page or a ticket: control characters made visible, Markdown escaped, figures and byte counts in the units people read."""

from __future__ import annotations

import json
import re
from typing import Any

from markupsafe import Markup, escape

from forensics.report.document import action_commands

_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ufffe\uffff]")


def visible(text: Any) -> str:
    """Text with control characters (NUL, ESC, CR, …) shown as ``\\xNN``; tabs and newlines kept.

    >>> visible("a\\x00b\\x1b[31mc")
    'a\\\\x00b\\\\x1b[31mc'
    """
    s = "" if text is None else str(text)
    return _CONTROL_RE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                           else f"\\u{ord(m.group()):04x}", s)


def script_json(value: Any) -> Markup:
    """JSON safe to place inside a ``<script>`` element: ``<``, ``>``, ``&`` become ``\\u`` escapes.

    >>> str(script_json({"t": "</script><b>"}))
    '{"t": "\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e"}'
    """
    raw = json.dumps(value, ensure_ascii=True, sort_keys=True, allow_nan=False, default=str)
    raw = raw.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return Markup(raw)


_MD_SPECIAL_RE = re.compile(r"([\\`*_\[\]|~])")


def md_text(text: Any, limit: int | None = 240) -> str:
    """Log text as inert Markdown on one line: HTML metacharacters as entities, Markdown escaped; cut
    at ``limit`` characters (None: whole — for our own sentences and arithmetic, never cut).

    >>> md_text("<script>alert(1)</script> | *x*")
    '&lt;script&gt;alert(1)&lt;/script&gt; \\\\| \\\\*x\\\\*'
    """
    s = visible(text).replace("\n", " ").replace("\t", " ")
    if limit is not None and len(s) > limit:
        s = s[: limit - 1] + "…"
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL_RE.sub(r"\\\1", s)


def md_code(text: Any) -> str:
    """Inline code whose fence is longer than any backtick run inside; pipes escaped for tables.

    >>> md_code("a`b")
    '``a`b``'
    >>> md_code("x|y")
    '`x\\\\|y`'
    """
    s = visible(text).replace("\n", " ")
    longest = max((len(r) for r in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s.replace('|', chr(92) + '|')}{pad}{fence}"


def md_action(text: Any) -> str:
    """A remediation action: prose escaped, its `backtick` spans kept as inline code.

    >>> md_action("Find the holders: `fuser -v /dev/nvidia*` <now>")
    'Find the holders: `fuser -v /dev/nvidia*` &lt;now&gt;'
    >>> md_action("pkill -9 -f sglang")
    '`pkill -9 -f sglang`'
    """
    s = str(text)
    if action_commands(s) == [s.strip()]:
        return md_code(s.strip())
    parts = re.split(r"`([^`\n]+)`", s)
    return "".join(md_code(p) if i % 2 else md_text(p, 400) for i, p in enumerate(parts))


def md_fence(text: str) -> str:
    """A fence for a code block that the block's own text cannot close."""
    longest = max((len(r) for r in re.findall(r"`{3,}", text)), default=2)
    return "`" * (longest + 1)


_INLINE_CODE_RE = re.compile(r"`([^`\n]+)`")
_EMPHASIS_RE = re.compile(r"(?<![\w*])\*([^*\n]+)\*(?![\w*])")


def inline_md(text: Any) -> Markup:
    """Catalog prose with its `code` and *emphasis* as HTML; everything else escaped first.

    >>> str(inline_md("set `--x <n>` *per rank* <b>"))
    'set <code>--x &lt;n&gt;</code> <em>per rank</em> &lt;b&gt;'
    """
    safe = str(escape(visible(text)))
    parts = _INLINE_CODE_RE.split(safe)
    out = [f"<code>{p}</code>" if i % 2 else _EMPHASIS_RE.sub(r"<em>\1</em>", p) for i, p in enumerate(parts)]
    return Markup("".join(out))


def slug(text: Any) -> str:
    """An HTML id fragment: letters, digits, ``-`` and ``_`` only."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", str(text)).strip("-") or "x"


def human_bytes(n: Any) -> str:
    """Bytes with both binary and decimal readings, since findings name their unit exactly.

    >>> human_bytes(482000000000)
    '448.9 GiB (482.0 GB)'
    """
    if not isinstance(n, int | float) or isinstance(n, bool):
        return str(n)
    return f"{n / (1 << 30):.1f} GiB ({n / 1e9:.1f} GB)"


#: Words a figure's key ends with that name its unit, and how the label says it.
_UNIT_SUFFIXES = (("_bytes", ""), ("_gib", " (GiB)"), ("_gb", " (GB)"), ("_mib", " (MiB)"), ("_s", " (s)"),
                  ("_ms", " (ms)"), ("_pct", " (%)"))
_LABEL_WORDS = {"gpu": "GPU", "gpus": "GPUs", "kv": "KV", "tp": "TP", "dp": "DP", "pp": "PP", "ep": "EP",
                "ram": "RAM", "rss": "RSS", "oom": "OOM", "nccl": "NCCL", "cuda": "CUDA", "hicache": "HiCache",
                "shm": "/dev/shm", "id": "id", "xid": "Xid", "sglang": "SGLang", "vllm": "vLLM", "len": "length", "bs": "batch size", "max": "max", "min": "min"}


def figure_label(key: str) -> str:
    """A figure's key as words: ``host_total_bytes`` → ``Host total``, ``kv_tokens`` → ``KV tokens``.

    >>> figure_label("host_total_bytes"), figure_label("hicache_size_gb_per_rank"), figure_label("tp_size")
    ('Host total', 'HiCache size GB per rank', 'TP size')
    """
    k = key
    unit = ""
    for suffix, said in _UNIT_SUFFIXES:
        if k.endswith(suffix) and len(k) > len(suffix):
            k, unit = k[: -len(suffix)], said
            break
    words = [_LABEL_WORDS.get(w, "GB" if w == "gb" else w) for w in k.split("_") if w]
    text = " ".join(words)
    return (text[:1].upper() + text[1:] if text else key) + unit


#: a snake_case code as findings.json writes it (``scheduler_exception``), not a file or a command
_CODE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")


def _gib_text(n: float) -> str:
    return f"{n / (1 << 30):,.2f} GiB"


def fmt_figure(key: str, value: Any) -> str:
    """A figure value as the report prints it: memory in GiB (one unit throughout the page), maps and
    lists as ``key: value`` text, never JSON.

    >>> fmt_figure("host_total_bytes", 482163445760)
    '449.05 GiB'
    >>> fmt_figure("held_bytes_by_gpu", {"0": 103079215104, "2": 103079215104})
    '0: 96.00 GiB, 2: 96.00 GiB'
    >>> fmt_figure("ranks", [0, 1, 2])
    '0, 1, 2'
    >>> fmt_figure("failure_kinds", ["scheduler_exception", "cuda_graph_failed"])
    'scheduler exception, cuda graph failed'
    """
    is_memory = "bytes" in key

    def one(v: Any) -> str:
        if isinstance(v, bool):
            return "yes" if v else "no"
        if is_memory and isinstance(v, int | float) and not isinstance(v, bool):
            return _gib_text(v)
        if isinstance(v, float):
            return f"{v:g}"
        if isinstance(v, dict):
            return ", ".join(f"{k}: {one(x)}" for k, x in sorted(v.items(), key=lambda kv: str(kv[0])))
        if isinstance(v, list | tuple):  # a list of records reads as records: "a: 1, b: 2; a: 3, b: 4"
            return ("; " if any(isinstance(x, dict) for x in v) else ", ").join(one(x) for x in v)
        if isinstance(v, str) and _CODE.fullmatch(v):  # a code (scheduler_exception) as words
            return v.replace("_", " ")
        return str(v)

    return one(value)


def ranges(values: list[int]) -> str:
    """``[0, 1, 2, 5]`` → ``'0–2, 5'``.

    >>> ranges([5, 0, 1, 2])
    '0–2, 5'
    """
    vs = sorted(set(values))
    out: list[str] = []
    i = 0
    while i < len(vs):
        j = i
        while j + 1 < len(vs) and vs[j + 1] == vs[j] + 1:
            j += 1
        out.append(str(vs[i]) if i == j else f"{vs[i]}–{vs[j]}")
        i = j + 1
    return ", ".join(out)



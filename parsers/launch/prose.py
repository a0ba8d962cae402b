"""Launch settings and stated figures in sentences: a ticket, a write-up, a chat pasted into a file.

People describe an incident in words around the outputs they paste: "launched with --hicache-size 300
on --tp-size 8", "mem_fraction_static=0.93 left only 0.82 GB of free GPU memory after CUDA graph
capture", "a server with 449 GB of RAM". This parser reads the prose lines of such a text (the
transcript splitter decides which lines are prose) and returns:

* ``launch_command`` (``launcher = "prose"``, ``attrs.confidence = "prose"``): one per configuration
  the text says *ran*. Mentions of engine flags (``--flag value``, ``--flag=value``, ``snake_key=value``;
  only names in :mod:`parsers.launch.vocab`) gather into one configuration until a flag is stated again
  with another value: that starts the next one, which keeps the earlier flags ("tried again with
  --hicache-size 48" keeps ``--tp-size 8``; ``attrs.carried`` names them). ``attrs.mentions`` maps each
  flag to the line and sentence that stated it; ``attrs.implied`` names flags a stated one implies
  (``--hicache-size`` → ``--enable-hierarchical-cache``).
* ``server_args`` (``attrs.form = "prose"``, ``args`` in snake case): the same configuration as the
  start of a server run, so a detector reads the facts stated after it (``run`` = that configuration's
  index) with the configuration they belong to, exactly as it reads a log.
* ``launch_flag_discussed``: a flag value the text only discusses: a plan, advice, a hypothesis, a
  question, a rejected value ("the next attempt will use 48", "we could try 0.85", "instead of 300",
  "back off to 0.88"). Decided by cue words and tense around the mention (``attrs.cue``), within its
  clause; a sentence about "the next attempt" frames the rest of its paragraph. Detectors ignore it.
* stated figures, each with ``attrs.confidence = "prose"`` and ``attrs.stated = true``:
  ``cuda_graph_end`` (``avail_bytes``: memory left after CUDA-graph capture), ``host_memory``
  (``total_bytes``: the host's RAM), ``gpu_memory`` (``total_bytes``, ``gpu`` null: one GPU's capacity),
  ``command`` (a kill command the text says was run: ``pkill -9 -f sglang``).

Units in prose: "GB" of RAM or GPU memory is read as GiB (``free -g``, nvidia-smi and SGLang's memory
lines print binary units labelled GB; ``attrs.unit_assumed`` says so); "MiB"/"GiB" are exact.

>>> r = parse("We launched it with --hicache-size 300 and --tp-size 8 on a host with 449 GB of RAM.\\n"
...           "\\n"
...           "The next attempt will use --hicache-size 48.\\n")
>>> import json
>>> [(k, json.loads(a).get("flags") or json.loads(a).get("value")) for k, a in
...  zip(r.events["kind"], r.events["attrs"]) if k in ("launch_command", "launch_flag_discussed")]
[('launch_command', {'--enable-hierarchical-cache': True, '--hicache-size': '300', '--tp-size': '8'}), \
('launch_flag_discussed', '48')]
>>> r.events.filter(r.events["kind"] == "host_memory")["total_bytes"].to_list() == [449 << 30]
True
"""

from __future__ import annotations

import re as std_re
from dataclasses import dataclass, field
from typing import Any

import regex as re

from parsers.launch import vocab
from parsers.schema import ParseResult
from parsers.units import GIB, KIB, MIB, TIB

FORMAT = "prose"
CONFIDENCE = "prose"
_MAX_PARAGRAPH = 200_000  # longer "paragraphs" are data, not prose
MAX_TEXT = 8 << 20
_DIGIT_RE = re.compile(r"\d")
_MENTION_HINT_RE = re.compile(r"[-=_]|TP|[Tt]ensor")
_HOST_WORD_RE = re.compile(r"\b(?:RAM|DRAM|memory|Mem|host|machine|server|node|box|VM|container|total)\b", re.IGNORECASE)
_GPU_WORD_RE = re.compile(r"capacity|GPU|HBM|VRAM|\b(?:[ABHL]\d{2,3}|L40|MI\d{3}|RTX|GH200|GB200)", re.IGNORECASE)

# ---------------------------------------------------------------------------------------------
# text → paragraphs → sentences → clauses


@dataclass
class _Paragraph:
    text: str
    starts: list[tuple[int, int]]  # (offset in text, 1-based line) of each physical line

    def line_at(self, pos: int) -> int:
        line = self.starts[0][1]
        for off, ln in self.starts:
            if off > pos:
                break
            line = ln
        return line


def _paragraphs(lines: list[str]) -> list[_Paragraph]:
    out: list[_Paragraph] = []
    buf: list[str] = []
    starts: list[tuple[int, int]] = []
    size = 0
    for i, ln in enumerate(lines):
        if not ln.strip():
            if buf:
                out.append(_Paragraph(" ".join(buf), starts))
            buf, starts, size = [], [], 0
            continue
        body = ln.strip()
        if body.startswith("|") and body.endswith("|"):
            body = body.replace("|", " ") + "."  # a Markdown table row: "| --tp-size | 8 |" is one statement
        starts.append((size, i + 1))
        buf.append(body)
        size += len(body) + 1
    if buf:
        out.append(_Paragraph(" ".join(buf), starts))
    return [p for p in out if len(p.text) <= _MAX_PARAGRAPH]


_ABBREV = ("e.g.", "i.e.", "etc.", "vs.", "approx.", "cf.", "Dr.", "Mr.", "No.", "Fig.")
_SENTENCE_END_RE = re.compile(r"(?<=[.!?])[\"”')\]]*\s+(?=[A-Z0-9\"“(\[<`*_])")


def _sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of the sentences of a paragraph."""
    out = []
    start = 0
    for m in _SENTENCE_END_RE.finditer(text):
        before = text[start:m.start()]
        if before.endswith(_ABBREV):
            continue
        out.append((start, m.start()))
        start = m.end()
    if start < len(text):
        out.append((start, len(text)))
    return out


_CLAUSE_SPLIT_RE = re.compile(r";\s|:\s|\s[—–]\s|\s--\s|,\s+(?:which|but|so|whereas)\b|\sbut\s")


def _clause(sentence: str, pos: int, end: int) -> tuple[str, str]:
    """The clause text before and after a mention at ``pos..end`` of the sentence."""
    start = 0
    for m in _CLAUSE_SPLIT_RE.finditer(sentence):
        if m.end() <= pos:
            start = m.end()
        elif m.start() >= end:
            return sentence[start:pos], sentence[end:m.start()]
    return sentence[start:pos], sentence[end:]


# ---------------------------------------------------------------------------------------------
# intent: does the text say this value ran, or only discuss it?

_MODAL_RE = re.compile(
    r"\b(?:would|could|should|might|may|must|shall|will|going to|gonna|plan(?:s|ned|ning)? to|"
    r"intend(?:s|ed)? to|wants? to|needs?|ought to|ha(?:s|ve) to|let'?s|let me|try|trying|tries|"
    r"consider(?:s|ing)?|suggest(?:s|ed|ing)?|recommend(?:s|ed|ing)?|propos(?:e|es|ed|ing)|if|unless|"
    r"suppose|e\.g\.|for example|for instance|say,|instead of|rather than|in place of|without|maybe|perhaps|"
    r"hypothetical(?:ly)?|what if|whether|alternatively|by default|defaults?|recommended|next (?:attempt|run|launch|time|try|iteration|step|"
    r"config(?:uration)?))(?=\W|$)"
    r"|'ll\b", re.IGNORECASE)
# "could only hold", "could not start": past facts, not hypotheses
_NOT_MODAL_RE = re.compile(r"\b(?:could|can)(?:\s+only|\s+not|n'?t)\b|\bcannot\b", re.IGNORECASE)
_NEGATION_RE = re.compile(
    r"\b(?:not|never|no longer)\s+(?:\w+\s+)?(?:use|using|used|set|pass|passed|run|ran|launch\w*|enabl\w*|with)\b"
    r"|n't\s+(?:\w+\s+)?(?:use|using|used|set|pass|passed|run|ran|launch\w*|enabl\w*)\b", re.IGNORECASE)
# a change decided but not (yet) made: "back off to 0.88", "lower it to"; "lowered to" is a change that ran
_CHANGE_TO_RE = re.compile(
    r"\b(?:back\s+off|lower|reduce|drop|bump|raise|increase|decrease|change|switch|cut|bring\s+(?:it\s+)?down)"
    r"(?:\s+\S+){0,4}?\s+to\s*$", re.IGNORECASE)
# "the plan was to lower --mem-fraction-static to 0.85": the verb's base form right before the flag
_CHANGE_BASE_RE = re.compile(
    r"\b(?:back\s+off|lower|reduce|drop|bump|raise|increase|decrease|change|switch)(?:\s+(?:the|it|its))?\s*$",
    re.IGNORECASE)
# A modal within two words after the mention ("--tp 8 next time would"). Was ``^\W*(?:[\w.%-]+\W+){0,2}?MODAL``,
# whose ``.%-`` fit both the word and the gap: a run of dots split every way (2 KiB never finished). Same
# modal found, in the same order: right after the leading gap; else after the first word chain (words
# joined by ``.%-``) and the gap after it, then within the second chain, after it, and within the first.
# The stdlib engine: ``regex`` backtracks the chain's star in quadratic time (2 min on 1 MiB of "a.").
_CHAIN = r"\w++(?:[.%-]++\w++)*"
_AFTER_MODAL_RE = std_re.compile(
    rf"^\W*+(?:{_CHAIN}+\W++(?:{_CHAIN}+\W++|{_CHAIN}[.%-]++)??|{_CHAIN}[.%-]++)??"
    r"(would|could|should|might|will|may)\b", std_re.IGNORECASE)
_FRAME_RE = re.compile(
    r"\bnext\s+(?:attempt|run|launch|time|try|iteration|config(?:uration)?)\b|\bgoing forward\b|\bfrom now on\b|"
    r"\bin the future\b|\bfuture (?:runs?|launch(?:es)?|config(?:uration)?s?)\b", re.IGNORECASE)
_RAN_RE = re.compile(
    r"\b(?:launched|relaunched|restarted|started|ran|was running|were running|tried again|came up|crashed|"
    r"booted|deployed|was serving|is running|are running)\b", re.IGNORECASE)


# advice in the imperative, as the engines print it ("Use a shorter input or enable --allow-auto-truncate", the
# scheduler's validate_input_length, failure_messages.md §6.1; "Please try to increase --mem-fraction-static",
# sglang_formats.md §5): the verb
# opens the clause, or follows "or"/"please", right before the flag
_IMPERATIVE_RE = re.compile(
    r"(?:^|\b(?:or|please))\s*(?:try\s+)?(?:enabl(?:e|ing)|use|using|set|setting|pass|add|increase|decrease|"
    r"reduce|lower|raise|specify|disable|adjust|turn\s+(?:on|off))\s*$", re.IGNORECASE)


def discussion_cue(before: str, after: str, sentence: str, frame: str | None) -> str | None:
    """The words that make a mention discussion rather than a statement of what ran; None if stated.

    >>> discussion_cue("The next attempt will use ", " — 48 GB per rank", "", None)
    'will'
    >>> discussion_cue("we launched with ", " on TP8", "", None) is None
    True
    >>> discussion_cue("the KV cache could only hold 116K tokens at ", "", "", None) is None
    True
    >>> discussion_cue("The response was to back off to ", " and kill it", "", None)
    'back off to'
    >>> discussion_cue("for TP-8, ", " would give the intended total", "", None)
    'would'
    >>> discussion_cue("Use a shorter input or enable ", ".", "", None)
    'imperative: or enable'
    """
    if sentence.rstrip().endswith("?"):
        return "question"
    cleaned = _NOT_MODAL_RE.sub(" ", before)
    hits = list(_MODAL_RE.finditer(cleaned))
    if hits:
        return hits[-1].group(0).strip().lower()
    imperative = _IMPERATIVE_RE.search(before)
    if imperative:
        return "imperative: " + " ".join(imperative.group(0).split()).lower()
    neg = _NEGATION_RE.search(before)
    if neg:
        return neg.group(0).lower()
    change = _CHANGE_TO_RE.search(before) or _CHANGE_BASE_RE.search(before)
    if change:
        return " ".join(change.group(0).split()).lower()
    m = _AFTER_MODAL_RE.match(after)
    if m and not _NOT_MODAL_RE.match(after.lstrip(" ,")):
        return m.group(1).lower()
    if frame and not _RAN_RE.search(sentence):
        return f"frame: {frame}"
    own = _FRAME_RE.search(sentence[:len(sentence) - len(after)]) if sentence else None
    if own and not _RAN_RE.search(sentence):
        return f"frame: {own.group(0).lower()}"
    return None


# ---------------------------------------------------------------------------------------------
# flag mentions

_VALUE = r"(?:\"[^\"\n]{0,200}\"|'[^'\n]{0,200}'|`[^`\n]{0,200}`|[^\s,;()\[\]\"'`<>]{1,200})"
# "--tp-size 8", "--tp-size=8", "--mem-fraction-static to 0.85", "--tp-size of 8"
# flag mentions by the engines' own names: reference/sglang_formats.md §8, reference/vllm_formats.md §5.1
# (parsers/launch/vocab.py lists them)
_DASHED_RE = re.compile(
    rf"(?<![\w-])(--?[A-Za-z][A-Za-z0-9_-]*)(?:(=)({_VALUE})|(\s+(?:(?:set\s+)?(?:to|of|at|as)\s+)?)"
    rf"(?!-[A-Za-z-])({_VALUE}))?")
# "mem_fraction_static=0.93", "hicache-size=48", "mem_fraction_static was 0.92"; not the right operand of a quotient
# or product, whose "= N" is the result: vLLM's profiling warning "(max_num_batched_tokens / max_num_seqs = 8192)"
# (vllm vllm/multimodal/profiling.py, 0.7-0.10) states a ratio, not max_num_seqs
_KEYVAL_RE = re.compile(rf"(?<![\w./-])(?<![/*÷] )(?<![/*÷])([a-z][a-z0-9]*(?:[_-][a-z0-9]+)+)"
                        rf"(?:\s*=\s*|\s+(?:was|is|of|at|set\s+to)\s+)"
                        rf"({_VALUE})")
_NUMBER_RE = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")
_STOPWORDS = frozenset(str.split("""a an and are as at be been but by for from had has have in into is it its of on or
per so than that the their then there these this those to was were which while with without not only also
parameter parameters flag flags option options setting settings value values argument arguments"""))


#: a value that names the slot rather than filling it, as an engine's own message writes it ("please provide
#: --dist-init-addr as host:port of head node", sglang python/sglang/srt/server_args.py::PortArgs.init_new
#: (0.4.x-0.5.x)): not a setting anyone ran
_PLACEHOLDER_RE = re.compile(r"^(?:host|ip|addr|address|hostname)(?::port)?$|^<[^<>]*>$", re.IGNORECASE)

_OFF = frozenset(("false", "0", "no", "off", "none"))


@dataclass
class Mention:
    """One flag stated or discussed in a sentence."""

    flag: str  # canonical long flag
    value: str | bool
    written: str
    line: int
    sentence: str
    cue: str | None = None  # not None: discussed


def _clean_value(raw: str) -> str:
    v = raw.strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'`":
        return v[1:-1]
    return v.rstrip(".:!?")


def _value_ok(flag: str, value: str) -> bool:
    if not value or value.startswith("-") and not _NUMBER_RE.match(value):
        return False
    if value.lower() in ("none", "null", "nil", "n/a") or _PLACEHOLDER_RE.match(value):
        return False
    if _NUMBER_RE.match(value) or value.lower() in ("true", "false"):
        return True
    if not vocab.is_text_valued(flag):
        return False
    return value.lower() not in _STOPWORDS and re.search(r"[A-Za-z0-9]", value) is not None


def _flag_mentions(sentence: str) -> list[tuple[int, int, str, str | bool, str]]:
    """(start, end, canonical flag, value, as written) for every engine flag in a sentence."""
    found: list[tuple[int, int, str, str | bool, str]] = []
    taken: list[tuple[int, int]] = []
    for m in _DASHED_RE.finditer(sentence):
        written = m.group(1)
        if not vocab.known(written):
            continue
        engine = vocab.engine_of_flag(written)
        flag = vocab.canonical(written, "vllm" if engine == "vllm" else "sglang")
        raw = m.group(3) if m.group(2) else m.group(5)
        end = m.end()
        if vocab.is_boolean(flag):
            value: str | bool = True
            if m.group(2):
                if _clean_value(raw or "").lower() in _OFF:
                    continue
                value = True
            end = m.end(1) if not m.group(2) else m.end()
        else:
            value = _clean_value(raw or "")
            if not _value_ok(flag, value):
                continue
        found.append((m.start(), end, flag, value, written))
        taken.append((m.start(), end))
    for m in _KEYVAL_RE.finditer(sentence):
        if any(a <= m.start() < b for a, b in taken) or not vocab.known(m.group(1)):
            continue
        engine = vocab.engine_of_flag(m.group(1))
        flag = vocab.canonical(m.group(1), "vllm" if engine == "vllm" else "sglang")
        value = _clean_value(m.group(2))
        if vocab.is_boolean(flag):
            if value.lower() not in _OFF:
                found.append((m.start(), m.end(), flag, True, m.group(1)))
        elif _value_ok(flag, value):
            found.append((m.start(), m.end(), flag, value, m.group(1)))
    for a, b, value, written in _tp_shorthand(sentence):
        if not any(x <= a < y for x, y, *_ in found):
            found.append((a, b, "--tp-size", value, written))
    found.sort()
    return found


# "on TP8", "a TP-8 deployment", "TP=4"; "tensor parallelism set to 8", "TP size of 4". A bare "TP3" is a rank's
# label, so the short form needs a size's context and a power of two.
# the tensor-parallel size of reference/sglang_formats.md §8 (``--tp-size``) and reference/vllm_formats.md §5.1
# (``-tp``)
_TP_SHORT_RE = re.compile(r"(?<![\w\[-])TP[-=]?(\d{1,2})\b(?!\])")
_TP_WORDED_RE = re.compile(r"\b(?:TP|tp|[Tt]ensor[- ]parallel(?:ism)?)(?:[- ](?:size|degree))?\s*(?:(?:is|was)\s+)?"
                           r"(?:=|:|\bof\b|\bis\b|\bwas\b|\bset\s+to\b)\s*(\d{1,3})\b")
_TP_BEFORE = frozenset(str.split("on with using at a an for in under as of"))
_TP_AFTER = frozenset(str.split("deployment setup config configuration server cluster run launch instance job mode serving "
                                "engine model node box"))


def _tp_shorthand(sentence: str) -> list[tuple[int, int, str, str]]:
    """(start, end, size, as written) of tensor-parallel sizes said without the flag."""
    out = []
    for m in _TP_WORDED_RE.finditer(sentence):
        out.append((m.start(), m.end(), m.group(1), m.group(0)))
    for m in _TP_SHORT_RE.finditer(sentence):
        n = int(m.group(1))
        if n < 1 or n & (n - 1) or any(a <= m.start() < b for a, b, *_ in out):
            continue
        prev = sentence[:m.start()].split()[-1:] or [""]
        nxt = sentence[m.end():].split()[:1] or [""]
        if prev[0].lower().strip("(,") in _TP_BEFORE or nxt[0].lower().strip(").,;:") in _TP_AFTER \
                or m.group(0)[2:3] == "=":
            out.append((m.start(), m.end(), str(n), m.group(0)))
    return out


#: A stated flag that implies another (HiCache settings only act with HiCache on).
IMPLIES = {
    "--hicache-size": ("--enable-hierarchical-cache", True),
    "--hicache-ratio": ("--enable-hierarchical-cache", True),
    "--hicache-write-policy": ("--enable-hierarchical-cache", True),
}

# ---------------------------------------------------------------------------------------------
# stated figures

#: The thousands groups are taken whole (``++``): giving one back leaves a comma, which no unit follows,
#: and the regex engine backtracked a chain of them quadratically (issue 25)
_NUM = r"(\d{1,3}(?:,\d{3})++(?:\.\d+)?|\d+(?:\.\d+)?)"
_UNIT = r"\s*(TiB|GiB|MiB|TB|GB|MB|T|G|M)\b"
_SIZE = _NUM + _UNIT
#: A size that opens a pattern is tried only where its number can start (issue 25): not inside a run of
#: digits (``\d+`` would rescan the run from every digit: the square of a line of digits), except three
#: digits before a thousands comma ("12,345 GB" read from "2,345"), and not at a three-digit group after
#: "d," (that group's chain was already tried from its first group) unless the search began inside that
#: chain (``\G``: a previous match that ended in ``\w*`` may stop mid-number). Each skipped start fails
#: whenever the start before it failed, so the matches are the old ones (tests/test_regex_rewrites.py).
_SIZE_START = r"(?:\G|(?<!\d)(?!(?<=\d,)(?<!\G\d{0,2},)\d{3}(?!\d))|(?<=\d)(?=\d{3},))" + _SIZE
_UNIT_BYTES = {"tib": TIB, "gib": GIB, "mib": MIB, "tb": TIB, "gb": GIB, "mb": MIB, "t": TIB, "g": GIB,
               "m": MIB, "kib": KIB}

# source: none (English prose: "… out of 503 GB total")
_OUT_OF_TOTAL = re.compile(r"\bout\s+of\s+" + _SIZE + r"\s+total\b", re.IGNORECASE)
_HOST_PATTERNS = [
    re.compile(_SIZE_START + r"\s+(?:of\s+)?(?:(?:total|installed|physical|system|host|main)\s+)*+(?:RAM|DRAM)\b",
               re.IGNORECASE),
    re.compile(_SIZE_START + r"\s+(?:of\s+)?(?:total|installed|physical|system|host|main)\s+(?:memory|RAM)\b",
               re.IGNORECASE),
    re.compile(r"\b(?:machine|host|server|node|box|VM|container)\s+(?:with|has|had|have)\s+" + _SIZE, re.IGNORECASE),
    re.compile(_SIZE_START + r"[- ](?:RAM\s+)?(?:host|machine|server|node|box)\b", re.IGNORECASE),
    _OUT_OF_TOTAL,
    # an environment listing's "Mem: 256GB", "RAM: 512 GB", "Host memory = 1TB" (not "GPU memory: 80GB": see _GPU_KEY_RE)
    re.compile(r"\b(?:Mem|RAM|DRAM|Memory|(?:host|system|CPU|main)\s+(?:memory|RAM))\s*[:=]\s*" + _SIZE, re.IGNORECASE),
]
#: the words before a "memory: N GB" key that make it a GPU's ("GPU Memory: 80GB" in a ticket's listing)
_GPU_KEY_RE = re.compile(r"\b(?:GPU|VRAM|HBM|device|graphics|video|CUDA)\s*$", re.IGNORECASE)
_HOST_NOT_RE = re.compile(
    r"\b(?:used|usage|use|free|left|leak\w*|allocat\w*|request\w*|pinn\w*|spik\w*|dropp\w*|baseline|remain\w*|"
    r"still|need\w*|hicache|cache|per[- ]rank|each|consum\w*|peak|reclaim\w*|held|hold\w*|occupied|took|"
    r"figure|number|reading|value)\b",
    re.IGNORECASE)
_GPU_NOT_RE = re.compile(r"\b(?:used|usage|allocat\w*|took|taken|consum\w*|occupied|held|hold\w*|request\w*|left|free|"
                         r"remain\w*|cache|kv|weights?|need\w*)\b", re.IGNORECASE)
_GPU_CAP_PATTERNS = [
    re.compile(_SIZE_START + r"\s+(?:of\s+)?(?:(?:GPU|HBM|VRAM|device|total)\s+)*(?:memory\s+)?capacity\b", re.IGNORECASE),
    re.compile(r"\bcapacity\s+of\s+" + _SIZE, re.IGNORECASE),
    re.compile(_SIZE_START + r"\s+(?:of\s+)?(?:(?:GPU|HBM|VRAM)\s+)(?:memory\s+)?(?:each|per\s+GPU)\b", re.IGNORECASE),
    re.compile(_SIZE_START + r"\s+(?:GPUs?|cards?|VRAM|HBM\w*)\b"),
    # a GPU model with its memory: "H100 80GB", "L40S (48 GB each)", "A100-SXM4-80GB". A model name carries at most
    # three form words (SXM, PCIe, NVL): bounded, so a run of them costs linear time, and the blanks before the
    # figure taken whole (the figure starts with a digit, which no blank, dash or parenthesis can be)
    re.compile(r"\b(?:[ABHL]\d{2,3}[A-Z]?|GH200|GB200|MI\d{3}X?|L40S?|RTX\s?(?:PRO\s?)?\d{4}\w*)"
               r"(?:[- ](?:SXM\d?|PCIe|NVL)){0,3}[- ]*+\(?\s*+" + _SIZE.replace("|T|G|M", "") + r"(?:\s+each)?\b"),
]
_GRAPH_RE = re.compile(r"\b(?:cuda[- ]?)?graphs?\s+(?:(?:were|was|are|is|got|had\s+been)\s+)?captur\w*"
                       r"|\bcaptur\w*\s+(?:the\s+)?(?:cuda[- ]?)?graphs?\b", re.IGNORECASE)
_LEFT_SIZE_RE = re.compile(
    r"(?:\b(?:left|leaving|leaves|remain\w*|avail(?:able)?(?:\s+mem(?:ory)?)?|free(?:\s+(?:GPU\s+)?memory)?)"
    r"(?:\s+(?:was|is|of|were))?\b\W{0,3}(?:only\s+|just\s+|about\s+|~)?" + _SIZE + r")|(?:" + _SIZE_START + r"\s+(?:of\s+(?:GPU\s+)?(?:memory\s+)?)?(?:free|left|available|remain\w*|"
    r"(?:was|were)\s+(?:left|free))\b)", re.IGNORECASE)
# kill(1), pkill(1) (procps)
_KILL_RE = re.compile(
    r"\b(?:pkill|killall)(?:\s+-[\w-]+)*\s+(?!(?:and|or|the|a|to|with|commands?|would|could|should|will|can|"
    r"might|may|did|does|do|is|was|were|then|first|again|also|only|all|processes|it|them)\b)[\w./*-]+|\bkill\s+-(?:9|KILL|SIGKILL|15|TERM)(?:\s+\d+)+"
    r"|\bfuser\s+(?:-[\w-]+\s+)*-k\w*(?:\s+-[\w-]+)*\s+/\S+|\bdocker\s+(?:kill|stop|rm\s+-f)\s+[\w.-]+"
    r"|\bpct\s+(?:stop|shutdown|reboot)\s+\d+|\bsystemctl\s+(?:stop|restart)\s+[\w@.-]+")


def _size_bytes(num: str, unit: str) -> tuple[int, bool]:
    """Bytes, and whether a decimal-looking unit was read as binary."""
    n = float(num.replace(",", ""))
    u = unit.lower()
    return int(round(n * _UNIT_BYTES[u])), u in ("gb", "tb", "mb", "g", "t", "m")


# ---------------------------------------------------------------------------------------------
# configurations


@dataclass
class _Config:
    line: int
    flags: dict[str, str | bool] = field(default_factory=dict)
    mentions: dict[str, dict[str, Any]] = field(default_factory=dict)
    carried: list[str] = field(default_factory=list)
    implied: list[str] = field(default_factory=list)
    last_line: int = 0
    stated: bool = False  # False: a run opened by a stated figure before any flag

    def add(self, m: Mention) -> None:
        self.stated = True
        if m.flag in self.carried:
            self.carried.remove(m.flag)
        if m.flag in self.implied:
            self.implied.remove(m.flag)
        self.flags[m.flag] = m.value
        self.mentions[m.flag] = {"line": m.line, "text": m.sentence, "written": m.written}
        self.last_line = max(self.last_line, m.line)
        imp = IMPLIES.get(m.flag)
        if imp and imp[0] not in self.flags:
            self.flags[imp[0]] = imp[1]
            self.implied.append(imp[0])
            self.mentions[imp[0]] = {"line": m.line, "text": m.sentence, "written": m.written}


def _conflicts(cfg: _Config, m: Mention) -> bool:
    old = cfg.flags.get(m.flag)
    if old is None or m.flag in cfg.implied:
        return False
    if old == m.value:
        return False
    try:
        return float(str(old)) != float(str(m.value))
    except ValueError:
        return str(old).lower() != str(m.value).lower()


def _as_vllm(flag: str, mentions: dict[str, dict[str, Any]]) -> str:
    written = (mentions.get(flag) or {}).get("written") or flag
    return vocab.canonical(written, "vllm")


def _engine(flags: dict[str, Any]) -> str | None:
    engines = {vocab.engine_of_flag(f) for f in flags} - {None}
    return engines.pop() if len(engines) == 1 else None


# ---------------------------------------------------------------------------------------------
# entry points


def _split_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    """Configurations, discussed values and stated figures of the prose in ``text`` (see the module doc).

    Lines are counted but not claimed: the caller (the transcript reader) accounts for prose lines.
    """
    notes = []
    if len(text) > MAX_TEXT:  # a write-up is small; a huge unclaimed text is read only at its start
        notes.append(f"{path or 'text'}: prose read only in its first {MAX_TEXT >> 20} MiB")
        text = text[:MAX_TEXT]
    lines = _split_lines(text)
    rows: list[dict[str, Any]] = []
    configs: list[_Config] = []
    facts: list[tuple[int | None, dict[str, Any]]] = []  # (config index or None, row)

    def current(line: int) -> int:
        if not configs:
            configs.append(_Config(line=line, last_line=line))
        return len(configs) - 1

    for par in _paragraphs(lines):
        frame: str | None = None
        for s_start, s_end in _sentences(par.text):
            sentence = par.text[s_start:s_end].strip()
            if not sentence:
                continue
            line = par.line_at(s_start)
            has_digit = _DIGIT_RE.search(sentence) is not None
            mentions = _flag_mentions(sentence) if _MENTION_HINT_RE.search(sentence) else []
            for a, b, flag, value, written in mentions:
                before, after = _clause(sentence, a, b)
                cue = discussion_cue(before, after, sentence, frame)
                m = Mention(flag, value, written, par.line_at(s_start + a), sentence, cue)
                if cue:
                    rows.append({"line": m.line, "kind": "launch_flag_discussed", "text": sentence,
                                 "attrs": {"flag": flag, "value": value, "written": written, "cue": cue,
                                           "discussed": True, "confidence": CONFIDENCE}})
                    continue
                if configs and _conflicts(configs[-1], m):
                    prev = configs[-1]
                    nxt = _Config(line=m.line, last_line=m.line, stated=True)
                    nxt.flags = dict(prev.flags)
                    nxt.mentions = dict(prev.mentions)
                    nxt.carried = sorted(prev.flags)
                    nxt.implied = list(prev.implied)
                    configs.append(nxt)
                elif configs and not configs[-1].stated:
                    configs[-1].line = min(configs[-1].line, m.line)
                configs[current(m.line)].add(m)
            if "kill" in sentence or "fuser" in sentence or "docker" in sentence or "pct " in sentence \
                    or "systemctl" in sentence:
                rows.extend(_kills(sentence, line, frame))
            if has_digit:
                facts.extend(_figures(sentence, line, frame, current))
            f = _FRAME_RE.search(sentence)
            if f:
                frame = f.group(0).lower()
    named = {e for e in ("sglang", "vllm") if re.search(rf"\b{e}\b", text, re.IGNORECASE)}
    for i, cfg in enumerate(configs):
        engine = _engine(cfg.flags) or (next(iter(named)) if len(named) == 1 else None)  # the only engine named
        if engine == "vllm":  # vLLM's own names ("tensor_parallel_size" → --tensor-parallel-size, not --tp-size)
            cfg.flags = {_as_vllm(f, cfg.mentions): v for f, v in cfg.flags.items()}
            cfg.carried = [_as_vllm(f, cfg.mentions) for f in cfg.carried]
            cfg.mentions = {_as_vllm(f, cfg.mentions): m for f, m in cfg.mentions.items()}
        args = {f.lstrip("-").replace("-", "_"): v for f, v in sorted(cfg.flags.items())}
        text_lines = sorted({m["line"] for m in cfg.mentions.values()}) or [cfg.line]
        own = [m for f, m in cfg.mentions.items() if f not in cfg.carried] or list(cfg.mentions.values())
        sentences = list(dict.fromkeys(m["text"] for m in sorted(own, key=lambda m: m["line"])))
        common = {"confidence": CONFIDENCE, "mentions": {k: cfg.mentions[k] for k in sorted(cfg.mentions)}}
        if cfg.carried:
            common["carried"] = sorted(f for f in cfg.carried if f in cfg.flags)
        if cfg.implied:
            common["implied"] = sorted(cfg.implied)
        first = cfg.line
        rows.append({"line": first, "run": i, "kind": "server_args", "text": "\n".join(sentences),
                     "attrs": {"args": args, "form": "prose", **common}})
        if cfg.flags:
            rows.append({"line": first, "line_end": max(text_lines + [cfg.last_line, first]), "kind": "launch_command",
                         "text": "\n".join(sentences),
                         "attrs": {"argv": [], "flags": dict(sorted(cfg.flags.items())), "launcher": "prose",
                                   "env": {}, **({"engine": engine} if engine else {}), **common}})
    for idx, row in facts:
        if idx is not None:
            row["run"] = idx
        rows.append(row)
    rows.extend(_versions(lines))
    rows.sort(key=lambda r: r["line"])
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=len(lines), recognized=len(lines), notes=notes)


#: the SGLang version a listing states on a line of its own: ``python -m sglang.check_env`` prints each package
#: as ``{name}: {version}`` (sglang python/sglang/check_env.py::check_env (0.4-0.5): ``sglang: 0.5.0rc0``), and
#: tickets copy that form or
#: write ``SGLang version: 0.5.6`` / ``Environment: sglang0.5.3``. Only at a line's start: "upgrading to sglang
#: 0.5.6 fixed it" mid-sentence is not the version that ran. ``sglang_router``/``sglang-kernel`` are other packages.
_VERSION_LINE_RE = re.compile(
    r"^\s*+(?:[-*•]\s*+)?(?:environment\s*:\s*)?sglang(?:\s+version)?(?:\s*[:=]=?\s*|\s+)?v?"
    r"(\d{1,3}\.\d{1,3}(?:\.\d{1,3})?(?:\.?(?:post|rc|dev)\d{0,4})?)(?![\w.])",
    re.IGNORECASE)


def _versions(lines: list[str]) -> list[dict[str, Any]]:
    """``version`` rows (component ``sglang``) for the lines that state the version as a listing does."""
    out = []
    for n, ln in enumerate(lines, 1):
        if len(ln) > 200 or "sglang" not in ln[:40].lower():
            continue
        m = _VERSION_LINE_RE.match(ln)
        if m:
            out.append({"line": n, "kind": "version", "text": ln.strip()[:200],
                        "attrs": {"component": "sglang", "version": m.group(1), "confidence": CONFIDENCE,
                                  "stated": True}})
    return out


def _kills(sentence: str, line: int, frame: str | None) -> list[dict[str, Any]]:
    out = []
    for m in _KILL_RE.finditer(sentence):
        before, after = _clause(sentence, m.start(), m.end())
        cmd = m.group(0).rstrip(".,;:")
        if discussion_cue(before, after, sentence, frame) or re.search(r"\s(?:would|could|should|might|will)$", cmd):
            continue
        out.append({"line": line, "kind": "command", "text": sentence,
                    "attrs": {"command": cmd, "subcommands": [cmd], "confidence": CONFIDENCE, "stated": True}})
    return out


def _figures(sentence: str, line: int, frame: str | None, current) -> list[tuple[int | None, dict[str, Any]]]:
    """Stated figures: memory left after graph capture, host RAM, GPU capacity."""
    out: list[tuple[int | None, dict[str, Any]]] = []  # None: a host or GPU figure, no server run
    base = {"confidence": CONFIDENCE, "stated": True}
    if _GRAPH_RE.search(sentence):
        for m in _LEFT_SIZE_RE.finditer(sentence):
            num, unit = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            before, after = _clause(sentence, m.start(), m.end())
            if discussion_cue(before, after, sentence, frame):
                continue
            size, assumed = _size_bytes(num, unit)
            a = {**base, "avail_text": m.group(0).strip(), "capture_name": "stated"}
            if assumed:
                a["unit_assumed"] = f"{unit} of GPU memory read as GiB (SGLang prints GiB as GB)"
            out.append((current(line), {"line": line, "kind": "cuda_graph_end", "avail_bytes": size,
                                        "text": sentence, "attrs": a}))
            break
    seen: set[int] = set()
    host_pats = _HOST_PATTERNS if _HOST_WORD_RE.search(sentence) else []
    for pat in host_pats:
        explicit = pat is _OUT_OF_TOTAL  # "… out of N GB total" names the total itself
        for m in pat.finditer(sentence):
            if m.start(1) in seen:  # one figure that two phrasings match
                continue
            pre = re.split(r"[,;:()]", sentence[max(0, m.start() - 40):m.start()])[-1]  # this clause only
            pre_words = " ".join(pre.split()[-5:])
            if _GPU_KEY_RE.search(sentence[max(0, m.start() - 12):m.start()]):
                continue  # "GPU Memory: 80GB" is a GPU's
            post_words = " ".join(sentence[m.end():m.end() + 40].split()[:3])
            if not explicit and ((_HOST_NOT_RE.search(pre_words)
                                  and not re.search(r"\ball\s+(?:of\s+)?(?:the\s+|its\s+)?$", pre))
                                 or _HOST_NOT_RE.search(post_words)):
                continue
            before, after = _clause(sentence, m.start(), m.end())
            if discussion_cue(before, after, sentence, frame):
                continue
            seen.add(m.start(1))
            size, assumed = _size_bytes(m.group(1), m.group(2))
            a = {**base, "total_text": m.group(0).strip()}
            if assumed:
                a["unit_assumed"] = f"{m.group(2)} of RAM read as GiB (free -g and most tools print GiB as G/GB)"
            out.append((None, {"line": line, "kind": "host_memory", "total_bytes": size, "text": sentence, "attrs": a}))
    for pat in _GPU_CAP_PATTERNS if _GPU_WORD_RE.search(sentence) else []:
        for m in pat.finditer(sentence):
            pre = re.split(r"[,;:()]", sentence[max(0, m.start() - 40):m.start()])[-1]
            if m.start(1) in seen or _GPU_NOT_RE.search(" ".join(pre.split()[-5:])):
                continue  # one figure two phrasings match; memory used or taken is no capacity
            before, after = _clause(sentence, m.start(), m.end())
            if discussion_cue(before, after, sentence, frame):
                continue
            seen.add(m.start(1))
            size, assumed = _size_bytes(m.group(1), m.group(2))
            a = {**base, "total_text": m.group(0).strip()}
            if assumed:
                a["unit_assumed"] = f"{m.group(2)} of GPU memory read as GiB (nvidia-smi prints MiB)"
            out.append((None, {"line": line, "kind": "gpu_memory", "total_bytes": size, "text": sentence, "attrs": a}))
            break
    return out

"""The postmortem outputs: report.html, summary.md, findings.json, findings.sarif, timeline.parquet.

The report knows nothing of parsing: it reads the findings document (DESIGN.md §4, ``doc``), the
timeline (for plots, the start-up table and the inventory) and the rule catalog (for each rule's
explanation). The catalog is anything with ``.get(rule_id)`` returning an object or dict with
``id``, ``title``, ``severity``, ``category`` and ``docs`` (a dict of headings → text); a missing
catalog or rule only drops the explanation.

Log text is untrusted: the HTML template autoescapes everything, control bytes are shown as
``\\xNN``, and the plot data embedded in the page has ``<``, ``>`` and ``&`` escaped as JSON
``\\u`` sequences so no input can close the ``<script>`` element that carries it.

>>> doc = {"schema_version": 1, "tool": {"name": "forensics", "version": "0"}, "input": {},
...        "root_cause": None, "findings": [], "coverage": []}
>>> "No findings" in render_markdown(doc, None)
True
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from forensics.model import SEVERITY_RANK, Timeline
from forensics.report.plots import Plots, timeline_plots
from forensics.resources import templates_dir

#: Output format → file name written into the output folder.
OUTPUT_FILES = {
    "html": "report.html",
    "md": "summary.md",
    "json": "findings.json",
    "sarif": "findings.sarif",
    "parquet": "timeline.parquet",
}
_FORMAT_ALIASES = {"markdown": "md", "htm": "html"}
#: summary.md is pasted into tickets: keep it short.
SUMMARY_MAX_LINES = 25

# ---------------------------------------------------------------------------------------------
# Text hygiene
# ---------------------------------------------------------------------------------------------

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


def md_text(text: Any, limit: int = 240) -> str:
    """Log text as inert Markdown on one line: HTML metacharacters as entities, Markdown escaped.

    >>> md_text("<script>alert(1)</script> | *x*")
    '&lt;script&gt;alert(1)&lt;/script&gt; \\\\| \\\\*x\\\\*'
    """
    s = visible(text).replace("\n", " ").replace("\t", " ")
    if len(s) > limit:
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


def fmt_figure(key: str, value: Any) -> str:
    """A figure value as printed in the report: ``*_bytes`` keys get GiB/GB readings."""
    if "bytes" in key and isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:,} bytes = {human_bytes(value)}"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return str(value)


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


# ---------------------------------------------------------------------------------------------
# The rule catalog, tolerated in any shape
# ---------------------------------------------------------------------------------------------


@dataclass
class RuleInfo:
    id: str
    title: str
    severity: str | None
    category: str | None
    docs: list[tuple[str, str]]  # (heading, text)


_DOC_HEADINGS = {
    "meaning": "What it means", "what_it_means": "What it means", "means": "What it means",
    "description": "What it means", "how_we_know": "How we know", "how": "How we know",
    "evidence": "How we know", "detection": "How we know", "what_to_do": "What to do",
    "action": "What to do", "actions": "What to do", "remediation": "What to do", "fix": "What to do",
}


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


#: Rule attributes that carry documentation when the rule has no ``docs`` dict.
_DOC_ATTRS = (("what", "What it means"), ("how", "How we know"), ("action", "What to do"))


def _doc_text(v: Any) -> str:
    if isinstance(v, list | tuple):
        return "\n".join(map(str, v))
    return str(v)


def _rule_info(rule: Any, rule_id: str) -> RuleInfo:
    docs_raw = _field(rule, "docs")
    docs: list[tuple[str, str]] = []
    if isinstance(docs_raw, dict):
        for k, v in docs_raw.items():
            if v:
                key = str(k).lower().replace(" ", "_").replace("-", "_")
                docs.append((_DOC_HEADINGS.get(key, str(k).replace("_", " ").capitalize()), _doc_text(v)))
    elif isinstance(docs_raw, str) and docs_raw.strip():
        docs.append(("What it means", docs_raw))
    else:
        docs = [(heading, _doc_text(v)) for name, heading in _DOC_ATTRS if (v := _field(rule, name))]
    return RuleInfo(
        id=str(_field(rule, "id") or rule_id),
        title=str(_field(rule, "title") or rule_id),
        severity=_field(rule, "severity"),
        category=_field(rule, "category"),
        docs=[(h, " ".join(t.split()) if "\n\n" not in t else t) for h, t in docs],
    )


def _catalog_items(catalog: Any) -> list[Any]:
    """The rules of a catalog given as a sequence, a mapping, or an object listing them."""
    if isinstance(catalog, dict):
        return list(catalog.values())
    if isinstance(catalog, list | tuple | set | frozenset):
        return list(catalog)
    for name in ("all", "rules", "values"):
        attr = getattr(catalog, name, None)
        if attr is None:
            continue
        try:
            items = attr() if callable(attr) else attr
        except Exception:  # a catalog that cannot list itself: try the next way
            continue
        return list(items.values()) if isinstance(items, dict) else list(items or [])
    try:
        return list(iter(catalog))
    except TypeError:
        return []


def rule_info(catalog: Any, rule_id: str) -> RuleInfo | None:
    """The catalog's entry for ``rule_id``, or None when the catalog or the rule is missing.

    >>> rule_info([{"id": "R1", "title": "T", "what": "W"}], "R1").docs
    [('What it means', 'W')]
    >>> rule_info(None, "R1") is None
    True
    """
    if catalog is None:
        return None
    rule = None
    getter = getattr(catalog, "get", None)
    if callable(getter) and not isinstance(catalog, list | tuple):
        try:
            rule = getter(rule_id)
        except Exception:  # a catalog that raises on unknown ids is as good as one without the rule
            rule = None
    if rule is None:
        rule = next((r for r in _catalog_items(catalog) if not isinstance(r, str) and _field(r, "id") == rule_id),
                    None)
    return None if rule is None else _rule_info(rule, rule_id)


def catalog_rules(catalog: Any) -> list[RuleInfo]:
    """Every rule of the catalog, sorted by id; empty when it cannot be listed."""
    if catalog is None:
        return []
    out = []
    for rule in _catalog_items(catalog):
        if isinstance(rule, str):  # iterating a mapping-like catalog yields ids
            info = rule_info(catalog, rule)
            if info:
                out.append(info)
        elif _field(rule, "id"):
            out.append(_rule_info(rule, str(_field(rule, "id"))))
    return sorted(out, key=lambda r: r.id)


# ---------------------------------------------------------------------------------------------
# Findings and remediation
# ---------------------------------------------------------------------------------------------


_FINDING_DEFAULTS: dict[str, Any] = {
    "rule_id": "?", "category": "other", "severity": "info", "title": "", "summary": "", "confidence": "low",
    "confidence_reason": None, "consequence_of": None, "ranks": [], "gpus": [], "evidence": [], "figures": {},
    "hosts": [],
}
_INPUT_DEFAULTS: dict[str, Any] = {"paths": [], "host": None, "collected_at": None, "sglang_version": None,
                                   "gaps": [], "hosts": {}}


def normalise_document(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` with every optional key present, so templates can be strict about typos."""
    out = dict(doc)
    out.setdefault("schema_version", 1)
    out["tool"] = {"name": "forensics", "version": "", **(doc.get("tool") or {})}
    out["input"] = {**_INPUT_DEFAULTS, **(doc.get("input") or {})}
    out.setdefault("root_cause", None)
    out["coverage"] = list(doc.get("coverage") or [])
    findings = []
    for f in doc.get("findings") or []:
        g = {**_FINDING_DEFAULTS, **{k: v for k, v in f.items() if v is not None or k in _FINDING_DEFAULTS}}
        for k in ("ranks", "gpus", "evidence", "hosts"):
            g[k] = list(g.get(k) or [])
        g["figures"] = dict(g.get("figures") or {})
        g["evidence"] = [{"file": "", "line": None, "ts": None, "text": "", **e} for e in g["evidence"]]
        rem = f.get("remediation") or {}
        g["remediation"] = {"flags": list(rem.get("flags") or []), "actions": list(rem.get("actions") or [])}
        findings.append(g)
    out["findings"] = findings
    return out


def ordered_findings(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Root cause first, then by severity, then in the document's order."""
    root = doc.get("root_cause")
    found = list(doc.get("findings") or [])
    return [f for _, f in sorted(
        enumerate(found),
        key=lambda p: (p[1].get("rule_id") != root, SEVERITY_RANK.get(p[1].get("severity"), 9), p[0]),
    )]


def root_finding(doc: dict[str, Any]) -> dict[str, Any] | None:
    root = doc.get("root_cause")
    return next((f for f in doc.get("findings") or [] if f.get("rule_id") == root), None)


@dataclass
class FlagRow:
    flag: str
    old: str | None
    new: str
    why: str
    rule_id: str
    old_source: str | None = None  # where `old` came from when the finding did not say


@dataclass
class LaunchFix:
    """The flags to change and, when the launch argv is known, the corrected command."""

    flags: list[FlagRow]
    old_argv: list[str] | None = None
    new_argv: list[str] | None = None
    changed_tokens: set[int] = field(default_factory=set)  # indices into new_argv
    old_changed_tokens: set[int] = field(default_factory=set)  # indices into old_argv
    source: str | None = None  # "file:line" of the launch command or server_args used

    @property
    def command(self) -> str | None:
        return shlex.join(self.new_argv) if self.new_argv else None

    @property
    def flags_only(self) -> str:
        return " ".join(f"{r.flag} {shlex.quote(r.new)}" if r.new else r.flag for r in self.flags)


def flag_key(flag: str) -> str:
    """``--hicache_size`` / ``hicache-size`` / ``--hicache-size`` → ``hicache-size``."""
    return flag.strip().lstrip("-").replace("_", "-").lower()


def flag_changes(doc: dict[str, Any]) -> list[FlagRow]:
    """Every remediation flag, once: the root cause's value wins, then severity order."""
    seen: dict[str, FlagRow] = {}
    for f in ordered_findings(doc):
        for ch in (f.get("remediation") or {}).get("flags") or []:
            if not ch.get("flag"):
                continue
            key = flag_key(ch["flag"])
            if key not in seen:
                flag = ch["flag"] if ch["flag"].startswith("-") else f"--{key}"
                old = ch.get("old")
                seen[key] = FlagRow(flag=flag, old=None if old is None else str(old),
                                    new="" if ch.get("new") is None else str(ch["new"]),
                                    why=str(ch.get("why") or ""), rule_id=str(f.get("rule_id")))
    return list(seen.values())


def cleanup_actions(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Remediation actions of all findings, once each, with the commands they contain."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for f in ordered_findings(doc):
        for action in (f.get("remediation") or {}).get("actions") or []:
            text = str(action)
            if text in seen:
                continue
            seen.add(text)
            out.append({"text": text, "rule_id": f.get("rule_id"), "commands": action_commands(text)})
    return out


_COMMAND_WORDS = ("sudo", "kill", "pkill", "killall", "fuser", "nvidia-smi", "systemctl", "docker", "echo",
                  "sync", "rm", "ipcrm", "umount", "python", "python3", "sglang", "pct", "lxc", "virsh",
                  "reboot", "modprobe", "rmmod", "sysctl")


def action_commands(text: str) -> list[str]:
    """Shell commands inside an action: its `backtick` spans, or the whole text if it is one.

    >>> action_commands("Kill the holders: `kill -9 4242` then check `nvidia-smi`")
    ['kill -9 4242', 'nvidia-smi']
    >>> action_commands("pkill -9 -f sglang")
    ['pkill -9 -f sglang']
    >>> action_commands("Restart the container from the hypervisor.")
    []
    """
    spans = [s.strip() for s in re.findall(r"`([^`\n]+)`", text) if s.strip()]
    if spans:
        return spans
    first = text.strip().split(" ", 1)[0]
    return [text.strip()] if first in _COMMAND_WORDS else []


def _events(tl: Timeline | None, *kinds: str) -> list[dict[str, Any]]:
    if tl is None or tl.events is None or tl.events.is_empty():
        return []
    return list(tl.of_kind(*kinds).iter_rows(named=True))


def _launch_flags(row: dict[str, Any]) -> tuple[dict[str, str], list[str] | None]:
    """Normalised flag → value, and the argv, of a launch_command or server_args row."""
    try:
        attrs = Timeline.attrs(row)
    except (ValueError, TypeError):
        return {}, None
    if not isinstance(attrs, dict):
        return {}, None
    if row.get("kind") == "launch_command":
        flags = attrs.get("flags") if isinstance(attrs.get("flags"), dict) else {}
        argv = attrs.get("argv")
        argv = [str(a) for a in argv] if isinstance(argv, list) and argv else None
    else:
        flags = attrs.get("args") if isinstance(attrs.get("args"), dict) else {}
        argv = None
    return {flag_key(str(k)): "" if v is None else str(v) for k, v in flags.items()}, argv


def _same_value(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    if a == b:
        return True
    try:
        return float(a) == float(b)
    except ValueError:
        return a.strip("'\"").lower() == b.strip("'\"").lower()


def corrected_argv(argv: list[str], flags: list[FlagRow]) -> tuple[list[str], set[int], set[int]]:
    """``argv`` with each flag set to its new value (appended when absent; removed when new is "").

    Returns the new argv and the indices of changed tokens in the new and the old argv.

    >>> new, changed, _ = corrected_argv(["sglang", "--tp-size", "8", "--hicache-size=300"],
    ...                                  [FlagRow("--hicache-size", "300", "48", "", "r")])
    >>> new, sorted(changed)
    (['sglang', '--tp-size', '8', '--hicache-size=48'], [3])
    """
    new = list(argv)
    old_marks: set[int] = set()
    origin = list(range(len(argv)))  # new index → old index (None for appended tokens)
    for ch in flags:
        key = flag_key(ch.flag)
        hit = None
        for i, tok in enumerate(new):
            if tok.startswith("-") and flag_key(tok.split("=", 1)[0]) == key and tok.startswith("--"):
                hit = i
                break
        if hit is None:
            if ch.new:
                new += [ch.flag, ch.new]
                origin += [None, None]
            continue
        tok = new[hit]
        has_value = "=" not in tok and hit + 1 < len(new) and not new[hit + 1].startswith("--")
        span = [hit, hit + 1] if has_value else [hit]
        old_marks.update(origin[i] for i in span if origin[i] is not None)
        if not ch.new:
            del new[span[0]: span[-1] + 1]
            del origin[span[0]: span[-1] + 1]
        elif "=" in tok:
            new[hit] = f"{tok.split('=', 1)[0]}={ch.new}"
            origin[hit] = None
        elif has_value:
            new[hit + 1] = ch.new
            origin[hit + 1] = None
        else:  # a bare boolean flag given a value
            new.insert(hit + 1, ch.new)
            origin.insert(hit + 1, None)
    changed = {i for i, o in enumerate(origin) if o is None}
    return new, changed, old_marks


def launch_fix(doc: dict[str, Any], tl: Timeline | None) -> LaunchFix:
    """The flag changes, with old values filled from the launch that best matches the findings."""
    flags = flag_changes(doc)
    fix = LaunchFix(flags=flags)
    if not flags:
        return fix
    candidates = _events(tl, "launch_command") or _events(tl, "server_args")
    best: tuple[int, int] | None = None
    chosen: tuple[dict[str, Any], dict[str, str], list[str] | None] | None = None
    for order, row in enumerate(candidates):
        values, argv = _launch_flags(row)
        score = sum(_same_value(values.get(flag_key(r.flag)), r.old) for r in flags)
        rank = (score + (1 if argv else 0), order)  # latest of the best matches
        if best is None or rank >= best:
            best, chosen = rank, (row, values, argv)
    if chosen is None:
        return fix
    row, values, argv = chosen
    fix.source = f"{row.get('file') or '?'}:{row.get('line') or '?'}"
    for r in flags:
        if r.old is None and flag_key(r.flag) in values:
            r.old, r.old_source = values[flag_key(r.flag)], fix.source
    if argv:
        fix.old_argv = argv
        fix.new_argv, fix.changed_tokens, fix.old_changed_tokens = corrected_argv(argv, flags)
    return fix


# ---------------------------------------------------------------------------------------------
# Start-up by rank
# ---------------------------------------------------------------------------------------------

#: Column label → event kinds that mark the stage.
STARTUP_STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("dist init", ("dist_init_end", "dist_init_begin")),
    ("weights begin", ("weight_load_begin",)),
    ("weights end", ("weight_load_end",)),
    ("KV allocated", ("kv_cache_allocated",)),
    ("pool end", ("memory_pool_end",)),
    ("graph begin", ("cuda_graph_begin",)),
    ("graph end", ("cuda_graph_end",)),
    ("HiCache alloc", ("hicache_alloc",)),
    ("ready", ("server_ready",)),
)


@dataclass
class StartupCell:
    text: str  # time, "✓", or "" when not reached
    title: str  # file:line and full stamp
    state: str  # "done" | "missing" | "stalled"


@dataclass
class StartupRow:
    group: str  # the log (or set of per-rank logs) and server run the rank belongs to
    run: int | None
    rank: str
    cells: list[StartupCell]
    stalled_at: str | None


def _natural(label: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", label))


def _stamp(row: dict[str, Any]) -> tuple[str, str]:
    if row.get("ts") is not None:
        return row["ts"].strftime("%H:%M:%S"), row["ts"].strftime("%Y-%m-%d %H:%M:%S UTC")
    if row.get("ts_local") is not None:
        return row["ts_local"].strftime("%H:%M:%S") + " local", row["ts_local"].strftime("%Y-%m-%d %H:%M:%S (host local)")
    return "✓", "no time stamp"


def _rank_of(r: dict[str, Any]) -> str:
    if r.get("rank"):
        return str(r["rank"])
    return f"TP{r['tp_rank']}" if r.get("tp_rank") is not None else "no rank prefix"


def _startup_groups(rows: list[dict[str, Any]], hosts: int = 1) -> dict[tuple[str, Any], str]:
    """(file, run) → group name. Ranks are compared only with ranks of the same server run: one log
    and run, except per-rank log files (one rank label each) of a host, which form one group. With
    several hosts (one server over several nodes) every host's ranks form one group, so a rank of one
    node that never reached a stage the other nodes' ranks reached stands out."""
    if hosts > 1:
        return {(r.get("file") or "", r.get("run")): "all hosts" for r in rows}
    labels: dict[tuple[str, Any], set[str]] = {}
    for r in rows:
        if r["kind"] != "server_ready":
            labels.setdefault((r.get("file") or "", r.get("run")), set()).add(_rank_of(r))
    per_rank = {k for k, v in labels.items() if len(v) == 1 and "no rank prefix" not in v}
    names: dict[tuple[str, Any], str] = {}
    for r in rows:
        key = (r.get("file") or "", r.get("run"))
        run = "" if key[1] is None else f", run {key[1]}"
        if key in per_rank:
            names[key] = f"per-rank logs{' of ' + r['host'] if r.get('host') else ''}{run}"
        else:
            names[key] = f"{key[0]}{run}"
    return names


def startup_table(tl: Timeline | None) -> list[StartupRow]:
    """Rows = ranks of each server run, columns = :data:`STARTUP_STAGES`.

    A rank that lacks a stage other ranks of its run reached, and logged nothing after it, is
    marked "stalled here".
    """
    kinds = [k for _, ks in STARTUP_STAGES for k in ks]
    rows = _events(tl, *kinds)
    if not rows:
        return []
    n_hosts = len(tl.facts.hosts) if tl is not None else 0
    group_of = _startup_groups(rows, n_hosts)
    if n_hosts > 1:  # ranks are the server's (TP8 lives on node 1): the host goes with the label
        rows = [{**r, "rank": f"{r.get('host')} {_rank_of(r)}"} if r["kind"] != "server_ready" or r.get("rank")
                or r.get("tp_rank") is not None else r for r in rows]
    stage_of = {k: i for i, (_, ks) in enumerate(STARTUP_STAGES) for k in ks}
    reached: dict[tuple[str, Any, str], dict[int, dict[str, Any]]] = {}
    ready_of: dict[str, dict[str, Any]] = {}
    for r in rows:
        group = group_of[(r.get("file") or "", r.get("run"))]
        has_rank = bool(r.get("rank")) or r.get("tp_rank") is not None
        if r["kind"] == "server_ready" and not has_rank:
            ready_of.setdefault(group, r)  # main process: applies to every rank of the run
            continue
        stages = reached.setdefault((group, r.get("run"), _rank_of(r)), {})
        s = stage_of[r["kind"]]
        if s not in stages or _sort_key(r) < _sort_key(stages[s]):
            stages[s] = r
    ready_idx = len(STARTUP_STAGES) - 1
    for (group, _, _), stages in reached.items():
        if group in ready_of and ready_idx not in stages:
            stages[ready_idx] = ready_of[group]
    by_group: dict[str, set[int]] = {}
    for (group, _, _), stages in reached.items():
        by_group.setdefault(group, set()).update(stages)
    table = []
    for (group, run, label), stages in sorted(reached.items(), key=lambda kv: (kv[0][0], _natural(kv[0][2]))):
        others = by_group[group]
        last_own = max(stages)
        stalled_at = next((i for i in range(len(STARTUP_STAGES))
                           if i in others and i not in stages and i > last_own), None)
        cells = []
        for i, (name, _) in enumerate(STARTUP_STAGES):
            if i in stages:
                text, when = _stamp(stages[i])
                cells.append(StartupCell(text, f"{name}: {when} — {stages[i].get('file')}:{stages[i].get('line')}",
                                         "done"))
            elif i == stalled_at:
                cells.append(StartupCell("stalled here", f"other ranks of this run reached {name}", "stalled"))
            elif i in others:
                cells.append(StartupCell("—", f"other ranks reached {name}; not seen for this rank", "missing"))
            else:
                cells.append(StartupCell("", "", "none"))
        table.append(StartupRow(group, run, label, cells,
                                STARTUP_STAGES[stalled_at][0] if stalled_at is not None else None))
    return table


def _sort_key(r: dict[str, Any]) -> tuple:
    ts = r.get("ts") or r.get("ts_local")
    return (ts is None, ts or datetime.min, r.get("file") or "", r.get("line") or 0)


# ---------------------------------------------------------------------------------------------
# Inventory ("What we read")
# ---------------------------------------------------------------------------------------------


def unrecognised_input(coverage: list[dict[str, Any]]) -> list[str] | None:
    """When no file of the input held anything recognised as evidence: what each file was, as a reader
    says it ("notes.txt (3 lines, none recognised)"); None when something was recognised.

    >>> unrecognised_input([{"file": "a.txt", "lines": 0, "recognized": 0}])
    ['a.txt (empty)']
    >>> unrecognised_input([{"file": "free.txt", "lines": 3, "recognized": 3}]) is None
    True
    """
    if not coverage or any(c.get("recognized") for c in coverage):
        return None
    out = []
    for c in coverage:
        n = int(c.get("lines") or 0)
        out.append(f"{c.get('file')} (binary, not read)" if c.get("binary") else f"{c.get('file')} (empty)" if not n
                   else f"{c.get('file')} ({n:,} line{'' if n == 1 else 's'}, none recognised)")
    return out


def inventory(doc: dict[str, Any], tl: Timeline | None) -> dict[str, Any]:
    """Inputs, clocks, artifacts, gaps and parser coverage, from the document and the timeline."""
    inp = doc.get("input") or {}
    facts = tl.facts if tl is not None else None
    gaps = list(dict.fromkeys([*map(str, inp.get("gaps") or []), *(facts.gaps if facts else [])]))
    notes = list(facts.notes) if facts else []
    clocks: list[str] = []
    if facts is not None:
        if facts.utc_offset_s is not None:
            h, m = divmod(abs(facts.utc_offset_s) // 60, 60)
            clocks.append(f"Host-local stamps converted with UTC{'+' if facts.utc_offset_s >= 0 else '-'}"
                          f"{h:02d}:{m:02d} from the input.")
        elif facts.tz_assumed:
            clocks.append(f"No UTC offset in the input: host-local stamps assumed to be {facts.tz_assumed}.")
        if facts.boot_time is not None:
            clocks.append(f"Boot time {facts.boot_time.isoformat()} used for kernel uptime stamps.")
    basis: list[tuple[str, int]] = []
    if tl is not None and not tl.events.is_empty():
        counts = tl.events.group_by("ts_basis").len().sort("ts_basis", nulls_last=True)
        basis = [(b or "none", n) for b, n in counts.iter_rows()]
    coverage = doc.get("coverage") or (tl.coverage if tl is not None else [])
    examples = tl.unrecognized_examples if tl is not None else {}
    cov_rows = []
    for c in coverage:
        lines, rec = int(c.get("lines") or 0), int(c.get("recognized") or 0)
        cov_rows.append({**c, "share": f"{100.0 * rec / lines:.1f} %" if lines else "—",
                         "examples": list(examples.get(c.get("file"), []))[:20]})
    artifacts = list(tl.artifacts) if tl is not None else []
    return {
        "paths": [str(p) for p in inp.get("paths") or (facts.input_paths if facts else [])],
        "host": inp.get("host") or (facts.host if facts else None),
        "collected_at": inp.get("collected_at"),
        "sglang_version": inp.get("sglang_version") or (facts.sglang_version if facts else None),
        "versions": dict(sorted(facts.versions.items())) if facts else {},
        "gaps": gaps,
        "notes": notes,
        "clocks": clocks,
        "ts_basis": basis,
        "artifacts": artifacts,
        "coverage": cov_rows,
        "unrecognised_input": unrecognised_input(coverage),
    }


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------


def _env(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(visible=visible, slug=slug, md_text=md_text, md_code=md_code, md_fence=md_fence,
                       md_action=md_action, inline_md=inline_md,
                       human_bytes=human_bytes, ranges=ranges, script_json=script_json)
    env.globals.update(fmt_figure=fmt_figure)
    return env


def _headline(doc: dict[str, Any]) -> dict[str, Any]:
    findings = ordered_findings(doc)
    root = root_finding(doc)
    lead = root or (findings[0] if findings else None)
    hosts = sorted((doc.get("input") or {}).get("hosts") or {})
    if len(hosts) > 1 and lead is not None:
        # GPU 3 of one node is not GPU 3 of another: the headline names the lead's host's ranks and GPUs
        on_lead = [f for f in findings if (f.get("hosts") or [None])[0] == (lead.get("hosts") or [None])[0]]
    else:
        on_lead = findings
    ranks = sorted({r for f in findings for r in f.get("ranks") or [] if isinstance(r, int)})
    gpus = sorted({g for f in on_lead for g in f.get("gpus") or [] if isinstance(g, int)})
    return {"root": root, "lead": lead, "ranks": ranks, "gpus": gpus, "hosts": hosts,
            "lead_host": ((lead or {}).get("hosts") or [None])[0] if len(hosts) > 1 else None,
            "worst": min((SEVERITY_RANK.get(f.get("severity"), 9) for f in findings), default=None)}


def host_sections(doc: dict[str, Any], tl: Timeline | None) -> list[dict[str, Any]]:
    """One section per host when the input is several hosts' evidence: its facts (RAM, GPUs, container
    limit, engine version, clocks, topology), its snapshots, its findings and its plots; [] for one host."""
    if tl is None or len(tl.facts.hosts) <= 1:
        return []
    from forensics.timeline.hosts import host_view

    out = []
    for name, hf in sorted(tl.facts.hosts.items()):
        view = host_view(tl, name)
        ev = view.events
        snaps = ev.get_column("snapshot").drop_nulls().n_unique()
        plots = timeline_plots(view)
        for p in plots.figures:
            p.key = f"{slug(name)}-{p.key}"
        topo = hf.topology or {}
        out.append({
            "name": name, "how": hf.how, "paths": hf.input_paths, "tag": hf.tag,
            "ram": hf.ram_bytes, "gpus": hf.gpus, "gpu_total": hf.gpu_memory_bytes, "limit": hf.container_limit_bytes,
            "sglang_version": hf.sglang_version, "utc_offset_s": hf.utc_offset_s,
            "tz_assumed": hf.tz_assumed, "boot_time": hf.boot_time, "collected_at": hf.collected_at,
            "skew": hf.clock_skew_s, "skew_from": hf.clock_skew_from, "topology": topo,
            "snapshots": snaps, "files": len(hf.files), "rows": ev.height, "gaps": hf.gaps,
            "findings": [f for f in ordered_findings(doc) if (f.get("hosts") or [None])[0] == name],
            "plots": plots,
        })
    return out


def _findings_view(doc: dict[str, Any], catalog: Any) -> list[dict[str, Any]]:
    ids = {f.get("rule_id") for f in doc.get("findings") or []}
    root = root_finding(doc)  # one finding, even when its rule fired in several server runs
    out = []
    for f in ordered_findings(doc):
        out.append({
            "f": f,
            "rule": rule_info(catalog, str(f.get("rule_id"))),
            "is_root": f is root,
            "consequence_known": f.get("consequence_of") in ids,
            "followers": [g.get("rule_id") for g in ordered_findings(doc) if g.get("consequence_of") == f.get("rule_id")],
        })
    return out


def render_html(doc: dict[str, Any], tl: Timeline | None, catalog: Any) -> str:
    """The self-contained HTML report (plotly.js inline, no network)."""
    import plotly.offline

    doc = normalise_document(doc)

    plots: Plots = timeline_plots(tl) if tl is not None else Plots([], ["No timeline was given."])
    fix = launch_fix(doc, tl)
    plotlyjs = plotly.offline.get_plotlyjs()
    # plotly.js carries no "</script" today; make sure it never ends our element early.
    plotlyjs = re.sub(r"</(script)", r"<\\/\1", plotlyjs, flags=re.IGNORECASE)
    return _env(True).get_template("report.html.j2").render(
        doc=doc,
        tool=doc.get("tool") or {},
        head=_headline(doc),
        findings=_findings_view(doc, catalog),
        fix=fix,
        actions=cleanup_actions(doc),
        plots=plots,
        startup=startup_table(tl),
        stages=[name for name, _ in STARTUP_STAGES],
        inv=inventory(doc, tl),
        hosts=host_sections(doc, tl),
        plotlyjs=Markup(plotlyjs),
    )


def _summary_lines(text: str) -> str:
    """Collapse blank-line runs and keep at most :data:`SUMMARY_MAX_LINES` lines."""
    lines: list[str] = []
    for line in text.splitlines():
        line = line.rstrip()
        if not line and (not lines or not lines[-1]):
            continue
        lines.append(line)
    while lines and not lines[-1]:
        lines.pop()
    if len(lines) > SUMMARY_MAX_LINES:
        lines = lines[: SUMMARY_MAX_LINES - 1] + ["… more in report.html"]
    return "\n".join(lines) + "\n"


def render_markdown(doc: dict[str, Any], catalog: Any, tl: Timeline | None = None) -> str:
    """summary.md: at most 25 lines for a ticket; the same input gives the same bytes."""
    doc = normalise_document(doc)
    findings = ordered_findings(doc)
    evidence = []
    for f in findings:
        for e in f.get("evidence") or []:
            evidence.append((f, e))
    text = _env(False).get_template("summary.md.j2").render(
        doc=doc,
        head=_headline(doc),
        findings=findings,
        evidence=evidence[:3],
        fix=launch_fix(doc, tl),
        actions=cleanup_actions(doc)[:3],
        rule_title=lambda rid: (rule_info(catalog, rid) or RuleInfo(rid, rid, None, None, [])).title,
        unread=unrecognised_input(doc.get("coverage") or []),
    )
    return _summary_lines(text)


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def _dumps_document(doc: dict[str, Any]) -> str:
    try:
        from forensics.report.findings import dumps_document
    except ImportError:
        return json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False, default=str) + "\n"
    return dumps_document(doc)


def _default_catalog() -> Any:
    try:
        from forensics.rules import load_catalog
    except ImportError:
        return None
    try:
        return load_catalog()
    except Exception:  # the report still renders without explanations
        return None


def normalise_formats(formats: set[str] | list[str] | str) -> list[str]:
    """Format names in a fixed order; raises ValueError for an unknown one.

    >>> normalise_formats("parquet,markdown,html")
    ['html', 'md', 'parquet']
    """
    if isinstance(formats, str):
        formats = [f for f in formats.split(",")]
    names = {_FORMAT_ALIASES.get(f.strip().lower(), f.strip().lower()) for f in formats if f.strip()}
    unknown = names - set(OUTPUT_FILES)
    if unknown:
        raise ValueError(f"unknown output format(s): {', '.join(sorted(unknown))}; "
                         f"choose from {', '.join(OUTPUT_FILES)}")
    return [f for f in OUTPUT_FILES if f in names]


def _target(out_dir: Path, name: str) -> Path:
    """``out_dir/name``, refusing anything that would land outside ``out_dir``."""
    root = out_dir.resolve()
    target = (root / name).absolute()
    if target.parent != root or target.name != name or name in ("", ".", ".."):
        raise ValueError(f"refusing to write {name!r} outside {out_dir}")
    return target


def _write_atomic(target: Path, write) -> None:
    """Write through a temporary file in the same folder, then rename over the target.

    The rename replaces a symlink at ``target`` instead of following it out of the folder. The
    temporary file is created with mode 0666 so the umask, not mkstemp's 0600, decides access.
    """
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_outputs(doc: dict[str, Any], tl: Timeline, out_dir: Path, formats: set[str] | list[str] | str,
                  catalog: Any = None) -> list[Path]:
    """Write the asked formats into ``out_dir`` (created if needed); returns the paths written.

    ``catalog`` defaults to ``forensics.rules.load_catalog()`` when that is available.
    """
    wanted = normalise_formats(formats)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if catalog is None and any(f in wanted for f in ("html", "md", "sarif")):
        catalog = _default_catalog()
    written = []
    for fmt in wanted:
        target = _target(out_dir, OUTPUT_FILES[fmt])
        if fmt == "parquet":
            # the same file `forensics timeline` writes: facts and coverage in the metadata; a big
            # input's streamed file is linked into place rather than rewritten
            from forensics.timeline import write_parquet

            _write_atomic(target, lambda p: write_parquet(tl, p))
        else:
            text = _render_text(fmt, doc, tl, catalog)
            _write_atomic(target, lambda p, t=text: p.write_text(t, encoding="utf-8", newline="\n"))
        written.append(target)
    return written


def _render_text(fmt: str, doc: dict[str, Any], tl: Timeline, catalog: Any) -> str:
    if fmt == "html":
        return render_html(doc, tl, catalog)
    if fmt == "md":
        return render_markdown(doc, catalog, tl)
    if fmt == "json":
        return _dumps_document(doc)
    from forensics.report.sarif import to_sarif

    return json.dumps(to_sarif(doc, catalog), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


__all__ = [
    "OUTPUT_FILES", "render_html", "render_markdown", "write_outputs", "launch_fix", "startup_table",
    "inventory",
]

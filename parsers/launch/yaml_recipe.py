"""A tolerant reader for the YAML people launch servers with, and what the launch parser takes from it.

Sources: YAML 1.2 (block/flow collections, quoted and block scalars, ``---``/``...`` document markers),
kubernetes staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go (1.x: ``Ki Mi Gi`` and ``k M G``
suffixes, ``m``).

PyYAML is not a dependency of the parsers (they import only polars, regex and the stdlib), so this
reads the subset that Kubernetes manifests, compose files and SGLang/vLLM ``--config`` recipes use:
block mappings and sequences, flow sequences and simple flow mappings (also over several lines),
quoted keys (``"nvidia.com/gpu": 8``), block scalars (``|``, ``>``), plain scalars continued on deeper
lines, comments and ``---`` documents. Every value keeps its 1-based line. Scalars stay strings
(quotes removed); what they mean is the reader's business. Anchors, tags and complex keys are not
understood: their text is kept as a plain scalar, never an error.

>>> docs = load('a:\\n  b: [1, "two"]\\n  "nvidia.com/gpu": 8\\nlist:\\n  - x: 1\\n    y: |\\n      hi\\n')
>>> plain(docs[0])
{'a': {'b': ['1', 'two'], 'nvidia.com/gpu': '8'}, 'list': [{'x': '1', 'y': 'hi\\n'}]}
>>> docs[0].value["list"].value[0].line
5
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import regex as re

from parsers import jsontext
from parsers.units import GIB, KIB, MIB, TIB


@dataclass
class Node:
    """A YAML value: ``str`` / ``None`` scalar, ``dict[str, Node]`` or ``list[Node]``; its lines."""

    value: Any
    line: int
    line_end: int

    def get(self, *path: str) -> Node | None:
        node: Node | None = self
        for key in path:
            if node is None or not isinstance(node.value, dict):
                return None
            node = node.value.get(key)
        return node

    def text(self) -> str | None:
        return self.value if isinstance(self.value, str) else None


def plain(node: Node | None) -> Any:
    """The node as plain Python values (for tests and debugging)."""
    if node is None:
        return None
    if isinstance(node.value, dict):
        return {k: plain(v) for k, v in node.value.items()}
    if isinstance(node.value, list):
        return [plain(v) for v in node.value]
    return node.value


_KEY_RE = re.compile(r"""^(?:"((?:[^"\\]|\\.)*)"|'((?:[^']|'')*)'|([^\s#'"\[\]{},:][^#:]*?|[^\s#'"\[\]{},]))\s*:(?:\s+|$)""")
_DOC_RE = re.compile(r"^(?:---|\.\.\.)(?:\s|$)")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _strip_comment(s: str) -> str:
    quote = ""
    prev = " "
    for i, ch in enumerate(s):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            if prev in " \t[{,:" or i == 0:
                quote = ch
        elif ch == "#" and prev in " \t":
            return s[:i].rstrip()
        prev = ch
    return s.rstrip()


def scalar(s: str) -> str | None:
    """A plain or quoted scalar's text; ``~``/``null``/empty → None."""
    s = _strip_comment(s.strip()).strip()
    if len(s) >= 2 and s[0] == s[-1] == '"':
        try:
            return jsontext.loads(s)
        except ValueError:
            return s[1:-1]
    if len(s) >= 2 and s[0] == s[-1] == "'":
        return s[1:-1].replace("''", "'")
    if s in ("", "~", "null", "Null", "NULL"):
        return None
    return s


def split_flow(inner: str) -> list[str]:
    """Items of a YAML flow collection's inside (``a, "b, c", [d, e]``), each stripped, quotes kept."""
    items, cur, quote, depth = [], [], "", 0
    for ch in inner:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
            cur.append(ch)
        elif ch in "[{":
            depth += 1
            cur.append(ch)
        elif ch in "]}":
            depth -= 1
            cur.append(ch)
        elif ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    items.append("".join(cur))
    return [x.strip() for x in items if x.strip()]


def flow(text: str, line: int) -> Node:
    """A flow collection ``[a, b]`` / ``{k: v}`` (nested ones too), or a scalar."""
    t = _strip_comment(text.strip())
    if t.startswith("[") and t.endswith("]"):
        return Node([flow(x, line) for x in split_flow(t[1:-1])], line, line)
    if t.startswith("{") and t.endswith("}"):
        out: dict[str, Node] = {}
        for item in split_flow(t[1:-1]):
            m = _KEY_RE.match(item + (" " if item.endswith(":") else ""))
            if m:
                key = m.group(1) if m.group(1) is not None else (m.group(2) if m.group(2) is not None else m.group(3))
                out[key.strip()] = flow(item[m.end():], line)
            else:
                out[item] = Node(None, line, line)
        return Node(out, line, line)
    return Node(scalar(t), line, line)


class _Reader:
    def __init__(self, lines: list[str], offset: int) -> None:
        self.lines = lines
        self.offset = offset  # 1-based line of lines[0] minus 1
        self.i = 0

    def _skip(self) -> None:
        while self.i < len(self.lines):
            s = self.lines[self.i].strip()
            if s and not s.startswith("#"):
                return
            self.i += 1

    def block(self, indent: int) -> Node | None:
        """The block starting at the next content line, if it is indented at least ``indent``."""
        self._skip()
        if self.i >= len(self.lines):
            return None
        ln = self.lines[self.i]
        ind = _indent(ln)
        if ind < indent:
            return None
        body = ln.strip()
        if body.startswith("- ") or body == "-":
            return self.sequence(ind)
        if _KEY_RE.match(body):
            return self.mapping(ind)
        return self.plain_scalar(ind)

    def plain_scalar(self, ind: int) -> Node:
        start = self.i
        parts = []
        while self.i < len(self.lines):
            ln = self.lines[self.i]
            if ln.strip() and _indent(ln) < ind:
                break
            parts.append(ln.strip())
            self.i += 1
        text = " ".join(p for p in parts if p)
        if text[:1] and text[0] in "[{":
            return flow(text, start + 1 + self.offset)
        return Node(scalar(text), start + 1 + self.offset, self.i + self.offset)

    def sequence(self, ind: int) -> Node:
        items: list[Node] = []
        start = self.i
        while True:
            self._skip()
            if self.i >= len(self.lines):
                break
            ln = self.lines[self.i]
            body = ln.strip()
            if _indent(ln) != ind or not (body.startswith("- ") or body == "-"):
                break
            rest = body[1:].lstrip()
            item_ind = ind + (len(body) - len(rest)) if rest else ind + 2
            if not rest:
                self.i += 1
                items.append(self.block(ind + 1) or Node(None, self.i + self.offset, self.i + self.offset))
                continue
            if _KEY_RE.match(rest) and not rest.startswith(("'", '"')) or (
                    rest[0] in "'\"" and _KEY_RE.match(rest) and not _quoted_whole(rest)):
                # a mapping that starts on the item's line: read it as if the dash were spaces
                self.lines[self.i] = " " * item_ind + rest
                items.append(self.mapping(item_ind))
                continue
            items.append(self.value_after(rest, item_ind, ind))
        end = items[-1].line_end if items else start + 1 + self.offset
        return Node(items, start + 1 + self.offset, end)

    def mapping(self, ind: int) -> Node:
        out: dict[str, Node] = {}
        start = self.i
        end = start + 1 + self.offset
        while True:
            self._skip()
            if self.i >= len(self.lines):
                break
            ln = self.lines[self.i]
            if _indent(ln) != ind:
                break
            body = ln.strip()
            m = _KEY_RE.match(body)
            if not m or body.startswith("- "):
                break
            key = m.group(1) if m.group(1) is not None else (m.group(2) if m.group(2) is not None else m.group(3))
            rest = body[m.end():]
            key_line = self.i + 1 + self.offset
            node = self.value_after(rest, ind + 1, ind, seq_at_same=True)
            node.line = min(node.line, key_line)  # a block value starts at its key
            out[key.strip()] = node
            end = max(end, node.line_end)
        return Node(out, start + 1 + self.offset, end)

    def value_after(self, rest: str, child_ind: int, own_ind: int, seq_at_same: bool = False) -> Node:
        """The value written after ``key:`` or ``-`` on line self.i (which is consumed)."""
        line = self.i + 1 + self.offset
        rest = rest.strip() if rest.strip()[:1] in ("|", ">") else _strip_comment(rest).strip()
        self.i += 1
        if rest[:1] in ("|", ">"):
            return self.block_scalar(rest, own_ind, line)
        if rest[:1] in ("[", "{"):
            buf = rest
            closer = "]" if rest[0] == "[" else "}"
            while _depth(buf) > 0 and self.i < len(self.lines):
                buf += " " + _strip_comment(self.lines[self.i].strip())
                self.i += 1
            node = flow(buf if buf.rstrip().endswith(closer) else buf + closer, line)
            node.line_end = self.i + self.offset
            return node
        if rest:
            # a plain scalar may continue on deeper lines
            parts = [rest]
            while self.i < len(self.lines):
                nxt = self.lines[self.i]
                if not nxt.strip():
                    self.i += 1
                    continue
                if _indent(nxt) <= own_ind or _KEY_RE.match(nxt.strip()) or nxt.strip().startswith("- "):
                    break
                parts.append(_strip_comment(nxt.strip()))
                self.i += 1
            text = " ".join(parts)
            return Node(scalar(text) if len(parts) == 1 else " ".join(p.strip() for p in parts), line,
                        self.i + self.offset if len(parts) > 1 else line)
        # the value is the block on the next lines (a compose/k8s list may sit at the key's own indent)
        self._skip()
        if self.i < len(self.lines):
            nxt = self.lines[self.i]
            if seq_at_same and _indent(nxt) == own_ind and nxt.strip().startswith("- "):
                return self.sequence(own_ind)
        node = self.block(own_ind + 1)
        return node or Node(None, line, line)

    def block_scalar(self, head: str, own_ind: int, line: int) -> Node:
        folded = head[0] == ">"
        parts: list[str] = []
        ind = None
        while self.i < len(self.lines):
            ln = self.lines[self.i]
            if ln.strip():
                if _indent(ln) <= own_ind:
                    break
                ind = _indent(ln) if ind is None else ind
                parts.append(ln[min(ind, _indent(ln)):])
            else:
                parts.append("")
            self.i += 1
        while parts and parts[-1] == "":
            parts.pop()
        text = (" ".join(p.strip() for p in parts) if folded else "\n".join(parts)) + ("\n" if parts else "")
        if head.endswith("-"):
            text = text.rstrip("\n")
        return Node(text, line, self.i + self.offset)


def _quoted_whole(s: str) -> bool:
    s = _strip_comment(s).strip()
    return len(s) >= 2 and s[0] == s[-1] and s[0] in "'\""


def _depth(s: str) -> int:
    depth, quote = 0, ""
    for ch in s:
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
    return depth


def load(text: str) -> list[Node]:
    """Every document of a YAML text (never raises for text it cannot read: the rest is skipped)."""
    lines = [ln.rstrip("\r").replace("\t", "  ") for ln in text.split("\n")]
    docs: list[Node] = []
    start = 0
    for i in range(len(lines) + 1):
        if i == len(lines) or _DOC_RE.match(lines[i]):
            chunk = lines[start:i]
            if any(ln.strip() and not ln.strip().startswith("#") for ln in chunk):
                try:
                    node = _Reader(list(chunk), start).block(0)
                except RecursionError:
                    node = None
                if node is not None:
                    docs.append(node)
            start = i + 1
    return docs


# ---------------------------------------------------------------------------------------------
# sizes

_K8S_RE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*(Ki|Mi|Gi|Ti|Pi|Ei|k|K|M|G|T|P|E|m)?\s*$")
_K8S_UNIT = {None: 1, "Ki": KIB, "Mi": MIB, "Gi": GIB, "Ti": TIB, "Pi": 1 << 50, "Ei": 1 << 60, "k": 10**3,
             "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "m": 1e-3}


def k8s_quantity(text: str | None) -> int | None:
    """A Kubernetes memory quantity in bytes: ``400Gi`` binary, ``400G`` decimal, ``129e6`` plain.

    >>> k8s_quantity("400Gi"), k8s_quantity("400G"), k8s_quantity("512Mi"), k8s_quantity("lots")
    (429496729600, 400000000000, 536870912, None)
    """
    m = _K8S_RE.match(text or "")
    if not m:
        return None
    return int(round(float(m.group(1)) * _K8S_UNIT[m.group(2)]))


# ---------------------------------------------------------------------------------------------
# Kubernetes containers


@dataclass
class Container:
    """One container of a manifest: its argv (command + args), env, limits, and lines."""

    name: str | None
    image: str | None
    argv: list[str]
    env: dict[str, str | None]
    memory_limit: int | None
    memory_request: int | None
    gpus: int | None
    line: int
    line_end: int
    argv_line: int
    argv_end: int


def _as_argv(node: Node | None, tokenize) -> list[str]:
    if node is None:
        return []
    if isinstance(node.value, list):
        return [str(x.value) if x.value is not None else "" for x in node.value if not isinstance(x.value, dict | list)]
    if isinstance(node.value, str):
        return tokenize(node.value)
    return []


def k8s_containers(doc: Node, tokenize) -> list[Container]:
    """Every container (``containers``/``initContainers`` at any depth) of one manifest document."""
    out: list[Container] = []

    def walk(node: Node, depth: int) -> None:
        if depth > 40:
            return
        if isinstance(node.value, dict):
            for key, child in node.value.items():
                if key in ("containers", "initContainers") and isinstance(child.value, list):
                    out.extend(c for c in (_container(x, tokenize) for x in child.value) if c)
                else:
                    walk(child, depth + 1)
        elif isinstance(node.value, list):
            for child in node.value:
                walk(child, depth + 1)

    walk(doc, 0)
    return out


def _container(node: Node, tokenize) -> Container | None:
    if not isinstance(node.value, dict):
        return None
    cmd, args = node.get("command"), node.get("args")
    argv = _as_argv(cmd, tokenize) + _as_argv(args, tokenize)
    env: dict[str, str | None] = {}
    env_node = node.get("env")
    if env_node is not None and isinstance(env_node.value, list):
        for item in env_node.value:
            if isinstance(item.value, dict) and item.get("name") is not None:
                name = item.get("name").text()
                if name:
                    val = item.get("value")
                    env[name] = val.text() if val is not None else None  # valueFrom: not known here
    limits = node.get("resources", "limits")
    requests = node.get("resources", "requests")

    def qty(n: Node | None, key: str) -> int | None:
        v = n.get(key) if n is not None else None
        return k8s_quantity(v.text()) if v is not None else None

    gpus = None
    for res in (limits, requests):
        for key in ("nvidia.com/gpu", "amd.com/gpu"):
            v = res.get(key) if res is not None else None
            if v is not None and v.text() and v.text().isdigit():
                gpus = int(v.text())
                break
        if gpus is not None:
            break
    parts = [p for p in (cmd, args) if p is not None]
    return Container(
        name=node.get("name").text() if node.get("name") is not None else None,
        image=node.get("image").text() if node.get("image") is not None else None,
        argv=argv, env=dict(sorted(env.items())), memory_limit=qty(limits, "memory"),
        memory_request=qty(requests, "memory"), gpus=gpus, line=node.line, line_end=node.line_end,
        argv_line=min((p.line for p in parts), default=node.line),
        argv_end=max((p.line_end for p in parts), default=node.line),
    )


def is_k8s(text: str) -> bool:
    """A Kubernetes manifest: ``kind:`` and ``apiVersion:`` at the top level, and containers."""
    return bool(re.search(r"^kind:\s*\S", text, re.MULTILINE) and re.search(r"^apiVersion:\s*\S", text, re.MULTILINE)
                and re.search(r"^\s*-?\s*containers:|^\s*containers:", text, re.MULTILINE))


# ---------------------------------------------------------------------------------------------
# --config recipes: a mapping of server arguments


#: keys under which a recipe nests the engine's arguments
RECIPE_SECTIONS = ("server_args", "server-args", "engine_args", "engine-args", "args", "sglang", "vllm", "serve",
                   "server")


#: sections of a prefill/decode-disaggregated recipe, one server per role (SGLang's ``--disaggregation-mode
#: prefill|decode``, sglang python/sglang/srt/server_args.py 0.4.6+; the layout of NVIDIA srt-slurm and Dynamo
#: recipes: ``prefill:`` / ``decode:`` mappings of server arguments side by side)
ROLE_SECTIONS = ("prefill", "decode")


def role_mappings(doc: Node) -> list[tuple[str, Node]]:
    """(role, mapping) of each disaggregation role section directly under the document, in file order."""
    if not isinstance(doc.value, dict):
        return []
    found = [(key, child) for key, child in doc.value.items()
             if key in ROLE_SECTIONS and isinstance(child.value, dict)]
    return sorted(found, key=lambda kv: kv[1].line)


def recipe_mappings(doc: Node) -> list[Node]:
    """The mapping itself and those nested one level under a section name that holds arguments."""
    if not isinstance(doc.value, dict):
        return []
    out = [doc]
    for key in RECIPE_SECTIONS:
        child = doc.value.get(key)
        if child is not None and isinstance(child.value, dict):
            out.append(child)
    return out


def recipe_value(node: Node) -> str | bool | None:
    """A recipe value as a flag value: ``true`` → True, a list → its items joined by a space."""
    if isinstance(node.value, list):
        return " ".join(str(x.value) for x in node.value if isinstance(x.value, str))
    if isinstance(node.value, dict):
        return json.dumps(plain(node), sort_keys=True)
    if node.value is None:
        return None
    if node.value.lower() in ("true", "yes", "on"):
        return True
    return node.value

"""Launch commands inside compose files and Kubernetes-style YAML: services, their command/entrypoint
and args, folded and flow forms.

Sources: compose-spec spec.md (2.x: ``services:``, ``command``/``entrypoint``, ``mem_limit``), YAML 1.2 (block
and flow forms), kubernetes staging/src/k8s.io/api/core/v1/types.go (1.x: ``command``/``args`` of a
container).
"""

from __future__ import annotations

from dataclasses import dataclass

import regex as re

from parsers import jsontext
from parsers.elision import is_elision
from parsers.launch.command import (
    ANCHOR_RE,
    SHELL_STOP_RE,
    LaunchCommand,
    anchor_index,
    container_limits,
    docker_size,
    engine_of_argv,
    env_prefix,
    scan_flags,
    strip_comment,
    tokenize,
)
from parsers.launch.yaml_recipe import split_flow
from parsers.units import k8s_quantity


@dataclass
class Logical:
    line: int  # 1-based first physical line
    line_end: int
    text: str  # comment-free, continuations joined
    raw: str  # the physical lines joined by "\n"


def logical_lines(lines: list[str], skip: set[int], notes: list[str]) -> list[Logical]:
    """Shell logical lines: backslash continuations joined, comments cut (bash semantics)."""
    out: list[Logical] = []
    i = 0
    while i < len(lines):
        if i in skip:
            i += 1
            continue
        first = i
        parts: list[str] = []
        while True:
            body = strip_comment(lines[i]).rstrip()
            cont = body.endswith("\\") and i + 1 < len(lines) and i + 1 not in skip
            parts.append(body[:-1] if cont else body)
            if not cont:
                break
            nxt = lines[i + 1].lstrip()
            if nxt.startswith("#"):
                # bash: a comment line ends the continued command; later lines stand alone
                notes.append(f"line {i + 2}: comment inside a continued command ends it (bash semantics)")
                break
            if is_elision(nxt):
                notes.append(f"line {i + 2}: the pasted command was cut here; its later flags are unknown")
                break
            i += 1
        out.append(Logical(first + 1, i + 1, " ".join(parts), "\n".join(lines[first:i + 1])))
        i += 1
    return out


# ---------------------------------------------------------------------------------------------
# docker compose (a minimal YAML reader: enough for services' command/entrypoint and limits)


_YAML_KEY_RE = re.compile(r"^(\s*)(-\s+)?([A-Za-z_][\w.-]*)\s*:(?:\s+(.*?)|\s*)$")
_COMPOSE_RE = re.compile(r"^\s*(?:command|entrypoint)\s*:", re.MULTILINE)
_SERVICES_RE = re.compile(r"^(?:services|version)\s*:|^\s+image\s*:", re.MULTILINE)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def is_blank_or_comment(line: str) -> bool:
    s = line.strip()
    return not s or s.startswith("#")


def _unquote_yaml(s: str) -> str:
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] == '"':
        try:
            return jsontext.loads(s)
        except ValueError:
            return s[1:-1]
    if len(s) >= 2 and s[0] == s[-1] == "'":
        return s[1:-1].replace("''", "'")
    return strip_comment(s).strip()


def _split_flow(s: str) -> list[str]:
    """Items of a YAML flow sequence ``[a, "b c", 'd']``."""
    inner = s.strip()
    inner = inner[1:-1] if inner.startswith("[") and inner.endswith("]") else inner.strip("[]")
    return [_unquote_yaml(x) for x in split_flow(inner)]


def _yaml_value(lines: list[str], i: int, indent: int, first: str) -> tuple[list[str], int]:
    """argv of a compose ``command``/``entrypoint`` value starting on line i; (argv, last line)."""
    first = first.strip()
    if first[:1] in ("'", '"', "["):
        first = strip_comment(first).strip()
    j = i
    if first.startswith("["):
        buf = first
        while buf.count("[") > buf.count("]") and j + 1 < len(lines):
            j += 1
            buf += " " + lines[j].strip()
        return _split_flow(strip_comment(buf).strip()), j
    if first[:1] in ("'", '"'):
        buf = first
        while (len(buf) < 2 or buf[-1] != buf[0]) and j + 1 < len(lines):
            j += 1
            buf += " " + lines[j].strip()
        return tokenize(_unquote_yaml(buf).replace("\\\n", " ")), j
    # block scalar, plain scalar or list on the following, deeper lines
    body: list[str] = []
    items: list[str] = []
    k = j + 1
    while k < len(lines):
        ln = lines[k]
        if is_blank_or_comment(ln):
            k += 1
            continue
        ind = _indent(ln)
        is_item = ln.lstrip().startswith("- ") or ln.strip() == "-"
        if ind > indent or (ind == indent and is_item and not first):
            if is_item and not first and (ind == indent or not body):
                items.append(_unquote_yaml(ln.lstrip()[1:]))
            else:
                body.append(ln.strip())
            j = k
            k += 1
            continue
        break
    if items:
        return items, j
    head = "" if first[:1] in (">", "|") else strip_comment(first)
    text = " ".join([head, *(b.rstrip("\\") for b in body)])
    return tokenize(text), j


def _yaml_paths(lines: list[str], start: int, end: int):
    """(line index, key path, value) of every ``key: value`` / ``- item`` in lines[start:end]."""
    stack: list[tuple[int, str]] = []
    for idx in range(start, end):
        ln = lines[idx]
        if is_blank_or_comment(ln):
            continue
        ind = _indent(ln)
        m = _YAML_KEY_RE.match(ln)
        if m:
            key_ind = ind + (len(m.group(2)) if m.group(2) else 0)
            while stack and stack[-1][0] >= (ind if m.group(2) else key_ind):
                stack.pop()
            path = tuple(k for _, k in stack) + (m.group(3),)
            yield idx, path, (m.group(4) or "")
            stack.append((key_ind, m.group(3)))
        elif ln.lstrip().startswith("- "):
            while stack and stack[-1][0] >= ind:
                stack.pop()
            yield idx, tuple(k for _, k in stack) + ("-",), ln.lstrip()[2:]


def compose_commands(lines: list[str], used: set[int]) -> list[LaunchCommand]:
    """One command per compose service whose entrypoint+command launches SGLang."""
    found: list[LaunchCommand] = []
    done_headers: set[int] = set()
    for i, ln in enumerate(lines):
        m = _YAML_KEY_RE.match(ln)
        if not m or m.group(3) not in ("command", "entrypoint") or m.group(2):
            continue
        ind = _indent(ln)
        header = next((h for h in range(i - 1, -1, -1)
                       if not is_blank_or_comment(lines[h]) and _indent(lines[h]) < ind), -1)
        if header in done_headers:
            continue
        done_headers.add(header)
        end = next((e for e in range(i + 1, len(lines))
                    if not is_blank_or_comment(lines[e]) and _indent(lines[e]) < ind), len(lines))
        cmd = _compose_service(lines, header + 1, end, ind)
        if cmd is not None:
            found.append(cmd)
            used.update(range(cmd.line - 1, cmd.line_end))
    return found


def _compose_service(lines: list[str], start: int, end: int, ind: int) -> LaunchCommand | None:
    parts: dict[str, tuple[list[str], int, int]] = {}
    env: dict[str, str | None] = {}
    memory = shm = gpus = image = ipc = None
    gpu_n: int | None = None
    for idx, path, value in _yaml_paths(lines, start, end):
        top = path[0]
        if path == ("image",):
            image = _unquote_yaml(value)
        if len(path) == 1 and top in ("command", "entrypoint", "args") and _indent(lines[idx]) == ind:
            argv, last = _yaml_value(lines, idx, ind, value)
            parts[top] = (argv, idx, last)
        elif path == ("mem_limit",) or path[-4:] == ("deploy", "resources", "limits", "memory"):
            memory = docker_size(_unquote_yaml(value))
        elif path[-3:] == ("resources", "limits", "memory"):  # a Kubernetes container: 400Gi, 400G
            memory = k8s_quantity(_unquote_yaml(value))
        elif path == ("shm_size",):
            shm = docker_size(_unquote_yaml(value))
        elif path == ("ipc",):
            ipc = _unquote_yaml(value)
        elif path == ("gpus",) or path[-2:] in (("devices", "device_ids"), ("devices", "count")):
            v = _unquote_yaml(value)
            gpus = ",".join(_split_flow(v)) if v.startswith("[") else v
            ids = _split_flow(v) if v.startswith("[") else None
            gpu_n = len(ids) if ids is not None and path[-1] == "device_ids" else (int(v) if v.isdigit() else None)
        elif top == "environment" and len(path) == 2 and path[1] != "-":
            env[path[1]] = _unquote_yaml(value)
        elif path == ("environment", "-"):
            k, has_v, v = _unquote_yaml(value).partition("=")
            env[k] = v if has_v else None
    # compose: entrypoint + command; a Kubernetes container: command + args
    argv = [tok for key in ("entrypoint", "command", "args") for tok in parts.get(key, ([], 0, 0))[0]]
    if image and "vllm/vllm-openai" in image and "entrypoint" not in parts and argv[:1] != ["vllm"] \
            and anchor_index(argv) is None:
        # the vllm/vllm-openai image's entrypoint is the API server: `command:` holds only its arguments
        argv = ["python3", "-m", "vllm.entrypoints.openai.api_server", *argv]
    hit = anchor_index(argv)
    if hit is None:
        nested = next((t for k, t in enumerate(argv) if k > 0 and argv[k - 1] == "-c" and ANCHOR_RE.search(t)),
                      None)
        if nested is None:
            return None
        argv = tokenize(nested)
        hit = anchor_index(argv)
        if hit is None:
            return None
    exe, anchor, _launcher, module = hit
    env = {**env, **env_prefix(argv[:exe])}
    end_i = anchor + 1
    while end_i < len(argv) and not SHELL_STOP_RE.match(argv[end_i]):
        end_i += 1
    argv = argv[exe:end_i]
    first = min(p[1] for p in parts.values())
    last = max(p[2] for p in parts.values())
    cmd = LaunchCommand(
        line=first + 1, line_end=last + 1, argv=argv, launcher="compose", module=module,
        text="\n".join(lines[first:last + 1]), env=dict(sorted(env.items())), scan=scan_flags(argv),
        docker_memory_bytes=memory, docker_shm_size_bytes=shm, docker_gpus=gpus, docker_ipc=ipc, engine=engine_of_argv(argv),
        confidence="config",
    )
    container_limits(cmd, "compose memory limit")
    if image:
        cmd.extra.setdefault("image", image)  # the engine's release, when its tag says (as a manifest's container)
    if gpu_n is not None:
        cmd.gpu_count, cmd.gpu_count_from = gpu_n, "compose device reservation"
    return cmd


# ---------------------------------------------------------------------------------------------
# entry points


def split_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def is_compose(text: str) -> bool:
    return bool(_COMPOSE_RE.search(text) and _SERVICES_RE.search(text))



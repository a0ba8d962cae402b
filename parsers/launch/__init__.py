"""SGLang launch commands, wherever they are written down.

Finds ``python[3] -m sglang.launch_server …`` (also ``sglang_router.launch_server``) and
``sglang serve …`` in a shell script (backslash continuations, comments, ``VAR=value`` prefixes,
``nohup … > log 2>&1 &``), a ``ps`` line, a NUL-separated ``/proc/PID/cmdline``, a
``docker run … lmsysorg/sglang:… python3 -m sglang.launch_server …`` line (with docker's
``--memory``/``-m``, ``--shm-size``, ``--gpus``, ``-e``) and a docker-compose service
(``command:``/``entrypoint:`` as a YAML string, block scalar or list; ``mem_limit``, ``shm_size``,
``deploy.resources``, ``environment``; a Kubernetes container's ``command`` + ``args`` read the
same way). Sample::

    CUDA_VISIBLE_DEVICES=0,1 nohup python3 -m sglang.launch_server \\
        --model /models/Qwen3-32B --tp 2 --mem-frac=0.85 \\
        --enable-hicache --hicache-size 48 > server.log 2>&1 &

Flags are read in both ``--flag value`` and ``--flag=value`` forms; a flag with no value is
``True``; a flag followed by several values (``--cuda-graph-bs 1 2 4``) keeps them joined by one
space. SGLang's aliases become the canonical long flag (``--tp`` → ``--tp-size``, ``--model`` →
``--model-path``, ``--enable-hicache`` → ``--enable-hierarchical-cache``, …). Docker sizes
(``400g``) are binary: docker's ``b k m g t`` suffixes are powers of 1024.

One ``launch_command`` event per command found.

>>> r = parse("CUDA_VISIBLE_DEVICES=0,1 python3 -m sglang.launch_server --model /m --tp 2 "
...           "--mem-frac=0.85 --enable-hicache > log 2>&1 &")
>>> import json; a = json.loads(r.events["attrs"][0])
>>> a["flags"]
{'--enable-hierarchical-cache': True, '--mem-fraction-static': '0.85', '--model-path': '/m', '--tp-size': '2'}
>>> a["env"], a["launcher"]
({'CUDA_VISIBLE_DEVICES': '0,1'}, 'python -m')
>>> parse_argv(["python", "-m", "sglang.launch_server", "--dp", "4", "--pp=2"])
{'--dp-size': '4', '--pp-size': '2'}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import regex as re

from parsers import jsontext
from parsers.launch import vocab
from parsers.schema import MAX_UNRECOGNIZED_EXAMPLES, NotThisFormat, ParseResult
from parsers.units import GIB, KIB, MIB, TIB, k8s_quantity

FORMAT = "launch"

#: SGLang flag spellings → the canonical long flag (one table for every reader: parsers/launch_vocab.py).
FLAG_ALIASES: dict[str, str] = vocab.SGLANG_ALIASES

#: Python modules that start an SGLang server when run with ``-m``.
LAUNCH_MODULES = ("sglang.launch_server", "sglang_router.launch_server")
#: ... and a vLLM server.
VLLM_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
#: NVIDIA Dynamo's engine workers (the SGLang or vLLM arguments follow).
DYNAMO_MODULES = ("dynamo.sglang", "dynamo.vllm")
_VLLM_IMAGE_RE = re.compile(r"^(?:[\w.-]+(?::\d+)?/)?vllm/vllm-openai(?::[\w.-]+)?(?:@sha256:[0-9a-f]+)?$")

_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_ANCHOR_RE = re.compile(r"-m\s+sglang(?:_router)?\.launch_server\b|\bsglang\s+serve\b"
                        r"|\bdynamo(?:-run|\s+run)\s[^\n]*\bout=(?:sglang|vllm)\b|-m\s+dynamo\.(?:sglang|vllm)\b"
                        r"|-m\s+vllm\.entrypoints\.(?:openai\.)?api_server\b|\bvllm\s+serve\b|\bvllm/vllm-openai\b")
# Tokens that end a simple command in a shell line: redirections, pipes, lists, background. A pasted
# ``<redacted-A>:5000`` or ``<model-dir>`` is a placeholder for a word, not a redirection.
_SHELL_STOP_RE = re.compile(r"^(?:\d*>>?|\d*>&\d*-?|&>>?|<<?(?![^<>\s]+>)|\|\|?|&&?|;;?)")
_WRAPPERS = {"nohup", "exec", "env", "sudo", "time", "stdbuf", "setsid", "nice", "taskset", "numactl"}
_DOCKER_BINS = {"docker", "podman", "nvidia-docker"}
_PS_HEADER_RE = re.compile(r"^\s*(?:PID\s+PPID|USER\s+PID|UID\s+PID)\b")


@dataclass
class FlagScan:
    """Canonical flags of one argv, what repeated, what was spelt another way."""

    flags: dict[str, str | bool] = field(default_factory=dict)
    repeated: list[str] = field(default_factory=list)
    spellings: dict[str, str] = field(default_factory=dict)  # canonical → as written, when different
    positional: list[str] = field(default_factory=list)


@dataclass
class LaunchCommand:
    """One SGLang launch found in a text (lines are 1-based within that text)."""

    line: int
    line_end: int
    argv: list[str]
    launcher: str  # python -m | sglang serve | docker run | compose
    text: str
    env: dict[str, str | None] = field(default_factory=dict)
    docker_memory_bytes: int | None = None
    docker_shm_size_bytes: int | None = None
    docker_gpus: str | None = None
    module: str | None = None
    scan: FlagScan = field(default_factory=FlagScan)
    engine: str = "sglang"
    confidence: str = "command"  # command (a command line) | config (a manifest, compose file, recipe)
    container_memory_bytes: int | None = None  # the container's or job's memory limit, whatever set it
    container_memory_from: str | None = None
    gpu_count: int | None = None
    gpu_count_from: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def flags(self) -> dict[str, str | bool]:
        return self.scan.flags

    def attrs(self) -> dict[str, Any]:
        a: dict[str, Any] = {
            "argv": self.argv,
            "flags": self.scan.flags,
            "launcher": self.launcher,
            "env": self.env,
            "engine": self.engine,
            "confidence": self.confidence,
        }
        optional = {
            "docker_memory_bytes": self.docker_memory_bytes,
            "docker_shm_size_bytes": self.docker_shm_size_bytes,
            "docker_gpus": self.docker_gpus,
            "module": self.module,
            "repeated": self.scan.repeated or None,
            "spellings": self.scan.spellings or None,
            "positional": self.scan.positional or None,
            "container_memory_bytes": self.container_memory_bytes,
            "container_memory_from": self.container_memory_from,
            "gpu_count": self.gpu_count,
            "gpu_count_from": self.gpu_count_from,
        }
        a.update({k: v for k, v in optional.items() if v is not None})
        if self.engine == "vllm" and self.scan.positional and "--model" not in self.scan.flags:
            a["model_tag"] = self.scan.positional[0]  # ``vllm serve M`` / the image's ``vllm serve`` entrypoint
        a.update(self.extra)
        return a


# ---------------------------------------------------------------------------------------------
# flags


def canonical_flag(flag: str, engine: str = "sglang") -> str:
    """``--tp`` → ``--tp-size``; ``--mem_fraction_static`` → ``--mem-fraction-static``; as the engine writes it.

    >>> canonical_flag("--tensor-parallel-size"), canonical_flag("--cuda-graph-max-bs-decode")
    ('--tp-size', '--cuda-graph-max-bs-decode')
    >>> canonical_flag("-tp", "vllm"), canonical_flag("--gpu_memory_utilization", "vllm")
    ('--tensor-parallel-size', '--gpu-memory-utilization')
    """
    if flag.startswith("--"):
        flag = "--" + flag[2:].replace("_", "-")
    if engine == "vllm":
        return vocab.VLLM_ALIASES.get(flag, flag)
    return FLAG_ALIASES.get(flag, flag)


def _is_flag(tok: str) -> bool:
    # "-1" and "-.5" are values (``--chunked-prefill-size -1``); "-" alone is a value too.
    return len(tok) > 1 and tok[0] == "-" and not (tok[1].isdigit() or tok[1] == ".")


def _args_start(argv: list[str]) -> int:
    """Index of the first server argument: after the module, ``serve`` or the vLLM image, else 0."""
    for i, tok in enumerate(argv):
        if tok in LAUNCH_MODULES + VLLM_MODULES + DYNAMO_MODULES and i > 0 and argv[i - 1] == "-m":
            return i + 1
        if tok == "serve" and i > 0 and _basename(argv[i - 1]) in ("sglang", "vllm"):
            return i + 1
        if _VLLM_IMAGE_RE.match(tok):
            return i + 1
        if _dynamo_run_engine(argv, i):
            return i + (2 if _basename(tok) == "dynamo" else 1)
    return 0


def engine_of_argv(argv: list[str]) -> str:
    """``vllm`` for a vLLM launch (``vllm serve``, its API server module, its image), else ``sglang``.

    >>> engine_of_argv(["vllm", "serve", "m"]), engine_of_argv(["python3", "-m", "sglang.launch_server"])
    ('vllm', 'sglang')
    """
    for i, tok in enumerate(argv):
        if (tok in VLLM_MODULES + ("dynamo.vllm",) and i > 0 and argv[i - 1] == "-m") or _VLLM_IMAGE_RE.match(tok) or (
                tok == "serve" and i > 0 and _basename(argv[i - 1]) == "vllm") or tok == "out=vllm":
            return "vllm"
    return "sglang"


def scan_flags(argv: list[str], engine: str | None = None) -> FlagScan:
    """Canonical flags of an argv (as its engine writes them), with repeats and alias spellings recorded."""
    engine = engine or engine_of_argv(argv)
    out = FlagScan()
    seen: set[str] = set()
    toks = argv[_args_start(argv):]
    if any(t.startswith("out=") for t in toks):  # dynamo-run's own in=/out= words are not server arguments
        toks = [t for t in toks if not _DYNAMO_IO_RE.match(t)]
    i = 0
    while i < len(toks):
        tok = toks[i]
        if not _is_flag(tok):
            out.positional.append(tok)
            i += 1
            continue
        written, eq, inline = tok.partition("=")
        name = canonical_flag(written, engine)
        value: str | bool
        if eq:
            value = inline
            i += 1
        else:
            j = i + 1
            while j < len(toks) and not _is_flag(toks[j]):
                j += 1
            value = " ".join(toks[i + 1:j]) if j > i + 1 else True
            i = j
        if name in seen and name not in out.repeated:
            out.repeated.append(name)
        seen.add(name)
        out.flags[name] = value
        if written != name:
            out.spellings[name] = written
    return out


def parse_argv(argv: list[str]) -> dict[str, str | bool]:
    """Canonical long flag → value string (``True`` for a flag without a value).

    Everything up to ``-m sglang.launch_server`` or ``sglang serve`` is skipped; a repeated flag
    keeps its last value (as argparse does).

    >>> parse_argv(["sglang", "serve", "--model=/m", "--tp", "8", "--tp", "4", "--trust-remote-code"])
    {'--model-path': '/m', '--tp-size': '4', '--trust-remote-code': True}
    """
    return dict(sorted(scan_flags(argv).flags.items()))


# ---------------------------------------------------------------------------------------------
# sizes


_DOCKER_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([bkmgtp]?)(?:i?b)?\s*$", re.IGNORECASE)
_DOCKER_UNIT = {"": 1, "b": 1, "k": KIB, "m": MIB, "g": GIB, "t": TIB, "p": 1 << 50}


def docker_size(text: str) -> int | None:
    """A docker/compose size in bytes: ``400g`` = 400 GiB (docker's suffixes are binary).

    >>> docker_size("400g"), docker_size("32GB"), docker_size("1.5m"), docker_size("lots")
    (429496729600, 34359738368, 1572864, None)
    """
    m = _DOCKER_SIZE_RE.match(text.strip().strip("\"'"))
    if not m:
        return None
    return int(round(float(m.group(1)) * _DOCKER_UNIT[m.group(2).lower()]))


# ---------------------------------------------------------------------------------------------
# shell text


def _basename(tok: str) -> str:
    return tok.rsplit("/", 1)[-1]


def _is_python(tok: str) -> bool:
    return re.fullmatch(r"python(?:\d+(?:\.\d+)*)?", _basename(tok)) is not None


def strip_comment(line: str) -> str:
    """Cut a shell/YAML comment: ``#`` at a word start outside quotes."""
    quote = ""
    prev = " "
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and prev in " \t":
            return line[:i]
        prev = ch
    return line


_SH_WORD_RE = re.compile(r"""(?:[^\s'"\\]++|'[^']*+'|"(?:\\.|[^"\\])*+"|\\.?)++""", re.S)
_SH_SEG_RE = re.compile(r"""([^\s'"\\]++)|'([^']*+)'|"((?:\\.|[^"\\])*+)"|\\(.?)""", re.S)
_DQ_ESCAPE_RE = re.compile(r"""\\([\\"$`\n])""")


def _unquote_word(word: str) -> str:
    out = []
    for m in _SH_SEG_RE.finditer(word):
        plain, single, double, escaped = m.groups()
        if plain is not None:
            out.append(plain)
        elif single is not None:
            out.append(single)
        elif double is not None:
            out.append(_DQ_ESCAPE_RE.sub(r"\1", double))
        else:
            out.append(escaped or "")
    return "".join(out)


def tokenize(text: str) -> list[str]:
    """Shell words (POSIX quoting, like ``shlex.split``); a whitespace split on unbalanced quotes.

    Linear time: ``shlex`` is quadratic on megabyte-long words.

    >>> tokenize("a 'b c' --k=" + '"v w"')
    ['a', 'b c', '--k=v w']
    >>> tokenize('x "unclosed y')
    ['x', '"unclosed', 'y']
    """
    words: list[str] = []
    prev = 0
    for m in _SH_WORD_RE.finditer(text):
        if text[prev:m.start()].strip():
            return text.split()  # a quote that never closes
        words.append(_unquote_word(m.group()))
        prev = m.end()
    if text[prev:].strip():
        return text.split()
    return words


def _anchor_index(tokens: list[str]) -> tuple[int, int, str, str | None] | None:
    """(executable index, anchor end index, launcher, module) of the first launch in tokens."""
    for i, tok in enumerate(tokens):
        if tok in LAUNCH_MODULES and i > 0 and tokens[i - 1] == "-m":
            exe = i - 1
            while exe > 0 and tokens[exe - 1].startswith("-") and not _SHELL_STOP_RE.match(tokens[exe - 1]):
                exe -= 1  # python options before -m (``-u``, ``-X dev`` is rare)
            if exe > 0 and _is_python(tokens[exe - 1]):
                exe -= 1
            return exe, i, "python -m", tok
        if tok == "serve" and i > 0 and _basename(tokens[i - 1]) == "sglang":
            return i - 1, i, "sglang serve", None
        if tok in VLLM_MODULES and i > 0 and tokens[i - 1] == "-m":
            exe = i - 1
            if exe > 0 and _is_python(tokens[exe - 1]):
                exe -= 1
            return exe, i, "python -m", tok
        if tok == "serve" and i > 0 and _basename(tokens[i - 1]) == "vllm":
            return i - 1, i, "vllm serve", None
        if _dynamo_run_engine(tokens, i):
            return i, i, "dynamo-run", None  # NVIDIA Dynamo running the engine in-process
        if tok in DYNAMO_MODULES and i > 0 and tokens[i - 1] == "-m":
            exe = i - 1
            if exe > 0 and _is_python(tokens[exe - 1]):
                exe -= 1
            return exe, i, "python -m", tok
        if _VLLM_IMAGE_RE.match(tok) and _docker_context(tokens[:i]) is not None and not (i + 1 < len(tokens) and (
                _basename(tokens[i + 1]) == "vllm" or _is_python(tokens[i + 1]))):
            return i, i, "docker run", None  # the image's entrypoint is the API server; its args follow
    return None


_DYNAMO_IO_RE = re.compile(r"^(?:in|out)=\S+$")


def _dynamo_run_engine(tokens: list[str], i: int) -> str | None:
    """The engine a ``dynamo-run`` (or the wheel's ``dynamo run``) at ``tokens[i]`` runs: its ``out=<engine>``
    argument, wherever it stands among its ``key=value`` arguments and flags (ai-dynamo/dynamo
    docs/guides/dynamo_run.md: ``dynamo-run in=[http|text|…] out=echo_core|…|sglang|vllm|dyn [--flags] [model]``)."""
    tok = _basename(tokens[i])
    if not (tok == "dynamo-run" or (tok == "dynamo" and i + 1 < len(tokens) and tokens[i + 1] == "run")):
        return None
    for t in tokens[i + 1:]:
        if _SHELL_STOP_RE.match(t):
            break
        if t in ("out=sglang", "out=vllm"):
            return t[4:]
    return None


def _docker_options(opts: list[str]) -> dict[str, Any]:
    """Memory, shm size, GPUs and environment from ``docker run`` options."""
    out: dict[str, Any] = {"env": {}}
    i = 0
    while i < len(opts):
        name, eq, val = opts[i].partition("=")
        has_inline = bool(eq) and name.startswith("--")
        if not has_inline:
            name, val = opts[i], (opts[i + 1] if i + 1 < len(opts) else "")
        step = 1 if has_inline else 2
        if name in ("--memory", "-m"):
            out["memory"] = docker_size(val)
        elif name == "--shm-size":
            out["shm"] = docker_size(val)
        elif name == "--gpus":
            out["gpus"] = val.strip("\"'")
        elif name in ("-e", "--env"):
            k, has_v, v = val.partition("=")
            out["env"][k] = v if has_v else None
        else:
            step = 1  # other options: their values are skipped as ordinary words
        i += step
    return out


def _commands_in_tokens(tokens: list[str], line: int, line_end: int, text: str) -> list[LaunchCommand]:
    """Every launch inside one logical shell line (including ``bash -c "…"`` arguments)."""
    found: list[LaunchCommand] = []
    start = 0
    while start < len(tokens):
        rest = tokens[start:]
        hit = _anchor_index(rest)
        # ``bash -c "…"``, ``ssh host '…'``, ``srun sh -c '…'``: a quoted word that holds a whole command line
        nested = next((k for k, t in enumerate(rest) if k > 0 and (rest[k - 1] == "-c" or " " in t)
                       and _ANCHOR_RE.search(t)), None)
        if nested is not None and (hit is None or nested < hit[0]):
            outer = _docker_context(rest[:nested])
            for cmd in _commands_in_tokens(tokenize(rest[nested]), line, line_end, text):
                _apply_docker(cmd, outer)
                found.append(cmd)
            start += nested + 1
            continue
        if hit is None:
            break
        exe, anchor, launcher, module = hit
        end = anchor + 1
        while end < len(rest) and not _SHELL_STOP_RE.match(rest[end]):
            end += 1
        argv = rest[exe:end]
        if argv and argv[-1].endswith((";", "&")) and not argv[-1].endswith("\\;"):
            argv[-1] = argv[-1].rstrip(";&")
        cmd = LaunchCommand(line=line, line_end=line_end, argv=argv, launcher=launcher, text=text,
                            module=module, env=_env_prefix(rest[:exe]), scan=scan_flags(argv),
                            engine=engine_of_argv(argv))
        if any(_basename(t) in ("srun", "mpirun", "torchrun") for t in rest[:exe]):
            cmd.extra["wrapper"] = next(_basename(t) for t in rest[:exe] if _basename(t) in ("srun", "mpirun", "torchrun"))
        _apply_docker(cmd, _docker_context(rest[:exe]))
        found.append(cmd)
        start += end
    return found


def _env_prefix(before: list[str]) -> dict[str, str | None]:
    """``VAR=value`` words right before the executable (through nohup/env/exec wrappers)."""
    env: dict[str, str | None] = {}
    for tok in reversed(before):
        if _ENV_RE.match(tok):
            k, _, v = tok.partition("=")
            env.setdefault(k, v)
        elif _basename(tok) in _WRAPPERS:
            continue
        else:
            break
    return dict(sorted(env.items()))


def _docker_context(before: list[str]) -> dict[str, Any] | None:
    """Options of a ``docker run`` that precedes the command, if any."""
    for i in range(len(before) - 1):
        if _basename(before[i]) in _DOCKER_BINS:
            j = i + 1
            if j < len(before) and before[j] == "container":
                j += 1
            if j < len(before) and before[j] == "run":
                return _docker_options(before[j + 1:])
    return None


def _apply_docker(cmd: LaunchCommand, docker: dict[str, Any] | None) -> None:
    if docker is None:
        return
    cmd.launcher = "docker run"
    cmd.docker_memory_bytes = docker.get("memory", cmd.docker_memory_bytes)
    cmd.docker_shm_size_bytes = docker.get("shm", cmd.docker_shm_size_bytes)
    cmd.docker_gpus = docker.get("gpus", cmd.docker_gpus)
    cmd.env = dict(sorted({**docker["env"], **cmd.env}.items()))
    _container_limits(cmd, "docker --memory")


def _container_limits(cmd: LaunchCommand, memory_from: str) -> None:
    """The docker/compose memory limit and GPU count as the generic container limits."""
    from parsers.launch.config import docker_gpu_count

    if cmd.docker_memory_bytes:
        cmd.container_memory_bytes, cmd.container_memory_from = cmd.docker_memory_bytes, memory_from
    n = docker_gpu_count(cmd.docker_gpus) if cmd.launcher == "docker run" else None
    if n is not None:
        cmd.gpu_count, cmd.gpu_count_from = n, "docker --gpus"


@dataclass
class _Logical:
    line: int  # 1-based first physical line
    line_end: int
    text: str  # comment-free, continuations joined
    raw: str  # the physical lines joined by "\n"


def _logical_lines(lines: list[str], skip: set[int], notes: list[str]) -> list[_Logical]:
    """Shell logical lines: backslash continuations joined, comments cut (bash semantics)."""
    out: list[_Logical] = []
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
            if _TRIMMED_RE.match(nxt):
                notes.append(f"line {i + 2}: the pasted command was cut here; its later flags are unknown")
                break
            i += 1
        out.append(_Logical(first + 1, i + 1, " ".join(parts), "\n".join(lines[first:i + 1])))
        i += 1
    return out


# ---------------------------------------------------------------------------------------------
# docker compose (a minimal YAML reader: enough for services' command/entrypoint and limits)


_YAML_KEY_RE = re.compile(r"^(\s*)(-\s+)?([A-Za-z_][\w.-]*)\s*:(?:\s+(.*?)|\s*)$")
_COMPOSE_RE = re.compile(r"^\s*(?:command|entrypoint)\s*:", re.MULTILINE)
_SERVICES_RE = re.compile(r"^(?:services|version)\s*:|^\s+image\s*:", re.MULTILINE)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _is_blank_or_comment(line: str) -> bool:
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
    items, cur, quote = [], [], ""
    for ch in inner:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
            cur.append(ch)
        elif ch == ",":
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    items.append("".join(cur))
    return [_unquote_yaml(x) for x in items if x.strip()]


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
        if _is_blank_or_comment(ln):
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
        if _is_blank_or_comment(ln):
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


def _compose_commands(lines: list[str], used: set[int]) -> list[LaunchCommand]:
    """One command per compose service whose entrypoint+command launches SGLang."""
    found: list[LaunchCommand] = []
    done_headers: set[int] = set()
    for i, ln in enumerate(lines):
        m = _YAML_KEY_RE.match(ln)
        if not m or m.group(3) not in ("command", "entrypoint") or m.group(2):
            continue
        ind = _indent(ln)
        header = next((h for h in range(i - 1, -1, -1)
                       if not _is_blank_or_comment(lines[h]) and _indent(lines[h]) < ind), -1)
        if header in done_headers:
            continue
        done_headers.add(header)
        end = next((e for e in range(i + 1, len(lines))
                    if not _is_blank_or_comment(lines[e]) and _indent(lines[e]) < ind), len(lines))
        cmd = _compose_service(lines, header + 1, end, ind)
        if cmd is not None:
            found.append(cmd)
            used.update(range(cmd.line - 1, cmd.line_end))
    return found


def _compose_service(lines: list[str], start: int, end: int, ind: int) -> LaunchCommand | None:
    parts: dict[str, tuple[list[str], int, int]] = {}
    env: dict[str, str | None] = {}
    memory = shm = gpus = image = None
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
            and _anchor_index(argv) is None:
        # the vllm/vllm-openai image's entrypoint is the API server: `command:` holds only its arguments
        argv = ["python3", "-m", "vllm.entrypoints.openai.api_server", *argv]
    hit = _anchor_index(argv)
    if hit is None:
        nested = next((t for k, t in enumerate(argv) if k > 0 and argv[k - 1] == "-c" and _ANCHOR_RE.search(t)),
                      None)
        if nested is None:
            return None
        argv = tokenize(nested)
        hit = _anchor_index(argv)
        if hit is None:
            return None
    exe, anchor, _launcher, module = hit
    env = {**env, **_env_prefix(argv[:exe])}
    end_i = anchor + 1
    while end_i < len(argv) and not _SHELL_STOP_RE.match(argv[end_i]):
        end_i += 1
    argv = argv[exe:end_i]
    first = min(p[1] for p in parts.values())
    last = max(p[2] for p in parts.values())
    cmd = LaunchCommand(
        line=first + 1, line_end=last + 1, argv=argv, launcher="compose", module=module,
        text="\n".join(lines[first:last + 1]), env=dict(sorted(env.items())), scan=scan_flags(argv),
        docker_memory_bytes=memory, docker_shm_size_bytes=shm, docker_gpus=gpus, engine=engine_of_argv(argv),
        confidence="config",
    )
    _container_limits(cmd, "compose memory limit")
    if gpu_n is not None:
        cmd.gpu_count, cmd.gpu_count_from = gpu_n, "compose device reservation"
    return cmd


# ---------------------------------------------------------------------------------------------
# entry points


def _split_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def _is_compose(text: str) -> bool:
    return bool(_COMPOSE_RE.search(text) and _SERVICES_RE.search(text))


def _scan(text: str) -> tuple[list[LaunchCommand], list[str], set[int], list[str]]:
    """(commands, lines, 0-based indices of lines inside commands, notes)."""
    lines = _split_lines(text)
    used: set[int] = set()
    notes: list[str] = []
    found: list[LaunchCommand] = []
    from parsers.launch import config as launch_config

    if launch_config.launch_yaml.is_k8s(text):
        for cmd in launch_config.k8s_commands(text):
            found.append(cmd)
            used.update(range(cmd.line - 1, cmd.line_end))
    elif _is_compose(text):
        found.extend(_compose_commands(lines, used))
    if launch_config.is_dockerfile(text):
        for cmd in launch_config.dockerfile_commands(text):
            found.append(cmd)
            used.update(range(cmd.line - 1, cmd.line_end))
    if launch_config.is_python_api(text):
        for cmd in launch_config.python_api_commands(text):
            found.append(cmd)
            used.update(range(cmd.line - 1, cmd.line_end))
    for idx, ln in enumerate(lines):
        if "\0" in ln and idx not in used:
            argv = ln.split("\0")
            while argv and argv[-1] == "":
                argv.pop()
            for cmd in _commands_in_tokens(argv, idx + 1, idx + 1, ln.replace("\0", " ").strip()):
                found.append(cmd)
                used.add(idx)
            if not any(c.line == idx + 1 for c in found) and argv:
                used.add(idx)  # a cmdline that is not SGLang's: a valid container line
    logical = _logical_lines(lines, used, notes)
    for k, lg in enumerate(logical):
        if not _ANCHOR_RE.search(lg.text) or lg.text.lstrip().startswith("#"):
            continue
        # lines that only continue the flags, without backslashes (a folded YAML or template command)
        while k + 1 < len(logical) and re.match(r"^\s*--?[A-Za-z]", logical[k + 1].text) \
                and logical[k + 1].line == lg.line_end + 1:
            nxt = logical.pop(k + 1)
            lg = _Logical(lg.line, nxt.line_end, lg.text + " " + nxt.text, lg.raw + "\n" + nxt.raw)
        cmds = _commands_in_tokens(tokenize(lg.text), lg.line, lg.line_end, lg.raw)
        if cmds:
            found.extend(cmds)
            used.update(range(lg.line - 1, lg.line_end))
    if not found and _args_only(lines):
        argv = [t for ln in lines if ln.strip() and not ln.lstrip().startswith("#") and not _TRIMMED_RE.match(ln)
                for t in tokenize(strip_comment(ln).rstrip().rstrip("\\"))]
        flags_known = [t.split("=", 1)[0] for t in argv if _is_flag(t) and vocab.known(t.split("=", 1)[0])]
        engines = {vocab.engine_of_flag(f) for f in flags_known} - {None}
        engine = engines.pop() if len(engines) == 1 else "sglang"
        content = [i for i, ln in enumerate(lines) if ln.strip()]
        cmd = LaunchCommand(line=content[0] + 1, line_end=content[-1] + 1, argv=argv, launcher="args",
                            text="\n".join(lines[content[0]:content[-1] + 1]), scan=scan_flags(argv, engine),
                            engine=engine)
        if len(engines) != 1:
            cmd.extra["engine_assumed"] = True
        found.append(cmd)
        used.update(range(content[0], content[-1] + 1))
    if not found and launch_config.looks_like_recipe(text):
        for cmd in launch_config.recipe_commands(text):
            found.append(cmd)
            used.update(range(cmd.line - 1, cmd.line_end))
    found.sort(key=lambda c: c.line)
    launch_config.apply_script_context(found, lines)
    _apply_outer_containers(found, lines, used)
    return found, lines, used, notes


_DOCKER_RUN_RE = re.compile(r"(?:^|[\s;&|(])(?:sudo\s+)?(?:docker|podman|nvidia-docker)\s+(?:container\s+)?run\b")
#: what a writer puts where they cut a paste: ``...``, ``…``, ``[...]``, ``[... trimmed ...]``, ``<snip>``, ``(truncated)``
ELISION_RE = re.compile(r"^\s*(?:\.{3,}|…|\[\s*(?:\.{3}|…)[^\]]*\]|<\s*snip\w*\s*>|\(\s*(?:truncated|snip\w*)\s*\))\s*$", re.I)


def _docker_runs(lines: list[str], used: set[int]) -> list[tuple[int, dict[str, Any]]]:
    """``docker run`` lines that start no engine themselves: (0-based line, options). Their continuation
    lines are joined until a line stops continuing or a writer's elision cuts the paste."""
    out: list[tuple[int, dict[str, Any]]] = []
    for i, ln in enumerate(lines):
        if i in used or not _DOCKER_RUN_RE.search(ln):
            continue
        parts, j = [strip_comment(ln).rstrip()], i
        while parts[-1].endswith("\\") and j + 1 < len(lines) and not ELISION_RE.match(lines[j + 1]):
            j += 1
            parts.append(strip_comment(lines[j]).rstrip())
        tokens = tokenize(" ".join(p.rstrip("\\") for p in parts))
        ctx = _docker_context(tokens + [""])  # the image (or nothing, when cut) follows the options
        if ctx is not None:
            image = next((t for k, t in enumerate(tokens) if k and _IMAGE_RE.match(t)
                          and tokens[k - 1] not in _DOCKER_VALUE_OPTS and not tokens[k - 1].endswith("run")), None)
            out.append((i, {**ctx, "image": image}))
    return out


_IMAGE_RE = re.compile(r"^(?:[\w.-]+(?::\d+)?/)+[a-z0-9][\w.-]*(?::[\w.-]+)?(?:@sha256:[0-9a-f]+)?$")
#: docker run options whose value is the next word (a path, a port, a name), never the image
_DOCKER_VALUE_OPTS = {"-v", "--volume", "-p", "--publish", "-e", "--env", "--name", "--mount", "-w", "--workdir",
                      "--entrypoint", "--network", "--net", "--device", "--env-file", "-u", "--user", "-h",
                      "--hostname", "--runtime", "--platform", "--label", "-l", "--ulimit", "--cpus", "--ipc"}


def _apply_outer_containers(found: list[LaunchCommand], lines: list[str], used: set[int]) -> None:
    """A paste that splits the container from the command: ``docker run … --memory 200g image \\``, then
    ``...`` or a blank line or a shell prompt, then the server's command typed inside it. The nearest such
    ``docker run`` above a command that has no container of its own is the container it runs in (its
    ``--memory`` is the limit the per-rank host pools must fit in: docker's documented ``-m/--memory``)."""
    runs = _docker_runs(lines, used)
    if not runs:
        return
    for cmd in found:
        if cmd.launcher not in ("python -m", "sglang serve", "vllm serve") or cmd.container_memory_bytes is not None:
            continue
        above = [(i, ctx) for i, ctx in runs if i + 1 < cmd.line]
        if not above:
            continue
        i, ctx = above[-1]
        _apply_docker(cmd, ctx)
        if ctx.get("image"):
            cmd.extra.setdefault("image", ctx["image"])
        if cmd.container_memory_bytes is not None:
            cmd.container_memory_from = f"docker --memory (line {i + 1}, the container this command runs in)"
            cmd.extra["limits_line"] = i + 1


def mentions_launch(text: str) -> bool:
    """Whether ``text`` holds an engine's launch command anywhere (cheap: one search).

    >>> mentions_launch("see below\\n$ python3 -m sglang.launch_server --tp 8"), mentions_launch("free -g")
    (True, False)
    """
    return _ANCHOR_RE.search(text) is not None


def find_commands(text: str) -> list[LaunchCommand]:
    """Every SGLang launch command in a text, in order of their first line.

    >>> [c.argv for c in find_commands("python3\\0-m\\0sglang.launch_server\\0--tp\\0002\\0")]
    [['python3', '-m', 'sglang.launch_server', '--tp', '2']]
    """
    try:
        return _scan(text)[0]
    except RecursionError:  # pathological nesting of ``bash -c`` quotes
        return []


#: lines of a launch script around the command: environment, set-up, a paste's "[... trimmed ...]" mark
_SHELL_STMT_RE = re.compile(r"^\s*(?:export\s+\w+=|set\s+[-+]\w|cd\s|source\s|\.\s|module\s+load\b|ulimit\s|unset\s"
                            r"|conda\s+activate\b|[A-Za-z_]\w*=\S*\s*$|#SBATCH\b)|^\s*\[\.\.\..*\]\s*$")


_TRIMMED_RE = re.compile(r"^\s*\[\s*(?:\.\.\.|…)[^\]]*\]\s*$")
#: a line of server arguments without the program (``--tp 8 --mem-fraction-static 0.9``)
_ARGS_LINE_RE = re.compile(r"^\s*--?[A-Za-z][\w-]*(?:[=\s]|$)")


def _args_only(lines: list[str]) -> bool:
    """Text made only of argument lines, with at least one engine flag among them."""
    content = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#") and not _TRIMMED_RE.match(ln)]
    if not content or len(content) > 200 or not all(_ARGS_LINE_RE.match(ln) for ln in content):
        return False
    toks = [t for ln in content for t in tokenize(ln.rstrip().rstrip("\\"))]
    return any(_is_flag(t) and vocab.known(t.split("=", 1)[0]) for t in toks)


def _ignorable(line: str) -> bool:
    return _is_blank_or_comment(line)


_ENGINE_WORD_RE = re.compile(r"sglang(?:_router)?\.launch_server|\bsglang\W{1,6}serve\b|vllm\.entrypoints\."
                             r"|\bvllm\W{1,6}serve\b|\bvllm/vllm-openai\b")


def sniff(head: str) -> float:
    """High for a launch script, compose file, manifest, recipe, Dockerfile or Python launcher; moderate for
    text that merely holds a launch command."""
    from parsers.launch import config as launch_config

    if (_is_compose(head) or launch_config.launch_yaml.is_k8s(head)) and _ENGINE_WORD_RE.search(head):
        return 0.9  # list forms split "-m" and the module over items
    if launch_config.is_dockerfile(head) and _ENGINE_WORD_RE.search(head):
        return 0.9
    if launch_config.is_python_api(head):
        return 0.85
    if _args_only(_split_lines(head)):
        return 0.7
    if launch_config.looks_like_recipe(head) and not any(
            _ANCHOR_RE.search(ln) for ln in head.split("\n") if not ln.lstrip().startswith("#")):
        return 0.8
    if not _ANCHOR_RE.search(head) and not ("\0" in head and "sglang" in head):
        return 0.0
    lines = _split_lines(head)
    if any(_PS_HEADER_RE.match(ln) for ln in lines[:5]):
        return 0.3  # a ps listing that includes the server: the ps parser's text
    if "\0" in head:
        return 0.95
    content = [ln for ln in lines if not _ignorable(ln)]
    if not content:
        return 0.0
    cmd_lines = sum(1 for ln in content if _ANCHOR_RE.search(ln) or ln.rstrip().endswith("\\")
                    or ln.lstrip().startswith("--") or _SHELL_STMT_RE.match(ln))
    share = cmd_lines / len(content)
    if head.startswith("#!") or share >= 0.5:
        return 0.9
    return 0.4


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    """One ``launch_command`` row per launch command found in the text."""
    try:
        found, lines, used, notes = _scan(text)
    except RecursionError as exc:  # pathological nesting of ``bash -c`` quotes
        raise NotThisFormat("launch text nested too deeply") from exc
    from parsers.launch import config as launch_config

    script_like = (text.startswith("#!") or _is_compose(text) or "\0" in text or launch_config.launch_yaml.is_k8s(text)
                   or launch_config.is_dockerfile(text) or launch_config.is_python_api(text)
                   or (bool(found) and found[0].launcher in ("config", "args")))
    if not found and not script_like and any(not _ignorable(ln) for ln in lines):
        raise NotThisFormat("no SGLang launch command in this text")
    if found:  # the script's own statements around a launch (exports, set -e, a paste's cut mark) are ours too
        used = used | {i for i, ln in enumerate(lines) if _SHELL_STMT_RE.match(ln)}
    content = [i for i, ln in enumerate(lines) if not _ignorable(ln)]
    # A script/compose file/cmdline is all ours; in other text only the command lines are.
    if script_like or (content and len(used & set(content)) / len(content) >= 0.5):
        recognized_idx = set(range(len(lines)))
    else:
        recognized_idx = used | {i for i, ln in enumerate(lines) if _ignorable(ln)}
    unrec = [(i + 1, lines[i]) for i in range(len(lines)) if i not in recognized_idx]
    rows = [
        {"line": c.line, "line_end": c.line_end, "kind": "launch_command", "text": c.text, "attrs": c.attrs()}
        for c in found
    ]
    rows += launch_config.limit_rows(found, launch_config.slurm_directives(lines) if script_like else {})
    return ParseResult.from_rows(
        rows, source=FORMAT, path=path, lines=len(lines), recognized=len(lines) - len(unrec),
        unrecognized_examples=unrec[:MAX_UNRECOGNIZED_EXAMPLES], notes=notes,
    )

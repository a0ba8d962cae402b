"""One launch command line: its words as a shell splits them, the program and the engine it starts,
its flags by the engine's own names, the environment and container options before it.

Sources: bash(1) (QUOTING, REDIRECTION, ``VAR=value`` before a command), docker-run(1) (``--memory`` sizes ``b
k m g``), reference/vllm_formats.md §6 (the ``vllm/vllm-openai`` image) and reference/sglang_formats.md §8
(``-m sglang.launch_server``, ``sglang serve``), ps(1) (header names), dynamo launch/dynamo-run/README.md
(0.1+: ``in=http out=sglang``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import regex as re

from parsers.launch import vocab
from parsers.units import GIB, KIB, MIB, TIB

#: SGLang flag spellings → the canonical long flag (one table for every reader: parsers/launch_vocab.py).
FLAG_ALIASES: dict[str, str] = vocab.SGLANG_ALIASES

#: Python modules that start an SGLang server when run with ``-m``.
LAUNCH_MODULES = ("sglang.launch_server", "sglang_router.launch_server")
#: ... and a vLLM server.
VLLM_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
#: NVIDIA Dynamo's engine workers (the SGLang or vLLM arguments follow).
DYNAMO_MODULES = ("dynamo.sglang", "dynamo.vllm")
# reference/vllm_formats.md §6 (the ``vllm/vllm-openai:<tag>`` image), docker-run(1) (an image reference:
# registry/name:tag@digest)
VLLM_IMAGE_RE = re.compile(r"^(?:[\w.-]+(?::\d+)?/)?vllm/vllm-openai(?::[\w.-]+)?(?:@sha256:[0-9a-f]+)?$")

# bash(1) (``VAR=value`` before a command)
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# reference/sglang_formats.md §8 (``-m sglang.launch_server``, ``sglang serve``), reference/vllm_formats.md §6
# (``vllm serve``, the API server modules), dynamo launch/dynamo-run/README.md (0.1+: ``dynamo-run in=http
# out=sglang``)
ANCHOR_RE = re.compile(r"-m\s+sglang(?:_router)?\.launch_server\b|\bsglang\s+serve\b"
                        r"|\bdynamo(?:-run|\s+run)\s[^\n]*\bout=(?:sglang|vllm)\b|-m\s+dynamo\.(?:sglang|vllm)\b"
                        r"|-m\s+vllm\.entrypoints\.(?:openai\.)?api_server\b|\bvllm\s+serve\b|\bvllm/vllm-openai\b")
# Tokens that end a simple command in a shell line: redirections, pipes, lists, background. A pasted
# ``<redacted-A>:5000`` or ``<model-dir>`` is a placeholder for a word, not a redirection.
# bash(1) (REDIRECTION, pipelines and lists)
SHELL_STOP_RE = re.compile(r"^(?:\d*>>?|\d*>&\d*-?|&>>?|<<?(?![^<>\s]+>)|\|\|?|&&?|;;?)")
_WRAPPERS = {"nohup", "exec", "env", "sudo", "time", "stdbuf", "setsid", "nice", "taskset", "numactl"}
_DOCKER_BINS = {"docker", "podman", "nvidia-docker"}
# ps(1) (procps header names)
PS_HEADER_RE = re.compile(r"^\s*(?:PID\s+PPID|USER\s+PID|UID\s+PID)\b")


@dataclass
class FlagScan:
    """Canonical flags of one argv, what repeated, what was spelt another way."""

    flags: dict[str, str | bool] = field(default_factory=dict)
    repeated: list[str] = field(default_factory=list)
    spellings: dict[str, str] = field(default_factory=dict)  # canonical → as written, when different
    positional: list[str] = field(default_factory=list)
    #: options as written that are the prefix of several of the engine's options (argparse refuses them)
    ambiguous: dict[str, list[str]] = field(default_factory=dict)


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
    docker_ipc: str | None = None  # docker-run(1) --ipc / compose ipc: "host" shares the host's /dev/shm
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
            "docker_ipc": self.docker_ipc,
            "module": self.module,
            "repeated": self.scan.repeated or None,
            "spellings": self.scan.spellings or None,
            "positional": self.scan.positional or None,
            "ambiguous_flags": self.scan.ambiguous or None,
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
    An abbreviation is the one option it is a prefix of, as argparse reads it (parsers/launch/vocab.py::resolve);
    an ambiguous or unknown one stays as written.

    >>> canonical_flag("--tensor-parallel-size"), canonical_flag("--cuda-graph-max-bs-decode")
    ('--tp-size', '--cuda-graph-max-bs-decode')
    >>> canonical_flag("-tp", "vllm"), canonical_flag("--gpu_memory_utilization", "vllm")
    ('--tensor-parallel-size', '--gpu-memory-utilization')
    >>> canonical_flag("--nccl-init"), canonical_flag("--max-model", "vllm"), canonical_flag("--pp")
    ('--dist-init-addr', '--max-model-len', '--pp')
    """
    return vocab.resolve(flag, engine).flag


def is_flag(tok: str) -> bool:
    # "-1" and "-.5" are values (``--chunked-prefill-size -1``); "-" alone is a value too.
    return len(tok) > 1 and tok[0] == "-" and not (tok[1].isdigit() or tok[1] == ".")


def _args_start(argv: list[str]) -> int:
    """Index of the first server argument: after the module, ``serve`` or the vLLM image, else 0."""
    for i, tok in enumerate(argv):
        if tok in LAUNCH_MODULES + VLLM_MODULES + DYNAMO_MODULES and i > 0 and argv[i - 1] == "-m":
            return i + 1
        if tok == "serve" and i > 0 and _basename(argv[i - 1]) in ("sglang", "vllm"):
            return i + 1
        if VLLM_IMAGE_RE.match(tok):
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
        if (tok in VLLM_MODULES + ("dynamo.vllm",) and i > 0 and argv[i - 1] == "-m") or VLLM_IMAGE_RE.match(tok) or (
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
        if not is_flag(tok):
            out.positional.append(tok)
            i += 1
            continue
        written, eq, inline = tok.partition("=")
        read = vocab.resolve(written, engine)
        name = read.flag
        if read.how == "ambiguous":
            out.ambiguous[written] = list(read.candidates)
        value: str | bool
        if eq:
            value = inline
            i += 1
        else:
            j = i + 1
            while j < len(toks) and not is_flag(toks[j]):
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


# docker-run(1) (``--memory``, ``--shm-size``: a number and b, k, m, g)
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


# bash(1) (QUOTING: single quotes, double quotes with backslash escapes of \\ " $ ` and newline)
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


def anchor_index(tokens: list[str]) -> tuple[int, int, str, str | None] | None:
    """(executable index, anchor end index, launcher, module) of the first launch in tokens."""
    for i, tok in enumerate(tokens):
        if tok in LAUNCH_MODULES and i > 0 and tokens[i - 1] == "-m":
            exe = i - 1
            while exe > 0 and tokens[exe - 1].startswith("-") and not SHELL_STOP_RE.match(tokens[exe - 1]):
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
        if VLLM_IMAGE_RE.match(tok) and docker_context(tokens[:i]) is not None and not (i + 1 < len(tokens) and (
                _basename(tokens[i + 1]) == "vllm" or _is_python(tokens[i + 1]))):
            return i, i, "docker run", None  # the image's entrypoint is the API server; its args follow
    return None


# dynamo launch/dynamo-run/README.md (0.1+: ``in=…``, ``out=…``)
_DYNAMO_IO_RE = re.compile(r"^(?:in|out)=\S+$")


def _dynamo_run_engine(tokens: list[str], i: int) -> str | None:
    """The engine a ``dynamo-run`` (or the wheel's ``dynamo run``) at ``tokens[i]`` runs: its ``out=<engine>``
    argument, wherever it stands among its ``key=value`` arguments and flags (ai-dynamo/dynamo
    docs/guides/dynamo_run.md: ``dynamo-run in=[http|text|…] out=echo_core|…|sglang|vllm|dyn [--flags] [model]``)."""
    tok = _basename(tokens[i])
    if not (tok == "dynamo-run" or (tok == "dynamo" and i + 1 < len(tokens) and tokens[i + 1] == "run")):
        return None
    for t in tokens[i + 1:]:
        if SHELL_STOP_RE.match(t):
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
        elif name == "--ipc":
            out["ipc"] = val.strip("\"'")
        elif name in ("-e", "--env"):
            k, has_v, v = val.partition("=")
            out["env"][k] = v if has_v else None
        else:
            step = 1  # other options: their values are skipped as ordinary words
        i += step
    return out


def commands_in_tokens(tokens: list[str], line: int, line_end: int, text: str) -> list[LaunchCommand]:
    """Every launch inside one logical shell line (including ``bash -c "…"`` arguments)."""
    found: list[LaunchCommand] = []
    start = 0
    while start < len(tokens):
        rest = tokens[start:]
        hit = anchor_index(rest)
        # ``bash -c "…"``, ``ssh host '…'``, ``srun sh -c '…'``: a quoted word that holds a whole command line
        nested = next((k for k, t in enumerate(rest) if k > 0 and (rest[k - 1] == "-c" or " " in t)
                       and ANCHOR_RE.search(t)), None)
        if nested is not None and (hit is None or nested < hit[0]):
            outer = docker_context(rest[:nested])
            for cmd in commands_in_tokens(tokenize(rest[nested]), line, line_end, text):
                apply_docker(cmd, outer)
                found.append(cmd)
            start += nested + 1
            continue
        if hit is None:
            break
        exe, anchor, launcher, module = hit
        end = anchor + 1
        while end < len(rest) and not SHELL_STOP_RE.match(rest[end]):
            end += 1
        argv = rest[exe:end]
        if argv and argv[-1].endswith((";", "&")) and not argv[-1].endswith("\\;"):
            argv[-1] = argv[-1].rstrip(";&")
        cmd = LaunchCommand(line=line, line_end=line_end, argv=argv, launcher=launcher, text=text,
                            module=module, env=env_prefix(rest[:exe]), scan=scan_flags(argv),
                            engine=engine_of_argv(argv))
        if any(_basename(t) in ("srun", "mpirun", "torchrun") for t in rest[:exe]):
            cmd.extra["wrapper"] = next(_basename(t) for t in rest[:exe] if _basename(t) in ("srun", "mpirun", "torchrun"))
        apply_docker(cmd, docker_context(rest[:exe]))
        words = container_words(rest[:exe])
        if words:
            cmd.extra["container_argv"] = words
        assigned = _assignments_before(rest[:exe])
        if assigned and not words:
            cmd.extra["env_argv"] = assigned
        found.append(cmd)
        start += end
    return found


def env_prefix(before: list[str]) -> dict[str, str | None]:
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


def docker_context(before: list[str]) -> dict[str, Any] | None:
    """Options of a ``docker run`` that precedes the command, if any."""
    for i in range(len(before) - 1):
        if _basename(before[i]) in _DOCKER_BINS:
            j = i + 1
            if j < len(before) and before[j] == "container":
                j += 1
            if j < len(before) and before[j] == "run":
                return _docker_options(before[j + 1:])
    return None


def _assignments_before(before: list[str]) -> list[str]:
    """The ``VAR=value`` words right before the program, as written: the shell sets them for it alone
    (bash(1), "SIMPLE COMMAND EXPANSION"), so a corrected command keeps them.

    >>> _assignments_before(["srun", "A=1", "B=2"])
    ['A=1', 'B=2']
    """
    at = len(before)
    while at > 0 and _ENV_RE.match(before[at - 1]):
        at -= 1
    return before[at:]


def container_words(before: list[str]) -> list[str] | None:
    """The ``docker run …`` words (a ``sudo`` before them too) that start the container the command runs in,
    through the image: an environment setting of this launch is a ``-e`` option among them (docker-run(1)), not
    a ``VAR=value`` word after the image, which docker would run as the program.

    >>> container_words(["sudo", "docker", "run", "--gpus", "all", "-e", "A=1", "img:1"])
    ['sudo', 'docker', 'run', '--gpus', 'all', '-e', 'A=1', 'img:1']
    >>> container_words(["NCCL_DEBUG=INFO"]) is None
    True
    """
    if docker_context(before) is None:
        return None
    at = next(i for i, t in enumerate(before) if _basename(t) in _DOCKER_BINS)
    if at > 0 and _basename(before[at - 1]) == "sudo":
        at -= 1
    return before[at:]


def apply_docker(cmd: LaunchCommand, docker: dict[str, Any] | None) -> None:
    if docker is None:
        return
    cmd.launcher = "docker run"
    cmd.docker_memory_bytes = docker.get("memory", cmd.docker_memory_bytes)
    cmd.docker_shm_size_bytes = docker.get("shm", cmd.docker_shm_size_bytes)
    cmd.docker_gpus = docker.get("gpus", cmd.docker_gpus)
    cmd.docker_ipc = docker.get("ipc", cmd.docker_ipc)
    cmd.env = dict(sorted({**docker["env"], **cmd.env}.items()))
    container_limits(cmd, "docker --memory")


def container_limits(cmd: LaunchCommand, memory_from: str) -> None:
    """The docker/compose memory limit and GPU count as the generic container limits."""
    if cmd.docker_memory_bytes:
        cmd.container_memory_bytes, cmd.container_memory_from = cmd.docker_memory_bytes, memory_from
    n = docker_gpu_count(cmd.docker_gpus) if cmd.launcher == "docker run" else None
    if n is not None:
        cmd.gpu_count, cmd.gpu_count_from = n, "docker --gpus"


def docker_gpu_count(spec: str | None) -> int | None:
    """``--gpus 2`` → 2; ``"device=0,1"`` → 2; ``all`` → None (the host's count).

    >>> docker_gpu_count("2"), docker_gpu_count("device=0,1"), docker_gpu_count("all")
    (2, 2, None)
    """
    if not spec:
        return None
    s = spec.strip().strip("\"'")
    if s.isdigit():
        return int(s)
    m = re.search(r"device=([\w,-]+)", s)
    if m:
        return len([d for d in m.group(1).split(",") if d])
    m = re.match(r"count=(\d+)", s)
    return int(m.group(1)) if m else None

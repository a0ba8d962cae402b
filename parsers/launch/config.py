"""Launch configurations that are not a shell command line: Kubernetes manifests, ``--config`` recipes,
Dockerfiles, the Python API, Slurm batch scripts, exported engine variables, and the host limits they set.

Sources: Dockerfile(5) (``FROM``, ``ENV``, ``CMD``, ``ENTRYPOINT``), sbatch(1) (``#SBATCH --mem`` and its
K/M/G/T suffixes), bash(1) (``export``), sglang python/sglang/srt/entrypoints/engine.py (0.4+:
``sgl.Engine``), vllm vllm/entrypoints/llm.py (0.2+: ``LLM(...)``), kubernetes
staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go (1.x), reference/sglang_formats.md §8 and
reference/vllm_formats.md §6.

:mod:`parsers.launch` calls these on the text it is given; each returns
:class:`parsers.launch.LaunchCommand` objects (``confidence = "config"`` for a file that describes a
launch, ``"command"`` for code or a command line that performs one) or script context to attach:

* Kubernetes (``kind:`` + ``apiVersion:`` + ``containers``): each container's ``command`` + ``args``
  (block or flow lists, or a string), ``env`` (``name``/``value``; ``valueFrom`` → null),
  ``resources.limits.memory`` (``400Gi`` binary, ``400G`` decimal) and ``nvidia.com/gpu``;
  launcher ``kubernetes``.
* a recipe: a YAML mapping of server arguments (``mem-fraction-static: 0.95``, ``tp: 8``, snake case
  too), flat or under ``server_args:``/``engine_args:``…; only names in :mod:`parsers.launch.vocab`;
  launcher ``config``. A disaggregated recipe's ``prefill:`` and ``decode:`` sections are one launch each.
* a Dockerfile: ``ENV K=V`` / ``ENV K V``, ``CMD``/``ENTRYPOINT`` in JSON or shell form; launcher
  ``dockerfile``.
* the Python API: ``sgl.Engine(…)``, ``sglang.Engine(…)``, ``Engine(…)`` after ``from sglang import``,
  vLLM's ``LLM(…)``/``AsyncEngineArgs(…)``/``EngineArgs(…)``; keyword arguments become flags
  (``tp_size=4`` → ``--tp-size``); launcher ``python api``.
* Slurm: ``#SBATCH --mem=…`` (MiB without a suffix; ``K M G T`` binary; ``0`` = all of the node's
  memory), ``--mem-per-gpu``, ``--gres=gpu[:type]:N``, ``--gpus[-per-node]=N``, ``--nodes``;
  ``srun … launch_server`` is a launch like any other (``attrs.wrapper = "srun"``).
* ``export SGLANG_…=…`` (also ``SGL_``, ``VLLM_``, ``NCCL_``, ``GLOO_``, ``TORCH_``, ``CUDA_``, ``PYTORCH_``) before a launch
  joins its ``env`` (``attrs.env_exported`` names them).

>>> slurm_memory("400G"), slurm_memory("512000"), slurm_memory("0")
(429496729600, 536870912000, None)
"""

from __future__ import annotations

import ast
from typing import Any

import regex as re

from parsers import jsontext
from parsers.launch import command as launch_command
from parsers.launch import vocab
from parsers.launch import yaml_recipe as launch_yaml
from parsers.units import GIB, KIB, MIB, TIB

EXPORT_PREFIXES = ("SGLANG_", "SGL_", "VLLM_", "NCCL_", "GLOO_", "TORCH_", "CUDA_", "PYTORCH_", "LMCACHE_")


def _launch():
    """The command-line reader (kept as a call so the call sites read as before)."""
    return launch_command


# ---------------------------------------------------------------------------------------------
# Kubernetes


def k8s_commands(text: str) -> list[Any]:
    """One command per container that launches SGLang or vLLM (by its argv or its vLLM image)."""
    launch = _launch()
    out = []
    for doc in launch_yaml.load(text):
        for c in launch_yaml.k8s_containers(doc, launch.tokenize):
            argv = list(c.argv)
            if c.image and launch.VLLM_IMAGE_RE.match(c.image) and not launch.anchor_index(argv):
                argv = [c.image, *argv]  # the image's entrypoint runs the API server
            cmd = _command_from_argv(argv, c.argv_line, c.argv_end, "kubernetes", text)
            if cmd is None:
                continue
            cmd.confidence = "config"
            cmd.env = dict(sorted({**c.env, **cmd.env}.items()))
            if c.memory_limit:
                cmd.container_memory_bytes, cmd.container_memory_from = c.memory_limit, "kubernetes resources.limits.memory"
            if c.memory_request:
                cmd.extra["container_memory_request_bytes"] = c.memory_request
            if c.gpus is not None:
                cmd.gpu_count, cmd.gpu_count_from = c.gpus, "kubernetes resources nvidia.com/gpu"
            if c.name:
                cmd.extra["container"] = c.name
            if c.image:
                cmd.extra["image"] = c.image
            cmd.extra["limits_line"] = c.line
            out.append(cmd)
    return out


# kubernetes staging/src/k8s.io/kubectl/pkg/describe/describe.go (1.x): describeContainerCommand prints
# ``Command:`` and ``Args:``, then each element on a line of its own, indented; ``Image:`` and ``Limits:``
# ``memory:`` in the same container's block
_DESCRIBE_KEY = re.compile(r"^(\s*)(Command|Args|Image|Limits):\s*(\S.*)?$")
_DESCRIBE_MEMORY = re.compile(r"^\s*memory:\s+(\S+)\s*$")
_SGLANG_IMAGE = re.compile(r"(?:^|/)sglang(?:[:@]|$)")


def describe_commands(text: str) -> list[Any]:
    """The launch of each container of a ``kubectl describe pod``: its Command and Args elements as one argv.

    Args alone (no Command) are the engine's flags when the image is SGLang's and they name engine flags; the
    container's ``Limits: memory:`` is its memory limit.

    >>> c = describe_commands("Containers:\\n  s:\\n    Image:  lmsysorg/sglang:v0.5.6\\n    Args:\\n      --tp\\n      4\\n"
    ...                       "    Limits:\\n      memory:  200Gi\\n")[0]
    >>> c.scan.flags["--tp-size"], c.container_memory_bytes == 200 << 30
    ('4', True)
    """
    from parsers.units import k8s_quantity

    lines = text.split("\n")
    out: list[Any] = []
    blocks: dict[str, Any] = {}

    def close() -> None:
        argv = [*blocks.get("Command", ([], 0, 0))[0], *blocks.get("Args", ([], 0, 0))[0]]
        image = blocks.get("image")
        if argv and "Command" not in blocks and image and _SGLANG_IMAGE.search(image) \
                and any(vocab.known(a) for a in argv if a.startswith("--")):
            argv = ["python3", "-m", "sglang.launch_server", *argv]  # the flags of the image's server
        elif argv and "Command" not in blocks and image and "vllm/vllm-openai" in image and argv[:1] != ["vllm"]:
            # the vllm/vllm-openai image's entrypoint is the API server (vllm_formats.md §6): Args are its flags
            argv = ["python3", "-m", "vllm.entrypoints.openai.api_server", *argv]
        starts = [v[1] for k, v in blocks.items() if k in ("Command", "Args")]
        ends = [v[2] for k, v in blocks.items() if k in ("Command", "Args")]
        cmd = _command_from_argv(argv, min(starts), max(ends), "kubernetes", text) if argv and starts else None
        if cmd is not None:
            cmd.confidence = "config"
            if blocks.get("memory"):
                cmd.container_memory_bytes, cmd.container_memory_from = blocks["memory"], "kubectl describe: Limits.memory"
            if image:
                cmd.extra["image"] = image
            out.append(cmd)
        blocks.clear()

    i = 0
    while i < len(lines) and i < 100_000:
        m = _DESCRIBE_KEY.match(lines[i])
        if m is None:
            i += 1
            continue
        indent, key, rest = len(m.group(1)), m.group(2), (m.group(3) or "").strip()
        if key == "Image":
            if blocks.get("image") and (blocks.get("Command") or blocks.get("Args")):
                close()  # the next container
            blocks["image"] = rest
            i += 1
            continue
        j, items = i + 1, []
        while j < len(lines) and lines[j].strip() and len(lines[j]) - len(lines[j].lstrip()) > indent:
            items.append(lines[j].strip())
            j += 1
        if key == "Limits":
            for it in items:
                mm = _DESCRIBE_MEMORY.match(it)
                if mm and k8s_quantity(mm.group(1)):
                    blocks["memory"] = k8s_quantity(mm.group(1))
        elif items:
            blocks[key] = (items, i + 2, j)
        i = j
    if blocks.get("Command") or blocks.get("Args"):
        close()
    return out


def _command_from_argv(argv: list[str], line: int, line_end: int, launcher: str, text: str) -> Any:
    launch = _launch()
    hit = launch.anchor_index(argv)
    if hit is None and argv and launch.VLLM_IMAGE_RE.match(argv[0]):
        hit = (0, 0, launcher, None)  # a container of the vLLM image: its arguments follow the image
    if hit is None:
        nested = next((t for k, t in enumerate(argv) if k > 0 and argv[k - 1] == "-c" and launch.ANCHOR_RE.search(t)),
                      None)
        if nested is None:
            return None
        argv = launch.tokenize(nested)
        hit = launch.anchor_index(argv)
        if hit is None:
            return None
    exe, anchor, _launcher, module = hit
    env = launch.env_prefix(argv[:exe])
    end = anchor + 1
    while end < len(argv) and not launch.SHELL_STOP_RE.match(argv[end]):
        end += 1
    argv = argv[exe:end]
    lines = text.split("\n")
    return launch.LaunchCommand(line=line, line_end=line_end, argv=argv, launcher=launcher, module=module,
                                text="\n".join(lines[line - 1:line_end]), env=env, scan=launch.scan_flags(argv),
                                engine=launch.engine_of_argv(argv))


# ---------------------------------------------------------------------------------------------
# recipes


def recipe_flags(doc: launch_yaml.Node, mappings: list[launch_yaml.Node] | None = None,
                 ) -> tuple[dict[str, str | bool], dict[str, str], str | None, int, int] | None:
    """(flags, spellings, engine, first line, last line) of a mapping of server arguments, or None."""
    for mapping in reversed(mappings if mappings is not None else launch_yaml.recipe_mappings(doc)):
        items = mapping.value
        keys = [k for k in items if isinstance(k, str)]
        known = [k for k in keys if vocab.known(k)]
        if len(known) < 2 or len(known) * 2 < len(keys):
            continue
        engines = {vocab.engine_of_flag(k) for k in known} - {None}
        engine = engines.pop() if len(engines) == 1 else None
        flags: dict[str, str | bool] = {}
        spellings: dict[str, str] = {}
        for k in known:
            v = launch_yaml.recipe_value(items[k])
            if v is None or v is False or str(v).lower() in ("false", "no", "off"):
                continue
            name = vocab.canonical(k, engine or "sglang")
            flags[name] = v
            if k != name.lstrip("-"):
                spellings[name] = k
        nodes = [items[k] for k in known]
        return flags, spellings, engine, min(n.line for n in nodes), max(n.line_end for n in nodes)
    return None


#: the environment sections of a launcher's recipe, for every server or for one disaggregation role: srt-slurm
#: recipes/gb200-fp4/1k1k/mid-curve.yaml (main, 2026) ``environment:``, ``prefill_environment:``,
#: ``decode_environment:`` mappings of variable → value exported to the workers of that role
_ENV_SECTION_RE = re.compile(r"^(?:(prefill|decode)_)?environment$")


def recipe_env(doc: launch_yaml.Node) -> dict[str | None, tuple[dict[str, str | None], int, int]]:
    """Role (None for every server) → (engine-relevant variables, first line, last line) of the recipe's environment
    sections."""
    out: dict[str | None, tuple[dict[str, str | None], int, int]] = {}
    if not isinstance(doc.value, dict):
        return out
    for key, node in doc.value.items():
        m = _ENV_SECTION_RE.match(key) if isinstance(key, str) else None
        if m is None or not isinstance(node.value, dict):
            continue
        env = {k: v.text() for k, v in node.value.items() if isinstance(k, str) and k.startswith(EXPORT_PREFIXES)}
        if env:
            out[m.group(1)] = (dict(sorted(env.items())), node.line, node.line_end)
    return out


def _env_only_commands(doc: launch_yaml.Node, lines: list[str]) -> list[Any]:
    """A recipe that holds only environment sections: one launch per section, its variables and no flags (what the
    workers of that role ran with; their arguments are elsewhere)."""
    launch = _launch()
    out = []
    for role, (env, first, last) in sorted(recipe_env(doc).items(), key=lambda kv: kv[1][1]):
        flags: dict[str, str | bool] = {"--disaggregation-mode": role} if role else {}
        extra: dict[str, Any] = {"engine_assumed": True, "env_only": True}
        if role:
            extra["disaggregation_role"] = role
        out.append(launch.LaunchCommand(line=first, line_end=last, argv=[], launcher="config",
                                        text="\n".join(lines[first - 1:last]), scan=launch.FlagScan(flags=flags),
                                        env=env, engine="sglang", confidence="config", extra=extra))
    return out


def recipe_commands(text: str) -> list[Any]:
    """One launch per recipe; a disaggregated recipe (``prefill:`` / ``decode:`` sections) is one launch per role,
    in file order, each with the ``--disaggregation-mode`` its section names."""
    launch = _launch()
    out = []
    lines = text.split("\n")
    for doc in launch_yaml.load(text):
        roles = [(role, got) for role, mapping in launch_yaml.role_mappings(doc)
                 if (got := recipe_flags(doc, [mapping]))]
        envs = recipe_env(doc)
        if not roles and not recipe_flags(doc):
            out += _env_only_commands(doc, lines)
            continue
        for role, got in roles or [(None, recipe_flags(doc))]:
            if not got:
                continue
            flags, spellings, engine, first, last = got
            if role:
                flags = {**flags, "--disaggregation-mode": flags.get("--disaggregation-mode") or role}
            scan = launch.FlagScan(flags=dict(flags), spellings=spellings)
            extra: dict[str, Any] = {} if engine else {"engine_assumed": True}
            if role:
                extra["disaggregation_role"] = role
            env = {**(envs.get(None) or ({},))[0], **((envs.get(role) or ({},))[0] if role else {})}
            out.append(launch.LaunchCommand(line=first, line_end=last, argv=[], launcher="config",
                                            text="\n".join(lines[first - 1:last]), scan=scan, env=dict(sorted(env.items())),
                                            engine=engine or "sglang", confidence="config", extra=extra))
    return out


def looks_like_recipe(text: str) -> bool:
    """A YAML mapping most of whose keys are server arguments (and no shell, no manifest)."""
    if launch_yaml.is_k8s(text) or re.search(r"^\s*(?:services|command|entrypoint)\s*:", text, re.MULTILINE):
        return False
    # a disaggregation role's section name is no argument, nor an unknown key
    keys = [k for k in re.findall(r"^\s{0,4}([A-Za-z][\w-]*)\s*:(?:\s|$)", text, re.MULTILINE)
            if k not in launch_yaml.ROLE_SECTIONS]
    known = [k for k in keys if vocab.known(k)]
    if len(known) >= 2 and len(known) * 2 >= len(keys):
        return True
    # a recipe of environment sections only, holding the engine's variables
    return bool(re.search(r"^(?:(?:prefill|decode)_)?environment\s*:\s*$", text, re.MULTILINE)
                and re.search(r"^\s+(?:" + "|".join(EXPORT_PREFIXES) + r")\w*\s*:", text, re.MULTILINE))


# ---------------------------------------------------------------------------------------------
# Dockerfile: Dockerfile(5) (FROM, ENV, CMD, ENTRYPOINT)

_DOCKERFILE_RE = re.compile(r"^\s*FROM\s+\S+", re.IGNORECASE | re.MULTILINE)
_DF_INSTR_RE = re.compile(r"^\s*(ENV|CMD|ENTRYPOINT)\s+(.*)$", re.IGNORECASE)


def is_dockerfile(text: str) -> bool:
    return bool(_DOCKERFILE_RE.search(text) and re.search(r"^\s*(?:CMD|ENTRYPOINT|RUN)\s", text,
                                                           re.IGNORECASE | re.MULTILINE))


def _df_words(value: str) -> list[str]:
    v = value.strip()
    if v.startswith("["):
        try:
            items = jsontext.loads(v)
            if isinstance(items, list):
                return [str(x) for x in items]
        except ValueError:
            pass
    return _launch().tokenize(v)


def dockerfile_commands(text: str) -> list[Any]:
    """ENTRYPOINT + CMD of the last stage, with its ENV, when they launch a server."""
    lines = text.split("\n")
    env: dict[str, str | None] = {}
    parts: dict[str, tuple[list[str], int, int]] = {}
    i = 0
    while i < len(lines):
        first = i
        body = lines[i].rstrip("\r")
        while body.endswith("\\") and i + 1 < len(lines):
            i += 1
            body = body[:-1] + " " + lines[i].strip()
        m = _DF_INSTR_RE.match(body)
        if re.match(r"^\s*FROM\s", body, re.IGNORECASE):
            env, parts = {}, {}  # a new stage
        elif m:
            instr, value = m.group(1).upper(), m.group(2)
            if instr == "ENV":
                words = _launch().tokenize(value)
                if words and "=" not in words[0] and len(words) >= 2:
                    env[words[0]] = " ".join(words[1:])
                else:
                    for w in words:
                        k, _, v = w.partition("=")
                        env[k] = v
            else:
                parts[instr] = (_df_words(value), first + 1, i + 1)
        i += 1
    argv = [t for key in ("ENTRYPOINT", "CMD") for t in parts.get(key, ([], 0, 0))[0]]
    if not parts:
        return []
    cmd = _command_from_argv(argv, min(p[1] for p in parts.values()), max(p[2] for p in parts.values()),
                             "dockerfile", text)
    if cmd is None:
        return []
    cmd.confidence = "config"
    cmd.env = dict(sorted({**env, **cmd.env}.items()))
    return [cmd]


# ---------------------------------------------------------------------------------------------
# Python API: sglang python/sglang/srt/entrypoints/engine.py (0.4.2+: sgl.Engine), vllm vllm/entrypoints/llm.py (0.2+: LLM)

_PY_IMPORT_RE = re.compile(r"^(?:import|from)\s+(sglang|vllm)\b", re.MULTILINE)
_PY_CALL_RE = re.compile(r"\b(?:(?:sgl|sglang)\.Engine|Engine|LLM|AsyncEngineArgs|EngineArgs|AsyncLLMEngine\.from_engine_args)"
                         r"\s*\(")


def is_python_api(text: str) -> bool:
    return bool(_PY_IMPORT_RE.search(text) and _PY_CALL_RE.search(text))


def python_api_commands(text: str) -> list[Any]:
    """Every engine constructor call whose keyword arguments configure the server."""
    launch = _launch()
    imports = set(_PY_IMPORT_RE.findall(text))
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func) if hasattr(ast, "unparse") else ""
        engine = None
        if name in ("sgl.Engine", "sglang.Engine") or (name == "Engine" and "sglang" in imports):
            engine = "sglang"
        elif name in ("LLM", "vllm.LLM", "AsyncEngineArgs", "EngineArgs", "vllm.AsyncEngineArgs") and "vllm" in imports:
            engine = "vllm"
        if engine is None:
            continue
        flags: dict[str, str | bool] = {}
        spellings: dict[str, str] = {}
        for kw in node.keywords:
            if kw.arg is None:
                continue
            try:
                value = ast.literal_eval(kw.value)
            except (ValueError, SyntaxError, TypeError, RecursionError):
                value = ast.unparse(kw.value)
            if value is None or value is False:
                continue
            flag = vocab.canonical(kw.arg, engine)
            if engine == "vllm" and kw.arg == "model":
                flag = "--model"
            if isinstance(value, list | tuple):
                value = " ".join(str(x) for x in value)
            flags[flag] = True if value is True else str(value)
            spellings[flag] = kw.arg
        if not flags:
            continue
        line, end = node.lineno, getattr(node, "end_lineno", node.lineno) or node.lineno
        lines = text.split("\n")
        out.append(launch.LaunchCommand(line=line, line_end=end, argv=[], launcher="python api",
                                        text="\n".join(lines[line - 1:end]), engine=engine,
                                        scan=launch.FlagScan(flags=flags, spellings=spellings),
                                        extra={"call": name}))
    return out


# ---------------------------------------------------------------------------------------------
# Slurm and exported variables: sbatch(1) (#SBATCH, --mem with K/M/G/T), bash(1) (export)

_SBATCH_RE = re.compile(r"^#SBATCH\s+(.*)$")
_SLURM_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)B?\s*$", re.IGNORECASE)
_SLURM_UNIT = {"": MIB, "k": KIB, "m": MIB, "g": GIB, "t": TIB}


def slurm_memory(text: str) -> int | None:
    """``#SBATCH --mem`` in bytes: MiB without a suffix; ``0`` (all of the node's memory) → None."""
    m = _SLURM_SIZE_RE.match(text or "")
    if not m or float(m.group(1)) == 0:
        return None
    return int(round(float(m.group(1)) * _SLURM_UNIT[m.group(2).lower()]))


def slurm_directives(lines: list[str]) -> dict[str, Any]:
    """What the ``#SBATCH`` lines ask for: memory per node, GPUs per node, nodes; with their lines."""
    out: dict[str, Any] = {}
    for i, ln in enumerate(lines):
        m = _SBATCH_RE.match(ln.strip())
        if not m:
            continue
        for opt in _launch().tokenize(m.group(1).split(" #", 1)[0]):
            name, _, val = opt.partition("=")
            if name == "--mem":
                out["mem_text"], out["mem_line"] = val, i + 1
                out["mem_bytes"] = slurm_memory(val)
                if out["mem_bytes"] is None and val.strip() == "0":
                    out["mem_all"] = True
            elif name == "--mem-per-gpu":
                out["mem_per_gpu_bytes"], out["mem_per_gpu_line"] = slurm_memory(val), i + 1
            elif name in ("--gres", "--gpus-per-node", "--gpus"):
                n = _gres_gpus(val) if name == "--gres" else (int(val.rsplit(":", 1)[-1])
                                                              if val.rsplit(":", 1)[-1].isdigit() else None)
                if n is not None:
                    out["gpus"], out["gpus_from"], out["gpus_line"] = n, f"slurm {name}", i + 1
            elif name in ("--nodes", "-N") and val.split("-")[0].isdigit():
                out["nodes"] = int(val.split("-")[0])
    return out


def _gres_gpus(val: str) -> int | None:
    """``gpu:8``, ``gpu:h100:8``, ``gpu:a100:4(S:0-1)`` → the count; ``gpu`` alone is one GPU."""
    for item in val.split(","):
        parts = item.split("(")[0].split(":")
        if parts and parts[0] == "gpu":
            return int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
    return None


_EXPORT_RE = re.compile(r"^\s*export\s+(.+)$")


def exported_env(lines: list[str]) -> list[tuple[int, str, str]]:
    """(1-based line, name, value) of every engine-relevant ``export NAME=value``."""
    out = []
    for i, ln in enumerate(lines):
        m = _EXPORT_RE.match(ln)
        if not m:
            continue
        for w in _launch().tokenize(m.group(1).split(" #", 1)[0]):
            k, eq, v = w.partition("=")
            if eq and k.startswith(EXPORT_PREFIXES):
                out.append((i + 1, k, v))
    return out


def apply_script_context(found: list[Any], lines: list[str]) -> dict[str, Any]:
    """Attach exported variables and Slurm directives to the launches after them; the directives."""
    exports = exported_env(lines)
    slurm = slurm_directives(lines)
    for cmd in found:
        before = {k: v for ln, k, v in exports if ln < cmd.line}
        if before:
            cmd.env = dict(sorted({**before, **cmd.env}.items()))
            cmd.extra["env_exported"] = sorted(before)
        if slurm:
            cmd.extra["slurm"] = {k: v for k, v in slurm.items() if not k.endswith("_line")}
            if slurm.get("mem_bytes") and cmd.container_memory_bytes is None:
                cmd.container_memory_bytes, cmd.container_memory_from = slurm["mem_bytes"], "slurm --mem (per node)"
            if slurm.get("gpus") is not None and cmd.gpu_count is None:
                cmd.gpu_count, cmd.gpu_count_from = slurm["gpus"], slurm["gpus_from"]
    return slurm


# ---------------------------------------------------------------------------------------------
# host limits as rows


def limit_rows(found: list[Any], slurm: dict[str, Any]) -> list[dict[str, Any]]:
    """``container_memory_limit`` and ``gpu_count`` rows for the limits the launches carry."""
    rows: list[dict[str, Any]] = []
    seen: set[tuple] = set()
    for cmd in found:
        line = cmd.extra.get("limits_line") or cmd.line
        if cmd.container_memory_bytes:
            key = ("mem", cmd.container_memory_from, cmd.container_memory_bytes, line)
            if key not in seen:
                seen.add(key)
                where = slurm.get("mem_line") if cmd.container_memory_from and "slurm" in cmd.container_memory_from else line
                rows.append({"line": where or line, "kind": "container_memory_limit", "bytes": cmd.container_memory_bytes,
                             "text": (cmd.extra.get("limits_text") or cmd.text.split("\n")[0]) if where == line
                             else f"#SBATCH --mem={slurm.get('mem_text')}",
                             "attrs": {"limit_bytes": cmd.container_memory_bytes, "limit_from": cmd.container_memory_from,
                                       "engine": cmd.engine, "confidence": cmd.confidence}})
        if cmd.gpu_count is not None:
            key = ("gpu", cmd.gpu_count_from, cmd.gpu_count, line)
            if key not in seen:
                seen.add(key)
                where = slurm.get("gpus_line") if cmd.gpu_count_from and "slurm" in cmd.gpu_count_from else line
                rows.append({"line": where or line, "kind": "gpu_count", "count": cmd.gpu_count,
                             "text": cmd.text.split("\n")[0],
                             "attrs": {"gpu_count": cmd.gpu_count, "gpu_count_from": cmd.gpu_count_from,
                                       "engine": cmd.engine, "confidence": cmd.confidence}})
    if not found and slurm:  # a batch script that runs something we do not know still sets the job's limits
        if slurm.get("mem_bytes"):
            rows.append({"line": slurm["mem_line"], "kind": "container_memory_limit", "bytes": slurm["mem_bytes"],
                         "text": f"#SBATCH --mem={slurm.get('mem_text')}",
                         "attrs": {"limit_bytes": slurm["mem_bytes"], "limit_from": "slurm --mem (per node)",
                                   "confidence": "config"}})
        if slurm.get("gpus") is not None:
            rows.append({"line": slurm["gpus_line"], "kind": "gpu_count", "count": slurm["gpus"],
                         "text": lines_text(slurm), "attrs": {"gpu_count": slurm["gpus"],
                                                              "gpu_count_from": slurm["gpus_from"],
                                                              "confidence": "config"}})
    return rows


def lines_text(slurm: dict[str, Any]) -> str:
    return f"#SBATCH ({slurm.get('gpus_from', '').replace('slurm ', '')}={slurm.get('gpus')})"

"""SGLang launch commands, wherever they are written down.

Sources: reference/sglang_formats.md §8 (the server flags) and §2, reference/vllm_formats.md §6 (launch
forms), docker-run(1) and podman-run(1) (the image reference before the command), bash(1) (continuations,
``VAR=value`` prefixes).

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
``--model-path``, ``--enable-hicache`` → ``--enable-hierarchical-cache``, …), and an abbreviation the one
option it is a prefix of, as the engine's argparse reads it (``--nccl-init`` → ``--dist-init-addr``); a
prefix of several (``--pp``: ``--pp-size``, ``--pp-max-micro-batch-size`` … from 0.5.4) stays as written
and is listed in ``ambiguous_flags``, as the engine refuses it. Docker sizes
(``400g``) are binary: docker's ``b k m g t`` suffixes are powers of 1024.

One ``launch_command`` event per command found.

>>> r = parse("CUDA_VISIBLE_DEVICES=0,1 python3 -m sglang.launch_server --model /m --tp 2 "
...           "--mem-frac=0.85 --enable-hicache > log 2>&1 &")
>>> import json; a = json.loads(r.events["attrs"][0])
>>> a["flags"]
{'--enable-hierarchical-cache': True, '--mem-fraction-static': '0.85', '--model-path': '/m', '--tp-size': '2'}
>>> a["env"], a["launcher"]
({'CUDA_VISIBLE_DEVICES': '0,1'}, 'python -m')
>>> parse_argv(["python", "-m", "sglang.launch_server", "--dp", "4", "--pp-s=2", "--nccl-init", "10.0.0.7:5000"])
{'--dist-init-addr': '10.0.0.7:5000', '--dp-size': '4', '--pp-size': '2'}
"""

from __future__ import annotations

from typing import Any

import regex as re

from parsers.elision import is_elision
from parsers.launch import frameworks, lmcache_config, vocab
from parsers.launch.command import (
    ANCHOR_RE,
    DYNAMO_MODULES,
    FLAG_ALIASES,
    LAUNCH_MODULES,
    PS_HEADER_RE,
    SHELL_STOP_RE,
    VLLM_MODULES,
    FlagScan,
    LaunchCommand,
    apply_docker,
    canonical_flag,
    commands_in_tokens,
    docker_context,
    docker_size,
    engine_of_argv,
    env_prefix,
    is_flag,
    parse_argv,
    scan_flags,
    strip_comment,
    tokenize,
)
from parsers.launch.compose import (
    Logical,
    compose_commands,
    is_blank_or_comment,
    is_compose,
    logical_lines,
    split_lines,
)
from parsers.schema import MAX_UNRECOGNIZED_EXAMPLES, NotThisFormat, ParseResult
from parsers.transcript import is_prose

FORMAT = "launch"
def _scan(text: str) -> tuple[list[LaunchCommand], list[str], set[int], list[str]]:
    """(commands, lines, 0-based indices of lines inside commands, notes)."""
    lines = split_lines(text)
    used: set[int] = set()
    notes: list[str] = []
    found: list[LaunchCommand] = []
    from parsers.launch import config as launch_config

    if launch_config.launch_yaml.is_k8s(text):
        for cmd in launch_config.k8s_commands(text):
            found.append(cmd)
            used.update(range(cmd.line - 1, cmd.line_end))
    elif is_compose(text):
        found.extend(compose_commands(lines, used))
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
            for cmd in commands_in_tokens(argv, idx + 1, idx + 1, ln.replace("\0", " ").strip()):
                found.append(cmd)
                used.add(idx)
            if not any(c.line == idx + 1 for c in found) and argv:
                used.add(idx)  # a cmdline that is not SGLang's: a valid container line
    logical = logical_lines(lines, used, notes)
    for k, lg in enumerate(logical):
        if not ANCHOR_RE.search(lg.text) or lg.text.lstrip().startswith("#"):
            continue
        # lines that only continue the flags, without backslashes (a folded YAML or template command)
        while k + 1 < len(logical) and re.match(r"^\s*--?[A-Za-z]", logical[k + 1].text) \
                and logical[k + 1].line == lg.line_end + 1:
            nxt = logical.pop(k + 1)
            lg = Logical(lg.line, nxt.line_end, lg.text + " " + nxt.text, lg.raw + "\n" + nxt.raw)
        cmds = commands_in_tokens(tokenize(lg.text), lg.line, lg.line_end, lg.raw)
        if cmds:
            found.extend(cmds)
            used.update(range(lg.line - 1, lg.line_end))
    found.extend(_framework_commands(logical, used))
    if not found and _args_only(lines):
        argv = [t for ln in lines if ln.strip() and not ln.lstrip().startswith("#") and not is_elision(ln)
                for t in tokenize(strip_comment(ln).rstrip().rstrip("\\"))]
        flags_known = [t.split("=", 1)[0] for t in argv if is_flag(t) and vocab.known(t.split("=", 1)[0], abbrev=True)]
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


def _framework_commands(logical: list[Logical], used: set[int]) -> list[LaunchCommand]:
    """RL frameworks' training launches that start an engine and name its settings in their own spelling
    (parsers/launch/frameworks.py): one ``launch_command`` each, in the engine's canonical flags, with the
    spellings the user typed."""
    out = []
    for lg in logical:
        if lg.text.lstrip().startswith("#") or any(i in used for i in range(lg.line - 1, lg.line_end)) \
                or not frameworks.ANCHOR_RE.search(lg.text):
            continue
        tokens = tokenize(strip_comment(lg.text))
        end = next((k for k, t in enumerate(tokens) if SHELL_STOP_RE.match(t)), len(tokens))
        exe = next((k for k, t in enumerate(tokens[:end]) if not re.match(r"^[A-Za-z_]\w*=", t)
                    and t not in ("nohup", "exec", "env", "time")), 0)
        argv = tokens[exe:end]
        fc = frameworks.framework_command(argv)
        if fc is None:
            continue
        cmd = LaunchCommand(line=lg.line, line_end=lg.line_end, argv=argv, launcher="rl framework", text=lg.raw,
                            env=env_prefix(tokens[:exe]), scan=FlagScan(flags=dict(fc.flags),
                                                                       spellings=dict(fc.spellings)),
                            engine=fc.engine)
        cmd.extra["framework"] = fc.framework
        cmd.extra["framework_form"] = fc.form
        out.append(cmd)
        used.update(range(lg.line - 1, lg.line_end))
    return out


_DOCKER_RUN_RE = re.compile(r"(?:^|[\s;&|(])(?:sudo\s+)?(?:docker|podman|nvidia-docker)\s+(?:container\s+)?run\b")
#: what a writer puts where they cut a paste: ``...``, ``…``, ``[...]``, ``[... trimmed ...]``, ``<snip>``, ``(truncated)``
#: source: none (elision marks; the same class as parsers/elision.py ELISION_LINE)
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
        ctx = docker_context(tokens + [""])  # the image (or nothing, when cut) follows the options
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
        apply_docker(cmd, ctx)
        if ctx.get("image"):
            cmd.extra.setdefault("image", ctx["image"])
        if cmd.container_memory_bytes is not None:
            # no line number in the words: a segment of a paste is parsed alone, and its lines are not the file's
            cmd.container_memory_from = "docker --memory (the container this command runs in)"
            cmd.extra["limits_line"] = i + 1
            cmd.extra["limits_text"] = lines[i].strip()


def mentions_launch(text: str) -> bool:
    """Whether ``text`` holds an engine's launch command anywhere (cheap: one search).

    >>> mentions_launch("see below\\n$ python3 -m sglang.launch_server --tp 8"), mentions_launch("free -g")
    (True, False)
    """
    return ANCHOR_RE.search(text) is not None or frameworks.ANCHOR_RE.search(text) is not None


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


#: a line of server arguments without the program (``--tp 8 --mem-fraction-static 0.9``)
_ARGS_LINE_RE = re.compile(r"^\s*--?[A-Za-z][\w-]*(?:[=\s]|$)")


def _args_only(lines: list[str]) -> bool:
    """Text made only of argument lines, with at least one engine flag among them."""
    content = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#") and not is_elision(ln)]
    if not content or len(content) > 200 or not all(_ARGS_LINE_RE.match(ln) for ln in content):
        return False
    toks = [t for ln in content for t in tokenize(ln.rstrip().rstrip("\\"))]
    return any(is_flag(t) and vocab.known(t.split("=", 1)[0], abbrev=True) for t in toks)


def _ignorable(line: str) -> bool:
    return is_blank_or_comment(line)


_ENGINE_WORD_RE = re.compile(r"sglang(?:_router)?\.launch_server|\bsglang\W{1,6}serve\b|vllm\.entrypoints\."
                             r"|\bvllm\W{1,6}serve\b|\bvllm/vllm-openai\b")


def sniff(head: str) -> float:
    """High for a launch script, compose file, manifest, recipe, Dockerfile or Python launcher; moderate for
    text that merely holds a launch command."""
    from parsers.launch import config as launch_config

    if (is_compose(head) or launch_config.launch_yaml.is_k8s(head)) and _ENGINE_WORD_RE.search(head):
        return 0.9  # list forms split "-m" and the module over items
    if launch_config.is_dockerfile(head) and _ENGINE_WORD_RE.search(head):
        return 0.9
    if launch_config.is_python_api(head):
        return 0.85
    if _args_only(split_lines(head)):
        return 0.7
    if launch_config.looks_like_recipe(head) and not any(
            ANCHOR_RE.search(ln) for ln in head.split("\n") if not ln.lstrip().startswith("#")):
        return 0.8
    framework = frameworks.ANCHOR_RE.search(head) is not None
    if not ANCHOR_RE.search(head) and not framework and lmcache_config.looks_like_config(head):
        return 0.8  # LMCache's configuration file, which the launch's LMCACHE_CONFIG_FILE names
    if not ANCHOR_RE.search(head) and not framework and not ("\0" in head and "sglang" in head):
        return 0.0
    lines = split_lines(head)
    if any(PS_HEADER_RE.match(ln) for ln in lines[:5]):
        return 0.3  # a ps listing that includes the server: the ps parser's text
    if "\0" in head:
        return 0.95
    # a paste's cut mark is neither a command nor other text: the share is of what the writer kept
    content = [ln for ln in lines if not _ignorable(ln) and not is_elision(ln)]
    if not content:
        return 0.0
    cmd_lines = sum(1 for ln in content if ANCHOR_RE.search(ln) or frameworks.ANCHOR_RE.search(ln)
                    or ln.rstrip().endswith("\\")
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

    script_like = (text.startswith("#!") or is_compose(text) or "\0" in text or launch_config.launch_yaml.is_k8s(text)
                   or launch_config.is_dockerfile(text) or launch_config.is_python_api(text)
                   or (bool(found) and found[0].launcher in ("config", "args")))
    lmcache_rows = lmcache_config.config_rows(lines, path, command)
    if not found and not script_like and not lmcache_rows and any(not _ignorable(ln) for ln in lines):
        raise NotThisFormat("no SGLang launch command in this text")
    used = used | {i for r in lmcache_rows for i in range(r["line"] - 1, r["line_end"])}
    if found:  # the script's own statements around a launch (exports, set -e, a paste's cut mark) are ours too
        used = used | {i for i, ln in enumerate(lines) if _SHELL_STMT_RE.match(ln)}
    content = [i for i, ln in enumerate(lines) if not _ignorable(ln)]
    # A script/compose file/cmdline is all ours; in other text only the command lines are.
    if script_like:
        recognized_idx = set(range(len(lines)))
    elif content and len(used & set(content)) / len(content) >= 0.5:
        # a paste that is mostly its command: its other lines are ours, except sentences ("the box has 256 GB
        # of RAM" on the line before the command), which stay unread for the prose parser to read
        recognized_idx = {i for i in range(len(lines)) if i in used or not is_prose(lines[i])}
    else:
        recognized_idx = used | {i for i, ln in enumerate(lines) if _ignorable(ln)}
    unrec = [(i + 1, lines[i]) for i in range(len(lines)) if i not in recognized_idx]
    rows = [
        {"line": c.line, "line_end": c.line_end, "kind": "launch_command", "text": c.text, "attrs": c.attrs()}
        for c in found
    ]
    rows += lmcache_rows
    rows += launch_config.limit_rows(found, launch_config.slurm_directives(lines) if script_like else {})
    notes += ambiguity_notes(found)
    return ParseResult.from_rows(
        rows, source=FORMAT, path=path, lines=len(lines), recognized=len(lines) - len(unrec),
        unrecognized_examples=unrec[:MAX_UNRECOGNIZED_EXAMPLES], notes=notes,
    )


def ambiguity_notes(found: list[LaunchCommand]) -> list[str]:
    """One note per abbreviation the engine's argparse refuses as ambiguous (it exits before starting).

    >>> ambiguity_notes(find_commands("python -m sglang.launch_server --model-path m --pp 2"))
    ['line 1: --pp is ambiguous for sglang (--pp-async-batch-depth, --pp-max-micro-batch-size, --pp-size): \
argparse stops with "ambiguous option"; it is not read as any of them']
    """
    return [f"line {c.line}: {w} is ambiguous for {c.engine} ({', '.join(cands)}): argparse stops with "
            f'"ambiguous option"; it is not read as any of them' for c in found for w, cands in c.scan.ambiguous.items()]


#: The launch reader's public face (the command-line reader's pieces are in parsers.launch.command).
__all__ = ["FORMAT", "sniff", "parse", "find_commands", "mentions_launch", "ambiguity_notes", "LaunchCommand", "FlagScan",
           "tokenize", "scan_flags", "parse_argv", "canonical_flag", "engine_of_argv", "docker_size",
           "strip_comment", "FLAG_ALIASES", "LAUNCH_MODULES", "VLLM_MODULES", "DYNAMO_MODULES"]

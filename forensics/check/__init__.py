"""``forensics check``: the launch configuration against the host, before anything starts.

The launch (a script, compose file, Kubernetes manifest, Slurm script, engine config YAML or one
command) is read by the launch parser; the host's facts come from the options (offline: CI, a laptop),
from limits written in the file (a container memory limit, ``nvidia.com/gpu``, ``#SBATCH --mem``) or,
with no hardware option, from this host through the collector's bounded commands. Both become rows of
a small timeline (``attrs.check`` = true), and the detectors that ``report`` runs judge it with their
own arithmetic (SGL-HOST-001 sizes ``--hicache-size``, SGL-GPU-005 sees stranded GPUs), plus the
pre-launch rules of :mod:`forensics.detectors.prelaunch`.

A hook for vLLM: its ``--swap-space`` / ``--cpu-offload-gb`` are per-GPU host memory like HiCache;
once the launch parser reads ``vllm serve`` and a detector judges them, they come through here unchanged.

>>> res = run_check(CheckOptions(cmd="python -m sglang.launch_server --tp 8 --enable-hicache --hicache-size 300",
...                              host_memory=449 * 2**30, gpus=8, engine_version="0.5.6"))
>>> [f.rule_id for f in res.findings], res.findings[0].remediation.flags[0].new
(['SGL-HOST-001'], '48')
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import polars as pl

from forensics.detectors import link_consequences, pick_root_cause, prelaunch, run_all
from forensics.detectors.reconcile import reconcile_flags
from forensics.facts.launch import ranks_per_host, server_config
from forensics.facts.versions import IMAGE_TAG_RE, parse_version, version_text
from forensics.model import SEVERITY_RANK, Facts, Finding, Timeline
from forensics.report.launch_env import CONFIG_LAUNCHERS, LaunchWords, env_style, is_env_setting, place_env
from parsers import free as free_parser
from parsers import launch as launch_parser
from parsers.launch.config import describe_commands
from parsers.nvidia_smi import csv as nvidia_smi_csv
from parsers.schema import NotThisFormat, empty_frame, rows_to_frame
from parsers.units import k8s_quantity, slurm_mem

from .context import context_frames

COMMAND_TIMEOUT_S = 10.0
VLLM_RE = re.compile(r"\bvllm\s+serve\b|-m\s+vllm\.entrypoints")
CGROUP_UNLIMITED = 1 << 60  # cgroup v1 prints ~2^63 for "no limit"


class CheckError(Exception):
    """A one-line problem with the input: exit 3 (unreadable) or 2 (usage)."""

    def __init__(self, message: str, code: int = 3):
        super().__init__(message)
        self.code = code


@dataclass
class CheckOptions:
    files: list[str] = field(default_factory=list)  # paths, "-" = stdin text in ``stdin``
    cmd: str | None = None
    host_memory: int | None = None
    gpus: int | None = None
    gpu_memory: int | None = None
    engine_version: str | None = None
    model_config: str | None = None
    stdin: str | None = None
    # where the live mode reads its own cgroup (tests point these at fake trees)
    proc_root: Path = field(default_factory=lambda: Path(os.environ.get("FORENSICS_CHECK_PROC", "/proc")))
    cgroup_root: Path = field(default_factory=lambda: Path(os.environ.get("FORENSICS_CHECK_CGROUP", "/sys/fs/cgroup")))
    timeout_s: float = COMMAND_TIMEOUT_S

    @property
    def offline(self) -> bool:
        """Any hardware option given: judge against those facts, read nothing from this host."""
        return any(v is not None for v in (self.host_memory, self.gpus, self.gpu_memory, self.engine_version))


@dataclass
class Fact:
    name: str
    value: str | None
    how: str  # given | file | read | missing | assumed


@dataclass
class Launch:
    """The launch being checked: where it is written, its argv and flags, and what its file says."""

    file: str
    line: int
    line_end: int
    text: str
    argv: list[str]
    flags: dict[str, Any]
    spellings: dict[str, str]
    attrs: dict[str, Any]
    config_lines: dict[str, int] = field(default_factory=dict)  # engine config YAML: flag → line
    #: what the other files given beside the launch state (an LMCache YAML, a cgroup's limit), as report reads them
    context: list[pl.DataFrame] = field(default_factory=list)


@dataclass
class CheckResult:
    launch: Launch
    facts: list[Fact]
    findings: list[Finding]
    root: str | None
    timeline: Timeline
    notes: list[str] = field(default_factory=list)
    #: the options it ran with: the "check it again" line repeats them
    options: CheckOptions | None = None


# ---------------------------------------------------------------------------------------------
# reading the launch


_CONFIG_LINE_RE = re.compile(r"^([A-Za-z][\w-]*)\s*:\s*(.*?)\s*$")


def engine_config(text: str) -> dict[str, tuple[Any, int]]:
    """A flat SGLang/vLLM config YAML (``tp-size: 8``, ``enable-hierarchical-cache: true``): canonical
    flag → (value, line). Empty when the text is not such a mapping.

    >>> engine_config("model-path: /m\\ntp_size: 8\\nenable-hicache: true\\n")["--enable-hierarchical-cache"]
    (True, 3)
    """
    out: dict[str, tuple[Any, int]] = {}
    for i, raw in enumerate(text.splitlines(), 1):
        line = launch_parser.strip_comment(raw).rstrip()
        if not line.strip() or line.strip() == "---":
            continue
        m = _CONFIG_LINE_RE.match(line)
        if not m:
            return {}
        value: Any = m.group(2).strip().strip("\"'")
        if value.lower() in ("true", "yes", "on"):
            value = True
        elif value.lower() in ("false", "no", "off", "null", "~", ""):
            continue
        out[launch_parser.canonical_flag("--" + m.group(1))] = (value, i)
    return out if any(k in out for k in ("--model-path", "--tp-size", "--hicache-size", "--mem-fraction-static",
                                         "--enable-hierarchical-cache", "--context-length")) else {}


def file_limits(text: str) -> dict[str, Any]:
    """What a deployment file says about the host around the launch: memory limit, GPUs, /dev/shm, IPC.

    >>> file_limits("#SBATCH --mem=400G\\n#SBATCH --gres=gpu:h100:8\\n")
    {'memory_bytes': 429496729600, 'memory_from': '#SBATCH --mem=400G', 'gpus': 8, 'gpus_from': '#SBATCH --gres=gpu:h100:8', 'container': None}
    """
    out: dict[str, Any] = {}
    m = re.search(r"^#SBATCH\s+--mem[= ](\S+)", text, re.M)
    if m and slurm_mem(m.group(1)):
        out["memory_bytes"], out["memory_from"] = slurm_mem(m.group(1)), m.group(0).strip()
    m = (re.search(r"^#SBATCH\s+--(?:gpus-per-node|gpus)[= ](?:\w+:)?(\d+)\s*$", text, re.M)
         or re.search(r"^#SBATCH\s+--gres[= ]gpu(?::\w+)?:(\d+)", text, re.M))
    if m:
        out["gpus"], out["gpus_from"] = int(m.group(1)), m.group(0).strip()
    m = re.search(r"^\s*nvidia\.com/gpu\s*:\s*[\"']?(\d+)", text, re.M)
    if m:
        out["gpus"], out["gpus_from"] = int(m.group(1)), m.group(0).strip()
    kube = re.search(r"^\s*(?:kind:\s*(?:Pod|Deployment|StatefulSet|Job|DaemonSet|LeaderWorkerSet)|containers:)",
                     text, re.M)
    out["container"] = "kubernetes" if kube else ("compose" if re.search(r"^services\s*:", text, re.M) else None)
    if re.search(r"^\s*hostIPC:\s*true|^\s*ipc:\s*[\"']?host|--ipc[= ]host", text, re.M):
        out["ipc_host"] = True
    if re.search(r"mountPath:\s*[\"']?/dev/shm", text):
        out["shm_mount"] = True
        m = re.search(r"medium:\s*[\"']?Memory[\"']?\s*\n\s*sizeLimit:\s*(\S+)|sizeLimit:\s*(\S+)\s*\n\s*medium:\s*"
                      r"[\"']?Memory", text)
        size = k8s_quantity(m.group(1) or m.group(2)) if m else None
        if size:
            out["shm_mount_bytes"] = size
    m = IMAGE_TAG_RE.search(text)
    if m:
        out["image_version"] = m.group(1)
    stated = stated_host_memory(text)
    if stated:
        out["host_bytes"], out["host_from"], out["host_line"] = stated
    return out


def stated_host_memory(text: str) -> tuple[int, str, int] | None:
    """The host RAM a paste states in words around its command ("the node has 512 GB of RAM", "Mem: 256GB"),
    read by the prose parser from the lines that are sentences (parsers/transcript.py ``is_prose``).

    >>> stated_host_memory("The node has 512 GB of RAM.\\npython -m sglang.launch_server --tp 8\\n")[0] == 512 << 30
    True
    """
    from parsers.launch import prose
    from parsers.transcript import is_prose

    lines = text.split("\n")
    if len(lines) > 5000:  # a write-up is small; a long file is a script or a log, read by its own parser
        return None
    masked = "\n".join(ln if is_prose(ln) else "" for ln in lines)
    if not masked.strip():
        return None
    got = [r for r in prose.parse(masked, "").events.iter_rows(named=True)
           if r["kind"] == "host_memory" and r.get("total_bytes")]
    if not got:
        return None
    row = max(got, key=lambda r: r["total_bytes"])
    return int(row["total_bytes"]), f"stated on line {row['line']}", int(row["line"])


def _read_text(path: str, opts: CheckOptions) -> tuple[str, str]:
    if path == "-":
        return "<stdin>", opts.stdin or ""
    p = Path(path)
    try:
        data = p.read_bytes()
    except IsADirectoryError:
        raise CheckError(f"{path}: is a directory; give a launch script, compose file or manifest") from None
    except OSError as e:
        raise CheckError(f"{path}: cannot read ({e.strerror or e})") from None
    if b"\0" in data[:4096] and b"sglang" not in data[:4096]:
        raise CheckError(f"{path}: binary file, not a launch configuration")
    return path, data.decode("utf-8", errors="replace")


def args_after_cut(text: str, line_end: int) -> launch_parser.LaunchCommand | None:
    """The engine's flags a paste left after a cut in the middle of a command: the command's last line
    continues (``\\``), then the writer's elision (``...``, ``[...]``, ``<snip>``), then lines of flags.

    >>> args_after_cut("docker run -m 96g vllm/vllm-openai:v0.6.3 \\\\\\n  [...]\\n  --swap-space 24\\n", 1).argv
    ['--swap-space', '24']
    """
    lines = text.split("\n")
    if not (0 < line_end <= len(lines)) or not lines[line_end - 1].rstrip().endswith("\\"):
        return None
    i, cut = line_end, False
    while i < len(lines) and (not lines[i].strip() or launch_parser.ELISION_RE.match(lines[i])):
        cut, i = cut or bool(lines[i].strip()), i + 1
    block = []
    while cut and i + len(block) < len(lines) and re.match(r"^\s*--?[A-Za-z]", lines[i + len(block)]):
        block.append(lines[i + len(block)])
    cmds = launch_parser.find_commands("\n".join(block)) if block else []
    if not cmds or cmds[0].launcher != "args":
        return None
    cmds[0].line = i - line_end + 1  # lines after the command's last
    return cmds[0]


def read_launch(opts: CheckOptions) -> tuple[Launch, list[dict[str, Any]], list[str]]:
    """The launch to check (the last one found), coverage per input, and notes."""
    sources: list[tuple[str, str]] = [_read_text(p, opts) for p in opts.files]
    if opts.cmd:
        sources.append(("--cmd", opts.cmd))
    if not sources:
        raise CheckError("give a launch file (or - for stdin) or --cmd 'python -m sglang.launch_server …'", 2)
    found: list[tuple[str, launch_parser.LaunchCommand, str]] = []
    context: list[pl.DataFrame] = []
    configs: list[tuple[str, dict[str, tuple[Any, int]]]] = []
    coverage: list[dict[str, Any]] = []
    limits: dict[str, Any] = {}
    notes: list[str] = []
    for name, text in sources:
        # the commands of a shell line, a script or a compose/k8s file; else a `kubectl describe pod`'s containers,
        # read as `report` reads them (parsers/container_limits.py)
        cmds = launch_parser.find_commands(text) or describe_commands(text)
        cfg = {} if cmds else engine_config(text)
        if not cmds and not cfg and len(sources) > 1:
            side, fmt = context_frames(text, name)
            if side:  # a file beside the launch: what it states bounds or sizes the launch's pools
                context += side
                lines = text.count("\n") + (0 if text.endswith("\n") else 1)
                coverage.append({"file": name, "format": fmt, "lines": lines, "recognized": lines, "unrecognized": 0})
                continue
        if not cmds and not cfg:
            if VLLM_RE.search(text):
                raise CheckError(f"{name}: it names vLLM but holds no command to check (`vllm serve MODEL …`, "
                                 "`python -m vllm.entrypoints.openai.api_server …`, or a pod's Args)")
            raise CheckError(f"{name}: no SGLang or vLLM launch command or engine config found")
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        if cmds:
            try:
                coverage.append(launch_parser.parse(text, name).coverage())
            except NotThisFormat:
                coverage.append({"file": name, "format": "launch", "lines": lines, "recognized": lines,
                                 "unrecognized": 0})
        else:
            coverage.append({"file": name, "format": "engine_config", "lines": lines, "recognized": lines,
                             "unrecognized": 0})
        found += [(name, c, text) for c in cmds]
        if cfg:
            configs.append((name, cfg))
        limits.update({k: v for k, v in file_limits(text).items() if v is not None})
        limits.setdefault("container", None)
    if not found and not configs:
        raise CheckError(f"{sources[0][0]}: no SGLang or vLLM launch command or engine config found among the files given")
    if len(found) > 1:
        notes.append(f"{len(found)} launch commands found; checking the last ({found[-1][0]}:{found[-1][1].line}).")
    if found:
        name, cmd, _text = found[-1]
        launch = Launch(name, cmd.line, cmd.line_end, cmd.text, list(cmd.argv), dict(cmd.flags),
                        dict(cmd.scan.spellings), dict(cmd.attrs()))
        notes += launch_parser.ambiguity_notes([cmd])  # the engine refuses these before it starts
        if cmd.launcher == "config":  # an engine config file: corrections name its lines
            launch.config_lines = {flag: line for flag, (_v, line) in engine_config(_text).items()}
        if cmd.launcher == "docker run":
            limits["container"] = "docker"
        elif cmd.launcher == "compose" and not limits.get("container"):
            limits["container"] = "compose"
        rest = args_after_cut(_text, cmd.line_end)
        if rest is not None:  # the paste cut the middle of the command; the engine's flags follow the cut
            launch.argv += rest.argv
            rest_scan = launch_parser.scan_flags(rest.argv, cmd.engine)
            for flag, value in rest_scan.flags.items():
                launch.flags.setdefault(flag, value)
            for flag, written in rest_scan.spellings.items():
                launch.spellings.setdefault(flag, written)
            notes.append(f"the command is cut after line {cmd.line_end}; its flags on line {cmd.line_end + rest.line} "
                         "and after are read as its own.")
        if not (launch.attrs.get("docker_memory_bytes") or launch.attrs.get("container_memory_bytes")):
            outer = [c for n, c, _t in found[:-1] if n == name and c.container_memory_bytes]
            if outer:  # the container this command runs in, its own command cut by the paste
                launch.attrs["docker_memory_bytes"] = outer[-1].container_memory_bytes
                image = outer[-1].extra.get("image") or (outer[-1].argv[:1] or [None])[0]
                if image and not launch.attrs.get("image"):
                    launch.attrs["image"] = image  # the engine's release, when its tag says
                limits["container"] = "docker"
                notes.append(f"memory limit from line {outer[-1].line} (docker run --memory: the container the "
                             "command runs in).")
    else:
        name, cfg = configs[-1]
        first = min(line for _, line in cfg.values())
        launch = Launch(name, first, max(line for _, line in cfg.values()), "", [], {}, {}, {})
    # engine config files (given, or named by --config and readable here) under the command line's flags
    cfg_path = launch.flags.get("--config")
    if isinstance(cfg_path, str) and Path(cfg_path).is_file() and not any(n == cfg_path for n, _ in configs):
        try:
            cfg = engine_config(Path(cfg_path).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            cfg = {}
        if cfg:
            configs.append((cfg_path, cfg))
    for cname, cfg in configs:
        for flag, (value, line) in cfg.items():
            launch.flags.setdefault(flag, value)
            if cname == launch.file and not launch.argv:
                launch.config_lines[flag] = line
    launch.attrs.update({k: v for k, v in limits.items() if k in ("container", "ipc_host", "shm_mount",
                                                                   "shm_mount_bytes")})
    launch.attrs["file_limits"] = limits
    launch.context = context
    return launch, coverage, notes


# ---------------------------------------------------------------------------------------------
# reading this host (the collector's bounded commands)


def _run(argv: list[str], opts: CheckOptions) -> tuple[str | None, str | None]:
    """(output, problem) of one bounded command."""
    import shutil

    from forensics.collect import run_command

    if shutil.which(argv[0]) is None:
        return None, f"{argv[0]}: not found on this host"
    cap = run_command(argv, opts.timeout_s, 4 << 20, env=dict(os.environ, LC_ALL="C"), merge_stderr=False)
    text = cap.data.decode("utf-8", errors="replace")
    if cap.timed_out:
        return None, f"{' '.join(argv[:2])}: timed out after {opts.timeout_s:g} s"
    if cap.error:
        return None, f"{argv[0]}: {cap.error}"
    if cap.rc not in (0, None):
        err = (cap.stderr or b"").decode("utf-8", errors="replace").strip().splitlines()
        return (text if text.strip() else None), f"{argv[0]}: exit status {cap.rc}" + (f" ({err[0][:120]})" if err else "")
    return text, None


def _cgroup_limit(opts: CheckOptions) -> tuple[int | None, str | None]:
    from forensics.collect import cgroup_memory_dirs, read_file_tail

    cap = read_file_tail(opts.proc_root / "self" / "cgroup", 1 << 20)
    if cap.error:
        return None, None
    for folder in cgroup_memory_dirs(cap.data.decode(errors="replace"), opts.cgroup_root):
        for name in ("memory.max", "memory.limit_in_bytes"):
            c = read_file_tail(folder / name, 4096)
            value = c.data.decode(errors="replace").strip() if not c.error else ""
            if value.isdigit() and 0 < int(value) < CGROUP_UNLIMITED:
                return int(value), str(folder / name)
    return None, None


def _stamp_rows(frame: pl.DataFrame, file: str, ts: datetime) -> list[dict[str, Any]]:
    out = []
    for r in frame.iter_rows(named=True):
        a = json.loads(r["attrs"]) if r.get("attrs") else {}
        a["check"] = True
        r.update(attrs=a, file=file, ts=ts, ts_basis="source-utc")
        out.append(r)
    return out


# ---------------------------------------------------------------------------------------------
# the timeline the detectors read


def _model_facts(launch: Launch, opts: CheckOptions) -> tuple[dict[str, Any] | None, str | None, int | None]:
    """config.json and the weights' total size: --model-config, else the model path when it is local."""
    path = Path(opts.model_config) if opts.model_config else None
    model_path = launch.flags.get("--model-path")
    if path is None and isinstance(model_path, str) and Path(model_path, "config.json").is_file():
        path = Path(model_path, "config.json")
    if path is None:
        return None, None, None
    if path.is_dir():
        path = path / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise CheckError(f"--model-config {path}: cannot read it ({e.strerror or type(e).__name__})") from None
    except ValueError as e:
        raise CheckError(f"--model-config {path}: not a JSON config ({e})") from None
    if not isinstance(cfg, dict):
        raise CheckError(f"--model-config {path}: not a JSON object")
    cfg = {**cfg.get("text_config", {}), **cfg} if isinstance(cfg.get("text_config"), dict) else cfg
    weights = None
    index = path.with_name("model.safetensors.index.json")
    try:
        weights = int(json.loads(index.read_text(encoding="utf-8"))["metadata"]["total_size"])
    except (OSError, ValueError, KeyError, TypeError):
        shards = list(path.parent.glob("*.safetensors"))
        weights = sum(p.stat().st_size for p in shards) or None
    return cfg, str(path), weights


def build(opts: CheckOptions) -> CheckResult:
    launch, coverage, notes = read_launch(opts)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    rows: list[dict[str, Any]] = []
    facts: list[Fact] = []
    limits = launch.attrs.get("file_limits", {})

    # host memory
    container_limit = (launch.attrs.get("docker_memory_bytes") or launch.attrs.get("container_memory_bytes")
                       or limits.get("memory_bytes"))
    if container_limit:
        where = (launch.attrs.get("container_memory_from") or limits.get("memory_from")
                 if not launch.attrs.get("docker_memory_bytes") else None) or {
            "kubernetes": "resources.limits.memory", "compose": "mem_limit / deploy.resources.limits.memory",
            "docker": "docker run --memory"}.get(limits.get("container") or "", "container limit")
        facts.append(Fact("memory limit", f"{container_limit / 2**30:.2f} GiB, {where}", "file"))
    limit_from = where if container_limit else None
    if opts.host_memory is not None:
        rows.append({"file": "check: --host-memory", "line": 1, "kind": "host_memory", "source": "check",
                     "total_bytes": opts.host_memory, "ts": now, "text": f"host memory {opts.host_memory} bytes (given)",
                     "attrs": {"check": True}})
        facts.append(Fact("host memory", f"{opts.host_memory / 2**30:.2f} GiB", "given"))
    elif not opts.offline:
        text, problem = _run(["free", "-b", "-w"], opts)
        parsed = None
        if text:
            try:
                parsed = free_parser.parse(text, "check: free -b -w", command="free -b -w")
            except NotThisFormat:
                problem = "free: output not understood"
        if parsed is not None and not parsed.events.is_empty():
            got = _stamp_rows(parsed.events, "check: free -b -w", now)
            rows += got
            total, avail = got[0].get("total_bytes"), got[0].get("avail_bytes")
            facts.append(Fact("host memory", f"{(total or 0) / 2**30:.2f} GiB total, "
                                             f"{(avail or 0) / 2**30:.2f} GiB available", "read"))
        else:
            facts.append(Fact("host memory", problem or "free printed nothing", "missing"))
        limit, where = _cgroup_limit(opts)
        if limit and not container_limit:
            container_limit, limit_from = limit, where
            facts.append(Fact("memory limit", f"{limit / 2**30:.2f} GiB, {where}", "read"))
    elif limits.get("host_bytes"):  # offline, and the paste says what the host has
        rows.append({"file": launch.file, "line": limits.get("host_line") or 1, "kind": "host_memory",
                     "source": "check", "total_bytes": limits["host_bytes"], "ts": now,
                     "text": f"host memory {limits['host_bytes']} bytes ({limits['host_from']})",
                     "attrs": {"check": True, "stated": True}})
        facts.append(Fact("host memory", f"{limits['host_bytes'] / 2**30:.2f} GiB, {limits['host_from']}", "file"))
    else:
        facts.append(Fact("host memory", "not given (--host-memory)", "missing"))

    # GPUs
    gpu_count = opts.gpus or limits.get("gpus")
    if opts.offline or opts.gpus or opts.gpu_memory:
        if gpu_count or opts.gpu_memory:
            for i in range(gpu_count or 1):
                rows.append({"file": "check: --gpus/--gpu-memory", "line": 1, "kind": "gpu_memory", "source": "check",
                             "gpu": i, "total_bytes": opts.gpu_memory, "ts": now,
                             "text": f"GPU {i}: {opts.gpu_memory or '?'} bytes (given)", "attrs": {"check": True}})
        how = "given" if opts.gpus else ("file" if limits.get("gpus") else "missing")
        facts.append(Fact("GPUs", (f"{gpu_count}" if gpu_count else "count unknown")
                          + (f" × {opts.gpu_memory / 2**30:.2f} GiB" if opts.gpu_memory else ", memory unknown")
                          + (f" ({limits['gpus_from']})" if how == "file" else ""), how))
        facts.append(Fact("GPU processes", "not read (offline)", "missing"))
    else:
        query = ["nvidia-smi", "--query-gpu=index,uuid,name,pci.bus_id,memory.total,memory.used,memory.free",
                 "--format=csv"]
        apps = ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv"]
        gtext, problem = _run(query, opts)
        if gtext is None:
            if problem and "not found" in problem:
                problem = "no nvidia-smi on this host (no NVIDIA driver, or not on PATH): GPU checks skipped"
            facts.append(Fact("GPUs", (problem or "nvidia-smi printed nothing")
                              + "; to check for another host pass --gpus N --gpu-memory SIZE", "missing"))
        else:
            atext, aproblem = _run(apps, opts)
            combined = gtext + ("\n" + atext if atext and atext.strip() else "")
            try:
                parsed = nvidia_smi_csv.parse(combined, "check: nvidia-smi")
                got = _stamp_rows(parsed.events, "check: nvidia-smi", now)
            except NotThisFormat:
                got = []
            if atext is not None and not atext.strip():
                got.append({"file": "check: nvidia-smi", "line": 1, "kind": "gpu_process_none", "source": "check",
                            "ts": now, "text": "no compute processes", "attrs": {"check": True}})
            rows += got
            mem = [r for r in got if r["kind"] == "gpu_memory"]
            procs = [r for r in got if r["kind"] == "gpu_process"]
            gpu_count = len(mem)
            sizes = sorted({r.get("total_bytes") for r in mem if r.get("total_bytes")})
            facts.append(Fact("GPUs", f"{len(mem)}" + (f" × {sizes[0] / 2**30:.2f} GiB" if len(sizes) == 1 else ""),
                              "read"))
            facts.append(Fact("GPU processes", f"{len(procs)} running" if atext is not None else (aproblem or "?"),
                              "read" if atext is not None else "missing"))

    # engine version
    version = opts.engine_version
    how = "given"
    if launch.attrs.get("engine") == "vllm":  # vLLM's checks need no version (its per-GPU flags mean the same in all)
        if version is not None:
            facts.append(Fact("vLLM version", version, "given"))
        version, is_vllm = None, True
    else:
        is_vllm = False
    if version is None and limits.get("image_version") and not is_vllm:
        version, how = limits["image_version"], "file"
    if is_vllm:
        pass
    elif version is None and not opts.offline and limits.get("container"):
        facts.append(Fact("SGLang version", "inside the container image, not this host's (pass --engine-version)",
                          "missing"))
    elif version is None and not opts.offline:
        from forensics.collect.sources import VERSION_SCRIPT

        python = launch.argv[0] if launch.argv and "python" in Path(launch.argv[0]).name else "python3"
        out, problem = _run([python, "-c", VERSION_SCRIPT, "sglang"], opts)
        v = (out or "").strip().splitlines()[-1:] if out else []
        if v and parse_version(v[0]):
            version, how = v[0], "read"
        else:
            if problem and "not found" not in problem and "timed out" not in problem:
                problem = f"sglang not importable by {python}"
            facts.append(Fact("SGLang version", (problem or f"not installed for {python}")
                              + " (pass --engine-version)", "missing"))
    if version is not None and not parse_version(version):
        raise CheckError(f"--engine-version {version!r}: not a version (e.g. 0.5.6)", 2)
    if is_vllm:
        pass
    elif version is not None:
        facts.append(Fact("SGLang version", f"{version_text(parse_version(version))}"
                          + (", image tag" if how == "file" else ""), how))
    elif opts.offline:
        facts.append(Fact("SGLang version", "not given (--engine-version): HiCache sizes state the "
                          "0.4.5–0.5.4 power-of-two rounding too", "missing"))

    # the model
    model_cfg, model_path, weights = _model_facts(launch, opts)
    if model_cfg is not None:
        rows.append({"file": f"check: {model_path}", "line": 1, "kind": "model_config", "source": "check", "ts": now,
                     "text": f"model config {model_path}", "attrs": {"check": True, "config": model_cfg,
                                                                    "weights_bytes": weights}})
        facts.append(Fact("model config", model_path + (f", weights {weights / 2**30:.1f} GiB" if weights else
                                                        ", weights size unknown"), "read"))

    # the launch itself: a moment after the facts (it has not happened yet)
    attrs = dict(launch.attrs)
    attrs.update(flags=launch.flags, check=True)
    if container_limit:
        attrs["docker_memory_bytes"] = int(container_limit)
        attrs["limit_from"] = limit_from  # the findings name the limit as the file states it
    attrs.pop("file_limits", None)
    rows.append({"file": launch.file, "line": launch.line, "line_end": launch.line_end, "kind": "launch_command",
                 "source": "launch", "ts": now + timedelta(seconds=1), "text": launch.text or f"{launch.file} (engine config)",
                 "attrs": attrs})
    frames = [rows_to_frame([r], source=r.get("source") or "check", path=r["file"]) for r in rows] + launch.context
    events = pl.concat(frames, how="vertical_relaxed") if frames else empty_frame()
    tl = Timeline(events=events, facts=Facts(input_paths=[n for n in opts.files] + (["--cmd"] if opts.cmd else []),
                                             sglang_version=version, collected_at=now))
    if version:
        tl.facts.versions["sglang"] = version
    tl.facts.gaps = [f"{f.name}: {f.value}" for f in facts if f.how == "missing"]
    tl.coverage = coverage
    ranks, ranks_how = ranks_per_host(server_config(tl))
    if gpu_count and ranks > gpu_count:
        notes.append(f"The launch needs {ranks} GPUs per host ({ranks_how}); {gpu_count} are there.")
    findings, _root = run_all(tl)
    findings += prelaunch.detect(tl, findings)
    for f in findings:  # the launch has not happened: its rows carry a stamp only to order them after the facts
        for ev in f.evidence:
            if ev.file == launch.file:
                ev.ts = None
    findings.sort(key=lambda f: (SEVERITY_RANK[f.severity], f.rule_id))
    link_consequences(findings)
    root = pick_root_cause(findings)
    reconcile_flags(findings, root)  # the pre-launch findings may correct a flag the others did too
    return CheckResult(launch, facts, findings, root, tl, notes, opts)


def run_check(opts: CheckOptions) -> CheckResult:
    return build(opts)


# ---------------------------------------------------------------------------------------------
# output


def corrected_argv(launch: Launch, changes: dict[str, str]) -> list[str]:
    """The user's own launch words with the flag values changed (``--flag v`` and ``--flag=v``; aliases too;
    a flag the command did not have is appended) and its environment settings where its launcher reads them:
    ``-e NAME=value`` of a ``docker run``, ``NAME=value`` before a shell's command; a compose service's or a
    Kubernetes container's are keys of its file, said by :func:`env_notes` (as report's corrected command,
    forensics/report/launch_env.py::place_env).

    >>> l = Launch("x", 1, 1, "", ["python", "-m", "sglang.launch_server", "--tp", "8", "--hicache-size=300"],
    ...            {}, {"--tp-size": "--tp"}, {})
    >>> corrected_argv(l, {"--hicache-size": "48", "--tp-size": "4", "--context-length": "8192"})[3:]
    ['--tp', '4', '--hicache-size=48', '--context-length', '8192']
    >>> d = Launch("x", 1, 1, "", ["img", "--tp", "8"], {}, {}, {"container_argv": ["docker", "run", "-e", "A=1"]})
    >>> corrected_argv(d, {"A": "2"})
    ['docker', 'run', '-e', 'A=2', 'img', '--tp', '8']
    """
    style = env_style(launch.attrs)
    argv = _command_with_flags(launch, {k: v for k, v in changes.items() if not is_env_setting(k)})
    before = [str(w) for w in launch.attrs.get("env_argv") or []] if style == "shell" else []
    container = [str(w) for w in launch.attrs["container_argv"]] if style == "docker" else None
    words = before + argv
    placed, _notes = place_env(style, LaunchWords(words, words), _env_changes(changes), container)
    return placed.new if placed is not None else words


def env_notes(launch: Launch, changes: dict[str, str]) -> list[str]:
    """Which key of a compose service's ``environment:`` or a Kubernetes container's ``env:`` to set for each
    environment setting of the corrections; none for a shell or docker launch (its command carries them)."""
    return place_env(env_style(launch.attrs), None, _env_changes(changes))[1]


def _env_changes(changes: dict[str, str]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in changes.items() if is_env_setting(k)]


def _command_with_flags(launch: Launch, changes: dict[str, str]) -> list[str]:
    argv = list(launch.argv)
    for flag, new in changes.items():
        if " " in flag:  # a key inside a JSON-valued flag: ``--kv-transfer-config kv_connector_extra_config.cpu_…``
            _set_json_key(argv, *flag.split(" ", 1), new)
            continue
        names = {flag, launch.spellings.get(flag, flag)}
        names |= {n.replace("-", "_").replace("__", "--", 1) for n in names}
        done = False
        for i, tok in enumerate(argv):
            head, eq, _ = tok.partition("=")
            if head in names or launch_parser.canonical_flag(head, launch.attrs.get("engine") or "sglang") == flag:
                if eq:
                    argv[i] = f"{head}={new}"
                elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                    argv[i + 1] = new
                else:
                    argv.insert(i + 1, new)
                done = True
        if not done and flag.startswith("--"):
            argv += [flag, new]
    return argv


def _set_json_key(argv: list[str], flag: str, path: str, new: str) -> None:
    """Set ``path`` (dotted keys) inside the JSON value of ``flag`` in ``argv``; leave it as it is when it is not JSON.

    >>> a = ["vllm", "serve", "m", "--kv-transfer-config", '{"kv_connector":"X","extra":{"n":10}}']
    >>> _set_json_key(a, "--kv-transfer-config", "extra.n", "4"); a[-1]
    '{"kv_connector": "X", "extra": {"n": 4}}'
    """
    for i, tok in enumerate(argv):
        head, eq, value = tok.partition("=")
        if head != flag or (not eq and i + 1 >= len(argv)):
            continue
        raw = value if eq else argv[i + 1]
        try:
            doc = json.loads(raw)
        except ValueError:
            return
        keys = path.split(".")
        here = doc
        for key in keys[:-1]:
            here = here.setdefault(key, {}) if isinstance(here, dict) else None
            if here is None:
                return
        if not isinstance(here, dict):
            return
        here[keys[-1]] = int(new) if new.isdigit() else new
        text = json.dumps(doc)
        if eq:
            argv[i] = f"{head}={text}"
        else:
            argv[i + 1] = text
        return


def _flag_changes(findings: list[Finding]) -> dict[str, str]:
    out: dict[str, str] = {}
    for f in findings:
        for c in f.remediation.flags:
            out.setdefault(c.flag, c.new)
    return out


def _wrap_command(argv: list[str]) -> str:
    """One shell word list, broken before each flag like a launch script."""
    parts: list[str] = []
    for tok in argv:
        word = shlex.quote(tok)
        if tok.startswith("--") and parts:
            parts.append(" \\\n    " + word)
        else:
            parts.append((" " if parts else "") + word)
    return "".join(parts)


CLEANUP_RULES = ("SGL-CHK-001", "SGL-GPU-005")  # their steps come before the launch, in order
CONTAINER_FLAGS = ("--shm-size",)  # docker run options, not the server's


def render_text(res: CheckResult, fail_on: str | None) -> str:
    launch = res.launch
    cfg_flags = launch.flags
    where = f"{launch.file}:{launch.line}" if launch.file != "--cmd" else "--cmd"
    out = [f"forensics check: {where}" + (f" (tp {cfg_flags['--tp-size']})" if "--tp-size" in cfg_flags else "")]
    out.append("")
    shown = [f for f in res.findings if f.severity != "info"]
    infos = [f for f in res.findings if f.severity == "info"]
    if not shown:
        out.append("No problem found in what could be checked.")
    for f in shown:
        out.append(f"{f.severity.upper():8} {f.rule_id}  {f.summary}")
        for c in f.remediation.flags:
            out.append(f"         fix: {c.flag} {c.old or '(unset)'} → {c.new}   ({c.why})")
        if not f.remediation.flags and f.remediation.actions and f.rule_id not in CLEANUP_RULES:
            out.append(f"         next: {f.remediation.actions[0]}")
    for f in infos:
        out.append(f"note     {f.summary}")
    changes = _flag_changes(res.findings)
    container = {k: changes.pop(k) for k in list(changes) if k in CONTAINER_FLAGS}
    for flag, new in container.items():
        out.append("")
        out.append(f"Container: add {flag} {new} to the docker run ({launch.file}:{launch.line}).")
    notes = env_notes(launch, changes)
    if notes:
        out.append("")
        out.append(f"Environment ({launch.file}):")
        out += [f"  {n}" for n in notes]
    if changes and not (notes and launch.argv and not _command_changes(launch, changes)):
        out.append("")
        if launch.argv:
            out.append("Corrected command:" if launch.attrs.get("launcher") != "compose" else
                       f"Corrected command (the container's command and args, {launch.file} lines "
                       f"{launch.line}–{launch.line_end}):")
            out.append("  " + _wrap_command(corrected_argv(launch, changes)).replace("\n", "\n  "))
        else:
            out.append(f"Corrected {launch.file}:")
            for flag, new in changes.items():
                line = launch.config_lines.get(flag)
                out.append(f"  {flag.lstrip('-')}: {new}" + (f"   (line {line})" if line else "   (add)"))
    steps = [a for f in shown if f.rule_id in CLEANUP_RULES for a in f.remediation.actions[:2]]
    if steps:
        out.append("")
        out.append("Before launching:")
        out += [f"  {s}" for s in steps]
    out.append("")
    out.append("Facts: " + "; ".join(f"{f.name} {f.value} ({f.how})" for f in res.facts if f.how != "missing"))
    missing = [f for f in res.facts if f.how == "missing"]
    if missing:
        out.append("Not known: " + "; ".join(f"{f.name}: {f.value}" for f in missing))
    out += [f"Note: {n}" for n in res.notes]
    worst = [f for f in res.findings if fail_on and SEVERITY_RANK[f.severity] <= SEVERITY_RANK[fail_on]]
    out.append("")
    problems = f"{len(worst)} problem{'s' if len(worst) != 1 else ''}"
    out.append(f"Result: {problems} at or above {fail_on}: fix before launching." if worst
               else f"Result: nothing at or above {fail_on}." if fail_on
               else f"Result: {len(shown)} finding{'s' if len(shown) != 1 else ''}; --fail-on none: the exit status "
                    "is 0 whatever is found.")
    out.append("Next: " + _next_step(res, changes, container, bool(steps), bool(worst), fail_on))
    return "\n".join(out) + "\n"


def _command_changes(launch: Launch, changes: dict[str, str]) -> dict[str, str]:
    """The corrections that are words of the command: all but the environment of a compose or Kubernetes launch."""
    if env_style(launch.attrs) not in CONFIG_LAUNCHERS:
        return changes
    return {k: v for k, v in changes.items() if not is_env_setting(k)}


def _size_word(n: int) -> str:
    """A byte count as the shortest exact size option: 449GiB, 97887MiB, else bytes."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20)):
        if n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def check_again(res: CheckResult, cmd: str | None = None, fail_on: str | None = "high") -> str:
    """The ``forensics check`` command line that repeats this check (on ``cmd`` instead of the --cmd
    given, when the corrected command is what to check)."""
    opts = res.options
    words = ["forensics", "check"]
    if opts is None:
        return " ".join(words + [res.launch.file])
    words += [f for f in opts.files]
    if cmd is not None or opts.cmd:
        words += ["--cmd", cmd if cmd is not None else opts.cmd or ""]
    for name, value in (("--host-memory", opts.host_memory), ("--gpus", opts.gpus),
                        ("--gpu-memory", opts.gpu_memory), ("--engine-version", opts.engine_version),
                        ("--model-config", opts.model_config)):
        if value is not None:
            words += [name, _size_word(value) if name.endswith("memory") else str(value)]
    if fail_on != "high":
        words += ["--fail-on", fail_on or "none"]
    return " ".join(shlex.quote(w) for w in words)


def _next_step(res: CheckResult, changes: dict[str, str], container: dict[str, str], cleanup: bool,
               failing: bool, fail_on: str | None) -> str:
    """What to run next, complete for this input: the check again on the corrected launch, or the launch."""
    launch = res.launch
    if (changes or container) and not failing:  # corrections below the threshold: the user's call
        step = _next_step(res, changes, container, cleanup, True, fail_on)
        return f"launch as written, or apply the corrections: {step[0].lower()}{step[1:]}"
    if changes and launch.file == "--cmd" and launch.argv:
        fixed = " ".join(shlex.quote(w) for w in corrected_argv(launch, changes))
        return f"check the corrected command before launching it: `{check_again(res, fixed, fail_on)}`"
    if changes or container:
        what = ("the changes above" if not launch.argv or container and not changes
                or changes and not _command_changes(launch, changes) else "the corrected command")
        where = (f"{launch.file} (lines {launch.line}–{launch.line_end})" if launch.line_end > launch.line
                 else f"{launch.file}:{launch.line}")
        return f"put {what} in {where}, then check it again: `{check_again(res, fail_on=fail_on)}`"
    if cleanup:
        return f"do the steps under \"Before launching\", then check again: `{check_again(res, fail_on=fail_on)}`"
    if failing:  # a problem no flag value fixes (its own "next:" says what does): never "launch as written"
        return f"change the launch as each problem's \"next:\" says, then check again: `{check_again(res, fail_on=fail_on)}`"
    if launch.file == "--cmd":
        return "launch the command as given."
    return f"launch as written ({launch.file}:{launch.line})."

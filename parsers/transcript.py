"""Split a pasted terminal session (or a write-up quoting one) into segments, each for one parser.

Sources: bash(1) (PROMPTING: the ``user@host:dir$`` prompt), python(1) (the ``>>>`` prompt), CommonMark 0.31
(fenced code blocks, thematic breaks, ATX headings); the log shapes are those of reference/sglang_formats.md
§1 and reference/vllm_formats.md §1.1.

A transcript mixes command lines, their outputs and prose::

    Checked the host after the kill:

    [bash] ssh root@10.1.230.174 'free -g; echo "---"; nvidia-smi --query-gpu=index,memory.used --format=csv,noheader'
                   total        used        free      shared  buff/cache   available
    Mem:             449         318         130           0           0         130
    Swap:              0           0           0
    ---
    0, 96413 MiB

:func:`split` returns :class:`Segment` objects in text order, non-overlapping:

* ``kind="command"``: one command line (``$ cmd``, ``# cmd``, ``root@host:~# cmd``,
  ``(venv) user@h:~/x$ cmd``, ``[user@h dir]$ cmd``, ``[bash] cmd``, ``>>> expr``, a bare
  ``nvidia-smi -q`` standing alone, or the first line of a code fence), with ``\\``-continued lines;
* ``kind="output"``: what a command printed (or a block with no command at all), ``format`` chosen
  by sniffing it (``None`` when no parser claims it) and ``command`` set to the sub-command that
  printed it: the k-th ``---``-separated chunk of ``ssh h 'free -g; echo "---"; nvidia-smi …'``
  belongs to the k-th command that is not an ``echo``/``sleep``/``cd``; a line equal to an
  ``echo``'d string is a separator too;
* ``kind="prose"``: sentences around the data, ``format`` always ``None``; never fed to a parser.

Blank lines between segments, code fences and separator lines belong to no segment. Output stays
one segment across blank lines unless a separator, a change of sniffed format, or one paragraph
per sub-command says otherwise — so "before" and "after" a kill stay apart.

>>> segs = split("$ free -g\\n               total        used        free      shared  buff/cache   available\\n"
...              "Mem:             449           3         444           0           0         445\\n"
...              "Swap:              0           0           0\\n",
...              {"free": lambda head: 0.95 if "Mem:" in head else 0.0})
>>> [(s.kind, s.start_line, s.end_line, s.command, s.format) for s in segs]
[('command', 1, 1, 'free -g', None), ('output', 2, 4, 'free -g', 'free')]
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import regex as re

#: the score a sniffer must reach for a segment to go to its parser
MIN_SCORE = 0.5
SNIFF_BYTES = 64 * 1024
_MAX_LINE = 20_000  # longer lines are never commands or prose worth a regex

Sniffers = Mapping[str, Callable[[str], float]]


@dataclass(frozen=True)
class Segment:
    """A run of lines of the transcript: its 1-based first and last line, text and reading."""

    start_line: int
    end_line: int
    text: str
    command: str | None = None
    format: str | None = None
    kind: str = "output"  # output | prose | command


# ---------------------------------------------------------------------------------------------
# Line shapes

# CommonMark 0.31 (fenced code blocks, thematic breaks)
_FENCE_RE = re.compile(r"^\s*(?:```|~~~)")
_RULE_RE = re.compile(r"^\s*(?:-{3,}|={3,}|\*{3,}|_{3,})\s*$")
# source: none (a chat tool's ``[bash] cmd`` marker: no published format)
_TOOL_RE = re.compile(
    r"^\s*(?:\[[^\]\n]{1,40}\]\s*)*?\[(?:bash|shell|sh|zsh|terminal|console|cmd|run|exec)\]\s*(?P<cmd>\S.*)$",
    re.IGNORECASE)
#: Blanks taken whole (``\s*+``): only the ``\s*`` before the sign could take one back, to the same
#: match, and trying it from every blank cost the square of a blank line (issue 25)
# bash(1) (PROMPTING: ``user@host:dir$``, ``[user@host dir]#``; a virtualenv's ``(name)``), python(1) (the ``>>>``
# prompt)
_PS1_RE = re.compile(
    r"^\s*+(?:\([^()\s]{1,40}\)\s*+)?"
    r"(?P<who>\[[\w.-]+@[\w.-]+[^\]\n]{0,80}\]|[\w.-]+@[\w.-]+(?::[^\s$#%]*)?)?"
    r"\s*(?P<sig>[$#%])\s+(?P<cmd>\S.*)$")
_REPL_RE = re.compile(r"^>>>(?:\s(?P<cmd>.*))?$")
# source: none (an English word: prose against a log line)
_WORD_RE = re.compile(r"^[(\[\"'“‘*_]*[A-Za-z][A-Za-z'’-]*[)\]\"'”’.,;:!?*_]*$")
# ISO 8601 (``hh:mm:ss``); CommonMark 0.31 (ATX headings); the log levels and exception lines of
# reference/sglang_formats.md §1 and reference/vllm_formats.md §1.1
_TIME_RE = re.compile(r"\b\d{1,2}:\d{2}:\d{2}\b")
_HEADING_RE = re.compile(r"^#{1,6}\s+\S")
#: ``name.camelCase:``: the colon must follow the leading run of word characters and dots, and the
#: lower-upper pair lie after its last dot; said so directly (lookahead, atomic dotted prefix) because
#: ``[\w.]*[a-z][A-Z]`` backtracks quadratically in the regex engine (issue 25; tests/test_regex_rewrites.py)
_LOGGISH_RE = re.compile(
    r"^(?:(?=[\w.]*+:)(?>(?:\w*\.)*)\w*?[a-z][A-Z]\w*+:|\w*(?:Error|Exception|Warning|Interrupt|Exit)\b|Traceback\b|Fatal Python error"
    r"|(?:ERROR|WARNING|WARN|INFO|DEBUG|CRITICAL|FATAL)\b)")

#: programs whose name starting a line makes it a command even without a prompt
KNOWN_PROGRAMS = frozenset({
    "free", "cat", "grep", "egrep", "zgrep", "nvidia-smi", "nvidia-debugdump", "dcgmi", "dmesg",
    "journalctl", "ps", "top", "htop", "ls", "ssh", "sudo", "docker", "podman", "kubectl", "python",
    "python3", "pip", "pip3", "echo", "sleep", "kill", "pkill", "killall", "fuser", "lsof", "uptime",
    "uname", "df", "du", "head", "tail", "less", "more", "watch", "systemctl", "sglang", "numactl",
    "numastat", "vmstat", "sar", "lspci", "nvcc", "env", "export", "cd", "tmux", "screen", "pct", "bash",
    "sh", "zsh", "awk", "sed", "sort", "wc", "date", "hostname", "ip", "curl", "wget", "mount", "swapon",
    "swapoff", "sysctl", "ulimit", "torchrun", "srun", "sbatch", "scontrol", "squeue", "nvtop", "gpustat",
    "ipcs", "find", "tee", "timeout", "ldd", "modprobe", "lsmod",
})
_WRAPPERS = {"sudo", "time", "nohup", "env", "nice", "command", "exec", "timeout", "watch"}
_SILENT = {"echo", "printf", "sleep", "true", "false", ":", "cd", "export", "set", "unset", "clear",
           "wait", "source", ".", "read"}


def _program(words: list[str]) -> str | None:
    """The program a simple command runs, past ``sudo``, ``VAR=value`` and wrapper flags."""
    skip_flags = False
    for w in words:
        if "=" in w and not w.startswith("-") and re.match(r"^[A-Za-z_]\w*=", w):
            continue
        if w in _WRAPPERS:
            skip_flags = True
            continue
        if skip_flags and (w.startswith("-") or w.isdigit()):
            continue
        return w.rsplit("/", 1)[-1]
    return None


def prompt_command(line: str) -> tuple[str, str] | None:
    """``(command, style)`` when ``line`` is a prompt line; style is ``prompt``, ``tool`` or ``repl``.

    >>> prompt_command("(venv) user@h:~/x$ free -m")
    ('free -m', 'prompt')
    >>> prompt_command("[assistant] [bash] ssh root@10.1.230.174 'free -g'")
    ("ssh root@10.1.230.174 'free -g'", 'tool')
    >>> prompt_command("# procps-ng 4.0.2 on Debian 12") is None
    True
    """
    if len(line) > _MAX_LINE:
        return None
    m = _TOOL_RE.match(line)
    if m:
        return m["cmd"].strip(), "tool"
    m = _REPL_RE.match(line)
    if m:
        return (m["cmd"] or "").strip(), "repl"
    m = _PS1_RE.match(line)
    if not m:
        return None
    cmd = m["cmd"].strip()
    if m["who"] is None:
        words = cmd.split()
        if m["sig"] == "$" and cmd[0].isdigit():
            return None  # "$ 5 per hour"
        if m["sig"] in "#%" and not _looks_typed(words):
            return None  # a markdown heading or a comment, not a root prompt
    return cmd, "prompt"


def _looks_typed(words: list[str]) -> bool:
    """``free -g``, ``ps aux``, ``cat /proc/meminfo``: a known program and shell words, not a phrase."""
    if _program(words) not in KNOWN_PROGRAMS:
        return False
    rest = words[1:]
    if any(w[-1] in ":," for w in rest):
        return False  # "sglang version: 0.4.6" is a note, not a command
    if len(rest) == 0 or any(w.startswith("-") or "/" in w or w[0] in "'\"" or w in {";", "|", "&&"} for w in rest):
        return True
    return len(rest) <= 2 and all(re.match(r"^[a-z0-9_.=-]+$", w) for w in rest)


def bare_command(line: str) -> str | None:
    """A command typed without a prompt: a known program and shell-ish words, not a sentence."""
    s = line.strip()
    if len(s) > _MAX_LINE or not s or s.endswith(".") or is_prose(line):
        return None
    return s if _looks_typed(s.split()) else None


def is_prose(line: str) -> bool:
    """A sentence (or a markdown heading), as opposed to tool output.

    >>> is_prose("The output contains two sections. First, the system memory report:")
    True
    >>> is_prose("               total        used        free      shared  buff/cache   available")
    False
    >>> is_prose("Mem: 2006 558 1447 0 50 393")
    False
    """
    s = line.strip()
    if not s or len(s) > _MAX_LINE:
        return False
    if _HEADING_RE.match(s):
        return True
    if not (s[0].isalpha() or s[0] in "\"'“‘(*_-"):
        return False
    if "   " in s or "\t" in s or _TIME_RE.search(s) or _LOGGISH_RE.match(s):
        return False  # aligned columns, stamped log lines and exceptions are output
    toks = s.split()
    words = sum(1 for t in toks if _WORD_RE.match(t))
    sentence_like = s[0].isupper() or not s[0].isalpha() or s[-1] in ".!?:;," or len(toks) >= 10
    if len(toks) >= 6 and words >= 0.6 * len(toks) and sentence_like:  # not "total used free shared …"
        return True
    if len(toks) >= 2 and words == len(toks) and s[-1] in ".!?:":
        return True
    # a title: a few capitalised words ("Assumptions Made", "Message 3880: The Verification")
    return 1 <= len(toks) <= 8 and words >= 0.7 * len(toks) and s[0].isupper() and s[-1] not in ",;"


def _is_intro(line: str) -> bool:
    s = line.strip()
    return bool(_HEADING_RE.match(s)) or s.endswith(":") or len(s.split()) >= 6


# ---------------------------------------------------------------------------------------------
# Commands: which sub-command printed which chunk


@dataclass
class _Context:
    line: int
    text: str
    style: str  # prompt | tool | repl | bare | fence
    subs: list[str] = field(default_factory=list)
    echoes: set[str] = field(default_factory=set)


def subcommands(command: str) -> tuple[list[str], set[str]]:
    """The output-producing simple commands of a command line, and the strings it ``echo``es.

    ``ssh host '…'``, ``bash -c '…'``, ``pct exec N -- …`` and ``docker exec c …`` are looked into.

    >>> subcommands("ssh root@10.1.230.174 'free -g; echo \\"---\\"; nvidia-smi --format=csv,noheader'")
    (['free -g', 'nvidia-smi --format=csv,noheader'], {'---'})
    """
    subs: list[str] = []
    echoes: set[str] = set()
    _collect(command, subs, echoes, depth=0)
    return subs, echoes


def _tokens(command: str) -> list[str]:
    try:
        lex = shlex.shlex(command, posix=True, punctuation_chars=";&|")
        lex.whitespace_split = True
        return list(lex)
    except ValueError:  # unbalanced quotes: split naively
        return re.sub(r"(;|&&|\|\|)", r" \1 ", command.replace("'", " ").replace('"', " ")).split()


def _collect(command: str, subs: list[str], echoes: set[str], depth: int) -> None:
    if depth > 4 or len(command) > _MAX_LINE:
        return
    tokens = _tokens(command)
    if len(tokens) == 1 and " " in tokens[0]:  # a quoted remote command: 'free -g; echo ---; …'
        _collect(tokens[0], subs, echoes, depth + 1)
        return
    simple: list[str] = []
    for tok in tokens + [";"]:
        if tok in {";", "&&", "||", "&", ";;"}:
            if simple:
                _simple(simple, subs, echoes, depth)
            simple = []
        else:
            simple.append(tok)


def _simple(words: list[str], subs: list[str], echoes: set[str], depth: int) -> None:
    prog = _program(words)
    if prog is None:
        return
    idx = next(i for i, w in enumerate(words) if w.rsplit("/", 1)[-1] == prog)
    rest = words[idx + 1:]
    inner = _inner_command(prog, rest)
    if inner is not None:
        _collect(inner, subs, echoes, depth + 1)
        return
    if prog in {"echo", "printf"}:
        args = [w for w in rest if not re.match(r"^-[neE]+$", w)]
        if args:
            echoes.add(" ".join(args).replace("\\n", "").strip())
        return
    if prog in _SILENT:
        return
    subs.append(" ".join(shlex.quote(w) if w not in {"|"} else w for w in words[idx:]))


def _inner_command(prog: str, rest: list[str]) -> str | None:
    """The command run remotely / in a container / by a shell, when ``prog`` is such a wrapper."""
    if prog == "ssh":
        i = 0
        while i < len(rest) and rest[i].startswith("-"):
            i += 2 if rest[i] in {"-p", "-i", "-o", "-l", "-J", "-F", "-b", "-c", "-E", "-L", "-R", "-D", "-W"} else 1
        remote = rest[i + 1:]
        return shlex.join(remote) if remote else None
    if prog in {"bash", "sh", "zsh"} and "-c" in rest:
        after = rest[rest.index("-c") + 1:]
        return after[0] if after else None
    if "--" in rest and prog in {"pct", "kubectl", "lxc", "incus", "nsenter", "systemd-run"}:
        return shlex.join(rest[rest.index("--") + 1:]) or None
    if prog in {"docker", "podman"} and rest[:1] == ["exec"]:
        i = 1
        while i < len(rest) and rest[i].startswith("-"):  # options, then the container, then the command
            i += 2 if rest[i] in {"-e", "-u", "-w", "--env", "--user", "--workdir"} else 1
        return shlex.join(rest[i + 1:]) or None
    return None


def _family(command: str | None, names: list[str]) -> list[str]:
    """Formats a command's output may be in: ``nvidia-smi …`` → every ``nvidia_smi*`` parser."""
    if not command:
        return []
    if "/proc/meminfo" in command:
        return [n for n in names if n == "meminfo"]
    if "/sys/fs/cgroup" in command or "memory.max" in command or "memory.limit_in_bytes" in command:
        return [n for n in names if n == "container_limits"]  # a cgroup file's value, alone on its line
    prog = _program(command.split())
    if not prog:
        return []
    key = re.sub(r"\W", "_", prog)
    aliases = {"dmesg": "kernel", "journalctl": "kernel"}
    key = aliases.get(key, key)
    return [n for n in names if n == key or n.startswith(key + "_")]


# ---------------------------------------------------------------------------------------------
# Splitting


@dataclass
class _Block:
    kind: str  # command | prose | output
    start: int
    end: int
    ctx: int | None = None  # index into contexts
    section: int = 0
    command: str | None = None
    fmt: str | None = None
    score: float = 0.0


def _resolve_sniffers(sniffers: Sniffers | None) -> dict[str, Callable[[str], float]]:
    if sniffers is None:
        sniffers = _default_sniffers()
    return {k: v for k, v in sniffers.items() if k != "transcript"}


def _default_sniffers() -> dict[str, Callable[[str], float]]:
    import importlib

    import parsers

    fn = getattr(parsers, "registry_sniffers", None)
    if callable(fn):
        return dict(fn())
    out: dict[str, Callable[[str], float]] = {}
    try:
        registry = importlib.import_module("parsers.registry")
        names = list(registry.PARSER_MODULES)
    except ImportError:
        names = ["free", "meminfo"]
    for name in names:
        try:  # a parser not written yet is simply not offered
            mod = importlib.import_module(f"parsers.{name}")
            out[mod.FORMAT] = mod.sniff
        except Exception:  # noqa: BLE001 - one broken module must not stop the split
            continue
    return out


def _best(text: str, sniffers: dict[str, Callable[[str], float]], only: list[str] | None = None
          ) -> tuple[str | None, float]:
    head = text[:SNIFF_BYTES]
    best: tuple[str | None, float] = (None, 0.0)
    for name in sorted(sniffers if only is None else only):
        try:
            score = float(sniffers[name](head))
        except Exception:  # noqa: BLE001 - a failing sniffer scores 0
            score = 0.0
        if score > best[1]:
            best = (name, score)
    return best


class _Splitter:
    def __init__(self, lines: list[str], sniffers: dict[str, Callable[[str], float]]):
        self.lines = lines
        self.sniffers = sniffers
        self.blocks: list[_Block] = []
        self.contexts: list[_Context] = []
        self.para: list[int] = []
        self.para_forced = False
        self.section = 0

    # -- pass 1: lines → command / prose / output blocks ---------------------------------------
    def walk(self) -> None:
        in_fence = fence_first = False
        tight = after_cmd = False  # output right under a command / first paragraph after it
        continued: _Block | None = None
        prev_blank = True
        for no, line in enumerate(self.lines, 1):
            s = line.strip()
            if continued is not None:  # "\"-continued command line
                continued.end = no
                ctx = self.contexts[-1]
                ctx.text = ctx.text[:-1].rstrip() + " " + re.sub(r"^>\s*", "", s)
                if not s.endswith("\\"):
                    continued = None
                    self._finish_command(ctx)
                continue
            if _FENCE_RE.match(line):
                self.flush()
                in_fence, fence_first, tight, after_cmd, prev_blank = not in_fence, not in_fence, False, False, True
                continue
            if not s:
                self.flush()
                tight, prev_blank = False, True
                continue
            found = prompt_command(line)
            if found is None and (fence_first or (not in_fence and prev_blank and not tight)):
                bare = bare_command(line)
                found = (bare, "fence" if fence_first else "bare") if bare else None
            fence_first = False
            if found is not None:
                self.flush()
                cmd, style = found
                self.contexts.append(_Context(no, cmd, style))
                blk = _Block("command", no, no, len(self.contexts) - 1, command=cmd)
                self.blocks.append(blk)
                self.section = 0
                tight, after_cmd, prev_blank = True, style in {"prompt", "tool", "repl"}, False
                if cmd.endswith("\\"):
                    continued = blk
                else:
                    self._finish_command(self.contexts[-1])
                continue
            ctx = self.contexts[-1] if self.contexts else None
            if _RULE_RE.match(line) or (ctx is not None and s in ctx.echoes):
                self.flush()
                self.section += 1
                prev_blank = True
                continue
            if not self.para:
                self.para_forced = in_fence or tight or after_cmd
                after_cmd = False
            self.para.append(no)
            prev_blank = False
        self.flush()

    def _finish_command(self, ctx: _Context) -> None:
        ctx.subs, ctx.echoes = subcommands(ctx.text) if ctx.style != "repl" else ([ctx.text], set())
        self.blocks[-1].command = ctx.text

    def flush(self) -> None:
        if not self.para:
            return
        ctx = len(self.contexts) - 1 if self.contexts else None
        nos = self.para
        self.para = []
        if self.para_forced:
            self._add("output", nos[0], nos[-1], ctx)
            return
        flags = [is_prose(self.lines[n - 1]) for n in nos]
        if sum(flags) * 2 < len(flags):  # mostly output: keep it whole (log lines that read like English)
            lead = 0  # ... except a heading or an introducing sentence on top ("## id 42 (free -m)")
            while lead < len(nos) - 1 and flags[lead] and _is_intro(self.lines[nos[lead] - 1]):
                lead += 1
            if lead:
                self._add("prose", nos[0], nos[lead - 1], ctx)
            self._add("output", nos[lead], nos[-1], ctx)
            return
        # runs; a single prose-looking line between two output runs is output
        runs: list[list] = []
        for n, f in zip(nos, flags, strict=True):
            if runs and runs[-1][0] == f:
                runs[-1][2] = n
            else:
                runs.append([f, n, n])
        for i in range(1, len(runs) - 1):
            if runs[i][0] and runs[i][1] == runs[i][2] and not runs[i - 1][0] and not runs[i + 1][0]:
                runs[i][0] = False
        for f, a, b in runs:
            self._add("prose" if f else "output", a, b, ctx)

    def _add(self, kind: str, a: int, b: int, ctx: int | None) -> None:
        last = self.blocks[-1] if self.blocks else None
        if last and last.kind == kind and last.ctx == ctx and last.section == self.section and last.end >= a - 1:
            last.end = b  # adjacent runs of one kind in one paragraph
            return
        self.blocks.append(_Block(kind, a, b, ctx, self.section))

    # -- pass 2: sniff, group output blocks into chunks, give each its command ------------------
    def text_of(self, a: int, b: int) -> str:
        return "\n".join(self.lines[a - 1:b])

    def segments(self) -> list[Segment]:
        for blk in self.blocks:
            if blk.kind == "output":
                blk.fmt, blk.score = _best(self.text_of(blk.start, blk.end), self.sniffers)
                if blk.score < MIN_SCORE:
                    blk.fmt = None
        chunks = self._chunks()
        out: list[Segment] = []
        for item in sorted(chunks + [[b] for b in self.blocks if b.kind != "output"], key=lambda c: c[0].start):
            first, last = item[0], item[-1]
            text = self.text_of(first.start, last.end)
            if first.kind == "prose":
                out.append(Segment(first.start, last.end, text, None, None, "prose"))
            elif first.kind == "command":
                fmt, score = _best(text, self.sniffers)  # e.g. a launch command line
                out.append(Segment(first.start, last.end, text, first.command,
                                   fmt if score >= MIN_SCORE else None, "command"))
            else:
                out.append(Segment(first.start, last.end, text, first.command, self._chunk_format(item, text)))
        return out

    def _chunks(self) -> list[list[_Block]]:
        """Consecutive output blocks of one command and section, split where the format changes."""
        chunks: list[list[_Block]] = []
        prev: _Block | None = None
        for blk in self.blocks:
            if blk.kind != "output":
                prev = None
                continue
            cur = chunks[-1] if chunks and prev is not None else None
            if cur is not None and cur[-1].ctx == blk.ctx and cur[-1].section == blk.section:
                cur_fmt = next((b.fmt for b in cur if b.fmt), None)
                if blk.fmt is None or blk.fmt == cur_fmt:
                    cur.append(blk)
                    prev = blk
                    continue
            chunks.append([blk])
            prev = blk
        by_ctx: dict[int, list[list[_Block]]] = {}
        for ch in chunks:
            if ch[0].ctx is not None:
                by_ctx.setdefault(ch[0].ctx, []).append(ch)
        for ci, chs in by_ctx.items():
            ctx = self.contexts[ci]
            n = len(ctx.subs)
            paragraphs = [b for ch in chs for b in ch]
            if n > 1 and len(chs) != n and len(paragraphs) == n:  # one paragraph per sub-command
                chunks = [c for c in chunks if c not in chs] + [[b] for b in paragraphs]
                chs = [[b] for b in paragraphs]
            self._assign(ctx, chs)
        return sorted(chunks, key=lambda c: c[0].start)

    def _assign(self, ctx: _Context, chs: list[list[_Block]]) -> None:
        n = len(ctx.subs)
        names = list(self.sniffers)
        for k, ch in enumerate(chs):
            if n == 1:
                cmd = ctx.subs[0]
            elif n and len(chs) == n:
                cmd = ctx.subs[k]
            else:
                fmt = next((b.fmt for b in ch if b.fmt), None)
                fits = [s for s in ctx.subs if fmt and fmt in _family(s, names)]
                cmd = fits[0] if len(fits) == 1 else ctx.text
            for b in ch:
                b.command = cmd

    def _chunk_format(self, chunk: list[_Block], text: str) -> str | None:
        fmt = next((b.fmt for b in chunk if b.fmt), None)
        if fmt is not None:
            return fmt
        family = _family(chunk[0].command, list(self.sniffers))
        if family:  # the command says which parser; accept any positive score from it
            name, score = _best(text, self.sniffers, family)
            return name if score > 0 else None
        return None


def split(text: str, sniffers: Sniffers | None = None) -> list[Segment]:
    """Cut ``text`` into command, output and prose segments, in order (see the module doc)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
    sp = _Splitter(lines, _resolve_sniffers(sniffers))
    sp.walk()
    return sp.segments()


def looks_like_transcript(head: str) -> float:
    """How sure we are that ``head`` is a pasted session or a write-up quoting one (not one tool's output).

    Prompt lines → 0.99; three or more prose paragraphs around non-prose lines → 0.97 (a write-up
    like the seeds, which a single format's sniffer would otherwise claim whole); a code fence → 0.9.

    >>> looks_like_transcript("$ free -g\\n  total used\\nMem: 1 2 3 4 5 6\\n")
    0.99
    >>> looks_like_transcript("MemTotal:       24684092 kB\\n")
    0.0
    """
    prompts = fences = prose_paras = other = 0
    para_prose = para_lines = 0
    for i, line in enumerate(head[:SNIFF_BYTES].split("\n")):
        if i > 2000:
            break
        if not line.strip():
            if para_lines and para_prose * 2 >= para_lines:
                prose_paras += 1
            para_prose = para_lines = 0
            continue
        if _FENCE_RE.match(line):
            fences += 1
            continue
        if prompt_command(line):
            prompts += 1
            continue
        para_lines += 1
        if is_prose(line) and not _HEADING_RE.match(line.strip()):
            para_prose += 1
        else:
            other += 1
    if para_lines and para_prose * 2 >= para_lines:
        prose_paras += 1
    if prompts and other:
        return 0.99
    if prose_paras >= 3 and other:
        return 0.97
    if fences >= 2 and other:
        return 0.9
    return 0.0


def command_rows(segments: list[Segment]) -> list[dict]:
    """``command`` events (source ``transcript``) for the command segments, at their own line."""
    return [{"line": s.start_line, "line_end": s.end_line, "kind": "command", "text": s.text,
             "attrs": {"command": s.command, "subcommands": subcommands(s.command or "")[0]}}
            for s in segments if s.kind == "command"]

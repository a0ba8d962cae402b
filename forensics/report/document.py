"""The findings document as the outputs read it: every optional key present, the root cause first, the flags to change reconciled, the corrected launch command and the cleanup steps."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from forensics.model import SEVERITY_RANK, Timeline
from forensics.report.launch_env import LaunchWords, env_style, env_word, is_env_setting, place_env
from parsers.launch.frameworks import override_key

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
    env_style: str = "shell"  # where an environment setting goes: forensics/report/launch_env.py::env_style
    env_notes: list[str] = field(default_factory=list)  # the configuration keys to change (compose, k8s)

    @property
    def command(self) -> str | None:
        return shlex.join(self.new_argv) if self.new_argv else None

    @property
    def flags_only(self) -> str:
        env = [env_word(self.env_style, r.flag, shlex.quote(r.new)) for r in self.flags
               if is_env_setting(r.flag) and r.new]
        rest = [f"{r.flag}={shlex.quote(r.new)}" if r.new and override_key(r.flag)
                else f"{r.flag} {shlex.quote(r.new)}" if r.new else r.flag
                for r in self.flags if not is_env_setting(r.flag)]
        return " ".join(env + rest)

    def setting(self, r: FlagRow) -> str:
        """One change as the launch writes it: ``--flag value``, ``NAME=value``, ``-e NAME=value``."""
        if not r.new:
            return f"without `{r.flag}`"
        if is_env_setting(r.flag) and self.env_style == "compose":
            return f'`{r.flag}: "{r.new}"` under `environment:`'
        if is_env_setting(r.flag) and self.env_style == "kubernetes":
            return f'`{r.flag}` set to `"{r.new}"` in `env:`'
        if is_env_setting(r.flag):
            return f"`{env_word(self.env_style, r.flag, r.new)}`"
        return f"`{r.flag}={r.new}`" if override_key(r.flag) else f"`{r.flag} {r.new}`"


def flag_key(flag: str) -> str:
    """``--hicache_size`` / ``hicache-size`` / ``--hicache-size`` → ``hicache-size``."""
    return flag.strip().lstrip("-").replace("_", "-").lower()


__all__ = ["is_env_setting"]  # forensics/report/launch_env.py: shared with `forensics check`


def flag_changes(doc: dict[str, Any]) -> list[FlagRow]:
    """Every remediation flag, once: the root cause's value wins, then severity order. A finding that follows
    from another (an NCCL timeout after a peer was OOM-killed) changes no flag: fixing the cause removes it,
    and its own remedy (a longer timeout) would only hide the next one."""
    seen: dict[str, FlagRow] = {}
    ids = {f.get("rule_id") for f in doc.get("findings") or []}
    for f in ordered_findings(doc):
        if f.get("consequence_of") in ids:
            continue
        for ch in (f.get("remediation") or {}).get("flags") or []:
            if not ch.get("flag"):
                continue
            key = flag_key(ch["flag"])
            if key not in seen:
                flag = ch["flag"] if ch["flag"].startswith("-") or is_env_setting(ch["flag"]) \
                    or override_key(ch["flag"]) else f"--{key}"
                old = ch.get("old")
                seen[key] = FlagRow(flag=flag, old=None if old is None else str(old),
                                    new="" if ch.get("new") is None else str(ch["new"]),
                                    why=str(ch.get("why") or ""), rule_id=str(f.get("rule_id")))
    return list(seen.values())


#: How many next steps a report lists: an on-call engineer reads a short list; the rest stays under
#: each finding.
MAX_NEXT_STEPS = 8
#: The groups of next steps, in the order they are done.
STEP_GROUPS = (("fix", "Fix"), ("confirm", "Confirm first"), ("clean", "Clean up"))
_CLEANUP_RE = re.compile(r"\b(?<!OOM )(?<!oom )(?:kill|pkill|killall|fuser\s+-k|gpu-reset|reboot|ipcrm|rm\s|umount|holders?|"
                         r"stop the container|release|free the|still hold)", re.I)
#: a step that gathers the fact which decides (a measurement, a stack dump, a debug rerun) is not a fix either
_CONFIRM_RE = re.compile(r"^\s*(?:before (?:relaunching|restarting),?\s*)?(?:to confirm|confirm|check|verify|look for|"
                         r"find (?:out|what)|read|see whether|measure|inspect|compare|ask for|`?py-spy dump|"
                         r"(?:re)?run (?:once )?with NCCL_DEBUG)\b", re.I)
#: an alternative ("Or lower …") or a caution that rules a reading out ("Not the opposite problem: …"): both stay
#: under their finding, the short list says what to do
_ALTERNATIVE_RE = re.compile(r"^\s*(?:or|alternatively|otherwise|not)\b", re.I)
_PLACEHOLDER_RE = re.compile(r"<[^<>\s]*>|\bN\b|\{[^{}]*\}")
_WORD_RE = re.compile(r"[a-z0-9][a-z0-9_.-]+")
_STOP_WORDS = frozenset(("the", "a", "an", "of", "to", "and", "or", "when", "with", "from", "in", "on", "for", "it",
                         "its", "is", "are", "be", "by", "that", "this", "then", "not", "no", "their", "them",
                         "each", "all", "any", "still", "before", "after"))


def step_group(text: str) -> str | None:
    """``fix``, ``confirm`` or ``clean`` for one remediation action; None for an alternative ("Or lower …") or a
    caution ("Not a sizing problem: …"), which belong under their finding, not in the short list.

    >>> [step_group(t) for t in ("Set --hicache-size per rank.", "To confirm: host RAM — `free -g`",
    ...                          "Kill the holders with SIGKILL", "Or lower --max-running-requests",
    ...                          "Not the opposite problem: the weights fit", "Measure the silence on the host",
    ...                          "Rerun with NCCL_DEBUG=INFO: the last line", "Rerun with --disable-cuda-graph")]
    ['fix', 'confirm', 'clean', None, None, 'confirm', 'confirm', 'fix']
    """
    if _ALTERNATIVE_RE.match(text):
        return None
    if _CONFIRM_RE.match(text):
        return "confirm"
    if _CLEANUP_RE.search(text):
        return "clean"
    return "fix"


def _words(text: str) -> set[str]:
    return {w for w in _WORD_RE.findall(text.lower()) if w not in _STOP_WORDS}


def _same_step(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two actions that say the same: a shared command, or (when one of them names no command) mostly the
    same words."""
    if set(a["commands"]) & set(b["commands"]):
        return True
    if a["commands"] and b["commands"]:  # different commands: different steps, however alike the words
        return False
    wa, wb = _words(a["text"]), _words(b["text"])
    return bool(wa and wb) and len(wa & wb) / min(len(wa), len(wb)) >= 0.6


def complete_commands(text: str) -> list[str]:
    """The commands of an action that can be run as they stand: no ``<placeholder>`` left to fill and
    not a bare program name (``docker kill`` with no container named is not a command).

    >>> complete_commands("kill from the host — `docker kill <ctr>`, `nvidia-smi --gpu-reset -i 0,2`, `docker kill`")
    ['nvidia-smi --gpu-reset -i 0,2']
    """
    out = []
    for c in action_commands(text):
        words = c.split()
        if _PLACEHOLDER_RE.search(c) or len(words) < 2 or (words[0] in ("docker", "podman", "kubectl") and len(words) < 3):
            continue
        out.append(c)
    return out


def next_steps(doc: dict[str, Any], limit: int = MAX_NEXT_STEPS) -> list[dict[str, Any]]:
    """The short list of what to do, grouped (fix, confirm first, clean up), each said once.

    Actions come from the findings in report order (root cause first); an action that repeats an earlier
    one (same command, or mostly the same words) is dropped, alternatives stay under their finding, and
    at most ``limit`` steps are listed — the root cause's first. Each step is ``{"group", "text",
    "rule_id", "commands"}``; ``commands`` are only those complete enough to copy and run.
    """
    picked: list[dict[str, Any]] = []
    findings = ordered_findings(doc)
    # an info finding's advice (how to read the failure lines it lists) is no step beside a finding that explains;
    # a consequence's own fixes (find the rank that failed first) are answered by the cause it follows, but what it
    # left behind (memory still held) is still to clean up
    informative = [f for f in findings if f.get("severity") != "info"]
    explained = any(not f.get("consequence_of") for f in informative)
    for f in informative or findings:
        for action in (f.get("remediation") or {}).get("actions") or []:
            text = str(action)
            group = step_group(text)
            if group is None or (explained and f.get("consequence_of") and group != "clean"):
                continue
            step = {"group": group, "text": text, "rule_id": f.get("rule_id"), "commands": complete_commands(text)}
            step["_all"] = action_commands(text)
            if any(_same_step({"text": text, "commands": step["_all"]}, {"text": p["text"], "commands": p["_all"]})
                   for p in picked):
                continue
            picked.append(step)
    picked = picked[:limit]
    rank = {g: i for i, (g, _) in enumerate(STEP_GROUPS)}
    picked.sort(key=lambda s: rank[s["group"]])  # stable: within a group, the findings' order
    for s in picked:
        s.pop("_all", None)
    return picked


def actionable_gaps(gaps: list[str]) -> list[str]:
    """The gaps worth a reader's attention first: what failed or was not there, not what was skipped on
    purpose or could not apply (a probe skipped because its device is absent says nothing is missing).

    >>> actionable_gaps(["kernel: no source worked (dmesg: permission denied)", "fuser: skipped: no device"])
    ['kernel: no source worked (dmesg: permission denied)']
    """
    return [g for g in gaps if not re.search(r":\s*skipped\b|\bnot applicable\b", g, re.I)]


def grouped_steps(steps: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """``[(heading, steps)]`` for the groups that have any, in :data:`STEP_GROUPS` order."""
    return [(title, [s for s in steps if s["group"] == g]) for g, title in STEP_GROUPS
            if any(s["group"] == g for s in steps)]


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


def events(tl: Timeline | None, *kinds: str) -> list[dict[str, Any]]:
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
    values = {flag_key(str(k)): "" if v is None else str(v) for k, v in flags.items()}
    # an RL framework's launch: its flags also under the spelling the user typed (parsers/launch/frameworks.py)
    spelt = attrs.get("spellings") if attrs.get("launcher") == "rl framework" else None
    for canon, written in (spelt or {}).items():
        if canon in flags:
            values[flag_key(str(written))] = values[flag_key(str(canon))]
    return values, argv


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
    env = [(ch.flag, ch.new) for ch in flags if is_env_setting(ch.flag)]
    if env:  # VAR=value before the program, replacing the one the command set (forensics/report/launch_env.py)
        placed, _notes = place_env("shell", LaunchWords(list(argv), *corrected_argv(
            argv, [ch for ch in flags if not is_env_setting(ch.flag)])), env)
        assert placed is not None
        return placed.new, placed.changed, placed.old_changed
    new = list(argv)
    old_marks: set[int] = set()
    origin = list(range(len(argv)))  # new index → old index (None for appended tokens)
    for ch in flags:
        if override_key(ch.flag):  # a Hydra override word: key=value, set in place or appended
            at = next((i for i, t in enumerate(new) if t.lstrip("+~").split("=", 1)[0] == ch.flag), None)
            if at is not None:
                if origin[at] is not None:
                    old_marks.add(origin[at])
                prefix = new[at][:len(new[at]) - len(new[at].lstrip("+~"))]
                new[at], origin[at] = f"{prefix}{ch.flag}={ch.new}", None
            elif ch.new:
                new.append(f"{ch.flag}={ch.new}")
                origin.append(None)
            continue
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
    candidates = events(tl, "launch_command") or events(tl, "server_args")
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
    attrs = _row_attrs(row)
    env = {str(k): str(v) for k, v in (attrs.get("env") or {}).items() if v is not None} \
        if isinstance(attrs.get("env"), dict) else {}
    for r in flags:
        if r.old is None and is_env_setting(r.flag) and r.flag in env:
            r.old, r.old_source = env[r.flag], fix.source
        elif r.old is None and flag_key(r.flag) in values:
            r.old, r.old_source = values[flag_key(r.flag)], fix.source
    fix.env_style = env_style(attrs) if row.get("kind") == "launch_command" else "shell"
    if argv and fix.env_style == "shell" and attrs.get("env_argv"):
        argv = [str(w) for w in attrs["env_argv"]] + argv  # the command's own VAR=value words stay with it
    command = LaunchWords(argv, *corrected_argv(argv, [r for r in flags if not is_env_setting(r.flag)])) \
        if argv else None
    container = [str(w) for w in attrs["container_argv"]] if fix.env_style == "docker" else None
    placed, fix.env_notes = place_env(fix.env_style, command, [(r.flag, r.new) for r in flags
                                                               if is_env_setting(r.flag)], container)
    if placed is not None:
        fix.old_argv, fix.new_argv = placed.old, placed.new
        fix.changed_tokens, fix.old_changed_tokens = placed.changed, placed.old_changed
    return fix


def _row_attrs(row: dict[str, Any]) -> dict[str, Any]:
    try:
        attrs = Timeline.attrs(row)
    except (ValueError, TypeError):
        return {}
    return attrs if isinstance(attrs, dict) else {}



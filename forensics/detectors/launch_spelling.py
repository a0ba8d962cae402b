"""Flags proposed in the spelling the user typed: when the server was started by an RL framework (verl's
``actor_rollout_ref.rollout.gpu_memory_utilization=…``, slime's ``--sglang-mem-fraction-static``, OpenRLHF's
``--vllm_gpu_memory_utilization``), a corrected value is of no use under the engine's own flag name, which
the user never wrote and the framework may not accept. Each finding's flag changes are respelled through the
framework's vocabulary (parsers/launch/frameworks.py); the engine's name stays in the reason.
"""

from __future__ import annotations

from forensics.facts.launch import is_prose, launch_rows
from forensics.facts.rows import Row, attrs
from forensics.model import Finding, Timeline
from parsers.launch import frameworks, vocab


def _framework_launch(tl: Timeline) -> Row | None:
    """The command line the configuration is read from (the last one, facts/launch.py), when a framework's."""
    commands = [r for r in launch_rows(tl) if not is_prose(r)]
    if commands and attrs(commands[-1]).get("launcher") == "rl framework":
        return commands[-1]
    return None


def respell(tl: Timeline, findings: list[Finding]) -> None:
    """Rename each proposed engine flag to the framework's spelling of it (in place)."""
    row = _framework_launch(tl)
    if row is None:
        return
    a = attrs(row)
    framework, engine = str(a.get("framework") or ""), str(a.get("engine") or "sglang")
    form = str(a.get("framework_form") or framework)
    typed = {str(k): str(v) for k, v in (a.get("spellings") or {}).items()}
    for f in findings:
        for ch in f.remediation.flags:
            if not ch.flag.startswith("--"):
                continue  # an environment variable or a key already in another spelling
            canon = vocab.resolve(ch.flag, engine).flag
            written = typed.get(canon) or frameworks.spelling_for(form, engine, canon, typed)
            if written and written != ch.flag:
                ch.why = f"{ch.why} ({framework} passes {written} to {engine} as its {canon})"
                ch.flag = written

"""Where an environment setting of a corrected launch goes, by how the engine was launched.

A shell reads ``VAR=value`` before a command as that command's environment (bash(1), "ENVIRONMENT"); docker
does not: the words after the image are the program and its arguments, so a ``VAR=value`` there is run as
the program. A container's variables are ``-e VAR=value`` / ``--env VAR=value`` options of ``docker run``
(docker-run(1), "--env"), a compose service's ``environment:`` entries (the compose file reference), and
a Kubernetes container's ``env:`` list of ``name``/``value`` pairs (the core/v1 ``EnvVar``); a Dockerfile's
``ENV`` sets the image's default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

#: launchers (parsers/launch: ``LaunchCommand.launcher``) whose variables are keys of a configuration file
CONFIG_LAUNCHERS = ("compose", "kubernetes", "dockerfile")
_DOCKER_ENV_OPTS = ("-e", "--env")
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def is_env_setting(flag: str) -> bool:
    """An environment variable (``SGLANG_WAIT_PORT_TIMEOUT``), set around the command, not a flag of it."""
    return bool(_ENV_NAME.match(flag))


@dataclass
class LaunchWords:
    """A launch's words before and after a correction, with the indices of the words that changed in each."""

    old: list[str]
    new: list[str]
    changed: set[int] = field(default_factory=set)  # indices into new
    old_changed: set[int] = field(default_factory=set)  # indices into old


def env_style(attrs: dict[str, Any]) -> str:
    """``docker`` (the ``docker run`` words are known), ``compose``, ``kubernetes``, ``dockerfile`` or
    ``shell``.

    >>> env_style({"launcher": "docker run", "container_argv": ["docker", "run", "img"]}), env_style({})
    ('docker', 'shell')
    """
    if attrs.get("container_argv"):
        return "docker"
    launcher = str(attrs.get("launcher") or "")
    return launcher if launcher in CONFIG_LAUNCHERS else "shell"


def _env_option_at(words: list[str], name: str) -> tuple[int, int] | None:
    """(first, last) index of the ``-e NAME[=v]`` / ``--env NAME[=v]`` / ``--env=NAME[=v]`` option, if any."""
    for i, tok in enumerate(words):
        if tok in _DOCKER_ENV_OPTS and i + 1 < len(words) and words[i + 1].split("=", 1)[0] == name:
            return i, i + 1
        if tok.startswith("--env=") and tok[len("--env="):].split("=", 1)[0] == name:
            return i, i
    return None


def set_docker_env(words: list[str], name: str, value: str) -> tuple[list[str], set[int], set[int]]:
    """``docker run`` words with ``-e NAME=value``: the existing option of that name set in place (a bare
    ``-e NAME`` passes the caller's value through; it is given this one), else added after the last ``-e``
    (or after ``run``). An empty value removes the option. Returns the words, the indices of new or changed
    words, and the indices of the old words that changed.

    >>> set_docker_env(["docker", "run", "-e", "A=1", "--env=B=2", "img"], "B", "3")[0]
    ['docker', 'run', '-e', 'A=1', '--env=B=3', 'img']
    >>> new, changed, _ = set_docker_env(["docker", "run", "-e", "A=1", "img"], "C", "5")
    >>> new, sorted(changed)
    (['docker', 'run', '-e', 'A=1', '-e', 'C=5', 'img'], [4, 5])
    """
    new = list(words)
    at = _env_option_at(new, name)
    if at is not None:
        first, last = at
        old = set(range(first, last + 1)) if not value else {last}
        if not value:
            del new[first:last + 1]
            return new, set(), old
        new[last] = f"--env={name}={value}" if first == last else f"{name}={value}"
        return new, {last}, old
    if not value:
        return new, set(), set()
    opts = [i + 1 for i, t in enumerate(new) if t in _DOCKER_ENV_OPTS or t.startswith("--env=")]
    if opts:
        pos = opts[-1] + (1 if new[opts[-1] - 1] in _DOCKER_ENV_OPTS else 0)
    else:
        pos = next((i + 1 for i, t in enumerate(new) if t == "run"), len(new))
    new[pos:pos] = ["-e", f"{name}={value}"]
    return new, {pos, pos + 1}, set()


def env_note(style: str, name: str, value: str) -> str | None:
    """Which key of the launch's configuration to change, for a launch whose variables are not words of its
    command; None for a shell or docker launch (the corrected command carries them).

    >>> env_note("compose", "SGLANG_X", "1")
    'In the compose service, set `SGLANG_X: "1"` under `environment:`.'
    """
    if style == "compose":
        return (f'In the compose service, set `{name}: "{value}"` under `environment:`.' if value
                else f"In the compose service, remove `{name}` from `environment:`.")
    if style == "kubernetes":
        return (f'In the container\'s `env:`, set the entry `- name: {name}` to `value: "{value}"`.' if value
                else f"In the container's `env:`, remove the entry `- name: {name}`.")
    if style == "dockerfile":
        return (f"In the Dockerfile, set `ENV {name}={value}` (or pass `-e {name}={value}` to `docker run`)."
                if value else f"In the Dockerfile, remove `ENV {name}`.")
    return None


def env_word(style: str, name: str, value: str) -> str:
    """How the setting is written in the launch: ``-e NAME=value`` for docker, ``NAME=value`` otherwise."""
    return f"-e {name}={value}" if style == "docker" else f"{name}={value}"


def set_shell_env(words: list[str], name: str, value: str) -> tuple[list[str], set[int], set[int]]:
    """Shell words with ``NAME=value`` before the program: the command's own assignment of that name set in
    place (removed when the value is empty), else one put first. Returns the words, the indices of new or
    changed words, and the indices of the old words that changed (as :func:`set_docker_env`).

    >>> set_shell_env(["A=1", "B=2", "python3"], "B", "3")[0], set_shell_env(["python3"], "C", "4")[0]
    (['A=1', 'B=3', 'python3'], ['C=4', 'python3'])
    """
    new = list(words)
    at = next((i for i, t in enumerate(new) if t.startswith(name + "=")), None)
    if at is None:
        return ([f"{name}={value}", *new], {0}, set()) if value else (new, set(), set())
    if not value:
        del new[at]
        return new, set(), {at}
    new[at] = f"{name}={value}"
    return new, {at}, {at}


def place_env(style: str, command: LaunchWords | None, env: list[tuple[str, str]],
              container: list[str] | None = None) -> tuple[LaunchWords | None, list[str]]:
    """The corrected launch with its environment settings where its launcher reads them, and the notes for
    those that are keys of a file rather than words of the command.

    ``command`` is the engine command before and after its flag changes (a shell launch's own ``VAR=value``
    words in front); ``container`` the ``docker run …`` words before it, for the ``docker`` style. A docker run
    gets ``-e NAME=value`` options before the image, a shell ``NAME=value`` before the command, a compose
    service or Kubernetes container a note naming the key (:func:`env_note`).

    >>> w, notes = place_env("docker", LaunchWords(["img", "--tp", "4"], ["img", "--tp", "2"], {2}, {2}),
    ...                      [("A", "1")], ["docker", "run"])
    >>> w.new, sorted(w.changed), sorted(w.old_changed), notes
    (['docker', 'run', '-e', 'A=1', 'img', '--tp', '2'], [2, 3, 6], [4], [])
    """
    if style in CONFIG_LAUNCHERS:
        return command, [n for name, value in env if (n := env_note(style, name, value))]
    if command is None:
        return None, []
    if style == "docker" and container is not None:
        words, changed, old_marks = list(container), set(), set()
        for name, value in env:
            before = len(words)
            words, ch, old = set_docker_env(words, name, value)
            changed = _shifted(changed, ch | old, len(words) - before, len(words)) | ch
            old_marks |= set_docker_env(container, name, value)[2]  # as the original words number them
        n_old, n_new = len(container), len(words)
        return LaunchWords(container + command.old, words + command.new,
                           changed | {i + n_new for i in command.changed},
                           old_marks | {i + n_old for i in command.old_changed}), []
    new, changed, old_marks = list(command.new), set(command.changed), set(command.old_changed)
    for name, value in env:
        before = len(new)
        new, ch, old = set_shell_env(new, name, value)
        changed = _shifted(changed, ch | old, len(new) - before, len(new)) | ch
    # the command's own assignments of these names stand before its flags, where the flag changes left them
    old_marks |= {i for i, t in enumerate(command.old) for name, _v in env if t.startswith(name + "=")}
    return LaunchWords(list(command.old), new, changed, old_marks), []


def _shifted(marks: set[int], touched: set[int], shift: int, size: int) -> set[int]:
    """Marks after an insertion (or a removal) of ``shift`` words at the first touched index move with it."""
    if not shift:
        return marks
    at = min(touched) if touched else size
    return {i + shift if i >= at else i for i in marks}

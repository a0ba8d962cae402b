"""Where an environment setting of a corrected launch goes, by how the engine was launched.

A shell reads ``VAR=value`` before a command as that command's environment (bash(1), "ENVIRONMENT"); docker
does not: the words after the image are the program and its arguments, so a ``VAR=value`` there is run as
the program. A container's variables are ``-e VAR=value`` / ``--env VAR=value`` options of ``docker run``
(docker-run(1), "--env"), a compose service's ``environment:`` entries (the compose file reference), and
a Kubernetes container's ``env:`` list of ``name``/``value`` pairs (the core/v1 ``EnvVar``); a Dockerfile's
``ENV`` sets the image's default.
"""

from __future__ import annotations

from typing import Any

#: launchers (parsers/launch: ``LaunchCommand.launcher``) whose variables are keys of a configuration file
CONFIG_LAUNCHERS = ("compose", "kubernetes", "dockerfile")
_DOCKER_ENV_OPTS = ("-e", "--env")


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

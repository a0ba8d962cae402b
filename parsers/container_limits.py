"""A container's or cgroup's memory limit as its own text states it → ``container_memory_limit`` rows.

Sources: linux Documentation/admin-guide/cgroup-v2.rst (5.x: ``memory.max``, ``max``), linux
Documentation/admin-guide/cgroup-v1/memory.rst (4.x: ``memory.limit_in_bytes``), kubernetes
staging/src/k8s.io/kubectl/pkg/describe/describe.go (1.x: ``Limits:`` / ``memory:``; ``Command:`` / ``Args:``).

The per-rank host-pool arithmetic needs the limit the ranks live under; a launch file states it
(docker ``--memory``, compose ``mem_limit``, ``#SBATCH --mem``), and so do these, read here:

* the cgroup's own files (Linux Documentation/admin-guide/cgroup-v2.rst: ``memory.max`` holds a byte
  count or ``max``; cgroup v1 ``memory.limit_in_bytes``, where "unlimited" is a page-rounded 2^63−1),
  as ``forensics collect`` writes them (``host/cgroup-memory.txt``: ``memory.max: 343597383680``) or
  as a paste prints them (``$ cat /sys/fs/cgroup/memory.max`` then the number alone);
* ``kubectl describe pod``: each container's ``Limits:`` block, ``memory:`` a Kubernetes quantity
  (``320Gi`` binary, ``320G`` decimal); and the launch the container ran, its ``Command:`` and ``Args:`` lists
  (one item a line) after its ``Image:``, as a ``launch_command`` row under that limit.

One row per stated limit: ``bytes``, attrs ``limit_bytes`` and ``limit_from`` (where it was stated).
"No limit" (``max``, v1's unlimited) gives no row.

The cgroup's own count of OOM kills is read too: ``memory.events`` ``oom_kill`` (cgroup-v2.rst: "The number of
processes belonging to this cgroup killed by any kind of OOM killer") and cgroup v1's ``memory.oom_control``
``oom_kill`` — one ``failure`` row of class ``oom_killed`` (``count`` = the kills) when it is above zero: the
kernel or cgroup OOM killer fired in that cgroup (failure_messages.md §5: a cgroup ``oom_kill`` counter ties a
SIGKILL to memory).

>>> r = parse("memory.max: 343597383680\\nmemory.current: 2147483648\\n")
>>> r.events.select("kind", "bytes").row(0)
('container_memory_limit', 343597383680)
>>> parse("Containers:\\n  sglang:\\n    Limits:\\n      memory:          320Gi\\n").events["bytes"].to_list()
[343597383680]
>>> parse("memory.max: max\\n").events.height
0
>>> parse("137438953472\\n", path="cgroup/memory.max").events["bytes"].to_list()
[137438953472]
>>> parse("memory.max: 68719476736\\nmemory.events:\\n  low 0\\n  oom 3\\n  oom_kill 2\\n").events.select(
...     "kind", "count").rows()
[('container_memory_limit', None), ('failure', 2)]
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from .schema import NotThisFormat, ParseResult
from .units import k8s_quantity

FORMAT = "container_limits"

#: the collector's ``<file>: <value>`` lines, or a shell's ``cat`` of one file followed by its value
#: linux Documentation/admin-guide/cgroup-v2.rst (5.x: ``memory.max``, ``.high``, ``.current``, ``.peak``,
#: ``.events``, ``.swap.max``), linux Documentation/admin-guide/cgroup-v1/memory.rst (4.x:
#: ``memory.limit_in_bytes``, ``memory.memsw.limit_in_bytes``)
_CGROUP_LINE = re.compile(r"^\s*(memory\.max|memory\.limit_in_bytes|memory\.memsw\.limit_in_bytes|memory\.high)"
                          r"\s*:\s*(\S+)\s*$")
_CGROUP_FILE = re.compile(r"\bcat\s+\S*/(memory\.max|memory\.limit_in_bytes)\s*$")
#: the files of ``key value`` lines whose ``oom_kill`` counts the cgroup's OOM kills, as the collector writes them
#: (``memory.events:`` then indented lines) or as ``cat`` prints them: linux Documentation/admin-guide/cgroup-v2.rst
#: (5.x: ``memory.events`` ``oom_kill``), linux Documentation/admin-guide/cgroup-v1/memory.rst (4.13+:
#: ``memory.oom_control`` ``oom_kill``)
_EVENTS_HEAD = re.compile(r"^\s*(memory\.events|memory\.oom_control)\s*:\s*$")
_EVENTS_FILE = re.compile(r"\bcat\s+\S*?(memory\.events|memory\.oom_control)\s*$")
_EVENT_LINE = re.compile(r"^\s*([a-z_]{1,40})\s+(\d{1,20})\s*$")
_NUMBER = re.compile(r"^\s*(\d{1,20})\s*$")
_CGROUP_ANY = re.compile(r"^\s*memory\.(?:max|current|high|peak|events|limit_in_bytes|usage_in_bytes|swap\.max)\s*:",
                         re.M)
#: v1 reports "no limit" as 2^63−1 rounded down to a page; anything this large is not a limit
_UNLIMITED = 1 << 62
_FROM = {"memory.max": "cgroup v2 memory.max", "memory.limit_in_bytes": "cgroup v1 memory.limit_in_bytes",
         "memory.memsw.limit_in_bytes": "cgroup v1 memory.memsw.limit_in_bytes", "memory.high": "cgroup v2 memory.high"}
#: the limits that kill (memory.high only throttles: read, not used as the budget)
_HARD = ("memory.max", "memory.limit_in_bytes")

# kubernetes staging/src/k8s.io/kubectl/pkg/describe/describe.go (1.x: ``Name:``, ``Containers:``, ``Limits:``,
# ``memory:``)
_DESCRIBE_HEAD = re.compile(r"^(?:Name:\s+\S+|Containers:)\s*$", re.M)
_LIMITS = re.compile(r"^(\s*)Limits:\s*$")
_LIMIT_MEMORY = re.compile(r"^\s*memory:\s+(\S+)\s*$")
#: a container's entry, its image and its ``Command:``/``Args:`` lists (describe.go ``describeContainerCommand``: the
#: heading, then one item per line one level deeper) — the launch the pod ran, read as ``parsers.launch`` reads any
#: command line (``args`` alone run after the image's entrypoint: docker-run(1) ``IMAGE [COMMAND] [ARG...]``)
_CONTAINER = re.compile(r"^( {2})([\w.-]+):\s*$")
_IMAGE = re.compile(r"^\s+Image:\s+(\S+)\s*$")
_CMD_LIST = re.compile(r"^(\s+)(Command|Args):\s*$")


def sniff(head: str) -> float:
    if _CGROUP_ANY.search(head):
        return 0.85
    if _CGROUP_FILE.search(head.split("\n", 1)[0]) and _NUMBER.match((head.split("\n") + ["", ""])[1]):
        return 0.8
    if _DESCRIBE_HEAD.search(head) and re.search(r"^\s*Limits:\s*$", head, re.M):
        return 0.6
    if _NUMBER.match(head.strip()) and "\n" not in head.strip():
        return 0.05  # a bare value: only ever chosen when the command that printed it names a cgroup file
    return 0.0


def _row(line: int, text: str, value: int, where: str) -> dict[str, Any]:
    return {"line": line, "kind": "container_memory_limit", "bytes": value, "text": text.strip()[:300],
            "attrs": {"limit_bytes": value, "limit_from": where, "confidence": "read"}}


class _Container:
    """One container of a ``kubectl describe pod``: what it runs and the memory limit it runs under."""

    def __init__(self) -> None:
        self.image: str | None = None
        self.lists: dict[str, list[str]] = {"Command": [], "Args": []}
        self.first: int | None = None
        self.last = 0
        self.limit: int | None = None

    def launch_row(self) -> dict[str, Any] | None:
        from parsers.launch import find_commands

        command, args = self.lists["Command"], self.lists["Args"]
        if self.first is None or not (command or (args and self.image)):
            return None
        tokens = [*command, *args] if command else ["docker", "run", self.image or "", *args]
        text = " ".join(shlex.quote(t) for t in tokens)
        found = find_commands(text)
        if not found:
            return None
        c = found[0]
        c.launcher, c.confidence = "kubectl describe pod", "config"
        if self.limit:
            c.container_memory_bytes, c.container_memory_from = self.limit, "kubectl describe: Limits.memory"
        return {"line": self.first, "line_end": self.last, "kind": "launch_command", "text": text[:2000],
                "attrs": c.attrs()}


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    lines = text.split("\n")
    describe = bool(_DESCRIBE_HEAD.search(text[:20000]))
    container: _Container | None = None
    listing: tuple[str, int] | None = None  # the Command/Args list being read and its heading's indent
    rows: list[dict[str, Any]] = []
    recognized = 0
    cat_of = None  # the cgroup file a preceding ``cat`` printed
    limits_indent: int | None = None
    events_of = None  # the events file whose ``key value`` lines follow
    if command and (m := _CGROUP_FILE.search(command)) is not None:
        cat_of = m.group(1)
    elif command and (m := _EVENTS_FILE.search(command)) is not None:
        events_of = m.group(1)
    elif (base := path.replace("\\", "/").rsplit("/", 1)[-1]) in _HARD:
        cat_of = base  # the cgroup file itself, copied as it is: its name says what the number is
    for i, ln in enumerate(lines):
        if (h := _EVENTS_HEAD.match(ln) or _EVENTS_FILE.search(ln)) is not None:
            events_of, recognized = h.group(1), recognized + 1
            continue
        if events_of and (ev := _EVENT_LINE.match(ln)) is not None:
            recognized += 1
            if ev.group(1) == "oom_kill" and int(ev.group(2)) > 0:
                rows.append({"line": i + 1, "kind": "failure", "count": int(ev.group(2)), "text": ln.strip()[:300],
                             "attrs": {"failure": "oom_killed", "cgroup_file": events_of, "oom_kills": int(ev.group(2)),
                                       "message": f"cgroup {events_of}: oom_kill {ev.group(2)}"}})
            continue
        events_of = None
        m = _CGROUP_LINE.match(ln)
        if m:
            recognized += 1
            v = m.group(2)
            if v.isdigit() and int(v) < _UNLIMITED and m.group(1) in _HARD:
                rows.append(_row(i + 1, ln, int(v), _FROM[m.group(1)]))
            continue
        if (c := _CGROUP_FILE.search(ln)) is not None:
            cat_of, recognized = c.group(1), recognized + 1
            continue
        if cat_of and (n := _NUMBER.match(ln)) is not None:
            recognized += 1
            if int(n.group(1)) < _UNLIMITED:
                rows.append(_row(i + 1, ln, int(n.group(1)), _FROM[cat_of]))
            cat_of = None
            continue
        cat_of = None
        if describe:
            if listing is not None and container is not None:
                if ln.strip() and len(ln) - len(ln.lstrip()) > listing[1]:
                    container.lists[listing[0]].append(ln.strip())
                    container.last, recognized = i + 1, recognized + 1
                    continue
                listing = None
            if _CONTAINER.match(ln) is not None:
                if container is not None and (row := container.launch_row()) is not None:
                    rows.append(row)
                container = _Container()
            elif container is not None and (im := _IMAGE.match(ln)) is not None:
                container.image = im.group(1)
            elif container is not None and (cl := _CMD_LIST.match(ln)) is not None:
                listing, recognized = (cl.group(2), len(cl.group(1))), recognized + 1
                container.first = container.first or i + 1
                container.last = i + 1
                continue
        if (lm := _LIMITS.match(ln)) is not None:
            limits_indent, recognized = len(lm.group(1)), recognized + 1
            continue
        if limits_indent is not None:
            indent = len(ln) - len(ln.lstrip())
            if not ln.strip() or indent <= limits_indent:
                limits_indent = None
            elif (mm := _LIMIT_MEMORY.match(ln)) is not None:
                recognized += 1
                q = k8s_quantity(mm.group(1))
                if q:
                    rows.append(_row(i + 1, ln, q, "kubectl describe: Limits.memory"))
                    if container is not None:
                        container.limit = q
    if container is not None and (row := container.launch_row()) is not None:
        rows.append(row)
    if not rows and not recognized:
        raise NotThisFormat("no cgroup or container memory limit in this text")
    # a final newline ends the last line; it does not start another
    n_lines = len(lines) - 1 if lines and lines[-1] == "" else len(lines)
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=n_lines, recognized=min(recognized, n_lines))


__all__ = ["FORMAT", "parse", "sniff"]

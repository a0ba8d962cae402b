"""Which host a text says it comes from: prompts, ``hostname`` output, syslog/journald host columns,
NCCL's ``host:pid:tid`` prefix, a pod's node.

Sources: bash(1) (PROMPTING: ``\\u@\\h:\\w\\$``), RFC 3164 and journalctl(1) (``-o short``: stamp, host,
tag[pid]), systemd.journal-fields(7) (``_HOSTNAME``), reference/failure_messages.md §4.1 (NCCL's
``host:pid:tid [dev] NCCL`` prefix), hostname(1), kubernetes
staging/src/k8s.io/kubectl/pkg/describe/describe.go (1.x: ``Node:  name/ip``).

A pasted session on node B starts its lines with ``root@gpu-b:~#``; a journal line names its host after
the stamp; NCCL INFO lines begin with the host name. Counting these gives the host the evidence is from;
a text that names several (an ssh session into other machines) is judged by the majority.

>>> stated_host("root@gpu-b:~# free -g\\n              total  used\\nMem:  440  12\\n")
'gpu-b'
>>> stated_host("Nov 20 17:14:02 node-3 kernel: Out of memory: Killed process 4242 (python3)\\n")
'node-3'
>>> stated_host("$ hostname\\ngpu-a.cluster.local\\n")
'gpu-a.cluster.local'
>>> stated_host("[2025-11-20 17:14:02 TP0] Load weight begin.\\n") is None
True
"""

from __future__ import annotations

import re
from collections import Counter

#: ``user@host:dir$``, ``[user@host dir]#`` at the start of a line (what a terminal shows before a command)
_PROMPT = re.compile(r"^(?:\([\w.-]+\)\s*)?\[?[\w.-]+@(?P<host>[A-Za-z][\w.-]*)(?::[^\s$#%]*| [^\]\n]{0,80}\])\s?[$#%]",
                     re.M)
#: classic syslog / journalctl short format: ``Mon DD HH:MM:SS host tag[pid]:``, or an ISO stamp first
_SYSLOG = re.compile(
    r"^(?:<\d+>)?(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*)"
    r" (?P<host>[A-Za-z][\w.-]*) [\w./@-]+(?:\[\d+\])?: ", re.M)
#: NCCL_DEBUG=INFO lines: ``host:pid:tid [dev] NCCL INFO``
_NCCL = re.compile(r"(?:^|\] )(?P<host>[A-Za-z][\w.-]*):\d+:\d+ \[\d+\] NCCL (?:INFO|WARN)", re.M)
#: ``hostname`` typed at a prompt (or bare), and the one word printed under it
_HOSTNAME = re.compile(r"^(?:.*[$#%] |\$ )?hostname(?: -[sf])?\s*\n(?P<host>[A-Za-z][\w.-]*)\s*$", re.M)
#: ``kubectl describe pod``'s ``Node: gpu-b/10.0.0.2``; a pod spec's ``nodeName: gpu-b``
_NODE = re.compile(r"^\s*(?:Node|nodeName|NODE_NAME|node_name)\s*[:=]\s*\"?(?P<host>[A-Za-z][\w.-]*)", re.M)
#: journald's own field: ``"_HOSTNAME":"gpu-b"`` (``-o json``), ``_HOSTNAME=gpu-b`` (``-o export``/``verbose``)
_JOURNAL = re.compile(r'(?:"_HOSTNAME"\s*:\s*"|^\s*_HOSTNAME=)(?P<host>[A-Za-z][\w.-]*)', re.M)
#: names that are not a machine (localhost, a prompt's placeholder)
_NOT_HOSTS = frozenset({"localhost", "host", "hostname", "kernel", "h", "example", "server", "machine"})


def stated_hosts(text: str) -> Counter[str]:
    """How many times each host name is stated in ``text``, weighted by how sure each way is.

    >>> stated_hosts("gpu-a:311:311 [0] NCCL INFO Bootstrap\\ngpu-a:312:312 [1] NCCL INFO Bootstrap\\n")
    Counter({'gpu-a': 2})
    """
    found: Counter[str] = Counter()
    for pattern, weight in ((_HOSTNAME, 50), (_NODE, 20), (_PROMPT, 3), (_SYSLOG, 1), (_JOURNAL, 1), (_NCCL, 1)):
        for m in pattern.finditer(text):
            host = m.group("host").rstrip(".")
            if host.lower() in _NOT_HOSTS or re.fullmatch(r"[\d.]+", host):
                continue  # an address names a machine reached, not the one the text is from
            found[host] += weight
    return found


def stated_host(text: str) -> str | None:
    """The host ``text`` most often says it is from, or None."""
    found = stated_hosts(text)
    if not found:
        return None
    (best, n), *rest = found.most_common(2) + [("", 0)]
    return best if n > rest[0][1] else None

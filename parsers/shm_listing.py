"""A line of an ``ls -l`` listing naming a shared-memory segment an inference engine or its libraries create.

People paste ``ls -la /dev/shm`` into a ticket when /dev/shm fills up; the names say who made each file:

* ``psm_<8 hex>``: CPython's ``multiprocessing.shared_memory`` (Lib/multiprocessing/shared_memory.py
  ``_make_filename``: ``"/psm_" + secrets.token_hex(4)``) — vLLM's shm-broadcast ring buffer, SGLang's IPC;
* ``nccl-XXXXXX``: NCCL's segments (src/misc/shmutils.cc: a ``/dev/shm/nccl-XXXXXX`` mkstemp template;
  reference/failure_messages.md §4.1 ``failed to extend {/dev/shm/nccl-XXXXXX}``);
* ``vllm_offload_*.mmap``: vLLM's KV-offload region (vllm/v1/kv_offload/cpu/shared_offload_region.py);
* ``sglang*``, ``sgl_shm_*``: SGLang's own segments; ``torch_*``: PyTorch's file-descriptor sharing.

The size column is read as ``ls`` prints it: bytes, or ``-h``'s powers of 1024 (``101M`` = 101 MiB).

>>> r = shm_file("-rw-------  1 root root 101M Oct 11 04:32 psm_04a1e52f")
>>> (r["bytes"], r["name"], r["owner"], r["mtime"])
(105906176, 'psm_04a1e52f', 'psm', 'Oct 11 04:32')
>>> shm_file("-rw-r--r-- 1 root root 4096 Oct 11 04:32 model.safetensors") is None
True
"""

from __future__ import annotations

import re
from typing import Any

#: ``ls -l``: mode (with an ACL/attribute mark), links, user, group, size, date (``Mon DD HH:MM`` or
#: ``Mon DD YYYY``, or ``--time-style`` ISO), name
_LS_LINE = re.compile(
    r"^[-dlcbps][rwxsStT-]{9}[.+@]?\s+\d+\s+\S+\s+\S+\s+(?P<size>\d+(?:[.,]\d+)?[KMGTP]?)\s+"
    r"(?P<mtime>[A-Z][a-z]{2}\s+\d{1,2}\s+(?:\d\d:\d\d|\d{4})|\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d)?)\s+"
    r"(?:/dev/shm/)?(?P<name>\S+)\s*$")
#: who made a segment, by its name
_OWNERS = (
    ("psm", re.compile(r"psm_[0-9a-f]{8}")),
    ("nccl", re.compile(r"nccl-[A-Za-z0-9]{6}")),
    ("vllm", re.compile(r"vllm_offload_\S+\.mmap|VLLM_\S+")),
    ("sglang", re.compile(r"sglang\S*|sgl_shm_\S+")),
    ("torch", re.compile(r"torch_\d+_\S+")),
)
_UNIT = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def shm_file(line: str) -> dict[str, Any] | None:
    """The segment a listing line names (``bytes``, ``name``, ``owner``, ``mtime`` as printed), or None."""
    m = _LS_LINE.match(line.strip())
    if m is None:
        return None
    name = m.group("name")
    owner = next((who for who, rx in _OWNERS if rx.fullmatch(name)), None)
    if owner is None:
        return None
    size = m.group("size").replace(",", ".")
    unit = size[-1] if size[-1] in _UNIT and not size[-1].isdigit() else ""
    value = float(size[:-1] if unit else size)
    return {"bytes": int(value * _UNIT[unit]), "name": name, "owner": owner, "mtime": m.group("mtime")}

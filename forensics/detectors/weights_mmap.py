"""VLLM-HOST-003 / SGL-HOST-012: mapping a checkpoint shard failed with ENOMEM while the weights loaded.

Both engines read safetensors shards through ``safe_open`` (vllm vllm/model_executor/model_loader/weight_utils.py::
safetensors_weights_iterator (0.4-0.11), sglang python/sglang/srt/model_loader/weight_utils.py::
safetensors_weights_iterator (0.4-0.5)). For ``framework="pt"`` safetensors builds each file's storage with
``torch.UntypedStorage.from_file``, which maps the whole file ``MAP_PRIVATE`` and writable; when ``mmap(2)`` fails,
PyTorch raises (pytorch aten/src/ATen/MapAllocator.cpp::MapAllocator::MapAllocator (1.x-2.x))::

    RuntimeError: unable to mmap 4983123456 bytes from file </models/m/model-00003-of-00030.safetensors>: Cannot allocate memory (12)

and safetensors' own Rust mapping reports the same errno as Rust prints an OS error (``Cannot allocate memory (os
error 12)``). This is host memory, never the GPU's: mmap(2) returns ENOMEM when the address space or the number of
mappings is exhausted (``vm.max_map_count``, ``ulimit -v``), or, for a private writable mapping, when the kernel's
commit accounting refuses the charge (``vm.overcommit_memory=2``: every rank's mapped shards count against
``CommitLimit``, proc(5)), and a container's memory limit bounds what the ranks that read their shards at once
can fault in. ``--gpu-memory-utilization`` / ``--mem-fraction-static`` change nothing here.
"""

from __future__ import annotations

import re

from forensics.facts import engines
from forensics.facts.host_memory import host_memory
from forensics.facts.launch import server_config
from forensics.facts.rows import Row, attrs, rows
from forensics.model import Finding, FlagChange, Timeline

from ._common import fmt_gib, make_finding

# pytorch aten/src/ATen/MapAllocator.cpp::MapAllocator::MapAllocator (1.x-2.x): the size, the file, strerror and errno
_TORCH_MMAP = re.compile(r"unable to mmap (\d+) bytes from file <([^>\n]{1,1000})>: Cannot allocate memory \(12\)")
# safetensors bindings/python/src/lib.rs (0.3-0.6): an io::Error from the file's mapping, as Rust's std prints an OS
# error (``{strerror} (os error {errno})``); Python's OSError for the same errno (``[Errno 12] Cannot allocate memory``)
_OS_ENOMEM = re.compile(r"Cannot allocate memory \(os error 12\)|\[Errno 12\] Cannot allocate memory")
#: the weight loader's frames (the iterators above) or the shard's name: the mapping was a checkpoint's
# vllm vllm/model_executor/model_loader/weight_utils.py (0.4-0.11), sglang python/sglang/srt/model_loader/weight_utils.py
_WEIGHT_READ = re.compile(r"safe_open|safetensors_weights_iterator|\.safetensors\b|load_weights|weight_loader")

_KINDS = ("exception", "scheduler_exception", "failure", "traceback")


def _message(row: Row) -> str:
    a = attrs(row)
    return " ".join(str(x) for x in (a.get("exception_message"), a.get("message"), row.get("text")) if x)


def _frames(row: Row) -> str:
    return " ".join(str(f) for f in attrs(row).get("frames") or [])


def mmap_enomem(row: Row) -> tuple[int | None, str | None] | None:
    """(bytes, file) of a failed shard mapping this row reports, else None.

    >>> mmap_enomem({"kind": "exception", "attrs": '{"exception_message": "unable to mmap 4096 bytes from file '
    ...              '</m/a.safetensors>: Cannot allocate memory (12)"}'})
    (4096, '/m/a.safetensors')
    >>> mmap_enomem({"kind": "failure", "text": "OSError: [Errno 12] Cannot allocate memory", "attrs": "{}"}) is None
    True
    """
    msg = _message(row)
    m = _TORCH_MMAP.search(msg)
    if m:
        return int(m.group(1)), m.group(2)
    if _OS_ENOMEM.search(msg) and _WEIGHT_READ.search(msg + " " + _frames(row)):
        return None, None
    return None


def _commit(tl: Timeline) -> tuple[int, int, Row] | None:
    """(CommitLimit, Committed_AS, row) of the last /proc/meminfo that states both."""
    for r in reversed(rows(tl, "host_memory")):
        a = attrs(r)
        if a.get("commit_limit_bytes") and a.get("committed_as_bytes") is not None:
            return int(a["commit_limit_bytes"]), int(a["committed_as_bytes"]), r
    return None


def detect(tl: Timeline) -> list[Finding]:
    hits = [(r, found) for r in rows(tl, *_KINDS) if (found := mmap_enomem(r)) is not None]
    if not hits:
        return []
    row, (size, path) = next(((r, f) for r, f in hits if f[0]), hits[0])
    engine = engines.engine_of([row]) or engines.engine_of(rows(tl, "launch_command")) or "sglang"
    cfg = server_config(tl)
    tp = cfg.num(engines.flag_for(engine, "tensor_parallel") or "") or 1
    pp = cfg.num(engines.flag_for(engine, "pipeline_parallel") or "") or 1
    nnodes = cfg.num("nnodes") or 1
    ranks = max(int(tp * pp // max(nnodes, 1)), 1)
    mem = host_memory(tl)
    commit = _commit(tl)
    shard = f"a {fmt_gib(size)} shard" if size else "a checkpoint shard"
    name = f" ({path.rsplit('/', 1)[-1]})" if path else ""
    summary = (f"Mapping {shard}{name} of the weights failed with ENOMEM (Cannot allocate memory) while the model "
               "loaded: host memory or a mapping limit ran out, not the GPU's memory. Each rank maps every shard it "
               "reads, whole and private" + (f", and {ranks} ranks on this host read theirs at once" if ranks > 1
                                             else "") + ".")
    evidence = [row]
    decide = []
    if commit:
        limit, used, crow = commit
        evidence.append(crow)
        summary += (f" /proc/meminfo shows Committed_AS {fmt_gib(used)} against CommitLimit {fmt_gib(limit)}"
                    + (": the commit accounting is at its limit (strict overcommit refuses the mapping)."
                       if size and used + size > limit else "."))
    else:
        decide.append("CommitLimit / Committed_AS")
    if mem.capacity:
        if mem.limit_row is not None:
            evidence.append(mem.limit_row)
        summary += f" The host or container allows {fmt_gib(mem.capacity)}."
    else:
        decide.append("the host's RAM and the container's memory limit")
    actions = [
        "Read what limit refused it: `sysctl vm.overcommit_memory vm.overcommit_ratio vm.max_map_count`, "
        "`grep -E 'CommitLimit|Committed_AS' /proc/meminfo`, `ulimit -v` in the server's shell, and the container's "
        "memory limit (`cat /sys/fs/cgroup/memory.max`).",
        "With vm.overcommit_memory=2, raise vm.overcommit_ratio (or add swap) so CommitLimit covers the shards every "
        "rank maps, or set vm.overcommit_memory=0; lift `ulimit -v`; raise vm.max_map_count (65530 by default) for "
        "checkpoints of many shards.",
        "Or give the host (or the container) RAM for the shards all ranks read at once, or load fewer ranks at a "
        "time.",
        "Do not lower the GPU memory fraction for this error: the failure is in host memory.",
    ]
    flags = []
    if engine == "sglang":
        old = cfg.get("weight_loader_disable_mmap")
        if not cfg.enabled("weight_loader_disable_mmap"):
            flags.append(FlagChange("--weight-loader-disable-mmap", None if old is None else str(old), "true",
                                    "SGLang then reads each shard into memory instead of mapping it, so no private "
                                    "mapping is charged per rank (sglang python/sglang/srt/server_args.py, 0.4.8+)"))
    return [make_finding(
        "VLLM-HOST-003" if engine == "vllm" else "SGL-HOST-012",
        summary=summary,
        evidence=evidence,
        # the mechanism is certain from the message with its size; which limit refused it is what the facts decide
        confidence="high" if size and not decide else "medium",
        confidence_reason=(f"not in the input: {', '.join(decide)} (which limit refused the mapping)"
                           if decide else None if size else "the mapping's size is not in the message"),
        figures={"shard_bytes": size, "shard_file": path, "ranks_on_host": ranks,
                 "host_capacity_bytes": mem.capacity,
                 "commit_limit_bytes": commit[0] if commit else None,
                 "committed_as_bytes": commit[1] if commit else None},
        flags=flags,
        actions=actions,
    )]

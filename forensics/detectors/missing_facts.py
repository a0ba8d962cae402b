"""What a finding could not see, and the command that gets it.

A finding made without a deciding fact (host RAM, the GPUs' size, the launch command, the engine
version, the kernel log, the process table) still names the likely cause at the confidence it has;
this says in one line which missing fact would confirm it and how to collect it. Facts are looked for
in the timeline as a whole, so a fact anywhere in the input counts as seen.
"""

from __future__ import annotations

from collections.abc import Callable

from forensics.facts.rows import rows
from forensics.facts.versions import sglang_version
from forensics.model import SEVERITY_RANK, Finding, Timeline

#: fact → (words, the command that collects it)
FACTS: dict[str, tuple[str, str]] = {
    "host_memory": ("host RAM", "free -g"),
    "gpu_memory": ("the GPUs' memory", "nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv"),
    "launch": ("the launch command", "tr '\\0' ' ' < /proc/<server pid>/cmdline  (or the launch script)"),
    "version": ("the engine version", "pip show sglang vllm 2>/dev/null | grep -E '^(Name|Version)'"),
    "kernel_log": ("the kernel log", "dmesg -T | tail -500  (or journalctl -k --since '2 hours ago')"),
    "processes": ("the process table", "ps -eo pid,ppid,stat,etime,rss,args; "
                                       "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv"),
}

#: category → the facts its arithmetic or its verdict rests on, most deciding first
NEEDS: dict[str, tuple[str, ...]] = {
    "per_rank_overallocation": ("host_memory", "launch", "version"),
    "cuda_graph_headroom": ("gpu_memory", "launch"),
    "weights_do_not_fit": ("gpu_memory", "launch"),
    "kv_cache_capacity": ("launch", "gpu_memory"),
    "stranded_context": ("processes", "gpu_memory"),
    "host_memory_not_reclaimed": ("host_memory", "processes"),
    "kernel_oom_killer": ("kernel_log", "host_memory"),
    "xid": ("kernel_log",),
    "nccl_timeout": ("launch", "kernel_log"),
    "other": ("kernel_log", "launch"),
}


def _present(tl: Timeline) -> dict[str, bool]:
    has: dict[str, Callable[[], bool]] = {
        "host_memory": lambda: bool(rows(tl, "host_memory")),
        "gpu_memory": lambda: bool(rows(tl, "gpu_memory", "weight_load_begin"))
        or any(r.get("total_bytes") for r in rows(tl, "cuda_oom")),
        "launch": lambda: bool(rows(tl, "launch_command", "server_args")),
        "version": lambda: sglang_version(tl)[0] is not None or bool(tl.facts.versions),
        "kernel_log": lambda: not tl.events.is_empty() and "kernel" in set(tl.events.get_column("source").to_list()),
        "processes": lambda: bool(rows(tl, "process", "gpu_process", "gpu_process_none")),
    }
    return {k: f() for k, f in has.items()}


def annotate(tl: Timeline, findings: list[Finding]) -> None:
    """Add ``figures.missing_facts`` and a "To confirm" action to findings that lacked a deciding fact."""
    if not findings:
        return
    present = _present(tl)
    for f in findings:
        if f.confidence == "high" or SEVERITY_RANK[f.severity] > SEVERITY_RANK["medium"] or f.consequence_of:
            continue
        missing = [k for k in NEEDS.get(f.category, ()) if not present.get(k, True)]
        if not missing:
            continue
        f.figures["missing_facts"] = [{"fact": FACTS[k][0], "command": FACTS[k][1]} for k in missing]
        f.remediation.actions.insert(0, "To confirm: " + "; ".join(f"{FACTS[k][0]} — `{FACTS[k][1]}`"
                                                                   for k in missing[:2]) + ".")

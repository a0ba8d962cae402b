"""SGL-HOST-004: the kernel OOM killer killed a process (an SGLang scheduler, most often).
SGL-HOST-005: a scheduler SIGKILLed with no kernel log, read as a suspected OOM kill (one node).
SGL-RUN-080: a scheduler SIGKILLed during a multi-node start-up with no kernel evidence: the killer is unknown.

On several nodes a SIGKILL at start-up has more senders than the OOM killer: SGLang arms every scheduler to
die by SIGKILL when its parent dies (sglang python/sglang/srt/utils.py::kill_itself_when_parent_died
(0.4-0.5): ``prctl(PR_SET_PDEATHSIG, SIGKILL)``), the launcher of a failed start kills its process tree,
and a job launcher (srun, torchrun, Ray, Kubernetes) stops one node's processes when another node failed.
The engine's line is only what its parent saw (sglang python/sglang/srt/entrypoints/engine.py::
_launch_subprocesses (0.4-0.5): ``Rank {i} scheduler is dead. Please check if there are relevant logs.``
then ``Exit code: {exitcode}``, multiprocessing's -signal); the kernel's ``Killed process`` line
(linux mm/oom_kill.c (6.x)) or a cgroup's ``memory.events`` ``oom_kill`` count decides.

Sample (kernel 6.x)::

    Out of memory: Killed process 41873 (sglang::schedul) total-vm:612345678kB, anon-rss:1234567kB,
    file-rss:0kB, shmem-rss:301234567kB, UID:0 pgtables:654321kB oom_score_adj:0

The 15-character ``comm`` of a scheduler is ``sglang::schedul``; pinned host pools show as shmem.

>>> victim_is_sglang("sglang::schedul", None), victim_is_sglang("python3", "python3 -m sglang.launch_server")
(True, True)
>>> victim_is_sglang("java", None)
False
"""

from __future__ import annotations

import polars as pl

from forensics.facts.launch import server_config
from forensics.facts.lifecycle import is_sglang_process, kill_commands, same_moment
from forensics.facts.rows import Row, attrs, before, rank_of, rows
from forensics.facts.runs import iter_runs, of_kind
from forensics.facts.stages import Reached, furthest, served, spans_nodes_said
from forensics.model import Finding, Timeline

from ._common import fmt_gib, make_finding, tag_run

SIGKILL_CODES = (-9, 137)  # multiprocessing's -signal, and a shell's 128 + 9


def victim_is_sglang(comm: str | None, args: str | None) -> bool:
    return is_sglang_process(comm, args)


def victim_is_vllm(comm: str | None, args: str | None) -> bool:
    """vLLM's process titles (``VLLM::Worker_TP0``, ``VLLM::EngineCore``: vllm/utils ``set_process_title``, 0.8+)
    or a command line that runs it.

    >>> victim_is_vllm("VLLM::Worker_TP", None), victim_is_vllm("python3", "vllm serve m"), victim_is_vllm("java", None)
    (True, True, False)
    """
    c = str(comm or "")
    return c.upper().startswith("VLLM") or "vllm" in str(args or "").lower()


def _args_by_pid(tl: Timeline) -> dict[int, str]:
    return {int(r["pid"]): str(attrs(r).get("args") or "") for r in rows(tl, "process") if r.get("pid") is not None}


#: failure lines (parsers.failures) that tie a death to host memory: a kernel kill line pasted without its
#: block, a container runtime's OOMKilled, systemd's oom-kill result, Ray's memory monitor
MEMORY_KILL_CLASSES = ("oom_killed", "ray_oom")


def _memory_kill_lines(tl: Timeline) -> list[Row]:
    return [r for r in rows(tl, "failure") if attrs(r).get("failure") in MEMORY_KILL_CLASSES]


def detect(tl: Timeline) -> list[Finding]:
    kills = rows(tl, "oom_kill")
    if not kills:
        lines = _memory_kill_lines(tl)
        return _from_lines(lines) if lines else _sigkilled_without_kernel_log(tl)
    args = _args_by_pid(tl)
    victims = []
    for r in kills:
        a = attrs(r)
        victims.append((r, victim_is_sglang(r.get("comm"), args.get(int(r["pid"])) if r.get("pid") else None), a))
    sglang = [v for v in victims if v[1]]
    vllm = [v for v in victims if not v[1] and victim_is_vllm(v[0].get("comm"), args.get(int(v[0]["pid"]))
                                                             if v[0].get("pid") else None)]
    names = sorted({f"{r.get('comm')} (pid {r.get('pid')})" for r, _, _ in victims})
    memcg = sorted({str(a.get("constraint")) for _, _, a in victims if a.get("constraint")})
    shmem = sum(int(a.get("shmem_rss_bytes") or 0) for _, _, a in victims)
    rss = sum(int(r.get("used_bytes") or 0) for r, _, _ in victims)
    in_cgroup = any("MEMCG" in c for c in memcg)
    summary = (f"The kernel OOM killer killed {len(victims)} process{'es' if len(victims) > 1 else ''}: "
               + ", ".join(names[:6]) + (" …" if len(names) > 6 else "")
               + (f" ({fmt_gib(rss)} resident, {fmt_gib(shmem)} of it shared/pinned)" if rss else "")
               + (" inside a memory cgroup limit (container)" if in_cgroup else "") + ". "
               + ("SGLang schedulers were among the victims: the server died without a Python traceback."
                  if sglang else "vLLM's processes were among the victims: the engine died without a Python "
                  "traceback (its parent only sees the child vanish: 'died unexpectedly')."
                  if vllm else "No SGLang or vLLM process was a victim."))
    # the engine's own line for the same death (its parent saw the child vanish: exit code -9) is this kill, and
    # where its start-up had got to is what was filling host memory (loading the weights, building host pools)
    deaths = [d for d in _sigkill_deaths(tl) if any(same_moment(d, k) for k in kills)] if sglang or vllm else []
    reached = _start_up_stage(tl) if deaths else None
    if reached is not None:
        summary += (f" The server had not started: its last start-up stage was {reached.stage} "
                    f"({reached.row.get('file')}:{reached.row.get('line')}).")
    actions = ["Find what filled host memory before the kill (HiCache pools: SGL-HOST-001; other tenants) and size it "
               "to fit; `dmesg -T | grep -i -B2 -A8 'invoked oom-killer'` shows the whole report."]
    if vllm:
        actions.insert(0, "Lower vLLM's largest host pool: each worker holds its own (--cpu-offload-gb, V0's "
                          "--swap-space, --kv-offloading-size, LMCache's CPU pool; VLLM-HOST-001 adds them up).")
    if in_cgroup:
        actions.append("The limit was a memory cgroup (container): raise docker --memory / the pod limit or shrink the "
                       "pools to it.")
    return [make_finding(
        "SGL-HOST-004",
        summary=summary,
        evidence=[*(r for r, _, _ in victims), *deaths[:4], *([reached.row] if reached is not None else [])],
        confidence="high",
        severity="critical" if sglang else "high",
        figures={"victims": names, "victim_count": len(victims), "sglang_victims": len(sglang),
                 "vllm_victims": len(vllm),
                 "victim_rss_bytes": rss, "victim_shmem_rss_bytes": shmem, "constraints": memcg},
        actions=actions,
    )]


#: a process's death by SIGKILL as its parent saw it: an exit code, a failed start, or the shell's own ``Killed``
#: (bash's strsignal(SIGKILL) for a foreground job, the same -9 a supervisor reports)
_DEATH_CLASSES = ("process_exit", "startup_failed", "signal")


def _sigkill_deaths(tl: Timeline) -> list[Row]:
    """The engine's lines for a child that died of SIGKILL (sglang engine.py ``Rank {i} scheduler died during
    initialization (exit code: -9)`` / ``is dead``, multiprocessing's -signal; vLLM's supervisor's exit code)."""
    return [r for r in rows(tl, "rank_dead", "subprocess_crashed", "failure") if r.get("code") in SIGKILL_CODES
            and (r.get("kind") != "failure" or attrs(r).get("failure") in _DEATH_CLASSES)
            and not (r.get("text") or "").lstrip().startswith("#")]


def _start_up_stage(tl: Timeline) -> Reached | None:
    """Where the start-up was when the kill came, when it had not finished (facts/stages.py's stage order)."""
    for _ref, run in iter_runs(tl):
        if not served(run):
            reached = furthest(run)
            if reached is not None:
                return reached
    return None


def _recorded_oom_kill(tl: Timeline, death: Row) -> Row | None:
    """The flight recorder's ``oom_kill_count`` row (``/proc/vmstat`` or a cgroup's ``memory.events``
    counter rising) within a minute of ``death``, when both carry a time."""
    if death.get("ts") is None:
        return None
    near = [r for r in rows(tl, "oom_kill_count") if r.get("ts") is not None
            and abs((r["ts"] - death["ts"]).total_seconds()) <= 60]
    return min(near, key=lambda r: abs((r["ts"] - death["ts"]).total_seconds())) if near else None


def _sigkilled_without_kernel_log(tl: Timeline) -> list[Finding]:
    """SGL-HOST-005: a scheduler SIGKILLed (exit -9) and no kernel log to tell who killed it.

    Not when the input has a kernel log (it would show the OOM kill: someone else sent the signal) or a
    ``kill -9``/``pkill`` typed before the death (the operator did).
    """
    ev = tl.events
    if "source" in ev.columns and not ev.filter(pl.col("source") == "kernel").is_empty():
        return []
    kills = kill_commands(tl)
    out = []
    for ref, run in iter_runs(tl):
        dead = [r for r in of_kind(run, "rank_dead", "subprocess_crashed", "failure") if r.get("code") in SIGKILL_CODES
                and (r.get("kind") != "failure" or attrs(r).get("failure") in _DEATH_CLASSES)
                and not (r.get("text") or "").lstrip().startswith("#")]
        dead = [r for r in dead if not any(before(k.as_row(), r) for k in kills)]
        if not dead:
            continue
        first = dead[0]
        ranks = [x for x in (rank_of(r) for r in dead) if x is not None]
        counted = _recorded_oom_kill(tl, first)
        nodes = _nodes_of(tl, run)
        if counted is None and nodes and not served(run):
            out.append(tag_run(_killer_unknown(run, dead, ranks, nodes), ref))
            continue
        seen = (f" The flight recorder's OOM-kill counter rose at {counted['ts']:%H:%M:%S} UTC ({counted.get('text')}): "
                "the kernel did kill a process then." if counted else " The input has no kernel log to confirm it.")
        out.append(tag_run(make_finding(
            "SGL-HOST-005",
            summary=(f"A {'scheduler' if first.get('kind') != 'failure' else 'server process'}"
                     f"{f' (rank {ranks[0]})' if ranks else ''} was killed by SIGKILL (exit code "
                     f"{first['code']}) without a Python traceback: most often the kernel OOM killer (host RAM or a "
                     "container memory limit ran out)." + seen),
            evidence=[*dead[:4], *([counted] if counted else [])],
            confidence="medium" if counted else "low",
            confidence_reason=("no kernel log to name the victim: the recorded OOM-kill counter rose within a minute of "
                               "the death" if counted else
                               "no kernel log (dmesg/journal) in the input: the OOM kill is inferred from exit code -9; "
                               "`kill -9` or the container runtime give the same code"),
            ranks=ranks,
            figures={"exit_code": first["code"], "dead_ranks": ranks or None},
            actions=["Confirm in the kernel log of the same minutes: `dmesg -T | grep -iE 'killed process|oom'` or "
                     "`journalctl -k --since …`; in a container also `docker inspect -f '{{.State.OOMKilled}}' <ctr>`.",
                     "If it was the OOM killer: find what filled host memory (HiCache pools per rank: SGL-HOST-001; "
                     "model loading into host RAM; other tenants) and size it, or raise the container's memory limit."],
        ), ref))
    return out


def _nodes_of(tl: Timeline, run: list[Row]) -> str | None:
    """What says the server spans several nodes (``--nnodes`` above 1, a rank's "spans across nodes", several
    hosts' evidence), else None."""
    nnodes = server_config(tl, run).num("nnodes") or server_config(tl).num("nnodes")
    if nnodes and nnodes > 1:
        return f"--nnodes {nnodes:g}"
    if spans_nodes_said(run):
        return "a rank's process group spans across nodes"
    if len(tl.facts.hosts) > 1:
        return f"evidence from {len(tl.facts.hosts)} hosts"
    return None


def _killer_unknown(run: list[Row], dead: list[Row], ranks: list[int], nodes: str) -> Finding:
    """SGL-RUN-080: SIGKILLed during a multi-node start-up; nothing in the input says who sent the signal."""
    first = dead[0]
    reached = furthest(run)
    where = f" (it had reached {reached.stage})" if reached else ""
    who = f"rank {ranks[0]}'s scheduler" if ranks else "a server process"
    summary = (f"During the multi-node start-up ({nodes}), {who} was killed by SIGKILL (exit code {first['code']}) "
               f"without a Python traceback{where}. Who sent the signal is not in the input: the kernel OOM killer is "
               "one sender, but at a multi-node start so are SGLang itself (each scheduler dies by SIGKILL when its "
               "parent process dies), the launcher of a failed start tearing its process tree down, and a job "
               "launcher (srun, torchrun, Ray, Kubernetes) stopping this node after another node failed. No kernel "
               "OOM report or cgroup OOM count is in the input, so this is not read as an OOM kill.")
    return make_finding(
        "SGL-RUN-080",
        summary=summary,
        evidence=dead[:4],
        confidence="medium",
        confidence_reason=("the signal's sender is unknown: the kernel log of that node (an OOM `Killed process` "
                           "line or none) and its cgroup's memory.events decide"),
        ranks=ranks,
        figures={"exit_code": first["code"], "dead_ranks": ranks or None, "multi_node_from": nodes,
                 "stage_reached": reached.stage if reached else None},
        actions=["Decide who killed it: on the node where the rank died, `dmesg -T | grep -iE 'killed process|"
                 "oom-kill'` (or `journalctl -k` for the same minutes) and the container's cgroup "
                 "`cat /sys/fs/cgroup/memory.events` (its oom_kill count); an OOM kill names the pid there.",
                 "Read the other nodes' logs of the same minutes: a traceback on another node (a failed "
                 "rendezvous, a load error) followed by this node's SIGKILL is the teardown, not memory.",
                 "If the kernel did kill it for memory, size the host's memory users per node (weights read "
                 "through the page cache, HiCache pools) or raise the container's limit."],
    )


def _eviction_words(evicted: list[Row]) -> tuple[str, list[str]]:
    """The kubelet's node-pressure eviction (failure_messages.md §5.3 «Kubernetes»): the node's memory ran short and
    the kubelet evicted the pod using the most above its memory request — not the container's own limit."""
    r = next((x for x in evicted if x.get("comm")), evicted[0])
    used, request = r.get("used_bytes"), attrs(r).get("request_bytes")
    who = (f"; its container {r['comm']} was using {fmt_gib(used)}"
           + (f" against a memory request of {fmt_gib(request)}" if request else " with no memory request")
           if r.get("comm") and used else "")
    summary = ("Kubernetes evicted the pod because the node ran low on memory (the kubelet's node-pressure eviction, "
               "not the container's own limit)" + who + ": the kubelet evicts first the pods furthest above their "
               "memory requests.")
    actions = ["Set the container's memory request to what it really uses (requests = limits gives the pod Guaranteed "
               "QoS, evicted last), or give the node more memory / fewer pods; the engine's host pools (HiCache, swap, "
               "offload) count in that use.",
               "See what else filled the node: `kubectl describe node <node>` (Allocated resources, MemoryPressure) "
               "and `kubectl top pods -A --sort-by=memory`."]
    return summary, actions


def _from_lines(lines: list[Row]) -> list[Finding]:
    """SGL-HOST-004 from kill lines without the kernel's whole OOM report (a pasted fragment, a runtime's word)."""
    victims = sorted({str(r.get("comm")) for r in lines if r.get("comm")})
    sglang = [v for v in victims if victim_is_sglang(v, None)]
    ray = [r for r in lines if attrs(r).get("failure") == "ray_oom"]
    shmem = max((int(attrs(r).get("shmem_rss_bytes") or 0) for r in lines), default=0)
    used = max((int(r.get("used_bytes") or 0) for r in lines), default=0)
    total = max((int(r.get("total_bytes") or 0) for r in ray), default=0)
    summary = ("Host memory ran out and a process was killed for it"
               + (f": {', '.join(victims[:4])}" if victims else "")
               + (f" ({fmt_gib(used)} resident" + (f", {fmt_gib(shmem)} of it shared/pinned memory" if shmem else "") + ")"
                  if used else "")
               + (f"; Ray's memory monitor saw {fmt_gib(used)} of {fmt_gib(total)} in use" if ray and total else "")
               + "".join(f" (the cgroup's {attrs(r)['cgroup_file']} counts {attrs(r).get('oom_kills')} OOM kill(s))"
                         for r in lines[:1] if attrs(r).get("cgroup_file"))
               + ". " + ("SGLang's schedulers were killed: the server died without a Python traceback." if sglang
                         else ""))
    actions = ["Find what filled host memory (pinned/shared pools such as HiCache or offloaded weights and embeddings, "
               "model loading into RAM, other tenants) and size it to fit, or raise the container's memory limit.",
               "The whole kernel report (`dmesg -T | grep -i -B2 -A20 'invoked oom-killer'`) shows every process's "
               "memory at the kill."]
    if shmem:
        actions.insert(0, "Most of the victim's memory was shared/pinned (shmem-rss): a pinned host pool or an "
                          "offload buffer, not ordinary heap. Turn that offload off or size it down; on unified-memory "
                          "GPUs (GB10, GH200) pinned host memory comes out of the same RAM as the GPU's.")
    evicted = [r for r in lines if attrs(r).get("via") == "node_pressure_eviction"]
    if evicted:
        summary, actions = _eviction_words(evicted)
    counted = [r for r in lines if attrs(r).get("cgroup_file")]
    only_counted = len(counted) == len(lines)
    if only_counted:  # a cumulative counter: since the cgroup was created, any process, at a time it does not say
        summary = (f"The cgroup's {attrs(counted[0])['cgroup_file']} counts {attrs(counted[0]).get('oom_kills')} OOM "
                   "kill(s) since the cgroup was created: host memory ran out in this container at least once; the "
                   "counter does not say when or which process.")
    return [make_finding(
        "SGL-HOST-004",
        summary=summary.strip(),
        evidence=lines[:6],
        confidence="low" if only_counted else "medium",
        confidence_reason=("a cumulative counter: a death in the same minutes (a kernel `Killed process` line, an exit "
                           "code -9) ties it to this incident") if only_counted else
        "kill lines without the kernel's full OOM report: who filled memory is not in the input",
        severity="critical" if sglang else "medium" if only_counted else "high",
        figures={"victims": victims, "victim_rss_bytes": used or None, "victim_shmem_rss_bytes": shmem or None},
        actions=actions,
    )]

"""SGL-GPU-005: GPU memory still held after the server's processes were killed or exited.

Sources: SGL-GPU-005 reads nvidia-smi's per-GPU ``memory.used`` and process list (reference/system_formats.md
§2.1, §2.2) after the kill, against the processes still alive (ps(1)).

Seed phase 3, after ``pkill -9 -f sglang``::

    $ nvidia-smi --query-gpu=index,memory.used --format=csv,noheader
    0, 96413 MiB
    1, 99 MiB
    2, 96417 MiB

GPUs 0 and 2 stay ~full with no live owner while the others are empty: stranded CUDA contexts.

>>> held_threshold(97887 * 2**20) / 2**30
4.779638671875
>>> held_threshold(None) / 2**30
1.0
"""

from __future__ import annotations

from forensics.facts.gpu_map import fill_gpus, gpu_map
from forensics.facts.lifecycle import (
    end_events,
    group_snapshots,
    is_sglang_process,
    last_end_before,
    relaunched_between,
)
from forensics.facts.rows import Row, attrs, before, rows
from forensics.model import Finding, Timeline

from ._common import GIB, fmt_gib, make_finding

HELD_FRACTION = 0.05  # a GPU "holds memory" from max(1 GiB, 5% of its total)
CLEAN_BYTES = GIB  # below this a GPU counts as released (driver/persistence overhead is MiBs)


def held_threshold(total: int | None) -> float:
    return max(GIB, HELD_FRACTION * total) if total else GIB


ESCALATION = [
    "`fuser -v /dev/nvidia*` then `fuser -k -9 /dev/nvidia*` — when fuser lists processes still holding the "
    "device files (survivors of the kill).",
    "Look for processes stuck in uninterruptible sleep or zombies: `ps -eo pid,ppid,stat,comm | awk '$3 ~ /D|Z/'` "
    "— a D-state scheduler is usually unpinning a large host pool; wait for it or kill its parent; a zombie needs "
    "its parent reaped.",
    "`nvidia-smi --gpu-reset -i N` for each held GPU — only when no process uses it (bare metal, no MIG/"
    "persistence holder); it fails while a context is alive.",
    "In a container: kill from the host or hypervisor — `docker kill <ctr>`, `pct exec <id> -- pkill -9 -f sglang` "
    "or stop the container; processes inside cannot always be reached from inside.",
    "Reboot the host (or the VM) when D-state processes never exit.",
]


def _owners(snap: list[Row], procs: list[Row], nones: list[Row],
            cuts: list[Row] = ()) -> tuple[dict[int, list[Row]], bool, set[int], bool]:
    """GPU → owning processes in this snapshot; whether the input lists owners at all; GPUs listed empty;
    whether the process list was cut (a paste's elision inside the box: GPUs it does not list may have
    owners below the cut)."""
    key_file = snap[0].get("file")
    key_snap = snap[0].get("snapshot")

    def same(r: Row) -> bool:
        if key_snap is not None:
            return r.get("snapshot") == key_snap  # a bundle keeps one snapshot's files together
        return r.get("file") == key_file and r.get("snapshot") is None

    mine = [p for p in procs if same(p)]
    empty = [n for n in nones if same(n)]
    cut = any(same(c) for c in cuts)
    owners: dict[int, list[Row]] = {}
    for p in mine:
        if p.get("gpu") is not None:
            owners.setdefault(int(p["gpu"]), []).append(p)
    listed_empty = {int(n["gpu"]) for n in empty if n.get("gpu") is not None}
    if any(n.get("gpu") is None for n in empty):
        listed_empty |= {int(r["gpu"]) for r in snap if r.get("gpu") is not None}
    return owners, bool(mine or empty), listed_empty, cut


def _process_state(pid: int | None, ps: list[Row]) -> str | None:
    """The ps state of a pid: 'R', 'S', 'D', 'Z', … or 'gone' when ps was taken and lacks it; None unknown."""
    if pid is None or not ps:
        return None
    for r in ps:
        if r.get("pid") == pid:
            return str(attrs(r).get("state") or (attrs(r).get("stat") or "?")[:1])
    return "gone"


def _classify(snap: list[Row], owners: dict[int, list[Row]], ps: list[Row],
              list_cut: bool = False) -> tuple[list[Row], dict[int, str], list[Row]]:
    """Held GPUs without a healthy owner, the owners' states, and released GPUs. With a cut process list a
    GPU it does not list is not known to be ownerless: only listed owners that are dead or stuck count."""
    held, states, clean = [], {}, []
    for r in snap:
        used, gpu = r.get("used_bytes"), r.get("gpu")
        if used is None or gpu is None:
            continue
        if used < CLEAN_BYTES:
            clean.append(r)
            continue
        if used < held_threshold(r.get("total_bytes")):
            continue
        procs = owners.get(int(gpu), [])
        if not procs and list_cut:
            continue  # its rows may be below the cut
        st = [(p, _process_state(p.get("pid"), ps)) for p in procs]
        healthy = [p for p, s in st if s not in ("D", "Z", "gone")]
        if healthy and not any(is_sglang_process(p.get("comm")) for p in healthy):
            continue  # another workload owns it
        states[int(gpu)] = ",".join(f"{p.get('pid')}:{s or '?'}" for p, s in st) or "no owner listed"
        held.append(r)
    return held, states, clean


def detect(tl: Timeline) -> list[Finding]:
    # the flight recorder's series is read over time by SGL-REC-002, not as snapshots here
    gpu_rows = [r for r in rows(tl, "gpu_memory") if r.get("source") != "record"]
    if not gpu_rows:
        return []
    ends = end_events(tl)
    procs, nones, ps = rows(tl, "gpu_process"), rows(tl, "gpu_process_none"), rows(tl, "process")
    cuts = rows(tl, "gpu_process_cut")
    procs = fill_gpus(procs, gpu_map(tl))  # compute-apps rows name their GPU by UUID only
    verdicts = []
    for snap in group_snapshots(gpu_rows):
        first = min(snap, key=lambda r: r.get("line") or 0)
        end = last_end_before(ends, first)
        if end is not None and relaunched_between(tl, end, first):
            end = None
        owners, owner_info, listed_empty, list_cut = _owners(snap, procs, nones, cuts)
        held, states, clean = _classify(snap, owners, ps, list_cut)
        if not held:
            verdicts.append((snap, end, [], states, clean, owner_info))
            continue
        no_owner = all(int(r["gpu"]) in listed_empty or int(r["gpu"]) not in owners or "D" in states[int(r["gpu"])]
                       or "Z" in states[int(r["gpu"])] or "gone" in states[int(r["gpu"])] for r in held)
        if end is None and not (owner_info and no_owner):
            verdicts.append((snap, end, [], states, clean, owner_info))
            continue  # a running server legitimately uses its GPUs
        verdicts.append((snap, end, held, states, clean, owner_info))
    stranded = [v for v in verdicts if v[2]]
    if not stranded:
        return []
    snap, end, held, states, clean, owner_info = stranded[-1]
    held_gpus = sorted(int(r["gpu"]) for r in held)
    after = verdicts[verdicts.index(stranded[-1]) + 1:]
    released = [v for v in after if before(snap[0], v[0][0]) and {int(r["gpu"]) for r in v[4]} >= set(held_gpus)]
    reasons = []
    if end is None:
        reasons.append("no kill or crash in the input: 'after the server ended' is inferred from the empty process list")
    if not owner_info:
        reasons.append("no process list from nvidia-smi: owners not checked")
    kill = end is not None and end.get("kind") == "command"
    # high only with a kill and the owners checked; an asymmetric picture after a kill without owners is medium
    confidence = "high" if kill and not reasons else ("medium" if len(reasons) <= 1 or (kill and clean) else "low")
    per_gpu = {str(int(r["gpu"])): int(r["used_bytes"]) for r in held}
    summary = (
        f"GPU{'s' if len(held_gpus) > 1 else ''} {', '.join(map(str, held_gpus))} still "
        f"hold{'s' if len(held_gpus) == 1 else ''} "
        + ", ".join(fmt_gib(r["used_bytes"]) for r in sorted(held, key=lambda r: r["gpu"]))
        + (f" after {_end_words(end)}" if end is not None else " with no live owner")
        + (f", while GPUs {', '.join(str(int(r['gpu'])) for r in sorted(clean, key=lambda r: r['gpu']))} are released"
           if clean else "")
        + ": stranded CUDA contexts; a relaunch will fail on these GPUs until they are freed."
    )
    severity = None
    if released:
        rel = released[0][0][0]
        summary += f" They were released later ({rel.get('file')}:{rel.get('line')})."
        severity = "low"
    ev: list[Row] = [*held, *([end] if end is not None else [])]
    if released:
        ev.append(released[0][0][0])
    return [make_finding(
        "SGL-GPU-005",
        summary=summary,
        evidence=ev,
        confidence=confidence,
        confidence_reason="; ".join(reasons) or None,
        severity=severity,
        gpus=held_gpus,
        figures={"held_gpus": held_gpus, "held_bytes_per_gpu": per_gpu,
                 "released_gpus": sorted(int(r["gpu"]) for r in clean),
                 "owner_states": {str(k): v for k, v in sorted(states.items()) if k in held_gpus},
                 "asymmetric": bool(clean)},
        actions=[a.replace(" N` ", f" {','.join(map(str, held_gpus))}` ") for a in ESCALATION],
    )]


def _end_words(end: dict) -> str:
    if end.get("kind") == "command":
        return f"`{(end.get('text') or '').strip()[:80]}`"
    if end.get("kind") == "process":
        return "the SGLang processes exited (none in ps)"
    return f"the server stopped ({end.get('kind')})"

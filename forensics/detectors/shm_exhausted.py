"""SGL-HOST-006: /dev/shm could not back a shared-memory segment (SIGBUS, NCCL shm errors).

A process that touches a page of a shared-memory mapping the tmpfs cannot back gets SIGBUS: Python's
``Fatal Python error: Bus error``, exit code -7 (135 from a shell). On inference hosts that is
/dev/shm full — segments leaked by earlier runs that were killed (``psm_*``, ``nccl-*``, ``sglang*``),
or a container's 64 MiB default — not host RAM and not GPU memory::

    Fatal Python error: Bus error
    RuntimeError: Rank 0 scheduler died during initialization (exit code: -7)
"""

from __future__ import annotations

from forensics.facts.launch import launch_rows
from forensics.facts.rows import Row, attrs, rank_of, rows
from forensics.model import Finding, FlagChange, Timeline

from ._common import fmt_gib, make_finding
from .fatal_other import failure_class

#: a multi-GPU container below this /dev/shm size is the usual suspect (NCCL and the tokenizer IPC use it)
SMALL_SHM = 1 << 30
SUGGESTED_SHM = "16g"


def _sigbus(row: Row) -> bool:
    cls = failure_class(row)
    if cls == "shm_exhausted":
        return True
    if cls == "signal" and attrs(row).get("signal") == "Bus error":
        return True
    return row.get("kind") in ("failure", "rank_dead", "subprocess_crashed") and row.get("code") == -7


def detect(tl: Timeline) -> list[Finding]:
    hits = [r for r in rows(tl, "failure", "rank_dead", "subprocess_crashed") if _sigbus(r)]
    if not hits:
        return []
    direct = [r for r in hits if failure_class(r) == "shm_exhausted"]
    flags: list[FlagChange] = []
    shm = None
    for row in reversed(launch_rows(tl)):
        a = attrs(row)
        if a.get("launcher") in ("docker run", "compose") or "docker_shm_size_bytes" in a:
            shm = a.get("docker_shm_size_bytes")
            text = row.get("text") or ""
            small = not isinstance(shm, int | float) or shm < SMALL_SHM
            if small and "--ipc=host" not in text and "ipc: host" not in text:
                flags.append(FlagChange("--shm-size", fmt_gib(shm) if shm else None, SUGGESTED_SHM,
                                        "the container's /dev/shm "
                                        + (f"is {fmt_gib(shm)}" if shm else "is Docker's 64 MiB default")
                                        + "; NCCL and the server's IPC segments need gigabytes on a multi-GPU host"))
            break
    df = [r for r in direct if attrs(r).get("df_use_pct") is not None]
    died = [r for r in hits if r not in direct]
    what = []
    if died:
        what.append("a process died of SIGBUS")
    if any(r not in df for r in direct):
        what.append("/dev/shm could not back a segment")
    if df:
        what.append(f"/dev/shm is {max(attrs(r)['df_use_pct'] for r in df)} % used (df)")
    return [make_finding(
        "SGL-HOST-006",
        summary=(_first_upper(" and ".join(what))
                 + ": /dev/shm is full or too small (segments leaked by earlier killed runs, or a container's small "
                 "default), not host RAM and not GPU memory."),
        evidence=hits[:6] + [r for r in launch_rows(tl)[-1:] if flags],
        confidence="high" if direct else "medium",
        confidence_reason=None if direct else "SIGBUS points at /dev/shm; no `df -h /dev/shm` in the input confirms it",
        ranks=[x for x in (rank_of(r) for r in hits) if x is not None],
        figures={"sigbus_lines": len(hits), "shm_size_bytes": shm},
        flags=flags,
        actions=[
            "`df -h /dev/shm` and `ls -la --sort=size /dev/shm | head -30`: see what fills it.",
            "Remove segments left by runs that are gone (no process maps them: `fuser /dev/shm/<name>` prints nothing), "
            "e.g. stale `psm_*`, `nccl-*`, `sglang*` files; never delete a segment a live process maps.",
            "Give containers a real /dev/shm: `docker run --shm-size 16g` (or `--ipc=host`), or a memory-backed "
            "emptyDir on /dev/shm in Kubernetes.",
            "Make the supervisor clean up: kill the whole process group so segments are unlinked, or sweep /dev/shm "
            "between CI jobs.",
        ],
    )]


def _first_upper(text: str) -> str:
    return text[:1].upper() + text[1:]

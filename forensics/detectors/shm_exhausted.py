"""SGL-HOST-006: /dev/shm could not back a shared-memory segment (SIGBUS, NCCL shm errors).

A process that touches a page of a shared-memory mapping the tmpfs cannot back gets SIGBUS: Python's
``Fatal Python error: Bus error``, exit code -7 (135 from a shell). On inference hosts that is
/dev/shm full — segments leaked by earlier runs that were killed (``psm_*``, ``nccl-*``, ``sglang*``),
or a container's 64 MiB default — not host RAM and not GPU memory. Python's resource tracker's shutdown warning
(``There appear to be N leaked shared_memory objects``, parsers/failures.py ``leaked_at_shutdown``: cpython
Lib/multiprocessing/resource_tracker.py::main (3.8-3.13)) is no cause of its own: beside a full /dev/shm it says how
the segments got there, and is shown with the finding::

    Fatal Python error: Bus error
    RuntimeError: Rank 0 scheduler died during initialization (exit code: -7)
"""

from __future__ import annotations

import re

from forensics.facts.launch import launch_rows
from forensics.facts.rows import Row, attrs, rank_of, rows
from forensics.model import Finding, FlagChange, Timeline

from ._common import fmt_gib, make_finding
from .fatal_other import failure_class

#: a multi-GPU container below this /dev/shm size is the usual suspect (NCCL and the tokenizer IPC use it)
SMALL_SHM = 1 << 30
SUGGESTED_SHM = "16g"


#: the container shares the host's IPC namespace, so its /dev/shm is the host's (docker-run(1) ``--ipc``;
#: compose ``ipc: host``); the value may follow ``=`` or a space, quoted or not
HOST_IPC_RE = re.compile(r"--ipc(?:=|\s+)[\"']?host\b|\bipc\s*:\s*[\"']?host\b")


def _private_ipc_flags(shm: int | float | None) -> list[FlagChange]:
    """With ``--ipc=host`` a SIGBUS means the *host's* /dev/shm is full. Segments a killed run leaves
    there (NCCL's, the engine's IPC buffers, CPU all-reduce buffers) outlive its container and fill the
    tmpfs for every later container on the host. A private IPC namespace gives each container its own
    /dev/shm of ``--shm-size``, removed with the container (docker-run(1): ``--ipc`` "private" and
    ``--shm-size``; reference/failure_messages.md §SIGBUS row: /dev/shm full)."""
    why = ("--ipc=host puts the container's shared-memory segments in the host's /dev/shm, where those of killed "
           "runs stay after their container is gone; a private namespace confines them to the container")
    return [FlagChange("--ipc=host", "host", "(remove)", why),
            FlagChange("--shm-size", fmt_gib(shm) if shm else None, SUGGESTED_SHM,
                       "a private /dev/shm of its own, removed with the container; NCCL and the server's IPC "
                       "segments need gigabytes on a multi-GPU host")]


def is_sigbus(row: Row) -> bool:
    cls = failure_class(row)
    if cls == "shm_exhausted":
        return True
    if cls == "signal" and attrs(row).get("signal") == "Bus error":
        return True
    return row.get("kind") in ("failure", "rank_dead", "subprocess_crashed") and row.get("code") == -7


#: NCCL's result 2, ncclSystemError: a system call NCCL made failed (reference/failure_messages.md §4.2); at
#: communicator set-up on one host that is most often its /dev/shm segment (§4.1: the shm WARN "surfaces to
#: PyTorch as `unhandled system error`"), also a socket
_NCCL_SYSTEM_ERROR = re.compile(r"unhandled system error|ncclSystemError")
#: segments a container's default tmpfs (64 MiB, docker-run(1) --shm-size) could not hold: a listing of /dev/shm
#: holding this much of the engines' segments beside an NCCL system error says where the system call failed
LISTED_FULL = 64 << 20


def _nccl_system_error(row: Row) -> bool:
    if row.get("kind") not in ("nccl_error", "failure"):
        return False
    if row.get("kind") == "failure" and failure_class(row) != "nccl_error":
        return False
    return bool(_NCCL_SYSTEM_ERROR.search(f"{row.get('text') or ''} {attrs(row).get('message') or ''}"))


def listed_segments(tl: Timeline) -> list[Row]:
    """Engine and NCCL segments a pasted ``ls -l /dev/shm`` names (parsers/shm_listing.py), one row per file."""
    return [r for r in rows(tl, "shm_file") if isinstance(r.get("bytes"), int | float)]


def _reading_weights(row: Row) -> bool:
    """A SIGBUS whose faulting thread was loading the weights: the faulting mapping is a checkpoint file's."""
    a = attrs(row)
    return bool(a.get("faulting_thread")) and a.get("during") == "weight_load"


def _model_in_shm(tl: Timeline) -> bool:
    """The weights themselves are files in /dev/shm (a model copied there to load fast)."""
    for row in launch_rows(tl):
        path = str((attrs(row).get("flags") or {}).get("--model-path") or (attrs(row).get("flags") or {}).get("--model")
                   or "")
        if path.startswith("/dev/shm"):
            return True
    return False


def detect(tl: Timeline) -> list[Finding]:
    hits = [r for r in rows(tl, "failure", "rank_dead", "subprocess_crashed") if is_sigbus(r)]
    segments = listed_segments(tl)
    listed = sum(int(r["bytes"]) for r in segments)
    nccl_sys = [] if hits or listed < LISTED_FULL else \
        [r for r in rows(tl, "nccl_error", "failure") if _nccl_system_error(r)]
    if not hits and not nccl_sys:
        return []
    if nccl_sys:
        hits = nccl_sys[:2]
    direct = [r for r in hits if failure_class(r) == "shm_exhausted"]
    if not direct and any(_reading_weights(r) for r in hits) and not _model_in_shm(tl):
        return [_checkpoint_sigbus(tl, hits)]
    flags: list[FlagChange] = []
    shm = None
    host_ipc = False
    for row in reversed(launch_rows(tl)):
        a = attrs(row)
        if a.get("launcher") in ("docker run", "compose") or "docker_shm_size_bytes" in a or "docker_ipc" in a:
            shm = a.get("docker_shm_size_bytes")
            text = row.get("text") or ""
            small = not isinstance(shm, int | float) or shm < SMALL_SHM
            host_ipc = a.get("docker_ipc") == "host" or bool(HOST_IPC_RE.search(text))
            if host_ipc:
                flags.extend(_private_ipc_flags(shm))
            elif small:
                flags.append(FlagChange("--shm-size", fmt_gib(shm) if shm else None, SUGGESTED_SHM,
                                        "the container's /dev/shm "
                                        + (f"is {fmt_gib(shm)}" if shm else "is Docker's 64 MiB default")
                                        + "; NCCL and the server's IPC segments need gigabytes on a multi-GPU host"))
            break
    else:
        # no launch says where it ran: a /dev/shm too small for NCCL's segments is almost always a container's tmpfs
        # (Docker's default is 64 MiB; a host's /dev/shm is half its RAM), and one that leaked full is best confined
        # to a container of its own: either way the fix is a private /dev/shm of its own size
        flags.append(FlagChange("--shm-size", None, SUGGESTED_SHM,
                                "if the server runs in a container: a private /dev/shm of this size, removed with the "
                                "container (docker-run(1) --shm-size; compose shm_size; a memory-backed emptyDir in "
                                "Kubernetes) — Docker's default is 64 MiB, and NCCL and the server's IPC segments need "
                                "gigabytes"))
    df = [r for r in direct if attrs(r).get("df_use_pct") is not None]
    died = [] if nccl_sys else [r for r in hits if r not in direct]
    what = []
    if died:
        what.append("a process died of SIGBUS")
    pre = [r for r in direct if attrs(r).get("via") == "engine_preflight" and r.get("bytes")]
    if pre:
        # vLLM checked before creating its segments (parsers/failures.py _SHM_PREFLIGHT): the need and the room it saw
        a = attrs(pre[0])
        what.append(f"the engine refused to start: its shared-memory segments need {pre[0]['bytes'] / 2**20:.0f} MiB "
                    f"and /dev/shm has {a.get('shm_free_bytes', 0) / 2**20:.0f} MiB free")
    if any(r not in df and r not in pre for r in direct):
        what.append("/dev/shm could not back a segment")
    if df:
        what.append(f"/dev/shm is {max(attrs(r)['df_use_pct'] for r in df)} % used (df)")
    if nccl_sys:
        makers = sorted({str(attrs(r).get("owner")) for r in segments})
        dates = sorted({str(attrs(r).get("mtime")) for r in segments})
        what.append(f"NCCL failed a system call setting up its communicator (ncclSystemError) while the pasted "
                    f"listing of /dev/shm holds {len(segments)} segments of {', '.join(makers)} whose sizes add up "
                    f"to {fmt_gib(listed)}" + (f", last written at {len(dates)} different times (segments of "
                                               "processes that are gone stay until unlinked: a killed process never "
                                               "unlinks its own)" if len(dates) > 1 else ""))
    # a tmpfs-backed region the engine created and could not populate (vLLM's KV-offload tier in /dev/shm)
    regions = [r for r in rows(tl, "host_pool") if attrs(r).get("tmpfs") and r.get("bytes")]
    region_words = ""
    if regions and any(attrs(r).get("via") == "madvise_populate_efault" for r in direct):
        reg = regions[-1]
        region_words = (f" The engine's shared region {attrs(reg).get('path')} ({reg['bytes'] / 1e9:.2f} GB) is a "
                        "file in /dev/shm that is unlinked only on a graceful shutdown: a crashed run's region stays "
                        "(a restarted container creates another under a new name), so a tmpfs sized for one region "
                        "cannot back the next.")
    # Python's resource tracker unlinking, at shutdown, shared-memory segments whose creator never did (it was
    # killed): no cause of its own, but the mechanism that fills /dev/shm when the tracker itself dies too
    leaked = [r for r in rows(tl, "leaked_at_shutdown") if attrs(r).get("resource") == "shared_memory"]
    objects = sum(int(attrs(r).get("objects") or 1) for r in leaked)
    leak_words = (f" Python's resource tracker found {objects} leaked shared_memory object{'s' if objects != 1 else ''}"
                  " at shutdown: their creator was killed before unlinking them, and a run whose tracker is killed "
                  "with it (SIGKILL to the process group) leaves them in /dev/shm for good." if leaked else "")
    # the exception a detail line was printed under (NCCL's "Last error:" inside a DistBackendError) is this failure
    enclosing = [x for x in rows(tl, "scheduler_exception") for h in direct
                 if x.get("file") == h.get("file") and x.get("line") is not None and h.get("line") is not None
                 and int(x["line"]) < int(h["line"]) <= int(x.get("line_end") or x["line"])]
    return [make_finding(
        "SGL-HOST-006",
        summary=(_first_upper(" and ".join(what))
                 + ": /dev/shm is full or too small (segments leaked by earlier killed runs, or a container's small "
                 "default), not host RAM and not GPU memory." + region_words + leak_words
                 + (" The container runs with --ipc=host, so its /dev/shm is the host's: segments left by runs "
                    "killed in earlier containers are still there and fill it for every container started since."
                    if host_ipc else "")),
        evidence=hits[:6] + segments[:3] + enclosing[:2] + regions[-1:] + leaked[:2] + [r for r in launch_rows(tl)[-1:] if flags],
        confidence="high" if direct else "medium",
        confidence_reason=None if direct else (
            "NCCL's system error does not name the call that failed (its WARN line is not in the input); the "
            "listing says /dev/shm is where the room went" if nccl_sys else
            "SIGBUS points at /dev/shm; no `df -h /dev/shm` in the input confirms it"),
        ranks=[x for x in (rank_of(r) for r in hits) if x is not None],
        figures={"sigbus_lines": 0 if nccl_sys else len(hits), "shm_size_bytes": shm,
                 **({"listed_segments": len(segments), "listed_bytes": listed} if nccl_sys else {}),
                 **({"shm_required_bytes": pre[0]["bytes"], "shm_free_bytes": attrs(pre[0]).get("shm_free_bytes")}
                    if pre else {}),
                 **({"leaked_shared_memory": objects} if leaked else {})},
        flags=flags,
        actions=[
            "`df -h /dev/shm` and `ls -la --sort=size /dev/shm | head -30`: see what fills it.",
            "Remove segments left by runs that are gone (no process maps them: `fuser /dev/shm/<name>` prints nothing), "
            "e.g. stale `psm_*`, `nccl-*`, `sglang*`, `vllm_offload_*.mmap` files; never delete a segment a live "
            "process maps. In Kubernetes a memory-backed emptyDir survives container restarts: clear it in an init "
            "container, or delete the pod.",
            "Give containers a /dev/shm of their own: `docker run --shm-size 16g`, or a memory-backed emptyDir on "
            "/dev/shm in Kubernetes. Not `--ipc=host`: it lifts the 64 MiB default but puts every container's "
            "segments in the host's /dev/shm, where those of killed runs outlive their container.",
            "Make the supervisor clean up: kill the whole process group so segments are unlinked, or sweep /dev/shm "
            "between CI jobs.",
        ],
    )]


def _first_upper(text: str) -> str:
    return text[:1].upper() + text[1:]


def _checkpoint_sigbus(tl: Timeline, hits: list[Row]) -> Finding:
    """SGL-HOST-010: SIGBUS while the weights were read from their memory-mapped files.

    A page of a file mapping that the file cannot back raises SIGBUS (mmap(2): "access to a portion of the
    buffer that does not correspond to the file", e.g. beyond its end, or a read the storage fails);
    safetensors maps each shard and the weight loader reads it through that mapping, so a shard truncated
    or rewritten while mapped, or a storage read error (network file system, failing disk), kills the loading
    process (reference/failure_messages.md §5.1: SIGBUS, "also truncated mmapped checkpoint files"; §5.2: the
    faulthandler dump names the faulting thread)."""
    where = next(attrs(r).get("innermost_frame") for r in hits if _reading_weights(r))  # the others: its death
    paths = sorted({str((attrs(r).get("flags") or {}).get("--model-path")).split()[0] for r in launch_rows(tl)
                    if str((attrs(r).get("flags") or {}).get("--model-path") or "").strip()})
    return make_finding(
        "SGL-HOST-010",
        summary=("A process died of SIGBUS while its thread was loading the weights"
                 + (f" ({where})" if where else "") + ": a page of a memory-mapped checkpoint shard could not be "
                 "read — a shard truncated or replaced while mapped, or the storage failing the read — not /dev/shm "
                 "and not RAM." + (f" The weights are read from {paths[-1]}." if paths else "")),
        evidence=hits[:6] + launch_rows(tl)[-1:],
        confidence="medium",
        confidence_reason="the faulting thread was in the weight loader; no kernel log or file check in the input "
                          "says which page failed",
        ranks=[x for x in (rank_of(r) for r in hits) if x is not None],
        figures={"sigbus_lines": len(hits), "faulting_frame": where},
        actions=[
            "Check the shards against their index: `ls -l` sizes against `model.safetensors.index.json`, or re-download "
            "them (`huggingface-cli download … --force-download`); a shard still being written or copied is truncated.",
            "`dmesg -T | grep -iE 'I/O error|nfs|fuse|xfs|ext4'` for a storage read error at that time.",
            "Copy the model to a local disk, or load without mmap (`--weight-loader-disable-mmap` on SGLang versions "
            "that have it) when the model is on a network file system.",
        ],
    )

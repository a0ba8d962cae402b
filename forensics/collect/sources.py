"""What ``forensics collect`` gathers, as data: one row per source.

Each :class:`Source` names either a command (``argv``, run with ``LC_ALL=C`` in its own process
group under a timeout) or a file (``path``), or a ``builtin`` step of the engine (identity facts,
SGLang discovery). The engine (:mod:`forensics.collect`) enforces timeouts, size caps, redaction
and the manifest in one place; adding a source means adding a row here (and a parser).

Placeholders: ``{proc}`` is the proc root (``/proc``, or a fake tree in tests); ``{python}`` is the
interpreter of a discovered SGLang process (else ``python3`` on PATH).

Sources sharing a ``group`` are alternatives tried in order; the first that works (exit 0 and some
output) wins and the others are not run — e.g. the kernel log::

    dmesg --time-format iso  →  dmesg  →  journalctl -k -o short-iso-precise  →  /var/log/kern.log

>>> [s.id for s in SOURCES if s.group == "kernel"][:2]
['kernel-dmesg-iso', 'kernel-dmesg']
>>> by_id("free").argv, by_id("free").format
(('free', '-b', '-w'), 'free')
>>> sorted({str(s.format) for s in SOURCES if s.gpu})
['None', 'fuser', 'nvidia_smi_csv', 'nvidia_smi_table', 'nvidia_smi_xml']
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024**2

GPU_QUERY_FIELDS = (
    "index,uuid,name,pci.bus_id,memory.total,memory.used,memory.free,utilization.gpu,temperature.gpu,power.draw"
)
APPS_QUERY_FIELDS = "pid,process_name,used_memory,gpu_uuid"

# Prints the version of the distribution named in argv[1] without importing it when the metadata
# is there (importing sglang pulls in torch: seconds, and more on a sick host); falls back to import.
VERSION_SCRIPT = (
    "import sys\n"
    "name = sys.argv[1]\n"
    "try:\n"
    "    from importlib.metadata import version\n"
    "    print(version(name))\n"
    "except Exception:\n"
    "    print(getattr(__import__(name), '__version__', 'unknown'))\n"
)


@dataclass(frozen=True)
class Source:
    """One thing to collect. Exactly one of ``argv``, ``path`` or ``builtin`` is set."""

    id: str
    dest: str  # path inside the bundle's top folder
    format: str | None = None  # parser FORMAT the reader should use; None = sniff / not parsed
    argv: tuple[str, ...] = ()
    path: str = ""
    builtin: str = ""
    timeout_s: float | None = None  # None: the run's --timeout
    max_bytes: int = 64 * MiB  # keep the last max_bytes (cut at a line boundary)
    sensitivity: str = "low"  # low | host (names the host) | secret (may carry credentials)
    gpu: bool = False  # touches the GPU driver: skipped in safe mode and once the driver wedged
    snapshot: bool = False  # repeated per --snapshots, under snapshots/NNN/
    group: str = ""  # alternatives: first that works wins
    stderr: str = "merge"  # merge (one stream, like a terminal) | separate (<dest>.stderr)
    glob_arg: str = ""  # expand this glob and append the matches to argv; no match = gap
    bounded_read: bool = False  # read the file in a child process (driver procfs can block forever)
    version_of: str = ""  # this source yields the version of a component (manifest "versions")


SOURCES: tuple[Source, ...] = (
    # identity first: cheap, never touch the driver
    Source("uname", "host/uname.txt", argv=("uname", "-a"), sensitivity="host"),
    Source("os-release", "host/os-release", path="/etc/os-release"),
    Source("uptime", "host/uptime.txt", builtin="uptime"),
    Source("container", "host/container.txt", builtin="container", sensitivity="host"),
    # SGLang processes (argv, environment, cwd, where stdout/stderr go) and their log files, then the
    # user's --log and --add files: the most valuable evidence, so before anything that can hang
    Source("sglang", "sglang/", builtin="sglang", sensitivity="secret"),
    Source("logs", "logs/", "sglang", builtin="logs", sensitivity="secret"),
    Source("added", "added/", builtin="added", sensitivity="secret"),
    # the engines' own crash artifacts the processes name: crash dumps, crash snapshots, flight recorder
    Source("crash-artifacts", "crash/", builtin="crash_artifacts", sensitivity="secret"),
    # the flight recorder's ring (`forensics record`): the last hour before now, re-sealed and redacted
    Source("record", "record/", "record", builtin="record", sensitivity="secret"),
    # memory limits of the SGLang processes' cgroups (and ours)
    Source("cgroup-memory", "host/cgroup-memory.txt", builtin="cgroup_memory"),
    # the snapshot set: memory now, GPUs now, processes now
    Source("free", "host/free.txt", "free", argv=("free", "-b", "-w"), snapshot=True),
    Source("meminfo", "host/meminfo.txt", "meminfo", path="{proc}/meminfo", snapshot=True),
    Source("ps", "host/ps.txt", "ps", argv=("ps", "-ww", "-eo", "pid,ppid,stat,lstart,etimes,rss,vsz,comm,args"),
           sensitivity="secret", snapshot=True),
    Source("nvidia-smi-query-gpu", "host/nvidia-smi-query-gpu.csv", "nvidia_smi_csv",
           argv=("nvidia-smi", f"--query-gpu={GPU_QUERY_FIELDS}", "--format=csv"), gpu=True, snapshot=True),
    Source("nvidia-smi-apps", "host/nvidia-smi-apps.csv", "nvidia_smi_csv",
           argv=("nvidia-smi", f"--query-compute-apps={APPS_QUERY_FIELDS}", "--format=csv"), gpu=True, snapshot=True),
    # kernel log, first that works
    Source("kernel-dmesg-iso", "host/dmesg.txt", "kernel", argv=("dmesg", "--time-format", "iso"),
           group="kernel", sensitivity="host"),
    Source("kernel-dmesg", "host/dmesg.txt", "kernel", argv=("dmesg",), group="kernel", sensitivity="host"),
    Source("kernel-journal", "host/journal-k.txt", "kernel",
           argv=("journalctl", "-k", "-o", "short-iso-precise", "--no-pager"), group="kernel", sensitivity="host"),
    Source("kernel-kern-log", "host/kern.log", "kernel", path="/var/log/kern.log", group="kernel",
           sensitivity="host"),
    # the driver's own views; any of them can hang on a wedged GSP
    Source("nvidia-smi-q-xml", "host/nvidia-smi-q.xml", "nvidia_smi_xml", argv=("nvidia-smi", "-q", "-x"),
           gpu=True, stderr="separate"),
    Source("nvidia-smi-table", "host/nvidia-smi.txt", "nvidia_smi_table", argv=("nvidia-smi",), gpu=True),
    # fuser -v prints its table on stderr and the bare pids on stdout: one merged stream keeps both
    Source("fuser", "host/fuser.txt", "fuser", argv=("fuser", "-v"), glob_arg="/dev/nvidia*", gpu=True),
    # component versions, each bounded
    Source("version-sglang", "versions/sglang.txt", argv=("{python}", "-c", VERSION_SCRIPT, "sglang"),
           version_of="sglang"),
    Source("version-vllm", "versions/vllm.txt", argv=("{python}", "-c", VERSION_SCRIPT, "vllm"),
           version_of="vllm"),
    Source("version-torch", "versions/torch.txt", argv=("{python}", "-c", VERSION_SCRIPT, "torch"),
           version_of="torch"),
    Source("version-driver", "versions/driver.txt", path="{proc}/driver/nvidia/version", gpu=True,
           bounded_read=True, version_of="driver"),
    Source("version-cuda-nvcc", "versions/cuda.txt", argv=("nvcc", "--version"), group="cuda", version_of="cuda"),
    Source("version-cuda-json", "versions/cuda.txt", path="/usr/local/cuda/version.json", group="cuda",
           version_of="cuda"),
    Source("version-cuda-txt", "versions/cuda.txt", path="/usr/local/cuda/version.txt", group="cuda",
           version_of="cuda"),
)


def by_id(source_id: str) -> Source:
    """The source with this id (KeyError if none)."""
    for source in SOURCES:
        if source.id == source_id:
            return source
    raise KeyError(source_id)

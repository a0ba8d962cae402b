"""The short nvidia-smi listings: ``-L`` (GPUs and MIG devices), ``--version``, ``nvlink -s``.

Sources: nvidia-smi(1) (``-L``, ``--version``, ``nvlink -s``) and reference/system_formats.md §2.1 (the model
names and UUIDs it prints).

``nvidia-smi -L`` names each GPU's index, model and UUID, and under a GPU in MIG mode its MIG
devices (R470+ spacing; R450/R460 spell the MIG UUID ``MIG-GPU-<gpu uuid>/<gi>/<ci>``)::

    GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5b1e3c2a-0000-4000-8000-00000000a001)
      MIG 3g.40gb     Device  0: (UUID: MIG-7f0c1d2e-0000-4000-8000-00000000b001)
      MIG 1g.10gb     Device  1: (UUID: MIG-7f0c1d2e-0000-4000-8000-00000000b002)

``nvidia-smi nvlink -s`` (``--status``) repeats the GPU line, then one line per link, or a message
when there is nothing to list::

    GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-5b1e3c2a-0000-4000-8000-00000000a002)
    \t Link 0: 25 GB/s
    \t Link 1: <inactive>
    Nvlink queries are not supported for Devices in MIG mode

``nvidia-smi --version`` (R525+; R610+ deprecate ``DRIVER version`` for ``KMD version``)::

    NVIDIA-SMI version  : 590.48.01
    NVML version        : 590.48
    DRIVER version      : 590.48.01
    CUDA Version        : 13.1

Events: ``gpu_device`` per GPU line (``gpu``; attrs ``name``, ``uuid``), ``gpu_mig_device`` per MIG
line (``gpu`` = parent; attrs ``uuid`` = the MIG UUID, ``parent_uuid``, ``profile``, ``mig_dev``,
``gi_id``/``ci_id`` when the old UUID spells them; no memory columns), ``nvlink_status`` per link
(``gpu``; attrs ``link``, ``state`` = ``active``|``inactive``, ``speed_gb_s``) or per message
(``message_id`` = ``mig_mode``|``no_nvlink``|``all_inactive``), ``version`` per ``--version`` line
(``component`` = ``nvidia_smi``, ``nvml``, ``driver``, ``cuda``; ``label`` as printed), ``gpu_error``
for nvidia-smi failure lines.

>>> r = parse('''GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5b1e3c2a-0000-4000-8000-00000000a001)
...   MIG 3g.40gb     Device  0: (UUID: MIG-7f0c1d2e-0000-4000-8000-00000000b001)''')
>>> r.events.select("kind", "gpu").rows()
[('gpu_device', 0), ('gpu_mig_device', 0)]
>>> import json; json.loads(r.events["attrs"][1])["profile"]
'3g.40gb'
"""

from __future__ import annotations

import re
from typing import Any

from parsers.nvidia_smi.common import failure_row, match_failure, number, prompt_command, split_lines
from parsers.schema import MAX_UNRECOGNIZED_EXAMPLES, NotThisFormat, ParseResult

FORMAT = "nvidia_smi_misc"

_MAX = 1024  # these listings' lines are short; longer ones are never matched
# nvidia-smi(1) (``-L``: ``GPU i: name (UUID: …)``, MIG devices and the R450/R460 ``MIG-GPU-…/gi/ci`` UUID; ``nvlink
# -s`` links and speeds; ``--version``)
_GPU_RE = re.compile(r"^\s*GPU (?P<idx>\d+): (?P<name>.*?)\s*(?:\((?P<ids>(?:UUID|S/N|Serial)[^()]*)\))?\s*$")
_UUID_RE = re.compile(r"UUID:\s*(?P<uuid>[^\s,)]+)")
_MIG_RE = re.compile(
    r"^\s*MIG\s+(?P<profile>\S+)\s+Device\s+(?P<dev>\d+):\s*\(UUID:\s*(?P<uuid>[^)\s]+)\)\s*$")
_OLD_MIG_UUID_RE = re.compile(r"^MIG-(?P<parent>GPU-[0-9A-Fa-f-]+)/(?P<gi>\d+)/(?P<ci>\d+)$")
_LINK_RE = re.compile(r"^\s*Link\s+(?P<link>\d+):\s*(?P<value>.*?)\s*$")
_SPEED_RE = re.compile(r"^(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[GM]B/s)$")
# nvidia-smi(1) (``--version``: the NVIDIA-SMI, driver and CUDA versions)
_VERSION_RE = re.compile(
    r"^(?P<label>NVIDIA-SMI version|NVML version|DRIVER version|KMD version|CUDA UMD version|CUDA Version)"
    r"\s*:\s*(?P<value>.*?)\s*$", re.IGNORECASE)
_COMPONENTS = {"nvidia-smi version": "nvidia_smi", "nvml version": "nvml", "driver version": "driver",
               "kmd version": "driver", "cuda umd version": "cuda", "cuda version": "cuda"}
#: nvlink -s messages that mean "nothing to list", not a failure (system_formats.md §2.5)
_NVLINK_MESSAGES = (
    ("not supported for devices in mig mode", "mig_mode"),
    ("does not have or support nvlink", "no_nvlink"),
    ("all links are inactive", "all_inactive"),
)


def _nvlink_message(line: str) -> str | None:
    low = line.strip().lower()
    if "nvlink" not in low:
        return None
    return next((mid for text, mid in _NVLINK_MESSAGES if text in low), None)


def _gpu_match(line: str) -> re.Match[str] | None:
    m = _GPU_RE.match(line)
    # a GPU line names its model and, from R3xx on, its UUID; "GPU 0: x" alone is too loose to claim
    return m if m and m.group("ids") and m.group("name") else None


def sniff(head: str) -> float:
    """0.95 for ``-L``/``nvlink -s`` GPU lines or ``--version`` lines making up the text.

    >>> sniff("NVIDIA-SMI version  : 590.48.01\\nNVML version        : 590.48")
    0.95
    >>> sniff("GPU 0: NVIDIA L40S (UUID: GPU-00000000-0000-0000-0000-000000000000)\\nDevice does not have or support Nvlink")
    0.95
    >>> sniff("GPU 0 has a total capacity of 79.10 GiB of which 20.00 MiB is free.")
    0.0
    """
    content = [ln for ln in head.splitlines()[:400] if ln.strip() and len(ln) <= _MAX]
    content = [ln for ln in content if prompt_command(ln) is None and not match_failure(ln)]
    if not content:
        return 0.0
    version = sum(1 for ln in content[:20] if _VERSION_RE.match(ln.strip()))
    # "Driver Version : …" and "CUDA Version : …" also open nvidia-smi -q: only --version names NVML or itself
    own = any(re.match(r"^\s*(?:NVIDIA-SMI|NVML) version\s*:", ln, re.IGNORECASE) for ln in content[:20])
    if own and version >= 2 and version * 2 >= min(len(content), 20):
        return 0.95
    gpus = links = other = 0
    for ln in content[:200]:
        if _gpu_match(ln):
            gpus += 1
        elif _MIG_RE.match(ln) or _LINK_RE.match(ln) or _nvlink_message(ln):
            links += 1
        else:
            other += 1
    if gpus and other * 5 <= gpus + links:
        return 0.95
    return 0.0


def _unrec(unrec: list[tuple[int, str]], i: int, line: str) -> None:
    if len(unrec) < MAX_UNRECOGNIZED_EXAMPLES:
        unrec.append((i, line[:500]))


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    """One row per GPU, MIG device, link, message or version line."""
    lines = split_lines(text)
    rows: list[dict[str, Any]] = []
    unrec: list[tuple[int, str]] = []
    n_unrec = 0
    gpu: int | None = None
    gpu_uuid: str | None = None
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if len(line) > _MAX:
            n_unrec += 1
            _unrec(unrec, i, line)
            continue
        if prompt_command(line) is not None:
            continue
        m = _gpu_match(line)
        if m:
            gpu = int(m.group("idx"))
            ids = m.group("ids") or ""
            u = _UUID_RE.search(ids)
            gpu_uuid = u.group("uuid") if u and u.group("uuid").upper() != "N/A" else None
            attrs: dict[str, Any] = {"name": m.group("name")}
            if gpu_uuid:
                attrs["uuid"] = gpu_uuid
            sn = re.search(r"S/N:\s*([^\s,)]+)", ids)
            if sn:
                attrs["serial"] = sn.group(1)
            rows.append({"line": i, "kind": "gpu_device", "gpu": gpu, "text": line, "attrs": attrs})
            continue
        m = _MIG_RE.match(line)
        if m:
            uuid = m.group("uuid")
            attrs = {"uuid": uuid, "profile": m.group("profile"), "mig_dev": int(m.group("dev"))}
            old = _OLD_MIG_UUID_RE.match(uuid)
            if old:  # R450/R460: MIG-GPU-<parent>/<gi>/<ci>
                attrs.update(parent_uuid=old.group("parent"), gi_id=int(old.group("gi")), ci_id=int(old.group("ci")))
            elif gpu_uuid:
                attrs["parent_uuid"] = gpu_uuid
            rows.append({"line": i, "kind": "gpu_mig_device", "gpu": gpu, "text": line, "attrs": attrs})
            continue
        m = _LINK_RE.match(line)
        if m and gpu is not None:
            value = m.group("value")
            attrs = {"link": int(m.group("link")), "value": value}
            sp = _SPEED_RE.match(value)
            if sp:
                gbs = number(sp.group("num")) or 0.0
                attrs["speed_gb_s"] = gbs / 1000 if sp.group("unit") == "MB/s" else gbs
                attrs["state"] = "active" if gbs > 0 else "inactive"
            elif "inactive" in value.lower():
                attrs["state"] = "inactive"
            else:
                attrs["state"] = "unknown"
            rows.append({"line": i, "kind": "nvlink_status", "gpu": gpu, "text": line, "attrs": attrs})
            continue
        mid = _nvlink_message(line)
        if mid:
            rows.append({"line": i, "kind": "nvlink_status", "gpu": gpu, "text": line,
                         "attrs": {"message_id": mid, "message": line.strip()}})
            continue
        m = _VERSION_RE.match(line.strip())
        if m:
            value = m.group("value")
            if value and not value.lower().startswith("deprecated") and re.match(r"^\d", value):
                label = m.group("label")
                rows.append({"line": i, "kind": "version", "text": line,
                             "attrs": {"component": _COMPONENTS[label.lower()], "version": value, "label": label}})
            continue  # "Deprecated, see "KMD version" instead": read, nothing to keep
        failure = match_failure(line)
        if failure:
            rows.append(failure_row(i, line, failure))
            continue
        n_unrec += 1
        _unrec(unrec, i, line)
    if not rows:
        raise NotThisFormat("no nvidia-smi -L, --version or nvlink line")
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=len(lines),
                                 recognized=len(lines) - n_unrec, unrecognized=n_unrec,
                                 unrecognized_examples=unrec)

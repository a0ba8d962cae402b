"""The engines' environment reports: what ``python -m sglang.check_env`` and vLLM's ``collect_env`` print.

Sources: sglang python/sglang/check_env.py (0.4-0.5) ``check_env``: one ``{key}: {value}`` line per entry
(``Python``, ``CUDA available``, ``GPU 0,1: <name>``, ``GPU 0,1 Compute Capability``, ``CUDA_HOME``, ``NVCC``,
``CUDA Driver Version``, ``PyTorch``, then each package as ``sglang: 0.4.3``, ``vllm: Module Not Found``), the
``nvidia-smi topo -m`` matrix under ``NVIDIA Topology:``, ``Hypervisor vendor``, ``ulimit soft``; ROCm builds print
``ROCM available``, ``ROCM_HOME``, ``HIPCC``, ``ROCM Driver Version`` and ``AMD Topology``. vllm vllm/collect_env.py
(0.4+), PyTorch's torch/utils/collect_env.py format: ``PyTorch version:``, ``Is CUDA available:``, ``CUDA runtime
version:``, ``GPU models and configuration:`` (``GPU 0: <name>`` lines), ``Nvidia driver version:``,
``Versions of relevant libraries:`` (``[pip3] torch==2.5.1``), ``vLLM Version:``, ``GPU Topology:``, and on 0.8+
banner lines between sections.

A ticket's environment report says which engine and versions ran and which GPUs the host has. It is no log:
SGLang's import of vLLM can print one vLLM log line at its head (``INFO … Automatically detected platform cuda.``),
which made the whole report read as a vLLM log with nothing recognised. Here each entry is recognised; the
versions become ``version`` rows (the facts layer's version window reads them); a package ``Module Not Found`` is
not installed, so it yields nothing. The GPU names are read by the name scan every file gets
(parsers/gpu_models.py). A report is only claimed when its entries dominate the head: a log with an environment
report pasted above it stays a log.

>>> import json
>>> r = parse("Python: 3.10.12 (main)\\nCUDA available: True\\nGPU 0,1: NVIDIA H100 80GB HBM3\\nPyTorch: 2.5.1+cu124\\n"
...           "sglang: 0.4.3.post2\\nvllm: Module Not Found\\nulimit soft: 1048576\\n")
>>> sorted((a["component"], a["version"]) for a in map(json.loads, r.events["attrs"]))
[('sglang', '0.4.3.post2'), ('torch', '2.5.1+cu124')]
>>> r.recognized == r.lines == 7
True
>>> sniff("[2025-01-01 10:00:00 TP0] Load weight begin. avail mem=70.00 GB\\nPython: 3.10\\n")
0.0
"""

from __future__ import annotations

import re
from typing import Any

from .elision import is_elision
from .schema import MAX_UNRECOGNIZED_EXAMPLES, NotThisFormat, ParseResult

FORMAT = "env_report"

#: keys both reports print, by the tool that prints them (the module docstring's sources); a head needs several
#: of them before it is read as a report
_ANCHORS = frozenset({
    # sglang check_env
    "Python", "CUDA available", "ROCM available", "CUDA_HOME", "ROCM_HOME", "NVCC", "HIPCC", "CUDA Driver Version",
    "CUDA Driver Versions", "ROCM Driver Version", "PyTorch", "sglang", "sgl_kernel", "flashinfer",
    "flashinfer_python", "NVIDIA Topology", "AMD Topology", "Hypervisor vendor", "ulimit soft",
    # torch / vllm collect_env
    "PyTorch version", "Is debug build", "CUDA used to build PyTorch", "ROCM used to build PyTorch", "OS",
    "GCC version", "Clang version", "CMake version", "Libc version", "Python version", "Python platform",
    "Is CUDA available", "CUDA runtime version", "CUDA_MODULE_LOADING set to", "GPU models and configuration",
    "Nvidia driver version", "cuDNN version", "HIP runtime version", "MIOpen runtime version",
    "Is XNNPACK available", "Versions of relevant libraries", "vLLM Version", "vLLM Build Flags", "GPU Topology",
})
#: the other keys the reports print (sglang check_env's ``PACKAGE_LIST``, the rest of collect_env's lines): an
#: entry is recognised only by its key, so a writer's own ``Mem: 384GB`` under a report is left to the prose reader
_KNOWN = _ANCHORS | frozenset({
    "triton", "transformers", "torchao", "numpy", "aiohttp", "fastapi", "hf_transfer", "huggingface_hub",
    "interegular", "modelscope", "orjson", "outlines", "packaging", "psutil", "pydantic", "multipart", "zmq",
    "uvicorn", "uvloop", "vllm", "xgrammar", "openai", "tiktoken", "anthropic", "litellm", "decord", "torch",
    "flashinfer-python", "sgl-kernel", "ROCM Version", "Neuron SDK Version", "CUDA Archs", "ENV Variables", "CPU",
    "vLLM Ascend Version", "NPU", "CANN", "Caching allocator config", "Is XNNPACK available", "Clang version",
    "Python platform", "cuDNN version", "Legend",
})
#: ``GPU 0,1: <name>`` and ``GPU 0,1 Compute Capability: 9.0`` (sglang python/sglang/check_env.py (0.4-0.5)
#: ``_get_gpu_info``), ``GPU 0: <name>`` (vllm vllm/collect_env.py (0.4+))
_GPU_KEY = re.compile(r"^GPU [\d,]+(?: Compute Capability)?$")
#: lscpu(1)'s ``Key: value`` lines under collect_env's ``CPU:``, and its ``ENV Variables:`` assignments (vllm
#: vllm/collect_env.py (0.4+) ``get_cpu_info``, ``get_env_vars``)
_SECTION_LINE = re.compile(r"^(?:[A-Z][\w ()/-]{0,40}:\s|[A-Z][A-Z0-9_]{1,80}=)")

#: package keys whose value is a version (check_env's ``PACKAGE_LIST`` and collect_env's own lines) → component
_COMPONENTS = {
    "sglang": "sglang", "sgl_kernel": "sgl_kernel", "flashinfer": "flashinfer", "flashinfer_python": "flashinfer",
    "vllm": "vllm", "vllm version": "vllm", "triton": "triton", "transformers": "transformers", "xgrammar": "xgrammar",
    "pytorch": "torch", "pytorch version": "torch", "cuda driver version": "driver", "nvidia driver version": "driver",
    "rocm driver version": "amdgpu_driver", "cuda runtime version": "cuda",
}
#: one entry, ``{key}: {value}`` (sglang python/sglang/check_env.py (0.4-0.5) ``print(f"{k}: {v}")``; vllm
#: vllm/collect_env.py (0.4+) ``env_info_fmt``, aligned with spaces before the colon on 0.8+)
#: the toolkit's release in check_env's ``NVCC: Cuda compilation tools, release 12.4, V12.4.131`` (sglang
#: python/sglang/check_env.py (0.4-0.5) ``_get_nvcc_info``: ``nvcc -V`` from "Cuda compilation tools" on)
_NVCC_RELEASE = re.compile(r"release (\d{1,3}\.\d{1,3})")
_ENTRY = re.compile(r"^(?P<key>[A-Za-z_][\w .()/+,-]{0,60}?):(?:\s+(?P<value>.*?))?\s*$")
#: pip and conda package names collect_env lists → component
_PIP_COMPONENTS = {"torch": "torch", "vllm": "vllm", "sglang": "sglang", "transformers": "transformers",
                   "triton": "triton", "flashinfer_python": "flashinfer"}
#: ``[pip3] torch==2.5.1`` / ``[conda] nvidia-nccl-cu12 2.21.5 pypi_0 pypi`` (vllm vllm/collect_env.py (0.4+)
#: ``get_pip_packages`` / ``get_conda_packages``, each line prefixed with its tool)
_PACKAGE = re.compile(r"^\[(?:pip3?|conda)\]\s+(?P<name>[\w.-]+)(?:==|\s+)(?P<version>\S+)")
#: the ``nvidia-smi topo -m`` / ``rocm-smi --showtopotype`` matrix and its legend, ``===`` banners, lscpu's
#: indented continuation lines (sglang python/sglang/check_env.py (0.4-0.5) ``get_gpu_topology``: nvidia-smi topo -m's
#: own output; reference/system_formats.md §2 for nvidia-smi)
_MATRIX = re.compile(r"^\s*(?:(?:GPU|NIC|NPU|mlx\d?_?|CPU)\S*\s+|[\w-]+\s+(?:X|SYS|NODE|PHB|PXB|PIX|NV\d+)\b)|"
                     r"^\s+(?:X|SYS|NODE|PHB|PXB|PIX|NV#|NV\d+|NIC Legend)\s*[=:]|^\s*={5,}\s*$|^\s{2,}\S")
# the version each package reports (sglang python/sglang/check_env.py (0.4-0.5) ``get_package_versions``: ``__version__``)
_VERSION = re.compile(r"(?<![\d.])\d{1,6}(?:\.\d{1,6}){1,4}[.+\w-]{0,40}")
# a line of an engine's log: reference/sglang_formats.md §1 (``[stamp …]``), reference/vllm_formats.md §1.1
# (``INFO 02-18 09:40:33 file.py:N]``)
_LOG_LINE = re.compile(r"^(?:\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d|(?:\(\w+ pid=\d+\)\s+)?(?:INFO|WARNING|ERROR|DEBUG) "
                       r"\d\d-\d\d \d\d:\d\d:\d\d)")
_SNIFF_LINES = 200
_MIN_ANCHORS = 4
_SURE_ANCHORS = 7


def _key(line: str) -> str | None:
    m = _ENTRY.match(line)
    return m.group("key").strip() if m else None


def sniff(head: str) -> float:
    """Confidence that ``head`` is an environment report: several of its keys, and few log lines among them."""
    lines = [ln for ln in head[:65536].split("\n") if ln.strip()][:_SNIFF_LINES]
    if not lines:
        return 0.0
    anchors = {k for ln in lines if (k := _key(ln)) in _ANCHORS}
    logs = sum(1 for ln in lines if _LOG_LINE.match(ln))
    if len(anchors) < _MIN_ANCHORS or logs > max(3, len(lines) // 5):
        return 0.0
    # a whole report is surer than a write-up's prose paragraphs (its topology legend reads as prose) but not
    # than a session's prompt lines (parsers/transcript.py: 0.97, 0.99), which split it from the other commands
    return 0.98 if len(anchors) >= _SURE_ANCHORS else 0.9


def _version_of(key: str, value: str) -> tuple[str, str] | None:
    comp = _COMPONENTS.get(key.lower())
    if comp is None or not value or "not found" in value.lower() or "could not collect" in value.lower():
        return None
    m = _VERSION.search(value)
    return (comp, m.group(0)) if m else None


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    if not isinstance(text, str):
        raise NotThisFormat("env_report: not text")
    if sniff(text) == 0.0:
        raise NotThisFormat("env_report: too few of the reports' keys")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    rows: list[dict[str, Any]] = []
    recognized = 0
    examples: list[tuple[int, str]] = []
    seen: set[str] = set()
    section: str | None = None  # collect_env's ``CPU:`` / ``ENV Variables:`` blocks of free-form lines
    for n, ln in enumerate(lines, 1):
        if not ln.strip() or is_elision(ln):
            section = None if not ln.strip() else section
            recognized += 1
            continue
        got: tuple[str, str] | None = None
        m = _ENTRY.match(ln) if not _LOG_LINE.match(ln) else None
        key = m.group("key").strip() if m else None
        if key is not None and (key in _KNOWN or _GPU_KEY.match(key)):
            section = key if key in ("CPU", "ENV Variables") and not (m.group("value") or "").strip() else None
            got = _version_of(key, (m.group("value") or "").strip())
            if key == "NVCC" and (c := _NVCC_RELEASE.search(ln)):
                got = ("cuda_toolkit", c.group(1))
        elif (p := _PACKAGE.match(ln)) is not None:
            comp = _PIP_COMPONENTS.get(p.group("name").lower().replace("-", "_"))
            got = (comp, p.group("version")) if comp else None
        elif not (section and _SECTION_LINE.match(ln)) and not _MATRIX.match(ln):
            if len(examples) < MAX_UNRECOGNIZED_EXAMPLES:
                examples.append((n, ln[:200]))
            continue
        recognized += 1
        if got and got[0] not in seen:
            seen.add(got[0])
            rows.append({"line": n, "kind": "version", "text": ln.strip()[:200],
                         "attrs": {"component": got[0], "version": got[1], "stated": True,
                                   "source": "environment report"}})
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=len(lines), recognized=recognized,
                                 unrecognized_examples=examples)


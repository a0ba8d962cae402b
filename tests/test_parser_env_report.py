"""The engines' environment reports (parsers/env_report.py): SGLang's ``check_env`` and vLLM's ``collect_env`` are
read as reports, their versions become facts, and a log is never taken for one. The texts are our own, in the
shape those tools print."""

from __future__ import annotations

import json

import pytest

from forensics.timeline import build_timeline
from parsers import env_report
from parsers.schema import NotThisFormat

# sglang's check_env on a CUDA host, with the vLLM log line SGLang's import of vLLM prints first
SGLANG_CUDA = """\
INFO 03-04 11:20:07 __init__.py:190] Automatically detected platform cuda.
Python: 3.11.9 (main, Apr  6 2024, 17:59:24) [GCC 11.4.0]
CUDA available: True
GPU 0,1,2,3: NVIDIA L40S
GPU 0,1,2,3 Compute Capability: 8.9
CUDA_HOME: /usr/local/cuda
NVCC: Cuda compilation tools, release 12.6, V12.6.77
CUDA Driver Version: 565.57.01
PyTorch: 2.6.0+cu126
sglang: 0.4.6.post1
sgl_kernel: 0.1.0
flashinfer: Module Not Found
triton: 3.2.0
transformers: 4.51.3
vllm: 0.8.4
NVIDIA Topology:
\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tSYS\tSYS\tSYS\t0-31\t0\t\tN/A
GPU1\tSYS\t X \tSYS\tSYS\t0-31\t0\t\tN/A

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes

Hypervisor vendor: KVM
ulimit soft: 65535
"""

SGLANG_ROCM = """\
Python: 3.12.3 (main, Nov  6 2024, 18:32:19) [GCC 13.2.0]
ROCM available: True
GPU 0,1,2,3,4,5,6,7: AMD Instinct MI300X
GPU 0,1,2,3,4,5,6,7 Compute Capability: 9.4
ROCM_HOME: /opt/rocm
HIPCC: HIP version: 6.3.42131-fa1d09cbd
ROCM Driver Version: 6.10.5
PyTorch: 2.6.0a0+git8d4926e
sglang: 0.4.9
ulimit soft: 1048576
"""

VLLM_COLLECT = """\
Collecting environment information...
==============================
        System Info
==============================
OS                           : Ubuntu 22.04.5 LTS (x86_64)
GCC version                  : (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0
Libc version                 : glibc-2.35

==============================
       PyTorch Info
==============================
PyTorch version              : 2.7.0+cu126
Is debug build               : False
CUDA used to build PyTorch   : 12.6

==============================
        CUDA / GPU Info
==============================
Is CUDA available            : True
CUDA runtime version         : 12.6.85
GPU models and configuration :
GPU 0: NVIDIA H100 80GB HBM3
GPU 1: NVIDIA H100 80GB HBM3
Nvidia driver version        : 550.127.05

==============================
  Versions of relevant libraries
==============================
[pip3] torch==2.7.0
[pip3] transformers==4.52.4
[conda] Could not collect

==============================
         vLLM Info
==============================
vLLM Version                 : 0.9.1
"""


def _versions(result) -> dict[str, str]:
    return {a["component"]: a["version"] for a in map(json.loads, result.events["attrs"].to_list())}


def test_sglang_check_env_is_a_report_with_its_versions():
    assert env_report.sniff(SGLANG_CUDA) > 0.6  # above vLLM's claim on its one log line
    r = env_report.parse(SGLANG_CUDA)
    v = _versions(r)
    assert v["sglang"] == "0.4.6.post1" and v["torch"] == "2.6.0+cu126" and v["driver"] == "565.57.01"
    assert v["cuda_toolkit"] == "12.6" and v["vllm"] == "0.8.4"
    assert "flashinfer" not in v  # "Module Not Found": not installed, no version
    # every line but the vLLM log line is an entry, the topology matrix, its legend or a blank
    assert r.unrecognized == 1 and r.unrecognized_examples[0][0] == 1


def test_rocm_check_env():
    v = _versions(env_report.parse(SGLANG_ROCM))
    assert v == {"amdgpu_driver": "6.10.5", "torch": "2.6.0a0+git8d4926e", "sglang": "0.4.9"}


def test_vllm_collect_env_with_banners_and_aligned_keys():
    r = env_report.parse(VLLM_COLLECT)
    v = _versions(r)
    assert v["vllm"] == "0.9.1" and v["torch"] == "2.7.0+cu126" and v["cuda"] == "12.6.85"
    assert v["driver"] == "550.127.05" and v["transformers"] == "4.52.4"
    assert r.unrecognized == 1  # "Collecting environment information...": said, not an entry


@pytest.mark.parametrize("text", [
    # an SGLang log with a few of the report's lines pasted above it stays a log
    "Python: 3.10\nPyTorch: 2.5.1\nsglang: 0.4.3\nCUDA available: True\n"
    + "".join(f"[2025-02-18 09:3{i % 10}:55 TP0] Decode batch. #running-req: 1, #token: 9\n" for i in range(40)),
    "MemTotal:       16318480 kB\nMemFree:        1000 kB\nCached:  10 kB\nSwapTotal: 0 kB\n",  # /proc/meminfo
    "Python: 3.10\nPyTorch: 2.5.1\n",  # too little to be a report
])
def test_what_is_not_a_report(text):
    assert env_report.sniff(text) == 0.0
    with pytest.raises(NotThisFormat):
        env_report.parse(text)


def test_the_report_routes_as_one_and_its_version_reaches_the_facts(tmp_path):
    p = tmp_path / "check_env.txt"
    p.write_text(SGLANG_CUDA)
    tl = build_timeline([p])
    assert [c["format"] for c in tl.coverage] == ["env_report"]
    assert tl.facts.sglang_version == "0.4.6.post1"

"""GPU models named in any text give a capacity where nothing measured it (parsers/gpu_models.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.detectors import run_all
from forensics.timeline import build_timeline
from parsers import gpu_models
from parsers.units import GIB


@pytest.mark.parametrize(("text", "gib"), [
    ("GPU 0: NVIDIA H100 80GB HBM3", 80 * 0.99),
    ("device_name=NVIDIA_A100-SXM4-80GB.json", 80 * 0.99),
    ("| 0  NVIDIA H200                    On  |", 139.8),
    ("we run 8x NVIDIA L40S in this box", 44.4),
    ("AMD Instinct MI300X", 191.5),
    ("GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-1234)", 23.5),
])
def test_named_models_and_their_memory(text: str, gib: float) -> None:
    ev = gpu_models.parse(text).events
    assert ev.height == 1 and abs(ev.get_column("total_bytes")[0] / GIB - gib) < 0.05


@pytest.mark.parametrize("text", ["line 40 of the file", "H2O levels", "the A1 cell", "TP8 on 8 GPUs"])
def test_text_that_names_no_gpu(text: str) -> None:
    assert gpu_models.parse(text).events.height == 0


def test_a_named_gpu_lets_headroom_compute_the_fraction(tmp_path) -> None:
    """A serving OOM fragment with the fraction known: without the GPU's size the step is a rule of thumb; with
    the model named in collect_env, the arithmetic uses its capacity."""
    (tmp_path / "launch.sh").write_text("python3 -m sglang.launch_server --model-path acme/m --tp 2 "
                                        "--mem-fraction-static 0.9\n")
    (tmp_path / "oom.txt").write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB.\n")
    blind = next(f for f in run_all(build_timeline([tmp_path]))[0] if f.rule_id == "SGL-GPU-001")
    assert "gpu_memory_bytes" not in blind.figures
    (tmp_path / "collect_env.txt").write_text("GPU models and configuration:\nGPU 0: NVIDIA H100 80GB HBM3\n")
    named = next(f for f in run_all(build_timeline([tmp_path]))[0] if f.rule_id == "SGL-GPU-001")
    assert 79 <= named.figures["gpu_memory_bytes"] / GIB <= 80.5  # the model's memory, however the line was read
    assert float(named.remediation.flags[0].new) < 0.9


def _reference_rows(text: str) -> list[tuple[int, int]]:
    """The plain reading the fast scan must equal: every line tried with the exact needle and the name."""
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if not gpu_models._NEEDLE.search(line):
            continue
        for m in gpu_models._NAME.finditer(line):
            cap = gpu_models.capacity_of(m.group(0))
            if cap is not None:
                out.append((i, cap))
                break
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([
    "GPU 0: NVIDIA H100 80GB HBM3", "xH100 is not a GPU name", "8x H200 nodes", "H100", "H1000", "A10G",
    "[2026-11-30 10:00:00 TP0] Decode batch, #running-req: 12, #token: 4096", "AMD Instinct MI300X",
    "device_name=NVIDIA_A100-SXM4-80GB.json", "RTX 4090 and RTX 3090", "MI3000", "B200\r", "", "L40S x4",
    "GeForce RTX 5060 Ti 16GB", "no gpu here at all", "V100-SXM2-32GB",
]), max_size=40))
def test_the_one_pass_scan_reads_every_line_the_plain_reading_does(lines):
    text = "\n".join(lines)
    got = gpu_models.parse(text).events
    rows = list(zip(got.get_column("line").to_list(), got.get_column("total_bytes").to_list(), strict=True)) \
        if got.height else []
    assert rows == _reference_rows(text)
    assert gpu_models.parse(text).lines == len(text.splitlines())

"""Which name the capture failure's fewer-graphs remedy uses when the input states no version: a setting only
0.5.15+ has (the decode/prefill split of the graph flags) names the new flag; otherwise the old one, with the
new name in its reason."""

from __future__ import annotations

from pathlib import Path

from forensics.detectors import run_all
from forensics.facts.versions import fields_floor
from forensics.timeline import build_timeline

_OOM = """[2026-05-21 08:00:00] server_args=ServerArgs(model_path='acme/m', tp_size=1, {args}, port=30000)
[2026-05-21 08:01:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 402, in __init__
    self.capture()
Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total capacity of 79.19 GiB of which 120.00 MiB is free.
"""


def _graph_flag(tmp_path: Path, args: str, launch: str | None = None):
    (tmp_path / "server.log").write_text(_OOM.format(args=args), encoding="utf-8")
    if launch:
        (tmp_path / "launch.sh").write_text(launch, encoding="utf-8")
    tl = build_timeline([tmp_path])
    findings, _root = run_all(tl)
    flags = [c for f in findings if f.rule_id == "SGL-GPU-002" for c in f.remediation.flags
             if c.flag.startswith("--cuda-graph-max-bs")]
    return tl, flags[0]


def test_a_dump_without_phased_fields_keeps_the_old_name_and_says_the_new_one(tmp_path):
    _tl, flag = _graph_flag(tmp_path, "cuda_graph_max_bs=64")
    assert flag.flag == "--cuda-graph-max-bs" and flag.new == "32"
    assert "0.5.15+ calls it --cuda-graph-max-bs-decode" in flag.why


def test_a_launch_flag_of_the_new_release_names_the_new_flag(tmp_path):
    tl, flag = _graph_flag(tmp_path, "mem_fraction_static=0.88",
                           "python3 -m sglang.launch_server --model-path acme/m --cuda-graph-backend-prefill disabled\n")
    assert fields_floor(tl) == ((0, 5, 15), "cuda_graph_backend_prefill")
    assert flag.flag == "--cuda-graph-max-bs-decode" and "a setting of 0.5.15+" in flag.why

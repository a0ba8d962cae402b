"""GPU detectors on hand-built timelines: CUDA-graph headroom, weights that do not fit, stranded contexts."""

from __future__ import annotations

import json

from test_detectors_common import GIB, MIB, fired, timeline

from forensics.detectors import cuda_graph_headroom, run_all, stranded_context, weights_do_not_fit


def _startup(f: float, pre_gib: float, after_capture_gib: float) -> list[dict]:
    return [
        {"kind": "server_args", "attrs": {"args": {"mem_fraction_static": f, "tp_size": 8, "chunked_prefill_size": 8192}}},
        {"kind": "weight_load_begin", "rank": "TP3", "tp_rank": 3, "avail_bytes": int(pre_gib * GIB)},
        {"kind": "weight_load_end", "rank": "TP3", "tp_rank": 3, "avail_bytes": int(21.07 * GIB)},
        {"kind": "cuda_graph_end", "rank": "TP3", "tp_rank": 3, "avail_bytes": int(after_capture_gib * GIB)},
    ]


def _oom(tried_gib: float, free_gib: float, gpu: int = 3, **extra) -> dict:
    return {"kind": "cuda_oom", "rank": f"TP{gpu}", "tp_rank": gpu, "gpu": gpu, "bytes": int(tried_gib * GIB),
            "free_bytes": int(free_gib * GIB), "total_bytes": 95 * GIB, **extra}


def test_serving_oom_lowers_the_fraction_by_shortfall_plus_margin():
    prefill = {"kind": "prefill_batch", "rank": "TP0", "tp_rank": 0, "tokens": 8192, "ratio": 0.62}
    tl = timeline(*_startup(0.93, 93.79, 1.89), prefill, _oom(1.41, 1.02))
    f = fired(cuda_graph_headroom.detect(tl))["SGL-GPU-001"]
    assert f.severity == "critical" and f.gpus == [3] and f.ranks == [3]
    need = (1.89 - 1.02 + 1.41) * GIB
    assert abs(f.figures["need_bytes"] - need) < 2
    assert f.figures["prefill_new_tokens"] == 8192
    new = float(f.remediation.flags[0].new)
    expected = 0.93 - ((need - 1.89 * GIB) + max(GIB, 0.03 * 93.79 * GIB)) / (93.79 * GIB)
    assert new == int(expected * 100) / 100
    assert 0.86 <= new <= 0.90
    assert any("--chunked-prefill-size" in a and "8192" in a for a in f.remediation.actions)


def test_thin_headroom_without_oom_is_a_medium_risk():
    f = fired(cuda_graph_headroom.detect(timeline(*_startup(0.93, 93.79, 0.82))))["SGL-GPU-003"]
    assert f.severity == "medium"
    assert float(f.remediation.flags[0].new) < 0.93


def test_roomy_headroom_is_quiet():
    assert cuda_graph_headroom.detect(timeline(*_startup(0.85, 93.79, 9.1))) == []


def test_capture_failure_is_its_own_rule():
    fail = {"kind": "cuda_graph_failed", "rank": "TP2", "tp_rank": 2,
            "attrs": {"message": "Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 2 has a "
                                 "total capacity of 95.00 GiB of which 1.12 GiB is free."}}
    rows = _startup(0.95, 93.79, 2.0)[:3] + [{"kind": "cuda_graph_begin", "avail_bytes": 2 * GIB}, fail]
    got = fired(cuda_graph_headroom.detect(timeline(*rows)))
    assert set(got) == {"SGL-GPU-002"}
    assert float(got["SGL-GPU-002"].remediation.flags[0].new) < 0.95


def test_not_enough_memory_is_weights_not_headroom():
    rows = _startup(0.7, 94.61, 5.0)[:3] + [{"kind": "not_enough_memory", "ratio": 0.7}, _oom(1.0, 0.5)]
    tl = timeline(*rows)
    assert cuda_graph_headroom.detect(tl) == []
    f = fired(weights_do_not_fit.detect(tl))["SGL-GPU-004"]
    minimum = 1 - 21.07 / 94.61
    assert abs(f.figures["minimum_viable_fraction"] - round(minimum, 4)) < 1e-9
    assert float(f.remediation.flags[0].new) > minimum


def test_weights_no_kv_room_uses_the_minimum_sglang_names():
    tl = timeline({"kind": "weights_no_kv_room", "ratio": 0.8, "attrs": {"minimum_fraction": 0.8412}})
    f = fired(weights_do_not_fit.detect(tl))["SGL-GPU-004"]
    assert f.remediation.flags[0].new == "0.87"


def _smi(line: int, used_mib: list[int], file: str = "session.txt", snapshot: int = 0) -> list[dict]:
    return [{"kind": "gpu_memory", "source": "nvidia_smi_csv", "file": file, "line": line + i, "snapshot": snapshot,
             "gpu": i, "used_bytes": u * MIB} for i, u in enumerate(used_mib)]


def _cmd(line: int, text: str) -> dict:
    return {"kind": "command", "source": "transcript", "file": "session.txt", "line": line, "text": text,
            "attrs": {"command": text}}


def test_stranded_gpus_after_pkill_are_named():
    tl = timeline(_cmd(1, "pkill -9 -f sglang"), *_smi(3, [96413, 99, 96417, 51, 3, 3, 3, 7]))
    f = fired(stranded_context.detect(tl))["SGL-GPU-005"]
    assert f.gpus == [0, 2]
    assert f.figures["held_bytes_per_gpu"] == {"0": 96413 * MIB, "2": 96417 * MIB}
    assert f.figures["asymmetric"] is True
    assert any("--gpu-reset -i 0,2" in a for a in f.remediation.actions)
    assert any("pct exec" in a for a in f.remediation.actions)


def test_running_server_is_not_stranded():
    tl = timeline(*_smi(1, [93000] * 8))
    assert stranded_context.detect(tl) == []


def test_released_later_lowers_severity():
    tl = timeline(_cmd(1, "pkill -9 -f sglang"), *_smi(3, [96413, 0, 96417, 0], snapshot=0),
                  _cmd(20, "pct exec 129 -- pkill -9 -f sglang"), *_smi(22, [0, 0, 0, 0], snapshot=1))
    f = fired(stranded_context.detect(tl))["SGL-GPU-005"]
    assert f.severity == "low" and "released later" in f.summary


def test_relaunch_after_kill_is_not_stranded():
    tl = timeline(_cmd(1, "pkill -9 -f sglang"), _cmd(2, "python3 -m sglang.launch_server --tp 8"),
                  *_smi(4, [90000] * 8))
    assert stranded_context.detect(tl) == []


def test_owner_in_d_state_counts_as_stranded_without_a_kill():
    rows = _smi(1, [96000, 10], file="smi.txt") + [
        {"kind": "gpu_process", "source": "nvidia_smi_table", "file": "smi.txt", "line": 9, "snapshot": 0, "gpu": 0,
         "pid": 4242, "comm": "sglang::scheduler_TP0"},
        {"kind": "process", "source": "ps", "file": "ps.txt", "line": 2, "pid": 4242, "comm": "sglang::scheduler_TP0",
         "attrs": {"state": "D", "stat": "D"}},
    ]
    findings, root = run_all(timeline(*rows))
    f = fired(findings)["SGL-GPU-005"]
    assert f.gpus == [0] and f.figures["owner_states"] == {"0": "4242:D"}
    assert root == "SGL-GPU-005"


# --- SGL-GPU-006: whose memory a CUDA OOM's process clauses name (failure_messages.md §1.3–1.4)


def _clauses(*procs_gib: tuple[int, float], own_gib: float | None, fragment: bool = False) -> dict:
    a: dict = {"processes": [{"pid": pid, "used_bytes": int(g * GIB)} for pid, g in procs_gib]}
    if own_gib is not None:
        a["allocated_by_pytorch_bytes"] = int(own_gib * GIB)
    if fragment:
        a["fragment"] = True
    return {"kind": "cuda_oom", "attrs": json.dumps(a)}


def test_a_lone_clause_pasted_alone_names_nobody() -> None:
    from forensics.detectors.held_at_start import foreign_processes

    assert foreign_processes(_clauses((6100, 58.0), own_gib=None, fragment=True)) == []
    tl = timeline(_clauses((6100, 58.0), own_gib=None, fragment=True),
                  {"kind": "failure", "attrs": {"failure": "startup_failed"}})
    assert "SGL-GPU-006" not in fired(run_all(tl)[0])


def test_in_a_container_the_failing_process_is_the_entry_just_above_its_reservation() -> None:
    from forensics.detectors.held_at_start import foreign_processes

    # no "this process has": PyTorch listed its own entry under the host pid; 10.4 GiB ≥ its 9.8 GiB reservation
    got = foreign_processes(_clauses((300, 10.4), (301, 61.2), own_gib=9.8))
    assert [p["pid"] for p in got] == [301]
    # its own entry alone, a little above its reservation (context and NCCL buffers): nobody else's
    assert foreign_processes(_clauses((300, 10.4), own_gib=9.8)) == []
    # a lone entry far above what its allocator holds is another process (its own was hidden from NVML)
    assert [p["pid"] for p in foreign_processes(_clauses((302, 44.0), own_gib=9.8))] == [302]


def _own_only(total_gib: float, free_gib: float, self_gib: float) -> dict:
    """A CUDA OOM that lists only ``this process has`` (no other Process clause)."""
    return {"kind": "cuda_oom", "total_bytes": int(total_gib * GIB), "free_bytes": int(free_gib * GIB),
            "used_bytes": int(self_gib * GIB), "attrs": json.dumps({"allocated_by_pytorch_bytes": int(self_gib * GIB)})}


def test_memory_no_clause_lists_is_held_when_it_is_the_gpus_main_user() -> None:
    from forensics.detectors.held_at_start import held_unlisted, unlisted_bytes

    # 48 GiB card, 2 GiB free, the server 10 GiB: 36 GiB in use by something the message cannot list
    assert unlisted_bytes(_own_only(48, 2, 10)) // GIB == 36
    assert held_unlisted(_own_only(48, 2, 10)) // GIB == 36
    # a display server's 1.5 GiB beside a 14 GiB server is no co-tenant that took the GPU
    assert held_unlisted(_own_only(16, 0.1, 14.4)) is None
    tl = timeline(_own_only(48, 2, 10), {"kind": "failure", "attrs": {"failure": "startup_failed"}})
    assert "SGL-GPU-006" in fired(run_all(tl)[0])
    tl = timeline(_own_only(16, 0.1, 14.4), {"kind": "failure", "attrs": {"failure": "startup_failed"}})
    assert "SGL-GPU-006" not in fired(run_all(tl)[0])


def _before_load(avail_gib: float, total_gib: float | None, *, model_named: bool = False) -> list[dict]:
    rows = [{"kind": "dist_init_end", "bytes": int(0.3 * GIB)},
            {"kind": "weight_load_begin", "avail_bytes": int(avail_gib * GIB)},
            {"kind": "not_enough_memory", "attrs": json.dumps({})}]
    if total_gib is not None and not model_named:
        rows.append({"kind": "gpu_memory", "source": "nvidia_smi_csv", "gpu": 0, "total_bytes": int(total_gib * GIB),
                     "used_bytes": int((total_gib - avail_gib) * GIB)})
    if model_named:
        rows.append({"kind": "gpu_model", "source": "launch", "total_bytes": int(total_gib * GIB),
                     "attrs": json.dumps({"model": "A100-80GB"})})
    return rows


def test_memory_in_use_before_the_weights_load_is_another_processs() -> None:
    # 80 GiB per nvidia-smi, 30 GiB free before loading: ~50 GiB held by someone else
    assert "SGL-GPU-006" in fired(run_all(timeline(*_before_load(30, 80)))[0])
    # only the CUDA context and NCCL buffers in use: nobody else
    assert "SGL-GPU-006" not in fired(run_all(timeline(*_before_load(78.9, 80)))[0])
    # a GPU model's nominal size is no measurement (a MIG slice or a bigger variant would lie)
    assert "SGL-GPU-006" not in fired(run_all(timeline(*_before_load(39, 80, model_named=True)))[0])


def test_a_draft_models_load_after_the_targets_is_no_memory_held_before() -> None:
    rows = _before_load(78.9, 80)
    # speculative decoding: the draft's "Load weight begin" comes after the target took 60 GiB
    rows.insert(2, {"kind": "weight_load_begin", "avail_bytes": int(18 * GIB)})
    assert "SGL-GPU-006" not in fired(run_all(timeline(*rows))[0])


def test_memory_held_before_load_explains_only_a_memory_failure() -> None:
    rows = [r for r in _before_load(30, 80) if r["kind"] != "not_enough_memory"]
    rows.append({"kind": "scheduler_exception", "attrs": json.dumps({"exception_type": "ValueError",
                                                                    "exception_message": "unknown model type"})})
    assert "SGL-GPU-006" not in fired(run_all(timeline(*rows))[0])


def _traceback_oom(allocated_by_pytorch_gib: float) -> str:
    """An SGLang scheduler's traceback, no start-up lines: the model's constructor in the loader ran out of memory."""
    return (
        "Traceback (most recent call last):\n"
        '  File "/opt/sglang/python/sglang/srt/model_executor/model_runner.py", line 610, in load_model\n'
        "    self.model = get_model(\n"
        '  File "/opt/sglang/python/sglang/srt/model_loader/loader.py", line 377, in load_model\n'
        "    model = _initialize_model(model_config, self.load_config)\n"
        '  File "/opt/sglang/python/sglang/srt/models/llama.py", line 430, in __init__\n'
        "    self.model = LlamaModel(config, quant_config=quant_config)\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 1 has a total capacity of "
        "44.39 GiB of which 402.00 MiB is free. Process 4242 has 43.98 GiB memory in use. Of the allocated memory "
        f"{allocated_by_pytorch_gib:.2f} GiB is allocated by PyTorch, and 12.00 MiB is reserved by PyTorch but "
        "unallocated.\n")


def _analysed(text: str, tmp_path):
    from forensics.timeline import build_timeline

    (tmp_path / "tp1.log").write_text(text, encoding="utf-8")
    return run_all(build_timeline([tmp_path / "tp1.log"]))


def test_an_oom_in_the_loader_says_the_weights_do_not_fit_with_the_figures_it_printed(tmp_path):
    findings, root = _analysed(_traceback_oom(43.10), tmp_path)
    by_rule = fired(findings)
    assert root == "SGL-GPU-004", [f.rule_id for f in findings]
    summary = by_rule["SGL-GPU-004"].summary
    assert summary.startswith("CUDA ran out of memory while the weights were loading"), summary
    assert "GPU 1 could not allocate 0.88 GiB with 0.39 GiB of 44.39 GiB free" in summary, summary
    assert "KV cache" not in summary


def test_an_oom_in_the_loader_on_a_gpu_another_process_holds_is_not_the_weights(tmp_path):
    findings, root = _analysed(_traceback_oom(0.40), tmp_path)
    assert root != "SGL-GPU-004", [f.rule_id for f in findings]
    assert fired(findings)[root].category in ("stranded_context", "host_memory_not_reclaimed"), root

"""The engines' crash artifacts: SGLang crash dumps and snapshots, PyTorch's NCCL flight recorder.

The dumps are written by ``tests/crash_artifacts.py`` as the engines write them; the hostile ones
by hand. Nothing in a pickle may run, and the report completes whatever the pickle holds.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
from pathlib import Path

import crash_artifacts as ca
import pytest

from forensics.detectors import run_all
from forensics.timeline import build_timeline
from parsers import crash_dump, flight_recorder

ROOT = Path(__file__).resolve().parents[1]


def _write(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


def _analyse(*paths: Path):
    tl = build_timeline(list(paths))
    findings, root = run_all(tl)
    return tl, {f.rule_id: f for f in findings}, root


@pytest.mark.parametrize("name", sorted(ca.SCENARIO_FILES))
def test_committed_scenario_inputs_are_what_the_helper_writes(name):
    for rel, data in ca.SCENARIO_FILES[name]().items():
        assert (ca.SCENARIOS / name / "input" / rel).read_bytes() == data, f"run python tests/crash_artifacts.py ({rel})"


def test_crash_dump_rows_name_the_requests_and_the_launch():
    (path, data), = [(k, v) for k, v in ca.long_request_dump().items() if k.endswith(".pkl")]
    ev = crash_dump.parse_bytes(data, path).events
    reqs = ev.filter(ev["kind"] == "crash_request")
    assert reqs.height == 43
    unfinished = reqs.filter(reqs["attrs"].str.contains('"finished": false'))
    assert sorted(unfinished["tokens"].to_list()) == [1100, 3200, 24000]
    assert unfinished.filter(unfinished["tokens"] == 24000)["count"].to_list() == [4096]
    assert str(unfinished["ts"].max()) == "2026-11-30 09:59:58+00:00"
    launch = ev.filter(ev["kind"] == "launch_command")
    assert '"--context-length": "32768"' in launch["attrs"][0]
    assert '"context_length": 32768' in ev.filter(ev["kind"] == "server_args")["attrs"][0]
    summary = ev.filter(ev["kind"] == "crash_dump")
    assert "40 finished and 3 unfinished" in summary["text"][0] and "gpu-node-07" in summary["text"][0]


def test_older_dump_without_server_args_or_launch_command():
    # 0.4.9-era: unfinished entries carry an empty output; server_args None after a failed pickle
    reqs = [ca.request("a", 500, 64, ca.T0 - 3, ca.T0, False)]
    with ca.engine_paths():
        data = pickle.dumps({"server_args": None, "requests": [(reqs[0][0], {}, ca.T0 - 3, ca.T0)]}, protocol=2)
    ev = crash_dump.parse_bytes(data, "d/h/crash_dump_2026-11-30_10-00-00.pkl").events
    assert ev.filter(ev["kind"] == "crash_request")["tokens"].to_list() == [500]
    assert "server_args not in the dump" in ev.filter(ev["kind"] == "crash_dump")["text"][0]
    assert ev.filter(ev["kind"].is_in(["server_args", "launch_command"])).height == 0


def test_kv_refusal_names_the_requests_in_flight(tmp_path):
    log = ("[2026-11-30 09:50:00 TP0] max_total_num_tokens=20480, chunked_prefill_size=8192, max_prefill_tokens=16384, "
           "max_running_requests=64, context_len=32768, available_gpu_mem=4.10 GB\n"
           "[2026-11-30 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
           "RuntimeError: Prefill out of memory. Try to lower your batch size.\n"
           "Try to allocate 24000 tokens.\nAvailable tokens: 20480\n")
    (tmp_path / "sglang.log").write_text(log)
    _write(tmp_path, ca.long_request_dump())
    _tl, by_rule, _root = _analyse(tmp_path)
    assert "24,000 input tokens" in by_rule["SGL-KV-002"].summary
    assert by_rule["SGL-KV-002"].figures["crash_dump_longest_input_tokens"] == 24000
    kv3 = by_rule["SGL-KV-003"]
    assert kv3.confidence == "high" and "24000 input tokens" in kv3.summary


def test_the_dump_alone_without_a_pool_fires_nothing(tmp_path):
    _write(tmp_path, {k: v for k, v in ca.long_request_dump().items() if k.endswith(".pkl")})
    _tl, by_rule, _root = _analyse(tmp_path)
    assert "SGL-KV-003" not in by_rule


def test_a_rank_without_a_dump_is_the_likely_culprit(tmp_path):
    files = {k: v for k, v in ca.rank5_behind().items() if not k.endswith("_5")}
    # without rank 5's dump every other rank entered #1580: the missing one is named
    _tl, by_rule, root = _analyse(_write(tmp_path, files))
    f = by_rule["SGL-NCCL-007"]
    assert f.ranks == [5] and f.confidence == "medium" and "no dump" in f.summary
    assert root == "SGL-NCCL-007"


def test_all_collectives_completed_names_no_rank(tmp_path):
    base = int(ca.T0 * 1e9)
    files = {f"trace_{r}": ca.flight_recorder_dump(
        4, [ca.fr_entry(i, s, "nccl:all_reduce", "completed", base + s, [[8]]) for i, s in enumerate(range(1, 6))],
        last_enqueued=5, last_started=5, last_completed=5) for r in range(4)}
    _tl, by_rule, _root = _analyse(_write(tmp_path, files))
    assert not {"SGL-NCCL-007", "SGL-NCCL-008"} & set(by_rule)


def test_across_hosts_the_rank_behind_is_named_with_its_host(tmp_path):
    dumps = ca.rank5_behind()
    a = _write(tmp_path / "node-a", {k: v for k, v in dumps.items() if int(k.rsplit("_", 1)[1]) < 4})
    b = _write(tmp_path / "node-b", {k: v for k, v in dumps.items() if int(k.rsplit("_", 1)[1]) >= 4})
    tl = build_timeline([a, b])
    findings, root = run_all(tl)
    f = next(x for x in findings if x.rule_id == "SGL-NCCL-007")
    assert f.ranks == [5] and f.hosts == ["node-b"] and "rank 5 on node-b" in f.summary
    assert root == "SGL-NCCL-007"


def test_flight_recorder_json_dump_reads_like_the_pickle():
    import json

    doc = pickle.loads(ca.rank5_behind()["nccl_trace_rank_5"])
    ev_json = flight_recorder.parse_bytes(json.dumps(doc).encode(), "x/nccl_trace_rank_5.json").events
    ev_pkl = flight_recorder.parse_bytes(ca.rank5_behind()["nccl_trace_rank_5"], "x/nccl_trace_rank_5").events
    assert ev_json["count"].to_list() == ev_pkl["count"].to_list()


class _Evil:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_hostile_crash_dump_runs_nothing_and_the_report_completes(tmp_path):
    marker = tmp_path / "pwned"
    evil = pickle.dumps({"server_args": _Evil(marker), "requests": [(_Evil(marker), {}, ca.T0, ca.T0)],
                         "launch_command": "python -m sglang.launch_server --tp 8"})
    inp = _write(tmp_path / "in", {"crash/h/crash_dump_2026-11-30_10-00-00.pkl": evil,
                                   "nccl_trace_rank_0": b"\x80\x02}q\x00(X\x07\x00\x00\x00entriesq\x01]q\x02X\x09\x00\x00"
                                                        b"\x00pg_configq\x03cos\nsystem\nq\x04",  # truncated
                                   "nccl_trace_rank_1": pickle.dumps({"entries": [_Evil(marker)], "pg_config": {},
                                                                      "version": "2.5", "pg_status": {}})})
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "report", str(inp), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert not marker.exists()
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    findings = (out / "findings.json").read_text()
    assert "nccl_trace_rank_0: not read: pickle stream ends before its STOP opcode" in findings


# ---------------------------------------------------------------------------------------------
# collect: the artifacts the server's argv and the ranks' environment name


def test_collect_gathers_the_crash_folder_and_the_flight_recorder_redacted(tmp_path, monkeypatch):
    from test_collect import FAKEBIN, HF, make_proc, planted_log, read_bundle

    from forensics.collect import CollectOptions, collect

    monkeypatch.setenv("PATH", f"{FAKEBIN}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "ok")
    crash = tmp_path / "crash"
    prompt = f"summarise this: {'lorem ipsum ' * 100} token={HF}"
    reqs = [ca.request("a", 900, 64, ca.T0 - 9, ca.T0 - 8, True, 64), ca.request("b", 24_000, 4096, ca.T0 - 3, ca.T0, False)]
    reqs[0] = (ca.GenerateReqInput(text=prompt, sampling_params={"max_new_tokens": 64}, rid="a"), *reqs[0][1:])
    launch = f"sglang/launch_server.py --tp 8 --crash-dump-folder {crash} --api-key {HF}"
    _write(crash, {"gpu-node-07/crash_dump_2026-11-30_10-00-00.pkl": ca.sglang_crash_dump(reqs, ca.ServerArgs(), launch)})
    _write(tmp_path / "fr", {f"nccl_trace_rank_{r}": v for r, v in enumerate(ca.rank5_behind().values()) if r < 2})
    (tmp_path / "fr" / "nccl_trace_rank_notes.txt").write_text("not a dump")
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--tp", "8", "--crash-dump-folder", str(crash)]
    env = ["PATH=/usr/bin", "TORCH_NCCL_TRACE_BUFFER_SIZE=2000", f"TORCH_NCCL_DEBUG_INFO_TEMP_FILE={tmp_path}/fr/nccl_trace_rank_"]
    proc = make_proc(tmp_path, planted_log(tmp_path / "tp0.log"), argv=argv, environ=env)
    out = tmp_path / "out" / "bundle.tar.gz"
    out.parent.mkdir()
    manifest, members = read_bundle(collect(CollectOptions(output=out, proc_root=proc, cgroup_root=tmp_path / "cg",
                                                           timeout_s=5, budget_s=40)))
    names = sorted(k for k in members if k.startswith(("crash/", "flight_recorder/")))
    assert names == ["crash/gpu-node-07/crash_dump_2026-11-30_10-00-00.pkl",
                     "flight_recorder/nccl_trace_rank_0", "flight_recorder/nccl_trace_rank_1"]
    dump = members["crash/gpu-node-07/crash_dump_2026-11-30_10-00-00.pkl"]
    assert HF.encode() not in dump and b"lorem ipsum" not in dump  # the key redacted, the prompt reduced to its length
    ev = crash_dump.parse_bytes(dump, "crash/gpu-node-07/x.pkl").events
    first = ev.filter(ev["kind"] == "crash_request")["attrs"][0]
    assert f'"input_chars": {len(prompt)}' in first
    assert ev.filter(ev["kind"] == "crash_request")["tokens"].to_list() == [900, 24000]
    # the bundle reads back into the diagnosis
    tl = build_timeline([out])
    assert {"crash_request", "fr_dump"} <= set(tl.events["kind"].unique().to_list())


def test_collect_caps_and_a_hostile_pickle_left_out(tmp_path, monkeypatch):
    from forensics.collect import crash_artifacts as cc

    monkeypatch.setattr(cc, "MAX_FILES", 2)
    crash = tmp_path / "crash" / "h"
    crash.mkdir(parents=True)
    for i in range(4):
        (crash / f"crash_dump_2026-11-30_10-00-0{i}.pkl").write_bytes(b"\x80\x04N.")
        os.utime(crash / f"crash_dump_2026-11-30_10-00-0{i}.pkl", (ca.T0 + i, ca.T0 + i))
    gaps: list[str] = []
    procs = [{"pid": 1, "cmdline": f"python3\x00-m\x00sglang.launch_server\x00--crash-dump-folder\x00{tmp_path / 'crash'}"}]
    found = cc.find(procs, tmp_path / "noproc", gaps.append)
    assert [f.path.name[-6:] for f in found] == ["03.pkl", "02.pkl"] and "2 more file(s) left out" in gaps[0]
    with pytest.raises(Exception, match="STOP"):
        cc.redact_pickle(b"\x80\x04\x8c\x02os\x94", lambda b: (b, None))


# ---------------------------------------------------------------------------------------------
# py-spy stacks and vLLM's input dump, in any log


def test_pyspy_stacks_say_where_each_rank_was():
    folder = ROOT / "fixtures" / "scenarios" / "hang_pyspy_rank_outside_collective" / "input"
    tl, by_rule, _root = _analyse(folder)
    stacks = tl.events.filter(tl.events["kind"] == "pyspy_stack")
    assert stacks.height == 8  # main and watchdog thread of four ranks
    assert stacks["ts"].null_count() == 0  # stamped by the "Pyspy dump for PID" line before them
    hang = by_rule["SGL-NCCL-004"]
    assert "TP0,1,3 in all_reduce (distributed_c10d.py:2501); TP2 in acquire (radix_cache.py:402)" in hang.summary
    assert "TP2 was not in a collective" in hang.summary


def test_pyspy_older_hex_thread_ids_and_native_frames():
    from parsers import stack_dumps

    text = ("Process 77: python3 -m sglang.launch_server --tp 2\nPython v3.10.12 (/usr/bin/python3.10)\n\n"
            'Thread 0x7F2A2B8FF740 (active+gil): "MainThread"\n    synchronize (torch/cuda/__init__.py:892)\n'
            "    forward_batch (sglang/srt/model_executor/model_runner.py:1702)\n")
    row = stack_dumps.parse(text).events.row(0, named=True)
    assert row["pid"] == 77 and row["tp_rank"] is None and '"waiting_in": "cuda_sync"' in row["attrs"]


VLLM_DUMP = (
    "(EngineCore_0 pid=311) ERROR 11-30 10:00:01 [dump_input.py:69] Dumping input data for V1 LLM engine (v0.10.1) "
    "with config: model='/models/demo-70b', speculative_config=None, tokenizer='/models/demo-70b', max_seq_len=32768, "
    "tensor_parallel_size=4, \n"
    "(EngineCore_0 pid=311) ERROR 11-30 10:00:01 [dump_input.py:76] Dumping scheduler output for model execution: "
    "SchedulerOutput(scheduled_new_reqs=[NewRequestData(req_id=cmpl-9,prompt_token_ids_len=24000,"
    "num_computed_tokens=0),NewRequestData(req_id=cmpl-10,prompt_token_ids_len=1200,num_computed_tokens=0)],"
    "total_num_scheduled_tokens=8192,finished_req_ids=[])\n"
    "(EngineCore_0 pid=311) ERROR 11-30 10:00:01 [dump_input.py:79] Dumping scheduler stats: SchedulerStats("
    "num_running_reqs=7, num_waiting_reqs=3, kv_cache_usage=0.91)\n")


def test_vllm_input_dump_rows():
    from parsers import stack_dumps

    ev = stack_dumps.parse(VLLM_DUMP).events
    assert ev["kind"].to_list() == ["engine_input_dump", "engine_scheduler_output", "engine_scheduler_stats"]
    out = ev.row(1, named=True)
    assert out["count"] == 2 and out["tokens"] == 8192 and "24000, 1200" in out["text"]
    stats = ev.row(2, named=True)
    assert stats["ratio"] == 0.91 and stats["count"] == 7


def _weird(rng, depth=0):
    """A value of any shape a hostile dump could hold where a field is expected."""
    pick = rng.randrange(12 if depth < 3 else 7)
    plain = [None, True, 1 << rng.randrange(1, 200), -7, 1.5e300, "x" * rng.randrange(0, 300), b"\x00\xff"]
    if pick < len(plain):
        return plain[pick]
    d = depth + 1
    if pick == 7:
        return [_weird(rng, d) for _ in range(rng.randrange(4))]
    if pick == 8:
        return {"max_new_tokens": _weird(rng, d), "prompt_tokens": _weird(rng, d), "finish_reason": _weird(rng, d)}
    if pick == 9:
        return tuple(_weird(rng, d) for _ in range(rng.randrange(5)))
    if pick == 10:
        return ca.GenerateReqInput(text=_weird(rng, d), input_ids=_weird(rng, d), sampling_params=_weird(rng, d),
                                   rid=_weird(rng, d))
    return {"collective_seq_id": _weird(rng, d), "process_group": _weird(rng, d), "profiling_name": _weird(rng, d),
            "duration_ms": _weird(rng, d), "frames": [{"name": _weird(rng, d)}], "time_created_ns": _weird(rng, d),
            "input_sizes": _weird(rng, d), "state": _weird(rng, d)}


def test_dumps_of_any_shape_parse_or_are_refused_never_crash():
    import random

    from parsers.schema import NotThisFormat

    rng = random.Random(2026)
    for _ in range(300):
        def w():
            return _weird(rng)
        docs = [
            {"server_args": w(), "requests": [(w(), w(), w(), w()) for _ in range(3)] + [w()], "launch_command": w()},
            {"version": w(), "pg_config": {"0": {"name": w(), "ranks": w()}, "x": w()},
             "pg_status": {"0": {"last_enqueued_collective": w(), "last_completed_collective": w()}},
             "entries": [w() for _ in range(4)] + [{"collective_seq_id": w(), "state": w()}]},
        ]
        for doc, parser in zip(docs, (crash_dump, flight_recorder), strict=True):
            with ca.engine_paths():
                data = pickle.dumps(doc, protocol=rng.choice([2, 4, 5]))
            try:
                res = parser.parse_bytes(data, "crash/h/nccl_trace_rank_3")
            except NotThisFormat:
                continue
            assert res.events.height >= 1


def test_a_timeout_without_dumps_says_how_to_get_them():
    _tl, by_rule, _root = _analyse(ROOT / "fixtures" / "scenarios" / "nccl_midrun_hang" / "input")
    assert any("TORCH_NCCL_DUMP_ON_TIMEOUT=1" in a for a in by_rule["SGL-NCCL-002"].remediation.actions)
    _tl, by_rule, _root = _analyse(ROOT / "fixtures" / "scenarios" / "nccl_flight_recorder_rank_behind" / "input")
    assert not any("TORCH_NCCL_DUMP_ON_TIMEOUT" in a for a in by_rule["SGL-NCCL-002"].remediation.actions)


def test_a_dump_the_log_announces_but_the_input_lacks_is_asked_for(tmp_path):
    (tmp_path / "sglang.log").write_text(
        "[2026-11-30 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        "RuntimeError: Prefill out of memory. Try to lower your batch size.\n"
        "Try to allocate 24000 tokens.\nAvailable tokens: 20480\n"
        "[2026-11-30 10:00:01] Dumping requests before crash. self.crash_dump_folder='/var/crash/sglang'\n"
        "[2026-11-30 10:00:01] Dumped 40 finished and 3 unfinished requests before crash to "
        "/var/crash/sglang/gpu-node-07/crash_dump_2026-11-30_10-00-01.pkl\n")
    _tl, by_rule, _root = _analyse(tmp_path)
    assert any("/var/crash/sglang/gpu-node-07/crash_dump_2026-11-30_10-00-01.pkl" in a
               for a in by_rule["SGL-KV-002"].remediation.actions)


def test_stack_dump_scan_and_binary_parsers_take_anything():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from parsers import registry, stack_dumps
    from parsers.safe_pickle import UnsafePickle
    from parsers.schema import NotThisFormat

    pieces = st.sampled_from(["Process 12: sglang::scheduler_TP3\n", 'Thread 12 (active): "MainThread"\n',
                              "    all_reduce (x.py:1)\n", "    f (", "Thread 0x7F (idle)\n", "SchedulerOutput(",
                              "prompt_token_ids_len=9" + "9" * 30, "SchedulerStats(kv_cache_usage=1e309, ", "num_running_reqs=1.2.3, ", "Process " + "9" * 40 + ": x\n",
                              "Dumping input data for V1 LLM engine (v1) with config: ", "\n", "\x00", "\ufffd"])

    @settings(max_examples=200)
    @given(st.lists(st.one_of(pieces, st.text(max_size=10)), max_size=30).map("".join))
    def scan(text):
        stack_dumps.parse(text, "x.log")

    @settings(max_examples=200)
    @given(st.binary(max_size=300))
    def binary(blob):
        for data in (blob, b"\x80\x04" + blob, b'{"version": "2.5", "pg_config": {}, "entries": [' + blob):
            fmt = registry.best_binary_format(data)
            if fmt is None:
                continue
            with contextlib.suppress(NotThisFormat, UnsafePickle):
                registry.binary_parsers()[fmt].parse_bytes(data, "nccl_trace_rank_1")

    scan()
    binary()


def test_the_report_charts_the_dumped_requests_by_arrival():
    from forensics.report.plots import timeline_plots

    tl = build_timeline([ROOT / "fixtures" / "scenarios" / "crash_dump_request_longer_than_pool" / "input"])
    fig = next(f for f in timeline_plots(tl).figures if f.key == "crash-dump-requests")
    by_name = {t["name"]: t for t in fig.data}
    assert len(by_name["finished"]["x"]) == 40 and max(by_name["unfinished at the crash"]["y"]) == 24000

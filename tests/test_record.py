"""forensics record: sampling a fake host, the ring's caps and crash safety, a hung GPU, bounded memory.

Time is simulated (tests/record_fakes.Clock): nothing here sleeps for an interval.
"""

from __future__ import annotations

import gc
import gzip
import os
import tracemalloc
from pathlib import Path

import pytest
from record_fakes import Clock, FakeNvml, add_process, fake_host, remove_process, write_meminfo, write_vmstat

from forensics.record import Recorder, RecordOptions, ring_status, run, status_text
from forensics.record.gpu import SmiSource, TimedProbe
from forensics.record.ring import (
    OPEN_NAME,
    RingWriter,
    decode_segment,
    encode_segment,
    export_window,
    read_records,
    sealed_segments,
)
from forensics.record.sampler import PAGE, HostSampler
from forensics.record.systemd import unit_text
from parsers import record as record_parser

FAKEBIN = Path(__file__).parent / "fakebin"
SCHED_ARGV = ["sglang::scheduler_TP0"]
LAUNCH_ARGV = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "8"]


def _opts(tmp_path: Path, proc: Path, cg: Path, **kw) -> RecordOptions:
    base = dict(folder=tmp_path / "ring", interval_s=5.0, proc_root=proc, cgroup_root=cg, shm=tmp_path,
                gpu="none", host="gpu-a")
    base.update(kw)
    return RecordOptions(**base)


def _rows(folder: Path):
    import polars as pl

    frames = []
    for p in sealed_segments(folder):
        frames.append(record_parser.parse(gzip.decompress(p.read_bytes()).decode(), p.name).events)
    return pl.concat(frames) if frames else None


# -- sampling a fake host


def test_sample_reads_meminfo_cgroup_v2_shm_and_engine_processes(tmp_path: Path) -> None:
    proc, cg = fake_host(tmp_path)
    add_process(proc, 100, "python3", LAUNCH_ARGV, 2 << 30)
    add_process(proc, 101, "sglang::schedul", SCHED_ARGV, 40 << 30, ppid=100)
    clock = Clock()
    rec = Recorder(_opts(tmp_path, proc, cg), clock)
    s = rec.step()
    assert s["meminfo"]["MemTotal"] == 470_000_000 and s["vmstat"] == {"oom_kill": 0}
    assert [p["pid"] for p in s["procs"]] == [101, 100]  # engine processes only, largest first; not sshd
    assert s["procs"][0]["rss"] == (40 << 30) // PAGE * PAGE and s["procs"][0]["ppid"] == 100
    cgroups = {c["path"]: c for c in s["cgroups"]}
    assert cgroups["/system.slice/sglang.service"]["max"] is None  # "max" = no limit
    assert cgroups["/system.slice/sglang.service"]["current"] == 123456789
    assert "/system.slice/forensics-record.service" not in cgroups  # ours only when no engine runs
    assert s["shm"]["total"] > 0
    assert s["gaps"]["gpus"].startswith("GPU sampling off")


def test_cgroup_v1_limits_and_oom_control(tmp_path: Path) -> None:
    proc, cg = fake_host(tmp_path)
    add_process(proc, 101, "sglang::schedul", SCHED_ARGV, 1 << 30, cgroup="9:memory:/docker/abc\n")
    d = cg / "memory" / "docker" / "abc"
    d.mkdir(parents=True)
    (d / "memory.usage_in_bytes").write_text("1073741824\n")
    (d / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "unlimited"
    (d / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    got = HostSampler(proc, cg, tmp_path).processes()["cgroups"]
    assert got == [{"path": "/docker/abc", "v": 1, "current": 1 << 30, "max": None, "peak": None, "failcnt": None,
                    "events": {"oom_kill_disable": 0, "under_oom": 0, "oom_kill": 2}}]


def test_nvml_gpus_and_processes_become_timeline_rows(tmp_path: Path) -> None:
    proc, cg = fake_host(tmp_path)
    add_process(proc, 101, "sglang::schedul", SCHED_ARGV, 1 << 30)
    nv = FakeNvml([{"used": 90 << 30, "total": 141 << 30, "util": 97}, {"used": 1 << 20, "total": 141 << 30}],
                  {0: [(101, 89 << 30)]})
    clock = Clock()
    rec = Recorder(_opts(tmp_path, proc, cg, gpu="nvml", nvml_module=nv), clock)
    rec.step()
    rec.close()
    ev = _rows(tmp_path / "ring")
    gpu = ev.filter(ev["kind"] == "gpu_memory").sort("gpu")
    assert gpu["used_bytes"].to_list() == [90 << 30, 1 << 20] and gpu["ratio"].to_list()[0] == pytest.approx(0.97)
    assert '"pci_bus_id": "0000:18:00"' in gpu["attrs"][0] and '"gpu_source": "nvml"' in gpu["attrs"][0]
    gp = ev.filter(ev["kind"] == "gpu_process_sample").row(0, named=True)
    assert (gp["gpu"], gp["pid"], gp["comm"], gp["used_bytes"], gp["tp_rank"]) == (0, 101, "sglang::schedul", 89 << 30, None)
    ps = ev.filter(ev["kind"] == "process_sample").row(0, named=True)
    assert (ps["pid"], ps["tp_rank"], ps["rank"]) == (101, 0, "TP0")


def test_nvidia_smi_fallback_reads_the_fake(tmp_path: Path) -> None:
    got = SmiSource(str(FAKEBIN / "nvidia-smi"), timeout_s=10).query()
    assert got["gpus"] == [{"index": 0, "uuid": "GPU-11111111-2222-3333-4444-555555555555", "name": "NVIDIA H100 80GB HBM3",
                            "pci_bus_id": "00000000:18:00.0", "used": 96413 << 20, "total": 81559 << 20, "util": 0.0}]
    assert got["procs"] == [{"gpu": 0, "pid": 4242, "used": 80000 << 20, "name": "python3"}]


def test_a_hung_nvidia_smi_is_killed_at_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "hang")
    with pytest.raises(TimeoutError, match="did not answer in 0.3 s"):
        SmiSource(str(FAKEBIN / "nvidia-smi"), timeout_s=0.3).query()


def test_no_gpu_is_a_recorded_gap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc, cg = fake_host(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    rec = Recorder(_opts(tmp_path, proc, cg, gpu="smi"), Clock())
    assert "no nvidia-smi" in rec.step()["gaps"]["gpus"]


# -- a wedged driver never stalls the host samples


def test_hung_gpu_query_is_a_stall_event_and_host_samples_go_on(tmp_path: Path) -> None:
    proc, cg = fake_host(tmp_path)
    nv = FakeNvml([{"used": 1 << 30, "total": 141 << 30}])
    clock = Clock()
    rec = Recorder(_opts(tmp_path, proc, cg, gpu="nvml", nvml_module=nv, gpu_timeout_s=0.05), clock)
    nv.hang.set()
    first = rec.step()
    assert "did not answer" in first["gaps"]["gpus"] and first["meminfo"]["MemTotal"] == 470_000_000
    calls = nv.calls
    for _ in range(3):
        clock.sleep(5)
        s = rec.step()
        assert "still stuck" in s["gaps"]["gpus"] and s["meminfo"]
    assert nv.calls == calls  # no new query piles up behind the stuck one
    nv.hang.clear()
    nv.release.set()
    rec.gpu_probe._thread.join(5)
    clock.sleep(5)
    assert rec.step()["gpus"]["gpus"][0]["used"] == 1 << 30
    rec.close()
    ev = _rows(tmp_path / "ring")
    stall = ev.filter(ev["kind"] == "record_stall")
    assert stall.height == 1 and '"probe": "gpus"' in stall["attrs"][0]
    assert ev.filter(ev["kind"] == "host_memory").height == 5


def test_timed_probe_reports_errors() -> None:
    def boom() -> None:
        raise RuntimeError("NVML_ERROR_GPU_IS_LOST")

    status, got = TimedProbe(boom, 1.0).call(0.0)
    assert status == "error" and "GPU_IS_LOST" in str(got)


# -- the ring: rotation, caps, crashes


def test_ring_rotates_and_never_exceeds_its_size_cap(tmp_path: Path) -> None:
    clock = Clock()
    w = RingWriter(tmp_path, "h", max_bytes=64 * 1024, max_age_s=10 * 86400, segment_s=60, clock=clock)
    noise = os.urandom(1500).hex()  # incompressible, so the cap is what bounds the ring
    for _ in range(600):
        w.append({"t": clock(), "k": "sample", "pad": noise})
        clock.sleep(5)
        size = sum(p.stat().st_size for p in tmp_path.iterdir())
        assert size <= 64 * 1024  # sealed ≤ cap − the open segment's share; the open segment ≤ its share
    w.close()
    segs = sealed_segments(tmp_path)
    assert sum(p.stat().st_size for p in segs) <= 64 * 1024
    assert w.dropped and w.dropped == sorted(w.dropped)  # oldest first
    kept = read_records(tmp_path)
    assert kept[-1]["t"] == clock() - 5 and kept[0]["t"] > Clock()()  # the newest kept, the oldest gone


def test_ring_drops_segments_older_than_the_age_cap(tmp_path: Path) -> None:
    clock = Clock()
    w = RingWriter(tmp_path, "h", max_bytes=1 << 30, max_age_s=3600, segment_s=300, clock=clock)
    for _ in range(2 * 720):  # two hours at 5 s
        w.append({"t": clock(), "k": "sample"})
        clock.sleep(5)
    w.close()
    first = read_records(tmp_path)[0]["t"]
    assert clock() - first <= 3600 + 300


def test_crash_mid_write_leaves_segments_whole_or_ignored(tmp_path: Path) -> None:
    clock = Clock()
    w = RingWriter(tmp_path, "h", segment_s=60, clock=clock)
    for _ in range(30):
        w.append({"t": clock(), "k": "sample", "meminfo": {"MemTotal": 1000, "MemAvailable": 500}})
        clock.sleep(5)
    # the host dies: the open segment's last line is cut, a segment being sealed is left as a temp file,
    # and one sealed segment was cut by a broken disk
    w._fh.write(b'{"t": 1, "k": "sam')
    w._fh.close()
    segs = sealed_segments(tmp_path)
    (tmp_path / f".{segs[0].name}.tmp").write_bytes(segs[0].read_bytes()[:40])
    segs[1].write_bytes(segs[1].read_bytes()[:-12])
    assert decode_segment(segs[1].read_bytes()).refused
    text = gzip.decompress(segs[0].read_bytes()).decode()
    cut = record_parser.parse(text[: len(text) // 2], "x")
    assert cut.events.height == 0 and cut.notes == ["record segment ignored: no footer: the segment was cut (a crash mid-write)"]
    open_before = (tmp_path / OPEN_NAME).read_bytes().count(b"\n") - 1  # complete records, less the header
    # the recorder starts again: the open segment's complete lines are sealed, the torn one dropped
    w2 = RingWriter(tmp_path, "h", segment_s=60, clock=clock)
    assert not (tmp_path / OPEN_NAME).exists()
    st = ring_status(tmp_path)
    assert [name for name, _ in st.refused] == [segs[1].name]
    salvaged = decode_segment(sealed_segments(tmp_path)[-1].read_bytes())
    assert salvaged.refused is None and len(salvaged.records) == open_before and salvaged.header["salvaged"]
    assert all(r["t"] > 1 for r in read_records(tmp_path))
    w2.close()


def test_open_segment_is_readable_by_the_parser(tmp_path: Path) -> None:
    clock = Clock()
    w = RingWriter(tmp_path, "h", segment_s=600, clock=clock)
    for _ in range(3):
        w.append({"t": clock(), "k": "sample", "meminfo": {"MemTotal": 1000, "MemAvailable": 500}})
        clock.sleep(5)
    w._fh.write(b'{"t": 1, "k"')
    res = record_parser.parse((tmp_path / OPEN_NAME).read_text(), OPEN_NAME)
    assert res.events.filter(res.events["kind"] == "host_memory").height == 3 and res.unrecognized == 1


def test_export_window_takes_the_last_hour_and_marks_collect(tmp_path: Path) -> None:
    clock = Clock()
    w = RingWriter(tmp_path, "h", segment_s=300, clock=clock)
    for _ in range(2 * 720):
        w.append({"t": clock(), "k": "sample", "procs": [{"pid": 1, "cmd": "sglang::scheduler_TP0 --api-key sk-abcdefghijklmnopqrstuvwx"}]})
        clock.sleep(5)
    out = export_window(tmp_path, clock() - 3600, clock(), transform=lambda s: s.replace("sk-abcdefghijklmnopqrstuvwx", "[REDACTED]"))
    recs = [r for _, data, _ in out for r in decode_segment(data).records]
    assert clock() - 3600 <= recs[0]["t"] and len(recs) == 721  # 720 samples + the collect event
    assert recs[-1] == {"t": clock(), "k": "event", "event": "collect"}
    assert all("sk-" not in str(r) for r in recs)


# -- the loop, driven by a simulated clock


def test_run_samples_every_interval_until_the_duration(tmp_path: Path) -> None:
    proc, cg = fake_host(tmp_path)
    clock = Clock()
    rec = run(_opts(tmp_path, proc, cg, interval_s=5.0, duration_s=60.0), clock=clock, sleep=clock.sleep)
    assert rec.samples == 12
    kinds = [r.get("event") or r["k"] for r in read_records(tmp_path / "ring")]
    assert kinds[0] == "start" and kinds[-1] == "stop" and kinds.count("sample") == 12
    text = status_text(tmp_path / "ring", now=clock())
    assert "every 5 s" in text and "host memory" in text and "1 sealed segment +" in text


def test_process_exit_and_oom_kill_counter_become_events(tmp_path: Path) -> None:
    proc, cg = fake_host(tmp_path)
    add_process(proc, 101, "sglang::schedul", SCHED_ARGV, 40 << 30)
    clock = Clock()
    rec = Recorder(_opts(tmp_path, proc, cg), clock)
    rec.step()
    clock.sleep(5)
    remove_process(proc, 101)
    write_vmstat(proc, 1)
    rec.step()
    rec.close()
    ev = _rows(tmp_path / "ring")
    gone = ev.filter(ev["kind"] == "process_exit").row(0, named=True)
    assert (gone["pid"], gone["used_bytes"], gone["tp_rank"]) == (101, (40 << 30) // PAGE * PAGE, 0)
    assert ev.filter(ev["kind"] == "oom_kill_count")["count"].to_list() == [1]


def test_recorder_memory_stays_bounded_over_a_simulated_day(tmp_path: Path) -> None:
    """A day at one sample every six minutes with processes coming and going: the recorder's own heap stops
    growing (identity cache bounded by the live processes, nothing kept per sample)."""
    proc, cg = fake_host(tmp_path)
    clock = Clock()
    rec = Recorder(_opts(tmp_path, proc, cg, interval_s=360.0, max_bytes=256 * 1024, segment_s=1800), clock)
    tracemalloc.start(6)
    ours = [tracemalloc.Filter(True, "*/forensics/record/*", all_frames=True)]  # not other tests' threads
    try:
        peaks = []
        for i in range(240):
            if i % 10 == 0:  # a restart every hour: new pids
                for pid in [p for p in os.listdir(proc) if p.isdigit() and int(p) >= 1000]:
                    remove_process(proc, int(pid))
                for r in range(4):
                    add_process(proc, 1000 + i * 4 + r, "sglang::schedul", [f"sglang::scheduler_TP{r}"], (i + 1) << 20)
            write_meminfo(proc, 470_000_000, 460_000_000 - i)
            rec.step()
            clock.sleep(360)
            if i in (60, 150, 239):
                gc.collect()
                snap = tracemalloc.take_snapshot().filter_traces(ours)
                peaks.append(sum(st.size for st in snap.statistics("filename")))
    finally:
        tracemalloc.stop()
    rec.close()
    assert len(rec.host.procs._ident) <= 6
    # a leak grows with every sample, in both halves; a one-off (a dict resizing) shows in one at most
    grew = [b - a for a, b in zip(peaks, peaks[1:], strict=False)]
    assert min(grew) < 64 * 1024 and max(grew) < 1024 * 1024, peaks
    assert sum(p.stat().st_size for p in sealed_segments(tmp_path / "ring")) <= 256 * 1024


# -- installing and status


def test_systemd_unit_is_hardened_and_runs_the_recorder(tmp_path: Path) -> None:
    text = unit_text(Path("/var/lib/forensics/record"), 5.0, executable="/usr/local/bin/forensics")
    assert "ExecStart=/usr/local/bin/forensics record --dir /var/lib/forensics/record --interval 5" in text
    for line in ("ProtectSystem=strict", "NoNewPrivileges=yes", "OOMScoreAdjust=-900", "Restart=always",
                 "StateDirectory=forensics/record", "ReadWritePaths=/var/lib/forensics/record"):
        assert line in text


def test_status_of_an_empty_ring(tmp_path: Path) -> None:
    assert "nothing recorded" in status_text(tmp_path)


def test_segment_bytes_are_deterministic() -> None:
    a = encode_segment({"host": "h"}, [{"t": 1.0}])
    assert a == encode_segment({"host": "h"}, [{"t": 1.0}]) and decode_segment(a).records == [{"t": 1.0}]


def test_collect_bundles_the_ring_and_the_report_charts_it(tmp_path: Path) -> None:
    """Done means: a recorder run of 10 samples at 1 s → collect's bundle → the timeline and host chart."""
    import json
    import tarfile
    import time

    from forensics.collect import CollectOptions, collect
    from forensics.report.plots import timeline_plots
    from forensics.timeline import build_timeline

    proc, cg = fake_host(tmp_path)
    add_process(proc, 100, "python3", LAUNCH_ARGV, 2 << 30)
    clock = Clock(time.time() - 30)
    run(_opts(tmp_path, proc, cg, interval_s=1.0, duration_s=10.0), clock=clock, sleep=clock.sleep)
    out = collect(CollectOptions(output=tmp_path / "b.tar", proc_root=proc, cgroup_root=cg, safe_mode=True,
                                 timeout_s=5, budget_s=60, record_dir=tmp_path / "ring"))
    with tarfile.open(out) as tar:
        manifest = json.load(tar.extractfile(tar.getmembers()[0]))
    entries = [a for a in manifest["artifacts"] if a["source"] == "record"]
    assert len(entries) == 1 and entries[0]["format"] == "record" and entries[0]["records"] == 10 + 3
    assert entries[0]["path"].startswith("record/rec-") and entries[0]["path"].endswith(".jsonl.gz")
    tl = build_timeline([out])
    ev = tl.events
    assert ev.filter((ev["kind"] == "host_memory") & (ev["source"] == "record")).height == 10
    assert ev.filter(ev["kind"] == "record_collect").height == 1
    host = next(f for f in timeline_plots(tl).figures if f.key == "host-memory")
    trace = next(t for t in host.data if t["name"] == "host used (record)")
    assert len(trace["x"]) == 10


def _cli(*args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "forensics.cli", "record", *args], capture_output=True, text=True)


def test_cli_record_install_status_and_usage_errors(tmp_path: Path) -> None:
    unit = _cli("--install-systemd", "--dir", str(tmp_path / "ring"), "--interval", "2")
    assert unit.returncode == 0 and f"record --dir {tmp_path / 'ring'} --interval 2" in unit.stdout
    assert "[Install]" in unit.stdout
    bad = _cli("--write")
    assert bad.returncode == 2 and bad.stderr.strip() == "forensics: error: --write goes with --install-systemd"
    bad = _cli("--gpu", "cuda", "--dir", str(tmp_path))
    assert bad.returncode == 2 and "--gpu 'cuda'" in bad.stderr and "Traceback" not in bad.stderr
    blocker = tmp_path / "file"
    blocker.write_text("x")
    bad = _cli("--dir", str(blocker / "ring"), "--duration", "1")
    assert bad.returncode == 2 and "cannot write there" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    ok = _cli("--dir", str(tmp_path / "ring"), "--interval", "0.5", "--duration", "1.2", "--gpu", "none")
    assert ok.returncode == 0, ok.stderr
    status = _cli("--status", "--dir", str(tmp_path / "ring"))
    assert status.returncode == 0 and "sealed segment" in status.stdout and "host memory" in status.stdout


def test_report_reads_a_segment_by_content_whatever_its_name(tmp_path: Path) -> None:
    from record_scenarios import SCENARIOS

    from forensics.timeline import build_timeline

    seg = sorted((SCENARIOS / "record_gpu_held_after_owner_died" / "input" / "record").iterdir())[0]
    (tmp_path / "attachment-3.gz").write_bytes(seg.read_bytes())
    ev = build_timeline([tmp_path]).events
    assert ev.filter((ev["source"] == "record") & (ev["kind"] == "gpu_memory")).height > 0
    assert ev.filter(ev["source"] == "record")["host"].unique().to_list() == ["gpu-node-19"]


def test_parser_survives_records_of_the_wrong_shapes() -> None:
    weird = [{"t": 1.0, "k": "sample", "meminfo": "x", "gaps": ["a"], "procs": "abc", "cgroups": {"a": 1},
              "gpus": {"gpus": {"index": 0}, "procs": [1, None, {"pid": "x"}]}, "shm": {"total": "big"}},
             {"t": "yesterday", "k": "sample"}, {"t": 1e300}, {"t": 2.0, "k": "event", "event": "exit", "pid": [1]},
             {"t": 3.0, "k": "sample", "meminfo": {"MemTotal": 10, "MemFree": 1.5e30, "MemAvailable": 2**60},
              "vmstat": {"oom_kill": "many"}, "procs": [{"pid": 7, "rss": "lots", "cmd": ["a"]}]}]
    text = gzip.decompress(encode_segment({"host": ["not", "a", "name"]}, weird)).decode()
    res = record_parser.parse(text, "weird")
    assert res.events.filter(res.events["kind"] == "process_sample")["pid"].to_list() == [7]
    mem = res.events.filter(res.events["kind"] == "host_memory").row(0, named=True)
    assert (mem["total_bytes"], mem["free_bytes"], mem["avail_bytes"]) == (10240, None, None)

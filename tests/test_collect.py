"""forensics collect: bounded on a wedged host, gaps instead of failures, secrets never leave."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import zstandard

import forensics.collect as collect_mod
from forensics.collect import CollectOptions, collect, describe_process, run_command

FAKEBIN = Path(__file__).resolve().parent / "fakebin"
LOG_NAME = "sglang-tp0.log"

HF = "hf_" + "Q7xK2mZpL9vR4tYwB8nC3dF6gH1jS5aE0u"
SK = "sk-proj-" + "Zq8Wm3Nx7Lp2Rv6Ty1Ku5Hs9Jd4Fg0Ab"
AKIA = "AKIA" + "Z7Q2M5X8N3L6P9R4"
API_KEY = "s3cr3t-" + "launch-key-771"
URL_PW = "Pa55w0rd-" + "xyz"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
SECRETS = [HF, SK, AKIA, API_KEY, URL_PW, AWS_SECRET]


# ----------------------------------------------------------------------------------------------
# Fixtures: a fake /proc with one SGLang server whose stdout goes to a log holding secrets


DEFAULT_ARGV = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "8",
                "--api-key", API_KEY, "--hicache-size", "300"]


def make_proc(root: Path, log: Path, environ_is_dir: bool = False, *, argv: list[str] | None = None,
              environ: list[str] | None = None, init_environ: list[str] | None = None, state: str = "D") -> Path:
    """A fake /proc: pid 1, one SGLang server (pid 4242) whose stdout/stderr go to ``log``, and a grep
    whose argv merely mentions sglang. ``init_environ`` None makes /proc/1/environ unreadable (a
    folder); ``environ_is_dir`` does the same to the server's."""
    proc = root / "proc"
    proc.mkdir()
    (proc / "meminfo").write_text("MemTotal:       470000000 kB\nMemFree:         9000000 kB\n")
    (proc / "stat").write_text("cpu  1 2 3 4\nbtime 1795942200\n")
    (proc / "uptime").write_text("734.56 1312.77\n")
    init = proc / "1"
    init.mkdir()
    (init / "cmdline").write_bytes(b"/sbin/init\x00")
    (init / "comm").write_text("systemd\n")
    (init / "cgroup").write_text("0::/init.scope\n")
    if init_environ is None:
        (init / "environ").mkdir()  # unreadable as a file: must be a gap, not a failure
    else:
        (init / "environ").write_bytes("\x00".join(init_environ).encode() + b"\x00")
    server = proc / "4242"
    (server / "fd").mkdir(parents=True)
    (server / "cmdline").write_bytes("\x00".join(argv or DEFAULT_ARGV).encode() + b"\x00")
    (server / "comm").write_text("python3\n")
    (server / "stat").write_text(f"4242 (python3) {state} 4000 4242 4242 0 -1\n")
    (server / "cgroup").write_text("0::/system.slice/sglang.service\n")
    if environ_is_dir:
        (server / "environ").mkdir()
    else:
        env = environ if environ is not None else [
            "PATH=/usr/bin", f"HF_TOKEN={HF}", f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}", "TZ=Asia/Shanghai"]
        (server / "environ").write_bytes("\x00".join(env).encode() + b"\x00")
    (server / "cwd").symlink_to(root)
    (server / "fd" / "0").symlink_to("/dev/null")
    (server / "fd" / "1").symlink_to(log)
    (server / "fd" / "2").symlink_to(log)
    other = proc / "100"
    other.mkdir()
    (other / "cmdline").write_bytes(b"grep\x00sglang.launch_server\x00")
    (other / "comm").write_text("grep\n")
    return proc


def planted_log(path: Path) -> Path:
    path.write_text(
        "[2026-11-29 08:27:01 TP0] server_args=ServerArgs(model_path='m', api_key='" + API_KEY + "', tp_size=8)\n"
        f"[2026-11-29 08:27:02 TP0] downloading with HF_TOKEN={HF}\n"
        f"[2026-11-29 08:27:03 TP0] openai client key {SK}\n"
        f"[2026-11-29 08:27:04 TP0] s3 access key {AKIA}\n"
        f"[2026-11-29 08:27:05 TP0] relaunch: python -m sglang.launch_server --api-key {API_KEY}\n"
        f"[2026-11-29 08:27:06 TP0] fetching http://admin:{URL_PW}@10.1.230.174:8080/weights\n"
        "[2026-11-29 08:27:07 TP0] Load weight end. avail mem=12.00 GB\n"
    )
    return path


@pytest.fixture
def host(tmp_path, monkeypatch):
    """Fake commands first on PATH, a fake proc tree and cgroup tree, an output folder."""
    monkeypatch.setenv("PATH", f"{FAKEBIN}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "ok")
    monkeypatch.delenv("FAKE_DMESG", raising=False)
    log = planted_log(tmp_path / LOG_NAME)
    proc = make_proc(tmp_path, log)
    cg = tmp_path / "cgroup" / "system.slice" / "sglang.service"
    cg.mkdir(parents=True)
    (cg / "memory.max").write_text("max\n")
    (cg / "memory.current").write_text("341000000000\n")
    (cg / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    out = tmp_path / "out"
    out.mkdir()
    return {"tmp": tmp_path, "proc": proc, "log": log, "out": out, "cgroup": tmp_path / "cgroup"}


def options(host: dict, **kw) -> CollectOptions:
    kw.setdefault("output", host["out"] / "bundle.tar.gz")
    kw.setdefault("timeout_s", 5)
    kw.setdefault("budget_s", 40)
    return CollectOptions(proc_root=host["proc"], cgroup_root=host["cgroup"], **kw)


def read_bundle(path: Path) -> tuple[dict, dict[str, bytes]]:
    raw = path.read_bytes()
    if path.name.endswith(".zst"):
        raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)).read()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        members = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    return json.loads(members["manifest.json"]), members


def artifact(manifest: dict, source: str, snapshot: int = 0) -> dict:
    found = [a for a in manifest["artifacts"] if a["source"] == source and a["snapshot"] == snapshot]
    assert found, f"no artifact from {source}: {[a['source'] for a in manifest['artifacts']]}"
    return found[0]


# ----------------------------------------------------------------------------------------------
# Never hang


def test_hung_nvidia_smi_is_killed_and_the_run_stays_in_budget(host, monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "hang")
    t0 = time.monotonic()
    path = collect(options(host, timeout_s=3, budget_s=40))
    elapsed = time.monotonic() - t0
    assert elapsed < 40
    assert path.exists()
    manifest, members = read_bundle(path)
    hung = artifact(manifest, "nvidia-smi-query-gpu")
    assert hung["timed_out"] is True and hung["abandoned"] is False
    assert any(g.startswith("nvidia-smi-query-gpu: timed out after 3 s") for g in manifest["gaps"])
    # the driver is taken as wedged: the other GPU sources are skipped, not run into the same hang
    for source in ("nvidia-smi-apps", "nvidia-smi-q-xml", "nvidia-smi-table", "version-driver"):
        assert any(g.startswith(f"{source}: skipped: nvidia-smi-query-gpu timed out") for g in manifest["gaps"])
    assert elapsed < 3 * 2 + 8  # one timeout + grace, not one per GPU source
    # the rest of the host was still collected
    assert "host/meminfo.txt" in members and f"logs/{LOG_NAME}" in members


def test_gpu_lost_exit_status_and_output_are_kept(host, monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "lost")
    manifest, members = read_bundle(collect(options(host)))
    gpu = artifact(manifest, "nvidia-smi-query-gpu")
    assert gpu["rc"] == 15 and gpu["timed_out"] is False
    data = members[gpu["path"]]
    assert b"GPU is lost." in data and b"00000000:18:00.0" in data  # stderr and stdout, one stream
    assert gpu["format"] == "nvidia_smi_csv" and gpu["path"] == "host/nvidia-smi-query-gpu.csv"
    assert any(g.startswith("nvidia-smi-query-gpu: exit status 15 (Unable to determine") for g in manifest["gaps"])
    xml = artifact(manifest, "nvidia-smi-q-xml")  # stderr kept apart so the XML stays XML
    assert members[xml["path"]].startswith(b"<?xml")
    assert b"GPU is lost" in members["host/nvidia-smi-q.xml.stderr"]
    assert any(g.startswith("nvidia-smi-q-xml: exit status 15 (Unable to determine") for g in manifest["gaps"])


def test_absent_commands_are_gaps_not_failures(host, monkeypatch, tmp_path):
    empty = tmp_path / "emptybin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    manifest, members = read_bundle(collect(options(host)))
    for source in ("free", "ps", "nvidia-smi-query-gpu", "uname", "version-sglang"):
        assert f"{source}: command not found" in manifest["gaps"]
    assert any(g.startswith("kernel: no source worked (kernel-dmesg-iso: command not found") for g in manifest["gaps"])
    assert members["host/meminfo.txt"].startswith(b"MemTotal:       470000000 kB")


def test_unreadable_proc_files_are_gaps(host, tmp_path, monkeypatch):
    proc = host["proc"]
    for name in ("environ",):
        target = proc / "4242" / name
        target.unlink()
        target.mkdir()
    manifest, members = read_bundle(collect(options(host)))
    assert "sglang pid 4242: environ: is a directory" in manifest["gaps"]
    assert "container: /proc/1/environ: is a directory" in manifest["gaps"]
    assert "sglang/4242/cmdline" in members


def test_permission_denied_in_proc_is_recorded(host, monkeypatch):
    real = Path.read_bytes

    def deny(self):
        if self.name == "environ":
            raise PermissionError(13, "Permission denied")
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", deny)
    info = describe_process(host["proc"] / "4242")
    assert info["errors"] == {"environ": "permission denied"} and info["environ"] is None
    assert info["state"] == "D" and info["ppid"] == 4000


def test_discovery_stuck_on_one_process_keeps_the_others(host):
    """Reading /proc/PID/cmdline can block in the kernel; a FIFO that never gets a writer does too."""
    stuck = host["proc"] / "5000"
    stuck.mkdir()
    os.mkfifo(stuck / "cmdline")
    t0 = time.monotonic()
    manifest, members = read_bundle(collect(options(host, timeout_s=1.5)))
    assert time.monotonic() - t0 < 15
    assert any(g.startswith("sglang-discovery: timed out after 1.5 s") for g in manifest["gaps"])
    assert [p["pid"] for p in manifest["sglang_processes"]] == [4242]  # found before the stuck one
    assert f"logs/{LOG_NAME}" in members


def test_run_command_abandons_a_child_it_cannot_reap(monkeypatch):
    monkeypatch.setattr(collect_mod, "_kill_group", lambda pgid, sig: None)  # as if stuck in D state
    t0 = time.monotonic()
    cap = run_command(["sleep", "30"], timeout_s=0.3, max_bytes=1024, grace_s=0.1, reap_s=0.2)
    assert time.monotonic() - t0 < 3
    assert cap.timed_out and cap.abandoned and cap.rc is None
    proc = collect_mod._ABANDONED[-1]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(5)


def test_run_command_survives_a_descendant_holding_the_pipe():
    t0 = time.monotonic()
    cap = run_command(["sh", "-c", "sleep 30 & echo started"], timeout_s=1, max_bytes=1024)
    assert time.monotonic() - t0 < 4
    assert cap.rc == 0 and cap.data == b"started\n" and not cap.timed_out


def test_run_command_keeps_the_tail_of_big_output():
    cap = run_command(["sh", "-c", "i=0; while [ $i -lt 500 ]; do echo line$i; i=$((i+1)); done"],
                      timeout_s=5, max_bytes=100)
    assert cap.truncated and len(cap.data) <= 100
    assert cap.data.endswith(b"line499\n") and cap.data.startswith(b"line")


def test_budget_exhausted_still_writes_a_bundle(host):
    path = collect(options(host, budget_s=0))
    manifest, members = read_bundle(path)
    assert manifest["artifacts"] == []
    assert "free: skipped: budget exhausted" in manifest["gaps"]
    assert "kernel: no source worked (kernel-dmesg-iso: skipped: budget exhausted)" in manifest["gaps"]
    assert list(members) == ["manifest.json"]


def test_safe_mode_never_touches_the_driver(host, monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "hang")
    t0 = time.monotonic()
    manifest, _ = read_bundle(collect(options(host, safe_mode=True)))
    assert time.monotonic() - t0 < 10
    for source in ("nvidia-smi-query-gpu", "nvidia-smi-apps", "nvidia-smi-q-xml", "nvidia-smi-table", "fuser",
                   "version-driver"):
        assert f"{source}: skipped: safe mode (touches the GPU driver)" in manifest["gaps"]
    assert manifest["options"]["safe_mode"] is True
    assert not any(a["source"].startswith("nvidia-smi") for a in manifest["artifacts"])


# ----------------------------------------------------------------------------------------------
# SGLang discovery and redaction


def test_secrets_never_reach_the_bundle_and_are_counted(host):
    manifest, members = read_bundle(collect(options(host)))
    for name, data in members.items():
        for secret in SECRETS:
            assert secret.encode() not in data, f"{secret} leaked into {name}"
    log = artifact(manifest, "sglang-log")
    assert log["path"] == f"logs/{LOG_NAME}" and log["format"] == "sglang"
    assert log["origin"] == str(host["log"]) and log["pid"] == 4242
    assert log["redaction_kinds"] == {"aws_key_id": 1, "cli_secret": 1, "hf_token": 1, "kwarg_secret": 1,
                                      "openai_key": 1, "url_password": 1}
    assert log["redactions"] == 6
    text = members[log["path"]].decode()
    assert "api_key='[REDACTED:kwarg_secret]'" in text and "Load weight end. avail mem=12.00 GB" in text
    cmdline = artifact(manifest, "sglang-cmdline")
    assert cmdline["format"] == "launch" and cmdline["redactions"] == 1
    assert members["sglang/4242/cmdline"].split(b"\x00")[:3] == [b"python3", b"-m", b"sglang.launch_server"]
    environ = artifact(manifest, "sglang-environ")
    assert environ["redaction_kinds"] == {"aws_secret": 1, "hf_token": 1}
    assert manifest["redactions"] == sum(a["redactions"] for a in manifest["artifacts"])
    # one log file although fd/1 and fd/2 both point at it; the grep process is not SGLang
    assert [p["pid"] for p in manifest["sglang_processes"]] == [4242]
    proc = manifest["sglang_processes"][0]
    assert proc["state"] == "D" and proc["tz"] == "Asia/Shanghai" and proc["logs"] == [f"logs/{LOG_NAME}"]
    assert "--api-key" in proc["argv"] and API_KEY not in proc["argv"]
    assert b"1 -> " + str(host["log"]).encode() in members["sglang/4242/fds.txt"]
    cg = members["host/cgroup-memory.txt"].decode()
    assert "memory.max: max" in cg and "memory.current: 341000000000" in cg and "  oom_kill 1" in cg


def test_no_redact_keeps_secrets(host):
    manifest, members = read_bundle(collect(options(host, redact=False)))
    assert HF.encode() in members[f"logs/{LOG_NAME}"]
    assert manifest["redactions"] == 0


def test_log_tail_cap_records_truncation(host, tmp_path):
    big = tmp_path / "rank1.log"
    big.write_text("".join(f"[2026-11-29 08:00:{i % 60:02d} TP1] line {i}\n" for i in range(200)))
    manifest, members = read_bundle(collect(options(host, logs=[str(tmp_path / "rank*.log")], max_log_bytes=300)))
    entry = artifact(manifest, "log")
    data = members[entry["path"]]
    assert entry["truncated"] is True and entry["original_bytes"] == big.stat().st_size
    assert len(data) <= 300 and entry["bytes"] == len(data)
    assert big.read_bytes().endswith(data) and data.startswith(b"[2026-11-29")  # whole lines, the last ones
    assert any(g.startswith(f"{entry['path']}: truncated to the last {len(data)} of") for g in manifest["gaps"])


def test_added_files_and_log_folders(host, tmp_path):
    folder = tmp_path / "ranks"
    folder.mkdir()
    (folder / "tp1.log").write_text("[2026-11-29 08:00:00 TP1] hello\n")
    note = tmp_path / "notes.txt"
    note.write_text(f"free -g output pasted here, token {HF}\n")
    manifest, members = read_bundle(collect(options(host, logs=[str(folder), str(host["log"])], adds=[str(note)])))
    assert members["logs/tp1.log"] == b"[2026-11-29 08:00:00 TP1] hello\n"
    assert artifact(manifest, "add")["format"] is None
    assert members["added/notes.txt"] == b"free -g output pasted here, token [REDACTED:hf_token]\n"
    # the --log naming the discovered log again does not copy it twice
    assert sum(1 for name in members if name.startswith("logs/")) == 2


# ----------------------------------------------------------------------------------------------
# Snapshots, manifest, output


def test_two_snapshots_are_stamped_sets(host):
    manifest, members = read_bundle(collect(options(host, snapshots=2, interval_s=0.3)))
    first, second = artifact(manifest, "meminfo", 0), artifact(manifest, "meminfo", 1)
    assert (first["path"], second["path"]) == ("snapshots/000/meminfo.txt", "snapshots/001/meminfo.txt")
    assert second["started"] > first["started"]
    for index in (0, 1):
        assert artifact(manifest, "nvidia-smi-query-gpu", index)["path"] == f"snapshots/{index:03d}/nvidia-smi-query-gpu.csv"
    assert members["snapshots/001/meminfo.txt"] == members["snapshots/000/meminfo.txt"]
    assert "host/meminfo.txt" not in members


def test_manifest_fields_and_versions(host):
    manifest, members = read_bundle(collect(options(host)))
    assert manifest["schema_version"] == 1 and manifest["tool"]["name"] == "forensics"
    assert manifest["started_at"].endswith("Z") and manifest["ended_at"] >= manifest["started_at"]
    assert manifest["boot_time"] == "2026-11-29T08:50:00Z"  # btime 1795942200 of the fake /proc/stat
    assert isinstance(manifest["utc_offset_s"], int)
    assert manifest["versions"] == {"cuda": "12.4", "driver": "550.54.15", "sglang": "0.4.6.post1",
                                    "torch": "2.5.1+cu124"} or manifest["versions"]["sglang"] == "0.4.6.post1"
    keys = {"path", "source", "format", "argv", "snapshot", "started", "ended", "rc", "timed_out", "abandoned",
            "truncated", "bytes", "sha256", "redactions", "error"}
    for a in manifest["artifacts"]:
        assert keys <= set(a)
        assert a["bytes"] == len(members[a["path"]])
    formats = {a["source"]: a["format"] for a in manifest["artifacts"]}
    assert formats["free"] == "free" and formats["meminfo"] == "meminfo" and formats["ps"] == "ps"
    assert formats["nvidia-smi-apps"] == "nvidia_smi_csv" and formats["nvidia-smi-q-xml"] == "nvidia_smi_xml"
    assert formats["nvidia-smi-table"] == "nvidia_smi_table" and formats["kernel-dmesg-iso"] == "kernel"
    assert formats["uname"] is None


def test_driver_version_read_from_proc(host):
    (host["proc"] / "driver" / "nvidia").mkdir(parents=True)
    (host["proc"] / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n")
    manifest, members = read_bundle(collect(options(host)))
    assert manifest["versions"]["driver"] == "535.183.01"
    assert manifest["versions"]["sglang"] == "0.4.6.post1" and manifest["versions"]["torch"] == "2.5.1+cu124"
    assert members["versions/driver.txt"].startswith(b"NVRM version")


def test_kernel_log_falls_back(host, monkeypatch):
    monkeypatch.setenv("FAKE_DMESG", "old")
    manifest, members = read_bundle(collect(options(host)))
    entry = artifact(manifest, "kernel-dmesg")
    assert entry["path"] == "host/dmesg.txt" and entry["format"] == "kernel"
    assert entry["fallback_from"] == ["kernel-dmesg-iso: exit status 1"]
    assert members["host/dmesg.txt"].startswith(b"[  399.634951] python3 invoked oom-killer")


@pytest.mark.parametrize("name", ["b.tar", "b.tar.zst", "b.tar.gz"])
def test_archive_formats(host, name):
    manifest, members = read_bundle(collect(options(host, output=host["out"] / name)))
    assert manifest["host"] and "host/meminfo.txt" in members


def test_default_name_and_progress(host, monkeypatch):
    monkeypatch.chdir(host["out"])
    lines: list[str] = []
    path = collect(options(host, output=None, progress=lines.append))
    assert path.parent == host["out"] and path.name.startswith("forensics-") and path.name.endswith("Z.tar.gz")
    with tarfile.open(path) as tar:
        top = {m.name.split("/", 1)[0] for m in tar.getmembers()}
    assert top == {path.name[: -len(".tar.gz")]}
    assert any(line.startswith("collect: wrote") for line in lines)
    assert sorted(p.name for p in host["out"].iterdir()) == [path.name]  # no staging left behind


def test_stdout_output(host, monkeypatch):
    buf = io.BytesIO()

    class FakeStdout:
        buffer = buf

    monkeypatch.setattr(sys, "stdout", FakeStdout())
    monkeypatch.chdir(host["out"])
    assert str(collect(options(host, output="-"))) == "-"
    with tarfile.open(fileobj=io.BytesIO(buf.getvalue()), mode="r:gz") as tar:
        assert tar.getmembers()[0].name.endswith("/manifest.json")
    assert list(host["out"].iterdir()) == []


def test_atomic_write_leaves_nothing_on_failure(host, monkeypatch):
    def broken_pack(staging, top, manifest_bytes, members, fileobj, mode):
        fileobj.write(b"partial archive bytes")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(collect_mod, "pack", broken_pack)
    with pytest.raises(OSError):
        collect(options(host))
    assert list(host["out"].iterdir()) == []


def test_obfuscation_replaces_hosts_and_ips_and_maps_outside(host, monkeypatch):
    monkeypatch.setattr(collect_mod.socket, "gethostname", lambda: "gpu-node-17")
    with host["log"].open("a") as fh:
        fh.write("[2026-11-29 08:27:08 TP0] gpu-node-17 peer 10.1.230.174 reachable\n")
    path = collect(options(host, obfuscate=True))
    assert path.name == "bundle.tar.gz"
    manifest, members = read_bundle(path)
    for name, data in members.items():
        assert b"gpu-node-17" not in data and b"10.1.230.174" not in data, name
    assert manifest["host"] == "host-1"
    map_path = path.with_name(path.name + ".obfuscation-map.json")
    assert stat.S_IMODE(map_path.stat().st_mode) == 0o600
    mapping = json.loads(map_path.read_text())["mapping"]
    assert mapping["gpu-node-17"] == "host-1" and mapping["10.1.230.174"].startswith("ip-")
    log = members[f"logs/{LOG_NAME}"].decode()
    assert f"host-1 peer {mapping['10.1.230.174']} reachable" in log
    entry = artifact(manifest, "sglang-log")
    assert entry["sha256"] == hashlib.sha256(members[entry["path"]]).hexdigest()


def test_collect_reads_only(host):
    """The fake host is unchanged by a collection (no file written or removed under it)."""
    before = sorted(str(p) for p in host["proc"].rglob("*"))
    log_before = host["log"].read_bytes()
    collect(options(host))
    assert sorted(str(p) for p in host["proc"].rglob("*")) == before
    assert host["log"].read_bytes() == log_before


def test_subprocess_module_not_left_with_children(host, monkeypatch):
    """After a hang is handled, no process of the fake nvidia-smi's group survives."""
    # a duration no other test uses, so a hang test running in parallel can't be mistaken for a leak
    hang = f"1000.{os.getpid()}{time.monotonic_ns() % 100000}"
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "hang")
    monkeypatch.setenv("FAKE_HANG_SECONDS", hang)
    collect(options(host, timeout_s=1, budget_s=20))
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"sleep {hang}" not in out


def test_big_log_is_redacted_across_chunk_boundaries(host, tmp_path):
    """Logs are redacted in line-aligned chunks: a secret near a chunk edge must not slip through."""
    line = b"[2026-11-29 08:00:00 TP0] Decode batch. #running-req: 8, #token: 81664, token usage: 0.97\n"
    secret_line = f"[2026-11-29 08:00:01 TP0] HF_TOKEN={HF}\n".encode()
    body = bytearray()
    planted = 0
    while len(body) < 2 * collect_mod.CHUNK + 1000:
        body += line
        if len(body) % collect_mod.CHUNK < 3 * len(line) or len(body) % 1_000_003 < len(line):
            body += secret_line
            planted += 1
    big = tmp_path / "big.log"
    big.write_bytes(bytes(body))
    manifest, members = read_bundle(collect(options(host, logs=[str(big)])))
    entry = artifact(manifest, "log")
    assert HF.encode() not in members[entry["path"]]
    assert entry["redaction_kinds"] == {"hf_token": planted} and planted >= 3
    assert members[entry["path"]].count(b"\n") == bytes(body).count(b"\n")


def test_interrupted_command_leaves_no_process_behind(tmp_path):
    """Ctrl-C or SIGTERM (the CLI raises it in the main thread) while a command runs: its whole process
    group is killed before the exception goes on, so no orphaned nvidia-smi outlives the collector."""
    import threading

    pidfile = tmp_path / "pid"

    class Stop(BaseException):
        pass

    def stop(*_a):
        raise Stop

    old = signal.signal(signal.SIGUSR1, stop)
    try:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        with pytest.raises(Stop):
            run_command(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], timeout_s=30, max_bytes=1024)
    finally:
        signal.signal(signal.SIGUSR1, old)
    pid = int(pidfile.read_text())

    def alive() -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        return state != "Z"

    deadline = time.monotonic() + 5
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive()


def test_vllm_processes_are_found_with_their_logs(host, tmp_path):
    """A vLLM server (API server + engine core title) is discovered like SGLang's: argv, log, its own folder."""
    vlog = tmp_path / "vllm.log"
    vlog.write_text("INFO 11-30 09:00:01 [api_server.py:1024] vLLM API server version 0.9.1\n"
                    "(EngineCore_0 pid=5151) INFO 11-30 09:00:40 [gpu_worker.py:227] Available KV cache memory: "
                    "21.34 GiB\n")
    for pid, argv, comm in ((5150, ["/venv/bin/python3", "/venv/bin/vllm", "serve", "acme/m", "--swap-space", "16"],
                             "vllm"), (5151, ["VLLM::EngineCore"], "VLLM::EngineCor")):
        d = host["proc"] / str(pid)
        (d / "fd").mkdir(parents=True)
        (d / "cmdline").write_bytes("\x00".join(argv).encode() + b"\x00")
        (d / "comm").write_text(comm + "\n")
        (d / "stat").write_text(f"{pid} ({comm}) S 1 {pid} {pid} 0 -1\n")
        (d / "environ").write_bytes(b"PATH=/usr/bin\x00")
        (d / "fd" / "1").symlink_to(vlog)
        (d / "fd" / "2").symlink_to(vlog)
    path = collect(options(host))
    _manifest, files = read_bundle(path)
    assert any(n.startswith("vllm/5150/") and n.endswith("cmdline") for n in files)
    assert any(n.startswith("vllm/5151/") for n in files)
    assert any(b"Available KV cache memory" in data for n, data in files.items() if n.startswith("logs/"))
    assert any(n.startswith("sglang/4242/") for n in files)  # SGLang's server is still found beside it

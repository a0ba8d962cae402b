"""parsers/kernel.py: every container, the records it builds, and that bad input never breaks it.

Expected figures come from the input itself (an independent regex over the text, or the canonical
messages our container variants are rendered from), never from the parser's own output.
"""

from __future__ import annotations

import json
import random
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shared_data import SHARED, SKIP_REASON, params

from parsers import kernel
from parsers.schema import NotThisFormat

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = SHARED / "research_samples"
FIXTURES = ROOT / "fixtures" / "kernel"
KIB = 1024


def sample(rel: str) -> str:
    path = SAMPLES / rel
    if not path.exists():
        pytest.skip(f"{SKIP_REASON}: {path} not available")
    return "\n".join(x for x in path.read_text(encoding="utf-8").split("\n") if not x.startswith("# "))


def sample_files(*dirs: str) -> list[str]:
    if not SAMPLES.exists():
        return []
    return [f"{d}/{p.name}" for d in dirs for p in sorted((SAMPLES / d).iterdir())]


def rows(text: str, kind: str | None = None) -> list[dict]:
    ev = kernel.parse(text).events
    if kind:
        ev = ev.filter(ev["kind"] == kind)
    out = ev.to_dicts()
    for r in out:
        r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else {}
    return out


def line_of(text: str, needle: str, last: bool = False) -> int:
    hits = [i for i, x in enumerate(text.split("\n"), 1) if needle in x]
    return hits[-1] if last else hits[0]


# ------------------------------------------------------------------ real samples: one OOM, every container

KILLED = re.compile(r"Killed process (\d+) \((.*?)\) total-vm:(\d+)kB, anon-rss:(\d+)kB, file-rss:(\d+)kB"
                    r"(?:, shmem-rss:(\d+)kB)?")
SAME_EVENT = ["kernel_log/01_dmesg_T_ctime_oom_block_kernel_6.18.txt",
              "kernel_log/02_dmesg_time_format_iso_oom_block_kernel_6.18.txt",
              "kernel_log/03_dmesg_raw_r_oom_block_kernel_6.18.txt",
              "kernel_log/04_dmesg_x_decode_oom_block_kernel_6.18.txt",
              "kernel_log/05_dmesg_reltime_oom_block_kernel_6.18.txt",
              "kernel_log/06_dmesg_J_json_oom_block_kernel_6.18.txt",
              "kernel_log/07_dev_kmsg_raw_oom_block_kernel_6.18.txt",
              "kernel_log/11_kern_log_rsyslog_rfc3339_default_debian12_oom.txt",
              "kernel_log/12_kern_log_rsyslog_traditional_rfc3164_oom.txt",
              "oom/01_memcg_oom_kernel_6.18_cgroup_v1_dmesg.txt",
              "oom/03_memcg_oom_kernel_6.18_same_event_as_kern_log_11_12.txt"]


@pytest.mark.parametrize("rel", SAME_EVENT)
def test_oom_block_is_one_row_with_the_victim_of_its_killed_line(rel):
    text = sample(rel)
    pid, comm, total_vm, anon, file_, shmem = KILLED.search(text).groups()
    (row,) = rows(text, "oom_kill")
    assert (row["pid"], row["comm"]) == (int(pid), comm)
    a = row["attrs"]
    assert a["anon_rss_bytes"] == int(anon) * KIB and a["total_vm_bytes"] == int(total_vm) * KIB
    assert row["used_bytes"] == (int(anon) + int(file_) + int(shmem)) * KIB
    assert row["line"] == line_of(text, "invoked oom-killer")
    assert row["line_end"] == line_of(text, "Killed process")
    assert a["constraint"] == re.search(r"constraint=(CONSTRAINT_\w+)", text).group(1)
    assert a["memcg"] == re.search(r"oom_memcg=([^,]+)", text).group(1)
    assert a["invoker_pid"] == int(re.search(r"CPU: \d+ UID: \d+ PID: (\d+)", text).group(1))
    usage, limit = re.search(r"memory: usage (\d+)kB, limit (\d+)kB", text).groups()
    assert (a["memcg_usage_bytes"], a["memcg_limit_bytes"]) == (int(usage) * KIB, int(limit) * KIB)
    r = kernel.parse(text)
    assert r.unrecognized == 0 and r.recognized == r.lines == len(text.rstrip("\n").split("\n"))


def test_same_event_gives_same_victim_in_dmesg_and_syslog_forms():
    victims = {(r["pid"], r["comm"], r["attrs"]["anon_rss_bytes"], r["attrs"]["file_rss_bytes"])
               for rel in SAME_EVENT[:7] for r in rows(sample(rel), "oom_kill")}
    assert len(victims) == 1
    later = {(r["pid"], r["comm"], r["used_bytes"]) for rel in SAME_EVENT[7:] if "kern_log" in rel or "oom/03" in rel
             for r in rows(sample(rel), "oom_kill")}
    assert len(later) == 1


def test_container_clock_columns():
    t = rows(sample(SAME_EVENT[0]), "oom_kill")[0]  # dmesg -T: naive wall clock
    assert t["ts_local"] == datetime(2026, 11, 29, 8, 27, 7) and t["ts"] is None and t["uptime_s"] is None
    text = sample(SAME_EVENT[1])  # --time-format iso: zoned, comma before the microseconds
    iso = re.search(r"^(\S+) python3 invoked", text, re.M).group(1)
    assert rows(text, "oom_kill")[0]["ts"] == datetime.fromisoformat(iso.replace(",", ".")).astimezone(UTC)
    text = sample(SAME_EVENT[2])  # dmesg -r: seconds since boot
    up = float(re.search(r"\[\s*(\d+\.\d+)\] python3 invoked", text).group(1))
    r = kernel.parse(text)
    assert r.events["uptime_s"][0] == up and r.events["ts_basis"][0] == "none"
    assert any("boot time unknown" in n for n in r.notes)
    syslog = rows(sample(SAME_EVENT[8]), "oom_kill")[0]  # RFC 3164: no year anywhere in this text
    assert syslog["host"] == "vm" and syslog["ts_local"] is None
    assert (syslog["attrs"]["syslog_month"], syslog["attrs"]["syslog_day"]) == (11, 29)


def test_journalctl_variants_replayed_block_is_one_complete_row():
    text = sample("kernel_log/08_journalctl_k_output_variants_replayed_oom.txt")
    oom = rows(text, "oom_kill")
    assert len(oom) == 1 and oom[0]["attrs"]["complete"] is True
    assert oom[0]["pid"] == int(KILLED.search(text).group(1)) and oom[0]["host"] == "vm"


def test_journal_json_pretty_and_verbose():
    text = sample("kernel_log/10_journalctl_k_json_and_verbose.txt")
    oom = rows(text, "oom_kill")
    monos = [int(m) / 1e6 for m in re.findall(r'"_SOURCE_MONOTONIC_TIMESTAMP"\s*:\s*"(\d+)"', text)]
    reals = [int(m) for m in re.findall(r'"__REALTIME_TIMESTAMP"\s*:\s*"(\d+)"', text)]
    assert [r["uptime_s"] for r in oom[:3]] == monos
    assert [r["ts"] for r in oom[:3]] == [datetime.fromtimestamp(x / 1e6, UTC) for x in reals]
    assert [r["pid"] for r in oom] == [int(p) for p in re.findall(r"Killed process (\d+)", text)]
    assert oom[-1]["line"] == line_of(text, "MESSAGE=Memory cgroup")
    assert any("replayed" in n for n in kernel.parse(text).notes)


def test_rsyslog_late_start_and_2005_messages():
    text = sample("kernel_log/13_rsyslog_replayed_boot_messages_timestamp_pitfall.txt")
    versions = rows(text, "version")
    assert {v["attrs"]["version"] for v in versions} == set(re.findall(r"Linux version (\S+)", text))
    text = sample("kernel_log/15_loghub_linux_2005_messages_kernel_lines.txt")
    r = kernel.parse(text)
    assert r.unrecognized == 0 and rows(text, "version")[0]["host"] == "combo"


def test_not_a_kernel_log():
    with pytest.raises(NotThisFormat):
        kernel.parse(sample("kernel_log/14_node_problem_detector_kernel_monitor_rules.json.txt"))
    with pytest.raises(NotThisFormat):
        kernel.parse("              total        used        free\nMem:            449         318         130\n")


@pytest.mark.parametrize("rel", params(sample_files("oom"), "research_samples/oom"))
def test_every_killed_line_is_one_oom_kill(rel):
    text = sample(rel)
    oom = [r for r in rows(text, "oom_kill") if r["attrs"]["complete"]]
    assert [(r["pid"], r["comm"]) for r in oom] == [(int(p), c) for p, c, *_ in KILLED.findall(text)]
    reaped = [int(p) for p in re.findall(r"oom_reaper: reaped process (\d+)", text)]
    assert [r["pid"] for r in rows(text, "oom_reaper")] == reaped
    assert kernel.parse(text).unrecognized == 0


def test_legacy_and_interleaved_global_oom():
    text = sample("oom/05_global_oom_kernel_4.14_full_mem_info_interleaved.txt")
    (row,) = rows(text, "oom_kill")
    assert row["attrs"]["score"] == int(re.search(r"score (\d+) or sacrifice child", text).group(1))
    assert row["attrs"]["nodemask"] == "(null)" and row["attrs"]["cpuset"] == "/"
    assert (row["line"], row["line_end"]) == (line_of(text, "invoked oom-killer"), line_of(text, "Killed process"))
    text = sample("oom/04_memcg_oom_kernel_3.13_ubuntu_legacy_format_cadvisor.txt")
    first = rows(text, "oom_kill")[0]
    assert first["attrs"]["memcg"] == re.search(r"limit of (\S+)", text).group(1)
    assert first["attrs"]["invoker_pid"] == int(re.search(r"CPU: \d+ PID: (\d+)", text).group(1))


def test_two_kills_in_25ms_each_get_their_own_block():
    text = sample("oom/02_memcg_oom_kernel_6.18_two_kills_oom_score_adj_dmesg.txt")
    oom = rows(text, "oom_kill")
    adjs = [int(a) for a in re.findall(r"Killed process .* oom_score_adj:(-?\d+)", text)]
    assert [r["attrs"]["oom_score_adj"] for r in oom] == adjs
    starts = [i for i, x in enumerate(text.split("\n"), 1) if "invoked oom-killer" in x]
    assert [r["line"] for r in oom] == starts


# ------------------------------------------------------------------ real samples: NVRM and Xid

XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+)(?:, pid=(\d+|'<unknown>'))?")


@pytest.mark.parametrize("rel", params(sample_files("nvrm_xid"), "research_samples/nvrm_xid"))
def test_every_xid_line_is_an_xid_row(rel):
    text = sample(rel)
    want = [(int(code), int(pid) if pid and pid.isdigit() else None)
            for line in text.split("\n") if not line.startswith("#")
            for _bdf, code, pid in XID_LINE.findall(line)]
    got = [(r["code"], r["pid"]) for r in rows(text, "xid")]
    assert got == want


def test_xid_fields_and_pci_normalisation():
    text = sample("nvrm_xid/04_xid_nvlink5_gb200_145_149_154.txt")
    xids = rows(text, "xid")
    assert {r["attrs"]["pci_bus_id"][:4] for r in xids} == {"0008", "0009", "0018", "0019"}
    nvl = [r for r in xids if r["code"] in (145, 149)]
    assert [r["attrs"]["link"] for r in nvl] == [int(x) for x in re.findall(r"Link\s+(-?\d+)", text)]
    named = [r["comm"] for r in xids if r["comm"]]
    assert named == re.findall(r"name=([^,]+),", text)
    action = [r["attrs"]["recovery_action"] for r in xids if r["code"] == 154]
    assert action == re.findall(r"to 0x\d \(([^)]+)\)", text)
    text = sample("nvrm_xid/01_xid119_gsp_rpc_timeout_h100_dmesg_ctime.txt")
    uuid = re.search(r"NVRM: GPU at PCI:\S+: (GPU-[0-9a-f-]+)", text).group(1)
    assert {r["attrs"]["gpu_uuid"] for r in rows(text, "xid")} == {uuid}
    assert {r["attrs"]["gsp_function"] for r in rows(text, "xid")} == set(re.findall(r"\d+ \((GSP_\w+|FREE)\) \(", text))


def test_fallen_off_bus_forms_and_companions():
    text = sample("nvrm_xid/07_nvrm_legacy_formats_and_companion_messages.txt")
    body = "\n".join(x for x in text.split("\n") if not x.startswith("#"))
    fell = rows(text, "gpu_fallen_off_bus")
    single = [i for i, x in enumerate(text.split("\n"), 1)
              if not x.startswith("#") and re.search(r"NVRM: GPU (?:at )?\S+:? (?:GPU )?has fallen off the bus", x)]
    probe = [i for i, x in enumerate(text.split("\n"), 1) if "NVRM: The NVIDIA GPU" in x]
    assert sorted(r["line"] for r in fell) == sorted(single + probe)
    assert [r["line_end"] for r in fell if r["attrs"].get("at_probe")] == [p + 2 for p in probe]
    sched = [r for r in rows(text, "nvrm") if "os_schedule" in r["attrs"]["message"]]
    assert len(sched) == 1 and sched[0]["count"] == body.count("NVRM: os_schedule")
    text = sample("nvrm_xid/03_xid79_fallen_off_bus_with_nvswitch_sxid.txt")
    sxid = [r for r in rows(text, "nvrm") if "sxid" in r["attrs"]]
    assert [r["code"] for r in sxid] == [int(x) for x in re.findall(r"SXid \([^)]*\): (\d+)", text)]


def test_xid31_over_three_lines_and_probe_time_record():
    text = sample("nvrm_xid/06_xid_variants_nvsentinel_parser_tests.txt")
    x31 = [r for r in rows(text, "xid") if r["code"] == 31]
    assert x31[0]["line_end"] == line_of(text, "Fault is of type")
    assert x31[0]["attrs"]["fault_address"] == re.search(r"faulted @ (0x[0-9a-f_]+)", text).group(1)
    assert kernel.parse(text).unrecognized == 0


# ------------------------------------------------------------------ real samples: hung tasks

def test_hung_tasks():
    text = sample("hung_task/01_hung_task_variants_2.6_to_6.12.txt")
    hung = rows(text, "hung_task")
    want = [(c, int(p), float(s)) for c, p, s in
            re.findall(r"INFO: task (.+):(\d+) blocked for more than (\d+) seconds", text)]
    assert [(r["comm"], r["pid"], r["seconds"]) for r in hung] == want
    first = hung[0]  # 5.13 syslog layout: the report runs to its last stack frame
    assert first["line_end"] == line_of(text, "path_openat")
    arm = next(r for r in hung if r["comm"] == "vchiq-keep/0")
    assert arm["line_end"] == line_of(text, "ret_from_fork") and arm["attrs"]["tgid"] == 85
    owner = next(r for r in hung if r["attrs"].get("owner_pid"))
    assert owner["attrs"]["owner_pid"] == int(re.search(r"owned by task .+:(\d+)\.", text).group(1))
    repeats = [r for r in hung if r["comm"] == "mount" and r["pid"] == 1103]
    assert [r["attrs"].get("repeat_of_line") for r in repeats] == [None] + [repeats[0]["line"]] * 2


# ------------------------------------------------------------------ our own incident, rendered in every container

BOOT_LOCAL = datetime(2026, 11, 29, 8, 0, 0)  # host wall clock at boot, UTC+08:00
OFFSET = timedelta(hours=8)
CANON: list[tuple[float, int, str]] = [  # (seconds since boot, level, message)
    (3000.000100, 6, "usb 1-1: new high-speed USB device number 2 using xhci_hcd"),
    (3000.100001, 4, "sglang::schedul invoked oom-killer: gfp_mask=0x140dca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), "
                     "order=0, oom_score_adj=0"),
    (3000.100020, 4, "CPU: 37 UID: 0 PID: 48213 Comm: sglang::schedul Not tainted 6.8.0-60-generic #63-Ubuntu"),
    (3000.100030, 4, "Call Trace:"),
    (3000.100031, 4, " <TASK>"),
    (3000.100032, 4, " dump_stack_lvl+0x76/0xa0"),
    (3000.100033, 4, " out_of_memory+0x106/0x2e0"),
    (3000.100034, 4, " </TASK>"),
    (3000.100040, 6, "Tasks state (memory values in pages):"),
    (3000.100041, 6, "[  pid  ]   uid  tgid total_vm      rss rss_anon rss_file rss_shmem pgtables_bytes swapents "
                     "oom_score_adj name"),
    (3000.100042, 6, "[  48213]     0 48213 130000000 105000000 104000000     9000    991000 880000000        0"
                     "             0 sglang::schedul"),
    (3000.100050, 6, "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,"
                     "task_memcg=/system.slice/sglang.service,task=sglang::schedul,pid=48213,uid=0"),
    (3000.100060, 3, "Out of memory: Killed process 48213 (sglang::schedul) total-vm:520000000kB, "
                     "anon-rss:416000000kB, file-rss:36000kB, shmem-rss:3964000kB, UID:0 pgtables:859375kB "
                     "oom_score_adj:0"),
    (3000.300000, 6, "oom_reaper: reaped process 48213 (sglang::schedul), now anon-rss:0kB, file-rss:0kB, "
                     "shmem-rss:3964000kB"),
    (3100.500003, 4, "NVRM: Xid (PCI:0000:3B:00): 79, pid=48219, name=python3, GPU has fallen off the bus."),
    (3100.500004, 4, "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."),
    (3243.120001, 3, "INFO: task nvidia-smi:51234 blocked for more than 122 seconds."),
    (3243.120010, 3, "      Not tainted 6.8.0-60-generic #63-Ubuntu"),
    (3243.120020, 3, "\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message."),
    (3243.120030, 6, "task:nvidia-smi      state:D stack:0     pid:51234 tgid:51234 ppid:1      flags:0x00004006"),
    (3243.120040, 6, "Call Trace:"),
    (3243.120050, 6, " <TASK>"),
    (3243.120060, 6, " __schedule+0x27c/0x6b0"),
    (3243.120070, 6, " os_acquire_mutex+0x41/0x70 [nvidia]"),
    (3243.120080, 6, " </TASK>"),
    (3300.000000, 6, "e1000e 0000:00:1f.6 eno1: NIC Link is Up 1000 Mbps Full Duplex"),
]
LEVEL = {3: "err", 4: "warn", 6: "info"}
HOST = "gpu-node-7"


def _local(up: float) -> datetime:
    return BOOT_LOCAL + timedelta(seconds=up)


def _utc(up: float) -> datetime:
    return (_local(up) - OFFSET).replace(tzinfo=UTC)


def _journal_obj(up: float, lvl: int, msg: str, rnd: random.Random) -> dict:
    obj = {"MESSAGE": msg, "PRIORITY": str(lvl), "_TRANSPORT": "kernel", "SYSLOG_IDENTIFIER": "kernel",
           "_HOSTNAME": HOST, "_BOOT_ID": "6c1e0b8f0d2a4e3f9a7b5c4d3e2f1a0b",
           "_SOURCE_MONOTONIC_TIMESTAMP": str(round(up * 1e6)),
           "__REALTIME_TIMESTAMP": str(round(_utc(up).timestamp() * 1e6))}
    keys = list(obj)
    rnd.shuffle(keys)  # journald's key order changes from record to record
    return {k: obj[k] for k in keys}


def _render(form: str) -> str:
    rnd = random.Random(7)
    out: list[str] = []
    if form == "dmesg_json":
        recs = [f'      {{\n         "pri": {lvl},\n         "time": {up:12.6f},\n         "msg": {json.dumps(msg)}\n'
                f"      }}" for up, lvl, msg in CANON]
        return '{\n   "dmesg": [\n' + ",".join(recs).replace("},      {", "},{") + "\n   ]\n}\n"
    for seq, (up, lvl, msg) in enumerate(CANON, 100):
        loc, us = _local(up), f"{_local(up).microsecond:06d}"
        out += {
            "dmesg": [f"[{up:12.6f}] {msg}"],
            "dmesg_raw": [f"<{lvl}>[{up:12.6f}] {msg}"],
            "dmesg_caller": [f"[{up:12.6f}] [ T{seq}] {msg}"],
            "dmesg_decode": [f"kern  :{LEVEL[lvl]:<6}: [{up:12.6f}] {msg}"],
            "dmesg_ctime": [f"[{loc.strftime('%a %b %e %H:%M:%S %Y')}] {msg}"],
            "dmesg_iso": [f"{loc.strftime('%Y-%m-%dT%H:%M:%S')},{us}+08:00 {msg}"],
            "dmesg_decode_iso": [f"kern  :{LEVEL[lvl]:<6}: {loc.strftime('%Y-%m-%dT%H:%M:%S')},{us}+08:00 {msg}"],
            "kmsg": [f"{lvl},{seq},{round(up * 1e6)},-;{msg}"] + ([" SUBSYSTEM=usb", " DEVICE=c189:1"] if seq == 100 else []),
            "short": [f"{loc.strftime('%b %e %H:%M:%S')} {HOST} kernel: {msg}"],
            "short_precise": [f"{loc.strftime('%b %e %H:%M:%S')}.{us} {HOST} kernel: {msg}"],
            "short_iso": [f"{loc.strftime('%Y-%m-%dT%H:%M:%S')}+0800 {HOST} kernel: {msg}"],
            "short_iso_precise": [f"{loc.strftime('%Y-%m-%dT%H:%M:%S')}.{us}+0800 {HOST} kernel: {msg}"],
            "short_full": [f"{loc.strftime('%a %Y-%m-%d %H:%M:%S')} CST {HOST} kernel: {msg}"],
            "short_monotonic": [f"[{up:12.6f}] {HOST} kernel: {msg}"],
            "short_unix": [f"{_utc(up).timestamp():.6f} {HOST} kernel: {msg}"],
            "rsyslog_rfc3339": [f"{loc.strftime('%Y-%m-%dT%H:%M:%S')}.{us}+08:00 {HOST} kernel: [{up:12.6f}] {msg}"],
            "rsyslog_rfc3164": [f"{loc.strftime('%b %e %H:%M:%S')} {HOST} kernel: [{up:12.6f}] {msg}"],
            "rsyslog_rfc3164_no_uptime": [f"{loc.strftime('%b %e %H:%M:%S')} {HOST} kernel: {msg}"],
            "rsyslog_rfc3164_year": [f"{loc.strftime('%b %e %Y %H:%M:%S')} {HOST} kernel: [{up:12.6f}] {msg}"],
            "journal_json": [json.dumps(_journal_obj(up, lvl, msg, rnd), separators=(",", ":"))],
            "journal_json_pretty": ["{"] + [f'\t"{k}" : {json.dumps(v)},' for k, v in
                                            _journal_obj(up, lvl, msg, rnd).items()] + ["}"],
            "journal_verbose": [f"{loc.strftime('%a %Y-%m-%d %H:%M:%S')}.{us} CST [s=9f2a;i={seq:x};b=6c1e;m=1;t=2;x=3]"]
            + [f"    {k}={v}" for k, v in _journal_obj(up, lvl, msg, rnd).items() if k != "__REALTIME_TIMESTAMP"],
        }[form]
    if form == "journal_json_pretty":  # no comma after an object's last key
        out = [x[:-1] if x.endswith(",") and nxt == "}" else x for x, nxt in zip(out, out[1:] + [""], strict=True)]
    return "\n".join(out) + "\n"


FORMS = ["dmesg", "dmesg_raw", "dmesg_caller", "dmesg_decode", "dmesg_ctime", "dmesg_iso", "dmesg_decode_iso", "kmsg",
         "short", "short_precise", "short_iso", "short_iso_precise", "short_full", "short_monotonic", "short_unix",
         "rsyslog_rfc3339", "rsyslog_rfc3164", "rsyslog_rfc3164_no_uptime", "rsyslog_rfc3164_year", "journal_json",
         "journal_json_pretty", "journal_verbose", "dmesg_json"]
HAS_UPTIME = {"dmesg", "dmesg_raw", "dmesg_caller", "dmesg_decode", "kmsg", "short_monotonic", "rsyslog_rfc3339",
              "rsyslog_rfc3164", "rsyslog_rfc3164_year", "journal_json", "journal_json_pretty", "journal_verbose",
              "dmesg_json"}
HAS_UTC = {"dmesg_iso", "dmesg_decode_iso", "short_iso", "short_iso_precise", "short_unix", "rsyslog_rfc3339",
           "journal_json", "journal_json_pretty"}
HAS_LOCAL = {"dmesg_ctime", "dmesg_iso", "dmesg_decode_iso", "short_iso", "short_iso_precise", "short_full",
             "rsyslog_rfc3339", "rsyslog_rfc3164_year", "journal_verbose"}
HAS_HOST = {f for f in FORMS if f.startswith(("short", "rsyslog", "journal"))}


def _canon(needle: str) -> tuple[float, str]:
    return next((up, msg) for up, _lvl, msg in CANON if needle in msg)


@pytest.mark.parametrize("form", FORMS)
def test_every_container_gives_the_same_records(form):
    text = _render(form)
    r = kernel.parse(text, path=f"{form}.txt")
    assert r.unrecognized == 0 and r.recognized == r.lines == text.count("\n")
    kinds = r.events["kind"].to_list()
    assert sorted(kinds) == ["gpu_fallen_off_bus", "hung_task", "oom_kill", "oom_reaper", "xid"]
    oom, reaper = rows(text, "oom_kill")[0], rows(text, "oom_reaper")[0]
    killed = KILLED.search(_canon("Killed process")[1]).groups()
    assert (oom["pid"], oom["comm"]) == (int(killed[0]), killed[1]) == (reaper["pid"], reaper["comm"])
    assert oom["used_bytes"] == sum(int(x) for x in killed[3:6]) * KIB
    assert oom["attrs"]["global_oom"] is True and oom["attrs"]["invoker_pid"] == 48213
    assert oom["attrs"]["task_memcg"] == "/system.slice/sglang.service"
    assert (oom["line"], oom["line_end"]) == (line_of(text, "invoked oom-killer"), line_of(text, "Killed process"))
    assert reaper["attrs"]["kill_line"] == oom["line"]
    xid = rows(text, "xid")[0]
    assert (xid["code"], xid["pid"], xid["comm"], xid["attrs"]["pci_bus_id"]) == (79, 48219, "python3", "0000:3b:00")
    assert rows(text, "gpu_fallen_off_bus")[0]["attrs"]["xid79_line"] == xid["line"]
    hung = rows(text, "hung_task")[0]
    assert (hung["pid"], hung["comm"], hung["seconds"]) == (51234, "nvidia-smi", 122.0)
    assert hung["line_end"] == line_of(text, "</TASK>", last=True) and hung["attrs"]["state"] == "D"
    up, _ = _canon("invoked oom-killer")
    assert oom["uptime_s"] == (pytest.approx(up) if form in HAS_UPTIME else None)
    if form in HAS_UTC:  # short-iso prints whole seconds
        assert oom["ts"] == _utc(up).replace(microsecond=0 if form == "short_iso" else _utc(up).microsecond)
    else:
        assert oom["ts"] is None
    if form in HAS_LOCAL:
        assert oom["ts_local"] == _local(up).replace(microsecond=oom["ts_local"].microsecond)
    if form in HAS_HOST:
        assert oom["host"] == HOST


def test_rfc3164_year_comes_from_elsewhere_in_the_text():
    short = _render("short")
    assert rows(short, "xid")[0]["ts_local"] is None
    assert any("no year" in n for n in kernel.parse(short).notes)
    mixed = _render("dmesg_ctime").split("\n")[0] + "\n" + short  # one dated line is enough
    up, _ = _canon("NVRM: Xid")
    assert rows(mixed, "xid")[0]["ts_local"] == _local(up).replace(microsecond=0)


# ------------------------------------------------------------------ our own fixtures

def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_interleaved_oom_blocks_pair_by_pid_and_order():
    text = fixture("oom_interleaved_dmesg.txt")
    oom, reaped = rows(text, "oom_kill"), rows(text, "oom_reaper")
    assert [(r["pid"], r["line"], r["line_end"]) for r in oom] == [
        (int(p), s, e) for p, s, e in zip(re.findall(r"Killed process (\d+)", text),
                                          [i for i, x in enumerate(text.split("\n"), 1) if "invoked oom-killer" in x],
                                          [i for i, x in enumerate(text.split("\n"), 1) if "Killed process" in x],
                                          strict=True)]
    assert [r["attrs"]["invoker"] for r in oom] == re.findall(r"\] (\S+) invoked oom-killer", text)
    assert {r["pid"]: r["attrs"]["kill_line"] for r in reaped} == {r["pid"]: r["line"] for r in oom}
    assert oom[0]["attrs"]["shmem_rss_bytes"] == int(re.search(r"shmem-rss:(\d+)kB, UID", text).group(1)) * KIB
    assert kernel.parse(text).unrecognized == 0


def test_legacy_kill_process_form():
    text = fixture("oom_legacy_4x_syslog.txt")
    (row,) = rows(text, "oom_kill")
    pid, comm, score = re.search(r"Kill process (\d+) \((\w+)\) score (\d+)", text).groups()
    assert (row["pid"], row["comm"], row["attrs"]["score"]) == (int(pid), comm, int(score))
    assert row["attrs"]["mems_allowed"] == re.search(r"mems_allowed=(\S+)", text).group(1)
    assert row["attrs"]["nodemask"] == "0" and row["host"] == "trainer-04"
    assert row["attrs"].get("shmem_rss_bytes") is None


def test_memcg_oom_limits():
    text = fixture("memcg_oom_v2_short_iso.txt")
    (row,) = rows(text, "oom_kill")
    usage, limit = re.search(r"memory: usage (\d+)kB, limit (\d+)kB", text).groups()
    assert (row["attrs"]["memcg_usage_bytes"], row["attrs"]["memcg_limit_bytes"]) == (int(usage) * KIB, int(limit) * KIB)
    assert row["attrs"]["memcg"] == re.search(r"oom_memcg=([^,]+)", text).group(1)
    assert row["attrs"]["oom_score_adj"] == 200 and row["attrs"]["constraint"] == "CONSTRAINT_MEMCG"
    assert row["ts"] == datetime(2026, 11, 29, 0, 50, 41, tzinfo=UTC)


def test_nvrm_multiline_records():
    text = fixture("nvrm_multiline_dmesg.txt")
    nvrm = rows(text, "nvrm")
    dump = next(r for r in nvrm if "crash dump" in r["attrs"]["message"])
    assert (dump["line"], dump["line_end"]) == (line_of(text, "crash dump"), line_of(text, "module is unloaded"))
    sched = next(r for r in nvrm if "os_schedule" in r["attrs"]["message"])
    assert sched["count"] == text.count("os_schedule")
    xids = rows(text, "xid")
    assert [x["attrs"]["pci_bus_id"] for x in xids if x["code"] in (43, 45)] == ["0000:5e:00"] * 2
    probe = next(r for r in rows(text, "gpu_fallen_off_bus") if r["attrs"].get("at_probe"))
    assert probe["attrs"]["pci_id"] == "10de:2335" and probe["line_end"] == line_of(text, "not responding")
    assert rows(text, "version")[0]["attrs"]["version"] == re.search(r"Module\s+(\S+)", text).group(1)
    assert kernel.parse(text).unrecognized == 0


def test_hung_task_report_in_kern_log():
    text = fixture("hung_task_kern_log_rfc3339.txt")
    first, again = rows(text, "hung_task")
    assert first["line_end"] == line_of(text, "is blocked on a mutex")
    assert (first["attrs"]["owner_comm"], first["attrs"]["owner_pid"]) == ("nv-hostengine", 2211)
    assert first["attrs"]["tainted"] is True and again["attrs"]["repeat_of_line"] == first["line"]
    assert again["seconds"] == float(re.findall(r"more than (\d+) seconds", text)[-1])


# ------------------------------------------------------------------ robustness, speed, sniffing

def _all_texts() -> list[str]:
    texts = [_render(f) for f in FORMS] + [fixture(p.name) for p in sorted(FIXTURES.iterdir())]
    texts += [sample(rel) for rel in sample_files("kernel_log", "oom", "nvrm_xid", "hung_task")]
    return texts


def _parse_or_none(text: str):
    try:
        return kernel.parse(text)
    except NotThisFormat:
        return None


def test_bulk_skip_agrees_with_reading_every_line():
    for text in _all_texts():
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        fast, slow = kernel._Reader(lines), kernel._Reader(lines)
        fast.run(kernel._special_lines(text, len(lines)))
        slow.run(list(range(len(lines))))
        assert fast.recognized == slow.recognized
        assert [(r["line"], r["kind"], r.get("pid")) for r in fast.content.rows] == \
            [(r["line"], r["kind"], r.get("pid")) for r in slow.content.rows]


def test_crlf_and_truncation():
    rnd = random.Random(3)
    for text in _all_texts():
        plain, crlf = _parse_or_none(text), _parse_or_none(text.replace("\n", "\r\n"))
        if plain is not None:
            assert crlf.events.drop("text").equals(plain.events.drop("text"))
        for _ in range(5):
            cut = _parse_or_none(text[: rnd.randrange(len(text) + 1)])
            if cut is not None:
                assert cut.recognized + cut.unrecognized == cut.lines


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["[  1.5] ", "<4>", "NVRM: Xid (PCI:0000:3b:00): ", "invoked oom-killer: ",
                                 "Killed process 1 (x) total-vm:1kB, anon-rss:", "{", "}", '"msg": ', "\x00", "\r",
                                 "INFO: task a:1 blocked for more than 9 seconds.", " ", "\n", "kern  :warn  : ",
                                 "Nov 29 08:50:41 h kernel: ", "7,1,2,-;", "  ", "\u2028", "\xff", "oom-kill:"]) |
                st.text(max_size=20), max_size=40))
def test_bad_input_only_ever_raises_not_this_format(parts):
    text = "".join(parts)
    result = _parse_or_none(text)
    if result is not None:
        assert result.recognized + result.unrecognized == result.lines
    assert 0.0 <= kernel.sniff(text) <= 1.0


def test_huge_lines_and_binary():
    for text in ("[ 1.0] " + "NVRM: Xid (" * 100_000, "x" * 1_000_000, "\x00\xff" * 50_000, "{" * 100_000,
                 "[ 2.0] " + "oom " * 250_000 + "\n[ 3.0] a invoked oom-killer: " + "(" * 300_000):
        t0 = time.perf_counter()
        _parse_or_none(text)
        kernel.sniff(text[:65536])
        assert time.perf_counter() - t0 < 10


@pytest.mark.slow
def test_a_million_ordinary_dmesg_lines_parse_in_seconds():
    text = "".join(f"[{100 + i / 1000:12.6f}] usb 1-{i % 7}: new high-speed USB device number {i % 120} "
                   "using xhci_hcd\n" for i in range(1_000_000))
    t0 = time.perf_counter()
    r = kernel.parse(text)
    elapsed = time.perf_counter() - t0
    assert r.recognized == 1_000_000 and r.events.is_empty()
    assert elapsed < 15  # a few seconds on a laptop; generous for a loaded CI runner


@pytest.mark.parametrize("rel", params([r for r in sample_files("kernel_log", "oom", "nvrm_xid", "hung_task")
                                        if not r.startswith(("kernel_log/14", "kernel_log/16"))], "research_samples"))
def test_sniff_takes_kernel_logs(rel):
    assert kernel.sniff(sample(rel)[:65536]) >= 0.5


@pytest.mark.parametrize("rel", params(sample_files("free", "meminfo", "nvidia_smi"), "research_samples"))
def test_sniff_leaves_other_formats(rel):
    assert kernel.sniff(sample(rel)[:65536]) < 0.5


def test_sniff_leaves_sglang_logs():
    logs = sorted((SHARED / "sglang_real_logs").glob("*")) if SHARED.exists() else []
    if not logs:
        pytest.skip(f"{SKIP_REASON}: no sglang logs")
    for p in logs:
        assert kernel.sniff(p.read_text(encoding="utf-8", errors="replace")[:65536]) < 0.5, p.name

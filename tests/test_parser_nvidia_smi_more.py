"""nvidia-smi forms beyond the table/CSV/-q/XML: -L, --version, nvlink -s, pmon, dmon; process lists
pasted without their box; header-less compute-apps CSV; UUID/bus id → index for Xid and process rows.

Fixtures are our own text written to the real formats (system_formats.md §2); the real captures in
../shared/research_samples/nvidia_smi/ are read at test time when present.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
from shared_data import SHARED, SKIP_REASON

from forensics.detectors import xid as xid_detector
from forensics.facts.gpu_map import GpuMap, build, fill_gpus, gpu_map
from forensics.model import Timeline
from forensics.timeline import build_timeline
from parsers import registry
from parsers.nvidia_smi import csv as nvidia_smi_csv
from parsers.nvidia_smi import misc as nvidia_smi_misc
from parsers.nvidia_smi import mon as nvidia_smi_mon
from parsers.nvidia_smi import table as nvidia_smi_table
from parsers.schema import NotThisFormat, empty_frame

SAMPLES = SHARED / "research_samples" / "nvidia_smi"

U0 = "GPU-3f1c9a2e-71b4-4c0d-9e2a-5b6c7d8e9f01"
U1 = "GPU-8a2b4c6d-1e3f-4a5b-8c7d-9e0f1a2b3c4d"


def rows(result, kind: str | None = None) -> list[dict]:
    out = []
    for r in result.events.iter_rows(named=True):
        if kind is None or r["kind"] == kind:
            out.append({**r, "a": json.loads(r["attrs"]) if r["attrs"] else {}})
    return out


# --- nvidia-smi -L -------------------------------------------------------------------------------

LIST_8 = "\n".join(f"GPU {i}: NVIDIA H200 (UUID: GPU-3f1c9a2e-71b4-4c0d-9e2a-5b6c7d8e9f{i:02d})" for i in range(8)) + "\n"

LIST_MIG = f"""GPU 0: NVIDIA H100 80GB HBM3 (UUID: {U0})
  MIG 3g.40gb     Device  0: (UUID: MIG-11111111-2222-4333-8444-555555555501)
  MIG 2g.20gb     Device  1: (UUID: MIG-11111111-2222-4333-8444-555555555502)
  MIG 1g.10gb+me  Device  2: (UUID: MIG-11111111-2222-4333-8444-555555555503)
GPU 1: NVIDIA H100 80GB HBM3 (UUID: {U1})
"""

LIST_MIG_R460 = f"""GPU 0: A100-SXM4-40GB (UUID: {U0})
  MIG 3g.20gb Device 0: (UUID: MIG-{U0}/1/0)
  MIG 3g.20gb Device 1: (UUID: MIG-{U0}/2/0)
"""


def test_list_gives_index_name_and_uuid_per_gpu():
    assert registry.best_format(LIST_8)[0] == "nvidia_smi_misc"
    r = nvidia_smi_misc.parse(LIST_8)
    got = rows(r, "gpu_device")
    assert [g["gpu"] for g in got] == list(range(8))
    assert got[5]["a"] == {"name": "NVIDIA H200", "uuid": "GPU-3f1c9a2e-71b4-4c0d-9e2a-5b6c7d8e9f05"}
    assert (r.lines, r.recognized, r.unrecognized) == (8, 8, 0)


def test_list_mig_devices_belong_to_their_parent_gpu():
    r = nvidia_smi_misc.parse(LIST_MIG)
    mig = rows(r, "gpu_mig_device")
    assert [(m["gpu"], m["a"]["mig_dev"], m["a"]["profile"]) for m in mig] == [
        (0, 0, "3g.40gb"), (0, 1, "2g.20gb"), (0, 2, "1g.10gb+me")]
    assert all(m["a"]["parent_uuid"] == U0 for m in mig)
    assert all(m["used_bytes"] is None and m["total_bytes"] is None for m in mig)  # -L says nothing of memory
    assert [g["gpu"] for g in rows(r, "gpu_device")] == [0, 1]


def test_list_mig_old_uuid_spells_gi_and_ci():
    mig = rows(nvidia_smi_misc.parse(LIST_MIG_R460), "gpu_mig_device")
    assert [(m["a"]["gi_id"], m["a"]["ci_id"], m["a"]["parent_uuid"]) for m in mig] == [(1, 0, U0), (2, 0, U0)]


def test_list_with_a_failure_line_and_a_cut_line():
    text = LIST_8.splitlines()[0] + "\nUnable to determine the device handle for GPU1: 0000:1B:00.0: Unknown Error\n" \
        + "GPU 2: NVIDIA H200 (UUID: GPU-3f1c9a2e-71b4\n"
    r = nvidia_smi_misc.parse(text)
    assert [(x["kind"], x["gpu"]) for x in rows(r)] == [("gpu_device", 0), ("gpu_error", 1)]
    assert r.unrecognized == 1 and r.unrecognized_examples[0][0] == 3


# --- nvidia-smi --version ------------------------------------------------------------------------

VERSION_R5 = """NVIDIA-SMI version  : 580.95.05
NVML version        : 580.95
DRIVER version      : 580.95.05
CUDA Version        : 13.0
"""
VERSION_R6 = """NVIDIA-SMI version  : 610.57.04
NVML version        : 610.57
DRIVER version      : Deprecated, see "KMD version" instead
CUDA version        : Deprecated, see "CUDA UMD version" instead
KMD version         : 610.57.04
CUDA UMD version    : 13.3
"""


@pytest.mark.parametrize(("text", "want"), [
    (VERSION_R5, {"nvidia_smi": "580.95.05", "nvml": "580.95", "driver": "580.95.05", "cuda": "13.0"}),
    (VERSION_R6, {"nvidia_smi": "610.57.04", "nvml": "610.57", "driver": "610.57.04", "cuda": "13.3"}),
])
def test_version_components_and_deprecated_lines(text, want):
    assert registry.best_format(text)[0] == "nvidia_smi_misc"
    r = nvidia_smi_misc.parse(text)
    got = {x["a"]["component"]: x["a"]["version"] for x in rows(r, "version")}
    assert got == want
    assert r.unrecognized == 0  # "Deprecated, see …" is read, not lost


def test_q_header_is_not_taken_for_version_output():
    head = "==============NVSMI LOG==============\n\nTimestamp : Fri Jul  3 22:11:09 2026\n" \
           "Driver Version : 580.95.05\nCUDA Version : 13.0\n"
    assert nvidia_smi_misc.sniff(head.split("\n\n", 1)[1]) == 0.0


# --- nvidia-smi nvlink -s ------------------------------------------------------------------------

NVLINK = f"""GPU 0: NVIDIA A100-SXM4-80GB (UUID: {U0})
\t Link 0: 25 GB/s
\t Link 1: 25 GB/s
\t Link 2: <inactive>
GPU 1: NVIDIA A100-SXM4-80GB (UUID: {U1})
\t Link 0: 26.562 GB/s
\t Link 1: <inactive>
"""


def test_nvlink_links_per_gpu_with_speed_or_inactive():
    assert registry.best_format(NVLINK)[0] == "nvidia_smi_misc"
    links = rows(nvidia_smi_misc.parse(NVLINK), "nvlink_status")
    assert [(x["gpu"], x["a"]["link"], x["a"]["state"], x["a"].get("speed_gb_s")) for x in links] == [
        (0, 0, "active", 25.0), (0, 1, "active", 25.0), (0, 2, "inactive", None),
        (1, 0, "active", 26.562), (1, 1, "inactive", None)]


@pytest.mark.parametrize(("message", "mid"), [
    ("Nvlink queries are not supported for Devices in MIG mode", "mig_mode"),
    ("Device does not have or support Nvlink", "no_nvlink"),
    ("NVML: Unable to retrieve Nvlink information as all links are inActive", "all_inactive"),
])
def test_nvlink_messages_are_facts_not_failures(message, mid):
    text = f"GPU 3: NVIDIA L40S (UUID: {U1})\n{message}\n"
    r = nvidia_smi_misc.parse(text)
    (st,) = rows(r, "nvlink_status")
    assert st["gpu"] == 3 and st["a"]["message_id"] == mid
    assert not rows(r, "gpu_error") and r.unrecognized == 0


def test_misc_refuses_other_text():
    with pytest.raises(NotThisFormat):
        nvidia_smi_misc.parse("GPU 0 has a total capacity of 79.10 GiB of which 20.00 MiB is free.\n")
    assert nvidia_smi_misc.sniff("[2026-11-29 08:50:41 TP0] Load weight end. avail mem=20.00 GB\n") == 0.0


# --- pmon ----------------------------------------------------------------------------------------

PMON = """# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command
# Idx           #    C/G      %      %      %      %      %      %    name
    0      41300     C     97     41      -      -      -      -    sglang::schedul
    1      41301     C     95     40      -      -      -      -    sglang::schedul
    2          -     -      -      -      -      -      -      -    -
    0      41300     C     98     43      -      -      -      -    sglang::schedul
    1      41301     C     12      3      -      -      -      -    sglang::schedul
    2          -     -      -      -      -      -      -      -    -
"""

PMON_FB_DT = """#Date       Time        gpu         pid   type     fb   ccpm     sm    mem    enc    dec    jpg    ofa    command
#YYYYMMDD   HH:MM:SS    Idx           #    C/G     MB     MB      %      %      %      %      %      %    name
 20261129   08:50:41      0      41300     C  81234      0     97     41      -      -      -      -    VLLM::Worker_TP0
 20261129   08:50:41      1      41301     C  81230      0     96     40      -      -      -      -    VLLM::Worker_TP1
 20261129   08:50:42      0      41300     C  81234      0     97     41      -      -      -      -    VLLM::Worker_TP0
 20261129   08:50:42      1      41301     C  812
"""


def test_pmon_rows_placeholders_and_samples():
    assert registry.best_format(PMON)[0] == "nvidia_smi_mon"
    r = nvidia_smi_mon.parse(PMON)
    got = rows(r, "gpu_process_sample")
    assert [(x["gpu"], x["pid"], x["a"]["sample"]) for x in got] == [
        (0, 41300, 0), (1, 41301, 0), (2, None, 0), (0, 41300, 1), (1, 41301, 1), (2, None, 1)]
    first = got[0]
    assert first["a"]["sm_pct"] == 97 and first["a"]["mem_pct"] == 41
    assert "enc_pct" not in first["a"] and first["a"]["placeholders"]["enc_pct"] == "-"  # "-" is null, never 0
    assert first["a"]["sglang_role"] == "scheduler" and first["a"]["title_truncated"] is True
    assert got[2]["a"]["no_process"] is True and got[2]["comm"] is None
    assert r.unrecognized == 0


def test_pmon_fb_ccpm_and_date_time_columns_and_a_cut_last_row():
    r = nvidia_smi_mon.parse(PMON_FB_DT)
    got = rows(r, "gpu_process_sample")
    assert len(got) == 3
    assert got[0]["used_bytes"] == 81234 << 20 and got[0]["a"]["ccpm_bytes"] == 0
    assert str(got[0]["ts_local"]) == "2026-11-29 08:50:41"
    assert [x["a"]["sample"] for x in got] == [0, 0, 1]  # a new time starts a new sample
    assert (got[1]["tp_rank"], got[1]["a"]["vllm_role"]) == (1, "worker")
    assert r.unrecognized == 1 and r.unrecognized_examples[0][0] == 6


# --- dmon ----------------------------------------------------------------------------------------

DMON = """# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk
# Idx      W      C      C      %      %      %      %      %      %    MHz    MHz
    0    512     61     48     99     37      0      0      0      0   3201   1980
    1     88     35      -      0      0      0      0      0      0   3201    345
    0    515     61     48    100     38      0      0      0      0   3201   1980
    1     87     35      -      0      0      0      0      0      0   3201    345
"""

DMON_S_MU_DT = """#Date       Time        gpu     fb   bar1   ccpm     sm    mem    enc    dec    jpg    ofa
#YYYYMMDD   HH:MM:SS    Idx     MB     MB     MB      %      %      %      %      %      %
 20261129   08:50:41      0  98304     17      0     99     37      0      0      0      0
 20261129   08:50:41      1    512      5      0      0      0      0      0      0      0
"""

DMON_T = """#Time        gpu  pviol  tviol  sbecc  dbecc    pci  rxpci  txpci
#HH:MM:SS     Idx      %   bool   errs   errs   errs   MB/s   MB/s
 08:50:41       0      0      0      0      0      0    112     87
"""


def test_dmon_series_per_gpu_with_null_placeholders():
    assert registry.best_format(DMON)[0] == "nvidia_smi_mon"
    got = rows(nvidia_smi_mon.parse(DMON), "gpu_sample")
    assert [(x["gpu"], x["a"]["sample"]) for x in got] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert got[0]["ratio"] == 0.99 and got[0]["a"]["power_w"] == 512 and got[0]["a"]["pclk_mhz"] == 1980
    assert "memory_temperature_c" not in got[1]["a"] and got[1]["a"]["placeholders"] == {"memory_temperature_c": "-"}


def test_dmon_memory_subset_with_date_and_time():
    got = rows(nvidia_smi_mon.parse(DMON_S_MU_DT), "gpu_sample")
    assert [x["used_bytes"] for x in got] == [98304 << 20, 512 << 20]
    assert got[0]["a"]["bar1_bytes"] == 17 << 20 and str(got[0]["ts_local"]) == "2026-11-29 08:50:41"


def test_dmon_time_only_and_error_columns():
    (x,) = rows(nvidia_smi_mon.parse(DMON_T), "gpu_sample")
    assert x["ts_local"] is None and x["a"]["time_text"] == "08:50:41"
    assert (x["a"]["dbecc_count"], x["a"]["rxpci_mb_s"], x["a"]["tviol_pct"]) == (0, 112, 0)


def test_mon_refuses_text_without_its_header():
    with pytest.raises(NotThisFormat):
        nvidia_smi_mon.parse("    0    512     61     48     99\n")
    assert nvidia_smi_mon.sniff("# a shell comment\n# another\n") == 0.0


# --- process lists pasted without their box (issue 13 item 7) -----------------------------------

BARE_WITH_HEADINGS = """  GPU   GI   CI              PID   Type   Process name                        GPU Memory
        ID   ID                                                               Usage
    0   N/A  N/A           52110      C   sglang::scheduler_DP0_TP0_EP0        96413MiB
    2   N/A  N/A           52112      C   sglang::scheduler_DP2_TP2_EP2        96417MiB
"""

BARE_ROWS_OLD = """    4     32263      C   /opt/conda/envs/serve/bin/python3            10243MiB
    5     32264      C   /opt/conda/envs/serve/bin/python3            10243MiB
"""

BOX_CUT = """|    0   N/A  N/A           52110      C   sglang::scheduler_TP0                96413MiB |
|    1   N/A  N/A           52111      C   sglang::scheduler_TP1                96409MiB |
|    2   N/A  N/A           52112      C   sglang::sched"""


@pytest.mark.parametrize(("text", "want", "unrec"), [
    (BARE_WITH_HEADINGS, [(0, 52110, 96413), (2, 52112, 96417)], 0),
    (BARE_ROWS_OLD, [(4, 32263, 10243), (5, 32264, 10243)], 0),
    (BOX_CUT, [(0, 52110, 96413), (1, 52111, 96409)], 1),
])
def test_process_list_without_box_rows_only_or_cut(text, want, unrec):
    assert registry.best_format(text)[0] == "nvidia_smi_table"
    r = nvidia_smi_table.parse(text)
    got = rows(r, "gpu_process")
    assert [(x["gpu"], x["pid"], x["used_bytes"] >> 20) for x in got] == want
    assert r.unrecognized == unrec


def test_bare_rows_carry_ranks_from_the_title():
    got = rows(nvidia_smi_table.parse(BARE_WITH_HEADINGS), "gpu_process")
    assert [(x["rank"], x["tp_rank"], x["dp_rank"], x["ep_rank"]) for x in got] == [
        ("DP0 TP0 EP0", 0, 0, 0), ("DP2 TP2 EP2", 2, 2, 2)]
    assert got[0]["a"]["boxless"] is True and got[0]["a"]["gi_id"] is None


def test_bare_no_running_processes_line():
    r = nvidia_smi_table.parse("Processes:\n  GPU   GI   CI   PID   Type   Process name   GPU Memory\n"
                               "No running processes found\n")
    assert [x["kind"] for x in rows(r)] == ["gpu_process_none"]


# --- --query-compute-apps without a header -------------------------------------------------------

@pytest.mark.parametrize(("text", "fields"), [
    ("52110, sglang::scheduler_TP0, 96413 MiB\n52111, sglang::scheduler_TP1, 96409 MiB\n",
     ["pid", "process_name", "used_gpu_memory"]),
    (f"52110, /usr/bin/python3, 96413 MiB, {U0}\n", ["pid", "process_name", "used_gpu_memory", "gpu_uuid"]),
    (f"{U1}, 52110, VLLM::Worker_TP3, 70112 MiB\n", ["gpu_uuid", "pid", "process_name", "used_gpu_memory"]),
])
def test_compute_apps_without_header_columns_guessed_from_shapes(text, fields):
    assert registry.best_format(text)[0] == "nvidia_smi_csv"
    r = nvidia_smi_csv.parse(text)
    got = rows(r, "gpu_process")
    assert got and all(x["a"]["assumed_columns"] == fields for x in got)
    assert got[0]["pid"] == 52110 and got[0]["used_bytes"] == int(got[0]["a"]["fields"]["used_gpu_memory"][:-4]) << 20
    assert any("guessed" in n for n in r.notes)


def test_compute_apps_guess_keeps_a_windows_name_whole_and_na_memory_null():
    r = nvidia_smi_csv.parse("12444, C:\\Program Files\\Vendor, Inc\\tool.exe, [N/A]\n")
    (x,) = rows(r, "gpu_process")
    assert x["comm"] == "C:\\Program Files\\Vendor, Inc\\tool.exe" and x["used_bytes"] is None
    assert x["a"]["placeholders"]["used_bytes"] == "[N/A]"


def test_compute_apps_guess_does_not_take_gpu_rows_or_mixed_rows():
    # index, name, memory.used of --query-gpu: a GPU model where a process name would be
    with pytest.raises(NotThisFormat):
        nvidia_smi_csv.parse("0, NVIDIA H200, 32362 MiB\n")
    r = nvidia_smi_csv.parse("52110, sglang::scheduler_TP0, 96413 MiB\n52111, 96409 MiB, python3, extra\n")
    assert len(rows(r, "gpu_process")) == 1 and r.unrecognized == 1


# --- UUID / bus id → index ------------------------------------------------------------------------

def _files(tmp_path: Path, **texts: str) -> list[str]:
    out = []
    for name, text in texts.items():
        p = tmp_path / f"{name}.txt"
        p.write_text(text)
        out.append(str(p))
    return out


def test_compute_apps_rows_get_their_gpu_from_a_separate_list(tmp_path):
    apps = f"52110, sglang::scheduler_TP1, 96413 MiB, {U1}\n"
    tl = build_timeline(_files(tmp_path, L=LIST_MIG, apps=apps))
    (proc,) = tl.of_kind("gpu_process").iter_rows(named=True)
    assert proc["gpu"] is None  # the parser cannot know: the index is in another file
    (filled,) = fill_gpus([proc], gpu_map(tl))
    assert filled["gpu"] == 1 and "uuid" in filled["gpu_from"] and "L.txt" in filled["gpu_from"]


def test_mig_uuid_maps_to_its_parent_gpu():
    tl = Timeline(events=empty_frame())
    assert gpu_map(tl).index == {}
    m = build(pl.concat([nvidia_smi_misc.parse(LIST_MIG).events]))
    assert m.index_of(uuid="MIG-11111111-2222-4333-8444-555555555502") == 0
    assert m.index_of(uuid=U1.upper()) == 1


def test_xid_by_pci_address_gets_the_index_through_the_kernel_uuid_line(tmp_path):
    dmesg = ("[  101.000001] NVRM: GPU at PCI:0000:1b:00: " + U1 + "\n"
             "[ 5021.330122] NVRM: Xid (PCI:0000:1b:00): 79, pid='<unknown>', name=<unknown>, "
             "GPU has fallen off the bus.\n")
    listing = f"GPU 0: NVIDIA H200 (UUID: {U0})\nGPU 1: NVIDIA H200 (UUID: {U1})\n"
    tl = build_timeline(_files(tmp_path, dmesg=dmesg, L=listing))
    xid_rows = tl.of_kind("xid")
    assert xid_rows.height == 1 and xid_rows["gpu"][0] is None
    (finding,) = [f for f in xid_detector.detect(tl) if f.rule_id == "SGL-XID-001"]
    assert finding.gpus == [1]


def test_ambiguous_and_cuda_ordinal_rows_are_not_used():
    m = GpuMap()
    m.learn("h", 0, uuid=U0, where="a:1")
    m.learn("h", 3, uuid=U0, where="b:1")  # the same UUID said to be two GPUs: not guessed
    assert m.index_of(uuid=U0, host="h") is None
    # a CUDA OOM's "GPU 2" is a CUDA ordinal, not nvidia-smi's index: never a key
    frame = pl.DataFrame([{"kind": "cuda_oom", "source": "sglang", "gpu": 2, "file": "x", "line": 1,
                           "attrs": json.dumps({"gpu_uuid": U0})}])
    assert build(frame).index == {}


def test_hosts_keep_their_own_indexes():
    m = GpuMap()
    m.learn("a", 0, pci_bus_id="00000000:1B:00.0", where="a:1")
    m.learn("b", 5, pci_bus_id="00000000:1B:00.0", where="b:1")
    assert m.index_of(pci_bus_id="0000:1b:00", host="a") == 0
    assert m.index_of(pci_bus_id="0000:1b:00", host="b") == 5
    assert m.index_of(pci_bus_id="0000:1b:00") is None  # which host? not guessed


# --- the real captures ---------------------------------------------------------------------------

def _real(name_glob: str) -> list[Path]:
    if not SAMPLES.is_dir():
        pytest.skip(f"{SKIP_REASON}: research_samples/nvidia_smi")
    files = sorted(SAMPLES.glob(name_glob))
    if not files:
        pytest.skip(f"{SKIP_REASON}: no sample {name_glob}")
    return files


def _content(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("$ ")]


def test_real_list_nvlink_version_pmon_dmon_are_read_whole():
    for pattern, fmt in (("*list_L*", "nvidia_smi_misc"), ("*nvlink_s*", "nvidia_smi_misc"),
                         ("*version*", "nvidia_smi_misc"), ("*pmon*", "nvidia_smi_mon"),
                         ("*dmon*", "nvidia_smi_mon")):
        for path in _real(pattern):
            tl = build_timeline([str(path)])
            (cov,) = tl.coverage
            assert fmt in cov["format"], path.name
            assert cov["unrecognized"] <= sum(1 for ln in path.read_text().splitlines() if not ln.strip()), path.name
            kinds = tl.events["kind"].to_list()
            body = _content(path)
            if "list_L" in path.name:
                assert kinds.count("gpu_device") == sum(ln.startswith("GPU ") for ln in body)
                assert kinds.count("gpu_mig_device") == sum(ln.lstrip().startswith("MIG ") for ln in body)
            if "pmon" in path.name:
                assert kinds.count("gpu_process_sample") == sum(not ln.startswith("#") for ln in body)
            if "dmon" in path.name:
                assert kinds.count("gpu_sample") == sum(not ln.startswith("#") for ln in body)
            if "version" in path.name:
                numbered = [ln for ln in body if re.search(r":\s*\d", ln)]
                assert kinds.count("version") == len(numbered)


def test_real_captures_of_the_older_forms_still_go_to_their_parsers():
    """Sniffing for the new forms must not take the table, CSV, -q or XML captures from their parsers."""
    wanted = {"default_table": "nvidia_smi_table", "query_": "nvidia_smi_csv", "nvidia_smi_q": "nvidia_smi_q",
              "q_x_xml": "nvidia_smi_xml"}
    seen = 0
    for path in _real("*.txt"):
        fmt = next((f for key, f in wanted.items() if key in path.name), None)
        if fmt is None or "help" in path.name:  # --help-query-* is documentation, read by nobody
            continue
        seen += 1
        tl = build_timeline([str(path)])
        (cov,) = tl.coverage
        formats = set(re.findall(r"nvidia_smi_\w+", cov["format"]))
        assert formats == {fmt}, (path.name, cov["format"])
        if "failure" not in path.name:
            assert cov["unrecognized"] == 0, path.name
    assert seen


def test_stranded_context_finds_the_owner_named_only_by_uuid():
    """The collector's compute-apps rows name their GPU by UUID; the query-gpu rows of the same snapshot
    say which index that is, so the D-state scheduler is seen as the owner of GPU 0."""
    from test_detectors_common import fired, timeline

    from forensics.detectors import stranded_context

    gib = 1 << 30
    rows_ = [
        {"kind": "gpu_memory", "source": "nvidia_smi_csv", "file": "host/q.csv", "line": 2 + i, "snapshot": 0,
         "gpu": i, "used_bytes": used * gib, "total_bytes": 140 * gib, "attrs": {"uuid": uuid}}
        for i, (used, uuid) in enumerate(((94, U0), (0, U1)))
    ] + [
        {"kind": "gpu_process", "source": "nvidia_smi_csv", "file": "host/apps.csv", "line": 2, "snapshot": 0,
         "pid": 4242, "comm": "sglang::scheduler_TP0", "used_bytes": 94 * gib, "attrs": {"gpu_uuid": U0}},
        {"kind": "process", "source": "ps", "file": "host/ps.txt", "line": 2, "snapshot": 0, "pid": 4242,
         "comm": "sglang::scheduler_TP0", "attrs": {"state": "D", "stat": "D", "ppid": 1}},
    ]
    f = fired(stranded_context.detect(timeline(*rows_)))["SGL-GPU-005"]
    assert f.gpus == [0] and f.figures["owner_states"] == {"0": "4242:D"}

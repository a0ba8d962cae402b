"""nvidia-smi parsers on our own fixtures (fixtures/nvidia_smi/ and inline), one per variant."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from parsers.nvidia_smi import csv as nvidia_smi_csv
from parsers.nvidia_smi import q as nvidia_smi_q
from parsers.nvidia_smi import table as nvidia_smi_table
from parsers.nvidia_smi import xml as nvidia_smi_xml
from parsers.schema import NotThisFormat

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia_smi"
MIB = 1 << 20


def rows(result, kind: str) -> list[dict]:
    out = []
    for r in result.events.filter(kind=kind).iter_rows(named=True):
        r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else {}
        out.append(r)
    return out


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- default table ----------------------------------------------------------------------------

def test_table_lost_gpu_by_bus_id_and_index_gap():
    text = fixture("table_r535_8gpu_one_lost.txt")
    r = nvidia_smi_table.parse(text)
    assert r.unrecognized == 0 and r.lines == len(text.splitlines())
    gpus = rows(r, "gpu_memory")
    listed = [int(x) for x in re.findall(r"^\|\s+(\d+)\s+NVIDIA", text, re.MULTILINE)]
    assert [g["gpu"] for g in gpus] == listed
    used = [int(u) * MIB for u in re.findall(r"(\d+)MiB / \d+MiB", text)]
    assert [g["used_bytes"] for g in gpus] == used
    errs = rows(r, "gpu_error")
    lost = [e for e in errs if e["attrs"]["error"] == "gpu_lost"]
    assert len(lost) == 1 and lost[0]["gpu"] is None and lost[0]["attrs"]["pci_bus_id"] == "0000:9b:00.0"
    missing = [e["gpu"] for e in errs if e["attrs"]["error"] == "missing_from_table"]
    assert missing == sorted(set(range(max(listed) + 1)) - set(listed))
    procs = rows(r, "gpu_process")
    assert [p["comm"] for p in procs] == re.findall(r"(sglang::scheduler_TP\d)", text)


def test_table_r470_layout_with_mig_box():
    text = fixture("table_r470_mig_old_layout.txt")
    r = nvidia_smi_table.parse(text)
    assert r.unrecognized == 0
    g0, g1 = rows(r, "gpu_memory")
    assert g0["ratio"] is None and g0["attrs"]["mig"] == "Enabled"
    util = int(re.search(r"(\d+)%\s+Default", text).group(1))
    assert g1["ratio"] == util / 100 and g1["attrs"]["mig"] == "Disabled"
    migs = rows(r, "gpu_mig_device")
    assert [(m["attrs"]["gi_id"], m["used_bytes"]) for m in migs] == [(1, 25 * MIB), (2, 20 * MIB)]
    assert [m["attrs"]["bar1_total_bytes"] for m in migs] == [32767 * MIB] * 2
    (p,) = rows(r, "gpu_process")
    assert (p["gpu"], p["pid"], p["used_bytes"]) == (1, 23011, 39117 * MIB)


OLD_375 = """\
Mon Jan  8 10:01:02 2018
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 375.26                 Driver Version: 375.26                    |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|===============================+======================+======================|
|   0  Tesla K80           On   | 0000:05:00.0     Off |                    0 |
| N/A   34C    P8    27W / 149W |      0MiB / 11439MiB |      0%      Default |
+-------------------------------+----------------------+----------------------+
|   1  Tesla K80           On   | 0000:06:00.0     Off |                    0 |
| ERR!  ERR!  ERR!    N/A /  N/A |   2311MiB / 11439MiB |     ERR!     Default |
+-------------------------------+----------------------+----------------------+

+-----------------------------------------------------------------------------+
| Processes:                                                       GPU Memory |
|  GPU       PID  Type  Process name                               Usage      |
|=============================================================================|
|    1     20441    C   python                                        2309MiB |
+-----------------------------------------------------------------------------+
"""


def test_table_pre_r410_header_without_cuda_and_err_fields():
    r = nvidia_smi_table.parse(OLD_375)
    assert r.unrecognized == 0, r.unrecognized_examples
    assert [(v["attrs"]["component"], v["attrs"]["version"]) for v in rows(r, "version")] == [("driver", "375.26")]
    g0, g1 = rows(r, "gpu_memory")
    assert g0["attrs"]["pci_bus_id"] == "0000:05:00.0" and g0["used_bytes"] == 0
    assert g1["used_bytes"] == 2311 * MIB
    assert g1["ratio"] is None and g1["attrs"]["placeholders"]["ratio"] == "ERR!"
    assert g1["attrs"].get("temperature_c") is None and g1["attrs"]["placeholders"]["temperature_c"] == "ERR!"


def test_table_prompt_line_crlf_and_two_runs_in_one_text():
    one = fixture("table_r470_mig_old_layout.txt")
    later = one.replace("Wed Feb  9 13:05:21 2022", "Wed Feb  9 13:06:21 2022").replace("39120MiB", "3MiB")
    text = ("user@gpu-host:~$ nvidia-smi\n" + one + later).replace("\n", "\r\n")
    r = nvidia_smi_table.parse(text)
    assert r.unrecognized == 0 and r.lines == text.count("\r\n")
    gpus = rows(r, "gpu_memory")
    assert [(g["gpu"], str(g["ts_local"])[11:]) for g in gpus] == \
        [(0, "13:05:21"), (1, "13:05:21"), (0, "13:06:21"), (1, "13:06:21")]
    assert gpus[1]["used_bytes"] == 39120 * MIB and gpus[3]["used_bytes"] == 3 * MIB
    assert not rows(r, "gpu_error")


def test_table_refuses_other_text_and_accepts_empty_output_of_known_command():
    with pytest.raises(NotThisFormat):
        nvidia_smi_table.parse("               total        used        free\nMem:   449   318   130\n")
    with pytest.raises(NotThisFormat):
        nvidia_smi_table.parse("")
    assert nvidia_smi_table.parse("", command="nvidia-smi").events.height == 0


@pytest.mark.parametrize(("line", "error"), [
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
     "NVIDIA driver is installed and running.", "no_driver"),
    ("Failed to initialize NVML: Driver/library version mismatch", "driver_library_mismatch"),
    ("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.144", None),
    ("Failed to initialize NVML: Unknown Error", "nvml_init_failed"),
    ("No devices were found", "no_devices"),
    ("Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost.  Reboot the system to recover "
     "this GPU", "gpu_lost"),
    ("Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error", "unknown_error"),
    ("Unable to determine the device handle for GPU2: 0000:3B:00.0: Unable to communicate with GPU because it "
     "is insufficiently powered.", "insufficient_power"),
])
def test_failure_outputs(line, error):
    r = nvidia_smi_table.parse(line)
    errs = rows(r, "gpu_error")
    if error is None:  # the second line of the mismatch message is kept as unrecognised, not lost
        assert r.unrecognized == 1 and errs[0]["attrs"]["error"] == "driver_library_mismatch"
        return
    assert [e["attrs"]["error"] for e in errs] == [error]
    if "3B:00.0" in line:
        assert errs[0]["attrs"]["pci_bus_id"] == "0000:3b:00.0"
    assert errs[0]["gpu"] == (2 if "GPU2:" in line else None)
    assert nvidia_smi_table.sniff(line) >= 0.5


# --- CSV --------------------------------------------------------------------------------------

SEED_CMD = ("ssh root@10.0.0.5 'free -g; echo \"---\"; nvidia-smi --query-gpu=index,memory.used "
            "--format=csv,noheader'")
SEED_ROWS = "0, 96413 MiB\n1, 99 MiB\n2, 96417 MiB\n3, 51 MiB\n4, 7 MiB\n5, 7 MiB\n6, 7 MiB\n7, 7 MiB\n"


def _pairs(text: str) -> list[tuple[int, int]]:
    return [(int(a), int(b) * MIB) for a, b in re.findall(r"^(\d+), (\d+) MiB$", text, re.MULTILINE)]


def test_seed_shape_with_the_command_from_a_transcript():
    r = nvidia_smi_csv.parse(SEED_ROWS, command=SEED_CMD)
    assert [(g["gpu"], g["used_bytes"]) for g in rows(r, "gpu_memory")] == _pairs(SEED_ROWS)
    assert all("assumed_columns" not in g["attrs"] and g["total_bytes"] is None for g in rows(r, "gpu_memory"))
    assert r.recognized == r.lines == 8


def test_seed_shape_without_command_is_read_with_assumed_columns():
    r = nvidia_smi_csv.parse(SEED_ROWS)
    gpus = rows(r, "gpu_memory")
    assert [(g["gpu"], g["used_bytes"]) for g in gpus] == _pairs(SEED_ROWS)
    assert all(g["attrs"]["assumed_columns"] is True for g in gpus)
    assert any("assumed" in n for n in r.notes)


def test_all_zero_list_is_zero_not_null():
    text = "".join(f"{i}, 0 MiB\n" for i in range(8))
    r = nvidia_smi_csv.parse(text, command="nvidia-smi --query-gpu=index,memory.used --format=csv,noheader")
    gpus = rows(r, "gpu_memory")
    assert [(g["gpu"], g["used_bytes"]) for g in gpus] == [(i, 0) for i in range(8)]
    assert all("placeholders" not in g["attrs"] for g in gpus)


def test_noheader_bare_numbers_without_command_are_refused():
    with pytest.raises(NotThisFormat):
        nvidia_smi_csv.parse("0, 96413\n1, 99\n")


def test_header_with_units_in_any_field_order():
    text = ("memory.used [MiB], memory.total [MiB], index, utilization.gpu [%], temperature.gpu, power.draw [W]\n"
            "80211 MiB, 81920 MiB, 1, 100 %, 58, 389.20 W\n"
            "4 MiB, 81920 MiB, 0, 0 %, 31, 61.02 W\n")
    r = nvidia_smi_csv.parse(text)
    g1, g0 = rows(r, "gpu_memory")
    assert (g1["gpu"], g1["used_bytes"], g1["free_bytes"], g1["ratio"]) == (1, 80211 * MIB, 1709 * MIB, 1.0)
    assert (g0["gpu"], g0["attrs"]["temperature_c"], g0["attrs"]["power_w"]) == (0, 31, 61.02)


def test_noheader_nounits_fields_from_the_command():
    cmd = "nvidia-smi --query-gpu=index,name,memory.total,memory.used,memory.free --format=csv,noheader,nounits"
    r = nvidia_smi_csv.parse("0, NVIDIA H200, 143771, 32362, 110796\n", command=cmd)
    (g,) = rows(r, "gpu_memory")
    assert (g["used_bytes"], g["total_bytes"], g["free_bytes"]) == (32362 * MIB, 143771 * MIB, 110796 * MIB)
    assert g["attrs"]["name"] == "NVIDIA H200"


@pytest.mark.parametrize("ph", ["[N/A]", "[Not Supported]", "[Insufficient Permissions]", "[Unknown Error]",
                                "[GPU is lost]", "N/A", "[Requested functionality has been deprecated]"])
def test_csv_placeholders_never_become_zero(ph):
    text = f"index, memory.used [MiB], memory.total [MiB], utilization.gpu [%]\n0, {ph}, {ph}, {ph}\n"
    (g,) = rows(nvidia_smi_csv.parse(text), "gpu_memory")
    assert g["used_bytes"] is None and g["total_bytes"] is None and g["free_bytes"] is None and g["ratio"] is None
    assert g["attrs"]["placeholders"] == {"used_bytes": ph, "total_bytes": ph, "util_pct": ph}


def test_compute_apps_with_comma_in_the_name_and_uuid_mapped_by_a_gpu_block():
    text = ("index, uuid, memory.used [MiB]\n"
            "0, GPU-aaaa, 40000 MiB\n"
            "1, GPU-bbbb, 10 MiB\n"
            "pid, name, used_memory [MiB], gpu_uuid\n"
            "4242, python3 -c import a, b, 39990 MiB, GPU-aaaa\n"
            "4343, other, 5 MiB, GPU-zzzz\n")
    r = nvidia_smi_csv.parse(text)
    p1, p2 = rows(r, "gpu_process")
    assert (p1["pid"], p1["comm"], p1["used_bytes"], p1["gpu"]) == (4242, "python3 -c import a, b", 39990 * MIB, 0)
    assert p2["gpu"] is None and p2["attrs"]["gpu_uuid"] == "GPU-zzzz"
    assert r.unrecognized == 0


def test_compute_apps_empty_output_of_a_known_command_is_a_fact():
    cmd = "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader"
    r = nvidia_smi_csv.parse("", command=cmd)
    assert r.events["kind"].to_list() == ["gpu_process_none"]
    with pytest.raises(NotThisFormat):
        nvidia_smi_csv.parse("")


def test_count_field_and_invalid_field_message():
    text = "index, count, memory.used [MiB]\n0, 4, 1 MiB\n1, 4, 1 MiB\n3, 4, 1 MiB\n"
    errs = rows(nvidia_smi_csv.parse(text), "gpu_error")
    assert [(e["gpu"], e["attrs"]["error"]) for e in errs] == [(2, "missing_from_table")]
    r = nvidia_smi_csv.parse('Field "memory.bogus" is not a valid field to query.\n',
                             command="nvidia-smi --query-gpu=memory.bogus --format=csv")
    assert rows(r, "gpu_error")[0]["attrs"] == {"detail": 'Field "memory.bogus" is not a valid field to query.',
                                                "error": "invalid_field", "field": "memory.bogus"}


# --- -q text ----------------------------------------------------------------------------------

def test_q_two_gpus_with_na_memory_and_processes_none():
    text = fixture("q_two_gpus_r550.txt")
    r = nvidia_smi_q.parse(text)
    assert r.unrecognized == 0
    g0, g1 = rows(r, "gpu_memory")
    used0 = int(re.search(r"Used\s+: (\d+) MiB", text).group(1))
    assert (g0["gpu"], g0["used_bytes"], g0["ratio"]) == (0, used0 * MIB, 0.88)
    assert (g0["attrs"]["power_w"], g0["attrs"]["power_cap_w"]) == (301.17, 350.0)
    assert g1["used_bytes"] is None and g1["free_bytes"] is None and g1["total_bytes"] == 46068 * MIB
    assert g1["attrs"]["placeholders"] == {"used_bytes": "N/A", "free_bytes": "N/A", "util_pct": "N/A"}
    (p,) = rows(r, "gpu_process")
    assert (p["gpu"], p["pid"], p["comm"], p["used_bytes"]) == (0, 90211, "python3 -m sglang.launch_server",
                                                                 44858 * MIB)
    assert [n["gpu"] for n in rows(r, "gpu_process_none")] == [1]


def test_q_single_gpu_by_command_index_and_missing_blocks_by_minor_number():
    text = fixture("q_two_gpus_r550.txt")
    one = text.split("GPU 00000000:C1:00.0")[0].replace("Attached GPUs                             : 2",
                                                       "Attached GPUs                             : 8")
    r = nvidia_smi_q.parse(one, command="nvidia-smi -q -i 5")
    assert [g["gpu"] for g in rows(r, "gpu_memory")] == [5] and not rows(r, "gpu_error")
    four = text.replace(": 2\n", ": 4\n", 1).replace("Minor Number                          : 1",
                                                       "Minor Number                          : 2")
    r = nvidia_smi_q.parse(four)
    assert [g["gpu"] for g in rows(r, "gpu_memory")] == [0, 2]
    assert [e["gpu"] for e in rows(r, "gpu_error")] == [1, 3]


def test_q_refuses_other_text():
    with pytest.raises(NotThisFormat):
        nvidia_smi_q.parse("MemTotal:       24513844 kB\nMemFree:        1234 kB\n")


# --- -q -x XML --------------------------------------------------------------------------------

def test_xml_two_gpus_process_na_memory_and_empty_list():
    text = fixture("xml_two_gpus_v12.xml")
    r = nvidia_smi_xml.parse(text)
    g0, g1 = rows(r, "gpu_memory")
    assert (g0["used_bytes"], g0["ratio"], g0["attrs"]["power_w"], g0["attrs"]["power_cap_w"]) == \
        (80211 * MIB, 1.0, 389.2, 400.0)
    assert g1["used_bytes"] == 4 * MIB and g1["gpu"] == 1
    p1, p2 = rows(r, "gpu_process")
    assert (p1["pid"], p1["used_bytes"], p1["line"]) == (7741, 80198 * MIB, text.split("\n").index(
        "\t\t\t<process_info>") + 1)
    assert p2["used_bytes"] is None and p2["attrs"]["placeholders"] == {"used_bytes": "N/A"}
    assert [n["gpu"] for n in rows(r, "gpu_process_none")] == [1]


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE nvidia_smi_log [
  <!ENTITY a "aaaaaaaaaa">
  <!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
  <!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">
  <!ENTITY ext SYSTEM "file:///etc/passwd">
]>
<nvidia_smi_log>
  <driver_version>550.1</driver_version>
  <gpu id="00000000:01:00.0"><fb_memory_usage><total>100 MiB</total><used>1 MiB</used>
  <free>99 MiB</free></fb_memory_usage></gpu>
  <gpu id="00000000:02:00.0"><product_name>&c;&ext;</product_name></gpu>
</nvidia_smi_log>
"""


def test_xml_entities_are_neither_expanded_nor_fetched():
    r = nvidia_smi_xml.parse(BILLION_LAUGHS)
    g, cut = rows(r, "gpu_memory")  # the first GPU closed before the undefined entity; the second was cut
    assert g["used_bytes"] == MIB and "truncated" not in g["attrs"]
    assert cut["attrs"]["truncated"] is True and cut["used_bytes"] is None and "name" not in cut["attrs"]
    assert "root:" not in r.events.write_json() and "aaaaaaaaaa" not in r.events.write_json()
    assert any("DOCTYPE" in n for n in r.notes) and any("malformed" in n for n in r.notes)
    assert r.unrecognized > 0


def test_xml_cut_short_keeps_what_closed():
    text = fixture("xml_two_gpus_v12.xml")
    cut = text[: text.index("<processes>") + 5]
    r = nvidia_smi_xml.parse(cut)
    (g,) = rows(r, "gpu_memory")
    assert g["used_bytes"] == 80211 * MIB and g["attrs"]["truncated"] is True
    assert r.recognized + r.unrecognized == r.lines


def test_xml_index_from_command_and_refusal_of_other_xml():
    text = fixture("xml_two_gpus_v12.xml")
    one = re.sub(r'<gpu id="00000000:1C:00.0">.*?</gpu>', "", text, flags=re.S)
    r = nvidia_smi_xml.parse(one, command="nvidia-smi -q -x -i 6")
    assert [g["gpu"] for g in rows(r, "gpu_memory")] == [6]
    with pytest.raises(NotThisFormat):
        nvidia_smi_xml.parse('<?xml version="1.0"?>\n<html><body>hi</body></html>\n')

"""nvidia-smi parsers against the real captures in ../shared/research_samples/nvidia_smi.

Every expected figure is read from the sample text itself with a small independent extractor,
so the tests say "the parser agrees with the file", not "the parser returns a number we typed".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from shared_data import SHARED, SKIP_REASON

from parsers.nvidia_smi import csv as nvidia_smi_csv
from parsers.nvidia_smi import q as nvidia_smi_q
from parsers.nvidia_smi import table as nvidia_smi_table
from parsers.nvidia_smi import xml as nvidia_smi_xml
from parsers.schema import NotThisFormat

SAMPLES = SHARED / "research_samples" / "nvidia_smi"
MIB = 1 << 20
PARSERS = {m.FORMAT: m for m in (nvidia_smi_table, nvidia_smi_csv, nvidia_smi_q, nvidia_smi_xml)}

#: Sample files that are not one of our four forms (help, pmon/dmon, nvlink, -L, --version) or a grab-bag.
NOT_OURS = ("17_", "18_", "19_", "20_", "21_", "22_", "23_", "24_", "25_")
EXPECTED_FORMAT = {
    "01": "nvidia_smi_table", "02": "nvidia_smi_table", "03": "nvidia_smi_table", "04": "nvidia_smi_table",
    "05": "nvidia_smi_table", "06": "nvidia_smi_table", "28": "nvidia_smi_table", "37": "nvidia_smi_table",
    "38": "nvidia_smi_table", "07": "nvidia_smi_csv", "08": "nvidia_smi_csv", "09": "nvidia_smi_csv",
    "10": "nvidia_smi_csv", "11": "nvidia_smi_csv", "12": "nvidia_smi_csv", "13": "nvidia_smi_csv",
    "26": "nvidia_smi_csv", "27": "nvidia_smi_csv", "34": "nvidia_smi_csv", "14": "nvidia_smi_q",
    "15": "nvidia_smi_q", "16": "nvidia_smi_q", "30": "nvidia_smi_xml", "31": "nvidia_smi_xml",
    "32": "nvidia_smi_xml", "33": "nvidia_smi_xml", "35": "nvidia_smi_xml",
}


def _sample(prefix: str) -> Path:
    if not SAMPLES.is_dir():
        pytest.skip(f"{SKIP_REASON}: research_samples/nvidia_smi not present")
    found = sorted(SAMPLES.glob(f"{prefix}_*"))
    if not found:
        pytest.skip(f"{SKIP_REASON}: sample {prefix} absent")
    return found[0]


def load(prefix: str) -> tuple[str, str | None]:
    """(output text, command): ``# `` annotation lines dropped, a leading ``$ cmd`` line split off."""
    lines = [ln for ln in _sample(prefix).read_text().split("\n") if not ln.startswith("# ")]
    command = None
    if lines and lines[0].startswith("$ "):
        command, lines = lines[0][2:], lines[1:]
    return "\n".join(lines), command


def parse(prefix: str):
    text, command = load(prefix)
    fmt = EXPECTED_FORMAT[prefix]
    result = PARSERS[fmt].parse(text, path=f"{prefix}.txt", command=command)
    assert result.recognized + result.unrecognized == result.lines
    return text, result


def rows(result, kind: str) -> list[dict]:
    out = []
    for r in result.events.filter(kind=kind).iter_rows(named=True):
        r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else {}
        out.append(r)
    return out


# --- independent extractors over the raw sample text -------------------------------------------

def table_gpus(text: str) -> list[tuple[int, int, int]]:
    """(index, used MiB, total MiB) of each GPU row pair of a default table."""
    lines = text.split("\n")
    out = []
    for n, ln in enumerate(lines[:-1]):
        m = re.match(r"^\|\s+(\d+)\s+.*\|\s+[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.\d", ln)
        if m:
            mem = re.search(r"(\d+)MiB\s*/\s*(\d+)MiB", lines[n + 1])
            out.append((int(m.group(1)), int(mem.group(1)), int(mem.group(2))))
    return out


def table_processes(text: str) -> list[tuple[int, int, int | None]]:
    """(gpu, pid, MiB or None) of each process row."""
    out = []
    in_procs = False
    for ln in text.split("\n"):
        if "Processes:" in ln:
            in_procs = True
        m = re.match(r"^\|\s+(\d+)\s+(?:\S+\s+\S+\s+)?(\d+)\s+(?:C\+G|C|G)\s+.*?(\d+MiB|N/A)\s*\|$", ln)
        if in_procs and m:
            out.append((int(m.group(1)), int(m.group(2)), int(m.group(3)[:-3]) if m.group(3) != "N/A" else None))
    return out


def csv_table(text: str) -> tuple[list[str], list[list[str]]]:
    lines = [ln for ln in text.split("\n") if ln.strip()]
    header = [h.split(" [")[0] for h in lines[0].split(", ")]
    return header, [ln.split(", ") for ln in lines[1:]]


def q_fb(text: str) -> list[dict[str, int]]:
    """FB Memory Usage Total/Used/Free (MiB) per GPU block of -q text (not MIG blocks)."""
    out = []
    for m in re.finditer(r"^    FB Memory Usage\n((?:        \w+\s+: .*\n)+)", text, re.MULTILINE):
        vals = dict(re.findall(r"(\w+)\s+: (\d+) MiB", m.group(1)))
        out.append({k: int(v) for k, v in vals.items()})
    return out


def xml_fb(text: str) -> list[dict[str, int]]:
    """The GPU-level <fb_memory_usage> (not a MIG device's) of each <gpu> element."""
    out = []
    for gpu in re.split(r"<gpu id=", text)[1:]:
        gpu = re.sub(r"<mig_devices>.*?</mig_devices>", "", gpu, flags=re.S)
        m = re.search(r"<fb_memory_usage>(.*?)</fb_memory_usage>", gpu, re.S)
        out.append({k: int(v) for k, v in re.findall(r"<(\w+)>(\d+) MiB</\1>", m.group(1))})
    return out


# --- sniffing --------------------------------------------------------------------------------

@pytest.mark.parametrize("prefix", sorted(EXPECTED_FORMAT))
def test_sniff_picks_the_right_form(prefix):
    text, _ = load(prefix)
    scores = {fmt: mod.sniff(text[:65536]) for fmt, mod in PARSERS.items()}
    assert max(scores, key=scores.get) == EXPECTED_FORMAT[prefix]
    assert scores[EXPECTED_FORMAT[prefix]] >= 0.5
    assert sorted(scores.values())[-2] < 0.5


def test_sniffers_stay_quiet_on_other_tools_and_other_nvidia_smi_modes():
    if not SAMPLES.is_dir():
        pytest.skip(f"{SKIP_REASON}: samples absent")
    others = [p for p in (SHARED / "research_samples").glob("*/*") if p.parent.name != "nvidia_smi"]
    others += [p for p in SAMPLES.iterdir() if p.name.startswith(NOT_OURS)]
    assert others
    for p in others:
        head = p.read_text(errors="replace")[:65536]
        for fmt, mod in PARSERS.items():
            assert mod.sniff(head) < 0.5, (p.name, fmt)


def test_every_sample_of_ours_is_covered_by_a_test():
    if not SAMPLES.is_dir():
        pytest.skip(f"{SKIP_REASON}: samples absent")
    prefixes = {p.name[:2] for p in SAMPLES.iterdir() if not p.name.startswith(NOT_OURS)}
    assert prefixes - set(EXPECTED_FORMAT) == {"39"}  # 39 is a grab-bag, tested section by section


# --- default table ----------------------------------------------------------------------------

TABLES = ["01", "02", "03", "04", "05", "06", "28", "37", "38"]


@pytest.mark.parametrize("prefix", TABLES)
def test_table_gpus_memory_and_processes_match_the_sample(prefix):
    text, r = parse(prefix)
    assert r.unrecognized == 0, r.unrecognized_examples
    expected = table_gpus(text)
    got = rows(r, "gpu_memory")
    assert [(g["gpu"], g["used_bytes"], g["total_bytes"]) for g in got] == \
        [(i, u * MIB, t * MIB) for i, u, t in expected]
    for g in got:
        assert g["free_bytes"] == g["total_bytes"] - g["used_bytes"]
        assert g["attrs"]["pci_bus_id"] == g["attrs"]["bus_id"][-12:].lower()
    procs = rows(r, "gpu_process")
    assert [(p["gpu"], p["pid"], p["used_bytes"]) for p in procs] == \
        [(g, pid, m * MIB if m is not None else None) for g, pid, m in table_processes(text)]
    none_rows = rows(r, "gpu_process_none")
    assert len(none_rows) == text.count("No running processes found")


@pytest.mark.parametrize("prefix", TABLES)
def test_table_header_versions(prefix):
    text, r = parse(prefix)
    m = re.search(r"(?:Driver|KMD) Version:\s*(\S+)\s+CUDA (?:UMD )?Version:\s*(\S+)", text)
    versions = {v["attrs"]["component"]: v["attrs"]["version"] for v in rows(r, "version")}
    assert versions == {"driver": m.group(1), "cuda": m.group(2)}


def test_table_date_line_is_the_local_timestamp():
    _, r = parse("01")
    stamps = set(r.events.filter(kind="gpu_memory")["ts_local"].to_list())
    assert [str(s) for s in stamps] == ["2026-07-03 22:11:09"]


def test_table_util_temperature_power_from_the_row():
    text, r = parse("01")
    line2 = next(ln for ln in text.split("\n") if "MiB /" in ln)
    temp, pwr, cap, util = re.search(r"(\d+)C\s+P\d\s+(\d+)W\s*/\s*(\d+)W.*\|\s+(\d+)%", line2).groups()
    g = rows(r, "gpu_memory")[0]
    assert g["ratio"] == int(util) / 100
    assert (g["attrs"]["temperature_c"], g["attrs"]["power_w"], g["attrs"]["power_cap_w"]) == \
        (int(temp), int(pwr), int(cap))
    assert g["attrs"]["placeholders"] == {"fan_pct": "N/A"}
    assert "fan_pct" not in g["attrs"] or g["attrs"]["fan_pct"] is None


def test_table_mig_devices_and_gi_ci_of_processes():
    text, r = parse("28")
    migs = rows(r, "gpu_mig_device")
    expected = re.findall(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\s+(\d+)MiB\s*/\s*(\d+)MiB", text, re.MULTILINE)
    assert [(m["gpu"], m["attrs"]["gi_id"], m["attrs"]["ci_id"], m["attrs"]["mig_dev"], m["used_bytes"],
             m["total_bytes"]) for m in migs] == \
        [(int(a), int(b), int(c), int(d), int(u) * MIB, int(t) * MIB) for a, b, c, d, u, t in expected]
    bar1 = re.findall(r"^\|\s+\|\s+(\d+)MiB\s*/\s*(\d+)MiB", text, re.MULTILINE)
    assert [m["attrs"]["bar1_total_bytes"] for m in migs] == [int(t) * MIB for _, t in bar1]
    gi_ci = re.findall(r"^\|\s+\d+\s+(\d+)\s+(\d+)\s+\d+\s+C\s", text, re.MULTILINE)
    assert [(p["attrs"]["gi_id"], p["attrs"]["ci_id"]) for p in rows(r, "gpu_process")] == \
        [(int(a), int(b)) for a, b in gi_ci]
    g = rows(r, "gpu_memory")[0]
    assert g["ratio"] is None and g["attrs"]["placeholders"]["ratio"] == "N/A"
    assert g["attrs"]["mig"] == "Enabled"


def test_table_kmd_header_and_truncated_name():
    _, r = parse("05")
    g = rows(r, "gpu_memory")[0]
    assert g["attrs"]["name"].endswith("...") and g["attrs"]["name_truncated"] is True
    labels = {v["attrs"]["label"] for v in rows(r, "version")}
    assert labels == {"KMD Version", "CUDA UMD Version"}
    assert g["attrs"]["driver_version"] == "610.57.04"


def test_table_windows_wddm_memory_na_is_null_not_zero():
    text, r = parse("06")
    procs = rows(r, "gpu_process")
    assert len(procs) == text.count("C+G") > 0
    assert all(p["used_bytes"] is None and p["attrs"]["placeholders"]["used_bytes"] == "N/A" for p in procs)
    assert {p["attrs"]["type"] for p in procs} == {"C+G"}
    left_cut = [p for p in procs if p["comm"].startswith("...")]
    assert left_cut and all(p["attrs"]["name_truncated"] for p in left_cut)
    assert rows(r, "gpu_memory")[0]["attrs"]["persistence"] == "WDDM"


def test_table_old_79_column_layout_eight_gpus():
    text, r = parse("37")
    gpus = rows(r, "gpu_memory")
    assert len(gpus) == 8 == len(table_gpus(text))
    assert not rows(r, "gpu_error")
    assert all("gi_id" not in p["attrs"] for p in rows(r, "gpu_process"))


def test_table_partial_failure_names_the_missing_gpu():
    text, r = parse("38")
    errs = rows(r, "gpu_error")
    handle = [e for e in errs if e["attrs"]["error"] == "unknown_error"]
    bus = re.search(r"for GPU(\d+): ([0-9A-F:.]+): Unknown Error", text)
    assert [(e["gpu"], e["attrs"]["pci_bus_id"]) for e in handle] == [(int(bus.group(1)), bus.group(2).lower())]
    missing = [e for e in errs if e["attrs"]["error"] == "missing_from_table"]
    assert [e["gpu"] for e in missing] == [int(bus.group(1))]
    assert [g["gpu"] for g in rows(r, "gpu_memory")] == [i for i, _, _ in table_gpus(text)]


# --- CSV --------------------------------------------------------------------------------------

@pytest.mark.parametrize("prefix", ["07", "08", "26", "34"])
def test_query_gpu_csv_figures_match_the_sample(prefix):
    text, r = parse(prefix)
    header, data = csv_table(text)
    gpus = rows(r, "gpu_memory")
    assert len(gpus) == len(data)
    for g, values in zip(gpus, data, strict=True):
        row = dict(zip(header, values, strict=True))
        for field, col in (("memory.used", "used_bytes"), ("memory.total", "total_bytes"),
                           ("memory.free", "free_bytes")):
            if field in row:
                assert g[col] == int(row[field].split()[0]) * MIB
        if "index" in row:
            assert g["gpu"] == int(row["index"])
        assert g["attrs"]["name"] == row["name"]
        assert g["attrs"]["fields"] == row
        for field, value in row.items():
            if value.startswith("["):
                assert g["attrs"]["placeholders"].get(field, value) == value or \
                    value in g["attrs"]["placeholders"].values()


def test_query_gpu_csv_placeholders_are_null_never_zero():
    text, r = parse("08")  # MIG: utilization.gpu is [N/A]
    header, data = csv_table(text)
    row = dict(zip(header, data[0], strict=True))
    assert row["utilization.gpu"] == "[N/A]"
    g = rows(r, "gpu_memory")[0]
    assert g["ratio"] is None and "util_pct" not in g["attrs"]
    assert g["attrs"]["placeholders"]["util_pct"] == "[N/A]"
    assert g["attrs"]["fields"]["display_mode"] == "[Requested functionality has been deprecated]"


def test_query_gpu_csv_nounits_values_with_units_in_header():
    text, r = parse("34")
    header, data = csv_table(text)
    row = dict(zip(header, data[0], strict=True))
    g = rows(r, "gpu_memory")[0]
    assert g["used_bytes"] == int(row["memory.used"]) * MIB
    assert g["attrs"]["reserved_bytes"] == int(row["memory.reserved"]) * MIB
    assert g["attrs"]["power_w"] == float(row["power.draw"])
    assert g["attrs"]["placeholders"]["fan_pct"] == "[N/A]"
    assert g["attrs"]["index_source"] == "row_order"


@pytest.mark.parametrize("prefix", ["09", "11", "12", "27"])
def test_compute_apps_csv_processes(prefix):
    text, r = parse(prefix)
    header, data = csv_table(text)
    procs = rows(r, "gpu_process")
    assert len(procs) == len(data)
    for p, values in zip(procs, data, strict=True):
        row = dict(zip(header, values, strict=True))
        assert p["pid"] == int(row["pid"])
        assert p["comm"] == row["process_name"]
        if row["used_gpu_memory"] == "[N/A]":
            assert p["used_bytes"] is None and p["attrs"]["placeholders"]["used_bytes"] == "[N/A]"
        else:
            assert p["used_bytes"] == int(row["used_gpu_memory"].split()[0]) * MIB
        assert p["gpu"] is None and p["attrs"]["gpu_uuid"] == row["gpu_uuid"]  # no GPU table in this text
        assert str(p["ts_local"]).replace("-", "/").startswith(row["timestamp"][:19])


def test_compute_apps_header_only_is_an_empty_list_fact():
    _, r = parse("10")
    assert r.events["kind"].to_list() == ["gpu_process_none"]
    assert r.events["line"].to_list() == [1]


def test_retired_pages_csv_rows_keep_placeholders():
    text, r = parse("13")
    q = rows(r, "gpu_query_row")
    assert len(q) == len(csv_table(text)[1])
    assert all(x["attrs"]["query"] == "retired-pages" for x in q)
    assert all(x["attrs"]["placeholders"]["retired_pages.address"] == "[N/A]" for x in q)


# --- -q text ----------------------------------------------------------------------------------

@pytest.mark.parametrize("prefix", ["14", "15", "16"])
def test_q_text_fb_memory_matches_the_sample(prefix):
    text, r = parse(prefix)
    assert r.unrecognized == 0, r.unrecognized_examples
    fb = q_fb(text)
    gpus = rows(r, "gpu_memory")
    assert len(gpus) == len(fb) == int(re.search(r"Attached GPUs\s+: (\d+)", text).group(1))
    for g, mem in zip(gpus, fb, strict=True):
        assert (g["used_bytes"], g["total_bytes"], g["free_bytes"]) == \
            (mem["Used"] * MIB, mem["Total"] * MIB, mem["Free"] * MIB)
        assert g["attrs"]["reserved_bytes"] == mem["Reserved"] * MIB
    pids = [int(x) for x in re.findall(r"Process ID\s+: (\d+)", text)]
    mems = [int(x) * MIB for x in re.findall(r"Used GPU Memory\s+: (\d+) MiB", text)]
    procs = rows(r, "gpu_process")
    assert [p["pid"] for p in procs] == pids
    assert [p["used_bytes"] for p in procs] == mems
    assert len(rows(r, "gpu_process_none")) == len(re.findall(r"Processes\s+: None", text))


def test_q_text_mig_devices():
    text, r = parse("15")
    migs = rows(r, "gpu_mig_device")
    blocks = re.findall(r"GPU Instance ID\s+: (\d+)\n\s+Compute Instance ID\s+: (\d+)", text)
    assert [(m["attrs"]["gi_id"], m["attrs"]["ci_id"]) for m in migs] == [(int(a), int(b)) for a, b in blocks]
    used = re.findall(r"Shared FB Memory Usage\n\s+Total\s+: (\d+) MiB\n\s+Reserved\s+: \d+ MiB\n\s+Used\s+: (\d+)",
                      text)
    assert [(m["total_bytes"], m["used_bytes"]) for m in migs] == [(int(t) * MIB, int(u) * MIB) for t, u in used]
    assert rows(r, "gpu_process_none")[0]["gpu"] == 0


def test_q_text_driver_610_kmd_lines_win_over_deprecated_driver_version():
    text, r = parse("16")
    kmd = re.search(r"KMD Version\s+: (\S+)", text).group(1)
    versions = {v["attrs"]["component"]: v["attrs"] for v in rows(r, "version")}
    assert versions["driver"]["version"] == kmd and versions["driver"]["label"] == "KMD Version"
    assert "[" not in rows(r, "gpu_memory")[0]["attrs"]["driver_version"]


def test_q_text_temperature_power_and_timestamp():
    text, r = parse("14")
    g = rows(r, "gpu_memory")[0]
    assert g["attrs"]["temperature_c"] == int(re.search(r"GPU Current Temp\s+: (\d+) C", text).group(1))
    assert g["attrs"]["power_w"] == float(re.search(r"Average Power Draw\s+: ([\d.]+) W", text).group(1))
    assert g["ratio"] == int(re.search(r"Utilization\n\s+GPU\s+: (\d+) %", text).group(1)) / 100
    assert str(g["ts_local"]) == "2026-07-03 22:11:09"


# --- -q -x XML --------------------------------------------------------------------------------

@pytest.mark.parametrize("prefix", ["30", "31", "32", "33", "35"])
def test_xml_fb_memory_and_processes_match_the_sample(prefix):
    text, r = parse(prefix)
    assert r.unrecognized == 0
    fb = xml_fb(text)
    gpus = rows(r, "gpu_memory")
    assert len(gpus) == len(fb) == text.count("<gpu id=")
    for g, mem in zip(gpus, fb, strict=True):
        assert (g["used_bytes"], g["total_bytes"], g["free_bytes"]) == \
            (mem["used"] * MIB, mem["total"] * MIB, mem["free"] * MIB)
    pids = [int(x) for x in re.findall(r"<pid>(\d+)</pid>", text)]
    assert [p["pid"] for p in rows(r, "gpu_process")] == pids
    empty = len(re.findall(r"<processes />|<processes>\s*</processes>", text))
    assert len(rows(r, "gpu_process_none")) == empty
    assert len(rows(r, "gpu_mig_device")) == text.count("<mig_device>")


def test_xml_process_figures_and_versions():
    text, r = parse("33")
    p = rows(r, "gpu_process")[0]
    assert p["used_bytes"] == int(re.search(r"<used_memory>(\d+) MiB", text).group(1)) * MIB
    assert p["comm"] == re.search(r"<process_name>(.*?)</process_name>", text).group(1)
    versions = {v["attrs"]["component"]: v["attrs"]["version"] for v in rows(r, "version")}
    assert versions["driver"] == re.search(r"<driver_version>(.*?)<", text).group(1)


def test_xml_v12_trimmed_document_uses_minor_number_and_reports_the_shortfall():
    text, r = parse("35")
    g = rows(r, "gpu_memory")[0]
    assert g["gpu"] == int(re.search(r"<minor_number>(\d+)<", text).group(1))
    assert g["attrs"]["index_source"] == "minor_number"
    attached = int(re.search(r"<attached_gpus>(\d+)<", text).group(1))
    missing = [e for e in rows(r, "gpu_error") if e["attrs"]["error"] == "missing_from_table"]
    assert len(missing) == attached - 1


def test_xml_mig_device_memory():
    text, r = parse("30")
    migs = rows(r, "gpu_mig_device")
    blocks = re.findall(r"<mig_device>.*?<fb_memory_usage>\s*<total>(\d+) MiB</total>\s*<reserved>\d+ MiB</reserved>"
                        r"\s*<used>(\d+) MiB</used>", text, re.S)
    assert [(m["total_bytes"], m["used_bytes"]) for m in migs] == [(int(t) * MIB, int(u) * MIB) for t, u in blocks]


# --- failure messages (sample 39, section by section) -------------------------------------------

def _failure_lines() -> list[str]:
    text = _sample("39").read_text()
    return [ln for ln in text.split("\n") if ln and not ln.startswith("#") and not ln.startswith("$")]


def test_failure_messages_become_gpu_errors():
    lines = _failure_lines()
    expected = {
        "NVIDIA-SMI has failed": "no_driver", "GPU is lost": "gpu_lost", "Unknown Error": "unknown_error",
        "No devices were found": "no_devices",
    }
    checked = 0
    for ln in lines:
        kind = next((v for k, v in expected.items() if k in ln), None)
        if kind is None or "Unable to determine" not in ln and kind in ("gpu_lost", "unknown_error"):
            continue
        r = nvidia_smi_table.parse(ln)
        errs = rows(r, "gpu_error")
        assert [e["attrs"]["error"] for e in errs] == [kind], ln
        bus = re.search(r"([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)", ln)
        if bus:
            assert errs[0]["attrs"]["pci_bus_id"] == bus.group(1).lower()
        idx = re.search(r"for GPU(\d+): ", ln)
        assert errs[0]["gpu"] == (int(idx.group(1)) if idx else None)
        checked += 1
    assert checked >= 6


def test_failure_line_then_csv_row_of_the_surviving_gpu():
    lines = _failure_lines()
    err = next(ln for ln in lines if "GPU is lost" in ln and "GPU0:" in ln)
    row = lines[lines.index(err) + 1]
    fields = "index,name,power.draw.average,power.limit,enforced.power.limit,power.draw,clocks.sm"
    r = nvidia_smi_csv.parse(err + "\n" + row, command=f"nvidia-smi --query-gpu={fields} --format=csv,noheader")
    g = rows(r, "gpu_memory")[0]
    assert g["gpu"] == int(row.split(",")[0])
    errs = {e["attrs"]["error"]: e for e in rows(r, "gpu_error")}
    assert errs["gpu_lost"]["gpu"] == 0
    assert errs["missing_from_table"]["gpu"] == 0


def test_not_supported_compute_apps_row_is_null_not_zero():
    lines = _failure_lines()
    apps = [ln for ln in lines if ln.startswith("GPU-")]
    r = nvidia_smi_csv.parse("\n".join(apps), command="nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory "
                                                      "--format=csv,noheader,nounits")
    procs = rows(r, "gpu_process")
    assert len(procs) == len(apps) == 2
    first = apps[0].split(", ")
    assert (procs[0]["pid"], procs[0]["used_bytes"]) == (int(first[1]), int(first[2]) * MIB)
    assert procs[1]["pid"] is None and procs[1]["used_bytes"] is None
    assert procs[1]["attrs"]["placeholders"] == {"pid": "[Not Supported]", "used_gpu_memory": "[Not Supported]",
                                                 "used_bytes": "[Not Supported]"}


def test_pure_failure_text_is_not_claimed_by_csv_q_or_xml_as_data():
    for ln in _failure_lines()[:1]:
        for mod in (nvidia_smi_q, nvidia_smi_xml):
            r = mod.parse(ln)
            assert rows(r, "gpu_error")[0]["attrs"]["error"] == "no_driver"
        with pytest.raises(NotThisFormat):
            nvidia_smi_csv.parse("(<class 'pynvml.NVMLError_GpuIsLost'>, NVMLError_GpuIsLost(1")

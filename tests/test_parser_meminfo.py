"""meminfo: every key kept in bytes (counts for HugePages_*), used = MemTotal − MemAvailable, swap row."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shared_data import SHARED, SKIP_REASON

from parsers import meminfo
from parsers.schema import NotThisFormat

KIB = 1024

OWN = """\
MemTotal:       527938036 kB
MemFree:        120418812 kB
MemAvailable:   160223616 kB
Buffers:           201344 kB
Cached:          41002112 kB
SwapCached:         10240 kB
Active(anon):   301234560 kB
Inactive(file):  20480000 kB
SwapTotal:        8388604 kB
SwapFree:         7340028 kB
SReclaimable:     1913868 kB
Committed_AS:   201604198 kB
HugePages_Total:      512
HugePages_Free:       128
Hugepagesize:        2048 kB
DirectMap1G:    520093696 kB
"""


def by_kind(r, kind):
    out = []
    for row in r.events.filter(r.events["kind"] == kind).iter_rows(named=True):
        row["a"] = json.loads(row["attrs"])
        out.append(row)
    return out


def test_own_block_every_key_and_used_definition():
    r = meminfo.parse(OWN)
    (mem,), (swap,) = by_kind(r, "host_memory"), by_kind(r, "host_swap")
    assert mem["total_bytes"] == 527938036 * KIB and mem["free_bytes"] == 120418812 * KIB
    assert mem["avail_bytes"] == 160223616 * KIB
    assert mem["used_bytes"] == (527938036 - 160223616) * KIB
    a = mem["a"]
    assert a["used_definition"] == "MemTotal - MemAvailable"
    assert a["active_anon_bytes"] == 301234560 * KIB and a["inactive_file_bytes"] == 20480000 * KIB
    assert a["s_reclaimable_bytes"] == 1913868 * KIB and a["committed_as_bytes"] == 201604198 * KIB
    assert (a["huge_pages_total"], a["huge_pages_free"]) == (512, 128)  # counts, no _bytes
    assert a["hugepagesize_bytes"] == 2048 * KIB and a["direct_map1g_bytes"] == 520093696 * KIB
    assert len([k for k in a if k not in {"table", "used_definition"}]) == 16
    assert (swap["total_bytes"], swap["free_bytes"], swap["used_bytes"]) == (
        8388604 * KIB, 7340028 * KIB, (8388604 - 7340028) * KIB)
    assert swap["a"]["swap_cached_bytes"] == 10240 * KIB and swap["a"]["swap_configured"] is True
    assert (mem["line"], mem["line_end"]) == (1, 16) and (swap["line"], swap["line_end"]) == (6, 10)
    assert r.coverage()["recognized"] == 16 and r.unrecognized == 0


def test_old_kernel_without_memavailable():
    text = "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 50 kB\nCached: 200 kB\nSReclaimable: 30 kB\n"
    mem = by_kind(meminfo.parse(text), "host_memory")[0]
    assert mem["avail_bytes"] is None and mem["used_bytes"] == (1000 - 100 - 50 - 200 - 30) * KIB
    assert "no MemAvailable" in mem["a"]["used_definition"]


def test_repeated_blocks_numa_nodes_and_grep_h_prefix():
    text = OWN + "\n" + OWN.replace("MemFree:        120418812", "MemFree:        100000000")
    mems = by_kind(meminfo.parse(text), "host_memory")
    assert [m["a"]["table"] for m in mems] == [0, 1] and mems[1]["free_bytes"] == 100000000 * KIB
    numa = "Node 0 MemTotal:  263969018 kB\nNode 0 MemFree:  60209406 kB\n" \
           "Node 1 MemTotal:  263969018 kB\nNode 1 MemFree:  60209406 kB\n"
    nodes = by_kind(meminfo.parse(numa), "host_memory")
    assert [m["a"]["numa_node"] for m in nodes] == [0, 1] and nodes[1]["total_bytes"] == 263969018 * KIB
    grep_h = "/proc/meminfo:MemTotal:       527938036 kB\n/proc/meminfo:MemAvailable:   160223616 kB\n"
    assert by_kind(meminfo.parse(grep_h), "host_memory")[0]["used_bytes"] == (527938036 - 160223616) * KIB


def test_real_meminfo_sample():
    path = SHARED / "research_samples" / "meminfo" / "01_proc_meminfo_kernel_6.18_vm.txt"
    if not path.exists():
        pytest.skip(f"{SKIP_REASON}: shared samples absent")
    text = path.read_text()
    n_lines = len(text.splitlines())
    r = meminfo.parse(text)
    assert r.coverage()["recognized"] == n_lines and r.unrecognized == 0
    (mem,), (swap,) = by_kind(r, "host_memory"), by_kind(r, "host_swap")
    assert mem["total_bytes"] == 24684092 * KIB and mem["avail_bytes"] == 24191612 * KIB
    assert mem["used_bytes"] == (24684092 - 24191612) * KIB
    # every line became an attribute
    assert len([k for k in mem["a"] if k not in {"table", "used_definition"}]) == n_lines
    assert mem["a"]["vmalloc_total_bytes"] == 34359738367 * KIB and mem["a"]["huge_pages_rsvd"] == 0
    assert swap["total_bytes"] == 0 and swap["a"]["swap_configured"] is False
    assert meminfo.sniff(text) >= 0.9


def test_real_grep_swap_fragment_matches_free():
    path = SHARED / "research_samples" / "free" / "03_procps_ng_4.0.2_swap_in_use.txt"
    if not path.exists():
        pytest.skip(f"{SKIP_REASON}: shared samples absent")
    lines = path.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("$ grep"))
    frag = "\n".join(lines[start + 1:]) + "\n"
    r = meminfo.parse(frag, command="grep -E '^Swap' /proc/meminfo")
    assert by_kind(r, "host_memory") == []
    swap = by_kind(r, "host_swap")[0]
    # `free` (KiB) in the same file printed Swap: 524284 148112 376172
    assert (swap["total_bytes"], swap["used_bytes"], swap["free_bytes"]) == (
        524284 * KIB, 148112 * KIB, 376172 * KIB)
    assert meminfo.sniff(frag) >= 0.5


def test_sniff_and_not_this_format():
    free_text = "              total        used        free\nMem:   24684092  492480  21805672  8856  2701032  24191612\n"
    assert meminfo.sniff(free_text) == 0.0
    assert meminfo.sniff("0, 96413 MiB\n") == 0.0
    assert meminfo.sniff("Attached GPUs : 8\nFB Memory Usage\n") == 0.0
    with pytest.raises(NotThisFormat):
        meminfo.parse(free_text)
    with pytest.raises(NotThisFormat):
        meminfo.parse("Retries: 3\nTimeout: 10\n")  # Key: value, but no meminfo key
    assert meminfo.parse("").events.is_empty()


def test_crlf_nul_huge():
    r = meminfo.parse(OWN.replace("\n", "\r\n") + "\x00\n" + "y" * 1_000_000 + "\nMemTotal: 99999999999999999999 kB\n")
    assert by_kind(r, "host_memory")[0]["total_bytes"] == 527938036 * KIB
    assert r.unrecognized == 3 and r.lines == 19


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("MemTotalSwapFree():_ 0123456789kB\n\r\t") + ["\x00", "é"]), max_size=300))
def test_fuzz_only_not_this_format(text):
    try:
        r = meminfo.parse(text)
    except NotThisFormat:
        return
    assert r.recognized + r.unrecognized == r.lines
    meminfo.sniff(text)

"""free: every layout, unit and locale; byte bounds; the real samples agree with themselves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shared_data import SHARED, SKIP_REASON

from parsers import free
from parsers.schema import NotThisFormat

ROOT = Path(__file__).resolve().parents[1]
HOST = ROOT / "fixtures" / "host"
TRANSCRIPTS = ROOT / "fixtures" / "transcripts"
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30

# The host all fixtures/host/free_* describe, in KiB as /proc/meminfo has it.
TOTAL_K, USED_K, FREE_K, SHARED_K, BC_K, AVAIL_K = 527938036, 364401900, 120418812, 1187420, 43117324, 160223616
SWAP_K, SWAP_USED_K, SWAP_FREE_K = 8388604, 1048576, 7340028


def rows(result, kind):
    out = []
    for r in result.events.filter(result.events["kind"] == kind).iter_rows(named=True):
        r["a"] = json.loads(r["attrs"])
        out.append(r)
    return out


def contains(row_attrs, name, truth):
    """truth lies in [name_bytes, name_bytes_max) (or equals it when exact)."""
    lo = row_attrs[f"{name}_bytes"]
    hi = row_attrs.get(f"{name}_bytes_max", lo + 1)
    return lo <= truth < hi


def shared_blocks(name):
    """The `$ command` + output blocks of a research sample, comment lines stripped."""
    path = SHARED / "research_samples" / "free" / name
    if not path.exists():
        pytest.skip(f"{SKIP_REASON}: shared samples absent")
    blocks, cmd, buf = [], None, []
    for line in path.read_text().splitlines():
        if line.startswith("# "):
            continue
        if line.startswith("$ ") or line.startswith("## "):
            if buf and any(b.strip() for b in buf):
                blocks.append((cmd, "\n".join(buf)))
            cmd, buf = (line[2:].strip() if line.startswith("$ ") else None), []
            continue
        buf.append(line)
    if buf and any(b.strip() for b in buf):
        blocks.append((cmd, "\n".join(buf)))
    return blocks


# --- own fixtures: every layout ----------------------------------------------------------------

def test_kib_wide_total_exact_figures_and_total_row():
    r = free.parse((HOST / "free_kib_wide_total.txt").read_text(), command="LC_ALL=C free -w -t")
    (mem,), (swap,) = rows(r, "host_memory"), rows(r, "host_swap")
    assert (mem["total_bytes"], mem["used_bytes"], mem["free_bytes"], mem["avail_bytes"]) == (
        TOTAL_K * KIB, USED_K * KIB, FREE_K * KIB, AVAIL_K * KIB)
    a = mem["a"]
    assert a["layout"] == "wide" and a["buffers_bytes"] == 201344 * KIB and a["cache_bytes"] == 42915980 * KIB
    assert a["buff_cache_bytes"] == BC_K * KIB
    assert a["mem_plus_swap_total_bytes"] == (TOTAL_K + SWAP_K) * KIB
    assert (swap["total_bytes"], swap["used_bytes"], swap["free_bytes"]) == (
        SWAP_K * KIB, SWAP_USED_K * KIB, SWAP_FREE_K * KIB)
    assert swap["a"]["swap_configured"] is True
    assert r.coverage() == {"file": "", "format": "free", "lines": 4, "recognized": 4, "unrecognized": 0}
    assert mem["line"] == 2 and mem["line_end"] == 4 and swap["line"] == 3


def test_bytes_low_high_comm_rows_by_position():
    r = free.parse((HOST / "free_bytes_lohi_comm.txt").read_text(), command="free -b -l -v")
    (mem,), (swap,) = rows(r, "host_memory"), rows(r, "host_swap")
    a = mem["a"]
    assert mem["total_bytes"] == TOTAL_K * KIB and a["bounds"] == "exact" and "total_bytes_max" not in a
    assert a["low_used_bytes"] == (TOTAL_K - FREE_K) * KIB and a["high_total_bytes"] == 0
    assert a["commit_limit_bytes"] == 278894204928 and a["commit_committed_as_bytes"] == 201604198400
    assert swap["line"] == 5 and swap["total_bytes"] == SWAP_K * KIB


def test_human_german_decimal_comma_rounded_and_truncated_bounds():
    r = free.parse((HOST / "free_human_de.txt").read_text(), command="LC_ALL=de_DE.UTF-8 free -h")
    (mem,), (swap,) = rows(r, "host_memory"), rows(r, "host_swap")
    a = mem["a"]
    assert mem["total_bytes"] == 503 * GIB and a["total_bytes_max"] == 504 * GIB  # integer: truncated
    assert a["shared_bytes"] == int(1.05 * GIB) and a["shared_bytes_max"] == int(1.15 * GIB) + 1  # "1,1Gi" rounded
    for name, truth in [("total", TOTAL_K), ("used", USED_K), ("free", FREE_K), ("shared", SHARED_K),
                        ("buff_cache", BC_K), ("avail", AVAIL_K)]:
        assert contains(a, name, truth * KIB), name
    for name, truth in [("total", SWAP_K), ("used", SWAP_USED_K), ("free", SWAP_FREE_K)]:
        assert contains(swap["a"], name, truth * KIB), name
    assert a["label"] == "Speicher"


def test_human_si_chinese_fullwidth_colon():
    r = free.parse((HOST / "free_human_si_zh.txt").read_text(), command="LC_ALL=zh_CN.UTF-8 free -h --si")
    (mem,), (swap,) = rows(r, "host_memory"), rows(r, "host_swap")
    assert mem["total_bytes"] == 540 * 10**9 and mem["a"]["total_bytes_max"] == 541 * 10**9
    for name, truth in [("total", TOTAL_K), ("used", USED_K), ("shared", SHARED_K), ("avail", AVAIL_K)]:
        assert contains(mem["a"], name, truth * KIB), name
    assert contains(swap["a"], "total", SWAP_K * KIB) and swap["a"]["label"] == "交换"


def test_human_single_letter_without_command_keeps_both_readings():
    text = (HOST / "free_human_si_zh.txt").read_text()
    mem = rows(free.parse(text), "host_memory")[0]
    assert mem["a"]["bounds"] == "ambiguous"
    assert mem["total_bytes"] == 540 * 10**9 and mem["a"]["total_bytes_max"] == 541 * GIB


def test_korean_label_with_space_and_total_row():
    r = free.parse((HOST / "free_kib_ko_total.txt").read_text(), command="free -t")
    (mem,), (swap,) = rows(r, "host_memory"), rows(r, "host_swap")
    assert swap["a"]["label"] == "스 왑" and swap["total_bytes"] == SWAP_K * KIB
    assert mem["a"]["mem_plus_swap_used_bytes"] == (USED_K + SWAP_USED_K) * KIB


def test_unknown_labels_resolved_by_the_total_identity():
    text = (HOST / "free_kib_wide_total.txt").read_text().replace("Swap:", "Xyz:").replace("Total:", "Abc:")
    r = free.parse(text, command="free -w -t")
    assert rows(r, "host_swap")[0]["total_bytes"] == SWAP_K * KIB
    assert rows(r, "host_memory")[0]["a"]["mem_plus_swap_free_bytes"] == (FREE_K + SWAP_FREE_K) * KIB


def test_legacy_minus_plus_row_gives_real_used_and_available():
    r = free.parse((HOST / "free_legacy_mib.txt").read_text(), command="free -m")
    mem = rows(r, "host_memory")[0]
    assert mem["a"]["layout"] == "legacy"
    assert mem["used_bytes"] == 352897 * MIB and mem["avail_bytes"] == 162667 * MIB
    assert mem["a"]["used_incl_buff_cache_bytes"] == 395003 * MIB
    assert mem["a"]["buffers_bytes"] == 196 * MIB and mem["a"]["cache_bytes"] == 41910 * MIB
    assert mem["a"]["used_bytes_max"] == 352898 * MIB
    assert rows(r, "host_swap")[0]["total_bytes"] == 8191 * MIB


def test_toybox_five_columns():
    r = free.parse((HOST / "free_toybox_kib.txt").read_text())
    mem = rows(r, "host_memory")[0]
    assert mem["a"]["layout"] == "toybox" and mem["a"]["unit"] == "KiB" and mem["a"]["unit_inferred"] is True
    assert mem["used_bytes"] == 407317880 * KIB and mem["avail_bytes"] == 120620156 * KIB
    assert "no command given" in r.notes[0]


def test_line_form():
    r = free.parse((HOST / "free_line_form.txt").read_text(), command="free -L")
    mem, swap = rows(r, "host_memory")[0], rows(r, "host_swap")[0]
    assert (mem["used_bytes"], mem["free_bytes"]) == (USED_K * KIB, FREE_K * KIB)
    assert mem["a"]["buff_cache_bytes"] == BC_K * KIB and swap["used_bytes"] == SWAP_USED_K * KIB


def test_collapsed_and_flattened_tables_infer_their_units():
    r = free.parse((HOST / "free_collapsed_and_flat.txt").read_text())
    mems = rows(r, "host_memory")
    assert [m["a"]["table"] for m in mems] == [0, 1]
    assert mems[0]["total_bytes"] == TOTAL_K * KIB and mems[0]["a"]["unit"] == "KiB"
    assert mems[1]["total_bytes"] == 503 * GIB and mems[1]["a"]["unit"] == "GiB"
    assert contains(mems[1]["a"], "avail", AVAIL_K * KIB)
    swaps = rows(r, "host_swap")
    assert swaps[1]["total_bytes"] == 7 * GIB and contains(swaps[1]["a"], "total", SWAP_K * KIB)
    assert r.unrecognized == 0


def test_every_own_fixture_brackets_the_same_host_total():
    for path in sorted(HOST.glob("free_*.txt")):
        if path.name == "free_line_form.txt":
            continue
        for mem in rows(free.parse(path.read_text()), "host_memory"):
            lo, hi = mem["total_bytes"], mem["a"].get("total_bytes_max", mem["total_bytes"] + 1)
            assert lo <= TOTAL_K * KIB < hi or path.name == "free_legacy_mib.txt", path.name


# --- seeds (our transcripts) -------------------------------------------------------------------

@pytest.mark.parametrize("name, used, free_, shared, bc, avail, swap", [
    ("seed_phase3_after_pkill.txt", 318, 130, 0, 0, 130, None),
    ("seed_clean_after_hypervisor_kill.txt", 3, 444, 0, 0, 445, (0, 0, 0)),
    ("seed_clean_before_relaunch.txt", 4, 394, 0, 50, 444, (0, 0, 0)),
])
def test_seed_snapshots_free_g(name, used, free_, shared, bc, avail, swap):
    from parsers import transcript

    segs = [s for s in transcript.split((TRANSCRIPTS / name).read_text()) if s.format == "free"]
    assert len(segs) == 1 and segs[0].command == "free -g"
    r = free.parse(segs[0].text, command=segs[0].command)
    mem = rows(r, "host_memory")[0]
    assert (mem["total_bytes"], mem["used_bytes"], mem["free_bytes"], mem["avail_bytes"]) == (
        449 * GIB, used * GIB, free_ * GIB, avail * GIB)
    assert mem["a"]["used_bytes_max"] == (used + 1) * GIB and mem["a"]["unit"] == "GiB"
    assert (mem["a"]["shared_bytes"], mem["a"]["buff_cache_bytes"]) == (shared * GIB, bc * GIB)
    swaps = rows(r, "host_swap")
    if swap is None:
        assert swaps == [] and any("no Swap row" in n for n in r.notes)
    else:
        assert swaps[0]["total_bytes"] == 0 and swaps[0]["a"]["total_bytes_max"] == GIB
        assert swaps[0]["a"]["swap_configured"] == "unknown"


def test_seed_numbers_without_command_are_read_as_gib():
    text = "               total        used        free      shared  buff/cache   available\n" \
           "Mem:             449         318         130           0           0         130\n"
    mem = rows(free.parse(text), "host_memory")[0]
    assert mem["used_bytes"] == 318 * GIB and mem["a"]["unit_inferred"] is True


# --- units from the command --------------------------------------------------------------------

@pytest.mark.parametrize("command, factor, human", [
    ("free", KIB, False), ("free -b", 1, False), ("free --bytes", 1, False), ("free -k", KIB, False),
    ("free -m", MIB, False), ("free -g", GIB, False), ("free --tebi", 1 << 40, False),
    ("free --si", 1000, False), ("free --kilo", 1000, False), ("free -m --si", 10**6, False),
    ("free --si -g", 10**9, False), ("free --giga", 10**9, False), ("free --tera", 10**12, False),
    ("free --mebi", MIB, False), ("free -hw", KIB, True), ("sudo free -s 2 -c 3 -m", MIB, False),
    ("watch free -g", GIB, False), ("LC_ALL=C free -b -w", 1, False),
])
def test_unit_from_command(command, factor, human):
    (spec,) = free.unit_from_command(command)
    assert (spec.factor, spec.human) == (factor, human)


def test_two_invocations_two_tables_two_units():
    table = "              total        used        free      shared  buff/cache   available\n" \
            "Mem:   {}  {}  {}  0  {}  {}\nSwap: 0 0 0\n"
    text = table.format(TOTAL_K, USED_K, FREE_K, BC_K, AVAIL_K) + table.format(503, 347, 114, 41, 152)
    mems = rows(free.parse(text, command="free; free -g"), "host_memory")
    assert [m["a"]["table"] for m in mems] == [0, 1]
    assert mems[0]["total_bytes"] == TOTAL_K * KIB and mems[1]["total_bytes"] == 503 * GIB


# --- real samples ------------------------------------------------------------------------------

def test_real_all_flags_every_block_parses_and_units_agree():
    blocks = shared_blocks("01_procps_ng_4.0.2_all_flags.txt")
    assert len(blocks) == 20
    parsed = {}
    for cmd, text in blocks:
        r = free.parse(text, command=cmd)
        assert r.unrecognized == 0, cmd
        parsed[cmd] = rows(r, "host_memory")[0]
    truth = parsed["free -b"]
    for cmd, mem in parsed.items():
        if cmd in {"free -L"}:
            continue
        # total and shared do not move between the commands: every table must bracket -b's bytes
        assert contains(mem["a"], "total", truth["total_bytes"]), cmd
        assert contains(mem["a"], "shared", truth["a"]["shared_bytes"]), cmd
        # used/free/available drift by a few MiB between commands
        for name in ("used", "free", "avail"):
            lo, hi = mem["a"][f"{name}_bytes"], mem["a"].get(f"{name}_bytes_max", mem["a"][f"{name}_bytes"] + 1)
            assert lo - 4 * MIB <= truth["a"][f"{name}_bytes"] < hi + 4 * MIB, (cmd, name)
    assert parsed["free -g"]["used_bytes"] == 0 and parsed["free -g"]["a"]["used_bytes_max"] == GIB
    assert parsed["free --tera"]["total_bytes"] == 0
    assert parsed["free -l"]["a"]["low_used_bytes"] == 2879464 * KIB
    assert parsed["free -v"]["a"]["commit_limit_bytes"] == 12342044 * KIB
    assert parsed["free -t"]["a"]["mem_plus_swap_total_bytes"] == 24684092 * KIB


def test_real_localized_rows_by_position():
    blocks = shared_blocks("02_procps_ng_4.0.2_localized.txt")
    assert len(blocks) == 24
    for cmd, text in blocks:
        r = free.parse(text, command=cmd)
        assert r.unrecognized == 0, cmd
        mem, swap = rows(r, "host_memory")[0], rows(r, "host_swap")[0]
        assert contains(mem["a"], "total", 24684092 * KIB), cmd
        assert swap["a"]["swap_configured"] is False, cmd
        if "-t" in cmd:
            assert mem["a"]["mem_plus_swap_total_bytes"] == 24684092 * KIB, cmd
        if "-h" in cmd:
            assert mem["a"]["shared_bytes"] == int(8.55 * MIB), cmd  # "8,6Mi" / "8.6Mi"


def test_real_swap_in_use_and_truncated_zero_swap():
    blocks = dict(shared_blocks("03_procps_ng_4.0.2_swap_in_use.txt"))
    kib = rows(free.parse(blocks["free"], command="free"), "host_swap")[0]
    assert (kib["total_bytes"], kib["used_bytes"]) == (524284 * KIB, 148112 * KIB)
    human = rows(free.parse(blocks["free -h"], command="free -h"), "host_swap")[0]
    assert contains(human["a"], "total", 524284 * KIB) and human["total_bytes"] == 511 * MIB
    g = rows(free.parse(blocks["free -g"], command="free -g"), "host_swap")[0]
    assert g["total_bytes"] == 0 and g["a"]["swap_configured"] == "unknown"
    wide = rows(free.parse(blocks["free -m -w -t"], command="free -m -w -t"), "host_memory")[0]
    assert wide["a"]["mem_plus_swap_total_bytes"] == 24617 * MIB and wide["a"]["layout"] == "wide"


def test_real_legacy_blocks():
    blocks = shared_blocks("04_legacy_procps_3.2_3.3.9_buffers_cache_line.txt")
    assert len(blocks) == 6
    mems = [rows(free.parse(text), "host_memory")[0] for _, text in blocks]
    assert [m["a"]["layout"] for m in mems] == ["legacy"] * 5 + ["toybox"]
    assert [m["a"]["unit"] for m in mems] == ["KiB", "MiB", "MiB", "MiB", "MiB", "KiB"]
    assert mems[0]["used_bytes"] == 206228 * KIB and mems[0]["avail_bytes"] == 309564 * KIB
    assert mems[4]["total_bytes"] == 2006 * MIB and mems[4]["used_bytes"] == 115 * MIB  # collapsed spaces
    assert mems[3]["total_bytes"] == 15298 * MIB  # indented by 4 spaces
    assert mems[5]["total_bytes"] == 2819652 * KIB


# --- sniffing and robustness -------------------------------------------------------------------

def test_sniff_fires_on_free_and_not_on_neighbours():
    assert free.sniff((HOST / "free_human_de.txt").read_text()) >= 0.7
    assert free.sniff((HOST / "free_legacy_mib.txt").read_text()) >= 0.9
    assert free.sniff((HOST / "free_collapsed_and_flat.txt").read_text().split("\n\n")[1]) >= 0.9
    for other in ["MemTotal:       24684092 kB\nSwapTotal: 0 kB\n", "0, 96413 MiB\n1, 99 MiB\n",
                  "The output contains two sections. First, the system memory report:\n",
                  "[  130.789699] lowmem_reserve[]: 0 2412 11403 11403 11403\n",
                  "MiB Mem :  15898.4 total,  10085.7 free,   2345.6 used,   3456.7 buff/cache\n"]:
        assert free.sniff(other) < 0.5, other


def test_real_kernel_log_is_not_free():
    path = SHARED / "research_samples" / "oom" / "06_global_oom_kernel_5.10_openeuler_full_task_table.txt"
    if not path.exists():
        pytest.skip(f"{SKIP_REASON}: shared samples absent")
    assert free.sniff(path.read_text()) < 0.5


def test_not_this_format_and_nothing_here():
    with pytest.raises(NotThisFormat):
        free.parse("MemTotal:       24684092 kB\n")
    with pytest.raises(NotThisFormat):
        free.parse("bash: free: command not found\n")
    r = free.parse("\n\n")
    assert r.events.is_empty() and r.lines == 2 and r.recognized == 2


def test_crlf_nul_and_huge_lines():
    text = (HOST / "free_kib_wide_total.txt").read_text().replace("\n", "\r\n")
    assert rows(free.parse(text, command="free -w"), "host_memory")[0]["total_bytes"] == TOTAL_K * KIB
    r = free.parse(text + "x" * 1_000_000 + "\n\x00\n", command="free -w")
    assert r.unrecognized == 2 and r.lines == 6
    big = "              total used free shared buff/cache available\nMem: " + " ".join(["9" * 40] * 6) + "\n"
    assert free.parse(big).events.is_empty()


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("Mem:Swap0123456789 .,GiMB-/+\n\t\r：스왑total") + ["\x00"]),
               max_size=400))
def test_fuzz_only_not_this_format(text):
    try:
        r = free.parse(text)
    except NotThisFormat:
        return
    assert r.recognized + r.unrecognized == r.lines
    free.sniff(text)


def _unflatten_reference(line):
    """parsers.free._unflatten before it stopped at a label's first bad character: the same answer."""
    from parsers.free import _BAD_LABEL_RE, _MAX_LINE, _NUM_RE

    if len(line) > _MAX_LINE:
        return None
    tokens = [t.strip("`") for t in line.split()]
    header, label, groups = [], [], []
    for tok in filter(None, tokens):
        if _NUM_RE.match(tok):
            if label:
                if label[-1][-1] not in ":：":
                    return None
                groups.append((" ".join(label)[:-1], [tok]))
                label = []
            elif groups:
                groups[-1][1].append(tok)
            else:
                return None
        elif groups or label or tok[-1] in ":：":
            label.append(tok)
        else:
            header.append(tok)
    if label or len(groups) < 2 or not 5 <= len(groups[0][1]) <= 7:
        return None
    if any(not 2 <= len(vals) <= 3 for _, vals in groups[1:]):
        return None
    if any(_BAD_LABEL_RE.search(lab) or len(lab) > 40 for lab, _ in groups):
        return None
    return [(" ".join(header), [])] + groups


_FLAT_TOKENS = ["total", "used", "free", "shared", "buff/cache", "available", "Mem:", "Swap:", "Mem：", "Low:",
                "-/+", "buffers/cache:", "12", "0", "1.5G", "3Gi", "824", "#token:", "#running-req:", "a:b:",
                "x:", "`Mem:`", "`12`", "[2025-11-20", "12:58:50", "DP0", "62,", "usage:", "(token/s):", "é:", "٣:"]


_FLAT_TABLE = ["total", "used", "free", "shared", "buff/cache", "available", "Mem:", "16", "4", "8", "0", "2", "11", "Swap:", "2", "0", "2"]


@given(st.lists(st.sampled_from(_FLAT_TOKENS), max_size=16).map(" ".join)
       | st.tuples(st.integers(0, len(_FLAT_TABLE)), st.sampled_from(_FLAT_TOKENS), st.booleans()).map(
           lambda c: " ".join(_FLAT_TABLE[:c[0]] + [c[1]] + _FLAT_TABLE[c[0] + c[2]:])))
@settings(max_examples=500, deadline=None)
def test_unflatten_stops_early_with_the_same_answer(line):
    from parsers.free import _unflatten

    assert _unflatten(line) == _unflatten_reference(line)


def test_unflatten_reads_a_flattened_table():
    assert free._unflatten(" ".join(_FLAT_TABLE)) == _unflatten_reference(" ".join(_FLAT_TABLE)) is not None

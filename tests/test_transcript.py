"""The transcript splitter: prompts, ``---`` chunks mapped to sub-commands, fences, prose, order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shared_data import SHARED, SKIP_REASON

from parsers import free, meminfo, transcript
from parsers.transcript import Segment, split

ROOT = Path(__file__).resolve().parents[1]
TRANSCRIPTS = ROOT / "fixtures" / "transcripts"
GIB = 1 << 30
SMI = "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader"


def csv_sniff(head: str) -> float:
    """A stand-in for the nvidia-smi CSV sniffer: every line is ``<index>, <n> MiB``."""
    lines = [ln for ln in head.splitlines() if ln.strip()]
    return 0.9 if lines and all(ln.split(", ")[-1].endswith(" MiB") and ln[0].isdigit() for ln in lines) else 0.0


SNIFFERS = {"free": free.sniff, "meminfo": meminfo.sniff, "nvidia_smi_csv": csv_sniff}
FREE_HDR = "               total        used        free      shared  buff/cache   available"


def outputs(segs: list[Segment]) -> list[tuple[str | None, str | None]]:
    return [(s.command, s.format) for s in segs if s.kind == "output"]


def gpu_used_mib(seg: Segment) -> dict[int, int]:
    return {int(ln.split(",")[0]): int(ln.split(",")[1].split()[0]) for ln in seg.text.splitlines() if ln.strip()}


def mem_row(seg: Segment) -> tuple[int, ...]:
    r = free.parse(seg.text, command=seg.command)
    row = r.events.filter(r.events["kind"] == "host_memory").row(0, named=True)
    a = json.loads(row["attrs"])
    return (row["total_bytes"], row["used_bytes"], row["free_bytes"], a["shared_bytes"], a["buff_cache_bytes"],
            row["avail_bytes"])


# --- the three seed snapshots, rebuilt in our own words ------------------------------------------

def test_seed_after_pkill_free_then_gpus():
    text = (TRANSCRIPTS / "seed_phase3_after_pkill.txt").read_text()
    segs = split(text, SNIFFERS)
    assert [s.kind for s in segs] == ["prose", "command", "output", "output", "prose"]
    assert segs[1].command.startswith("ssh root@10.1.230.174 'free -g;")
    assert outputs(segs) == [("free -g", "free"), (SMI, "nvidia_smi_csv")]
    free_seg, gpu_seg = segs[2], segs[3]
    assert (free_seg.start_line, free_seg.end_line, gpu_seg.start_line, gpu_seg.end_line) == (5, 6, 8, 15)
    assert mem_row(free_seg) == (449 * GIB, 318 * GIB, 130 * GIB, 0, 0, 130 * GIB)
    assert gpu_used_mib(gpu_seg) == {0: 96413, 1: 99, 2: 96417, 3: 51, 4: 3, 5: 3, 6: 3, 7: 7}
    assert text.split("\n")[free_seg.start_line - 1] == free_seg.text.split("\n")[0]


def test_seed_clean_after_hypervisor_kill_in_a_fence():
    segs = split((TRANSCRIPTS / "seed_clean_after_hypervisor_kill.txt").read_text(), SNIFFERS)
    assert [s.kind for s in segs] == ["prose", "prose", "command", "output", "prose"]
    assert outputs(segs) == [("free -g", "free")]
    assert mem_row(segs[3]) == (449 * GIB, 3 * GIB, 444 * GIB, 0, 0, 445 * GIB)
    r = free.parse(segs[3].text, command=segs[3].command)
    swap = r.events.filter(r.events["kind"] == "host_swap").row(0, named=True)
    assert (swap["total_bytes"], swap["used_bytes"], swap["free_bytes"]) == (0, 0, 0)


def test_seed_clean_before_relaunch_gpus_then_free():
    segs = split((TRANSCRIPTS / "seed_clean_before_relaunch.txt").read_text(), SNIFFERS)
    assert outputs(segs) == [(SMI, "nvidia_smi_csv"), ("free -g", "free")]
    gpu_seg, free_seg = [s for s in segs if s.kind == "output"]
    assert gpu_used_mib(gpu_seg) == dict.fromkeys(range(8), 0)
    assert mem_row(free_seg) == (449 * GIB, 4 * GIB, 394 * GIB, 0, 50 * GIB, 444 * GIB)
    assert gpu_seg.end_line < free_seg.start_line


def test_seed_documents_from_shared():
    seeds = sorted((SHARED / "seeds").glob("*.txt")) if (SHARED / "seeds").exists() else []
    if len(seeds) < 3:
        pytest.skip(f"{SKIP_REASON}: shared seeds absent")
    found = {}
    for path in seeds:
        segs = split(path.read_text(), SNIFFERS)
        free_segs = [s for s in segs if s.format == "free"]
        assert len(free_segs) == 1, path.name
        found[path.name[:3]] = (free_segs[0].command, mem_row(free_segs[0]), outputs(segs))
        assert all(s.format is None for s in segs if s.kind == "prose")
    assert found["000"][1][:3] == (449 * GIB, 318 * GIB, 130 * GIB)
    assert found["000"][2] == [("free -g", "free"), (SMI, "nvidia_smi_csv")]
    assert found["001"][1] == (449 * GIB, 3 * GIB, 444 * GIB, 0, 0, 445 * GIB)  # flattened on one line
    assert found["003"][1] == (449 * GIB, 4 * GIB, 394 * GIB, 0, 50 * GIB, 444 * GIB)
    assert found["003"][2] == [(SMI, "nvidia_smi_csv"), ("free -g", "free")]


# --- prompts and commands ------------------------------------------------------------------------

@pytest.mark.parametrize("line, command", [
    ("$ free -g", "free -g"),
    ("# free -m", "free -m"),
    ("root@gpu-node-17:~# free -b -w", "free -b -w"),
    ("(venv) ops@h:~/x$ cat /proc/meminfo", "cat /proc/meminfo"),
    ("[ops@gpu-node-17 ~]$ free", "free"),
    ("[bash] ssh root@10.0.0.5 'free -g'", "ssh root@10.0.0.5 'free -g'"),
    (">>> torch.cuda.mem_get_info()", "torch.cuda.mem_get_info()"),
])
def test_prompt_forms(line, command):
    assert transcript.prompt_command(line)[0] == command


@pytest.mark.parametrize("line", ["# procps-ng 4.0.2 (Debian 12)", "## id 42 (free -m)", "$ 5 per hour",
                                  "# sglang version: not stated; 2024", "Mem:  449  318  130  0  0  130"])
def test_not_prompts(line):
    assert transcript.prompt_command(line) is None


def test_subcommands_skip_echo_and_sleep_and_look_inside_wrappers():
    subs, echoes = transcript.subcommands(
        "pct exec 129 -- bash -c 'pkill -9 -f sglang; sleep 3; free -g && echo \"=== gpu ===\" && nvidia-smi'")
    assert subs == ["pkill -9 -f sglang", "free -g", "nvidia-smi"] and echoes == {"=== gpu ==="}
    assert transcript.subcommands("docker exec -it sgl free -m")[0] == ["free -m"]
    assert transcript.subcommands("echo 'unbalanced")[0] == []


def test_echoed_marker_separates_like_dashes_and_blank_paragraphs_map_to_subcommands():
    t1 = ("$ free -g; echo '== meminfo =='; grep ^Swap /proc/meminfo\n"
          f"{FREE_HDR}\nMem:  449  4  394  0  50  444\nSwap:  0  0  0\n== meminfo ==\n"
          "SwapTotal:  0 kB\nSwapFree:  0 kB\n")
    assert outputs(split(t1, SNIFFERS)) == [("free -g", "free"), ("grep '^Swap' /proc/meminfo", "meminfo")]
    # no separator at all: one blank-line paragraph per sub-command
    t2 = (f"$ free; free -g\n{FREE_HDR}\nMem:  470282240  4194304  413138944  0  52428800  465567744\n"
          f"Swap:  0  0  0\n\n{FREE_HDR}\nMem:  449  4  394  0  50  444\nSwap:  0  0  0\n")
    segs = split(t2, SNIFFERS)
    assert outputs(segs) == [("free", "free"), ("free -g", "free")]
    assert [mem_row(s)[0] for s in segs if s.kind == "output"] == [470282240 * 1024, 449 * GIB]


def test_unmatched_chunk_count_falls_back_to_the_command_family():
    text = ("$ pkill -9 -f sglang; sleep 3; fuser -k /dev/nvidia*; free -g\n"
            f"{FREE_HDR}\nMem:  449  4  394  0  50  444\nSwap:  0  0  0\n")
    assert outputs(split(text, SNIFFERS)) == [("free -g", "free")]


def test_command_without_output_and_continuation_lines():
    text = "$ pkill -9 -f sglang\n$ free \\\n>   -g\n" + f"{FREE_HDR}\nMem:  449  4  394  0  50  444\n"
    segs = split(text, SNIFFERS)
    assert [(s.kind, s.start_line, s.end_line, s.command) for s in segs] == [
        ("command", 1, 1, "pkill -9 -f sglang"), ("command", 2, 3, "free -g"), ("output", 4, 5, "free -g")]
    rows = transcript.command_rows(segs)
    assert [(r["line"], r["attrs"]["command"]) for r in rows] == [(1, "pkill -9 -f sglang"), (2, "free -g")]


def test_terminal_output_right_under_a_prompt_is_never_prose():
    text = "$ nvidia-smi\nNVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n\n" \
           "That means the driver is gone.\n"
    segs = split(text, SNIFFERS)
    assert [(s.kind, s.command) for s in segs] == [("command", "nvidia-smi"), ("output", "nvidia-smi"),
                                                  ("prose", None)]


def test_prose_is_never_sniffed():
    calls = []

    def spy(head):
        calls.append(head)
        return 0.0

    split("This sentence is prose and nothing else at all.\n\nNeither is this one, really.\n", {"x": spy})
    assert calls == []


def test_fence_without_prompt_and_markdown_rule():
    text = "Here is what the host said:\n```\n" + FREE_HDR + "\nMem:  449  318  130  0  0  130\n```\n---\n" \
           "```text\nMemTotal:  470282240 kB\nMemAvailable:  465567744 kB\n```\n"
    segs = split(text, SNIFFERS)
    assert [(s.kind, s.format, s.start_line) for s in segs] == [
        ("prose", None, 1), ("output", "free", 3), ("output", "meminfo", 8)]


def test_default_sniffers_and_looks_like_transcript():
    text = (TRANSCRIPTS / "seed_clean_before_relaunch.txt").read_text()
    assert [f for _, f in outputs(split(text))][-1] == "free"  # registry (or free+meminfo) sniffers
    assert transcript.looks_like_transcript(text) == 0.99
    seeds = sorted((SHARED / "seeds").glob("*.txt")) if (SHARED / "seeds").exists() else []
    for path in seeds:  # write-ups beat the free sniffer's 0.95 so that the prose is split off
        assert transcript.looks_like_transcript(path.read_text()) > free.sniff(path.read_text())
    assert transcript.looks_like_transcript(FREE_HDR + "\nMem:  449  318  130  0  0  130\n") == 0.0
    assert transcript.looks_like_transcript("MemTotal:  470282240 kB\n") == 0.0


def test_real_free_samples_split_into_one_segment_per_command():
    path = SHARED / "research_samples" / "free" / "01_procps_ng_4.0.2_all_flags.txt"
    if not path.exists():
        pytest.skip(f"{SKIP_REASON}: shared samples absent")
    segs = split(path.read_text(), SNIFFERS)
    outs = [s for s in segs if s.kind == "output"]
    cmds = [s for s in segs if s.kind == "command"]
    assert len(outs) == len(cmds) == 20
    assert all(o.format == "free" and o.command == c.command for o, c in zip(outs, cmds, strict=True))
    by_cmd = {o.command: mem_row(o) for o in outs}
    assert by_cmd["free -b"][0] == 25276510208 and by_cmd["free -g"][0] == 23 * GIB
    legacy = SHARED / "research_samples" / "free" / "04_legacy_procps_3.2_3.3.9_buffers_cache_line.txt"
    segs = split(legacy.read_text(), SNIFFERS)
    assert [s.format for s in segs if s.kind == "output"] == ["free"] * 6
    assert all(s.text.startswith(("#", "##")) for s in segs if s.kind == "prose")


# --- robustness --------------------------------------------------------------------------------

def check_invariants(text: str, segs: list[Segment]) -> None:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    prev_end = 0
    for s in segs:
        assert prev_end < s.start_line <= s.end_line <= len(lines)
        assert s.kind in {"output", "prose", "command"}
        assert s.kind != "prose" or s.format is None
        prev_end = s.end_line


def test_crlf_nul_and_megabyte_lines():
    text = (TRANSCRIPTS / "seed_phase3_after_pkill.txt").read_text().replace("\n", "\r\n")
    segs = split(text + "\x00\x01\r\n" + "z" * 1_000_000 + "\r\n", SNIFFERS)
    check_invariants(text + "\x00\x01\n" + "z" * 1_000_000 + "\n", segs)
    assert outputs(segs)[:2] == [("free -g", "free"), (SMI, "nvidia_smi_csv")]
    assert "\r" not in segs[2].text


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(
    list("$#>[]`'\";-| \n\r\tabcfgmrsx0123456789:") + ["free -g", "bash] ", "```", "---", "echo ", "Mem:"]),
    max_size=150).map("".join))
def test_fuzz_split_never_raises(text):
    segs = split(text, SNIFFERS)
    check_invariants(text, segs)
    transcript.looks_like_transcript(text)

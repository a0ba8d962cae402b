"""Envelopes (parsers/envelopes.py) one by one, and what the timeline makes of them.

Fixtures are our own text, written in each tool's format (tests/envelope_wrappers.py writes the
longer ones).
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from forensics import inputs, timeline
from parsers.envelopes import carry_split, meta_frame, peel
from tests import envelope_wrappers as W

SGL = [
    "[2026-03-02 10:00:01 TP0] Load weight begin. avail mem=78.50 GB",
    "[2026-03-02 10:00:30 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.20 GB, "
    "mem usage=15.30 GB.",
    "[2026-03-02 10:00:31 TP0] KV Cache is allocated. #tokens: 412000, K size: 24.10 GB, V size: 24.10 GB",
    "[2026-03-02 10:01:02 TP0] Decode batch, #running-req: 12, #token: 30210, token usage: 0.07, "
    "cuda graph: True, gen throughput (token/s): 811.20, #queue-req: 0,",
]
FREE = [
    "               total        used        free      shared  buff/cache   available",
    "Mem:       515395372   401234560    12345678      123456   101815134   110000000",
    "Swap:              0           0           0",
]
NVSMI = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|=========================================+========================+======================|
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |
| N/A   33C    P0             71W /  700W |   75001MiB /  81559MiB |      0%      Default |
+-----------------------------------------+------------------------+----------------------+
"""
KERNEL_SHORT = """\
Mar 02 10:05:01 gpu-node-7 kernel: python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0
Mar 02 10:05:01 gpu-node-7 kernel: Out of memory: Killed process 4242 (python3) total-vm:1048576000kB, anon-rss:402653184kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:800000kB oom_score_adj:0
Mar 02 10:05:02 gpu-node-7 systemd[1]: sglang.service: Main process exited, code=killed, status=9/KILL
"""
DMESG = """\
[  466.637307] Call Trace:
[  466.637310]  <TASK>
[  466.637312]  dump_stack_lvl+0x4a/0x70
[  466.700001] usb 1-1: new high-speed USB device number 2 using xhci_hcd
[  466.700101] pci 0000:00:01.0: bridge window [io  0x1000-0x0fff] to [bus 01] add_size 1000
"""


def _tl(tmp_path: Path, name: str, data: str | bytes) -> timeline.Timeline:
    p = tmp_path / name
    if isinstance(data, bytes):
        p.write_bytes(data)
    else:
        p.write_text(data, encoding="utf-8", newline="")
    return timeline.build_timeline([p])


# -------------------------------------------------------------------------------- single forms
def test_docker_partial_lines_are_rejoined_on_the_first_line(tmp_path: Path) -> None:
    long = SGL[1] + " " + "x" * 300
    text = W.docker_json([SGL[0], long, SGL[2]], split=64)
    assert text.count("\n") > 6  # the long line was split into partial records
    p = peel(text)
    assert p is not None
    (s,) = p.streams
    assert s.text.splitlines() == [SGL[0], long, SGL[2]]
    assert s.lines == [1, 2, text.splitlines().index(next(x for x in text.splitlines() if "KV Cache" in x)) + 1]
    tl = _tl(tmp_path, "c.log", text)
    ev = tl.events.filter(pl.col("kind") == "weight_load_end")
    assert ev.get_column("line").to_list() == [2] and ev.get_column("envelope").to_list() == ["docker-json"]
    cov = tl.coverage[0]
    assert cov["recognized"] == cov["lines"] == text.count("\n")  # the continuation records were read


def test_partial_line_at_chunk_end_is_carried() -> None:
    whole = W.docker_json([SGL[1]])
    first_part = W.docker_json([SGL[0]], split=50).splitlines(keepends=True)[0]
    assert carry_split(whole + first_part) == (whole, first_part)
    assert carry_split(whole) == (whole, "")


@pytest.mark.parametrize(("text", "envelope", "field", "value"), [
    ("[pod/sglang-0/server] 2026-03-02T10:00:01.5Z {line}\n", "kubectl-prefix+timestamp", "pod", "sglang-0"),
    ("2026-03-02T10:00:01.123456789Z stderr F {line}\n", "cri", "stream", "stderr"),
    ("Mar 02 10:00:01 gpu-node-7 sglang[77]: {line}\n", "journal-short", "unit", "sglang"),
    ("<14>1 2026-03-02T10:00:01.000Z gpu-node-7 sglang 77 - - {line}\n", "syslog-5424", "pid", 77),
    ("3: {line}\n" * 1, "srun", "task", 3),
    ("(RayWorkerWrapper pid=77, ip=10.1.2.3) {line}\n", "ray", "container", "RayWorkerWrapper"),
    ("sglang-1  | {line}\n", "compose", "container", "sglang-1"),
])
def test_each_form_gives_its_fields(text: str, envelope: str, field: str, value: object) -> None:
    p = peel(text.format(line=SGL[0]))
    assert p is not None
    (s,) = p.streams
    assert s.text == SGL[0] + "\n"
    m = s.meta[0]
    assert m is not None and m.envelope == envelope and getattr(m, field) == value


def test_journal_json_fields_and_byte_array_message(tmp_path: Path) -> None:
    lines = [SGL[0], "naïve ümlaut line", SGL[2]]
    text = W.journal_json(lines)
    assert "[110, 97" in text  # the non-ASCII message went out as bytes
    p = peel(text)
    assert p is not None and p.streams[0].text.splitlines() == lines
    mf = meta_frame(p.streams[0])
    assert mf.get_column("unit").unique().to_list() == [W.UNIT]
    assert mf.get_column("env_pid").unique().to_list() == [W.PID]
    tl = _tl(tmp_path, "j.json", text)
    row = tl.events.filter(pl.col("kind") == "weight_load_begin").row(0, named=True)
    assert (row["unit"], row["host"], row["line"]) == (W.UNIT, W.HOST, 1)


def test_journal_export_with_binary_fields(tmp_path: Path) -> None:
    # every message binary: a 10-byte one has "\n" inside its length, a 200-byte one a byte >= 0x80
    lines = ["short line", "x" * 4 + "\n" + "y" * 4, SGL[2], "z" * 200]
    data = W.journal_export_bytes([ln.replace("\n", "") for ln in lines[:1]] + lines[1:], binary_every=1)
    assert b"MESSAGE\n\x0a" in W.journal_export_bytes(["0123456789"], binary_every=1)
    p = peel(data.decode("utf-8", errors="replace"))
    assert p is not None
    inner = p.streams[0].text.splitlines()
    assert inner == ["short line", "xxxx", "yyyy", SGL[2], "z" * 200]
    both = W.journal_export_bytes(["0123456789", SGL[0]], binary_every=1)
    tl = _tl(tmp_path, "e.export", both)
    (row,) = tl.events.filter(pl.col("kind") == "weight_load_begin").rows(named=True)
    assert row["envelope"] == "journal-export" and row["unit"] == W.UNIT
    assert both.decode("latin-1").splitlines()[row["line"] - 1] == "MESSAGE"  # the field's own line
    assert tl.coverage[0]["unrecognized"] <= 1  # the one plain line of text only


def test_journal_short_multiline_continuation_is_unindented() -> None:
    head = "Mar 02 10:00:01 gpu-node-7 python3[77]: "
    text = head + "Traceback (most recent call last):\n" + " " * len(head) + '  File "x.py", line 1, in <module>\n'
    p = peel(text)
    assert p is not None
    assert p.streams[0].text == 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
    assert p.streams[0].lines == [1, 2]


def test_ansi_and_crlf_are_removed(tmp_path: Path) -> None:
    text = W.compose(SGL, ansi=True, crlf=True)
    p = peel(text)
    assert p is not None and p.streams[0].text.splitlines() == SGL
    assert "\r" not in p.streams[0].text and "\x1b" not in p.streams[0].text
    bare = "".join(f"\x1b[32m{ln}\x1b[0m\r\n" for ln in SGL)  # colours and CRLF, no envelope
    p = peel(bare)
    assert p is not None and p.streams[0].text.splitlines() == SGL and p.streams[0].meta == [None] * 4
    tl = _tl(tmp_path, "c.log", text)
    assert tl.events.get_column("container").unique().to_list() == ["sglang-1"]


def test_colours_escaped_by_rsyslog_are_removed() -> None:
    # rsyslog writes ESC as "#033": the SGR sequences around Ray's prefix
    p = peel("".join(f"#033[2m#033[36m(raylet)#033[0m {ln}\n" for ln in SGL))
    assert p is not None and p.streams[0].text.splitlines() == [f"(raylet) {ln}" for ln in SGL]


def test_mid_file_switch_of_envelope(tmp_path: Path) -> None:
    text = W.docker_json(SGL[:2]) + W.journal_short(SGL[2:])
    tl = _tl(tmp_path, "s.log", text)
    got = tl.events.select("kind", "line", "envelope").rows()
    assert got == [("weight_load_begin", 1, "docker-json"), ("weight_load_end", 2, "docker-json"),
                   ("kv_cache_allocated", 3, "journal-short"), ("decode_batch", 4, "journal-short")] or \
        [g[2] for g in got] == ["docker-json", "docker-json", "journal-short", "journal-short"]


def test_stacked_envelopes() -> None:
    text = "".join(f"2026-03-02T10:00:01.000000001Z sglang-1  | 0: {ln}\n" for ln in SGL)
    p = peel(text)
    assert p is not None and p.streams[0].text.splitlines() == SGL
    m = p.streams[0].meta[0]
    assert m is not None and m.envelope == "timestamp+compose+srun" and (m.container, m.task) == ("sglang-1", 0)


# -------------------------------------------------------------------------------- time
def test_envelope_time_fills_records_without_their_own(tmp_path: Path) -> None:
    tl = _tl(tmp_path, "free.log", W.docker_t(FREE))
    rows = tl.events.filter(pl.col("source") == "free")
    assert rows.height and set(rows.get_column("ts_basis").to_list()) == {"envelope"}
    assert rows.get_column("ts").to_list()[0] == rows.get_column("env_ts").to_list()[0]
    assert not any("differs from its envelope" in n for n in tl.facts.notes)


def test_envelope_and_record_disagree_note_once(tmp_path: Path) -> None:
    # the container's log stamps UTC; the program printed UTC+8 wall clock: read without --tz
    lines = SGL * 3
    text = "".join(f"2026-03-02T02:00:{i:02d}.000000000Z {ln}\n" for i, ln in enumerate(lines))
    tl = _tl(tmp_path, "k.log", text)
    notes = [n for n in tl.facts.notes if "differs from its envelope" in n]
    assert len(notes) == 1 and "UTC+08:00" in notes[0]
    sgl = tl.events.filter(pl.col("source") == "sglang")
    assert set(sgl.get_column("ts_basis").to_list()) == {"local-assumed"}  # the program's own clock is kept
    again = timeline.build_timeline([tmp_path / "k.log"], tz="Asia/Shanghai")
    assert not any("differs from its envelope" in n for n in again.facts.notes)


def test_syslog_stamp_without_year_takes_the_records_year(tmp_path: Path) -> None:
    tl = _tl(tmp_path, "j.log", W.journal_short(SGL))
    sgl = tl.events.filter(pl.col("source") == "sglang")
    assert sgl.get_column("env_ts").dt.year().to_list() == [2026] * 4  # the records say 2026
    # nothing says the year: the stamp is kept out of the clock rather than guessed
    tl = _tl(tmp_path, "free.log", W.journal_short(FREE))
    free = tl.events.filter(pl.col("source") == "free")
    assert free.height and free.get_column("env_ts").null_count() == free.height


# -------------------------------------------------------------------------------- not envelopes
@pytest.mark.parametrize("text", [
    KERNEL_SHORT, DMESG, NVSMI, "\n".join(FREE) + "\n",
    "| a | b |\n|---|---|\n| 1 | 2 |\n",
    "name | value\nfoo | 1\nbar | 2\n",  # a plain table
    "Steps:\n1: install the driver\n2: reboot\nthen check dmesg\nand free -g\nand nvidia-smi\n",  # few labels
    SGL[0] + "\n",
])
def test_what_is_no_envelope_is_not_peeled(text: str) -> None:
    p = peel(text)
    assert p is None or all(m is None for s in p.streams for m in s.meta)


def test_kernel_journal_stays_with_the_kernel_parser(tmp_path: Path) -> None:
    assert peel(KERNEL_SHORT) is None
    tl = _tl(tmp_path, "kern.log", KERNEL_SHORT)
    assert tl.coverage[0]["format"] == "kernel"
    assert tl.events.filter(pl.col("kind") == "oom_kill").height == 1


def test_full_journal_splits_kernel_from_the_server(tmp_path: Path) -> None:
    text = W.journal_short(SGL[:2]) + KERNEL_SHORT + W.journal_short(SGL[2:])
    p = peel(text)
    assert p is not None and [s.raw for s in p.streams] == [False, True]
    tl = _tl(tmp_path, "journal.txt", text)
    kinds = dict(tl.events.select("kind", "line").rows())
    assert kinds["oom_kill"] == 3 and kinds["kv_cache_allocated"] == 6 and kinds["weight_load_begin"] == 1
    assert "kernel" in tl.coverage[0]["format"] and "sglang" in tl.coverage[0]["format"]


# -------------------------------------------------------------------------------- streamed files
@pytest.mark.parametrize("wrap", [
    lambda ls: W.docker_json(ls, split=100), lambda ls: W.cri(ls, split=40), W.kubectl_prefix, W.journal_short,
    W.journal_export_bytes,
], ids=["docker-json-partial", "cri-partial", "kubectl-prefix", "journal-short", "journal-export"])
def test_streamed_wrapped_log_is_peeled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wrap) -> None:
    lines = [SGL[0], SGL[1], "y" * 150, SGL[2]] + SGL[3:] * 400
    (tmp_path / "in").mkdir()
    data = wrap(lines)
    (tmp_path / "in" / "d.log").write_bytes(data if isinstance(data, bytes) else data.encode())
    whole = timeline.build_timeline([tmp_path / "in"])
    monkeypatch.setattr(inputs.limits, "STREAM_BYTES", 10_000)
    monkeypatch.setattr(timeline, "CHUNK_BYTES", 9_999)
    streamed = timeline.build_timeline([tmp_path / "in"], spill_dir=tmp_path / "spill")
    assert streamed.parquet_path  # it really was streamed
    cols = ["kind", "line", "line_end", "envelope", "stream", "env_ts", "tokens"]
    assert whole.events.select(cols).equals(streamed.events.select(cols))
    assert whole.coverage[0]["lines"] == streamed.coverage[0]["lines"]
    assert whole.coverage[0]["recognized"] == streamed.coverage[0]["recognized"]


def test_journal_json_kernel_records_go_to_the_kernel_parser(tmp_path: Path) -> None:
    kern = [json.dumps({"MESSAGE": msg, "__REALTIME_TIMESTAMP": "1772445901000000", "_TRANSPORT": "kernel",
                        "SYSLOG_IDENTIFIER": "kernel", "_SOURCE_MONOTONIC_TIMESTAMP": str(466_000_000 + i),
                        "_HOSTNAME": W.HOST, "PRIORITY": "3"})
            for i, msg in enumerate(KERNEL_SHORT.splitlines()[i].split(": ", 1)[1] for i in range(2))]
    text = W.journal_json(SGL[:2]) + "\n".join(kern) + "\n" + W.journal_json(SGL[2:])
    tl = _tl(tmp_path, "all.json", text)
    lines = dict(tl.events.select("kind", "line").rows())
    assert lines["oom_kill"] == 3 and lines["weight_load_end"] == 2 and lines["decode_batch"] == 6
    assert tl.coverage[0]["unrecognized"] == 0


def test_ansi_inside_docker_json_and_bom_in_rfc5424() -> None:
    text = json.dumps({"log": "\x1b[32m" + SGL[0] + "\x1b[0m\n", "stream": "stdout", "time": "2026-03-02T10:00:01Z"})
    p = peel(text + "\n")
    assert p is not None and p.streams[0].text == SGL[0] + "\n"
    p = peel("<14>1 2026-03-02T10:00:01Z h app 1 - - \ufeff" + SGL[0] + "\n")
    assert p is not None and p.streams[0].text == SGL[0] + "\n"


def test_journal_export_kernel_record_reaches_the_kernel_parser(tmp_path: Path) -> None:
    oom = KERNEL_SHORT.splitlines()[:2]
    sgl = W.journal_export_bytes(SGL[:2], binary_every=99)
    kern = b"".join(
        f"__CURSOR=s=k{i}\n__REALTIME_TIMESTAMP=1772445901{i:06d}\n_TRANSPORT=kernel\nSYSLOG_IDENTIFIER=kernel\n"
        f"_SOURCE_MONOTONIC_TIMESTAMP={466_000_000 + i}\n_HOSTNAME={W.HOST}\nPRIORITY=3\n"
        f"MESSAGE={line.split(': ', 1)[1]}\n\n".encode() for i, line in enumerate(oom))
    tl = _tl(tmp_path, "j.export", sgl + kern)
    kinds = set(tl.events.get_column("kind").to_list())
    assert {"oom_kill", "weight_load_begin", "weight_load_end"} <= kinds
    (oom_row,) = tl.events.filter(pl.col("kind") == "oom_kill").rows(named=True)
    text = (sgl + kern).decode().splitlines()
    assert text[oom_row["line"] - 1].startswith("MESSAGE=") and "oom-killer" in text[oom_row["line"] - 1]


def test_streamed_file_that_starts_bare_then_wrapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = SGL[:3] + SGL[3:] * 300
    half = len(lines) // 2
    (tmp_path / "in").mkdir()
    text = "\n".join(lines[:half]) + "\n" + W.docker_json(lines[half:]) + W.journal_short(SGL[3:] * 5) + KERNEL_SHORT
    (tmp_path / "in" / "r.log").write_text(text, encoding="utf-8")
    monkeypatch.setattr(inputs.limits, "STREAM_BYTES", 10_000)
    monkeypatch.setattr(timeline, "CHUNK_BYTES", 9_999)
    tl = timeline.build_timeline([tmp_path / "in"], spill_dir=tmp_path / "spill")
    assert tl.parquet_path
    ev = tl.events.filter(pl.col("kind") == "decode_batch")
    assert ev.height == len(lines) - 3 + 5
    assert ev.get_column("line").to_list() == [*range(4, len(lines) + 1), *range(len(lines) + 1, len(lines) + 6)]
    assert ev.get_column("envelope").to_list() == [None] * (half - 3) + ["docker-json"] * (len(lines) - half) + \
        ["journal-short"] * 5
    assert tl.coverage[0]["lines"] == text.count("\n")
    assert any("kernel line(s) of this streamed journal were not read" in n for n in tl.facts.notes)


# Ray-tagged fragments with no record headers: the tag's actor names the writer (parsers/vllm.py _SNIFF_PREFIX)
VLLM_FRAGMENT = (
    "(EngineCore_DP0 pid=6310) Process EngineCore_DP0:\n"
    "(EngineCore_DP0 pid=6310) Traceback (most recent call last):\n"
    '(EngineCore_DP0 pid=6310)   File "/opt/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 700, '
    "in run_engine_core\n"
    "(EngineCore_DP0 pid=6310)     engine_core = EngineCoreProc(*args, **kwargs)\n"
    "(EngineCore_DP0 pid=6310) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. "
    "GPU 0 has a total capacity of 44.42 GiB of which 201.31 MiB is free.\n"
)


def test_headerless_fragment_tagged_by_vllm_processes_goes_to_the_vllm_parser(tmp_path: Path) -> None:
    p = peel(VLLM_FRAGMENT)
    assert p is not None and "(EngineCore_DP0 pid=6310) Process" in p.streams[0].ray_tagged_head()
    tl = _tl(tmp_path, "engine.log", VLLM_FRAGMENT)
    assert tl.coverage[0]["format"] == "vllm in ray"


def test_headerless_fragment_tagged_by_other_actors_is_not_called_vllm(tmp_path: Path) -> None:
    text = VLLM_FRAGMENT.replace("EngineCore_DP0", "TrainerActor").replace("vllm/v1/engine/core.py", "trainer/loop.py")
    text = text.replace("engine_core = EngineCoreProc(*args, **kwargs)", "step(batch)")
    tl = _tl(tmp_path, "trainer.log", text)
    assert "vllm" not in tl.coverage[0]["format"]

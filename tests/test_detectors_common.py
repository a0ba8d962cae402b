"""Build small timelines by hand for detector unit tests (no files, no parsers)."""

from __future__ import annotations

from typing import Any

from forensics.model import Facts, Timeline
from parsers.schema import rows_to_frame

GIB = 1 << 30
MIB = 1 << 20


def timeline(*rows: dict[str, Any], facts: Facts | None = None) -> Timeline:
    """A timeline from row dicts; ``file`` defaults to ``log.txt``, ``line`` to the row's position."""
    full = []
    for i, r in enumerate(rows, start=1):
        r = dict(r)
        r.setdefault("file", "log.txt")
        r.setdefault("line", i)
        r.setdefault("source", "sglang")
        r.setdefault("text", r["kind"])
        full.append(r)
    return Timeline(events=rows_to_frame(full, source="test", path="log.txt"), facts=facts or Facts())


def fired(findings) -> dict[str, Any]:
    return {f.rule_id: f for f in findings}


# ------------------------------------------------------------------ tests of the shared helpers

def test_order_within_a_file_and_across_files():
    from datetime import datetime, timezone

    from forensics.facts.rows import before

    a = {"file": "s.txt", "line": 3, "ts": None}
    b = {"file": "s.txt", "line": 9, "ts": None}
    c = {"file": "other.log", "line": 1, "ts": None}
    assert before(a, b) is True and before(b, a) is False
    assert before(a, c) is None
    t1, t2 = datetime(2025, 1, 1, tzinfo=timezone.utc), datetime(2025, 1, 2, tzinfo=timezone.utc)
    assert before({**a, "ts": t1}, {**c, "ts": t2}) is True


def test_server_config_overlays_server_args_on_launch_flags():
    from forensics.facts.launch import server_config

    tl = timeline(
        {"kind": "launch_command", "source": "launch", "attrs": {"flags": {"--tp-size": "8", "--hicache-size": "300"}}},
        {"kind": "server_args", "attrs": {"args": {"hicache_size": 48, "mem_fraction_static": 0.93}}},
    )
    cfg = server_config(tl)
    assert cfg.num("tp_size") == 8 and cfg.num("hicache_size") == 48 and cfg.flag_text("mem_fraction_static") == "0.93"


def test_a_command_outranks_a_later_sentence_which_only_fills_gaps():
    from forensics.facts.launch import server_config

    prose = {"confidence": "prose", "launcher": "prose"}
    tl = timeline(
        {"kind": "launch_command", "source": "launch", "file": "run.sh",
         "attrs": {"flags": {"--tp-size": "4", "--context-length": "131072"}}},
        {"kind": "launch_command", "source": "prose", "file": "notes.md",
         "attrs": {**prose, "flags": {"--tp-size": "8", "--hicache-size": "64"}}},
        {"kind": "launch_command", "source": "prose", "file": "notes.md",
         "attrs": {**prose, "flags": {"--chunked-prefill-size": "4096"}}},
    )
    cfg = server_config(tl)
    assert cfg.num("tp_size") == 4 and cfg.num("context_length") == 131072
    # only the last sentence's statement fills a gap: an earlier one may be of a configuration since changed
    assert cfg.num("chunked_prefill_size") == 4096 and cfg.get("hicache_size") is None
    assert cfg.origin["tp_size"]["file"] == "run.sh"


def test_kill_commands_and_version_markers():
    from forensics.facts.lifecycle import kill_commands
    from forensics.facts.versions import version_window

    tl = timeline(
        {"kind": "command", "source": "transcript", "text": "pkill -9 -f sglang", "attrs": {"command": "pkill -9 -f sglang"}},
        {"kind": "command", "source": "transcript", "text": "free -g", "attrs": {"command": "free -g"}},
        {"kind": "decode_batch", "text": "[2025-11-20 11:02:41 TP0] Decode batch, #running-req: 41, #token: 9, "},
    )
    assert [c.text for c in kill_commands(tl)] == ["pkill -9 -f sglang"]
    assert version_window(tl) == ((0, 5, 5), None)


def test_version_markers_read_the_first_line_after_the_prefix():
    """Markers are matched on the record's first line without its [stamp rank] prefix, column-wise."""
    from forensics.facts.versions import version_window

    old_format = timeline(
        {"kind": "decode_batch", "text": "[2025-11-20 11:02:41 TP0] Decode batch. #running-req: 41, #token: 9"},
        {"kind": "rank_dead", "text": "[2025-11-20 11:02:41] Rank 3 scheduler is dead.\nExit code: -9"},
    )
    assert version_window(old_format) == (None, (0, 5, 3))  # "Decode batch." and "is dead": at most 0.5.3
    # the marker on a second line or inside the message does not count
    hidden = timeline(
        {"kind": "decode_batch", "text": "[2025-11-20 11:02:41 TP0] x\nDecode batch. #running-req: 41"},
        {"kind": "weight_load_end", "text": "[2025-11-20 11:02:41 TP0] Load weight end. type=X, avail mem=2 GB"},
    )
    assert version_window(hidden) == (None, None)

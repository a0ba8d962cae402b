"""How detectors weigh facts read from sentences against program output (no seeds needed)."""

from __future__ import annotations

from pathlib import Path

from forensics.detectors import run_all
from forensics.timeline import build_timeline

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def test_a_note_restating_the_log_adds_no_second_finding(tmp_path: Path) -> None:
    note = tmp_path / "note.md"
    note.write_text("Notes from the on-call engineer\n\nThe server was launched with --tp-size 8 and --hicache-size 300 "
                    "on this 449 GB host, and it hung\nwhile the ranks were allocating their host pools.\n")
    tl = build_timeline([FIX / "seed_bundle", note])
    findings, root = run_all(tl)
    assert root == "SGL-HOST-001"
    over = [f for f in findings if f.rule_id == "SGL-HOST-001"]
    assert len(over) == 1
    assert all(e.file != "note.md" for e in over[0].evidence)
    assert over[0].confidence == "high"  # the log's own allocation lines, not the sentence


def test_a_sentence_alone_gives_a_weaker_finding_that_names_it(tmp_path: Path) -> None:
    note = tmp_path / "ticket.txt"
    note.write_text("The host has 256 GiB of RAM.\nWe started SGLang with --tp 4 and --hicache-size 120 and it froze.\n")
    findings, root = run_all(build_timeline([note]))
    assert root == "SGL-HOST-001"
    f = next(x for x in findings if x.rule_id == "SGL-HOST-001")
    assert f.confidence in ("low", "medium") and "sentences" in (f.confidence_reason or "")
    assert {e.line for e in f.evidence} >= {1, 2}

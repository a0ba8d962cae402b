"""Every rule and every parser pattern names its documented source (issue 29; DEVELOPERS.md "Citing sources").

The audit is ``tools/sources_cited.py``; this file holds it to zero, less two named lists:

* :data:`NO_FORMAT`: patterns that read no documented format by their nature (a person's prose, the
  marks people leave where they cut a paste). Each says why; the list is for the lead to keep or cut.
* :data:`NOT_YET_CITED`: what the first sweep did not reach. It only shrinks: a pattern or rule on it
  that becomes cited fails the test until it is struck off, and anything new that cites nothing fails.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from tests.shared_data import SHARED, skip_unless

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import sources_cited as audit  # noqa: E402

_PROSE = ("English prose about a documented fact (a flag that ran, a host's RAM, what capture left): "
          "no format exists; the cue words are ours")

#: patterns with no documented format to cite, and why (kept here, in review, rather than hidden)
NO_FORMAT: dict[str, str] = {
    "parsers/elision.py::ELISION_LINE": "the marks people leave where they cut a paste (issue 29 asks for the class)",
    "parsers/launch/__init__.py::ELISION_RE": "elision marks again (a second copy of parsers/elision.py's class)",
    "forensics/detectors/rendezvous.py::_CUT": "elision marks again (a third copy of parsers/elision.py's class)",
    "parsers/transcript.py::_TOOL_RE": "a chat tool's ``[bash] cmd`` marker before a command: no published format",
    "parsers/transcript.py::_WORD_RE": "an English word, to tell prose from a log line",
    "forensics/detectors/fatal_other.py::_ENGINE_FRAME": "package names in a frame's path, to tell engine code from a user's",
    "parsers/pasted.py::_RECORD_HEAD": "the heads of records in any log, to tell a new line from a cut one's rest",
    "parsers/pasted.py::_WRAPPABLE": "the heads of log records and exception lines, where a terminal's cut is looked for",
    "parsers/pasted.py::_SENTENCE": "an English sentence's start, to tell it from the rest of a line a terminal cut",
    "parsers/launch/prose.py::_DIGIT_RE": _PROSE,
    "parsers/launch/prose.py::_MENTION_HINT_RE": _PROSE,
    "parsers/launch/prose.py::_HOST_WORD_RE": _PROSE,
    "parsers/launch/prose.py::_OUT_OF_TOTAL": _PROSE,
    "parsers/launch/prose.py::_GPU_KEY_RE": _PROSE,
    "parsers/launch/prose.py::_GPU_WORD_RE": _PROSE,
    "parsers/launch/prose.py::_SENTENCE_END_RE": _PROSE,
    "parsers/launch/prose.py::_CLAUSE_SPLIT_RE": _PROSE,
    "parsers/launch/prose.py::_MODAL_RE": _PROSE,
    "parsers/launch/prose.py::_NOT_MODAL_RE": _PROSE,
    "parsers/launch/prose.py::_NEGATION_RE": _PROSE,
    "parsers/launch/prose.py::_CHANGE_TO_RE": _PROSE,
    "parsers/launch/prose.py::_CHANGE_BASE_RE": _PROSE,
    "parsers/launch/prose.py::_AFTER_MODAL_RE": _PROSE,
    "parsers/launch/prose.py::_FRAME_RE": _PROSE,
    "parsers/launch/prose.py::_RAN_RE": _PROSE,
    "parsers/launch/prose.py::_HOST_PATTERNS": _PROSE,
    "parsers/launch/prose.py::_HOST_NOT_RE": _PROSE,
    "parsers/launch/prose.py::_GPU_NOT_RE": _PROSE,
    "parsers/launch/prose.py::_GPU_CAP_PATTERNS": _PROSE,
    "parsers/launch/prose.py::_GRAPH_RE": _PROSE,
    "parsers/launch/prose.py::_LEFT_SIZE_RE": _PROSE,
}

#: the sweep's remainder: uncited today, listed so that nothing new joins them (strike off as cited)
NOT_YET_CITED: frozenset[str] = frozenset()


def _sections():
    return audit.reference_sections(SHARED / "reference")


def _open(missing, allowed):
    return sorted(str(m) for m in missing if m.key not in allowed)


def test_every_rule_cites_a_source():
    missing = audit.uncited_rules(_sections())
    assert _open(missing, NOT_YET_CITED) == []


def test_every_parser_pattern_cites_a_source():
    missing = audit.uncited_patterns(_sections())
    assert _open(missing, NOT_YET_CITED | NO_FORMAT.keys()) == []


def test_the_lists_hold_only_what_is_still_uncited():
    sections = _sections()
    uncited = {m.key for m in audit.uncited_rules(sections) + audit.uncited_patterns(sections)}
    assert sorted((NOT_YET_CITED | NO_FORMAT.keys()) - uncited) == [], "cited now: strike these off the lists"
    assert not NOT_YET_CITED & NO_FORMAT.keys()


@pytest.mark.parametrize("text", [
    "reference/failure_messages.md §2.1",
    "failure_messages.md §4.4 (the watchdog line)",
    "sglang python/sglang/srt/managers/scheduler.py::check_memory (0.4.x-0.5.x)",
    "vllm vllm/v1/worker/gpu_worker.py (v0.9)",
    "linux mm/oom_kill.c\n(6.x)",
    "pytorch c10/cuda/CUDACachingAllocator.cpp (main, 2.4+)",
    "proc(5)", "RFC 8259", "YAML 1.2", "docs/record.md",
])
def test_a_citation_is_recognised(text):
    assert audit.citations(text)


@pytest.mark.parametrize("text", [
    "failure_messages.md",                       # a file names no row
    "see the SGLang source",                     # no path, no release
    "sglang python/sglang/srt/server_args.py",   # no release
    "vllm gpu_worker.py (the new one)",          # a release must open the parentheses
    "docs/nothing_here.md",                      # our own docs only when they exist
    "§2.1",                                      # a bare section without the module's one reference
])
def test_a_non_citation_is_refused(text):
    assert audit.citations(text) == []


def test_a_reference_section_must_exist():
    skip_unless(SHARED / "reference", "reference")
    sections = _sections()
    assert audit.citations("failure_messages.md §4.4", sections=sections)
    assert audit.citations("failure_messages.md §44.4", sections=sections) == []


def test_a_pattern_that_says_it_has_no_source_is_listed_even_under_a_citation(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(textwrap.dedent('''\
        """Patterns."""
        import re

        # proc(5)
        _A = re.compile(r"a")
        # source: none (a person's wording)
        _B = re.compile(r"b")
        '''))
    assert [(m.key, m.what) for m in audit.uncited_patterns_in(module, root=tmp_path)] == [
        ("m.py::_B", "pattern _B: no documented format")]


def test_the_audit_finds_an_uncited_pattern(tmp_path):
    module = tmp_path / "m.py"
    many = "\n".join(f"_P{i} = re.compile(r'x{i}')" for i in range(audit.COVERS + 1))
    module.write_text(textwrap.dedent('''\
        """A module citing reference/failure_messages.md §2.1 once, for more patterns than it may cover."""
        import re

        # vllm vllm/v1/engine/core.py (0.9+)
        _CITED = re.compile(r"a")
        _LIST = (re.compile(r"b"), re.compile(r"c"))  # proc(5)

        _BARE = re.compile(r"d")
        ''') + many + "\n")
    found = {m.key.rsplit("::", 1)[1] for m in audit.uncited_patterns_in(module, root=tmp_path)}
    assert "_CITED" not in found and "_LIST" not in found
    assert {"_BARE", "_P0"} <= found  # the docstring covers at most COVERS patterns


def test_a_banner_or_a_small_module_docstring_covers_its_patterns(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(textwrap.dedent('''\
        """Reads /proc/meminfo: proc(5)."""
        import re

        _A = re.compile(r"a")
        _B = re.compile(r"b")
        '''))
    assert audit.uncited_patterns_in(module, root=tmp_path) == []
    module.write_text(textwrap.dedent('''\
        """Reads failure text (reference/failure_messages.md)."""
        import re

        # --- process death (§5) ---
        _A = re.compile(r"a")

        # --- helpers ---
        _B = re.compile(r"b")
        ''') + "\n".join(f"_P{i} = re.compile(r'x{i}')" for i in range(audit.COVERS)) + "\n")
    found = {m.key.rsplit("::", 1)[1] for m in audit.uncited_patterns_in(module, root=tmp_path)}
    assert "_A" not in found and "_B" in found


def test_a_rule_row_of_coverage_counts(tmp_path):
    coverage = tmp_path / "coverage.md"
    coverage.write_text("| §4.4 «1.11–2.0» | rule | SGL-NCCL-002 (watchdog_1_11_seqnum) |\n"
                        "| §9 «x» | xfail | needs: SGL-GPU-009 |\n")
    assert audit.coverage_rule_ids(coverage) == {"SGL-NCCL-002"}


def test_a_section_is_read_with_its_subsections_and_a_regex_by_its_literal_words():
    skip_unless(SHARED / "reference", "reference")
    text = audit.section_text("failure_messages", "4", SHARED / "reference")
    assert "watchdog" in text and "process death" not in text  # §4.4 inside, §5 outside
    assert audit.literal_runs(r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+)") == [
        "watchdog caught collective operation timeout: worknccl(seqnum="]
    assert audit.literal_runs(r"a|b\d+") == []  # nothing long enough to look for


def test_a_file_citation_carries_the_sections_that_follow_it():
    assert audit.citations("vllm_formats.md §2.4 (V0), §2.5 and §3.1") == [
        "vllm_formats.md §2.4", "vllm_formats.md §2.5", "vllm_formats.md §3.1"]

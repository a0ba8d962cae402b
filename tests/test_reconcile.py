"""One flag, one value across a report's findings (forensics.detectors.reconcile)."""

from __future__ import annotations

from forensics.detectors.reconcile import reconcile_flags
from forensics.model import Evidence, Finding, FlagChange, Remediation


def _finding(rule: str, *changes: FlagChange, consequence_of: str | None = None) -> Finding:
    return Finding(rule_id=rule, category="other", severity="high", title=rule, summary="s", confidence="high",
                   evidence=[Evidence(file="server.log", line=1, ts=None, text="x")], remediation=Remediation(flags=list(changes)), consequence_of=consequence_of)


def test_the_root_causes_value_wins_and_the_other_finding_says_so():
    root = _finding("ROOT", FlagChange("--mem-fraction-static", "0.93", "0.90", "headroom for the graphs"))
    other = _finding("KV", FlagChange("--mem_fraction_static", "0.93", "0.95", "a larger KV pool"))
    findings = [other, root]  # severity order put the other first: the root still wins
    reconcile_flags(findings, "ROOT")
    assert [c.new for f in findings for c in f.remediation.flags] == ["0.90", "0.90"]
    why = other.remediation.flags[0].why
    assert "0.95" in why and "ROOT" in why and "a larger KV pool" in why
    assert "more fundamental" in why  # opposite directions are named as such
    assert root.remediation.flags[0].why == "headroom for the graphs"


def test_same_direction_different_values_take_the_winners_value_without_a_conflict():
    root = _finding("ROOT", FlagChange("--hicache-size", "300", "45", "fits 8 ranks"))
    other = _finding("OTHER", FlagChange("--hicache-size", "300", "100", "fits the container"))
    reconcile_flags([root, other], "ROOT")
    assert other.remediation.flags[0].new == "45"
    assert "covers this finding" in other.remediation.flags[0].why


def test_without_a_root_a_cause_outranks_its_consequence():
    symptom = _finding("SYMPTOM", FlagChange("--max-model-len", "131072", "65536", "x"), consequence_of="CAUSE")
    cause = _finding("CAUSE", FlagChange("--max-model-len", "131072", "32768", "y"))
    reconcile_flags([symptom, cause], None)
    assert symptom.remediation.flags[0].new == "32768"
    assert cause.remediation.flags[0].new == "32768" and cause.remediation.flags[0].why == "y"


def test_equal_values_and_other_flags_are_left_alone():
    a = _finding("A", FlagChange("--tp", "8", "4", "a"))
    b = _finding("B", FlagChange("--tp", "8", "4", "b"), FlagChange("--dp", None, "2", "c"))
    reconcile_flags([a, b], "A")
    assert [c.why for c in b.remediation.flags] == ["b", "c"]

"""One flag, one recommended value: the corrections of all findings reconciled after linking.

Two findings may both correct the same flag (the root cause lowers ``--mem-fraction-static`` to make
room for the CUDA graphs, a KV finding would raise it to enlarge the pool). A report that proposes
two values for one flag contradicts itself. The value of the most fundamental finding wins — the
root cause, then findings that are nobody's consequence, in the order findings are reported (severity,
then rule id) — and every
other finding that corrects the flag takes that value and says why; when the two pull in opposite
directions (one lowers, the other raises from the same old value) the loser's text says so and
which need was chosen.

Findings are ordered before this runs (:func:`forensics.detectors.run_all`), so "first" is "wins".
"""

from __future__ import annotations

from forensics.facts.launch import flag_key
from forensics.model import Finding, FlagChange


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(str(value).strip().split(" ", 1)[0].rstrip("GgBb").strip())  # "0.9 (default, assumed)" is 0.9
    except ValueError:
        return None


def _direction(change: FlagChange) -> int:
    """-1 lowers, +1 raises, 0 sets or removes (or is not a number)."""
    old, new = _number(change.old), _number(change.new)
    if old is None or new is None or old == new:
        return 0
    return -1 if new < old else 1


def reconcile_flags(findings: list[Finding], root: str | None) -> None:
    """Give every flag one value across ``findings`` (in place): the winner's."""
    order = sorted(range(len(findings)), key=lambda i: (findings[i].rule_id != root,
                                                        findings[i].consequence_of is not None, i))
    chosen: dict[str, tuple[FlagChange, Finding]] = {}
    for i in order:
        f = findings[i]
        for n, ch in enumerate(f.remediation.flags):
            key = flag_key(ch.flag.strip().lower())
            if key not in chosen:
                chosen[key] = (ch, f)
                continue
            win, by = chosen[key]
            if (ch.new or "") == (win.new or ""):
                continue
            opposed = _direction(ch) * _direction(win) < 0
            if opposed:
                note = (f"this finding alone would set {ch.flag} to {ch.new or '(remove)'}, against {by.rule_id}'s "
                        f"{win.new or '(remove)'}; {by.rule_id} is the more fundamental need, so its value stands "
                        f"— fix that first, then re-check this one")
            else:
                note = f"{by.rule_id} already sets {ch.flag} to {win.new or '(remove)'}, which covers this finding"
            f.remediation.flags[n] = FlagChange(ch.flag, ch.old if ch.old is not None else win.old, win.new,
                                                f"{ch.why}; {note}" if ch.why else note)
            said = f"{ch.flag} {ch.new}"
            if ch.new and win.new and f" {said} " in f" {f.summary} ".replace(".", " ").replace(",", " "):
                f.summary = f.summary.replace(said, f"{ch.flag} {win.new}", 1)  # the summary states the one value
            f.figures.setdefault("flags_reconciled_with", by.rule_id)

"""Every report tells one story: one unit per comparison, one value per flag, one value per fact, the
arithmetic whole and a short list of what to do — over every scenario and every real case.

The real cases are read from ``../shared/incidents`` at test time (skipped when absent); the scenarios
ship in the repository.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from forensics.analysis import analyse
from forensics.report import render_markdown
from forensics.report.document import MAX_NEXT_STEPS, normalise_document, ordered_findings
from forensics.rules import load_catalog
from tests.shared_data import SHARED
from tests.story import cut_formulas, mixed_units

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "fixtures" / "scenarios"
CORPUS = SHARED / "incidents"

#: facts several findings may show: they must agree within one host
SHARED_FACTS = ("host_total_bytes", "gpu_memory_bytes", "baseline_bytes", "container_limit_bytes")


def _cases() -> list[tuple[str, list[Path]]]:
    out = []
    for d in sorted(p for p in SCENARIOS.iterdir() if (p / "expected.json").is_file()):
        spec = json.loads((d / "expected.json").read_text(encoding="utf-8"))
        names = spec.get("inputs") or sorted(p.name for p in d.iterdir() if p.name != "expected.json")
        out.append((f"scenario/{d.name}", [d / n for n in names]))
    if CORPUS.is_dir():
        for d in sorted(p for p in CORPUS.iterdir() if (p / "case.toml").is_file()):
            out.append((f"case/{d.name}", sorted(p for p in d.rglob("*") if p.is_file() and p.name != "case.toml")))
    return out


@pytest.fixture(scope="module")
def reports() -> dict[str, tuple[dict, str]]:
    catalog = load_catalog()
    out = {}
    for name, inputs in _cases():
        tl, doc = analyse(inputs, quiet=True)
        out[name] = (doc, render_markdown(doc, catalog, tl))
    return out


def _texts(doc: dict, md: str) -> list[str]:
    texts = [md]
    for f in doc["findings"]:
        texts.append(f["summary"])
        texts += [c.get("why") or "" for c in f["remediation"]["flags"]]
        texts += list(f["remediation"]["actions"])
    return texts


def test_every_comparison_is_made_in_one_unit(reports):
    mixed = []
    for name, (doc, md) in reports.items():
        for text in _texts(doc, md):
            mixed += [f"{name}: {m}" for m in mixed_units(text)]
    assert not mixed, "\n".join(mixed[:20])


def test_no_flag_gets_two_values(reports):
    split = []
    for name, (doc, _md) in reports.items():
        values: dict[tuple[str, str], set[str]] = {}
        for f in doc["findings"]:
            host = (f.get("hosts") or [""])[0]
            for c in f["remediation"]["flags"]:
                key = (host, c["flag"].lstrip("-").replace("_", "-"))
                values.setdefault(key, set()).add(str(c.get("new")))
        split += [f"{name}: {flag} → {sorted(v)}" for (_h, flag), v in values.items() if len(v) > 1]
    assert not split, "\n".join(split)


def test_facts_shown_by_two_findings_are_equal(reports):
    differ = []
    for name, (doc, _md) in reports.items():
        for fact in SHARED_FACTS:
            seen: dict[str, set] = {}
            for f in doc["findings"]:
                if fact in f["figures"]:
                    seen.setdefault((f.get("hosts") or [""])[0], set()).add(f["figures"][fact])
            differ += [f"{name}: {fact} {sorted(v)}" for v in seen.values() if len(v) > 1]
    assert not differ, "\n".join(differ)


def test_summary_never_cuts_a_formula(reports):
    cut = []
    for name, (_doc, md) in reports.items():
        cut += [f"{name}: {line}" for line in cut_formulas(md)]
    assert not cut, "\n".join(cut)


def test_next_steps_are_short_and_said_once(reports):
    from forensics.report.document import next_steps

    bad = []
    for name, (doc, _md) in reports.items():
        steps = next_steps(normalise_document(doc))
        texts = [s["text"] for s in steps]
        if len(steps) > MAX_NEXT_STEPS or len(set(texts)) != len(texts):
            bad.append(f"{name}: {texts}")
        if ordered_findings(doc) and not doc["findings"]:
            bad.append(name)
    assert not bad, "\n".join(bad)


def _html_tables(html: str, cls: str) -> list[str]:
    return re.findall(rf'<table class="{cls}">(.*?)</table>', html, flags=re.S)


@pytest.fixture(scope="module")
def pages(reports) -> dict[str, str]:
    from forensics.report import render_html

    catalog = load_catalog()
    return {name: render_html(doc, None, catalog, plotlyjs_src="plotly.min.js") for name, (doc, _md) in reports.items()}


def test_each_evidence_line_is_cited_once_in_the_page(pages):
    """A line two findings rest on (the server_args blob, the launch command) is quoted once; the second
    finding points at the first quote."""
    twice = []
    for name, html in pages.items():
        quoted: dict[str, int] = {}
        for table in _html_tables(html, "evidence"):
            for loc in re.findall(r'<td class="loc mono">(.*?)</td><td class="mono">[^<]*</td><td class="text"><pre>',
                                  table):
                quoted[loc] = quoted.get(loc, 0) + 1
        twice += [f"{name}: {loc} quoted {n}×" for loc, n in quoted.items() if n > 1]
    assert not twice, "\n".join(twice[:20])


_SNAKE = re.compile(r"\b[a-z]+(?:_[a-z0-9]+)+\b")


def test_figure_tables_show_names_and_human_units(pages):
    """A figure's name is words, its value a size in GiB, a count or a word — never a snake_case key, a
    raw byte count or a JSON dict."""
    bad = []
    for name, html in pages.items():
        for table in _html_tables(html, "figures"):
            for label, value in re.findall(r'<tr><th title="[^"]*">(.*?)</th><td class="num">(.*?)</td></tr>', table,
                                           flags=re.S):
                if _SNAKE.search(label) or any(_SNAKE.fullmatch(item.strip()) for item in re.split(r"[,;] ", value)):
                    bad.append(f"{name}: {label} = {value} (snake_case)")
                if re.search(r"(?<![\d.,])\d{7,}(?![\d.,])", value.replace(",", "")) and "bytes" in label.lower():
                    bad.append(f"{name}: {label} = {value} (raw bytes)")
                if re.search(r'[{}]|\[\s*(?:["\d]|&#34;|&quot;)', value):
                    bad.append(f"{name}: {label} = {value} (JSON)")
    assert not bad, "\n".join(sorted(set(bad))[:30])


_TB_HEAD = "Traceback (most recent call last)"
_TB_FRAME = re.compile(r'^\s*(?:\S.*?\s)?File "[^"]+", line \d+')
#: an engine's line that opens a traceback (SGLang's "Scheduler hit an exception:", vLLM's
#: "EngineCore hit an exception" / "Exception in worker … while processing", an EngineCore fatal error)
_TB_OPENER = re.compile(r"hit an exception|Exception in worker \S+ while processing|encountered a fatal error|"
                        r"failed to start")


def _resolve(inputs: list[Path], name: str) -> Path | None:
    """The input file an evidence row names (loose files by name, folders' files under the folder)."""
    for i in inputs:
        if i.is_file() and i.name == name:
            return i
        if i.is_dir():
            for cand in (i / name, i.parent / name):
                if cand.is_file():
                    return cand
    return None


def _is_traceback_quote(text: str) -> bool:
    first = text.splitlines()[0] if text else ""
    return _TB_HEAD in first or bool(_TB_FRAME.match(first))


def _starts_a_traceback(lines: list[str], n: int) -> bool:
    """Whether line ``n`` (1-based) is the first line of a traceback: its header, the engine's line that
    opens it, or — the header cut from the input — a frame with no traceback line above it."""
    if not 0 < n <= len(lines):
        return False
    here = lines[n - 1]
    if _TB_HEAD in here:
        return True
    after = next((x for x in lines[n:n + 3] if x.strip()), "")
    if _TB_OPENER.search(here) and (_TB_HEAD in after or _TB_FRAME.match(after)):
        return True
    if not _TB_FRAME.match(here):
        return False
    k = n - 2  # above a frame: source lines shown under an earlier frame belong to it; a frame or header above
    while k >= 0 and lines[k][:1].isspace() and not _TB_FRAME.match(lines[k]):
        k -= 1
    return k < 0 or not (_TB_FRAME.match(lines[k]) or _TB_HEAD in lines[k])


def test_a_traceback_is_cited_at_its_first_line(reports):
    """Evidence that quotes a traceback points at the line the traceback starts on, never at its exception
    line or the line after its end (issue 24)."""
    inputs = dict(_cases())
    wrong, seen = [], 0
    for name, (doc, _md) in reports.items():
        for f in doc["findings"]:
            for e in f["evidence"]:
                if not e.get("line") or not _is_traceback_quote(e.get("text") or ""):
                    continue
                path = _resolve(inputs[name], e["file"])
                if path is None or path.suffix in (".gz", ".zst", ".xz", ".bz2", ".zip", ".tar", ".tgz"):
                    continue
                seen += 1
                lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
                if not _starts_a_traceback(lines, e["line"]):
                    got = lines[e["line"] - 1] if 0 < e["line"] <= len(lines) else "(past the end)"
                    wrong.append(f"{name} {f['rule_id']} {e['file']}:{e['line']} is {got[:100]!r}")
    assert seen >= 20, f"only {seen} traceback citations: the test proves little"
    assert not wrong, "\n".join(wrong)


def test_the_headline_names_the_ranks_and_findings_of_the_root_causes_host(reports, pages):
    """Several hosts: the affected ranks are the lead host's, not every host's; a rule that fired on several
    hosts is listed once, with its hosts."""
    from forensics.report.document import root_finding
    from forensics.report.text import ranges

    bad, multi = [], 0
    for name, (doc, _md) in reports.items():
        html = pages[name]
        listed = re.search(r"findings in all:(.*?)</p>", html, flags=re.S)
        titles = re.findall(r'</span> ([^<]*)</a>', listed.group(1)) if listed else []
        if len(titles) != len(set(titles)):
            bad.append(f"{name}: listed twice: {titles}")
        lead = root_finding(doc) or (ordered_findings(doc) or [None])[0]
        if lead is None or len((doc.get("input") or {}).get("hosts") or {}) < 2:
            continue
        multi += 1
        host = (lead.get("hosts") or [None])[0]
        want = sorted({r for f in doc["findings"] if (f.get("hosts") or [None])[0] == host for r in f.get("ranks") or []})
        shown = re.search(r"<dt>Affected ranks</dt><dd>(.*?)</dd>", html).group(1)
        if want and shown != ranges(want):
            bad.append(f"{name}: headline ranks {shown}, the lead host {host}'s are {ranges(want)}")
    assert multi >= 3, "too few multi-host reports to prove anything"
    assert not bad, "\n".join(bad)


def test_what_to_change_takes_no_flag_from_a_consequence(reports):
    """A finding that follows from another changes no flag in the relaunch: over four hosts, the NCCL
    timeouts after one node's OOM kill do not add --dist-timeout to the HiCache fix."""
    from forensics.report.document import flag_changes

    bad = []
    for name, (doc, _md) in reports.items():
        ids = {f.get("rule_id") for f in doc["findings"]}
        followers = {f.get("rule_id") for f in doc["findings"] if f.get("consequence_of") in ids}
        causes = {f.get("rule_id") for f in doc["findings"] if f.get("consequence_of") not in ids}
        bad += [f"{name}: {r.flag} from {r.rule_id}" for r in flag_changes(doc)
                if r.rule_id in followers and r.rule_id not in causes]
    assert not bad, "\n".join(bad)
    doc = reports["scenario/multihost_four_nodes_hicache"][0]
    assert [r.flag for r in flag_changes(doc)] == ["--hicache-size"]


def test_summary_lists_each_other_finding_once(reports):
    """summary.md's "Also found": a rule that fired on several hosts for one cause is one entry naming them."""
    twice = []
    for name, (_doc, md) in reports.items():
        if "### Also found" not in md:
            continue
        line = md.split("### Also found\n", 1)[1].splitlines()[0]
        keys = [re.sub(r" on `[^`]*`", "", entry, count=1) for entry in line.split("; ")]
        twice += [f"{name}: {k}" for k in set(keys) if keys.count(k) > 1]
    assert not twice, "\n".join(twice)

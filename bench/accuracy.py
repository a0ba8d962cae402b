#!/usr/bin/env python3
"""Accuracy on a corpus of real incidents: does the report name the cause and correct the right flags?

    python bench/accuracy.py                       # ../shared/incidents
    python bench/accuracy.py CORPUS... --json      # for machines
    python bench/accuracy.py --case 16             # cases whose folder name contains "16"
    python bench/accuracy.py --split               # develop and validate scores side by side

``--split`` assigns each case to *develop* or *validate* by a stable hash of its folder name (about one
third validate). Rules are written from the develop cases and their documentation; a validate case is
read only to confirm a mechanism already implemented. A gap of more than ten points between the two
scores says the rules fit cases rather than mechanisms.

A corpus is a folder of cases; a case is a folder of evidence files plus ``case.toml`` (the wanted
``category``, ``confidence``, ``project`` and ``[[expect_flag]]`` entries; see the corpus's README).
Each case goes through exactly the analysis ``forensics report`` runs (all its evidence files as
inputs), and is scored:

- **category**: the root cause's category equals the wanted one. Without a root cause (nothing high
  or critical) the most severe finding stands in; with no finding at all the answer is ``none``. A
  ``healthy`` case is right when nothing high or critical fires.
- **flags** (cases that give ``expect_flag``): right when at least one wanted flag is proposed with
  the wanted direction and within its bounds, and no wanted flag is proposed in the wrong direction.

Scored: ``high`` and ``medium`` confidence cases of the engines that are read (``--engines``);
everything else is listed, not scored.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import sys
import tomllib
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEFAULT_CORPUS = ROOT.parent / "shared" / "incidents"
SCORED_CONFIDENCE = ("high", "medium")
#: share of cases held out for validation (by hash of the folder name, so it never moves)
VALIDATE_SHARE = 1 / 3


def split_of(case_name: str) -> str:
    """``develop`` or ``validate``: a stable hash of the case's folder name, about a third validate."""
    h = int.from_bytes(hashlib.sha256(case_name.encode("utf-8")).digest()[:8], "big")
    return "validate" if h / 2**64 < VALIDATE_SHARE else "develop"


def read_engines() -> tuple[str, ...]:
    """Engines whose logs the report reads (a parser module per engine); other projects' cases are
    reported, not scored."""
    return tuple(e for e in ("sglang", "vllm") if (ROOT / "parsers" / f"{e}.py").is_file())


READ_ENGINES = read_engines()
SEVERE = ("critical", "high")

#: one name per flag, whatever alias the case or the finding uses
FLAG_ALIASES = {
    "--tp": "--tp-size", "--tensor-parallel-size": "--tp-size", "-tp": "--tp-size",
    "--dp": "--dp-size", "--data-parallel-size": "--dp-size",
    "--pp": "--pp-size", "--pipeline-parallel-size": "--pp-size",
    "--context-len": "--context-length",
}
#: what a finding writes as ``new`` when the fix is to drop the flag or variable
REMOVED = {"(remove)", "(unset)", "", None}


def canon_flag(name: str, engine: str | None = None) -> str:
    from parsers.launch.frameworks import engine_flag

    n = name.strip()
    n = engine_flag(n, engine) or n  # an RL framework's spelling (verl, slime, OpenRLHF): the engine flag it sets
    if n.startswith("-") and not n.startswith("--") and len(n) > 2:
        n = "-" + n  # -tp → --tp
    n = n.replace("_", "-") if n.startswith("--") else n
    return FLAG_ALIASES.get(n, n)


def _num(v) -> float | None:
    if v is None:
        return None
    s = str(v).strip().lower()
    for suffix in ("gib", "gb", "g"):
        if s.endswith(suffix):
            s = s[: -len(suffix)]
            break
    if s in ("true", "on", "yes"):
        return 1.0
    if s in ("false", "off", "no"):
        return 0.0
    try:
        return float(s)
    except ValueError:
        return None


@dataclass
class Case:
    name: str
    path: Path
    project: str
    category: str
    confidence: str
    evidence: str
    expect_flags: list[dict]

    @property
    def scored(self) -> bool:
        return self.confidence in SCORED_CONFIDENCE and self.project in READ_ENGINES


@dataclass
class Result:
    case: str
    project: str
    confidence: str
    scored: bool
    wanted: str
    got: str
    category_ok: bool
    root_rule: str | None = None
    severe: list[str] = field(default_factory=list)
    proposed: list[str] = field(default_factory=list)  # "--flag old→new"
    wanted_flags: list[str] = field(default_factory=list)
    flags_ok: bool | None = None  # None: the case gives no flags
    flag_notes: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def split(self) -> str:
        return split_of(self.case)


def load_cases(corpus: Path) -> list[Case]:
    cases = []
    for d in sorted(p for p in corpus.iterdir() if (p / "case.toml").is_file()):
        meta = tomllib.loads((d / "case.toml").read_text(encoding="utf-8"))
        cases.append(Case(
            name=d.name, path=d, project=str(meta.get("project", "?")), category=str(meta.get("category", "?")),
            confidence=str(meta.get("confidence", "low")), evidence=str(meta.get("evidence", "")),
            expect_flags=list(meta.get("expect_flag", [])),
        ))
    return cases


def evidence_files(case: Case) -> list[Path]:
    return sorted(p for p in case.path.rglob("*") if p.is_file() and p.name != "case.toml")


def analyse(files: list[Path]) -> dict:
    """The findings document ``forensics report`` would write for these files."""
    from forensics.analysis import analyse

    with contextlib.redirect_stderr(io.StringIO()):
        _tl, doc = analyse(files, None, quiet=True)
    return doc


def _flag_verdict(want: dict, change: dict) -> tuple[bool, str]:
    direction = want.get("direction", "set")
    old, new = change.get("old"), change.get("new")
    o, n = _num(old), _num(new)
    if direction == "remove":
        ok = new in REMOVED
    elif direction == "set":
        ok = new not in REMOVED
    elif n is None:
        ok = False
    elif direction == "lower":
        ok = o is None or n < o
    elif direction == "raise":
        ok = o is None or n > o
    else:
        ok = False
    if ok and n is not None and direction != "remove":
        if "min" in want and n < float(want["min"]) - 1e-9:
            ok = False
        if "max" in want and n > float(want["max"]) + 1e-9:
            ok = False
    bounds = "".join(f" {k}={want[k]}" for k in ("min", "max") if k in want)
    return ok, f"{want['flag']} {direction}{bounds}: proposed {old}→{new} {'ok' if ok else 'WRONG'}"


def score(case: Case, doc: dict) -> Result:
    findings = doc.get("findings", [])
    by_rule = {f["rule_id"]: f for f in findings}
    root = by_rule.get(doc.get("root_cause"))
    top = root or (findings[0] if findings else None)
    severe = [f"{f['rule_id']}:{f['category']}" for f in findings if f["severity"] in SEVERE]
    if case.category == "healthy":
        got = "healthy" if not severe else (root or findings[0])["category"]
        ok = not severe
    else:
        got = top["category"] if top else "none"
        ok = got == case.category
    changes = [c for f in findings for c in f.get("remediation", {}).get("flags", [])]
    res = Result(
        case=case.name, project=case.project, confidence=case.confidence, scored=case.scored,
        wanted=case.category, got=got, category_ok=ok, root_rule=doc.get("root_cause"), severe=severe,
        proposed=[f"{c['flag']} {c.get('old')}→{c.get('new')}" for c in changes],
        wanted_flags=[f"{w['flag']} {w.get('direction', 'set')}" for w in case.expect_flags],
    )
    if case.expect_flags:
        any_ok, any_wrong = False, False
        for want in case.expect_flags:
            for c in changes:
                if canon_flag(c["flag"], case.project) == canon_flag(want["flag"], case.project):
                    good, note = _flag_verdict(want, c)
                    res.flag_notes.append(note)
                    any_ok |= good
                    any_wrong |= not good
        res.flags_ok = any_ok and not any_wrong
    return res


def run(corpora: list[Path], only: str | None = None) -> list[Result]:
    results = []
    for corpus in corpora:
        for case in load_cases(corpus):
            if only and only not in case.name:
                continue
            try:
                doc = analyse(evidence_files(case))
            except Exception as e:  # a crash is a wrong answer, and the harness goes on
                results.append(Result(case=case.name, project=case.project, confidence=case.confidence,
                                      scored=case.scored, wanted=case.category, got="error", category_ok=False,
                                      error=f"{type(e).__name__}: {e}"))
                continue
            results.append(score(case, doc))
    return results


def totals(results: list[Result]) -> dict:
    """Scored totals by project and by wanted category, and the confusion counts."""
    out: dict = {"by_project": {}, "by_category": {}, "by_split": {}, "by_split_project": {}, "confusion": {}}
    scored = [r for r in results if r.scored]
    for key, group in (("by_project", lambda r: r.project), ("by_category", lambda r: r.wanted),
                       ("by_split", lambda r: r.split), ("by_split_project", lambda r: f"{r.split}/{r.project}")):
        buckets = defaultdict(list)
        for r in scored:
            buckets[group(r)].append(r)
        for k, rs in sorted(buckets.items()):
            flagged = [r for r in rs if r.flags_ok is not None]
            out[key][k] = {"cases": len(rs), "category_ok": sum(r.category_ok for r in rs),
                           "flag_cases": len(flagged), "flags_ok": sum(bool(r.flags_ok) for r in flagged)}
    conf = Counter((r.wanted, r.got) for r in scored)
    out["confusion"] = {f"{w} -> {g}": n for (w, g), n in sorted(conf.items())}
    flagged = [r for r in scored if r.flags_ok is not None]
    healthy = [r for r in results if r.wanted == "healthy"]
    out["all"] = {
        "cases": len(scored), "category_ok": sum(r.category_ok for r in scored),
        "flag_cases": len(flagged), "flags_ok": sum(bool(r.flags_ok) for r in flagged),
        "healthy_controls": len(healthy), "healthy_quiet": sum(r.category_ok for r in healthy),
        "no_findings": sum(r.got == "none" for r in results),
        "errors": sum(r.error is not None for r in results),
    }
    return out


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.0f} %)" if b else "–"


def print_split(tot: dict) -> None:
    """Develop and validate side by side: the gap is the measure of fitting."""
    print("\nsplit (develop = rules may be written from them; validate = held out):")
    print(f"  {'':<18} {'develop':<22} {'validate':<22}")
    rows = [("all", "")] + [(p, p) for p in READ_ENGINES]
    for label, project in rows:
        cells = []
        for split in ("develop", "validate"):
            v = tot["by_split"].get(split) if not project else tot["by_split_project"].get(f"{split}/{project}")
            cells.append(_pct(v["category_ok"], v["cases"]) if v else "–")
        print(f"  {label + ' category':<18} {cells[0]:<22} {cells[1]:<22}")
        cells = []
        for split in ("develop", "validate"):
            v = tot["by_split"].get(split) if not project else tot["by_split_project"].get(f"{split}/{project}")
            cells.append(_pct(v["flags_ok"], v["flag_cases"]) if v else "–")
        print(f"  {label + ' flags':<18} {cells[0]:<22} {cells[1]:<22}")


def print_table(results: list[Result], tot: dict, split: bool = False) -> None:
    print(f"{'case':<62} {'conf':<6} {'wanted':<25} {'got':<25} cat  flags")
    for r in results:
        mark = "ok" if r.category_ok else "MISS"
        flags = "–" if r.flags_ok is None else ("ok" if r.flags_ok else "MISS")
        scored = "" if r.scored else " (not scored)"
        if split:
            scored += f" [{r.split}]"
        print(f"{r.case[:62]:<62} {r.confidence:<6} {r.wanted:<25} {r.got:<25} {mark:<4} {flags}{scored}")
        if r.error:
            print(f"    error: {r.error}")
        if r.wanted_flags:
            print(f"    wanted flags: {', '.join(r.wanted_flags)}; proposed: {', '.join(r.proposed) or 'none'}")
    print("\nconfusion (scored cases; wanted -> got):")
    for k, n in tot["confusion"].items():
        print(f"  {n:>3}  {k}")
    print("\nby project:")
    for k, v in tot["by_project"].items():
        print(f"  {k:<8} category {_pct(v['category_ok'], v['cases'])}; flags {_pct(v['flags_ok'], v['flag_cases'])}")
    print("by category:")
    for k, v in tot["by_category"].items():
        print(f"  {k:<26} category {_pct(v['category_ok'], v['cases'])}; flags {_pct(v['flags_ok'], v['flag_cases'])}")
    a = tot["all"]
    print(f"\nscored: category {_pct(a['category_ok'], a['cases'])}; flags {_pct(a['flags_ok'], a['flag_cases'])}; "
          f"healthy controls quiet {a['healthy_quiet']}/{a['healthy_controls']}; "
          f"cases with no findings {a['no_findings']}; errors {a['errors']}")
    if split:
        print_split(tot)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", nargs="*", type=Path, help=f"case folders' parents (default {DEFAULT_CORPUS})")
    ap.add_argument("--json", action="store_true", help="print the results and totals as JSON")
    ap.add_argument("--case", help="only cases whose folder name contains this")
    ap.add_argument("--split", action="store_true", help="mark each case develop/validate and score both")
    ap.add_argument("--only", choices=("develop", "validate"), help="only the cases of one split")
    args = ap.parse_args(argv)
    corpora = args.corpus or [DEFAULT_CORPUS]
    missing = [c for c in corpora if not c.is_dir()]
    if missing:
        print(f"accuracy: no corpus at {missing[0]}", file=sys.stderr)
        return 2
    os.environ.setdefault("FORENSICS_NATIVE", os.environ.get("FORENSICS_NATIVE", "1"))
    results = run(corpora, args.case)
    if args.only:
        results = [r for r in results if r.split == args.only]
    tot = totals(results)
    if args.json:
        print(json.dumps({"results": [asdict(r) | {"split": r.split} for r in results], "totals": tot}, indent=2))
    else:
        print_table(results, tot, split=args.split or bool(args.only))
    return 0


if __name__ == "__main__":
    sys.exit(main())

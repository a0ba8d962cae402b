"""Generate docs/coverage.md: every table row of ``../shared/reference/*.md`` mapped to the rule it produces.

A row is one line of a Markdown table outside code fences (the header line and the ``|---|`` line
excluded). Its stable id is ``<file stem> §<section> «<key>»``: the section number of the heading above
it and the row's first non-empty cell with markup and runs of spaces collapsed (``#2``, ``#3`` … when
a section repeats a key). The conformance tables ``fixtures/conformance/<file stem>.toml`` say, per
row, which fixture cases test it (``[[case]] rows = [...]`` with the rule and category each must
produce) or why it is not diagnostic (``[not_diagnostic]``: by section, or by row id). A row that
neither names is *unmapped*; ``--check`` fails on one, and on a docs/coverage.md that is not current.

    python tools/reference_coverage.py            # rewrite docs/coverage.md
    python tools/reference_coverage.py --check    # exit 1 when it is stale or a row is unmapped
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "reference"
TABLES = ROOT / "fixtures" / "conformance"
OUTPUT = ROOT / "docs" / "coverage.md"

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_SECTION_NO = re.compile(r"^(\d+(?:\.\d+)*)\.?\s")
_SEPARATOR = re.compile(r"^\|[\s:|-]+\|\s*$")
_MARKUP = re.compile(r"[`*]|\\(?=\|)")
_KEY_CHARS = 60


@dataclass(frozen=True)
class Row:
    ref: str        # file stem, e.g. "failure_messages"
    section: str    # "4.4", or the heading text when it has no number
    key: str
    text: str       # the whole row, for the reader

    @property
    def id(self) -> str:
        return f"{self.ref} §{self.section} «{self.key}»"


def _cells(line: str) -> list[str]:
    """The cells of a table line; ``\\|`` inside a cell is a literal bar, not a border."""
    body = line.strip()[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    return [c.strip() for c in re.split(r"(?<!\\)\|", body)]


def _key(cells: list[str]) -> str:
    for c in cells:
        k = " ".join(_MARKUP.sub("", c).split())
        if k:
            return k[:_KEY_CHARS].rstrip()
    return "(empty)"


def rows_of(path: Path) -> list[Row]:
    """Every table row of one reference file, with its stable id."""
    out: list[Row] = []
    section, fenced, seen = "preamble", False, {}
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        h = _HEADING.match(line)
        if h:
            title = h.group(2).strip()
            m = _SECTION_NO.match(title)
            section = m.group(1) if m else " ".join(title.split())[:40]
            continue
        if not line.lstrip().startswith("|") or _SEPARATOR.match(line):
            continue
        if i + 1 < len(lines) and _SEPARATOR.match(lines[i + 1]):
            continue  # the header line of a table
        key = _key(_cells(line))
        n = seen.get((section, key), 0) + 1
        seen[(section, key)] = n
        out.append(Row(path.stem, section, key if n == 1 else f"{key} #{n}", line.strip()))
    return out


def load_tables(tables: Path = TABLES) -> dict[str, dict]:
    """``fixtures/conformance/<stem>.toml`` by stem."""
    return {p.stem: tomllib.loads(p.read_text(encoding="utf-8")) for p in sorted(tables.glob("*.toml"))}


def cases_of(tables: dict[str, dict]) -> list[dict]:
    """Every fixture case, with the table it came from as ``ref``."""
    out = []
    for stem, t in tables.items():
        for c in t.get("case", []):
            out.append({**c, "ref": stem})
    return out


def mapping(rows: list[Row], tables: dict[str, dict]) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """Row id → (status, detail), and the ids the tables name that no reference row has."""
    by_row: dict[str, list[dict]] = {}
    for c in cases_of(tables):
        for rid in c.get("rows", []):
            by_row.setdefault(f"{c['ref']} {rid}", []).append(c)
    known = {r.id for r in rows}
    stale = sorted(rid for rid in by_row if rid not in known)
    out: dict[str, tuple[str, str]] = {}
    for r in rows:
        nd = tables.get(r.ref, {}).get("not_diagnostic", {})
        local = f"§{r.section} «{r.key}»"
        cases = by_row.get(r.id)
        if cases:
            xf = [c for c in cases if c.get("xfail")]
            rules = sorted({c["rule"] for c in cases if not c.get("xfail")})
            names = ", ".join(c["name"] for c in cases)
            if rules:
                out[r.id] = ("rule", f"{', '.join(rules)} ({names})")
            else:
                out[r.id] = ("xfail", f"{xf[0]['xfail']} ({names})")
        elif local in nd:
            out[r.id] = ("not diagnostic", nd[local])
        elif f"§{r.section}" in nd:
            out[r.id] = ("not diagnostic", nd[f"§{r.section}"])
        else:
            out[r.id] = ("UNMAPPED", "")
    for stem, t in tables.items():
        for k in t.get("not_diagnostic", {}):
            if "«" in k and f"{stem} {k}" not in known:
                stale.append(f"{stem} {k}")
    return out, sorted(set(stale))


def render(reference: Path = REFERENCE, tables: Path = TABLES) -> tuple[str, list[str], list[str]]:
    """The text of docs/coverage.md, the unmapped row ids, and table entries naming no row."""
    loaded = load_tables(tables)
    rows = [r for p in sorted(reference.glob("*.md")) for r in rows_of(p)]
    status, stale = mapping(rows, loaded)
    unmapped = [rid for rid, (s, _) in status.items() if s == "UNMAPPED"]
    counts: dict[str, int] = {}
    for s, _ in status.values():
        counts[s] = counts.get(s, 0) + 1
    lines = [
        "# Coverage of the reference rows",
        "",
        "Generated by `python tools/reference_coverage.py` from `../shared/reference/*.md` and",
        "`fixtures/conformance/*.toml`; `tests/test_conformance.py` checks it is current. Each table row",
        "of a reference is named `<file> §<section> «<first cell>»`. *rule*: the rule id(s) its fixture",
        "cases must produce (the cases, in our own text, run plain, in three kinds of paste and in an",
        "envelope); *xfail*: the mechanism still missing; *not diagnostic*: why the row names no failure.",
        "Engine messages the references lack are listed at the end, with their source file and release.",
        "",
        "Totals: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ".",
        "",
    ]
    needs: dict[tuple[str, str], list[str]] = {}
    for c in cases_of(loaded):
        if c.get("xfail"):
            where = f" ({', '.join(c['xfail_in'])} only)" if c.get("xfail_in") else ""
            need = c["xfail"].removeprefix("needs: ")
            needs.setdefault((c["category"], need), []).append(f"{c['ref']}:{c['name']}{where}")
    if needs:
        lines += ["## What remains", "",
                  "The mechanisms the xfail cases still need, by the category their cause belongs to, each with "
                  "the cases that show it:", ""]
        lines += [f"- **{cat}**: {need} — {', '.join(names)}" for (cat, need), names in sorted(needs.items())]
        lines.append("")
    for stem in sorted({r.ref for r in rows}):
        lines += [f"## {stem}.md", "", "| Row | Status | Rule / reason |", "|---|---|---|"]
        for r in rows:
            if r.ref != stem:
                continue
            s, detail = status[r.id]
            cell = f"§{r.section} «{r.key}»".replace("|", "\\|")
            lines.append(f"| {cell} | {s} | {detail.replace('|', chr(92) + '|')} |")
        lines.append("")
    extra = [c for c in cases_of(loaded) if c.get("source")]
    if extra:
        lines += ["## Engine messages the references lack", "",
                  "Read in the engines' sources (file and release in the table); each case's text is ours.", "",
                  "| Case | Source | Mechanism | Status | Rule |", "|---|---|---|---|---|"]
        for c in extra:
            s = f"xfail: {c['xfail']}" if c.get("xfail") else "rule"
            cells = [c["name"], c["source"], c.get("mechanism", ""), s, f"{c['rule']} ({c['category']})"]
            lines.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
        lines.append("")
    return "\n".join(lines), unmapped, stale


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail when docs/coverage.md is stale or a row is unmapped")
    ap.add_argument("--list", action="store_true", help="print every row id with its status")
    args = ap.parse_args(argv)
    if not REFERENCE.is_dir():
        print(f"coverage: {REFERENCE} not found (the references live in ../shared)", file=sys.stderr)
        return 2
    text, unmapped, stale = render()
    if args.list:
        loaded = load_tables()
        rows = [r for p in sorted(REFERENCE.glob("*.md")) for r in rows_of(p)]
        status, _ = mapping(rows, loaded)
        for r in rows:
            print(f"{status[r.id][0]:15} {r.id}")
        return 0
    problems = [f"unmapped: {u}" for u in unmapped] + [f"names no reference row: {s}" for s in stale]
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.is_file() else ""
        if current != text:
            problems.append("docs/coverage.md is not current: run python tools/reference_coverage.py")
        for p in problems:
            print(f"coverage: {p}", file=sys.stderr)
        return 1 if problems else 0
    OUTPUT.write_text(text, encoding="utf-8")
    for p in problems:
        print(f"coverage: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

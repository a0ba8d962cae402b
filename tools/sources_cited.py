"""Audit: every rule and every module-level parser pattern names its documented source.

The convention (DEVELOPERS.md, "Citing sources") in one place, as the regexes below:

* a reference row: ``reference/failure_messages.md §2.1`` (the ``reference/`` prefix may be left out;
  the section must be a numbered heading of that file). In a module whose docstring cites exactly one
  reference file, a bare ``§2.1`` means that file's section;
* an engine or tool source line with its release: ``sglang python/sglang/srt/managers/scheduler.py
  (0.4.x)``, ``vllm vllm/v1/worker/gpu_worker.py::determine_available_memory (0.9-0.10)``,
  ``linux mm/oom_kill.c (6.x)``: a project from :data:`PROJECTS`, a path (with ``/`` or a file
  extension, ``::name`` allowed) and a release in parentheses holding a digit or ``main``;
* a format spec: one of our own docs (``docs/record.md``), a manual page (``proc(5)``), an RFC,
  ECMA, IEC or ISO standard (``RFC 1123``, ``ECMA-48``), ``YAML 1.2``, ``CommonMark 0.31``, or a
  section of the project's design (``DESIGN.md §5``).

Where a citation counts:

* a **rule** (a non-retired id of ``forensics/rules/catalog.toml``) is cited when a docstring of its
  detector module names the id and holds a citation, or when a row of ``docs/coverage.md`` whose
  status is ``rule`` names it (the row is the reference, its fixture the proof);
* a **pattern** (a module-level statement of ``parsers/``, ``forensics/facts/`` or
  ``forensics/detectors/`` that compiles a regex) is cited by a citation on its own lines or in a
  comment above it in its run (the lines up to a blank one), at most :data:`COVERS` patterns up; a
  citation in a section banner (a ``# ---`` comment at column 0) covers the patterns up to the next
  banner, and one in the module docstring covers the module's, each only when they are at most
  :data:`COVERS` (beyond that, a reader cannot tell which source is whose). A pattern that reads no
  documented format says ``source: none (why)`` on its lines or directly above them: it is listed,
  never covered by a citation above it.

    python tools/sources_cited.py          # list what is not cited; exit 1 when anything is
    python tools/sources_cited.py --words  # list patterns whose cited sections hold none of their words
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "reference"
CATALOG = ROOT / "forensics" / "rules" / "catalog.toml"
DETECTORS = ROOT / "forensics" / "detectors"
COVERAGE = ROOT / "docs" / "coverage.md"
PATTERN_ROOTS = (ROOT / "parsers", ROOT / "forensics" / "facts", ROOT / "forensics" / "detectors")

REFERENCE_FILES = ("failure_messages", "sglang_formats", "system_formats", "vllm_formats")
#: projects whose source a citation may name (their own spelling of the repository)
PROJECTS = ("sglang", "vllm", "pytorch", "nccl", "linux", "nvidia-open", "procps", "psmisc", "util-linux",
            "ray", "rocm", "flashinfer", "triton", "docker", "kubernetes", "systemd", "compose-spec",
            "cpython", "lmcache", "deepgemm", "deepep", "py-spy", "dynamo", "torch_npu", "torch_memory_saver",
            # XLA's TPU compiler (openxla/xla), whose compile-time memory checks vLLM on TPU reports
            "xla",
            # the RL frameworks that start the engines as rollout engines, and the formats they read
            "verl", "slime", "openrlhf", "areal", "hydra", "safetensors",
            # the Slurm launcher of SGLang disaggregated deployments (NVIDIA/srt-slurm), whose recipes name the env
            "srt-slurm")
#: one citation in a module docstring or a section banner covers at most this many patterns
COVERS = 6

_SECTION = r"§\s?(\d+(?:\.\d+)?)"
#: a reference file and the sections that follow it (``vllm_formats.md §2.4 (V0), §2.5`` names both)
REFERENCE_CITE = re.compile(r"\b(?:reference/)?(" + "|".join(REFERENCE_FILES) + r")\.md\b"
                            r"((?:(?:[ ,;/–-]|\band\b|\bor\b)*§\s?\d+(?:\.\d+)?(?:\s*\([^()]{0,300}\))?)*)")
_SECTION_NO = re.compile(_SECTION)
BARE_SECTION = re.compile(r"(?<![\w.])" + _SECTION)
ENGINE_CITE = re.compile(
    r"\b(" + "|".join(map(re.escape, PROJECTS)) + r")\s+"
    r"((?:[\w.-]+/)+[\w.*-]+|[\w-]+\.(?:py|c|cpp|cc|h|hpp|cu|go|rs|rst|md|txt|json|yaml))(?:::[\w.]+)?"
    r"[^()]{0,80}?\(\s*(v?\d[\w.+*-]*|main\b|V[01]\b)"  # the release opens the parentheses
)
SPEC_CITE = re.compile(
    r"\bdocs/[\w-]+\.md\b|\b[A-Za-z][\w.-]*\([1-8]\)|\bRFC ?\d{3,4}\b|\bECMA-\d+\b|\bIEC \d+(?:-\d+)?\b|"
    r"\bISO \d+(?:-\d+)?\b|\bYAML 1\.\d\b|\bCommonMark 0\.\d+\b|\bDESIGN\.md §\d+"
)
#: what a pattern that reads no documented format says of itself (it is then listed, never covered from above)
NO_SOURCE = re.compile(r"\bsource: none\b")
_RULE_ID = re.compile(r"\b(?:SGL|VLLM)-[A-Z]+-\d{3}\b")
_BANNER = re.compile(r"^# ?(?:-{3,}|={3,})")
_HEADING_NO = re.compile(r"^#{2,6}\s+(\d+(?:\.\d+)*)\.?\s")


@dataclass(frozen=True)
class Missing:
    key: str    # the rule id, or ``path::NAME`` of a pattern (stable across edits that move lines)
    where: str  # the rule id, or ``path:line``
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


def reference_sections(folder: Path = REFERENCE) -> dict[str, set[str]] | None:
    """Numbered headings of each reference file (``{"failure_messages": {"1", "1.1", …}}``); None without them."""
    if not folder.is_dir():
        return None
    out: dict[str, set[str]] = {}
    for name in REFERENCE_FILES:
        path = folder / f"{name}.md"
        if path.exists():
            out[name] = {m.group(1) for line in path.read_text(encoding="utf-8").splitlines()
                         if (m := _HEADING_NO.match(line))}
    return out


def citations(text: str, default_reference: str | None = None, sections: dict[str, set[str]] | None = None,
              root: Path = ROOT) -> list[str]:
    """The citations in ``text`` that the convention accepts (a reference's section is checked when known)."""
    found: list[str] = []
    for m in REFERENCE_CITE.finditer(text):
        name = m.group(1)
        for section in _SECTION_NO.findall(m.group(2)):  # a file alone names no row
            if sections is None or name not in sections or section in sections[name]:
                found.append(f"{name}.md §{section}")
    if default_reference:
        stripped = REFERENCE_CITE.sub("", text)
        for m in BARE_SECTION.finditer(stripped):
            known = sections.get(default_reference) if sections else None
            if known is None or m.group(1) in known:
                found.append(f"{default_reference}.md §{m.group(1)}")
    found += [m.group(0) for m in ENGINE_CITE.finditer(text)]
    for m in SPEC_CITE.finditer(text):
        cite = m.group(0)
        if cite.startswith("docs/") and not (root / cite).exists():
            continue
        found.append(cite)
    return found


# --------------------------------------------------------------------------------------------
# rules


def catalog_rules(path: Path = CATALOG) -> dict[str, str]:
    """Rule id → detector module of every rule still in use."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return {t["id"]: t["detector"] for t in data.get("rule", []) if not t.get("retired")}


def coverage_rule_ids(path: Path = COVERAGE) -> set[str]:
    """The rule ids that a ``rule`` row of docs/coverage.md maps a reference row or an engine message to."""
    ids: set[str] = set()
    if not path.exists():
        return ids
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[-2] == "rule":
            ids.update(_RULE_ID.findall(cells[-1]))
    return ids


def _docstrings(tree: ast.Module) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append(doc)
    return out


def uncited_rules(sections: dict[str, set[str]] | None = None) -> list[Missing]:
    mapped = coverage_rule_ids()
    missing = []
    docs_by_module: dict[str, list[str]] = {}
    for rule_id, detector in sorted(catalog_rules().items()):
        if rule_id in mapped:
            continue
        if detector not in docs_by_module:
            path = DETECTORS / f"{detector}.py"
            docs_by_module[detector] = _docstrings(ast.parse(path.read_text(encoding="utf-8"))) if path.exists() else []
        if not any(rule_id in d and citations(d, sections=sections) for d in docs_by_module[detector]):
            missing.append(Missing(rule_id, rule_id, f"no docstring of forensics/detectors/{detector}.py names it with a "
                                            "source, and no rule row of docs/coverage.md maps to it"))
    return missing


# --------------------------------------------------------------------------------------------
# patterns


def _compiles(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "compile"
                and isinstance(sub.func.value, ast.Name) and sub.func.value.id in ("re", "regex", "std_re", "_re")):
            return True
    return False


def _run_comments(lines: list[str], first: int, starts: set[int]) -> str:
    """The comments above line ``first`` in its run (the lines up to a blank one), over at most COVERS patterns."""
    out, crossed, i = [], 0, first
    while i > 0 and lines[i - 1].strip():
        i -= 1
        if i in starts:
            crossed += 1
            if crossed >= COVERS:
                break
        elif lines[i].lstrip().startswith("#"):
            out.append(_uncomment(lines[i]))
    return "\n".join(reversed(out))


def _uncomment(line: str) -> str:
    """A comment line's text, so that a citation wrapped over two lines reads as one."""
    return line.lstrip().lstrip("#:").strip()


def _comments_directly_above(lines: list[str], first: int) -> str:
    i = first
    while i > 0 and lines[i - 1].lstrip().startswith("#"):
        i -= 1
    return "\n".join(lines[i:first])


def _banners(lines: list[str]) -> list[tuple[int, str]]:
    """Each section banner (a ``# ---`` comment at column 0): its line index and its comment block."""
    out = []
    for i, line in enumerate(lines):
        if _BANNER.match(line):
            j = i
            while j + 1 < len(lines) and lines[j + 1].startswith("#"):
                j += 1
            out.append((i, "\n".join(map(_uncomment, lines[i:j + 1]))))
    return out


def module_default_reference(doc: str) -> str | None:
    """The one reference file a module's docstring names, which its bare ``§N`` sections refer to."""
    names = {m.group(1) for m in REFERENCE_CITE.finditer(doc or "")}
    return names.pop() if len(names) == 1 else None


@dataclass(frozen=True)
class Pattern:
    node: ast.Assign | ast.AnnAssign
    name: str
    scope: str                 # the text whose citations count for it
    default_reference: str | None
    no_source: bool            # it says ``source: none``


def patterns_in(path: Path, sections: dict[str, set[str]] | None = None, root: Path = ROOT) -> list[Pattern]:
    """The module-level patterns of one module, each with the text its citations may stand in."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    lines = text.splitlines()
    doc = ast.get_docstring(tree, clean=False) or ""
    default = module_default_reference(doc)
    stmts = [n for n in tree.body if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None
             and _compiles(n.value)]
    doc_counts = len(stmts) <= COVERS and bool(citations(doc, sections=sections, root=root))
    banners = _banners(lines)
    starts = {n.lineno - 1 for n in stmts}
    section_of = [max((k for k, (at, _) in enumerate(banners) if at < n.lineno - 1), default=None) for n in stmts]
    out = []
    for node, section in zip(stmts, section_of, strict=True):
        first, last = node.lineno - 1, node.end_lineno or node.lineno
        own = "\n".join(lines[first:last])
        name = ast.unparse(node.targets[0] if isinstance(node, ast.Assign) else node.target)
        scope = [own, _run_comments(lines, first, starts)]
        if section is not None and section_of.count(section) <= COVERS:
            scope.append(banners[section][1])
        if doc_counts:
            scope.append(doc)
        no_source = bool(NO_SOURCE.search(own + "\n" + _comments_directly_above(lines, first)))
        out.append(Pattern(node, name, "\n".join(scope), default, no_source))
    return out


def uncited_patterns_in(path: Path, sections: dict[str, set[str]] | None = None, root: Path = ROOT) -> list[Missing]:
    rel = path.relative_to(root).as_posix()
    missing = []
    for p in patterns_in(path, sections, root):
        where = f"{rel}:{p.node.lineno}"
        if p.no_source:
            missing.append(Missing(f"{rel}::{p.name}", where, f"pattern {p.name}: no documented format"))
        elif not citations(p.scope, p.default_reference, sections, root):
            missing.append(Missing(f"{rel}::{p.name}", where, f"pattern {p.name} cites no source"))
    return missing


def pattern_modules() -> list[Path]:
    return sorted(p for root in PATTERN_ROOTS for p in root.rglob("*.py"))


def uncited_patterns(sections: dict[str, set[str]] | None = None) -> list[Missing]:
    return [m for p in pattern_modules() for m in uncited_patterns_in(p, sections)]


# --------------------------------------------------------------------------------------------
# words: does the cited reference section hold what the pattern matches? (a report, for review)


def section_text(name: str, section: str, folder: Path = REFERENCE) -> str:
    """The text of one numbered section of a reference (with its subsections), markup and case folded."""
    out, inside = [], False
    for line in (folder / f"{name}.md").read_text(encoding="utf-8").splitlines():
        m = _HEADING_NO.match(line)
        if m:
            number = m.group(1)
            if inside and number != section and not number.startswith(section + "."):
                break
            inside = inside or number == section
        if inside:
            out.append(line)
    return " ".join(" ".join(out).replace("`", "").split()).lower()


def literal_runs(pattern: str, shortest: int = 10) -> list[str]:
    """The literal stretches of a regex (what any match of that branch must contain), folded, of some length."""
    import re._parser as sre  # the stdlib's own parse of the pattern: no guessing at escapes

    runs: list[str] = []

    def walk(items) -> None:
        cur: list[str] = []
        for op, arg in items:
            if op is sre.LITERAL:
                cur.append(chr(arg))
                continue
            runs.append("".join(cur))
            cur = []
            if op is sre.SUBPATTERN:
                walk(arg[-1])
            elif op is sre.BRANCH:
                for branch in arg[1]:
                    walk(branch)
        runs.append("".join(cur))

    try:
        walk(sre.parse(pattern))
    except Exception:  # a pattern only the regex module reads
        return []
    return [" ".join(r.lower().split()) for r in runs if len(r.strip()) >= shortest and re.search("[a-z]{4}", r.lower())]


def _compiled(obj) -> list[str]:
    if hasattr(obj, "pattern") and isinstance(obj.pattern, str):
        return [obj.pattern]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, list | tuple):
        return [p for o in obj for p in _compiled(o)]
    return []


def unmatched_words(sections: dict[str, set[str]]) -> list[str]:
    """Patterns whose cited reference sections hold none of their literal words: a citation to check by eye."""
    import importlib

    sys.path.insert(0, str(ROOT))
    out = []
    for path in pattern_modules():
        module = importlib.import_module(path.relative_to(ROOT).with_suffix("").as_posix().replace("/", "."))
        for p in patterns_in(path, sections):
            cites = [c for c in citations(p.scope, p.default_reference, sections) if ".md §" in c]
            words = [w for pat in _compiled(getattr(module, p.name, None)) for w in literal_runs(pat)]
            if not cites or not words:
                continue
            text = " ".join(section_text(c.split(".md")[0], c.split("§")[1]) for c in cites)
            if not any(w.strip() in text for w in words):
                out.append(f"{path.relative_to(ROOT)}:{p.node.lineno}: {p.name} ({', '.join(sorted(set(cites)))}) "
                           f"holds none of {words[:3]}")
    return out


def main() -> int:
    sections = reference_sections()
    if "--words" in sys.argv[1:]:
        if sections is None:
            print("needs ../shared/reference", file=sys.stderr)
            return 2
        for line in unmatched_words(sections):
            print(line)
        return 0
    missing = uncited_rules(sections) + uncited_patterns(sections)
    for m in missing:
        print(m)
    print(f"{len(missing)} without a cited source", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())

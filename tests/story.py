"""What "one story" means for text people read, shared by the report's and ``check``'s consistency tests:
every comparison in one unit (a product in the flag's unit is converted before it is compared), and no
formula cut with "…"."""

from __future__ import annotations

import re

QUANTITY = r"(\d[\d,]*(?:\.\d+)?)\s*(KiB|MiB|GiB|TiB|KB|MB|GB|TB)\b"
#: a quantity, a comparison, and the first quantity after it (names and words may stand between)
COMPARISON = re.compile(QUANTITY + r"[^≤≥<>;.\n]{0,20}?\s(≤|≥|<|>|exceeds|is above|is below)\s[^;\n]{0,80}?"
                        + QUANTITY)
#: "8 ranks × 300 GB (a note) = 2235.17 GiB": a product whose result changes unit in the same step
PRODUCT = re.compile(r"\d+ [a-zA-Z ]{0,20}× " + QUANTITY + r"(?: \((?:[^()]|\([^()]*\))*\))? = " + QUANTITY)


def family(unit: str) -> str:
    return "binary" if "i" in unit else "decimal"


def mixed_units(text: str) -> list[str]:
    """The comparisons and products of ``text`` whose two sides are in different unit families."""
    out = [m.group(0) for m in COMPARISON.finditer(text) if family(m.group(2)) != family(m.group(5))]
    out += [m.group(0) for m in PRODUCT.finditer(text) if family(m.group(2)) != family(m.group(4))]
    return out


def cut_formulas(text: str) -> list[str]:
    """Lines that stop a formula with "…" (a list's own "… more" and a code line's elision aside)."""
    return [line for line in text.splitlines()
            if "…" in line and re.search(r"[=≤≥×÷−]", line.split("…")[0][-120:])
            and not line.lstrip().startswith(("- `", "… more"))]

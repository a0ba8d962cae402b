"""Every real SGLang log in ../shared, wrapped in every envelope we peel, reads like the bare log.

The logs are read at test time (never copied); the envelopes are written by our own writers
(tests/envelope_wrappers.py). Same SGLang rows (kind, rank, run and the figures), the same findings,
and provenance on the original file's lines. Skips when ../shared is absent.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from shared_data import SHARED, SKIP_REASON

from forensics.detectors import run_all
from forensics.timeline import build_timeline
from tests.envelope_wrappers import WRAPPERS

REAL = SHARED / "sglang_real_logs"
FILES = sorted(REAL.glob("*.log")) if REAL.is_dir() else []
#: The figures a row is compared on.
ROW_KEYS = ("kind", "rank", "run", "tp_rank", "gpu", "bytes", "avail_bytes", "total_bytes", "tokens", "ratio",
            "seconds", "count", "code")

_bare_cache: dict[Path, tuple] = {}


def _read(path: Path, with_lines: bool) -> tuple[Counter, list[tuple], str | None, list[tuple]]:
    tl = build_timeline([path])
    ev = tl.events.filter(tl.events.get_column("source") == "sglang")
    keys = (*ROW_KEYS, "line", "line_end") if with_lines else ROW_KEYS
    rows = Counter(ev.select(keys).rows())
    findings, root = run_all(tl)
    figs = [(f.rule_id, f.category, f.severity, tuple(f.ranks), tuple(f.gpus)) for f in findings]
    ev_lines = sorted((f.rule_id, e.line) for f in findings for e in f.evidence) if with_lines else []
    return rows, figs, root, ev_lines


def _bare(path: Path, with_lines: bool) -> tuple:
    key = (path, with_lines)
    if key not in _bare_cache:
        _bare_cache[key] = _read(path, with_lines)  # type: ignore[index]
    return _bare_cache[key]  # type: ignore[index]


@pytest.mark.skipif(not FILES, reason=f"{SKIP_REASON}: sglang_real_logs not present")
@pytest.mark.parametrize("envelope", sorted(WRAPPERS))
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name[:3])
def test_wrapped_real_log_reads_like_bare(path: Path, envelope: str, tmp_path: Path) -> None:
    wrap, one_to_one = WRAPPERS[envelope]
    lines = path.read_text(encoding="utf-8").splitlines()
    wrapped = wrap(lines)
    out = tmp_path / f"{path.stem}.{envelope}.log"
    if isinstance(wrapped, bytes):
        out.write_bytes(wrapped)
    else:
        out.write_text(wrapped, encoding="utf-8", newline="")
    # provenance: where each original line stays one line, rows and evidence keep their line numbers
    rows0, figs0, root0, ev0 = _bare(path, one_to_one)
    rows1, figs1, root1, ev1 = _read(out, one_to_one)
    same = sum((rows0 & rows1).values())
    total = sum(rows0.values())
    assert same >= 0.9 * total, f"{envelope}: {same}/{total} rows; missing {list((rows0 - rows1).elements())[:5]}"
    assert same == total, f"{envelope}: {same}/{total}; missing {list((rows0 - rows1).elements())[:3]}"
    assert figs1 == figs0 and root1 == root0
    assert ev1 == ev0

"""Findings on the real SGLang logs and research samples in ../shared (read at test time, never copied).

Each file's header comment and name say what the incident was. A file that shows a failure line must
get the right category (as the root cause, or at least present where the failure is not fatal); an
excerpt of a healthy start-up or of serving must get no critical/high finding. Skips when ../shared
is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_data import SHARED, SKIP_REASON

from forensics.detectors import run_all
from forensics.model import SEVERITY_RANK
from forensics.timeline import build_timeline

REAL = SHARED / "sglang_real_logs"
SAMPLES = SHARED / "research_samples"

ROOT = "root"  # the root cause has this category
HAS = "has"  # a finding of this category, nothing critical/high
HEALTHY = "healthy"  # nothing critical/high

#: file-name prefix → (what we expect, category); from each file's '# what:' header.
REAL_EXPECTED = {
    "01_": (ROOT, "cuda_graph_headroom"),  # torch OOM during CUDA-graph capture on GPU 7
    "02_": (ROOT, "other"),  # capture fails inside flashinfer, not an OOM: no headroom advice
    "03_": (HEALTHY, None),  # normal TP8 start-up
    "04_": (HEALTHY, None),  # EAGLE draft start-up
    "06_": (HEALTHY, None),  # 8 × 120 GB HiCache allocation, no host figures and no failure in the excerpt
    "07_": (ROOT, "per_rank_overallocation"),  # HiCache 'Not enough host memory' (0.4.2-0.4.9 form)
    "08_": (ROOT, "per_rank_overallocation"),  # the same refusal on a host with HugePages reserved
    "09_": (ROOT, "weights_do_not_fit"),  # 'Not enough memory … increase --mem-fraction-static', f = 0.2
    "10_": (ROOT, "kv_cache_capacity"),  # KV exhaustion; traceback cut at the allocator's raise
    "11_": (ROOT, "kv_cache_capacity"),
    "12_": (ROOT, "kv_cache_capacity"),
    "13_": (ROOT, "kv_cache_capacity"),
    "14_": (HEALTHY, None),  # decode at 94% usage; the allocation failure itself is not in the excerpt
    "15_": (HAS, "kv_cache_capacity"),  # one retraction ('Decode out of memory happened'): pressure, not a crash
    "16_": (HEALTHY, None),  # reference decode lines
    # rank 3 reached SGLang's post-load monitored barrier and rank 0 reported others that did not: the wait of
    # SGL-NCCL-005 (which ranks failed to arrive, and why, is in rank 0's log, not in the excerpt)
    "17_": (ROOT, "nccl_timeout"),
    "18_": (ROOT, "nccl_timeout"),  # ranks that did not finish loading: the cause is on another node
    "19_": (ROOT, "kernel_oom_killer"),  # rank 0 SIGKILLed (exit -9), no kernel log: suspected OOM killer
    "20_": (ROOT, "stranded_context"),  # a CI harness found the GPU still held by a dead run's pid
    "21_": (HEALTHY, None),  # weight loading only; the NCCL timeout of the thread is not in the excerpt
    "22_": (HEALTHY, None),  # start-up part only under a compose prefix
    "23_": (HEALTHY, None),  # capture and sizing, 6.95 GB left
    "24_": (ROOT, "other"),  # init failure after weight load (kvcached attention type)
    "25_": (HEALTHY, None),  # v0.2 start-up
}

#: research-sample folder → expectation for every file in it (file-specific exceptions below).
SAMPLE_FOLDERS = {
    "oom": (ROOT, "kernel_oom_killer"),
    "free": (HEALTHY, None),
    "meminfo": (HEALTHY, None),
    "nvidia_smi": (HEALTHY, None),
    "hung_task": (HEALTHY, None),
    "xid_catalog": (HEALTHY, None),
    "nvrm_xid": (ROOT, "xid"),
}
SAMPLE_FILES = {
    "nvrm_xid/02_": (HAS, "xid"),  # Xid 13 (application fault) then 43: medium, not a root cause
    "kernel_log/01_": (ROOT, "kernel_oom_killer"),
    # nvidia-smi's own failure output (system_formats.md §2.5): a GPU whose handle is lost is the Xid 79 class
    "nvidia_smi/38_": (ROOT, "xid"),
    "nvidia_smi/39_": (ROOT, "xid"),
}
for _i in range(2, 13):
    SAMPLE_FILES[f"kernel_log/{_i:02d}_"] = (ROOT, "kernel_oom_killer")  # the same OOM block in 12 formats
for _i in range(13, 17):
    SAMPLE_FILES[f"kernel_log/{_i:02d}_"] = (HEALTHY, None)  # boot messages, rule files, old syslog


def _real_files() -> list[Path]:
    return sorted(p for p in REAL.glob("*.log")) if REAL.is_dir() else []


def _sample_files() -> list[Path]:
    if not SAMPLES.is_dir():
        return []
    return sorted(p for p in SAMPLES.rglob("*") if p.is_file() and p.name != "INDEX.md")


def _expectation_for_sample(path: Path) -> tuple[str, str | None]:
    rel = path.relative_to(SAMPLES).as_posix()
    for prefix, exp in SAMPLE_FILES.items():
        if rel.startswith(prefix):
            return exp
    return SAMPLE_FOLDERS.get(rel.split("/", 1)[0], (HEALTHY, None))


def _check(path: Path, expect: str, category: str | None) -> None:
    tl = build_timeline([path])
    findings, root = run_all(tl)
    text = "; ".join(f"{f.rule_id}/{f.category}/{f.severity}/{f.confidence}: {f.summary[:120]}" for f in findings)
    severe = [f for f in findings if SEVERITY_RANK[f.severity] <= SEVERITY_RANK["high"]]
    if expect == ROOT:
        lead = next(f for f in findings if f.rule_id == root) if root else None
        assert lead is not None and lead.category == category, f"{path.name}: root {root} — {text}"
        assert lead.evidence, path.name
    elif expect == HAS:
        assert category in {f.category for f in findings}, f"{path.name}: {text}"
        assert not severe, f"{path.name}: {text}"
    else:
        assert not severe, f"{path.name}: false critical/high — {text}"


@pytest.mark.skipif(not _real_files(), reason=f"{SKIP_REASON}: sglang_real_logs not present")
@pytest.mark.parametrize("path", _real_files(), ids=lambda p: p.name[:3])
def test_real_sglang_log(path: Path) -> None:
    exp = next((v for k, v in REAL_EXPECTED.items() if path.name.startswith(k)), None)
    if exp is None:
        pytest.skip(f"no expectation written for {path.name} yet")
    _check(path, *exp)


@pytest.mark.skipif(not _sample_files(), reason=f"{SKIP_REASON}: research_samples not present")
@pytest.mark.parametrize("path", _sample_files(), ids=lambda p: f"{p.parent.name}/{p.name[:3]}")
def test_research_sample(path: Path) -> None:
    _check(path, *_expectation_for_sample(path))


@pytest.mark.skipif(not _real_files(), reason=f"{SKIP_REASON}: sglang_real_logs not present")
def test_every_real_log_has_an_expectation() -> None:
    missing = [p.name for p in _real_files() if not any(p.name.startswith(k) for k in REAL_EXPECTED)]
    assert not missing, missing


@pytest.mark.skipif(not _real_files(), reason=f"{SKIP_REASON}: sglang_real_logs not present")
def test_real_failures_name_what_they_can() -> None:
    """Spot checks of the figures, not only the category."""
    def findings_of(prefix: str):
        (path,) = [p for p in _real_files() if p.name.startswith(prefix)]
        # SGL-RUN-002 (failure lines no finding cites) is checked by its own tests
        return [f for f in run_all(build_timeline([path]))[0] if f.rule_id != "SGL-RUN-002"]

    (capture,) = findings_of("01_")
    # the GPU (H20, 95 GiB) is named in the excerpt's header: its capacity is known, one reason fewer
    assert capture.rule_id == "SGL-GPU-002" and capture.gpus == [7] and capture.confidence == "medium"
    (kv,) = findings_of("10_")
    assert kv.rule_id == "SGL-KV-002" and kv.confidence == "medium" and kv.ranks == [0]
    (dead,) = findings_of("19_")
    assert dead.rule_id == "SGL-HOST-005" and dead.figures["exit_code"] == -9 and dead.confidence == "low"
    (loading,) = findings_of("18_")
    assert loading.rule_id == "SGL-NCCL-005" and loading.ranks == [1]
    assert all(not e.text.startswith("#") for e in loading.evidence)  # header notes are no evidence
    (graph,) = findings_of("02_")
    assert graph.rule_id == "SGL-RUN-001" and "flashinfer" in graph.summary

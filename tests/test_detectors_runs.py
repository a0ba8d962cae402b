"""Several server runs in one log, the catch-all and SIGKILL rules, Xid → GPU mapping, action text.

Hand-built timelines (no parsers): each test states the facts of each run and checks that no fact
of one run leaks into another's finding.
"""

from __future__ import annotations

import re

from test_detectors_common import GIB, timeline

from forensics.detectors import run_all, stranded_context
from forensics.detectors import xid as xid_detector

LOG = "logs/sglang.log"


def _run(run: int, start: int, fraction: float, *, crash: bool = False, weights_fail: bool = False) -> list[dict]:
    """One server run from its server_args dump: start-up, serving, and optionally a CUDA OOM."""
    rows = [
        {"kind": "server_args", "run": run, "line": start, "file": LOG,
         "attrs": {"args": {"mem_fraction_static": fraction, "tp_size": 2}}},
        {"kind": "weight_load_begin", "run": run, "line": start + 1, "file": LOG, "rank": "TP0", "tp_rank": 0,
         "avail_bytes": 78 * GIB},
    ]
    if weights_fail:
        return rows + [{"kind": "not_enough_memory", "run": run, "line": start + 2, "file": LOG, "rank": "TP0",
                        "tp_rank": 0, "ratio": fraction}]
    rows += [
        {"kind": "weight_load_end", "run": run, "line": start + 2, "file": LOG, "rank": "TP0", "tp_rank": 0,
         "avail_bytes": 47 * GIB},
        {"kind": "cuda_graph_end", "run": run, "line": start + 3, "file": LOG, "rank": "TP0", "tp_rank": 0,
         "avail_bytes": int((1 - fraction) * 78 * GIB) - 2 * GIB},
        {"kind": "decode_batch", "run": run, "line": start + 4, "file": LOG, "rank": "TP0", "tp_rank": 0,
         "ratio": 0.3, "tokens": 1000},
    ]
    if crash:
        rows.append({"kind": "cuda_oom", "run": run, "line": start + 5, "file": LOG, "rank": "TP1", "tp_rank": 1,
                     "gpu": 1, "bytes": 4 * GIB, "free_bytes": GIB // 2, "total_bytes": 79 * GIB})
    return rows


def test_each_run_keeps_its_own_flags_and_the_incident_is_the_last_failure():
    # run 0 died of weights that do not fit at 0.5; run 1 (0.93) crashed with CUDA OOM while serving
    tl = timeline(*_run(0, 1, 0.5, weights_fail=True), *_run(1, 20, 0.93, crash=True))
    findings, root = run_all(tl)
    by_rule = {f.rule_id: f for f in findings}
    assert root == "SGL-GPU-001", [(f.rule_id, f.summary) for f in findings]  # not GPU-004, which ranks first
    gpu1, gpu4 = by_rule["SGL-GPU-001"], by_rule["SGL-GPU-004"]
    assert (gpu1.figures["run"], gpu1.figures["run_started"]) == (1, f"{LOG}:20")
    assert (gpu4.figures["run"], gpu4.figures["run_started"]) == (0, f"{LOG}:1")
    assert gpu1.summary.startswith(f"Run 1 (started {LOG}:20): ")
    assert [c.old for c in gpu1.remediation.flags] == ["0.93"]
    assert gpu4.figures["mem_fraction_static"] == 0.5
    assert all(e.line >= 20 for e in gpu1.evidence) and all(e.line < 20 for e in gpu4.evidence)


def test_same_rule_in_two_runs_puts_the_incident_first():
    tl = timeline(*_run(0, 1, 0.91, crash=True), *_run(1, 20, 0.95, crash=True))
    findings, root = run_all(tl)
    gpu1 = [f for f in findings if f.rule_id == "SGL-GPU-001"]
    assert root == "SGL-GPU-001" and [f.figures["run"] for f in gpu1] == [1, 0]
    assert [c.old for c in gpu1[0].remediation.flags] == ["0.95"]


def test_a_healthy_later_run_leaves_the_earlier_crash_as_root():
    tl = timeline(*_run(0, 1, 0.93, crash=True), *_run(1, 20, 0.80))
    findings, root = run_all(tl)
    assert root == "SGL-GPU-001"
    assert next(f for f in findings if f.rule_id == "SGL-GPU-001").figures["run"] == 0
    assert not any(f.figures.get("run") == 1 and f.severity in ("critical", "high") for f in findings)


def test_single_run_findings_carry_no_run():
    findings, _ = run_all(timeline(*_run(0, 1, 0.93, crash=True)))
    assert findings and all("run" not in f.figures and not f.summary.startswith("Run ") for f in findings)


def test_causes_link_only_within_their_run():
    # run 0: a scheduler exception nobody explains; run 1: KV pool exhaustion; NCCL timeout in run 0
    tl = timeline(
        {"kind": "server_args", "run": 0, "line": 1, "file": LOG, "attrs": {"args": {"tp_size": 2}}},
        {"kind": "nccl_watchdog", "run": 0, "line": 2, "file": LOG, "count": 1580, "rank": "TP0", "tp_rank": 0},
        {"kind": "server_args", "run": 1, "line": 10, "file": LOG, "attrs": {"args": {"tp_size": 2}}},
        {"kind": "kv_exhausted", "run": 1, "line": 11, "file": LOG, "tokens": 4096, "rank": "TP0", "tp_rank": 0},
    )
    findings, root = run_all(tl)
    nccl = next(f for f in findings if f.rule_id == "SGL-NCCL-002")
    assert nccl.consequence_of is None and nccl.figures["run"] == 0  # KV-002 of run 1 did not cause it
    assert root == "SGL-KV-002"


def test_catch_all_reports_an_unexplained_death_and_steps_aside_for_a_cause():
    alone = timeline(
        {"kind": "scheduler_exception", "line": 3, "rank": "TP1", "tp_rank": 1,
         "text": "Scheduler hit an exception: Traceback\n  File \"/x/sglang/srt/layers/attention/fa.py\", line 9, in "
                 "init\n    raise NotImplementedError(\"sliding window\")",
         "attrs": {"exception_type": "NotImplementedError", "exception_message": "sliding window"}},
        {"kind": "sigquit", "line": 5},
    )
    findings, root = run_all(alone)
    (f,) = findings
    assert (f.rule_id, f.category, root, f.confidence) == ("SGL-RUN-001", "other", "SGL-RUN-001", "medium")
    assert "NotImplementedError" in f.summary and f.evidence[0].line == 3
    cut = timeline({"kind": "sigquit", "line": 1})
    assert [(g.rule_id, g.confidence) for g in run_all(cut)[0]] == [("SGL-RUN-001", "low")]
    explained = timeline(*_run(0, 1, 0.93, crash=True), {"kind": "sigquit", "run": 0, "line": 9, "file": LOG})
    assert "SGL-RUN-001" not in {g.rule_id for g in run_all(explained)[0]}


def test_sigkill_without_kernel_log_is_suspected_oom_and_a_kernel_log_settles_it():
    dead = {"kind": "rank_dead", "line": 4, "tp_rank": 2, "code": -9, "text": "Rank 2 scheduler is dead."}
    findings, root = run_all(timeline(dead))
    assert root == "SGL-HOST-005" and findings[0].confidence == "low" and findings[0].ranks == [2]
    assert "SGL-RUN-001" not in {f.rule_id for f in findings}
    oom = {"kind": "oom_kill", "source": "kernel", "file": "dmesg.txt", "line": 1, "pid": 41, "comm": "sglang::schedul",
           "used_bytes": GIB}
    got = {f.rule_id for f in run_all(timeline(oom, dead))[0]}
    assert "SGL-HOST-004" in got and "SGL-HOST-005" not in got
    other_code = dict(dead, code=1)
    assert "SGL-HOST-005" not in {f.rule_id for f in run_all(timeline(other_code))[0]}


def test_xid_and_fallen_off_bus_name_the_gpu_by_pci_bus_id():
    smi = [{"kind": "gpu_memory", "source": "nvidia_smi_csv", "file": "smi.csv", "line": i + 2, "gpu": i,
            "used_bytes": GIB, "total_bytes": 80 * GIB, "attrs": {"pci_bus_id": f"00000000:{b}:00.0"}}
           for i, b in enumerate(["18", "9B", "DB"])]
    xid = {"kind": "xid", "source": "kernel", "file": "kern.txt", "line": 1, "code": 48,
           "attrs": {"pci_bus_id": "0000:db:00"}}
    probe = {"kind": "gpu_fallen_off_bus", "source": "kernel", "file": "kern.txt", "line": 3,
             "attrs": {"pci_bus_id": "0000:9b:00", "at_probe": True}}
    (f,) = xid_detector.detect(timeline(*smi, xid, probe))
    assert f.gpus == [1, 2] and f.figures["xid_counts"] == {"48": 1, "79": 1}
    assert "GPU 1" in f.summary and "GPU 2" in f.summary
    # without nvidia-smi the bus id is named instead
    (g,) = xid_detector.detect(timeline(xid))
    assert g.gpus == [] and "0000:db:00" in g.summary


def test_no_action_carries_its_own_number():
    numbered = re.compile(r"^\s*\(?\d+[.)]\s")
    assert not any(numbered.match(a) for a in stranded_context.ESCALATION)
    for folder in ("seed_example_bundle", "two_runs_second_crashes", "rank_sigkilled_no_kernel_log"):
        from test_scenarios import SCENARIOS, analyse
        _, findings, _ = analyse(SCENARIOS / folder)
        for f in findings:
            bad = [a for a in f.remediation.actions if numbered.match(a)]
            assert not bad, (f.rule_id, bad)


def test_report_shows_the_run_and_marks_one_root():
    from forensics import rules
    from forensics.report import findings_view, render_markdown
    from forensics.report.findings import to_document

    tl = timeline(*_run(0, 1, 0.91, crash=True), *_run(1, 20, 0.95, crash=True))
    doc = to_document(*run_all(tl), tl)
    md = render_markdown(doc, rules.load_catalog(), tl)
    assert f"Run 1 (started {LOG}:20)" in md and "`SGL-GPU-001` (run 0)" in md
    view = findings_view(doc, rules.load_catalog())
    assert [v["f"]["figures"].get("run") for v in view if v["is_root"]] == [1]


def test_confidence_below_high_always_says_why_and_high_has_no_caveat():
    """Partial evidence lowers the confidence with a reason, the same way in every rule."""
    from test_real_logs_findings import _real_files
    from test_scenarios import SCENARIOS, analyse, scenario_dirs

    from forensics.timeline import build_timeline

    results = [(d.name, analyse(d)[1]) for d in scenario_dirs()]
    results += [(p.name, run_all(build_timeline([p]))[0]) for p in _real_files()]
    assert results and SCENARIOS.is_dir()
    for name, findings in results:
        for f in findings:
            assert (f.confidence == "high") == (not f.confidence_reason), (name, f.rule_id, f.confidence,
                                                                           f.confidence_reason)

"""Host-memory detectors on hand-built timelines: per-rank HiCache overallocation, refusal,
memory not reclaimed after a kill, the kernel OOM killer."""

from __future__ import annotations

import math

from test_detectors_common import GIB, fired, timeline

from forensics.detectors import host_memory_not_reclaimed, kernel_oom_killer, per_rank_overallocation, run_all
from forensics.detectors.per_rank_overallocation import largest_hicache_gb, pinned_bytes


def _allocs(gb: float, ranks: int = 8) -> list[dict]:
    return [{"kind": "hicache_alloc", "bytes": int(gb * 1e9), "rank": f"TP{r}", "tp_rank": r,
             "attrs": {"pool": "kv", "kind": "kv"}} for r in range(ranks)]


def _host(total_gib: int, used_gib: int, avail_gib: int, **kw) -> dict:
    return {"kind": "host_memory", "source": "free", "file": kw.pop("file", "free.txt"),
            "total_bytes": total_gib * GIB, "used_bytes": used_gib * GIB, "avail_bytes": avail_gib * GIB, **kw}


def _args(**args) -> dict:
    return {"kind": "server_args", "attrs": {"args": args, "form": "ServerArgs"}}


def test_seed_phase1_fires_critical_with_corrected_size_that_fits():
    tl = timeline(_args(tp_size=8, hicache_size=300, enable_hierarchical_cache=True), *_allocs(300), _host(449, 439, 9))
    f = fired(per_rank_overallocation.detect(tl))["SGL-HOST-001"]
    assert f.severity == "critical"
    assert f.figures["requested_total_bytes"] == 8 * 300 * 10**9
    assert f.ranks == list(range(8))
    new = int(f.remediation.flags[0].new)
    assert 40 <= new <= 52
    # the corrected value leaves the stated reserve: 8 × new ≤ budget
    assert 8 * new * 1e9 <= f.figures["budget_bytes"]
    assert f.remediation.flags[0].old == "300"


def test_pre_launch_snapshot_becomes_the_baseline():
    before = _host(449, 40, 408, file="session.txt", line=1)
    launch = {"kind": "command", "source": "transcript", "file": "session.txt", "line": 5,
              "text": "python3 -m sglang.launch_server --tp 8", "attrs": {"command": "python3 -m sglang.launch_server"}}
    tl = timeline(_args(tp_size=8, hicache_size=300, enable_hierarchical_cache=True), *_allocs(300), before, launch)
    f = fired(per_rank_overallocation.detect(tl))["SGL-HOST-001"]
    assert f.figures["host_available_before_bytes"] == 408 * GIB
    assert f.figures["baseline_bytes"] == 41 * GIB
    assert f.confidence == "high"


def test_a_size_that_fits_does_not_fire():
    tl = timeline(_args(tp_size=8, hicache_size=48, enable_hierarchical_cache=True), *_allocs(48), _host(449, 4, 444),
                  {"kind": "decode_batch", "text": "[2025-11-20 11:02:41 TP0] Decode batch, #running-req: 4, ", "ratio": 0.1})
    assert per_rank_overallocation.detect(tl) == []


def test_power_of_two_pinning_on_old_versions():
    from forensics.model import Facts

    tl = timeline(_args(tp_size=8, hicache_size=48, enable_hierarchical_cache=True), *_allocs(48), _host(449, 4, 444),
                  facts=Facts(sglang_version="0.5.2"))
    f = fired(per_rank_overallocation.detect(tl))["SGL-HOST-001"]
    assert f.figures["pinned_per_rank_bytes"] == 64 * GIB  # 48 GB rounds up to 2^36 bytes
    # by hand: 449 GiB − 5% assumed baseline − 10% reserve − 8 schedulers × 3 GiB = 384.02 GB, 48.003 GB a rank;
    # the largest power of two under that is 2^35 B (32 GiB = 34.36 GB), so 34 GB is the largest size that pins it
    capacity = 449 * GIB
    assert f.figures["budget_bytes"] == capacity - int(0.05 * capacity) - int(0.10 * capacity) - 8 * 3 * GIB
    assert f.remediation.flags[0].new == "34"


def test_new_versions_split_the_budget_and_refuse_cleanly():
    from forensics.model import Facts

    refusal = {"kind": "hicache_insufficient", "bytes": 300 * 10**9, "avail_bytes": 54_780_000_000, "rank": "TP0",
               "tp_rank": 0}
    tl = timeline(_args(tp_size=8, hicache_size=300, enable_hierarchical_cache=True), refusal, _host(449, 4, 444),
                  facts=Facts(sglang_version="0.5.19"))
    got = fired(per_rank_overallocation.detect(tl))
    assert "SGL-HOST-001" not in got
    assert got["SGL-HOST-002"].remediation.flags[0].new == str(math.floor(54.78))


def test_container_limit_alone_predicts_from_flags():
    launch = {"kind": "launch_command", "source": "launch", "file": "run.sh",
              "text": "docker run --memory 128g lmsysorg/sglang:v0.5.6 python3 -m sglang.launch_server",
              "attrs": {"flags": {"--tp-size": "4", "--enable-hierarchical-cache": True, "--hicache-size": "40"},
                        "docker_memory_bytes": 128 * GIB, "argv": []}}
    f = fired(per_rank_overallocation.detect(timeline(launch)))["SGL-HOST-001"]
    assert f.figures["capacity_bytes"] == 128 * GIB and f.figures["power_of_two_pinning"] == "no"
    assert f.confidence in ("medium", "low") and f.confidence_reason
    # by hand: 128 GiB − 5% assumed baseline − max(10 GiB, 12.8 GiB) reserve − 4 × 3 GiB = 103.94 GB; ÷ 4 = 25.98 GB
    capacity = 128 * GIB
    assert f.figures["budget_bytes"] == capacity - int(0.05 * capacity) - int(0.10 * capacity) - 4 * 3 * GIB
    assert f.remediation.flags[0].new == "25"


def test_largest_hicache_gb():
    assert largest_hicache_gb(0.5e9, False) == 0
    assert largest_hicache_gb(48.9e9, False) == 48
    assert largest_hicache_gb(48.9e9, True) == 34  # 2^35 B = 34.36 GB ≤ 48.9 GB < 2^36 B
    assert pinned_bytes(34e9, True) == 2**35 and pinned_bytes(34e9, False) == 34e9


def _kill(line: int, text: str = "pkill -9 -f sglang") -> dict:
    return {"kind": "command", "source": "transcript", "file": "session.txt", "line": line, "text": text,
            "attrs": {"command": text}}


def test_host_memory_after_kill_against_pre_launch_baseline():
    tl = timeline(
        _host(449, 40, 408, file="session.txt", line=1),
        {**_kill(3, "python3 -m sglang.launch_server --tp 8")},
        _kill(10),
        _host(449, 318, 130, file="session.txt", line=12),
    )
    f = fired(host_memory_not_reclaimed.detect(tl))["SGL-HOST-003"]
    # the baseline is what was not available before the launch (449 − 408), as the per-rank arithmetic has it
    assert f.figures["baseline_bytes"] == 41 * GIB
    assert f.figures["excess_bytes"] == 277 * GIB
    assert f.confidence == "high" and not f.figures["baseline_assumed"]


def test_host_memory_back_to_baseline_does_not_fire():
    tl = timeline(_kill(1), _host(449, 4, 444, file="session.txt", line=3))
    assert host_memory_not_reclaimed.detect(tl) == []


def test_host_memory_without_any_end_does_not_fire():
    assert host_memory_not_reclaimed.detect(timeline(_host(449, 318, 130))) == []


def test_oom_killer_victim_decides_severity_and_links_to_the_overallocation():
    victim = {"kind": "oom_kill", "source": "kernel", "file": "dmesg.txt", "pid": 52216, "comm": "sglang::schedul",
              "used_bytes": 99 * GIB, "attrs": {"constraint": "CONSTRAINT_NONE", "shmem_rss_bytes": 94 * GIB}}
    other = {**victim, "comm": "java", "pid": 7}
    assert kernel_oom_killer.detect(timeline(other))[0].severity == "high"
    tl = timeline(_args(tp_size=8, hicache_size=120, enable_hierarchical_cache=True), *_allocs(120),
                  _host(755, 700, 6), victim)
    findings, root = run_all(tl)
    got = fired(findings)
    assert root == "SGL-HOST-001"
    assert got["SGL-HOST-004"].severity == "critical"
    assert got["SGL-HOST-004"].consequence_of == "SGL-HOST-001"
    assert "Follows from SGL-HOST-001" in got["SGL-HOST-004"].summary


def test_limit_is_named_where_the_launch_states_it():
    """A Kubernetes limit read from the launch row is named as such, not as Docker's --memory."""
    launch = {"kind": "launch_command", "source": "launch", "file": "deploy.yaml",
              "attrs": {"argv": ["python3", "-m", "sglang.launch_server", "--tp", "4", "--hicache-size", "50"],
                        "flags": {"--tp": "4", "--hicache-size": "50", "--enable-hierarchical-cache": True},
                        "engine": "sglang", "launcher": "kubernetes", "confidence": "command",
                        "container_memory_bytes": 150 * GIB,
                        "container_memory_from": "kubernetes resources.limits.memory"}}
    tl = timeline(_args(tp_size=4, hicache_size=50, enable_hierarchical_cache=True), launch)
    f = fired(per_rank_overallocation.detect(tl))["SGL-HOST-001"]
    assert "kubernetes resources.limits.memory" in f.summary
    assert "--memory" not in f.summary


def test_a_reconciled_flag_is_the_one_its_summary_states():
    from forensics.detectors.reconcile import reconcile_flags
    from forensics.model import Evidence, Finding, FlagChange, Remediation

    def finding(rule: str, new: str) -> Finding:
        return Finding(rule_id=rule, category="per_rank_overallocation", severity="critical", title="t",
                       summary=f"Pools exhaust the host. Set --hicache-size {new} (per rank).", confidence="high",
                       evidence=[Evidence("x.log", 1, "x")],
                       remediation=Remediation(flags=[FlagChange("--hicache-size", "60", new, "w")]))

    root, other = finding("SGL-HOST-001", "51"), finding("SGL-HOST-009", "14")
    reconcile_flags([root, other], "SGL-HOST-001")
    assert other.remediation.flags[0].new == "51"
    assert "--hicache-size 51" in other.summary and "--hicache-size 14" not in other.summary


def test_killed_rank_with_pool_sizes_against_the_containers_limit(tmp_path):
    """With the container's limit in the input, SGL-HOST-009 sizes the pools against it, not against the victim's
    pool (a lower bound of the host's RAM)."""
    from forensics.analysis import analyse

    (tmp_path / "dmesg.txt").write_text(
        "[71002.118201] Memory cgroup out of memory: Killed process 9120 (sglang::schedul) total-vm:190021112kB, "
        "anon-rss:7340032kB, file-rss:210044kB, shmem-rss:41943040kB, UID:0 pgtables:99120kB oom_score_adj:0\n",
        encoding="utf-8")
    (tmp_path / "run.sh").write_text(
        "docker run --gpus all --memory 160g --shm-size 16g lmsysorg/sglang:v0.5.9 \\\n"
        "  python3 -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B --tp 4 --enable-hierarchical-cache "
        "--hicache-ratio 2\n", encoding="utf-8")
    _tl, doc = analyse([tmp_path], quiet=True)
    f = next(f for f in doc["findings"] if f["rule_id"] == "SGL-HOST-009")
    assert "host RAM is not known" not in (f.get("confidence_reason") or "")
    assert "160.00 GiB" in f["remediation"]["flags"][0]["why"]


def test_oom_killer_names_the_engine_of_its_victim_and_its_next_steps_are_the_causes_not_an_info_rules():
    worker = {"kind": "oom_kill", "source": "kernel", "file": "dmesg.txt", "line": 2, "pid": 3101,
              "comm": "VLLM::Worker_TP", "used_bytes": 96 * GIB, "attrs": "{}"}
    finding = kernel_oom_killer.detect(timeline(worker))[0]
    assert "vLLM's processes were among the victims" in finding.summary and "SGLang" not in finding.summary
    assert finding.remediation.actions[0].startswith("Lower vLLM's largest host pool")
    java = {**worker, "comm": "java", "pid": 77}
    assert "No SGLang or vLLM process was a victim" in kernel_oom_killer.detect(timeline(java))[0].summary


def test_next_steps_leave_out_an_info_findings_advice_beside_a_cause():
    from forensics.report.document import next_steps

    cause = {"rule_id": "SGL-HOST-004", "severity": "high", "remediation": {"actions": ["Lower the host pool."]}}
    info = {"rule_id": "SGL-RUN-002", "severity": "info", "remediation": {"actions": ["Read the first line."]}}
    doc = {"root_cause": "SGL-HOST-004", "findings": [cause, info]}
    assert [s["rule_id"] for s in next_steps(doc)] == ["SGL-HOST-004"]
    alone = {"root_cause": None, "findings": [info]}
    assert [s["rule_id"] for s in next_steps(alone)] == ["SGL-RUN-002"]

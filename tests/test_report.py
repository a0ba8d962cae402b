"""report.html, summary.md and write_outputs on the hand-written seed incident and hostile variants."""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
import pytest
import report_fixture as rf
from shared_data import SHARED, SKIP_REASON

from forensics import report
from forensics.model import Timeline
from forensics.report import document, plots
from forensics.report import text as report_text
from forensics.resources import templates_dir
from parsers.schema import rows_to_frame

GIB = 1 << 30


class Cells(HTMLParser):
    """Collects attributes of tags with a given attribute, and the text of every element by id."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts = 0
        self.external: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "script":
            self.scripts += 1
            if a.get("src"):
                self.external.append(a["src"] or "")
        if tag in ("link", "img", "iframe", "object", "embed") and (a.get("href") or a.get("src")):
            self.external.append(a.get("href") or a.get("src") or "")


def parse(html: str) -> Cells:
    p = Cells()
    p.feed(html)
    return p


@pytest.fixture(scope="module")
def html() -> str:
    return report.render_html(rf.document(), rf.timeline(), rf.catalog())


def test_templates_are_found():
    assert (templates_dir() / "report.html.j2").is_file()
    assert (templates_dir() / "summary.md.j2").is_file()


def test_page_is_self_contained_and_small(html):
    import plotly.offline

    page = parse(html)
    assert page.external == []
    assert html.count(plotly.offline.get_plotlyjs()[:200]) == 1  # plotly.js once
    assert "@import" not in html and "url(http" not in html
    assert len(html.encode()) < 5_000_000


def test_headline_names_root_cause_ranks_and_gpus(html):
    doc = rf.document()
    root = next(f for f in doc["findings"] if f["rule_id"] == doc["root_cause"])
    assert f'data-rule="{root["rule_id"]}"' in html
    # ranks 0..7 from the root cause, GPUs from all findings: 0, 2 and 3
    ranks = sorted({r for f in doc["findings"] for r in f["ranks"]})
    gpus = sorted({g for f in doc["findings"] for g in f["gpus"]})
    assert f"<dt>Affected ranks</dt><dd>{report_text.ranges(ranks)}</dd>" in html
    assert f"<dt>Affected GPUs</dt><dd>{report_text.ranges(gpus)}</dd>" in html
    assert report_text.ranges(gpus) == "0, 2–3"
    assert "No fuser output in the bundle" in html  # confidence_reason of a finding


def test_flag_diff_and_corrected_command(html):
    page = parse(html)
    rows = {a["data-flag"]: a["data-new"] for t, a in page.tags if t == "tr" and "data-flag" in a}
    assert rows == {"--hicache-size": "48", "--mem-fraction-static": "0.80"}
    cmd = re.search(r'<textarea id="cmd-new-text" hidden readonly>(.*?)</textarea>', html, re.S).group(1)
    argv = cmd.split()
    assert argv[argv.index("--hicache-size") + 1] == "48"
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.80"
    assert argv[argv.index("--tp-size") + 1] == "8"  # untouched flags survive
    # the old value of --mem-fraction-static came from the launch command, not the finding
    assert "0.85</code> <span class=\"muted\">from added/session.txt:3</span>" in html


def test_every_finding_has_its_section_evidence_and_explanation(html):
    doc = rf.document()
    for f in doc["findings"]:
        assert f'id="finding-{f["rule_id"]}"' in html
        for e in f["evidence"]:
            assert f'{e["file"]}:{e["line"]}' in html
    # consequence_of becomes a link to the cause
    assert 'Follows from <a href="#finding-SGL-HOST-001">SGL-HOST-001</a>' in html
    if rf.catalog() is not None:
        assert html.count("<h4>What to do</h4>") == len(doc["findings"])
    # figures in one unit with their names: memory in GiB, maps as "key: value", never JSON or bytes
    assert "96.00 GiB" in html and "103,079,215,104" not in html and ">Held bytes by gpu<" not in html


def test_missing_catalog_and_unknown_rule_are_tolerated():
    doc = rf.document()
    doc["findings"][0]["rule_id"] = "SGL-NEW-999"
    html = report.render_html(doc, rf.timeline(), None)
    assert "The rule catalog has no entry for SGL-NEW-999" in html

    class Raises:
        def get(self, rule_id):
            raise KeyError(rule_id)

    assert "no explanation available" in report.render_html(rf.document(), rf.timeline(), Raises())


def test_startup_table_marks_the_stalled_ranks():
    table = report.startup_table(rf.timeline())
    stalled = {r.rank: r.stalled_at for r in table}
    assert stalled == {**{f"TP{i}": None for i in range(6)}, "TP6": "graph begin", "TP7": "graph begin"}
    tp0 = next(r for r in table if r.rank == "TP0")
    assert tp0.cells[1].text == "08:10:05"  # weights begin, UTC
    assert tp0.cells[0].state == "none"  # nobody logged dist init


def test_startup_groups_per_run_and_file():
    rows = rf.load_rows()
    extra = [dict(r, file="logs/other.log") for r in rows if r.get("rank") == "TP0" and r["kind"] == "weight_load_begin"]
    table = report.startup_table(rf.timeline(rows + extra))
    other = [r for r in table if r.group.startswith("per-rank logs")]
    assert [r.rank for r in other] == ["TP0"] and other[0].stalled_at is None


def test_plots_from_timeline():
    p = plots.timeline_plots(rf.timeline())
    keys = [f.key for f in p.figures]
    assert keys == ["gpu-memory", "host-memory", "by-order"]
    gpu = p.figures[0]
    g0 = next(t for t in gpu.data if t["name"] == "GPU 0 used (nvidia-smi)")
    assert g0["y"] == [2.0, 93.0, 96.0]
    tp0 = next(t for t in gpu.data if t["name"] == "TP0 free (SGLang avail mem)")
    assert tp0["y"][0] == pytest.approx(93.9, abs=0.01)
    labels = [a["text"] for a in gpu.layout["annotations"]]
    assert "HiCache allocated ×6" in labels and "CUDA OOM" in labels and "launch" in labels
    order = p.figures[2]
    assert "not time" in order.layout["xaxis"]["title"]["text"]
    assert "kill" in [a["text"] for a in order.layout["annotations"]]


def test_long_series_are_downsampled_keeping_extremes():
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = [{"ts": t0 + timedelta(seconds=i), "file": "s.csv", "line": i + 1, "kind": "gpu_memory", "gpu": 0,
             "used_bytes": (50 + (i % 7)) * GIB} for i in range(20_000)]
    rows[12_345]["used_bytes"] = 95 * GIB
    rows[4_321]["used_bytes"] = 1 * GIB
    tl = Timeline(events=rows_to_frame(rows, source="nvidia_smi_csv", path="s.csv"))
    fig = plots.timeline_plots(tl).figures[0]
    trace = fig.data[0]
    assert len(trace["x"]) <= plots.MAX_POINTS
    assert max(trace["y"]) == 95.0 and min(trace["y"]) == 1.0
    assert fig.downsampled == ["GPU 0 used (nvidia-smi)"]
    html = report.render_html(rf.document(), tl, None)
    assert "Downsampled for the page" in html


def test_nothing_to_plot_is_said_in_words():
    tl = Timeline(events=rows_to_frame([], source="x", path="x"))
    html = report.render_html(rf.document(), tl, None)
    assert "Nothing in the input can be plotted." in html
    assert 'class="plot"' not in html


def test_no_findings_document():
    doc = {"schema_version": 1, "tool": {"name": "forensics", "version": "0.1.0"}, "input": {"gaps": []},
           "root_cause": None, "findings": [], "coverage": []}
    html = report.render_html(doc, rf.timeline(), None)
    assert "No findings: none of the rules matched this input." in html
    assert "No finding calls for a change of launch flags." in html
    assert report.render_markdown(doc, None).startswith("## No findings")


def test_gaps_follow_the_root_cause_and_the_fix(html):
    """Root cause first, then what to change and do; what the input lacked comes after, still on the page."""
    assert html.index('id="root-cause"') < html.index('id="what-to-change"') < html.index('id="gaps"')
    assert "nvidia-smi-q-xml: timed out after 10 s" in html[html.index('id="gaps"'):]


def test_inventory_lists_coverage_examples_and_clocks(html):
    assert "Loading safetensors checkpoint shards:  50% Completed | 32/64" in html
    assert "Host-local stamps converted with UTC+08:00 from the input." in html
    cov = rf.document()["coverage"][0]
    assert f'<td class="num">{cov["unrecognized"]}</td>' in html
    assert "host/nvidia-smi-q.xml" in html and "timed out" in html


HOSTILE = "<script>alert(1)</script> </script><img src=x onerror=alert(2)> javascript:alert(3) {{ 7*7 }} \x00\x1b[31m"


def test_hostile_text_is_escaped_everywhere():
    doc, rows = rf.document(), rf.load_rows()
    doc["findings"][0]["evidence"][0]["text"] = HOSTILE
    doc["findings"][0]["summary"] = HOSTILE
    doc["findings"][0]["figures"]["note"] = HOSTILE
    doc["input"]["gaps"].append(HOSTILE)
    for r in rows:
        r["text"] = HOSTILE
    html = report.render_html(doc, rf.timeline(rows), rf.catalog())
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "{{ 7*7 }}" in html and "\x00" not in html and "\\x00\\x1b[31m" in html
    # inside the plot JSON the text can not close the script element
    for block in re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', html, re.S):
        assert "<" not in block
        json.loads(block)
    md = report.render_markdown(doc, rf.catalog(), rf.timeline(rows))
    assert "<script" not in md and "<img" not in md
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md


def test_markdown_is_short_deterministic_and_table_safe():
    doc = rf.document()
    for i in range(30):  # many findings, evidence and actions must still fit 25 lines
        f = json.loads(json.dumps(doc["findings"][1]))
        f["rule_id"] = f"SGL-X-{i:03d}"
        f["remediation"] = {"flags": [{"flag": f"--flag-{i}", "old": "a|b", "new": "c", "why": "x | y"}],
                            "actions": [f"step {i}"]}
        doc["findings"].append(f)
    md = report.render_markdown(doc, rf.catalog(), rf.timeline())
    assert len(md.splitlines()) <= report.SUMMARY_MAX_LINES
    assert md == report.render_markdown(doc, rf.catalog(), rf.timeline())
    for line in md.splitlines():
        if line.startswith("| `--flag"):
            assert line.count(" | ") == 3 and "a\\|b" in line


def test_markdown_names_root_cause_evidence_flags_and_cleanup():
    md = report.render_markdown(rf.document(), rf.catalog(), rf.timeline())
    assert md.startswith("## Root cause: HiCache host pools of all ranks on a host exceed its memory\n")
    assert "`logs/sglang.log:34`" in md
    assert "| `--hicache-size` | `300` | `48` |" in md
    assert "| `--mem-fraction-static` | `0.85` | `0.80` |" in md
    assert "1. **Fix:** Relaunch with the corrected command: `--hicache-size 48`, `--mem-fraction-static 0.80`" in md
    assert "2. **Clean up:** `pkill -9 -f sglang`" in md
    assert "Not in the input: nvidia-smi-q-xml: timed out after 10 s" in md


def test_next_steps_are_grouped_deduplicated_and_short():
    """Fix, confirm, clean up — in that order; an action that repeats an earlier one (same command, or
    mostly the same words) is said once; alternatives stay under their finding; eight at most."""
    from forensics.report.document import MAX_NEXT_STEPS, next_steps

    def finding(rule, *actions, severity="high"):
        return {"rule_id": rule, "severity": severity, "remediation": {"flags": [], "actions": list(actions)}}

    doc = {"root_cause": "A", "findings": [
        finding("A", "Set --hicache-size per rank, not per server.", "Reboot the host when D-state processes never exit.",
                severity="critical"),
        finding("B", "Reboot the host (or the VM) when D-state processes never exit.",
                "Kill from the hypervisor: `pct exec 101 -- pkill -9 -f sglang`",
                "Or lower --max-running-requests (now 150)."),
        finding("C", "In a container, stop it from the host: `pct exec 101 -- pkill -9 -f sglang` or `docker kill <ctr>`.",
                "To confirm: host RAM — `free -g`"),
        finding("D", *[f"Kill stray worker {i}: `kill -9 {4000 + i}`" for i in range(12)], severity="low"),
    ]}
    steps = next_steps(doc)
    texts = [s["text"] for s in steps]
    assert len(steps) == MAX_NEXT_STEPS
    assert [s["group"] for s in steps] == sorted((s["group"] for s in steps), key=["fix", "confirm", "clean"].index)
    assert texts[0] == "Set --hicache-size per rank, not per server." and steps[1]["group"] == "confirm"
    assert sum("Reboot" in t for t in texts) == 1
    assert sum("pct exec" in t for t in texts) == 1
    assert not any(t.startswith("Or ") for t in texts)
    # a command with a placeholder is shown, never offered to copy as it stands
    assert all("<ctr>" not in c for s in steps for c in s["commands"])


def test_corrected_argv_forms():
    F = document.FlagRow
    new, changed, old = document.corrected_argv(["x", "--a", "1", "--b=2", "--c"],
                                              [F("--a", "1", "9", "", "r"), F("--b", "2", "8", "", "r"),
                                               F("--d", None, "7", "", "r"), F("--c", None, "", "", "r")])
    assert new == ["x", "--a", "9", "--b=8", "--d", "7"]
    assert changed == {2, 3, 4, 5} and old == {1, 2, 3, 4}
    new, _, _ = document.corrected_argv(["x", "--hicache_size", "300"], [F("--hicache-size", "300", "48", "", "r")])
    assert new == ["x", "--hicache_size", "48"]


def test_launch_fix_prefers_the_launch_the_finding_is_about():
    rows = rf.load_rows()
    launch = next(r for r in rows if r["kind"] == "launch_command")
    relaunch = json.loads(json.dumps({k: v for k, v in launch.items() if k not in ("ts", "ts_local")}))
    relaunch["line"] = 30
    relaunch["attrs"]["argv"][relaunch["attrs"]["argv"].index("--hicache-size") + 1] = "48"
    relaunch["attrs"]["flags"]["--hicache-size"] = "48"
    fix = report.launch_fix(rf.document(), rf.timeline([*rows, relaunch]))
    assert fix.source == "added/session.txt:3"  # the launch with --hicache-size 300, not the relaunch
    fix = report.launch_fix(rf.document(), rf.timeline([r for r in rows if r["kind"] != "launch_command"]))
    assert fix.new_argv is None and fix.source == "logs/sglang.log:1"  # server_args dump
    assert {r.flag: r.old for r in fix.flags} == {"--hicache-size": "300", "--mem-fraction-static": "0.85"}


def test_write_outputs_writes_what_is_asked(tmp_path):
    out = tmp_path / "out"
    written = report.write_outputs(rf.document(), rf.timeline(), out, {"md", "parquet"}, catalog=rf.catalog())
    assert sorted(p.name for p in written) == ["summary.md", "timeline.parquet"]
    assert sorted(p.name for p in out.iterdir()) == ["summary.md", "timeline.parquet"]
    umask = os.umask(0)
    os.umask(umask)
    assert (out / "summary.md").stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600
    back = pl.read_parquet(out / "timeline.parquet")
    assert back.height == rf.timeline().events.height
    assert back.schema == rf.timeline().events.schema
    with pytest.raises(ValueError, match="unknown output format"):
        report.write_outputs(rf.document(), rf.timeline(), out, {"pdf"})


def test_write_outputs_does_not_follow_symlinks_out(tmp_path):
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.md").symlink_to(outside)
    report.write_outputs(rf.document(), rf.timeline(), out, {"md"})
    assert outside.read_text() == "keep me"
    assert not (out / "summary.md").is_symlink()
    assert (out / "summary.md").read_text().startswith("## Root cause")
    assert [p.name for p in out.iterdir()] == ["summary.md"]  # no temporary files left


def test_real_logs_render(tmp_path):
    """The real SGLang logs and seeds through the integrator's timeline, when both are here."""
    if not (SHARED / "sglang_real_logs").is_dir():
        pytest.skip(f"{SKIP_REASON}: shared samples absent")
    timeline = pytest.importorskip("forensics.timeline")
    tl = timeline.build_timeline([str(SHARED / "sglang_real_logs" / "21_load-weight-begin-end_deepseek-r1-4node_nccl-watchdog.log")])
    table = report.startup_table(tl)
    ranks = [r.rank for r in table]
    if not ranks:
        pytest.skip("the SGLang parser is not in place yet")
    assert ranks == sorted(ranks, key=lambda s: int(s[2:]))  # natural order TP24..TP31
    assert all(r.rank.startswith("TP") for r in table)
    doc = {"schema_version": 1, "tool": {"name": "forensics", "version": "0"}, "input": {}, "root_cause": None,
           "findings": [], "coverage": tl.coverage}
    written = report.write_outputs(doc, tl, tmp_path, {"html", "md"})
    assert (tmp_path / "report.html").stat().st_size < 5_000_000
    assert len(written) == 2
    assert Path(written[0]).name == "report.html"


def test_findings_json_names_every_component_version(tmp_path) -> None:
    """vLLM's version (and any other component's) reaches findings.json, not only SGLang's."""
    import json

    from forensics.analysis import analyse

    log = tmp_path / "vllm.log"
    log.write_text("INFO 11-30 09:00:01 [api_server.py:1024] vLLM API server version 0.9.1\n"
                   "INFO 11-30 09:00:02 [api_server.py:1025] args: Namespace(model='acme/m')\n")
    _tl, doc = analyse([log], None, quiet=True)
    assert json.loads(json.dumps(doc))["input"]["versions"].get("vllm") == "0.9.1"


def test_summary_of_binary_only_input_says_so(tmp_path) -> None:
    """Random bytes are listed as binary, and the summary says nothing was text, not that no rule matched."""
    import random

    from forensics.analysis import analyse
    from forensics.report import write_outputs

    blob = tmp_path / "blob.bin"
    rng = random.Random(7)
    blob.write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
    tl, doc = analyse([blob], None, quiet=True)
    (md,) = write_outputs(doc, tl, tmp_path / "out", {"md"})
    text = md.read_text(encoding="utf-8")
    assert "blob.bin is binary and was not read" in text and "None of the rules" not in text


def test_an_environment_setting_is_set_before_the_command_not_appended_as_a_flag() -> None:
    from forensics.report.document import FlagRow, corrected_argv, is_env_setting

    assert is_env_setting("SGLANG_WAIT_PORT_TIMEOUT") and not is_env_setting("--swap-space")
    argv = ["LMCACHE_MAX_LOCAL_CPU_SIZE=100", "vllm", "serve", "m", "--tensor-parallel-size", "4"]
    new, changed, old = corrected_argv(argv, [FlagRow("LMCACHE_MAX_LOCAL_CPU_SIZE", "100", "57", "", "r")])
    assert new[0] == "LMCACHE_MAX_LOCAL_CPU_SIZE=57" and new[1:] == argv[1:] and changed == {0} and old == {0}
    new, _c, _o = corrected_argv(argv[1:], [FlagRow("SGLANG_WAIT_PORT_TIMEOUT", "30", "120", "", "r")])
    assert new[:2] == ["SGLANG_WAIT_PORT_TIMEOUT=120", "vllm"] and "SGLANG_WAIT_PORT_TIMEOUT" not in new


def test_a_chart_needs_enough_samples_to_show_a_course():
    """Two host-memory samples are a sentence, not a chart; three are a chart."""
    from datetime import UTC, datetime, timedelta

    from parsers.schema import rows_to_frame

    def host_rows(n):
        t0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
        return [{"kind": "host_memory", "file": "free.txt", "line": i + 1, "ts": t0 + timedelta(minutes=i),
                 "used_bytes": (100 + 10 * i) << 30, "avail_bytes": (300 - 10 * i) << 30, "text": "Mem:"}
                for i in range(n)]

    few = plots.timeline_plots(Timeline(events=rows_to_frame(host_rows(2), source="free", path="free.txt")))
    assert "host-memory" not in [f.key for f in few.figures]
    assert any("Only 2 time-stamped host memory sample(s)" in n for n in few.notes)
    enough = plots.timeline_plots(Timeline(events=rows_to_frame(host_rows(3), source="free", path="free.txt")))
    assert "host-memory" in [f.key for f in enough.figures]


def test_a_consequences_fixes_are_answered_by_its_cause_but_its_clean_up_stays():
    """Beside the cause it follows, a consequence's own fixes (find the rank that failed first) are no step; what it
    left behind (a GPU still held) is still to clean up. Without a cause, its fixes are the steps."""
    from forensics.report.document import next_steps

    cause = {"rule_id": "SGL-GPU-001", "severity": "critical", "remediation": {"actions": ["Lower the fraction."]}}
    echo = {"rule_id": "SGL-NCCL-002", "severity": "high", "consequence_of": "SGL-GPU-001",
            "remediation": {"actions": ["Find the first rank that failed (its traceback, an OOM kill) and fix that.",
                                        "Kill the holders: `kill -9 4242`."]}}
    doc = {"root_cause": "SGL-GPU-001", "findings": [cause, echo]}
    steps = [(s["rule_id"], s["group"]) for s in next_steps(doc)]
    assert steps == [("SGL-GPU-001", "fix"), ("SGL-NCCL-002", "clean")], steps
    alone = {"root_cause": None, "findings": [{**echo, "consequence_of": None}]}
    assert [s["group"] for s in next_steps(alone)] == ["fix", "clean"]

"""The postmortem outputs: report.html, summary.md, findings.json, findings.sarif, timeline.parquet.

The report knows nothing of parsing: it reads the findings document (DESIGN.md §4, ``doc``), the
timeline (for plots, the start-up table and the inventory) and the rule catalog (for each rule's
explanation). The catalog is anything with ``.get(rule_id)`` returning an object or dict with
``id``, ``title``, ``severity``, ``category`` and ``docs`` (a dict of headings → text); a missing
catalog or rule only drops the explanation.

Log text is untrusted: the HTML template autoescapes everything, control bytes are shown as
``\\xNN``, and the plot data embedded in the page has ``<``, ``>`` and ``&`` escaped as JSON
``\\u`` sequences so no input can close the ``<script>`` element that carries it.

>>> doc = {"schema_version": 1, "tool": {"name": "forensics", "version": "0"}, "input": {},
...        "root_cause": None, "findings": [], "coverage": []}
>>> "No findings" in render_markdown(doc, None)
True
"""

from __future__ import annotations

import functools
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from forensics.model import SEVERITY_RANK, Timeline
from forensics.report.catalog import RuleInfo, rule_info
from forensics.report.document import (
    MAX_NEXT_STEPS,
    LaunchFix,
    actionable_gaps,
    grouped_steps,
    launch_fix,
    next_steps,
    normalise_document,
    ordered_findings,
    root_finding,
)
from forensics.report.plots import Plots, timeline_plots
from forensics.report.startup import STARTUP_STAGES, startup_table
from forensics.report.text import (
    figure_label,
    fmt_figure,
    human_bytes,
    inline_md,
    md_action,
    md_code,
    md_fence,
    md_text,
    ranges,
    script_json,
    slug,
    visible,
)
from forensics.resources import templates_dir

#: Output format → file name written into the output folder.
OUTPUT_FILES = {
    "html": "report.html",
    "md": "summary.md",
    "json": "findings.json",
    "sarif": "findings.sarif",
    "parquet": "timeline.parquet",
}
_FORMAT_ALIASES = {"markdown": "md", "htm": "html"}
#: summary.md is pasted into tickets: keep it short.
SUMMARY_MAX_LINES = 25


# ---------------------------------------------------------------------------------------------
# Inventory ("What we read")
# ---------------------------------------------------------------------------------------------


def unrecognised_input(coverage: list[dict[str, Any]]) -> list[str] | None:
    """When no file of the input held anything recognised as evidence: what each file was, as a reader
    says it ("notes.txt (3 lines, none recognised)"); None when something was recognised.

    >>> unrecognised_input([{"file": "a.txt", "lines": 0, "recognized": 0}])
    ['a.txt (empty)']
    >>> unrecognised_input([{"file": "free.txt", "lines": 3, "recognized": 3}]) is None
    True
    """
    if not coverage or any(c.get("recognized") for c in coverage):
        return None
    out = []
    for c in coverage:
        n = int(c.get("lines") or 0)
        out.append(f"{c.get('file')} (binary, not read)" if c.get("binary") else f"{c.get('file')} (empty)" if not n
                   else f"{c.get('file')} ({n:,} line{'' if n == 1 else 's'}, none recognised)")
    return out


def inventory(doc: dict[str, Any], tl: Timeline | None) -> dict[str, Any]:
    """Inputs, clocks, artifacts, gaps and parser coverage, from the document and the timeline."""
    inp = doc.get("input") or {}
    facts = tl.facts if tl is not None else None
    gaps = list(dict.fromkeys([*map(str, inp.get("gaps") or []), *(facts.gaps if facts else [])]))
    notes = list(facts.notes) if facts else []
    clocks: list[str] = []
    if facts is not None:
        if facts.utc_offset_s is not None:
            h, m = divmod(abs(facts.utc_offset_s) // 60, 60)
            clocks.append(f"Host-local stamps converted with UTC{'+' if facts.utc_offset_s >= 0 else '-'}"
                          f"{h:02d}:{m:02d} from the input.")
        elif facts.tz_assumed:
            clocks.append(f"No UTC offset in the input: host-local stamps assumed to be {facts.tz_assumed}.")
        if facts.boot_time is not None:
            clocks.append(f"Boot time {facts.boot_time.isoformat()} used for kernel uptime stamps.")
    basis: list[tuple[str, int]] = []
    if tl is not None and not tl.events.is_empty():
        counts = tl.events.group_by("ts_basis").len().sort("ts_basis", nulls_last=True)
        basis = [(b or "none", n) for b, n in counts.iter_rows()]
    coverage = doc.get("coverage") or (tl.coverage if tl is not None else [])
    examples = tl.unrecognized_examples if tl is not None else {}
    artifacts = {a.path: a for a in (tl.artifacts if tl is not None else [])}
    files = []  # one row per file: how it was collected (state, bytes) and how it was read (coverage)
    for c in coverage:
        lines, rec = int(c.get("lines") or 0), int(c.get("recognized") or 0)
        a = artifacts.pop(c.get("file"), None)
        files.append({**c, "share": f"{100.0 * rec / lines:.1f} %" if lines else "—",
                      "examples": list(examples.get(c.get("file"), []))[:20], "state": _artifact_state(a),
                      "bytes": a.bytes if a else None, "segments": len(a.segments) if a else 0})
    for a in artifacts.values():  # collected but not read line by line (binary, empty, skipped)
        files.append({"file": a.path, "format": a.format, "lines": a.lines, "recognized": None,
                      "unrecognized": None, "share": "—", "examples": [], "state": _artifact_state(a),
                      "bytes": a.bytes, "segments": len(a.segments)})
    return {
        "paths": [str(p) for p in inp.get("paths") or (facts.input_paths if facts else [])],
        "host": inp.get("host") or (facts.host if facts else None),
        "collected_at": inp.get("collected_at"),
        "sglang_version": inp.get("sglang_version") or (facts.sglang_version if facts else None),
        "versions": dict(sorted(facts.versions.items())) if facts else {},
        "gaps": gaps,
        "notes": notes,
        "clocks": clocks,
        "ts_basis": basis,
        "files": files,
        "unrecognised_input": unrecognised_input(coverage),
    }


def _artifact_state(a: Any) -> str:
    """What went wrong collecting or reading one file, in words ("ok" when nothing did)."""
    if a is None:
        return "ok"
    parts = [w for w, on in (("timed out", a.timed_out), ("truncated", a.truncated)) if on]
    if a.rc is not None and a.rc != 0:
        parts.append(f"exit {a.rc}")
    if a.error:
        parts.append(str(a.error))
    return "; ".join(parts) or "ok"


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=2)
def template_env(autoescape: bool) -> jinja2.Environment:
    """One environment per escaping mode for the process: jinja compiles a template once per
    environment, and compiling the page's templates costs ~20× rendering them (fleet renders many)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(visible=visible, slug=slug, md_text=md_text, md_code=md_code, md_fence=md_fence,
                       md_action=md_action, inline_md=inline_md,
                       human_bytes=human_bytes, ranges=ranges, script_json=script_json)
    env.globals.update(fmt_figure=fmt_figure, figure_label=figure_label)
    return env


def _headline(doc: dict[str, Any]) -> dict[str, Any]:
    findings = ordered_findings(doc)
    root = root_finding(doc)
    lead = root or (findings[0] if findings else None)
    hosts = sorted((doc.get("input") or {}).get("hosts") or {})
    if len(hosts) > 1 and lead is not None:
        # GPU 3 of one node is not GPU 3 of another: the headline names the lead's host's ranks and GPUs
        on_lead = [f for f in findings if (f.get("hosts") or [None])[0] == (lead.get("hosts") or [None])[0]]
    else:
        on_lead = findings
    ranks = sorted({r for f in on_lead for r in f.get("ranks") or [] if isinstance(r, int)})
    gpus = sorted({g for f in on_lead for g in f.get("gpus") or [] if isinstance(g, int)})
    # the list of findings under the root cause: one entry per rule and title, with the hosts it fired on
    groups: dict[tuple[Any, Any], dict[str, Any]] = {}
    for f in findings:
        g = groups.setdefault((f.get("rule_id"), f.get("title")), {"f": f, "n": 0, "hosts": []})
        g["n"] += 1
        g["hosts"] += [h for h in f.get("hosts") or [] if h not in g["hosts"]]
    return {"root": root, "lead": lead, "ranks": ranks, "gpus": gpus, "hosts": hosts, "groups": list(groups.values()),
            "lead_host": ((lead or {}).get("hosts") or [None])[0] if len(hosts) > 1 else None,
            "worst": min((SEVERITY_RANK.get(f.get("severity"), 9) for f in findings), default=None)}


def host_sections(doc: dict[str, Any], tl: Timeline | None) -> list[dict[str, Any]]:
    """One section per host when the input is several hosts' evidence: its facts (RAM, GPUs, container
    limit, engine version, clocks, topology), its snapshots, its findings and its plots; [] for one host."""
    if tl is None or len(tl.facts.hosts) <= 1:
        return []
    from forensics.timeline.hosts import host_view

    out = []
    for name, hf in sorted(tl.facts.hosts.items()):
        view = host_view(tl, name)
        ev = view.events
        snaps = ev.get_column("snapshot").drop_nulls().n_unique()
        plots = timeline_plots(view)
        for p in plots.figures:
            p.key = f"{slug(name)}-{p.key}"
        topo = hf.topology or {}
        out.append({
            "name": name, "how": hf.how, "paths": hf.input_paths, "tag": hf.tag,
            "ram": hf.ram_bytes, "gpus": hf.gpus, "gpu_total": hf.gpu_memory_bytes, "limit": hf.container_limit_bytes,
            "sglang_version": hf.sglang_version, "utc_offset_s": hf.utc_offset_s,
            "tz_assumed": hf.tz_assumed, "boot_time": hf.boot_time, "collected_at": hf.collected_at,
            "skew": hf.clock_skew_s, "skew_from": hf.clock_skew_from, "topology": topo,
            "snapshots": snaps, "files": len(hf.files), "rows": ev.height, "gaps": hf.gaps,
            "findings": [f for f in ordered_findings(doc) if (f.get("hosts") or [None])[0] == name],
            "plots": plots,
        })
    return out


def findings_view(doc: dict[str, Any], catalog: Any) -> list[dict[str, Any]]:
    ids = {f.get("rule_id") for f in doc.get("findings") or []}
    root = root_finding(doc)  # one finding, even when its rule fired in several server runs
    out = []
    quoted: dict[tuple[Any, Any], str] = {}  # (file, line) → the finding whose evidence quotes it
    for f in ordered_findings(doc):
        evidence = []
        for e in f.get("evidence") or []:
            key = (e.get("file"), e.get("line"))
            evidence.append({**e, "quoted_under": quoted.get(key)})  # a line two findings rest on is quoted once
            quoted.setdefault(key, str(f.get("rule_id")))
        out.append({
            "f": f,
            "evidence": evidence,
            "rule": rule_info(catalog, str(f.get("rule_id"))),
            "is_root": f is root,
            "consequence_known": f.get("consequence_of") in ids,
            "followers": [g.get("rule_id") for g in ordered_findings(doc) if g.get("consequence_of") == f.get("rule_id")],
        })
    return out


def report_steps(doc: dict[str, Any], fix: LaunchFix, limit: int = MAX_NEXT_STEPS) -> list[tuple[str, list[dict]]]:
    """The grouped next steps: relaunching with the corrected flags comes first when there are any."""
    steps = next_steps(doc, limit - 1 if fix.flags else limit)
    if fix.flags:
        # a flag as --flag value, an environment variable as the launch sets it (NAME=value, -e NAME=value)
        shown = ", ".join(fix.setting(r) for r in fix.flags[:3])
        more = f" and {len(fix.flags) - 3} more" if len(fix.flags) > 3 else ""
        what = "the corrected command" if fix.new_argv else "these flags changed"
        steps.insert(0, {"group": "fix", "text": f"Relaunch with {what}: {shown}{more} — see What to change.",
                         "rule_id": fix.flags[0].rule_id, "commands": []})
    return grouped_steps(steps)


#: The file name of plotly.js when several pages share one copy (``forensics fleet``).
PLOTLY_JS = "plotly.min.js"


def inline_plotlyjs() -> Markup:
    """plotly.js for an inline ``<script>``: it carries no ``</script`` today; make sure it never ends our
    element early."""
    import plotly.offline

    return Markup(re.sub(r"</(script)", r"<\\/\1", plotly.offline.get_plotlyjs(), flags=re.IGNORECASE))


def write_plotlyjs(folder: Path) -> Path:
    """One copy of plotly.js in ``folder`` for pages that load it with ``<script src>`` (a fleet's many
    reports: 4.6 MB once instead of in every page)."""
    import plotly.offline

    target = _target(Path(folder), PLOTLY_JS)
    write_atomic(target, lambda p: p.write_text(plotly.offline.get_plotlyjs(), encoding="utf-8", newline="\n"))
    return target


def render_html(doc: dict[str, Any], tl: Timeline | None, catalog: Any, plotlyjs_src: str | None = None) -> str:
    """The HTML report: self-contained (plotly.js inline, no network), or, with ``plotlyjs_src``, loading
    the one copy of plotly.js at that relative path (see :func:`write_plotlyjs`)."""
    doc = normalise_document(doc)

    plots: Plots = timeline_plots(tl) if tl is not None else Plots([], ["No timeline was given."])
    fix = launch_fix(doc, tl)
    return template_env(True).get_template("report.html.j2").render(
        doc=doc,
        tool=doc.get("tool") or {},
        head=_headline(doc),
        findings=findings_view(doc, catalog),
        fix=fix,
        step_groups=report_steps(doc, fix),
        plots=plots,
        startup=startup_table(tl),
        stages=[name for name, _ in STARTUP_STAGES],
        inv=inventory(doc, tl),
        hosts=host_sections(doc, tl),
        plotlyjs=None if plotlyjs_src else inline_plotlyjs(),
        plotlyjs_src=plotlyjs_src,
    )


def _summary_lines(text: str) -> str:
    """Collapse blank-line runs and keep at most :data:`SUMMARY_MAX_LINES` lines."""
    lines: list[str] = []
    for line in text.splitlines():
        line = line.rstrip()
        if not line and (not lines or not lines[-1]):
            continue
        lines.append(line)
    while lines and not lines[-1]:
        lines.pop()
    if len(lines) > SUMMARY_MAX_LINES:
        lines = lines[: SUMMARY_MAX_LINES - 1] + ["… more in report.html"]
    return "\n".join(lines) + "\n"


def _distinct_evidence(items: list[tuple[dict, dict]]) -> list[tuple[dict, dict]]:
    """Each cited line once, whichever findings cite it."""
    seen: set[tuple[str, Any]] = set()
    out = []
    for f, e in items:
        key = (e.get("file"), e.get("line"))
        if key not in seen:
            seen.add(key)
            out.append((f, e))
    return out


def _also_found(findings: list[dict[str, Any]], lead: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The findings besides the lead, one entry per rule (and run, and cause), with every host it fired on."""
    out: dict[tuple, dict[str, Any]] = {}
    for f in findings:
        if f is lead:
            continue
        figures = f.get("figures") or {}
        key = (f.get("severity"), f.get("rule_id"), figures.get("run"), f.get("consequence_of"),
               figures.get("consequence_of_host"))
        entry = out.setdefault(key, {"severity": key[0], "rule_id": key[1], "run": key[2], "consequence_of": key[3],
                                     "consequence_of_host": key[4], "hosts": []})
        entry["hosts"] += [h for h in f.get("hosts") or [] if h not in entry["hosts"]]
    return list(out.values())


def render_markdown(doc: dict[str, Any], catalog: Any, tl: Timeline | None = None) -> str:
    """summary.md: at most 25 lines for a ticket; the same input gives the same bytes."""
    doc = normalise_document(doc)
    findings = ordered_findings(doc)
    evidence = []
    for f in findings:
        for e in f.get("evidence") or []:
            evidence.append((f, e))
    fix = launch_fix(doc, tl)
    head = _headline(doc)
    text = template_env(False).get_template("summary.md.j2").render(
        doc=doc,
        head=head,
        findings=findings,
        also=_also_found(findings, head["lead"]),
        evidence=_distinct_evidence(evidence)[:3],
        fix=fix,
        step_groups=report_steps(doc, fix, limit=5),
        gaps=actionable_gaps(doc.get("input", {}).get("gaps") or []),
        rule_title=lambda rid: (rule_info(catalog, rid) or RuleInfo(rid, rid, None, None, [])).title,
        unread=unrecognised_input(doc.get("coverage") or []),
    )
    return _summary_lines(text)


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def _dumps_document(doc: dict[str, Any]) -> str:
    try:
        from forensics.report.findings import dumps_document
    except ImportError:
        return json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False, default=str) + "\n"
    return dumps_document(doc)


def _default_catalog() -> Any:
    try:
        from forensics.rules import load_catalog
    except ImportError:
        return None
    try:
        return load_catalog()
    except Exception:  # the report still renders without explanations
        return None


def normalise_formats(formats: set[str] | list[str] | str) -> list[str]:
    """Format names in a fixed order; raises ValueError for an unknown one.

    >>> normalise_formats("parquet,markdown,html")
    ['html', 'md', 'parquet']
    """
    if isinstance(formats, str):
        formats = [f for f in formats.split(",")]
    names = {_FORMAT_ALIASES.get(f.strip().lower(), f.strip().lower()) for f in formats if f.strip()}
    unknown = names - set(OUTPUT_FILES)
    if unknown:
        raise ValueError(f"unknown output format(s): {', '.join(sorted(unknown))}; "
                         f"choose from {', '.join(OUTPUT_FILES)}")
    return [f for f in OUTPUT_FILES if f in names]


def _target(out_dir: Path, name: str) -> Path:
    """``out_dir/name``, refusing anything that would land outside ``out_dir``."""
    root = out_dir.resolve()
    target = (root / name).absolute()
    if target.parent != root or target.name != name or name in ("", ".", ".."):
        raise ValueError(f"refusing to write {name!r} outside {out_dir}")
    return target


def write_atomic(target: Path, write) -> None:
    """Write through a temporary file in the same folder, then rename over the target.

    The rename replaces a symlink at ``target`` instead of following it out of the folder. The
    temporary file is created with mode 0666 so the umask, not mkstemp's 0600, decides access.
    """
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_outputs(doc: dict[str, Any], tl: Timeline, out_dir: Path, formats: set[str] | list[str] | str,
                  catalog: Any = None, plotlyjs_src: str | None = None) -> list[Path]:
    """Write the asked formats into ``out_dir`` (created if needed); returns the paths written.

    ``catalog`` defaults to ``forensics.rules.load_catalog()`` when that is available; ``plotlyjs_src``
    makes report.html load a shared plotly.js instead of carrying its own.
    """
    wanted = normalise_formats(formats)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if catalog is None and any(f in wanted for f in ("html", "md", "sarif")):
        catalog = _default_catalog()
    written = []
    for fmt in wanted:
        target = _target(out_dir, OUTPUT_FILES[fmt])
        if fmt == "parquet":
            # the same file `forensics timeline` writes: facts and coverage in the metadata; a big
            # input's streamed file is linked into place rather than rewritten
            from forensics.timeline import write_parquet

            write_atomic(target, lambda p: write_parquet(tl, p))
        else:
            text = _render_text(fmt, doc, tl, catalog, plotlyjs_src)
            write_atomic(target, lambda p, t=text: p.write_text(t, encoding="utf-8", newline="\n"))
        written.append(target)
    return written


def _render_text(fmt: str, doc: dict[str, Any], tl: Timeline, catalog: Any, plotlyjs_src: str | None = None) -> str:
    if fmt == "html":
        return render_html(doc, tl, catalog, plotlyjs_src)
    if fmt == "md":
        return render_markdown(doc, catalog, tl)
    if fmt == "json":
        return _dumps_document(doc)
    from forensics.report.sarif import to_sarif

    return json.dumps(to_sarif(doc, catalog), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


__all__ = [
    "OUTPUT_FILES", "render_html", "render_markdown", "write_outputs", "launch_fix", "startup_table",
    "inventory",
]

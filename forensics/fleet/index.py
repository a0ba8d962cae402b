"""``DIR/index.html``: the fleet's page, built from the dataset alone (incidents.parquet + findings/).

Self-contained like the report (inline CSS, the dataset's one plotly.js beside it, no network; every value from the inputs is
escaped by the template, figure data is inert JSON). What a platform team asks across incidents:
what keeps recurring, which GPUs keep faulting, which flags keep being wrong, and did a fix hold.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from forensics.fleet.dataset import read_findings, read_incidents

NO_ROOT = "no root cause"
FAILED = "not analysed (input error)"
#: categories that mean the hardware, not the configuration
HARDWARE = ("xid",)
_CATEGORY_COLOURS = {
    "per_rank_overallocation": "#c62828", "cuda_graph_headroom": "#ef6c00", "stranded_context": "#6a1b9a",
    "host_memory_not_reclaimed": "#8e24aa", "kernel_oom_killer": "#ad1457", "xid": "#263238",
    "nccl_timeout": "#00838f", "kv_cache_capacity": "#2e7d32", "weights_do_not_fit": "#5d4037",
    "other": "#546e7a", NO_ROOT: "#b0bec5", FAILED: "#e0e0e0",
}


@dataclass
class Recurring:
    rule_id: str
    title: str
    category: str
    incidents: int
    hosts: list[str]
    first: date | None
    last: date | None
    recent: int  # in the 7 days up to the newest incident
    before: int  # in the 7 days before those


@dataclass
class GpuFaults:
    gpu: str  # serial:…, GPU-… UUID, or host/gpuN where the evidence named no identity
    hosts: list[str]
    incidents: list[str]
    rules: list[str]
    first: date | None
    last: date | None


@dataclass
class FlagFix:
    flag: str
    incidents: int
    changes: list[tuple[str, str, int]]  # (old, new, times), most frequent first
    rules: list[str]


@dataclass
class FleetView:
    incidents: list[dict[str, Any]]
    failed: list[dict[str, Any]]
    recurring: list[Recurring]
    gpus: list[GpuFaults]
    hosts_hw: list[tuple[str, int, int]]  # (host, incidents with a hardware fault, distinct GPUs)
    flags: list[FlagFix]
    figure: dict[str, Any] | None
    span: tuple[date | None, date | None]
    headline: list[str] = field(default_factory=list)
    figure_bin: str = "day"  # the over-time figure's bar width, in words


def _window_counts(days: list[date], newest: date | None) -> tuple[int, int]:
    if newest is None:
        return 0, 0
    recent = sum(1 for d in days if newest - timedelta(days=7) < d <= newest)
    before = sum(1 for d in days if newest - timedelta(days=14) < d <= newest - timedelta(days=7))
    return recent, before


def build_view(incidents: list[dict[str, Any]], findings: list[dict[str, Any]], out_dir: Path | None = None) -> FleetView:
    """Everything the page shows, computed from the dataset's rows."""
    ok = [r for r in incidents if not r.get("error")]
    failed = [r for r in incidents if r.get("error")]
    days = [r["date"] for r in ok if r.get("date")]
    newest = max(days, default=None)
    span = (min(days, default=None), newest)

    # recurring root causes: one count per incident
    by_rule: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in ok:
        if r.get("root_cause_rule"):
            by_rule[r["root_cause_rule"]].append(r)
    recurring = []
    for rule, rows in by_rule.items():
        rdays = [r["date"] for r in rows if r.get("date")]
        recent, before = _window_counts(rdays, newest)
        recurring.append(Recurring(rule, rows[0].get("root_cause_title") or "", rows[0].get("root_cause_category") or "",
                                   len(rows), sorted({h for r in rows for h in r.get("hosts") or []}),
                                   min(rdays, default=None), max(rdays, default=None), recent, before))
    recurring.sort(key=lambda x: (-x.incidents, x.rule_id))

    # hardware: the same GPU (by serial/UUID) faulting in several incidents; hosts that keep faulting
    gpu_inc: dict[str, dict[str, Any]] = {}
    host_inc: dict[str, set[str]] = defaultdict(set)
    host_gpus: dict[str, set[str]] = defaultdict(set)
    for f in findings:
        if f.get("category") not in HARDWARE:
            continue
        hosts = f.get("hosts") or []
        ids = list(f.get("gpu_ids") or [])
        if not ids:
            host = hosts[0] if hosts else "?"
            ids = [f"{host} GPU {g} (no serial or UUID)" for g in f.get("gpus") or []] or [f"{host} (GPU not named)"]
        for h in hosts:
            host_inc[h].add(f["incident_id"])
            host_gpus[h].update(ids)
        for gid in ids:
            g = gpu_inc.setdefault(gid, {"hosts": set(), "incidents": set(), "rules": set(), "days": []})
            g["hosts"].update(hosts)
            if f["incident_id"] not in g["incidents"]:
                g["days"].append(f.get("date"))
            g["incidents"].add(f["incident_id"])
            g["rules"].add(f.get("rule_id") or "")
    gpus = [GpuFaults(k, sorted(v["hosts"]), sorted(v["incidents"]), sorted(v["rules"]),
                      min((d for d in v["days"] if d), default=None), max((d for d in v["days"] if d), default=None))
            for k, v in gpu_inc.items()]
    gpus.sort(key=lambda g: (-len(g.incidents), g.gpu))
    hosts_hw = sorted(((h, len(i), len(host_gpus[h])) for h, i in host_inc.items()), key=lambda t: (-t[1], t[0]))

    # flags: how often each was corrected, and to what
    flag_inc: dict[str, set[str]] = defaultdict(set)
    flag_changes: dict[str, Counter] = defaultdict(Counter)
    flag_rules: dict[str, set[str]] = defaultdict(set)
    for f in findings:
        for c in f.get("flags_corrected") or []:
            flag_inc[c["flag"]].add(f["incident_id"])
            flag_changes[c["flag"]][(c.get("old") or "(unset)", c.get("new") or "(remove)")] += 1
            flag_rules[c["flag"]].add(f.get("rule_id") or "")
    flags = [FlagFix(fl, len(inc), [(o, n, k) for (o, n), k in flag_changes[fl].most_common(4)], sorted(flag_rules[fl]))
             for fl, inc in flag_inc.items()]
    flags.sort(key=lambda x: (-x.incidents, x.flag))

    listing = []
    for r in sorted(incidents, key=lambda r: (r.get("date") or date.min, r["incident_id"]), reverse=True):
        link = None
        if out_dir is not None and r.get("report"):
            folder = out_dir / "incidents" / r["incident_id"]
            link = f"incidents/{r['incident_id']}/" + ("report.html" if (folder / "report.html").is_file() else "")
        listing.append({**r, "link": link, "input_names": [Path(p).name for p in r.get("inputs") or []]})

    figure, figure_bin = _figure(incidents)
    view = FleetView(listing, failed, recurring, gpus, hosts_hw, flags, figure, span, figure_bin=figure_bin)
    view.headline = _headline(view, ok)
    return view


#: (longest span, bar width, the width in words): bars as narrow as the incidents' real span needs, so an
#: afternoon is not drawn on an axis of months, nor a quarter as a hundred slivers
_BINS = ((timedelta(hours=6), timedelta(minutes=10), "10 minutes"),
         (timedelta(days=3), timedelta(hours=1), "hour"),
         (timedelta(days=120), timedelta(days=1), "day"),
         (None, timedelta(days=7), "week"))
#: the axis shows at least this many bars' width, so that one bar is a bar, not the whole plot
_MIN_BARS_SHOWN = 8


def _moment(r: dict[str, Any]) -> datetime | None:
    """When an incident happened, UTC without tzinfo: its collection, else its last event, else its day."""
    for key in ("collected_at", "last_event"):
        t = r.get(key)
        if isinstance(t, datetime):
            return t.astimezone(timezone.utc).replace(tzinfo=None) if t.tzinfo else t
    d = r.get("date")
    return datetime(d.year, d.month, d.day) if isinstance(d, date) else None


def _bin_start(t: datetime, width: timedelta) -> datetime:
    if width >= timedelta(days=7):
        day = t.replace(hour=0, minute=0, second=0, microsecond=0)
        return day - timedelta(days=day.weekday())
    step = int(width.total_seconds())
    midnight = t.replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight + timedelta(seconds=int((t - midnight).total_seconds()) // step * step)


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


def _figure(incidents: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, str]:
    """Incidents per time bin, stacked by root-cause category (failed inputs by the time their file is
    from); the bin (10 minutes to a week) and the axis fit the incidents' real span. Returns the figure
    and the bin in words."""
    moments = [(r, t) for r in incidents if (t := _moment(r)) is not None]
    if not moments:
        return None, "day"
    first, last = min(t for _r, t in moments), max(t for _r, t in moments)
    width, word = next((w, said) for most, w, said in _BINS if most is None or last - first <= most)
    counts: dict[str, Counter] = defaultdict(Counter)
    for r, t in moments:
        cat = FAILED if r.get("error") else (r.get("root_cause_category") or NO_ROOT)
        counts[cat][_bin_start(t, width)] += 1
    bins = sorted({b for c in counts.values() for b in c})
    order = sorted(counts, key=lambda c: (c in (NO_ROOT, FAILED), -sum(counts[c].values()), c))
    # bars centred on their bin, 90 % of its width (a date axis measures widths in milliseconds)
    data = [{"type": "bar", "name": cat, "x": [_stamp(b + width / 2) for b in bins],
             "y": [counts[cat].get(b, 0) for b in bins], "width": width.total_seconds() * 1000 * 0.9,
             "marker": {"color": _CATEGORY_COLOURS.get(cat, "#78909c")},
             "hovertemplate": f"%{{y}} incidents in the {word} from %{{x}}<extra>" + re.sub(r"[<>&]", "", cat)
                              + "</extra>"}
            for cat in order]
    lo, hi = bins[0], bins[-1] + width
    pad = max(width, (width * _MIN_BARS_SHOWN - (hi - lo)) / 2)
    tallest = max(sum(counts[c].get(b, 0) for c in counts) for b in bins)
    layout = {"barmode": "stack", "height": 360, "margin": {"l": 60, "r": 30, "t": 10, "b": 50},
              "xaxis": {"type": "date", "title": {"text": f"time (UTC), one bar per {word}"},
                        "range": [_stamp(lo - pad), _stamp(hi + pad)], "automargin": True},
              "yaxis": {"title": {"text": f"incidents per {word}"}, "rangemode": "tozero", "automargin": True,
                        **({"dtick": 1} if tallest <= 10 else {})},
              "legend": {"orientation": "h", "y": -0.25, "yanchor": "top"}}
    return {"data": data, "layout": layout}, word


def _headline(view: FleetView, ok: list[dict[str, Any]]) -> list[str]:
    lines = []
    first, last = view.span
    hosts = {h for r in ok for h in r.get("hosts") or []}
    when = f" between {first} and {last}" if first and last and first != last else (f" on {first}" if first else "")
    lines.append(f"{len(ok)} incident(s) analysed{when}, on {len(hosts)} host(s)"
                 + (f"; {len(view.failed)} input(s) could not be analysed (listed below)." if view.failed else "."))
    if view.recurring:
        top = view.recurring[0]
        share = 100 * top.incidents / max(len(ok), 1)
        trend = ""
        if top.recent or top.before:
            trend = (f" It is still happening: {top.recent} in the last 7 days against {top.before} the week before."
                     if top.recent >= top.before and top.recent else
                     f" It is receding: {top.recent} in the last 7 days against {top.before} the week before.")
        lines.append(f"The most frequent root cause is {top.title or top.rule_id} ({top.rule_id}, {top.category}): "
                     f"{top.incidents} incident(s), {share:.0f}% of those analysed, on {len(top.hosts)} host(s).{trend}")
    repeat = [g for g in view.gpus if len(g.incidents) > 1]
    if repeat:
        lines.append(f"{len(repeat)} GPU(s) faulted in more than one incident: hardware to drain and RMA, "
                     "not configuration to tune. The worst is " f"{repeat[0].gpu} ({len(repeat[0].incidents)} incidents).")
    if view.flags:
        f = view.flags[0]
        changes = ", ".join(f"{o} → {n}" for o, n, _k in f.changes[:3])
        line = f"The flag corrected most often is {f.flag}: in {f.incidents} incident(s) ({changes})."
        if f.incidents > 1 and f.changes[0][2] * 2 >= sum(k for _o, _n, k in f.changes):
            line += " One correction dominates: fix the default in the deployment template, not one host at a time."
        lines.append(line)
    return lines


def render_index(out_dir: Path) -> str:
    """The fleet page; it loads the dataset's one copy of plotly.js (``DIR/plotly.min.js``)."""
    from forensics import __version__
    from forensics.report import PLOTLY_JS, template_env

    out_dir = Path(out_dir)
    view = build_view(read_incidents(out_dir), read_findings(out_dir), out_dir)
    return template_env(True).get_template("fleet.html.j2").render(v=view, plotlyjs_src=PLOTLY_JS, version=__version__)


def write_index(out_dir: Path) -> Path:
    from forensics.report import PLOTLY_JS, write_atomic, write_plotlyjs

    if not (Path(out_dir) / PLOTLY_JS).is_file():
        write_plotlyjs(Path(out_dir))
    target = Path(out_dir) / "index.html"
    text = render_index(out_dir)
    write_atomic(target, lambda p: p.write_text(text, encoding="utf-8", newline="\n"))
    return target

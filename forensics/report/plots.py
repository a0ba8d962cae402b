"""Plotly figure specs of the timeline for the HTML report.

Each figure is a plain dict (``data`` + ``layout``) that the page hands to ``Plotly.newPlot``; no
plotly Python objects are needed. Memory is plotted in GiB (2^30 bytes) because every source's bytes
are canonical in the timeline. Series longer than :data:`MAX_POINTS` are cut down for the page with
min/max bucket downsampling, so spikes survive; the Parquet file keeps every row.

Rows that carry no UTC instant (a pasted ``free -g`` in a transcript) cannot share a time axis with
the rest; they go on a separate "by order" figure whose x is the position in the input.

>>> xs, ys = downsample_minmax(list(range(10)), [0, 9, 1, 1, 1, 1, -5, 1, 1, 1], max_points=4)
>>> 9 in ys and -5 in ys and len(xs) <= 4
True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from forensics.model import Timeline

#: Most points one series may carry into the page.
MAX_POINTS = 5000
#: Most marker lines drawn on one figure (the rest are listed as a count).
MAX_MARKERS = 40
#: A chart is drawn only when some series has at least this many points: one or two samples say
#: nothing a sentence cannot, and an almost empty chart reads as missing data.
MIN_SERIES_POINTS = 3
GIB = float(1 << 30)

#: SGLang lines that print the device's free memory ("avail mem=… GB", GiB) for one rank.
SGLANG_AVAIL_KINDS = (
    "weight_load_begin",
    "weight_load_end",
    "memory_pool_end",
    "cuda_graph_begin",
    "cuda_graph_end",
    "kv_sizing",
    "capture_progress",
)
#: Event kind → label of the vertical marker it draws.
MARKER_LABELS = {
    "server_args": "launch",
    "launch_command": "launch",
    "weight_load_end": "weights loaded",
    "cuda_graph_end": "graphs captured",
    "hicache_alloc": "HiCache allocated",
    "hicache_insufficient": "HiCache refused",
    "cuda_oom": "CUDA OOM",
    "cuda_error_oom": "CUDA OOM",
    "sigquit": "SIGQUIT",
    "rank_dead": "rank died",
    "sigterm": "SIGTERM",
    "xid": "Xid",
    "oom_kill": "OOM-killer",
    "crash_dump": "crash dump",
    # the flight recorder's own events (parsers/record.py)
    "oom_kill_count": "OOM kill",
    "process_exit": "process exited",
    "record_collect": "collect",
    "record_stall": "probe stalled",
}
#: the recorder's ``process_start`` marks a launch only for a server's launcher, not for each of its ranks
_LAUNCHER_ROLES = ("launch_server", "api_server")
_KILL_WORDS = ("kill", "pkill", "fuser -k", "killall")
_TRACE_COLOURS = (
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
)


@dataclass
class PlotSpec:
    """One figure for the page: plotly ``data``/``layout`` plus words around it."""

    key: str
    title: str
    caption: str
    data: list[dict[str, Any]]
    layout: dict[str, Any]
    downsampled: list[str] = field(default_factory=list)  # names of series cut to MAX_POINTS

    @property
    def points(self) -> int:
        return sum(len(t.get("x", [])) for t in self.data)


@dataclass
class Plots:
    figures: list[PlotSpec]
    #: sentences for what could not be drawn ("No GPU memory samples in the input.")
    notes: list[str]


def minmax_indices(ys: list[float | None], max_points: int = MAX_POINTS) -> list[int]:
    """Indices to keep so at most ``max_points`` remain: the ends and each bucket's min and max.

    Points keep their order; None values are skipped only when cutting.
    """
    n = len(ys)
    if n <= max_points:
        return list(range(n))
    buckets = max(1, (max_points - 2) // 2)
    keep = {0, n - 1}
    for b in range(buckets):
        idx = [i for i in range(b * n // buckets, (b + 1) * n // buckets) if ys[i] is not None]
        if idx:
            keep.add(min(idx, key=lambda i: ys[i]))
            keep.add(max(idx, key=lambda i: ys[i]))
    return sorted(keep)


def downsample_minmax(xs: list[Any], ys: list[float | None], max_points: int = MAX_POINTS) -> tuple[list, list]:
    """``xs``/``ys`` (sorted by x) cut to at most ``max_points`` by :func:`minmax_indices`."""
    keep = minmax_indices(ys, max_points)
    return [xs[i] for i in keep], [ys[i] for i in keep]


def _x_time(ts: datetime) -> str:
    # plotly.js dates carry no zone; the axis title says UTC.
    return ts.strftime("%Y-%m-%d %H:%M:%S.%f")


def _gib(v: int | None) -> float | None:
    return None if v is None else round(v / GIB, 3)


def _rank_label(row: dict[str, Any]) -> str:
    if row.get("rank"):
        return str(row["rank"])
    if row.get("tp_rank") is not None:
        return f"TP{row['tp_rank']}"
    return "no rank prefix"


def _hover(row: dict[str, Any]) -> str:
    return f"{row.get('file') or '?'}:{row.get('line') or '?'} {row.get('kind')}"


def _series_traces(
    groups: dict[str, list[tuple[Any, float | None, str]]], *, dash: str | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """One scatter trace per named group of (x, y, hover) points, downsampled."""
    traces, cut = [], []
    for i, (name, pts) in enumerate(sorted(groups.items())):
        pts.sort(key=lambda p: p[0])
        if len(pts) > MAX_POINTS:
            cut.append(name)
            pts = [pts[j] for j in minmax_indices([p[1] for p in pts])]
        xs, ys, texts = [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts]
        trace: dict[str, Any] = {
            "type": "scatter",
            "mode": "lines+markers" if len(xs) < 200 else "lines",
            "name": name,
            "x": xs,
            "y": ys,
            "text": texts,
            "hovertemplate": "%{y:.2f} GiB<br>%{text}<extra>%{fullData.name}</extra>",
            "line": {"color": _TRACE_COLOURS[i % len(_TRACE_COLOURS)]},
        }
        if dash:
            trace["line"]["dash"] = dash
        traces.append(trace)
    return traces, cut


def _is_kill_command(row: dict[str, Any]) -> bool:
    text = (row.get("text") or "").lower()
    return row.get("kind") == "command" and any(w in text for w in _KILL_WORDS)


def _marker_label(row: dict[str, Any]) -> str | None:
    kind = row.get("kind")
    if kind == "xid" and row.get("code") is not None:
        return f"Xid {row['code']}"
    if kind in MARKER_LABELS:
        return MARKER_LABELS[kind]
    if kind == "process_start" and any(f'"{r}"' in (row.get("attrs") or "") for r in _LAUNCHER_ROLES):
        return "launch"
    if _is_kill_command(row):
        return "kill"
    return None


def _markers(rows: list[tuple[Any, str, float]], window: float) -> tuple[list[dict], list[dict], int]:
    """Vertical lines + labels for (x, label, position) triples.

    Repeats of one label closer than ``window`` (same unit as position) collapse into one line
    labelled "label ×n", so eight ranks logging the same step draw one marker.
    """
    groups: list[list[Any]] = []  # [x, label, first_pos, last_pos, count]
    open_by_label: dict[str, list[Any]] = {}
    for x, label, pos in sorted(rows, key=lambda r: (r[2], r[1])):
        g = open_by_label.get(label)
        if g is not None and pos - g[3] <= window:
            g[3], g[4] = pos, g[4] + 1
            continue
        g = [x, label, pos, pos, 1]
        open_by_label[label] = g
        groups.append(g)
    dropped = max(0, len(groups) - MAX_MARKERS)
    shapes, notes = [], []
    for j, (x, label, _, _, count) in enumerate(groups[:MAX_MARKERS]):
        alarm = "OOM" in label or label in ("kill", "SIGQUIT", "SIGTERM", "rank died") or "Xid" in label
        colour = "#b00020" if alarm else "#555555"
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
                       "line": {"color": colour, "width": 1, "dash": "dot"}})
        notes.append({"x": x, "xref": "x", "yref": "paper", "y": 1.0 - 0.07 * (j % 4),
                      "text": label if count == 1 else f"{label} ×{count}",
                      "showarrow": False, "xanchor": "left", "font": {"size": 10, "color": colour},
                      "bgcolor": "rgba(255,255,255,0.7)"})
    return shapes, notes, dropped


def _layout(title_x: str, axis_type: str | None, shapes: list, annotations: list) -> dict[str, Any]:
    xaxis: dict[str, Any] = {"title": {"text": title_x}, "automargin": True}
    if axis_type:
        xaxis["type"] = axis_type
    return {
        "xaxis": xaxis,
        "yaxis": {"title": {"text": "GiB"}, "rangemode": "tozero", "automargin": True},
        "shapes": shapes,
        "annotations": annotations,
        "margin": {"l": 60, "r": 20, "t": 30, "b": 50},
        "height": 380,
        "legend": {"orientation": "h", "y": -0.25},
        "hovermode": "closest",
        "font": {"family": "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", "size": 12},
    }


def _rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return list(frame.iter_rows(named=True))


def _gpu_points(rows: list[dict[str, Any]], x_of) -> dict[str, list]:
    groups: dict[str, list] = {}
    for r in rows:
        if r["kind"] == "gpu_memory" and r.get("used_bytes") is not None and r.get("gpu") is not None:
            via = "recorded" if r.get("source") == "record" else "nvidia-smi"
            groups.setdefault(f"GPU {r['gpu']} used ({via})", []).append(
                (x_of(r), _gib(r["used_bytes"]), _hover(r)))
    return groups


def _sglang_points(rows: list[dict[str, Any]], x_of, several_runs: bool) -> dict[str, list]:
    groups: dict[str, list] = {}
    for r in rows:
        if r["kind"] in SGLANG_AVAIL_KINDS and r.get("avail_bytes") is not None:
            name = f"{_rank_label(r)} free (SGLang avail mem)"
            if several_runs and r.get("run") is not None:
                name = f"{name}, run {r['run']}"
            groups.setdefault(name, []).append((x_of(r), _gib(r["avail_bytes"]), _hover(r)))
    return groups


def _host_points(rows: list[dict[str, Any]], x_of) -> dict[str, list]:
    groups: dict[str, list] = {}
    for r in rows:
        if r["kind"] != "host_memory":
            continue
        for col, word in (("used_bytes", "used"), ("avail_bytes", "available")):
            if r.get(col) is not None:
                groups.setdefault(f"host {word} ({r.get('source') or '?'})", []).append(
                    (x_of(r), _gib(r[col]), _hover(r)))
    return groups


def _order_positions(rows: list[dict[str, Any]]) -> dict[int, int]:
    """Row id → ordinal on the "by order" axis: one position per record, or per snapshot of samples.

    All GPUs (or lines of a ``free`` table) from one snapshot share a position.
    """
    first_line: dict[tuple, int] = {}
    for r in rows:
        if r["kind"] in ("gpu_memory", "host_memory") and r.get("snapshot") is not None:
            k = (r.get("file") or "", r["snapshot"], r["kind"])
            first_line[k] = min(first_line.get(k, r.get("line") or 0), r.get("line") or 0)

    def key(r: dict[str, Any]) -> tuple[str, int]:
        k = (r.get("file") or "", r.get("snapshot"), r["kind"])
        return (r.get("file") or "", first_line.get(k, r.get("line") or 0))

    ordinals = {k: i + 1 for i, k in enumerate(sorted({key(r) for r in rows}))}
    return {id(r): ordinals[key(r)] for r in rows}


_PLOTTED = ("gpu_memory", "host_memory", *SGLANG_AVAIL_KINDS)


def enough_to_plot(traces: list[dict[str, Any]]) -> bool:
    """Whether a figure of these traces shows a course: some series with :data:`MIN_SERIES_POINTS` points.

    >>> enough_to_plot([{"x": [1, 2], "y": [3, 4]}]), enough_to_plot([{"x": [1, 2, 3], "y": [3, 4, 5]}])
    (False, True)
    """
    return any(sum(y is not None for y in t.get("y") or []) >= MIN_SERIES_POINTS for t in traces)


def _samples(traces: list[dict[str, Any]]) -> int:
    """Samples of the longest series (two series of one snapshot are one sample)."""
    return max((sum(y is not None for y in t.get("y") or []) for t in traces), default=0)


def timeline_plots(tl: Timeline) -> Plots:
    """The report's figures: GPU memory, host memory (UTC time axis) and a "by order" figure."""
    ev = tl.events
    wanted = ev.filter(pl.col("kind").is_in(list({*_PLOTTED, *MARKER_LABELS, "command", "process_start"})))
    rows = _rows(wanted)
    several_runs = wanted.filter(pl.col("run").is_not_null())["run"].n_unique() > 1 if len(wanted) else False
    timed = [r for r in rows if r.get("ts") is not None]
    untimed = [r for r in rows if r.get("ts") is None]
    figures: list[PlotSpec] = []
    notes: list[str] = []

    def at_time(r: dict[str, Any]) -> str:
        return _x_time(r["ts"])

    marker_rows = [(at_time(r), lab, r["ts"].timestamp()) for r in timed if (lab := _marker_label(r))]
    span = (max(p for *_, p in marker_rows) - min(p for *_, p in marker_rows)) if marker_rows else 0.0
    shapes, annotations, dropped = _markers(marker_rows, window=max(span / 100.0, 2.0))
    dropped_note = f" {dropped} further event markers are not drawn." if dropped else ""

    gpu_traces, gpu_cut = _series_traces(_gpu_points(timed, at_time))
    sgl_traces, sgl_cut = _series_traces(_sglang_points(timed, at_time, several_runs), dash="dash")
    if (gpu_traces or sgl_traces) and not enough_to_plot(gpu_traces + sgl_traces):
        notes.append(f"Only {_samples(gpu_traces + sgl_traces)} time-stamped GPU memory sample(s): too few to chart; "
                     "they are in the evidence and timeline.parquet.")
    elif gpu_traces or sgl_traces:
        figures.append(PlotSpec(
            key="gpu-memory",
            title="GPU memory over time",
            caption="Solid: memory used per GPU as nvidia-smi (or the flight recorder) reported it. Dashed: device-wide free memory "
                    "each SGLang rank printed (\"avail mem\", GiB). Time axis is UTC; dotted lines mark "
                    "events." + dropped_note,
            data=gpu_traces + sgl_traces,
            layout=_layout("time (UTC)", "date", shapes, annotations),
            downsampled=gpu_cut + sgl_cut,
        ))
    else:
        notes.append("No time-stamped GPU memory samples (nvidia-smi or SGLang \"avail mem\" lines) in the input.")

    host_traces, host_cut = _series_traces(_host_points(timed, at_time))
    if host_traces and not enough_to_plot(host_traces):
        notes.append(f"Only {_samples(host_traces)} time-stamped host memory sample(s): too few to chart; they are in "
                     "the evidence and timeline.parquet.")
    elif host_traces:
        figures.append(PlotSpec(
            key="host-memory",
            title="Host memory over time",
            caption="Used and available host memory (GiB) from free, /proc/meminfo and the flight recorder "
                    "(forensics record). free -g truncates to whole GiB, so those points are lower bounds. "
                    "Time axis is UTC." + dropped_note,
            data=host_traces,
            layout=_layout("time (UTC)", "date", shapes, annotations),
            downsampled=host_cut,
        ))
    else:
        notes.append("No time-stamped host memory samples (free, /proc/meminfo) in the input.")

    plotted_untimed = [r for r in untimed if r["kind"] in _PLOTTED or _marker_label(r)]
    if any(r["kind"] in _PLOTTED for r in plotted_untimed):
        pos = _order_positions(plotted_untimed)

        def at_order(r: dict[str, Any]) -> int:
            return pos[id(r)]

        traces: list[dict[str, Any]] = []
        cut: list[str] = []
        for groups, dash in ((_gpu_points(plotted_untimed, at_order), None),
                             (_host_points(plotted_untimed, at_order), "dot"),
                             (_sglang_points(plotted_untimed, at_order, several_runs), "dash")):
            t, c = _series_traces(groups, dash=dash)
            traces += t
            cut += c
        if not enough_to_plot(traces):
            notes.append(f"{_samples(traces)} memory sample(s) without a time stamp: too few to chart by their order.")
            traces = []
    if any(r["kind"] in _PLOTTED for r in plotted_untimed) and traces:
        m_rows = [(at_order(r), lab, float(at_order(r))) for r in plotted_untimed if (lab := _marker_label(r))]
        o_shapes, o_notes, o_dropped = _markers(m_rows, window=0.0)
        figures.append(PlotSpec(
            key="by-order",
            title="Memory by order (rows without a time stamp)",
            caption="These rows carry no time stamp (for example free or nvidia-smi output pasted into a "
                    "transcript), so they are plotted by their order in the input: x is the position "
                    "(file, then line; one position per snapshot), not time. Positions in different files "
                    "are not comparable."
                    + (f" {o_dropped} further event markers are not drawn." if o_dropped else ""),
            data=traces,
            layout=_layout("order in the input (not time)", "linear", o_shapes, o_notes),
            downsampled=cut,
        ))
    requests = _crash_requests_figure(ev, shapes, annotations)
    if requests is not None:
        figures.append(requests)
    if not figures:
        notes.append("Nothing in the input can be plotted.")
    return Plots(figures=figures, notes=notes)


def _crash_requests_figure(ev: pl.DataFrame, shapes: list, annotations: list) -> PlotSpec | None:
    """SGLang's crash dump as arrivals: when each request came in and how long its input was, finished or
    not at the crash (parsers/crash_dump.py); a burst just before the crash shows as a cluster at the right."""
    reqs = _rows(ev.filter((pl.col("kind") == "crash_request") & pl.col("ts").is_not_null()
                           & pl.col("tokens").is_not_null()))
    if len(reqs) < MIN_SERIES_POINTS:
        return None
    groups: dict[str, list[tuple[Any, float | None, str]]] = {"finished": [], "unfinished at the crash": []}
    for r in sorted(reqs, key=lambda r: r["ts"]):
        done = '"finished": true' in (r.get("attrs") or "")
        groups["finished" if done else "unfinished at the crash"].append(
            (_x_time(r["ts"]), float(r["tokens"]), f"{_hover(r)} max_new_tokens={r.get('count')}"))
    traces, cut = _series_traces({k: v for k, v in groups.items() if v})
    for t in traces:
        t["mode"] = "markers"
        t["hovertemplate"] = "%{y:.0f} input tokens<br>%{text}<extra>%{fullData.name}</extra>"
    layout = _layout("arrival (UTC)", "date", shapes, annotations)
    layout["yaxis"]["title"] = {"text": "input tokens"}
    return PlotSpec(
        key="crash-dump-requests",
        title="Requests in SGLang's crash dump",
        caption="Each request of the crash dump at its arrival time, by its input length in tokens: the finished "
                "ones of the last minutes and those still unfinished at the crash. Time axis is UTC.",
        data=traces, layout=layout, downsampled=cut,
    )


"""report.html in a real browser: headless Chromium driven over the DevTools protocol.

Chromium talks CDP over a pair of pipes (``--remote-debugging-pipe``: it reads commands on fd 3 and
writes replies on fd 4, each message NUL-terminated JSON), so no websocket library is needed.
The page must render its plots, log no console error, raise no exception and make no network
request (name resolution is also mapped to nowhere, so an attempt fails rather than leaks).
Skips only where Chromium is absent.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
import report_fixture as rf

from forensics.report import render_html

pytestmark = pytest.mark.browser

CHROMIUM = next((p for p in ("/usr/bin/chromium", shutil.which("chromium") or "",
                             shutil.which("chromium-browser") or "", shutil.which("google-chrome") or "")
                 if p and os.access(p, os.X_OK)), None)


class Chromium:
    """A headless Chromium and one attached page, over ``--remote-debugging-pipe``."""

    def __init__(self, profile: Path) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def child_fds() -> None:  # runs in the child: put the pipe ends on fds 3 and 4
            # Move both ends above 10 first: dup2 onto itself would keep CLOEXEC, and either end
            # may already sit on 3 or 4.
            high_r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD_CLOEXEC, 10)
            high_w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD_CLOEXEC, 10)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
                '--host-resolver-rules=MAP * ~NOTFOUND', "--remote-debugging-pipe",
                f"--user-data-dir={profile}", "--window-size=1280,2000", "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE if os.environ.get("X_DEBUG") else subprocess.DEVNULL, preexec_fn=child_fds,
                                     close_fds=False)  # fds 3/4 made by dup2 must survive; ours are CLOEXEC
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_chrome], [], [], left)
            if ready:
                chunk = os.read(self._from_chrome, 1 << 20)
                if not chunk:
                    raise RuntimeError("Chromium closed the DevTools pipe")
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: bool = True,
             timeout: float = 30.0) -> dict[str, Any]:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        deadline = time.monotonic() + timeout
        while True:
            ev = self._read_message(deadline)
            self.events.append(ev)
            if ev.get("method") == method:
                return ev

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        try:
            while True:
                self.events.append(self._read_message(deadline))
        except TimeoutError:
            pass

    def attach(self) -> None:
        targets = self.send("Target.getTargets", session=False)["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.send(f"{domain}.enable")

    def evaluate(self, expression: str) -> Any:
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return res.get("result", {}).get("value")

    def close(self) -> None:
        with contextlib.suppress(Exception):  # already gone: fall through to kill
            self.send("Browser.close", session=False, timeout=5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        os.close(self._to_chrome)
        os.close(self._from_chrome)


def png_colours(png: bytes, limit: int = 10_000) -> int:
    """Distinct RGB colours of an 8-bit RGB/RGBA PNG (decoded with zlib and struct only)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = colour_type = 0
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        ctype, data = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]
        pos += 12 + length
        if ctype == b"IHDR":
            width, height, depth, colour_type = struct.unpack(">IIBB", data[:10])
            assert depth == 8 and colour_type in (2, 6), f"unsupported PNG depth {depth} type {colour_type}"
        elif ctype == b"IDAT":
            idat += data
        elif ctype == b"IEND":
            break
    bpp = 3 if colour_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    colours: set[bytes] = set()
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        if y % 4 == 0:  # every 4th row is plenty to tell a blank page from a drawn one
            for x in range(0, stride, bpp * 2):
                colours.add(bytes(line[x:x + 3]))
            if len(colours) >= limit:
                break
        prev = line
    return len(colours)


def open_report(html_path: Path, profile: Path) -> dict[str, Any]:
    """Load the page; return its title, plot count, problems seen and a screenshot."""
    browser = Chromium(profile)
    try:
        browser.attach()
        url = html_path.resolve().as_uri()
        browser.send("Page.navigate", {"url": url})
        browser.wait_for("Page.loadEventFired", timeout=60)
        deadline = time.monotonic() + 20
        expected = browser.evaluate("document.querySelectorAll('div.plot[data-figure]').length")
        while time.monotonic() < deadline:
            drawn = browser.evaluate("document.querySelectorAll('.js-plotly-plot .main-svg').length > 0 && "
                                     "document.querySelectorAll('.js-plotly-plot').length")
            if drawn and drawn >= expected:
                break
            browser.drain(0.2)
        browser.drain(0.5)  # late console messages and requests
        shot = browser.send("Page.captureScreenshot", {"format": "png"})
        info = {
            "title": browser.evaluate("document.title"),
            "plots_expected": expected,
            "plots_drawn": browser.evaluate("document.querySelectorAll('.js-plotly-plot').length"),
            "main_svgs": browser.evaluate("document.querySelectorAll('.js-plotly-plot .main-svg').length"),
            "alert_ran": browser.evaluate("window.__pwned === true"),
            "dom": browser.evaluate("document.documentElement.outerHTML"),
            "png": base64.b64decode(shot["data"]),
        }
        problems = []
        for ev in browser.events:
            m, p = ev.get("method"), ev.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                problems.append(f"console.{p['type']}: {[a.get('value') for a in p.get('args', [])]}")
            elif m == "Runtime.exceptionThrown":
                problems.append(f"exception: {p.get('exceptionDetails', {}).get('text')}")
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                problems.append(f"log: {p['entry'].get('text')}")
            elif m == "Network.requestWillBeSent" and p.get("request", {}).get("url") != url:
                problems.append(f"request: {p['request'].get('url')}")
        info["problems"] = problems
        return info
    finally:
        browser.close()


needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, Any]:
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed")
    out = tmp_path_factory.mktemp("report")
    html = out / "report.html"
    html.write_text(render_html(rf.document(), rf.timeline(), rf.catalog()), encoding="utf-8")
    return open_report(html, out / "profile")


@needs_chromium
def test_plots_render_without_errors_or_requests(rendered):
    assert rendered["problems"] == []
    assert rendered["plots_expected"] == 3  # GPU memory, host memory, by-order
    assert rendered["plots_drawn"] == rendered["plots_expected"]
    assert rendered["main_svgs"] >= rendered["plots_expected"]
    assert 'class="main-svg"' in rendered["dom"]


@needs_chromium
def test_screenshot_is_not_blank(rendered):
    assert png_colours(rendered["png"]) > 20


@needs_chromium
def test_copy_button_without_clipboard_raises_nothing(tmp_path):
    # Clicking every copy button: clipboard may be denied in headless mode; the fallback must be quiet.
    html = tmp_path / "report.html"
    html.write_text(render_html(rf.document(), rf.timeline(), rf.catalog()), encoding="utf-8")
    browser = Chromium(tmp_path / "profile")
    try:
        browser.attach()
        browser.send("Page.navigate", {"url": html.as_uri()})
        browser.wait_for("Page.loadEventFired", timeout=60)
        clicked = browser.evaluate("(function(){var b=document.querySelectorAll('button.copy');"
                                   "b.forEach(function(x){x.click();});return b.length;})()")
        browser.drain(1.0)
        notes = browser.evaluate("Array.from(document.querySelectorAll('.copied')).map(function(s){"
                                 "return s.textContent;}).filter(Boolean).length")
        errors = [e for e in browser.events if e.get("method") in ("Runtime.exceptionThrown",)
                  or (e.get("method") == "Runtime.consoleAPICalled" and e["params"].get("type") == "error")]
    finally:
        browser.close()
    assert clicked >= 3  # command + cleanup commands
    assert notes == clicked  # every click told the user what happened
    assert errors == []


HOSTILE = [
    "<script>window.__pwned=true;document.title='pwned'</script>",
    "</script><script>window.__pwned=true;document.title='pwned'</script>",
    "<img src=x onerror=\"window.__pwned=true;document.title='pwned'\">",
    '<a href="javascript:window.__pwned=true">click</a>',
    "{{ 7*7 }} {% raw %} ${7*7}",
    "<!-- </textarea></pre><svg onload=\"document.title='pwned'\">",
]


@needs_chromium
def test_hostile_log_text_stays_text(tmp_path):
    doc, rows = rf.document(), rf.load_rows()
    for i, text in enumerate(HOSTILE):
        doc["findings"][1]["evidence"].append({"file": f"logs/{text}", "line": i + 1, "ts": None, "text": text})
    doc["findings"][1]["summary"] = HOSTILE[0]
    doc["findings"][1]["remediation"]["actions"].append(f"`{HOSTILE[1]}`")
    doc["input"]["gaps"].append(HOSTILE[2])
    for r in rows:
        if r["kind"] == "gpu_memory":
            r["text"] = HOSTILE[1]
            r["file"] = HOSTILE[5]
    html_text = render_html(doc, rf.timeline(rows), rf.catalog())
    html = tmp_path / "report.html"
    html.write_text(html_text, encoding="utf-8")
    info = open_report(html, tmp_path / "profile")
    assert info["problems"] == []
    assert info["alert_ran"] is False
    assert "pwned" not in (info["title"] or "")
    assert info["title"].startswith("forensics report")
    assert "{{ 7*7 }}" in info["dom"]  # shown as typed, never evaluated by a template
    assert info["plots_drawn"] == info["plots_expected"]


@needs_chromium
def test_prints_with_a_page_per_section(tmp_path):
    import re

    html = tmp_path / "report.html"
    html.write_text(render_html(rf.document(), rf.timeline(), rf.catalog()), encoding="utf-8")
    browser = Chromium(tmp_path / "profile")
    try:
        browser.attach()
        browser.send("Page.navigate", {"url": html.as_uri()})
        browser.wait_for("Page.loadEventFired", timeout=60)
        browser.drain(0.5)
        pdf = base64.b64decode(browser.send("Page.printToPDF", {"printBackground": True}, timeout=60)["data"])
        browser.send("Emulation.setEmulatedMedia", {"media": "print"})
        bar = browser.evaluate("getComputedStyle(document.querySelector('nav.bar')).display")
    finally:
        browser.close()
    pages = len(re.findall(rb"/Type\s*/Page\b", pdf))
    # six sections after the root cause each start a page (what to change … what we read)
    assert pages >= 6
    assert bar == "none"  # no sticky bar on paper


FIRST_SCREEN = {"width": 1400, "height": 900}
ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "fixtures" / "scenarios"


def _first_screen_positions(html_path: Path, profile: Path) -> dict[str, Any]:
    """Where the root cause, the arithmetic and the corrected command sit on a 1400 × 900 screen."""
    browser = Chromium(profile)
    try:
        browser.attach()
        browser.send("Emulation.setDeviceMetricsOverride", {**FIRST_SCREEN, "deviceScaleFactor": 1, "mobile": False})
        browser.send("Page.navigate", {"url": html_path.resolve().as_uri()})
        browser.wait_for("Page.loadEventFired", timeout=60)
        browser.drain(0.5)
        shot = base64.b64decode(browser.send("Page.captureScreenshot", {"format": "png"})["data"])
        return {"png": shot, **browser.evaluate("""(() => {
            const box = sel => { const e = document.querySelector(sel);
                                 if (!e) return null; const r = e.getBoundingClientRect();
                                 return {top: r.top, bottom: r.bottom, width: r.width}; };
            return {viewport: window.innerHeight, scrolled: window.scrollY,
                    root: box('#root-summary'), arithmetic: box('#flag-diff tbody tr td:last-child'),
                    command: box('#cmd-new') || box('#cmd-flags'),
                    copy: box('button[data-copy="cmd-new-text"]') || box('button[data-copy="cmd-flags-text"]'),
                    listed: Array.from(document.querySelectorAll('#root-cause > p a[href^="#finding-"]'))
                                 .map(a => a.textContent.trim())};
        })()""")}
    finally:
        browser.close()


def _write_report(inputs: list[Path], out: Path) -> Path:
    from forensics.analysis import analyse
    from forensics.report import write_outputs

    tl, doc = analyse(inputs, quiet=True)
    assert doc["root_cause"], "the report needs a root cause for this check"
    write_outputs(doc, tl, out, {"html"})
    return out / "report.html"


@needs_chromium
@pytest.mark.parametrize("name, inputs", [
    ("seed demo", [ROOT / "fixtures" / "seed_bundle"]),
    ("vLLM", [SCENARIOS / "vllm_graph_capture_oom" / "input"]),
    ("four hosts", sorted(p for p in (SCENARIOS / "multihost_four_nodes_hicache").iterdir() if p.is_dir())),
])
def test_first_screen_shows_root_cause_fix_and_arithmetic(tmp_path, name, inputs):
    """At 1400 × 900 the on-call engineer sees, without scrolling, what broke, the arithmetic and the
    command to relaunch with."""
    pos = _first_screen_positions(_write_report(inputs, tmp_path / "out"), tmp_path / "profile")
    if os.environ.get("FORENSICS_SCREENSHOTS"):  # the screens themselves, to look at (a folder)
        shots = Path(os.environ["FORENSICS_SCREENSHOTS"])
        shots.mkdir(parents=True, exist_ok=True)
        (shots / f"{name.replace(' ', '-')}.png").write_bytes(pos["png"])
    assert png_colours(pos["png"]) > 20, f"{name}: a blank first screen"
    assert pos["scrolled"] == 0 and pos["viewport"] == FIRST_SCREEN["height"]
    assert len(pos["listed"]) == len(set(pos["listed"])), f"{name}: a finding listed twice: {pos['listed']}"
    for part in ("root", "arithmetic", "command", "copy"):
        box = pos[part]
        assert box is not None, f"{name}: no {part} on the page"
        assert box["top"] >= 0 and box["bottom"] <= FIRST_SCREEN["height"], f"{name}: {part} at {box}"


def _fleet_page(out: Path, moments: list) -> Path:
    """The fleet page over incidents at ``moments`` (rows as the dataset holds them), with its plotly.js."""
    from forensics import __version__
    from forensics.fleet.index import build_view
    from forensics.report import PLOTLY_JS, template_env, write_plotlyjs

    cats = ("host_memory", "gpu_memory", "hardware", "startup")
    from forensics.fleet.dataset import INCIDENTS_SCHEMA

    blank = dict.fromkeys(INCIDENTS_SCHEMA.names)
    rows = [{**blank, "incident_id": f"inc-{k}", "date": t.date(), "collected_at": t, "root_cause_rule": "SGL-HOST-001",
             "root_cause_category": cats[k % len(cats)], "hosts": [f"gpu-node-{k % 3}"], "inputs": [],
             "engine": "sglang", "engine_version": None, "severity": "high", "findings": 1, "root_cause_title": "t"}
            for k, t in enumerate(moments)]
    out.mkdir(parents=True, exist_ok=True)
    write_plotlyjs(out)
    html = template_env(True).get_template("fleet.html.j2").render(v=build_view(rows, []), plotlyjs_src=PLOTLY_JS,
                                                                    version=__version__)
    (out / "index.html").write_text(html, encoding="utf-8")
    return out / "index.html"


@needs_chromium
@pytest.mark.parametrize("span_hours, clock", [(4, True), (24 * 27, False)])
def test_fleet_chart_fits_its_box_and_the_span(tmp_path, span_hours, clock):
    """The over-time chart at 1400 px: every label inside the chart (none cut at an edge), both axes
    titled in units, and an afternoon's incidents on an axis of hours of the day."""
    from datetime import datetime, timedelta

    t0 = datetime(2026, 11, 20, 13, 5)
    page = _fleet_page(tmp_path / "fleet", [t0 + timedelta(hours=span_hours) * k / 7 for k in range(8)])
    browser = Chromium(tmp_path / "profile")
    try:
        browser.attach()
        browser.send("Emulation.setDeviceMetricsOverride", {**FIRST_SCREEN, "deviceScaleFactor": 1, "mobile": False})
        browser.send("Page.navigate", {"url": page.resolve().as_uri()})
        browser.wait_for("Page.loadEventFired", timeout=60)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not browser.evaluate(
                "document.querySelectorAll('#plot-over-time .main-svg').length > 0"):
            browser.drain(0.2)
        browser.drain(0.5)
        geo = browser.evaluate("""(() => {
            const div = document.getElementById('plot-over-time'); const box = div.getBoundingClientRect();
            const out = [];
            div.querySelectorAll('svg text').forEach(t => {
                if (!t.textContent.trim()) return;
                const r = t.getBoundingClientRect();
                if (!r.width) return;
                if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1
                    || r.left < 0 || r.right > window.innerWidth)
                    out.push(t.textContent + ' at ' + [r.left, r.top, r.right, r.bottom].map(Math.round).join(','));
            });
            const ticks = Array.from(div.querySelectorAll('.xtick text')).map(t => t.textContent);
            const titles = Array.from(div.querySelectorAll('.g-xtitle text, .g-ytitle text')).map(t => t.textContent);
            return {cut: out, ticks: ticks, titles: titles};
        })()""")
    finally:
        browser.close()
    assert geo["cut"] == [], geo["cut"]
    assert len(geo["titles"]) == 2 and all("per" in t or "UTC" in t for t in geo["titles"]), geo["titles"]
    assert geo["ticks"]
    if clock:  # hours of one afternoon: tick labels are times of day, not months
        assert all(":" in t for t in geo["ticks"] if t), geo["ticks"]

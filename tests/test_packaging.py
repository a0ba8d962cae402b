"""The wheel is self-contained: templates, the example bundle and data files ship inside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    pytest.importorskip("hatchling")
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(out), str(REPO)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (whl,) = out.glob("forensics-*.whl")
    return whl


def test_wheel_carries_package_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("forensics/_templates/report.html.j2", "forensics/_templates/summary.md.j2",
                   "forensics/_examples/seed_bundle/manifest.json", "forensics/_examples/seed_bundle/logs/sglang.log",
                   "forensics/data/xid_catalog.json", "forensics/rules/catalog.toml", "parsers/sglang.py"):
        assert needed in names, needed
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "forensics = forensics.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()
    assert not any(n.startswith(("tests/", "fixtures/scenarios/")) for n in names)


def test_wheel_carries_the_native_scanner(wheel, tmp_path):
    """Where a C compiler exists the wheel is built with the compiled scanner, and it loads installed."""
    sys.path.insert(0, str(REPO))
    try:
        import hatch_build
    finally:
        sys.path.remove(str(REPO))
    if hatch_build.compiler() is None:
        pytest.skip("no C compiler: the wheel is pure Python and uses the polars path")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"parsers/_native/bulkscan.so", "parsers/_native/bulkscan.c"} <= names
    assert not wheel.name.endswith("-none-any.whl")  # a compiled library makes it platform-specific
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = subprocess.run([sys.executable, "-c", "from parsers import bulkscan as b; print(b.available(), b.why_not)"],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(site)}, cwd=tmp_path)
    assert probe.stdout.split()[0] == "True", probe.stdout + probe.stderr


def test_installed_layout_runs_the_demo(wheel, tmp_path):
    """Unpacked like site-packages (no checkout beside it), `forensics demo` still finds everything."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "demo", "-o", str(out)], capture_output=True,
                          text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    probe = subprocess.run([sys.executable, "-c", "import forensics; print(forensics.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path).stdout
    assert probe.startswith(str(site)), probe
    doc = json.loads((out / "findings.json").read_text())
    assert doc["root_cause"] and (out / "report.html").stat().st_size > 0

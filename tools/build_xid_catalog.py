"""Build ``forensics/data/xid_catalog.json`` from NVIDIA's Xid catalog (CSV export of Xid-Catalog.xlsx).

Usage::

    .venv/bin/python tools/build_xid_catalog.py [--src ../shared/research_samples/xid_catalog] [--check]

Reads ``01_xid_catalog_xids.csv`` (one row per Xid: code, mnemonic, description, applies-to columns,
immediate and investigatory resolution buckets, Xid 154 linkage, trigger conditions) and
``03_xid_resolution_buckets.csv`` (what each bucket means). Writes one JSON document with, per Xid:
code, mnemonic, description (the meaning), usual cause, the two buckets, the immediate action in
words, a severity we derive, flags, the products it applies to and the first paragraph of the trigger
conditions. ``--check`` exits 1 when the committed JSON differs from what the CSVs give.

Severity (critical/high/medium/low/info) is derived from the *immediate* resolution bucket, because
that bucket says what it takes to get the machine back into service:

==========================================================  =========
immediate bucket                                             severity
==========================================================  =========
RESTART_BM (reboot the node), WORKFLOW_XID_48 (uncorrectable  critical
ECC: reset, drain-and-reset with 63/64)
RESET_GPU, RESTART_VM, WORKFLOW_NVLINK_ERR,                  high
WORKFLOW_NVLINK5_ERR (GPU or VM must be reset)
RESTART_APP, XID_154 (read the action it names),             medium
CHECK_MECHANICALS, UPDATE_SWFW, CHECK_UVM, CONTACT_SUPPORT
IGNORE, WORKFLOW_XID_45 (a teardown after kill or error)     low
any bucket, when the catalog describes the code as "Unused"  info
==========================================================  =========

A few codes are set by hand (:data:`SEVERITY_OVERRIDES`, each with its reason): the catalog leaves
162-172 without a bucket, and 95/140 are worse than their bucket alone says. An unknown bucket is
an error, so the mapping stays total.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SRC = ROOT.parent / "shared" / "research_samples" / "xid_catalog"
OUT = ROOT / "forensics" / "data" / "xid_catalog.json"

SEVERITY_BY_BUCKET = {
    "RESTART_BM": "critical",
    "WORKFLOW_XID_48": "critical",
    "RESET_GPU": "high",
    "RESTART_VM": "high",
    "WORKFLOW_NVLINK_ERR": "high",
    "WORKFLOW_NVLINK5_ERR": "high",
    "RESTART_APP": "medium",
    "XID_154": "medium",
    "CHECK_MECHANICALS": "medium",
    "UPDATE_SWFW": "medium",
    "CHECK_UVM": "medium",
    "CONTACT_SUPPORT": "medium",
    "IGNORE": "low",
    "WORKFLOW_XID_45": "low",
}

#: code → (severity, why); applied after the bucket mapping.
SEVERITY_OVERRIDES = {
    95: ("critical", "uncontained memory error: every application on the GPU is affected"),
    140: ("critical", "uncorrectable ECC error escaped remapping/retirement"),
    162: ("info", "power-smoothing circuitry re-engaged; no action"),
    163: ("low", "power smoothing disengaged; no GPU reset required"),
    164: ("low", "power-smoothing circuitry low lifetime; monitor"),
    165: ("medium", "power-smoothing circuitry lifetime exhausted"),
    166: ("medium", "confidential-computing link security error"),
    167: ("critical", "PCIe fatal timeout"),
    168: ("high", "errors found in the write-protected region (reduced memory capacity)"),
    169: ("high", "internal micro-controller (SEC2) halt"),
    170: ("medium", "confidential-computing NVLink interrupt"),
    171: ("critical", "uncorrectable DRAM error (detail of Xid 48)"),
    172: ("critical", "uncorrectable SRAM error (detail of Xid 48)"),
}

#: Usual cause in a few words: our summary of the catalog, NVIDIA's Xid doc and NVSentinel's mapping.
CAUSE = {
    8: "driver or application",
    13: "application (hardware only when it repeats on the same GPC/TPC)",
    31: "application (driver or hardware when it repeats on the same GPU)",
    32: "application or driver; PCIe or system-memory corruption",
    38: "driver firmware",
    43: "application (a software-induced fault; the GPU stays healthy)",
    44: "driver",
    45: "application exit (Ctrl-C, kill) or an earlier Xid",
    46: "driver or hardware",
    48: "hardware (uncorrectable ECC)",
    61: "driver",
    62: "driver or hardware (thermal)",
    63: "hardware (expected wear, recorded)",
    64: "hardware",
    68: "application or driver",
    69: "application or driver",
    74: "hardware or NVLink link",
    79: "hardware, power, thermal, PCIe link or driver",
    92: "hardware",
    94: "hardware (memory), contained to one application",
    95: "hardware (memory)",
    109: "driver, application or hardware",
    110: "hardware",
    119: "driver/firmware (GSP) or a hung GPU",
    120: "driver/firmware (GSP)",
    121: "hardware (corrected C2C errors)",
    136: "hardware or NVLink link",
    140: "hardware",
    143: "hardware or driver",
    151: "driver",
    154: "informational: summarises the recovery action other Xids need",
    155: "software or user (intentional link down)",
    156: "hardware",
    157: "hardware",
    158: "hardware or driver",
    159: "hardware",
    160: "driver or hardware",
    161: "driver or hardware",
    **{c: "NVLink link or hardware" for c in range(144, 151)},
}
CAUSE_BY_BUCKET = {
    "RESTART_APP": "application or driver",
    "IGNORE": "informational",
    "RESET_GPU": "driver or hardware",
    "CONTACT_SUPPORT": "unknown: contact support",
}

NOISE_AFTER_KILL = {43, 45}  # logged when a process is killed or torn down: noise next to an OOM kill or pkill
APP_FAULT = {13, 31, 43, 45}
MEMORY_ECC = {48, 63, 64, 92, 94, 95, 140, 171, 172}
NVLINK = {74, 136, 137, 155, *range(144, 151)}
GSP = {119, 120}
PRODUCTS = ("A100", "H100", "B100", "GB200")


def _first_paragraph(text: str, limit: int) -> str:
    para = text.strip().strip('"').split("\n\n", 1)[0]
    para = " ".join(para.split()).replace('""', '"')
    return para if len(para) <= limit else para[: limit - 1].rstrip() + "…"


def _bucket(cell: str) -> str:
    return " ".join(cell.split())


def _severity(code: int, description: str, bucket: str) -> tuple[str, str]:
    if code in SEVERITY_OVERRIDES:
        return SEVERITY_OVERRIDES[code]
    if description.strip().lower().startswith("unused"):
        return "info", "unused on current GPUs"
    if bucket not in SEVERITY_BY_BUCKET:
        raise SystemExit(f"Xid {code}: immediate bucket {bucket!r} has no severity; extend SEVERITY_BY_BUCKET")
    return SEVERITY_BY_BUCKET[bucket], f"immediate action {bucket}"


def _flags(code: int, description: str) -> list[str]:
    flags = []
    if description.strip().lower().startswith("unused"):
        flags.append("unused")
    for name, codes in (("noise_after_kill", NOISE_AFTER_KILL), ("app_fault", APP_FAULT),
                        ("memory_ecc", MEMORY_ECC), ("nvlink", NVLINK), ("gsp", GSP)):
        if code in codes:
            flags.append(name)
    if code == 79:
        flags.append("fallen_off_bus")
    return flags


def read_buckets(path: Path) -> dict[str, str]:
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    return {_bucket(r[0]): _first_paragraph(r[1], 300) for r in rows[1:] if len(r) >= 2 and r[0].strip()}


def read_xids(path: Path, buckets: dict[str, str]) -> list[dict]:
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    out = []
    for r in rows[1:]:
        if len(r) < 12 or not r[1].strip().isdigit():
            continue
        code, description = int(r[1]), " ".join(r[3].split())
        immediate, investigatory = _bucket(r[8]) or None, " ".join(r[9].split()) or None
        severity, why = _severity(code, description, immediate or "")
        cause = CAUSE.get(code) or ("unused on current GPUs" if description.lower().startswith("unused")
                                    else CAUSE_BY_BUCKET.get(immediate or "", "see the trigger conditions"))
        out.append({
            "code": code,
            "mnemonic": " ".join(r[2].split()),
            "description": description,
            "cause": cause,
            "immediate_action": immediate,
            "investigatory_action": investigatory,
            "action": buckets.get(immediate or ""),
            "severity": severity,
            "severity_reason": why,
            "flags": _flags(code, description),
            "applies_to": [p for p, cell in zip(PRODUCTS, r[4:8], strict=True) if cell.strip().upper() == "YES"],
            "xid154_linkage": " ".join(r[10].split()) or None,
            "trigger": _first_paragraph(r[11], 400) or None,
        })
    return sorted(out, key=lambda x: x["code"])


def build(src: Path) -> dict:
    buckets = read_buckets(src / "03_xid_resolution_buckets.csv")
    return {
        "schema_version": 1,
        "source": "NVIDIA Xid catalog (Xid-Catalog.xlsx, sheets XIDs and Guidance Classes), "
                  "docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html",
        "severity_by_bucket": SEVERITY_BY_BUCKET,
        "buckets": buckets,
        "xids": read_xids(src / "01_xid_catalog_xids.csv", buckets),
    }


def render(doc: dict) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="exit 1 if --out is not what --src gives")
    args = ap.parse_args(argv)
    text = render(build(args.src))
    if args.check:
        same = args.out.exists() and args.out.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{args.out} is stale: rerun tools/build_xid_catalog.py", file=sys.stderr)
        return 0 if same else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    n = text.count('"code"')
    print(f"wrote {args.out} ({n} Xids)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

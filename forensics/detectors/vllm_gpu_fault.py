"""VLLM-GPU-002: CUDA reported an uncorrectable ECC error to vLLM: a GPU hardware fault, not a flag problem.

The kernel log names the same fault as an Xid (48 double-bit ECC; 63/64 row remapping; 94/95
contained/uncontained ECC) when it is in the input (then SGL-XID-001 also fires); vLLM's side shows only
PyTorch's ``RuntimeError: CUDA error: uncorrectable ECC error encountered``. Sample::

    ERROR 05-13 11:00:00 worker_base.py:467] RuntimeError: CUDA error: uncorrectable ECC error encountered
"""

from __future__ import annotations

from forensics.model import Finding, Timeline

from ._common import attrs, make_finding, rank_of, rows
from ._vllm import of_kind, vllm_runs


def detect(tl: Timeline) -> list[Finding]:
    hits = [r for run in vllm_runs(tl) for r in of_kind(run, "cuda_error")
            if attrs(r).get("error") == "uncorrectable_ecc"]
    if not hits:
        return []
    xids = [r for r in rows(tl, "xid") if r.get("code") in (48, 63, 64, 94, 95)]
    return [make_finding(
        "VLLM-GPU-002",
        summary=("CUDA reported an uncorrectable ECC error in GPU memory to vLLM"
                 + (f" ({len(hits)} times)" if len(hits) > 1 else "")
                 + (f"; the kernel logged Xid {sorted({int(r['code']) for r in xids})}" if xids else "")
                 + ": a hardware fault on the GPU. No vLLM flag fixes it."),
        evidence=[*hits[:4], *xids[:2]],
        confidence="high",
        ranks=[x for x in (rank_of(r) for r in hits) if x is not None],
        gpus=[r["gpu"] for r in xids if r.get("gpu") is not None],
        figures={"ecc_errors": len(hits), "xids": len(xids) or None},
        actions=["Drain the GPU and read its ECC state (`nvidia-smi -q -d ECC,ROW_REMAPPER`, `dmesg -T | grep -i xid`); "
                 "a GPU reset or reboot applies pending row remaps; if it recurs on the same GPU, replace it.",
                 "Restart the server on healthy GPUs (CUDA_VISIBLE_DEVICES without the faulty one)."],
    )]

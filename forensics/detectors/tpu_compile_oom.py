"""VLLM-GPU-019 / VLLM-GPU-020: XLA's TPU compiler refused vLLM's program for memory (compile-time, not a runtime OOM).

On TPU, vLLM (vllm vllm/v1/worker/tpu_worker.py (0.8-0.11): ``determine_available_memory`` runs the profile pass,
``compile_or_warm_up_model`` the precompile of every padded shape) hands whole graphs to XLA, and XLA's TPU
compiler checks before anything runs that the program's static allocations fit each memory space of the chip
(xla docs/errors/error_1000.md (main), E1000, the compile-time HBM OOM; xla docs/errors/error_1001.md (main),
E1001, the compile-time scoped vmem OOM). The message, raised through torch_xla as ``RuntimeError: Bad StatusOr access: …`` or through JAX
(tpu_inference) as ``JaxRuntimeError: …``, and printed in the EngineCore's start-up traceback::

    RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 17.46G of
    15.75G hbm. Exceeded hbm capacity by 1.71G.

    Total hbm usage >= 17.98G:
        reserved        530.00M
        program           2.48G
        arguments        14.98G

Newer releases put the error code first (``RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom:``, ``E1001:
CompileTimeScopedVmemOom:``) with the message on the next line, and may print the breakdown on the message's own line
(``Total hbm usage >= X: reserved … program unknown size arguments …``); the detector reads the exception's message
and the lines under it. XLA can also give up before the full check: ``Compilation failure: Aborting compilation early
because it's unlikely to have enough memory. Requires X, has Y available.`` (error 1000's early form, no breakdown).
A run-time allocation (``Error allocating device buffer: Attempting to allocate X. That was not possible.``, error
0100) is not a compile-time check and is left to the generic rules.

Sizes are XLA's human-readable bytes (binary units: ``G`` is GiB). ``arguments`` are the program's inputs — the
weights, and the KV cache once it is allocated (the profile pass runs with empty KV tensors) — and ``program``
its temporaries, which grow with the padded token count of the step (``--max-num-batched-tokens``).

VLLM-GPU-019 is memory space ``hbm``: the chip's HBM does not hold the program. When the arguments alone fill
most of it (≥ 80 %, SGL-GPU-007's bar) no token budget helps: more chips (``--tensor-parallel-size``, the
smallest power of two that brings Used ÷ TP under 80 % of the capacity) or a smaller checkpoint. When the
arguments leave room and the temporaries are larger than the excess, a smaller step fits: the batched-token
budget scaled by (program − excess) ÷ program, rounded down to a power of two.

VLLM-GPU-020 is ``vmem`` / ``smem`` (or ``sflag``): a kernel's on-chip scratch (the TensorCore's vector memory,
the scalar core's memory), megabytes per core, fixed by the kernel's block sizes — not HBM. No memory flag of
vLLM changes it: the kernel's tiling (a Pallas kernel's block sizes, its ``vmem_limit_bytes``), the XLA/libtpu
release, or ``--xla_tpu_scoped_vmem_limit_kib`` in ``LIBTPU_INIT_ARGS`` does.

>>> xla_bytes("17.46G") == round(17.46 * 2**30), xla_bytes("530.00M") == round(530 * 2**20), xla_bytes("0B")
(True, True, 0)
>>> compile_oom("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. "
...             "Used 17.46G of 15.75G hbm. Exceeded hbm capacity by 1.71G.")["space"]
'hbm'
>>> compile_oom("RESOURCE_EXHAUSTED: Ran out of memory in memory space vmem while allocating on stack for "
...             "%ragged_paged_attention_kernel.3 = bf16[8,128]{1,0} custom-call(...)")["kernel"]
'ragged_paged_attention_kernel.3'
>>> sorted(compile_oom("Ran out of memory in memory space hbm. Used 17.46G of 15.75G hbm. Exceeded hbm capacity by "
...                   "1.71G. Total hbm usage >= 17.98G: reserved 530.00M program unknown size arguments 14.98G")["parts"])
['arguments', 'reserved']
>>> o = compile_oom("Ran out of memory in memory space vmem while allocating on stack for %gmm.1 = f32[64,512]{1,0} ... "
...                 "Scoped allocation with size 18.00M and limit 16.00M exceeded scoped vmem limit by 2.00M.")
>>> o["kernel"], o["used"] == 18 << 20, o["capacity"] == 16 << 20, o["excess"] == 2 << 20
('gmm.1', True, True, True)
>>> compile_oom("Aborting compilation early because it's unlikely to have enough memory. Requires 3.84T, has "
...             "90.96G available.")["space"]
'hbm'
>>> compile_oom("RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 8.00M. That was not "
...             "possible. There are 6.43M free.") is None
True
>>> compile_oom("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.") is None
True
>>> tp_for(17.46 * 2**30, 15.75 * 2**30, 1), tp_for(40 * 2**30, 31.25 * 2**30, 2)
(2, 4)
"""

from __future__ import annotations

import math
import re
from typing import Any

from forensics.facts.rows import Row, attrs, rank_of, rows
from forensics.facts.vllm import settings as vllm_settings
from forensics.facts.vllm import vllm_runs
from forensics.model import Finding, FlagChange, Timeline

from ._common import fmt_binary, make_finding, old_value

# XLA's compile-time memory-space check (xla docs/errors/error_1000.md (main) for hbm, xla docs/errors/error_1001.md
# (main) for vmem): "Ran out of memory in memory space S. Used X of Y S. Exceeded S capacity by Z.", the vmem form
# "… memory space vmem while allocating on stack for %kernel = …", and error 1001's allocation form
# "Allocation (size=N) would exceed memory (size=M) :: … space=vmem … tag = 'scoped memory for kernel'". Newer
# releases put the code first ("RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom:") and the message on the next
# line, which is why the detector reads the lines under the exception too.
_SIZE = r"(\d+(?:\.\d+)?[KMGTPE]?B?)"
_RAN_OUT = re.compile(r"Ran out of memory in memory space (\w+)")
_USED = re.compile(r"\bUsed " + _SIZE + r" of " + _SIZE + r"(?: (\w+))?")
_EXCEEDED = re.compile(r"Exceeded (\w+) capacity by " + _SIZE)
_ON_STACK = re.compile(r"while allocating on stack for %?([\w.\-]+)")
_ALLOCATION = re.compile(r"Allocation \(size=(\d+)\) would exceed memory \(size=(\d+)\).*?space=(\w+)\b"
                         r"(?:.*?tag = 'scoped memory for ([\w.\-]+)')?")
# the scoped-vmem figures error 1001 adds after the instruction ("Scoped allocation with size X and limit Y exceeded
# scoped vmem limit by Z.": tpu-inference tests/kernels/transpose_test.py (main) names the E1001
# CompileTimeScopedVmemOom it guards against)
_SCOPED = re.compile(r"Scoped allocation with size " + _SIZE + r" and limit " + _SIZE
                     + r" exceeded scoped (\w+) limit by " + _SIZE)
# error 1000's early form: "Compilation failure: Aborting compilation early because it's unlikely to have enough
# memory. Requires X, has Y available." (xla docs/errors/error_1000.md (main)), an hbm check before the full one
_ABORT = re.compile(r"Aborting compilation early because it's unlikely to have enough memory\. Requires " + _SIZE
                    + r", has " + _SIZE + r" available")
# the breakdown XLA prints under the hbm message (xla docs/errors/error_1000.md (main)): "Total hbm usage >= X:" then
# reserved / program / arguments, one a line or all on the message's line; "program unknown size" has no figure
_TOTAL = re.compile(r"Total hbm usage >= " + _SIZE + r":")
_PART = re.compile(r"\b(reserved|program|arguments)\s+" + _SIZE + r"(?=\s|$)")
#: what marks a line under the exception as part of XLA's message
_CONTINUED = re.compile(r"Ran out of memory in memory space|Scoped allocation with size|Total hbm usage >=|"
                        r"^\s*(?:reserved|program|arguments)\s|Aborting compilation early")

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50, "E": 1 << 60}

#: the share of HBM the arguments (weights) may take before no token budget leaves room (SGL-GPU-007's 80 %)
WEIGHT_BAR = 0.8
#: the memory spaces that are on-chip scratch, not HBM
ON_CHIP = ("vmem", "smem", "sflag")


def xla_bytes(text: str) -> int:
    """XLA's human-readable size (``17.46G``, ``530.00M``, ``0B``): binary units."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTPE]?)B?", text.strip())
    return round(float(m.group(1)) * _UNITS[m.group(2)]) if m else 0


def compile_oom(text: str) -> dict[str, Any] | None:
    """The memory space and figures of XLA's compile-time out-of-memory message, or None.

    ``parts`` is the ``Total hbm usage`` breakdown (reserved / program / arguments, bytes) where the text has it.
    """
    if (a := _ALLOCATION.search(text)) is not None:
        return {"space": a.group(3).lower(), "used": int(a.group(1)), "capacity": int(a.group(2)),
                "excess": max(int(a.group(1)) - int(a.group(2)), 0), "kernel": a.group(4)}
    if (e := _ABORT.search(text)) is not None:
        used, cap = xla_bytes(e.group(1)), xla_bytes(e.group(2))
        return {"space": "hbm", "used": used, "capacity": cap, "excess": max(used - cap, 0), "early": True}
    m = _RAN_OUT.search(text)
    if m is None:
        return None
    out: dict[str, Any] = {"space": m.group(1).lower()}
    # the HLO instruction after "allocating on stack for" can run to thousands of characters
    tail = text[m.end():m.end() + 20000]
    if (u := _USED.search(tail)) is not None:
        out["used"], out["capacity"] = xla_bytes(u.group(1)), xla_bytes(u.group(2))
    elif (sc := _SCOPED.search(tail)) is not None:
        out["used"], out["capacity"] = xla_bytes(sc.group(1)), xla_bytes(sc.group(2))
        out["excess"] = xla_bytes(sc.group(4))
    if (e := _EXCEEDED.search(tail)) is not None:
        out["excess"] = xla_bytes(e.group(2))
    elif out.get("used") and out.get("capacity") and out["used"] > out["capacity"] and "excess" not in out:
        out["excess"] = out["used"] - out["capacity"]
    if (k := _ON_STACK.search(tail)) is not None:
        out["kernel"] = k.group(1)
    if (t := _TOTAL.search(tail)) is not None:
        out["parts"] = {p.group(1): xla_bytes(p.group(2)) for p in _PART.finditer(tail[t.end():t.end() + 400])}
    return out


def tp_for(used: float, capacity: float, tp: int) -> int:
    """The smallest power-of-two tensor-parallel size above ``tp`` whose share of ``used`` is under 80 % of a chip."""
    new = max(2, 1 << math.ceil(math.log2(max(tp, 1))))
    while new <= tp or used * tp / new > WEIGHT_BAR * capacity:
        new *= 2
    return new


def _message(row: Row) -> str:
    a = attrs(row)
    return str(a.get("exception_message") or a.get("message") or row.get("text") or "")


def _continuation(hit: Row, logs: list[Row]) -> list[Row]:
    """The lines right under the exception in the same file that carry XLA's message or its breakdown."""
    end = int(hit.get("line_end") or hit.get("line") or 0)
    return [r for r in logs if r.get("file") == hit.get("file") and end < int(r.get("line") or 0) <= end + 12
            and _CONTINUED.search(str(attrs(r).get("message") or ""))]


def detect(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    logs = rows(tl, "log")
    for run in vllm_runs(tl):
        hits = []
        for r in run:
            if r.get("kind") not in ("exception", "failure", "init_failed", "engine_dead"):
                continue
            own = _message(r)
            if "RESOURCE_EXHAUSTED" not in own and compile_oom(own) is None:
                continue
            more = _continuation(r, logs)
            oom = compile_oom("\n".join([own, *(str(attrs(x).get("message") or "") for x in more)]))
            if oom is not None:
                hits.append((r, oom, more))
        if not hits:
            continue
        hbm = [h for h in hits if h[1]["space"] == "hbm"]
        if hbm:
            hit, oom, more = max(hbm, key=lambda h: h[1].get("used") or 0)
            out.append(_hbm(tl, run, hit, oom, [*_header(run, hit), *more]))
        chip = [h for h in hits if h[1]["space"] in ON_CHIP]
        if chip and not hbm:
            hit, oom, more = chip[0]
            out.append(_on_chip(hit, oom, [*_header(run, hit), hit, *more]))
    return out


def _header(run: list[Row], hit: Row) -> list[Row]:
    """The engine's ``EngineCore failed to start.`` line right above the traceback: the same death."""
    return [r for r in run if r.get("kind") == "init_failed" and r.get("file") == hit.get("file")
            and int(r.get("line") or 0) == int(hit.get("line") or 0) - 1]


def _hbm(tl: Timeline, run: list[Row], hit: Row, oom: dict[str, Any], logs: list[Row]) -> Finding:
    s = vllm_settings(tl, run)
    used, cap, excess = oom.get("used"), oom.get("capacity"), oom.get("excess")
    header = [r for r in logs if r.get("kind") == "init_failed"]
    part_rows = [r for r in logs if r.get("kind") != "init_failed"]
    parts: dict[str, int] = oom.get("parts") or {}
    args, program = parts.get("arguments"), parts.get("program")
    tp_seen = s.num("tensor_parallel_size")
    tp = int(tp_seen or 1)
    pp = int(s.num("pipeline_parallel_size") or 1)
    tokens = s.num("max_num_batched_tokens")
    flags: list[FlagChange] = []
    weights_full = args is None or (cap and args >= WEIGHT_BAR * cap)
    figures = {"memory_space": "hbm", "used_bytes": used, "capacity_bytes": cap, "excess_bytes": excess,
               "arguments_bytes": args, "program_bytes": program, "tensor_parallel_size": tp}
    sized = used is not None and cap
    if sized and (weights_full or not program or not excess or program <= excess):
        new_tp = tp_for(args if args is not None and args >= WEIGHT_BAR * cap else used, cap, tp)
        figures["proposed_tensor_parallel_size"] = new_tp
        share = (args if args is not None else used) * tp / new_tp
        flags.append(FlagChange("--tensor-parallel-size", old_value(tp, tp_seen is not None), str(new_tp),
                                f"{fmt_binary(args if args is not None else used)} per chip over TP {tp} is "
                                f"{fmt_binary(share)} per chip over TP {new_tp}, under 80 % of the "
                                f"{fmt_binary(cap)} the compiler allows"))
        how = (f"the weights (the program's arguments) alone take {fmt_binary(args)}, so no token budget fits it, "
               f"more chips do" if args is not None else
               "the message gives no split between weights and temporaries; more chips divide both")
    elif sized and program and excess:
        how = (f"the weights fit ({fmt_binary(args)}), and the step's temporaries ({fmt_binary(program)}) are larger "
               f"than the excess: a smaller step fits")
        if tokens:
            new_tokens = 1 << int(math.log2(max(tokens * (program - excess) / program, 1)))
            if new_tokens < tokens:
                figures["proposed_max_num_batched_tokens"] = new_tokens
                flags.append(FlagChange("--max-num-batched-tokens", f"{tokens:g}", str(new_tokens),
                                        f"the temporaries ({fmt_binary(program)}) scale with the step's tokens: "
                                        f"{fmt_binary(excess)} less needs {tokens:g} × "
                                        f"{(program - excess) / program:.2f}, rounded down to a power of two"))
    else:
        how = "the message's figures are not in the input"
    layout = (f", TP {tp}" + (f" × PP {pp}" if pp > 1 else "")) if tp_seen is not None else ""
    arithmetic = (f"it needs {fmt_binary(used)} of HBM per chip and the chip has {fmt_binary(cap)} "
                  f"({fmt_binary(excess)} over{layout})" if sized else "it needs more HBM than the chip has")
    return make_finding(
        "VLLM-GPU-019",
        summary=(f"XLA's TPU compiler refused vLLM's program before it ran: {arithmetic}; {how}. A compile-time "
                 "check, not a runtime OOM: the same launch fails the same way every time."),
        evidence=[*header, hit, *part_rows, *s.evidence_rows("tensor_parallel_size", "max_num_batched_tokens")],
        confidence="high" if sized else "medium",
        confidence_reason=None if sized else "the message's Used/of figures are cut from the input",
        ranks=[x for x in [rank_of(hit)] if x is not None],
        figures=figures,
        flags=flags,
        actions=[
            "Relaunch on more chips (--tensor-parallel-size, the value shown) or with a quantized checkpoint when "
            "the weights fill the chip; otherwise lower --max-num-batched-tokens, then --max-num-seqs or "
            "--max-model-len, which bound the padded shapes vLLM precompiles.",
            "Read the 'Total hbm usage' breakdown under the message: 'arguments' are the weights (and the KV cache "
            "once allocated), 'program' the step's temporaries.",
        ],
    )


def _on_chip(hit: Row, oom: dict[str, Any], evidence: list[Row]) -> Finding:
    space, kernel = oom["space"], oom.get("kernel")
    used, cap = oom.get("used"), oom.get("capacity")
    figures = f" ({fmt_binary(used)} asked of a {fmt_binary(cap)} limit)" if used and cap else ""
    name = {"vmem": "vector memory (vmem)", "smem": "scalar memory (smem)"}.get(space, space)
    return make_finding(
        "VLLM-GPU-020",
        summary=(f"XLA's TPU compiler ran out of the chip's on-chip {name}"
                 + (f" compiling {kernel}" if kernel else "") + figures
                 + ": a kernel's scratch, megabytes per core, not HBM. No memory flag of vLLM "
                   "(--gpu-memory-utilization, --max-model-len, --tensor-parallel-size) changes it; the kernel's "
                   "block sizes, or the XLA/libtpu release, do."),
        evidence=evidence,
        confidence="high" if kernel else "medium",
        confidence_reason=None if kernel else "the message names no kernel; the HLO dump would",
        ranks=[x for x in [rank_of(hit)] if x is not None],
        figures={"memory_space": space, "kernel": kernel, "used_bytes": used, "capacity_bytes": cap},
        actions=[
            f"Find the kernel{f' ({kernel})' if kernel else ''} in the HLO dump (XLA_FLAGS=--xla_dump_to=DIR) and "
            "reduce its block sizes (a Pallas kernel's block/tile sizes, or raise its vmem_limit_bytes).",
            "Try the neighbouring vLLM/libtpu release: a vmem OOM in a stock kernel is a compiler or kernel bug to "
            "report with the dump; as a stopgap LIBTPU_INIT_ARGS=--xla_tpu_scoped_vmem_limit_kib=N raises the "
            "scoped limit for every kernel.",
        ],
    )


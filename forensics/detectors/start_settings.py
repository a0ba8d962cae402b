"""SGL-RUN-007 / SGL-RUN-006: start-up failures that a launch setting causes and names, not memory or a bug.

SGL-RUN-007, a NUMA binding the host refuses. With SGLANG_NUMA_BIND_V2 on (the default of recent releases) SGLang
spawns every scheduler through a small script that execs ``numactl --cpunodebind=N --membind=N`` in front of the
interpreter (sglang python/sglang/srt/utils/numa_utils.py (0.5.x) ``configure_subprocess``,
``_create_numactl_executable``). Its pre-flight check only reads the memory policy (``get_mempolicy``); a container
whose seccomp profile denies ``set_mempolicy``, or whose cpuset leaves out the GPU's node, lets the check pass and
then numactl's own ``checkerror`` prints ``setting membind: Invalid argument`` and exits 1 before Python starts
(numactl numactl.c (2.0.x)): the scheduler dies with no traceback. Turning the binding off
(``SGLANG_NUMA_BIND_V2=0``), or allowing the syscall and the node in the container, fixes it; later releases probe
numactl and fall back to a weaker binding.

SGL-RUN-006, a CUDA-graph capture list with no batch size left. SGLang filters the capture list before capturing
(sglang python/sglang/srt/model_executor/cuda_graph_runner.py (0.4.6-0.5.x) ``get_batch_sizes_to_capture``): it
keeps only sizes that fit the request pool of one rank, whose size with DP attention is
``--max-running-requests // --dp-size`` (sglang python/sglang/srt/model_executor/model_runner.py (0.5.x)), and only
multiples of the attention-TP size (twice that with two-batch overlap). When nothing survives it asserts
``len(capture_bs) > 0 and capture_bs[0] > 0`` and prints ``capture_bs=[…]``: an empty list, or ``[0]`` when the
pool of one rank has no request slot. The fix is a setting: batch sizes that survive the filter (with DP attention
at least one request per DP rank, so the size is the DP size), and running requests at least the DP size; neither
memory nor a kernel.

>>> capture_list("capture_bs=[0]")
[0]
>>> capture_list("capture_bs=[]")
[]
>>> capture_list("capture_bs=[8, 16]") is None
True
"""

from __future__ import annotations

import re

import polars as pl

from forensics.facts.engines import engine_of
from forensics.facts.launch import server_config
from forensics.facts.rows import attrs, row_words, rows
from forensics.model import Finding, FlagChange, Timeline
from parsers.failures import NUMACTL_REFUSED_IN_TEXT

from ._common import make_finding

#: a literal prefilter for the refusal's words (its pattern is parsers/failures.py ``NUMACTL_REFUSED_IN_TEXT``)
_NUMACTL_WORDS = "setting membind|setting preferred node|setting interleave mask|setting local allocation|sched_setaffinity"
#: the assertion's own f-string (``f"{capture_bs=}"``, cuda_graph_runner.py above)
_CAPTURE_BS = re.compile(r"capture_bs=\[([\d, ]{0,200})\]")


def capture_list(text: str) -> list[int] | None:
    """The sizes the capture assertion printed, when they are what fails it (empty, or a first size of 0)."""
    m = _CAPTURE_BS.search(text)
    if m is None:
        return None
    sizes = [int(x) for x in m.group(1).replace(" ", "").split(",") if x]
    return sizes if not sizes or sizes[0] <= 0 else None


def _numa(tl: Timeline) -> list[Finding]:
    hits = [r for r in rows(tl, "failure") if attrs(r).get("failure") == "numa_bind_refused"]
    if not hits and not tl.events.is_empty() and "text" in tl.events.columns:
        # an engine's log parser glues an unprefixed line to the record above it: the refusal ends that text
        near = tl.events.filter(pl.col("text").str.contains(_NUMACTL_WORDS))
        kinds = sorted({str(k) for k in near.get_column("kind").to_list()}) if not near.is_empty() else []
        hits = [r for r in rows(tl, *kinds) if NUMACTL_REFUSED_IN_TEXT.search(str(r.get("text") or ""))]
    if not hits:
        return []
    a = attrs(hits[0])
    if a.get("failure") != "numa_bind_refused":
        m = NUMACTL_REFUSED_IN_TEXT.search(str(hits[0].get("text") or ""))
        a = {"option": m.group(1), "error": m.group(2)} if m else {}
    vllm = engine_of(list(rows(tl, "launch_command", "server_args", "engine_config"))) == "vllm"
    summary = (f"numactl refused the NUMA binding ('{a.get('option')}: {a.get('error')}') and exited before the "
               "process it wraps started: a scheduler spawned through it dies at once with exit code 1 and no "
               "traceback. The host or container does not allow the memory policy (seccomp denying set_mempolicy, "
               "or a cpuset without the GPU's NUMA node); the model, memory and GPUs are not involved.")
    flags, actions = [], []
    if vllm:
        actions.append("Drop --numa-bind (and --numa-bind-nodes) from the launch, or allow set_mempolicy and the "
                       "node in the container.")
    else:
        flags.append(FlagChange("SGLANG_NUMA_BIND_V2", None, "0",
                                "SGLang wraps each scheduler in numactl --membind by default; with the binding "
                                "off the schedulers start without it"))
        actions.append("Or keep the binding and let the container set it: allow set_mempolicy in its seccomp "
                       "profile (docker --cap-add SYS_NICE, or an unconfined profile) and the GPU's node in "
                       "cpuset.mems; releases that probe numactl fall back to a weaker binding by themselves.")
    actions.append("Check the refusal by hand: `numactl --cpunodebind=0 --membind=0 true; echo $?` inside the "
                   "container, and `grep Mems_allowed_list /proc/self/status`.")
    return [make_finding("SGL-RUN-007", summary=summary, evidence=hits[:3], confidence="high",
                         figures={"option": a.get("option"), "error": a.get("error")}, flags=flags, actions=actions)]


def _capture(tl: Timeline) -> list[Finding]:
    hits = [(r, sizes) for r in rows(tl, "failure", "scheduler_exception", "exception", "cuda_graph_failed")
            if (sizes := capture_list(row_words(r))) is not None]
    if not hits:
        return []
    row, sizes = hits[0]
    cfg = server_config(tl)
    dp = int(cfg.num("dp_size") or 1)
    dp_attn = cfg.enabled("enable_dp_attention") and dp > 1
    running = cfg.num("max_running_requests")
    stated = cfg.flag_text("cuda_graph_bs")
    flags: list[FlagChange] = []
    said = "an empty list" if not sizes else "a list whose only size is 0"
    summary = (f"SGLang's CUDA-graph capture list came out as {said} (capture_bs={sizes}): every batch size was "
               "filtered out before capture, so the scheduler's start-up assertion failed. The filter keeps only "
               "sizes that fit one rank's request pool and are multiples of the attention-TP size; nothing here is "
               "short of memory.")
    if dp_attn:
        per_rank = int(running) // dp if running is not None else None
        if per_rank is not None:
            summary += (f" With DP attention each of the {dp} DP ranks gets --max-running-requests // --dp-size = "
                        f"{int(running)} // {dp} = {per_rank} request slot{'s' if per_rank != 1 else ''}"
                        + (": no rank can hold a request, so no size fits." if per_rank == 0 else "."))
        if stated is not None and (to := _smallest(stated)) is not None and to < dp:
            flags.append(FlagChange("--cuda-graph-bs", stated, str(dp),
                                    f"a size below the DP size ({dp}) leaves some DP ranks no request of the batch; "
                                    "the DP size itself survives the filter"))
        if per_rank == 0:
            flags.append(FlagChange("--max-running-requests", f"{int(running)}", str(dp),
                                    f"at least one request per DP rank: {dp} // {dp} = 1 slot each"))
    elif stated is not None:
        flags.append(FlagChange("--cuda-graph-bs", stated, "(remove)",
                                "SGLang's own list keeps sizes that fit the pool; the stated one left none"))
    actions = ["Read SGLang's `Capture cuda graph bs [...]` line of a run that starts: the sizes it keeps are the "
               "ones that survive the filter; --disable-cuda-graph starts the server without graphs meanwhile."]
    return [make_finding("SGL-RUN-006", summary=summary, evidence=[row, *cfg.evidence_rows(
        "cuda_graph_bs", "max_running_requests", "dp_size", "enable_dp_attention")], confidence="high",
        figures={"capture_bs": sizes, "dp_size": dp, "dp_attention": dp_attn}, flags=flags, actions=actions)]


def _smallest(text: str) -> int | None:
    nums = [int(x) for x in re.findall(r"\d{1,6}", text)]
    return min(nums) if nums else None


def detect(tl: Timeline) -> list[Finding]:
    return [*_numa(tl), *_capture(tl)]

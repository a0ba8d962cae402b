"""SGL-GPU-012: an allocation failed that free GPU memory would not have fixed.

Three documented failures read like an OOM and are not the GPU running out of memory
(failure_messages.md §1.5, §7):

* a kernel library's **fixed workspace** too small for the batch's plan: FlashInfer's ``AlignedAllocator``
  (``Out of workspace memory in AlignedAlloactor`` ≤0.1.2, ``Failed to allocate memory for {name} with size {n} …
  in AlignedAllocator`` 0.1.3–0.2.8, ``Buffer overflow when allocating memory for {name} with size {n} …, but only
  {m} bytes available in AlignedAllocator. Increase the workspace buffer size.`` 0.2.9+), and the MoE/GEMM runners'
  ``workspace_buffer too small``. The knob is the workspace's size (``SGLANG_FLASHINFER_WORKSPACE_SIZE``,
  ``VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE``), not the memory fraction;
* a kernel's **shared memory per block** over the SM's limit: Triton's ``OutOfResources: out of resource: shared
  memory, Required: {n}, Hardware limit: {m}`` and Inductor's ``out of resource: {kernel} Required: …`` (raised as
  ``torch.OutOfMemoryError``): a kernel configuration that does not fit this GPU's architecture;
* a **nonsense size**: ``CUDA out of memory. Tried to allocate more than 1EB memory.`` — a negative or overflowed
  size computed by the caller, a bug;
* in vLLM, **one request larger than the whole GPU** (``Tried to allocate 256.00 GiB. GPU 0 has a total capacity of
  15.98 GiB``, CUDA's or HIP's wording): no ``--gpu-memory-utilization`` fits it. vLLM sizes its KV cache from what
  its profile left, so such a request is a kernel materialising a tensor whose size comes from the input it was
  given — typically the multimodal encoder's attention over its profiling or request images, which falls back to
  ``torch.nn.functional.scaled_dot_product_attention`` per item where no flash kernel serves the platform (vllm
  vllm/v1/attention/ops/vit_attn_wrappers.py ``torch_sdpa_wrapper``); the input's size or the kernel is the fix (vllm
  vllm/config/model.py ``mm_encoder_attn_backend``, ``--mm-encoder-attn-backend``).
  (SGLang's start-up request table, sized by the context length, is SGL-KV-004's.)

>>> workspace_for(566231040, 402653184)
1073741824
"""

from __future__ import annotations

import re

from forensics.facts.oom import exceeds_device, memory_kind
from forensics.facts.rows import Row, attrs, rank_of, rows
from forensics.facts.vllm import vllm_files
from forensics.model import Finding, FlagChange, Timeline
from parsers.failures import classify

from ._common import evidence_list, fmt_gib, make_finding

_FLASHINFER = re.compile(r"AlignedAl\w{0,4}tor|Out of workspace memory")
_NEED = re.compile(r"(?:with size|need) (\d+)")
_ONLY = re.compile(r"but only (\d+) bytes available")
_SMEM = re.compile(r"out of resource: (?:shared memory|\w+)(?:,)? Required: ?(\d+),? Hardware limit: ?(\d+)")
_AUTOTUNE = re.compile(r"Ignoring this choice", re.I)


def workspace_for(need: int, have: int | None) -> int:
    """A workspace size that holds the failed buffer beside what was there: a power of two ≥ need + have."""
    total = need + (have or 0)
    return 1 << max(total - 1, 1).bit_length()


def _workspace_exception(row: Row) -> bool:
    a = attrs(row)
    msg = f"{a.get('exception_type') or 'RuntimeError'}: {a.get('exception_message') or ''}"
    found = classify(msg) if a.get("exception_message") else None
    return bool(found and found[0] == "failure" and found[2].get("failure") == "workspace")


def _message(row: Row) -> str:
    a = attrs(row)
    return f"{a.get('message') or ''} {a.get('exception_message') or ''} {row.get('text') or ''}"


def detect(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    work = [r for r in rows(tl, "failure") if attrs(r).get("failure") == "workspace"]
    # an engine's own exception row holds the same line (the failure scan then leaves it to the engine's parser)
    work += [r for r in rows(tl, "exception", "scheduler_exception") if _workspace_exception(r)]
    flash = [r for r in work if _FLASHINFER.search(_message(r))]
    smem = [r for r in work if r not in flash and _SMEM.search(_message(r))]
    bogus = [r for r in rows(tl, "cuda_oom") if attrs(r).get("bogus_size")]
    # the same message as an engine's exception row (its traceback kept whole by the engine's parser)
    bogus += [r for r in rows(tl, "exception", "scheduler_exception") if memory_kind(r) == "bogus"]
    vfiles = vllm_files(tl)
    oversize = [r for r in rows(tl, "cuda_oom") if r.get("file") in vfiles and exceeds_device(r)
                and not attrs(r).get("bogus_size")]
    if flash:
        out.append(_workspace(flash, any(r.get("file") in vfiles for r in flash)))
        # the engine's death notice and the parent's SIGQUIT are this failure's teardown
        out[-1].evidence.extend(evidence_list(rows(tl, "engine_dead", "sigquit")[:2]))
    if smem:
        out.append(_shared_memory(smem))
    if bogus:
        out.append(make_finding(
            "SGL-GPU-012",
            summary=("An allocation of more than 1 EB was asked for: the size was computed wrongly (negative or "
                     "overflowed), a bug in the caller, not a GPU out of memory."),
            evidence=bogus[:3], confidence="high",
            ranks=[x for x in (rank_of(r) for r in bogus) if x is not None],
            figures={"kind": "nonsense_size"},
            actions=["Read the traceback's innermost frames for the shape that was computed (often a negative "
                     "length from an empty or oversized request); report it with the engine version.",
                     "No memory flag helps: lowering fractions only moves the crash."],
        ))
    if oversize:
        out.append(_larger_than_gpu(oversize, _encoder_frames(tl)))
    return out


#: the multimodal encoder's frames in a vLLM traceback: the ViT attention wrappers and the vision towers
_ENCODER = re.compile(r"vit_attn_wrappers|/(?:\w+_)?vl\.py|vision|visual|encoder", re.I)


def _encoder_frames(tl: Timeline) -> bool:
    return any(_ENCODER.search(r.get("text") or "") for r in rows(tl, "exception", "scheduler_exception", "failure"))


def _larger_than_gpu(hits: list[Row], encoder: bool) -> Finding:
    r = max(hits, key=lambda x: x.get("bytes") or 0)
    tried, total = int(r["bytes"]), int(r["total_bytes"])
    actions = ["No --gpu-memory-utilization value helps: the one request is larger than the GPU itself.",
               "Read the traceback's innermost frames for the tensor being built; make its input smaller "
               "(fewer or smaller images per prompt: --limit-mm-per-prompt, the processor's max_pixels; a lower "
               "--max-num-batched-tokens) or run that operation with another kernel."]
    if encoder:
        actions.insert(0, "The frames are the multimodal encoder's attention: choose an encoder attention backend "
                          "with a flash kernel for this GPU (--mm-encoder-attn-backend), or start text-only "
                          "(--limit-mm-per-prompt with 0 images and videos) to confirm.")
    return make_finding(
        "SGL-GPU-012",
        summary=(f"One allocation asked for {fmt_gib(tried)} on a GPU of {fmt_gib(total)} in all: no memory budget "
                 "makes a request larger than the device fit. The size comes from the input of the operation that "
                 "asked" + (" (the multimodal encoder's attention, in the frames)" if encoder else "")
                 + ", not from vLLM's memory settings."),
        evidence=hits[:3], confidence="high" if encoder else "medium",
        confidence_reason=None if encoder else "which operation asked is not in the input (no frames around the OOM)",
        ranks=[x for x in (rank_of(x) for x in hits) if x is not None],
        gpus=[r["gpu"]] if r.get("gpu") is not None else [],
        figures={"kind": "larger_than_gpu", "failed_allocation_bytes": tried, "gpu_total_bytes": total},
        actions=actions,
    )


def _workspace(hits: list[Row], vllm: bool) -> Finding:
    first = max(hits, key=lambda r: r.get("bytes") or 0)
    need = first.get("bytes")
    if need is None and (m := _NEED.search(_message(first))):
        need = int(m.group(1))
    only = _ONLY.search(_message(first))
    have = int(only.group(1)) if only else None
    env = "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE" if vllm else "SGLANG_FLASHINFER_WORKSPACE_SIZE"
    flags = []
    if need:
        new = workspace_for(int(need), have)
        flags.append(FlagChange(env, str(have) if have else None, str(new),
                                f"the plan's buffer needed {need} bytes" + (f" with only {have} available" if have else "")
                                + f"; {new} bytes holds both"))
    return make_finding(
        "SGL-GPU-012",
        summary=("FlashInfer's fixed workspace was too small for a batch's attention plan"
                 + (f" (a buffer of {need} bytes" + (f", only {have} available)" if have else ")") if need else "")
                 + ": the workspace's size, not free GPU memory, is the limit."),
        evidence=hits[:3], confidence="high",
        ranks=[x for x in (rank_of(r) for r in hits) if x is not None],
        figures={"kind": "kernel_workspace", "needed_bytes": need, "available_bytes": have},
        flags=flags,
        actions=[f"Raise the workspace with {env} (bytes) and restart; the GPU's free memory is irrelevant here.",
                 "Or shrink the batches' plans: a lower --max-running-requests / --max-num-seqs or a smaller prefill "
                 "chunk; or another attention backend.",
                 "Do not lower --mem-fraction-static / --gpu-memory-utilization for this error."],
    )


def _shared_memory(hits: list[Row]) -> Finding:
    m = _SMEM.search(_message(hits[0]))
    need, limit = (int(m.group(1)), int(m.group(2))) if m else (None, None)
    autotune = all(_AUTOTUNE.search(_message(r)) for r in hits)
    return make_finding(
        "SGL-GPU-012",
        summary=("A kernel asked for more shared memory per block than this GPU's SMs have"
                 + (f" ({need} bytes, limit {limit})" if need else "")
                 + ": a kernel configuration that does not fit the architecture, not GPU memory."
                 + (" Seen during autotuning, where the choice is skipped: harmless." if autotune else "")),
        evidence=hits[:3],
        severity="info" if autotune else None,
        confidence="high",
        ranks=[x for x in (rank_of(r) for r in hits) if x is not None],
        figures={"kind": "shared_memory", "required_bytes": need, "limit_bytes": limit},
        actions=["Use a build of the kernel library made for this GPU's architecture, or another backend "
                 "(--attention-backend, --moe-runner-backend) whose kernels fit.",
                 "Memory flags do not help: shared memory is per streaming multiprocessor."],
    )

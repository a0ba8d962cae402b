"""The software cannot run on this GPU, or its pieces were built against each other's other versions.

* SGL-ARCH-001: a kernel or data type this GPU's architecture cannot run. Triton refuses an fp8 type the target
  lacks (triton python/triton/language/core.py (3.0+) ``type fp8e4nv not supported in this architecture. The
  supported fp8 dtypes are (…)``; triton python/triton/language/semantic.py (2.1) ``fp8e4nv data type is not
  supported on CUDA arch < 89``): ``fp8e4nv`` is ``torch.float8_e4m3fn``, which needs compute capability 8.9+
  (Ada, Hopper and later), so an FP8 checkpoint, ``--quantization fp8`` or an e4m3 KV cache cannot run on Ampere
  or older. The CUDA runtime's ``no kernel image is available for execution on the device``
  (``cudaErrorNoKernelImageForDevice``, failure_messages.md §2.1's ``CUDA error: {str}``): the build holds no code
  for this compute capability. An attention kernel's own check (flash-attention flash_attn/cute/interface.py (FA4,
  2025+) ``FP8 is only supported on SM100 (compute capability 10.x) for FA4 CuTe``): that backend does not run this
  GPU. AMD's Composable Kernel refusing a problem no compiled instance covers (rocm composable_kernel
  include/ck/tensor_operation/gpu/device/impl/ (6.x) ``… with the specified compilation parameters does not support
  this GEMM problem``), met through AITER's fused MoE: vLLM's ``VLLM_ROCM_USE_AITER_MOE=0`` (vllm vllm/envs.py (0.9+))
  and SGLang's ``--moe-runner-backend triton`` (sglang python/sglang/srt/server_args.py (0.5+)) run that MoE with
  Triton instead. None of them is memory: lowering a memory fraction changes nothing.
* SGL-ARCH-002: ``ImportError: {object}.so: undefined symbol: {name}`` (dlopen(3)): a compiled extension (sgl-kernel,
  flashinfer, vLLM's ``_C``) was built against another version of the library that should define ``name`` — its
  mangled namespace says which (``c10``/``at``/``torch``: PyTorch; ``cu…``: the CUDA driver). The server cannot
  import its kernels and never starts.

>>> symbol_library("_ZNK3c106SymInt6sym_neERKS0_"), symbol_library("cuGreenCtxStreamCreate")
('PyTorch', 'the CUDA driver')
"""

from __future__ import annotations

import re

from forensics.facts.launch import server_config
from forensics.facts.rows import Row, attrs, rank_of, rows
from forensics.facts.vllm import vllm_files
from forensics.model import Finding, FlagChange, Timeline
from parsers.failures import classify

from ._common import make_finding

_CLASSES = ("arch_unsupported", "abi_mismatch")
#: the mangled namespaces of the libraries an extension is most often built against (Itanium C++ ABI: ``_ZN`` /
#: ``_ZNK`` then the length-prefixed namespace)
_NAMESPACES = ((re.compile(r"^_ZN?K?\d*(?:3c10|2at|5torch)"), "PyTorch"),
               (re.compile(r"^cu[A-Z]\w+$"), "the CUDA driver"),
               (re.compile(r"^_ZN?K?\d*4nccl|^nccl[A-Z]"), "NCCL"))
_WORTH_CLASSIFYING = re.compile(r"supported|kernel image|undefined symbol|support this (?:GEMM|Gemm) problem")
#: attention backends whose own check names the architecture it needs (flash-attention's FA3/FA4, FlashInfer)
_NAMED_BACKEND = re.compile(r"\bFA[34]\b|flash_attn|FlashAttention|flashinfer", re.I)
#: a fused-MoE frame or module in the traceback (vLLM's rocm_aiter_fused_experts, AITER's fused_moe / moe_ck2stages)
_MOE_FRAMES = re.compile(r"fused_experts|fused_moe|moe_ck|ck_moe", re.I)


def symbol_library(symbol: str) -> str | None:
    """The library an undefined symbol belongs to, from its mangled namespace."""
    for pattern, name in _NAMESPACES:
        if pattern.search(symbol):
            return name
    return None


def _classified(row: Row) -> dict | None:
    """The failure attrs of a row of one of these classes: its own, or its exception line's (an engine's traceback
    row keeps the exception line whole, and the failure scan then leaves it to the engine's parser)."""
    a = attrs(row)
    if a.get("failure") in _CLASSES:
        return a
    if row.get("kind") == "failure":
        return None
    msg = a.get("exception_message")
    # the exception line, then the lines a compiler error prints under it (Triton's ``CompilationError: at 1:0:``
    # is followed by the kernel's source and the ``ValueError(…)`` that says why)
    lines = [f"{a.get('exception_type') or 'RuntimeError'}: {msg}"] if msg else []
    lines += [ln for ln in (row.get("text") or "").splitlines()[-40:] if _WORTH_CLASSIFYING.search(ln)]
    for line in lines:
        found = classify(line.strip())
        if found and found[0] == "failure" and found[2].get("failure") in _CLASSES:
            return found[2]
    return None


def detect(tl: Timeline) -> list[Finding]:
    hits: dict[str, list[tuple[Row, dict]]] = {c: [] for c in _CLASSES}
    for r in rows(tl, "failure", "scheduler_exception", "exception", "cuda_graph_failed"):
        if (a := _classified(r)) is not None and not (r.get("text") or "").lstrip().startswith("#"):
            hits[a["failure"]].append((r, a))
    out = []
    if hits["arch_unsupported"]:
        out.append(_arch(tl, hits["arch_unsupported"]))
    if hits["abi_mismatch"]:
        out.append(_abi(tl, hits["abi_mismatch"]))
    return out


def _capability(value: object) -> str:
    """vLLM's integer capability (major×10+minor: 89) as CUDA writes it (8.9); '?' when unknown."""
    return f"{int(value) // 10}.{int(value) % 10}" if isinstance(value, int) and value > 0 else "?"


def _arch(tl: Timeline, found: list[tuple[Row, dict]]) -> Finding:
    row, a = found[0]
    needs = str(a.get("needs") or "")
    cfg = server_config(tl)
    flags: list[FlagChange] = []
    if a.get("dtype") == "bfloat16":
        gpu = f"the {a['gpu_name']}" if a.get("gpu_name") else "this GPU"
        what = ("bfloat16, which needs compute capability 8.0 or newer (Ampere and later): "
                + (f"{gpu} has {_capability(a['current_arch'])}" if a.get("current_arch") else f"{gpu} is older"))
        flags.append(FlagChange("--dtype", cfg.flag_text("dtype"), "half",
                                "float16 runs on this GPU, as the engine's own message says; a model trained in bf16 "
                                "may overflow in fp16 on some layers — check its outputs"))
        actions = ["Launch with --dtype half (float16), or run on a GPU of compute capability 8.0+."]
    elif a.get("backend") == "FLASH_ATTN":
        what = "FlashAttention-2, which needs compute capability 8.0 or newer: Volta and Turing GPUs cannot run it"
        actions = ["Select another attention backend for this GPU: VLLM_ATTENTION_BACKEND=XFORMERS (vLLM V0), or a "
                   "release that picks a supported backend itself; nothing about memory changes it."]
    elif a.get("kernel_library") == "ck":
        moe = _MOE_FRAMES.search(" ".join(r.get("text") or "" for r in rows(tl, "failure", "scheduler_exception",
                                                                            "exception")))
        what = ("a GEMM shape that none of the Composable Kernel instances AMD's AITER ships covers on this GPU"
                + (" (its fused-MoE kernel, for this model's per-rank expert size)" if moe else ""))
        vllm = row.get("file") in vllm_files(tl)
        if moe and vllm:
            flags.append(FlagChange("VLLM_ROCM_USE_AITER_MOE", None, "0",
                                    "vLLM then runs the MoE with its Triton kernels; AITER's other kernels stay on"))
        elif moe:
            flags.append(FlagChange("--moe-runner-backend", cfg.flag_text("moe_runner_backend"), "triton",
                                    "SGLang's Triton MoE runner covers the shape AITER's CK kernel refuses"))
        actions = ["Run the failing operation with another kernel (the MoE with Triton, or without AITER), or change "
                   "the tensor-parallel size so the per-rank shape is one the library covers; an AITER release with "
                   "the shape tuned fixes it for good. No memory flag changes it."]
    elif a.get("quant_method"):
        method, has = str(a["quant_method"]), a.get("current_arch")
        what = (f"the {method} quantization's kernels: they need compute capability "
                f"{_capability(a.get('min_arch'))} or newer and this GPU has {_capability(has)}")
        quant = cfg.flag_text("quantization")
        model = " ".join(str(m) for m in (cfg.flag_text("model_path"), cfg.flag_text("model"),
                                          *(attrs(r).get("model_tag") or attrs(r).get("model")
                                            for r in rows(tl, "launch_command", "engine_config"))) if m)
        # online quantization of a full-precision checkpoint is the flag's alone; a checkpoint that ships quantized
        # weights (its name says the method) needs another checkpoint, which no flag gives
        if quant and quant.lower() == method.lower() and method.split("_")[0].lower() not in model.lower():
            flags.append(FlagChange("--quantization", quant, "(remove)",
                                    f"{method} needs compute capability {_capability(a.get('min_arch'))}; this GPU is "
                                    f"{_capability(has)}: the checkpoint loads in its own precision without it"))
        actions = [f"Run a checkpoint whose quantization this GPU supports (`nvidia-smi --query-gpu=name,compute_cap "
                   f"--format=csv` says {_capability(has)}): BF16/FP16 weights, or a method whose minimum is at most "
                   "that (vLLM's documentation lists each method's supported hardware); or run on newer GPUs.",
                   "No memory flag changes it: the engine refused before loading anything."]
    elif "fp8" in needs.lower():
        what = ("an FP8 (e4m3) kernel: Triton's fp8e4nv is torch.float8_e4m3fn, which needs compute capability 8.9 "
                "or newer (Ada, Hopper, Blackwell) — Ampere (A100, A10, 3090) and older cannot run it")
        quant, kv = cfg.flag_text("quantization"), cfg.flag_text("kv_cache_dtype")
        if quant and "fp8" in quant.lower():
            flags.append(FlagChange("--quantization", quant, "(remove)",
                                    "online FP8 quantization runs e4m3 kernels this GPU cannot run"))
        if kv and kv.lower() in ("fp8", "fp8_e4m3"):
            flags.append(FlagChange("--kv-cache-dtype", kv, "(remove)",
                                    "an e4m3 KV cache needs fp8e4nv, which this GPU does not support"))
        actions = ["Run a checkpoint this GPU supports (BF16/FP16, or an AWQ/GPTQ/INT8 quantization on Ampere) — a "
                   "model that ships FP8 weights needs compute capability 8.9+ (L4, L40, RTX 4090, H100 or newer); "
                   "drop FP8 flags (--quantization fp8, an fp8_e4m3 KV cache).",
                   "`nvidia-smi --query-gpu=name,compute_cap --format=csv` says which architecture the GPUs are."]
    elif "kernel image" in needs or "NoKernelImage" in needs:
        what = ("a kernel that the installed build holds no code for on this GPU's compute capability (the wheel or "
                "image was compiled for other architectures)")
        actions = ["Install a build compiled for this GPU (`nvidia-smi --query-gpu=name,compute_cap --format=csv`): the "
                   "engine's image or wheels for that CUDA version and architecture (Blackwell needs CUDA 12.8+ "
                   "builds), or a kernel path that does not use the failing kernel; the traceback's last frame names "
                   "it."]
    else:
        arch = a.get("min_arch")
        kernel = "FlashAttention 4 (CuTe)" if "FA4" in str(a.get("message") or "") else "a kernel"
        what = (f"{kernel} checks the architecture and requires another one{f' (SM{arch})' if arch else ''}: that "
                "backend does not run this GPU")
        if _NAMED_BACKEND.search(str(a.get("message") or "")):
            backend = cfg.flag_text("attention_backend")
            flags.append(FlagChange("--attention-backend", backend, "flashinfer",
                                    "the failing FlashAttention kernel does not support this GPU's architecture; "
                                    "FlashInfer (or triton) runs on it"))
        actions = ["Choose the backend the GPU supports (the check names the one that failed): another "
                   "--attention-backend (flashinfer, triton) or the quantization's other kernel path."]
    return make_finding(
        "SGL-ARCH-001",
        summary=f"This GPU's architecture cannot run what the launch asked for — {what}. Not a memory problem.",
        # and the engine's own start-up failure lines that follow it in the same file: the refusal's echo
        evidence=[r for r, _a in found[:6]] + [r for r in rows(tl, "init_failed", "engine_dead")
                                                if r.get("file") == row.get("file")][:2],
        confidence="high",
        ranks=[x for x in (rank_of(r) for r, _a in found) if x is not None],
        figures={"needs": needs, "min_arch": a.get("min_arch")},
        flags=flags,
        actions=actions,
    )


def _abi(tl: Timeline, found: list[tuple[Row, dict]]) -> Finding:
    _row, a = found[0]
    obj, symbol = str(a.get("object") or "an extension"), str(a.get("symbol") or "")
    package = str(a.get("package") or obj.split(".")[0])
    # the import's own exception lines in the same files (an ``ImportError:`` whose message is on the next lines)
    files = {r.get("file") for r, _a in found}
    imports = [r for r in rows(tl, "failure") if r.get("file") in files and attrs(r).get("exception_type") == "ImportError"
               and all(r is not f for f, _a in found)]
    lib = symbol_library(symbol)
    against = lib or "the library that should define it"
    return make_finding(
        "SGL-ARCH-002",
        summary=(f"{package}'s {obj} cannot be loaded: it needs {symbol if len(symbol) <= 80 else symbol[:77] + '…'}, which the installed {against} does not "
                 f"define —"
                 f" the extension was built against another version of {against}. The server cannot import its "
                 "kernels; not a hardware or memory problem."),
        evidence=[*(r for r, _a in found[:6]), *imports[:3]],
        confidence="high" if lib else "medium",
        confidence_reason=None if lib else "the symbol's namespace does not say which library it belongs to",
        figures={"object": obj, "symbol": symbol, "library": lib},
        actions=[f"Install versions built for each other: the {package} wheel that matches the installed "
                 + ("torch (`pip show torch`; the engine's release pins both — `pip install \"sglang[all]==<version>\"` "
                    "or its container image)" if lib == "PyTorch" else
                    "CUDA driver (`nvidia-smi` shows its version; a newer driver or a build for the older CUDA)"
                    if lib == "the CUDA driver" else "library"),
                 "Which fact decides: `pip list | grep -iE 'torch|sgl|flashinfer|vllm'` against the versions the "
                 "engine's release requires."],
    )

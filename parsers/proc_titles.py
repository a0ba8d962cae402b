"""Which inference engine a process belongs to, and its role and ranks, from its title or argv.

Sources: reference/vllm_formats.md §1.6 (``VLLM::EngineCore``, ``VLLM::Worker_TP1``), sglang
python/sglang/srt/managers/scheduler.py::run_scheduler_process (0.4+: ``setproctitle("sglang::scheduler" +
prefix)``), proc(5) (``comm``: TASK_COMM_LEN 16, 15 characters shown), ray python/ray/_raylet.pyx (2.x:
``ray::<task>()``, ``ray::<Actor>.<method>`` and ``ray::IDLE`` titles).

Both engines retitle their worker processes (``setproctitle``), and Linux cuts the ``comm`` that
``ps -o comm``, fuser, top and the kernel print at 15 characters:

* SGLang: ``sglang::scheduler_TP3``, ``sglang::scheduler_DP1_TP3``, ``sglang::scheduler_DP3_TP3_EP3``,
  ``sglang::detokenizer``, ``sglang::data_parallel_controller``; comm ``sglang::schedul``,
  ``sglang::detoken``, ``sglang::data_pa``. The launcher keeps its argv
  (``python3 -m sglang.launch_server …``, ``sglang serve …``).
* vLLM (0.10.1+, prefix ``VLLM`` by default): ``VLLM::EngineCore``, ``VLLM::EngineCore_DP1``
  (0.10.1: ``VLLM::DPEngineCore_1``), ``VLLM::Worker_TP1``, ``VLLM::Worker_PP1_TP3``,
  ``VLLM::Worker_DP0_TP1``, ``VLLM::APIServer_0``, ``VLLM::DPCoordinator``; comm ``VLLM::EngineCor``,
  ``VLLM::Worker_TP``, ``VLLM::DPCoordin``. Under Ray the workers are actors:
  ``ray::RayWorkerWrapper`` (comm ``ray::RayWorkerW``), ``ray::RayWorkerProc``. The launcher keeps
  its argv (``vllm serve …``, ``python -m vllm.entrypoints.openai.api_server …``).

:func:`process_identity` returns the attrs every parser puts on a process row: ``engine``
(``sglang`` | ``vllm``), ``sglang_role`` or ``vllm_role``, ``rank`` (label as the title spells it,
``DP1 TP3``) with ``tp_rank``/``dp_rank``/``pp_rank``/``ep_rank``, ``ray_actor`` for Ray titles,
``title_truncated`` when the title was cut at 15 characters (the ranks are then unknown).

>>> process_identity("sglang::schedul")
{'engine': 'sglang', 'sglang_role': 'scheduler', 'title_truncated': True}
>>> process_identity("", "sglang::scheduler_DP3_TP3_EP3")["rank"]
'DP3 TP3 EP3'
>>> process_identity("VLLM::Worker_PP1_TP3")
{'engine': 'vllm', 'vllm_role': 'worker', 'rank': 'PP1 TP3', 'pp_rank': 1, 'tp_rank': 3}
>>> process_identity("ray::RayWorkerW")
{'engine': 'vllm', 'vllm_role': 'ray_worker', 'ray_actor': 'RayWorkerWrapper', 'title_truncated': True}
>>> process_identity("python3", "python3 train.py")
{}
"""

from __future__ import annotations

from typing import Any

import regex as re

#: Linux cuts comm (what ps -o comm, top, fuser and the kernel print) at this many characters.
COMM_LEN = 15

_RANK_PART_RE = re.compile(r"(ATTN_CP|MOE_DP|DP|PP|TP|EP)(\d+)")
_SGLANG_RE = re.compile(r"(?:^|[\s/])sglang::(?P<word>[A-Za-z]+(?:_[a-z]+)*)(?P<ranks>(?:_(?:ATTN_CP|MOE_DP|DP|PP|TP|EP)\d+)*)")
_SGLANG_LAUNCH_RE = re.compile(r"-m\s+sglang(?:_router)?\.launch_server\b|\bsglang\s+serve\b|\bsglang\.launch_server\b")
_SGLANG_ROLES = ("scheduler", "detokenizer", "tokenizer", "data_parallel_controller")
_VLLM_RE = re.compile(r"(?:^|[\s/])VLLM::(?P<word>[A-Za-z]+)(?P<suffix>(?:_[A-Za-z]*\d+)*)")
#: vLLM title word → role
_VLLM_ROLES = {"EngineCore": "engine_core", "DPEngineCore": "engine_core", "Worker": "worker",
               "APIServer": "api_server", "DPCoordinator": "dp_coordinator"}
_VLLM_LAUNCH_RE = re.compile(r"(?:^|[\s/])vllm\s+serve\b|-m\s+vllm\.entrypoints\.|\bvllm\.entrypoints\.openai\.api_server\b")
_RAY_RE = re.compile(r"(?:^|[\s/])ray::(?P<actor>[A-Za-z_][\w.]*)")
#: Ray actors that are vLLM's workers
_VLLM_RAY_ACTORS = ("RayWorkerWrapper", "RayWorkerProc")


def _ranks(suffix: str) -> dict[str, Any]:
    parts = _RANK_PART_RE.findall(suffix)
    if not parts:
        return {}
    out: dict[str, Any] = {"rank": " ".join(f"{k}{v}" for k, v in parts)}
    for k, v in parts:
        out[f"{k.lower()}_rank"] = int(v)
    return out


def _cut(text: str) -> bool:
    """The text is exactly as long as a cut comm: whatever follows the 15th character was lost."""
    return len(text.strip()) == COMM_LEN


def _sglang(text: str) -> dict[str, Any] | None:
    m = _SGLANG_RE.search(text)
    if not m:
        return None
    word = m.group("word")
    role = next((r for r in _SGLANG_ROLES if r == word), None)
    truncated = False
    if role is None:
        role = next((r for r in _SGLANG_ROLES if r.startswith(word) and len(word) >= 3), None)
        truncated = role is not None
    if role is None:
        role = word
    out: dict[str, Any] = {"engine": "sglang", "sglang_role": role, **_ranks(m.group("ranks"))}
    if truncated:
        out["title_truncated"] = True
    return out


def _vllm(text: str) -> dict[str, Any] | None:
    m = _VLLM_RE.search(text)
    if not m:
        return None
    word, suffix = m.group("word"), m.group("suffix")
    role = _VLLM_ROLES.get(word)
    truncated = False
    if role is None:
        full = next((w for w in _VLLM_ROLES if w.startswith(word) and len(word) >= 3), None)
        role, truncated = (_VLLM_ROLES[full], True) if full else (word.lower(), False)
    out: dict[str, Any] = {"engine": "vllm", "vllm_role": role}
    if word == "DPEngineCore" and suffix[1:].isdigit():  # 0.10.1: VLLM::DPEngineCore_1
        out.update(rank=f"DP{suffix[1:]}", dp_rank=int(suffix[1:]))
    elif word == "APIServer" and suffix[1:].isdigit():
        out["api_server_index"] = int(suffix[1:])
    else:
        out.update(_ranks(suffix))
    # VLLM::Worker_TP / VLLM::APIServer: a 15-character comm whose rank or index digits were cut
    if (not suffix and role in ("worker", "api_server") and _cut(text)
            and re.fullmatch(r"(?:_[A-Z]*)?", text[m.end():].strip())):
        truncated = True
    if truncated:
        out["title_truncated"] = True
    return out


def _ray(text: str) -> dict[str, Any] | None:
    m = _RAY_RE.search(text)
    if not m:
        return None
    actor = m.group("actor").split(".")[0]  # ray::RayWorkerWrapper.execute_method while running a task
    full = next((a for a in _VLLM_RAY_ACTORS if a == actor), None)
    truncated = False
    if full is None and _cut(text):
        full = next((a for a in _VLLM_RAY_ACTORS if a.startswith(actor) and len(actor) >= 6), None)
        truncated = full is not None
    if full is None:
        return {"ray_actor": actor}
    out: dict[str, Any] = {"engine": "vllm", "vllm_role": "ray_worker", "ray_actor": full}
    if truncated:
        out["title_truncated"] = True
    return out


def process_identity(comm: str | None, args: str | None = None) -> dict[str, Any]:
    """Engine, role and ranks of a process from its title (args) or comm; ``{}`` when neither engine.

    The full title (``args``) is preferred to ``comm``, which may be cut at 15 characters.

    >>> process_identity("python3", "python3 -m sglang.launch_server --tp 8")
    {'engine': 'sglang', 'sglang_role': 'launch_server'}
    >>> process_identity("vllm", "/usr/bin/python3 /usr/local/bin/vllm serve Qwen/Qwen3-8B --tensor-parallel-size 2")
    {'engine': 'vllm', 'vllm_role': 'api_server'}
    >>> process_identity("VLLM::EngineCor")
    {'engine': 'vllm', 'vllm_role': 'engine_core', 'title_truncated': True}
    """
    for text in (args or "", comm or ""):
        if len(text) > 4096:
            text = text[:4096]
        if not text.strip():
            continue
        for fn in (_sglang, _vllm, _ray):
            found = fn(text)
            if found:
                return found
        if _SGLANG_LAUNCH_RE.search(text):
            return {"engine": "sglang", "sglang_role": "launch_server"}
        if _VLLM_LAUNCH_RE.search(text):
            return {"engine": "vllm", "vllm_role": "api_server"}
    return {}


#: Roles of processes an engine's launcher spawns (a PPID of 1 means their parent is gone, or the
#: launcher is the container's PID 1).
CHILD_ROLES = frozenset({"scheduler", "detokenizer", "tokenizer", "data_parallel_controller", "engine_core",
                         "worker", "dp_coordinator"})


def rank_columns(ident: dict[str, Any]) -> dict[str, Any]:
    """The event columns (``rank``, ``tp_rank`` …) an identity fills."""
    return {k: ident.get(k) for k in ("rank", "tp_rank", "dp_rank", "pp_rank", "ep_rank") if ident.get(k) is not None}

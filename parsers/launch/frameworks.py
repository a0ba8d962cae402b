"""RL frameworks' spellings of the engines' server arguments: a training launch that starts SGLang or vLLM
as its rollout engine names the engine's settings in its own words.

* **verl** (Hydra overrides, ``key=value`` words): ``actor_rollout_ref.rollout.gpu_memory_utilization=0.6`` is
  SGLang's ``mem_fraction_static`` or vLLM's ``gpu_memory_utilization``, whichever ``actor_rollout_ref.rollout.name``
  picks (vLLM by default: verl verl/trainer/config/ppo_trainer.yaml (0.3-0.5)); verl passes it on as
  ``mem_fraction_static=self.config.gpu_memory_utilization`` (verl verl/workers/rollout/sglang_rollout/
  sglang_rollout.py::SGLangRollout._init_inference_engine (0.4-0.5)) or ``gpu_memory_utilization=`` (verl
  verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py (0.3-0.5)), with ``tensor_model_parallel_size`` as the
  engine's TP. ``…rollout.engine_kwargs.sglang.<arg>=`` passes an engine argument as itself.
* **AReaL** and other Hydra/OmegaConf launchers: ``sglang.mem_fraction_static=0.8``, ``actor.sglang.<arg>=``,
  ``vllm.gpu_memory_utilization=0.9`` — a dotted key whose next-to-last part names the engine (AReaL
  areal/api/cli_args.py::SGLangConfig, vLLMConfig (0.3+)).
* **slime**: every SGLang server argument prefixed, ``--sglang-mem-fraction-static 0.7`` (slime
  slime/backends/sglang_utils/arguments.py::add_sglang_arguments (0.1+): ``--sglang-{flag}`` for each option of
  ``ServerArgs.add_cli_args``), the engine's TP from ``--rollout-num-gpus-per-engine`` (``validate_args`` there).
* **OpenRLHF** (and TRL, ms-swift): ``--vllm_gpu_memory_utilization 0.5``, ``--vllm_tensor_parallel_size 2``
  (OpenRLHF openrlhf/cli/train_ppo_ray.py (0.5+)): ``--vllm_`` before a vLLM engine argument.

A spelling maps to the engine's canonical flag only when the engine registers that argument
(``vocab.engine_options``): OpenRLHF's ``--vllm_num_engines`` or slime's ``--sglang-router-ip`` are the
framework's own and stay unread.

>>> fc = framework_command("python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.name=sglang "
...                        "actor_rollout_ref.rollout.gpu_memory_utilization=0.85 "
...                        "actor_rollout_ref.rollout.tensor_model_parallel_size=4 trainer.n_gpus_per_node=8".split())
>>> fc.framework, fc.engine, fc.flags
('verl', 'sglang', {'--mem-fraction-static': '0.85', '--tp-size': '4'})
>>> fc.spellings["--mem-fraction-static"]
'actor_rollout_ref.rollout.gpu_memory_utilization'
>>> framework_command(["python", "train.py", "--sglang-mem-fraction-static", "0.7", "--rollout-num-gpus-per-engine",
...                    "2", "--sglang-router-ip", "10.0.0.1"]).flags
{'--mem-fraction-static': '0.7', '--tp-size': '2'}
>>> framework_command("python -m openrlhf.cli.train_ppo_ray --vllm_num_engines 4 --vllm_tensor_parallel_size 2 "
...                   "--vllm_gpu_memory_utilization 0.5".split()).flags
{'--tensor-parallel-size': '2', '--gpu-memory-utilization': '0.5'}
>>> framework_command(["python", "train.py", "--lr", "1e-6"]) is None
True
"""

from __future__ import annotations

from dataclasses import dataclass, field

import regex as re

from parsers.launch import vocab

#: verl's rollout keys → the engines' concepts (verl verl/trainer/config/ppo_trainer.yaml, rollout: (0.3-0.5))
VERL_ROLLOUT = "actor_rollout_ref.rollout."
_VERL_KEYS: dict[str, dict[str, str]] = {
    "gpu_memory_utilization": {"sglang": "--mem-fraction-static", "vllm": "--gpu-memory-utilization"},
    "tensor_model_parallel_size": {"sglang": "--tp-size", "vllm": "--tensor-parallel-size"},
    "max_model_len": {"vllm": "--max-model-len"},
    "max_num_seqs": {"vllm": "--max-num-seqs"},
    "max_num_batched_tokens": {"vllm": "--max-num-batched-tokens"},
    "enforce_eager": {"vllm": "--enforce-eager"},
    "enable_chunked_prefill": {"vllm": "--enable-chunked-prefill"},
    "dtype": {"vllm": "--dtype", "sglang": "--dtype"},
    "load_format": {"vllm": "--load-format", "sglang": "--load-format"},
}
#: OpenRLHF's vLLM options that are not ``--vllm_`` + the engine's name (openrlhf/cli/train_ppo_ray.py)
_OPENRLHF_PLAIN = {"--enforce_eager": "--enforce-eager", "--enable_prefix_caching": "--enable-prefix-caching"}
#: slime's option that carries the engine's TP (slime/backends/sglang_utils/arguments.py::validate_args)
_SLIME_TP = "--rollout-num-gpus-per-engine"

#: a Hydra override word: ``[+|++|~]a.b.c=value`` (Hydra docs, "Override grammar")
# hydra website/docs/advanced/override_grammar/basic.md (1.1+): key=value, +key=value, ++key=value, ~key
_OVERRIDE_RE = re.compile(r"^(\+{1,2}|~)?([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)=(.*)$", re.S)
#: a dotted key whose next-to-last part names the engine (``sglang.mem_fraction_static``, ``…engine_kwargs.vllm.x``)
# AReaL areal/api/cli_args.py (0.3+), verl engine_kwargs (0.4+)
_ENGINE_KEY_RE = re.compile(r"(?:^|\.)(sglang|vllm)\.([A-Za-z_]\w*)$")
#: words that mark a training launch of one of these frameworks (its module or script), for ``sniff``
# the frameworks' entry points and spellings: verl verl/trainer/main_ppo.py (0.3-0.5), openrlhf
# openrlhf/cli/train_ppo_ray.py (0.5+), areal areal/api/cli_args.py (0.3+), slime slime/backends/sglang_utils/arguments.py (0.1+)
ANCHOR_RE = re.compile(r"-m\s+(?:verl\.trainer\.\w+|openrlhf\.cli\.\w+|areal\.[\w.]+)\b"
                       r"|(?:^|\s)\+{0,2}actor_rollout_ref\.rollout\.\w+="
                       # (an engine key anywhere in a dotted Hydra key: the char before is a space or a dot, which
                       # keeps the scan linear: a ``[\w.]+\.`` prefix backtracks over every dotted run)
                       r"|(?:^|[\s.])(?:sglang|vllm)\.\w+=\S"
                       r"|(?:^|\s)--sglang-[a-z][a-z0-9-]*[=\s]|(?:^|\s)--vllm_[a-z][a-z0-9_]*[=\s]")

#: strings one of which every match of :data:`ANCHOR_RE` holds, for the router's text gate (parsers/routing.py)
ANCHOR_LITERALS = ("verl.trainer.", "openrlhf.cli.", "areal.", "actor_rollout_ref.rollout.", "sglang.", "vllm.",
                   "--sglang-", "--vllm_")


@dataclass
class FrameworkLaunch:
    """What a framework's command line sets in its rollout engine, in the engine's canonical flags."""

    framework: str  # the framework its command names (verl, slime, openrlhf, areal, trl …)
    engine: str
    form: str = ""  # how it spells the engine's flags: verl | hydra | slime (--sglang-) | openrlhf (--vllm_)
    flags: dict[str, str | bool] = field(default_factory=dict)
    spellings: dict[str, str] = field(default_factory=dict)  # canonical flag → as the user typed it


def _framework_name(argv: list[str], form: str) -> str:
    words = " ".join(argv[:6]).lower()
    for name in ("verl", "openrlhf", "areal", "slime", "trl", "swift"):
        if name in words:
            return name
    if form in ("verl", "slime"):  # spellings only that framework uses
        return form
    return "the training launcher"  # --vllm_ (OpenRLHF, TRL, ms-swift) or plain overrides: the name is not known


def _known(engine: str, flag: str) -> str | None:
    """The engine's canonical flag for ``flag`` when the engine registers it exactly, else None."""
    read = vocab.resolve(flag, engine)
    return read.flag if read.how in ("exact", "alias") else None


def _value(argv: list[str], i: int) -> tuple[str | bool, int]:
    """The value of the option at ``argv[i]`` (``--x=v``, ``--x v``, or a bare switch) and the next index."""
    written, eq, inline = argv[i].partition("=")
    if eq:
        return inline, i + 1
    if i + 1 < len(argv) and not (argv[i + 1].startswith("--") or _OVERRIDE_RE.match(argv[i + 1])):
        return argv[i + 1], i + 2
    return True, i + 1


def framework_command(argv: list[str]) -> FrameworkLaunch | None:
    """The rollout engine's settings a framework's command line sets, or None when it names none."""
    rollout_engine = next((m.group(3).strip("'\"") for t in argv if (m := _OVERRIDE_RE.match(t))
                           and m.group(2) == VERL_ROLLOUT + "name"), None)
    found: list[tuple[str, str, str | bool, str]] = []  # (engine, canonical, value, as written)
    form = ""
    i = 0
    while i < len(argv):
        tok = argv[i]
        m = _OVERRIDE_RE.match(tok)
        if m:
            key, value = m.group(2), m.group(3).strip("'\"")
            i += 1
            if key.startswith(VERL_ROLLOUT) and key[len(VERL_ROLLOUT):] in _VERL_KEYS:
                engine = rollout_engine if rollout_engine in ("sglang", "vllm") else "vllm"
                flag = _VERL_KEYS[key[len(VERL_ROLLOUT):]].get(engine)
                if flag:
                    found.append((engine, flag, value, key))
                    form = form or "verl"
                continue
            e = _ENGINE_KEY_RE.search(key)
            if e and (flag := _known(e.group(1), "--" + e.group(2).replace("_", "-"))):
                found.append((e.group(1), flag, value, key))
                form = form or "hydra"
            continue
        if tok.startswith("--sglang-") or tok.startswith("--vllm_") or tok.startswith("--vllm-"):
            engine = "sglang" if tok.startswith("--sglang-") else "vllm"
            written = tok.split("=", 1)[0]
            flag = _known(engine, "--" + written[len("--sglang-" if engine == "sglang" else "--vllm_"):])
            value, i = _value(argv, i)
            if flag:
                found.append((engine, flag, value, written))
                form = form or ("slime" if engine == "sglang" else "openrlhf")
            continue
        if tok.split("=", 1)[0] == _SLIME_TP:
            value, i = _value(argv, i)
            found.append(("sglang", "--tp-size", value, _SLIME_TP))
            continue
        if tok.split("=", 1)[0] in _OPENRLHF_PLAIN and any(t.startswith("--vllm_") for t in argv):
            written = tok.split("=", 1)[0]
            value, i = _value(argv, i)
            found.append(("vllm", _OPENRLHF_PLAIN[written], value, written))
            continue
        i += 1
    engines = [e for e, *_ in found if e]
    if not engines or not form:
        return None
    engine = max(set(engines), key=engines.count)
    out = FrameworkLaunch(_framework_name(argv, form), engine, form)
    for e, flag, value, written in found:
        if e == engine:
            out.flags[flag] = value
            out.spellings[flag] = written
    return out


def engine_flag(spelling: str, engine: str | None = None) -> str | None:
    """The engine flag a framework's spelling stands for (one name per flag, whatever the framework calls it);
    None for a spelling of no framework. verl's rollout keys are SGLang's or vLLM's by the rollout engine
    (``engine``; vLLM, verl's default, when not given).

    >>> engine_flag("--sglang-mem-fraction-static"), engine_flag("--vllm_gpu_memory_utilization")
    ('--mem-fraction-static', '--gpu-memory-utilization')
    >>> engine_flag("actor_rollout_ref.rollout.gpu_memory_utilization", "sglang"), engine_flag("--mem-fraction-static")
    ('--mem-fraction-static', None)
    """
    if spelling in _OPENRLHF_PLAIN:
        return _OPENRLHF_PLAIN[spelling]
    name = [f"{VERL_ROLLOUT}name={engine}"] if engine in ("sglang", "vllm") else []
    fc = framework_command(["x", *name, f"{spelling}=0"] if override_key(spelling) else ["x", spelling, "0"])
    return next(iter(fc.flags), None) if fc else None


def override_key(flag: str) -> bool:
    """Whether ``flag`` is a Hydra override key (``a.b.c``), set as ``a.b.c=value`` rather than ``--flag value``.

    >>> override_key("actor_rollout_ref.rollout.gpu_memory_utilization"), override_key("--tp-size")
    (True, False)
    """
    return _OVERRIDE_RE.match(flag + "=") is not None


def spelling_for(form: str, engine: str, flag: str, typed: dict[str, str]) -> str | None:
    """How a framework of that ``form`` (``FrameworkLaunch.form``) spells the engine's ``flag`` when the user did not type it: verl's rollout key, slime's
    ``--sglang-`` prefix, OpenRLHF's ``--vllm_`` options, or the engine key beside another the user typed.

    >>> spelling_for("slime", "sglang", "--cuda-graph-max-bs", {})
    '--sglang-cuda-graph-max-bs'
    >>> spelling_for("verl", "vllm", "--max-num-seqs", {})
    'actor_rollout_ref.rollout.max_num_seqs'
    >>> spelling_for("areal", "sglang", "--context-length", {"--mem-fraction-static": "sglang.mem_fraction_static"})
    'sglang.context_length'
    """
    if form == "verl":
        key = next((k for k, by in _VERL_KEYS.items() if by.get(engine) == flag), None)
        if key:
            return VERL_ROLLOUT + key
    if form == "slime" and engine == "sglang":
        return _SLIME_TP if flag == "--tp-size" else "--sglang-" + flag[2:]
    if form == "openrlhf" and engine == "vllm":
        if flag in ("--gpu-memory-utilization", "--tensor-parallel-size"):
            return "--vllm_" + flag[2:].replace("-", "_")
        return next((k for k, v in _OPENRLHF_PLAIN.items() if v == flag), None)
    prefix = next((w.rsplit(".", 1)[0] for w in typed.values() if _ENGINE_KEY_RE.search(w)), None)
    if prefix and prefix.split(".")[-1] == engine:
        return f"{prefix}.{flag[2:].replace('-', '_')}"
    return None

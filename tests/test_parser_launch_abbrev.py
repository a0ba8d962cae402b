"""Launch flags read the way the engines' argparse reads them: exact names, unique prefixes, ambiguous prefixes.

Python argparse docs, "Argument abbreviations (prefix matching)": long options may be abbreviated to a prefix
when the prefix matches a unique option; SGLang's and vLLM's launch parsers keep that default.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path

import pytest

from forensics.check import CheckOptions, corrected_argv, run_check
from forensics.facts import engines
from parsers import launch
from parsers.launch import vocab

GIB = 1 << 30
OPTIONS = json.loads((Path(launch.__file__).with_name("engine_options.json")).read_text(encoding="utf-8"))


def flags_of(cmd: str) -> dict:
    return json.loads(launch.parse(cmd).events["attrs"][0])


# ---------------------------------------------------------------------------------------------
# a unique prefix is that option


def test_a_unique_prefix_is_the_option_it_abbreviates() -> None:
    a = flags_of("python3 -m sglang.launch_server --model-path /m --tp 8 --nccl-init 10.0.0.7:5000 "
                 "--mem-frac 0.8 --nnod 2 --node-r 1 --enable-hier --hicache-si 64")
    assert a["flags"] == {"--model-path": "/m", "--tp-size": "8", "--dist-init-addr": "10.0.0.7:5000",
                          "--mem-fraction-static": "0.8", "--nnodes": "2", "--node-rank": "1",
                          "--enable-hierarchical-cache": True, "--hicache-size": "64"}
    # as written, so a correction edits the user's own word
    assert a["spellings"]["--dist-init-addr"] == "--nccl-init" and a["spellings"]["--hicache-size"] == "--hicache-si"
    assert "ambiguous_flags" not in a


def test_vllm_prefixes_and_underscores_are_read_like_its_flexible_parser() -> None:
    a = flags_of("vllm serve /models/m --max_model 8192 --gpu-mem=0.85 --enable-prefix --swap 8 -tp 2")
    assert a["engine"] == "vllm"
    assert a["flags"] == {"--max-model-len": "8192", "--gpu-memory-utilization": "0.85",
                          "--enable-prefix-caching": True, "--swap-space": "8", "--tensor-parallel-size": "2"}
    assert flags_of("vllm serve m --max_model_len 4096")["flags"] == {"--max-model-len": "4096"}


# ---------------------------------------------------------------------------------------------
# an exact option wins over the longer options it is a prefix of


@pytest.mark.parametrize(("written", "engine", "flag"), [
    ("--cuda-graph-max-bs", "sglang", "--cuda-graph-max-bs"),  # also a prefix of …-decode, …-prefill (0.5.15+)
    ("--ep", "sglang", "--ep-size"),  # SGLang's own alias from 0.4.10, also a prefix of --ep-dispatch-algorithm …
    ("--model", "sglang", "--model-path"),  # an alias, also a prefix of --model-impl …
    ("--model", "vllm", "--model"),
    ("--enable-hicache", "sglang", "--enable-hierarchical-cache"),
    ("--host", "sglang", "--host"),
])
def test_an_exact_option_wins(written: str, engine: str, flag: str) -> None:
    assert vocab.resolve(written, engine) == vocab.Resolved(flag, "exact")


def test_exact_wins_in_a_command_too() -> None:
    a = flags_of("python -m sglang.launch_server --model-path m --cuda-graph-max-bs 16 --ep 8")
    assert a["flags"] == {"--model-path": "m", "--cuda-graph-max-bs": "16", "--ep-size": "8"}


# ---------------------------------------------------------------------------------------------
# an ambiguous prefix stays as written and is said, never guessed


def test_an_ambiguous_prefix_stays_unknown_and_is_reported() -> None:
    r = launch.parse("python -m sglang.launch_server --model-path m --pp 2 --dist=10.0.0.7:5000 --tp 8\n")
    a = json.loads(r.events["attrs"][0])
    assert a["flags"] == {"--model-path": "m", "--pp": "2", "--dist": "10.0.0.7:5000", "--tp-size": "8"}
    assert a["ambiguous_flags"] == {"--pp": ["--pp-async-batch-depth", "--pp-max-micro-batch-size", "--pp-size"],
                                    "--dist": ["--dist-init-addr", "--dist-timeout"]}
    assert "--pp-size" not in a["flags"] and "--dist-init-addr" not in a["flags"]
    assert any("--pp is ambiguous for sglang" in n and "ambiguous option" in n for n in r.notes)


def test_vllm_ambiguous_prefix() -> None:
    a = flags_of("vllm serve m --max-num 64")
    assert a["flags"] == {"--max-num": "64"}
    assert "--max-num-seqs" in a["ambiguous_flags"]["--max-num"]
    assert "--max-num-batched-tokens" in a["ambiguous_flags"]["--max-num"]


# ---------------------------------------------------------------------------------------------
# values with '='


def test_values_with_equals_signs() -> None:
    a = flags_of("python -m sglang.launch_server --model-path m --nccl-init=10.0.0.7:5000 --mem-frac=0.85 "
                 """--json-model-override='{"rope_scaling": "type=yarn"}'""")
    assert a["flags"] == {"--model-path": "m", "--dist-init-addr": "10.0.0.7:5000", "--mem-fraction-static": "0.85",
                          "--json-model-override-args": '{"rope_scaling": "type=yarn"}'}
    # the name before the first '=' is what is abbreviated; a value's own '=' stays in the value
    b = flags_of("vllm serve m --kv-transfer='{\"kv_connector\":\"X\",\"k\":\"a=b\"}' --served=name=with=eq")
    assert b["flags"]["--kv-transfer-config"] == '{"kv_connector":"X","k":"a=b"}'
    assert b["flags"]["--served-model-name"] == "name=with=eq"


# ---------------------------------------------------------------------------------------------
# the rule is argparse's own, on the engines' real option strings


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_resolve_agrees_with_argparse_on_every_option_cut_short(engine: str) -> None:
    """Python's own argparse, given every option string the engine registers, against ``vocab.resolve``."""
    options = sorted(OPTIONS[engine]["options"])
    p = argparse.ArgumentParser(add_help=False)
    for i, name in enumerate(options):
        p.add_argument(name, dest=f"o{i}", default=None)
    aliases = vocab.VLLM_ALIASES if engine == "vllm" else vocab.SGLANG_ALIASES
    cuts = sorted({o[:n] for o in options if o.startswith("--") for n in (4, 6, 9, len(o) - 2, len(o)) if n > 2})
    for written in cuts[::5]:  # exact names, unique prefixes and ambiguous ones all among them
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                ns, _ = p.parse_known_args([written, "v"])
            picked = next((options[int(k[1:])] for k, v in vars(ns).items() if v is not None), None)
        except SystemExit:  # "ambiguous option: … could match …"
            picked = "ambiguous"
        r = vocab.resolve(written, engine)
        if picked == "ambiguous":
            assert (r.how, r.flag) == ("ambiguous", written), r
        elif picked is None:
            assert r.how in ("unknown", "alias"), r
        else:
            assert r.how in ("exact", "prefix") and r.flag == aliases.get(picked, picked), (written, picked, r)


def test_the_option_lists_are_the_engines_release_facts() -> None:
    sg, vl = OPTIONS["sglang"], OPTIONS["vllm"]
    assert sg["releases"][0] == "0.3.4" and sg["releases"][-1] == "0.5.23"
    assert vl["releases"][0] == "0.2.0" and vl["releases"][-1] == "0.33.0"
    # the alias of --dist-init-addr for backward compatibility, in every release read
    assert sg["options"]["--nccl-init-addr"] == ["0.3.4", "0.5.23"]
    assert ["--dist-init-addr", "--nccl-init-addr"] in sg["aliases"]
    # every canonical name our tables map to is an option the engine registers
    for table, engine in ((vocab.SGLANG_ALIASES, "sglang"), (vocab.VLLM_ALIASES, "vllm")):
        assert set(table.values()) <= set(OPTIONS[engine]["options"]), engine
    # the abbreviations the prose tables know read the same way in a command (--pp excepted: ambiguous there)
    for written in ("--tp", "--dp", "--mem-frac", "--mem-fraction"):
        assert vocab.resolve(written, "sglang").flag == vocab.SGLANG_ALIASES[written]
    assert vocab.resolve("--pp", "sglang").how == "ambiguous" and vocab.SGLANG_ALIASES["--pp"] == "--pp-size"


def test_the_facts_spellings_of_each_flag_are_read_as_that_flag() -> None:
    """forensics/facts/engines.py's aliases (which value_for reads a flag under) are the engine's reading too."""
    for e in (engines.SGLANG, engines.VLLM):
        for concept, spec in e.flags.items():
            for name in (spec.name, *spec.aliases):
                assert vocab.resolve(name, e.name).flag == spec.name, (e.name, concept, name)


# ---------------------------------------------------------------------------------------------
# forensics check reads the same flags


def test_check_reads_abbreviated_flags_and_corrects_them_in_place() -> None:
    cmd = ("python3 -m sglang.launch_server --model-path /w/m --tp 4 --enable-hier --hicache-si=300 "
           "--mem-frac 0.85 --pp 2")
    res = run_check(CheckOptions(cmd=cmd, host_memory=449 * GIB, gpus=4, gpu_memory=80 * GIB))
    assert res.launch.flags["--hicache-size"] == "300" and res.launch.flags["--enable-hierarchical-cache"] is True
    assert res.launch.flags["--mem-fraction-static"] == "0.85" and "--pp-size" not in res.launch.flags
    assert any("--pp is ambiguous" in n for n in res.notes)
    fix = next(c for f in res.findings for c in f.remediation.flags if c.flag == "--hicache-size")
    assert fix.old == "300"
    argv = corrected_argv(res.launch, {"--hicache-size": fix.new, "--mem-fraction-static": "0.8"})
    assert f"--hicache-si={fix.new}" in argv and argv[argv.index("--mem-frac") + 1] == "0.8"
    assert "--hicache-size" not in argv and "--mem-fraction-static" not in argv

"""Build parsers/launch/engine_options.json: every option string the engines' launch parsers register.

Reads unpacked PyPI wheels side by side (``ROOT/<engine>/<release>/{sglang,vllm}/…``, as the reference
files were written from) and lists each option string with the first and last sampled release that
registers it, plus the option strings that name one action (aliases). Only names are kept.

Where the names come from:

- sglang python/sglang/srt/server_args.py::ServerArgs.add_cli_args (0.3.4-0.5.12: literal
  ``parser.add_argument("--x", "--alias", …)``; 0.5.15-0.5.23: also ``A[T, Arg(...)]`` fields turned into
  ``--field-name`` plus ``Arg(cli_name=…, aliases=[…])`` by srt/arg_groups/arg_utils.py::add_cli_args_from_dataclass,
  the fields in srt/arg_groups/fields/*.py).
- vllm vllm/engine/arg_utils.py::EngineArgs.add_cli_args and AsyncEngineArgs.add_cli_args (0.2.0-0.33.0),
  vllm/entrypoints/openai/cli_args.py::make_arg_parser (0.4.0+; ``FrontendArgs`` fields become
  ``--field-name`` from 0.10), vllm/entrypoints/openai/api_server.py (0.2.x-0.3.x parsed there) and
  vllm/entrypoints/cli/serve.py (``vllm serve``'s own options).
- ``action=argparse.BooleanOptionalAction`` (written, or what ``get_kwargs`` gives a ``bool`` field) also
  registers ``--no-<name>`` (Python argparse docs, BooleanOptionalAction).

Usage: ``python tools/build_engine_options.py ROOT > parsers/launch/engine_options.json``.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

SGLANG_FILES = ("sglang/srt/server_args.py", "sglang/srt/arg_groups/**/*.py")
#: where ``make_arg_parser`` lives: entrypoints/openai (0.4-0.28), entrypoints/launchers (0.29-0.32),
#: entrypoints/common (0.33)
CLI_ARGS = ("vllm/entrypoints/openai/cli_args.py", "vllm/entrypoints/launchers/cli_args.py",
            "vllm/entrypoints/common/cli_args.py")
VLLM_FILES = ("vllm/engine/arg_utils.py", *CLI_ARGS, "vllm/entrypoints/openai/api_server.py",
              "vllm/entrypoints/cli/serve.py")
VLLM_BOOL_FIELDS = ("vllm/config.py", "vllm/config/*.py", *CLI_ARGS)


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def _has_bool(ann: ast.expr) -> bool:
    """``bool``, ``Optional[bool]``, ``bool | None``: what vllm ``get_kwargs`` gives BooleanOptionalAction."""
    return any(isinstance(n, ast.Name) and n.id == "bool" for n in ast.walk(ann))


def _is_boolopt(node: ast.expr | None) -> bool:
    return node is not None and ast.unparse(node).endswith("BooleanOptionalAction")


def _names_of_call(node: ast.Call, bool_fields: set[str]) -> list[str]:
    names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
             and a.value.startswith("-")]
    boolopt = any(kw.arg == "action" and _is_boolopt(kw.value) for kw in node.keywords)
    for kw in node.keywords:  # ``**model_kwargs["enforce_eager"]`` (also inside ``**{**…}``): the field's type decides
        for sub in ast.walk(kw.value) if kw.arg is None else ():
            if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant):
                boolopt = boolopt or sub.slice.value in bool_fields
    return names + (["--no-" + n[2:] for n in names if n.startswith("--")] if boolopt else [])


def _field_groups(tree: ast.Module, classes: set[str] | None) -> list[list[str]]:
    """``name: A[T, Arg(...)]`` / ``A[T, "help"]`` fields (SGLang), or every field of ``classes`` (vLLM)."""
    out = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        if classes is not None and cls.name not in classes:
            continue
        for st in cls.body:
            if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                continue
            name, ann = st.target.id, st.annotation
            if classes is not None:  # a vLLM frontend dataclass: every field is an option
                if "ClassVar" in ast.unparse(ann):
                    continue
                opt = "--" + name.replace("_", "-")
                out.append([opt] + (["--no-" + opt[2:]] if _has_bool(ann) else []))
                continue
            if not (isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name)
                    and ann.value.id in ("A", "Annotated")):
                continue
            elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            meta = next((e for e in elts[1:] if isinstance(e, ast.Call) and ast.unparse(e.func) == "Arg"
                         or isinstance(e, ast.Constant | ast.JoinedStr | ast.BinOp)), None)
            if meta is None:
                continue
            kws = {kw.arg: kw.value for kw in meta.keywords} if isinstance(meta, ast.Call) else {}
            if isinstance(kws.get("no_cli"), ast.Constant) and kws["no_cli"].value:
                continue
            cli = kws["cli_name"].value if isinstance(kws.get("cli_name"), ast.Constant) else None
            aliases = [e.value for e in getattr(kws.get("aliases"), "elts", []) if isinstance(e, ast.Constant)]
            names = [cli or "--" + name.replace("_", "-")] + aliases
            if _is_boolopt(kws.get("action")):
                names += ["--no-" + n[2:] for n in names if n.startswith("--")]
            out.append(names)
    return out


def _files(root: Path, patterns: tuple[str, ...]) -> list[Path]:
    return [p for pat in patterns for p in sorted(root.glob(pat)) if p.is_file()]


def release_groups(engine: str, root: Path) -> list[list[str]]:
    """The option strings of one release, grouped by action."""
    bool_fields: set[str] = set()
    if engine == "vllm":
        for p in _files(root, VLLM_BOOL_FIELDS):
            for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and _has_bool(n.annotation):
                    bool_fields.add(n.target.id)
    groups: list[list[str]] = []
    for p in _files(root, SGLANG_FILES if engine == "sglang" else VLLM_FILES):
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument":
                names = _names_of_call(n, bool_fields)
                if names:
                    groups.append(names)
        if engine == "sglang":
            groups += _field_groups(tree, None)
        elif p.name == "cli_args.py":
            groups += _field_groups(tree, {"FrontendArgs", "BaseFrontendArgs"})
    return groups


def build(root: Path) -> dict:
    out: dict = {}
    for engine in ("sglang", "vllm"):
        releases = sorted((d.name for d in (root / engine).iterdir() if d.is_dir()), key=_vkey)
        seen: dict[str, list[str]] = {}
        merged: dict[str, set[str]] = {}
        for rel in releases:
            for g in release_groups(engine, root / engine / rel):
                for name in g:
                    span = seen.setdefault(name, [rel, rel])
                    span[1] = rel
                names = {n for n in g if not n.startswith("--no-")}
                for n in list(names):
                    names |= merged.get(n, set())
                for n in names:
                    merged[n] = names
        out[engine] = {"releases": releases, "options": dict(sorted(seen.items())),
                       "aliases": sorted({tuple(sorted(a)) for a in merged.values() if len(a) > 1})}
    return out


def dumps(data: dict) -> str:
    """One option (and one alias group) a line: a diff shows what a release added."""
    out = ["{"]
    for i, (engine, d) in enumerate(sorted(data.items())):
        out.append(f'"{engine}": {{"releases": {json.dumps(d["releases"])},')
        out.append('"aliases": [' + ",\n".join(json.dumps(a) for a in d["aliases"]) + "],")
        out.append('"options": {' + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in d["options"].items())
                   + "}}" + ("," if i + 1 < len(data) else ""))
    out.append("}")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(dumps(build(Path(sys.argv[1]))))

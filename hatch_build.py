"""Build hook: compile the native bulk-line scanner (parsers/_native/bulkscan.c) at install time.

It is a plain C shared library loaded with ctypes, so any C compiler will do and no Python headers are
needed. Where none is found, or the compile fails, the install goes on without it and the SGLang parser
uses its polars path (same output, slower); set FORENSICS_REQUIRE_NATIVE=1 to make that an error.
``python hatch_build.py`` rebuilds it in place (after editing the C source of an editable install).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

SOURCE = Path("parsers/_native/bulkscan.c")
LIBRARY = Path("parsers/_native/bulkscan.so")


def source_hash(root: Path) -> str:
    return hashlib.sha256((root / SOURCE).read_bytes()).hexdigest()[:16]


def compiler() -> list[str] | None:
    for cand in (os.environ.get("CC"), sysconfig.get_config_var("CC"), "cc", "gcc", "clang"):
        if cand:
            argv = shlex.split(cand)
            if argv and shutil.which(argv[0]):
                return argv
    return None


def build(root: Path) -> Path | None:
    """Compile into the source tree; the library's path, or None (with the reason on stderr)."""
    cc = compiler()
    if cc is None:
        print("forensics: no C compiler found; the native scanner is not built (slower parsing)", file=sys.stderr)
        return None
    out = root / LIBRARY
    tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
    argv = [*cc, "-O2", "-shared", "-fPIC", f'-DFX_SOURCE_HASH="{source_hash(root)}"', "-o", str(tmp),
            str(root / SOURCE)]
    try:
        subprocess.run(argv, check=True, capture_output=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        err = getattr(e, "stderr", b"") or b""
        print(f"forensics: building the native scanner failed ({e}): {err.decode(errors='replace')[-500:]}",
              file=sys.stderr)
        tmp.unlink(missing_ok=True)
        return None
    os.replace(tmp, out)
    return out


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script without hatchling
    BuildHookInterface = object  # type: ignore[assignment,misc]


class NativeScannerHook(BuildHookInterface):  # type: ignore[misc,valid-type]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        out = build(Path(self.root))
        if out is None:
            if os.environ.get("FORENSICS_REQUIRE_NATIVE") == "1":
                raise RuntimeError("FORENSICS_REQUIRE_NATIVE=1 but the native scanner could not be built")
            return
        if version != "editable":  # an editable install loads it from the source tree
            build_data["force_include"][str(out)] = str(LIBRARY)
            build_data["pure_python"] = False
            build_data["infer_tag"] = True


if __name__ == "__main__":
    sys.exit(0 if build(Path(__file__).resolve().parent) else 1)

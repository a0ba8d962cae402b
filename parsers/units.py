"""Unit conversion with the source's unit stated explicitly (DESIGN.md §5 "Units").

Sources: IEC 80000-13 (KiB/MiB/GiB against kB/MB/GB), docker-run(1) (``--memory`` with ``b k m g``),
kubernetes staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go (1.x), sbatch(1) (``--mem`` with ``K M
G T``), and the units each reference states (reference/system_formats.md §1.1, reference/sglang_formats.md
§0).

Every parser converts to bytes here, naming the unit the *source* means, never guessing from the
letters alone: SGLang's GPU "GB" is GiB, its HiCache "GB" is 10^9 bytes, ``free -g`` truncates
GiB, nvidia-smi's MiB is 2^20, meminfo's "kB" is KiB.

>>> gib(1.5)
1610612736
>>> gb_decimal(48)
48000000000
>>> parse_size("1.41 GiB")
1513975972
>>> parse_size("96413 MiB")
101096357888
>>> parse_size("8,6Mi")
9017754
>>> parse_size("512 kB", kb_is_kib=True)
524288
>>> parse_size("N/A") is None
True
"""

from __future__ import annotations

import re

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
TIB = 1 << 40

_BINARY = {"": 1, "b": 1, "k": KIB, "ki": KIB, "kib": KIB, "m": MIB, "mi": MIB, "mib": MIB,
           "g": GIB, "gi": GIB, "gib": GIB, "t": TIB, "ti": TIB, "tib": TIB, "p": 1 << 50,
           "pi": 1 << 50, "pib": 1 << 50}
_DECIMAL = {"kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15}

_SIZE_RE = re.compile(r"^\s*([-+]?\d+(?:[.,]\d+)?)\s*([A-Za-z]*)\s*$")


def gib(x: float) -> int:
    """GiB (2^30) → bytes, rounded to the nearest byte."""
    return int(round(x * GIB))


def mib(x: float) -> int:
    return int(round(x * MIB))


def kib(x: float) -> int:
    return int(round(x * KIB))


def gb_decimal(x: float) -> int:
    """Decimal GB (10^9) → bytes: HiCache sizes and psutil figures printed ``/ 1e9``."""
    return int(round(x * 1e9))


def to_float(s: str) -> float | None:
    """A number that may use a decimal comma; None for placeholders like ``[N/A]``."""
    s = s.strip()
    if not s:
        return None
    try:
        return float(s.replace(",", ".")) if s.count(",") == 1 and "." not in s else float(s)
    except ValueError:
        return None


def parse_size(text: str, *, kb_is_kib: bool = False, decimal_suffixes: bool = False) -> int | None:
    """Parse ``"<number> <unit>"`` into bytes; None when it is not a size.

    Binary suffixes (``Ki``, ``MiB``, ``G``…) are powers of two. ``kB``/``MB``/``GB`` are decimal
    unless the caller knows its source means binary: ``kb_is_kib`` (meminfo) or by using
    :func:`gib` directly (SGLang GPU lines).
    """
    m = _SIZE_RE.match(text)
    if not m:
        return None
    num = to_float(m.group(1))
    if num is None:
        return None
    unit = m.group(2).lower()
    if unit == "kb" and kb_is_kib:
        return int(round(num * KIB))
    if unit in _DECIMAL and not decimal_suffixes and unit != "kb":
        # "MB"/"GB" printed by tools that mean binary are handled by their parsers; here decimal.
        return int(round(num * _DECIMAL[unit]))
    if unit in _DECIMAL:
        return int(round(num * _DECIMAL[unit]))
    if unit in _BINARY:
        return int(round(num * _BINARY[unit]))
    return None


_CLI_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?)(b?)\s*$", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_cli_size(text: str) -> int | None:
    """A size typed on the command line: ``449GiB``, ``97887MiB``, ``480GB`` (10^9), ``480G`` (GiB, as
    ``free -g``, docker and Slurm mean it), plain bytes; None when it is not a size.

    >>> parse_cli_size("449GiB"), parse_cli_size("480G") == 480 * GIB, parse_cli_size("480GB")
    (482110078976, True, 480000000000)
    >>> parse_cli_size("97887MiB"), parse_cli_size("1024"), parse_cli_size("lots")
    (102641958912, 1024, None)
    """
    m = _CLI_SIZE_RE.match(text)
    if not m:
        return None
    num, prefix, binary, b = float(m.group(1)), m.group(2).lower(), m.group(3), m.group(4)
    if not prefix:
        return None if binary else int(round(num))
    decimal = bool(b) and not binary  # "GB" is 10^9; "G", "Gi", "GiB" are 2^30
    return int(round(num * (1000 if decimal else 1024) ** _POWERS[prefix]))


_K8S_QUANTITY_RE = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?\s*$")
_K8S_SUFFIX = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
               "Ki": KIB, "Mi": MIB, "Gi": GIB, "Ti": TIB, "Pi": 1 << 50, "Ei": 1 << 60}


def k8s_quantity(text: str) -> int | None:
    """A Kubernetes resource quantity in bytes: ``400Gi`` is 2^30-based, ``400G`` 10^9-based.

    >>> k8s_quantity("400Gi"), k8s_quantity("400G"), k8s_quantity("'512Mi'"), k8s_quantity("4e9")
    (429496729600, 400000000000, 536870912, 4000000000)
    >>> k8s_quantity("400g") is None
    True
    """
    m = _K8S_QUANTITY_RE.match(text.strip().strip("\"'"))
    if not m:
        return None
    return int(round(float(m.group(1)) * _K8S_SUFFIX[m.group(2)]))


_SLURM_MEM_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)[Bb]?\s*$", re.IGNORECASE)


def slurm_mem(text: str) -> int | None:
    """``#SBATCH --mem`` in bytes: megabytes by default, ``K M G T`` suffixes, all 1024-based; ``0`` means
    all of the node's memory (None: no limit to apply).

    >>> slurm_mem("400G"), slurm_mem("512000"), slurm_mem("0")
    (429496729600, 536870912000, None)
    """
    m = _SLURM_MEM_RE.match(text)
    if not m:
        return None
    unit = {"K": KIB, "M": MIB, "G": GIB, "T": TIB}[m.group(2).upper() or "M"]
    return int(round(float(m.group(1)) * unit)) or None

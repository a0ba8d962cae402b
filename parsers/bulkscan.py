"""ctypes binding of ``parsers/_native/bulkscan.c``, the one-pass reader of SGLang's bulk lines.

The shared library is compiled when the package is installed (``hatch_build.py``); where there is no
C compiler it is absent and :func:`available` is False, and ``parsers.sglang_fast`` falls back to its
polars path, which gives the same rows more slowly. ``FORENSICS_NATIVE=0`` turns it off (tests use
that to hold both paths to the same output). The library's buffers come back as Arrow arrays without
a copy: pyarrow is here only for that. The same library serves the timeline's sampler
(:func:`json_int`, :func:`sample`) and redaction's row filter (:func:`may_hold_secret`).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa

from parsers.schema import FIELDS, FIELDS_OF

#: The C side's FX_ABI: a library built from another revision of the source is not used.
ABI = 4
HERE = Path(__file__).resolve().parent
LIBRARY = HERE / "_native" / "bulkscan.so"
SOURCE = HERE / "_native" / "bulkscan.c"
#: Why the library is not used, when it is not (``forensics --version`` says it).
why_not: str | None = None

KIND_NAMES = {1: "decode_batch", 2: "prefill_batch", 3: "http_access"}

_P = ctypes.c_void_p
_I = ctypes.c_int64


class _Scan(ctypes.Structure):
    _fields_ = [
        ("buf", _P), ("n", _I), ("renames", _P), ("cap_rows", _I), ("cap_attrs", _I),
        ("row_line", _P), ("row_kind", _P), ("row_ts", _P), ("row_tokens", _P), ("row_count", _P),
        ("row_code", _P), ("row_ratio", _P),
        ("bm_tokens", _P), ("bm_count", _P), ("bm_code", _P), ("bm_ratio", _P), ("bm_attrs", _P),
        ("bm_labels", _P),
        ("text_view", _P), ("attrs_off", _P), ("attrs", _P), ("label_view", _P),
        ("other_line", _P), ("other_start", _P), ("other_end", _P),
        ("n_rows", _I), ("n_other", _I), ("n_lines", _I), ("line0", _I),
        ("field_spec", _P), ("n_fields", _I), ("field_vals", _P), ("field_valid", _P), ("bm_fields", _P),
    ]


#: The typed fields the scanner fills (parsers.schema.FIELDS of the batch and access kinds) and their
#: letters for the C side; every other field is a column of nulls here.
_ARROW = {pl.Int64: pa.int64(), pl.Float64: pa.float64(), pl.Boolean: pa.bool_(), pl.Utf8: pa.string()}
_LETTER = {pl.Int64: "i", pl.Float64: "f", pl.Boolean: "b", pl.Utf8: "s"}
FILLED = tuple(k for k in FIELDS if k in FIELDS_OF["decode_batch"] | FIELDS_OF["prefill_batch"])
_SPEC = ctypes.create_string_buffer(b"".join(k.encode() + b"\0" + _LETTER[FIELDS[k]].encode() + b"\0"
                                             for k in FIELDS) + b"\0")
FIELDS_TYPE = pa.struct([(k, _ARROW[v]) for k, v in FIELDS.items()])

_lib: ctypes.CDLL | None = None
_tried = False
_renames: ctypes.Array | None = None


def _load() -> ctypes.CDLL | None:
    global _lib, _tried, why_not
    if _tried:
        return _lib
    _tried = True
    if not LIBRARY.is_file():
        why_not = f"{LIBRARY} not built (no C compiler at install?)"
        return None
    from parsers.sglang import KEY_RENAMES

    set_renames(KEY_RENAMES)
    try:
        lib = ctypes.CDLL(str(LIBRARY))
        lib.fx_abi.restype = ctypes.c_int
        lib.fx_source.restype = ctypes.c_char_p
        built_from = lib.fx_source().decode()
        lib.fx_scan.argtypes = [ctypes.POINTER(_Scan)]
        lib.fx_scan.restype = ctypes.c_int
        lib.fx_json_int.argtypes = [_P, _P, _P, _I, _I, ctypes.c_char_p, _I, _P, _P]
        lib.fx_json_int.restype = None
        lib.fx_sample.argtypes = [_I, _P, _I, _P, _I, _I, _P, _P, _P, _P, _P, _P, _P, _P, _P,
                                  ctypes.c_double, _I, ctypes.POINTER(_I), _P, _P]
        lib.fx_sample.restype = ctypes.c_int
        lib.fx_may_secret.argtypes = [_P, _P, _P, _I, _I, _P]
        lib.fx_may_secret.restype = None
    except (OSError, AttributeError) as e:  # a foreign or broken build: the polars path reads the same
        why_not = f"{LIBRARY} unusable ({e})"
        return None
    if lib.fx_abi() != ABI:
        why_not = f"{LIBRARY} is of another ABI"
        return None
    if SOURCE.is_file() and hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16] != built_from:
        why_not = f"{LIBRARY} is stale: rebuild it with `python hatch_build.py`"
        return None
    _lib = lib
    return lib


def available() -> bool:
    """Whether the compiled scanner is there and enabled."""
    if os.environ.get("FORENSICS_NATIVE", "1") == "0":
        return False
    return _load() is not None


def set_renames(renames: dict[str, str]) -> None:
    """The raw batch keys whose snake name is not the generic one (parsers.sglang.KEY_RENAMES)."""
    global _renames
    blob = b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in renames.items()) + b"\0"
    _renames = ctypes.create_string_buffer(blob, len(blob))


@dataclass
class Scanned:
    """What one chunk holds: the bulk rows as Arrow arrays, and the spans of every other line."""

    n_lines: int
    rows: dict[str, pa.Array | pa.ChunkedArray]
    other_line: list[int]
    other_spans: list[tuple[int, int]]


def table(rows: dict[str, pa.Array | pa.ChunkedArray]) -> pa.Table:
    return pa.table(rows)


def _addr(b: bytearray) -> int:
    return ctypes.addressof((ctypes.c_char * len(b)).from_buffer(b)) if b else 0


#: Chunks from this size on are read in two halves on two threads (ctypes lets go of the GIL).
SPLIT_BYTES = 1 << 20
_pool: ThreadPoolExecutor | None = None


def scan(raw: bytes | bytearray) -> Scanned:
    """Read one chunk (whole lines). Raises RuntimeError if the library is not available."""
    lib = _load()
    if lib is None:
        raise RuntimeError("native scanner not available")
    n = len(raw)
    mid = raw.rfind(b"\n", 0, n // 2) + 1 if n >= SPLIT_BYTES else 0
    if mid <= 0:
        return _scan_part(lib, raw, 0, n, 0)
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(1, thread_name_prefix="bulkscan")
    line0 = raw.count(b"\n", 0, mid)
    second = _pool.submit(_scan_part, lib, raw, mid, n, line0)
    first = _scan_part(lib, raw, 0, mid, 0, line0)  # the first half's line ends are counted already
    rest = second.result()
    return Scanned(n_lines=first.n_lines + rest.n_lines,
                   rows={k: pa.chunked_array([first.rows[k], rest.rows[k]]) for k in first.rows},
                   other_line=first.other_line + rest.other_line, other_spans=first.other_spans + rest.other_spans)


def _scan_part(lib: ctypes.CDLL, raw: bytes | bytearray, start: int, end: int, line0: int,
               line_ends: int | None = None) -> Scanned:
    """Read raw[start:end] (whole lines); its lines are numbered from line0, its spans are in raw.
    ``line_ends``: how many ``\\n`` it holds, when the caller counted them."""
    n = end - start
    cap = (raw.count(b"\n", start, end) if line_ends is None else line_ends) + 2
    bm = cap // 8 + 1
    cap_attrs = n + 4096  # a batch line's JSON is about as long as the line; retried bigger if not
    whole = pa.py_buffer(raw)  # bytes or bytearray, no copy; its address is where the C side reads
    base = whole.address
    while True:
        sizes = {k: cap * 8 for k in ("row_line", "row_ts", "row_tokens", "row_count", "row_code", "row_ratio",
                                      "other_line", "other_start", "other_end")}
        sizes.update(row_kind=cap, attrs_off=(cap + 1) * 8, text_view=cap * 16, label_view=cap * 16,
                     attrs=cap_attrs)
        sizes.update({k: bm for k in ("bm_tokens", "bm_count", "bm_code", "bm_ratio", "bm_attrs", "bm_labels",
                                      "bm_fields")})
        sizes.update({f"v:{k}": cap * (16 if FIELDS[k] == pl.Utf8 else 8) for k in FILLED})
        sizes.update({f"b:{k}": bm for k in FILLED})
        a = _Arena(sizes)
        val_ptrs = (ctypes.c_void_p * len(FIELDS))(*[a.addr(f"v:{k}") if k in FILLED else None for k in FIELDS])
        valid_ptrs = (ctypes.c_void_p * len(FIELDS))(*[a.addr(f"b:{k}") if k in FILLED else None for k in FIELDS])
        st = _Scan(buf=base + start, n=n, renames=ctypes.addressof(_renames) if _renames else None,
                   cap_rows=cap, cap_attrs=cap_attrs, line0=line0, field_spec=ctypes.addressof(_SPEC),
                   n_fields=len(FIELDS), field_vals=ctypes.addressof(val_ptrs),
                   field_valid=ctypes.addressof(valid_ptrs),
                   **{k: a.addr(k) for k in sizes if ":" not in k})
        rc = lib.fx_scan(ctypes.byref(st))
        if rc == 0:
            break
        if rc != -1:
            raise RuntimeError(f"native scanner failed ({rc})")
        cap_attrs *= 4
    m = st.n_rows
    buf = a.buf

    def num(kind: pa.DataType, vals: str, valid: str | None) -> pa.Array:
        return pa.Array.from_buffers(kind, m, [buf(valid) if valid else None, buf(vals)])

    chunk = whole.slice(start, n)

    def views(vals: str, valid: str | None) -> pa.Array:  # zero-copy: the views point into the chunk
        return pa.Array.from_buffers(pa.string_view(), m, [buf(valid) if valid else None, buf(vals), chunk])

    rows = {
        "i": num(pa.int64(), "row_line", None),
        "k": pa.Array.from_buffers(pa.uint8(), m, [None, buf("row_kind")]),
        "ts": num(pa.int64(), "row_ts", None),
        "tokens": num(pa.int64(), "row_tokens", "bm_tokens"),
        "ratio": num(pa.float64(), "row_ratio", "bm_ratio"),
        "count": num(pa.int64(), "row_count", "bm_count"),
        "code": num(pa.int64(), "row_code", "bm_code"),
        "l": views("text_view", None),
        "attrs": pa.Array.from_buffers(pa.large_string(), m, [buf("bm_attrs"), buf("attrs_off"), buf("attrs")]),
        "labels": views("label_view", "bm_labels"),
        "fields": _fields(m, a, buf("bm_fields"), chunk),
    }
    k = st.n_other
    lines = a.view("other_line").cast("q")[:k].tolist()
    starts = a.view("other_start").cast("q")[:k].tolist()
    ends = a.view("other_end").cast("q")[:k].tolist()
    return Scanned(n_lines=st.n_lines, rows=rows, other_line=lines,
                   other_spans=[(s + start, e + start) for s, e in zip(starts, ends, strict=True)])


class _Arena:
    """The scanner's buffers as slices of one zeroed bytearray: one allocation instead of ~40 (each big one
    its own mmap, page faults and all: measured 4 ms a chunk against 0.3 ms)."""

    ALIGN = 64

    def __init__(self, sizes: dict[str, int]) -> None:
        self.at: dict[str, tuple[int, int]] = {}
        off = 0
        for k, size in sizes.items():
            self.at[k] = (off, size)
            off += (size + self.ALIGN - 1) // self.ALIGN * self.ALIGN
        self.raw = bytearray(off + self.ALIGN)
        self.base = _addr(self.raw)
        skew = (-self.base) % self.ALIGN  # buffers 64-byte aligned, as Arrow likes them
        self.whole = pa.py_buffer(self.raw)
        self.skew = skew

    def addr(self, k: str) -> int:
        return self.base + self.skew + self.at[k][0]

    def buf(self, k: str) -> pa.Buffer:
        off, size = self.at[k]
        return self.whole.slice(self.skew + off, size)

    def view(self, k: str) -> memoryview:
        off, size = self.at[k]
        return memoryview(self.raw)[self.skew + off:self.skew + off + size]


def _fields(m: int, a: _Arena, bm: pa.Buffer, chunk: pa.Buffer) -> pa.StructArray:
    """The ``fields`` struct of m rows from the scanner's buffers (strings copied out of the chunk)."""
    children = []
    for k, dt in FIELDS.items():
        if k not in FILLED:
            children.append(pa.nulls(m, _ARROW[dt]))
            continue
        vb, data = a.buf(f"b:{k}"), a.buf(f"v:{k}")
        if dt == pl.Utf8:  # copied out of the chunk (a few short strings): a view would hold the whole chunk
            children.append(pa.Array.from_buffers(pa.string_view(), m, [vb, data, chunk]).cast(pa.large_string()))
        elif dt == pl.Boolean:
            children.append(pa.Array.from_buffers(pa.int64(), m, [vb, data]).cast(pa.bool_()))
        else:
            children.append(pa.Array.from_buffers(_ARROW[dt], m, [vb, data]))
    kind = pa.struct([(k, c.type) for k, c in zip(FIELDS, children, strict=True)])
    return pa.Array.from_buffers(kind, m, [bm], children=children)


def json_int(arr: pa.Array, key: str) -> pa.Array:
    """Per string of ``arr`` (JSON objects), the integer value of ``key``: what
    ``re.search(r'"KEY": (-?[0-9]{1,15})[,}]')`` finds, else null. Raises RuntimeError if the library is
    not available."""
    lib = _load()
    if lib is None:
        raise RuntimeError("native scanner not available")
    if arr.type != pa.large_string():
        arr = arr.cast(pa.large_string())
    n = len(arr)
    out, valid = bytearray(8 * n + 8), bytearray(n // 8 + 1)
    bm, offs, data = arr.buffers()
    needle = f'"{key}": '.encode()
    lib.fx_json_int(offs.address, data.address if data is not None else None,
                    bm.address if bm is not None else None, arr.offset, n, needle, len(needle), _addr(out),
                    _addr(valid))
    return pa.Array.from_buffers(pa.int64(), n, [pa.py_buffer(valid), pa.py_buffer(out)])


def may_hold_secret(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Per string of ``arr``, whether one of forensics.redact's row prefilters could match it (a uint8 0/1,
    0 for a null): fx_may_secret, a conservative superset of redact.JOINED_PREFILTER. Raises
    RuntimeError if the library is not available."""
    lib = _load()
    if lib is None:
        raise RuntimeError("native scanner not available")
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.type != pa.large_string():
        arr = arr.cast(pa.large_string())
    n = len(arr)
    out = bytearray(max(n, 1))
    bm, offs, data = arr.buffers()
    lib.fx_may_secret(offs.address, data.address if data is not None else None,
                      bm.address if bm is not None else None, arr.offset, n, _addr(out))
    return pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(out)])


def _values(arr: pa.Array, kind: pa.DataType) -> tuple[int, int | None, pa.Array]:
    """Addresses of a primitive array's values and validity bitmap (None: all valid), offset applied."""
    arr = arr.cast(kind)
    if arr.offset:  # slices carry an offset the C side does not take: start at zero
        arr = pa.concat_arrays([arr])
    bm, vals = arr.buffers()
    return vals.address, (bm.address if bm is not None else None), arr


def sample(key: pa.Array, nkeys: int, ord0: list[int], bucket: int, keep_all: int, ratio: pa.Array,
           tokens: pa.Array, count: pa.Array, queue: pa.Array, is_access: pa.Array, extreme_ratio: float,
           max_extreme: int, extreme: int) -> tuple[pa.Array, list[int], int]:
    """fx_sample (see bulkscan.c): the keep flag of each row, the rows of each key id, and the running
    count of extreme rows. Raises RuntimeError if the library is not available."""
    lib = _load()
    if lib is None:
        raise RuntimeError("native scanner not available")
    n = len(key)
    k_addr, _, k_arr = _values(key, pa.int64())
    r_addr, r_bm, r_arr = _values(ratio, pa.float64())
    t_addr, t_bm, t_arr = _values(tokens, pa.int64())
    c_addr, c_bm, c_arr = _values(count, pa.int64())
    q_addr, q_bm, q_arr = _values(queue, pa.int64())
    a_addr, _, a_arr = _values(is_access, pa.uint8())
    ord_buf = (ctypes.c_int64 * (nkeys + 1))(*ord0)
    counts = (ctypes.c_int64 * (nkeys + 1))()
    keep = bytearray(max(n, 1))
    running = ctypes.c_int64(extreme)
    rc = lib.fx_sample(n, k_addr, nkeys, ctypes.addressof(ord_buf), bucket, keep_all, r_addr, r_bm, t_addr, t_bm,
                       c_addr, c_bm, q_addr, q_bm, a_addr, extreme_ratio, max_extreme, ctypes.byref(running),
                       _addr(keep), ctypes.addressof(counts))
    del k_arr, r_arr, t_arr, c_arr, q_arr, a_arr  # kept alive until the call returned
    if rc != 0:
        raise RuntimeError(f"native sampler failed ({rc})")
    return pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(keep)]), list(counts), running.value

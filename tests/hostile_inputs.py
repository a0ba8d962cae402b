"""Hypothesis strategies for hostile inputs to the input layer (issue 25's classes, generated).

Each strategy draws one file as ``(name, bytes)``: tar archives whose headers lie (types, sizes,
names with control characters, ``..``, undecodable bytes, pax records and GNU long names of any
size, digit runs), zips whose central directory points entries at one stream or past the end,
compressed streams cut short or with a byte flipped, bundle manifests of any JSON shape, and log
lines in docker/CRI envelopes nested deep or holding lone surrogates. ``tests/test_fuzz_inputs.py``
runs them with a fixed seed; ``bench/fuzz_inputs.py`` runs them for longer.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import struct
import tarfile
import zipfile

import zstandard
from hypothesis import strategies as st

LOG = "[2026-03-02 11:20:00 TP0] Prefill batch. #new-seq: 1, #new-token: 64, token usage: 0.10\n"

def _pax_records(items: list[tuple[str, str]]) -> bytes:
    out = b""
    for k, v in items:
        rec = f" {k}={v}\n".encode("utf-8", "surrogatepass")
        n = len(rec) + len(str(len(rec)))
        n = len(rec) + len(str(n))
        out += str(n).encode() + rec
    return out


_NAME_PARTS = st.sampled_from(["a.log", "server.log", "..", ".", "", "x\x1b]0;t\x07", "\ud800", "r\udcff.log",
                               "manifest.json", "dir", "hf_" + "A" * 24, "[/]", "con", "a" * 300])
NAMES = st.lists(_NAME_PARTS, min_size=1, max_size=4).map("/".join)
_TYPES = st.sampled_from([tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE,
                          tarfile.FIFOTYPE, tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME,
                          tarfile.GNUTYPE_LONGLINK, tarfile.GNUTYPE_SPARSE, b"Z"])
_SIZES = st.one_of(st.integers(0, 2048), st.sampled_from([1 << 20, 4 << 30, 8 << 30 + 1, 8**11 - 1]))
_BODIES = st.one_of(st.binary(max_size=600), st.just(LOG.encode()),
                    st.integers(1, 4096).map(lambda n: b"1" * n),  # digit runs (pax parser backtracking)
                    st.lists(st.tuples(st.sampled_from(["path", "size", "mtime", "hdrcharset", "GNU.sparse.map"]),
                                       st.text(max_size=40)), max_size=4).map(_pax_records))


@st.composite
def tar_bytes(draw) -> bytes:
    out = b""
    for _ in range(draw(st.integers(0, 5))):
        ti = tarfile.TarInfo(draw(NAMES).encode("utf-8", "surrogatepass").decode("latin-1")[:100])
        ti.type = draw(_TYPES)
        body = draw(_BODIES)
        declared = draw(st.one_of(st.just(len(body)), _SIZES))
        ti.size = min(declared, 8**11 - 1)
        ti.linkname = draw(st.sampled_from(["", "../etc/passwd", "/etc", "a.log", "loop"]))
        try:
            out += ti.tobuf(format=tarfile.GNU_FORMAT, encoding="latin-1")
        except (ValueError, UnicodeError):
            continue
        out += body + bytes(-len(body) % 512)
    if draw(st.booleans()):
        out += bytes(1024)
    return out


@st.composite
def zip_bytes(draw) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for _ in range(draw(st.integers(0, 4))):
            name = draw(NAMES).encode("utf-8", "surrogatepass").decode("utf-8", "replace") or "x"
            zf.writestr(name, draw(_BODIES))
    data = buf.getvalue()
    if draw(st.booleans()) and b"PK\x01\x02" in data:
        # point extra central-directory entries at the first member's local header (overlap)
        cd = data.index(b"PK\x01\x02")
        end = data.rindex(b"PK\x05\x06")
        entry = data[cd:end]
        first = entry[:46 + struct.unpack("<H", entry[28:30])[0]]
        copies = draw(st.integers(1, 40))
        central = entry + first * copies
        count = struct.unpack("<H", data[end + 10:end + 12])[0] + copies
        data = data[:cd] + central + struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, count, count, len(central), cd, 0)
    return data


def compress(kind: str, data: bytes) -> bytes:
    if kind == "gzip":
        return gzip.compress(data, mtime=0)
    if kind == "bzip2":
        return bz2.compress(data)
    if kind == "xz":
        return lzma.compress(data)
    if kind == "zstd":
        return zstandard.ZstdCompressor().compress(data)
    return data


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
                     max_leaves=20)
_MANIFEST_KEYS = ["schema_version", "host", "tag", "utc_offset_s", "boot_time", "started_at", "ended_at",
                  "versions", "gaps", "artifacts", "timezone", "options", "tool"]


@st.composite
def manifest_bytes(draw) -> bytes:
    doc = {"schema_version": draw(_JSON), "artifacts": draw(st.one_of(_JSON, st.lists(
        st.one_of(_JSON, st.fixed_dictionaries({"path": st.one_of(st.just("logs/a.log"), _JSON)},
                                               optional={k: _JSON for k in ("format", "rc", "argv", "snapshot",
                                                                           "timed_out", "started")})), max_size=4)))}
    for k in draw(st.lists(st.sampled_from(_MANIFEST_KEYS), max_size=5)):
        doc[k] = draw(st.one_of(_JSON, st.just(1e300), st.just(["a"])))
    return json.dumps(doc, allow_nan=True).encode()


@st.composite
def envelope_text(draw) -> bytes:
    lines = []
    for _ in range(draw(st.integers(1, 6))):
        shape = draw(st.sampled_from(["docker", "deep", "surrogate", "cri", "plain", "json"]))
        if shape == "docker":
            lines.append(json.dumps({"log": draw(st.text(max_size=60)) + "\n", "stream": "stderr",
                                     "time": "2026-03-02T11:20:00.000000001Z"}))
        elif shape == "deep":
            n = draw(st.integers(50, 20_000))
            lines.append('{"log": ' + "[" * n + "]" * n + ', "stream": "stdout"}')
        elif shape == "surrogate":
            lines.append('{"log": "a\\ud800\\udfff' + LOG.strip() + '\\n", "stream": "stderr", "time": "x"}')
        elif shape == "cri":
            lines.append("2026-03-02T11:20:00.000000001Z stderr " + draw(st.sampled_from("FP")) + " " + LOG.strip())
        elif shape == "json":
            lines.append(json.dumps(draw(_JSON)))
        else:
            lines.append(LOG.strip())
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


@st.composite
def hostile_file(draw) -> tuple[str, bytes]:
    """One hostile input file: its name on disk and its bytes."""
    kind = draw(st.sampled_from(["tar", "zip", "manifest-bundle", "envelope"]))
    if kind == "tar":
        data, name = draw(tar_bytes()), "bundle.tar"
    elif kind == "zip":
        data, name = draw(zip_bytes()), "ticket.zip"
    elif kind == "manifest-bundle":
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            for member, body in (("b/manifest.json", draw(manifest_bytes())), ("b/logs/a.log", LOG.encode())):
                ti = tarfile.TarInfo(member)
                ti.size = len(body)
                tf.addfile(ti, io.BytesIO(body))
        data, name = buf.getvalue(), "bundle.tar"
    else:
        data, name = draw(envelope_text()), "container.log"
    wrap = draw(st.sampled_from(["none", "gzip", "bzip2", "xz", "zstd"]))
    data = compress(wrap, data)
    if wrap != "none":
        name += {"gzip": ".gz", "bzip2": ".bz2", "xz": ".xz", "zstd": ".zst"}[wrap]
    damage = draw(st.sampled_from(["none", "none", "cut", "flip"]))
    if damage == "cut" and data:
        data = data[:draw(st.integers(0, len(data) - 1))]
    elif damage == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
    return name, data


"""The safe pickle reader: plain data read back exactly, hostile streams inert or refused in one line."""

from __future__ import annotations

import collections
import contextlib
import os
import pickle
import random
import struct
import subprocess

import pytest

from parsers import safe_pickle
from parsers.safe_pickle import Obj, Ref, UnsafePickle, loads, to_plain


class _Evil:
    """Reduces to a callable with side effects: pickle.load would run it."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


class _EvilEx:
    """A __reduce_ex__ whose arguments are themselves hostile reductions."""

    def __init__(self, inner):
        self.inner = inner

    def __reduce_ex__(self, protocol):
        return exec, (self.inner,)


@pytest.mark.parametrize("protocol", range(0, pickle.HIGHEST_PROTOCOL + 1))
def test_plain_values_read_back_as_pickle_would(protocol):
    value = {"ints": [0, -1, 255, 65536, 2**70, -(2**70)], "float": 1.5, "s": "héllo", "b": b"\x00\xff",
             "t": (1, (2, 3), ()), "set": {1, 2}, "fs": frozenset({"a"}), "none": None, "flags": [True, False],
             "nested": {"k": [{"x": 1}]}, 3: "int key", "od": collections.OrderedDict(a=1)}
    got = loads(pickle.dumps(value, protocol=protocol))
    assert got == pickle.loads(pickle.dumps(value, protocol=protocol))


def test_shared_references_stay_shared():
    inner = [1, 2]
    got = loads(pickle.dumps({"a": inner, "b": inner}, protocol=4))
    assert got["a"] is got["b"]


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
@pytest.mark.parametrize("fn", [os.system, subprocess.Popen, eval, exec, getattr])
def test_reduce_to_a_callable_runs_nothing(tmp_path, protocol, fn):
    marker = tmp_path / "ran"
    args = (f"touch {marker}",) if fn in (os.system, subprocess.Popen) else (f"open({str(marker)!r}, 'w')",)
    if fn is getattr:
        args = ("os", "system")
    data = pickle.dumps(_Evil(fn, *args), protocol=protocol)
    got = loads(data)
    assert not marker.exists()
    assert isinstance(got, Obj)
    assert got.name.endswith(fn.__name__) and got.args == args


def test_nested_reduce_ex_is_inert(tmp_path):
    marker = tmp_path / "ran"
    evil = _EvilEx(_Evil(os.system, f"touch {marker}"))
    got = loads(pickle.dumps({"payload": [evil]}, protocol=4))
    assert not marker.exists()
    outer = got["payload"][0]
    assert outer.name == "builtins.exec"
    inner = outer.args[0]
    assert isinstance(inner, Obj) and inner.name.endswith("system")
    assert to_plain(got)["payload"][0]["__class__"] == "builtins.exec"


def test_a_class_instance_is_a_record_of_its_state():
    # an instance pickled by the default protocol-2 reduction: NEWOBJ + BUILD with the instance dict
    data = (b"\x80\x02csglang.srt.server_args\nServerArgs\nq\x00)\x81q\x01}q\x02(X\x07\x00\x00\x00tp_sizeq\x03K\x08"
            b"X\x0e\x00\x00\x00context_lengthq\x04NubX\x01\x00\x00\x00x.")
    with pytest.raises(UnsafePickle):  # two values left on the stack at STOP
        loads(data)
    data = (b"\x80\x02csglang.srt.server_args\nServerArgs\nq\x00)\x81q\x01}q\x02(X\x07\x00\x00\x00tp_sizeq\x03K\x08"
            b"X\x0e\x00\x00\x00context_lengthq\x04Nub.")
    got = loads(data)
    assert got.name == "sglang.srt.server_args.ServerArgs"
    assert got.get("tp_size") == 8 and got.get("context_length") is None


def test_a_global_alone_is_a_name_not_an_import():
    assert loads(b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x94\x8c\x06system\x94\x93\x94.") == Ref("os.system")


def test_truncated_streams_are_refused_in_one_line():
    data = pickle.dumps({"requests": [(i, "x" * i) for i in range(50)]}, protocol=4)
    for cut in range(0, len(data) - 1, 7):
        with pytest.raises(UnsafePickle) as e:
            loads(data[:cut])
        assert "\n" not in str(e.value)


def test_huge_memo_index_and_too_many_memo_entries(monkeypatch):
    # LONG_BINPUT at index 2^32-1 then LONG_BINGET of it: a dict, not a list of 4 G slots
    data = b"\x80\x04K\x07r\xff\xff\xff\xff0j\xff\xff\xff\xff."
    assert loads(data) == 7
    monkeypatch.setattr(safe_pickle, "MAX_MEMO", 10)
    many = b"\x80\x04" + b"".join(b"K\x01r" + struct.pack("<I", i) + b"0" for i in range(11)) + b"N."
    with pytest.raises(UnsafePickle, match="memo"):
        loads(many)


def test_memo_get_of_a_key_never_stored_is_refused():
    with pytest.raises(UnsafePickle, match="memo key"):
        loads(b"\x80\x04h\x05.")


def test_deep_nesting_is_refused_before_anything_walks_it():
    deep = b"\x80\x04" + b"]" * 5000 + b"a" * 4999 + b"."
    with pytest.raises(UnsafePickle, match="deep"):
        loads(deep)
    with pytest.raises(UnsafePickle):
        loads(b"\x80\x04" + b"(" * 100_000 + b".")


def test_oversized_input_is_refused(monkeypatch):
    monkeypatch.setattr(safe_pickle, "MAX_BYTES", 100)
    with pytest.raises(UnsafePickle, match="limit"):
        loads(pickle.dumps("x" * 200))


def test_shared_lists_do_not_unfold_exponentially():
    v: list = [0]
    for _ in range(60):
        v = [v, v]
    got = loads(pickle.dumps(v, protocol=4))
    plain = to_plain(got, limit=10_000)
    assert "…" in repr(plain)


def test_random_bytes_never_raise_anything_but_unsafe_pickle():
    rng = random.Random(27)
    for _ in range(3000):
        blob = b"\x80\x04" + rng.randbytes(rng.randint(0, 64))
        try:
            loads(blob)
        except UnsafePickle as e:
            assert "\n" not in str(e)


def test_mutations_of_a_real_dump_never_raise_anything_but_unsafe_pickle():
    data = bytearray(pickle.dumps({"entries": [{"seq": i, "sizes": [[3, 4]], "ok": True} for i in range(20)]}, 2))
    rng = random.Random(5)
    for _ in range(2000):
        b = bytearray(data)
        for _k in range(rng.randint(1, 4)):
            b[rng.randrange(2, len(b))] = rng.randrange(256)
        with contextlib.suppress(UnsafePickle):
            loads(bytes(b))

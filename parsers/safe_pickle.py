"""Read a pickle as data, executing nothing: the engines' crash artifacts come from a host that just failed.

SGLang's ``--crash-dump-folder`` dumps and PyTorch's NCCL flight-recorder dumps are pickles, and a
pickle is a program: ``pickle.load`` runs whatever callable its ``REDUCE`` names (``os.system``,
``builtins.exec``…). This module never imports, calls or looks up anything a stream names. It walks
the opcodes (``pickletools.genops``, which only decodes them) with a small stack machine of its own:

* plain values — ``None``, bools, ints, floats, str, bytes, list, tuple, dict, set, frozenset — are
  built as themselves;
* a class or callable the stream names (``GLOBAL``/``STACK_GLOBAL``) becomes a :class:`Ref` (its dotted
  name, nothing resolved), and calling it (``REDUCE``, ``NEWOBJ``, ``INST``/``OBJ``) an inert
  :class:`Obj` holding that name, the arguments and any state ``BUILD`` gave it. A handful of
  names whose result is a plain container (``collections.OrderedDict``, ``builtins.set``…) or bytes
  (``_codecs.encode(s, "latin1")``, protocols 0–2) become that value — built from the arguments here,
  by this code, not by calling the name;
* persistent ids (torch storages), the extension registry and out-of-band buffers are inert records too.

Bounds: the input's size (:data:`MAX_BYTES`), opcodes (at most one per input byte, so linear),
memo entries (:data:`MAX_MEMO`), stack depth (:data:`MAX_STACK`) and container nesting
(:data:`MAX_DEPTH`). A stream that ends before ``STOP``, or breaks a bound, raises
:class:`UnsafePickle` with one line that says why.

Reference: the opcode set is CPython's ``Lib/pickletools.py`` (protocols 0–5); the reader is
written from that table, not from ``pickle.py``'s ``Unpickler``.

>>> import pickle
>>> loads(pickle.dumps({"a": [1, 2.5, "x", None, True], "b": (b"z",)}))
{'a': [1, 2.5, 'x', None, True], 'b': (b'z',)}
>>> evil = b"cos\\nsystem\\n(S'echo pwned'\\ntR."
>>> loads(evil)
Obj('os.system', args=['echo pwned'])
>>> loads(b"\\x80\\x04K\\x01")
Traceback (most recent call last):
...
parsers.safe_pickle.UnsafePickle: pickle stream ends before its STOP opcode (truncated?)
"""

from __future__ import annotations

import io
import pickletools
from dataclasses import dataclass, field
from typing import Any

#: Largest pickle read (bytes). A crash dump holds five minutes of requests; more than this is refused.
MAX_BYTES = 256 << 20
#: Memo entries (PUT/MEMOIZE) kept; a stream that memoizes more is refused.
MAX_MEMO = 1_000_000
#: Values on the stack (plus marks) at once.
MAX_STACK = 1_000_000
#: Containers nested inside one another (a deeper stream is refused before anything walks it).
MAX_DEPTH = 200
#: Items that :func:`to_plain` visits before it stops (shared references are visited once per use).
MAX_PLAIN_ITEMS = 2_000_000


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def int64(v: Any) -> int | None:
    """``v`` when it is an int (not a bool) that fits the timeline's Int64 columns, else None.

    >>> int64(7), int64(True), int64(1 << 70), int64("7")
    (7, None, None, None)
    """
    return v if isinstance(v, int) and not isinstance(v, bool) and INT64_MIN <= v <= INT64_MAX else None


def short_text(v: Any, limit: int = 200) -> str:
    """A value read from a pickle as bounded text: a str cut to ``limit``, anything else a bounded sketch.

    >>> short_text("abc", 2), short_text([1, [2, 3]])
    ('ab', '[1, [2, 3]]')
    """
    if isinstance(v, str):
        return v[:limit]
    if v is None or isinstance(v, bool | float) or int64(v) is not None:
        return str(v)
    return repr(to_plain(v, limit=50, depth=4))[:limit]


class UnsafePickle(ValueError):
    """The stream is truncated, malformed, or breaks a bound; the message is one line."""


@dataclass(frozen=True)
class Ref:
    """A class or function a pickle names (``module.qualname``) — never imported."""

    name: str

    def __repr__(self) -> str:
        return f"Ref({self.name!r})"


@dataclass(eq=False)
class Obj:
    """What a pickle would have built by calling ``name``: the call's arguments and the state it set.

    ``state`` is what ``BUILD`` gave (usually the instance ``__dict__``); ``items`` / ``entries`` what
    ``APPEND(S)`` / ``SETITEM(S)`` added (a list or dict subclass). :meth:`get` reads a field the way
    a reader of a dataclass dump wants it: from the state, else from keyword arguments.
    """

    name: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    state: Any = None
    items: list = field(default_factory=list)
    entries: dict = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        st = self.state
        if isinstance(st, tuple) and len(st) == 2 and isinstance(st[1], dict):  # (dict_state, slot_state)
            if isinstance(st[0], dict) and key in st[0]:
                return st[0][key]
            st = st[1]
        if isinstance(st, dict) and key in st:
            return st[key]
        return self.kwargs.get(key, default)

    def fields(self) -> dict:
        """Every named field this object carries (keyword arguments, then its state)."""
        out = dict(self.kwargs)
        st = self.state
        if isinstance(st, tuple) and len(st) == 2:
            for part in st:
                if isinstance(part, dict):
                    out.update(part)
        elif isinstance(st, dict):
            out.update(st)
        return out

    def __repr__(self) -> str:
        # bounded: a hostile stream can share one list under itself many times
        parts = [repr(self.name)]
        if self.args:
            parts.append(f"args={to_plain(list(self.args), limit=200, depth=6)!r}")
        if self.kwargs:
            parts.append(f"kwargs={to_plain(self.kwargs, limit=200, depth=6)!r}")
        if self.state is not None:
            parts.append(f"state={to_plain(self.state, limit=200, depth=6)!r}")
        return f"Obj({', '.join(parts)})"


class _Mark:
    __slots__ = ()


_MARK = _Mark()

#: Names whose call builds a plain container from plain arguments; built here, by this module.
_CONTAINERS = {
    "builtins.set": set, "__builtin__.set": set, "builtins.frozenset": frozenset, "__builtin__.frozenset": frozenset,
    "builtins.list": list, "__builtin__.list": list, "builtins.tuple": tuple, "__builtin__.tuple": tuple,
    "builtins.dict": dict, "__builtin__.dict": dict, "collections.OrderedDict": dict,
    "builtins.bytearray": bytes, "__builtin__.bytearray": bytes,
}
#: ``collections.deque`` / ``defaultdict`` carry their items after construction (APPENDS / SETITEMS).
_FILLED = {"collections.deque": list, "collections.defaultdict": dict}

_GETS = {"GET", "BINGET", "LONG_BINGET"}
_PUTS = {"PUT", "BINPUT", "LONG_BINPUT"}
_SCALARS = {"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
            "STRING", "BINSTRING", "SHORT_BINSTRING", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE",
            "BINBYTES", "SHORT_BINBYTES", "BINBYTES8"}
_IGNORED = {"PROTO", "FRAME"}


def looks_like_pickle(head: bytes) -> bool:
    """A protocol 2–5 pickle's header (``\\x80`` + protocol byte), what every dump we read starts with.

    >>> looks_like_pickle(b"\\x80\\x04\\x95"), looks_like_pickle(b"[2026-11-30] ok")
    (True, False)
    """
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def loads(data: bytes) -> Any:
    """The value the pickle describes, as plain data and inert records; raises :class:`UnsafePickle`."""
    if len(data) > MAX_BYTES:
        raise UnsafePickle(f"pickle of {len(data):,} bytes is over the {MAX_BYTES:,}-byte limit")
    try:
        return _Machine().run(data)
    except UnsafePickle:
        raise
    except RecursionError:
        raise UnsafePickle("pickle nests too deeply") from None
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, MemoryError, UnicodeError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "exhausted before seeing STOP" in msg or "but only" in msg:
            raise UnsafePickle("pickle stream ends before its STOP opcode (truncated?)") from None
        raise UnsafePickle(f"malformed pickle: {msg[:200]}") from None


class _Machine:
    """The stack machine; one per stream."""

    def __init__(self) -> None:
        self.stack: list[Any] = []
        self.marks: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self.depth: dict[int, int] = {}  # id(container) → nesting depth, to refuse deep streams early
        self.keep: list[Any] = []  # containers whose ids are in ``depth`` stay alive while we run

    # -- helpers
    def push(self, v: Any) -> None:
        if len(self.stack) + len(self.marks) >= MAX_STACK:
            raise UnsafePickle(f"pickle stack over {MAX_STACK:,} values")
        self.stack.append(v)

    def pop(self) -> Any:
        if not self.stack:
            raise UnsafePickle("malformed pickle: stack underflow")
        return self.stack.pop()

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise UnsafePickle("malformed pickle: no MARK to pop to")
        items = self.stack
        self.stack = self.marks.pop()
        return items

    def nest(self, container: Any, members: Any) -> Any:
        """Record ``container``'s depth from its members; refuse a stream nested past MAX_DEPTH."""
        d = 0
        for m in members:
            if isinstance(m, list | tuple | dict | set | frozenset | Obj):
                d = max(d, self.depth.get(id(m), 0))
        d += 1
        if d > MAX_DEPTH:
            raise UnsafePickle(f"pickle nests containers more than {MAX_DEPTH} deep")
        old = self.depth.get(id(container), 0)
        if d > old:
            if id(container) not in self.depth:
                self.keep.append(container)
            self.depth[id(container)] = d
        return container

    def call(self, fn: Any, args: Any, kwargs: dict | None = None) -> Any:
        """What calling ``fn`` would give, built without calling anything."""
        args = args if isinstance(args, tuple) else (args,)
        name = fn.name if isinstance(fn, Ref) else f"<{type(fn).__name__}>"
        if name in _CONTAINERS and not kwargs and len(args) <= 1 and _plain_iterable(args):
            kind = _CONTAINERS[name]
            if not args:
                return self.nest(kind(), ())
            src = args[0]
            if kind is dict:
                if isinstance(src, dict):
                    return self.nest(dict(src), list(src.values()))
                if isinstance(src, list | tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in src):
                    return self.nest(dict(src), [v for _k, v in src])
            elif kind is bytes:
                if isinstance(src, bytes):
                    return src
            else:
                try:
                    return self.nest(kind(src), src)
                except TypeError:  # unhashable members of a set: keep it as a record
                    pass
        if (name == "_codecs.encode" and len(args) == 2 and isinstance(args[0], str)
                and args[1] in ("latin1", "latin-1")):  # how protocols 0-2 write bytes
            return args[0].encode("latin-1")
        if name in _FILLED and not kwargs:
            return self.nest(Obj(name, args), args)
        return self.nest(Obj(name, args, dict(kwargs or {})), (*args, *(kwargs or {}).values()))

    # -- the loop
    def run(self, data: bytes) -> Any:
        for op, arg, _pos in pickletools.genops(io.BytesIO(data)):
            name = op.name
            if name in _SCALARS:
                self.push(arg)
            elif name in _IGNORED:
                continue
            elif name == "STOP":
                if len(self.stack) != 1 or self.marks:
                    raise UnsafePickle("malformed pickle: STOP with a stack that is not one value")
                return self.stack[0]
            elif not self.step(name, arg):
                raise UnsafePickle(f"pickle opcode {name} is not supported")
        raise UnsafePickle("pickle stream ends before its STOP opcode (truncated?)")

    def step(self, name: str, arg: Any) -> bool:  # noqa: C901 — one branch per opcode family, as pickletools lists them
        if name == "NONE":
            self.push(None)
        elif name in ("NEWTRUE", "NEWFALSE"):
            self.push(name == "NEWTRUE")
        elif name == "MARK":
            if len(self.marks) >= MAX_DEPTH * 4:
                raise UnsafePickle("pickle nests MARKs too deeply")
            self.marks.append(self.stack)
            self.stack = []
        elif name == "POP":
            if self.stack:
                self.stack.pop()
            else:
                self.pop_mark()
        elif name == "POP_MARK":
            self.pop_mark()
        elif name == "DUP":
            v = self.pop()
            self.push(v)
            self.push(v)
        elif name in _PUTS or name == "MEMOIZE":
            if not self.stack:
                raise UnsafePickle("malformed pickle: memoize with an empty stack")
            idx = len(self.memo) if name == "MEMOIZE" else int(arg)
            if idx not in self.memo and len(self.memo) >= MAX_MEMO:
                raise UnsafePickle(f"pickle memo over {MAX_MEMO:,} entries")
            self.memo[idx] = self.stack[-1]
        elif name in _GETS:
            if int(arg) not in self.memo:
                raise UnsafePickle(f"malformed pickle: memo key {arg} was never stored")
            self.push(self.memo[int(arg)])
        elif name == "BYTEARRAY8":
            self.push(bytes(arg))
        elif name in ("EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET", "EMPTY_TUPLE"):
            self.push({"EMPTY_LIST": list, "EMPTY_DICT": dict, "EMPTY_SET": set, "EMPTY_TUPLE": tuple}[name]())
        elif name == "LIST":
            items = self.pop_mark()
            self.push(self.nest(list(items), items))
        elif name == "TUPLE":
            items = self.pop_mark()
            self.push(self.nest(tuple(items), items))
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1])
            if len(self.stack) < n:
                raise UnsafePickle("malformed pickle: stack underflow")
            items = self.stack[-n:]
            del self.stack[-n:]
            self.push(self.nest(tuple(items), items))
        elif name == "DICT":
            items = self.pop_mark()
            self.push(self.nest(_pairs_dict(items), items))
        elif name == "FROZENSET":
            items = self.pop_mark()
            self.push(self.nest(_hashable_set(items, frozenset), items))
        elif name in ("APPEND", "APPENDS"):
            items = [self.pop()] if name == "APPEND" else self.pop_mark()
            target = self.stack[-1] if self.stack else None
            if isinstance(target, list):
                target.extend(items)
            elif isinstance(target, Obj):
                target.items.extend(items)
            else:
                raise UnsafePickle("malformed pickle: APPEND to something that is not a list")
            self.nest(target, items)
        elif name in ("SETITEM", "SETITEMS"):
            if name == "SETITEM":
                v = self.pop()
                items = [self.pop(), v]
            else:
                items = self.pop_mark()
            target = self.stack[-1] if self.stack else None
            pairs = _pairs_dict(items)
            if isinstance(target, dict):
                target.update(pairs)
            elif isinstance(target, Obj):
                target.entries.update(pairs)
            else:
                raise UnsafePickle("malformed pickle: SETITEM on something that is not a dict")
            self.nest(target, list(pairs.values()))
        elif name == "ADDITEMS":
            items = self.pop_mark()
            target = self.stack[-1] if self.stack else None
            if isinstance(target, set):
                target.update(_hashable_set(items, set))
            elif isinstance(target, Obj):
                target.items.extend(items)
            else:
                raise UnsafePickle("malformed pickle: ADDITEMS to something that is not a set")
        elif name == "GLOBAL":
            module, _sp, qual = str(arg).partition(" ")
            self.push(Ref(f"{module}.{qual}"))
        elif name == "STACK_GLOBAL":
            qual, module = self.pop(), self.pop()
            if not (isinstance(qual, str) and isinstance(module, str)):
                raise UnsafePickle("malformed pickle: STACK_GLOBAL of something that is not a name")
            self.push(Ref(f"{module}.{qual}"))
        elif name == "REDUCE":
            args, fn = self.pop(), self.pop()
            self.push(self.call(fn, args))
        elif name == "NEWOBJ":
            args, cls = self.pop(), self.pop()
            self.push(self.call(cls, args))
        elif name == "NEWOBJ_EX":
            kwargs, args, cls = self.pop(), self.pop(), self.pop()
            self.push(self.call(cls, args, kwargs if isinstance(kwargs, dict) else None))
        elif name == "INST":
            module, _sp, qual = str(arg).partition(" ")
            self.push(self.call(Ref(f"{module}.{qual}"), tuple(self.pop_mark())))
        elif name == "OBJ":
            items = self.pop_mark()
            if not items:
                raise UnsafePickle("malformed pickle: OBJ without a class")
            self.push(self.call(items[0], tuple(items[1:])))
        elif name == "BUILD":
            state = self.pop()
            target = self.stack[-1] if self.stack else None
            if isinstance(target, Obj):
                target.state = state
                self.nest(target, (state,))
            elif isinstance(target, dict) and isinstance(state, dict):  # a dict subclass built as a plain dict
                target.update(state)
            else:
                self.stack[-1:] = [self.nest(Obj("<built>", (target,), state=state), (target, state))]
        elif name in ("PERSID", "BINPERSID"):
            pid = arg if name == "PERSID" else self.pop()
            self.push(Obj("<persistent>", (pid,)))
        elif name in ("EXT1", "EXT2", "EXT4"):
            self.push(Ref(f"<extension {int(arg)}>"))
        elif name in ("NEXT_BUFFER", "READONLY_BUFFER"):
            if name == "NEXT_BUFFER":
                self.push(Obj("<out-of-band buffer>"))
        else:
            return False
        return True


def _pairs_dict(items: list) -> dict:
    if len(items) % 2:
        raise UnsafePickle("malformed pickle: a dict with an odd number of keys and values")
    out = {}
    for i in range(0, len(items), 2):
        k = items[i]
        try:
            out[k] = items[i + 1]
        except TypeError:  # an unhashable key (an Obj is hashable; a list is not): a label, never its repr
            out[f"<unhashable {type(k).__name__} #{i // 2}>"] = items[i + 1]
    return out


def _hashable_set(items: list, kind: type) -> Any:
    try:
        return kind(items)
    except TypeError:
        return kind(x if isinstance(x, str | int | float | bool | bytes | type(None)) else f"<{type(x).__name__} #{i}>"
                    for i, x in enumerate(items))


def _plain_iterable(args: tuple) -> bool:
    return not args or isinstance(args[0], list | tuple | dict | set | frozenset | bytes)


def filled(value: Any) -> Any:
    """A deque / defaultdict record as the plain list / dict it holds; anything else unchanged.

    >>> import collections, pickle
    >>> filled(loads(pickle.dumps(collections.deque([1, 2]))))
    [1, 2]
    """
    if isinstance(value, Obj) and value.name in _FILLED:
        if _FILLED[value.name] is list:
            first = value.args[0] if value.args and isinstance(value.args[0], list | tuple) else []
            return [*first, *value.items]
        return dict(value.entries)
    return value


def to_plain(value: Any, *, limit: int = MAX_PLAIN_ITEMS, depth: int = MAX_DEPTH) -> Any:
    """A JSON-ready copy: records as ``{"__class__": name, ...fields}``, bytes as a length, sets as lists.

    Visits at most ``limit`` items (a stream that shares one list under itself many times would
    otherwise unfold exponentially); past the limit, or deeper than ``depth``, values read ``"…"``.

    >>> to_plain(Obj("m.C", kwargs={"x": 1}, state={"y": b"ab"}))
    {'__class__': 'm.C', 'x': 1, 'y': '<2 bytes>'}
    """
    budget = [limit]

    def walk(v: Any, d: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0 or d > depth:
            return "…"
        if isinstance(v, int) and not isinstance(v, bool) and not INT64_MIN <= v <= INT64_MAX:
            return f"<integer of {v.bit_length()} bits>"  # past int64: no column or JSON writer takes it
        if v is None or isinstance(v, bool | int | float | str):
            return v
        if isinstance(v, bytes):
            return f"<{len(v)} bytes>"
        if isinstance(v, dict):
            return {str(k) if not isinstance(k, str) else k: walk(x, d + 1) for k, x in v.items()}
        if isinstance(v, list | tuple | set | frozenset):
            return [walk(x, d + 1) for x in v]
        if isinstance(v, Ref):
            return {"__ref__": v.name}
        if isinstance(v, Obj):
            f = filled(v)
            if f is not v:
                return walk(f, d)
            out: dict[str, Any] = {"__class__": v.name}
            if v.args:
                out["__args__"] = walk(list(v.args), d + 1)
            for k, x in v.fields().items():
                out[str(k)] = walk(x, d + 1)
            if v.items:
                out["__items__"] = walk(v.items, d + 1)
            if v.entries:
                out["__entries__"] = walk(v.entries, d + 1)
            return out
        return repr(v)[:200]

    return walk(value, 0)


_STR_OPS = {"BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING", "SHORT_BINSTRING"}


def rewrite_strings(data: bytes, fn) -> bytes:
    """The same pickle with every string value passed through ``fn`` (str → str), re-encoded with its new
    length; nothing else changes but the frames, which are dropped (framing is optional to a reader).

    For redaction at collect time: a text substitution over the raw bytes would break the length
    prefixes. Raises :class:`UnsafePickle` on a stream this module cannot read.

    >>> import pickle
    >>> pickle.loads(rewrite_strings(pickle.dumps({"key": "sk-secret", "n": 1}), lambda s: s.replace("secret", "X")))
    {'key': 'sk-X', 'n': 1}
    """
    if len(data) > MAX_BYTES:
        raise UnsafePickle(f"pickle of {len(data):,} bytes is over the {MAX_BYTES:,}-byte limit")
    out = bytearray()
    ops = []
    try:
        ops = [(op.name, arg, pos) for op, arg, pos in pickletools.genops(io.BytesIO(data))]
    except ValueError as e:
        raise UnsafePickle(f"malformed pickle: {str(e).splitlines()[0][:200] if str(e) else 'unreadable'}") from None
    for i, (name, arg, pos) in enumerate(ops):
        end = ops[i + 1][2] if i + 1 < len(ops) else pos + 1
        if name == "FRAME":
            continue
        if name in _STR_OPS:
            text = arg if isinstance(arg, str) else bytes(arg).decode("latin-1")
            raw = str(fn(text)).encode("utf-8", "surrogatepass")
            out += b"X" + len(raw).to_bytes(4, "little") + raw  # BINUNICODE: under MAX_BYTES, 4 bytes suffice
        else:
            out += data[pos:end]
    return bytes(out)

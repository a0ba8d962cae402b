"""``free`` (procps, procps-ng, busybox/toybox) tables → ``host_memory`` and ``host_swap`` events.

Sources: reference/system_formats.md §1.1 and free(1) (procps, procps-ng; ``-b/-k/-m/-g/-h`` units, ``--si``,
``-w``, ``-l``, ``-t``; the old ``buffers  cached`` and ``-/+ buffers/cache`` layouts), bash(1) for the prompt
a paste keeps.

Every layout procps has printed, recognised by shape rather than by English words::

                   total        used        free      shared  buff/cache   available
    Mem:             449         318         130           0           0         130
    Swap:              0           0           0

* new (3.3.10+): ``total used free shared buff/cache available``; ``-w`` splits buff/cache into
  ``buffers cache`` (7 values); optional rows ``Low:``/``High:`` (``-l``, between Mem and Swap),
  ``Total:`` (``-t``, after Swap) and ``Comm:`` (``-v``, last);
* legacy (≤3.3.9): ``total used free shared buffers cached`` plus ``-/+ buffers/cache: used free``;
* toybox/busybox: 5 values (no ``cached``) with the ``-/+`` row; ``-L`` (4.0.4) one-line form
  ``SwapUse … CachUse … MemUse … MemFree …``; pastes with runs of spaces collapsed, or with the
  whole table flattened onto one line (``total used … Mem: 449 3 444 0 0 445 Swap: 0 0 0``).

Labels may be translated (``Speicher:``, ``内存：``, ``스  왑:``): the first row with 5–7 values is
memory, the 3-value rows after it are matched to Low/High/Swap/Total/Comm by position, by the
``Total = Mem + Swap`` identity and by known labels. A missing ``Swap:`` row means the text was cut.

Units: the ``command`` (or a ``$ free -g`` line inside the text) decides: no flag = KiB, ``-b``
bytes, ``-k/-m/-g/--tebi/--pebi`` powers of 1024, ``--kilo/--mega/--giga/--tera/--peta`` or
``--si`` powers of 1000, ``-h`` a suffix per value (``Gi`` binary; ``G`` binary in procps 3.3.x,
decimal with ``--si``; ``8,6Mi`` decimal commas). ``-g``/``-m``/``-k`` truncate and ``-h`` prints
integers truncated and one-decimal values rounded, so every column holds the **lower bound** in
bytes and ``attrs`` holds ``<col>_max``, the exclusive upper bound. Without a command, plain numbers
are read in the one unit that makes ``total`` a plausible host (1 GiB – 16 TiB), KiB first; the
result says so in ``notes`` and ``attrs.unit_inferred``.

>>> text = ("               total        used        free      shared  buff/cache   available\\n"
...         "Mem:             449         318         130           0           0         130\\n")
>>> r = parse(text, command="free -g")
>>> r.events.select("kind", "total_bytes", "used_bytes", "free_bytes", "avail_bytes").row(0)
('host_memory', 482110078976, 341449900032, 139586437120, 139586437120)
>>> import json; json.loads(r.events["attrs"][0])["used_bytes_max"] == 319 * 2**30
True
>>> r.notes[0]
'free: no Swap row: the text was cut or not printed by procps'
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field
from itertools import product
from typing import Any

import regex as re

from .schema import MAX_UNRECOGNIZED_EXAMPLES, NotThisFormat, ParseResult

FORMAT = "free"

# free(1) (procps-ng: ``-h`` suffixes B Ki Mi Gi Ti Pi, ``--si``; ``--line``: SwapUse CachUse MemUse MemFree,
# 3.3.17+; the header of each layout, reference/system_formats.md §1.1); bash(1) for the prompt
_NUM_RE = re.compile(r"^(?P<sign>-?)(?P<num>\d+(?:[.,]\d+)?)(?P<suf>B|[KMGTPE]i?)?$")
_COLON_RE = re.compile(r"[:：]")
_PROMPT_FREE_RE = re.compile(
    r"^\s*(?:\([^()\s]{1,40}\)\s*)?(?:\[?[\w.-]+@[\w.-]+(?::\S*|\s[^\]]*\])?\s*)?[$#%]\s+(?P<cmd>.*\bfree\b.*)$")
_LINE_FORM_RE = re.compile(
    r"^\s*SwapUse\s+(?P<swap_used>\S+)\s+CachUse\s+(?P<cache>\S+)\s+MemUse\s+(?P<used>\S+)"
    r"\s+MemFree\s+(?P<free>\S+)\s*$")
_HDR_NEW_RE = re.compile(r"^\s*total\s+used\s+free\s+shared\s+(?:buff/cache|buffers\s+cache)\s+available\s*$")
_HDR_OLD_RE = re.compile(r"^\s*total\s+used\s+free\s+shared\s+buffers(?:\s+cached)?\s*$")
_CMD_STARTERS = {";", "&&", "||", "|", "&", "sudo", "time", "watch", "nice", "command", "exec", "env", "do", "then"}
# bash(1) (``VAR=value`` before a command); the row labels of reference/system_formats.md §1.1
_ENV_ASSIGN_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_BAD_LABEL_RE = re.compile(r"[\d:=\[\]();,<>{}|$#@]")  # "lowmem_reserve[]:", "free:40346 free_pcp:"…
_MAX_LINE = 4096  # free rows are short; longer lines are never ours (and stay cheap to reject)
_MAX_BYTES = 1 << 62  # keeps every figure inside int64

#: Row labels seen in real output (C and the sampled locales); only a hint, position decides.
_ROLE_LABELS = {
    "low": {"low"},
    "high": {"high"},
    "swap": {"swap", "échange", "inter", "wymiana", "交换", "своп.", "스 왑"},
    "total": {"total", "gesamt", "razem", "总量", "загалом", "총 계"},
    "comm": {"comm"},
}

_POW_NAMES = {1024: ["B", "KiB", "MiB", "GiB", "TiB", "PiB"], 1000: ["B", "kB", "MB", "GB", "TB", "PB"]}


# ---------------------------------------------------------------------------------------------
# Units


@dataclass(frozen=True)
class UnitSpec:
    """How plain numbers and suffixes of one table are to be read."""

    factor: int = 1024  # bytes per printed unit for plain numbers
    human: bool = False  # -h: a suffix per value
    si: bool = False  # --si / --kilo…: powers of 1000
    name: str = "KiB"
    source: str = "default"  # command | default | inferred | suffix


def unit_from_command(command: str | None) -> list[UnitSpec]:
    """The unit of each ``free`` invocation in a command line (``free; free -g`` → two).

    >>> [u.name for u in unit_from_command("ssh h 'free -g; echo ---; free --si -m'")]
    ['GiB', 'MB']
    >>> unit_from_command("LC_ALL=C free -b -w")[0].factor
    1
    """
    if not command:
        return []
    try:
        lex = shlex.shlex(command, posix=True, punctuation_chars=";&|")
        lex.whitespace_split = True
        tokens = list(lex)
    except ValueError:
        tokens = command.replace(";", " ; ").replace("'", " ").replace('"', " ").split()
    specs: list[UnitSpec] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        prev = tokens[i - 1] if i else ";"
        in_cmd_position = prev in _CMD_STARTERS or _ENV_ASSIGN_RE.match(prev) is not None
        if tok.rsplit("/", 1)[-1] == "free" and in_cmd_position:
            flags: list[str] = []
            j = i + 1
            while j < len(tokens) and tokens[j] not in {";", "&&", "||", "|", "&"}:
                # quoted remote commands ("ssh h 'free -g; …'") come through as one token
                if " " in tokens[j] or ";" in tokens[j]:
                    specs.extend(unit_from_command(tokens[j]))
                    break
                flags.append(tokens[j])
                j += 1
            specs.append(_spec_from_flags(flags))
            i = j
        elif " " in tok and "free" in tok:
            specs.extend(unit_from_command(tok))
        i += 1
    return specs


def _spec_from_flags(flags: list[str]) -> UnitSpec:
    exp, si, human = 1, False, False
    long_exp = {"--bytes": (0, None), "--kibi": (1, False), "--mebi": (2, False), "--gibi": (3, False),
                "--tebi": (4, False), "--pebi": (5, False), "--kilo": (1, True), "--mega": (2, True),
                "--giga": (3, True), "--tera": (4, True), "--peta": (5, True)}
    short_exp = {"b": 0, "k": 1, "m": 2, "g": 3}
    skip_next = False
    for f in flags:
        if skip_next:
            skip_next = False
            continue
        if f.startswith("--"):
            name = f.split("=", 1)[0]
            if name in long_exp:
                exp, forced_si = long_exp[name]
                si = si or bool(forced_si)
            elif name == "--si":
                si = True
            elif name == "--human":
                human = True
            elif name in {"--seconds", "--count"} and "=" not in f:
                skip_next = True
        elif f.startswith("-") and len(f) > 1:
            for ch in f[1:]:
                if ch in short_exp:
                    exp = short_exp[ch]
                elif ch == "h":
                    human = True
                elif ch in "sc":
                    skip_next = f.endswith(ch)  # "-s 2": the value is the next word
                    break
    base = 1000 if si else 1024
    return UnitSpec(factor=base**exp, human=human, si=si, name=_POW_NAMES[base][exp], source="command")


#: (unit, bytes per unit, smallest plausible host) in order of preference: KiB is procps's default.
_INFER_ORDER = ((1024, "KiB", 64 << 20), (1, "B", 1 << 30), (1 << 20, "MiB", 1 << 30), (1 << 30, "GiB", 1 << 30))


def _infer_unit(total: int) -> tuple[UnitSpec, list[str]]:
    """Pick the unit that makes ``total`` a plausible host (up to 16 TiB); KiB (the default) first.

    >>> _infer_unit(449)[0].name, _infer_unit(1877)[0].name, _infer_unit(24684092)[0].name
    ('GiB', 'MiB', 'KiB')
    """
    plausible = [(f, n) for f, n, low in _INFER_ORDER if low <= total * f < (1 << 44)]
    if not plausible:
        return UnitSpec(source="default"), ["KiB"]
    factor, name = plausible[0]
    return UnitSpec(factor=factor, name=name, source="inferred"), [n for _, n in plausible]


@dataclass(frozen=True)
class Value:
    """One printed figure as a byte interval ``[lo, hi)``."""

    lo: int
    hi: int
    bound: str  # exact | truncated | rounded | ambiguous


def _to_value(token: str, unit: UnitSpec) -> Value | None:
    m = _NUM_RE.match(token)
    if not m:
        return None
    num_text = m["num"].replace(",", ".")
    num = float(num_text)
    neg = m["sign"] == "-"
    suf = m["suf"]
    if suf:
        lo, hi, bound = _suffix_interval(num, num_text, suf, unit)
    else:
        f = unit.factor
        if "." in num_text:  # never printed by procps without a suffix; read as rounded
            lo, hi, bound = int(math.floor((num - 0.05) * f)), int(math.ceil((num + 0.05) * f)), "rounded"
        elif f == 1:
            lo, hi, bound = int(num), int(num) + 1, "exact"
        else:
            lo, hi, bound = int(num) * f, (int(num) + 1) * f, "truncated"
    if neg:
        lo, hi = -hi + 1, -lo + 1
    if abs(lo) > _MAX_BYTES or abs(hi) > _MAX_BYTES:
        return None
    return Value(lo, hi, bound)


def _suffix_interval(num: float, num_text: str, suf: str, unit: UnitSpec) -> tuple[int, int, str]:
    if suf == "B":
        return int(num), int(num) + 1, "exact"
    power = "KMGTPE".index(suf[0]) + 1
    if suf.endswith("i"):
        factors = [1024**power]
    elif unit.source == "command":
        factors = [(1000 if unit.si else 1024) ** power]
    else:  # "G": binary in procps 3.3.x -h, decimal with --si; keep both when nobody says which
        factors = [1000**power, 1024**power]
    if "." in num_text:  # "%.1f": rounded to one decimal
        lo_n, hi_n, bound = num - 0.05, num + 0.05, "rounded"
    else:  # "%ld": truncated
        lo_n, hi_n, bound = num, num + 1, "truncated"
    if len(factors) > 1:
        bound = "ambiguous"
    return int(math.floor(lo_n * min(factors))), int(math.ceil(hi_n * max(factors))), bound


# ---------------------------------------------------------------------------------------------
# Line shapes


@dataclass
class Row:
    line: int
    label: str
    tokens: list[str]
    text: str


@dataclass
class Table:
    header: str | None = None
    header_line: int | None = None
    mem: Row | None = None
    adjusted: Row | None = None  # legacy "-/+ buffers/cache:"
    extras: list[Row] = field(default_factory=list)
    unit: UnitSpec | None = None
    last_line: int = 0


def _split_row(line: str) -> tuple[str, list[str]] | None:
    """``label: v v v`` → (label, values); the label may hold spaces and a full-width colon."""
    if len(line) > _MAX_LINE:
        return None
    colons = [m.start() for m in _COLON_RE.finditer(line)]
    if not colons:
        return None
    idx = colons[-1]
    label = " ".join(line[:idx].split())
    vals = line[idx + 1:].split()
    if not label or not vals or len(label) > 40 or _BAD_LABEL_RE.search(label):
        return None
    if not all(_NUM_RE.match(v) for v in vals):
        return None
    return label, vals


def _is_header(line: str) -> bool:
    words = line.split()
    return (len(line) <= _MAX_LINE and 3 <= len(words) <= 12
            and not any(_NUM_RE.match(w) for w in words) and not _COLON_RE.search(line))


def _unflatten(line: str) -> list[tuple[str, list[str]]] | None:
    """A whole table pasted onto one line: header words, then ``Label: v v v`` groups.

    Returns ``[(header, []), (label, values), …]`` or None when the line is not such a table.
    """
    if len(line) > _MAX_LINE:
        return None
    header: list[str] = []
    label: list[str] = []
    groups: list[tuple[str, list[str]]] = []
    for tok in filter(None, (t.strip("`") for t in line.split())):
        if _NUM_RE.match(tok):
            if label:
                if label[-1][-1] not in ":：":
                    return None
                groups.append((" ".join(label)[:-1], [tok]))
                label = []
            elif groups:
                groups[-1][1].append(tok)
            else:
                return None
        elif groups or label or tok[-1] in ":：":
            # a bad character stays in the label it joins (only the label's last ':' is dropped), and a label
            # is either rejected below or never closed: no table (a log line with 'key: value' pairs, which
            # the sniffer offers every line of, ends here at its first '#key:' instead of at its end)
            if _BAD_LABEL_RE.search(tok, 0, len(tok) - 1) or (tok[-1] not in ":：" and _BAD_LABEL_RE.match(tok[-1])):
                return None
            label.append(tok)
        else:
            header.append(tok)
    if label or len(groups) < 2 or not 5 <= len(groups[0][1]) <= 7:
        return None
    if any(not 2 <= len(vals) <= 3 for _, vals in groups[1:]):
        return None
    if any(_BAD_LABEL_RE.search(lab) or len(lab) > 40 for lab, _ in groups):
        return None
    return [(" ".join(header), [])] + groups


# ---------------------------------------------------------------------------------------------
# Sniffing


def sniff(head: str) -> float:
    """How sure we are that ``head`` holds ``free`` output.

    >>> sniff("              total        used        free      shared  buff/cache   available\\n"
    ...       "Mem:        24684092      492480    21805672        8856     2701032    24191612\\n")
    0.95
    >>> sniff("MemTotal:       24684092 kB\\nMemFree:        21805672 kB\\n")
    0.0
    """
    best = 0.0
    prev = ""  # "header" | "mem" | ""
    for i, line in enumerate(head.splitlines()):
        if i > 2000:
            break
        if _HDR_NEW_RE.match(line) or _HDR_OLD_RE.match(line):
            best, prev = max(best, 0.6), "header"
            continue
        if _LINE_FORM_RE.match(line):
            return 0.9
        row = _split_row(line)
        if row and 5 <= len(row[1]) <= 7:
            best, prev = max(best, 0.95 if prev == "header" else 0.7), "mem"
            continue
        if row and prev == "mem" and len(row[1]) in (2, 3):
            best = max(best, 0.85)
        elif len(_COLON_RE.findall(line[:_MAX_LINE])) >= 2 and _unflatten(line):
            best = max(best, 0.9)
        prev = "header" if _is_header(line) else ""
    return best


# ---------------------------------------------------------------------------------------------
# Parsing


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    """Parse every ``free`` table in ``text``; tables get ``attrs.table`` = 0, 1, 2 …"""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    scan = _Scan(units=unit_from_command(command))
    for no, raw in enumerate(lines, 1):
        scan.feed(no, raw.rstrip("\r"))
    scan.drop_pending_header()
    if not scan.tables:
        if scan.n_unrec:
            raise NotThisFormat("no free table (no row with 5-7 figures after a label)")
        return ParseResult.from_rows([], source=FORMAT, path=path, lines=len(lines), recognized=scan.recognized)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for k, t in enumerate(scan.tables):
        rows.extend(_table_rows(t, k, notes))
    return ParseResult.from_rows(rows, source=FORMAT, path=path, lines=len(lines), recognized=scan.recognized,
                                 unrecognized=scan.n_unrec, unrecognized_examples=scan.unrec,
                                 notes=list(dict.fromkeys(notes)))


@dataclass
class _Scan:
    """Line-by-line state: tables found so far, the header waiting for its Mem row, line counts."""

    units: list[UnitSpec]  # from the command argument, one per free invocation
    tables: list[Table] = field(default_factory=list)
    recognized: int = 0
    n_unrec: int = 0
    unrec: list[tuple[int, str]] = field(default_factory=list)
    prompt_units: list[UnitSpec] | None = None  # from a "$ free -g" line inside the text
    tables_since_prompt: int = 0
    pending_header: tuple[int, str] | None = None
    current: Table | None = None

    def unrecognized(self, no: int, line: str) -> None:
        self.n_unrec += 1
        if len(self.unrec) < MAX_UNRECOGNIZED_EXAMPLES:
            self.unrec.append((no, line[:500]))

    def drop_pending_header(self) -> None:
        """A header-like line not followed by a Mem row was not a header after all."""
        if self.pending_header is not None:
            self.recognized -= 1
            self.unrecognized(*self.pending_header)
            self.pending_header = None

    def start_table(self, no: int) -> Table:
        t = Table()
        if self.pending_header:
            t.header_line, t.header = self.pending_header
        self.pending_header = None
        if self.prompt_units:
            t.unit = self.prompt_units[min(self.tables_since_prompt, len(self.prompt_units) - 1)]
        elif self.units:
            t.unit = self.units[min(len(self.tables), len(self.units) - 1)]
        self.tables_since_prompt += 1
        self.tables.append(t)
        return t

    def feed(self, no: int, line: str) -> None:
        if not line.strip():
            self.recognized += 1
            return
        row = _split_row(line)
        if row and 5 <= len(row[1]) <= 7:
            self.current = self.start_table(no)
            self.current.mem, self.current.last_line = Row(no, row[0], row[1], line), no
            self.recognized += 1
            return
        self.drop_pending_header()
        cur = self.current
        if row and cur is not None and len(row[1]) == 2 and "/" in row[0] and cur.adjusted is None:
            cur.adjusted, cur.last_line = Row(no, row[0], row[1], line), no
            self.recognized += 1
            return
        if row and cur is not None and len(row[1]) == 3 and len(cur.extras) < 5:
            cur.extras.append(Row(no, row[0], row[1], line))
            cur.last_line = no
            self.recognized += 1
            return
        self.current = None
        self.recognized += 1  # assume ours; undone below when nothing claims the line
        m = _PROMPT_FREE_RE.match(line) if len(line) < _MAX_LINE else None
        if m and (specs := unit_from_command(m["cmd"])):
            self.prompt_units, self.tables_since_prompt = specs, 0
        elif _LINE_FORM_RE.match(line):
            t = self.start_table(no)
            t.mem, t.last_line = Row(no, "line", [], line), no
        elif _is_header(line):
            self.pending_header = (no, line)
        elif not row and (flat := _unflatten(line)):
            self._flat_table(no, line, flat)
        else:
            self.recognized -= 1
            self.unrecognized(no, line)

    def _flat_table(self, no: int, line: str, flat: list[tuple[str, list[str]]]) -> None:
        t = self.start_table(no)
        t.header, t.header_line = flat[0][0] or None, no
        t.mem, t.last_line = Row(no, flat[1][0], flat[1][1], line), no
        for lab, vals in flat[2:]:
            if len(vals) == 2 and "/" in lab and t.adjusted is None:
                t.adjusted = Row(no, lab, vals, line)
            elif len(vals) == 3:
                t.extras.append(Row(no, lab, vals, line))


def _table_unit(t: Table, notes: list[str]) -> tuple[UnitSpec, dict[str, Any]]:
    info: dict[str, Any] = {}
    tokens = t.mem.tokens if t.mem else []
    has_suffix = any(_NUM_RE.match(v)["suf"] for v in tokens)  # type: ignore[index]
    if t.unit is not None:
        unit = t.unit
        info["unit_source"] = "command"
    elif has_suffix:
        unit = UnitSpec(human=True, name="human", source="suffix")
        info["unit_source"] = "suffix"
    elif tokens:
        total = float(tokens[0].replace(",", "."))
        unit, candidates = _infer_unit(int(total))
        info["unit_source"] = unit.source
        info["unit_inferred"] = True
        info["unit_candidates"] = candidates
        notes.append(f"free: no command given; plain numbers read as {unit.name} "
                     f"(the unit that makes total a plausible host; candidates {', '.join(candidates)})")
    else:
        unit = UnitSpec(source="default")
        info["unit_source"] = "default"
    info["unit"] = "human" if (unit.human or has_suffix) else unit.name
    return unit, info


_MEM_LAYOUTS = {
    "new": ["total", "used", "free", "shared", "buff_cache", "avail"],
    "wide": ["total", "used", "free", "shared", "buffers", "cache", "avail"],
    "legacy": ["total", "used", "free", "shared", "buffers", "cache"],
    "toybox": ["total", "used", "free", "shared", "buffers"],
}


def _mem_layout(t: Table, vals: list[Value]) -> str:
    n = len(vals)
    if n == 7:
        return "wide"
    if n == 5:
        return "toybox"
    if t.adjusted is not None:
        return "legacy"
    hdr = (t.header or "").split()
    if hdr and hdr[-1].lower() in {"cached", "cache"} and "available" not in (t.header or ""):
        return "legacy"
    if len(hdr) >= 5 and "/" in hdr[4] or hdr and hdr[-1].lower() == "available":
        return "new"
    # no header hint: new layout has total = used + free + buff/cache, legacy total = used + free
    total, used, free, bc = vals[0], vals[1], vals[2], vals[4]
    if _overlaps(total, _sum(used, free)) and not _overlaps(total, _sum(_sum(used, free), bc)):
        return "legacy"
    return "new"


def _sum(a: Value, b: Value) -> Value:
    return Value(a.lo + b.lo, a.hi + b.hi - 1, "sum")


def _overlaps(a: Value, b: Value) -> bool:
    return a.lo < b.hi and b.lo < a.hi


def _assign_roles(mem: list[Value], extras: list[tuple[str, list[Value]]]) -> list[str]:
    """Match the 3-value rows after Mem to Low/High/Swap/Total/Comm."""
    k = len(extras)
    best: tuple[float, list[str]] | None = None
    for lh, sw, tot, com in product((0, 1), (0, 1), (0, 1), (0, 1)):
        roles = ["low", "high"] * lh + ["swap"] * sw + ["total"] * tot + ["comm"] * com
        if len(roles) != k or (not sw and (tot or com)):
            continue
        score = -0.5 * lh - 0.2 * tot - 0.1 * com
        swap_vals = None
        for role, (label, vals) in zip(roles, extras, strict=True):
            norm = " ".join(label.lower().split())
            known = [r for r, names in _ROLE_LABELS.items() if norm in names]
            if known:
                score += 3 if role in known else -3
            if role == "swap":
                swap_vals = vals
            if role == "total" and swap_vals is not None:
                fits = all(_overlaps(vals[i], _sum(mem[i], swap_vals[i])) for i in range(3))
                score += 4 if fits else -4
        if best is None or score > best[0]:
            best = (score, roles)
    return best[1] if best else ["extra"] * k


def _put(attrs: dict[str, Any], cols: dict[str, Any], name: str, v: Value | None, column: bool) -> None:
    if v is None:
        return
    key = f"{name}_bytes"
    attrs[key] = v.lo
    if v.bound != "exact":
        attrs[f"{key}_max"] = v.hi
    if column:
        cols[key] = v.lo


def _bounds_word(values: list[Value]) -> str:
    kinds = {v.bound for v in values}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _table_rows(t: Table, k: int, notes: list[str]) -> list[dict[str, Any]]:
    unit, info = _table_unit(t, notes)
    base_attrs = {"table": k, **info}
    assert t.mem is not None
    if t.mem.label == "line":
        return _line_form_rows(t, unit, base_attrs)
    mem_vals = [_to_value(tok, unit) for tok in t.mem.tokens]
    if any(v is None for v in mem_vals):
        return []
    mv: list[Value] = mem_vals  # type: ignore[assignment]
    layout = _mem_layout(t, mv)
    names = _MEM_LAYOUTS[layout]
    attrs: dict[str, Any] = {**base_attrs, "layout": layout, "label": t.mem.label, "values": t.mem.tokens}
    if t.header:
        attrs["header"] = " ".join(t.header.split())
    cols: dict[str, Any] = {}
    by_name = dict(zip(names, mv, strict=True))
    for name, v in by_name.items():
        _put(attrs, cols, name, v, name in {"total", "used", "free", "avail"})
    if "buffers" in by_name and "cache" in by_name:
        _put(attrs, cols, "buff_cache", _sum(by_name["buffers"], by_name["cache"]), False)
    attrs["used_definition"] = ("total - free - buffers - cache (procps >= 3.3.10)"
                                if layout in {"new", "wide"} else "total - free (includes buffers and cache)")
    adj = [_to_value(tok, unit) for tok in t.adjusted.tokens] if t.adjusted else None
    if adj and all(adj):
        attrs["used_incl_buff_cache_bytes"] = attrs["used_bytes"]
        _put(attrs, cols, "used", adj[0], True)  # type: ignore[arg-type]
        _put(attrs, cols, "avail", adj[1], True)  # type: ignore[arg-type]
        attrs["used_definition"] = "used - buffers - cached (legacy -/+ buffers/cache row)"
        attrs["avail_definition"] = "free + buffers + cached (legacy -/+ buffers/cache row)"
    all_vals = list(mv)
    extras: list[tuple[Row, list[Value]]] = []
    for r in t.extras:
        vs = [_to_value(tok, unit) for tok in r.tokens]
        if all(v is not None for v in vs):
            extras.append((r, vs))  # type: ignore[arg-type]
    roles = _assign_roles(mv, [(r.label, vs) for r, vs in extras])
    swap: tuple[Row, list[Value]] | None = None
    for role, (r, vs) in zip(roles, extras, strict=True):
        if role == "swap":
            swap = (r, vs)
            continue
        prefix = {"low": "low", "high": "high", "total": "mem_plus_swap", "comm": "commit"}.get(role, role)
        names3 = (["limit", "committed_as", "free"] if role == "comm" else ["total", "used", "free"])
        for n3, v in zip(names3, vs, strict=True):
            _put(attrs, cols, f"{prefix}_{n3}", v, False)
        all_vals += vs
    attrs["bounds"] = _bounds_word(all_vals)
    line_end = t.last_line or t.mem.line
    out = [{"line": t.mem.line, "line_end": line_end, "kind": "host_memory", "text": t.mem.text,
            "attrs": attrs, **cols}]
    if swap is None:
        notes.append("free: no Swap row: the text was cut or not printed by procps")
        return out
    r, vs = swap
    s_attrs: dict[str, Any] = {**base_attrs, "label": r.label, "values": r.tokens, "bounds": _bounds_word(vs)}
    s_cols: dict[str, Any] = {}
    for n3, v in zip(["total", "used", "free"], vs, strict=True):
        _put(s_attrs, s_cols, n3, v, True)
    total = vs[0]
    if total.lo > 0:
        s_attrs["swap_configured"] = True
    elif total.hi <= 1024:  # nothing but zero fits: no swap device can be this small
        s_attrs["swap_configured"] = False
    else:
        s_attrs["swap_configured"] = "unknown"
        notes.append("free: Swap reads 0 in a truncating unit: swap is below one unit, not necessarily absent")
    out.append({"line": r.line, "kind": "host_swap", "text": r.text, "attrs": s_attrs, **s_cols})
    return out


def _line_form_rows(t: Table, unit: UnitSpec, base_attrs: dict[str, Any]) -> list[dict[str, Any]]:
    m = _LINE_FORM_RE.match(t.mem.text)  # type: ignore[union-attr]
    if not m:
        return []
    vals = {k: _to_value(m[k], unit) for k in ("swap_used", "cache", "used", "free")}
    if any(v is None for v in vals.values()):
        return []
    attrs: dict[str, Any] = {**base_attrs, "layout": "line", "bounds": _bounds_word(list(vals.values()))}
    cols: dict[str, Any] = {}
    _put(attrs, cols, "used", vals["used"], True)
    _put(attrs, cols, "free", vals["free"], True)
    _put(attrs, cols, "buff_cache", vals["cache"], False)
    s_attrs: dict[str, Any] = {**base_attrs, "layout": "line"}
    s_cols: dict[str, Any] = {}
    _put(s_attrs, s_cols, "used", vals["swap_used"], True)
    line = t.mem.line  # type: ignore[union-attr]
    return [{"line": line, "kind": "host_memory", "text": t.mem.text, "attrs": attrs, **cols},  # type: ignore[union-attr]
            {"line": line, "kind": "host_swap", "text": t.mem.text, "attrs": s_attrs, **s_cols}]  # type: ignore[union-attr]

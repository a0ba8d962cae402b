"""Process listings: ``ps -eo pid,ppid,stat,lstart,etimes,rss,vsz,comm,args``, ``ps aux``, ``ps -ef``.

Sources: ps(1) (procps: STANDARD FORMAT SPECIFIERS, PROCESS STATE CODES, ``etime`` ``[[dd-]hh:]mm:ss``),
top(1) (the summary lines), and the titles of parsers/proc_titles.py (reference/vllm_formats.md §1.6).

The column order comes from the header line (procps names: ``PID PPID STAT STARTED ELAPSED RSS VSZ
COMMAND COMMAND``, ``USER PID %CPU %MEM VSZ RSS TTY STAT START TIME COMMAND``, ``UID PID PPID C
STIME TTY TIME CMD``); header-less rows of those three layouts are recognised by their shape.
``lstart`` is five words (``Sun Nov 29 08:50:41 2026``); RSS and VSZ are KiB; ``ELAPSED`` is seconds
(``etimes``) or ``[[dd-]hh:]mm:ss`` (``etime``). Sample::

        PID    PPID STAT                  STARTED ELAPSED   RSS    VSZ COMMAND         COMMAND
      41207       1 Sl   Sun Nov 29 08:50:41 2026    3600 2097152 9437184 python3     python3 -m sglang.launch_server --tp 8
      41300   41207 Rl   Sun Nov 29 08:50:52 2026    3589 8388608 99614720 sglang::schedul sglang::scheduler_DP1_TP3
      41400   41207 Z    Sun Nov 29 08:50:52 2026    3589      0      0 python3         [python3] <defunct>

One ``process`` event per process: ``pid``, ``comm``, ``used_bytes`` = RSS, ``seconds`` = elapsed;
attrs ``ppid``, ``stat``, ``state``, ``vsz_bytes``, ``args``, ``start``, ``user``, and for engine
processes their identity (:func:`parsers.proc_titles.process_identity`): ``engine``,
``sglang_role`` (``launch_server``, ``scheduler``, ``detokenizer``, ``tokenizer``,
``data_parallel_controller``) or ``vllm_role``, with ``tp_rank``/``dp_rank``/``pp_rank``/``ep_rank``
from the process title (also in the rank columns). Header-less ``ps -eo pid,ppid,stat,etime,rss,args``
rows are read by the classes of their leading words. An engine child with PPID 1 gets
``reparented_to_init`` (and ``orphaned`` when the listing shows what PID 1 is).

>>> text = ("    PID    PPID STAT                  STARTED ELAPSED   RSS    VSZ COMMAND         COMMAND\\n"
...         "  41300   41207 Rl   Sun Nov 29 08:50:52 2026    3589 8388608 99614720 sglang::schedul "
...         "sglang::scheduler_DP1_TP3\\n")
>>> r = parse(text)
>>> r.events.select("pid", "comm", "used_bytes", "seconds", "rank", "tp_rank", "dp_rank").row(0)
(41300, 'sglang::schedul', 8589934592, 3589.0, 'DP1 TP3', 3, 1)
>>> import json; json.loads(r.events["attrs"][0])["start"]
'2026-11-29T08:50:52'
"""

from __future__ import annotations

from datetime import datetime
from itertools import islice
from typing import Any

import regex as re

from .proc_titles import CHILD_ROLES, process_identity
from .schema import MAX_UNRECOGNIZED_EXAMPLES, NotThisFormat, ParseResult
from .units import KIB

FORMAT = "ps"

#: header word → our field name. ``STARTED`` is lstart (5 words) or start (1–2 words).
_HEADER_FIELDS = {
    "PID": "pid", "PPID": "ppid", "STAT": "stat", "S": "stat", "STARTED": "start", "START": "start",
    "STIME": "start", "LSTART": "start", "ELAPSED": "elapsed", "RSS": "rss", "RSZ": "rss", "VSZ": "vsz",
    "VSIZE": "vsz", "USER": "user", "UID": "user", "RUSER": "user", "EUSER": "user",
    "COMMAND": "command", "CMD": "command", "COMM": "command", "ARGS": "command",
    "%CPU": "cpu_pct", "%MEM": "mem_pct", "C": "cpu_util", "TTY": "tty", "TT": "tty", "TIME": "cpu_time",
    "NI": "nice", "PRI": "pri", "PSR": "psr", "NLWP": "nlwp", "LWP": "lwp", "SZ": "sz", "WCHAN": "wchan",
    "F": "flags", "PGID": "pgid", "SID": "sid", "SESS": "sid", "TGID": "tgid", "ADDR": "addr",
    "ETIME": "elapsed", "ETIMES": "elapsed",
    # top -b: sizes in KiB unless suffixed (m, g, t: binary); PR may be "rt"
    "PR": "pri", "VIRT": "virt", "RES": "res", "SHR": "shr", "TIME+": "cpu_time",
}
#: ``ps -o`` spec names → header words, for header-less output when the command is known.
_SPEC_HEADERS = {
    "pid": "PID", "ppid": "PPID", "stat": "STAT", "s": "S", "state": "S", "lstart": "STARTED",
    "start": "STARTED", "etimes": "ELAPSED", "etime": "ELAPSED", "rss": "RSS", "rssize": "RSS",
    "rsz": "RSZ", "vsz": "VSZ", "vsize": "VSZ", "comm": "COMMAND", "ucomm": "COMMAND", "args": "COMMAND",
    "command": "COMMAND", "cmd": "CMD", "user": "USER", "uid": "UID", "tty": "TT", "time": "TIME",
    "pcpu": "%CPU", "%cpu": "%CPU", "pmem": "%MEM", "%mem": "%MEM", "stime": "STIME", "nlwp": "NLWP",
}
_DEFAULT_HEADER = ["PID", "PPID", "STAT", "STARTED", "ELAPSED", "RSS", "VSZ", "COMMAND", "COMMAND"]
_AUX_HEADER = ["USER", "PID", "%CPU", "%MEM", "VSZ", "RSS", "TTY", "STAT", "START", "TIME", "COMMAND"]
_EF_HEADER = ["UID", "PID", "PPID", "C", "STIME", "TTY", "TIME", "CMD"]

# ps(1) (procps: ``etime`` as ``[[dd-]hh:]mm:ss``, PROCESS STATE CODES ``R S D Z T t W X I`` with ``< N L s l +``)
_WORD_RE = re.compile(r"\S+")
_WEEKDAYS = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}
_MONTHS = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
_ETIME_RE = re.compile(r"^(?:(?:(\d+)-)?(\d+):)?(\d+):(\d+)$")
_STAT_RE = re.compile(r"^[RSDZTtWXIKPL][<NLsl+]*$|^[RSDZTtWXIKPL]$")
# the titles of sglang python/sglang/srt/managers/scheduler.py::run_scheduler_process (0.4+:
# ``sglang::scheduler_TP0``) and the launch of reference/sglang_formats.md §8
_SCHED_TITLE_RE = re.compile(r"sglang::scheduler((?:_[A-Z_]*?\d+)*)\b")
_RANK_PART_RE = re.compile(r"(ATTN_CP|MOE_DP|DP|PP|TP|EP)(\d+)")
_SGLANG_TITLE_RE = re.compile(r"^sglang::(\w+)")
_LAUNCH_RE = re.compile(r"-m\s+sglang(?:_router)?\.launch_server\b|\bsglang\s+serve\b")

# Header-less rows of the three layouts, by shape.
# ps(1) (the ``-eo pid,ppid,stat,lstart,…``, ``aux`` and ``-ef`` layouts, rows without their header)
_DEFAULT_ROW_RE = re.compile(
    r"^\s*\d+\s+\d+\s+\S+\s+(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\s+[A-Z][a-z]{2}\s+\d+\s+[\d:]+\s+\d{4}\s+[\d:-]+\s+\d+\s+\d+\s+\S")
_AUX_ROW_RE = re.compile(r"^\S+\s+\d+\s+\d+(?:\.\d+)?\s+\d+(?:\.\d+)?\s+\d+\s+\d+\s+\S+\s+\S+\s+\S+\s+[\d:.]+\s+\S")
_EF_ROW_RE = re.compile(r"^\S+\s+\d+\s+\d+\s+\d+\s+\S+\s+\S+\s+\d[\d:-]*\s+\S")


def _header_words(line: str) -> list[str] | None:
    """The column names if this line is a ps header (every word a known ps column name)."""
    words = line.split()
    if len(words) < 2 or "PID" not in words or "|" in line:
        return None
    if not all(w in _HEADER_FIELDS for w in words):
        return None
    return words


def _header_from_command(command: str | None) -> list[str] | None:
    """Header words implied by ``ps -o a,b,c`` in the command that produced the text."""
    if not command:
        return None
    m = re.search(r"(?:^|\s)-[a-zA-Z]*o\s*([\w%,=]+)|--format[= ]([\w%,=]+)", command)
    if not m:
        return None
    specs = [s.split("=")[0].lower() for s in (m.group(1) or m.group(2)).split(",") if s]
    heads = [_SPEC_HEADERS.get(s) for s in specs]
    return heads if all(heads) and "PID" in heads else None  # type: ignore[return-value]


def etime_seconds(text: str) -> int | None:
    """``etimes`` (``3600``) or ``etime`` (``1-02:03:04``) → seconds.

    >>> etime_seconds("3600"), etime_seconds("1-02:03:04"), etime_seconds("05:06"), etime_seconds("x")
    (3600, 93784, 306, None)
    """
    if text.isdigit():
        return int(text)
    m = _ETIME_RE.match(text)
    if not m:
        return None
    d, h, mi, s = (int(g) if g else 0 for g in m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + s


def lstart_iso(words: list[str]) -> str | None:
    """``Sun Nov 29 08:50:41 2026`` → ``2026-11-29T08:50:41`` (naive: the host's local time)."""
    try:
        return datetime.strptime(" ".join(words[1:]), "%b %d %H:%M:%S %Y").isoformat()
    except ValueError:
        return None


def sglang_identity(comm: str, args: str) -> dict[str, Any]:
    """SGLang role and ranks from a process title (``sglang::scheduler_DP1_TP3``) or argv.

    >>> sglang_identity("sglang::schedul", "sglang::scheduler_DP0_PP1_TP3_EP3")
    {'sglang_role': 'scheduler', 'rank': 'DP0 PP1 TP3 EP3', 'dp_rank': 0, 'pp_rank': 1, 'tp_rank': 3, 'ep_rank': 3}
    >>> sglang_identity("python3", "python3 -m sglang.launch_server --tp 8")
    {'sglang_role': 'launch_server'}
    """
    title = args.strip() or comm
    m = _SCHED_TITLE_RE.search(title)
    if m:
        out: dict[str, Any] = {"sglang_role": "scheduler"}
        parts = _RANK_PART_RE.findall(m.group(1))
        if parts:
            out["rank"] = " ".join(f"{k}{v}" for k, v in parts)
        for k, v in parts:
            out[f"{k.lower()}_rank"] = int(v)
        return out
    m = _SGLANG_TITLE_RE.match(title) or _SGLANG_TITLE_RE.match(comm)
    if m:
        word = m.group(1)
        if word.startswith("schedul"):
            return {"sglang_role": "scheduler"}  # comm cut at 15 chars, no args to tell the rank
        for role in ("detokenizer", "tokenizer", "data_parallel_controller"):
            if word.startswith(role):
                return {"sglang_role": role}
        return {"sglang_role": word}
    if _LAUNCH_RE.search(title):
        return {"sglang_role": "launch_server"}
    return {}


def _take_start(tokens: list[str], k: int) -> int:
    """How many words the start column takes at tokens[k]: lstart 5, ``Nov 29`` 2, else 1."""
    if k < len(tokens) and tokens[k] in _WEEKDAYS and k + 4 < len(tokens) and tokens[k + 4].isdigit():
        return 5
    if k + 1 < len(tokens) and tokens[k] in _MONTHS and tokens[k + 1].isdigit():
        return 2
    return 1


_COMM_WIDTH = 15  # procps pads ``comm`` to 15 columns; the kernel cuts comm at 15 characters


def _padded_comm(line: str, start: int) -> str | None:
    """The comm field when it holds a space, judged by its fixed width; None otherwise."""
    field = line[start:start + _COMM_WIDTH]
    # padded (ends in blanks) and followed by the separating blank: the fixed-width layout
    if (len(line) > start + _COMM_WIDTH and line[start + _COMM_WIDTH] == " " and field.endswith(" ")
            and " " in field.rstrip()):
        return field.rstrip()
    return None


def _split_row(line: str, header: list[str]) -> dict[str, str] | None:
    """Header field → text for one row; the last column takes the rest of the line.

    A ``COMMAND`` column before the last one is ``comm``; the last is ``args``.
    """
    spans = [m.span() for m in islice(_WORD_RE.finditer(line), len(header) + 5)]
    fields: dict[str, str] = {}
    k = 0
    for n, word in enumerate(header):
        name = _HEADER_FIELDS[word]
        if n == len(header) - 1:
            if k >= len(spans):
                return None
            fields["args" if name == "command" else name] = line[spans[k][0]:].rstrip()
            return fields
        if k >= len(spans):
            return None
        if name == "command" and (padded := _padded_comm(line, spans[k][0])) is not None:
            fields["comm"] = padded  # a comm with a space ("tmux: server") in its 15-column field
            k = next((j for j, (a, _) in enumerate(spans) if a > spans[k][0] + _COMM_WIDTH), len(spans))
            continue
        take = _take_start([line[a:b] for a, b in spans[k:k + 5]], 0) if name == "start" else 1
        if k + take > len(spans):
            return None
        fields["comm" if name == "command" else name] = " ".join(line[a:b] for a, b in spans[k:k + take])
        k += take
    return fields


# top(1) (procps: summary lines, ``KiB Mem :``, sizes with k m g t p e)
_TOP_SUMMARY_RE = re.compile(r"^(?:top - |Tasks:|Threads:|%Cpu|[KMGT]iB (?:Mem|Swap)\s*:)")
_TOP_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)([kmgtpe]?)$")


def _top_bytes(text: str) -> int | None:
    """top's VIRT/RES/SHR: KiB, or with a binary suffix (``8.0g``, ``512m``).

    >>> _top_bytes("8.0g"), _top_bytes("2097152"), _top_bytes("x")
    (8589934592, 2147483648, None)
    """
    m = _TOP_SIZE_RE.match(text.lower())
    if not m:
        return None
    power = "kmgtpe".index(m.group(2) or "k")
    return int(float(m.group(1)) * (KIB << (10 * power)))


def _int(s: str | None) -> int | None:
    return int(s) if s is not None and s.isdigit() else None


def _row(fields: dict[str, str], line_no: int, text: str) -> dict[str, Any] | None:
    pid = _int(fields.get("pid"))
    if pid is None:
        return None
    stat = fields.get("stat")
    if stat is not None and not _STAT_RE.match(stat):
        return None
    args = fields.get("args", "")
    comm = fields.get("comm")
    kernel_thread = args.startswith("[") and args.endswith("]")
    if comm is None:
        # ps aux / -ef print only args: kernel threads and zombies as "[name]", others as argv
        if args.startswith("[") and "]" in args:
            comm = args[1:args.index("]")]
        else:
            first = args.split()[0] if args.split() else ""
            comm = first.rsplit("/", 1)[-1]
    attrs: dict[str, Any] = {"args": args}
    rss, vsz = _int(fields.get("rss")), _int(fields.get("vsz"))
    if "rss" in fields and rss is None or "vsz" in fields and vsz is None:
        return None
    top_sizes = {attr: _top_bytes(fields[key]) for key, attr in (("res", "rss_bytes"), ("virt", "vsz_bytes"),
                                                                   ("shr", "shr_bytes")) if key in fields}
    if any(v is None for v in top_sizes.values()):
        return None
    if vsz is not None:
        attrs["vsz_bytes"] = vsz * KIB
    if rss is not None:
        attrs["rss_bytes"] = rss * KIB
    ppid = _int(fields.get("ppid"))
    if "ppid" in fields and ppid is None:
        return None
    if ppid is not None:
        attrs["ppid"] = ppid
    if stat:
        attrs["stat"] = stat
        attrs["state"] = stat[0]
    start = fields.get("start")
    if start:
        words = start.split()
        iso = lstart_iso(words) if len(words) == 5 else None
        if iso:
            attrs["start"] = iso
        else:
            attrs["start_text"] = start  # ps aux START / -ef STIME: a time or a date, no year
    elapsed = etime_seconds(fields["elapsed"]) if "elapsed" in fields else None
    if elapsed is not None:
        attrs["elapsed_s"] = elapsed
    if "<defunct>" in args:
        attrs["zombie"] = True
    if kernel_thread and "<defunct>" not in args:
        attrs["kernel_thread"] = True
    attrs.update(top_sizes)
    if any(not fields[k].isdigit() for k in ("res", "virt", "shr") if k in fields):
        attrs["sizes_rounded"] = True  # top printed 40.2g: a tenth of the unit is all we know
    for extra in ("user", "tty", "cpu_pct", "mem_pct", "cpu_time", "cpu_util", "nlwp", "pri", "nice"):
        if extra in fields:
            attrs[extra] = fields[extra]
    ident = process_identity(comm, args)
    attrs.update(ident)
    return {
        "line": line_no, "kind": "process", "pid": pid, "comm": comm,
        "used_bytes": top_sizes.get("rss_bytes", rss * KIB if rss is not None else None),
        "seconds": float(elapsed) if elapsed is not None else None,
        "rank": ident.get("rank"), "tp_rank": ident.get("tp_rank"), "dp_rank": ident.get("dp_rank"),
        "pp_rank": ident.get("pp_rank"), "ep_rank": ident.get("ep_rank"),
        "text": text, "attrs": attrs,
    }


def _split_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


#: Header-less ``ps -eo pid,ppid,stat,…,args`` rows by the classes of their leading words (I: a number,
#: S: a STAT, E: an ``[[dd-]hh:]mm:ss`` elapsed time), longest first; ``pid,ppid,stat,rss`` and
#: ``pid,ppid,stat,etimes`` look alike and are left unread.
_SIGNATURE_HEADERS = (
    ("IISII", ["PID", "PPID", "STAT", "ELAPSED", "RSS", "COMMAND"]),
    ("IISEI", ["PID", "PPID", "STAT", "ELAPSED", "RSS", "COMMAND"]),
    ("IISE", ["PID", "PPID", "STAT", "ELAPSED", "COMMAND"]),
    ("IIS", ["PID", "PPID", "STAT", "COMMAND"]),
)


def _word_class(word: str) -> str:
    if word.isdigit():
        return "I"
    if _STAT_RE.match(word):
        return "S"
    if ":" in word and _ETIME_RE.match(word):
        return "E"
    return "?"


def _signature_header(line: str) -> list[str] | None:
    """``41300  1 Sl 01:02:03 8388608 sglang::scheduler_TP0`` → the ``-eo`` columns it was printed with."""
    words = line[:512].split(None, 5)
    classes = "".join(_word_class(w) for w in words)
    for sig, header in _SIGNATURE_HEADERS:
        # the signature, then the title, which must not itself read as one more column of the signature
        if classes.startswith(sig) and len(words) > len(sig) and (
                len(sig) == 5 or classes[len(sig):len(sig) + 1] == "?"):
            return header
    return None


def _shape_header(line: str) -> list[str] | None:
    if _DEFAULT_ROW_RE.match(line):
        return _DEFAULT_HEADER
    if _AUX_ROW_RE.match(line):
        return _AUX_HEADER
    if _EF_ROW_RE.match(line):
        return _EF_HEADER
    return _signature_header(line)


def _mark_orphans(rows: list[dict[str, Any]]) -> None:
    """Engine child processes with PPID 1: reparented to init, so their launcher is gone — unless the
    launcher itself is PID 1 (a container whose entry point is the server). Judged only when the listing
    shows PID 1; otherwise only ``reparented_to_init`` is said."""
    init = next((r for r in rows if r["pid"] == 1), None)
    init_is_launcher = init is not None and init["attrs"].get("engine") is not None and \
        init["attrs"].get("sglang_role", init["attrs"].get("vllm_role")) in ("launch_server", "api_server")
    for r in rows:
        a = r["attrs"]
        if a.get("ppid") != 1 or r["pid"] == 1:
            continue
        if a.get("sglang_role", a.get("vllm_role")) not in CHILD_ROLES:
            continue
        a["reparented_to_init"] = True
        if init is not None:
            a["orphaned"] = not init_is_launcher


def sniff(head: str) -> float:
    """0.95 for a ps header followed by rows; 0.6 for header-less rows of a known layout."""
    lines = [ln for ln in _split_lines(head)[:200] if ln.strip()]
    if not lines:
        return 0.0
    skip = 0
    while skip < min(len(lines), 8) and _TOP_SUMMARY_RE.match(lines[skip]):
        skip += 1  # top -b: its summary lines come before the header
    for i, ln in enumerate(lines[:skip + 5]):
        header = _header_words(ln)
        if header and "PID" in header and any(h in header for h in ("COMMAND", "CMD", "ARGS", "COMM")):
            rows = lines[i + 1:i + 21]
            if not rows:
                return 0.6
            good = sum(1 for r in rows if (f := _split_row(r, header)) and _row(f, 0, r))
            return 0.95 if good >= 0.8 * len(rows) else 0.4
    shaped = sum(1 for ln in lines[:50] if _shape_header(ln))
    return 0.6 if shaped >= 0.8 * min(len(lines), 50) else 0.0


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    """One ``process`` row per process line."""
    lines = _split_lines(text)
    header = _header_from_command(command)
    rows: list[dict[str, Any]] = []
    unrec: list[tuple[int, str]] = []
    n_unrec = 0
    saw_header = False
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        words = _header_words(line)
        if words:
            header, saw_header = words, True
            continue
        use = header or _shape_header(line)
        fields = _split_row(line, use) if use else None
        row = _row(fields, i, line) if fields else None
        if row is None and use is header and header is not None:
            shaped = _shape_header(line)  # a header-less block of another layout
            row = _row(_split_row(line, shaped) or {}, i, line) if shaped else None
        if row is None:
            n_unrec += 1
            if len(unrec) < MAX_UNRECOGNIZED_EXAMPLES:
                unrec.append((i, line[:500]))
            continue
        rows.append(row)
    if not rows and not saw_header and n_unrec:
        raise NotThisFormat("no ps header and no process rows")
    _mark_orphans(rows)
    return ParseResult.from_rows(
        rows, source=FORMAT, path=path, lines=len(lines), recognized=len(lines) - n_unrec,
        unrecognized=n_unrec, unrecognized_examples=unrec,
    )

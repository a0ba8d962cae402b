"""Redaction of credentials and obfuscation of host identity, as pure functions on text.

``forensics collect`` passes every artifact through :func:`redact_text` (argv, environment and
logs included) before it enters the bundle. A secret is replaced by a fixed marker that names its
kind, so the text keeps its shape and the parsers still read it::

    HF_TOKEN=hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345      →  HF_TOKEN=[REDACTED:env_secret]
    --api-key sk-proj-abcdefghijklmnopqrstuvwxyz     →  --api-key [REDACTED:openai_key]
    server_args=ServerArgs(..., api_key='s3cret', ...) →  ..., api_key='[REDACTED:kwarg_secret]', ...

>>> text, counts = redact_text("launch --api-key s3cret --port 30000 HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123")
>>> text
'launch --api-key [REDACTED:cli_secret] --port 30000 HF_TOKEN=[REDACTED:hf_token]'
>>> dict(counts)
{'hf_token': 1, 'cli_secret': 1}
>>> redact_text(text)[0] == text      # idempotent: markers are never redacted again
True

Redaction is idempotent (``redact(redact(x)) == redact(x)``): values that already are markers are
left alone and the rules run to a fixed point. Obfuscation (:class:`Obfuscator`) replaces host
names and IP addresses by stable aliases (same input → same alias) and hands back the mapping,
which the collector writes *outside* the bundle.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

MARKER_PREFIX = "[REDACTED:"


def marker(kind: str) -> str:
    """The fixed replacement text for a secret of ``kind``.

    >>> marker("hf_token")
    '[REDACTED:hf_token]'
    """
    return f"{MARKER_PREFIX}{kind}]"


# A value as it appears after `=` or a space: quoted, or a run without separators. NUL counts as a
# separator because /proc/PID/cmdline and environ are NUL-separated.
_VALUE = rb"""(?:"[^"\n\x00]*"|'[^'\n\x00]*'|[^\s\x00"',;&|)]+)"""
_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_UPPER_NAME = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_FLAG = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789-")
_LOWER = frozenset(b"abcdefghijklmnopqrstuvwxyz")


def _starts_word(hay: bytes, start: int, extra: bytes = b"") -> bool:
    """No word character (or one of ``extra``) right before ``start``."""
    return start == 0 or (hay[start - 1] not in _WORD and hay[start - 1] not in extra)


def _env_name(hay: bytes, start: int) -> bool:
    """``…KEYWORD=`` is an upper-case variable name: not the tail of a lower-case word."""
    i = start
    while i > 0 and hay[i - 1] in _UPPER_NAME:
        i -= 1
    return i == 0 or hay[i - 1] not in _LOWER


def _long_flag(hay: bytes, start: int) -> bool:
    """The ``-keyword`` at ``start`` ends a ``--flag`` (``--api-key``, ``--admin-api-key``)."""
    i = start
    while i > 0 and hay[i - 1] in _FLAG:
        i -= 1
    return hay[i : start + 1].startswith(b"--") and _starts_word(hay, i, b"-")


@dataclass(frozen=True)
class _Rule:
    """One secret shape. Patterns begin with a literal so ``re`` scans at C speed; ``lower`` rules
    run on an ASCII-lowered copy (same offsets) instead of using the slow ``(?i)``; ``guard`` checks
    what precedes the match (fixed-width lookbehinds cannot)."""

    kind: str
    pattern: re.Pattern[bytes]
    lower: bool = False
    guard: Callable[[bytes, int], bool] | None = None


def _rules() -> list[_Rule]:
    rules = [
        _Rule("url_password", re.compile(rb"://[^\s\x00:/@\[\]]*:(?P<v>[^\s\x00@/]+)@")),
        # "Authorization: Bearer|Basic|Token X"; a bare "bearer X" only when X looks like a token
        _Rule("bearer", re.compile(rb"authorization[ \t]*[:=][ \t]*(?:bearer|basic|token)[ \t]+(?P<v>[a-z0-9._~+/=-]{6,})"),
              lower=True, guard=_starts_word),
        _Rule("bearer", re.compile(rb"bearer[ \t]+(?P<v>(?=[a-z0-9._~+/=-]*\d)[a-z0-9._~+/=-]{16,})"),
              lower=True, guard=_starts_word),
        _Rule("hf_token", re.compile(rb"(?P<v>hf_[A-Za-z0-9]{20,})"), guard=_starts_word),
        _Rule("openai_key", re.compile(rb"(?P<v>sk-(?:proj-|ant-|svcacct-|admin-)?[A-Za-z0-9_-]{20,})"),
              guard=lambda hay, s: _starts_word(hay, s, b"-")),
        _Rule("aws_key_id", re.compile(rb"(?P<v>(?:AKIA|ASIA)[A-Z0-9]{16})(?![A-Za-z0-9])"),
              guard=lambda hay, s: s == 0 or hay[s - 1] not in _WORD or hay[s - 1] == ord("_")),
        _Rule("aws_secret", re.compile(rb"aws_secret_access_key[\"']?[ \t]*[=:][ \t]*[\"']?(?P<v>[a-z0-9/+=]{16,})"),
              lower=True, guard=_starts_word),
    ]
    for word in (b"api-key", b"apikey", b"token", b"secret", b"password", b"passwd"):
        # --api-key VALUE, --api-key=VALUE, --admin-api-key, --hf-token … (space, '=' or NUL)
        rules.append(_Rule("cli_secret", re.compile(b"-" + word + rb"(?:=|[ \t]+|\x00)(?!--)(?P<v>" + _VALUE + b")"),
                           lower=True, guard=_long_flag))
    for word in (b"TOKEN", b"SECRET", b"PASSWORD", b"PASSWD", b"_KEY", b"APIKEY"):
        # environment style: HF_TOKEN=…, *_TOKEN=, *_SECRET=, *_PASSWORD=, *_KEY=
        rules.append(_Rule("env_secret", re.compile(word + rb"=(?P<v>" + _VALUE + b")"), guard=_env_name))
    for word in (b"api_key", b"api-key", b"apikey", b"token", b"secret", b"password", b"passwd"):
        # Python reprs and JSON: api_key='…', "hf_token": "…" (SGLang prints server_args this way), a
        # parsed flag map {"--api-key": "…"}. A
        # "token" that is only digits is a count (a batch line's #token), never a credential.
        letters = rb"(?=[^\"'\n\x00]*[a-z_/+=-])" if word == b"token" else b""
        rules.append(_Rule("kwarg_secret", re.compile(
            word + rb"[\"']?[ \t]*[=:][ \t]*(?P<q>[\"'])(?P<v>" + letters + rb"[^\"'\n\x00]+)(?P=q)"), lower=True))
    for word in (b"api-key", b"apikey", b"token", b"secret", b"password", b"passwd"):
        # argv as a list: Python repr / JSON / compose ["--api-key", "X"], and YAML "- --api-key\n- X"
        rules.append(_Rule("cli_secret", re.compile(
            b"-" + word + rb"[\"'][ \t]*,[ \t\r\n]*(?P<q>[\"'])(?P<v>[^\"'\n\x00]+)(?P=q)"), lower=True, guard=_long_flag))
        rules.append(_Rule("cli_secret", re.compile(
            b"-" + word + rb"[\"']?[ \t]*\r?\n[ \t]*-[ \t]+(?!-)(?P<v>" + _VALUE + b")"), lower=True, guard=_long_flag))
    for word in (b"password", b"passwd", b"secret", b"api_key", b"apikey"):
        # unquoted lower-case key=value (config strings, query strings, audit lines); None/null are
        # Python's and JSON's "unset", not a secret
        rules.append(_Rule("kwarg_secret", re.compile(
            word + rb"=(?!(?:none|null)\b)(?P<v>" + _VALUE + b")"), lower=True, guard=_not_after_alnum))
    for word in (b"_TOKEN", b"_SECRET", b"_PASSWORD", b"_PASSWD", b"_KEY", b"APIKEY"):
        # YAML and .env-style maps, unquoted: "HF_TOKEN: X" (a value of digits only is a count, not a secret)
        rules.append(_Rule("env_secret", re.compile(
            word + rb":[ \t]+(?![\"'])(?=[^\s\x00]*[A-Za-z_/+=-])(?P<v>" + _VALUE + b")"), guard=_env_name))
    # HTTP headers by name, in a logged request or a curl line: "X-Api-Key: X", "X-Auth-Token: X"
    rules.append(_Rule("header_secret", re.compile(
        rb"(?:(?:x-[a-z0-9-]*)?(?:api-?key|auth-token|access-token)|x-[a-z0-9-]*token)[ \t]*:[ \t]*"
        rb"(?![\"'\[])(?=[^\s\x00\"',;]*[a-z_/+=-])(?P<v>[^\s\x00\"',;]+)"), lower=True, guard=_header_name))
    # Kubernetes env lists: "- name: HF_TOKEN" then "value: X" on the next line
    rules.append(_Rule("env_secret", re.compile(
        rb"name:[ \t]*[\"']?[A-Za-z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|_KEY|APIKEY)[\"']?[ \t]*\r?\n"
        rb"[ \t]*value:[ \t]*(?P<v>" + _VALUE + b")")))
    return rules


def _header_name(hay: bytes, start: int) -> bool:
    """A header's name starts a word (``X-Api-Key``, not ``#new-token``): no letter, digit, ``-`` or ``#`` before it."""
    return start == 0 or (hay[start - 1] not in _WORD and hay[start - 1] not in b"-#")


def _not_after_alnum(hay: bytes, start: int) -> bool:
    """``db_password=`` counts, ``nopassword=`` does not: only a letter or digit may not precede."""
    return start == 0 or not chr(hay[start - 1]).isalnum()


_RULES = _rules()
_MARKER_BYTES = MARKER_PREFIX.encode()


def _apply_rule(data: bytes, rule: _Rule, counts: Counter[str]) -> bytes:
    hay = data.lower() if rule.lower else data  # bytes.lower() is ASCII-only: offsets unchanged
    pieces: list[bytes] = []
    last = 0
    for m in rule.pattern.finditer(hay):
        if rule.guard is not None and not rule.guard(hay, m.start()):
            continue
        start, end = m.span("v")
        value = data[start:end]
        quote = value[:1] if value[:1] in (b'"', b"'") and len(value) >= 2 and value[-1:] == value[:1] else b""
        inner = value[1:-1] if quote else value
        if not inner or inner.startswith(_MARKER_BYTES):
            continue
        pieces += [data[last:start], quote + marker(rule.kind).encode() + quote]
        last = end
        counts[rule.kind] += 1
    if not pieces:
        return data
    pieces.append(data[last:])
    return b"".join(pieces)


def redact_bytes(data: bytes) -> tuple[bytes, Counter[str]]:
    """Replace every secret in ``data`` by its marker; return the bytes and counts per kind.
    Bytes that are not UTF-8 survive unchanged.

    >>> redact_bytes(b"\\xff AKIAABCDEFGHIJKLMNOP\\n")
    (b'\\xff [REDACTED:aws_key_id]\\n', Counter({'aws_key_id': 1}))
    """
    counts: Counter[str] = Counter()
    for _ in range(4):  # to a fixed point: one replacement can expose another shape
        before = data
        for rule in _RULES:
            data = _apply_rule(data, rule, counts)
        if data == before:
            break
    return data, counts


def redact_text(text: str) -> tuple[str, Counter[str]]:
    """:func:`redact_bytes` on text.

    >>> redact_text("curl -H 'Authorization: Bearer abcdefgh12345678' http://bob:pw@example.com/x")[0]
    "curl -H 'Authorization: Bearer [REDACTED:bearer]' http://bob:[REDACTED:url_password]@example.com/x"
    """
    data, counts = redact_bytes(text.encode("utf-8", "surrogatepass"))
    return (data.decode("utf-8", "surrogatepass") if counts else text), counts


# ----------------------------------------------------------------------------------------------
# Obfuscation

_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?!\.\d)(?!\w)")
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_KEEP_IPS = {"127.0.0.1", "0.0.0.0", "::1", "::", "255.255.255.255"}


def _real_ip(candidate: str) -> str | None:
    if ":" in candidate and "::" not in candidate and candidate.count(":") != 7:
        return None  # clock times (08:27:07) and MACs: cheap to reject before ipaddress
    try:
        ip = ipaddress.ip_address(candidate)
    except ValueError:
        return None
    if str(ip) in _KEEP_IPS or ip.is_loopback or ip.is_unspecified:
        return None
    return candidate


class Obfuscator:
    """Replace host names and IP addresses by stable aliases (``host-1``, ``ip-1``).

    Host names cannot be told apart from words in free text, so only the names it is given (the
    collector passes the host's own names, /etc/hosts and --dist-init-addr hosts) are replaced;
    IPv4/IPv6 addresses are found by shape (loopback and 0.0.0.0 kept).

    >>> ob = Obfuscator(["gpu-node-17"])
    >>> ob.apply("ssh root@10.1.230.174 on gpu-node-17.example.com, again 10.1.230.174, lo 127.0.0.1")
    'ssh root@ip-1 on host-1.example.com, again ip-1, lo 127.0.0.1'
    >>> ob.mapping
    {'10.1.230.174': 'ip-1', 'gpu-node-17': 'host-1'}
    """

    def __init__(self, hostnames: Iterable[str] = ()) -> None:
        self.mapping: dict[str, str] = {}
        self._hosts: list[str] = []
        for name in hostnames:
            self.add_hostname(name)

    def add_hostname(self, name: str) -> None:
        name = name.strip()
        if len(name) < 2 or name in self._hosts or name.lower() in ("localhost", "localhost.localdomain"):
            return
        if _real_ip(name) or name.startswith(("host-", "ip-")):
            return
        self._hosts.append(name)
        self._hosts.sort(key=len, reverse=True)  # longest first: the FQDN before its short name

    def alias(self, original: str, kind: str) -> str:
        if original not in self.mapping:
            n = sum(1 for v in self.mapping.values() if v.startswith(kind + "-")) + 1
            self.mapping[original] = f"{kind}-{n}"
        return self.mapping[original]

    def _sub_ip(self, pattern: re.Pattern[str], text: str) -> str:
        def replace(m: re.Match[str]) -> str:
            return self.alias(m.group(0), "ip") if _real_ip(m.group(0)) else m.group(0)

        return pattern.sub(replace, text)

    def apply(self, text: str) -> str:
        text = self._sub_ip(_IPV4, text)
        text = self._sub_ip(_IPV6, text)
        for name in self._hosts:
            if name not in text:  # a substring test is far cheaper than the regex
                continue
            pattern = re.compile(r"(?<![A-Za-z0-9-])" + re.escape(name) + r"(?![A-Za-z0-9-])")
            text = pattern.sub(lambda _m, n=name: self.alias(n, "host"), text)
        return text

    def apply_bytes(self, data: bytes) -> bytes:
        """:meth:`apply` on bytes that may not be UTF-8."""
        text = data.decode("utf-8", "surrogateescape")
        new_text = self.apply(text)
        return data if new_text == text else new_text.encode("utf-8", "surrogateescape")


def chain(*steps: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    """Compose byte transforms left to right.

    >>> chain(lambda b: b + b"1", lambda b: b + b"2")(b"x")
    b'x12'
    """

    def run(data: bytes) -> bytes:
        for step in steps:
            data = step(data)
        return data

    return run


# ----------------------------------------------------------------------------------------------
# Event frames: the report redacts what it reads, so a raw log handed to `report` leaks nothing

#: A cheap superset of every rule's trigger (case-insensitive). Rows that don't match it cannot
#: hold a secret the rules would find, so only the few that do go through the byte rules.
FRAME_PREFILTER = (
    r"(?i)hf_|sk-|akia|asia|bearer|://[^\s/@]*:[^\s/@]*@|api.?key|-token[=\s\x00\"',]|token=|token['\"]?\s*[=:]\s*['\"]"
    r"|secret|passw|aws_|_key|auth-token|access-token|x-[a-z0-9-]*token|authorization"
)
# Why FRAME_PREFILTER_PLAIN suffices without FRAME_SPECIAL, rule by rule: url_password needs '@';
# hf_token and aws_secret '_'; env_secret and unquoted key=value '='; quoted kwargs and argv lists a
# quote; YAML and Kubernetes lists a newline; a --flag's value after '=' or NUL needs those; what is left
# is in the plain pattern (matched ASCII-case-insensitively, as the rules see the text).
#: Characters some rule needs in nearly every shape: '=' (env, unquoted key=value), '@' (URL password),
#: quotes (JSON, reprs, argv lists), newline (YAML and Kubernetes lists), NUL (argv), '_' (hf_, aws_).
FRAME_SPECIAL = r"[=@'\"\n\x00_]"
#: What can still match a row without FRAME_SPECIAL: an Authorization/Bearer header, sk-/AKIA/ASIA keys,
#: and a --*-key/token/secret/password flag with its value after a space or tab. Batch lines
#: ("#new-token: 12") hold none of it, and this scans several times faster than FRAME_PREFILTER.
FRAME_PREFILTER_PLAIN = (r"(?i-u)authorization|bearer|sk-|akia|asia|-(?:api-?key|token|secret|passw(?:or)?d)[ \t]"
                         r"|api-?key[ \t]*:|auth-token|access-token|x-[a-z0-9-]*token")


#: Kinds whose ``attrs`` is a flat JSON object of snake_case keys ([a-z0-9_]: parsers.sglang._snake) and
#: scalar values: the batch lines, >99% of a big log's rows.
BATCH_KINDS = ("decode_batch", "prefill_batch")
#: Such attrs with no string value (no '": "') hold keys, numbers, true/false/null, '{', '}', ', ' and
#: ': ' only. Rule by rule, only a key can then match: hf_token (a key "hf_" + 20 letters or digits) and
#: aws_secret ("aws_secret_access_key": 16+ digits). The others need something such JSON never holds:
#: '-' before a letter (cli flags, sk-), '=', '@', '://', a quote after the colon, a space or tab after
#: bearer/authorization's keyword, upper case (AKIA, env names) or a newline.
BATCH_ATTRS_PREFILTER = r"hf_|aws_"


def redact_frame(frame, columns: Iterable[str] = ("text", "attrs", "fields", "figures")):
    """Redact string columns of a polars frame; returns the frame and the counts per kind.

    >>> import polars as pl
    >>> df = pl.DataFrame({"text": ["Decode batch, #token: 12, token usage: 0.50", "--api-key s3cret"],
    ...                    "attrs": [None, '{"args": {"api_key": "s3cret"}}']})
    >>> out, counts = redact_frame(df)
    >>> out["text"].to_list()
    ['Decode batch, #token: 12, token usage: 0.50', '--api-key [REDACTED:cli_secret]']
    >>> out["attrs"].to_list()[1]
    '{"args": {"api_key": "[REDACTED:kwarg_secret]"}}'
    >>> sum(counts.values())
    2
    """
    import polars as pl

    counts: Counter[str] = Counter()
    updates = []
    for name in columns:
        if name not in frame.columns or frame.height == 0:
            continue
        col = frame.get_column(name)
        if isinstance(col.dtype, pl.Struct):  # the typed members: their strings (an OOM's phase)
            if col.null_count() < col.len():  # a chunk of batch lines has no figures: nothing to walk
                _redact_struct(col, counts, updates)
            continue
        if frame.height < _JOINED_ROWS and not _joined_hit(col):
            continue  # not one row of the column can match the prefilter, so none holds a secret
        cand = _candidates(col)
        if cand.len() == 0:
            continue
        if name == "attrs" and "kind" in frame.columns:
            hits = _batch_attrs_hits(frame.get_column("kind"), col, cand)
            if hits is not None:
                _apply(col, hits, counts, updates)
                continue
        _apply(col, _scatter(col.len(), cand, _hits(col.gather(cand), col.len())), counts, updates)
    return (frame.with_columns(updates) if updates else frame), counts


def _candidates(col):
    """The rows of a string column that any prefilter could match, ascending: those the compiled
    fx_may_secret flags (parsers.bulkscan.may_hold_secret, a superset of JOINED_PREFILTER's rows), or
    without it every non-null row. The prefilters then run on these rows alone; the rest could only
    have come out False, so the hits are the same as of the prefilters on every row."""
    import polars as pl

    from parsers import bulkscan

    if bulkscan.available():
        flags = pl.Series(bulkscan.may_hold_secret(col.to_arrow()))
        return flags.cast(pl.Boolean).arg_true()
    return col.is_not_null().arg_true()


def _scatter(n: int, idx, values):
    """A Boolean column of ``n`` rows, False but at ``idx``, where it is ``values``."""
    import polars as pl

    out = pl.repeat(False, n, dtype=pl.Boolean, eager=True)
    return out.scatter(idx, values) if idx.len() else out


def _hits(col, total: int | None = None):
    """The rows of a string column the prefilter sends to the rules. ``total``: the rows of the column
    ``col`` was gathered from, when it holds only the candidates (the choice of path counts those: every
    row with a special character is a candidate, so the choice is the same as on the whole column)."""
    special = col.str.contains(FRAME_SPECIAL).fill_null(False)
    n_special = int(special.sum())
    if n_special * 4 > (col.len() if total is None else total):  # mostly special rows (JSON attrs): the full prefilter on all
        return col.str.contains(FRAME_PREFILTER).fill_null(False)
    # rows without a special character cannot match more than the plain prefilter
    hits = col.str.contains(FRAME_PREFILTER_PLAIN).fill_null(False)
    if n_special:
        sidx = special.arg_true()
        hits = hits.scatter(sidx, col.gather(sidx).str.contains(FRAME_PREFILTER).fill_null(False))
    return hits


def _redact_struct(col, counts: Counter[str], updates: list) -> None:
    """Redact the string fields of a struct column (parsers.schema.FIELDS, FIGURES) as string columns are."""
    import polars as pl

    children = []
    changed = False
    for f in col.struct.fields:
        child = col.struct.field(f)
        if child.dtype == pl.Utf8 and child.null_count() < child.len() and \
                (child.len() >= _JOINED_ROWS or _joined_hit(child)):
            new: list = []
            cand = _candidates(child)
            _apply(child, _scatter(child.len(), cand, _hits(child.gather(cand), child.len())), counts, new)
            if new:
                child, changed = new[0].alias(f), True
        children.append(child)
    if changed:
        updates.append(pl.select(pl.when(col.is_not_null()).then(pl.struct(children))).to_series().alias(col.name))


#: A column of fewer rows than this is first searched as one string (its rows joined by newlines): one
#: search instead of a handful of per-row passes, each with its own set-up, which is what a small file's
#: frame costs; most small files have no match at all. A match anywhere in a row is a match in the joined
#: string, so a joined string without one proves every row clean. (A big chunk's column searched whole
#: with the case-folded union is slower than the per-row passes below, measured: not done.)
_JOINED_ROWS = 4096


def _unflagged(pattern: str) -> str:
    return pattern.removeprefix("(?i)").removeprefix("(?i-u)")


#: Every prefilter the per-row path below may use, at once (case folded: a superset of each): a string
#: none of them matches cannot send a row to the rules.
JOINED_PREFILTER = "(?i)(?:" + "|".join(_unflagged(p) for p in (FRAME_PREFILTER, FRAME_PREFILTER_PLAIN,
                                                                 BATCH_ATTRS_PREFILTER)) + ")"


def _joined_hit(col) -> bool:
    """Whether any prefilter matches anywhere in the column's rows (joined with newlines)."""
    joined = col.drop_nulls().str.join("\n")
    return bool(joined.str.contains(JOINED_PREFILTER).fill_null(False).item())


def _apply(col, hits, counts: Counter[str], updates: list) -> None:
    """Redact the rows of ``col`` the prefilter flagged (``hits``)."""
    import polars as pl

    idx = hits.arg_true()
    if idx.len() == 0:
        return
    new_values = []
    for value in col.gather(idx).to_list():
        red, c = redact_text(value)
        counts.update(c)
        new_values.append(red)
    updates.append(col.scatter(idx, pl.Series(new_values, dtype=pl.Utf8)))


def _batch_attrs_hits(kind, attrs, cand):
    """Prefilter hits of an attrs column whose rows are mostly batch lines, or None to use the general
    path. Batch rows with a string value and all other rows take FRAME_PREFILTER. ``cand``: the rows
    any prefilter could match (:func:`_candidates`); only they are searched."""
    batch = kind.is_in(BATCH_KINDS).fill_null(False)
    # a row that is no candidate holds no '"' (or is null): numeric when it is a batch row
    has_string = _scatter(attrs.len(), cand, attrs.gather(cand).str.contains('": "', literal=True).fill_null(False))
    numeric = batch & ~has_string
    n_numeric = int(numeric.sum())
    if n_numeric * 2 < attrs.len():
        return None
    sub, sub_numeric = attrs.gather(cand), numeric.gather(cand)
    hits = sub.str.contains(BATCH_ATTRS_PREFILTER).fill_null(False)
    rest = (~sub_numeric).arg_true()
    if rest.len():
        hits = hits.scatter(rest, sub.gather(rest).str.contains(FRAME_PREFILTER).fill_null(False))
    return _scatter(attrs.len(), cand, hits)

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

MARKER_PREFIX = "[REDACTED:"


def marker(kind: str) -> str:
    """The fixed replacement text for a secret of ``kind``.

    >>> marker("hf_token")
    '[REDACTED:hf_token]'
    """
    return f"{MARKER_PREFIX}{kind}]"


# A value as it appears after `=` or a space: quoted, or a run without separators. NUL counts as a
# separator because /proc/PID/cmdline and environ are NUL-separated.
_VALUE = r"""(?:"[^"\n\x00]*"|'[^'\n\x00]*'|[^\s\x00"',;&|)]+)"""

# (kind, compiled pattern, group holding the secret). Order matters only for which kind is
# counted when rules overlap: specific token shapes first, then the contexts that carry them.
_RULES: list[tuple[str, re.Pattern[str], str]] = [
    ("url_password", re.compile(r"(?<![\w.+-])[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s\x00:/@\[\]]*:(?P<v>[^\s\x00@/]+)@"), "v"),
    # "Authorization: Bearer|Basic|Token X"; a bare "bearer X" only when X looks like a token
    ("bearer", re.compile(r"(?i)\bauthorization\s*[:=]\s*(?:bearer|basic|token)\s+(?P<v>[A-Za-z0-9._~+/=-]{6,})"), "v"),
    ("bearer", re.compile(r"(?i)\bbearer\s+(?P<v>(?=[A-Za-z0-9._~+/=-]*\d)[A-Za-z0-9._~+/=-]{16,})"), "v"),
    ("hf_token", re.compile(r"(?<![A-Za-z0-9_])(?P<v>hf_[A-Za-z0-9]{20,})"), "v"),
    ("openai_key", re.compile(r"(?<![A-Za-z0-9_-])(?P<v>sk-(?:proj-|ant-|svcacct-|admin-)?[A-Za-z0-9_-]{20,})"), "v"),
    ("aws_key_id", re.compile(r"(?<![A-Za-z0-9])(?P<v>(?:AKIA|ASIA)[A-Z0-9]{16})(?![A-Za-z0-9])"), "v"),
    ("aws_secret", re.compile(r"(?i)\baws_secret_access_key[\"']?\s*[=:]\s*[\"']?(?P<v>[A-Za-z0-9/+=]{16,})"), "v"),
    # --api-key VALUE, --api-key=VALUE, --admin-api-key, --hf-token, --db-password … (space, '=' or NUL)
    ("cli_secret", re.compile(
        r"(?i)(?<![\w-])--[a-z0-9-]*(?:api-key|apikey|token|secret|password|passwd)(?:=|[ \t]+|\x00)(?!--)(?P<v>" + _VALUE + ")"), "v"),
    # env style: HF_TOKEN=…, *_TOKEN=, *_SECRET=, *_PASSWORD=, *_KEY= (upper case, as environments are)
    ("env_secret", re.compile(
        r"(?<![A-Za-z0-9_])[A-Z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|_KEY|APIKEY)=(?P<v>" + _VALUE + ")"), "v"),
    # Python reprs and JSON: api_key='…', "hf_token": "…" (SGLang prints server_args this way)
    ("kwarg_secret", re.compile(
        r"(?i)(?<![A-Za-z0-9_])[\"']?[a-z0-9_]*(?:api_key|apikey|token|secret|password|passwd)[\"']?\s*[=:]\s*"
        r"(?P<q>[\"'])(?P<v>[^\"'\n\x00]+)(?P=q)"), "v"),
]


def _is_marker(value: str) -> bool:
    return value.strip("\"'").startswith(MARKER_PREFIX)


def _apply_rule(text: str, kind: str, pattern: re.Pattern[str], group: str, counts: Counter[str]) -> str:
    def replace(m: re.Match[str]) -> str:
        value = m.group(group)
        if not value or _is_marker(value):
            return m.group(0)
        if value[0] in "\"'" and value[-1] == value[0] and len(value) >= 2:
            inner = value[1:-1]
            if not inner:
                return m.group(0)
            new_value = value[0] + marker(kind) + value[0]
        else:
            new_value = marker(kind)
        counts[kind] += 1
        start, end = m.start(group) - m.start(0), m.end(group) - m.start(0)
        whole = m.group(0)
        return whole[:start] + new_value + whole[end:]

    return pattern.sub(replace, text)


def redact_text(text: str) -> tuple[str, Counter[str]]:
    """Replace every secret in ``text`` by its marker; return the text and counts per kind.

    >>> redact_text("curl -H 'Authorization: Bearer abcdefgh12345678' http://bob:pw@example.com/x")[0]
    "curl -H 'Authorization: Bearer [REDACTED:bearer]' http://bob:[REDACTED:url_password]@example.com/x"
    """
    counts: Counter[str] = Counter()
    for _ in range(4):  # to a fixed point: one replacement can expose another shape
        before = text
        for kind, pattern, group in _RULES:
            text = _apply_rule(text, kind, pattern, group, counts)
        if text == before:
            break
    return text, counts


def redact_bytes(data: bytes) -> tuple[bytes, Counter[str]]:
    """:func:`redact_text` on bytes; bytes that are not UTF-8 survive unchanged.

    >>> redact_bytes(b"\\xff AKIAABCDEFGHIJKLMNOP\\n")
    (b'\\xff [REDACTED:aws_key_id]\\n', Counter({'aws_key_id': 1}))
    """
    text = data.decode("utf-8", "surrogateescape")
    new_text, counts = redact_text(text)
    if not counts:
        return data, counts
    return new_text.encode("utf-8", "surrogateescape"), counts


# ----------------------------------------------------------------------------------------------
# Obfuscation

_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?!\.\d)(?!\w)")
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_KEEP_IPS = {"127.0.0.1", "0.0.0.0", "::1", "::", "255.255.255.255"}


def _real_ip(candidate: str) -> str | None:
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
            pattern = re.compile(r"(?<![A-Za-z0-9-])" + re.escape(name) + r"(?![A-Za-z0-9-])")
            if pattern.search(text):
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

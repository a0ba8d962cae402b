"""SGL-NCCL-009: NCCL's transport between the nodes failed (InfiniBand/RoCE completion errors, sockets closed).

NCCL's WARN lines name the transport that broke (failure_messages.md §4.1)::

    gpu-b:4107:4390 [3] NCCL WARN NET/IB : Got completion from peer 10.20.0.7<41522> with status=12 opcode=0 len=0
    vendor err 129 (Recv) localGid ::ffff:10.20.0.8 remoteGid ::ffff:10.20.0.7

The status is the verbs work-completion status (``enum ibv_wc_status``, rdma-core ``libibverbs/verbs.h``); NCCL
before 2.19 printed it as ``with error 12, opcode 0, len 0, vendor err 129``. Retry-exceeded (12) means the peer's
adapter never acknowledged: the link or the peer node is down, or the RoCE path drops packets (GID index, PFC /
lossless configuration, MTU). Flushed (5) is a queue pair already in error — the echo of an earlier failure.
``socketProgress: Connection closed by remote peer``, ``remote process exited or there was a network error`` and
Gloo's ``Connection reset by peer`` say a peer went away: a peer that died first (an OOM, a crash) explains them, else
the network does. Gloo's ``Connection closed by peer`` is an end-of-file, the peer process exiting, and is read as
that (SGL-RUN-001 names the peer) rather than as the link.

>>> status_of("NET/IB : Got completion from peer 10.0.0.2<1234> with status=12 opcode=0 len=0 vendor err 129 (Recv)")
12
>>> status_of("NET/IB : Got completion from peer [x] with error 5, opcode 29989, len 29993, vendor err 244 (Recv)")
5
"""

from __future__ import annotations

import ipaddress
import re

from forensics.facts.rows import Row, attrs, rows
from forensics.model import Finding, FlagChange, Timeline

from ._common import make_finding
from .nccl_timeout import rank_failures

_IB_COMPLETION = re.compile(r"NET/IB : Got completion from peer (\S+) with (?:status=|error )(\d+)")
_VENDOR = re.compile(r"vendor err (\d+)")
#: a peer's NCCL socket that would not connect (NCCL misc/socket.cc ``socketStartConnect: Connect to %s failed : %s``,
#: strerror; failure_messages.md §4.1 ``Call to {syscall} failed : {strerror}``)
_CONNECT = re.compile(r"socketStartConnect: Connect to (\S+) failed : ([^\n]{1,120})|"
                      r"Call to connect (?:failed|returned) ?: ?([^\n]{1,120})|"
                      # NCCL 2.19+ misc/socket.cc ``socketPollConnect: Connect to %s returned %d(%s) errno %d(%s)``
                      r"socketPollConnect: Connect to (\S+) returned (\d{1,4}\([^)\n]{1,80}\))|"
                      # NCCL 2.23+ misc/socket.cc ``socketConnectCheck``: ``%s: connect to %s returned %s, retrying
                      # (%d/%d) after sleep for %u msec`` (INFO), ``… exceeded error retry count …`` and ``%s: connect
                      # to %s failed : %s`` (WARN), %s = socketStartConnect / socketPollConnect
                      r"socket(?:Start|Poll)Connect: connect to (\S+) (?:returned |failed : ?)([^,\n]{1,120})")

#: the other documented transport failures (failure_messages.md §4.1, §4.2 code 6)
_TRANSPORT = re.compile(r"NET/IB : Got async event : (.+)|NET/IB : Unable to open device|"
                        r"socketProgress: Connection closed by remote peer|Socket recv failed while polling|"
                        r"\[Proxy Service \d+\] Failed to execute operation|"
                        r"remote process exited or there was a network error|ncclRemoteError|"
                        # Gloo's side of the same (failure_messages.md §4.6): a peer's connection reset. Its orderly
                        # close (``Connection closed by peer``, end-of-file) is the peer process exiting, not the link:
                        # parsers/failures.py reads it as ``peer_exited``
                        r"Connection reset by peer")

#: enum ibv_wc_status (rdma-core libibverbs/verbs.h): the completion statuses NCCL reports
WC_STATUS = {
    4: "local protection error (a memory registration the adapter rejects: GPUDirect RDMA / nvidia-peermem)",
    5: "work request flushed (the queue pair was already in error: the echo of an earlier failure)",
    8: "local access error (memory registration)",
    10: "remote access error (the peer's memory registration)",
    11: "remote operation error",
    12: "transport retry counter exceeded (the peer's adapter never acknowledged: link down or flapping, the peer "
        "node gone, or a RoCE path that drops packets)",
    13: "receiver-not-ready retry exceeded (the peer stopped posting receives: it hung or died)",
    20: "response timeout",
    21: "general error",
}
#: statuses that say the fabric or the peer failed first (not an echo of another failure on the same queue pair)
_FIRST_FAILURES = frozenset({4, 8, 10, 11, 12, 13, 20, 21})


def _connect_parts(m: re.Match[str]) -> tuple[str | None, str]:
    """(the peer's address or None, the reason) of a :data:`_CONNECT` match, whichever wording it is."""
    if m.group(1):
        return m.group(1), m.group(2)
    if m.group(4):
        return m.group(4), m.group(5)
    if m.group(6):
        return m.group(6), m.group(7)
    return None, m.group(3)


def unroutable(address: str) -> bool:
    """A link-local (169.254.0.0/16, fe80::/10: RFC 3927, RFC 4291) or loopback address: no other host can reach the
    peer there, so the peer advertised it from an interface that does not route between the nodes."""
    host = address.split("<", 1)[0].strip("[]").split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_link_local or ip.is_loopback


def routable_interface(tl: Timeline) -> str | None:
    """The interface NCCL's INFO lines name with a routable address (parsers/failures.py ``nccl_interface``)."""
    for r in rows(tl, "nccl_info"):
        a = attrs(r)
        if a.get("net_if") and a.get("net_ip") and not unroutable(str(a["net_ip"])):
            return str(a["net_if"])
    return None


def unroutable_interfaces(tl: Timeline) -> list[tuple[str, str]]:
    """The (interface, address) pairs of NCCL's own socket-interface lists that no other host can reach.

    NCCL's socket transport makes one network device of every interface it lists (nccl src/transport/net_socket.cc
    (v2.18-2.27) ``NET/Socket : Using [0]… [1]…``) and its channels use them all, so a link-local or loopback entry
    (a per-node link such as a cloud's metadata or pod-identity link) is an address this node hands its peers for
    some connections; NCCL_SOCKET_IFNAME selects the interfaces (NCCL's documentation, Environment Variables:
    a prefix list, ``^`` to exclude; by default ``lo`` and ``docker*`` are excluded and nothing else).
    """
    seen: dict[tuple[str, str], None] = {}
    for r in rows(tl, "nccl_info"):
        for pair in attrs(r).get("net_ifs") or []:
            if isinstance(pair, list | tuple) and len(pair) == 2 and unroutable(str(pair[1])):
                seen[(str(pair[0]), str(pair[1]))] = None
    return list(seen)


def status_of(text: str) -> int | None:
    m = _IB_COMPLETION.search(text)
    return int(m.group(2)) if m else None


def _transport_rows(tl: Timeline) -> list[Row]:
    return [r for r in rows(tl, "failure", "nccl_error", "nccl_info")
            if (attrs(r).get("failure") in ("nccl_error", "store_timeout", None) or r.get("kind") != "failure")
            and (_IB_COMPLETION.search(r.get("text") or "") or _TRANSPORT.search(r.get("text") or "")
                 or _CONNECT.search(r.get("text") or ""))]


def detect(tl: Timeline) -> list[Finding]:
    hits = _transport_rows(tl)
    if not hits:
        return []
    statuses = sorted({s for r in hits if (s := status_of(r.get("text") or "")) is not None})
    peers = sorted({m.group(1) for r in hits if (m := _IB_COMPLETION.search(r.get("text") or ""))})
    vendor = sorted({int(m.group(1)) for r in hits if (m := _VENDOR.search(r.get("text") or ""))})
    first = [s for s in statuses if s in _FIRST_FAILURES]
    died = rank_failures(tl)
    connects = [m for r in hits if (m := _CONNECT.search(r.get("text") or ""))]
    if connects and not statuses:
        m = connects[0]
        where, why = _connect_parts(m)
        summary = (f"NCCL could not connect to a peer's socket{f' at {where}' if where else ''} ({why.strip()}): a "
                   "firewall between the nodes (NCCL uses its own ephemeral TCP ports besides the rendezvous port), "
                   "the wrong network interface for NCCL (NCCL_SOCKET_IFNAME), or a peer that is not listening — the "
                   "collectives over that link cannot start.")
    elif statuses:
        what = "; ".join(f"status {s}: {WC_STATUS.get(s, 'see enum ibv_wc_status')}" for s in statuses)
        summary = (f"NCCL's InfiniBand/RoCE transport failed: work completions from peer "
                   f"{', '.join(peers[:3]) or '?'} came back in error ({what}). The collectives that use that link "
                   "cannot complete, so the ranks hang or abort.")
    else:
        summary = ("NCCL lost its connection to a peer (closed by the remote side, a network error or the remote "
                   "process exiting): the collectives over that link cannot complete.")
    flags: list[FlagChange] = []
    local = sorted({w.split("<", 1)[0] for m in connects if (w := _connect_parts(m)[0]) and unroutable(w)})
    listed = [] if statuses else unroutable_interfaces(tl)
    if local and not statuses:
        m = next((c for c in connects if (w := _connect_parts(c)[0]) and unroutable(w)), connects[0])
        where, why = _connect_parts(m)
        summary = (f"NCCL could not connect to a peer's socket at {where} ({why.strip()}): "
                   f"{', '.join(local)} is a link-local or loopback address, which no other host can reach — the peer "
                   "that advertised it bound NCCL to an interface that does not route between the nodes, so "
                   "NCCL_SOCKET_IFNAME must name the one that does, on every node.")
        if listed:
            summary += (" NCCL's own interface list here has it too ("
                        + ", ".join(f"{i}:{a}" for i, a in listed[:3]) + "): its socket transport uses every "
                        "interface it lists, so the link-local one must be left out.")
    elif listed and (connects or hits):
        local = sorted({a for _, a in listed})
        summary = ("NCCL's socket transport lists an interface no other host can reach ("
                   + ", ".join(f"{i}:{a}" for i, a in listed[:3]) + ", link-local or loopback) beside the routable "
                   "one; it uses every interface it lists, so connections over that one fail and the collectives "
                   "between the nodes cannot complete — NCCL_SOCKET_IFNAME must leave it out, on every node.")
    if local and not statuses and (iface := routable_interface(tl)):
        why = ("the peer's advertised address was link-local/loopback" if not listed else
               "NCCL listed " + ", ".join(i for i, _ in listed[:3]) + " beside it, which no other host reaches "
               "(or exclude just those: ^lo,docker," + ",".join(i for i, _ in listed[:3]) + ")")
        flags.append(FlagChange("NCCL_SOCKET_IFNAME", None, iface,
                                f"NCCL's own lines show {iface} with a routable address on this node; {why} "
                                "(set GLOO_SOCKET_IFNAME the same)"))
    if died:
        summary += " A rank also failed on its own in the input; if it failed first, this is its echo."
    reasons = []
    if died:
        reasons.append("a rank failed on its own as well: which came first decides between the fabric and the peer")
    if statuses and not first:
        reasons.append("only flushed completions are in the input: the error that put the queue pair in error is not")
    if not statuses and not connects:
        reasons.append("the message says a peer went away, not whether the peer or the network failed")
    if connects and not statuses and not local:
        reasons.append("a refused or unreachable connection does not say which of firewall, interface or peer: "
                       "`nc -zv` from one node to the other's NCCL port, and the interface NCCL chose (NCCL INFO "
                       "'NET/Socket : Using'), would")
    actions = ["Test the fabric between the two hosts outside the engine: `ibstat` / `ibv_devinfo` (port state, "
               "link layer), `ib_write_bw` between them, then nccl-tests' all_reduce_perf over both nodes.",
               "On RoCE: the GID index (NCCL_IB_GID_INDEX, `show_gids`), lossless Ethernet (PFC/ECN) on every switch "
               "port, the same MTU end to end; NCCL_IB_HCA naming the adapters that are cabled.",
               "Read the peer's log for the moment of the first error: a peer that crashed or was killed first is "
               "the cause, and this error its echo."]
    if (connects or listed) and not statuses:
        actions[:2] = ["From each node to the other: `nc -zv <peer> <port>` on the port the WARN names; open the "
                       "ports between the nodes or stop the host firewall there (`iptables -S`, `firewall-cmd "
                       "--list-all`, `ufw status`) — pinging proves nothing, NCCL's ports are TCP.",
                       "Pin NCCL and Gloo to the interface that routes between the nodes (NCCL_SOCKET_IFNAME, "
                       "GLOO_SOCKET_IFNAME), the same on every node; check `NCCL INFO NET/Socket : Using` for the one "
                       "NCCL chose."]
    return [make_finding(
        "SGL-NCCL-009",
        summary=summary,
        evidence=hits[:6],
        confidence="high" if (first or (local and flags)) and not died else
        "medium" if first or statuses or connects else "low",
        confidence_reason="; ".join(reasons) or None,
        figures={"wc_statuses": statuses or None, "vendor_errors": vendor or None, "peers": peers or None,
                 "unroutable_addresses": local or None},
        actions=actions,
        flags=flags,
    )]

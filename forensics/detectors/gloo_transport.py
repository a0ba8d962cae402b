"""SGL-NCCL-013: Gloo could not connect the ranks' CPU group at distributed start-up.

Both engines create a Gloo process group next to NCCL's (the CPU group of the world and of each parallel group:
SGLang's and vLLM's ``GroupCoordinator``). Its set-up connects every rank to every other rank over TCP, on the
address of the interface Gloo binds (pytorch torch/csrc/distributed/c10d/ProcessGroupGloo.cpp (2.x)): the one
GLOO_SOCKET_IFNAME names, else the address the host name resolves to. When the host name resolves to no local
address Gloo says so and binds loopback instead::

    [rank6]:[W0212 07:41:19 ProcessGroupGloo.cpp:715] Warning: Unable to resolve hostname to a (local) address.
    Using the loopback address as fallback. Manually set the network interface to bind to with GLOO_SOCKET_IFNAME.
    [rank6]:[E0212 07:41:49 ProcessGroupGloo.cpp:143] Gloo connectFullMesh failed with [../third_party/gloo/gloo/
    transport/tcp/pair.cc:144] timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:41877
    (rank=6, size=8, local=[127.0.0.1])

A rank advertises that address to its peers through the rendezvous store, so a peer on another node that dials
127.0.0.0/8 (RFC 1122 §3.2.1.3: loopback never leaves the host) reaches itself and is refused: the group never
forms and the start-up dies with ``RuntimeError: Gloo connectFullMesh failed …`` (the container's host name under
``hostNetwork`` resolving only to 127.0.0.1 is the common way there). The fix is GLOO_SOCKET_IFNAME naming the
interface the nodes reach each other on, and NCCL_SOCKET_IFNAME the same (NCCL picks its interface on its own
rules). A routable address that is refused or times out is a blocked port (Gloo connects on ephemeral ports, not
only the rendezvous port), a host firewall, or the wrong one of several interfaces; ``no error`` from pair.cc is the
peer closing the connection (a peer rank that died or gave up first). The fallback warning alone is no failure: one
node's ranks reach each other on loopback. A failure line that names no address (``no error`` with nothing after it)
leaves the bound address unknown: with GLOO_SOCKET_IFNAME unset the interface is proposed as the first thing to pin
(reference/failure_messages.md §4.6; PyTorch's own advice in ProcessGroupGloo.cpp's fallback warning), while named
routable addresses keep the port/firewall reading without it.

The rows are parsers/failures.py ``gloo_transport`` facts (``dist_transport``; both engines' parsers read the
ProcessGroupGloo lines, the failure scan any other text); a traceback or exception row whose text holds the
connect failure counts too (failure_messages.md §4.6, Gloo's side of the rendezvous).
"""

from __future__ import annotations

from forensics.facts.launch import launch_rows
from forensics.facts.rows import Row, attrs, rank_of, rows
from forensics.model import Finding, FlagChange, Timeline
from parsers.failures import gloo_transport

from ._common import make_finding
from .nccl_transport import routable_interface, unroutable

#: the value proposed when the input does not show the interface the nodes share
IFACE_PLACEHOLDER = "<iface>"
#: rows whose text may hold the connect failure (an engine's exception, the failure scan's traceback)
_RAISED = ("exception", "scheduler_exception", "failure")


def _facts(row: Row) -> dict:
    a = attrs(row)
    if a.get("transport") == "gloo":
        return a
    return gloo_transport(row.get("text") or "") or {}


def _env(tl: Timeline) -> dict[str, str]:
    env: dict[str, str] = {}
    for r in launch_rows(tl):
        env.update({str(k): str(v) for k, v in (attrs(r).get("env") or {}).items()})
    return env


def _interface(tl: Timeline, env: dict[str, str]) -> tuple[str, str]:
    """The interface to name and where it comes from: NCCL's own setting when it is one name (not NCCL's ``^``/``=``
    list syntax, which Gloo does not read), the interface NCCL's INFO lines show routable, else a placeholder."""
    nccl = env.get("NCCL_SOCKET_IFNAME", "")
    if nccl and nccl[:1] not in "^=" and "," not in nccl:
        return nccl, "the launch's NCCL_SOCKET_IFNAME"
    iface = routable_interface(tl)
    if iface:
        return iface, "the interface NCCL's own lines show with a routable address"
    return IFACE_PLACEHOLDER, ("the input does not show the interface: name the one that carries the nodes' own "
                               "addresses (`ip -o -4 addr show`), the same on every node")


def _unreached(env: dict[str, str], fallback: list[Row]) -> tuple[str, str] | None:
    """The launch sets GLOO_SOCKET_IFNAME, yet a rank fell back to loopback: the variable never reached that process.

    torch binds the interface GLOO_SOCKET_IFNAME names when the variable is in its environment and only otherwise
    resolves the host name, whose failure is the fallback warning (pytorch torch/csrc/distributed/c10d/
    ProcessGroupGloo.cpp (2.x) ``createDefaultDevice``), so the warning proves the rank ran without it. A Ray worker
    (vLLM's Ray executor) does not inherit the driver's shell: vLLM copies to its Ray actors only its own variables
    and, in recent releases, names with the prefixes VLLM_, LMCACHE_, NCCL_, UCX_, HF_, HUGGING_FACE_ (vllm
    vllm/ray/ray_env.py ``get_env_vars_to_copy``; VLLM_RAY_EXTRA_ENV_VARS_TO_COPY adds more); a worker on another
    node otherwise runs with the environment its node's ``ray start`` had."""
    launch = env.get("GLOO_SOCKET_IFNAME")
    if not launch or not fallback:
        return None
    ray = [r for r in fallback if r.get("envelope") == "ray" or str(r.get("container") or "").startswith("Ray")
           or str(attrs(r).get("process") or "").startswith("Ray")]
    # the worker's node: Ray's ``(RayWorkerWrapper pid=…, ip=…)`` tag, kept as the row's host or its attrs' ip
    where = next((str(w) for r in ray if (w := r.get("host") or attrs(r).get("ip"))), None)
    if ray:
        said = (f"The launch sets GLOO_SOCKET_IFNAME={launch}, yet a Ray worker{f' on {where}' if where else ''} fell "
                "back — the variable never reached it: vLLM copies to its Ray workers only its own variables and the "
                "VLLM_/NCCL_/UCX_/HF_ prefixes, not GLOO_SOCKET_IFNAME, and a worker on another node runs with the "
                "environment its node's `ray start` had.")
    else:
        said = (f"The launch sets GLOO_SOCKET_IFNAME={launch}, yet this rank fell back — torch falls back only when "
                "the variable is not in the process's environment, so it never reached that rank.")
    return said, ("Export GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME) in the environment every node's workers start "
                  "from — before `ray start` on each node, or in the pod spec of every leader and worker — or list "
                  "it in VLLM_RAY_EXTRA_ENV_VARS_TO_COPY where the vLLM release has it; on the `vllm serve` command "
                  "line it reaches the head node's processes only.")


def detect(tl: Timeline) -> list[Finding]:
    transport = rows(tl, "dist_transport")
    fails = [r for r in transport if _facts(r).get("event") == "connect_full_mesh_failed"]
    fails += [r for r in rows(tl, *_RAISED) if _facts(r).get("event") == "connect_full_mesh_failed"]
    if not fails:
        return []
    fallback = [r for r in transport if _facts(r).get("event") == "loopback_fallback"]
    facts = [_facts(r) for r in fails]
    addresses = sorted({str(a) for f in facts for k in ("remote_ip", "local_ip") if (a := f.get(k))})
    local_only = [a for a in addresses if unroutable(a)]
    loopback = bool(local_only or fallback)
    errors = sorted({str(f["error"]) for f in facts if f.get("error")})
    ranks = sorted({x for r in fails if (x := rank_of(r)) is not None}
                   | {int(f["gloo_rank"]) for f in facts if f.get("gloo_rank") is not None})
    world = max((int(f["world_size"]) for f in facts if f.get("world_size")), default=None)
    remote = next((f"{f['remote_ip']}:{f['remote_port']}" if f.get("remote_port") else str(f["remote_ip"])
                   for f in facts if f.get("remote_ip")), None)
    env = _env(tl)
    flags: list[FlagChange] = []
    what = ("Gloo could not connect the ranks' CPU group at start-up (connectFullMesh failed"
            + (f": {errors[0]}" if errors else "") + (f", dialling {remote}" if remote else "") + ")")
    if loopback:
        why = ("Gloo said the host name resolves to no local address and bound the loopback address instead"
               if fallback else f"{', '.join(local_only)} is a loopback or link-local address")
        summary = (f"{what}. {why}: a rank advertises the address Gloo bound, and loopback never leaves its host, so a "
                   "peer on another node that dials it reaches itself and is refused — GLOO_SOCKET_IFNAME must name "
                   "the interface the nodes reach each other on, on every node (NCCL_SOCKET_IFNAME the same).")
        iface, source = _interface(tl, env)
        if env.get("GLOO_SOCKET_IFNAME") != iface:
            flags.append(FlagChange("GLOO_SOCKET_IFNAME", env.get("GLOO_SOCKET_IFNAME"), iface,
                                    f"Gloo bound loopback, which no other node reaches; {source}"))
        if not env.get("NCCL_SOCKET_IFNAME"):
            flags.append(FlagChange("NCCL_SOCKET_IFNAME", None, iface,
                                    "NCCL chooses its interface by its own rules: pin it to the same one"))
    else:
        peer_closed = any(e.lower().startswith("no error") for e in errors)
        if not addresses and not env.get("GLOO_SOCKET_IFNAME"):
            # the line names no address, so which one Gloo bound is unknown: on a multi-homed node the host name's
            # address may sit on a network the peers do not share; pinning the interface is the cheap first step
            # and rules that cause out (routable addresses named in the line say the interface was right)
            iface, source = _interface(tl, env)
            flags.append(FlagChange("GLOO_SOCKET_IFNAME", None, iface,
                                    "unset in the input and the failure names no address: without it Gloo binds "
                                    f"whatever the host name resolves to; {source}"))
        summary = (f"{what}. "
                   + ("pair.cc's 'no error' is the peer closing the connection: a peer rank that died or gave up "
                      "first, or a peer reached on the wrong interface. " if peer_closed else "")
                   + "A routable address that will not connect is a blocked port (Gloo connects on ephemeral TCP "
                   "ports, not only the rendezvous port), a host firewall between the nodes, or the wrong one of "
                   "several interfaces (GLOO_SOCKET_IFNAME unset, the host name resolving to another network).")
    actions = [
        "On every node: `getent hosts $(hostname)` (the address Gloo binds without GLOO_SOCKET_IFNAME) and "
        "`ip -o -4 addr show` (the interface on the nodes' network); set GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME "
        "to that interface on every node, one concrete name (Gloo does not read NCCL's `^`/`=` list syntax).",
        "From one node to the other: `nc -zv <peer address> <port>` on the port the error names; open the ports "
        "between the nodes or stop the host firewall there (`iptables -S`, `firewall-cmd --list-all`).",
        "Read the first failing rank's log on the other node: a rank that died first closes its connections, and "
        "this error is then its echo.",
    ]
    unreached = _unreached(env, fallback)
    if unreached:
        summary += " " + unreached[0]
        actions.insert(0, unreached[1])
    reasons = []
    if not loopback and not errors:
        reasons.append("the message's reason (refused, timed out, closed) is not in the input")
    if not loopback:
        reasons.append("a connection that will not complete does not say which of port, firewall or interface: "
                       "`nc -zv` between the nodes would")
    return [make_finding(
        "SGL-NCCL-013",
        summary=summary,
        evidence=[*fails[:4], *fallback[:2]],
        confidence="high" if loopback else "medium" if errors else "low",
        confidence_reason="; ".join(reasons) or None,
        ranks=ranks,
        figures={"addresses": addresses or None, "loopback": loopback, "loopback_fallback": bool(fallback),
                 "errors": errors or None, "world_size": world},
        flags=flags,
        actions=actions,
    )]

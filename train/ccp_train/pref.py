"""Set a TCP socket's preference ``w = <throughput, latency, loss>`` through ccp-agent.

The agent (``ccp-agent``, serving the kernel datapath) keys per-socket preferences by the
socket's own address and its peer's; this module reads both from the socket and sends one
request to the agent's control socket (line-delimited JSON over a unix stream socket, see
``docs/agent.md``). It works before the connection's flow exists (the agent keeps the
preference until the flow appears, for its ``pending_ttl_s``) and mid-flow (the flow's
next decision uses it)::

    import socket
    from ccp_train.pref import set_preference

    s = socket.create_connection(("10.0.2.2", 5201))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"ccp_mocc")
    set_preference(s, (0.1, 0.8, 0.1))      # latency first

The control socket is for root, holders of CAP_NET_ADMIN and the agent's configured group.
This file uses the standard library only, so an application can import it without the
training stack (or copy it).
"""

from __future__ import annotations

import json
import math
import socket
from collections.abc import Sequence
from typing import Any

__all__ = [
    "DEFAULT_CONTROL",
    "ControlError",
    "PreferenceError",
    "clear_preference",
    "request",
    "set_preference",
    "socket_pair",
]

DEFAULT_CONTROL = "/run/ccp/control.sock"
SUM_TOLERANCE = 1e-6
MAX_REPLY = 64 << 20


class ControlError(OSError):
    """The agent's control socket could not be reached, or did not answer."""


class PreferenceError(ValueError):
    """The agent (or this module, before asking it) refused the request.

    ``code`` is the agent's error code (``bad_w``, ``bad_address``, ``not_permitted``,
    ``full``, ...), or ``"bad_socket"`` / ``"bad_w"`` for checks made here.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _check_w(w: Sequence[float]) -> list[float]:
    try:
        v = [float(x) for x in w]
    except (TypeError, ValueError) as e:
        raise PreferenceError("bad_w", f"w must be three numbers, got {w!r}") from e
    if len(v) != 3:
        raise PreferenceError("bad_w", f"w needs 3 numbers <throughput,latency,loss>, got {len(v)}")
    for name, x in zip(("throughput", "latency", "loss"), v, strict=True):
        if not math.isfinite(x) or not 0.0 <= x <= 1.0:
            raise PreferenceError("bad_w", f"{name} weight {x} is not a number in [0, 1]")
    if abs(sum(v) - 1.0) > SUM_TOLERANCE:
        raise PreferenceError("bad_w", f"weights sum to {sum(v)}, not 1")
    return v


def _endpoint(addr: Any, family: int) -> str:
    host, port = addr[0], addr[1]
    if family == socket.AF_INET6:
        host = host.split("%", 1)[0]  # a scope id is not part of the flow's key
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def socket_pair(sock: socket.socket) -> tuple[str, str]:
    """The socket's (local, remote) addresses as the agent keys them, ``"ip:port"``."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        raise PreferenceError("bad_socket", f"not an IPv4/IPv6 socket: {sock.family!r}")
    if sock.type != socket.SOCK_STREAM:
        raise PreferenceError("bad_socket", "not a TCP (SOCK_STREAM) socket")
    try:
        local = sock.getsockname()
        remote = sock.getpeername()
    except OSError as e:
        raise PreferenceError(
            "bad_socket", f"the socket is not connected ({e.strerror or e}): connect it first"
        ) from e
    return _endpoint(local, sock.family), _endpoint(remote, sock.family)


def request(
    req: dict[str, Any], control: str = DEFAULT_CONTROL, timeout: float = 5.0
) -> dict[str, Any]:
    """Send one request to the agent and return its reply (raises on ``"ok": false``)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.settimeout(timeout)
            c.connect(control)
            c.sendall(json.dumps(req).encode() + b"\n")
            buf = bytearray()
            while not buf.endswith(b"\n"):
                chunk = c.recv(65536)
                if not chunk:
                    break
                buf += chunk
                if len(buf) > MAX_REPLY:
                    raise ControlError(f"{control}: reply longer than {MAX_REPLY} bytes")
    except PermissionError as e:
        raise ControlError(
            f"{control}: permission denied (the control socket is for root, CAP_NET_ADMIN "
            "or the agent's [control] group)"
        ) from e
    except (FileNotFoundError, ConnectionRefusedError) as e:
        raise ControlError(
            f"{control}: no agent there ({e.strerror}): is ccp-agent running with this --control?"
        ) from e
    except OSError as e:
        if isinstance(e, ControlError):
            raise
        raise ControlError(f"{control}: {e}") from e
    if not buf:
        raise ControlError(f"{control}: the agent closed the connection without a reply")
    try:
        reply = json.loads(buf)
    except ValueError as e:
        raise ControlError(f"{control}: the reply is not JSON: {e}") from e
    if not isinstance(reply, dict):
        raise ControlError(f"{control}: the reply is not a JSON object")
    if reply.get("ok") is not True:
        raise PreferenceError(str(reply.get("code", "error")), str(reply.get("error", reply)))
    return reply


def set_preference(
    sock: socket.socket,
    w: Sequence[float],
    control: str = DEFAULT_CONTROL,
    timeout: float = 5.0,
) -> dict[str, Any]:
    """Set the connected TCP socket ``sock``'s preference ``w = (thr, lat, loss)``.

    Returns the agent's reply: ``{"state": "applied", "sids": [...]}`` when the socket's flow
    is live (its next decision uses ``w``), ``{"state": "pending", "expires_in_s": ...}`` when
    the agent has not seen its flow yet. Raises :class:`PreferenceError` for a bad ``w`` or
    socket or a refusal, :class:`ControlError` when the agent cannot be reached.
    """
    v = _check_w(w)
    local, remote = socket_pair(sock)
    return request({"op": "set-pref", "local": local, "remote": remote, "w": v}, control, timeout)


def clear_preference(
    sock: socket.socket, control: str = DEFAULT_CONTROL, timeout: float = 5.0
) -> bool:
    """Remove ``sock``'s preference (its flow goes back to the agent's rules or ``--w``);
    returns whether there was one."""
    local, remote = socket_pair(sock)
    reply = request({"op": "clear-pref", "local": local, "remote": remote}, control, timeout)
    return bool(reply.get("removed"))

"""Why gRPC could not bind a listen address, in words: gRPC's own error names no cause
("Failed to bind to address"), so the daemon binds a plain socket there the same way and reads
the system's answer (in use, permission denied, not this machine's address)."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from pathlib import Path

from kernelpolicy.server.addresses import split_address
from kernelpolicy.server.sockets import socket_path

PICK = "pick another with --listen"
IN_USE = f"the address is in use (another kernelpolicy serve?); {PICK}"
UNKNOWN = f"the address is in use (another kernelpolicy serve?) or not valid here; {PICK}"
"""Where a plain socket binds where gRPC could not: gRPC alone knows why."""
UNPRIVILEGED = "/proc/sys/net/ipv4/ip_unprivileged_port_start"


def why_not_bound(address: str) -> str:
    """Why ``address`` (``unix:/path`` or ``HOST:PORT``, checked) cannot be listened on, after
    gRPC failed to bind it; :data:`UNKNOWN` where a plain socket binds there."""
    if address.startswith("unix:"):
        return _unix(socket_path(address))
    split = split_address(address)
    return _tcp(split.host or "", int(split.port))


def _unix(path: Path) -> str:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.bind(str(path))
    except OSError as exc:
        return _unix_reason(path, exc)
    finally:
        probe.close()
    with contextlib.suppress(OSError):  # the probe's own socket file; gone is as good
        path.unlink()
    return UNKNOWN


def _unix_reason(path: Path, exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return _no_permission(path.parent)
    if exc.errno == errno.EADDRINUSE:
        return IN_USE
    if exc.errno == errno.ENOENT:
        return f"no directory {path.parent}; create it, or {PICK}"
    return f"{exc.strerror or exc}; {PICK}"


def _no_permission(directory: Path) -> str:
    """The directory this user may not make the socket in, who may, and what to do."""
    try:
        info = directory.stat()
        whose = f" (owner uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):04o})"
    except OSError:
        whose = ""
    return (
        f"permission denied: uid {os.geteuid()}, who runs this daemon, may not create the "
        f"socket in {directory}{whose}; run serve as a user who may write there, or listen in "
        "a directory this user owns (the default is $XDG_RUNTIME_DIR/kernelpolicy/, "
        "/run/kernelpolicy/ for root)"
    )


def _tcp(host: str, port: int) -> str:
    try:
        found = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        return f"the host {host} is not known here ({exc.strerror}); give an IP address"
    for family, kind, proto, _, where in found:
        probe = socket.socket(family, kind, proto)
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
            probe.bind(where)
        except OSError as exc:
            return _tcp_reason(host, port, exc)
        finally:
            probe.close()
    return UNKNOWN


def _tcp_reason(host: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return IN_USE
    if exc.errno in (errno.EACCES, errno.EPERM):
        first = _first_unprivileged_port()
        return (
            f"permission denied: port {port} is below {first} ({UNPRIVILEGED}), which only root "
            f"or a process with CAP_NET_BIND_SERVICE may bind; pick a port from {first} up with "
            "--listen"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return (
            f"{host} is no address of this machine; listen on one of its own (127.0.0.1, or "
            "0.0.0.0 for all of them)"
        )
    return f"{exc.strerror or exc}; {PICK}"


def _first_unprivileged_port() -> int:
    try:
        return int(Path(UNPRIVILEGED).read_text())
    except (OSError, ValueError):
        return 1024

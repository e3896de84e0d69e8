"""Where the daemon's unix socket lives, and who may stand behind it.

The default socket is ``kernelpolicy.sock`` in a private directory: ``/run/kernelpolicy/`` for
root, ``$XDG_RUNTIME_DIR/kernelpolicy/`` for other users (``/tmp/kernelpolicy-<uid>/`` when
that variable is unset), created mode 0700. Nobody else can create, replace or connect to a
socket in it, so another local user cannot take the daemon's place.

Both ends check: the daemon refuses a socket path it does not own (another user's socket, or
anything that is not a socket), and clients refuse a daemon that runs as anyone but root or
themselves (the peer credentials of the socket, ``SO_PEERCRED``).
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from collections.abc import Mapping
from pathlib import Path

from kernelpolicy.errors import DaemonError, UntrustedFileError
from kernelpolicy.trust import owner_mode_problem, owner_ok, private_dir

SOCKET_NAME = "kernelpolicy.sock"
MAX_SOCKET_PATH_BYTES = 107  # sun_path is 108 bytes on Linux, with the terminating NUL


def runtime_dir(uid: int | None = None) -> Path:
    """The directory of the default socket for ``uid`` (default: the current user)."""
    uid = os.geteuid() if uid is None else uid
    if uid == 0:
        return Path("/run/kernelpolicy")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and uid == os.geteuid():
        return Path(runtime) / "kernelpolicy"
    return Path(f"/tmp/kernelpolicy-{uid}")


def default_socket_path() -> Path:
    """This user's default socket (not created here)."""
    return runtime_dir() / SOCKET_NAME


def default_socket_address() -> str:
    return f"unix:{default_socket_path()}"


def node_socket_address(environ: Mapping[str, str]) -> str:
    """Where this node's daemon listens for kernelpolicy's own clients: ``KERNELPOLICY_SOCKET``
    where the environment sets it, else this user's default socket. ``serve`` binds it,
    ``connect()`` and ``status`` ask it, and workers report beside it.

    Raises:
        SettingsError: ``KERNELPOLICY_SOCKET`` is not a unix socket address.
    """
    from kernelpolicy.settings import settings_from

    return settings_from(environ).socket or default_socket_address()


def report_socket_path(grpc_socket: Path) -> Path:
    """The report socket beside a gRPC socket: ``x.sock`` -> ``x.report.sock`` (see
    :mod:`kernelpolicy.server.reports`)."""
    return grpc_socket.with_name(f"{grpc_socket.stem}.report{grpc_socket.suffix}")


def halts_file_path(grpc_socket: Path) -> Path:
    """The node's halts for its workers, beside a daemon's unix socket: ``x.sock`` ->
    ``x.halts.json`` (see :mod:`kernelpolicy.server.halts_file`)."""
    return grpc_socket.with_name(f"{grpc_socket.stem}.halts.json")


def report_path(address: str | None, *, explicit: bool) -> Path | None:
    """The report socket of the daemon at ``address`` (``unix:/p`` or a path; None: this user's
    default socket), or None where no report goes: a TCP address, or a default socket with no
    report socket beside it (no daemon there). An ``explicit`` one is used even before its
    daemon starts (the reporter tries again at each flush)."""
    if address is not None and not address.startswith(("unix:", "/")):
        return None
    path = report_socket_path(default_socket_path() if address is None else socket_path(address))
    if explicit:
        return path
    try:
        return path if stat.S_ISSOCK(os.stat(path).st_mode) else None
    except OSError:
        return None


def socket_path(address: str) -> Path:
    """The file of a ``unix:`` address (``unix:relative``, ``unix:/abs``, ``unix:///abs``)."""
    path = address.removeprefix("unix:")
    if path.startswith("//"):
        path = path[2:]
    return Path(path)


def is_loopback_host(host: str) -> bool:
    """Whether a TCP host (name or address, without brackets) stays on this machine."""
    if host == "localhost":
        return True
    import ipaddress  # here: a worker that only looks for its daemon's socket need not pay

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _describe(mode: int) -> str:
    for test, name in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
    ):
        if test(mode):
            return name
    return "not a socket"


def _answers(path: Path) -> bool:
    """Whether something listens on the socket file ``path``."""
    import socket  # here: resolve() looks for a report socket with os.stat alone

    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def prepare_socket(address: str, *, default: bool) -> Path:
    """Make ``address``'s path ready for the daemon to bind, or say in one line why not.

    The default socket's directory is created private (0700). An existing path is removed only
    when it is this user's own socket that nobody answers on (left by a daemon that was killed).

    Raises:
        DaemonError: The path belongs to another user, is not a socket, is in use, or its
            directory may be written by others.
    """
    path = socket_path(address)
    where = f"cannot listen on {address}"
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH_BYTES:
        raise DaemonError(
            f"{where}: the path is {size} bytes, over the {MAX_SOCKET_PATH_BYTES} a unix socket "
            "path may have; use a shorter one"
        )
    if default:
        try:
            private_dir(path.parent, "socket directory")
        except UntrustedFileError as exc:
            raise DaemonError(f"{where}: {exc}") from None
    else:
        _check_directory(path.parent, where)
    try:
        info = path.lstat()
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise DaemonError(f"{where}: cannot check {path}: {exc.strerror or exc}") from None
    if not stat.S_ISSOCK(info.st_mode):
        raise DaemonError(
            f"{where}: {path} is {_describe(info.st_mode)} (owner uid {info.st_uid}), not a "
            "socket; refusing to replace it (remove it yourself if it is stale)"
        )
    if info.st_uid != os.geteuid():
        raise DaemonError(
            f"{where}: {path} is a socket owned by uid {info.st_uid}, not by uid "
            f"{os.geteuid()} who runs this daemon; refusing to use or remove it"
        )
    if _answers(path):
        raise DaemonError(f"{where}: a daemon already answers on {path}")
    path.unlink()  # our own socket, left by a daemon that did not shut down
    return path


def _check_directory(directory: Path, where: str) -> None:
    """The socket's directory follows kernelpolicy's directory-trust rule
    (:func:`kernelpolicy.trust.owner_mode_problem`: owned by root or us, and writable by nobody
    else), the sticky bit notwithstanding. In a sticky world-writable directory such as /tmp
    nobody else can remove our socket, but anyone can take the names beside it first: the
    report socket (``x.report.sock``) and the halts file (``x.halts.json``), which would block
    every publication of the node's halts to its workers (its temporary names are unpredictable,
    :func:`kernelpolicy.safeio.write_atomic`: those cannot be taken ahead)."""
    try:
        info = directory.stat()
    except OSError as exc:
        raise DaemonError(f"{where}: {directory}: {exc.strerror or exc}") from None
    mode = stat.S_IMODE(info.st_mode)
    if owner_mode_problem(info, sticky_passes=False) is not None:
        raise DaemonError(
            f"{where}: its directory {directory} (owner uid {info.st_uid}, mode {mode:04o}) may "
            "be written by another user, who could replace the socket or take the names of the "
            "files kept beside it (the halts file); use a directory only you (or root) can "
            "write, such as $XDG_RUNTIME_DIR/kernelpolicy/ or one you made with mode 0700"
        )


_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_uid(path: Path, timeout: float = 2.0) -> int:
    """The uid of the process listening on the unix socket ``path`` (``SO_PEERCRED``).

    Raises:
        DaemonError: Nothing answers there (the message says so).
    """
    import socket  # here: resolve() looks for a report socket with os.stat alone

    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(timeout)
    try:
        probe.connect(str(path))
        _, uid, _ = _PEERCRED.unpack(
            probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        )
    except OSError as exc:
        reason = (
            "no such socket"
            if exc.errno == errno.ENOENT
            else "nothing listens there"
            if exc.errno == errno.ECONNREFUSED
            else f"permission denied: only the daemon's own user and root may connect to it "
            f"(you are uid {os.geteuid()}); run as that user, or ask its TCP address with "
            "--address HOST:PORT"
            if exc.errno == errno.EACCES
            else exc.strerror or str(exc)
        )
        raise DaemonError(f"unix:{path}: not answering ({reason})") from None
    finally:
        probe.close()
    return int(uid)


def check_peer(address: str) -> None:
    """Refuse a unix-socket daemon that runs as neither root nor this user.

    TCP addresses are not checked: TCP carries no peer identity (use TLS with client
    certificates where that matters).

    Raises:
        DaemonError: The daemon behind the socket runs as another user, or nothing answers.
    """
    if not address.startswith("unix:"):
        return
    path = socket_path(address)
    uid = peer_uid(path)
    if not owner_ok(uid):
        raise DaemonError(
            f"refusing the daemon on {address}: it runs as uid {uid}, neither root nor uid "
            f"{os.geteuid()} (you); another user may be impersonating kernelpolicy"
        )

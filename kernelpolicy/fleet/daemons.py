"""Live daemons as a fleet's inventory: each ``kernelpolicy serve``'s platform snapshot, read
over gRPC (``GetPlatform``, the snapshot the daemon resolves for), and the evidence it resolves
with (``Resolve`` with ``include_inputs``: its inputs carry the evidence where its policies read
any; where they read none, the node's evidence is unknown), and what it says of its policies:
the digest of the policy texts it resolves with and its last reload's error
(:class:`~kernelpolicy.fleet.result.Running`), for ``diff`` to say which set each daemon runs.

Each daemon has its own timeout and is asked in parallel; one that does not answer (nothing
listening, a daemon of another user behind a unix socket, a timeout, a bad snapshot) is
reported with its address and counted, not fatal, unless none answers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelpolicy.encoding import escaped, one_line
from kernelpolicy.errors import InventoryError, KernelPolicyError
from kernelpolicy.evidence.store import Evidence, evidence_from_json
from kernelpolicy.fleet.inventory import Inventory, Node
from kernelpolicy.fleet.result import Running
from kernelpolicy.limits import (
    DAEMON_TIMEOUT_SECONDS,
    MAX_DAEMON_DECISIONS,
    MAX_INVENTORY_NODES,
    MAX_PLATFORM_FILE_BYTES,
    SHOWN_DAEMON_ERROR_CHARS,
    SHOWN_DAEMON_HALT_KEY_CHARS,
    SHOWN_DAEMON_HALT_REASON_CHARS,
    SHOWN_DAEMON_NAME_CHARS,
    shown,
)
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.loader import policy_digest
from kernelpolicy.safeio import parse_json, read_bytes_bounded

__all__ = ["DaemonInventory", "daemon_addresses", "load_daemons"]

_PARALLEL = 16  # daemons asked at once: bounded threads, each mostly waiting on the network
_INSTANCE = re.compile(r"[0-9a-f]{1,64}")
_Answer = tuple[str, Evidence | None, dict[str, str], dict[str, str], Running]


@dataclass(frozen=True)
class DaemonInventory(Inventory):
    """Live daemons as an inventory, with what each that answered says of its policies:
    (address, :class:`~kernelpolicy.fleet.result.Running`), in inventory order."""

    running: tuple[tuple[str, Running], ...] = ()


def _fail(message: str) -> InventoryError:
    return InventoryError(message)


def daemon_addresses(text: str) -> tuple[str, ...]:
    """``ADDR,ADDR`` or ``@FILE`` (one address a line, ``#`` comments) -> the addresses.

    Raises:
        InventoryError: No address, more than ``MAX_INVENTORY_NODES``, or an unreadable file.
    """
    if text.startswith("@"):
        data = read_bytes_bounded(
            Path(text[1:]), limit=MAX_INVENTORY_NODES * 256, limit_name="--daemons @FILE",
            fail=lambda message: _fail(f"--daemons @{message}"),
        )  # fmt: skip
        lines = (line.split("#", 1)[0] for line in data.decode("utf-8", "replace").splitlines())
        parts = [line.strip() for line in lines]
    else:
        parts = [part.strip() for part in text.split(",")]
    addresses = tuple(dict.fromkeys(part for part in parts if part))  # in order, once each
    if not addresses:
        raise _fail(f"--daemons {text[:80]!r}: no address (expected ADDR,ADDR,... or @FILE)")
    if len(addresses) > MAX_INVENTORY_NODES:
        raise _fail(f"--daemons: {len(addresses)} addresses, over MAX_INVENTORY_NODES")
    from kernelpolicy.server.addresses import check_address

    for address in addresses:  # a mistyped one is named now, not after a connection timeout
        try:
            check_address(address, "--daemons")
        except KernelPolicyError as exc:
            raise _fail(str(exc)) from None
    return addresses


def _snapshot(address: str, timeout: float, credentials: Any) -> _Answer:
    """The daemon's platform snapshot (JSON), its evidence (``None``: it read none), its
    decisions (feature -> implementation, or ``error (<code>)``; at most
    ``MAX_DAEMON_DECISIONS``), its halts (``feature/impl`` -> why) and what it says of its
    policies. Every name the daemon sends is cut and escaped (:func:`_safe_name`), and its
    reload error too: diff prints them on a terminal."""
    from kernelpolicy.server.client import connect

    with connect(
        address, timeout=timeout, connect_timeout=timeout, credentials=credentials
    ) as client:
        text = client.platform_json()
        # The raw answer (its decisions, its inputs' evidence), not a Resolution rebuilt here.
        answer = client.decisions(include_inputs=True)
    inputs = answer.inputs
    if len(text) > MAX_PLATFORM_FILE_BYTES:
        raise _fail(f"{address}: a snapshot of {len(text)} bytes, over MAX_PLATFORM_FILE_BYTES")
    evidence = evidence_from_json(inputs.evidence_json) if inputs.evidence_json else None
    if len(answer.decisions) > MAX_DAEMON_DECISIONS:
        raise _fail(
            f"{address}: {len(answer.decisions):,} decisions, over MAX_DAEMON_DECISIONS "
            f"({MAX_DAEMON_DECISIONS:,})"
        )
    decided = {
        _safe_name(d.feature): _safe_name(
            f"error ({d.error_code})" if d.error_code else d.impl or "none"
        )
        for d in answer.decisions
    }
    halts = {
        escaped(shown(key, SHOWN_DAEMON_HALT_KEY_CHARS)): escaped(
            shown(why, SHOWN_DAEMON_HALT_REASON_CHARS)
        )
        for key, why in inputs.halted.items()
    }
    running = Running(
        policy_digest((source.name, source.text) for source in inputs.policies),
        one_line(answer.policy_error, SHOWN_DAEMON_ERROR_CHARS) if answer.policy_error else None,
    )
    return text, evidence, decided, halts, running


def _safe_name(name: str) -> str:
    """A name from a daemon's answer as a line can show it: cut to ``SHOWN_DAEMON_NAME_CHARS`` and
    escaped, so that no escape sequence or line break in it reaches a terminal. A name of the
    policy language (``[a-z0-9_.]``) stays as it is."""
    return escaped(shown(name, SHOWN_DAEMON_NAME_CHARS))


def instance_of(value: object) -> str | None:
    """``HOST/ID`` of the ``daemon`` a snapshot carries (``{"instance": hex, "host": name}``,
    as :func:`~kernelpolicy.server.node.daemon_instance` makes it), or ``None``: a daemon of
    before, or anything not of that shape (the host name shown escaped, at most 253 chars)."""
    if not isinstance(value, dict):
        return None
    instance, host = value.get("instance"), value.get("host")
    if not (isinstance(instance, str) and _INSTANCE.fullmatch(instance)):
        return None
    return f"{escaped(host[:253]) if isinstance(host, str) else '?'}/{instance}"


def _ask(address: str, timeout: float, credentials: Any) -> tuple[Node, str, Running] | str:
    """The daemon's node, its snapshot's text and what it says of its policies, or why it gave
    none (naming the address)."""
    try:
        text, evidence, decided, halts, running = _snapshot(address, timeout, credentials)
        data = parse_json(text, address, _fail)
        instance = instance_of(data.pop("daemon", None)) if isinstance(data, dict) else None
        platform = Platform.from_dict(data, source=address)
        node = Node.of(address, platform, evidence, decided, instance=instance, halts=halts)
        return node, platform.to_json(), running
    except KernelPolicyError as exc:
        message = str(exc)
        return message if address in message else f"{address}: {message}"


def same_daemons(answers: Sequence[tuple[Node, str, Running]]) -> tuple[tuple[str, ...], ...]:
    """Addresses that answered for one daemon: one instance (its start), or, from daemons that
    publish none, one snapshot, identity and GPU UUIDs included (by its unix socket and TCP
    port, or two names of one host). Two daemons started from one ``--platform`` file are two
    instances, not one daemon."""
    by_daemon: dict[str, list[str]] = {}
    for node, text, _ in answers:
        if node.instance is not None:
            by_daemon.setdefault(f"instance {node.instance}", []).append(node.name)
        elif node.identity is not None:  # without one, two bare nodes can look alike
            by_daemon.setdefault(text, []).append(node.name)
    return tuple(tuple(names) for names in by_daemon.values() if len(names) > 1)


def load_daemons(
    addresses: Sequence[str], timeout: float = DAEMON_TIMEOUT_SECONDS, credentials: Any = None
) -> DaemonInventory:
    """Each daemon's platform snapshot as one node named by its address.

    ``credentials``: grpc channel credentials for daemons that speak TLS (unix sockets take
    none), as ``kernelpolicy.server.tls.client_credentials`` makes them.

    Returns:
        The nodes of the daemons that answered; ``unreachable`` names each that did not, and
        why; ``duplicates`` the addresses that answered for one node; ``running`` what each
        that answered says of its policies.

    Raises:
        InventoryError: No daemon answered (every address and why in the message).
    """
    with ThreadPoolExecutor(max_workers=min(_PARALLEL, len(addresses)) or 1) as pool:
        answers = list(pool.map(lambda address: _ask(address, timeout, credentials), addresses))
    answered = [a for a in answers if not isinstance(a, str)]
    unreachable = tuple(a for a in answers if isinstance(a, str))
    if not answered:
        raise _fail("no daemon answered:\n  " + "\n  ".join(unreachable))
    return DaemonInventory(
        ", ".join(addresses), tuple(node for node, _, _ in answered), unreachable=unreachable,
        duplicates=same_daemons(answered),
        running=tuple((node.name, running) for node, _, running in answered),
    )  # fmt: skip

"""Who a peer is, for every per-peer cap: one grouping of client addresses for all of them.

The daemon's per-peer caps (calls and streams on gRPC, connections on both listeners) count by
the group :func:`peer_group` gives, never by the bare address, because one client can pick
among many addresses at no cost:

- all of loopback is one peer, ``loopback``: Linux answers the whole of 127.0.0.0/8 on ``lo``
  and any user may bind a source address in it (``::1`` and ``::ffff:127.0.0.0/104`` are the
  same host). Keyed per address, five 127.x addresses took every call slot of the TCP port;
- another IPv4 address is its own peer (a /32);
- an IPv6 address is grouped by its /64, the smallest block a host is given (RFC 4291's
  interface identifiers; a host on SLAAC picks any address in its /64 at will); an IPv4-mapped
  address (``::ffff:a.b.c.d``, a dual-stack socket's view of an IPv4 client) is that IPv4
  address;
- every unix-socket client is the one peer ``unix`` (gRPC gives the daemon no peer credentials
  there, and only its own user and root may connect), except the gRPC relay's connections
  (``server.grpc_relay``), which carry their TCP client's address in their names;
- anything else (a form grpc does not use today) is its own peer, its key bounded in length.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import unquote

from kernelpolicy.limits import MAX_PEER_KEY_CHARS
from kernelpolicy.server.addresses import split_address

LOOPBACK_PEER = "loopback"
UNIX_PEER = "unix"
LOOPBACK_V4 = ipaddress.IPv4Network("127.0.0.0/8")
IPV6_GROUP_PREFIX = 64
RELAY_PREFIX = "kernelpolicy-relay/"
"""The abstract socket names the gRPC relay (``server.grpc_relay``) binds its connections to,
``kernelpolicy-relay/<random>/<the TCP client's grpc peer>``: the relayed call's peer."""


def peer_group(host: str) -> str:
    """The peer a client address belongs to (see the module's docstring): ``loopback``, an
    IPv4 address, an IPv6 /64 (``2001:db8:1:2::/64``), or ``host`` itself (cut to
    ``MAX_PEER_KEY_CHARS``) where it is no IP address."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host[:MAX_PEER_KEY_CHARS]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is None:
            if address.is_loopback:
                return LOOPBACK_PEER
            bare = ipaddress.IPv6Address(address.packed)  # without its zone (%eth0)
            return str(ipaddress.IPv6Network((bare, IPV6_GROUP_PREFIX), strict=False))
        address = address.ipv4_mapped
    return LOOPBACK_PEER if address in LOOPBACK_V4 else str(address)


def peer_key(peer: str) -> str:
    """The peer (:func:`peer_group`) of a gRPC peer string: ``ipv4:10.0.0.7:5123`` is
    ``10.0.0.7``, ``ipv4:127.0.0.9:5123`` and ``ipv6:[::1]:5123`` are ``loopback``,
    ``ipv6:[2001:db8::7]:5123`` is ``2001:db8::/64``, any ``unix:`` peer is ``unix``; a
    relayed connection (``unix-abstract:kernelpolicy-relay/<random>/ipv4:10.0.0.7:5123``) is
    its TCP client's peer, and a relay name without an IP address there is ``unix``."""
    kind, _, rest = peer.partition(":")
    rest = unquote(rest)  # grpc may write the brackets and a zone's % escaped
    if kind == "unix-abstract" and rest.startswith(RELAY_PREFIX):
        relayed = rest[len(RELAY_PREFIX) :].partition("/")[2]
        if relayed.startswith(("ipv4:", "ipv6:")):  # a TCP client's, through the relay
            key = peer_key(relayed)
            if _is_group(key):  # else not the relay's: a name it never binds is no key to pick
                return key
    if kind in ("unix", "unix-abstract"):
        return UNIX_PEER
    if kind == "ipv6" and rest.startswith("["):
        return peer_group(rest[1:].split("]", 1)[0])
    if kind == "ipv4":
        return peer_group(split_address(rest).host or rest)
    return peer[:MAX_PEER_KEY_CHARS]


def _is_group(key: str) -> bool:
    """Whether ``key`` is a group :func:`peer_group` makes of an IP address."""
    try:
        ipaddress.ip_network(key)
    except ValueError:
        return key == LOOPBACK_PEER
    return True

"""What kind of address a download is about to connect to, so a result is never read from inside the network.

A result URL comes from a provider's answer, and an agent reads what `fetch_result` downloads: a URL naming a
cloud's metadata service, this machine or the private network would hand the agent what only the machine may
see. The host rule (`contract_result.result_url_problem`) bounds which names may be asked for; this bounds the
addresses those names may resolve to, and it is applied to the address actually connected to (`wire`), so a
name whose DNS answer changes between a check and the connect (DNS rebinding) cannot pass.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_CLASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # AWS, GCP, Azure, OCI (169.254.169.254), AWS ECS task metadata, AWS IPv6 (fd00:ec2::254), Alibaba Cloud
    # (100.100.100.200), Oracle's older 192.0.0.192: refused whatever the status URL is.
    (
        "a metadata",
        ("169.254.169.254/32", "169.254.170.2/32", "fd00:ec2::254/128", "100.100.100.200/32", "192.0.0.192/32"),
    ),
    ("an unspecified", ("0.0.0.0/8", "::/128")),
    ("a loopback", ("127.0.0.0/8", "::1/128")),
    ("a link-local", ("169.254.0.0/16", "fe80::/10")),
    # RFC 1918, the carrier-grade NAT range of RFC 6598 (cloud internal services live there too), unique local.
    ("a private", ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")),
    ("a multicast, broadcast or reserved", ("224.0.0.0/3", "ff00::/8", "::/96")),
)
_NETWORKS = tuple((name, tuple(ipaddress.ip_network(network) for network in networks)) for name, networks in _CLASSES)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

PUBLIC = "a public"
SAME_AS_STATUS = frozenset({"a loopback", "a private"})
"""The kinds a result may be on when the contract's status origin is on that kind too (a loopback imitation, a
provider inside the private network): the provider is there already."""


def address_kind(address: str) -> str:
    """ "a loopback", "a private", ... or "a public": what an address (as getaddrinfo gives it) is. An IPv4
    address inside IPv6 (mapped, NAT64, 6to4) is judged as the IPv4 address it reaches."""
    ip: IPAddress = ipaddress.ip_address(address.partition("%")[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip in _NAT64:
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        elif ip.sixtofour is not None:
            ip = ip.sixtofour
    for name, networks in _NETWORKS:
        if any(ip in network for network in networks):
            return name
    return PUBLIC


def allowed_kinds(status_addresses: Iterable[str]) -> frozenset[str]:
    """Where a result may be fetched from, given the addresses the contract's status origin resolves to."""
    return frozenset({PUBLIC, *(kind for kind in map(address_kind, status_addresses) if kind in SAME_AS_STATUS)})


def refusal(address: str, allowed: frozenset[str]) -> str | None:
    """Why a result must not be fetched from `address`, or None."""
    kind = address_kind(address)
    if kind in allowed:
        return None
    also = " (or from loopback and private ones when the status URL is on one)" if kind in SAME_AS_STATUS else ""
    return f"{address} is {kind} address; a result is fetched only from public addresses{also}"


__all__ = ["PUBLIC", "address_kind", "allowed_kinds", "refusal"]

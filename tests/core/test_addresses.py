"""What kind of address a result download would connect to (`core.addresses`), and what the status origin allows."""

from __future__ import annotations

import pytest

from pollwarden.core.addresses import PUBLIC, address_kind, allowed_kinds, refusal


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("93.184.216.34", PUBLIC),
        ("2606:2800:220:1:248:1893:25c8:1946", PUBLIC),
        ("169.254.169.254", "a metadata"),
        ("169.254.170.2", "a metadata"),
        ("fd00:ec2::254", "a metadata"),
        ("100.100.100.200", "a metadata"),
        ("::ffff:169.254.169.254", "a metadata"),  # IPv4 inside IPv6 is the IPv4 address it reaches
        ("64:ff9b::a9fe:a9fe", "a metadata"),  # NAT64 of 169.254.169.254
        ("0.0.0.0", "an unspecified"),
        ("::", "an unspecified"),
        ("127.0.0.1", "a loopback"),
        ("127.8.9.10", "a loopback"),
        ("::1", "a loopback"),
        ("::ffff:127.0.0.1", "a loopback"),
        ("2002:7f00:1::", "a loopback"),  # 6to4 of 127.0.0.1
        ("169.254.1.1", "a link-local"),
        ("fe80::1%eth0", "a link-local"),
        ("10.0.0.1", "a private"),
        ("172.31.255.255", "a private"),
        ("192.168.1.1", "a private"),
        ("100.64.0.1", "a private"),
        ("fd12:3456::1", "a private"),
        ("224.0.0.1", "a multicast, broadcast or reserved"),
        ("255.255.255.255", "a multicast, broadcast or reserved"),
        ("ff02::1", "a multicast, broadcast or reserved"),
        ("::127.0.0.1", "a multicast, broadcast or reserved"),  # IPv4-compatible: deprecated, never a result's
    ],
)
def test_each_kind_of_address(address: str, kind: str) -> None:
    assert address_kind(address) == kind


def test_loopback_and_private_are_allowed_only_where_the_status_origin_is() -> None:
    public = allowed_kinds(["93.184.216.34"])
    assert public == {PUBLIC}
    assert refusal("127.0.0.2", public) == (
        "127.0.0.2 is a loopback address; a result is fetched only from public addresses (or from loopback and"
        " private ones when the status URL is on one)"
    )
    assert refusal("93.184.216.35", public) is None
    on_loopback = allowed_kinds(["127.0.0.1", "::1"])
    assert refusal("127.0.0.2", on_loopback) is None and refusal("10.0.0.1", on_loopback) is not None
    inside = allowed_kinds(["10.0.0.9"])
    assert refusal("10.9.9.9", inside) is None and refusal("127.0.0.1", inside) is not None
    for never in ("169.254.169.254", "169.254.1.1", "0.0.0.0", "224.0.0.1"):  # whatever the status origin is
        assert refusal(never, allowed_kinds(["169.254.169.254", "169.254.1.1", "0.0.0.0"])) is not None

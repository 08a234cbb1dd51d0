"""The address guard classifies addresses; nothing here ever connects anywhere."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drumbeat.fetch.guard import AddressPolicy, classify

CASES: dict[str, list[str]] = {
    "public": [
        "8.8.8.8",
        "1.1.1.1",
        "93.184.216.34",
        "9.255.255.255",
        "11.0.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "192.167.255.255",
        "192.169.0.0",
        "100.63.255.255",
        "100.128.0.0",
        "169.253.255.255",
        "169.255.0.0",
        "198.17.255.255",
        "198.20.0.0",
        "223.255.255.255",
        "126.255.255.255",
        "128.0.0.0",
        "2606:4700::1",
        "2001:4860:4860::8888",
        "2a00:1450:4001::1",
        "2002:808:808::1",
        "64:ff9b::808:808",
        "::ffff:8.8.8.8",
        "2001:200::1",
    ],
    "loopback": [
        "127.0.0.1",
        "127.0.0.0",
        "127.255.255.255",
        "127.1.2.3",
        "::1",
        "::ffff:127.0.0.1",
        "64:ff9b::7f00:1",
        "2002:7f00:1::",
    ],
    "private": [
        "10.0.0.0",
        "10.0.0.1",
        "10.255.255.255",
        "172.16.0.0",
        "172.16.0.1",
        "172.20.10.5",
        "172.31.255.255",
        "192.168.0.0",
        "192.168.1.1",
        "192.168.255.255",
        "100.64.0.0",
        "100.100.100.100",
        "100.127.255.255",
        "fc00::",
        "fc00::1",
        "fd12:3456:789a::1",
        "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        "fec0::1",
        "::ffff:10.0.0.1",
        "::ffff:192.168.0.1",
        "::ffff:172.16.0.1",
        "64:ff9b::a00:1",
        "64:ff9b:1::1",
        "2002:a00:1::1",
        "2002:c0a8:101::",
    ],
    "link_local": [
        "169.254.0.0",
        "169.254.169.254",
        "169.254.255.255",
        "fe80::",
        "fe80::1",
        "febf:ffff::1",
        "fe80::1%eth0",
        "::ffff:169.254.169.254",
    ],
    "multicast": [
        "224.0.0.0",
        "224.0.0.1",
        "239.255.255.250",
        "239.255.255.255",
        "ff02::1",
        "ff05::2",
        "ff0e::1",
        "::ffff:224.0.0.1",
    ],
    "reserved": [
        "0.0.0.0",
        "0.1.2.3",
        "255.255.255.255",
        "240.0.0.0",
        "250.1.2.3",
        "192.0.2.1",
        "198.51.100.7",
        "203.0.113.200",
        "198.18.0.1",
        "198.19.255.255",
        "192.0.0.8",
        "192.88.99.1",
        "::",
        "::ffff:0.0.0.0",
        "::ffff:255.255.255.255",
        "2001:db8::1",
        "3fff::1",
        "100::1",
        "2001::1",
        "2001:2::1",
        "::0.0.0.2",
        "::1.2.3.4",
        "4000::1",
        "e000::1",
        "64:ff9b::c000:201",
    ],
    "invalid": [
        "",
        "localhost",
        "example.com",
        "256.0.0.1",
        "1.2.3",
        "1.2.3.4.5",
        "0x7f.0.0.1",
        "2130706433",
        "127.1",
        "010.0.0.1",
        "[::1]",
        "::1::",
        "gggg::1",
        " 8.8.8.8",
        "8.8.8.8/32",
        "1.2.3.4:80",
    ],
}


@pytest.mark.parametrize(("ip", "kind"), [(ip, kind) for kind, ips in CASES.items() for ip in ips])
def test_classify(ip: str, kind: str) -> None:
    assert classify(ip) == kind


@given(st.ip_addresses(v=4))
def test_ipv4_mapped_v6_is_classified_like_the_embedded_v4(v4: ipaddress.IPv4Address) -> None:
    assert classify(f"::ffff:{v4}") == classify(str(v4))


@given(st.ip_addresses(v=4))
def test_nat64_and_6to4_follow_the_embedded_v4(v4: ipaddress.IPv4Address) -> None:
    packed = int(v4)
    assert classify(str(ipaddress.IPv6Address((0x64FF9B << 96) | packed))) == classify(str(v4))
    assert classify(str(ipaddress.IPv6Address((0x2002 << 112) | (packed << 80)))) == classify(
        str(v4)
    )


@given(st.ip_addresses())
def test_every_address_gets_a_known_class(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    assert classify(str(address)) in CASES


def test_default_policy_allows_only_public() -> None:
    policy = AddressPolicy()
    assert policy.refusal("8.8.8.8") is None
    assert policy.refusal("2606:4700::1") is None
    assert policy.refusal("127.0.0.1") == "guard:loopback"
    assert policy.refusal("::1") == "guard:loopback"
    assert policy.refusal("10.0.0.1") == "guard:private"
    assert policy.refusal("::ffff:10.0.0.1") == "guard:private"
    assert policy.refusal("169.254.169.254") == "guard:link_local"
    assert policy.refusal("224.0.0.1") == "guard:multicast"
    assert policy.refusal("0.0.0.0") == "guard:reserved"
    assert policy.refusal("example.com") == "guard:invalid"


def test_allow_loopback_permits_loopback_only() -> None:
    policy = AddressPolicy(allow_loopback=True)
    assert policy.refusal("127.0.0.1") is None
    assert policy.refusal("127.9.8.7") is None
    assert policy.refusal("::1") is None
    assert policy.refusal("::ffff:127.0.0.1") is None
    assert policy.refusal("8.8.8.8") is None
    assert policy.refusal("192.168.1.1") == "guard:private"
    assert policy.refusal("fe80::1") == "guard:link_local"
    assert policy.refusal("0.0.0.0") == "guard:reserved"


def test_allow_private_permits_intranet_ranges_but_never_multicast_or_reserved() -> None:
    policy = AddressPolicy(allow_private=True)
    for ip in (
        "127.0.0.1",
        "::1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.0.1",
        "100.64.0.1",
        "fd00::1",
        "169.254.1.1",
        "fe80::1",
        "8.8.8.8",
    ):
        assert policy.refusal(ip) is None, ip
    assert policy.refusal("224.0.0.1") == "guard:multicast"
    assert policy.refusal("ff02::1") == "guard:multicast"
    assert policy.refusal("255.255.255.255") == "guard:reserved"
    assert policy.refusal("0.0.0.0") == "guard:reserved"
    assert policy.refusal("::") == "guard:reserved"
    assert policy.refusal("not-an-ip") == "guard:invalid"


def test_policy_is_immutable() -> None:
    policy = AddressPolicy()
    with pytest.raises(AttributeError):
        policy.allow_private = True  # type: ignore[misc]

"""Where a webhook may be sent: the SSRF rules of `callback_url`.

A callback URL is checked twice, with the same rules:

- at submission (`check_callback_url`, called by `POST /v1/searches`): a refused URL is a 422
  problem naming `callback_url`, the rule and the value;
- at every delivery attempt (`pin_target`, called by the webhook dispatcher): the host is
  resolved again (DNS may have changed since submission), **every** address it resolves to
  must pass, and the request is then sent to the first of those checked addresses — the URL's
  host is replaced by that IP literal, the `Host` header and the TLS SNI / certificate check
  (`sni_hostname` request extension of httpcore) keep the original name. A DNS rebinding
  between check and connect therefore cannot redirect the request: no second lookup happens.

Rules, in order:

1. the scheme is `https` (`http` only with `MESHPLAN_WEBHOOK_ALLOW_HTTP`);
2. a host listed in `MESHPLAN_WEBHOOK_ALLOW_HOSTS` (exact name, or the same IP address) is
   accepted as it is (operators list their own internal receivers there);
3. otherwise the host — an IP literal in any spelling that the C resolver would accept
   (`127.1`, `0x7f000001`, `2130706433`, `0177.0.0.1`, `[::ffff:127.0.0.1]`, upper case,
   a trailing dot) or a name, resolved with `getaddrinfo` — must only give public addresses:
   `ipaddress`'s `is_global`, and not multicast or reserved. IPv4-mapped IPv6 addresses are
   refused outright; IPv6 addresses that embed an IPv4 address (6to4, Teredo, the NAT64
   well-known prefix 64:ff9b::/96 of RFC 6052) are refused unless the embedded address is
   public.

`is_global` excludes loopback, RFC 1918, CGNAT 100.64/10 (RFC 6598), link-local 169.254/16
(the cloud metadata address 169.254.169.254) and fe80::/10, unique-local fc00::/7,
unspecified and documentation ranges — the IANA special-purpose registries (RFC 6890).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from app.core.config import Settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")
"""RFC 6052 §2.1: IPv4 addresses embedded in the last 32 bits (not flagged by `ipaddress`)."""
_LEGACY_IPV4_CHARS = frozenset("0123456789abcdefx.")


class RefusedTarget(ValueError):
    """A callback URL the rules refuse; `rule` is the short name used in problems."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message


def normalise_host(host: str) -> str:
    """Lower case, no brackets, no trailing dot: the form hosts are compared in."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host.rstrip(".")


def literal_address(host: str) -> IPAddress | None:
    """The IP address a host literally spells, or None for a name.

    Besides the canonical forms of `ipaddress`, the legacy IPv4 forms of `inet_aton`
    (POSIX): one to four parts, each decimal, octal (`0` prefix) or hex (`0x`) — the forms a
    resolver would connect to."""
    host = normalise_host(host)
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if host and set(host) <= _LEGACY_IPV4_CHARS and host[0].isdigit():
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def resolve_addresses(host: str, port: int) -> list[IPAddress]:
    """Every address `host` resolves to (TCP), in the resolver's order. Tests replace it."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    out: list[IPAddress] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in out:
            out.append(address)
    return out


def address_problem(address: IPAddress) -> str | None:
    """Why `address` is not a public unicast address, or None when it is."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return "an IPv4-mapped IPv6 address"
        embedded = [address.sixtofour]
        if address.teredo is not None:
            embedded.extend(address.teredo)
        if address in _NAT64_WELL_KNOWN:
            embedded.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        for inner in embedded:
            if inner is not None and address_problem(inner) is not None:
                return f"an IPv6 address embedding {inner}"
    for flag, name in (
        ("is_unspecified", "unspecified"),
        ("is_loopback", "loopback"),
        ("is_link_local", "link-local"),
        ("is_multicast", "multicast"),
        ("is_reserved", "reserved"),
        ("is_private", "private"),
    ):
        if getattr(address, flag):
            return f"a {name} address"
    if not address.is_global:
        return "not a public address"
    return None


def _allowed(host: str, settings: Settings) -> bool:
    host = normalise_host(host)
    ip = literal_address(host)
    for entry in settings.webhook_allow_hosts:
        entry = normalise_host(entry)
        if entry == host:
            return True
        if ip is not None and literal_address(entry) == ip:
            return True
    return False


@dataclass(frozen=True)
class Target:
    """Where to send: `url` (host replaced by the checked IP unless allow-listed), extra
    `headers` (`Host`) and httpx request `extensions` (`sni_hostname`)."""

    url: str
    headers: dict[str, str]
    extensions: dict[str, str]


def _checked_addresses(url: str, settings: Settings) -> tuple[list[IPAddress] | None, str, int]:
    """(addresses that passed, or None for an allow-listed host; host; port)."""
    parts = urlsplit(url)
    if parts.scheme != "https" and not (parts.scheme == "http" and settings.webhook_allow_http):
        raise RefusedTarget(
            "https-required",
            "callback_url must be an https:// URL (http:// only with the service's "
            "MESHPLAN_WEBHOOK_ALLOW_HTTP)",
        )
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if _allowed(host, settings):
        return None, host, port
    literal = literal_address(host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            addresses = resolve_addresses(normalise_host(host), port)
        except (OSError, UnicodeError) as exc:
            raise RefusedTarget(
                "host-unresolvable", f"callback_url host {host!r} does not resolve ({exc})"
            ) from None
        if not addresses:
            raise RefusedTarget("host-unresolvable", f"callback_url host {host!r} has no address")
    for address in addresses:
        why = address_problem(address)
        if why is not None:
            shown = host if literal is None else f"{host!r} ({address})"
            raise RefusedTarget(
                "public-address-required",
                f"callback_url host {shown} is {why}"
                + (f": it resolves to {address}" if literal is None else "")
                + "; webhooks go to public addresses only (or hosts in the service's "
                "MESHPLAN_WEBHOOK_ALLOW_HOSTS)",
            )
    return addresses, host, port


def check_callback_url(url: str, settings: Settings) -> None:
    """Raises `RefusedTarget` when `url` may not receive webhooks (blocking: resolves DNS)."""
    _checked_addresses(url, settings)


def pin_target(url: str, settings: Settings) -> Target:
    """Check `url` now and return the request to make, pinned to a checked address."""
    addresses, host, _port = _checked_addresses(url, settings)
    if addresses is None:
        return Target(url=url, headers={}, extensions={})
    address = addresses[0]
    parts = urlsplit(url)
    ip_text = f"[{address}]" if address.version == 6 else str(address)
    netloc = f"{ip_text}:{parts.port}" if parts.port else ip_text
    host_header = normalise_host(host)
    if ":" in host_header:
        host_header = f"[{host_header}]"
    if parts.port:
        host_header = f"{host_header}:{parts.port}"
    pinned = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    extensions = {"sni_hostname": normalise_host(host)} if parts.scheme == "https" else {}
    return Target(url=pinned, headers={"Host": host_header}, extensions=extensions)

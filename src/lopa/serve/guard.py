"""Who may drive the server: with an API key, whoever sends it on /v1/*; without one, only clients that name
this server by an IP address, localhost, or a name allowed with --allow-host.

Why the Host check: any web page a user opens can send requests to 127.0.0.1 from their browser, and by DNS
rebinding (its own domain name made to point at 127.0.0.1) read the answers too; the browser then sends that
domain as the Host header. A name the user did not allow is refused (403), so a keyless server on the loopback
answers only its own user's programs. An IP-address Host cannot come from a rebound name, so direct clients and
servers bound to a LAN address keep working. The check is a pure ASGI middleware (as BodyLimit): it wraps
nothing around the app's receive channel, so handlers still see a client leave (http.disconnect) at once.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable

from .limits import refuse

LOCAL_NAMES = {"localhost"}


def host_name(header: str) -> str:
    """The name in a Host header, without its port ("[::1]:8000" -> "::1", "Example.com." -> "example.com")."""
    name = header.strip().lower()
    if name.startswith("["):
        return name[1 : name.find("]")] if "]" in name else name
    return name.rsplit(":", 1)[0].rstrip(".") if name.count(":") == 1 else name.rstrip(".")


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class Guard:
    """ASGI middleware: 401 on /v1/* without the API key (when there is one); 403 for an unknown Host (when not)."""

    def __init__(self, app, api_key: str | None, allowed_hosts: Iterable[str] = ()):
        self.app = app
        self.expected = None if api_key is None else f"Bearer {api_key}".encode()
        self.allowed = LOCAL_NAMES | {host_name(h) for h in allowed_hosts}

    def host_allowed(self, header: str) -> bool:
        name = host_name(header)
        return name in self.allowed or is_ip(name)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if self.expected is None:
                host = headers.get(b"host", b"").decode("latin-1")
                if not self.host_allowed(host):
                    message = f"the Host {host!r} is not this server's: use its address or localhost, or start it with --allow-host"
                    return await refuse(send, 403, message, code="host_not_allowed")
            elif scope["path"].startswith("/v1/"):
                if not hmac.compare_digest(headers.get(b"authorization", b""), self.expected):
                    return await refuse(
                        send, 401, "missing or wrong API key (Authorization: Bearer KEY)", code="invalid_api_key"
                    )
        await self.app(scope, receive, send)

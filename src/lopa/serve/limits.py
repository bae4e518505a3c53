"""Limits checked before any work: the request body's size, and the characters a prompt may have.

A body is refused by its Content-Length before a byte of it is read (413), and a body
without one (chunked) gets 411, so no request can make the server parse or hold an
unbounded body. The character bound is exact, not a guess: no token's text is longer than
the tokenizer's longest token string, so a prompt of more characters than the context
times that length cannot fit, and is refused before the tokenizer runs.
"""

from __future__ import annotations

import json

from .protocol import error_body

METHODS_WITH_BODY = {b"POST", b"PUT", b"PATCH"}


def max_token_chars(tokenizer) -> int:
    """The most characters one token's text can have (its vocabulary string; byte-level BPE spells a byte per char)."""
    return max((len(t) for t in tokenizer.get_vocab()), default=1) or 1


class BodyLimit:
    """ASGI middleware: 413 for a declared body over `limit` bytes, 411 for a body of undeclared length."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"].encode() in METHODS_WITH_BODY:
            headers = dict(scope["headers"])
            length = headers.get(b"content-length")
            if length is None and b"chunked" in headers.get(b"transfer-encoding", b""):
                return await refuse(send, 411, "send the body with a Content-Length")
            if length is not None and (not length.isdigit() or int(length) > self.limit):
                return await refuse(send, 413, f"the request body is over {self.limit} bytes")
        await self.app(scope, receive, send)


async def refuse(send, status: int, message: str, code: str | None = None) -> None:
    """Answer with an OpenAI error body and close, before the app sees the request."""
    body = json.dumps(error_body(message, code=code)).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

"""Concurrent completions from an in-process server, next to plain decoding of the same prompts."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from lopa import Engine

PROMPTS = ["List three prime numbers.", "Write a haiku about the sea.", "Name four colours of the rainbow."]


def served_and_plain(
    serving: Engine, reference: Engine, max_tokens: int, timeout: float
) -> tuple[list[dict], list[str]]:
    """The server's answers (JSON bodies) to PROMPTS sent at once, and `reference`'s plain decoding of each."""
    from fastapi.testclient import TestClient

    from lopa.serve.app import ServeOptions, create_app

    want = [reference.generate(p, max_new_tokens=max_tokens, chat=False, method="ar").text for p in PROMPTS]
    app = create_app(serving, ServeOptions(max_batch=4, timeout=timeout))
    with TestClient(app, base_url="http://localhost") as client, ThreadPoolExecutor(len(PROMPTS)) as pool:
        body = lambda p: client.post("/v1/completions", json={"prompt": p, "max_tokens": max_tokens}).json()  # noqa: E731
        return list(pool.map(body, PROMPTS)), want

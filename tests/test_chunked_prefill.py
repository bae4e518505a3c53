"""Chunked prefill in the server's scheduler, in process: a long prompt goes in a chunk per step in the last
slot, a short request that arrives meanwhile is prefilled between its chunks, and both answers are exactly
what the engine gives each alone."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from fastapi.testclient import TestClient

from lopa.serve.app import ServeOptions, create_app

LONG = "Summarise the following notes. " + " ".join(f"Note {i}: the meeting moved to room {i % 7}." for i in range(90))
SHORT = "List three prime numbers."


def test_a_short_request_is_prefilled_between_the_chunks_of_a_long_one(engine):
    app = create_app(engine, ServeOptions(max_batch=2, timeout=120.0, prefill_chunk=64, max_context=4096))
    scheduler = app.state.server.scheduler
    calls: list[tuple[int, int, int]] = []  # (slot, start, tokens) of every prefill forward
    prefill = scheduler.batch.runner.prefill

    def logged(slot, ids, start=None):
        calls.append((slot, start, ids.numel()))
        return prefill(slot, ids, start)

    scheduler.batch.runner.prefill = logged
    long_ids = engine.encode_prompt(LONG, chat=False)
    assert len(long_ids) > 10 * 64
    want_long = engine.generate(LONG, max_new_tokens=8, chat=False).text
    want_short = engine.generate(SHORT, max_new_tokens=8, chat=False).text
    with TestClient(app, base_url="http://localhost") as client, ThreadPoolExecutor(2) as pool:
        long = pool.submit(client.post, "/v1/completions", json={"prompt": LONG, "max_tokens": 8})
        deadline = time.monotonic() + 60
        while not calls and time.monotonic() < deadline:  # the long prompt's first chunk is in
            time.sleep(0.01)
        short = pool.submit(client.post, "/v1/completions", json={"prompt": SHORT, "max_tokens": 8})
        assert short.result().json()["choices"][0]["text"] == want_short
        assert long.result().json()["choices"][0]["text"] == want_long
    long_starts = [start for slot, start, _ in calls if slot == 1]  # the last slot stages the long prompt
    assert long_starts == list(range(0, len(long_ids), 64)), "the long prompt goes in 64-token chunks"
    short_at = [i for i, (slot, _, _) in enumerate(calls) if slot == 0]
    assert len(short_at) == 1 and calls[short_at[0]] == (0, 0, len(engine.encode_prompt(SHORT, chat=False)))
    assert 0 < short_at[0] < len(calls) - 1, "the short prompt went in between the long prompt's chunks"

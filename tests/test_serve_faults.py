"""Fault injection into the server's scheduler, in process: a failing forward fails only its batch, a
broken engine turns /health to 503 and refuses work, and nothing waits forever."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from lopa.serve.app import ServeOptions, create_app
from lopa.serve.scheduler import MAX_FAILED_STEPS

BODY = {"prompt": "List three prime numbers.", "max_tokens": 16}


def failing_verify(verify, fail):
    """The runner's verify, raising where fail(call number) says so."""
    calls = {"n": 0}

    def wrapped(trees):
        calls["n"] += 1
        if fail(calls["n"]):
            raise RuntimeError(f"injected fault at forward {calls['n']}")
        return verify(trees)

    return wrapped, calls


@pytest.fixture
def app(engine):
    return create_app(engine, ServeOptions(max_batch=4, timeout=60.0))


def test_a_failing_forward_fails_its_batch_and_serving_goes_on(app, engine):
    scheduler = app.state.server.scheduler
    scheduler.batch.runner.verify, calls = failing_verify(scheduler.batch.runner.verify, lambda n: n == 3)
    with TestClient(app, base_url="http://localhost") as client:
        with ThreadPoolExecutor(4) as pool:
            replies = list(pool.map(lambda _: client.post("/v1/completions", json=BODY), range(4)))
        failed = [r for r in replies if r.status_code == 500]
        assert failed and all("injected fault" in r.json()["error"]["message"] for r in failed)
        assert all(r.status_code in (200, 500) for r in replies)
        after = client.post("/v1/completions", json=BODY)
        assert after.status_code == 200 and after.json()["choices"][0]["text"]
        assert client.get("/health").json()["status"] == "ok"
    assert calls["n"] > 3


def test_a_broken_engine_is_reported_and_refuses_work(app):
    scheduler = app.state.server.scheduler
    scheduler.batch.runner.verify, _ = failing_verify(scheduler.batch.runner.verify, lambda n: True)
    failures = []
    scheduler.on_failure = failures.append
    with TestClient(app, base_url="http://localhost") as client:
        replies = [client.post("/v1/completions", json=BODY) for _ in range(MAX_FAILED_STEPS)]
        assert all(r.status_code == 500 for r in replies)
        deadline = time.monotonic() + 10  # the scheduler gives up just after answering the last of them
        while (health := client.get("/health")).status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert health.status_code == 503 and health.json()["status"] == "failed"
        refused = client.post("/v1/completions", json=BODY)
        assert refused.status_code == 503 and "engine failed" in refused.json()["error"]["message"]
    assert len(failures) == 1 and "injected fault" in failures[0]


def test_a_stuck_scheduler_still_answers_by_the_deadline(engine):
    """The deadline is enforced by the request's handler too: a scheduler that never delivers still gets
    the client a 504 shortly after its timeout."""
    app = create_app(engine, ServeOptions(max_batch=1, timeout=1.0))
    scheduler = app.state.server.scheduler
    scheduler.submit = lambda job: None  # accepted, never scheduled
    with TestClient(app, base_url="http://localhost") as client:
        reply = client.post("/v1/completions", json=BODY)
    assert reply.status_code == 504 and reply.json()["error"]["type"] == "timeout"

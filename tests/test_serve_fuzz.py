"""A bounded fuzz of `lopa serve` on 127.0.0.1: whatever a client sends, it gets an answer or a 4xx with a JSON
error body, never a 5xx or a hang; a client trickling its headers does not hold up the others; and the server
still answers a normal request afterwards."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import httpx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the server inherits it: never oversubscribe the shared CPU

from lopa.bench.serve import ServerProcess  # noqa: E402

FIELDS = (
    "model",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stop",
    "seed",
    "stream",
    "n",
    "logprobs",
    "top_logprobs",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "min_tokens",
    "messages",
    "prompt",
    "stream_options",
    "ignore_eos",
    "tools",
    "response_format",
    "logit_bias",
    "user",
    "x-unknown",
)
LENGTHS = ("max_tokens", "max_completion_tokens", "min_tokens")
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**80), 2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.lists(st.one_of(st.integers(), st.text(max_size=8)), max_size=6),
    st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=8)), max_size=3),
    st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "system", "tool", ""]), "content": st.text(max_size=20)}
        ),
        max_size=3,
    ),
)


@pytest.fixture(scope="module")
def server():
    with ServerProcess(["--timeout", "60"], None, max_batch=4, timeout=180.0) as srv:
        yield srv


def base(chat: bool) -> dict:
    if chat:
        return {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 3}
    return {"prompt": "Say hi.", "max_tokens": 3}


def assert_answered(resp: httpx.Response) -> None:
    assert resp.status_code in (200, 400, 404, 405, 411, 413, 415, 422), (resp.status_code, resp.text[:300])
    if resp.status_code != 200:
        assert resp.json()["error"]["message"], resp.text[:300]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(FIELDS), value=VALUES, chat=st.booleans())
def test_any_field_value_gets_an_answer_or_a_json_4xx(server, field, value, chat):
    long_run = field in LENGTHS and isinstance(value, int) and not isinstance(value, bool) and 8 < value < 10**5
    assume(not long_run)  # a valid long answer is not a fuzz finding, only slow
    path = "/v1/chat/completions" if chat else "/v1/completions"
    assert_answered(httpx.post(server.url + path, json=base(chat) | {field: value}, timeout=60.0))


@pytest.mark.parametrize(
    "body",
    [
        b'{"prompt": "hi", "max_tokens": 2, "top_p": Infinity}',
        b'{"prompt": "hi", "max_tokens": 2, "temperature": -Infinity}',
        b'{"prompt": "hi", "max_tokens": 1e400}',
        b'{"prompt": "hi", "max_tokens": 2, "seed": 1' + b"0" * 5000 + b"}",
        b'{"prompt": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
        b'{"prompt": "\\ud800", "max_tokens": 2}',
        b'{"prompt": "hi", "stop": [' + b",".join([b'"x"'] * 20_000) + b"]}",
        b"\xff\xfe not utf-8",
        b"",
        b"[]",
        b"null",
    ],
)
def test_malformed_bodies_get_a_json_4xx(server, body):
    resp = httpx.post(
        server.url + "/v1/completions", content=body, headers={"content-type": "application/json"}, timeout=60.0
    )
    assert resp.status_code != 200 or json.loads(body).get("prompt") == "\ud800"
    assert_answered(resp)


def test_wrong_methods_and_content_types(server):
    assert_answered(httpx.get(server.url + "/v1/completions"))
    assert_answered(httpx.put(server.url + "/v1/chat/completions", json=base(True)))
    assert_answered(httpx.delete(server.url + "/health"))
    form = httpx.post(server.url + "/v1/completions", data={"prompt": "hi"})
    assert form.status_code in (415, 422) and form.json()["error"]["message"]
    plain = httpx.post(server.url + "/v1/completions", content=b"hi", headers={"content-type": "text/plain"})
    assert plain.status_code in (415, 422) and plain.json()["error"]["message"]


def test_a_client_trickling_its_headers_does_not_hold_up_others(server):
    """A slow client sends its request head a few bytes at a time (slowloris); a normal request meanwhile
    completes as fast as it would alone, and the server is healthy after the slow one gives up."""
    stop = threading.Event()

    def trickle():
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            head = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200
            for i in range(len(head)):
                if stop.is_set():
                    return
                try:
                    sock.sendall(head[i : i + 1])
                except OSError:  # the server may close a connection that takes too long: fine
                    return
                time.sleep(0.02)

    slow = threading.Thread(target=trickle)
    slow.start()
    try:
        time.sleep(0.3)
        start = time.monotonic()
        resp = httpx.post(server.url + "/v1/completions", json=base(False), timeout=60.0)
        assert resp.status_code == 200 and resp.json()["choices"][0]["text"]
        assert slow.is_alive(), "the slow client must still be trickling while the normal request is answered"
        assert time.monotonic() - start < 30
    finally:
        stop.set()
        slow.join()
    assert httpx.get(server.url + "/health").json()["status"] == "ok"


def test_the_server_still_answers_after_the_fuzz(server):
    resp = httpx.post(server.url + "/v1/chat/completions", json=base(True), timeout=60.0)
    assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"]

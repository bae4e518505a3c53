"""`lopa serve` as a client sees it: a real server process on 127.0.0.1, the OpenAI client, curl-like httpx."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the servers inherit it: never oversubscribe the shared CPU

from lopa.bench.serve import ServerProcess  # noqa: E402

KEY = "test-key"
PROMPTS = [
    "Write a haiku about the sea.",
    "List three prime numbers.",
    "What is the capital of France?",
    "Explain recursion to a child.",
    "Name two colours of the rainbow.",
    "Give me a tip for learning Python.",
    "Why is the sky blue?",
    "Translate 'good morning' into Spanish.",
]


@pytest.fixture(scope="module")
def server():
    with ServerProcess(["--always-draft"], None, max_batch=8, timeout=180.0) as srv:
        yield srv


@pytest.fixture(scope="module")
def strict():
    """One slot, one queue place, a short timeout and an API key."""
    srv = ServerProcess(
        ["--max-queue", "1", "--timeout", "10", "--api-key", KEY, "--drain", "60", "--max-context", "8192"],
        None,
        max_batch=1,
        timeout=180.0,
    )
    yield srv
    if srv.proc.poll() is None:
        srv.stop()


def chat(url: str, prompt: str, max_tokens: int = 24, headers: dict | None = None, **extra) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, **extra}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=120.0, headers=headers)


def sse(resp: httpx.Response) -> list[str]:
    return [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]


def test_chat_matches_engine_and_streams(server, engine):
    from openai import OpenAI

    solo = engine.generate(PROMPTS[0], max_new_tokens=24)
    client = OpenAI(base_url=server.url + "/v1", api_key="unused")
    reply = client.chat.completions.create(
        model="lopa", messages=[{"role": "user", "content": PROMPTS[0]}], max_tokens=24
    )
    assert reply.choices[0].message.content == solo.text
    assert reply.usage.completion_tokens == len(solo.token_ids)
    assert reply.choices[0].finish_reason == solo.finish_reason
    pieces = []
    for chunk in client.chat.completions.create(
        model="lopa", messages=[{"role": "user", "content": PROMPTS[0]}], max_tokens=24, stream=True
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
    assert "".join(pieces) == solo.text
    text = client.completions.create(model="lopa", prompt="def fib(n):", max_tokens=12)
    assert text.choices[0].text == engine.generate("def fib(n):", max_new_tokens=12, chat=False).text


def test_stream_carries_sources_and_ends_with_done(server):
    body = {"messages": [{"role": "user", "content": PROMPTS[1]}], "max_tokens": 16, "stream": True}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=120.0) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = sse(resp)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    steps = [c["lopa"] for c in chunks if "sources" in c.get("lopa", {})]
    assert steps and all(len(s["sources"]) == len(s["tokens"]) for s in steps)
    # every step ends with its bonus token, except a last one that max_tokens cut short
    assert all(s["sources"][-1] == "bonus" for s in steps[:-1])
    assert chunks[-1]["usage"]["completion_tokens"] == sum(len(s["tokens"]) for s in steps)


def test_concurrent_clients_equal_solo_outputs(server, engine):
    """Eight requests at once, greedy and sampled with a seed each, batched by the server: each answer is the
    engine's solo one (greedy lopa; seeded plain decoding), and seeds are reported."""
    sampling = {"temperature": 1.0, "top_p": 0.95, "min_p": 0.02, "frequency_penalty": 0.3}
    asks = [{} if i % 2 == 0 else {"seed": i, **sampling} for i in range(len(PROMPTS))]
    solo = [
        engine.generate(p, max_new_tokens=24, method="ar" if ask else "lopa", **ask).text
        for p, ask in zip(PROMPTS, asks)
    ]
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        replies = [r.json() for r in pool.map(lambda p_ask: chat(server.url, p_ask[0], **p_ask[1]), zip(PROMPTS, asks))]
    assert [r["choices"][0]["message"]["content"] for r in replies] == solo
    assert [r["lopa"].get("seed") for r in replies] == [ask.get("seed") for ask in asks]
    metrics = httpx.get(server.url + "/metrics").text
    assert "lopa_batch_size_bucket" in metrics
    batched = [line for line in metrics.splitlines() if line.startswith('lopa_batch_size_bucket{le="1.0"}')]
    total = [line for line in metrics.splitlines() if line.startswith("lopa_batch_size_count")]
    assert float(total[0].split()[1]) > float(batched[0].split()[1])  # some forwards verified several requests
    unseeded = chat(server.url, PROMPTS[0], 16, **sampling).json()  # a seed is drawn and reported: it reproduces
    again = chat(server.url, PROMPTS[0], 16, seed=unseeded["lopa"]["seed"], **sampling).json()
    assert again["choices"][0]["message"]["content"] == unseeded["choices"][0]["message"]["content"]


@pytest.mark.parametrize(
    "body, status, param",
    [
        (b"{not json", 400, None),
        ({"max_tokens": 4}, 422, "messages"),
        ({"messages": [], "max_tokens": 4}, 422, "messages"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, 422, "messages.0.role"),
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, 422, "max_tokens"),
        ({"messages": [{"role": "user", "content": "hi"}], "temperature": -1}, 422, "temperature"),
        ({"messages": [{"role": "user", "content": "hi"}], "top_p": 0}, 422, "top_p"),
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100000}, 400, None),
        ({"messages": [{"role": "user", "content": "word " * 3000}], "max_tokens": 4}, 400, None),
        ({"prompt": "   "}, 400, None),
        ({"prompt": ["a", "b"]}, 400, None),
        ({"prompt": "hi", "n": 2}, 400, "n"),
        ({"prompt": "hi", "seed": 2**70}, 422, "seed"),
        ({"prompt": "hi", "temperature": "hot"}, 422, "temperature"),
        (b'{"prompt": "hi", "temperature": NaN}', 422, "temperature"),
        ({"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}, 422, None),
        ({"prompt": "hi", "stop": "x" * 300}, 422, None),
        ({"prompt": "hi", "logprobs": 6}, 422, "logprobs"),
        ({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 3}, 422, None),  # needs logprobs: true
        ({"messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 21}, 422, "top_logprobs"),
        ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, 400, "tools"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}},
            400,
            "response_format",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "presence_penalty": 3}, 422, "presence_penalty"),
        ({"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"5": 1}}, 400, "logit_bias"),
        ({"messages": [{"role": "user", "content": "hi"}] * 600}, 422, "messages"),
        ({"messages": [{"role": "user", "content": "hi"}], "model": "gpt-4o"}, 404, "model"),
        ({"prompt": "x" * 900_000, "max_tokens": 4}, 400, None),  # refused by its length, before tokenizing
    ],
)
def test_bad_input_gets_openai_error(server, body, status, param):
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    path = (
        "/v1/completions"
        if b"prompt" in (body if isinstance(body, bytes) else json.dumps(body).encode())
        else "/v1/chat/completions"
    )
    resp = httpx.post(server.url + path, timeout=60.0, headers={"content-type": "application/json"}, **kwargs)
    assert resp.status_code == status
    error = resp.json()["error"]
    assert error["message"] and error["type"] == "invalid_request_error" and error["param"] == param


def test_fields_people_use_are_honoured(server, engine):
    """Accepted without effect: OpenAI's "off" values, unknown fields, stream_options; honoured: top_k,
    repetition_penalty (vLLM's extras) and the developer role (a system message to the template)."""
    body = {
        "prompt": PROMPTS[1],
        "max_tokens": 12,
        "logprobs": None,
        "presence_penalty": 0,
        "user": "u1",
        "stream_options": {"include_usage": True},
        "model": "lopa",
    }
    resp = httpx.post(server.url + "/v1/completions", json=body, timeout=120.0)
    assert resp.status_code == 200 and resp.headers["x-request-id"] == resp.json()["id"]
    penalties = {"repetition_penalty": 1.3, "top_k": 5, "presence_penalty": 0.4, "frequency_penalty": 0.3}
    penalised = engine.generate(PROMPTS[1], max_new_tokens=12, chat=False, **penalties).text
    body = {"prompt": PROMPTS[1], "max_tokens": 12, **penalties}
    assert (
        httpx.post(server.url + "/v1/completions", json=body, timeout=120.0).json()["choices"][0]["text"] == penalised
    )
    long = engine.generate(PROMPTS[2], max_new_tokens=40, min_tokens=30).text
    assert chat(server.url, PROMPTS[2], 40, min_tokens=30).json()["choices"][0]["message"]["content"] == long
    assert chat(server.url, PROMPTS[2], 20, min_tokens=30).status_code == 400  # more than max_tokens
    developer = chat(
        server.url,
        PROMPTS[2],
        12,
        messages=[{"role": "developer", "content": "Answer briefly."}, {"role": "user", "content": PROMPTS[2]}],
    )
    system = chat(
        server.url,
        PROMPTS[2],
        12,
        messages=[{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": PROMPTS[2]}],
    )
    assert developer.status_code == 200 and developer.json()["choices"][0] == system.json()["choices"][0]


def test_logprobs_are_the_engines_streamed_or_not(server, engine):
    """Chat's logprobs.content and the legacy completions' columns carry the engine's log-probabilities of the
    emitted tokens (the target model's, after verification), whose texts make up the answer."""
    want = engine.generate(PROMPTS[4], max_new_tokens=16, logprobs=2)
    resp = chat(server.url, PROMPTS[4], 16, logprobs=True, top_logprobs=2).json()["choices"][0]
    content = resp["logprobs"]["content"]
    assert [e["logprob"] for e in content] == pytest.approx([x.logprob for x in want.logprobs], abs=1e-4)
    assert "".join(e["token"] for e in content) == resp["message"]["content"] == want.text
    assert all(len(e["top_logprobs"]) == 2 and e["top_logprobs"][0]["logprob"] >= e["logprob"] - 1e-6 for e in content)
    assert bytes(content[0]["bytes"]).decode() == content[0]["token"]
    body = {"messages": [{"role": "user", "content": PROMPTS[4]}], "max_tokens": 16, "logprobs": True, "stream": True}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=120.0) as streamed:
        chunks = [json.loads(e) for e in sse(streamed)[:-1]]
    streamed_lp = [
        e["logprob"] for c in chunks if c["choices"][0]["logprobs"] for e in c["choices"][0]["logprobs"]["content"]
    ]
    assert streamed_lp == pytest.approx([x.logprob for x in want.logprobs], abs=1e-4)
    plain = engine.generate(PROMPTS[4], max_new_tokens=8, logprobs=1, chat=False)
    legacy = httpx.post(
        server.url + "/v1/completions", json={"prompt": PROMPTS[4], "max_tokens": 8, "logprobs": 1}, timeout=120.0
    ).json()["choices"][0]["logprobs"]
    assert legacy["token_logprobs"] == pytest.approx([x.logprob for x in plain.logprobs], abs=1e-4)
    assert legacy["text_offset"][0] == 0 and legacy["text_offset"][1] == len(legacy["tokens"][0])
    assert all(len(top) == 1 for top in legacy["top_logprobs"])
    assert chat(server.url, PROMPTS[4], 4).json()["choices"][0]["logprobs"] is None


def test_bodies_are_bounded_before_they_are_read(server):
    big = httpx.post(
        server.url + "/v1/completions", content=b"x" * (9 << 20), headers={"content-type": "application/json"}
    )
    assert big.status_code == 413 and big.json()["error"]["message"]
    chunked = httpx.post(server.url + "/v1/completions", content=iter([b'{"prompt": "hi"}']))
    assert chunked.status_code == 411
    for path in ("/docs", "/redoc", "/openapi.json"):  # off unless --docs
        assert httpx.get(server.url + path).status_code == 404
    assert chat(server.url, PROMPTS[2], 4).status_code == 200  # and the server still answers


def test_multi_token_stop_strings_cut_exactly(server, engine):
    """Stop strings of several tokens, crossing lookahead steps: the text, streamed or not, is plain decoding's
    text cut before the first stop string."""
    plain = engine.generate(PROMPTS[3], max_new_tokens=60, method="ar").text
    words = plain.split()
    for stop in (" ".join(words[4:6]), " ".join(words[10:13]), words[8][:3]):
        want = plain[: plain.find(stop)]
        resp = chat(server.url, PROMPTS[3], 60, stop=[stop])
        assert (
            resp.json()["choices"][0]["message"]["content"] == want
            and resp.json()["choices"][0]["finish_reason"] == "stop"
        )
        body = {"messages": [{"role": "user", "content": PROMPTS[3]}], "max_tokens": 60, "stop": stop, "stream": True}
        with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=120.0) as streamed:
            chunks = [json.loads(e) for e in sse(streamed)[:-1]]
        assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == want


def test_models_health_metrics_and_unknown_path(server):
    assert httpx.get(server.url + "/v1/models").json()["data"][0]["object"] == "model"
    assert httpx.get(server.url + "/health").json()["status"] == "ok"
    metrics = httpx.get(server.url + "/metrics").text
    for name in (
        "lopa_requests_total",
        "lopa_generated_tokens_total",
        "lopa_tokens_per_forward",
        "lopa_queue_depth",
        "lopa_request_latency_seconds_bucket",
        "lopa_time_to_first_token_seconds_bucket",
        "process_resident_memory_bytes",
    ):
        assert name in metrics
    missing = httpx.get(server.url + "/v1/nothing")
    assert missing.status_code == 404 and "error" in missing.json()


def cancelled(url: str) -> int:
    """Requests the server counted as cancelled (their client left)."""
    line = [x for x in httpx.get(url + "/metrics").text.splitlines() if 'outcome="cancelled"' in x]
    return int(float(line[0].split()[1])) if line else 0


def test_disconnect_frees_the_slot(server):
    before = cancelled(server.url)
    body = {"messages": [{"role": "user", "content": PROMPTS[3]}], "max_tokens": 400, "stream": True}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=120.0) as resp:
        for i, _ in enumerate(resp.iter_lines()):
            if i > 4:
                break
    deadline = time.monotonic() + 30
    while cancelled(server.url) == before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cancelled(server.url) == before + 1
    assert chat(server.url, PROMPTS[2], 8).status_code == 200


def test_a_client_that_leaves_a_non_streamed_request_is_let_go_within_a_second(server):
    """The client gives up 0.3 s into a long answer (no streaming): its slot is freed, not decoded to the end."""
    before = cancelled(server.url)
    body = {"messages": [{"role": "user", "content": PROMPTS[3]}], "max_tokens": 240, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/chat/completions", json=body, timeout=httpx.Timeout(60.0, read=0.3))
    left = time.monotonic()  # the client closed its connection
    while cancelled(server.url) == before and time.monotonic() < left + 30:
        time.sleep(0.05)
    freed = time.monotonic() - left
    assert cancelled(server.url) == before + 1 and freed < 1.0, f"freed after {freed:.1f} s"


def test_a_foreign_host_is_refused_without_an_api_key(server, strict):
    """DNS rebinding: a page on another site reaching the loopback sends its own name as Host."""
    port = server.url.rsplit(":", 1)[1]
    foreign = chat(server.url, "hi", 4, headers={"Host": f"rebind.example:{port}"})
    assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "host_not_allowed"
    assert httpx.get(server.url + "/health", headers={"Host": "rebind.example"}).status_code == 403
    assert chat(server.url, "hi", 4, headers={"Host": f"localhost:{port}"}).status_code == 200
    keyed = {"Host": "api.example", "Authorization": f"Bearer {KEY}"}  # with a key, the key is the guard
    assert chat(strict.url, "hi", 4, headers=keyed).status_code == 200


def test_the_guard_parses_hosts_and_takes_allowed_names() -> None:
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from lopa.serve.guard import Guard, host_name

    assert [host_name(h) for h in ("[::1]:8000", "LocalHost:80", "a.example.", "::1", "10.0.0.2")] == [
        "::1",
        "localhost",
        "a.example",
        "::1",
        "10.0.0.2",
    ]
    app = Guard(Starlette(routes=[Route("/", lambda r: PlainTextResponse("ok"))]), None, ["box.lan"])
    assert TestClient(app, base_url="http://box.lan:8000").get("/").status_code == 200
    assert TestClient(app, base_url="http://10.1.2.3:8000").get("/").status_code == 200
    assert TestClient(app, base_url="http://other.lan").get("/").status_code == 403


def test_empty_api_key_is_refused_at_start(tmp_path, capsys, monkeypatch):
    from lopa.cli import main

    empty = tmp_path / "key"
    empty.write_text("\n")
    assert main(["serve", "--api-key", ""]) == 2
    assert main(["serve", "--api-key-file", str(empty)]) == 2
    monkeypatch.setenv("LOPA_API_KEY", " ")
    assert main(["serve"]) == 2
    assert capsys.readouterr().err.count("is empty") == 3


def test_auth(server, strict):
    assert chat(strict.url, "hi", 4).status_code == 401
    assert (
        chat(strict.url, "hi", 4, headers={"Authorization": "Bearer wrong"}).json()["error"]["code"]
        == "invalid_api_key"
    )
    assert chat(strict.url, "hi", 4, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert httpx.get(strict.url + "/health").status_code == 200  # health and metrics stay open
    assert chat(server.url, "hi", 4).status_code == 200  # no key configured: no auth


def test_full_queue_and_timeout(strict):
    auth = {"Authorization": f"Bearer {KEY}"}
    # ignore_eos: the answer outlasts the 10 s timeout however soon the model would have ended it
    long = {
        "messages": [{"role": "user", "content": PROMPTS[3]}],
        "max_tokens": 8000,
        "stream": True,
        "ignore_eos": True,
    }
    with httpx.Client(timeout=60.0, headers=auth) as client:
        with client.stream("POST", strict.url + "/v1/chat/completions", json=long) as running:
            lines = running.iter_lines()
            next(lines)  # decoding: the one slot is taken
            queued: list[httpx.Response] = []
            waiting = threading.Thread(
                target=lambda: queued.append(
                    client.post(strict.url + "/v1/chat/completions", json={**long, "stream": False})
                )
            )
            waiting.start()
            deadline = time.monotonic() + 10
            while "lopa_queue_depth 1" not in client.get(strict.url + "/metrics").text and time.monotonic() < deadline:
                time.sleep(0.1)
            rejected = client.post(strict.url + "/v1/chat/completions", json={**long, "stream": False})
            assert rejected.status_code == 429 and rejected.headers["retry-after"]
            assert rejected.json()["error"]["type"] == "rate_limit_error"
            events = [
                line[6:] for line in lines if line.startswith("data: ")
            ]  # the 10 s timeout ends it with an error event
            assert json.loads(events[-2])["error"]["type"] == "timeout" and events[-1] == "[DONE]"
            waiting.join(30)
    # the queued request's 10 s ran out too (queueing counts): its own 504, not a hang or a 5xx of another kind
    assert len(queued) == 1 and queued[0].status_code == 504 and queued[0].json()["error"]["type"] == "timeout"


def test_sigterm_drains_and_exits(strict):
    auth = {"Authorization": f"Bearer {KEY}"}
    body = {"messages": [{"role": "user", "content": PROMPTS[6]}], "max_tokens": 20, "stream": True}
    with httpx.stream("POST", strict.url + "/v1/chat/completions", json=body, headers=auth, timeout=60.0) as resp:
        lines = resp.iter_lines()
        next(lines)
        strict.proc.send_signal(signal.SIGTERM)
        events = [line[6:] for line in lines if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and "usage" in json.loads(events[-2])
    assert strict.proc.wait(60) == 0


@pytest.mark.skipif(
    not shutil.which("chromium") or not shutil.which("chromedriver"),
    reason="optional capability: chromium and chromedriver not installed (.ci/run installs them)",
)
def test_web_page_streams_coloured_tokens(server, tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.set_page_load_timeout(30)
        driver.get(server.url + "/")
        prompt = driver.find_element(By.ID, "prompt")
        prompt.clear()
        prompt.send_keys("Repeat after me: one two three, one two three, one two three.")
        driver.find_element(By.ID, "max").clear()
        driver.find_element(By.ID, "max").send_keys("32")
        driver.find_element(By.ID, "go").click()
        WebDriverWait(driver, 90).until(lambda d: d.find_element(By.ID, "state").text == "done")
        spans = driver.find_elements(By.CSS_SELECTOR, "#out span.tok")
        assert len(spans) == int(driver.find_element(By.ID, "ntok").text) > 0
        colour = {s.get_attribute("title"): s.value_of_css_property("background-color") for s in spans}
        drafted = {title: c for title, c in colour.items() if title != "bonus"}
        assert drafted, f"no drafted token on the page: {colour}"
        transparent = colour.get("bonus", "rgba(0, 0, 0, 0)")
        assert all(c != transparent for c in drafted.values()), f"drafted tokens are not coloured: {colour}"
        assert float(driver.find_element(By.ID, "tpf").text) > 1.0
        assert not driver.find_element(By.ID, "error").text
    finally:
        driver.quit()

"""`lopa bench-serve`: aggregate throughput of a real server under 1..N concurrent streaming clients.

The servers run side by side, each on a free loopback port: lookahead decoding (the default),
batched plain decoding (--no-parallel), one request at a time (--max-batch 1) and, on request,
lookahead through torch.compile (--compile). Each concurrency level sends greedy chat requests
built from Spec-Bench prompts, interleaved: every round runs each server in turn on the same
prompts (an idle server waits without using the cores), its clients sending the next request as
soon as an answer ends, and a level's figure is the median over rounds. A load run then keeps
clients busy for a fixed time and samples the lookahead server's resident memory. Everything is
bounded and stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .data import load_questions, spread

MODES = {
    "lopa": [],
    "plain": ["--no-parallel"],
    "serial": ["--max-batch", "1"],
    "compiled": ["--compile"],
    "one-thread": ["--threads", "1"],
    "replicas": ["--replicas", "2", "--threads", "1"],  # two Ray Serve replicas of one thread (lopa[cluster])
}
DEFAULT_MODES = ("lopa", "plain", "serial")
DEFAULT_PROMPTS = "/work/shared/data/spec_bench_dev.jsonl"


def add_bench_parser(subparsers) -> None:
    p = subparsers.add_parser("bench-serve", help="throughput and latency of `lopa serve` under concurrent clients")
    p.add_argument("--model", default=None)
    p.add_argument("--prompts", default=DEFAULT_PROMPTS, help="Spec-Bench jsonl (question_id, category, turns)")
    p.add_argument(
        "--prompt-order",
        choices=("categories", "file"),
        default="categories",
        help="categories: one prompt of each category in turn; file: the file's order",
    )
    p.add_argument("--concurrency", default="1,4,8,16", help="comma-separated client counts")
    p.add_argument("--rounds", type=int, default=2, help="rounds at each level (a level's figure is their median)")
    p.add_argument(
        "--requests",
        type=int,
        default=32,
        help="requests per round and level (at least one per client), sent by the clients in a closed loop",
    )
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--modes", default=",".join(DEFAULT_MODES), help=f"servers to compare: {', '.join(MODES)}")
    p.add_argument(
        "--load-seconds",
        type=float,
        default=60.0,
        help="soak length (0: none): lopa server, --load-clients clients streaming, not streaming and leaving",
    )
    p.add_argument("--load-clients", type=int, default=16)
    p.add_argument("--soak-mode", default="lopa", help="the server the soak runs on (one of --modes)")
    p.add_argument(
        "--retries", type=int, default=0, help="soak clients resend a request that got a 5xx before any text"
    )
    p.add_argument(
        "--kill-replica-at",
        type=float,
        default=None,
        metavar="S",
        help="SIGKILL one Ray Serve replica S seconds into the soak (--soak-mode replicas)",
    )
    p.add_argument(
        "--long-prompt",
        type=int,
        default=4000,
        metavar="TOKENS",
        help="time to first token of a short request while a prompt this long is admitted, with chunked "
        "prefill and without (0: skip)",
    )
    p.add_argument("--probes", type=int, default=5, help="short requests timed idle and during each long prompt")
    p.add_argument("--out", default="bench-serve", help="directory for results.json and tokens_per_s.png")
    p.add_argument("--start-timeout", type=float, default=300.0)
    p.set_defaults(func=run_bench)


def load_prompts(path: str, order: str = "categories") -> list[str]:
    """The first turns of a Spec-Bench jsonl. `order` "file" keeps the file's order (Spec-Bench dev opens with its
    MT-bench categories, 5 prompts each, so small levels see only writing and roleplay); "categories" takes one
    prompt of each category in turn, so every level samples the whole set."""
    questions = load_questions(path)
    if order == "categories":
        questions = spread(questions, len(questions))
    return [q.turns[0] for q in questions]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`lopa serve` in a child process on a free loopback port; SIGTERM on exit. Its stderr goes to a temporary
    file (`log()` reads it), never to a pipe nobody drains: a chatty server would block writing to a full pipe."""

    def __init__(self, extra: list[str], model: str | None, max_batch: int, timeout: float):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "lopa", "serve", "--port", str(self.port), "--max-batch", str(max_batch)]
        cmd += (["--model", model] if model else []) + extra
        self.stderr = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.stderr, text=True)
        self._wait(timeout)

    def _wait(self, timeout: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log()[-2000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"server did not start within {timeout} s")

    def log(self) -> str:
        """What the server wrote to stderr so far."""
        self.stderr.seek(0)
        return self.stderr.read()

    def stop(self, timeout: float = 60.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


CLIENT_KINDS = ("stream", "full", "leave")  # streamed, not streamed, and streamed but gone after the first text


RETRYABLE = {500, 502, 503, 504}  # what the OpenAI SDK retries besides 408/409/429 and lost connections


async def one_request(client, url: str, prompt: str, max_tokens: int, kind: str = "stream", retries: int = 0) -> dict:
    """One greedy chat completion; returns ttft, latency, tokens, or an error. `kind` "leave" closes the stream
    after the first piece of text, as a client that goes away mid-answer. `retries`: a 5xx or a lost connection
    before any text is sent again, after 0.5, 1, 2 ... s, as the OpenAI SDK does (its default is 2)."""
    start = time.perf_counter()
    for attempt in itertools.count():
        result = await _attempt(client, url, prompt, max_tokens, kind, start)
        if not result.pop("retryable", False) or attempt == retries:
            return result | {"retries": attempt}
        await asyncio.sleep(0.5 * 2**attempt)


async def _attempt(client, url: str, prompt: str, max_tokens: int, kind: str, start: float) -> dict:
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": kind != "full",
    }
    ttft, tokens, done = None, 0, kind == "full"
    try:
        if kind == "full":
            resp = await client.post(url + "/v1/chat/completions", json=body)
            if resp.status_code != 200:
                return {"error": f"HTTP {resp.status_code}", "retryable": resp.status_code in RETRYABLE}
            tokens = resp.json()["usage"]["completion_tokens"]
        else:
            async with client.stream("POST", url + "/v1/chat/completions", json=body) as resp:
                if resp.status_code != 200:
                    return {"error": f"HTTP {resp.status_code}", "retryable": resp.status_code in RETRYABLE}
                async for line in resp.aiter_lines():
                    done = done or line == "data: [DONE]"
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        return {"error": chunk["error"]["message"]}
                    if ttft is None and chunk["choices"][0].get("delta", {}).get("content"):
                        ttft = time.perf_counter() - start
                        if kind == "leave":
                            done = True
                            break
                    if chunk.get("usage"):
                        tokens = chunk["usage"]["completion_tokens"]
    except Exception as exc:  # count transport failures, keep benchmarking
        return {"error": repr(exc), "retryable": ttft is None}
    if not done:
        return {"error": "the stream ended without [DONE]", "retryable": ttft is None}
    return {
        "ttft": ttft if ttft is not None else time.perf_counter() - start,
        "latency": time.perf_counter() - start,
        "tokens": tokens,
    }


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def run_level(url: str, prompts: list[str], clients: int, requests: int, max_tokens: int, first: int = 0) -> dict:
    """`requests` requests (prompts from index `first` on) through `clients` concurrent clients, each sending the
    next prompt as soon as its answer ended (a closed loop), so that the level's time rests on more than one wave
    of answers and every level samples the same prompts."""
    import httpx

    queue = iter(prompts[(first + i) % len(prompts)] for i in range(requests))
    async with httpx.AsyncClient(timeout=600.0) as client:

        async def worker() -> list[dict]:
            return [await one_request(client, url, prompt, max_tokens) for prompt in queue]

        start = time.perf_counter()
        results = [r for rs in await asyncio.gather(*(worker() for _ in range(clients))) for r in rs]
        wall = time.perf_counter() - start
    ok = [r for r in results if "error" not in r]
    return {
        "clients": clients,
        "requests": len(results),
        "failed": len(results) - len(ok),
        "tokens": sum(r["tokens"] for r in ok),
        "wall_s": wall,
        "tokens_per_s": sum(r["tokens"] for r in ok) / wall,
        "ttft_p50": _pct([r["ttft"] for r in ok], 0.5),
        "ttft_p99": _pct([r["ttft"] for r in ok], 0.99),
        "latency_p50": _pct([r["latency"] for r in ok], 0.5),
        "latency_p99": _pct([r["latency"] for r in ok], 0.99),
    }


def _median_level(rounds: list[dict]) -> dict:
    """One level's figures over its rounds: medians of the rates and percentiles, sums of the counts."""
    level = {
        key: statistics.median(r[key] for r in rounds) for key in rounds[0] if key.endswith(("_s", "_p50", "_p99"))
    }
    level |= {key: sum(r[key] for r in rounds) for key in ("requests", "failed", "tokens")}
    return level | {"clients": rounds[0]["clients"], "rounds": rounds}


def _metric(url: str, name: str) -> float:
    """One unlabelled value from the server's /metrics."""
    import httpx

    for line in httpx.get(url + "/metrics", timeout=5.0).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def kill_one_replica() -> int:
    """SIGKILL one Ray Serve replica process of lopa's app (as a crash would kill it); returns its pid. Linux only."""
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes() if proc.name.isdigit() else b""
        except OSError:
            continue
        if b"ServeReplica:lopa:" in command:
            os.kill(int(proc.name), signal.SIGKILL)
            return int(proc.name)
    raise RuntimeError("no Ray Serve replica process of lopa's app is running")


async def load_run(
    url: str,
    prompts: list[str],
    clients: int,
    seconds: float,
    max_tokens: int,
    retries: int = 0,
    kill_at: float | None = None,
) -> dict:
    """Keep `clients` busy for `seconds`, each client of one kind in turn (CLIENT_KINDS); count failures,
    sample the server's resident memory, and check that no request still holds a slot afterwards.
    `retries`: each request's retries (one_request); `kill_at`: SIGKILL one Ray Serve replica that many s in."""
    import httpx

    deadline = time.monotonic() + seconds
    samples: list[tuple[float, float]] = []
    start = time.monotonic()
    killed: dict[str, float] = {}

    async def killer():
        if kill_at is not None:
            await asyncio.sleep(kill_at)
            killed.update(pid=kill_one_replica(), at_s=round(time.monotonic() - start, 1))

    async def sampler():
        while time.monotonic() < deadline:
            rss = await asyncio.to_thread(_metric, url, "process_resident_memory_bytes")
            samples.append((time.monotonic() - start, rss))
            await asyncio.sleep(min(5.0, seconds / 10))

    async with httpx.AsyncClient(timeout=600.0) as client:

        async def worker(w: int) -> list[dict]:
            out, i, kind = [], w, CLIENT_KINDS[w % len(CLIENT_KINDS)]
            while time.monotonic() < deadline:
                answer = await one_request(client, url, prompts[i % len(prompts)], max_tokens, kind, retries)
                out.append(answer | {"kind": kind})
                i += clients
            return out

        workers = asyncio.gather(*(worker(w) for w in range(clients)))
        results, _, _ = await asyncio.gather(workers, sampler(), killer())
    flat = [r for rs in results for r in rs]
    settle = time.monotonic() + 15  # a client that just left is reaped at the scheduler's next step
    while (
        running := _metric(url, "lopa_active_requests") + _metric(url, "lopa_queue_depth")
    ) and time.monotonic() < settle:
        await asyncio.sleep(0.2)
    half = [m for t, m in samples if t >= seconds / 2]
    return {
        "seconds": seconds,
        "clients": clients,
        "requests": {kind: sum(r["kind"] == kind for r in flat) for kind in CLIENT_KINDS},
        "failed": sum("error" in r for r in flat),
        "errors": sorted({r["error"] for r in flat if "error" in r})[:5],
        "retried": sum(r["retries"] > 0 for r in flat),
        "killed_replica": killed or None,
        "running_after": running,
        "rss_mb": [(round(t, 1), round(m / 2**20, 1)) for t, m in samples],
        "rss_growth_second_half_pct": 100 * (max(half) - half[0]) / half[0] if half else float("nan"),
    }


async def prefill_interference(url: str, short: str, long: str, probes: int) -> dict:
    """Time to first token of a short request when idle, and while a long prompt is being admitted (each
    probe starts a new long request and sends the short one just after it)."""
    import httpx

    async with httpx.AsyncClient(timeout=600.0) as client:
        idle = [(await one_request(client, url, short, 4))["ttft"] for _ in range(probes)]
        loaded = []
        for _ in range(probes):
            body = {"prompt": long, "max_tokens": 1, "temperature": 0}
            background = asyncio.create_task(client.post(url + "/v1/completions", json=body))
            await asyncio.sleep(0.05)  # the long prompt is admitted first
            loaded.append((await one_request(client, url, short, 4))["ttft"])
            status = (await background).status_code
            if status != 200:
                raise RuntimeError(f"the long prompt got HTTP {status}")
    return {
        "ttft_idle_s": statistics.median(idle),
        "ttft_during_long_prefill_s": statistics.median(loaded),
        "ratio": statistics.median(loaded) / statistics.median(idle),
        "probes": probes,
    }


def long_text(model: str | None, prompts: list[str], tokens: int) -> str:
    """Prompts joined and cut to `tokens` tokens of the model's tokenizer (as raw completion text)."""
    from transformers import AutoTokenizer

    from ..models.loading import resolve_model_dir

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir(model)[1])
    ids: list[int] = []
    for i in range(len(prompts) * 100):
        if len(ids) >= tokens:
            break
        ids += tokenizer(prompts[i % len(prompts)] + "\n", add_special_tokens=False).input_ids
    return tokenizer.decode(ids[:tokens])


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, levels in results["modes"].items():
        ax.plot([lv["clients"] for lv in levels], [lv["tokens_per_s"] for lv in levels], marker="o", label=mode)
    ax.set_xlabel("concurrent clients")
    ax.set_ylabel("aggregate tokens/s")
    ax.set_title(f"lopa serve, {results['model']}, greedy, max_tokens {results['max_tokens']}")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run_bench(args: argparse.Namespace) -> int:
    levels = [int(c) for c in args.concurrency.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        print(f"lopa: error: unknown modes {sorted(unknown)}", file=sys.stderr)
        return 2
    prompts = load_prompts(args.prompts, args.prompt_order)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {
        "model": args.model or "default",
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "requests": args.requests,
        "prompt_order": args.prompt_order,
        "modes": {},
    }
    with contextlib.ExitStack() as stack:
        servers = {
            m: stack.enter_context(ServerProcess(MODES[m], args.model, max(levels), args.start_timeout)) for m in modes
        }
        for server in servers.values():
            asyncio.run(run_level(server.url, prompts, 1, 1, 8))  # warm-up: allocations, first-use paths
        results["modes"] = {m: [] for m in modes}
        for clients in levels:
            rounds: dict[str, list[dict]] = {m: [] for m in modes}
            requests = max(args.requests, clients)
            for r in range(args.rounds):  # interleaved: every server runs the round's prompts before the next round
                for mode in modes:
                    level = run_level(servers[mode].url, prompts, clients, requests, args.max_tokens, r * requests)
                    rounds[mode].append(asyncio.run(level))
            for mode in modes:
                level = _median_level(rounds[mode])
                results["modes"][mode].append(level)
                print(
                    f"{mode:8s} clients {clients:3d}: {level['tokens_per_s']:7.1f} tok/s  ttft p50 {level['ttft_p50']:.2f}s "
                    f"latency p50 {level['latency_p50']:.2f}s  failed {level['failed']}",
                    flush=True,
                )
        if args.soak_mode in servers and args.load_seconds > 0:
            url = servers[args.soak_mode].url
            soak = load_run(
                url, prompts, args.load_clients, args.load_seconds, args.max_tokens, args.retries, args.kill_replica_at
            )
            load = asyncio.run(soak) | {"mode": args.soak_mode}
            results["load"] = load
            print(
                f"soak ({args.soak_mode}): {load['requests']} requests in {load['seconds']:g} s, {load['failed']} "
                f"failed, {load['retried']} retried, killed {load['killed_replica']}, "
                f"{load['running_after']:g} still running after, RSS growth over the second half "
                f"{load['rss_growth_second_half_pct']:.1f} %",
                flush=True,
            )
    if args.long_prompt > 0:
        results["prefill"] = {}
        long = long_text(args.model, prompts, args.long_prompt)
        for name, chunk in (("chunked", []), ("unchunked", ["--prefill-chunk", str(1 << 30)])):
            extra = ["--max-context", str(args.long_prompt + 1024), *chunk]
            with ServerProcess(extra, args.model, 2, args.start_timeout) as server:
                asyncio.run(run_level(server.url, prompts, 1, 1, 8))  # warm-up
                probe = asyncio.run(prefill_interference(server.url, prompts[0], long, args.probes))
            results["prefill"][name] = probe
            print(
                f"prefill {name:9s}: short request ttft {probe['ttft_idle_s']:.3f} s idle, "
                f"{probe['ttft_during_long_prefill_s']:.3f} s during a {args.long_prompt}-token prompt "
                f"({probe['ratio']:.2f}x)",
                flush=True,
            )
    (out / "results.json").write_text(json.dumps(results, indent=1))
    plot(results, out / "tokens_per_s.png")
    print(f"wrote {out / 'results.json'} and {out / 'tokens_per_s.png'}")
    return 0

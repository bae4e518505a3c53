"""`lopa serve --replicas N` on Ray Serve: the deployment settings it derives, and (slow) two local replicas that
answer like one engine, share the load, and survive one of them being killed mid-load."""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the servers inherit it: never oversubscribe the shared CPU

pytest.importorskip("ray.serve", reason="Ray Serve is the optional extra lopa[cluster]")

from lopa.bench.serve import ServerProcess, load_run  # noqa: E402
from lopa.errors import InvalidRequestError  # noqa: E402
from lopa.serve.app import ServeOptions  # noqa: E402
from lopa.serve.cluster import Scaling  # noqa: E402

from .test_serve import PROMPTS, chat  # noqa: E402

REPLICA = "x-lopa-replica"


def cluster_args(**given) -> argparse.Namespace:
    base = {"replicas": 2, "min_replicas": None, "max_replicas": None, "target_ongoing_requests": None}
    return argparse.Namespace(**(base | {"threads": 1, "max_batch": 8} | given))


def test_fixed_replicas_reserve_their_threads_and_take_what_their_batch_and_queue_hold():
    options = ServeOptions(max_batch=8, max_queue=16, drain_s=12.0)
    deployment = Scaling.from_args(cluster_args(threads=3)).deployment_options(options)
    assert deployment["num_replicas"] == 2 and "autoscaling_config" not in deployment
    assert deployment["ray_actor_options"] == {"num_cpus": 3}
    assert deployment["max_ongoing_requests"] == 24 and deployment["max_queued_requests"] == 16
    assert deployment["graceful_shutdown_timeout_s"] == 12.0


def test_autoscaling_starts_at_replicas_between_the_floor_and_the_ceiling():
    scaling = Scaling.from_args(cluster_args(min_replicas=1, max_replicas=4, target_ongoing_requests=None))
    config = scaling.deployment_options(ServeOptions(max_batch=8))["autoscaling_config"]
    assert config == {"min_replicas": 1, "initial_replicas": 2, "max_replicas": 4, "target_ongoing_requests": 8}
    threads = Scaling.from_args(cluster_args(threads=None)).cpus
    assert threads == max(1, (os.cpu_count() or 1) // 2)  # without --threads: the machine's cores shared out


@pytest.mark.parametrize(
    "given",
    [
        {"replicas": 0},
        {"min_replicas": 3, "max_replicas": 4},  # floor above the initial count
        {"max_replicas": 1},  # ceiling below it
        {"min_replicas": 1},  # a floor without autoscaling
        {"target_ongoing_requests": 4.0},
    ],
)
def test_inconsistent_replica_counts_are_refused(given):
    with pytest.raises(InvalidRequestError):
        Scaling.from_args(cluster_args(**given))


def replicas_answering(url: str, timeout: float = 120.0) -> set[str]:
    """The replica ids that answer /health while the service is asked for it 32 times at once (until two answer)."""
    deadline, seen = time.monotonic() + timeout, set()
    while len(seen) < 2 and time.monotonic() < deadline:
        with ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(lambda _: httpx.get(url + "/health", timeout=30.0), range(32)))
        seen |= {r.headers[REPLICA] for r in replies if r.status_code == 200}
    return seen


@pytest.mark.slow
def test_two_replicas_answer_like_one_engine_share_the_load_and_survive_a_killed_replica(engine):
    sampling = {"temperature": 1.0, "top_p": 0.95, "seed": 7}
    solo = [engine.generate(p, max_new_tokens=24).text for p in PROMPTS[:3]]
    seeded = engine.generate(PROMPTS[3], max_new_tokens=24, method="ar", **sampling).text
    with ServerProcess(["--replicas", "2", "--threads", "1"], None, max_batch=4, timeout=300.0) as server:
        with ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(lambda p: chat(server.url, p), PROMPTS[:3] * 3))
        assert [r.json()["choices"][0]["message"]["content"] for r in replies] == solo * 3
        assert chat(server.url, PROMPTS[3], **sampling).json()["choices"][0]["message"]["content"] == seeded
        before = replicas_answering(server.url)
        assert len(before) == 2, "requests should reach both replicas"

        soak = asyncio.run(load_run(server.url, PROMPTS, 8, 40.0, 24, retries=3, kill_at=12.0))
        print(soak)
        assert soak["killed_replica"] is not None
        cut = "peer closed connection without sending complete message body"
        assert all(cut in error for error in soak["errors"]), soak["errors"]  # only streams cut mid-answer fail
        assert soak["failed"] <= 8, "at most the killed replica's streams that had sent text"
        assert sum(soak["requests"].values()) - soak["failed"] >= 16

        after = replicas_answering(server.url)
        assert len(after) == 2 and after != before, "Ray should replace the killed replica"
        assert chat(server.url, PROMPTS[0]).json()["choices"][0]["message"]["content"] == solo[0]
        log = server.log()
    assert server.proc.returncode == 0, log[-2000:]

"""`lopa serve --replicas N`: the same app in N Ray Serve replicas behind Ray's HTTP proxy.

Each replica is a whole single-process server (engine, batched scheduler, routes, auth, limits,
metrics), built inside the replica when Ray starts it; Ray Serve's proxy spreads requests over
the replicas by their queue lengths (power of two choices), autoscales between --min-replicas and
--max-replicas on ongoing requests per replica, replaces a replica whose health check fails or
whose process dies, and drains a replica for up to --drain seconds when it stops. A request that
was running on a replica that died gets a 5xx, which a client retries (the OpenAI SDK does by
default); one that had already streamed tokens cannot be retried transparently. `/metrics` is the
answering replica's own (the `X-Lopa-Replica` header names it); Ray exports per-replica and proxy
request metrics of its own. The deployment runs on a local Ray instance started here, or on an
existing cluster (--ray-address, e.g. a KubeRay head) where replicas land on any node with the model.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any

from ray import serve
from ray.exceptions import TaskCancelledError

from ..errors import InvalidRequestError
from .app import ServeOptions

APP_NAME = "lopa"
REPLICA_HEADER = b"x-lopa-replica"
HEALTH_PERIOD_S = 2.0
LOGGING = {"log_level": "WARNING", "enable_access_log": False}  # like `lopa serve`: no line per request


@dataclass(frozen=True)
class Scaling:
    """How many replicas, and the CPUs each one reserves (its torch threads)."""

    replicas: int
    min_replicas: int | None
    max_replicas: int | None
    target_ongoing_requests: float | None
    cpus: int

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Scaling:
        autoscale = args.max_replicas is not None
        if args.replicas < 1 or (autoscale and not 1 <= (args.min_replicas or 1) <= args.replicas <= args.max_replicas):
            raise InvalidRequestError("need 1 <= --min-replicas <= --replicas <= --max-replicas")
        if not autoscale and (args.min_replicas is not None or args.target_ongoing_requests is not None):
            raise InvalidRequestError("--min-replicas and --target-ongoing-requests need --max-replicas (autoscaling)")
        cpus = args.threads or max(1, (os.cpu_count() or 1) // args.replicas)
        return cls(
            args.replicas,
            (args.min_replicas or 1) if autoscale else None,
            args.max_replicas,
            (args.target_ongoing_requests or args.max_batch) if autoscale else None,
            cpus,
        )

    def deployment_options(self, options: ServeOptions) -> dict[str, Any]:
        """Ray Serve deployment options: a replica takes at most what its own batch and queue hold (past that
        Ray's router keeps requests waiting, for up to max_queue per proxy), and drains for options.drain_s."""
        scaled = (
            {
                "autoscaling_config": {
                    "min_replicas": self.min_replicas,
                    "initial_replicas": self.replicas,
                    "max_replicas": self.max_replicas,
                    "target_ongoing_requests": self.target_ongoing_requests,
                }
            }
            if self.max_replicas is not None
            else {"num_replicas": self.replicas}
        )
        return scaled | {
            "ray_actor_options": {"num_cpus": self.cpus},
            "max_ongoing_requests": options.max_batch + options.max_queue,
            "max_queued_requests": options.max_queue,
            "graceful_shutdown_timeout_s": options.drain_s,
            "health_check_period_s": HEALTH_PERIOD_S,
            "logging_config": LOGGING,
        }


class ReplicaHeader:
    """ASGI middleware naming the replica that answered (which replica served what, and whose /metrics these are)."""

    def __init__(self, app, replica: str):
        self.app, self.replica = app, replica.encode()

    async def __call__(self, scope, receive, send):
        async def named(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (REPLICA_HEADER, self.replica)]}
            await send(message)

        try:
            await self.app(scope, receive, named)
        except TaskCancelledError:  # Ray's word that the client went away (its stream was closed): nobody to answer
            pass


@serve.ingress()
class LopaReplica:
    """One replica: `lopa serve`'s app over its own engine, loaded when Ray starts the replica."""

    def __init__(self, args: argparse.Namespace, options: ServeOptions):
        from ..models.threads import in_passing_thread
        from .cli import build_app

        self.fastapi = in_passing_thread(lambda: build_app(args, options))
        self.replica = serve.get_replica_context().replica_id.unique_id

    def __serve_build_asgi_app__(self):
        return ReplicaHeader(self.fastapi, self.replica)

    def check_health(self) -> None:
        """Ray replaces a replica whose check raises: its scheduler gave up (the engine failed) or its thread died."""
        scheduler = self.fastapi.state.server.scheduler
        if scheduler.failure is not None:
            raise RuntimeError(f"the engine failed: {scheduler.failure}")
        if not scheduler.thread.is_alive():
            raise RuntimeError("the scheduler thread is not running")


def run_replicas(args: argparse.Namespace, options: ServeOptions) -> int:
    """Deploy --replicas replicas on Ray (a local instance, or --ray-address's cluster) and serve until SIGTERM or
    SIGINT; then delete the deployment, each replica draining its running requests."""
    import ray

    scaling = Scaling.from_args(args)
    ray.init(address=args.ray_address or "local", include_dashboard=False, logging_level="WARNING")
    serve.start(http_options={"host": args.host, "port": args.port}, logging_config=LOGGING)
    deployment = serve.deployment(LopaReplica, name="LopaReplica").options(**scaling.deployment_options(options))
    replica_args = argparse.Namespace(**vars(args) | {"threads": scaling.cpus})  # torch threads = the CPUs reserved
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        serve.run(deployment.bind(replica_args, options), name=APP_NAME, route_prefix="/", blocking=False)
        print(
            f"lopa: serving {args.model or 'the default model'} on http://{args.host}:{args.port} through "
            f"{scaling.replicas} Ray Serve replicas of {scaling.cpus} CPUs",
            file=sys.stderr,
            flush=True,
        )
        stop.wait()
    finally:
        serve.delete(APP_NAME)
        if not args.ray_address:
            serve.shutdown()
        ray.shutdown()
    return 0

"""`lopa serve`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..cli_options import add_model_options, load_engine

if TYPE_CHECKING:
    from fastapi import FastAPI

    from .app import ServeOptions


def register(subparsers) -> None:
    serve = subparsers.add_parser("serve", help="OpenAI-compatible HTTP server with batched lookahead decoding")
    add_model_options(serve)
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument(
        "--api-key",
        default=None,
        help="require 'Authorization: Bearer KEY' on /v1/* (visible in the process list: prefer the next two)",
    )
    serve.add_argument("--api-key-file", default=None, metavar="PATH", help="read the key from this file")
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="without an API key, also answer requests whose Host is NAME (repeatable; IP addresses and "
        "localhost always are; other names are refused against DNS rebinding)",
    )
    serve.add_argument("--docs", action="store_true", help="serve /docs and /openapi.json (open without a key)")
    serve.add_argument("--max-body-mb", type=float, default=8.0, help="larger request bodies get 413")
    serve.add_argument("--max-batch", type=int, default=8, help="requests decoded together")
    serve.add_argument("--max-queue", type=int, default=64, help="waiting requests before 429")
    serve.add_argument("--timeout", type=float, default=300.0, help="seconds per request, queueing included")
    serve.add_argument(
        "--max-context", type=int, default=2048, help="KV rows per batch slot (prompt + max_tokens + tree)"
    )
    serve.add_argument(
        "--prefill-chunk",
        type=int,
        default=64,
        metavar="N",
        help="prompts longer than N tokens are prefilled N tokens per step, between the running batch's steps",
    )
    serve.add_argument(
        "--no-parallel", action="store_true", help="batched plain decoding (one token per step), for comparison"
    )
    serve.add_argument("--drain", type=float, default=30.0, help="seconds SIGTERM waits for running requests")
    cluster = serve.add_argument_group("replicas on Ray Serve (pip install 'lopa[cluster]')")
    cluster.add_argument(
        "--replicas", type=int, default=None, metavar="N", help="serve through N Ray Serve replicas of the engine"
    )
    cluster.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="deploy on this running Ray cluster ('auto', or HEAD_IP:6379) instead of a local Ray instance",
    )
    cluster.add_argument("--min-replicas", type=int, default=None, metavar="N", help="autoscaling floor (default 1)")
    cluster.add_argument(
        "--max-replicas", type=int, default=None, metavar="N", help="autoscale between the floor and N replicas"
    )
    cluster.add_argument(
        "--target-ongoing-requests",
        type=float,
        default=None,
        metavar="R",
        help="autoscaling aims at R requests running or queued per replica (default: --max-batch)",
    )
    serve.set_defaults(func=run_serve)


def api_key_from(args: argparse.Namespace) -> str | None:
    """--api-key, else --api-key-file's first line, else $LOPA_API_KEY, else None (no auth); an empty key is refused."""
    from ..errors import InvalidRequestError

    if args.api_key is not None:
        key, source = args.api_key, "--api-key"
    elif args.api_key_file is not None:
        try:
            key, source = Path(args.api_key_file).read_text().strip(), "--api-key-file"
        except OSError as exc:
            raise InvalidRequestError(f"cannot read --api-key-file: {exc}") from None
    elif "LOPA_API_KEY" in os.environ:
        key, source = os.environ["LOPA_API_KEY"], "LOPA_API_KEY"
    else:
        return None
    if not key.strip():
        raise InvalidRequestError(f"the API key from {source} is empty: give a key, or none to serve without auth")
    return key


def build_app(args: argparse.Namespace, options: ServeOptions) -> FastAPI:
    """Load the engine, measure its latency surface up to the batch (cached; with --compile: its graphs) and
    build the app with its batch runner."""
    from .app import create_app

    engine = load_engine(args)
    engine.profile(max_rows=args.max_batch)
    return create_app(engine, options)


def run_serve(args: argparse.Namespace) -> int:
    """Serve until SIGTERM. The model is loaded and its batch KV cache allocated in a passing thread, so that the
    scheduler's thread is the only one that ever ran torch's OpenMP (see in_passing_thread); the main thread
    only answers HTTP."""
    import uvicorn

    from ..errors import InvalidRequestError
    from ..models.threads import in_passing_thread
    from .app import DrainingServer, ServeOptions

    counts = (args.max_batch, args.max_queue, args.prefill_chunk)
    if min(counts) < 1 or args.timeout <= 0 or args.max_body_mb <= 0:
        raise InvalidRequestError(
            "--max-batch, --max-queue and --prefill-chunk must be >= 1, --timeout and --max-body-mb > 0"
        )
    api_key = api_key_from(args)
    options = ServeOptions(
        api_key=api_key,
        max_batch=args.max_batch,
        max_queue=args.max_queue,
        timeout=args.timeout,
        max_context=args.max_context,
        parallel=not args.no_parallel,
        prefill_chunk=args.prefill_chunk,
        drain_s=args.drain,
        max_body_bytes=int(args.max_body_mb * 2**20),
        docs=args.docs,
        allowed_hosts=(args.host, *args.allow_host),
    )
    if args.replicas or args.ray_address or args.max_replicas:
        return _run_cluster(args, options)
    app = in_passing_thread(lambda: build_app(args, options))
    scheduler = app.state.server.scheduler
    mode = "lookahead" if options.parallel else "plain"
    print(
        f"lopa: serving {scheduler.engine.loaded.name} ({mode}, batch {args.max_batch}) on http://{args.host}:{args.port}",
        file=sys.stderr,
        flush=True,
    )
    config = uvicorn.Config(
        app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=args.drain
    )
    server = DrainingServer(config)

    def engine_failed(reason: str) -> None:  # the scheduler gave up: drain and exit non-zero for a supervisor
        print(f"lopa: the engine failed, shutting down: {reason}", file=sys.stderr, flush=True)
        server.should_exit = True

    scheduler.on_failure = engine_failed
    server.run()
    return 0 if server.started and scheduler.failure is None else 1


def _run_cluster(args: argparse.Namespace, options: ServeOptions) -> int:
    from ..errors import InvalidRequestError

    try:
        from .cluster import run_replicas
    except ImportError as exc:
        raise InvalidRequestError(f"--replicas needs Ray Serve: pip install 'lopa[cluster]' ({exc})") from None
    args.replicas = args.replicas or 1
    return run_replicas(args, options)

"""`lopa serve` and `lopa bench-serve`."""

from __future__ import annotations

import argparse
import os
import sys


def register(subparsers) -> None:
    from ..cli import add_model_options

    serve = subparsers.add_parser("serve", help="OpenAI-compatible HTTP server with batched lookahead decoding")
    add_model_options(serve)
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--api-key", default=os.environ.get("LOPA_API_KEY"), help="require 'Authorization: Bearer KEY' (default: $LOPA_API_KEY)")
    serve.add_argument("--max-batch", type=int, default=8, help="requests decoded together")
    serve.add_argument("--max-queue", type=int, default=64, help="waiting requests before 429")
    serve.add_argument("--timeout", type=float, default=300.0, help="seconds per request, queueing included")
    serve.add_argument("--max-context", type=int, default=2048, help="KV rows per batch slot (prompt + max_tokens + tree)")
    serve.add_argument("--batch-nodes", type=int, default=64, help="draft-tree nodes per batched forward, shared by its rows")
    serve.add_argument("--no-parallel", action="store_true", help="batched plain decoding (one token per step), for comparison")
    serve.add_argument("--drain", type=float, default=30.0, help="seconds SIGTERM waits for running requests")
    serve.set_defaults(func=run_serve)

    from .bench import add_bench_parser

    add_bench_parser(subparsers)


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from ..cli import load_engine
    from ..errors import InvalidRequestError
    from .app import DrainingServer, ServeOptions, create_app

    if args.max_batch < 1 or args.max_queue < 0 or args.timeout <= 0 or args.batch_nodes < 1:
        raise InvalidRequestError("--max-batch and --batch-nodes must be >= 1, --max-queue >= 0, --timeout > 0")
    if args.compile:
        raise InvalidRequestError("--compile applies to single-sequence decoding; the server's batch runner runs eager")
    engine = load_engine(args)
    options = ServeOptions(
        api_key=args.api_key,
        max_batch=args.max_batch,
        max_queue=args.max_queue,
        timeout=args.timeout,
        max_context=args.max_context,
        parallel=not args.no_parallel,
        batch_nodes=args.batch_nodes,
        drain_s=args.drain,
    )
    app = create_app(engine, options)
    mode = "lookahead" if options.parallel else "plain"
    print(f"lopa: serving {engine.loaded.name} ({mode}, batch {args.max_batch}) on http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=args.drain)
    server = DrainingServer(config)
    server.run()
    return 0 if server.started else 1

"""The FastAPI app: OpenAI routes, SSE streaming, auth, errors, metrics and the web page.

Handlers only translate HTTP to scheduler jobs and events back to OpenAI bodies; they
never touch the model (the scheduler thread owns it).
"""

from __future__ import annotations

import asyncio
import hmac
import json
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, StreamingResponse
from starlette.exceptions import HTTPException

from ..config import GenerationConfig
from ..errors import InvalidRequestError
from ..models.batch import BatchRunner
from .protocol import ChatRequest, CompletionRequest, Reply, error_body
from .scheduler import Closed, Event, Job, QueueFull, Scheduler

STATIC = Path(__file__).parent / "static"
DEFAULT_MAX_TOKENS = 256


@dataclass
class ServeOptions:
    api_key: str | None = None
    max_batch: int = 8
    max_queue: int = 64
    timeout: float = 300.0  # seconds per request, queueing included
    max_context: int = 2048  # KV rows per batch slot: prompt + max_tokens + one tree
    parallel: bool = True  # False: batched plain decoding (method "ar"), for comparison
    batch_nodes: int = 64  # draft-tree nodes one batched forward may hold, shared by its rows
    drain_s: float = 30.0  # how long SIGTERM waits for running requests


class DrainingServer(uvicorn.Server):
    """Drains on SIGTERM/SIGINT like uvicorn, then returns, so the process exits with status 0
    (uvicorn itself re-raises the signal after draining, which supervisors read as a crash)."""

    def handle_exit(self, sig, frame) -> None:
        super().handle_exit(sig, frame)
        self._captured_signals.clear()


def _error(status: int, message: str, type: str = "invalid_request_error", param=None, code=None, headers=None):
    return JSONResponse(error_body(message, type, param, code), status_code=status, headers=headers)


def create_app(engine, options: ServeOptions) -> FastAPI:
    capacity = min(options.max_context, engine.runner.max_positions)
    runner = BatchRunner(engine.model, options.max_batch, capacity)
    runner.hidden_layers = engine.runner.hidden_layers  # the features a predictor drafts from
    scheduler = Scheduler(engine, runner, options.max_queue, options.batch_nodes)
    model_name = engine.loaded.name
    budget = engine.draft.node_budget + 2

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        scheduler.start()
        yield
        await asyncio.to_thread(scheduler.close, options.drain_s)

    app = FastAPI(title="lopa", lifespan=lifespan)
    app.state.scheduler = scheduler

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0]
        if first.get("type") == "json_invalid":
            return _error(400, f"the body is not valid JSON: {first.get('msg')}")
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        return _error(422, f"{'.'.join(loc) or 'body'}: {first.get('msg')}", param=".".join(loc) or None)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException):
        return _error(exc.status_code, str(exc.detail), "invalid_request_error" if exc.status_code < 500 else "server_error")

    @app.middleware("http")
    async def _auth(request: Request, call_next):
        if options.api_key and request.url.path.startswith("/v1/"):
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {options.api_key}".encode()):
                return _error(401, "missing or wrong API key (Authorization: Bearer KEY)", code="invalid_api_key")
        return await call_next(request)

    def _job_config(body, prompt_len: int) -> GenerationConfig:
        room = capacity - prompt_len - budget
        if prompt_len >= capacity or room < 1:
            raise InvalidRequestError(f"the prompt has {prompt_len} tokens; this server's context holds {capacity}")
        wanted = body.limit()
        if wanted is not None and wanted > room:
            raise InvalidRequestError(
                f"prompt ({prompt_len} tokens) + max_tokens ({wanted}) exceeds the context ({capacity}); at most {room}"
            )
        cfg = GenerationConfig(
            max_new_tokens=wanted or min(DEFAULT_MAX_TOKENS, room),
            temperature=body.temperature,
            top_p=body.top_p,
            seed=body.seed,
            stop=body.stops(),
            ignore_eos=body.ignore_eos,
            method="lopa" if options.parallel else "ar",
        )
        cfg.validate()
        return cfg

    async def _serve(request: Request, body, chat: bool):
        try:
            prompt = [m.model_dump() for m in body.messages] if chat else body.text()
            ids = engine.encode_prompt(prompt, None if chat else False)
            cfg = _job_config(body, len(ids))
        except (InvalidRequestError, ValueError) as exc:
            return _error(400, str(exc))
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Event] = asyncio.Queue()
        job = Job(ids, cfg, lambda ev: loop.call_soon_threadsafe(events.put_nowait, ev), options.timeout, body.stream)
        try:
            scheduler.submit(job)
        except QueueFull as exc:
            return _error(429, str(exc), "rate_limit_error", headers={"Retry-After": "1"})
        except Closed as exc:
            return _error(503, str(exc), "server_error", headers={"Retry-After": "5"})
        reply = Reply(chat, body.model or model_name)
        if body.stream:
            return StreamingResponse(_sse(job, events, reply), media_type="text/event-stream")
        return await _collect(request, job, events, reply)

    async def _collect(request: Request, job: Job, events: asyncio.Queue, reply: Reply):
        text = []
        try:
            while True:
                try:
                    ev = await asyncio.wait_for(events.get(), timeout=1.0)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        return _error(499, "client closed the request")
                    continue
                if ev.kind == "step":
                    text.append(ev.text)
                elif ev.kind == "error":
                    status = 504 if ev.finish_reason == "timeout" else 500
                    return _error(status, ev.error, "timeout" if status == 504 else "server_error")
                else:
                    usage = dict(ev.usage)
                    forwards = usage.pop("forwards")
                    lopa = {"forwards": forwards, "tokens_per_forward": usage["completion_tokens"] / forwards}
                    return JSONResponse(reply.full("".join(text), ev.finish_reason, usage, lopa))
        finally:
            job.cancelled = True  # no-op when finished; frees the slot when the client left

    async def _sse(job: Job, events: asyncio.Queue, reply: Reply):
        try:
            while True:
                ev = await events.get()
                if ev.kind == "step":
                    body = reply.chunk(ev.text, lopa={"sources": ev.sources, "tokens": ev.tokens})
                elif ev.kind == "error":
                    body = error_body(ev.error, "timeout" if ev.finish_reason == "timeout" else "server_error")
                else:
                    usage = dict(ev.usage)
                    forwards = usage.pop("forwards")
                    body = reply.chunk("", ev.finish_reason, usage=usage, lopa={"forwards": forwards})
                yield f"data: {json.dumps(body)}\n\n"
                if ev.kind != "step":
                    break
            yield "data: [DONE]\n\n"
        finally:
            job.cancelled = True

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request, body: ChatRequest):
        return await _serve(request, body, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request, body: CompletionRequest):
        return await _serve(request, body, chat=False)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "lopa"}]}

    @app.get("/health")
    async def health():
        return {"status": "draining" if scheduler.closing else "ok", "model": model_name}

    @app.get("/metrics")
    async def metrics():
        return PlainTextResponse(scheduler.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/")
    async def page():
        return FileResponse(STATIC / "index.html")

    return app

"""The FastAPI app: OpenAI routes, SSE streaming, auth, errors, metrics and the web page.

Handlers only translate HTTP to scheduler jobs and events back to OpenAI bodies; they
never touch the model (the scheduler thread owns it). They are module-level functions over
one `Server` state object, kept on the app.
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from jinja2 import TemplateError
from starlette.exceptions import HTTPException

from ..config import GenerationConfig
from ..errors import InvalidRequestError
from .guard import Guard
from .limits import BodyLimit, max_token_chars
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .protocol import ChatRequest, CompletionRequest, Reply, UnsupportedField, error_body
from .scheduler import Closed, DecodingEngine, Event, Job, QueueFull, Scheduler

STATIC = Path(__file__).parent / "static"
DEFAULT_MAX_TOKENS = 256
POLL_S = 0.25  # how often a waiting handler checks that its client is still there
DEADLINE_GRACE_S = 5.0  # past its timeout the scheduler ends a request; past this too, its handler does


@dataclass
class ServeOptions:
    api_key: str | None = None
    max_batch: int = 8
    max_queue: int = 64
    timeout: float = 300.0  # seconds per request, queueing included
    max_context: int = 2048  # KV rows per batch slot: prompt + max_tokens + one tree
    parallel: bool = True  # False: batched plain decoding (method "ar"), for comparison
    prefill_chunk: int = 64  # longer prompts are prefilled this many tokens per scheduler step (chunked prefill)
    drain_s: float = 30.0  # how long SIGTERM waits for running requests
    max_body_bytes: int = 8 << 20  # larger request bodies get 413 before they are read
    docs: bool = False  # serve /docs and /openapi.json (off: they are open without a key and load a CDN script)
    allowed_hosts: tuple[str, ...] = ()  # without an API key: Host names served besides IP addresses and localhost


class DrainingServer(uvicorn.Server):
    """Drains on SIGTERM/SIGINT like uvicorn, then returns, so the process exits with status 0
    (uvicorn itself re-raises the signal after draining, which supervisors read as a crash)."""

    def handle_exit(self, sig, frame) -> None:
        super().handle_exit(sig, frame)
        self._captured_signals.clear()


class JobStream(StreamingResponse):
    """A server-sent event stream that releases its job however the response ends: finished, failed, or
    the client gone (even before the first byte, when the event generator never started)."""

    def __init__(self, job: Job, events, headers: dict[str, str]):
        super().__init__(events, media_type="text/event-stream", headers=headers)
        self.job = job

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.job.cancelled = True  # no-op when finished; frees the batch slot at the next step


def _error(status: int, message: str, type: str = "invalid_request_error", param=None, code=None, headers=None):
    return JSONResponse(error_body(message, type, param, code), status_code=status, headers=headers)


@dataclass
class Server:
    """What every handler reads: the engine (tokenizing and checks only), the scheduler that decodes, the limits."""

    engine: DecodingEngine
    options: ServeOptions
    scheduler: Scheduler
    capacity: int  # KV rows per batch slot
    max_chars: int  # no prompt of more characters fits the context

    @property
    def model_name(self) -> str:
        return self.engine.loaded.name


router = APIRouter()


def create_app(engine: DecodingEngine, options: ServeOptions) -> FastAPI:
    capacity = min(options.max_context, engine.runner.max_positions)
    runner = engine.runner.sibling(options.max_batch, capacity)
    scheduler = Scheduler(engine, runner, options.max_queue, options.prefill_chunk)
    docs = {} if options.docs else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(title="lopa", lifespan=_lifespan, **docs)
    app.add_middleware(BodyLimit, limit=options.max_body_bytes)
    app.add_middleware(Guard, api_key=options.api_key, allowed_hosts=options.allowed_hosts)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(HTTPException, _http)
    app.add_exception_handler(Exception, _unexpected)
    app.include_router(router)
    app.state.server = Server(engine, options, scheduler, capacity, capacity * max_token_chars(engine.tokenizer))
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI):
    server: Server = app.state.server
    server.scheduler.start()
    yield
    await asyncio.to_thread(server.scheduler.close, server.options.drain_s)


def _server(request: Request) -> Server:
    return request.app.state.server


async def _invalid(request: Request, exc: RequestValidationError):
    first = exc.errors()[0]
    if first.get("type") == "json_invalid":
        return _error(400, f"the body is not valid JSON: {first.get('msg')}")
    cause = first.get("ctx", {}).get("error")
    if isinstance(cause, UnsupportedField):
        return _error(400, str(cause), param=cause.field, code="unsupported_parameter")
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    return _error(422, f"{'.'.join(loc) or 'body'}: {first.get('msg')}", param=".".join(loc) or None)


async def _http(request: Request, exc: HTTPException):
    return _error(
        exc.status_code, str(exc.detail), "invalid_request_error" if exc.status_code < 500 else "server_error"
    )


async def _unexpected(request: Request, exc: Exception):
    """A bug, not the client's fault: still a JSON body, and the server goes on."""
    return _error(500, f"internal error: {exc!r}", "server_error")


def _job_config(server: Server, body, prompt_len: int) -> GenerationConfig:
    wanted = body.limit()
    room = server.engine.answer_room(prompt_len, wanted, server.capacity)
    cfg = GenerationConfig.from_options(
        body,
        max_new_tokens=wanted or min(DEFAULT_MAX_TOKENS, room),
        stop=body.stops(),
        logprobs=body.logprob_count(),
        method="lopa" if server.options.parallel else "ar",
    )
    cfg.validate()
    return cfg


async def _prompt_ids(server: Server, body, chat: bool) -> list[int]:
    """The request's prompt as token ids; raises InvalidRequestError where it cannot fit the context."""
    prompt = [m.for_template() for m in body.messages] if chat else body.text()
    chars = sum(len(m["content"]) for m in prompt) if chat else len(prompt)
    if chars > server.max_chars:
        raise InvalidRequestError(
            f"the prompt has {chars} characters: more than this server's context ({server.capacity} tokens) can hold"
        )
    # tokenizing and templating take a while on long prompts: off the event loop
    return await asyncio.to_thread(server.engine.encode_prompt, prompt, None if chat else False)


async def _serve(request: Request, body, chat: bool):
    server = _server(request)
    if body.model not in (None, server.model_name, "lopa"):
        return _error(
            404,
            f"the model {body.model!r} does not exist; this server has {server.model_name!r}",
            param="model",
            code="model_not_found",
        )
    try:
        ids = await _prompt_ids(server, body, chat)
        cfg = _job_config(server, body, len(ids))
    except TemplateError as exc:
        return _error(400, f"the chat template refused these messages: {exc}", param="messages")
    except (InvalidRequestError, ValueError) as exc:
        return _error(400, str(exc))
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[Event] = asyncio.Queue()
    job = Job(
        ids, cfg, lambda ev: loop.call_soon_threadsafe(events.put_nowait, ev), server.options.timeout, body.stream
    )
    try:
        server.scheduler.submit(job)
    except QueueFull as exc:
        return _error(429, str(exc), "rate_limit_error", headers={"Retry-After": "1"})
    except Closed as exc:
        return _error(503, str(exc), "server_error", headers={"Retry-After": "5"})
    reply = Reply(chat, body.model or server.model_name, lambda token: server.engine.tokenizer.decode([token]))
    if body.stream:
        return JobStream(job, _sse(request, job, events, reply), reply.headers)
    return await _collect(request, job, events, reply)


async def _next_event(request: Request, job: Job, events: asyncio.Queue) -> Event | None:
    """The job's next event; None when its client left. The deadline is enforced here too, outside the
    scheduler thread, so a request gets its answer even if that thread is stuck."""
    deadline = job.arrived + job.timeout + DEADLINE_GRACE_S
    while True:
        if await request.is_disconnected():
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            return Event("error", error=f"the request timed out after {job.timeout:g} s", finish_reason="timeout")
        try:
            return await asyncio.wait_for(events.get(), timeout=min(POLL_S, left))
        except asyncio.TimeoutError:
            continue


async def _collect(request: Request, job: Job, events: asyncio.Queue, reply: Reply):
    text, logprobs = [], [] if job.cfg.logprobs is not None else None
    try:
        while True:
            ev = await _next_event(request, job, events)
            if ev is None:
                return _error(499, "client closed the request")
            if ev.kind == "step":
                text.append(ev.text)
                if logprobs is not None:
                    logprobs.extend(ev.logprobs or [])
            elif ev.kind == "error":
                status = 504 if ev.finish_reason == "timeout" else 500
                return _error(status, ev.error, "timeout" if status == 504 else "server_error")
            else:
                body = reply.full("".join(text), ev.finish_reason, ev.usage, ev.lopa, logprobs)
                return JSONResponse(body, headers=reply.headers)
    finally:
        job.cancelled = True  # no-op when finished; frees the slot when the client left


async def _sse(request: Request, job: Job, events: asyncio.Queue, reply: Reply):
    """The job's events as SSE chunks; JobStream releases the job however this ends."""
    while True:
        ev = await _next_event(request, job, events)
        if ev is None:
            return
        if ev.kind == "step":
            body = reply.chunk(ev.text, logprobs=ev.logprobs, lopa={"sources": ev.sources, "tokens": ev.tokens})
        elif ev.kind == "error":
            body = error_body(ev.error, "timeout" if ev.finish_reason == "timeout" else "server_error")
        else:
            body = reply.chunk("", ev.finish_reason, usage=ev.usage, lopa=ev.lopa)
        yield f"data: {json.dumps(body)}\n\n"
        if ev.kind != "step":
            break
    yield "data: [DONE]\n\n"


@router.post("/v1/chat/completions")
async def chat_completions(request: Request, body: ChatRequest):
    return await _serve(request, body, chat=True)


@router.post("/v1/completions")
async def completions(request: Request, body: CompletionRequest):
    return await _serve(request, body, chat=False)


@router.get("/v1/models")
async def models(request: Request):
    name = _server(request).model_name
    return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "lopa"}]}


@router.get("/health")
async def health(request: Request):
    server = _server(request)
    scheduler, name = server.scheduler, server.model_name
    if scheduler.failure:
        return JSONResponse({"status": "failed", "error": scheduler.failure, "model": name}, status_code=503)
    if scheduler.closing:
        return JSONResponse({"status": "draining", "model": name}, status_code=503)
    return {"status": "ok", "model": name}


@router.get("/metrics")
async def metrics(request: Request):
    return Response(_server(request).scheduler.metrics.render(), media_type=METRICS_CONTENT_TYPE)


@router.get("/")
async def page():
    return FileResponse(STATIC / "index.html")

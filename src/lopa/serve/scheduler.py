"""The scheduler: one thread owns the model and decodes every admitted request together.

Each step it (1) drops requests whose client left or whose time ran out, (2) admits
waiting requests into free batch slots, preferring prompts close in length to the
running ones (less padding in the shared KV columns), prefilling each, (3) feeds one
chunk of a long prompt (chunked prefill: a newcomer's long prompt goes in piece by piece
in the last slot, so the running streams and short newcomers wait one chunk, not the whole
prompt), then (4) asks every running sequence for its draft tree, verifies all trees in one
batched forward and lets each sequence accept its own tokens (decode/loop.py's step, the one every
decoding runs). Requests join and leave between steps (continuous batching). The cost model sizes the
batch's trees from the latency of a forward of that many rows, so a full batch verifies small trees
and a lone request a full one.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ..config import GenerationConfig
from ..decode.batch import Batch, Row
from ..decode.cost import CostModel
from ..decode.output import StreamChunk
from ..decode.sampling import TokenLogprob
from ..models.loading import LoadedModel
from ..models.runner import Runner
from ..text import token_pieces
from .metrics import ServerMetrics

STARVATION_S = 2.0  # a request waiting this long is admitted next, whatever its length
LOOKAHEAD = 16  # how many waiting requests the length grouping chooses among
MAX_FAILED_STEPS = 3  # batch forwards failing in a row that mark the engine as broken


class DecodingEngine(Protocol):
    """What the server needs of an engine (lopa.api.Engine is one)."""

    loaded: LoadedModel
    tokenizer: Any
    runner: Runner
    sizing: CostModel | None

    def row(self, prompt_ids: list[int], cfg: GenerationConfig, owner: object = None) -> Row: ...

    def encode_prompt(self, prompt: str | list[dict], chat: bool | None = None) -> list[int]: ...

    def answer_room(self, prompt_len: int, wanted: int | None = None, context: int | None = None) -> int: ...


class QueueFull(Exception):
    """The waiting queue is at --max-queue."""


class Closed(Exception):
    """The server is draining for shutdown."""


@dataclass
class Event:
    """What a request's client hears: a step's final text and per-token sources, or the end."""

    kind: str  # "step", "done" or "error"
    text: str = ""
    tokens: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict | None = None
    lopa: dict | None = None  # at the end: lopa's own figures (forwards, the sampling seed)
    error: str | None = None
    logprobs: list[TokenLogprob] | None = None  # the step's tokens', when the request asked for them


@dataclass(eq=False)  # a job is itself: compared (in the queue) by identity
class Job:
    prompt: list[int]
    cfg: GenerationConfig
    sink: Callable[[Event], None]  # thread-safe delivery to the request's handler
    timeout: float
    pieces: bool = False  # compute per-token display text (streaming clients)
    arrived: float = field(default_factory=time.monotonic)
    cancelled: bool = False  # set by the handler when its client goes away
    row: Row | None = None  # its batch row, from admission on
    first_at: float | None = None

    @property
    def expired(self) -> bool:
        return time.monotonic() - self.arrived > self.timeout

    @property
    def gone(self) -> str | None:
        """Why the job must end before its answer does ("cancelled", "timeout"), or None."""
        return "cancelled" if self.cancelled else "timeout" if self.expired else None


class Scheduler:
    def __init__(self, engine: DecodingEngine, runner: Runner, max_queue: int, prefill_chunk: int):
        self.engine = engine
        self.batch = Batch(runner, engine.sizing)
        self.max_batch = runner.slots
        self.max_queue = max_queue
        self.prefill_chunk = prefill_chunk  # longer prompts are fed this many tokens per scheduler step
        self.pending: deque[Job] = deque()
        self.staged: Job | None = None  # a long prompt being prefilled, a chunk per step, in the last slot
        self.cond = threading.Condition()
        self.closing = False
        self.metrics = ServerMetrics(lambda: len(self.pending), lambda: len(self._running()))
        self.thread = threading.Thread(target=self._loop, name="lopa-scheduler", daemon=True)
        self.failure: str | None = None  # why the engine cannot continue (then /health answers 503)
        self.on_failure: Callable[[str], None] | None = None  # the server drains and exits non-zero
        self.failed_steps = 0  # batch forwards failed in a row
        self.last_error = ""

    def start(self) -> None:
        self.thread.start()

    def submit(self, job: Job) -> None:
        with self.cond:
            if self.failure:
                raise Closed(f"the engine failed: {self.failure}")
            if self.closing:
                raise Closed("the server is shutting down")
            if len(self.pending) >= self.max_queue:
                raise QueueFull(f"{len(self.pending)} requests are waiting; retry later")
            self.pending.append(job)
            self.cond.notify()

    def close(self, timeout: float) -> bool:
        """Refuse new requests, let the admitted ones finish (up to timeout s); True if all finished."""
        with self.cond:
            self.closing = True
            self.cond.notify()
        self.thread.join(timeout)
        return not self.thread.is_alive()

    # --- the scheduler thread -------------------------------------------------------------

    def _loop(self) -> None:
        """Serve until closed. An exception fails only the requests it touched and the loop goes on;
        MAX_FAILED_STEPS failing batch forwards in a row (a sticky device error, out of memory) mean
        the engine cannot continue: every request is failed, new ones are refused, on_failure runs."""
        torch.set_grad_enabled(False)
        try:
            while True:
                with self.cond:
                    while not self.pending and not self._running() and not self.closing:
                        self.cond.wait()
                    if self.closing and not self.pending and not self._running():
                        return
                try:
                    self._reap()
                    self._admit()
                    self._prefill_staged()
                    if self.batch.rows:
                        self._step()
                except Exception as exc:  # bookkeeping failed: the running batch's state is unknown
                    self._fail_active(f"internal error while decoding: {exc!r}")
                if self.failed_steps >= MAX_FAILED_STEPS:
                    self._give_up(
                        f"{self.failed_steps} batch forwards in a row failed, the last with: {self.last_error}"
                    )
                    return
        except BaseException as exc:  # never die silently: a dead loop would leave every handler waiting
            self._give_up(f"the scheduler stopped: {exc!r}")

    def _running(self) -> list[Job]:
        """The jobs holding a slot: decoding ones and the staged one."""
        return [row.owner for row in self.batch.rows] + ([self.staged] if self.staged else [])

    def _fail_active(self, error: str) -> None:
        jobs, self.staged = self._running(), None
        self.batch.clear()
        for job in jobs:
            self._end(job, "error", error)

    def _give_up(self, reason: str) -> None:
        with self.cond:
            self.failure, self.closing = reason, True
            waiting, self.pending = list(self.pending), deque()
        self._fail_active(f"the engine failed: {reason}")
        for job in waiting:
            self._end(job, "error", f"the engine failed: {reason}")
        if self.on_failure is not None:
            self.on_failure(reason)

    def _reap(self) -> None:
        """Free the slots of cancelled and timed-out requests, and drop such waiting ones."""
        with self.cond:
            waiting = [(job, job.gone) for job in self.pending]
            self.pending = deque(job for job, why in waiting if why is None)
        for job, why in waiting:
            if why is not None:
                self._end(job, why)
        for row, why in [(r, r.owner.gone) for r in self.batch.rows]:
            if why is not None:
                self.batch.retire(row)
                self._end(row.owner, why)
        job = self.staged
        if job is not None and job.gone:
            self.staged = None
            self._end(job, job.gone)

    def _long(self, job: Job) -> bool:
        return len(job.prompt) > self.prefill_chunk

    def _pick(self) -> Job | None:
        """The oldest request if it waited long, else the one closest in length to the running batch;
        while a long prompt is staged, only short ones (None if there are none)."""
        with self.cond:
            window = [j for j in list(self.pending)[:LOOKAHEAD] if self.staged is None or not self._long(j)]
            if not window:
                return None
            oldest, active = self.pending[0], len(self.batch.rows)
            if oldest in window and (not active or time.monotonic() - oldest.arrived > STARVATION_S):
                job = oldest
            else:
                target = statistics.median(self.batch.runner.lengths[:active]) if active else 0
                job = min(window, key=lambda j: abs(len(j.prompt) - target))
            self.pending.remove(job)
            return job

    def _admit(self) -> None:
        """Give waiting requests the free slots: a short prompt is prefilled now, a long one is staged."""
        while len(self._running()) < self.max_batch and self.pending:
            job = self._pick()
            if job is None:
                return
            try:
                job.row = self.engine.row(job.prompt, job.cfg, owner=job)
                if self._long(job):
                    self.staged = job
                else:
                    self._start(job)
            except Exception as exc:  # one bad request must not take the others down
                self._end(job, "error", str(exc))

    def _prefill_staged(self) -> None:
        """Feed the staged long prompt's next chunk; once it is all in, it decodes with the others."""
        job, slot = self.staged, self.max_batch - 1
        if job is None:
            return
        try:
            if self.batch.feed(job.row, slot, self.prefill_chunk):
                self.staged = None
                self._start(job, slot)
        except Exception as exc:
            self.staged = None
            self._end(job, "error", str(exc))

    def _start(self, job: Job, slot: int | None = None) -> None:
        """Admit the job's row (its prompt prefilled now, or already in `slot`): emit its first token."""
        self.metrics.prompt_tokens.inc(len(job.prompt))
        self._deliver(job, self.batch.admit(job.row, slot))
        if job.row.finished:
            self.batch.retire(job.row)
            self._end(job, "ok")

    def _step(self) -> None:
        try:
            updates = self.batch.step()
        except Exception as exc:
            self.failed_steps, self.last_error = self.failed_steps + 1, repr(exc)
            self._fail_active(str(exc))
            return
        self.failed_steps = 0
        self.metrics.batches.inc()
        self.metrics.batch_size.observe(len(updates))
        for row, update in updates:
            try:
                if isinstance(update, Exception):
                    raise update
                self._deliver(row.owner, update)
            except Exception as exc:
                self.batch.retire(row)
                self._end(row.owner, "error", str(exc))
                continue
            if row.finished:
                self.batch.retire(row)
                self._end(row.owner, "ok")

    def _deliver(self, job: Job, chunk: StreamChunk) -> None:
        kept, now = chunk.kept, time.monotonic()
        self.metrics.step(kept)
        if job.first_at is None:
            job.first_at = now
            self.metrics.ttft.observe(now - job.arrived)
        pieces = token_pieces(self.engine.tokenizer, job.row.output.text.ids, kept) if job.pieces else []
        logprobs = None if chunk.step.logprobs is None else chunk.step.logprobs[:kept]
        job.sink(Event("step", chunk.text, pieces, list(chunk.step.sources[:kept]), logprobs=logprobs))

    def _end(self, job: Job, outcome: str, error: str | None = None) -> None:
        self.metrics.requests.labels(outcome=outcome).inc()
        if outcome == "ok":
            self.metrics.latency.observe(time.monotonic() - job.arrived)
        if outcome == "cancelled":
            return
        if outcome == "timeout":
            job.sink(Event("error", error=f"the request timed out after {job.timeout:g} s", finish_reason="timeout"))
        elif outcome == "error":
            job.sink(Event("error", error=error))
        else:
            tail, result = job.row.output.finish()
            if tail:
                job.sink(Event("step", tail))
            usage, lopa = result.usage()
            job.sink(Event("done", finish_reason=result.finish_reason, usage=usage, lopa=lopa))

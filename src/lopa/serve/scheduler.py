"""The scheduler: one thread owns the model and decodes every admitted request together.

Each step it (1) drops requests whose client left or whose time ran out, (2) admits
waiting requests into free batch slots, preferring prompts close in length to the
running ones (less padding in the shared KV columns), prefilling each, then (3) asks
every running sequence for its draft tree, verifies all trees in one batched forward and
lets each sequence accept its own tokens. Requests join and leave between steps
(continuous batching). The node budget of one forward is shared between the rows, so a
full batch drafts small trees and a lone request drafts a full one.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..config import GenerationConfig
from ..decode.loop import SequenceDecoder
from ..decode.sampling import TokenLogprob
from ..models.batch import BatchRunner
from ..text import TextStream, token_pieces
from .metrics import ServerMetrics

STARVATION_S = 2.0  # a request waiting this long is admitted next, whatever its length
LOOKAHEAD = 16  # how many waiting requests the length grouping chooses among
MAX_FAILED_STEPS = 3  # batch forwards failing in a row that mark the engine as broken


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
    error: str | None = None
    logprobs: list[TokenLogprob] | None = None  # the step's tokens', when the request asked for them


@dataclass
class Job:
    prompt: list[int]
    cfg: GenerationConfig
    sink: Callable[[Event], None]  # thread-safe delivery to the request's handler
    timeout: float
    pieces: bool = False  # compute per-token display text (streaming clients)
    arrived: float = field(default_factory=time.monotonic)
    cancelled: bool = False  # set by the handler when its client goes away
    seq: SequenceDecoder | None = None
    text: TextStream | None = None
    first_at: float | None = None

    @property
    def expired(self) -> bool:
        return time.monotonic() - self.arrived > self.timeout


class Scheduler:
    def __init__(self, engine, runner: BatchRunner, max_queue: int, batch_nodes: int):
        self.engine = engine
        self.runner = runner
        self.max_batch = runner.slots
        self.max_queue = max_queue
        self.batch_nodes = batch_nodes
        self.pending: deque[Job] = deque()
        self.active: list[Job] = []  # job i decodes in batch slot i
        self.cond = threading.Condition()
        self.closing = False
        self.metrics = ServerMetrics(lambda: len(self.pending), lambda: len(self.active))
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
                    while not self.pending and not self.active and not self.closing:
                        self.cond.wait()
                    if self.closing and not self.pending and not self.active:
                        return
                try:
                    self._reap()
                    self._admit()
                    if self.active:
                        self._step()
                except Exception as exc:  # bookkeeping failed: the running batch's state is unknown
                    self._fail_active(f"internal error while decoding: {exc!r}")
                if self.failed_steps >= MAX_FAILED_STEPS:
                    self._give_up(f"{self.failed_steps} batch forwards in a row failed, the last with: {self.last_error}")
                    return
        except BaseException as exc:  # never die silently: a dead loop would leave every handler waiting
            self._give_up(f"the scheduler stopped: {exc!r}")

    def _fail_active(self, error: str) -> None:
        jobs, self.active = self.active, []
        for job in jobs:
            self._end(job, "error", error)

    def _give_up(self, reason: str) -> None:
        with self.cond:
            self.failure, self.closing = reason, True
            waiting, self.pending = list(self.pending), deque()
        for job in [*self.active, *waiting]:
            self._end(job, "error", f"the engine failed: {reason}")
        self.active = []
        if self.on_failure is not None:
            self.on_failure(reason)

    def _reap(self) -> None:
        """Free the slots of cancelled and timed-out requests, and drop such waiting ones."""
        with self.cond:
            waiting = list(self.pending)
            self.pending = deque(j for j in waiting if not (j.cancelled or j.expired))
        for job in waiting:
            if job.cancelled or job.expired:
                self._end(job, "cancelled" if job.cancelled else "timeout")
        for slot in reversed(range(len(self.active))):
            job = self.active[slot]
            if job.cancelled or job.expired:
                self._release(slot)
                self._end(job, "cancelled" if job.cancelled else "timeout")

    def _pick(self) -> Job:
        """The oldest request if it waited long, else the one closest in length to the running batch."""
        with self.cond:
            oldest = self.pending[0]
            if not self.active or time.monotonic() - oldest.arrived > STARVATION_S:
                self.pending.popleft()
                return oldest
            target = statistics.median(self.runner.lengths[: len(self.active)])
            window = list(self.pending)[:LOOKAHEAD]
            job = min(window, key=lambda j: abs(len(j.prompt) - target))
            self.pending.remove(job)
            return job

    def _admit(self) -> None:
        while len(self.active) < self.max_batch and self.pending:
            job = self._pick()
            try:
                drafting = self.engine.new_drafting() if job.cfg.method == "lopa" else None
                job.seq = SequenceDecoder(job.prompt, job.cfg, self.engine.eos_ids, drafting)
                job.text = TextStream(self.engine.tokenizer, job.cfg.stop, job.seq.eos_ids)
                slot = len(self.active)
                out = self.runner.prefill_slot(slot, torch.tensor(job.prompt))
                self.metrics.prompt_tokens.inc(len(job.prompt))
                self._deliver(job, job.seq.first(out.logits, out.layers))
            except Exception as exc:  # one bad request must not take the others down
                self._end(job, "error", str(exc))
                continue
            if self._finished(job):
                self._end(job, "ok")
            else:
                self.active.append(job)

    def _step(self) -> None:
        jobs = list(self.active)
        share = max(1, self.batch_nodes // len(jobs))
        try:
            trees = [job.seq.tree(share) for job in jobs]
            outs = self.runner.verify([tree.tensors() for tree in trees])
        except Exception as exc:
            self.failed_steps, self.last_error = self.failed_steps + 1, repr(exc)
            self._fail_active(str(exc))
            return
        self.failed_steps = 0
        self.metrics.batches.inc()
        self.metrics.batch_size.observe(len(jobs))
        done = []
        for slot, (job, tree, out) in enumerate(zip(jobs, trees, outs)):
            try:
                record, path = job.seq.advance(tree, out)
                self.runner.commit_row(slot, path)
                self._deliver(job, record)
            except Exception as exc:
                done.append((slot, "error", str(exc)))
                continue
            if self._finished(job):
                done.append((slot, "ok", None))
        for slot, outcome, error in reversed(done):
            self._release(slot)
            self._end(jobs[slot], outcome, error)

    @staticmethod
    def _finished(job: Job) -> bool:
        return job.seq.done or job.text.stopped

    def _release(self, slot: int) -> None:
        """Free a batch slot; the last running request moves into it so slots stay contiguous."""
        last = len(self.active) - 1
        if slot != last:
            self.runner.move(last, slot)
            self.active[slot] = self.active[last]
        self.active.pop()

    def _deliver(self, job: Job, record) -> None:
        piece = job.text.push(record.tokens)
        now = time.monotonic()
        self.metrics.step(len(record.tokens))
        if job.first_at is None:
            job.first_at = now
            self.metrics.ttft.observe(now - job.arrived)
        pieces = token_pieces(self.engine.tokenizer, job.text.ids, len(record.tokens)) if job.pieces else []
        job.sink(Event("step", piece, pieces, list(record.sources), logprobs=record.logprobs))

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
            tail = job.text.close()  # text held back in case a stop string began there
            if tail:
                job.sink(Event("step", tail))
            completion = len(job.text.ids)
            forwards = job.seq.step + 1  # the prefill emitted the first token
            usage = {
                "prompt_tokens": len(job.prompt),
                "completion_tokens": completion,
                "total_tokens": len(job.prompt) + completion,
            }
            job.sink(Event("done", finish_reason=job.text.finish, usage=usage | {"forwards": forwards}))

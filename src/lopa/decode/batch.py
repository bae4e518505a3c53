"""The one batch driver: a slot table of sequences, each admitted (prefill, first token), stepped together (one
verification forward per step, decode/loop.py's `step`) and retired. `decode` (one sequence), `generate([...])`
(all admitted, run until empty) and the server's scheduler (queue, chunked prefill, deadlines) all drive it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ..models.runner import ForwardOutput, Runner
from .cost import CostModel
from .loop import SequenceDecoder, StepRecord, step
from .output import GenerationResult, SequenceOutput, StreamChunk


@dataclass(eq=False)  # a row is itself: found in the slot table by identity
class Row:
    """One sequence in a batch: its decoder, its output record (None: tokens only) and the caller's handle."""

    seq: SequenceDecoder
    output: SequenceOutput | None = None
    owner: Any = None
    prefilled: int = 0  # prompt tokens in the KV cache
    prefill: ForwardOutput | None = None  # the last prompt chunk's forward, until the row is admitted
    layers: list[torch.Tensor] = field(default_factory=list)  # the prompt chunks' hidden_layers, for a predictor

    @property
    def finished(self) -> bool:
        return self.seq.done or (self.output is not None and self.output.text.stopped)

    def take(self, record: StepRecord) -> StreamChunk:
        if self.output is None:
            return StreamChunk("", record, len(record.tokens))
        return self.output.add(record)


class Batch:
    """Rows in slots 0..n-1 of a runner, verified together; `sizing` (a cost model, None: a fixed window) sizes
    their trees. A row's KV rows are reserved when its prompt goes in."""

    def __init__(self, runner: Runner, sizing: CostModel | None = None):
        self.runner = runner
        self.sizing = sizing
        self.rows: list[Row] = []  # row i decodes in slot i

    @property
    def free(self) -> int:
        return self.runner.slots - len(self.rows)

    def feed(self, row: Row, slot: int, chunk: int | None = None) -> bool:
        """Prefill the next `chunk` tokens (None: all) of the row's prompt into `slot`; True once it is all in."""
        if row.prefilled == 0:
            self.runner.reserve(row.seq.capacity)
        end = len(row.seq.prompt) if chunk is None else row.prefilled + chunk
        piece = row.seq.prompt[row.prefilled : end]
        row.prefill = self.runner.prefill(slot, torch.tensor(piece), row.prefilled)
        row.prefilled += len(piece)
        if row.prefill.layers is not None:
            row.layers.append(row.prefill.layers)
        return row.prefilled == len(row.seq.prompt)

    def admit(self, row: Row, slot: int | None = None) -> StreamChunk:
        """Start a row decoding in the next slot: prefill its prompt there (or move it from `slot`, where feed() put
        it) and emit its first token from the prefill's logits."""
        if slot is None:
            slot = len(self.rows)
            self.feed(row, slot)
        if slot != len(self.rows):
            self.runner.move(slot, len(self.rows))
        out, layers = row.prefill, torch.cat(row.layers) if row.layers else None
        row.prefill, row.layers = None, []
        self.rows.append(row)
        return row.take(row.seq.first(out.logits, layers))

    def step(self) -> list[tuple[Row, StreamChunk | Exception]]:
        """One verification of every row. An exception while drafting or verifying fails the whole batch (it
        propagates); one while a row accepts or takes its tokens fails only that row (its entry is the exception)."""
        rows = list(self.rows)
        updates: list[tuple[Row, StreamChunk | Exception]] = []
        for row, result in zip(rows, step(self.runner, [r.seq for r in rows], self.sizing)):
            if not isinstance(result, Exception):
                try:
                    result = row.take(result)
                except Exception as exc:  # noqa: BLE001 - the caller fails this row and goes on
                    result = exc
            updates.append((row, result))
        return updates

    def clear(self) -> None:
        """Drop every row without retiring it: after a failed forward their KV state is unknown."""
        self.rows.clear()

    def retire(self, row: Row) -> None:
        """Free the row's slot; the last row moves into it, so the rows stay contiguous."""
        self.runner.free(self.rows.index(row), self.rows)


def drive(batch: Batch, rows: Iterable[Row]) -> Iterator[tuple[Row, StreamChunk | GenerationResult]]:
    """Decode `rows`, admitted in order while slots are free, until every one has finished: each row's chunks as
    they come, then its result (its held-back text, if any, as a last chunk before it). A row's error propagates."""
    waiting = iter(rows)
    pending = next(waiting, None)
    while pending is not None or batch.rows:
        while pending is not None and batch.free:
            yield pending, batch.admit(pending)
            pending = next(waiting, None)
        for row in [r for r in batch.rows if r.finished]:
            batch.retire(row)
            tail, result = row.output.finish()
            if tail:
                yield row, StreamChunk(tail, StepRecord([], [], 0, 0))
            yield row, result
        if batch.rows:
            for row, update in batch.step():
                if isinstance(update, Exception):
                    raise update
                yield row, update


def decode(runner: Runner, seq: SequenceDecoder, cost: CostModel | None = None) -> Iterator[StepRecord]:
    """The steps of one sequence (slot 0 of `runner`) until EOS or max_new_tokens: a batch of one, tokens only."""
    batch, row = Batch(runner, cost), Row(seq)
    yield batch.admit(row).step
    while not row.finished:
        ((_, update),) = batch.step()
        if isinstance(update, Exception):
            raise update
        yield update.step

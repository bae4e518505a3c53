"""One sequence's output record: its final text, token ids, finish reason, logprobs and stats, built step by step
in one place for the API, the CLI's --json and the server's usage."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from ..text import TextStream
from .loop import SequenceDecoder, StepRecord
from .sampling import TokenLogprob


@dataclass
class GenerationStats:
    method: str
    prompt_tokens: int = 0
    new_tokens: int = 0
    forwards: int = 0  # target-model forwards that emitted tokens: the prefill's and every verification step's
    prefill_s: float = 0.0
    wall_s: float = 0.0  # decode time: prefill + steps, model load excluded
    draft_s: float = 0.0  # of which drafting: proposals, tree building, drafters observing verification
    verify_s: float = 0.0  # of which verification forwards after the prefill
    tree_nodes: int = 0  # tokens fed to verification forwards, summed
    accept_lengths: list[int] = field(default_factory=list)  # drafted tokens accepted per step
    window: dict = field(default_factory=dict)  # dynamic window: moves of k and tree sizes chosen
    steps: list[dict] = field(default_factory=list)  # per step: tokens and how each was drafted
    drafters: dict = field(default_factory=dict)  # per drafter source with a summary: e.g. the predictor's depth-1 hits

    @property
    def tokens_per_forward(self) -> float:
        return self.new_tokens / max(1, self.forwards)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["tokens_per_forward"] = self.tokens_per_forward
        data["tokens_per_s"] = self.new_tokens / self.wall_s if self.wall_s else 0.0
        data["bookkeeping_s"] = max(0.0, self.wall_s - self.prefill_s - self.draft_s - self.verify_s)
        return data


@dataclass
class GenerationResult:
    text: str
    token_ids: list[int]
    finish_reason: str  # "stop" (EOS or stop string) or "length"
    stats: GenerationStats
    logprobs: list[TokenLogprob] | None = None  # one per token id, when GenerationConfig.logprobs asked for them
    seed: int | None = None  # sampling: the seed the draws were keyed by (drawn when none was given); None: greedy

    def to_dict(self) -> dict:
        """The record as JSON-ready data (the CLI's --json)."""
        return {
            "text": self.text,
            "token_ids": self.token_ids,
            "finish_reason": self.finish_reason,
            "seed": self.seed,
            "stats": self.stats.to_dict(),
        }

    def usage(self) -> tuple[dict, dict]:
        """OpenAI's usage object and lopa's own figures (forwards, tokens per forward, the sampling seed)."""
        prompt, completion = self.stats.prompt_tokens, self.stats.new_tokens
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        lopa = {"forwards": self.stats.forwards, "tokens_per_forward": self.stats.tokens_per_forward}
        return usage, lopa | ({} if self.seed is None else {"seed": self.seed})


@dataclass
class StreamChunk:
    """What one step gave a sequence: the text that became final, the step, and how many of its tokens were kept
    (fewer when a stop string ended the answer inside it)."""

    text: str
    step: StepRecord
    kept: int = 0


class SequenceOutput:
    """What one sequence has produced so far: its final text, token ids, logprobs and stats."""

    def __init__(self, tokenizer, seq: SequenceDecoder):
        cfg = seq.cfg
        self.seq = seq
        self.text = TextStream(tokenizer, cfg.stop, seq.eos_ids)
        self.stats = GenerationStats(cfg.method, prompt_tokens=len(seq.prompt))
        self.logprobs: list[TokenLogprob] | None = [] if cfg.logprobs is not None else None
        self.start = time.perf_counter()

    def add(self, record: StepRecord) -> StreamChunk:
        """Take one step's tokens (the prefill's first, then each verification's)."""
        stats = self.stats
        if not self.text.ids:
            stats.prefill_s = time.perf_counter() - self.start
        else:
            stats.accept_lengths.append(record.accepted)
            stats.tree_nodes += record.tree_size
            stats.draft_s += record.draft_s
            stats.verify_s += record.verify_s
        stats.forwards += 1
        stats.steps.append({"tokens": record.tokens, "sources": record.sources})
        if self.logprobs is not None:
            self.logprobs.extend(record.logprobs)
        before = len(self.text.ids)
        piece = self.text.push(record.tokens)
        return StreamChunk(piece, record, len(self.text.ids) - before)

    def finish(self) -> tuple[str, GenerationResult]:
        """Decoding ended: the held-back text and the result."""
        tail = self.text.close()  # text held back in case a stop string began there
        stats = self.stats
        stats.wall_s = time.perf_counter() - self.start
        stats.new_tokens = len(self.text.ids)
        drafting = self.seq.drafting
        if drafting:
            stats.window = drafting.controller.summary()
            stats.drafters = {d.source: s for d in drafting.drafters if (s := d.summary()) is not None}
        logprobs = None if self.logprobs is None else self.logprobs[: len(self.text.ids)]  # none past a stop string
        return tail, GenerationResult(
            self.text.emitted, self.text.ids, self.text.finish, stats, logprobs, self.seq.seed
        )

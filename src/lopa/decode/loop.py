"""The lookahead decoding step: propose -> rank -> size the trees -> verify (one batched forward) -> accept
-> commit -> adapt.

`step` advances a batch of sequences by one verification; decode/batch.py's driver is its one caller. `ar` is
the same step with no drafters, so plain and lookahead decoding share every line that decides what is emitted.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..config import DraftConfig, GenerationConfig
from ..draft.base import Drafter, StepFeedback
from ..draft.tree import DraftTree, RankedDraft, rank
from ..models.runner import ForwardOutput, Runner
from .cost import CostModel
from .pricing import DrafterPrice, DraftPricing
from .sampling import CoupledSampler, TokenLogprob, target_logits, token_logprobs, warp
from .verify import accept
from .window import WindowController


@dataclass
class StepRecord:
    """One verification step, as users see it: which tokens came and how each was drafted."""

    tokens: list[int]
    sources: list[str]  # per token: "predictor", "lookup", "pool", "jacobi" (accepted drafts) or "bonus"
    tree_size: int
    depth: int
    draft_s: float = 0.0  # drafters' time: proposing, building the tree, observing the verification
    verify_s: float = 0.0  # the verification forward (on CUDA: its launch, unless the runner syncs)
    logprobs: list[TokenLogprob] | None = None  # per token, when GenerationConfig.logprobs asks for them

    @property
    def accepted(self) -> int:
        return len(self.tokens) - 1


@dataclass
class Drafting:
    drafters: list[Drafter]
    controller: WindowController
    config: DraftConfig = field(default_factory=DraftConfig)
    prices: dict[str, DrafterPrice] | None = None  # the drafters' running figures over earlier sequences
    pricing: DraftPricing = field(init=False)

    def __post_init__(self) -> None:
        self.pricing = DraftPricing([d.source for d in self.drafters], self.prices)


def kv_rows(prompt_len: int, max_new_tokens: int, node_budget: int) -> int:
    """KV rows a sequence can need: prompt, output, and one tree (root, nodes and its bonus) past them."""
    return prompt_len + max_new_tokens + node_budget + 2


def _contexts(context: list[int], tree, cfg: GenerationConfig) -> list[list[int]]:
    """Each row's token history, only needed by the penalties and min_tokens."""
    if not cfg.needs_history:
        return [[]] * tree.size
    return [context[:-1] + tree.path_tokens(i) for i in range(tree.size)]


class SequenceDecoder:
    """One sequence's decoding state between verification forwards.

    decode() drives it with a Runner, one forward per step; the server's scheduler drives
    many at once and verifies all their trees in one batched forward. Either way every
    emitted token is decided here.
    """

    def __init__(self, prompt: list[int], cfg: GenerationConfig, eos_ids: set[int], drafting: Drafting | None = None):
        self.prompt = list(prompt)
        self.cfg = cfg
        self.eos_ids = cfg.stop_ids(eos_ids)
        self.drafting = drafting
        # sampling: the request's seed (drawn when absent; results report it) keys every position's draw
        self.seed = None if cfg.greedy else cfg.seed if cfg.seed is not None else secrets.randbits(63)
        self.sampler = None if self.seed is None else CoupledSampler(self.seed)
        self.context: list[int] = []
        self.produced = 0
        self.step = 0
        self.done = False
        self.proposing_s: dict[str, float] = {}  # the last draft's proposing time per drafter source
        for drafter in drafting.drafters if drafting else ():
            drafter.start(self.prompt)

    @property
    def capacity(self) -> int:
        """KV rows this sequence can need."""
        return kv_rows(
            len(self.prompt), self.cfg.max_new_tokens, self.drafting.config.node_budget if self.drafting else 0
        )

    def first(self, logits: torch.Tensor, layers: torch.Tensor | None = None) -> StepRecord:
        """Emit the first token from the prefill's last logits; `layers` (ForwardOutput.layers) goes to the
        drafters (Drafter.observe_prefill)."""
        if layers is not None and self.drafting:
            for drafter in self.drafting.drafters:
                drafter.observe_prefill(layers)
        target = target_logits(logits, [self.prompt], self.cfg, len(self.prompt), self.eos_ids)
        (token,) = self.choices(target, [len(self.prompt)])
        self.context = self.prompt + [token]
        self.produced = 1
        self.done = token in self.eos_ids or self.produced >= self.cfg.max_new_tokens
        record = StepRecord([token], ["bonus"], 0, 0)
        if self.cfg.logprobs is not None:
            record.logprobs = token_logprobs(logits[-1:].float().log_softmax(-1), [token], self.cfg.logprobs)
        return record

    def choices(self, logits: torch.Tensor, positions: list[int]) -> list[int]:
        """The token this request emits at each of `positions` after rows of processed logits: their argmax, or
        the coupled sampler's draw (the same for plain decoding and every tree)."""
        if self.sampler is None:
            return logits.argmax(-1).tolist()
        return self.sampler.choose(warp(logits, self.cfg), positions)

    def draft(self, rate: float | None, rows: int, lookahead: bool = True) -> RankedDraft:
        """The proposals of the drafters that pay at the `rate` (tokens/s; None: of all) of a batch of `rows`,
        ranked best first (none for plain decoding, or a plain step: `lookahead` False)."""
        root, drafting = self.context[-1], self.drafting
        self.proposing_s = {}
        if not drafting or not lookahead:
            return RankedDraft(root)
        left, priced = self.cfg.max_new_tokens - self.produced, None if drafting.config.always_draft else rate
        depth, proposing, proposals = drafting.controller.depth, drafting.pricing.proposing(priced, rows, left), []
        for drafter in drafting.drafters:
            if drafter.source in proposing:
                start = time.perf_counter()
                proposals += drafter.propose(self.context, depth)
                self.proposing_s[drafter.source] = time.perf_counter() - start
        return rank(root, proposals, drafting.config, depth, drafting.config.node_budget)

    def advance(self, tree: DraftTree, out: ForwardOutput) -> tuple[StepRecord, list[int]]:
        """Accept from the verification of `tree`; returns the step and the tree nodes to commit."""
        cfg, context, drafting = self.cfg, self.context, self.drafting
        logits = target_logits(out.logits, _contexts(context, tree, cfg), cfg, len(self.prompt), self.eos_ids)
        choices = self.choices(logits, [len(context) + depth for depth in tree.depths])
        path, bonus = accept(tree, choices)
        new = [tree.tokens[i] for i in path[1:]] + [bonus]
        sources = [tree.sources[i] for i in path[1:]] + ["bonus"]
        stop = next((i for i, t in enumerate(new) if t in self.eos_ids), None)
        keep = min(len(new), cfg.max_new_tokens - self.produced, stop + 1 if stop is not None else len(new))
        observe_start = time.perf_counter()
        log_probs = out.logits[path].float().log_softmax(-1) if drafting or cfg.logprobs is not None else None
        if drafting:
            # the target's own top-1 at every node: greedy's choices, unless penalties moved them
            predictions = choices if cfg.greedy and logits is out.logits else out.logits.argmax(-1).tolist()
            feedback = StepFeedback(context, tree, predictions, path, new, out.layers)
            for drafter in drafting.drafters:
                drafter.observe(feedback)
            drafting.controller.update(
                self.step, tree.size, log_probs[torch.arange(len(new)), torch.tensor(new)].tolist()
            )
            drafting.pricing.record(self.proposing_s, sources[:-1])
        context.extend(new[:keep])
        self.produced += keep
        self.step += 1
        self.done = (stop is not None and stop < keep) or self.produced >= cfg.max_new_tokens
        record = StepRecord(new[:keep], sources[:keep], tree.size, tree.depth, time.perf_counter() - observe_start)
        if cfg.logprobs is not None:
            record.logprobs = token_logprobs(log_probs[:keep], new[:keep], cfg.logprobs)
        return record, path


def step(runner: Runner, seqs: Sequence[SequenceDecoder], cost: CostModel | None) -> list[StepRecord | Exception]:
    """Advance seqs (slot i holds seqs[i]) by one verification. `cost` sizes the batch's trees and learns from
    the forward's time, and its gate (decode/gate.py) decides whether this step drafts at all (unless the rows'
    DraftConfig says always_draft); None verifies every ranked node (a fixed window). None of it changes what
    is emitted: a greedy or seeded row's tokens are plain decoding's whatever the trees.

    An exception while drafting or verifying fails the whole batch (it propagates); one while a row
    accepts fails only that row (its entry is the exception)."""
    start = time.perf_counter()
    rate = cost.rate(len(seqs)) if cost is not None else None
    gated = any(seq.drafting is not None and not seq.drafting.config.always_draft for seq in seqs)
    gate = cost.gate if rate is not None and gated else None
    lookahead = gate is None or gate.lookahead(len(seqs))
    drafts = [seq.draft(rate, len(seqs), lookahead) for seq in seqs]
    sizes: list[int | None] = [None] * len(seqs)
    if cost is not None:
        sizes = cost.tree_sizes([cost.calibrated(d) for d in drafts])
    trees = [d.tree(size) for d, size in zip(drafts, sizes)]
    drafted = time.perf_counter()
    outs = runner.verify([tree.tensors() for tree in trees])
    results: list[StepRecord | Exception] = []
    verified: list[tuple[RankedDraft, int, int]] = []  # each row's draft, its nodes verified and accepted
    for slot, (seq, draft, tree, out) in enumerate(zip(seqs, drafts, trees, outs)):
        try:
            record, path = seq.advance(tree, out)
            runner.commit(slot, path)
        except Exception as exc:  # noqa: BLE001 - the caller fails this row and goes on
            results.append(exc)
            continue
        results.append(record)
        verified.append((draft, tree.size - 1, len(path) - 1))
    forward_s = time.perf_counter() - drafted  # reading the logits waited for the forward (on CUDA too)
    forward_s -= sum(r.draft_s for r in results if isinstance(r, StepRecord))  # acceptance and commits stay in
    if cost is not None:
        cost.observe(len(seqs), cost.tokens_per_row([tree.size for tree in trees]), forward_s)
        cost.observe_step(len(seqs), forward_s)
        cost.observe_drafts(verified)
    if gate is not None:
        emitted = sum(len(r.tokens) for r in results if isinstance(r, StepRecord))
        gate.observe(len(seqs), lookahead, emitted, time.perf_counter() - start)
    for record in results:
        if isinstance(record, StepRecord):  # each row's share of the batch's drafting and forward
            record.draft_s += (drafted - start) / len(seqs)
            record.verify_s = forward_s / len(seqs)
    return results

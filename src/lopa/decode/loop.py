"""The lookahead decoding loop: propose -> build tree -> verify (one forward) -> accept -> commit -> adapt.

`ar` is the same loop with no drafters, so plain and lookahead decoding share every
line that decides what is emitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import torch

from ..config import DraftConfig, GenerationConfig
from ..draft.base import Drafter, StepFeedback
from ..draft.tree import TreeLimits, build_tree, root_only
from ..models.runner import Runner
from .sampling import target_distribution
from .verify import accept_greedy, accept_sampling
from .window import WindowController


@dataclass
class StepRecord:
    """One verification step, as users see it: which tokens came and how each was drafted."""

    tokens: list[int]
    sources: list[str]  # per token: "heads", "lookup", "pool", "jacobi" (accepted drafts) or "bonus"
    tree_size: int
    depth: int

    @property
    def accepted(self) -> int:
        return len(self.tokens) - 1


@dataclass
class Drafting:
    drafters: list[Drafter]
    controller: WindowController
    config: DraftConfig = field(default_factory=DraftConfig)

    def limits(self, depth: int, budget: int) -> TreeLimits:
        c = self.config
        return TreeLimits(
            depth, budget, c.top_k_per_depth, c.tau, c.lambda_logp, c.lambda_coherence, c.repetition_penalty_weight
        )


def _contexts(context: list[int], tree, cfg: GenerationConfig) -> list[list[int]]:
    """Each row's token history, only needed by the repetition penalty."""
    if cfg.repetition_penalty == 1.0:
        return [[]] * tree.size
    return [context[:-1] + tree.path_tokens(i) for i in range(tree.size)]


def decode(
    runner: Runner,
    prompt: list[int],
    cfg: GenerationConfig,
    eos_ids: set[int],
    drafting: Drafting | None = None,
) -> Iterator[StepRecord]:
    """Yield steps until EOS or max_new_tokens; the caller may stop early (stop strings)."""
    generator = torch.Generator()
    generator.manual_seed(cfg.seed if cfg.seed is not None else torch.seed())
    budget = drafting.config.node_budget if drafting else 0
    runner.reset(len(prompt) + cfg.max_new_tokens + budget + 2)
    for drafter in drafting.drafters if drafting else ():
        drafter.start(prompt)

    first = runner.prefill(torch.tensor(prompt))
    dist = target_distribution(first.logits, [prompt], cfg)
    token = int(dist[0].argmax()) if cfg.greedy else int(torch.multinomial(dist[0], 1, generator=generator))
    context = prompt + [token]
    produced = 1
    yield StepRecord([token], ["bonus"], 0, 0)
    if token in eos_ids:
        return

    step = 0
    while produced < cfg.max_new_tokens:
        tree = root_only(context[-1])
        if drafting:
            plan = drafting.controller.plan()
            proposals = [p for d in drafting.drafters for p in d.propose(context, plan.depth)]
            tree = build_tree(context[-1], proposals, drafting.limits(plan.depth, plan.budget))
            if not drafting.controller.worth_drafting(tree.size, tree.depth):
                tree = root_only(context[-1])
        out = runner.forward(*tree.tensors())
        dist = target_distribution(out.logits, _contexts(context, tree, cfg), cfg)
        if cfg.greedy:
            path, bonus = accept_greedy(tree, dist.argmax(-1).tolist())
        else:
            path, bonus = accept_sampling(tree, dist, generator)
        runner.commit(path)
        new = [tree.tokens[i] for i in path[1:]] + [bonus]
        sources = [tree.sources[i] for i in path[1:]] + ["bonus"]
        stop = next((i for i, t in enumerate(new) if t in eos_ids), None)
        keep = min(len(new), cfg.max_new_tokens - produced, stop + 1 if stop is not None else len(new))
        if drafting:
            feedback = StepFeedback(context, tree, out.logits.argmax(-1).tolist(), path, new, out.hidden)
            for drafter in drafting.drafters:
                drafter.observe(feedback)
            logprobs = out.logits[path].float().log_softmax(-1)[torch.arange(len(new)), torch.tensor(new)]
            drafting.controller.update(step, tree.depth, len(path) - 1, logprobs.tolist())
        context.extend(new[:keep])
        produced += keep
        step += 1
        yield StepRecord(new[:keep], sources[:keep], tree.size, tree.depth)
        if stop is not None and stop < keep:
            return

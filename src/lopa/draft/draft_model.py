"""A small model with the target's tokenizer drafts: its greedy chain plus its runner-up at each depth.

The draft model runs through its own Runner (its own KV cache, driven through the runner's
API like any sequence: prefill appends, truncate rewinds), so after a step the drafted tokens
the target accepted are already in its cache and only the rest (usually the bonus token) is
fed again. One draft forward per drafted token; the runner-ups cost nothing extra and become
one-token branches of the tree, so a miss at depth d can still be caught by its second choice.
Confidences are the draft model's probabilities (the tree's tau filter and cost model use them).

The chain length adapts as transformers' assisted generation does ("heuristic" schedule):
+2 after a step that accepted the whole chain, -1 otherwise; drafting also stops early when
the draft model's probability falls below `stop_below` (transformers' assistant confidence
threshold, 0.4 by default). Verification by the target decides every token, so none of this
can change the output.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..models.runner import Runner
from .base import Drafter, StepFeedback
from .tree import Proposal


class DraftModelDrafter(Drafter):
    def __init__(
        self,
        runner: Runner,
        depth: int = 4,
        alternatives: int = 1,
        stop_below: float = 0.4,
        source: str = "draft",
    ):
        """`runner` drives the draft model; `depth` is the first chain length (it then adapts);
        `alternatives`: runner-up tokens proposed as one-token branches at each depth."""
        self.runner = runner
        self.depth = depth
        self.alternatives = alternatives
        self.stop_below = stop_below
        self.source = source
        self.limit = depth  # the window's depth at the last proposal: the chain never grows past it
        self.fed: list[int] = []  # tokens whose KV rows the draft runner holds, in order
        self.chain: list[int] = []  # the last greedy chain proposed
        self.steps = 0
        self.chain_hits = 0  # drafted chain tokens the target accepted, summed over steps
        self.chain_tokens = 0

    def start(self, prompt: Sequence[int]) -> None:
        self.runner.reserve(2 * len(prompt) + 1024)
        self.runner.truncate(0, 0)
        self.fed = []

    def _feed(self, tokens: list[int]) -> torch.Tensor:
        """Append tokens causally to the draft model's sequence; its logits after the last one."""
        out = self.runner.prefill(0, torch.tensor(tokens))
        self.fed.extend(tokens)
        return out.logits[-1]

    def _sync(self, context: Sequence[int], depth: int) -> torch.Tensor:
        """Bring the draft sequence to `context` (keeping the common prefix) and return its next-token logits."""
        keep = 0
        for fed, tok in zip(self.fed, context):
            if fed != tok:
                break
            keep += 1
        keep = min(keep, len(context) - 1)  # the root is always fed again: its logits are the first draft
        self.runner.truncate(0, keep)
        del self.fed[keep:]
        return self._feed(list(context[keep:]))

    @torch.no_grad()
    def propose(self, context: Sequence[int], max_depth: int) -> list[Proposal]:
        self.limit = max_depth
        depth = min(max_depth, self.depth)
        if depth < 1:
            return []
        logits = self._sync(context, depth)
        chain: list[int] = []
        confidences: list[float] = []
        proposals: list[Proposal] = []
        for i in range(depth):
            top = logits.float().softmax(-1).topk(1 + self.alternatives)
            probs, tokens = top.values.tolist(), top.indices.tolist()
            for tok, p in zip(tokens[1:], probs[1:]):
                proposals.append(Proposal(chain + [tok], confidences + [p], self.source))
            chain.append(tokens[0])
            confidences.append(probs[0])
            if probs[0] < self.stop_below or i + 1 == depth:
                break
            logits = self._feed([tokens[0]])
        self.chain = chain
        return [Proposal(chain, confidences, self.source), *proposals]

    def observe(self, feedback: StepFeedback) -> None:
        """Adapt the chain length to how much of the last chain the target kept."""
        if not self.chain:
            return
        hits = 0
        for drafted, kept in zip(self.chain, feedback.new_tokens[:-1]):
            if drafted != kept:
                break
            hits += 1
        self.steps += 1
        self.chain_hits += hits
        self.chain_tokens += len(self.chain)
        self.depth = min(self.depth + 2, self.limit) if hits == len(self.chain) else max(1, self.depth - 1)
        self.chain = []

    def summary(self) -> dict:
        """Acceptance of the greedy chain, for the stats and the benchmark."""
        return {
            "steps": self.steps,
            "chain_acceptance": self.chain_hits / self.chain_tokens if self.chain_tokens else 0.0,
            "final_depth": self.depth,
        }

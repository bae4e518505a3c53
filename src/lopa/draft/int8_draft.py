"""A lossless mixed-precision drafter: an int8 copy of the target proposes, the full-precision target verifies.

The int8 model agrees with its fp32 parent on most greedy tokens, so its greedy chain is a
strong draft; verification by the fp32 model keeps the output exactly the fp32 output.
It keeps its own KV cache in step with the committed context: after a step the accepted
drafted tokens are already in its cache, so only the rest (usually just the bonus token)
is fed again before it drafts the next chain, one 1-token int8 forward per drafted token.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..models.runner import Runner
from .base import Proposal, StepFeedback


class Int8Drafter:
    source = "int8"

    def __init__(self, runner: Runner, headroom: int = 1024, depth: int | None = None):
        """`runner` drives the int8 model; it drafts until the context is `headroom` tokens past the prompt;
        `depth` caps the chain (default: the window's depth)."""
        self.runner = runner
        self.headroom = headroom
        self.depth = depth
        self.fed: list[int] = []  # tokens whose KV rows are in the cache, in order

    def start(self, prompt: Sequence[int]) -> None:
        self.runner.reset(len(prompt) + self.headroom)
        self.fed = []

    def _feed(self, tokens: list[int]) -> torch.Tensor:
        """Append tokens causally to the cache; the logits after the last one."""
        t = len(tokens)
        causal = torch.ones(t, t, dtype=torch.bool).tril_()
        out = self.runner.forward(torch.tensor(tokens), torch.arange(t), causal, last_only=True)
        self.runner.commit(list(range(t)))
        self.fed.extend(tokens)
        return out.logits[-1]

    @torch.no_grad()
    def propose(self, context: Sequence[int], max_depth: int) -> list[Proposal]:
        depth = min(max_depth, self.depth or max_depth, self.runner.cache.capacity - len(context))
        if depth < 1:
            return []
        keep = 0  # longest common prefix of what the cache holds and the context
        for fed, tok in zip(self.fed, context):
            if fed != tok:
                break
            keep += 1
        keep = min(keep, len(context) - 1)  # always feed the root to get logits after it
        self.runner.cache.set_length(keep)
        del self.fed[keep:]
        logits = self._feed(list(context[keep:]))
        tokens, confidences = [], []
        for i in range(depth):
            probs = logits.float().softmax(-1)
            tok = int(probs.argmax())
            tokens.append(tok)
            confidences.append(float(probs[tok]))
            if i + 1 < depth:
                logits = self._feed([tok])
        return [Proposal(tokens, confidences, self.source)]

    def observe(self, feedback: StepFeedback) -> None:
        """Nothing to learn: the next propose() reuses the cache rows of whatever was accepted."""

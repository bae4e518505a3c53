"""The drafter interface: proposals in, verification feedback out. Drafters never touch the KV cache."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .tree import DraftTree, Proposal


@dataclass
class StepFeedback:
    """What one verification step tells the drafters: the tree, the target's top-1 at every node, what was kept."""

    context: list[int]  # prompt + output before this step; its last token is the tree root
    tree: DraftTree
    predictions: list[int]  # target argmax after each tree node
    accepted_nodes: list[int]  # tree node indices kept, root first
    new_tokens: list[int]  # tokens committed this step, bonus last (it becomes the next root)
    layers: torch.Tensor | None = None  # the Runner's hidden_layers of every tree node, [T, layers * hidden]


class Drafter:
    """A source of proposals for one sequence at a time. `propose` is the one method a drafter must write; the
    hooks default to doing nothing."""

    source: str  # the name its accepted tokens are reported under

    def start(self, prompt: Sequence[int]) -> None:
        """Reset for a new request whose prompt token ids are `prompt`."""

    def propose(self, context: Sequence[int], max_depth: int) -> list[Proposal]:
        """Continuations of `context` (whose last token is the tree root), at most max_depth long."""
        raise NotImplementedError

    def observe_prefill(self, layers: torch.Tensor) -> None:
        """The runner's `hidden_layers` of every prompt position, [prompt, layers * hidden] (row p is position p):
        for a drafter that drafts from the target's features of the whole prefix (the EAGLE-3 predictor)."""

    def observe(self, feedback: StepFeedback) -> None:
        """Learn from a verification step."""

    def summary(self) -> dict | None:
        """Figures for GenerationStats.drafters (None: nothing to report)."""
        return None

"""The drafter interface: proposals in, verification feedback out. Drafters never touch the KV cache."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

import torch

if TYPE_CHECKING:
    from .tree import DraftTree


@dataclass
class Proposal:
    """A candidate continuation after the tree root, with a confidence in (0, 1] for each token."""

    tokens: list[int]
    confidences: list[float]
    source: str  # "predictor", "lookup", "pool" or "jacobi": shown to users per accepted token


@dataclass
class StepFeedback:
    """What one verification step taught: the tree, the target's top-1 at every node, what was kept."""

    context: list[int]  # prompt + output before this step; its last token is the tree root
    tree: DraftTree
    predictions: list[int]  # target argmax after each tree node
    accepted_nodes: list[int]  # tree node indices kept, root first
    new_tokens: list[int]  # tokens committed this step, bonus last (it becomes the next root)
    hidden: torch.Tensor  # last hidden state of every tree node, [T, hidden]
    layers: torch.Tensor | None = None  # the Runner's hidden_layers of every tree node, [T, layers * hidden]


class Drafter(Protocol):
    source: str

    def start(self, prompt: Sequence[int]) -> None:
        """Reset for a new request whose prompt token ids are `prompt`."""

    def propose(self, context: Sequence[int], max_depth: int) -> list[Proposal]:
        """Continuations of `context` (whose last token is the tree root), at most max_depth long."""

    def observe(self, feedback: StepFeedback) -> None:
        """Learn from a verification step."""


class PrefillObserver(Protocol):
    """Optional drafter method: decode() calls it, where a drafter has it, with the prefill's hidden states.

    Only the runner's `hidden_layers` of every prompt position come (the prefill keeps no other rows); a
    drafter that drafts from the target's features of the whole prefix (the EAGLE-3 predictor) needs them.
    """

    def observe_prefill(self, layers: torch.Tensor) -> None:
        """`layers` [prompt, layers * hidden]: row p is the prompt's position p."""

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
    source: str  # "heads", "lookup", "pool" or "jacobi": shown to users per accepted token


@dataclass
class StepFeedback:
    """What one verification step taught: the tree, the target's top-1 at every node, what was kept."""

    context: list[int]  # prompt + output before this step; its last token is the tree root
    tree: DraftTree
    predictions: list[int]  # target argmax after each tree node
    accepted_nodes: list[int]  # tree node indices kept, root first
    new_tokens: list[int]  # tokens committed this step, bonus last (it becomes the next root)
    hidden: torch.Tensor  # last hidden state of every tree node, [T, hidden]


class Drafter(Protocol):
    source: str

    def start(self, prompt: Sequence[int]) -> None:
        """Reset for a new request whose prompt token ids are `prompt`."""

    def propose(self, context: Sequence[int], max_depth: int) -> list[Proposal]:
        """Continuations of `context` (whose last token is the tree root), at most max_depth long."""

    def observe(self, feedback: StepFeedback) -> None:
        """Learn from a verification step."""

"""The drafter interface: proposals in, verification feedback out. Drafters never touch the KV cache."""

from __future__ import annotations

from typing import Protocol, Sequence

import torch

from ..decode.feedback import StepFeedback
from .tree import Proposal


class Drafter(Protocol):
    source: str

    def start(self, prompt: Sequence[int]) -> None:
        """Reset for a new request whose prompt token ids are `prompt`."""

    def propose(self, context: Sequence[int], max_depth: int) -> list[Proposal]:
        """Continuations of `context` (whose last token is the tree root), at most max_depth long."""

    def observe(self, feedback: StepFeedback) -> None:
        """Learn from a verification step."""


class PrefillObserver(Protocol):
    """Optional drafter method: the decoder calls it, where a drafter has it, with the prefill's hidden states.

    Only the runner's `hidden_layers` of every prompt position come (the prefill keeps no other rows); a
    drafter that drafts from the target's features of the whole prefix (the EAGLE-3 predictor) needs them.
    """

    def observe_prefill(self, layers: torch.Tensor) -> None:
        """`layers` [prompt, layers * hidden]: row p is the prompt's position p."""

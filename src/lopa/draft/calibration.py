"""Online calibration of draft confidences from what the target actually accepted.

An n-gram match has no probability of its own; what the tree filter and the cost model
need is P(token accepted | its parent accepted). Each drafter keeps one of these per kind
of guess (match length, pool rank, ...) and learns it from every verification step.
"""

from __future__ import annotations

from collections.abc import Hashable

from .base import StepFeedback


class AcceptanceRates:
    """Beta-smoothed, exponentially decayed acceptance rates, one per key."""

    def __init__(self, prior: dict[Hashable, float], strength: float = 4.0, decay: float = 0.98):
        self.prior = prior
        self.strength = strength
        self.decay = decay
        self.hits: dict[Hashable, float] = {}
        self.trials: dict[Hashable, float] = {}

    def rate(self, key: Hashable) -> float:
        prior = self.prior.get(key, 0.2)
        return (self.hits.get(key, 0.0) + prior * self.strength) / (self.trials.get(key, 0.0) + self.strength)

    def record(self, key: Hashable, accepted: bool) -> None:
        self.hits[key] = self.hits.get(key, 0.0) * self.decay + accepted
        self.trials[key] = self.trials.get(key, 0.0) * self.decay + 1.0

    def learn(self, feedback: StepFeedback, guesses: list[tuple[Hashable, list[int]]]) -> None:
        """Score each guess's tokens that reached the tree and whose parent the target accepted."""
        tree, kept = feedback.tree, set(feedback.accepted_nodes)
        seen: set[int] = set()
        for key, tokens in guesses:
            for node in tree.find_path(tokens)[1:]:
                if node in seen or tree.parents[node] not in kept:
                    break
                seen.add(node)
                self.record(key, node in kept)

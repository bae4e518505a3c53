"""Dynamic window: choose the tree depth and node budget for the next step.

Two signals combine. The LoPA rule moves a window k in [1, k_max] by the trend of the
accepted tokens' perplexity (widen when it falls by more than 0.15, shrink when it rises
by more than 0.1). Within that window, a cost model (forward latency against tokens in
the forward, measured on this hardware) and the measured per-depth acceptance rates pick
the depth and budget that maximise expected tokens per second, not tokens per forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class CostModel:
    """Forward latency (seconds) against tokens in the forward, interpolated between measured sizes."""

    latency: dict[int, float]

    def __call__(self, tokens: int) -> float:
        sizes = sorted(self.latency)
        if tokens <= sizes[0]:
            return self.latency[sizes[0]]
        for lo, hi in zip(sizes, sizes[1:]):
            if tokens <= hi:
                frac = (tokens - lo) / (hi - lo)
                return self.latency[lo] + frac * (self.latency[hi] - self.latency[lo])
        lo, hi = sizes[-2], sizes[-1]
        return self.latency[hi] + (tokens - hi) * (self.latency[hi] - self.latency[lo]) / (hi - lo)

    @classmethod
    def flat(cls) -> "CostModel":
        """When nothing was measured: every size costs the same (GPU-like), so TPF decides."""
        return cls({1: 1.0, 64: 1.0})


@dataclass
class Plan:
    depth: int
    budget: int


@dataclass
class WindowController:
    k_max: int
    node_budget: int
    width: int  # nodes per depth the tree can hold (top-k per depth)
    cost: CostModel
    dynamic: bool = True
    window: int = 0  # the LoPA window k; starts at k_max
    decay: float = 0.9
    offered: list[float] = field(default_factory=list)  # decayed count of steps offering depth d
    accepted: list[float] = field(default_factory=list)  # ... and accepting at least d tokens
    ppl_history: list[float] = field(default_factory=list)
    decisions: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.window = self.window or self.k_max
        self.offered = [0.0] * (self.k_max + 1)
        self.accepted = [0.0] * (self.k_max + 1)

    def acceptance_rate(self, depth: int) -> float:
        """P(depth-th draft token accepted | previous accepted), Beta(1, 1) smoothed."""
        return (self.accepted[depth] + 1.0) / (self.offered[depth] + 2.0)

    def expected_tokens(self, depth: int) -> float:
        total, reach = 1.0, 1.0
        for d in range(1, depth + 1):
            reach *= self.acceptance_rate(d)
            total += reach
        return total

    def budget_for(self, depth: int) -> int:
        return min(self.node_budget, depth * self.width)

    def plan(self) -> Plan:
        if not self.dynamic:
            return Plan(self.k_max, self.node_budget)
        best = max(
            range(1, self.window + 1),
            key=lambda d: self.expected_tokens(d) / self.cost(1 + self.budget_for(d)),
        )
        return Plan(best, self.budget_for(best))

    def worth_drafting(self, tree_size: int, tree_depth: int) -> bool:
        """Is a tree of this size expected to beat a plain 1-token forward in tokens per second?"""
        if tree_size <= 1 or not self.dynamic:
            return tree_size > 1
        gain = self.expected_tokens(tree_depth) / self.cost(tree_size)
        return gain > 1.0 / self.cost(1)

    def update(self, step: int, offered_depth: int, accepted: int, token_logprobs: list[float]) -> None:
        """Record one verification step: depth offered, drafted tokens accepted, logprobs of the emitted tokens."""
        for d in range(1, self.k_max + 1):
            self.offered[d] *= self.decay
            self.accepted[d] *= self.decay
        for d in range(1, offered_depth + 1):
            self.offered[d] += 1
            self.accepted[d] += d <= accepted
        if token_logprobs:
            self.ppl_history.append(math.exp(-sum(token_logprobs) / len(token_logprobs)))
        self._lopa_rule(step)

    def _lopa_rule(self, step: int, span: int = 4) -> None:
        """Widen when the recent perplexity fell by > 0.15, shrink when it rose by > 0.1."""
        if not self.dynamic or len(self.ppl_history) < 2 * span:
            return
        prev = sum(self.ppl_history[-2 * span : -span]) / span
        now = sum(self.ppl_history[-span:]) / span
        old = self.window
        if prev - now > 0.15:
            self.window = min(self.k_max, self.window + 1)
        elif now - prev > 0.1:
            self.window = max(1, self.window - 1)
        if self.window != old:
            self.decisions.append({"step": step, "window": self.window, "ppl_before": prev, "ppl_now": now})

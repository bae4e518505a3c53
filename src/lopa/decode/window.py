"""Dynamic window: the tree depth and size for the next step.

Two signals combine. The LoPA rule moves a window k in [1, k_max] by the trend of the
accepted tokens' perplexity (widen when it falls by more than 0.15, shrink when it rises
by more than 0.1): k caps the tree depth. Within it, a cost model (forward latency against
tokens in the forward, measured on this hardware) picks how many of the best-ranked nodes
to verify: the size that maximises expected tokens per second, where expected tokens =
1 (the bonus) + the sum of the kept nodes' path probabilities.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class CostModel:
    """Forward latency (seconds) against tokens in the forward, interpolated between measured sizes.

    stepwise: a forward costs what the next measured size costs (a compiled runner pads to those sizes)."""

    latency: dict[int, float]
    stepwise: bool = False

    def __call__(self, tokens: int) -> float:
        sizes = sorted(self.latency)
        if self.stepwise and tokens <= sizes[-1]:
            return self.latency[next(s for s in sizes if s >= tokens)]
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
        """When nothing was measured: every size costs the same (GPU-like), so expected tokens decide."""
        return cls({1: 1.0, 64: 1.0})


@dataclass
class WindowController:
    k_max: int
    cost: CostModel
    dynamic: bool = True
    window: int = 0  # the LoPA window k; starts at k_max
    ppl_history: list[float] = field(default_factory=list)
    decisions: list[dict] = field(default_factory=list)  # window moves, for the stats
    sizes: Counter = field(default_factory=Counter)  # how often each tree size was chosen

    def __post_init__(self) -> None:
        self.window = self.window or self.k_max

    @property
    def depth(self) -> int:
        return self.window if self.dynamic else self.k_max

    def choose_size(self, probs: list[float]) -> int:
        """How many nodes (in best-first order, with these path probabilities) to verify."""
        if not self.dynamic:
            return len(probs)
        best, best_rate, expected = 0, 1.0 / self.cost(1), 1.0
        for m, p in enumerate(probs, start=1):
            expected += p
            rate = expected / self.cost(1 + m)
            if rate > best_rate:
                best, best_rate = m, rate
        return best

    def update(self, step: int, tree_size: int, token_logprobs: list[float]) -> None:
        """Record one step: the tree size used and the log-probabilities of the tokens it emitted."""
        self.sizes[tree_size] += 1
        if token_logprobs:
            self.ppl_history.append(math.exp(-sum(token_logprobs) / len(token_logprobs)))
        self._lopa_rule(step)

    def _lopa_rule(self, step: int, span: int = 4) -> None:
        """Every `span` steps: widen if perplexity fell by > 0.15 against the span before, shrink if it rose by > 0.1."""
        if not self.dynamic or len(self.ppl_history) < 2 * span or len(self.ppl_history) % span:
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

    def summary(self) -> dict:
        return {"window_moves": self.decisions, "final_window": self.window, "tree_sizes": dict(self.sizes)}

"""Dynamic window: the tree depth for the next step.

The LoPA rule moves a window k in [1, k_max] by the trend of the accepted tokens'
perplexity (widen when it falls by more than 0.15, shrink when it rises by more than 0.1):
k caps the tree depth. How many nodes within it are verified is the cost model's choice
(decode/cost.py), made for the whole batch.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class WindowController:
    k_max: int
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

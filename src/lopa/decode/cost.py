"""What a verification forward costs, and so how many draft nodes are worth verifying: a latency surface
measured on this hardware, corrected by every step's measured time, and the drafts' probabilities corrected by
what verification accepted. The reasoning and the measurements behind it: docs/decoding.md, "Tree sizes".
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from ..draft.tree import RankedDraft
from .gate import LookaheadGate

SMOOTHING = 0.3  # weight of the newest measurement in a running ratio
RELAXING = 0.02  # per measured step, how far the other classes' ratios return to an unmeasured class's
KEPT = 0.98  # per step, the share of the drafts' acceptance record kept (the rest returns to face value)
FACE_VALUE = 2.0  # expected tokens at face value each depth's correction starts from


def _interpolate(curve: dict[int, float], x: float, stepwise: bool) -> float:
    """Piecewise-linear in x through the measured points (extrapolated past the last two); `stepwise`:
    the next measured point's value (a compiled runner pads to those sizes)."""
    xs = sorted(curve)
    if stepwise and x <= xs[-1]:
        return curve[next(s for s in xs if s >= x)]
    if x <= xs[0] or len(xs) == 1:
        return curve[xs[0]]
    for lo, hi in zip(xs, xs[1:]):
        if x <= hi:
            return curve[lo] + (x - lo) / (hi - lo) * (curve[hi] - curve[lo])
    lo, hi = xs[-2], xs[-1]
    return curve[hi] + (x - hi) * (curve[hi] - curve[lo]) / (hi - lo)


@dataclass
class CostModel:
    """Forward seconds against (rows, tokens per row), corrected online by measured steps."""

    surface: dict[int, dict[int, float]]  # rows -> tokens per row -> seconds
    stepwise: bool = False
    packed: bool = False  # the runner packs trees of different sizes (else it pads them to the largest)
    ratios: dict[tuple[int, int], float] = field(default_factory=dict)  # size class -> measured / predicted
    overall: float | None = None  # measured / predicted over every step
    rates: dict[int, float] = field(default_factory=dict)  # rows -> tokens per second of steps without drafting
    expected: dict[int, float] = field(default_factory=dict)  # depth -> recent verified nodes' path probabilities
    accepted: dict[int, float] = field(default_factory=dict)  # depth -> recent rows accepted that deep
    gate: LookaheadGate = field(default_factory=LookaheadGate)  # whether trees pay at all, by measured steps

    def __post_init__(self) -> None:
        """No forward costs more than a measured larger one (more rows, more tokens): a slow outlier (another
        process woke up during one measurement) must not make a size look worse than a bigger one."""
        cells = [(r, t) for r, row in self.surface.items() for t in row]
        self.surface = {
            r: {t: min(self.surface[r2][t2] for r2, t2 in cells if r2 >= r and t2 >= t) for t in row}
            for r, row in self.surface.items()
        }

    @classmethod
    def flat(cls) -> CostModel:
        """When nothing was measured: every size costs the same (GPU-like), so expected tokens decide."""
        return cls({1: {1: 1.0, 64: 1.0}})

    def predicted(self, rows: int, tokens: float) -> float:
        """The profile's seconds for a forward of `rows` x `tokens`, between the measured row counts; a padded
        compiled forward or a packed batch costs the next measured tokens per row (module docstring)."""
        stepwise = self.stepwise or (self.packed and rows > 1)
        by_rows = {r: _interpolate(curve, tokens, stepwise) for r, curve in self.surface.items()}
        return _interpolate(by_rows, rows, False)

    @property
    def unmeasured(self) -> float:
        """The correction of a size class with no steps of its own."""
        return min(1.0, self.overall) if self.overall is not None else 1.0

    def __call__(self, rows: int, tokens: float) -> float:
        return self.predicted(rows, tokens) * self.ratios.get(_size_class(rows, tokens), self.unmeasured)

    def observe(self, rows: int, tokens: float, seconds: float) -> None:
        """A forward of rows x tokens (`tokens_per_row`) took `seconds`: move its size class's correction towards it."""
        key, ratio = _size_class(rows, tokens), seconds / self.predicted(rows, tokens)
        self.overall = _smooth(self.overall, ratio)
        for other, value in self.ratios.items():  # a class no longer chosen is not judged by old steps forever
            self.ratios[other] = value + RELAXING * (self.unmeasured - value)
        self.ratios[key] = _smooth(self.ratios.get(key), ratio)

    def observe_step(self, rows: int, seconds: float) -> None:
        """A step of `rows` sequences took `seconds` besides drafting (its forward, acceptance and commits)."""
        self.rates[rows] = _smooth(self.rates.get(rows), rows / seconds)

    def rate(self, rows: int) -> float:
        """What a second of drafting costs in a batch of `rows`: the tokens per second its steps would make
        without drafting (one per row per step; not the drafts' own tokens, which are what drafting buys, nor
        its time, or an expensive drafter would slow the batch and so look cheaper). A batch size not measured
        yet takes a plain forward's (corrected) time, a little less than a step's: drafting is priced high."""
        return self.rates.get(rows) or rows / self(rows, 1)

    def calibrated(self, draft: RankedDraft) -> list[float]:
        """The draft's path probabilities (best first) scaled by the share of them verification bore out at
        each depth lately."""
        scale = {
            depth: (self.accepted.get(depth, 0.0) + FACE_VALUE) / (self.expected.get(depth, 0.0) + FACE_VALUE)
            for depth in set(draft.depths)
        }
        return [min(1.0, p * scale[depth]) for p, depth in zip(draft.probs, draft.depths)]

    def observe_drafts(self, verified: list[tuple[RankedDraft, int, int]]) -> None:
        """One step verified, per row, the best nodes of its draft: the draft, how many and how many were accepted."""
        for record in (self.expected, self.accepted):
            for depth in record:
                record[depth] *= KEPT
        for draft, size, accepted in verified:
            depths = draft.depths[:size]
            for p, depth in zip(draft.probs, depths):
                self.expected[depth] = self.expected.get(depth, 0.0) + p
            for depth in set(depths):
                self.accepted[depth] = self.accepted.get(depth, 0.0) + (depth <= accepted)

    def tokens_per_row(self, sizes: list[int]) -> float:
        """The surface's tokens per row that a forward of trees of `sizes` nodes (roots included) costs like:
        packed, their mean; padded, the largest."""
        return sum(sizes) / len(sizes) if self.packed else max(sizes)

    def tree_sizes(self, probs: list[list[float]]) -> list[int]:
        """Nodes to verify per row for rows whose ranked drafts have these path probabilities (best first): the
        batch takes the next node of the row whose next node is likeliest while that raises its expected tokens
        per second."""
        n = len(probs)
        spent = self(n, 1)  # the forward of the sizes taken so far
        sizes, best, best_rate, expected = [0] * n, [0] * n, n / spent, float(n)
        left = sum(map(sum, probs))  # what every node not taken yet could add
        heap = [(-row[0], r) for r, row in enumerate(probs) if row]
        heapq.heapify(heap)
        while heap and (expected + left) / spent > best_rate:  # no more nodes could beat the best rate
            p, r = heapq.heappop(heap)
            expected, left, sizes[r] = expected - p, left + p, sizes[r] + 1
            if sizes[r] < len(probs[r]):
                heapq.heappush(heap, (-probs[r][sizes[r]], r))
            spent = self(n, self.tokens_per_row([1 + s for s in sizes]))
            rate = expected / spent
            if rate > best_rate:
                best, best_rate = list(sizes), rate
        if not self.packed:  # padded to the largest tree: the other rows' nodes up to it cost nothing more
            best = [min(max(best), len(row)) for row in probs]
        return best


def _smooth(old: float | None, new: float) -> float:
    return new if old is None else (1 - SMOOTHING) * old + SMOOTHING * new


def _size_class(rows: int, tokens: float) -> tuple[int, int]:
    """Forwards are corrected together when they have as many rows and their tokens per row, rounded up, share a
    power of two (a batch's per-row bookkeeping must not be charged to a lone sequence's trees)."""
    return rows, max(1, math.ceil(tokens)).bit_length()

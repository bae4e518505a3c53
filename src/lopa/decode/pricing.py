"""Which drafters pay for their time, per sequence, at the batch's going rate: a drafter proposes while the
tokens it gets accepted exceed its time x the batch's plain tokens/s, and probes again after idling.
The reasoning and the measurements behind it: docs/decoding.md, "Drafter pricing".
"""

from __future__ import annotations

from dataclasses import dataclass

PROBE_EVERY = 8  # steps before a drafter that does not pay proposes again, to be measured again
MAX_IDLE = 64  # the longest wait between such probes
SMOOTHING = 0.3  # weight of the newest step in the running figures (a plain mean over the first few)
PRIOR_TOKENS = 1.0  # what a drafter is trusted to yield per step before it is measured, weighing as one step
MEASURED = 16  # proposals over earlier sequences after which a dear drafter's first proposal in a batch is not on trust
DEAR_S = 0.001  # a drafter proposing slower than this is dear (the predictor, a draft model; n-gram ones take ~0.1 ms)
KEEP = 0.5  # a drafter proposing at every step goes on while its tokens are this share of its cost (one step's
# yield is noisy: 5, 1, 5, ... accepted tokens must not end a drafter that pays); an idle one must pay in full


@dataclass
class DrafterPrice:
    seconds: float | None = None  # running proposing time per step it proposed
    tokens: float = PRIOR_TOKENS  # running accepted tokens of its source per step it proposed
    steps: int = 0  # steps it proposed
    idle: int = 0  # steps since it last proposed
    wait: int = PROBE_EVERY  # steps until its next probe while it does not pay
    doubted: float | None = None  # what earlier sequences measured a dear drafter to yield (see _doubted)

    @property
    def warm(self) -> bool:
        """It proposed at the last step."""
        return self.steps > 0 and self.idle == 0

    def pays(self, rate: float | None, rows: int, left: int) -> bool:
        """Whether it proposes this step in a batch of `rows`, `left` tokens before the sequence's end: it pays (or
        there is nothing to judge by: not measured yet), or it is due for a probe."""
        tokens = self.doubted if self.doubted is not None and rows > 1 and not self.steps else self.tokens
        if rate is None or self.seconds is None or tokens >= self.seconds * rate * (KEEP if self.warm else 1.0):
            self.wait = PROBE_EVERY
            return True
        if self.idle + 1 >= self.wait * rows and left >= PROBE_EVERY:
            self.wait = min(MAX_IDLE, 2 * self.wait)
            return True
        return False

    def update(self, seconds: float | None, tokens: int) -> None:
        """It proposed: `seconds` (None: not a step's own time) and `tokens` of its source accepted."""
        if seconds is not None:
            self.seconds = _smooth(self.seconds, seconds)
        self.steps += 1
        self.tokens += max(SMOOTHING, 1 / (self.steps + 1)) * (tokens - self.tokens)  # the prior counts as one step


class DraftPricing:
    """Running time and yield of each drafter source of one sequence, starting from `shared`: the running figures
    over the sequences before it (Engine keeps them), so a sequence joining a full batch does not first pay for
    finding out again that the predictor does not pay there."""

    def __init__(self, sources: list[str], shared: dict[str, DrafterPrice] | None = None):
        shared = {} if shared is None else shared
        self.shared = {source: shared.setdefault(source, DrafterPrice()) for source in sources}
        # a new text may suit a drafter the last ones did not: it starts trusted for at least PRIOR_TOKENS
        self.prices = {
            s: DrafterPrice(known.seconds, max(known.tokens, PRIOR_TOKENS), doubted=_doubted(known))
            for s, known in self.shared.items()
        }

    def proposing(self, rate: float | None, rows: int, left: int) -> set[str]:
        """The sources to ask for proposals this step, at the `rate` (tokens/s; None: every one) of a batch of `rows`,
        `left` tokens before the sequence's end."""
        return {source for source, price in self.prices.items() if price.pays(rate, rows, left)}

    def record(self, seconds: dict[str, float], accepted_sources: list[str]) -> None:
        """A step: the proposing time of each source that proposed, and the sources of the accepted nodes."""
        for source, price in self.prices.items():
            if source not in seconds:
                price.idle += 1
                continue
            # a sequence's first proposal also takes in the prompt (the predictor's rows, a draft model's prefill)
            timed = seconds[source] if price.steps else None
            price.update(timed, accepted_sources.count(source))
            self.shared[source].update(timed, accepted_sources.count(source))
            price.idle = 0


def _doubted(known: DrafterPrice) -> float | None:
    """What a new sequence in a batch expects of a dear drafter until it first proposes: the earlier sequences'
    figures once they measured MEASURED proposals, not PRIOR_TOKENS. Its first proposal also takes in the whole prompt
    while every row waits (at 8 rows the predictor's proposals were ~9% of the step time for 1-13 accepted tokens a
    run). A lone request still trusts it: without that, single requests fell from 1.6 to 1.4 tokens per forward."""
    dear = known.seconds is not None and known.seconds >= DEAR_S and known.steps >= MEASURED
    return known.tokens if dear else None


def _smooth(old: float | None, new: float) -> float:
    return new if old is None else (1 - SMOOTHING) * old + SMOOTHING * new

"""Whether lookahead pays at a batch size, judged by what whole steps actually made.

The cost model (decode/cost.py) sizes every tree from a latency profile and the drafts' calibrated
probabilities. Both are estimates, and what they leave out (drafting, ranking and building the trees, the
drafters' own probes, acceptance) is paid at every step. At large batches on a CPU the margin is thin: with
8 rows the first extra node costs ~10% of a forward, so trees the model judged worth it made a batch of
8 slower than plain steps (docs/bench/gate). So the batch checks the result: per batch size, the
running tokens per second of whole steps (drafting, forward, acceptance, commits) with lookahead and
without. The leading mode runs; the other runs one step after PROBE_EVERY steps, then after twice as many
while it keeps losing (up to MAX_GAP), so it is measured again as the text, the prefix or the machine
change without its probes costing what it saves. A plain step still feeds every drafter the tokens it
emits, so lookahead resumes with current state. Where lookahead leads (a lone request on a CPU), the plain
probes come one step in 65 once the gap has grown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PROBE_EVERY = 8  # steps of the leading mode before the other one is measured again
MAX_GAP = 64  # the longest run of the leading mode between such probes
KEPT = 1 - 1 / 32  # per step of a mode, the share of its record kept: it judges by ~its last 32 steps


@dataclass
class _BatchSize:
    leader: bool = True  # lookahead leads until plain steps are measured to make more
    tokens: dict[bool, float] = field(default_factory=dict)  # lookahead? -> its recent steps' tokens (decayed sum)
    seconds: dict[bool, float] = field(default_factory=dict)  # and their seconds
    gap: int = PROBE_EVERY
    since: int = 0  # steps of the leader since the other mode last ran

    def rate(self, lookahead: bool) -> float:
        return self.tokens.get(lookahead, 0.0) / self.seconds.get(lookahead, 1.0)


@dataclass
class LookaheadGate:
    """Per batch size, whether its steps draft. A lookahead step's yield is noisy (one token or five), so each
    mode is judged by the tokens per second of its last ~32 steps together, not step by step: a single probe
    neither ends a mode that leads nor crowns one by luck."""

    sizes: dict[int, _BatchSize] = field(default_factory=dict)  # rows -> its figures

    def lookahead(self, rows: int) -> bool:
        """Whether the next step of a batch of `rows` drafts (else it decodes plainly)."""
        size = self.sizes.setdefault(rows, _BatchSize())
        return size.leader if size.since < size.gap else not size.leader

    def observe(self, rows: int, lookahead: bool, tokens: int, seconds: float) -> None:
        """A step of `rows` sequences, drafting or not, emitted `tokens` in `seconds`."""
        size = self.sizes.setdefault(rows, _BatchSize())
        size.tokens[lookahead] = KEPT * size.tokens.get(lookahead, 0.0) + tokens
        size.seconds[lookahead] = KEPT * size.seconds.get(lookahead, 0.0) + seconds
        if lookahead == size.leader:
            size.since += 1
            return
        size.since = 0  # a probe of the other mode
        if size.rate(lookahead) > size.rate(size.leader):
            size.leader, size.gap = lookahead, PROBE_EVERY
        else:
            size.gap = min(MAX_GAP, 2 * size.gap)

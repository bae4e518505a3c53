"""Whether lookahead pays at a batch size, judged by what whole steps actually made (lookahead against plain
steps, per batch size; the losing mode is probed again at growing gaps).
The reasoning and the measurements behind it: docs/decoding.md, "The lookahead gate".
"""

from __future__ import annotations

from dataclasses import dataclass, field

PROBE_EVERY = 8  # steps of the leading mode before the other one is measured again
MAX_GAP = 64  # the longest run of the leading mode between such probes
KEPT = 1 - 1 / 32  # per step of either mode, the share of each mode's record kept: ~the last 32 steps judge


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
    mode is judged by the tokens per second of its steps over the last ~32 steps of the batch together, not
    step by step: a single probe neither ends a mode that leads nor crowns one by luck. Each mode's record
    ages with the batch's steps, not its own: a mode that lost during a stretch of text it drafted badly is
    judged by its probes since, not by that stretch until it has run 32 steps again."""

    sizes: dict[int, _BatchSize] = field(default_factory=dict)  # rows -> its figures

    def lookahead(self, rows: int) -> bool:
        """Whether the next step of a batch of `rows` drafts (else it decodes plainly)."""
        size = self.sizes.setdefault(rows, _BatchSize())
        return size.leader if size.since < size.gap else not size.leader

    def observe(self, rows: int, lookahead: bool, tokens: int, seconds: float) -> None:
        """A step of `rows` sequences, drafting or not, emitted `tokens` in `seconds`."""
        size = self.sizes.setdefault(rows, _BatchSize())
        for mode in size.tokens:  # both age, so the losing mode's probes outweigh its stale record (the text changed)
            size.tokens[mode], size.seconds[mode] = KEPT * size.tokens[mode], KEPT * size.seconds[mode]
        size.tokens[lookahead] = size.tokens.get(lookahead, 0.0) + tokens
        size.seconds[lookahead] = size.seconds.get(lookahead, 0.0) + seconds
        if lookahead == size.leader:
            size.since += 1
            return
        size.since = 0  # a probe of the other mode
        if size.rate(lookahead) > size.rate(size.leader):
            size.leader, size.gap = lookahead, PROBE_EVERY
        else:
            size.gap = min(MAX_GAP, 2 * size.gap)

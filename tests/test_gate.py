"""The lookahead gate: per batch size, lookahead or plain steps by the tokens per second each made."""

from __future__ import annotations

from itertools import islice

from lopa import Engine
from lopa.config import DraftConfig, GenerationConfig
from lopa.decode.batch import decode
from lopa.decode.cost import CostModel
from lopa.decode.gate import MAX_GAP, PROBE_EVERY, LookaheadGate
from lopa.decode.loop import Drafting, SequenceDecoder
from lopa.decode.window import WindowController
from lopa.draft.base import Drafter
from lopa.draft.tree import Proposal

from .prompts import ALL


def _drive(gate: LookaheadGate, rows: int, steps: int, lookahead_rate: float, plain_rate: float) -> list[bool]:
    """`steps` steps of a batch whose lookahead and plain steps make these tokens per second; the modes chosen."""
    chosen = []
    for _ in range(steps):
        mode = gate.lookahead(rows)
        chosen.append(mode)
        gate.observe(
            rows,
            mode,
            rows * 2 if mode else rows,
            (rows * 2 if mode else rows) / (lookahead_rate if mode else plain_rate),
        )
    return chosen


def _probes(chosen: list[bool], mode: bool) -> list[int]:
    return [i for i, m in enumerate(chosen) if m == mode]


def test_plain_steps_take_over_where_they_make_more_and_lookahead_is_probed_ever_more_rarely() -> None:
    gate = LookaheadGate()
    chosen = _drive(gate, 8, 400, lookahead_rate=90.0, plain_rate=100.0)
    assert chosen[:PROBE_EVERY] == [True] * PROBE_EVERY and chosen[PROBE_EVERY] is False  # lookahead first
    probes = _probes(chosen, True)[PROBE_EVERY:]  # after plain took over, each losing probe doubles the wait
    gaps = [b - a - 1 for a, b in zip(probes, probes[1:])]
    assert gaps[:3] == [2 * PROBE_EVERY, 4 * PROBE_EVERY, MAX_GAP] and set(gaps[3:]) == {MAX_GAP}
    assert chosen.count(True) < 0.05 * len(chosen)


def test_lookahead_keeps_leading_where_it_makes_more_and_batch_sizes_are_judged_apart() -> None:
    gate = LookaheadGate()
    alone = _drive(gate, 1, 300, lookahead_rate=130.0, plain_rate=100.0)
    assert alone.count(False) <= 8  # plain probes only, ever rarer
    assert _drive(gate, 8, 200, lookahead_rate=90.0, plain_rate=100.0).count(True) < 20
    assert _drive(gate, 1, 50, lookahead_rate=130.0, plain_rate=100.0).count(False) <= 1


def test_a_lucky_probe_does_not_crown_the_losing_mode() -> None:
    """Judged by ~32 steps together: one plain step twice as fast as usual does not end a lookahead that leads."""
    gate = LookaheadGate()
    _drive(gate, 1, PROBE_EVERY * 4, lookahead_rate=120.0, plain_rate=90.0)
    gate.sizes[1].since = gate.sizes[1].gap  # the next step is a plain probe
    assert gate.lookahead(1) is False
    gate.observe(1, False, 1, 1 / 180.0)
    assert gate.lookahead(1) is True and gate.sizes[1].leader is True


def test_a_mode_that_lost_a_stretch_of_text_leads_again_at_its_first_probe_once_it_makes_more() -> None:
    """Plain steps led for 300 steps (lookahead drafted badly); then lookahead makes 1.5x: its next probe ends
    plain's lead, its record of the bad stretch having aged with the steps since."""
    gate = LookaheadGate()
    _drive(gate, 1, 300, lookahead_rate=90.0, plain_rate=100.0)
    assert gate.sizes[1].leader is False and gate.sizes[1].gap == MAX_GAP
    after = _drive(gate, 1, MAX_GAP + 1 + 40, lookahead_rate=150.0, plain_rate=100.0)
    first = after.index(True)  # the probe, within MAX_GAP steps: it crowns lookahead, which runs on
    assert after[first : first + 1 + PROBE_EVERY] == [True] * (1 + PROBE_EVERY) and gate.sizes[1].leader is True


class Counting(Drafter):
    """A drafter that counts its proposals and observations; it proposes a wrong token."""

    source = "counting"

    def __init__(self):
        self.proposed = self.observed = 0

    def propose(self, context, max_depth):
        self.proposed += 1
        return [Proposal([0], [0.99], self.source)]

    def observe(self, feedback):
        self.observed += 1


def test_a_plain_step_asks_no_drafter_but_feeds_them_all(engine: Engine) -> None:
    """With plain steps leading, a step proposes nothing and verifies the root alone, and the drafters still
    observe what it emitted; the output is the same as lookahead's."""
    prompt = engine.tokenizer(ALL[0].text).input_ids
    cfg = GenerationConfig(max_new_tokens=8)
    outputs = []
    for leader in (True, False):
        cost, drafter = CostModel.flat(), Counting()
        cost.gate.lookahead = lambda rows, leader=leader: leader  # the gate's choice, fixed
        seq = SequenceDecoder(prompt, cfg, engine.eos_ids, Drafting([drafter], WindowController(4), DraftConfig()))
        records = list(islice(decode(engine.runner.sibling(1, 1), seq, cost), 8))
        outputs.append([t for r in records for t in r.tokens])
        steps = len(records) - 1  # the first token comes from the prefill
        assert drafter.observed == steps
        assert drafter.proposed == (steps if leader else 0)
        assert all(r.tree_size == 1 for r in records[1:]) or leader
    assert outputs[0] == outputs[1]

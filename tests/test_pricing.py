"""Drafter pricing: a drafter proposes while its accepted tokens outweigh what its time costs the batch."""

from __future__ import annotations

import time

from lopa import Engine
from lopa.config import DraftConfig, GenerationConfig
from lopa.decode.batch import decode
from lopa.decode.cost import CostModel
from lopa.decode.loop import Drafting, SequenceDecoder
from lopa.decode.pricing import MAX_IDLE, MEASURED, PROBE_EVERY, DraftPricing
from lopa.decode.window import WindowController
from lopa.draft.base import Drafter
from lopa.draft.tree import Proposal

from .prompts import ALL

PROMPT = ALL[2].text


class Slow(Drafter):
    """A drafter that takes `seconds` per proposal and is always wrong; `calls` gets each proposal's context length."""

    source = "slow"

    def __init__(self, seconds: float, calls: list[int]):
        self.seconds, self.calls = seconds, calls

    def propose(self, context, max_depth):
        self.calls.append(len(context))
        time.sleep(self.seconds)
        return [Proposal([0] * min(3, max_depth), [0.99] * min(3, max_depth), self.source)]


def _run(
    pricing: DraftPricing,
    rate: float | None,
    steps: int,
    seconds: dict[str, float],
    accepted: list[str],
    rows: int = 1,
    length: int = 1000,
) -> list[set]:
    """`steps` steps at `rate` in a batch of `rows` of a sequence of `length` tokens (one per step): each source that
    proposes takes its seconds; `accepted` are the step's accepted sources."""
    asked = []
    for step in range(steps):
        proposing = pricing.proposing(rate, rows, length - step)
        asked.append(proposing)
        pricing.record({s: seconds[s] for s in proposing}, [s for s in accepted if s in proposing])
    return asked


def test_an_expensive_drafter_pays_for_a_lone_request_but_not_for_a_full_batch() -> None:
    seconds = {"lookup": 0.0001, "predictor": 0.008}
    accepted = ["predictor", "lookup"]  # one token each per step
    lone = _run(DraftPricing(["lookup", "predictor"]), 30.0, 20, seconds, accepted)  # 8 ms cost 0.24 tokens
    assert all(asked == {"lookup", "predictor"} for asked in lone)
    batch = _run(DraftPricing(["lookup", "predictor"]), 400.0, 20, seconds, accepted)  # 8 ms cost 3.2 tokens
    assert all("lookup" in asked for asked in batch)
    assert sum("predictor" in asked for asked in batch) < 20 / 4  # only its first step and probes


def test_a_drafter_that_does_not_pay_is_probed_ever_less_often_and_returns_when_it_pays() -> None:
    pricing = DraftPricing(["predictor"])
    asked = _run(pricing, 200.0, 2 + 7 * PROBE_EVERY, {"predictor": 0.008}, [])
    probes = [i for i, a in enumerate(asked) if a]
    # the first proposal is not timed (it catches up on the prompt), the second is; then probes
    assert probes == [0, 1, 1 + PROBE_EVERY, 1 + 3 * PROBE_EVERY, 1 + 7 * PROBE_EVERY]
    assert max(b - a for a, b in zip(probes, probes[1:])) <= MAX_IDLE
    # the text turned predictable: every probe now gets 4 tokens accepted, and it soon proposes every step
    later = _run(pricing, 200.0, 4 * MAX_IDLE, {"predictor": 0.008}, ["predictor"] * 4)
    assert all(later[-PROBE_EVERY:])


def test_in_a_batch_probes_come_as_many_times_less_often_as_it_has_rows() -> None:
    """A probe of one row makes every row wait while only that row may gain."""
    asked = _run(DraftPricing(["predictor"]), 200.0, 2 + 3 * 4 * PROBE_EVERY, {"predictor": 0.008}, [], rows=4)
    assert [i for i, a in enumerate(asked) if a] == [0, 1, 1 + 4 * PROBE_EVERY, 1 + 3 * 4 * PROBE_EVERY]


def test_no_probe_when_too_few_tokens_are_left_to_pay_it_back() -> None:
    """The probe due after 4 x PROBE_EVERY idle steps (at step 1 + 4 x PROBE_EVERY) falls PROBE_EVERY - 1 tokens
    before the end of the shorter sequence, PROBE_EVERY before the end of the longer."""
    probe = 1 + 4 * PROBE_EVERY
    for length, probes in ((probe + PROBE_EVERY - 1, [0, 1]), (probe + PROBE_EVERY, [0, 1, probe])):
        asked = _run(DraftPricing(["predictor"]), 200.0, length, {"predictor": 0.008}, [], rows=4, length=length)
        assert [i for i, a in enumerate(asked) if a] == probes


def test_without_a_rate_every_drafter_proposes() -> None:
    """Without a measured rate (a fixed window: no cost model) every drafter proposes."""
    asked = _run(DraftPricing(["lookup", "predictor"]), None, 30, {"lookup": 0.001, "predictor": 1.0}, [])
    assert all(a == {"lookup", "predictor"} for a in asked)


def test_a_slow_useless_drafter_stops_being_asked_and_the_output_is_unchanged(engine: Engine) -> None:
    from lopa.draft.registry import DRAFTERS, drafter

    calls: list[int] = []
    drafter("slow")(lambda e: Slow(0.05, calls))
    priced = Engine(engine.loaded)  # the fixture's engine has every drafter propose at every step
    priced.cost = engine.cost
    try:
        want = engine.generate(PROMPT, max_new_tokens=40, method="ar").token_ids
        result = priced.generate(PROMPT, max_new_tokens=40)
        assert result.token_ids == want
        assert 1 <= len(calls) < result.stats.forwards / 2
        calls.clear()
        sampling = GenerationConfig(max_new_tokens=24, temperature=0.8, seed=3)
        seeded = priced.generate(PROMPT, sampling)  # priced alike: pricing cannot change what a seed emits
        assert seeded.token_ids == engine.generate(PROMPT, sampling, method="ar").token_ids
        assert len(calls) < seeded.stats.forwards / 2
    finally:
        del DRAFTERS["slow"]


def test_a_new_sequence_starts_from_what_earlier_sequences_measured() -> None:
    """A sequence joining a full batch does not first pay again to learn that the predictor does not pay there,
    and still trusts a cheap drafter that yielded nothing lately (a new text may suit it)."""
    shared: dict = {}
    seconds = {"lookup": 0.0001, "predictor": 0.008}
    _run(DraftPricing(["lookup", "predictor"], shared), 200.0, 20, seconds, [])  # nothing accepted at all
    later = _run(DraftPricing(["lookup", "predictor"], shared), 200.0, PROBE_EVERY - 1, seconds, [])
    assert all(asked == {"lookup"} for asked in later)
    lone = _run(DraftPricing(["lookup", "predictor"], shared), 30.0, 3, seconds, ["predictor"])  # 8 ms cost 0.24
    assert all("predictor" in asked for asked in lone)


def test_in_a_batch_a_dear_drafter_is_trusted_only_until_measured_alone_always() -> None:
    """At a rate where PRIOR_TOKENS would buy the predictor's first proposal (the dearest: it takes in the prompt)
    but what earlier sequences measured would not, a new sequence in a batch asks it while fewer than MEASURED
    proposals were measured and not after; a lone sequence still asks it, and the nearly free lookup drafter, which
    yielded nothing either, is asked in both."""
    seconds = {"lookup": 0.0001, "predictor": 0.008}
    rate = 100.0  # 8 ms cost 0.8 tokens: below PRIOR_TOKENS, above what the predictor yielded
    shared: dict = {}
    both = {"lookup", "predictor"}
    assert _run(DraftPricing(["lookup", "predictor"], shared), rate, 1, seconds, [], rows=4) == [both]
    _run(DraftPricing(["lookup", "predictor"], shared), None, MEASURED, seconds, [])  # measured, nothing accepted
    assert shared["predictor"].steps >= MEASURED and shared["predictor"].tokens < 0.1
    assert _run(DraftPricing(["lookup", "predictor"], shared), rate, 1, seconds, [], rows=4) == [{"lookup"}]
    assert _run(DraftPricing(["lookup", "predictor"], shared), rate, 1, seconds, [], rows=1) == [both]


def test_the_rate_drafting_is_priced_at_leaves_out_drafting_time(engine: Engine) -> None:
    """A slow drafter must not make its own time look cheap by slowing the steps the rate is measured on."""
    drafting = Drafting([Slow(0.3, [])], WindowController(4), DraftConfig())
    cost = CostModel.flat()
    seq = SequenceDecoder(
        engine.tokenizer(PROMPT).input_ids, GenerationConfig(max_new_tokens=4), engine.eos_ids, drafting
    )
    steps = decode(engine.runner.sibling(1, 1), seq, cost)
    next(steps)  # the prefill's token
    began = time.perf_counter()
    record = next(steps)  # one step: unmeasured, every drafter proposes
    took = time.perf_counter() - began
    assert record.draft_s >= 0.3
    assert 1 / cost.rate(1) <= took - 0.3  # one token per the step's time less the drafter's, however fast the CPU

"""The cost model: which tree size pays for itself, for one sequence and for a batch, and how measured
steps correct it."""

from __future__ import annotations

import pytest

from lopa.config import DraftConfig
from lopa.decode.cost import CostModel
from lopa.draft.tree import Proposal, rank

# a CPU-like surface: 1 to 8 tokens of one row cost about the same, rows x tokens beyond that add up
CPU = {
    1: {1: 0.030, 2: 0.031, 4: 0.032, 8: 0.034, 16: 0.040, 32: 0.055},
    4: {1: 0.032, 2: 0.036, 4: 0.042, 8: 0.060},
    16: {1: 0.040, 2: 0.060, 4: 0.095},
}


def test_only_nodes_that_pay_for_themselves_are_kept() -> None:
    cpu = CostModel({1: {1: 0.06, 4: 0.09, 8: 0.15}})
    assert cpu.tree_sizes([[0.1]]) == [0]  # 1.1 tokens for 1.17x the cost: not worth it
    assert cpu.tree_sizes([[0.9, 0.8, 0.7, 0.05]]) == [3]
    assert CostModel.flat().tree_sizes([[0.01] * 5]) == [5]
    assert cpu.tree_sizes([[]]) == [0]


def test_a_compiled_runner_is_charged_the_padded_size() -> None:
    padded = CostModel({1: {1: 0.03, 4: 0.04, 8: 0.05}}, stepwise=True)
    assert padded(1, 2) == padded(1, 4) == 0.04 and padded(1, 5) == 0.05
    assert CostModel({1: {1: 0.03, 4: 0.04, 8: 0.05}})(1, 2) < 0.04  # interpolated when nothing is padded
    assert padded.tree_sizes([[0.5, 0.4, 0.3, 0.01, 0.01]]) == [3]  # a 4-node tree costs what 2 nodes cost


def test_trees_shrink_as_the_batch_grows() -> None:
    cost = CostModel(CPU)
    row = [0.8, 0.6, 0.5, 0.4, 0.3, 0.2, 0.15, 0.1, 0.05]  # the same drafts in every row
    sizes = {n: max(cost.tree_sizes([row] * n)) for n in (1, 4, 8, 16)}
    assert sizes[1] > sizes[4] >= sizes[8] >= sizes[16]
    assert sizes[1] >= 7 and sizes[16] <= 2
    assert cost.tree_sizes([[0.05]] * 16) == [0] * 16  # weak drafts in a full batch: plain batched decoding


def test_a_packed_batch_grows_only_the_trees_of_rows_with_good_drafts() -> None:
    """One row of 8 has a draft worth verifying. Packed, it gets its whole tree and two weak rows one node each:
    8 + 8 tokens cost what 8 x 2 does, so the block is filled with the likeliest nodes left; the other rows stay
    plain. Padded, every row would pay for the good row's tree, so none gets one."""
    good, weak = [0.9, 0.85, 0.8, 0.75, 0.7, 0.6], [0.1, 0.05]
    assert CostModel(CPU, packed=True).tree_sizes([weak] * 3 + [good] + [weak] * 4) == [1, 1, 0, 6, 0, 0, 0, 0]
    assert CostModel(CPU).tree_sizes([weak] * 3 + [good] + [weak] * 4) == [0] * 8
    assert CostModel(CPU, packed=True)(8, 1.25) == CostModel(CPU, packed=True)(8, 2) > CostModel(CPU)(8, 1.25)
    assert CostModel(CPU, packed=True).tokens_per_row([7, 1, 1, 1, 1, 1, 1, 1]) == 14 / 8
    assert CostModel(CPU).tokens_per_row([7, 1, 1, 1, 1, 1, 1, 1]) == 7


def test_rows_between_measured_counts_are_interpolated() -> None:
    cost = CostModel(CPU)
    assert cost(4, 2) < cost(8, 2) < cost(16, 2)
    assert cost(8, 2) == pytest.approx(0.036 + (8 - 4) / (16 - 4) * (0.060 - 0.036))


def test_slow_measured_steps_shrink_trees_and_the_correction_fades() -> None:
    cost = CostModel(CPU)
    row = [0.5, 0.4, 0.3, 0.2, 0.1]
    assert cost.tree_sizes([row]) == [5]
    for _ in range(6):  # 6-token forwards measured at 3x the profile (a long prefix, a busy core)
        cost.observe(1, 6, 3 * cost.predicted(1, 6))
    assert cost.tree_sizes([row])[0] < 4
    for _ in range(200):  # plain steps at the profile's cost: the other classes relax back
        cost.observe(1, 1, cost.predicted(1, 1))
    assert cost.tree_sizes([row]) == [5]


def test_an_outlier_cannot_make_a_size_cost_more_than_a_larger_one() -> None:
    noisy = CostModel({1: {1: 0.03, 2: 0.5, 4: 0.04}, 8: {1: 1.7, 2: 0.05}})
    assert noisy(1, 2) == 0.04 and noisy(8, 1) == 0.05


def test_a_machine_faster_than_its_profile_keeps_choosing_by_the_profile() -> None:
    """Every size measured at half the profile: the unmeasured sizes scale alike, so the choice is unchanged
    (and an unmeasured flat model, whose 'seconds' are not seconds, keeps verifying every node)."""
    cost, row = CostModel(CPU), [0.5, 0.4, 0.3, 0.2, 0.1]
    for _ in range(10):
        cost.observe(1, 1, 0.5 * cost.predicted(1, 1))
    assert cost.tree_sizes([row]) == CostModel(CPU).tree_sizes([row])
    flat = CostModel.flat()
    for _ in range(10):
        flat.observe(1, 1, 0.03)
    assert flat.tree_sizes([[0.01] * 5]) == [5]


def _draft(confidences: list[float]):
    """A one-path draft of len(confidences) tokens after root 0."""
    tokens = list(range(1, len(confidences) + 1))
    return rank(0, [Proposal(tokens, confidences, "a")], DraftConfig(), len(tokens), len(tokens))


def test_drafts_that_verification_does_not_bear_out_are_discounted_until_trees_shrink() -> None:
    """A draft claiming 0.8 per token in 8 rows is worth verifying at face value; after steps where the rows
    accept only their first node, a quarter of the time, its nodes are discounted and plain decoding pays best.
    Drafts that are borne out keep their face value."""
    cost, draft = CostModel(CPU), _draft([0.8] * 4)
    assert cost.calibrated(draft) == pytest.approx(draft.probs)
    assert min(cost.tree_sizes([cost.calibrated(draft)] * 8)) >= 2
    for step in range(40):
        cost.observe_drafts([(draft, 3, int(step % 4 == 0))] * 8)
    calibrated = cost.calibrated(draft)
    assert calibrated[0] == pytest.approx(0.25, abs=0.05) and calibrated[1] < 0.05
    assert cost.tree_sizes([calibrated] * 8) == [0] * 8
    honest = CostModel(CPU)
    for step in range(100):  # 0.8 and 0.64 of the rows reach depths 1 and 2 (20 and 16 in each 25 steps)
        accepted = [2] * 16 + [1] * 4 + [0] * 5
        honest.observe_drafts([(draft, 2, accepted[(step * 7) % 25])] * 8)
    assert honest.calibrated(draft)[:2] == pytest.approx(draft.probs[:2], rel=0.1)


def test_drafting_is_priced_at_a_plain_forward_until_a_batch_size_is_measured() -> None:
    cost = CostModel(CPU)
    assert cost.rate(4) == pytest.approx(4 / 0.032)
    cost.observe_step(4, 0.05)
    assert cost.rate(4) == pytest.approx(4 / 0.05)

"""Sampling stays exact: lookahead emits the same distribution as plain sampling.

The statistical tests compare two independent samples (plain sampling with seeds 0..N-1,
lookahead with seeds N..2N-1) of 10-token answers of a tiny random Llama, with a drafter
that proposes siblings at every depth in every step (so each answer takes at least three
verification steps and recursive rejection is exercised at each). A chi-square homogeneity
test per position (Bonferroni over the positions) must not reject; a subtly wrong rule
(siblings tried with unrenormalised probabilities) must be rejected. The power of the design
is computed and asserted, not assumed.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

import pytest
import torch
from scipy.stats import chi2, chi2_contingency, ncx2

from lopa import DraftConfig, Engine, GenerationConfig
from lopa.decode import loop
from lopa.decode.loop import Drafting, decode
from lopa.decode.verify import accept_sampling
from lopa.decode.window import WindowController
from lopa.draft.base import Drafter
from lopa.draft.tree import Proposal
from lopa.draft.draft_model import DraftModelDrafter
from lopa.draft.tree import DraftTree
from lopa.models.runner import Runner

from .conftest import tiny_llama
from .test_draft_model import noisy_copy

SAMPLES = 2000  # per side
NEW_TOKENS = 10
POSITIONS = range(NEW_TOKENS)
ALPHA = 1e-3 / len(POSITIONS)  # per position: a family-wise false alarm rate of 0.1%
SHIFT = 0.08  # the design must detect this much probability moved between the two likeliest first tokens


def unrenormalised_rule(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator):
    """A subtly wrong rule: after a rejected sibling, the next is tried with p(x), not p(x) / (1 - rejected mass)."""
    path = [0]
    while True:
        p = probs[path[-1]].clone()
        taken = None
        for child in tree.children[path[-1]]:
            tok = tree.tokens[child]
            if torch.rand((), generator=generator).item() < p[tok].item():
                taken = child
                break
            p[tok] = 0.0
        if taken is None:
            return path, int(torch.multinomial(p / p.sum(), 1, generator=generator).item())
        path.append(taken)


def homogeneity_p(a: Counter, b: Counter) -> float:
    """Chi-square test that two samples share one distribution (rare outcomes pooled)."""
    keys = sorted(set(a) | set(b), key=lambda k: -(a[k] + b[k]))
    common = [k for k in keys if a[k] + b[k] >= 10]
    rare = [k for k in keys if k not in common]
    table = [[a[k] for k in common] + [sum(a[k] for k in rare)], [b[k] for k in common] + [sum(b[k] for k in rare)]]
    table = [[x for x, keep in zip(row, map(any, zip(*table))) if keep] for row in table]
    if len(table[0]) < 2:
        return 1.0
    return float(chi2_contingency(table).pvalue)


def power_against_shift(counts: Counter, n: int, shift: float, alpha: float) -> float:
    """Power of the two-sample chi-square test (n per side) when `shift` moves from the likeliest outcome to the next."""
    total = sum(counts.values())
    p = sorted((c / total for c in counts.values()), reverse=True)
    q = [p[0] - shift, p[1] + shift, *p[2:]]
    noncentrality = n * sum((a - b) ** 2 / (a + b) for a, b in zip(p, q) if a + b > 0)
    df = sum(1 for c in counts.values() if c >= 10)  # categories kept (rare ones pooled into one) - 1
    return float(ncx2.sf(chi2.isf(alpha, df), df, noncentrality))


class OracleDrafter:
    """Drafts from the target's own likeliest tokens: 3 siblings, 2 children each, 1 grandchild, every step."""

    source = "test"

    def __init__(self, model: torch.nn.Module):
        self.model = model

    @lru_cache(maxsize=None)
    def _top(self, context: tuple[int, ...], k: int) -> list[int]:
        with torch.no_grad():
            return torch.topk(self.model(torch.tensor([context])).logits[0, -1], k).indices.tolist()

    def start(self, prompt):
        pass

    def propose(self, context, max_depth):
        ctx = tuple(context)
        chains = [[a, b, self._top(ctx + (a, b), 1)[0]] for a in self._top(ctx, 3) for b in self._top(ctx + (a,), 2)]
        return [Proposal(c[:max_depth], [0.9] * min(3, max_depth), self.source) for c in chains]

    def observe(self, feedback):
        pass


def sample_answers(model, prompt: list[int], seeds: range, drafter: Drafter | None) -> tuple[list[Counter], int, int]:
    """Per-position token counts, drafted tokens accepted, and the fewest verification steps of any answer."""
    runner = Runner(model)
    counts = [Counter() for _ in POSITIONS]
    accepted, fewest_steps = 0, NEW_TOKENS
    for seed in seeds:
        cfg = GenerationConfig(max_new_tokens=NEW_TOKENS, temperature=1.0, seed=seed)
        drafting = None
        if drafter is not None:
            drafting = Drafting([drafter], WindowController(4), DraftConfig(tau=0.01))
        records = list(decode(runner, prompt, cfg, set(), drafting))
        accepted += sum(r.accepted for r in records)
        fewest_steps = min(fewest_steps, len(records) - 1)  # the first record is the prefill's token
        tokens = [t for r in records for t in r.tokens]
        for position in POSITIONS:
            counts[position][tokens[position]] += 1
    return counts, accepted, fewest_steps


@pytest.fixture(scope="module")
def tiny():
    model = tiny_llama()
    prompt = [2, 3, 4, 5, 6, 2, 3, 4]
    plain, _, _ = sample_answers(model, prompt, range(SAMPLES), None)
    return model, prompt, plain


def test_the_design_has_power(tiny) -> None:
    _, _, plain = tiny
    power = power_against_shift(plain[0], SAMPLES, SHIFT, ALPHA)
    assert power >= 0.9, f"power {power:.2f} against a {SHIFT} shift: take more samples"


def test_lookahead_sampling_matches_plain_sampling(tiny) -> None:
    model, prompt, plain = tiny
    lookahead, accepted, fewest_steps = sample_answers(model, prompt, range(SAMPLES, 2 * SAMPLES), OracleDrafter(model))
    assert accepted > SAMPLES * 3, "drafts were hardly ever accepted: the test would prove nothing"
    assert fewest_steps >= 3, "every answer must take at least three verification steps"
    for position in POSITIONS:
        assert homogeneity_p(plain[position], lookahead[position]) > ALPHA, f"position {position}"


@pytest.mark.slow  # a draft forward per drafted token: minutes for 2,000 answers
def test_sampling_with_a_draft_model_matches_plain_sampling(tiny) -> None:
    """A draft model (the target with noisy weights) proposes its greedy chain and runner-ups: still exact."""
    model, prompt, plain = tiny
    drafter = DraftModelDrafter(Runner(noisy_copy(model, 0.3)), depth=3, alternatives=2, stop_below=0.0)
    drafted, accepted, _ = sample_answers(model, prompt, range(SAMPLES, 2 * SAMPLES), drafter)
    assert accepted > SAMPLES, "the draft model's tokens were hardly ever accepted: the test would prove nothing"
    for position in POSITIONS:
        assert homogeneity_p(plain[position], drafted[position]) > ALPHA, f"position {position}"


def test_subtly_wrong_acceptance_rule_is_detected(tiny, monkeypatch) -> None:
    model, prompt, plain = tiny
    monkeypatch.setattr(loop, "accept_sampling", unrenormalised_rule)
    wrong, _, _ = sample_answers(model, prompt, range(SAMPLES, 2 * SAMPLES), OracleDrafter(model))
    assert min(homogeneity_p(plain[i], wrong[i]) for i in POSITIONS) < ALPHA


def test_recursive_rejection_is_exact_on_a_fixed_tree() -> None:
    # root -> {0, 1}; node 1 -> {2}. Target distributions differ per node.
    tree = DraftTree([9, 0, 1, 2], [-1, 0, 0, 2], [0, 1, 1, 2], ["root", "t", "t", "t"], [[1, 2], [], [3], []])
    probs = torch.tensor([[0.2, 0.5, 0.3, 0.0], [0.25, 0.25, 0.25, 0.25], [0.1, 0.1, 0.1, 0.7], [0.4, 0.3, 0.2, 0.1]])
    gen = torch.Generator().manual_seed(0)
    first = Counter()
    for _ in range(20000):
        path, bonus = accept_sampling(tree, probs, gen)
        first[tree.tokens[path[1]] if len(path) > 1 else bonus] += 1
    empirical = torch.tensor([first[i] / 20000 for i in range(4)])
    assert (empirical - probs[0]).abs().sum() / 2 < 0.015


def test_seeded_sampling_is_reproducible(engine: Engine) -> None:
    cfg = GenerationConfig(max_new_tokens=24, temperature=0.9, top_p=0.9, top_k=40, seed=1234)
    a = engine.generate("Write one sentence about rivers.", cfg)
    b = engine.generate("Write one sentence about rivers.", cfg)
    assert a.token_ids == b.token_ids


def test_default_model_sampling_matches_plain(engine: Engine) -> None:
    """The real model through temperature, top-k, top-p and repetition penalty: independent seeds, drafts accepted.

    Few samples (the real model is slow), so this only catches gross errors; exactness is the tiny model's test."""
    prompt = "Repeat the following sentence three times: The quick brown fox jumps over the lazy dog."
    positions, n = range(6), 40
    counts = {"ar": [Counter() for _ in positions], "lopa": [Counter() for _ in positions]}
    drafted = 0
    for method, seeds in (("ar", range(n)), ("lopa", range(n, 2 * n))):
        for seed in seeds:
            cfg = GenerationConfig(
                max_new_tokens=len(positions), temperature=0.8, top_k=50, top_p=0.95, repetition_penalty=1.1, seed=seed, method=method
            )
            result = engine.generate(prompt, cfg)
            drafted += sum(result.stats.accept_lengths) if method == "lopa" else 0
            for i, token in enumerate(result.token_ids):
                counts[method][i][token] += 1
    assert drafted >= 10, f"lookahead sampling accepted {drafted} drafts: the comparison would prove nothing"
    assert max(len(c) for c in counts["ar"]) >= 3, "the answers must not be (nearly) deterministic"
    for i in positions:
        assert homogeneity_p(counts["ar"][i], counts["lopa"][i]) > 1e-3 / len(positions), f"position {i}"

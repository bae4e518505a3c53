"""Sampling stays exact: lookahead emits the same distribution as plain sampling."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from scipy.stats import chi2_contingency

from lopa import DraftConfig, Engine, GenerationConfig
from lopa.decode import loop
from lopa.decode.loop import Drafting, decode
from lopa.decode.verify import accept_sampling
from lopa.decode.window import CostModel, WindowController
from lopa.draft.base import Proposal
from lopa.draft.tree import DraftTree
from lopa.models.runner import Runner

from .conftest import tiny_llama

ALPHA = 1e-3


def always_accept(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator):
    """A deliberately wrong rule: trust the first draft at every depth."""
    path = [0]
    while tree.children[path[-1]]:
        path.append(tree.children[path[-1]][0])
    return path, int(torch.multinomial(probs[path[-1]], 1, generator=generator))


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


class FixedDrafter:
    """Proposes fixed continuations (several siblings), to exercise recursive rejection."""

    source = "test"

    def __init__(self, branches: list[list[int]]):
        self.branches = branches

    def start(self, prompt):
        self.prompt_len = len(prompt)

    def propose(self, context, max_depth):
        out = context[self.prompt_len :]
        return [
            Proposal(b[len(out) : len(out) + max_depth], [0.9] * max_depth, "test")
            for b in self.branches
            if b[: len(out)] == out and len(b) > len(out)
        ]

    def observe(self, feedback):
        pass


def first_tokens(model, prompt: list[int], samples: int, branches: list[list[int]] | None) -> tuple[list[Counter], int]:
    runner = Runner(model)
    counts = [Counter(), Counter(), Counter()]
    accepted = 0
    for seed in range(samples):
        cfg = GenerationConfig(max_new_tokens=3, temperature=1.0, seed=seed)
        drafting = None
        if branches is not None:
            controller = WindowController(4, 16, CostModel.flat())
            drafting = Drafting([FixedDrafter(branches)], controller, DraftConfig(tau=0.01))
        records = list(decode(runner, prompt, cfg, set(), drafting))
        accepted += sum(r.accepted for r in records)
        tokens = [t for r in records for t in r.tokens][:3]
        counts[0][tokens[0]] += 1
        counts[1][tuple(tokens[:2])] += 1
        counts[2][tuple(tokens)] += 1
    return counts, accepted


@pytest.fixture(scope="module")
def tiny():
    model = tiny_llama()
    prompt = [2, 3, 4, 5, 6, 2, 3, 4]

    def likely(prefix: list[int]) -> list[int]:
        with torch.no_grad():
            return torch.topk(model(torch.tensor([prompt + prefix])).logits[0, -1], 3).indices.tolist()

    # after each likely first token, its three likeliest successors as siblings, each with a child
    branches = [[a, b, likely([a, b])[0]] for a in likely([]) for b in likely([a])]
    plain, _ = first_tokens(model, prompt, 2000, None)
    return model, prompt, branches, plain


def test_lookahead_sampling_matches_plain_sampling(tiny) -> None:
    model, prompt, branches, plain = tiny
    lookahead, accepted = first_tokens(model, prompt, 2000, branches)
    assert accepted > 500, "drafts were hardly ever accepted: the test would prove nothing"
    for position in range(3):
        assert homogeneity_p(plain[position], lookahead[position]) > ALPHA, f"prefix length {position + 1}"


def test_wrong_acceptance_rule_is_detected(tiny, monkeypatch) -> None:
    model, prompt, branches, plain = tiny
    monkeypatch.setattr(loop, "accept_sampling", always_accept)
    wrong, _ = first_tokens(model, prompt, 2000, branches)
    assert min(homogeneity_p(plain[i], wrong[i]) for i in range(3)) < ALPHA


def test_recursive_rejection_is_exact_on_a_fixed_tree() -> None:
    # root -> {0, 1}; node 1 -> {2}. Target distributions differ per node.
    tree = DraftTree([9, 0, 1, 2], [-1, 0, 0, 2], [0, 1, 1, 2], ["root", "t", "t", "t"], [1, 0.5, 0.5, 0.5], [[1, 2], [], [3], []])
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
    """Fewer samples on the real model, with temperature, top-k, top-p and repetition penalty."""
    prompt = "Repeat exactly: red green blue, red green blue, red green blue, red green"
    counts = {"ar": Counter(), "lopa": Counter()}
    for seed in range(80):
        for method in counts:
            cfg = GenerationConfig(
                max_new_tokens=3, temperature=0.8, top_k=50, top_p=0.95, repetition_penalty=1.1, seed=seed, method=method
            )
            counts[method][tuple(engine.generate(prompt, cfg).token_ids)] += 1
    assert homogeneity_p(counts["ar"], counts["lopa"]) > ALPHA

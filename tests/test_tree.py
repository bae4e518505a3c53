"""The candidate tree: confidence filter, top-k per depth, budget, and best-first connectivity."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lopa.config import DraftConfig
from lopa.decode.verify import accept
from lopa.decode.window import WindowController
from lopa.draft.ngram import JacobiPoolDrafter, PromptLookupDrafter
from lopa.draft.tree import DraftTree, Proposal, rank


def build_tree(root: int, proposals: list[Proposal], max_depth: int, budget: int, **config) -> DraftTree:
    return rank(root, proposals, DraftConfig(**config), max_depth, budget).tree()


def test_tau_filter_drops_nodes_far_below_the_best_at_their_depth() -> None:
    proposals = [Proposal([1, 2], [0.9, 0.9], "a"), Proposal([3], [0.5], "b"), Proposal([4], [0.7], "c")]
    tree = build_tree(0, proposals, 4, 10, tau=0.7)
    assert sorted(tree.tokens[c] for c in tree.children[0]) == [1, 4]  # 0.5 < 0.7 * 0.9 < 0.7
    assert tree.path_tokens(tree.find_path([1, 2])[-1]) == [0, 1, 2]


def test_shared_prefixes_merge_and_budget_keeps_the_best_paths() -> None:
    proposals = [Proposal([5, 6, 7], [0.9] * 3, "a"), Proposal([5, 6, 8], [0.8] * 3, "b"), Proposal([9], [0.85], "c")]
    tree = build_tree(0, proposals, 4, 3, tau=0.1)
    assert tree.size == 4 and tree.tokens.count(5) == 1
    assert tree.find_path([5, 6, 7])[-1] != 0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(st.integers(0, 6), min_size=1, max_size=5), st.floats(0.05, 1.0)),
        min_size=1,
        max_size=8,
    ),
    st.integers(1, 12),
    st.integers(1, 4),
)
def test_trees_are_connected_topological_and_within_limits(raw, budget, top_k) -> None:
    proposals = [Proposal(tokens, [conf] * len(tokens), "x") for tokens, conf in raw]
    tree = build_tree(99, proposals, 4, budget, top_k_per_depth=top_k, tau=0.7)
    assert tree.size - 1 <= budget and tree.depth <= 4
    for node in range(1, tree.size):
        parent = tree.parents[node]
        assert parent < node and tree.depths[node] == tree.depths[parent] + 1
        assert node in tree.children[parent]
    for depth in range(1, tree.depth + 1):
        assert sum(d == depth for d in tree.depths) <= top_k
    siblings = [[tree.tokens[c] for c in kids] for kids in tree.children]
    assert all(len(s) == len(set(s)) for s in siblings)


def test_greedy_acceptance_walks_the_matching_path() -> None:
    tree = build_tree(0, [Proposal([1, 2, 3], [0.9] * 3, "a"), Proposal([1, 4], [0.8] * 2, "b")], 4, 10, tau=0.1)
    argmax = [0] * tree.size
    argmax[0], argmax[tree.find_path([1])[-1]] = 1, 4
    argmax[tree.find_path([1, 4])[-1]] = 7
    path, bonus = accept(tree, argmax)
    assert [tree.tokens[i] for i in path] == [0, 1, 4] and bonus == 7


def test_every_prefix_of_the_ranked_order_is_a_connected_tree() -> None:
    proposals = [Proposal([5, 6, 7], [0.9] * 3, "a"), Proposal([5, 8], [0.6, 0.9], "b"), Proposal([9], [0.85], "c")]
    ranked = rank(0, proposals, DraftConfig(tau=0.1), 4, 10)
    # path scores: 5 (0.9, two drafters agree) first, then 9 (0.85), 6 and 8 (0.81, the first proposed first), 7
    assert [ranked.nodes[i].token for i in ranked.order] == [5, 9, 6, 8, 7]
    assert ranked.probs == pytest.approx([0.9, 0.85, 0.81, 0.81, 0.729])
    assert ranked.depths == [1, 1, 2, 2, 3]
    for size in range(len(ranked.order) + 1):
        tree = ranked.tree(size)
        assert tree.size == size + 1
        assert all(tree.parents[n] < n for n in range(1, tree.size))


def test_window_follows_the_lopa_perplexity_rule() -> None:
    control = WindowController(k_max=6, window=3)
    for step, ppl in enumerate([2.0] * 4 + [1.5] * 4):
        control.update(step, 4, [-math.log(ppl)])
    assert control.window == 4  # perplexity fell by 0.5 > 0.15
    for step, ppl in enumerate([2.5] * 4, start=8):
        control.update(step, 4, [-math.log(ppl)])
    assert control.window == 3 and len(control.decisions) == 2


def test_prompt_lookup_proposes_what_followed_the_suffix() -> None:
    drafter = PromptLookupDrafter(max_ngram=2, max_matches=2)
    prompt = [1, 2, 3, 4, 9, 2, 3, 5, 6]
    drafter.start(prompt)
    proposals = drafter.propose(prompt + [2, 3], max_depth=3)
    assert [p.tokens for p in proposals] == [[5, 6, 2], [4, 9, 2]]  # most recent match first


def test_ngram_pool_is_seeded_from_the_prompt() -> None:
    drafter = JacobiPoolDrafter(ngram_size=3, guesses=2, window=3)
    drafter.start([7, 8, 9, 7, 5, 6])
    assert sorted(p.tokens for p in drafter.propose([1, 7], max_depth=2)) == [[5, 6], [8, 9]]

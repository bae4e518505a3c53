"""Acceptance: which drafted path the target model keeps, exactly as plain decoding would emit it.

Greedy keeps the longest path whose every token is the target's argmax. Sampling uses
recursive rejection over siblings (SpecInfer-style with deterministic drafts): try each
child x with probability p(x); on rejection zero p(x) and renormalise; when no child is
taken, sample the residual. Each emitted token is then distributed exactly as p.
"""

from __future__ import annotations

import torch

from ..draft.tree import DraftTree


def accept_greedy(tree: DraftTree, argmax: list[int]) -> tuple[list[int], int]:
    """(accepted node indices, root first; the bonus token after the last of them)."""
    path = [0]
    while True:
        want = argmax[path[-1]]
        nxt = next((c for c in tree.children[path[-1]] if tree.tokens[c] == want), None)
        if nxt is None:
            return path, want
        path.append(nxt)


def accept_sampling(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator) -> tuple[list[int], int]:
    """probs [T, vocab]: target distribution after each node. Returns (path, bonus token)."""
    path = [0]
    while True:
        node = path[-1]
        p = probs[node].clone()
        taken = None
        for child in tree.children[node]:
            tok = tree.tokens[child]
            # p only loses mass already rejected, so total > 0 while a child remains untried
            total = p.sum().item()
            if torch.rand((), generator=generator).item() * total < p[tok].item():
                taken = child
                break
            p[tok] = 0.0
        if taken is None:
            return path, int(torch.multinomial(p / p.sum(), 1, generator=generator).item())
        path.append(taken)

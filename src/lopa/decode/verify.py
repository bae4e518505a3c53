"""Acceptance: which drafted path the target model keeps, exactly as plain decoding would emit it.

Each tree node's `choice` is the token plain decoding would emit after it: the argmax (greedy) or the coupled
sampler's draw for that position (decode/sampling.py). The longest root path whose every token is its parent's
choice is kept, plus the bonus token, the last node's choice. So lookahead emits plain decoding's tokens, and a
drafted token x is accepted with probability p(x) (siblings: the sum of theirs), as with rejection sampling.
"""

from __future__ import annotations

from ..draft.tree import DraftTree


def accept(tree: DraftTree, choices: list[int]) -> tuple[list[int], int]:
    """(accepted node indices, root first; the bonus token after the last of them)."""
    path = [0]
    while True:
        want = choices[path[-1]]
        nxt = next((c for c in tree.children[path[-1]] if tree.tokens[c] == want), None)
        if nxt is None:
            return path, want
        path.append(nxt)

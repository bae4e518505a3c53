"""What one verification step tells the drafters: made by the decoding step, read by every drafter's observe()."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..draft.tree import DraftTree


@dataclass
class StepFeedback:
    """The tree, the target's top-1 at every node, and what was kept."""

    context: list[int]  # prompt + output before this step; its last token is the tree root
    tree: DraftTree
    predictions: list[int]  # target argmax after each tree node
    accepted_nodes: list[int]  # tree node indices kept, root first
    new_tokens: list[int]  # tokens committed this step, bonus last (it becomes the next root)
    layers: torch.Tensor | None = None  # the Runner's hidden_layers of every tree node, [T, layers * hidden]

"""LOSSY, opt-in: verification by an int8 copy of the model, with a full-precision calibration pass every N steps.

This breaks lopa's guarantee on purpose (DraftConfig.lossy_int8_verify, CLI
--lossy-int8-verify; off by default): between calibrations the int8 model alone decides
which drafted tokens are accepted and what the bonus token is, so the output follows the
int8 model's argmax there. Every `every`-th step the full-precision model runs instead:
in one forward it catches up on the tokens committed since its last pass (their KV rows)
and verifies the step's tree, so that step's tokens are exactly what the full model picks
after the (int8-decided) context. The full model's cost is thus paid once per `every`
steps, on a longer forward; the int8 model sees every tree, so its cache is never behind.
Its quality cost is measured as the perplexity of its output under the full model.
"""

from __future__ import annotations

import torch

from .runner import ForwardOutput, Runner, TreeTensors


class LossyInt8Runner:
    """The Runner interface, for one sequence (slot 0), over a full-precision runner and an int8 runner."""

    def __init__(self, full: Runner, int8: Runner, every: int = 10):
        if every < 1:
            raise ValueError(f"the calibration interval must be >= 1, got {every}")
        self.full, self.int8, self.every = full, int8, every
        self.pending: list[int] = []  # committed tokens whose KV rows the full model has not written yet
        self.steps = 0
        self.calibrations = 0
        self._tree = torch.empty(0, dtype=torch.long)  # the last verified tree's tokens
        self._caught_up: int | None = None  # on a calibration step: how many pending tokens the full model fed

    def reserve(self, rows: int) -> None:
        self.full.reserve(rows)
        self.int8.reserve(rows)

    def prefill(self, slot: int, ids: torch.Tensor, start: int | None = None) -> ForwardOutput:
        """Both models read the prompt (a new sequence); the first token comes from the full model."""
        assert slot == 0 and start == 0, "the lossy runner decodes one sequence from its start"
        self.pending, self.steps, self.calibrations, self._caught_up = [], 0, 0, None
        self.int8.prefill(0, ids, 0)
        return self.full.prefill(0, ids, 0)

    def verify(self, trees: list[TreeTensors]) -> list[ForwardOutput]:
        (tree,) = trees
        tokens, depths, ancestors = tree
        self.steps += 1
        out8 = self.int8.verify(trees)
        self._tree = tokens
        if self.steps % self.every:
            self._caught_up = None
            return out8
        p, t = len(self.pending), tokens.numel()
        chain = torch.ones(p + t, p, dtype=torch.bool).tril_()  # the pending chain: causal, seen by every tree node
        ancestors_all = torch.cat([chain, torch.cat([torch.zeros(p, t, dtype=torch.bool), ancestors], 0)], 1)
        (out,) = self.full.verify(
            [(torch.cat([torch.tensor(self.pending, dtype=tokens.dtype), tokens]), torch.cat([torch.arange(p), depths + p]), ancestors_all)]
        )
        self.calibrations += 1
        self._caught_up = p
        return [ForwardOutput(out.logits[p:])]

    def commit(self, slot: int, nodes: list[int]) -> None:
        self.int8.commit(slot, nodes)
        p = self._caught_up
        if p is None:
            self.pending.extend(int(self._tree[i]) for i in nodes)
            return
        self.full.commit(slot, list(range(p)) + [p + i for i in nodes])
        self.pending, self._caught_up = [], None

"""Confidence-driven block decoding (the baseline) and LoPA branch search over it.

Every iteration fills the anchor set: all masked positions of the active block with
confidence > tau_conf, or else the single most confident one. With `branches = k > 0`,
LoPA also builds k lookahead branches (anchor + one more token at each of the k most
confident masked positions left), scores all branches in one batched forward, keeps
the branch whose remaining masked positions are most confident on average, and reuses
its logits next iteration: one forward per iteration either way. `branches = 0` is the
baseline, so both share every line of this loop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..errors import InvalidRequestError

CONFIDENCES = ("maxprob", "neg_entropy")


@dataclass
class DecodeConfig:
    max_new_tokens: int = 64
    block_size: int = 32
    tau_conf: float = 0.9
    branches: int = 4
    confidence: str = "maxprob"

    def validate(self) -> None:
        if self.max_new_tokens < 1:
            raise InvalidRequestError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.block_size < 1:
            raise InvalidRequestError(f"block size must be >= 1, got {self.block_size}")
        if not 0 < self.tau_conf <= 1:
            raise InvalidRequestError(f"tau_conf must be in (0, 1], got {self.tau_conf}")
        if self.branches < 0:
            raise InvalidRequestError(f"branches must be >= 0, got {self.branches}")
        if self.confidence not in CONFIDENCES:
            raise InvalidRequestError(f"confidence must be one of {CONFIDENCES}, got {self.confidence!r}")


def confidence(logits: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(confidence in (0, 1], argmax token) per position.

    maxprob: the top probability; neg_entropy: exp(-entropy), a monotone map of the
    negative entropy into (0, 1] so the same tau_conf threshold applies to both.
    """
    logp = torch.log_softmax(logits.float(), -1)
    top, tok = logp.max(-1)
    if kind == "maxprob":
        return top.exp(), tok
    return (logp.exp() * logp).sum(-1).exp(), tok


def branch_scores(logits: torch.Tensor, blocks: torch.Tensor, mask_id: int, kind: str) -> torch.Tensor:
    """Mean confidence over each branch's still-masked positions (1.0 for a finished block)."""
    masked = blocks == mask_id
    conf, _ = confidence(logits, kind)
    return torch.where(masked.any(1), (conf * masked).sum(1) / masked.sum(1).clamp(min=1), 1.0)


def build_branches(block: torch.Tensor, logits: torch.Tensor, cfg: DecodeConfig, mask_id: int) -> torch.Tensor:
    """Anchor fill and up to cfg.branches lookahead branches, shape (1 + k', b); row 0 is the anchor."""
    conf, tok = confidence(logits, cfg.confidence)
    masked = block == mask_id
    conf = torch.where(masked, conf, -1.0)  # 0 < conf for masked, so argmax/topk never pick filled ones
    fill = masked & (conf > cfg.tau_conf)
    if not fill.any():
        fill[conf.argmax()] = True
    anchor = torch.where(fill, tok, block)
    left = masked & ~fill
    k = min(cfg.branches, int(left.sum()))
    if k == 0:
        return anchor[None]
    extra = torch.where(left, conf, -2.0).topk(k).indices
    rows = anchor.repeat(k + 1, 1)
    rows[torch.arange(1, k + 1, device=block.device), extra] = tok[extra]
    return rows


class LocalEvaluator:
    """Scores all branches in one batched forward on this process."""

    def __call__(self, adapter, ctx, branches: torch.Tensor, kind: str) -> tuple[int, torch.Tensor]:
        """Returns (winner index, winner logits (b, V))."""
        logits = adapter.logits(ctx, branches)
        w = int(branch_scores(logits, branches, adapter.mask_token_id, kind).argmax())
        return w, logits[w]


@dataclass
class DecodeStats:
    new_tokens: int = 0
    forwards: int = 0
    wall_s: float = 0.0

    @property
    def tokens_per_forward(self) -> float:
        return self.new_tokens / max(self.forwards, 1)

    def to_dict(self) -> dict:
        return dict(
            new_tokens=self.new_tokens,
            forwards=self.forwards,
            tokens_per_forward=round(self.tokens_per_forward, 4),
            wall_s=round(self.wall_s, 4),
        )


class DiffusionDecoder:
    """Block-wise parallel decoding of a masked diffusion LM, with optional LoPA branches.

    `evaluator` scores branches; a `parallel.DistributedEvaluator` splits them over processes.
    """

    def __init__(self, adapter, cfg: DecodeConfig, evaluator=None):
        cfg.validate()
        self.adapter, self.cfg = adapter, cfg
        self.evaluate = evaluator or LocalEvaluator()

    def generate(self, prompt: list[int]) -> tuple[list[int], DecodeStats]:
        """Decode cfg.max_new_tokens tokens after `prompt`; returns (new token ids, stats)."""
        if not prompt:
            raise InvalidRequestError("empty prompt")
        cfg, ad, mask_id = self.cfg, self.adapter, self.adapter.mask_token_id
        stats, t0, out = DecodeStats(), time.perf_counter(), []
        ctx = ad.begin(prompt)
        while len(out) < cfg.max_new_tokens:
            block = torch.full((min(cfg.block_size, cfg.max_new_tokens - len(out)),), mask_id, device=ad.device)
            logits = ad.logits(ctx, block[None])[0]
            stats.forwards += 1
            while True:
                branches = build_branches(block, logits, cfg, mask_id)
                if not (branches[0] == mask_id).any():
                    block = branches[0]
                    break
                w, logits = self.evaluate(ad, ctx, branches, cfg.confidence)
                stats.forwards += 1
                block = branches[w]
                if not (block == mask_id).any():
                    break
            out += block.tolist()
            ad.commit(ctx, block.tolist())
        stats.new_tokens, stats.wall_s = len(out), time.perf_counter() - t0
        return out, stats

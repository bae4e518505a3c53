"""Logit processing shared by plain and lookahead decoding, so both target the same distribution.

Order follows transformers' generate: repetition penalty, then temperature, top-k, top-p.
Each tree row is processed with its own context (committed tokens plus its ancestors).
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..config import GenerationConfig


def apply_repetition_penalty(
    logits: torch.Tensor, contexts: Sequence[Sequence[int]], penalty: float
) -> torch.Tensor:
    """Divide positive / multiply negative logits of tokens already in each row's context."""
    if penalty == 1.0:
        return logits
    logits = logits.clone()
    for row, context in enumerate(contexts):
        seen = torch.tensor(sorted(set(context)), dtype=torch.long, device=logits.device)
        scores = logits[row, seen]
        logits[row, seen] = torch.where(scores < 0, scores * penalty, scores / penalty)
    return logits


def warp(logits: torch.Tensor, cfg: GenerationConfig) -> torch.Tensor:
    """Temperature, top-k and top-p on [rows, vocab] logits; returns probabilities."""
    logits = logits.float() / cfg.temperature
    if cfg.top_k and cfg.top_k < logits.shape[-1]:
        kth = torch.topk(logits, cfg.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        remove = cumulative <= 1 - cfg.top_p
        remove[..., -1] = False  # always keep the most likely token
        logits = logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
    return logits.softmax(-1)


def target_distribution(
    logits: torch.Tensor, contexts: Sequence[Sequence[int]], cfg: GenerationConfig
) -> torch.Tensor:
    """What the target emits after each row: one-hot argmax when greedy, else sampling probabilities."""
    logits = apply_repetition_penalty(logits, contexts, cfg.repetition_penalty)
    if cfg.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    return warp(logits, cfg)

"""Logit processing and the sampler shared by plain and lookahead decoding, so both emit the same tokens.

Order follows transformers' generate: repetition penalty, then OpenAI's presence and
frequency penalties (on generated tokens only, as vLLM applies them) and vLLM's min_tokens, then temperature,
top-k, top-p, min-p. Each tree row is processed with its own context (committed tokens plus its
ancestors), so a drafted token is judged exactly as plain decoding would judge it.

Sampling is coupled to the request, not to the step (`CoupledSampler`): the token at absolute position t is
argmax(scores + g_t), where scores are the processed logits / temperature (-inf outside top-k / top-p /
min-p) and g_t is Gumbel noise from a counter-based generator (Philox) keyed by the request's seed and
counted by t. By the Gumbel-max theorem that argmax is an exact draw from softmax(scores); plain decoding
and every tree node at position t add the same g_t, so lookahead emits exactly plain decoding's tokens for
a seed, whatever the drafters, the tree, the batch or the machine (README: Sampling).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..config import GenerationConfig


def apply_repetition_penalty(logits: torch.Tensor, contexts: Sequence[Sequence[int]], penalty: float) -> torch.Tensor:
    """Divide positive / multiply negative logits of tokens already in each row's context."""
    if penalty == 1.0:
        return logits
    logits = logits.clone()
    for row, context in enumerate(contexts):
        seen = torch.tensor(sorted(set(context)), dtype=torch.long, device=logits.device)
        scores = logits[row, seen]
        logits[row, seen] = torch.where(scores < 0, scores * penalty, scores / penalty)
    return logits


def apply_presence_frequency(
    logits: torch.Tensor, generated: Sequence[Sequence[int]], presence: float, frequency: float
) -> torch.Tensor:
    """Subtract presence (once) and frequency (per occurrence) from the logits of each row's generated tokens."""
    if presence == 0.0 and frequency == 0.0:
        return logits
    logits = logits.clone()
    for row, tokens in enumerate(generated):
        if tokens:
            seen, counts = torch.tensor(tokens, dtype=torch.long, device=logits.device).unique(return_counts=True)
            logits[row, seen] -= presence + frequency * counts.to(logits.dtype)
    return logits


TOP_P_HEAD = 1024  # the likeliest tokens top-p sorts first; the whole vocabulary only when they hold too little


def top_p_cut(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """-inf outside each row's nucleus: a token stays while the probability of the tokens above it is below top_p
    (transformers' rule; the likeliest token always stays). Sorting the whole vocabulary was most of sampling's
    cost; where the TOP_P_HEAD likeliest tokens hold top_p of a row's mass they decide it exactly (every token
    below them has at least that much above it), so only the other rows sort everything."""
    probs = logits.softmax(-1)
    top, order = probs.topk(min(TOP_P_HEAD, probs.shape[-1]), dim=-1)
    kept = _nucleus(probs, top, order, top_p)
    short = top.sum(-1) < top_p
    if short.any():
        kept[short] = _nucleus(probs[short], *probs[short].sort(dim=-1, descending=True), top_p)
    return logits.masked_fill(~kept, float("-inf"))


def _nucleus(probs: torch.Tensor, descending: torch.Tensor, order: torch.Tensor, top_p: float) -> torch.Tensor:
    """Which tokens of `probs` rows stay, given their likeliest probabilities in descending order and where they sit."""
    cut = descending.cumsum(-1) - descending >= top_p
    cut[..., 0] = False
    return torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, ~cut)


def warp(logits: torch.Tensor, cfg: GenerationConfig) -> torch.Tensor:
    """Temperature, top-k, top-p and min-p on [rows, vocab] logits: the sampling scores, -inf for the tokens cut
    (their softmax is the distribution sampled)."""
    logits = logits.float() / cfg.temperature
    if cfg.top_k and cfg.top_k < logits.shape[-1]:
        kth = torch.topk(logits, cfg.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.top_p < 1.0:
        logits = top_p_cut(logits, cfg.top_p)
    if cfg.min_p > 0.0:  # p(x) < min_p * max p, on the distribution left by top-k / top-p
        floor = logits.max(-1, keepdim=True).values + float(np.log(cfg.min_p))
        logits = logits.masked_fill(logits < floor, float("-inf"))
    return logits


class CoupledSampler:
    """One request's draws: position t's token is argmax(scores + g_t), g_t Gumbel noise from Philox keyed by the
    seed with counter t (the 2nd of its four counter words, so no two positions' streams overlap for any vocabulary
    under 2^66 tokens). Noise is made once per position and kept until the request moves past it."""

    def __init__(self, seed: int):
        self.seed = seed
        self.noise: dict[int, torch.Tensor] = {}

    def gumbel(self, position: int, vocab: int) -> torch.Tensor:
        """g_position: [vocab] standard Gumbel noise, the same on every machine."""
        if position not in self.noise:
            bits = np.random.Philox(key=self.seed % 2**64, counter=[0, position, 0, 0])
            uniform = torch.from_numpy(np.random.Generator(bits).random(vocab, dtype=np.float32))
            self.noise[position] = -torch.log(-torch.log(uniform))  # u = 0 gives -inf: never chosen
        return self.noise[position]

    def choose(self, scores: torch.Tensor, positions: Sequence[int]) -> list[int]:
        """The token at each of `positions` given the sampling scores [len(positions), vocab] before it (warp())."""
        first = min(positions)
        for stale in [p for p in self.noise if p < first]:
            del self.noise[stale]
        vocab = scores.shape[-1]
        noise = torch.stack([self.gumbel(p, vocab) for p in positions]).to(scores.device)
        return (scores + noise).argmax(-1).tolist()


def ban_early_end(
    logits: torch.Tensor, generated: Sequence[Sequence[int]], min_tokens: int, end_ids: Sequence[int]
) -> torch.Tensor:
    """-inf for the end tokens in the rows that have generated fewer than min_tokens tokens."""
    early = [row for row, tokens in enumerate(generated) if len(tokens) < min_tokens]
    if not early or not end_ids:
        return logits
    logits = logits.clone()
    logits[torch.tensor(early)[:, None], torch.tensor(sorted(end_ids))[None, :]] = float("-inf")
    return logits


def target_logits(
    logits: torch.Tensor,
    contexts: Sequence[Sequence[int]],
    cfg: GenerationConfig,
    prompt_length: int = 0,
    end_ids: Sequence[int] = (),
) -> torch.Tensor:
    """The logits after the penalties and min_tokens (the very tensor given when none applies): greedy decoding
    emits their argmax, sampling draws from warp() of them. contexts: each row's tokens so far, the first
    `prompt_length` of them the prompt; end_ids: the tokens cfg.min_tokens holds back."""
    logits = apply_repetition_penalty(logits, contexts, cfg.repetition_penalty)
    generated = [context[prompt_length:] for context in contexts]
    logits = apply_presence_frequency(logits, generated, cfg.presence_penalty, cfg.frequency_penalty)
    return ban_early_end(logits, generated, cfg.min_tokens, end_ids)


@dataclass
class TokenLogprob:
    """The target model's log-probability of an emitted token (raw logits, before temperature or penalties,
    as OpenAI and vLLM report them) and of its `top` likeliest alternatives."""

    token: int
    logprob: float
    top: list[tuple[int, float]]


def token_logprobs(log_probs: torch.Tensor, tokens: Sequence[int], top: int) -> list[TokenLogprob]:
    """TokenLogprobs of `tokens` from rows of log-softmaxed logits [len(tokens), vocab]."""
    chosen = log_probs[torch.arange(len(tokens)), torch.tensor(tokens)].tolist()
    if top:
        best = log_probs.topk(top)
        alternatives = [list(zip(ids, lps)) for ids, lps in zip(best.indices.tolist(), best.values.tolist())]
    else:
        alternatives = [[] for _ in tokens]
    return [TokenLogprob(tok, lp, alt) for tok, lp, alt in zip(tokens, chosen, alternatives)]

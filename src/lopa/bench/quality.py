"""Quality of a method's output when it is not token-identical to plain decoding.

Lossless methods are judged by exact match. For anything else (a quantised model, a
lossy verification mode) we score its output under the full-precision model: the
perplexity of the generated tokens given the prompt, to set against that of the plain
(`hf`) output for the same prompt.
"""

from __future__ import annotations

import math

import torch


@torch.no_grad()
def perplexity(model: torch.nn.Module, prompt_ids: list[int], output_ids: list[int]) -> float:
    """exp(mean negative log-likelihood) of `output_ids` following `prompt_ids` under `model`."""
    if not output_ids:
        return float("nan")
    ids = torch.tensor([prompt_ids + output_ids], device=model.device)
    logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
    nll = torch.nn.functional.cross_entropy(logits, ids[0, len(prompt_ids) :])
    return math.exp(float(nll))

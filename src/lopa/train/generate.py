"""Stock `generate()` over batches of prompt ids: the base model's own answers (greedy or sampled), cut at EOS."""

from __future__ import annotations

import torch


def eos_and_pad(model) -> tuple[set[int], int]:
    """The model's end-of-sequence ids and the id to left-pad batches with (EOS when it has no pad)."""
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    pad = model.generation_config.pad_token_id
    return eos, pad if pad is not None else min(eos, default=0)


def left_pad(batch: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, batch))
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for row, prompt in enumerate(batch):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    return ids, mask


def cut_at_eos(gen: list[int], eos: set[int]) -> list[int]:
    """Generated ids up to and including the first EOS (padding after it dropped)."""
    return gen[: next((i + 1 for i, t in enumerate(gen) if t in eos), len(gen))]


@torch.no_grad()
def generate_answers(
    model, prompts: list[list[int]], max_new_tokens: int, *, seed: int | None = None, temperature: float = 0.8,
    top_p: float = 0.95,
) -> list[list[int]]:
    """Answers to a batch of prompt ids by stock `generate()`, each cut after its first EOS.

    seed None: greedy; otherwise sampled (temperature, top-p) with torch seeded by it, so a rerun
    of the same batch gives the same answers."""
    eos, pad = eos_and_pad(model)
    ids, mask = left_pad(prompts, pad)
    sampling = {"do_sample": False}
    if seed is not None:
        sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0}
        torch.manual_seed(seed)
    out = model.generate(
        input_ids=ids.to(model.device), attention_mask=mask.to(model.device), max_new_tokens=max_new_tokens,
        num_beams=1, pad_token_id=pad, **sampling,
    )
    return [cut_at_eos(gen, eos) for gen in out[:, ids.shape[1] :].tolist()]

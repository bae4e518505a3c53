"""Self-distillation data: the base model's own greedy answers and its last hidden states.

For each prompt the base model generates greedily (batched, left-padded, stock
`generate()`), keeping the last hidden state of every step. Row r of an answer is the
hidden state h_r that predicted answer token g_r; g_r is the tree root the heads will
see, and head i's target is g_{r+1+i}, the model's own continuation. Shards are cached
on disk (one per prompt batch, named by its content), so an interrupted run resumes
where it stopped and a run with more prompts reuses the shards of the first ones.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

IGNORE = -100
BLOCK = 256  # prompts sorted by length together


@dataclass
class HeadsData:
    hidden: torch.Tensor  # [N, H] fp32
    roots: torch.Tensor  # [N] token after the hidden state's position (the bonus token)
    targets: torch.Tensor  # [N, K] the K tokens after the root, IGNORE past the answer's end
    sequence: torch.Tensor  # [N] answer index, for a held-out split by answer

    def __len__(self) -> int:
        return self.hidden.shape[0]

    def subset(self, rows: torch.Tensor) -> "HeadsData":
        return HeadsData(self.hidden[rows], self.roots[rows], self.targets[rows], self.sequence[rows])


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


def _answer_rows(gen: list[int], hidden: torch.Tensor, eos: set[int], num_targets: int, first_seq: int):
    """Rows of one answer: hidden [steps, H] for answer tokens gen; cut after the first EOS."""
    gen = cut_at_eos(gen, eos)
    rows = len(gen) - 1  # the last token has no continuation to predict
    targets = torch.full((max(rows, 0), num_targets), IGNORE, dtype=torch.long)
    for r in range(rows):
        after = gen[r + 1 : r + 1 + num_targets]
        targets[r, : len(after)] = torch.tensor(after)
    return hidden[:rows], torch.tensor(gen[:rows], dtype=torch.long), targets, torch.full((max(rows, 0),), first_seq)


@torch.no_grad()
def generate_shard(model, prompts: list[list[int]], max_new_tokens: int, num_targets: int, first_seq: int) -> dict:
    """Greedy answers to a batch of prompt ids and the rows they give (see module docstring)."""
    eos, pad = eos_and_pad(model)
    ids, mask = left_pad(prompts, pad)
    out = model.generate(
        input_ids=ids.to(model.device), attention_mask=mask.to(model.device), max_new_tokens=max_new_tokens,
        do_sample=False, num_beams=1, pad_token_id=pad, output_hidden_states=True, return_dict_in_generate=True,
    )
    # step 0 is the prompt's last position; step s > 0 is the position of answer token s-1
    steps = [out.hidden_states[0][-1][:, -1]] + [h[-1][:, -1] for h in out.hidden_states[1:]]
    hidden = torch.stack(steps, 1).float().cpu()
    gen = out.sequences[:, ids.shape[1] :].cpu()
    parts = [_answer_rows(gen[b].tolist(), hidden[b], eos, num_targets, first_seq + b) for b in range(len(prompts))]
    return {name: torch.cat([p[i] for p in parts]).contiguous() for i, name in enumerate(HeadsData.__annotations__)}


def build_data(
    model, prompts: list[list[int]], cache: Path, *, max_new_tokens: int, batch_size: int, num_targets: int
) -> HeadsData:
    """Generate (or reuse cached) shards for all prompts and return them concatenated."""
    cache.mkdir(parents=True, exist_ok=True)
    batches = []
    for block in range(0, len(prompts), BLOCK):  # a longer prompt list keeps the shards of its first blocks
        order = sorted(range(block, min(block + BLOCK, len(prompts))), key=lambda i: len(prompts[i]))  # pad less
        batches += [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    shards = []
    for n, batch in enumerate(tqdm(batches, desc="self-distillation data", unit="batch")):
        key = hashlib.sha256(json.dumps([prompts[i] for i in batch]).encode()).hexdigest()[:12]
        path = cache / f"shard-{n:05d}-{key}-{max_new_tokens}-{num_targets}.safetensors"
        if not path.exists():
            shard = generate_shard(model, [prompts[i] for i in batch], max_new_tokens, num_targets, n * batch_size)
            save_file(shard, str(path.with_suffix(".tmp")))
            path.with_suffix(".tmp").replace(path)
        shards.append(load_file(str(path)))
    return HeadsData(*(torch.cat([s[name] for s in shards]) for name in HeadsData.__annotations__))


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

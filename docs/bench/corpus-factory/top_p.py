"""top-p on 32 real next-token rows of the default model (one prompt's last 32 positions): top_p_cut (sorts only
the 1,024 likeliest tokens where they hold top_p) against the full-vocabulary sort it replaced; same masks?
One thread, interleaved. Usage: python docs/bench/corpus-factory/top_p.py"""
import time

import torch

from lopa import Engine
from lopa.config import GenerationConfig
from lopa.decode.sampling import warp

torch.set_num_threads(1)


def full_sort(logits: torch.Tensor, top_p: float) -> torch.Tensor:  # the rule before, as transformers has it
    sorted_logits, order = torch.sort(logits, dim=-1)
    remove = sorted_logits.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -1] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))


def ms(fn, reps: int = 20) -> float:
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps * 1e3


engine = Engine.from_pretrained(profile=False)
ids = torch.tensor([engine.encode_prompt("Write a short story about a lighthouse keeper who finds a message in a bottle.")])
with torch.no_grad():
    rows = engine.model(input_ids=ids).logits[0, -32:].float()
for temperature, top_p in ((0.8, 0.95), (1.0, 0.95), (0.7, 0.9)):
    cfg = GenerationConfig(temperature=temperature, top_p=top_p)
    same = torch.equal(warp(rows, cfg).isinf(), full_sort(rows / temperature, top_p).isinf())
    times = [(ms(lambda: warp(rows, cfg)), ms(lambda: full_sort(rows / temperature, top_p))) for _ in range(2)]
    print(f"T {temperature} top-p {top_p}: same masks {same}; 32 rows " +
          ", ".join(f"new {a:.1f} ms vs full sort {b:.1f} ms" for a, b in times), flush=True)

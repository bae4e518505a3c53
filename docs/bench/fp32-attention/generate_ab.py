"""Generation with fp32 attention through SDPA against the order-fixed kernel, per generated token and per prompt.

SmolLM2-135M fp32 (the default), 2 threads, greedy, `ar` and `lopa` (real defaults), 4 prompts x 96 new tokens plus
a ~1,000-token prompt (its prefill timed), the two attention paths alternating within each round, 3 rounds; medians.
Also checks that the tokens are the same both ways (greedy equality of the two paths is float luck, not a claim) and
that lopa equals ar under each. Run from the repository root: python docs/bench/fp32-attention/generate_ab.py
"""

import statistics
import time

import torch

from lopa import Engine
from lopa.models import ordered_attention

torch.set_num_threads(2)
ORDERED = ordered_attention.supports
PATHS = {"sdpa": lambda dtype, device, head_dim: False, "ordered": ORDERED}
PROMPTS = [
    "Write a short story about a robot who learns to paint.",
    "Explain how a hash table works, with a Python example.",
    "Summarise the causes of the French Revolution in five bullet points.",
    "Translate into French: The weather is lovely today and we are going to the beach.",
]
LONG = "Summarise the following text.\n\n" + " ".join(
    f"Paragraph {i}: the committee met again to review the budget, the schedule and the staffing plan."
    for i in range(60)
)

engine = Engine.from_pretrained()
rates: dict[tuple[str, str], list[float]] = {}
prefill: dict[str, list[float]] = {name: [] for name in PATHS}
tokens: dict[tuple[str, str, int], list[int]] = {}
for round_ in range(3):
    for name, supports in PATHS.items():
        ordered_attention.supports = supports
        for method in ("ar", "lopa"):
            for i, prompt in enumerate(PROMPTS):
                start = time.perf_counter()
                out = engine.generate(prompt, max_new_tokens=96, method=method)
                rates.setdefault((name, method), []).append(len(out.token_ids) / (time.perf_counter() - start))
                tokens[(name, method, i)] = out.token_ids
        start = time.perf_counter()
        engine.generate(LONG, max_new_tokens=1, method="ar")
        prefill[name].append(time.perf_counter() - start)

print(f"long prompt: {len(engine.tokenizer(LONG).input_ids)} tokens")
for method in ("ar", "lopa"):
    sdpa, ordered = (statistics.median(rates[(name, method)]) for name in PATHS)
    print(
        f"{method}: sdpa {sdpa:.1f} tok/s, ordered {ordered:.1f} tok/s (median of 12), ordered / sdpa {ordered / sdpa:.3f}"
    )
sdpa, ordered = (statistics.median(prefill[name]) for name in PATHS)
print(
    f"prefill of the long prompt + 1 token: sdpa {sdpa * 1e3:.0f} ms, ordered {ordered * 1e3:.0f} ms, {ordered / sdpa:.2f}x"
)
for name in PATHS:
    same = sum(tokens[(name, "ar", i)] == tokens[(name, "lopa", i)] for i in range(len(PROMPTS)))
    print(f"{name}: lopa == ar on {same}/{len(PROMPTS)} prompts")
same = sum(tokens[("sdpa", "ar", i)] == tokens[("ordered", "ar", i)] for i in range(len(PROMPTS)))
print(f"ar under sdpa == ar under ordered on {same}/{len(PROMPTS)} prompts")

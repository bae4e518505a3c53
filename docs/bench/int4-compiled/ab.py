"""The int4 forward through torch.compile (`--compile --dtype int4`) against the eager one, in one process (issue 37).

Loads MODEL as int4 twice, the second engine with compile=True (lopa's C kernels as registered ops, eager's bf16
rounding kept: models/compiled.py), builds its graphs for SIZES (timed: start-up cost), checks that a compiled chain
of the largest size gives each token the logits of compiled one-token calls bit for bit (and how far compiled logits
are from eager ones), then times forwards of each size after a 128-token prefix, sizes and engines interleaved,
medians of REPS.
Usage: OMP_NUM_THREADS=2 python docs/bench/int4-compiled/ab.py [MODEL] [SIZES] [REPS]
"""

import statistics
import sys
import time

import torch

from lopa import Engine

model = sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m-instruct"
sizes = tuple(int(s) for s in (sys.argv[2] if len(sys.argv) > 2 else "1,2,4,8").split(","))
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
torch.set_num_threads(2)
engines = {
    "eager": Engine.from_pretrained(model, dtype="int4", profile=False),
    "compiled": Engine.from_pretrained(model, dtype="int4", compile=True, profile=False),
}
prefix = torch.randint(100, 20000, (128,), generator=torch.Generator().manual_seed(0))
for engine in engines.values():
    engine.runner.prefill(0, prefix)


def chain(n: int):
    """A tree of n tokens, each the child of the one before."""
    return torch.arange(5, 5 + n), torch.arange(n), torch.ones(n, n, dtype=torch.bool).tril()


for n in sizes:
    start = time.perf_counter()
    engines["compiled"].runner.verify([chain(n)])
    print(f"building the graph of {n} tokens: {time.perf_counter() - start:.1f} s", flush=True)
largest = max(sizes)
runner = engines["compiled"].runner
whole = runner.verify([chain(largest)])[0].logits
alone = torch.stack([runner.verify([chain(i + 1)])[0].logits[-1] for i in range(largest) if i + 1 in sizes])
print(f"compiled: a chain of {largest} gives the logits of compiled calls of {sizes} tokens: "
      f"{torch.equal(whole[[n - 1 for n in sizes]], alone)}")  # fmt: skip
eager = engines["eager"].runner.verify([chain(largest)])[0].logits
print(f"compiled against eager, chain of {largest}: max |logit difference| {(whole - eager).abs().max().item():.4f}, "
      f"same argmax at {int((whole.argmax(-1) == eager.argmax(-1)).sum())}/{largest} tokens")  # fmt: skip
times = {(n, name): [] for n in sizes for name in engines}
for rep in range(reps + 3):  # sizes and engines interleaved; the first 3 rounds warm up
    for n in sizes:
        for name, engine in engines.items():
            start = time.perf_counter()
            engine.runner.verify([chain(n)])
            if rep >= 3:
                times[n, name].append(time.perf_counter() - start)
print(f"{'tokens':>6}  {'eager':>9}  {'compiled':>9}  compiled/eager   x 1-token (eager, compiled)")
for n in sizes:
    ours, theirs = (statistics.median(times[n, name]) * 1e3 for name in ("compiled", "eager"))
    one = [statistics.median(times[1, name]) * 1e3 for name in ("eager", "compiled")] if 1 in sizes else [1, 1]
    print(f"{n:>6}  {theirs:>6.1f} ms  {ours:>6.1f} ms  {ours / theirs:>14.2f}   {theirs / one[0]:.2f}, {ours / one[1]:.2f}")

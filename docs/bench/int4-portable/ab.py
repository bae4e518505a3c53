"""The int4 decoder layers on lopa's portable row-invariant kernel (kernels/panel_matmul.c, the default where AMX
tiles are missing) against torch's `_weight_int4pack_mm_for_cpu` (the kernel those CPUs ran before), in one
process (issue 37).

Loads MODEL as int4 twice (its GGUF's blocks; the Q8_0 vocabulary on the portable kernel in both), the second time
with the portable int4 entry hidden so that its layers take torch's kernel, and times forwards of 1, 2, 4, 8 and 16
tokens after a 128-token prefix, sizes and models interleaved, medians of REPS. Checks first that each model gives
a chain's tokens the logits one-token calls give, bit for bit.
Usage: OMP_NUM_THREADS=2 python docs/bench/int4-portable/ab.py [MODEL] [REPS]
"""

import statistics
import sys
import time
from unittest import mock

import torch

from lopa import Engine
from lopa.models import int4
from lopa.models.int4 import Int4Linear

model = sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m-instruct"
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
torch.set_num_threads(2)
engines = {"panel (lopa)": Engine.from_pretrained(model, dtype="int4", profile=False)}
portable = int4.row_invariant_kernel
with mock.patch.object(
    int4, "row_invariant_kernel", lambda bits, tiles=True: portable(bits, tiles) if bits == 8 else None
):
    engines["torch"] = Engine.from_pretrained(model, dtype="int4", profile=False)
for name, engine in engines.items():
    kernels = {layer.kernel for layer in engine.model.modules() if isinstance(layer, Int4Linear)}
    print(f"{name}: int4 layers on {kernels}")
    engine.runner.prefill(0, torch.randint(100, 20000, (128,), generator=torch.Generator().manual_seed(0)))


def chain(n: int):
    """A tree of n tokens, each the child of the one before."""
    return torch.arange(5, 5 + n), torch.arange(n), torch.ones(n, n, dtype=torch.bool).tril()


for name, engine in engines.items():
    whole = engine.runner.verify([chain(8)])[0].logits
    alone = torch.stack([engine.runner.verify([(torch.arange(5, 6 + i), torch.arange(i + 1),
                                                 torch.ones(i + 1, i + 1, dtype=torch.bool).tril())])[0].logits[-1]
                         for i in range(8)])  # fmt: skip
    print(f"{name}: a chain of 8 in one call gives each token the logits of its own call: {torch.equal(whole, alone)}")
sizes = (1, 2, 4, 8, 16)
times = {(n, name): [] for n in sizes for name in engines}
for rep in range(reps + 3):  # sizes and models interleaved; the first 3 rounds warm up
    for n in sizes:
        for name, engine in engines.items():
            start = time.perf_counter()
            engine.runner.verify([chain(n)])
            if rep >= 3:
                times[n, name].append(time.perf_counter() - start)
names = list(engines)
print(f"{'tokens':>6}  " + "  ".join(f"{name:>14}" for name in names) + "   ratio   x 1-token (panel, torch)")
for n in sizes:
    ours, theirs = (statistics.median(times[n, name]) * 1e3 for name in names)
    one = [statistics.median(times[1, name]) * 1e3 for name in names]
    print(
        f"{n:>6}  {ours:>11.1f} ms  {theirs:>11.1f} ms   {ours / theirs:.2f}    {ours / one[0]:.2f}, {theirs / one[1]:.2f}"
    )

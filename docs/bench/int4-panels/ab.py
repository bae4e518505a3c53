"""The int4 kernel's register path one panel at a time (BASE's source) against several panels side by side (this
tree's), in one process (issue 37).

Builds kernels/int4_matmul.c from git revision BASE and from the working tree with lopa's flags, loads MODEL as int4
(its GGUF's blocks), and times forwards of 1, 2, 4 and 8 tokens after a 128-token prefix, sizes and builds
interleaved, medians of REPS. Checks first that both builds give the same logits, bit for bit.
Usage: OMP_NUM_THREADS=2 python docs/bench/int4-panels/ab.py BASE [MODEL] [REPS]
"""

import ctypes
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from lopa import Engine
from lopa.models import native
from lopa.models.int4 import Int4Linear

base = sys.argv[1]
model = sys.argv[2] if len(sys.argv) > 2 else "smollm2-135m-instruct"
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 30
torch.set_num_threads(2)
source = native.KERNELS / "int4_matmul.c"
builds = {}
with tempfile.TemporaryDirectory() as tmp:
    old = f"{tmp}/base.c"
    with open(old, "w") as f:
        f.write(subprocess.run(["git", "show", f"{base}:src/lopa/models/kernels/int4_matmul.c"], check=True,
                               capture_output=True, text=True).stdout)  # fmt: skip
    for name, path in ((f"{base} (one panel)", old), ("this tree (panels side by side)", str(source))):
        target = f"{tmp}/{len(builds)}.so"
        subprocess.run(["cc", *native.FLAGS, "-o", target, path, "-lm"], check=True)
        library = ctypes.CDLL(target)
        library.int4_matmul_available()
        library.int4_matmul.restype = None
        library.int4_matmul.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 3 + [ctypes.c_int]
        builds[name] = library.int4_matmul

engine = Engine.from_pretrained(model, dtype="int4", profile=False)
layers = [m for m in engine.model.modules() if isinstance(m, Int4Linear)]
assert all(layer.kernel == "amx-tiles" for layer in layers)
runner = engine.runner
runner.prefill(0, torch.randint(100, 20000, (128,)))


def chain(n: int):
    """A tree of n tokens, each the child of the one before."""
    return torch.arange(5, 5 + n), torch.arange(n), torch.ones(n, n, dtype=torch.bool).tril()


def use(build: str) -> None:
    for layer in layers:
        layer._kernel = builds[build]


for n in (1, 2, 3, 4, 8):
    logits = []
    for build in builds:
        use(build)
        logits.append(runner.verify([chain(n)])[0].logits)
    print(f"{model}: same logits from both builds, {n} tokens:", torch.equal(*logits))
sizes = (1, 2, 4, 8)
times = {(n, b): [] for n in sizes for b in builds}
for rep in range(reps + 3):  # sizes and builds interleaved; the first 3 rounds warm up
    for n in sizes:
        for b in builds:
            use(b)
            start = time.perf_counter()
            runner.verify([chain(n)])
            if rep >= 3:
                times[n, b].append(time.perf_counter() - start)
print(f"{'tokens':>6}  " + "  ".join(f"{b:>34}" for b in builds) + "   ratio")
for n in sizes:
    first, second = (statistics.median(times[n, b]) * 1e3 for b in builds)
    print(f"{n:>6}  {first:>31.1f} ms  {second:>31.1f} ms   {second / first:.2f}")

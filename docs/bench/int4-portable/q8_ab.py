"""The Q8_0 vocabulary product on the portable kernel: BASE's kernels/q8_matmul.c (each panel expanded to fp32
once, one chain of sums per output) against this tree's kernels/panel_matmul.c (codes decoded as they are used,
two chains per output), SmolLM2's shape (49,152 x 576, random codes and scales), 1-16 rows, builds and sizes
interleaved, medians of REPS, in one process (issue 37). Both builds compute rows alike (checked first); their
outputs differ in rounding (another order of sums), so this compares time only.
Usage: OMP_NUM_THREADS=2 python docs/bench/int4-portable/q8_ab.py BASE [REPS]
"""

import ctypes
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from lopa.models import native
from lopa.models.q8_vocabulary import Q8Vocabulary

base = sys.argv[1]
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 15
torch.set_num_threads(2)
kernels = {}
with tempfile.TemporaryDirectory() as tmp:
    old = f"{tmp}/q8_matmul.c"
    with open(old, "w") as f:
        f.write(subprocess.run(["git", "show", f"{base}:src/lopa/models/kernels/q8_matmul.c"], check=True,
                               capture_output=True, text=True).stdout)  # fmt: skip
    for name, path, entry in (
        (base, old, "q8_matmul"),
        ("this tree", str(native.KERNELS / "panel_matmul.c"), "panel_int8_matmul"),
    ):
        target = f"{tmp}/{len(kernels)}.so"
        subprocess.run(["cc", *native.FLAGS, "-o", target, path, "-lm"], check=True)
        kernel = getattr(ctypes.CDLL(target), entry)
        kernel.restype = None
        kernel.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 3 + [ctypes.c_int]
        kernels[name] = kernel
    torch.manual_seed(0)
    codes, scale = torch.randint(-128, 128, (49152, 576), dtype=torch.int8), torch.rand(49152, 18) / 100
    layers = {name: Q8Vocabulary(codes, scale, kernel) for name, kernel in kernels.items()}
    x = torch.randn(70, 576, dtype=torch.bfloat16)
    for name, layer in layers.items():
        alone = torch.cat([layer(x[i : i + 1]) for i in range(len(x))])
        print(f"{name}: rows computed alike, 1 row against a call of 70: {torch.equal(layer(x), alone)}")
    sizes = (1, 2, 4, 8, 16)
    times = {(n, name): [] for n in sizes for name in layers}
    for rep in range(reps + 2):
        for n in sizes:
            for name, layer in layers.items():
                start = time.perf_counter()
                layer(x[:n])
                if rep >= 2:
                    times[n, name].append(time.perf_counter() - start)
    print(f"{'rows':>4}  {base:>12}  {'this tree':>12}  ratio")
    for n in sizes:
        old_ms, new_ms = (statistics.median(times[n, name]) * 1e3 for name in layers)
        print(f"{n:>4}  {old_ms:>9.2f} ms  {new_ms:>9.2f} ms  {new_ms / old_ms:.2f}")

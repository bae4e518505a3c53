"""The int4 kernel with and without its register path for 1-4 rows, in one process (issue 37).

Builds kernels/int4_matmul.c twice with lopa's flags (VECTOR_ROWS=0: every call on tiles, as before; the default:
up to 4 rows in registers), loads SmolLM2's Q4_1 file as int4, and times forwards of 1, 2, 4 and 8 tokens after a
128-token prefix, sizes and builds interleaved, medians of 30. Also checks both builds give the same logits, bit
for bit. Usage: OMP_NUM_THREADS=2 python docs/bench/int4-vector-rows/ab.py
"""

import ctypes
import statistics
import subprocess
import tempfile
import time

import torch

from lopa import Engine
from lopa.models import native
from lopa.models.int4 import Int4Linear

torch.set_num_threads(2)
source = native.KERNELS / "int4_matmul.c"
builds = {}
with tempfile.TemporaryDirectory() as tmp:
    for name, defines in (("tiles only", ["-DVECTOR_ROWS=0"]), ("registers up to 4 rows", [])):
        target = f"{tmp}/{len(builds)}.so"
        subprocess.run(["cc", *native.FLAGS, *defines, "-o", target, str(source), "-lm"], check=True)
        library = ctypes.CDLL(target)
        library.int4_matmul_available()
        library.int4_matmul.restype = None
        library.int4_matmul.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 3 + [ctypes.c_int]
        builds[name] = library.int4_matmul

engine = Engine.from_pretrained(dtype="int4", profile=False)
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


logits = {}
for build in builds:
    use(build)
    logits[build] = runner.verify([chain(8)])[0].logits
print("same logits from both builds:", torch.equal(*logits.values()))
sizes = (1, 2, 4, 8)
times = {(n, b): [] for n in sizes for b in builds}
for rep in range(33):  # sizes and builds interleaved; the first 3 rounds warm up
    for n in sizes:
        for b in builds:
            use(b)
            start = time.perf_counter()
            runner.verify([chain(n)])
            if rep >= 3:
                times[n, b].append(time.perf_counter() - start)
print(f"{'tokens':>6}  " + "  ".join(f"{b:>24}" for b in builds) + "   ratio")
for n in sizes:
    first, second = (statistics.median(times[n, b]) * 1e3 for b in builds)
    print(f"{n:>6}  {first:>21.1f} ms  {second:>21.1f} ms   {second / first:.2f}")

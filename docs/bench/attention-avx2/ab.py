"""The order-fixed attention kernel (kernels/ordered_attention.c) of git revision BASE against this tree's, in one
process (issue 37): first the same outputs bit for bit (bf16 and fp32, trees and single queries, short and long key
ranges, random tree masks), then time per call for 1 / 8 / 16 queries over 128 and 1,024 keys before them
(SmolLM2's heads: 9 query heads over 3 KV heads of 64), builds and sizes interleaved, medians of REPS; then whole
forwards of SmolLM2 in int4 (its GGUF's blocks) of 1 / 8 / 16 tokens after 128 and 1,024 tokens, the same way,
medians of REPS / 10.
Usage: OMP_NUM_THREADS=2 python docs/bench/attention-avx2/ab.py BASE [REPS]
"""

import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from unittest import mock

import torch

from lopa import Engine
from lopa.models import native, ordered_attention

base = sys.argv[1]
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
torch.set_num_threads(2)
torch.manual_seed(0)
builds = {}
with tempfile.TemporaryDirectory() as tmp:
    old = f"{tmp}/base.c"
    with open(old, "w") as f:
        f.write(subprocess.run(["git", "show", f"{base}:src/lopa/models/kernels/ordered_attention.c"], check=True,
                               capture_output=True, text=True).stdout)  # fmt: skip
    for name, path in ((base, old), ("this tree", str(native.KERNELS / "ordered_attention.c"))):
        target = f"{tmp}/{len(builds)}.so"
        subprocess.run(["cc", *native.FLAGS, "-o", target, path, "-lm"], check=True)
        library = ctypes.CDLL(target)
        library.ordered_attention.restype = None
        pointers, sizes = [ctypes.c_void_p] * 5, [ctypes.c_int64] * 6
        library.ordered_attention.argtypes = [*pointers, ordered_attention.STRIDES, *sizes, ctypes.c_float,
                                              *[ctypes.c_int] * 3]  # fmt: skip
        builds[name] = library


def attend(build: str, *args) -> torch.Tensor:
    with using(build):
        return ordered_attention.ordered_attention(*args, 0.125)


def using(build: str):
    """Every ordered_attention call inside goes to `build`'s kernel."""
    return mock.patch.object(ordered_attention, "_library", lambda: builds[build])


def inputs(queries: int, prefix: int, dtype: torch.dtype, tree: bool):
    """q [1, 9, T, 64] (the model's strides), k / v [1, 3, prefix + T, 64], an additive mask: the prefix visible,
    among the T new keys each query's ancestors in a random tree (or a chain)."""
    q = torch.randn(1, queries, 9, 64).to(dtype).transpose(1, 2)
    k, v = (torch.randn(1, 3, prefix + queries, 64).to(dtype) for _ in range(2))
    parents = [-1] + [int(torch.randint(0, i, ())) if tree else i - 1 for i in range(1, queries)]
    allowed = torch.zeros(queries, prefix + queries, dtype=torch.bool)
    allowed[:, :prefix] = True
    for node in range(queries):
        walk = node
        while walk >= 0:
            allowed[node, prefix + walk], walk = True, parents[walk]
    mask = torch.where(allowed, 0.0, torch.finfo(dtype).min).to(dtype)[None, None]
    return q, k, v, mask


same = all(
    torch.equal(*(attend(build, *args) for build in builds))
    for dtype in (torch.bfloat16, torch.float32)
    for queries in (1, 3, 8, 16, 33)
    for prefix in (0, 127, 1024)
    for tree in (False, True)
    for args in [inputs(queries, prefix, dtype, tree)]
)
print(f"the same outputs bit for bit (bf16 and fp32, 1-33 queries, 0-1,024 keys before, chains and trees): {same}")
cases = [(queries, prefix) for prefix in (128, 1024) for queries in (1, 8, 16)]
data = {case: inputs(*case, torch.bfloat16, True) for case in cases}
times = {(case, build): [] for case in cases for build in builds}
for rep in range(reps + 10):
    for case in cases:
        for build in builds:
            start = time.perf_counter()
            attend(build, *data[case])
            if rep >= 10:
                times[case, build].append(time.perf_counter() - start)
print(f"{'queries':>7} {'keys before':>11}  {base:>10}  {'this tree':>10}  ratio  (bf16, us per call)")
for case in cases:
    old_us, new_us = (statistics.median(times[case, build]) * 1e6 for build in builds)
    print(f"{case[0]:>7} {case[1]:>11}  {old_us:>10.0f}  {new_us:>10.0f}  {new_us / old_us:.2f}")


def chain(n: int):
    """A tree of n tokens, each the child of the one before."""
    return torch.arange(5, 5 + n), torch.arange(n), torch.ones(n, n, dtype=torch.bool).tril()


engine = Engine.from_pretrained(dtype="int4", profile=False)
runner = engine.runner
times = {}
print(f"{'tokens':>7} {'after':>6}  {base:>10}  {'this tree':>10}  ratio  (int4 forward, ms)")
for prefix in (128, 1024):
    runner.prefill(0, torch.randint(100, 20000, (prefix,), generator=torch.Generator().manual_seed(0)), start=0)
    times = {(n, build): [] for n in (1, 8, 16) for build in builds}
    for rep in range(reps // 10 + 3):
        for n in (1, 8, 16):
            for build in builds:
                with using(build):
                    start = time.perf_counter()
                    runner.verify([chain(n)])
                    if rep >= 3:
                        times[n, build].append(time.perf_counter() - start)
    for n in (1, 8, 16):
        old_ms, new_ms = (statistics.median(times[n, build]) * 1e3 for build in builds)
        print(f"{n:>7} {prefix:>6}  {old_ms:>10.1f}  {new_ms:>10.1f}  {new_ms / old_ms:.2f}")

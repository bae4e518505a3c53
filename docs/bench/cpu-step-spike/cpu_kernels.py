"""Spike, part 1: what PyTorch's CPU kernels make of SmolLM2's matrices, and whether each is batch invariant.

For every distinct matrix shape of SmolLM2-135M (and the vocabulary projection), ms per call at 1 and 8 rows for:
fp32 through lopa's oneDNN-packed linear, bf16 packed (oneDNN; AMX where the CPU has it), int8 weight-only
(`_weight_int8pack_mm`, bf16 activations) and int4 weight-only (`_weight_int4pack_mm_for_cpu`, groups of 32, bf16
activations). "invariant" says whether row 0 of an 8-row product is bit-identical to the 1-row product: a kernel
that is not makes a tree's logits differ from a plain step's (lookahead then equals plain decoding only up to
near-ties). Usage: python cpu_kernels.py > cpu_kernels.log (2 threads, nothing else running).
"""
import statistics
import time

import torch

from lopa.models.fastlinear import pack_weight

torch.manual_seed(0)
torch.set_grad_enabled(False)
SHAPES = {"q/o 576x576": (576, 576), "k/v 192x576": (192, 576), "gate/up 1536x576": (1536, 576),
          "down 576x1536": (576, 1536), "vocab 49152x576": (49152, 576)}
GROUP = 32


def timed(fn, reps=50):
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def kernels(w: torch.Tensor):
    """name -> (prepare x, call) for one fp32 weight [out, in]."""
    packed32 = pack_weight(w)
    packed16 = pack_weight(w.bfloat16())
    scale = w.abs().amax(1) / 127
    q8 = torch.round(w / scale[:, None]).clamp(-128, 127).to(torch.int8)
    groups = w.reshape(w.shape[0], -1, GROUP)
    lo, hi = groups.amin(-1), groups.amax(-1)
    s4 = ((hi - lo) / 15).clamp(min=1e-8)
    q4 = torch.round((groups - lo[..., None]) / s4[..., None]).clamp(0, 15).to(torch.int32).reshape(w.shape)
    # torch's int4 layout: w = (q - 8) * scale + zero, per group; zero = lo + 8 * scale
    scales_zeros = torch.stack([s4, lo + 8 * s4], -1).transpose(0, 1).contiguous().bfloat16()
    packed4 = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q4, 1)
    dequant = ((q4.reshape(groups.shape) - 8) * s4[..., None] + (lo + 8 * s4)[..., None]).reshape(w.shape)
    x = torch.randn(3, w.shape[1]).bfloat16()
    got = torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed4, GROUP, scales_zeros).float()
    assert torch.allclose(got, x.float() @ dequant.T, rtol=0.05, atol=0.05), "int4 layout misread"
    return {
        "fp32 packed": (lambda x: x, lambda x: torch.ops.mkldnn._linear_pointwise(x, packed32, None, "none", [], "")),
        "bf16 packed": (lambda x: x.bfloat16(), lambda x: torch.ops.mkldnn._linear_pointwise(x, packed16, None, "none", [], "")),
        "int8 wo": (lambda x: x.bfloat16(), lambda x: torch.ops.aten._weight_int8pack_mm(x, q8, scale.bfloat16())),
        "int4 wo": (lambda x: x.bfloat16(), lambda x: torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed4, GROUP, scales_zeros)),
    }


print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()}")
print(f"{'matrix':18} {'kernel':12} {'M=1 ms':>8} {'M=8 ms':>8} {'invariant':>9}")
for name, (out, inp) in SHAPES.items():
    w = torch.randn(out, inp) * 0.05
    x8 = torch.randn(8, inp)
    for kname, (prep, call) in kernels(w).items():
        a8, a1 = prep(x8), prep(x8[:1].clone())
        invariant = torch.equal(call(a8)[:1], call(a1))
        print(f"{name:18} {kname:12} {timed(lambda: call(a1)):8.3f} {timed(lambda: call(a8)):8.3f} {str(invariant):>9}", flush=True)

"""CPU linear layers at memory speed: oneDNN-packed weights for every row count.

A decoding forward multiplies 1 to 64 rows by every weight matrix, so it is bound by
reading the weights. Through the default fp32 path (MKL sgemv/sgemm on the plain
row-major weight) that read runs far below the machine's bandwidth, worst on AMD CPUs
where MKL takes a generic code path: on the 2-core EPYC development machine 120 decoder
matrices (425 MB) read at 17 GB/s for one row and 6 GB/s for 16 rows, and the 49152x576
vocabulary projection took 7.2 ms for one row. oneDNN's inner product on a weight
reordered once into its blocked layout (what inductor's freezing pass uses for CPU
linears) reads the same matrices at 33-35 GB/s for 1-4 rows, 30 at 8 and 25 at 16, and
the vocabulary projection in 2.8 ms (1 row) and 3.7 ms (16 rows), copy bandwidth being
38 GB/s (measured when this module was written; no command here reprints the table).

oneDNN computes each output row alike whatever the row count (a test checks row 0 is
bit-identical for 1 to 100 rows of a small layer), so a token verified inside a tree gets
the projections of a 1-token step, and one path serves all sizes. Not on every CPU for
every shape: on an AVX-512 Xeon, SmolLM2's fp32 down projection (1536 inputs) rounded one
row differently from two or more (6e-7 relative), float noise that greedy equality
survives (its tests allow a divergence only at a near-tie); on an AVX2 EPYC every fp32
layer rounds a lone row alike, and bf16 layers were bit-identical on both. Rounding
differs from MKL's by float noise (about 1e-6 relative).

PackedLinear keeps the original weight as its parameter next to the packed copy where
something else reads it: an fp32/bf16 model's stock twin (fastkernels.stock_twin, the
transformers reference over the same tensors), a vocabulary projection tied to the token
embedding. That holds those weights twice (the fp32 Qwen2.5-Coder-1.5B: 12.6 GB resident). A
quantized model has no stock twin, so its packed layers (an int4 model's bf16 vocabulary
projection) and the predictor's hold theirs packed only; the plain matrix is rebuilt from the
packed copy, exactly, when asked for. The packed product is a registered custom op, so
torch.compile treats it as one opaque kernel of known shape. Swapping
modules is model surgery, not a monkeypatch: the transformers forward is untouched.
"""

from __future__ import annotations

from collections import Counter
from functools import cache

import torch
import torch.nn.functional as F
from torch import nn

PACKED_DTYPES = (torch.float32, torch.bfloat16)
PACK_ROWS = 16  # the row count oneDNN is told to expect when reordering (the layout serves every count)


@torch.library.custom_op("lopa::packed_linear", mutates_args=())
def packed_linear(x: torch.Tensor, packed: torch.Tensor, out_features: int) -> torch.Tensor:
    """x [..., in] @ weight.T through oneDNN's inner product; `packed` is the weight [out_features, in] reordered
    once."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


@packed_linear.register_fake
def _packed_linear_shape(x: torch.Tensor, packed: torch.Tensor, out_features: int) -> torch.Tensor:
    return x.new_empty(*x.shape[:-1], out_features)


def packing_available(model: nn.Module) -> bool:
    """oneDNN packing applies to fp32 and bf16 models on a CPU whose torch build has oneDNN (x86 and arm wheels do)
    and whose instructions oneDNN packs that dtype with (bf16 needs AVX-512 or AVX-NE-CONVERT on x86)."""
    cpu = torch.backends.mkldnn.is_available() and model.device.type == "cpu" and model.dtype in PACKED_DTYPES
    return cpu and _packs(model.dtype)


@cache
def _packs(dtype: torch.dtype) -> bool:
    """Whether oneDNN packs a weight of `dtype` on this CPU (it refuses bf16 on an AVX2-only x86 core)."""
    try:
        pack_weight(torch.zeros(PACK_ROWS, PACK_ROWS, dtype=dtype))
    except RuntimeError:
        return False
    return True


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """The weight [out, in] reordered into oneDNN's blocked layout (an opaque mkldnn tensor)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_ROWS)


class PackedLinear(nn.Module):
    """nn.Linear whose inference forward multiplies by a oneDNN-packed copy of its weight; `keep_weight`: the plain
    weight stays a parameter too (another module or a stock twin reads it)."""

    def __init__(self, linear: nn.Linear, keep_weight: bool = False):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.bias = linear.bias
        self.packed = pack_weight(linear.weight)
        if keep_weight:  # set directly: register_parameter refuses a name the class defines (the property below)
            self._parameters["weight"] = linear.weight

    @property
    def holds_weight(self) -> bool:
        return "weight" in self._parameters

    @property
    def weight(self) -> torch.Tensor:
        """The plain weight [out, in]: the kept parameter, else rebuilt from the packed copy (exactly) on access."""
        return self._parameters["weight"] if self.holds_weight else self.packed.to_dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or x.dtype != self.packed.dtype:  # training, or autocast: the plain path
            return F.linear(x, self.weight, self.bias)
        if torch.compiler.is_compiling():  # opaque to inductor, which cannot lower a non-constant packed weight
            out = packed_linear(x, self.packed, self.out_features)
        else:  # eager: the op itself, without the custom op's Python dispatch (~15 us a call)
            out = torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")
        return out if self.bias is None else out + self.bias


def replace_linears(model: nn.Module, make) -> int:
    """Replace every nn.Linear child by make(linear) (model surgery); returns how many were replaced."""
    count = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, name, make(child))
                count += 1
    return count


def pack_linears(model: nn.Module) -> nn.Module:
    """Give every linear layer of an fp32/bf16 CPU model a packed weight (in place), keeping the plain one where the
    model has a stock twin (not quantized) or another module shares it (see the module docstring)."""
    if packing_available(model):
        twin = getattr(model, "lopa_precision", None) is None
        owners = Counter(id(p) for module in model.modules() for p in module.parameters(recurse=False))
        replace_linears(model, lambda linear: PackedLinear(linear, keep_weight=twin or owners[id(linear.weight)] > 1))
    return model

"""CPU linear layers without the small-M cliff: MKL-packed weights for tree-sized inputs.

A verification forward multiplies 2 to 64 rows by every weight matrix. Through the default
fp32 path (sgemm on the plain row-major weight) a 16-row product costs well above a 1-row one;
MKL's packed GEMM (the weight reordered once by `cblas_sgemm_pack`, what inductor itself
uses for frozen fp32 linears) stays closer to the 1-row cost, and was faster than oneDNN's
packed path from 4 to 16 rows in a comparison that was not recorded (the README's "What was
tried"). For one row the plain path is best.
PackedLinear keeps both: the original weight (still the module's parameter, so fingerprints,
parameter counts and training see the same model) and the packed copy, and picks by row
count. The packed product is a registered custom op, so torch.compile treats it as one opaque
kernel of known shape. Swapping modules is model surgery, not a monkeypatch: the
transformers forward is untouched.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

PACKED_MIN_ROWS = 4  # below this the plain weight measured as fast or faster


@torch.library.custom_op("lopa::packed_linear", mutates_args=())
def packed_linear(x: torch.Tensor, packed: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x [rows, in] @ weight.T through MKL's packed GEMM; `packed` is the weight packed once."""
    return torch.ops.mkl._mkl_linear(x, packed, weight, None, x.shape[0])


@packed_linear.register_fake
def _packed_linear_shape(x: torch.Tensor, packed: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], weight.shape[0])


def packing_available(model: nn.Module) -> bool:
    """MKL packing applies to fp32 models on a CPU whose torch build has MKL (x86 wheels do)."""
    return torch.backends.mkl.is_available() and model.device.type == "cpu" and model.dtype == torch.float32


class PackedLinear(nn.Module):
    """nn.Linear with an MKL-packed copy of its weight used when the input has PACKED_MIN_ROWS rows or more."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        # the packed layout does not depend on the row count given here (checked in the tests)
        self.packed = torch.ops.mkl._mkl_reorder_linear_weight(linear.weight.detach(), 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        if rows < PACKED_MIN_ROWS or torch.is_grad_enabled():
            return F.linear(x, self.weight, self.bias)
        out = packed_linear(x.reshape(rows, self.in_features), self.packed, self.weight)
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)


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
    """Give every linear layer of an fp32 CPU model a packed weight for multi-row inputs (in place)."""
    if packing_available(model):
        replace_linears(model, PackedLinear)
    return model

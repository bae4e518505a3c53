"""CPU linear layers without the small-M cliff: oneDNN-packed weights for tree-sized inputs.

A verification forward multiplies 2 to 64 rows by every weight matrix. Through the default
fp32 path (MKL sgemm on the plain row-major weight) a 16-row product costs 2-3x a 1-row one,
while oneDNN on a weight reordered once into its blocked layout stays close to the 1-row
cost; for one row the plain path is best. PackedLinear keeps both: the original weight
(still the module's parameter, so fingerprints, parameter counts and training see the same
model) and a packed copy, and picks by row count. Swapping modules is model surgery, not a
monkeypatch: the transformers forward is untouched.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

PACKED_MIN_ROWS = 4  # below this the plain weight measured as fast or faster


def packing_available(model: nn.Module) -> bool:
    """oneDNN packing applies to fp32 models on a CPU whose torch has mkldnn."""
    return torch.backends.mkldnn.is_available() and model.device.type == "cpu" and model.dtype == torch.float32


class PackedLinear(nn.Module):
    """nn.Linear with a oneDNN-packed copy of its weight used when the input has PACKED_MIN_ROWS rows or more."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        if rows < PACKED_MIN_ROWS or torch.is_grad_enabled():
            return F.linear(x, self.weight, self.bias)
        flat = x.reshape(rows, self.in_features)
        out = torch.ops.mkldnn._linear_pointwise(flat, self.packed, self.bias, "none", [], "")
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

"""int8 on CPU: the decoder's linear layers as int8 x int8 -> int32 products (torch._int_mm).

Weights are int8 with one scale per output channel; activations are quantized per call
with one scale per row (token). Per-row scales matter for lossless decoding: a row's
result then depends on that row alone, and the int32 accumulation is exact, so a tree
verified in one forward gets the same int8 outputs as its paths decoded one token at a
time, and int8 lopa emits exactly int8 plain decoding's tokens. (torch.ao's dynamic
quantization, deprecated in torch 2.13, scales activations per tensor: a row's output
then depends on the other rows of the forward and int8 lopa drifts from int8 plain.)
Rounding amplifies noise, though: a float difference of 1e-7 between a tree forward and
a 1-token forward (attention kernels sum in shape-dependent orders) can move an activation
across a rounding boundary and change a logit visibly. So int8 models run attention in
float64 (a registered transformers attention function, no patching): its shape-dependent
noise is then far below fp32 resolution and the fp32 inputs of every quantizer match.
The lm_head shares its matrix with the input embedding; it stays fp32 (it decides the
argmax, and quantizing it would add a copy).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from ..errors import UnsupportedModelError
from .fastlinear import replace_linears

INT8 = "int8"
FP64_ATTENTION = "lopa_fp64_sdpa"


def fp64_sdpa_attention(module, query, key, value, attention_mask, *args, **kwargs):
    """transformers' SDPA attention computed in float64, returned in the query's dtype."""
    mask = (
        attention_mask.double() if attention_mask is not None and attention_mask.is_floating_point() else attention_mask
    )
    out, weights = sdpa_attention_forward(module, query.double(), key.double(), value.double(), mask, *args, **kwargs)
    return out.to(query.dtype), weights


AttentionInterface.register(FP64_ATTENTION, fp64_sdpa_attention)


class Int8Linear(nn.Module):
    """y = (round(x / sx) @ round(W / sw).T) * sx * sw + b, with per-row sx and per-output-channel sw."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp(min=1e-12) / 127.0
        self.register_buffer("qweight", torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).float()
        row_scale = flat.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
        q = torch.round(flat / row_scale).clamp_(-127, 127).to(torch.int8)
        out = torch._int_mm(q, self.qweight.t()).float() * row_scale * self.scale
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features).to(x.dtype)


def quantize_int8(model: nn.Module) -> nn.Module:
    """Replace the decoder's nn.Linear layers by Int8Linear (in place); marks model.lopa_precision."""
    if model.device.type != "cpu" or model.dtype != torch.float32:
        raise UnsupportedModelError("int8 needs an fp32 model on the CPU (--device cpu)")
    replace_linears(model.get_decoder(), Int8Linear)
    model.set_attn_implementation(FP64_ATTENTION)
    model.lopa_precision = INT8
    return model

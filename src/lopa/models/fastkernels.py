"""The CPU fast path in one switch: packed linears and in-place grouped-KV attention, or stock modules.

Both pieces are chosen per model at load time (`load_model(fast=True)`, the default) and
both keep the stock transformers forward: linear modules are swapped for PackedLinear
(models/fastlinear.py) and attention goes through a registered implementation
(models/attention.py). A model either piece cannot take keeps the stock module for that
piece, with a one-line notice saying why. `stock_twin` gives the untouched transformers
model over the same weights, the reference every benchmark ratio is taken against.
"""

from __future__ import annotations

import copy
import logging

import torch
from torch import nn
from transformers import AutoModelForCausalLM, PreTrainedModel

from . import ordered_attention
from .attention import TREE_ATTENTION
from .fastlinear import pack_linears, packing_available

log = logging.getLogger("lopa")


def use_fast_kernels(model: PreTrainedModel) -> list[str]:
    """Switch an fp32/bf16 model to lopa's kernels where they apply (in place); returns what was switched."""
    switched = []
    if packing_available(model):
        pack_linears(model)
        switched.append("packed-linear")
    else:
        log.info("lopa: stock linear layers (%s %s has no oneDNN packed path)", model.device.type, model.dtype)
    if getattr(model.config, "_attn_implementation", None) == "sdpa":
        model.set_attn_implementation(TREE_ATTENTION)
        switched.append(TREE_ATTENTION)
    else:
        log.info("lopa: stock %s attention kept", getattr(model.config, "_attn_implementation", None))
    model.lopa_kernels = tuple(switched)
    return switched


def has_fast_kernels(model: torch.nn.Module) -> bool:
    return bool(getattr(model, "lopa_kernels", ()))


def row_invariant(model: PreTrainedModel) -> bool:
    """Whether a bf16 model computes each token alike whatever else its forward holds (a tree, other rows), so
    that lookahead equals plain decoding bit for bit: on a CPU, with lopa's attention and its order-fixed kernel,
    and every linear layer one that computes each row alike (oneDNN-packed or int4; not stock nn.Linear)."""
    ours = getattr(model.config, "_attn_implementation", None) == TREE_ATTENTION
    config = model.config.get_text_config()
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    stock_linear = any(type(m) is nn.Linear for m in model.modules())
    return ours and ordered_attention.supports(model.dtype, model.device, head_dim) and not stock_linear


def stock_twin(model: PreTrainedModel) -> PreTrainedModel:
    """The stock transformers model (stock linears, SDPA) over the same weight tensors, allocating no copy; a
    quantized model (int8, int4) is its own reference: transformers has no stock form of lopa's layers."""
    if not has_fast_kernels(model) or getattr(model, "lopa_precision", None):
        return model
    with torch.device("meta"):
        twin = AutoModelForCausalLM.from_config(
            copy.deepcopy(model.config), dtype=model.dtype, attn_implementation="sdpa"
        )
    twin.load_state_dict(model.state_dict(), assign=True, strict=True)
    for name, buffer in model.named_buffers():  # non-persistent buffers (rotary frequencies) are not in the state dict
        module_name, _, attr = name.rpartition(".")
        setattr(twin.get_submodule(module_name), attr, buffer)
    twin.generation_config = model.generation_config
    return twin.eval().requires_grad_(False)

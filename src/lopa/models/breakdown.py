"""Where a verification forward's time goes, next to what each part would cost at memory speed.

One forward of T tokens after a prefix is timed plainly (median wall time), then run under
torch.profiler; the profiler's top-level operator events are summed by kind: the decoder's
matrix products, the vocabulary projection, attention, and every other kernel (norms,
rotary embedding, activations, residual adds, copies, the runner's mask). What the wall
time has beyond those kernels is framework and Python dispatch. The floors are the bytes
each part must read (weights, the KV cache) over the measured copy bandwidth.
"""

from __future__ import annotations

from torch import nn
from torch.profiler import ProfilerActivity, profile

from . import ordered_attention
from .fastlinear import PackedLinear
from .profile import chain, forward_latency
from .runner import Runner

MATMUL_OPS = {
    "aten::linear",
    "aten::addmm",
    "aten::mm",
    "aten::matmul",
    "mkldnn::_linear_pointwise",
    "lopa::packed_linear",
    "aten::_int_mm",
}
ATTENTION_OPS = {"aten::scaled_dot_product_attention", ordered_attention.PROFILED_NAME}
PARTS = ("matmul", "vocab", "attention", "other_kernels", "dispatch")


def _kind(event, vocab: int) -> str:
    if event.name in MATMUL_OPS:
        return "vocab" if any(vocab in shape for shape in event.input_shapes[:2]) else "matmul"
    return "attention" if event.name in ATTENTION_OPS else "other_kernels"


def kernel_seconds(runner: Runner, tokens: int, reps: int) -> dict[str, float]:
    """Seconds per forward by kind of top-level operator, from torch.profiler (the runner is already prefilled)."""
    vocab = runner.config.vocab_size
    inputs = chain(runner, tokens)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(reps):
            runner.verify([inputs])
    totals = dict.fromkeys(PARTS[:-1], 0.0)
    for event in prof.events():
        if event.cpu_parent is None and not event.name.startswith("ProfilerStep"):
            totals[_kind(event, vocab)] += event.cpu_time_total * 1e-6 / reps  # microseconds
    return totals


def weight_bytes(module: nn.Module) -> int:
    """Bytes of a module's own weights as a forward reads them: its matrix parameters, or, for a quantized layer
    that holds none (int4 codes, a Q8_0 vocabulary), its buffers: codes, scales, offsets; a packed layer's packed
    copy."""
    if isinstance(module, PackedLinear):
        return module.packed.numel() * module.packed.element_size()
    tensors = [p for p in module.parameters(recurse=False) if p.dim() == 2] or list(module.buffers(recurse=False))
    return sum(t.numel() * t.element_size() for t in tensors)


def floors(runner: Runner, tokens: int, prefix: int, bandwidth: float) -> dict[str, float]:
    """Seconds each part needs at `bandwidth` bytes/s: weights read once, the KV cache read once."""
    model, cfg = runner.model, runner.config
    embedding = model.get_input_embeddings()  # gathered, not multiplied
    decoder = sum(weight_bytes(m) for m in model.get_decoder().modules() if m is not embedding)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_bytes = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * (prefix + tokens) * model.dtype.itemsize
    return {
        "matmul": decoder / bandwidth,
        "vocab": weight_bytes(model.get_output_embeddings()) / bandwidth,
        "attention": kv_bytes / bandwidth,
    }


def forward_breakdown(runner: Runner, tokens: int, prefix: int, bandwidth: float, reps: int = 5) -> dict:
    """{"wall_s", "parts_s" (PARTS), "floors_s"} for one forward of `tokens` chain tokens after `prefix` ones."""
    wall = forward_latency(runner, tokens, prefix, reps)  # leaves the runner prefilled for the profiled runs
    parts = kernel_seconds(runner, tokens, reps)
    parts["dispatch"] = max(0.0, wall - sum(parts.values()))
    return {"wall_s": wall, "parts_s": parts, "floors_s": floors(runner, tokens, prefix, bandwidth)}


def breakdown_table(runner: Runner, sizes, prefixes, bandwidth: float, reps: int = 5) -> dict[str, dict[str, dict]]:
    """forward_breakdown for every prefix x size: {str(prefix): {str(tokens): ...}} (JSON keys)."""
    limit = runner.max_positions - 1
    return {
        str(p): {str(t): forward_breakdown(runner, t, p, bandwidth, reps) for t in sizes if p + t < limit}
        for p in prefixes
    }

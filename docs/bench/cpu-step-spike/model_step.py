"""Spike, route (b): the whole SmolLM2 forward in PyTorch at several precisions, and whether trees stay exact.

For each variant: median ms of a forward of 1 and of 8 chained tokens after a 128-token prefix (lopa's runner,
models/profile.py's forward_latency), and whether the 8 tokens verified in one forward give bit-identical logits
to the same 8 tokens fed one forward at a time (then lookahead equals plain decoding on that backend exactly;
otherwise only up to near-ties). Variants: fp32 with lopa's packed linears (today's default), bf16 with packed
linears (oneDNN; AMX where the CPU has it), bf16 with int4 weight-only decoder linears (torch's
_weight_int4pack_mm_for_cpu, groups of 32), the same with the vocabulary projection in int4 too.
Usage: python model_step.py > model_step.log (2 threads, nothing else running).
"""
import torch
from torch import nn

from lopa.models.fastlinear import PackedLinear
from lopa.models.loading import load_model
from lopa.models.profile import chain, forward_latency
from lopa.models.runner import Runner

GROUP = 32
torch.set_grad_enabled(False)


class Int4Linear(nn.Module):
    """Weight-only int4 (asymmetric, groups of 32) with bf16 activations."""

    def __init__(self, linear: nn.Module):
        super().__init__()
        w = linear.weight.detach().float()
        self.out_features = w.shape[0]
        groups = w.reshape(w.shape[0], -1, GROUP)
        lo, hi = groups.amin(-1), groups.amax(-1)
        scale = ((hi - lo) / 15).clamp(min=1e-8)
        q = torch.round((groups - lo[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32).reshape(w.shape)
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        self.scales_zeros = torch.stack([scale, lo + 8 * scale], -1).transpose(0, 1).contiguous().bfloat16()

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1]).bfloat16()
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, self.packed, GROUP, self.scales_zeros)
        return out.reshape(*x.shape[:-1], self.out_features).to(x.dtype)


def int4(model, head: bool):
    """The decoder's linears (packed by load_model) as Int4Linear; the vocabulary projection too with `head`."""
    for module in list(model.get_decoder().modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, (nn.Linear, PackedLinear)):
                setattr(module, name, Int4Linear(child))
    if head:
        model.lm_head = Int4Linear(model.lm_head)
    return model


def invariant(runner: Runner, prompt: torch.Tensor, tokens: torch.Tensor) -> bool:
    runner.reserve(len(prompt) + len(tokens) + 2)
    runner.prefill(0, prompt, 0)
    ids, depths, ancestors = tokens, torch.arange(len(tokens)), torch.ones(len(tokens), len(tokens), dtype=torch.bool).tril_()
    (tree,) = runner.verify([(ids, depths, ancestors)])
    runner.prefill(0, prompt, 0)
    steps = []
    for i, token in enumerate(tokens):
        (out,) = runner.verify([(token[None], torch.zeros(1, dtype=torch.long), torch.ones(1, 1, dtype=torch.bool))])
        runner.commit(0, [0])
        steps.append(out.logits[0])
    return torch.equal(tree.logits, torch.stack(steps))


VARIANTS = {  # each run twice, in turn: this VM's timings drift by tens of percent within minutes
    "fp32 packed (default)": lambda: load_model(None).model,
    "bf16 packed": lambda: load_model(None, dtype=torch.bfloat16).model,
    "bf16 + int4 decoder": lambda: int4(load_model(None, dtype=torch.bfloat16).model, head=False),
    "bf16 + int4 decoder and head": lambda: int4(load_model(None, dtype=torch.bfloat16).model, head=True),
}
print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
for name, make in [*VARIANTS.items(), *VARIANTS.items()]:
    model = make()
    runner = Runner(model)
    one, eight = (forward_latency(runner, t, prefix=128, reps=20) * 1e3 for t in (1, 8))
    prompt = torch.randint(0, 1000, (40,), generator=torch.Generator().manual_seed(0))
    tokens = torch.randint(0, 1000, (8,), generator=torch.Generator().manual_seed(1))
    print(f"{name:30} 1 token {one:6.2f} ms, 8 tokens {eight:6.2f} ms ({eight / one:.2f}x), "
          f"tree == one at a time: {invariant(runner, prompt, tokens)}", flush=True)
    del model, runner

"""Quality of decoded text under the model itself, and the held-out line-completion task.

`output_loss` is an exact log-likelihood of the output under the diffusion model's own
conditionals, factored left to right inside each block: row i of one batched forward
sees the block's first i tokens and masks the rest. A decoding order that drifts into
text the model finds unlikely shows up as a higher loss.
"""

from __future__ import annotations

import torch

from .corpus import split_files


def output_loss(adapter, prompt: list[int], out: list[int], block_size: int) -> float:
    """Mean negative log-likelihood (nats per token) of `out` after `prompt`; one forward per block."""
    ctx, total = adapter.begin(prompt), 0.0
    for s in range(0, len(out), block_size):
        blk = torch.tensor(out[s : s + block_size], device=adapter.device)
        b = len(blk)
        rows = blk.repeat(b, 1)
        rows[torch.arange(b)[:, None] <= torch.arange(b)[None, :]] = adapter.mask_token_id
        logp = torch.log_softmax(adapter.logits(ctx, rows), -1)
        total -= logp[torch.arange(b), torch.arange(b), blk].sum().item()
        adapter.commit(ctx, out[s : s + block_size])
    return total / len(out)


def completion_tasks(n: int, context: int = 384, min_len: int = 12) -> list[tuple[str, str]]:
    """n (prompt, next line) pairs from the held-out stdlib files, spread evenly over them.

    The prompt ends just after a newline; the target is the following line, stripped.
    """
    files = split_files()[1]
    cands = []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        lines = text.splitlines(keepends=True)
        off = 0
        for ln in lines:
            if off >= context and len(ln.strip()) >= min_len and not ln.lstrip().startswith("#"):
                cands.append((text[off - context : off], ln.rstrip("\n")))
            off += len(ln)
    step = max(1, len(cands) // n)
    return cands[::step][:n]


def exact_line(output: str, target: str) -> bool:
    """Did the output's first line reproduce the target line (trailing spaces ignored)?"""
    return output.split("\n", 1)[0].rstrip() == target.rstrip()

"""Train the small block-diffusion LM on the stdlib corpus (`lopa train-dllm`).

Each step takes random byte windows, masks every block with its own ratio t ~ U(0, 1)
and trains on the concatenation [noisy; clean] under `training_mask`, so one pass
teaches denoising of every block given exact clean context (the inference setting).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from tqdm import tqdm

from .corpus import encode_files, split_files
from .model import DLLM, DLLMConfig, param_count, training_mask
from .tokenizer import ByteTokenizer


def mask_blocks(x: torch.Tensor, block: int, gen: torch.Generator) -> torch.Tensor:
    """Bool mask of positions to hide: per (row, block) ratio t ~ U(0,1), at least one per block."""
    b, n = x.shape
    t = torch.rand(b, n // block, 1, generator=gen).expand(-1, -1, block).reshape(b, n)
    m = torch.rand(b, n, generator=gen) < t
    first = (torch.arange(n) % block == 0) & ~m.view(b, -1, block).any(-1).repeat_interleave(block, 1)
    return m | first


def batch_loss(model: DLLM, x: torch.Tensor, block: int, gen: torch.Generator, mask: torch.Tensor):
    """Mean cross-entropy over the masked positions of the noisy half."""
    n = x.shape[1]
    m = mask_blocks(x, block, gen)
    noisy = torch.where(m, model.cfg.mask_token_id, x)
    pos = torch.arange(n).repeat(2)[None].expand(x.shape[0], -1)
    logits, _ = model(torch.cat([noisy, x], 1), pos, mask)
    return F.cross_entropy(logits[:, :n][m], x[m])


def save_model(model: DLLM, out: Path, extra: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps({**model.cfg.to_dict(), "training": extra}, indent=1))
    ByteTokenizer(model.cfg.mask_token_id, model.cfg.eos_token_id).save(out / "tokenizer.json")


def train(
    out: Path,
    steps: int,
    batch: int,
    seq: int,
    block: int,
    dim: int,
    layers: int,
    heads: int,
    lr: float,
    seed: int,
    threads: int,
    log_every: int,
    bf16: bool,
) -> Path:
    """Train and save to `out`; returns the log path (JSON lines: step, loss, eval_loss, elapsed_s)."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    cfg = DLLMConfig(dim=dim, n_layers=layers, n_heads=heads)
    model = DLLM(cfg)
    train_files, held = split_files()
    data, evald = encode_files(train_files, cfg.eos_token_id), encode_files(held, cfg.eos_token_id)
    mask = training_mask(seq, block)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "train_log.jsonl"
    egen = torch.Generator().manual_seed(seed + 1)
    ex = torch.stack([evald[i : i + seq] for i in torch.randint(len(evald) - seq, (32,), generator=egen).tolist()])
    meta = dict(steps=steps, batch=batch, seq=seq, block=block, lr=lr, seed=seed, params=param_count(model))
    t0, run = time.time(), None
    with log_path.open("w") as log, tqdm(range(1, steps + 1), desc="train-dllm") as bar:
        for step in bar:
            frac = step / steps
            for g in opt.param_groups:
                g["lr"] = lr * min(1.0, step / 100) * 0.5 * (1 + math.cos(math.pi * frac))
            idx = torch.randint(len(data) - seq, (batch,), generator=gen)
            x = torch.stack([data[i : i + seq] for i in idx.tolist()])
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = batch_loss(model, x, block, gen, mask)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            run = loss.item() if run is None else 0.95 * run + 0.05 * loss.item()
            bar.set_postfix(loss=f"{run:.3f}")
            if step % log_every == 0 or step == steps:
                model.eval()
                with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    el = batch_loss(model, ex, block, torch.Generator().manual_seed(0), mask).item()
                model.train()
                rec = dict(step=step, loss=round(run, 4), eval_loss=round(el, 4), elapsed_s=round(time.time() - t0, 1))
                log.write(json.dumps(rec) + "\n")
                log.flush()
                save_model(model, out, {**meta, "elapsed_s": rec["elapsed_s"], "step": step})
    return log_path

"""Train lookahead heads on self-distillation rows: cross-entropy per head, held-out top-1/top-5.

Checkpoints (heads + AdamW state + step) go to OUT/checkpoint every few hundred steps,
so `--resume` continues a stopped run exactly; the log is JSON lines in OUT/train_log.jsonl.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch.utils.checkpoint import checkpoint
from tqdm import tqdm

from ..draft.heads import HeadsConfig, LookaheadHeads, load_heads, save_heads
from .data import IGNORE, HeadsData

LOG = "train_log.jsonl"


@dataclass
class TrainSettings:
    steps: int = 3000
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 0.0
    head_decay: float = 0.8  # loss weight of head i is head_decay ** i (Medusa)
    eval_every: int = 250
    checkpoint_every: int = 250
    grad_checkpoint: bool = False
    max_minutes: float = 0.0  # stop (and save) after this long; 0 = no limit
    seed: int = 0


def draft_vocabulary(data: HeadsData, size: int) -> torch.Tensor:
    """The `size` tokens most frequent as targets and roots (sorted ids): the heads' output space."""
    tokens = torch.cat([data.targets[data.targets != IGNORE], data.roots])
    counts = torch.bincount(tokens)
    return counts.topk(min(size, int((counts > 0).sum()))).indices.sort().values


def _local_targets(targets: torch.Tensor, vocab_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Map base-vocab targets to indices into vocab_ids; tokens outside it become IGNORE."""
    lookup = torch.full((vocab_size + 1,), IGNORE, dtype=torch.long)
    lookup[vocab_ids] = torch.arange(vocab_ids.numel())
    return lookup[targets.clamp(min=-1) % (vocab_size + 1)].masked_fill(targets == IGNORE, IGNORE)


def _head_loss(heads: LookaheadHeads, feature: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(heads.logits(feature), target, ignore_index=IGNORE, reduction="sum")


def batch_loss(heads: LookaheadHeads, batch: HeadsData, targets: torch.Tensor, settings: TrainSettings) -> torch.Tensor:
    """Weighted sum over heads of the mean cross-entropy; optional checkpointing of the vocab projection."""
    total = torch.zeros(())
    for i, feature in enumerate(heads.features(batch.hidden, batch.roots)):
        target = targets[:, i]
        count = (target != IGNORE).sum().clamp(min=1)
        if settings.grad_checkpoint:  # recompute the [batch, vocab] logits in backward instead of storing them
            loss = checkpoint(_head_loss, heads, feature, target, use_reentrant=False)
        else:
            loss = _head_loss(heads, feature, target)
        total = total + settings.head_decay**i * loss / count
    return total


@torch.no_grad()
def evaluate(heads: LookaheadHeads, data: HeadsData, targets: torch.Tensor, chunk: int = 1024) -> dict:
    """Per-head top-1 / top-5 accuracy against the base model's own continuation."""
    k = heads.config.num_heads
    hits1, hits5, counts = torch.zeros(k), torch.zeros(k), torch.zeros(k)
    for start in range(0, len(data), chunk):
        rows = torch.arange(start, min(start + chunk, len(data)))
        batch, target = data.subset(rows), targets[rows]
        for i, feature in enumerate(heads.features(batch.hidden, batch.roots)):
            top = heads.logits(feature).topk(5, dim=-1).indices
            valid = target[:, i] != IGNORE
            hit = top == target[:, i, None]
            hits1[i] += (hit[:, 0] & valid).sum()
            hits5[i] += (hit.any(-1) & valid).sum()
            counts[i] += valid.sum()
    counts = counts.clamp(min=1)
    return {"top1": (hits1 / counts).tolist(), "top5": (hits5 / counts).tolist()}


def _save_checkpoint(heads: LookaheadHeads, optimizer: torch.optim.Optimizer, step: int, out: Path) -> None:
    ckpt = out / "checkpoint"
    save_heads(heads, ckpt)
    state = optimizer.state_dict()
    tensors = {f"{p}.{name}": t for p, s in state["state"].items() for name, t in s.items()}
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(ckpt / "optimizer.safetensors"))
    (ckpt / "progress.json").write_text(json.dumps({"step": step, "param_groups": state["param_groups"]}))


def _load_checkpoint(out: Path, loaded, optimizer_for) -> tuple[LookaheadHeads, torch.optim.Optimizer, int]:
    ckpt = out / "checkpoint"
    heads = load_heads(ckpt, loaded).requires_grad_(True).train()
    optimizer = optimizer_for(heads)
    progress = json.loads((ckpt / "progress.json").read_text())
    state: dict[int, dict] = {}
    for key, tensor in load_file(str(ckpt / "optimizer.safetensors")).items():
        param, name = key.split(".", 1)
        state.setdefault(int(param), {})[name] = tensor
    optimizer.load_state_dict({"state": state, "param_groups": progress["param_groups"]})
    return heads, optimizer, progress["step"]


def _lr(progress: float, settings: TrainSettings) -> float:
    """Linear warm-up over the first 5%, then cosine decay to zero at progress 1."""
    if progress < 0.05:
        return settings.lr * max(progress, 1 / settings.steps) / 0.05
    return settings.lr * 0.5 * (1 + math.cos(math.pi * (progress - 0.05) / 0.95))


def _progress(step: int, elapsed_s: float, settings: TrainSettings) -> float:
    """Fraction of the run done, by steps or by the time limit, whichever is further: the schedule ends either way."""
    by_time = elapsed_s / (60 * settings.max_minutes) if settings.max_minutes else 0.0
    return min(1.0, max(step / settings.steps, by_time))


def train_heads(
    loaded,
    data: HeadsData,
    config: HeadsConfig,
    draft_vocab: int,
    out: Path,
    settings: TrainSettings,
    resume: bool = False,
    held_out_every: int = 20,
) -> dict:
    """Train heads for `loaded` (a LoadedModel) on `data`; save them to `out`; return the final evaluation."""
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(settings.seed)
    held = data.sequence % held_out_every == 0
    train, test = data.subset(torch.nonzero(~held)[:, 0]), data.subset(torch.nonzero(held)[:, 0])
    embedding = loaded.model.get_output_embeddings().weight

    def optimizer_for(heads: LookaheadHeads) -> torch.optim.Optimizer:
        return torch.optim.AdamW(heads.heads.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)

    if resume and (out / "checkpoint" / "progress.json").exists():
        heads, optimizer, step = _load_checkpoint(out, loaded, optimizer_for)
    else:
        heads = LookaheadHeads(config, embedding, draft_vocabulary(train, draft_vocab))
        optimizer, step = optimizer_for(heads), 0
        (out / LOG).write_text("")
    vocab_size = config.vocab_size
    train_targets = _local_targets(train.targets[:, : config.num_heads], heads.vocab_ids, vocab_size)
    test_targets = _local_targets(test.targets[:, : config.num_heads], heads.vocab_ids, vocab_size)
    gen = torch.Generator().manual_seed(settings.seed + step)
    start = time.perf_counter()
    log = (out / LOG).open("a")
    bar = tqdm(total=settings.steps, initial=step, desc="training heads", unit="step")
    result: dict = {}
    while step < settings.steps:
        rows = torch.randint(len(train), (settings.batch_size,), generator=gen)
        lr = _lr(_progress(step, time.perf_counter() - start, settings), settings)
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss = batch_loss(heads, train.subset(rows), train_targets[rows], settings)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}")
        elapsed = time.perf_counter() - start
        out_of_time = _progress(step, elapsed, settings) >= 1.0
        last = step == settings.steps or out_of_time
        record = {"step": step, "loss": loss.item(), "lr": lr, "elapsed_s": elapsed}
        if step % settings.eval_every == 0 or last:
            result = evaluate(heads.eval(), test, test_targets)
            heads.train()
            record.update({"held_out_" + k: v for k, v in result.items()})
            tqdm.write(f"step {step}: loss {loss.item():.3f} top1 {[round(x, 3) for x in result['top1']]}")
        if step % 25 == 0 or "held_out_top1" in record:
            log.write(json.dumps(record) + "\n")
            log.flush()
        if step % settings.checkpoint_every == 0 or last:
            _save_checkpoint(heads, optimizer, step, out)
        if out_of_time:
            break
    bar.close()
    log.close()
    heads.config.training = {
        **heads.config.training,
        "steps": step,
        "rows": len(train),
        "held_out_rows": len(test),
        "held_out": result,
    }
    save_heads(heads, out)
    return result

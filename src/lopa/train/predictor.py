"""Train an EAGLE-3 predictor with the training-time test, from (prompt ids, answer ids) sequences.

The base model runs once over every sequence (teacher forcing) for its aux-layer hidden states and its
own next-token choice at every position: the label, i.e. what verification would accept. Training then
unrolls `ttt_steps` draft steps over whole sequences at once, as drafting runs them: step 0 reads the
target's fused features; step s > 0 reads the predictor's own output features of step s - 1 (the
chain's previous row, one position earlier) with the true tokens. A row of step s attends to the real
rows up to its chain's root and to its own chain (EAGLE-3's mask; the keys go through a DynamicCache).
The loss is the cross entropy against the labels mapped into the draft vocabulary (labels outside it are
skipped), on answer positions, weighted decay ** s. The draft vocabulary is the `draft_vocab_size` most
frequent labels.

`out` gets the predictor (predictor_io layout) and `trainer_state.pt` (AdamW state, epoch, log) after
every epoch; `resume=True` continues from them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from tqdm import tqdm
from transformers import DynamicCache

from ..draft.predictor import Eagle3Predictor, PredictorConfig, causal
from ..draft.predictor_io import load_predictor, save_predictor

STATE = "trainer_state.pt"


@dataclass
class PredictorSettings:
    epochs: int = 10
    batch_size: int = 8
    lr: float = 3e-3
    ttt_steps: int = 3
    decay: float = 0.8  # loss weight of unrolled step s is decay ** s
    seed: int = 0


@dataclass
class _Batch:
    ids: torch.Tensor  # [B, L] prompt + answer, right-padded with 0
    layers: torch.Tensor  # [B, L, aux * hidden] the base's aux hidden states
    labels: torch.Tensor  # [B, L] the base's next token after each position; -100 where no loss


@torch.no_grad()
def teacher_force(model, sequences: Sequence[tuple[list[int], list[int]]], aux_layers: list[int]) -> list[_Batch]:
    """One row per sequence: the base's aux-layer hidden states and its next-token labels on the answer."""
    rows = []
    for prompt, answer in sequences:
        ids = torch.tensor([list(prompt) + list(answer)], device=model.device)
        out = model(input_ids=ids, output_hidden_states=True)
        labels = out.logits[0].argmax(-1).cpu()
        labels[: len(prompt) - 1] = -100  # prompt positions: no loss
        labels[-1] = -100  # after the last token the data has no next token to check against
        layers = torch.cat([out.hidden_states[i][0] for i in aux_layers], -1).float().cpu()
        rows.append(_Batch(ids[0].cpu(), layers, labels))
    return rows


def _collate(rows: list[_Batch]) -> _Batch:
    length = max(r.ids.numel() for r in rows)
    ids = torch.zeros(len(rows), length, dtype=torch.long)
    layers = torch.zeros(len(rows), length, rows[0].layers.shape[-1])
    labels = torch.full((len(rows), length), -100, dtype=torch.long)
    for b, r in enumerate(rows):
        n = r.ids.numel()
        ids[b, :n], layers[b, :n], labels[b, :n] = r.ids, r.layers, r.labels
    return _Batch(ids, layers, labels)


def unroll(predictor: Eagle3Predictor, batch: _Batch, steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(draft logits [B, T, draft_vocab], draft-vocab labels [B, T]) of each unrolled step; T = L - 1.

    Row i of step s sits at position i + 1 + s, holds token ids[i + 1 + s] and predicts the token after it."""
    ids, labels = batch.ids, batch.labels
    b, t = ids.shape[0], ids.shape[1] - 1
    features = predictor.fuse(batch.layers[:, :t])  # row i reads the target's features at position i
    cache, results = DynamicCache(), []
    blocks = [causal(t)]
    for s in range(steps):
        tokens = F.pad(ids[:, 1 + s :], (0, s))
        target = F.pad(labels[:, 1 + s :], (0, s), value=-100)
        positions = (torch.arange(t) + 1 + s).expand(b, t)
        allowed = torch.cat(blocks, 1)
        mask = torch.zeros(1, 1, t, allowed.shape[1]).masked_fill_(~allowed, torch.finfo(torch.float32).min)
        logits, features = predictor(features, tokens, positions, mask, cache)
        target = predictor.to_draft(target.clamp(min=0)).masked_fill_(target < 0, -100)
        results.append((logits, target))
        blocks.append(torch.eye(t, dtype=torch.bool))  # the next step's row i also sees this step's row i
    return results


def accuracy(predictor: Eagle3Predictor, rows: list[_Batch], steps: int = 1) -> list[float]:
    """Top-1 accuracy of each unrolled step against the base's own next tokens (out-of-vocabulary count as wrong)."""
    hits, counts = [0] * steps, [0] * steps
    with torch.no_grad():
        for row in rows:
            batch = _collate([row])
            for s, (logits, target) in enumerate(unroll(predictor, batch, steps)):
                labels = F.pad(batch.labels[:, 1 + s :], (0, s), value=-100)
                keep = labels >= 0
                hits[s] += int((predictor.draft_ids[logits.argmax(-1)] == labels)[keep].sum())
                counts[s] += int(keep.sum())
    return [h / max(c, 1) for h, c in zip(hits, counts)]


def _draft_vocab(rows: list[_Batch], vocab: int, size: int) -> torch.Tensor:
    """The `size` most frequent labels (ties and unseen tokens by id)."""
    counts = torch.zeros(vocab)
    for row in rows:
        labels = row.labels[row.labels >= 0]
        counts += torch.bincount(labels, minlength=vocab)[:vocab].float()
    return counts.topk(size, sorted=False).indices


def train_predictor(
    model,
    sequences: Sequence[tuple[list[int], list[int]]],
    *,
    aux_layers: list[int] | None = None,
    draft_vocab_size: int | None = None,
    intermediate_size: int | None = None,
    settings: PredictorSettings | None = None,
    out: Path | str | None = None,
    resume: bool = False,
    name: str = "",
) -> tuple[Eagle3Predictor, list[dict]]:
    """Train a predictor for the base `model` on (prompt ids, answer ids); returns it and the per-epoch log."""
    settings = settings or PredictorSettings()
    torch.manual_seed(settings.seed)
    state_path = Path(out) / STATE if out is not None else None
    if resume and state_path is not None and state_path.exists():
        predictor = load_predictor(out, model).requires_grad_(True).train()
        state = torch.load(state_path, weights_only=True)  # tensors and plain values only: no pickled code
    else:
        config = PredictorConfig.for_base(model, aux_layers, draft_vocab_size, intermediate_size, name)
        predictor = Eagle3Predictor(config, model.get_input_embeddings().weight).train()
        state = None
    rows = teacher_force(model, sequences, predictor.config.aux_layers)
    if state is None:
        predictor.set_vocab(_draft_vocab(rows, predictor.t2d.numel(), predictor.config.draft_vocab_size))
    optimizer = torch.optim.AdamW(predictor.parameters(), lr=settings.lr)
    log: list[dict] = state["log"] if state else []
    if state:
        optimizer.load_state_dict(state["optimizer"])
    first = state["epoch"] + 1 if state else 0
    generator = torch.Generator().manual_seed(settings.seed)
    bar = tqdm(range(first, settings.epochs), desc="training predictor", unit="epoch")
    for epoch in bar:
        order = torch.randperm(len(rows), generator=generator).tolist()
        total, batches = 0.0, 0
        for lo in range(0, len(order), settings.batch_size):
            batch = _collate([rows[i] for i in order[lo : lo + settings.batch_size]])
            loss = sum(
                settings.decay**s * F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=-100)
                for s, (logits, target) in enumerate(unroll(predictor, batch, settings.ttt_steps))
                if (target >= 0).any()
            )
            if not torch.is_tensor(loss):  # no answer position in this batch
                continue
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, batches = total + loss.item(), batches + 1
        log.append({"epoch": epoch, "loss": total / max(batches, 1)})
        bar.set_postfix(loss=f"{log[-1]['loss']:.3f}")
        if out is not None:
            predictor.config.training = {**asdict(settings), "sequences": len(rows), "epochs_done": epoch + 1}
            save_predictor(predictor, out)
            torch.save({"optimizer": optimizer.state_dict(), "epoch": epoch, "log": log}, state_path)
    return predictor.eval(), log

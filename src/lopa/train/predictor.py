"""Train an EAGLE-3 predictor with the training-time test, from (prompt ids, answer ids) sequences.

The base model runs once over every sequence (teacher forcing, batched) for its aux-layer hidden states, its
own next-token choice at every position (the label, i.e. what greedy verification would accept) and its
TOP_K likeliest next tokens with their probabilities. The result (`Features`, bf16 hidden states) is cached
on disk, since it costs more than an epoch. Training then unrolls `ttt_steps` draft steps over whole
sequences at once, as drafting runs them: step 0 reads the target's fused features; step s > 0 reads the
predictor's own output features of step s - 1 (the chain's previous row, one position earlier) with the true
tokens. A row of step s attends to the real rows up to its chain's root and to its own chain (EAGLE-3's
mask; the keys go through a DynamicCache). The loss, on answer positions and weighted decay ** s, is by
default distillation: the cross entropy against the base's own next-token distribution (its top TOP_K,
renormalised over the draft vocabulary), as speculators trains EAGLE-3 against the verifier's logits. A
label says only which token won; the distribution also says how the others rank, which labels alone do not
teach a predictor trained on a few hundred thousand positions before it overfits them (`distill=False`:
cross entropy against the labels mapped into the draft vocabulary, labels outside it skipped). The draft
vocabulary is the `draft_vocab_size` most frequent labels.

`out` gets the predictor (predictor_io layout), `train_log.jsonl` (loss and held-out top-1 by draft
depth per epoch) and `trainer_state.pt` (AdamW and schedule state, epoch, batches into the next) after
every epoch and every few minutes within one; `resume=True` continues from them.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from tqdm import tqdm
from transformers import DynamicCache

from ..draft.predictor import Eagle3Predictor, PredictorConfig, causal
from ..draft.predictor_io import load_predictor, save_predictor
from ..models.loading import embedding_fingerprint, token_rows

STATE = "trainer_state.pt"
LOG = "train_log.jsonl"
CACHE_BLOCK = 256  # sequences per features cache file
TOP_K = 32  # the base's likeliest next tokens kept per position (their probabilities are the distillation target)


@dataclass
class PredictorSettings:
    epochs: int = 10
    batch_size: int = 8  # sequences per optimizer step
    lr: float = 1e-3  # peak; linear warmup then cosine decay to 0 over all epochs
    warmup: float = 0.03  # share of the steps spent warming up
    clip: float = 0.5  # gradient norm clip (EAGLE's)
    ttt_steps: int = 3
    decay: float = 0.8  # loss weight of unrolled step s is decay ** s
    distill: bool = True  # against the base's next-token distribution (else its argmax labels)
    seed: int = 0


@dataclass
class _Batch:
    ids: torch.Tensor  # [B, L] prompt + answer, right-padded with 0
    layers: torch.Tensor  # [B, L, aux * hidden] the base's aux hidden states
    labels: torch.Tensor  # [B, L] the base's next token after each position; -100 where no loss
    top_ids: torch.Tensor  # [B, L, TOP_K] the base's likeliest next tokens
    top_probs: torch.Tensor  # [B, L, TOP_K] their probabilities (bf16; 0 in padding)

    def to(self, device: torch.device) -> _Batch:
        return _Batch(*(getattr(self, k).to(device) for k in ROWS))


ROWS = ("ids", "layers", "labels", "top_ids", "top_probs")  # the per-row fields, in _Batch's order


class _CachedRows:
    """What training reads from cached rows: a group of sequences as one padded batch, and the labels' counts."""

    def batch(self, group: list[int]) -> _Batch:
        return _collate([self.row(s) for s in group])

    def label_counts(self, vocab: int) -> torch.Tensor:
        return torch.bincount(self.labels[self.labels >= 0], minlength=vocab)[:vocab]


@dataclass
class Features(_CachedRows):
    """Teacher-forced rows of many sequences, concatenated ([N] ids and labels, [N, aux * hidden] bf16 layers,
    [N, TOP_K] top next tokens and probabilities)."""

    ids: torch.Tensor
    layers: torch.Tensor
    labels: torch.Tensor
    top_ids: torch.Tensor
    top_probs: torch.Tensor
    offsets: torch.Tensor  # [S + 1]: sequence s is rows offsets[s]:offsets[s + 1]

    def __len__(self) -> int:
        return self.offsets.numel() - 1

    def length(self, s: int) -> int:
        return int(self.offsets[s + 1] - self.offsets[s])

    def row(self, s: int) -> _Batch:
        lo, hi = int(self.offsets[s]), int(self.offsets[s + 1])
        return _Batch(*(getattr(self, k)[lo:hi] for k in ROWS))

    def save(self, path: Path) -> None:
        """Whole or not at all: a run stopped mid-write leaves no cut block that the next would take as cached."""
        tmp = path.with_name(path.name + ".tmp")
        save_file({k: v.contiguous() for k, v in asdict(self).items()}, str(tmp))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Features:
        """A cached block, mapped from its file rather than read into memory (file-backed pages the kernel may
        drop and read again): a grown corpus's features outgrow the memory (3.26M rows, ~12 GB)."""
        return cls(**_mapped_safetensors(path))


class FeatureSet(_CachedRows):
    """Several Features read as one sequence list, without concatenating their rows (a copy of all of them)."""

    def __init__(self, parts: list[Features]):
        self.parts = parts
        self._starts = [0]
        for part in parts:
            self._starts.append(self._starts[-1] + len(part))

    def __len__(self) -> int:
        return self._starts[-1]

    def _locate(self, s: int) -> tuple[Features, int]:
        part = bisect.bisect_right(self._starts, s) - 1
        return self.parts[part], s - self._starts[part]

    def length(self, s: int) -> int:
        part, local = self._locate(s)
        return part.length(local)

    def row(self, s: int) -> _Batch:
        part, local = self._locate(s)
        return part.row(local)

    @property
    def ids(self) -> torch.Tensor:
        return torch.cat([part.ids for part in self.parts])

    @property
    def labels(self) -> torch.Tensor:
        return torch.cat([part.labels for part in self.parts])


SAFETENSORS_DTYPES = {"BF16": torch.bfloat16, "F32": torch.float32, "I64": torch.int64, "I32": torch.int32}


def _mapped_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors over a copy-on-write mapping of it (safetensors' own loader reads them in)."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    data = np.memmap(path, dtype=np.uint8, mode="c", offset=8 + size)
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        start, end = entry["data_offsets"]
        flat = torch.from_numpy(data[start:end]) if end > start else torch.empty(0, dtype=torch.uint8)
        tensors[name] = flat.view(SAFETENSORS_DTYPES[entry["dtype"]]).reshape(entry["shape"])
    return tensors


def features_key(model, sequences: Sequence[tuple[list[int], list[int]]], aux_layers: list[int]) -> str:
    """A name for the cache of these sequences' features under this model (its embedding fingerprint)."""
    digest = hashlib.sha256(json.dumps([aux_layers, TOP_K, [list(p) + [-1] + list(a) for p, a in sequences]]).encode())
    return f"features-{embedding_fingerprint(model)}-{digest.hexdigest()[:12]}"


@torch.no_grad()
def teacher_force(
    model,
    sequences: Sequence[tuple[list[int], list[int]]],
    aux_layers: list[int],
    batch_size: int = 8,
    cache_dir: Path | None = None,
) -> Features | FeatureSet:
    """The base's aux-layer hidden states, next-token labels (on the answer) and top next tokens of every sequence.

    Sequences run in length-sorted, right-padded batches (causal attention: padding never reaches a real
    row). With `cache_dir`, each block of CACHE_BLOCK sequences is read from / written to a file named by
    `features_key`, so a grown corpus only computes its new blocks."""
    if cache_dir is not None and len(sequences) > CACHE_BLOCK:
        blocks = range(0, len(sequences), CACHE_BLOCK)
        return FeatureSet(
            [teacher_force(model, sequences[b : b + CACHE_BLOCK], aux_layers, batch_size, cache_dir) for b in blocks]
        )
    path = Path(cache_dir) / f"{features_key(model, sequences, aux_layers)}.safetensors" if cache_dir else None
    if path is not None and path.exists():
        return Features.load(path)
    order = sorted(range(len(sequences)), key=lambda s: len(sequences[s][0]) + len(sequences[s][1]))
    rows: dict[int, _Batch] = {}
    for lo in tqdm(range(0, len(order), batch_size), desc="teacher forcing", unit="batch"):
        group = order[lo : lo + batch_size]
        rows.update(zip(group, _force(model, [sequences[s] for s in group], aux_layers, "cpu")))
    ordered = [rows[s] for s in range(len(sequences))]
    lengths = torch.tensor([0] + [r.ids.numel() for r in ordered])
    features = Features(*(torch.cat([getattr(r, k) for r in ordered]) for k in ROWS), lengths.cumsum(0))
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        features.save(path)
        return Features.load(path)  # mapped: the rows computed here leave the memory
    return features


def _force(
    model, sequences: Sequence[tuple[list[int], list[int]]], aux_layers: list[int], device: torch.device | str
) -> list[_Batch]:
    """One right-padded forward of the base over `sequences`: each one's rows on `device`, padding cut off."""
    part = [list(prompt) + list(answer) for prompt, answer in sequences]
    length = max(map(len, part))
    ids = torch.zeros(len(part), length, dtype=torch.long)
    mask = torch.zeros(len(part), length, dtype=torch.long)
    for b, seq in enumerate(part):
        ids[b, : len(seq)], mask[b, : len(seq)] = torch.tensor(seq), 1
    out = model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device), output_hidden_states=True)
    ids, labels = ids.to(device), out.logits.argmax(-1).to(device)
    logits = out.logits.float()
    top = logits.topk(min(TOP_K, logits.shape[-1]), -1)  # the softmax's order: no full-vocabulary softmax copy
    top_probs = (top.values - logits.logsumexp(-1, keepdim=True)).exp().to(torch.bfloat16).to(device)
    top_ids = top.indices.to(torch.int32).to(device)
    layers = torch.cat([out.hidden_states[i] for i in aux_layers], -1).to(torch.bfloat16).to(device)
    rows = []
    for b, (prompt, _) in enumerate(sequences):
        n = len(part[b])
        label = labels[b, :n].clone()
        label[: len(prompt) - 1] = -100  # prompt positions: no loss
        label[-1] = -100  # after the last token the data has no next token to check against
        rows.append(_Batch(ids[b, :n], layers[b, :n], label, top_ids[b, :n], top_probs[b, :n]))
    return rows


class OnlineTeacher:
    """Training rows teacher-forced when a batch is asked for, never stored: a corpus whose features outgrow
    the disk (20M answer tokens would be ~110 GB of them) trains on a GPU, where a forward costs less than
    reading its rows back would. One base forward per training batch, every epoch."""

    def __init__(self, model, sequences: Sequence[tuple[list[int], list[int]]], aux_layers: list[int]):
        self.model, self.sequences, self.aux_layers = model, sequences, aux_layers

    def __len__(self) -> int:
        return len(self.sequences)

    def length(self, s: int) -> int:
        return len(self.sequences[s][0]) + len(self.sequences[s][1])

    @torch.no_grad()
    def batch(self, group: list[int]) -> _Batch:
        # the rows stay on the base's device: no round trip through host memory
        return _collate(_force(self.model, [self.sequences[s] for s in group], self.aux_layers, self.model.device))

    def label_counts(self, vocab: int) -> torch.Tensor:
        """The answers' tokens stand for the labels (the same tokens where the answer is greedy and made by
        this copy of the base): counting the labels would take a forward over the whole corpus."""
        answers = [torch.tensor(answer, dtype=torch.long) for _, answer in self.sequences]
        return torch.bincount(torch.cat(answers), minlength=vocab)[:vocab]


TeacherForced = Features | FeatureSet | OnlineTeacher  # what training reads: one block, many read as one, or none


def _collate(rows: list[_Batch]) -> _Batch:
    """Right-padded: ids 0, no label, no probability."""
    length = max(r.ids.numel() for r in rows)
    padded = []
    for k in ROWS:
        first = getattr(rows[0], k)
        fill = -100 if k == "labels" else 0
        batch = torch.full((len(rows), length, *first.shape[1:]), fill, dtype=first.dtype, device=first.device)
        for b, r in enumerate(rows):
            batch[b, : r.ids.numel()] = getattr(r, k)
        padded.append(batch)
    return _Batch(*padded)


def _ahead(rows: torch.Tensor, s: int, fill: int = 0) -> torch.Tensor:
    """[B, L, ...] rows 1 + s onwards, padded at the end back to T = L - 1 rows: unrolled step s's row i reads row i + 1 + s."""
    return torch.cat([rows[:, 1 + s :], rows.new_full((rows.shape[0], s, *rows.shape[2:]), fill)], 1)


def unroll(predictor: Eagle3Predictor, batch: _Batch, steps: int) -> list[torch.Tensor]:
    """Draft logits [B, T, draft_vocab] of each unrolled step; T = L - 1.

    Row i of step s sits at position i + 1 + s, holds token ids[i + 1 + s] and predicts the token after it."""
    ids, device = batch.ids, batch.ids.device
    b, t = ids.shape[0], ids.shape[1] - 1
    features = predictor.fuse(batch.layers[:, :t])  # row i reads the target's features at position i
    cache, results = DynamicCache(), []
    blocks = [causal(t).to(device)]
    for s in range(steps):
        tokens = _ahead(ids, s)
        positions = (torch.arange(t, device=device) + 1 + s).expand(b, t)
        allowed = torch.cat(blocks, 1)
        mask = torch.zeros(1, 1, t, allowed.shape[1], device=device)
        mask.masked_fill_(~allowed, torch.finfo(torch.float32).min)
        logits, features = predictor(features, tokens, positions, mask, cache)
        results.append(logits)
        # the next step's row i also sees this step's row i
        blocks.append(torch.eye(t, dtype=torch.bool, device=device))
    return results


def accuracy(predictor: Eagle3Predictor, data: TeacherForced, steps: int = 1, batch_size: int = 8) -> list[float]:
    """Top-1 accuracy of each unrolled step against the base's own next tokens (out-of-vocabulary count as wrong).

    Step s is scored given the true tokens before it, as the tree's first branch is when the draft so far
    was right: it is the chance that depth s + 1 is accepted given depth s was."""
    hits, counts = [0] * steps, [0] * steps
    with torch.no_grad():
        for group in _groups(data, batch_size, None):
            batch = data.batch(group).to(predictor.t2d.device)
            for s, logits in enumerate(unroll(predictor, batch, steps)):
                labels = _ahead(batch.labels, s, -100)
                keep = labels >= 0
                hits[s] += int((predictor.draft_ids[logits.argmax(-1)] == labels)[keep].sum())
                counts[s] += int(keep.sum())
    return [h / max(c, 1) for h, c in zip(hits, counts)]


def step_loss(
    predictor: Eagle3Predictor, logits: torch.Tensor, batch: _Batch, s: int, distill: bool
) -> torch.Tensor | None:
    """Unrolled step s's loss over its answer rows (None when it has none): cross entropy against the base's
    top next tokens, renormalised over the draft vocabulary (`distill`), or against its argmax label."""
    labels = _ahead(batch.labels, s, -100)
    if not distill:
        target = predictor.to_draft(labels.clamp(min=0)).masked_fill_(labels < 0, -100)
        return (
            F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=-100) if (target >= 0).any() else None
        )
    draft = predictor.to_draft(_ahead(batch.top_ids, s).long())
    probs = _ahead(batch.top_probs, s).float().masked_fill_(draft < 0, 0.0)
    mass = probs.sum(-1)
    rows = (labels >= 0) & (mass > 0)
    if not rows.any():
        return None
    log_q = logits.log_softmax(-1).gather(-1, draft.clamp(min=0))
    return -((probs * log_q).sum(-1)[rows] / mass[rows]).mean()


def _groups(data: TeacherForced, batch_size: int, generator: torch.Generator | None) -> list[list[int]]:
    """Sequence indices in batches of similar length (little padding), in random order when a generator is given."""
    order = sorted(range(len(data)), key=data.length)
    groups = [order[lo : lo + batch_size] for lo in range(0, len(order), batch_size)]
    if generator is not None:
        groups = [groups[i] for i in torch.randperm(len(groups), generator=generator).tolist()]
    return groups


def _draft_vocab(data: TeacherForced, vocab: int, size: int) -> torch.Tensor:
    """The `size` most frequent labels (ties and unseen tokens by id)."""
    return data.label_counts(vocab).float().topk(size, sorted=False).indices


def _schedule(settings: PredictorSettings, total: int):
    warm = max(1, round(settings.warmup * total))
    return lambda step: min(1.0, (step + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, step / max(total, 1))))


@dataclass
class _Progress:
    """How far into the epoch in progress a run got: a checkpoint between epochs has batches == 0."""

    batches: int = 0
    loss_sum: float = 0.0  # summed over the batches that had answer rows
    loss_batches: int = 0
    seconds: float = 0.0


def train_predictor(
    model,
    data: TeacherForced,
    *,
    held_out: TeacherForced | None = None,
    aux_layers: list[int] | None = None,
    draft_vocab_size: int | None = None,
    intermediate_size: int | None = None,
    settings: PredictorSettings | None = None,
    out: Path | str | None = None,
    resume: bool = False,
    name: str = "",
    checkpoint_minutes: float = 10.0,
    max_minutes: float = 0.0,
) -> tuple[Eagle3Predictor, list[dict]]:
    """Train a predictor for the base `model` on teacher-forced `data`; returns it and the per-epoch log.

    `aux_layers` must be the ones `data` was computed with (the default: default_aux_layers). The predictor
    trains on the base's device; cached rows travel there a batch at a time. With `out`, a checkpoint lands
    after every epoch and every `checkpoint_minutes` within one; after `max_minutes` (0: no limit) the run
    checkpoints and returns early (the log then lacks the unfinished epoch). `resume` goes on from the last
    checkpoint, mid-epoch included, to the weights an uninterrupted run ends with."""
    settings = settings or PredictorSettings()
    torch.manual_seed(settings.seed)
    out = Path(out) if out is not None else None
    if resume and out is not None and (out / STATE).exists():
        predictor = load_predictor(out, model).requires_grad_(True).train()
        state = torch.load(out / STATE, weights_only=True)  # tensors and plain values only: no pickled code
    else:
        config = PredictorConfig.for_base(model, aux_layers, draft_vocab_size, intermediate_size, name)
        predictor = Eagle3Predictor(config, token_rows(model)).train()
        predictor.set_vocab(_draft_vocab(data, predictor.t2d.numel(), predictor.config.draft_vocab_size))
        state = None
    predictor.to(model.device)
    steps_per_epoch = -(-len(data) // settings.batch_size)
    optimizer = torch.optim.AdamW(predictor.parameters(), lr=settings.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(settings, settings.epochs * steps_per_epoch))
    log: list[dict] = state["log"] if state else []
    if state:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
    first = state["epoch"] + 1 if state else 0
    progress = _Progress(**state.get("progress", {})) if state else _Progress()
    generator = torch.Generator().manual_seed(settings.seed)
    for _ in range(first):  # the batch order of the epochs already done, so a resumed run sees the same data
        torch.randperm(steps_per_epoch, generator=generator)

    def checkpoint(epochs_done: int) -> None:
        if out is None:
            return
        predictor.config.training = {
            **asdict(settings),
            "sequences": len(data),
            "epochs_done": epochs_done,
            "batches_done_in_next_epoch": progress.batches,
        }
        save_predictor(predictor, out)
        trainer = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "log": log}
        torch.save({**trainer, "epoch": epochs_done - 1, "progress": asdict(progress)}, out / STATE)
        (out / LOG).write_text("".join(json.dumps(e) + "\n" for e in log))

    began = saved = time.perf_counter()
    for epoch in range(first, settings.epochs):
        groups = _groups(data, settings.batch_size, generator)
        start = time.perf_counter() - progress.seconds
        bar = tqdm(groups[progress.batches :], initial=progress.batches, total=len(groups), desc=f"epoch {epoch}")
        for group in bar:
            loss = _train_step(predictor, optimizer, data.batch(group).to(model.device), settings)
            scheduler.step()
            progress.batches += 1
            if loss is not None:
                progress.loss_sum, progress.loss_batches = progress.loss_sum + loss, progress.loss_batches + 1
                bar.set_postfix(loss=f"{progress.loss_sum / progress.loss_batches:.3f}")
            now = time.perf_counter()
            stopping = max_minutes > 0 and now - began > max_minutes * 60
            if progress.batches < len(groups) and (stopping or now - saved > checkpoint_minutes * 60):
                progress.seconds, saved = now - start, now
                checkpoint(epoch)
                if stopping:
                    bar.close()
                    return predictor.eval(), log
        entry = {
            "epoch": epoch,
            "loss": progress.loss_sum / max(progress.loss_batches, 1),
            "seconds": round(time.perf_counter() - start, 1),
        }
        if held_out is not None and len(held_out):
            entry["held_out_top1"] = accuracy(predictor.eval(), held_out, settings.ttt_steps)
            predictor.train()
        log.append(entry)
        print(json.dumps(entry), flush=True)
        progress, saved = _Progress(), time.perf_counter()
        checkpoint(epoch + 1)
        if max_minutes > 0 and saved - began > max_minutes * 60:
            break
    return predictor.eval(), log


def _train_step(
    predictor: Eagle3Predictor, optimizer: torch.optim.Optimizer, batch: _Batch, settings: PredictorSettings
) -> float | None:
    """One optimizer step on the batch's unrolled losses; its loss, or None when it has no answer row."""
    unrolled = unroll(predictor, batch, settings.ttt_steps)
    losses = [step_loss(predictor, logits, batch, s, settings.distill) for s, logits in enumerate(unrolled)]
    loss = sum(settings.decay**s * step for s, step in enumerate(losses) if step is not None)
    if not torch.is_tensor(loss):
        return None
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(predictor.parameters(), settings.clip)
    optimizer.step()
    return loss.item()

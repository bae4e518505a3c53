"""Head training end to end on a tiny random Llama (seconds), resume, the CLI, and lossless sampling with heads."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from lopa.api import Engine
from lopa.cli import main
from lopa.config import DraftConfig
from lopa.decode.window import CostModel
from lopa.draft.heads import HeadsConfig, base_identity, load_heads
from lopa.models.loading import LoadedModel, load_model, resolve_model_dir
from lopa.train.data import IGNORE, build_data
from lopa.train.trainer import TrainSettings, _local_targets, batch_loss, train_heads

from .test_sampling import ALPHA, homogeneity_p

VOCAB = 96


def _tiny_llama(path: Path, vocab: int) -> LoadedModel:
    """A 2-layer random Llama saved with the default model's tokenizer; large init gives peaked logits."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=True, initializer_range=0.4,
        eos_token_id=2, bos_token_id=1, pad_token_id=2,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    AutoTokenizer.from_pretrained(resolve_model_dir(None)[1]).save_pretrained(path)
    return load_model(str(path))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> LoadedModel:
    """Only the first VOCAB token ids: distributions peaked enough for a sampling test."""
    return _tiny_llama(tmp_path_factory.mktemp("tiny-llama"), VOCAB)


def _prompts(n: int, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, VOCAB, (int(torch.randint(3, 12, (1,), generator=gen)),), generator=gen).tolist() for _ in range(n)]


@pytest.fixture(scope="module")
def tiny_data(tiny, tmp_path_factory):
    cache = tmp_path_factory.mktemp("tiny-data")
    return build_data(tiny.model, _prompts(48), cache, max_new_tokens=24, batch_size=16, num_targets=3)


@pytest.fixture(scope="module")
def tiny_heads_dir(tiny, tiny_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny-heads")
    config = HeadsConfig(num_heads=3, num_layers=1, **base_identity(tiny))
    train_heads(tiny, tiny_data, config, VOCAB, out, TrainSettings(steps=150, batch_size=64, lr=3e-3, eval_every=50))
    return out


def test_data_targets_are_the_models_own_continuation(tiny, tiny_data):
    row = int(torch.nonzero(tiny_data.targets[:, 2] != IGNORE)[0, 0])
    seq = tiny_data.sequence == tiny_data.sequence[row]
    # within one answer, rows are consecutive: root of row r+1 is head 0's target at row r
    first = int(torch.nonzero(seq)[0, 0])
    assert torch.equal(tiny_data.roots[first + 1 : first + 3], tiny_data.targets[first, :2])
    # the base model's next-token prediction from a row's hidden state is that row's root
    logits = tiny.model.lm_head(tiny_data.hidden[row])
    assert int(logits.argmax()) == int(tiny_data.roots[row])


def test_training_lowers_the_loss_and_saves_loadable_heads(tiny, tiny_data, tiny_heads_dir):
    heads = load_heads(tiny_heads_dir, tiny)
    fresh = type(heads)(heads.config, tiny.model.get_output_embeddings().weight, heads.vocab_ids)
    targets = _local_targets(tiny_data.targets, heads.vocab_ids, VOCAB)
    settings = TrainSettings()
    with torch.no_grad():
        before = batch_loss(fresh, tiny_data, targets, settings).item()
        after = batch_loss(heads, tiny_data, targets, settings).item()
    assert after < 0.8 * before
    log = [json.loads(line) for line in (tiny_heads_dir / "train_log.jsonl").read_text().splitlines()]
    evals = [r for r in log if "held_out_top1" in r]
    assert len(evals) == 3 and len(evals[-1]["held_out_top1"]) == 3 and len(evals[-1]["held_out_top5"]) == 3
    assert all(t5 >= t1 for t1, t5 in zip(evals[-1]["held_out_top1"], evals[-1]["held_out_top5"]))


def test_resume_continues_from_the_checkpoint(tiny, tiny_data, tmp_path):
    config = HeadsConfig(num_heads=2, num_layers=0, **base_identity(tiny))
    settings = TrainSettings(steps=20, batch_size=32, eval_every=10, checkpoint_every=10)
    train_heads(tiny, tiny_data, config, VOCAB, tmp_path, settings)
    settings.steps = 30
    train_heads(tiny, tiny_data, config, VOCAB, tmp_path, settings, resume=True)
    progress = json.loads((tmp_path / "checkpoint" / "progress.json").read_text())
    assert progress["step"] == 30
    steps = [json.loads(line)["step"] for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[0] == 10 and steps[-1] == 30  # continued, not restarted


def test_gradient_checkpointing_gives_the_same_gradients(tiny, tiny_data, tiny_heads_dir):
    heads = load_heads(tiny_heads_dir, tiny).requires_grad_(True)
    rows = torch.arange(32)
    batch, targets = tiny_data.subset(rows), _local_targets(tiny_data.targets[rows], heads.vocab_ids, VOCAB)
    grads = []
    for flag in (False, True):
        heads.zero_grad()
        batch_loss(heads, batch, targets, TrainSettings(grad_checkpoint=flag)).backward()
        grads.append(torch.cat([p.grad.flatten() for p in heads.heads.parameters()]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_cli_train_heads_and_info(tmp_path, capsys):
    """Chat-templated text prompts need the whole vocabulary: a full-vocab tiny model."""
    tiny = _tiny_llama(tmp_path / "model", len(AutoTokenizer.from_pretrained(resolve_model_dir(None)[1])))
    out = tmp_path / "heads"
    args = ["train-heads", "--model", str(tiny.path), "--out", str(out), "--data-dir", str(tmp_path / "data"),
            "--prompts", "8", "--max-new-tokens", "6", "--gen-batch", "8", "--num-heads", "2", "--steps", "4",
            "--batch-size", "16", "--eval-every", "2"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["out"] == str(out)
    assert main(["info", "--model", str(tiny.path), "--heads", str(out)]) == 0
    text = capsys.readouterr().out
    assert "heads:        2" in text and "% of the base" in text


def _sampled(engine: Engine, method: str, seeds: range) -> tuple[list[Counter], int]:
    """Per position, a Counter of sampled tokens; also how many tokens the heads drafted and got accepted."""
    counts = [Counter() for _ in range(6)]
    heads_hits = 0
    for seed in seeds:
        result = engine.generate([5, 17, 33, 8], max_new_tokens=6, temperature=1.0, seed=seed, method=method)
        for pos, tok in enumerate(result.token_ids):
            counts[pos][tok] += 1
        heads_hits += sum(s == "heads" for step in result.stats.steps for s in step["sources"])
    return counts, heads_hits


def test_sampling_stays_lossless_with_heads(tiny, tiny_heads_dir):
    """Chi-square homogeneity per position (the core sampling test's helper): lopa with trained heads vs plain."""
    engine = Engine(tiny, DraftConfig(dynamic_window=False), heads=tiny_heads_dir)  # always draft
    engine._cost = CostModel.flat()  # no latency profile needed without the dynamic window
    lopa, hits = _sampled(engine, "lopa", range(600))
    plain, _ = _sampled(engine, "ar", range(10_000, 10_600))
    assert hits > 50  # the heads really drafted accepted tokens
    for position, (a, b) in enumerate(zip(lopa, plain)):
        assert homogeneity_p(a, b) > ALPHA, f"position {position}"


def test_heads_compute_in_fp32_on_a_bf16_base(tiny, tiny_heads_dir):
    half = load_model(str(tiny.path), dtype=torch.bfloat16)
    assert half.fingerprint != tiny.fingerprint  # the fingerprint sees the rounding; the heads file lists it
    heads = load_heads(tiny_heads_dir, half)
    hidden = half.model(torch.tensor([[5, 17, 33]]), output_hidden_states=True).hidden_states[-1][0, -1]
    assert hidden.dtype == torch.bfloat16
    probs, _ = heads.top_k(hidden, 9, 4)
    assert probs.dtype == torch.float32 and heads.projection.dtype == torch.float32

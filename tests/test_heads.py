"""Lookahead heads on the default model (the shared `engine` fixture): file format, refusals, drafter, lossless greedy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from lopa.api import Engine
from lopa.draft.base import StepFeedback
from lopa.draft.heads import (
    CONFIG,
    DEFAULT_HEADS_DIR,
    WEIGHTS,
    HeadsConfig,
    HeadsDrafter,
    LookaheadHeads,
    base_identity,
    best_paths,
    heads_for,
    load_heads,
    save_heads,
)
from lopa.draft.tree import build_tree, TreeLimits
from lopa.errors import ModelLoadError

PROMPTS = [
    "Write a short poem about the sea.",
    "Explain how a refrigerator works.",
    "List three benefits of regular exercise.",
    "What is the capital of Japan, and what is it known for?",
    "Write a Python function that returns the square of a number.",
    "Give me a recipe for pancakes.",
    "Summarize the plot of Romeo and Juliet in two sentences.",
    "Translate 'good morning, how are you?' into Spanish.",
    "What is 17 multiplied by 23?",
    "Describe a sunset to someone who cannot see.",
    "Why is the sky blue?",
    "Write a haiku about autumn leaves.",
    "What are the main causes of the First World War?",
    "How do I reverse a list in Python?",
    "Tell me a fun fact about octopuses.",
    "Write a polite email declining a meeting invitation.",
    "What is the difference between weather and climate?",
    "Explain recursion to a beginner programmer.",
    "Suggest a name for a coffee shop and explain why.",
    "What should I pack for a weekend camping trip?",
]


@pytest.fixture(scope="module")
def heads_dir(engine, tmp_path_factory) -> Path:
    """Untrained (identity-initialised) heads saved for the default model."""
    out = tmp_path_factory.mktemp("heads")
    config = HeadsConfig(num_heads=3, num_layers=1, **base_identity(engine.loaded))
    vocab = torch.arange(0, engine.loaded.model.config.vocab_size, 7)
    save_heads(LookaheadHeads(config, engine.model.get_output_embeddings().weight, vocab), out)
    return out


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_shipped_heads_load_by_default_and_stay_under_5_percent(engine):
    assert (DEFAULT_HEADS_DIR / CONFIG).exists(), "the default model's trained heads are shipped"
    assert engine.heads is not None
    summary = engine.heads.summary()
    assert summary["percent_of_base"] < 5.0
    assert summary["parameters"] == sum(p.numel() for p in engine.heads.parameters())
    assert all(p.dtype == torch.float32 for p in engine.heads.parameters())


def test_heads_off(engine):
    assert heads_for(engine.loaded, False) is None
    assert heads_for(engine.loaded, None, enabled=False) is None
    assert heads_for(engine.loaded, None) is not None


def test_round_trip_gives_the_same_predictions(engine, heads_dir):
    heads = load_heads(heads_dir, engine.loaded)
    again = load_heads(heads_dir, engine.loaded)
    hidden = torch.randn(engine.model.config.hidden_size)
    probs, ids = heads.top_k(hidden, 42, 4)
    assert torch.equal(ids, again.top_k(hidden, 42, 4)[1])
    assert probs.shape == (3, 4) and probs.dtype == torch.float32
    assert bool((probs[:, :-1] >= probs[:, 1:]).all())
    assert bool(torch.isin(ids, heads.vocab_ids).all())


def test_missing_or_corrupt_files_are_refused(engine, heads_dir, tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_heads(tmp_path / "nowhere", engine.loaded)
    broken = _copy(heads_dir, tmp_path / "truncated")
    data = (broken / WEIGHTS).read_bytes()
    (broken / WEIGHTS).write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="truncated or corrupt"):
        load_heads(broken, engine.loaded)
    bad_json = _copy(heads_dir, tmp_path / "json")
    (bad_json / CONFIG).write_text("{not json")
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        load_heads(bad_json, engine.loaded)
    no_weights = _copy(heads_dir, tmp_path / "noweights")
    (no_weights / WEIGHTS).unlink()
    with pytest.raises(ModelLoadError, match="has no"):
        load_heads(no_weights, engine.loaded)


def test_wrong_shapes_are_refused(engine, heads_dir, tmp_path):
    shapes = _copy(heads_dir, tmp_path / "shapes")
    tensors = load_file(str(shapes / WEIGHTS))
    tensors["heads.0.inp.weight"] = tensors["heads.0.inp.weight"][:, :100].contiguous()
    save_file(tensors, str(shapes / WEIGHTS))
    with pytest.raises(ModelLoadError, match="does not match its config"):
        load_heads(shapes, engine.loaded)
    layers = _copy(heads_dir, tmp_path / "layers")
    config = json.loads((layers / CONFIG).read_text())
    config["num_layers"] = 2
    (layers / CONFIG).write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="does not match its config"):
        load_heads(layers, engine.loaded)


@pytest.mark.parametrize("key, value", [("fingerprint", "0123456789abcdef"), ("hidden_size", 1024), ("architecture", "GPT2LMHeadModel")])
def test_heads_for_another_model_are_refused(engine, heads_dir, tmp_path, key, value):
    other = _copy(heads_dir, tmp_path / "other")
    config = json.loads((other / CONFIG).read_text())
    config[key] = value
    (other / CONFIG).write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=f"trained for .*{key}"):
        load_heads(other, engine.loaded)
    with pytest.raises(ModelLoadError):
        Engine(engine.loaded, heads=other)


def test_best_paths_are_the_leaves_of_the_most_probable_tree():
    probs = [[0.6, 0.3], [0.85, 0.1], [0.55, 0.35]]  # no two paths tie
    every = [(a,) for a in range(2)] + [(a, b) for a in range(2) for b in range(2)]
    every += [(a, b, c) for a in range(2) for b in range(2) for c in range(2)]
    score = {n: torch.tensor([probs[d][j] for d, j in enumerate(n)]).prod().item() for n in every}
    for limit in (1, 3, 4, 6):
        top = sorted(every, key=lambda n: -score[n])[:limit]
        leaves = {n for n in top if not any(m[: len(n)] == n and m != n for m in top)}
        assert set(best_paths(probs, limit)) == leaves


def test_drafter_proposes_from_the_last_accepted_hidden_state(engine, heads_dir):
    heads = load_heads(heads_dir, engine.loaded)
    drafter = HeadsDrafter(heads, top_k=3, max_nodes=5)
    drafter.start([1, 2, 3])
    assert drafter.propose([1, 2, 3], 8) == []  # no verification step seen yet
    tree = build_tree(3, [], TreeLimits(4, 8))
    hidden = torch.randn(1, engine.model.config.hidden_size)
    drafter.observe(StepFeedback([1, 2, 3], tree, [4], [0], [4], hidden))
    proposals = drafter.propose([1, 2, 3, 4], 2)
    probs, ids = heads.top_k(hidden[0], 4, 3)
    assert all(p.source == "heads" and 1 <= len(p.tokens) <= 2 for p in proposals)
    nodes = {tuple(p.tokens[:d]) for p in proposals for d in range(1, len(p.tokens) + 1)}
    assert len(nodes) == 5 and (int(ids[0, 0]),) in nodes
    for p in proposals:
        for d, (tok, conf) in enumerate(zip(p.tokens, p.confidences)):
            j = ids[d].tolist().index(tok)
            assert conf == pytest.approx(float(probs[d, j])) and 0 < conf <= 1


@pytest.mark.slow
def test_greedy_with_heads_is_identical_to_plain_decoding(engine):
    assert engine.heads is not None
    drafted_by_heads = 0
    for prompt in PROMPTS:
        plain = engine.generate(prompt, max_new_tokens=32, method="ar")
        fast = engine.generate(prompt, max_new_tokens=32)
        assert fast.token_ids == plain.token_ids, prompt
        drafted_by_heads += sum(s == "heads" for step in fast.stats.steps for s in step["sources"])
    assert drafted_by_heads > 0

"""A predictor trained on a tiny random Llama's own answers: seeded sampling with it drafting equals seeded plain
decoding, and it computes in fp32 on a bf16 base."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lopa.api import Engine
from lopa.config import DraftConfig
from lopa.decode.cost import CostModel
from lopa.draft.predictor import default_aux_layers
from lopa.draft.predictor_io import load_predictor
from lopa.models.loading import LoadedModel, load_model
from lopa.train.predictor import PredictorSettings, teacher_force, train_predictor

from .conftest import saved_tiny_llama

VOCAB = 96
PROMPT = [5, 17, 33, 8]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> LoadedModel:
    """Only the first VOCAB token ids: distributions peaked enough for the predictor to learn them."""
    return saved_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), VOCAB)


@pytest.fixture(scope="module")
def tiny_predictor_dir(tiny, tmp_path_factory) -> Path:
    """Trained on the tiny model's sampled answers (temperature 1: what the sampling test decodes)."""
    engine = Engine(tiny, predictor=False)
    gen = torch.Generator().manual_seed(0)
    sequences = []
    for seed in range(64):
        prompt = torch.randint(3, VOCAB, (int(torch.randint(3, 8, (1,), generator=gen)),), generator=gen).tolist()
        answer = engine.generate(prompt, max_new_tokens=16, temperature=1.0, seed=seed, method="ar").token_ids
        sequences.append((prompt, answer))
    aux = default_aux_layers(tiny.model.config.num_hidden_layers)
    out = tmp_path_factory.mktemp("tiny-predictor")
    settings = PredictorSettings(epochs=20, batch_size=8, lr=3e-3, ttt_steps=2)
    train_predictor(
        tiny.model,
        teacher_force(tiny.model, sequences, aux),
        aux_layers=aux,
        draft_vocab_size=64,
        intermediate_size=64,
        settings=settings,
        out=out,
    )
    return out


def test_seeded_sampling_with_the_predictor_equals_plain(tiny, tiny_predictor_dir):
    """The trained predictor drafting at every step, 60 seeds: every answer is seeded plain decoding's, and the
    predictor's drafts were accepted (so the equality covers its trees)."""
    only = DraftConfig(use_prompt_lookup=False, use_ngram_pool=False, dynamic_window=False)  # always draft
    engine = Engine(tiny, only, predictor=tiny_predictor_dir)
    engine.cost = CostModel.flat()  # no latency profile needed without the dynamic window
    hits = 0
    for seed in range(60):
        lopa = engine.generate(PROMPT, max_new_tokens=12, temperature=1.0, seed=seed)
        assert (
            lopa.token_ids
            == engine.generate(PROMPT, max_new_tokens=12, temperature=1.0, seed=seed, method="ar").token_ids
        )
        hits += sum(s == "predictor" for step in lopa.stats.steps for s in step["sources"])
    assert hits > 60, hits  # the predictor really drafted accepted tokens


def test_predictor_computes_in_fp32_on_a_bf16_base(tiny, tiny_predictor_dir):
    half = load_model(str(tiny.path), dtype=torch.bfloat16)
    assert half.fingerprint != tiny.fingerprint  # the fingerprint sees the rounding; the file lists it
    predictor = load_predictor(tiny_predictor_dir, half.model)
    assert all(p.dtype == torch.float32 for p in predictor.parameters())
    assert predictor.token_embedding(torch.tensor([1, 2])).dtype == torch.float32
    engine = Engine(half, DraftConfig(dynamic_window=False), predictor=predictor)
    engine.cost = CostModel.flat()
    drafted = engine.generate(PROMPT, max_new_tokens=24)  # bf16 rounds a tree and a single row apart: no equality here
    sources = [s for step in drafted.stats.steps for s in step["sources"]]
    assert len(drafted.token_ids) == 24 and "predictor" in sources

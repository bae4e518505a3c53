"""A predictor trained on a tiny random Llama's own answers: sampling with it stays exact in distribution, and it
computes in fp32 on a bf16 base."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from lopa.api import Engine
from lopa.config import DraftConfig
from lopa.decode.cost import CostModel
from lopa.draft.predictor import default_aux_layers
from lopa.draft.predictor_io import load_predictor
from lopa.models.loading import LoadedModel, load_model, resolve_model_dir
from lopa.train.predictor import PredictorSettings, teacher_force, train_predictor

from .test_sampling import ALPHA, homogeneity_p

VOCAB = 96
PROMPT = [5, 17, 33, 8]


def _tiny_llama(path: Path, vocab: int) -> LoadedModel:
    """A 4-layer random Llama saved with the default model's tokenizer; large init gives peaked logits."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
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
    train_predictor(tiny.model, teacher_force(tiny.model, sequences, aux), aux_layers=aux, draft_vocab_size=64,
                    intermediate_size=64, settings=settings, out=out)
    return out


def _sampled(engine: Engine, method: str, seeds: range) -> tuple[list[Counter], int]:
    """Per position, a Counter of sampled tokens; also how many tokens the predictor drafted and got accepted."""
    counts = [Counter() for _ in range(6)]
    hits = 0
    for seed in seeds:
        result = engine.generate(PROMPT, max_new_tokens=6, temperature=1.0, seed=seed, method=method)
        for pos, tok in enumerate(result.token_ids):
            counts[pos][tok] += 1
        hits += sum(s == "predictor" for step in result.stats.steps for s in step["sources"])
    return counts, hits


def test_sampling_stays_exact_with_the_predictor(tiny, tiny_predictor_dir):
    """Chi-square homogeneity per position (test_sampling's helper and its alpha; the negative control of the
    acceptance rule is test_sampling's): lopa with the trained predictor drafting vs plain sampling."""
    only = DraftConfig(use_prompt_lookup=False, use_ngram_pool=False, dynamic_window=False)  # always draft
    engine = Engine(tiny, only, predictor=tiny_predictor_dir)
    engine.cost = CostModel.flat()  # no latency profile needed without the dynamic window
    lopa, hits = _sampled(engine, "lopa", range(600))
    plain, _ = _sampled(engine, "ar", range(10_000, 10_600))
    assert hits > 100, hits  # the predictor really drafted accepted tokens (178 when written)
    for position, (a, b) in enumerate(zip(lopa, plain)):
        assert homogeneity_p(a, b) > ALPHA, f"position {position}"


def test_predictor_computes_in_fp32_on_a_bf16_base(tiny, tiny_predictor_dir):
    half = load_model(str(tiny.path), dtype=torch.bfloat16)
    assert half.fingerprint != tiny.fingerprint  # the fingerprint sees the rounding; the file lists it
    predictor = load_predictor(tiny_predictor_dir, half.model)
    assert all(p.dtype == torch.float32 for p in predictor.parameters()) and predictor.embedding.dtype == torch.float32
    engine = Engine(half, DraftConfig(dynamic_window=False), predictor=predictor)
    engine.cost = CostModel.flat()
    drafted = engine.generate(PROMPT, max_new_tokens=24)  # bf16 rounds a tree and a single row apart: no equality here
    sources = [s for step in drafted.stats.steps for s in step["sources"]]
    assert len(drafted.token_ids) == 24 and "predictor" in sources

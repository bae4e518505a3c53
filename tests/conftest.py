"""Shared fixtures: the real default model (loaded once) and a tiny random Llama for statistics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from lopa import Engine

SPEC_BENCH = Path(__file__).resolve().parents[2] / "shared" / "data" / "spec_bench_dev.jsonl"


@pytest.fixture(scope="session")
def engine() -> Engine:
    return Engine.from_pretrained()


@pytest.fixture(scope="session")
def spec_bench() -> list[dict]:
    if not SPEC_BENCH.exists():
        pytest.skip(f"{SPEC_BENCH} is not beside the checkout")
    return [json.loads(line) for line in SPEC_BENCH.read_text().splitlines() if line.strip()]


def tiny_llama(vocab: int = 32, seed: int = 0) -> LlamaForCausalLM:
    """A 2-layer random Llama with a small vocabulary: fast enough for thousands of samples."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # sharpen the output so sampling has structure to get right
        model.lm_head.weight.mul_(40.0)
    return model

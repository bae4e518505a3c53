"""Shared fixtures: the default model loaded once for the whole run, an unmodified transformers copy
of it as the reference, and a tiny random Llama for statistics."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from lopa import DraftConfig, Engine
from lopa.models.loading import LoadedModel, load_model, resolve_model_dir

if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest -n N: N workers share the cores, one thread each (and their servers)
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

PROFILE_ROWS = 4  # the latency profile's batch rows the tests measure (larger batches: the cost model extrapolates)
TIE = 1e-4  # a greedy divergence is allowed only where the reference's top-2 logits are this close


@pytest.fixture(scope="session")
def engine() -> Engine:
    """The default model, drafting at every step: tests assert what drafts do, and where the lookahead gate
    would decode plainly depends on measured times (tests/test_gate.py tests the gate)."""
    engine = Engine.from_pretrained(draft=DraftConfig(always_draft=True), profile=False)
    engine.profile(max_rows=PROFILE_ROWS)
    return engine


@pytest.fixture(scope="session")
def defaults(engine: Engine) -> Engine:
    """The default model with lopa's real defaults (lookahead gate, drafter pricing, dynamic window), sharing the
    session engine's weights and its latency profile (from the cache)."""
    defaults = Engine(engine.loaded)
    defaults.profile(max_rows=PROFILE_ROWS)
    return defaults


@dataclass
class StockReference:
    """Plain transformers: the model and tokenizer as `from_pretrained` gives them, no lopa code.

    Its `generate(do_sample=False)` is what every greedy lopa output must equal."""

    model: torch.nn.Module
    tokenizer: object
    _runs: dict = field(default_factory=dict)

    def prompt_ids(self, text: str) -> list[int]:
        """The chat template's ids where the model has one (as lopa applies it), else the raw text's."""
        if not getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer(text).input_ids
        messages = [{"role": "user", "content": text}]
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False
        )

    @classmethod
    def of(cls, engine: Engine) -> StockReference:
        """Load the engine's model again, as stock transformers would."""
        path = engine.loaded.path
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()
        return cls(model, AutoTokenizer.from_pretrained(path))

    def greedy(self, text: str, new_tokens: int) -> tuple[list[int], list[int], list[torch.Tensor]]:
        """(prompt ids, generated ids, the logits of each step); memoised across tests."""
        key = (text, new_tokens)
        if key not in self._runs:
            ids = self.prompt_ids(text)
            out = self.model.generate(
                torch.tensor([ids]),
                max_new_tokens=new_tokens,
                do_sample=False,
                output_logits=True,
                return_dict_in_generate=True,
            )
            self._runs[key] = (ids, out.sequences[0, len(ids) :].tolist(), [step[0] for step in out.logits])
        return self._runs[key]

    def divergence(self, text: str, got: list[int], new_tokens: int) -> str | None:
        """None if `got` is the reference's output; "tie@N" at an allowed near-tie; else a description."""
        _, want, logits = self.greedy(text, new_tokens)
        if got == want:
            return None
        step = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        if step < len(logits):
            top2 = torch.topk(logits[step].float(), 2).values
            if float(top2[0] - top2[1]) < TIE:
                return f"tie@{step}"
        return f"diverged at step {step}: got {got[step : step + 5]}, want {want[step : step + 5]}"


@pytest.fixture(scope="session")
def stock(engine: Engine) -> StockReference:
    return StockReference.of(engine)


def tiny_llama(vocab: int = 32, seed: int = 0, context: int = 256) -> LlamaForCausalLM:
    """A 2-layer random Llama with a small vocabulary: fast enough for thousands of samples."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # sharpen the output so sampling has structure to get right
        model.lm_head.weight.mul_(40.0)
    return model


def saved_tiny_llama(path: Path, vocab: int | None = None) -> LoadedModel:
    """A 4-layer random Llama saved with the default model's tokenizer and loaded as lopa loads models (its kernels
    included); a large init gives peaked logits. `vocab`: only the first ids (None: the tokenizer's whole vocabulary,
    so text prompts work)."""
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir(None)[1])
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab or len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        initializer_range=0.4,
        eos_token_id=2,
        bos_token_id=1,
        pad_token_id=2,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return load_model(str(path))

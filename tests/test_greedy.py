"""Greedy lookahead decoding emits exactly the tokens of stock transformers `generate()`, and drafts really pay.

The reference is an unmodified transformers model (no packed linears, no lopa code); lopa
runs with its defaults (packed linears, every drafter). Each test also checks that drafting
happened, so a lopa that quietly decoded one token per forward would fail here.
"""

from __future__ import annotations

import statistics

import pytest
import torch

from lopa import DraftConfig, Engine

from .conftest import StockReference
from .prompts import ALL, COPY, FAST, TestPrompt, accepted_by_source

NEW_TOKENS = 40  # the fast stage; the slow stage decodes 128
DRAFTER_SOURCES = {"lookup": {"lookup"}, "pool": {"pool", "jacobi"}, "predictor": {"predictor"}}
ONLY = {  # each drafter switched on alone, with a fixed window so the cost model cannot veto its drafts
    "lookup": DraftConfig(use_ngram_pool=False, use_predictor=False, dynamic_window=False),
    "pool": DraftConfig(use_prompt_lookup=False, use_predictor=False, dynamic_window=False),
    "predictor": DraftConfig(use_prompt_lookup=False, use_ngram_pool=False, dynamic_window=False),
}
MIN_COPY_TPF = 2.0  # median tokens per forward on the copy-friendly prompts, fixed window


def sweep(
    engine: Engine, stock: StockReference, prompts: list[TestPrompt], new_tokens: int, **kw
) -> tuple[list, list, list]:
    """Decode every prompt; returns (divergences, results, near-ties) and checks lopa's chat template."""
    failures, results, ties = [], [], []
    for p in prompts:
        ids = stock.prompt_ids(p.text)
        assert engine.encode_prompt(p.text) == ids, f"{p.id}: lopa's prompt ids differ from the chat template's"
        result = engine.generate(ids, max_new_tokens=new_tokens, **kw)
        results.append(result)
        problem = stock.divergence(p.text, result.token_ids, new_tokens)
        if problem and problem.startswith("tie@"):
            ties.append(f"{p.id} {problem}")
        elif problem:
            failures.append(f"{p.id}: {problem}")
    if ties:
        print(f"allowed near-tie divergences: {ties}")
    return failures, results, ties


def assert_every_drafter_drafted(results: list, drafters: list[str]) -> None:
    kept = sum((accepted_by_source(r.stats.steps) for r in results), start=accepted_by_source([]))
    for name in drafters:
        assert sum(kept[s] for s in DRAFTER_SOURCES[name]) > 0, f"no token drafted by {name} was accepted: {dict(kept)}"


def test_lopa_matches_stock_generate(engine: Engine, stock: StockReference) -> None:
    """One prompt per kind of work (a 500+ token summary among them), every drafter on."""
    assert engine.predictor is not None, "the shipped predictor loads by default"
    failures, results, _ = sweep(engine, stock, FAST, NEW_TOKENS)
    assert not failures, failures
    assert_every_drafter_drafted(results, ["lookup", "pool", "predictor"])
    ar_forwards = sum(r.stats.new_tokens for r in results)
    assert sum(r.stats.forwards for r in results) < 0.8 * ar_forwards, "drafting saved almost no forwards"


def test_real_defaults_match_stock_generate(defaults: Engine, stock: StockReference) -> None:
    """lopa as users get it: the lookahead gate, drafter pricing and the dynamic window decide each step from
    measured times; the tokens are stock generate()'s whatever they decide."""
    assert not defaults.draft.always_draft and defaults.draft.dynamic_window
    failures, results, _ = sweep(defaults, stock, FAST[1::2], NEW_TOKENS)  # code, extraction, QA, the long summary
    assert not failures, failures


def test_a_gate_that_flips_mid_answer_changes_no_token(engine: Engine, stock: StockReference) -> None:
    """The gate forced to alternate 3 lookahead steps and 3 plain ones within each answer."""
    flipping = Engine(engine.loaded)
    flipping.profile(max_rows=1)
    decisions: list[bool] = []
    flipping.cost.gate.lookahead = lambda rows: decisions.append(len(decisions) % 6 < 3) or decisions[-1]
    failures, results, _ = sweep(flipping, stock, FAST[1:4], NEW_TOKENS)
    assert not failures, failures
    assert decisions.count(False) >= 10 and sum(sum(r.stats.accept_lengths) for r in results) > 0


@pytest.mark.slow  # the fast stage's sweep has every drafter drafting together
@pytest.mark.parametrize("drafter", sorted(ONLY))
def test_each_drafter_alone_is_lossless_and_drafts(engine: Engine, stock: StockReference, drafter: str) -> None:
    alone = Engine(engine.loaded, ONLY[drafter], predictor=None if drafter == "predictor" else False)
    failures, results, _ = sweep(alone, stock, FAST[1:4], NEW_TOKENS)
    assert not failures, failures
    assert_every_drafter_drafted(results, [drafter])


@pytest.mark.slow
def test_copy_friendly_prompts_reach_a_minimum_tokens_per_forward(engine: Engine, stock: StockReference) -> None:
    """Answers that repeat the prompt: prompt lookup must pay. A fixed window makes the tree (and TPF) machine-independent."""
    fixed = Engine(engine.loaded, DraftConfig(dynamic_window=False))
    failures, results, _ = sweep(fixed, stock, COPY, 64)
    assert not failures, failures
    tpf = statistics.median(r.stats.tokens_per_forward for r in results)
    assert tpf >= MIN_COPY_TPF, f"median tokens per forward {tpf:.2f} on copy-friendly prompts"
    assert_every_drafter_drafted(results, ["lookup"])


def test_ar_method_matches_stock_generate(engine: Engine, stock: StockReference) -> None:
    """`ar` (lopa's runner, no drafting) is plain decoding: one token per forward, stock's tokens."""
    failures, results, _ = sweep(engine, stock, FAST[:2], NEW_TOKENS, method="ar")
    assert not failures, failures
    assert all(r.stats.forwards == r.stats.new_tokens for r in results)


def test_ignore_eos_runs_to_the_limit(engine: Engine) -> None:
    """With ignore_eos the model's EOS no longer ends the answer, and lopa still equals plain decoding."""
    natural = engine.generate("Say hi.", max_new_tokens=64, method="ar")
    assert natural.finish_reason == "stop" and len(natural.token_ids) < 40
    ar = engine.generate("Say hi.", max_new_tokens=40, method="ar", ignore_eos=True)
    lopa = engine.generate("Say hi.", max_new_tokens=40, ignore_eos=True)
    assert len(ar.token_ids) == 40 and ar.finish_reason == "length"
    assert lopa.token_ids == ar.token_ids


@pytest.mark.slow
def test_full_prompt_set_matches_stock_generate(defaults: Engine, stock: StockReference) -> None:
    """Every test prompt (22, two 500+ token summaries) x 128 tokens, lopa with its real defaults (the shipped
    predictor drafting) against stock generate(); `ar` against stock is the fast stage's."""
    failures, results, _ = sweep(defaults, stock, ALL, 128)
    assert not failures, failures
    assert sum(r.stats.forwards for r in results) < sum(r.stats.new_tokens for r in results)  # drafts were accepted


@pytest.mark.slow
def test_gemma3_greedy_matches_stock_generate() -> None:
    """Gemma 3: sliding-window layers; the summaries exceed its 512-token window."""
    engine = Engine.from_pretrained(
        "gemma3-270m", draft=DraftConfig(always_draft=True), profile=False
    )  # trees as large as the budget
    stock = StockReference.of(engine)
    prompts = [p for p in ALL if p.category in ("summarization", "coding")][:4]
    failures, results, _ = sweep(engine, stock, prompts, 64)
    assert not failures, failures
    assert_every_drafter_drafted(results, ["lookup", "pool"])


def test_presence_and_frequency_penalties_are_exact_in_lopa(engine: Engine, stock: StockReference) -> None:
    """OpenAI's penalties on the generated tokens: lopa emits what ar emits, and both what a hand-written
    loop over the stock model emits (logits - presence * seen - frequency * count, then argmax)."""
    prompt = "Count from 1 to 20, separated by commas."
    penalties = {"presence_penalty": 1.5, "frequency_penalty": 1.0}
    lopa = engine.generate(prompt, max_new_tokens=24, **penalties)
    assert lopa.token_ids == engine.generate(prompt, max_new_tokens=24, method="ar", **penalties).token_ids
    assert lopa.stats.tokens_per_forward > 1.0  # drafts were accepted under the penalties
    ids = stock.prompt_ids(prompt)
    generated: list[int] = []
    with torch.no_grad():
        for _ in range(24):
            logits = stock.model(torch.tensor([ids + generated])).logits[0, -1]
            for token in set(generated):
                logits[token] -= 1.5 + 1.0 * generated.count(token)
            generated.append(int(logits.argmax()))
            if generated[-1] in engine.eos_ids:
                break
    assert lopa.token_ids == generated
    assert lopa.token_ids != engine.generate(prompt, max_new_tokens=24).token_ids  # the penalties changed the answer


def test_min_tokens_holds_back_the_end_exactly(engine: Engine, stock: StockReference) -> None:
    """vLLM's min_tokens: no end-of-sequence before it; lopa, ar and transformers' min_new_tokens agree."""
    natural = engine.generate("Say hi.", max_new_tokens=64, method="ar")
    assert natural.finish_reason == "stop" and len(natural.token_ids) < 30
    lopa = engine.generate("Say hi.", max_new_tokens=48, min_tokens=30)
    assert lopa.token_ids == engine.generate("Say hi.", max_new_tokens=48, min_tokens=30, method="ar").token_ids
    assert len(lopa.token_ids) >= 30
    ids = torch.tensor([stock.prompt_ids("Say hi.")])
    want = stock.model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=48, min_new_tokens=30, do_sample=False
    )
    assert lopa.token_ids == want[0, ids.shape[1] :].tolist()


def test_logprobs_are_plain_decodings_log_softmax(engine: Engine, stock: StockReference) -> None:
    """Each emitted token's logprob and its top alternatives are the log-softmax of stock generate()'s logits
    at that step, whether the token came from a draft or not; ar reports the same."""
    prompt = "Repeat the following sentence three times: The quick brown fox jumps over the lazy dog."
    _, want_ids, logits = stock.greedy(prompt, 40)
    lopa = engine.generate(prompt, max_new_tokens=40, logprobs=3)
    assert lopa.token_ids == want_ids and lopa.stats.tokens_per_forward > 1.5
    assert len(lopa.logprobs) == len(lopa.token_ids)
    for step, (got, row) in enumerate(zip(lopa.logprobs, logits)):
        want = row.float().log_softmax(-1)
        assert got.token == want_ids[step]
        assert got.logprob == pytest.approx(float(want[got.token]), abs=1e-3)
        top = want.topk(3)
        assert [t for t, _ in got.top] == top.indices.tolist() or abs(float(top.values[1] - top.values[2])) < 1e-3
        assert [lp for _, lp in got.top] == pytest.approx(top.values.tolist(), abs=1e-3)
    ar = engine.generate(prompt, max_new_tokens=40, logprobs=0, method="ar")
    assert [x.logprob for x in ar.logprobs] == pytest.approx([x.logprob for x in lopa.logprobs], abs=1e-3)
    assert all(not x.top for x in ar.logprobs) and engine.generate(prompt, max_new_tokens=4).logprobs is None

"""Seeded sampling reproduces token for token: lookahead or plain, alone or batched (served: tests/test_serve.py),
on the project's 20 prompts at temperatures 0.7 and 1.0 with top-p and penalties.

The coupled sampler (decode/sampling.py) keys each position's draw by the request's seed, so the tree, the
batch, the lookahead gate and the cost model cannot change what is emitted; plain decoding (`ar`) is the
reference. The sampler's own exactness against the softmax is tests/test_sampling.py's.
"""

from __future__ import annotations

import pytest

from lopa import Engine

from .prompts import ALL

PROMPTS = [p.text for p in ALL if not p.id.startswith("summary-")]  # tests/data/prompts.json: 20 prompts
NEW_TOKENS = 12
SETTINGS = {
    "t0.7": {"temperature": 0.7, "top_p": 0.9, "repetition_penalty": 1.1, "seed": 11},
    "t1.0": {
        "temperature": 1.0,
        "top_p": 0.95,
        "min_p": 0.02,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.2,
        "seed": 12,
    },
}


@pytest.fixture(scope="module")
def plain(engine: Engine) -> dict[str, list[list[int]]]:
    """Seeded plain decoding of every prompt under each setting: the reference."""
    assert len(PROMPTS) == 20
    return {
        name: [engine.generate(p, max_new_tokens=NEW_TOKENS, method="ar", **s).token_ids for p in PROMPTS]
        for name, s in SETTINGS.items()
    }


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_seeded_lookahead_alone_equals_seeded_plain(engine: Engine, plain, setting: str) -> None:
    results = [engine.generate(p, max_new_tokens=NEW_TOKENS, **SETTINGS[setting]) for p in PROMPTS]
    assert [r.token_ids for r in results] == plain[setting]
    assert sum(sum(r.stats.accept_lengths) for r in results) >= 20, "drafts were hardly accepted: little is proved"
    assert len({tuple(ids) for ids in plain[setting]}) == len(PROMPTS)


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_seeded_batches_of_eight_with_real_defaults_equal_seeded_plain(defaults: Engine, plain, setting: str) -> None:
    """The default configuration (lookahead gate, drafter pricing, dynamic window): what it decides per step
    depends on measured times, what it emits does not."""
    results = defaults.generate(PROMPTS, max_new_tokens=NEW_TOKENS, max_batch=8, **SETTINGS[setting])
    assert [r.token_ids for r in results] == plain[setting]
    assert all(r.seed == SETTINGS[setting]["seed"] for r in results)


def test_sampling_at_another_seed_gives_other_answers(engine: Engine, plain) -> None:
    other = [
        engine.generate(p, max_new_tokens=NEW_TOKENS, **{**SETTINGS["t1.0"], "seed": 13}).token_ids for p in PROMPTS[:4]
    ]
    assert sum(a != b for a, b in zip(other, plain["t1.0"])) >= 3

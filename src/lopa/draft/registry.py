"""Which drafters a sequence gets: named factories, each given the engine and returning a fresh drafter
(drafters keep per-sequence state) or None where it does not apply. Add your own with @drafter("name")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from torch import nn

from ..config import DraftConfig
from ..models.runner import Runner
from .base import Drafter
from .draft_model import DraftModelDrafter
from .ngram import JacobiPoolDrafter, PromptLookupDrafter
from .predictor import Eagle3Predictor
from .predictor_drafter import PredictorDrafter


class DrafterHost(Protocol):
    """What a drafter factory may read of the engine (lopa.api.Engine is one)."""

    draft: DraftConfig
    predictor: Eagle3Predictor | None

    @property
    def draft_model(self) -> nn.Module: ...


DrafterFactory = Callable[[DrafterHost], Drafter | None]  # engine -> a fresh drafter, or None
DRAFTERS: dict[str, DrafterFactory] = {}


def drafter(name: str) -> Callable[[DrafterFactory], DrafterFactory]:
    """Register a drafter factory under `name` (its proposals merge into every lookahead tree)."""

    def register(factory: DrafterFactory) -> DrafterFactory:
        DRAFTERS[name] = factory
        return factory

    return register


def new_drafters(engine: DrafterHost) -> list[Drafter]:
    """A fresh drafter of every registered kind that applies to `engine`, in registration order."""
    return [d for factory in DRAFTERS.values() if (d := factory(engine)) is not None]


@drafter("lookup")
def _prompt_lookup(engine: DrafterHost) -> Drafter | None:
    c = engine.draft
    return PromptLookupDrafter(c.prompt_lookup_max_ngram, c.prompt_lookup_matches) if c.use_prompt_lookup else None


@drafter("pool")
def _ngram_pool(engine: DrafterHost) -> Drafter | None:
    c = engine.draft
    return JacobiPoolDrafter(c.ngram_size, c.pool_guesses, c.jacobi_window) if c.use_ngram_pool else None


@drafter("predictor")
def _predictor(engine: DrafterHost) -> Drafter | None:
    c = engine.draft
    if engine.predictor is None:
        return None
    return PredictorDrafter(engine.predictor, c.top_k_per_depth, c.max_depth, c.node_budget)


@drafter("draft")
def _draft_model(engine: DrafterHost) -> Drafter | None:
    c = engine.draft
    return DraftModelDrafter(Runner(engine.draft_model), c.draft_depth, c.draft_alternatives) if c.draft_model else None

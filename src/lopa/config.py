"""Configuration objects: what to generate (GenerationConfig) and how to draft (DraftConfig)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import InvalidRequestError

METHODS = ("lopa", "ar")
# GenerationConfig fields named alike in the CLI's options and the server's request bodies (one mapping for both)
SAMPLING_OPTIONS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "min_tokens",
    "seed",
    "ignore_eos",
)
MAX_LOGPROBS = 20  # top alternatives per token, as OpenAI's top_logprobs
DRAFT_DTYPES = (None, "int4", "int8", "bfloat16", "float32")


@dataclass
class GenerationConfig:
    """What the caller asks for; identical semantics for plain (`ar`) and lookahead (`lopa`) decoding."""

    max_new_tokens: int = 128
    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 means no top-k cut
    min_p: float = 0.0  # drop tokens less likely than min_p x the likeliest (after top-k / top-p); 0 means off
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0  # OpenAI's: subtracted once from each token already generated
    frequency_penalty: float = 0.0  # OpenAI's: subtracted per time a token was generated
    min_tokens: int = 0  # vLLM's: the end-of-sequence tokens cannot be emitted before this many tokens
    seed: int | None = None  # sampling: the same seed gives the same tokens, with or without lookahead; None draws one
    stop: list[str] = field(default_factory=list)
    method: str = "lopa"
    ignore_eos: bool = False  # run to max_new_tokens past EOS (fixed-length benchmarks, load tests)
    logprobs: int | None = None  # report each token's log-probability and this many top alternatives (None: off)

    @classmethod
    def from_options(cls, options: object, **fields) -> GenerationConfig:
        """A config from the SAMPLING_OPTIONS attributes of `options` (parsed CLI arguments, a request body) and
        `fields` for the rest."""
        return cls(**{name: getattr(options, name) for name in SAMPLING_OPTIONS}, **fields)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def needs_history(self) -> bool:
        """Whether the target distribution depends on the tokens before it (each tree row then needs its own)."""
        penalised = self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
        return penalised or self.min_tokens > 0

    def stop_ids(self, eos_ids: set[int]) -> set[int]:
        """The token ids that end this generation."""
        return set() if self.ignore_eos else eos_ids

    def validate(self) -> None:
        """Raise InvalidRequestError on values no decoder can honour."""
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise InvalidRequestError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if self.temperature < 0:
            raise InvalidRequestError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise InvalidRequestError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.top_k < 0:
            raise InvalidRequestError(f"top_k must be >= 0, got {self.top_k}")
        if self.repetition_penalty <= 0:
            raise InvalidRequestError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if not isinstance(self.min_tokens, int) or not 0 <= self.min_tokens <= self.max_new_tokens:
            raise InvalidRequestError(f"min_tokens must be in [0, max_new_tokens], got {self.min_tokens}")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2.0 <= getattr(self, name) <= 2.0:
                raise InvalidRequestError(f"{name} must be in [-2, 2], got {getattr(self, name)}")
        if self.logprobs is not None and not (isinstance(self.logprobs, int) and 0 <= self.logprobs <= MAX_LOGPROBS):
            raise InvalidRequestError(f"logprobs must be an integer in [0, {MAX_LOGPROBS}], got {self.logprobs!r}")
        if self.method not in METHODS:
            raise InvalidRequestError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")


@dataclass
class DraftConfig:
    """How lopa drafts and sizes its candidate tree. Defaults are the measured best on CPU."""

    tau: float = 0.7  # keep a node only if its confidence > tau * max confidence at its depth
    top_k_per_depth: int = 4
    max_depth: int = 8  # k_max: the window can widen up to this depth
    node_budget: int = 32  # most tree nodes (root excluded) per verification forward
    dynamic_window: bool = True
    # every drafter proposes at every step: no lookahead gate (decode/gate.py: plain steps at batch sizes where
    # they made more) and no drafter pricing (decode/pricing.py: dear drafters idle where they do not pay)
    always_draft: bool = False
    use_prompt_lookup: bool = True
    use_ngram_pool: bool = True
    use_predictor: bool = True  # the EAGLE-3 predictor (the shipped one, when it fits the model)
    # a model sharing the target's tokenizer drafts chains: catalog name, HF directory or .gguf; "self" = the
    # target itself (in draft_model_dtype). Lossless: the target verifies every token. See draft/draft_model.py
    draft_model: str | None = None
    # "int4", "int8", "bfloat16", "float32"; None: int4 under an int4 target (its step 0.6x int8's:
    # docs/bench/draft-int4/step.log), else int8 on CPU, the target's dtype on CUDA
    draft_model_dtype: str | None = None
    draft_depth: int = 4  # the draft model's first chain length (one draft forward per token); it then adapts
    draft_alternatives: int = 1  # the draft model's runner-up tokens proposed as one-token branches at each depth
    ngram_size: int = 4  # N of the Jacobi/lookahead n-gram pool
    pool_guesses: int = 4  # G: guesses kept per key in the pool
    jacobi_window: int = 5  # W: length of the Jacobi guess chain carried from step to step
    prompt_lookup_max_ngram: int = 3
    prompt_lookup_matches: int = 4
    lambda_logp: float = 1.0  # path score = lambda_logp * log p + lambda_coherence * coherence - repetition
    lambda_coherence: float = 0.5
    repetition_penalty_weight: float = 0.5

    def validate(self) -> None:
        if not 0.0 < self.tau <= 1.0:
            raise InvalidRequestError(f"tau must be in (0, 1], got {self.tau}")
        if self.max_depth < 1 or self.node_budget < 1 or self.top_k_per_depth < 1:
            raise InvalidRequestError("max_depth, node_budget and top_k_per_depth must be >= 1")
        if self.ngram_size < 2:
            raise InvalidRequestError("ngram_size must be >= 2")
        if self.draft_model_dtype not in DRAFT_DTYPES:
            raise InvalidRequestError(
                f"draft_model_dtype must be one of {DRAFT_DTYPES}, got {self.draft_model_dtype!r}"
            )
        if self.draft_depth < 1 or self.draft_alternatives < 0:
            raise InvalidRequestError("draft_depth must be >= 1 and draft_alternatives >= 0")

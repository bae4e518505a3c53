"""The public surface: Engine.from_pretrained(...), engine.generate(...), engine.stream(...)."""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Iterator, Sequence

import torch
from tqdm import tqdm

from .config import DraftConfig, GenerationConfig
from .decode.batch import step_batch
from .decode.loop import Drafting, SequenceDecoder, StepRecord, decode
from .decode.sampling import TokenLogprob
from .decode.window import CostModel, WindowController
from .draft import JacobiPoolDrafter, PromptLookupDrafter
from .draft.draft_model import DraftModelDrafter
from .draft.predictor_drafter import PredictorDrafter
from .draft.predictor_io import PredictorSpec, predictor_for
from .errors import InvalidRequestError, ModelLoadError
from .models.batch import BatchRunner
from .models.loading import LoadedModel, load_model
from .models.lossy import LossyInt8Runner
from .models.compiled import buckets_up_to, cuda_graph_capacity
from .models.profile import TREE_SIZES, forward_latency, load_or_measure_costs
from .models.runner import Runner
from .models.threads import apply_threads
from .text import TextStream

Prompt = str | Sequence[dict] | Sequence[int]


@dataclass
class GenerationStats:
    method: str
    prompt_tokens: int = 0
    new_tokens: int = 0
    forwards: int = 0  # target-model forward passes after prefill
    prefill_s: float = 0.0
    wall_s: float = 0.0  # decode time: prefill + steps, model load excluded
    draft_s: float = 0.0  # of which drafting: proposals, tree building, drafters observing verification
    verify_s: float = 0.0  # of which verification forwards after the prefill
    tree_nodes: int = 0  # tokens fed to verification forwards, summed
    accept_lengths: list[int] = field(default_factory=list)  # drafted tokens accepted per step
    window: dict = field(default_factory=dict)  # dynamic window: moves of k and tree sizes chosen
    steps: list[dict] = field(default_factory=list)  # per step: tokens and how each was drafted
    drafters: dict = field(default_factory=dict)  # per drafter source with a summary(): e.g. the predictor's depth-1 hits

    @property
    def tokens_per_forward(self) -> float:
        # the prefill forward emits the first token; count it with the decoding forwards
        return self.new_tokens / max(1, self.forwards + 1)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["tokens_per_forward"] = self.tokens_per_forward
        data["tokens_per_s"] = self.new_tokens / self.wall_s if self.wall_s else 0.0
        data["bookkeeping_s"] = max(0.0, self.wall_s - self.prefill_s - self.draft_s - self.verify_s)
        return data


@dataclass
class GenerationResult:
    text: str
    token_ids: list[int]
    finish_reason: str  # "stop" (EOS or stop string) or "length"
    stats: GenerationStats
    logprobs: list[TokenLogprob] | None = None  # one per token id, when GenerationConfig.logprobs asked for them


@dataclass
class StreamChunk:
    """A piece of text as it becomes final, with the step that produced it."""

    text: str
    step: StepRecord


class Engine:
    """A loaded model plus everything needed to decode it losslessly with lookahead drafting."""

    def __init__(
        self,
        loaded: LoadedModel,
        draft: DraftConfig | None = None,
        max_verify_tokens: int | None = None,
        compile: bool = False,
        predictor: PredictorSpec = None,
    ):
        self.loaded = loaded
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.draft = draft or DraftConfig()
        self.draft.validate()
        if max_verify_tokens is not None and max_verify_tokens < 1:
            raise InvalidRequestError(f"max_verify_tokens must be >= 1, got {max_verify_tokens}")
        self.runner = Runner(self.model, max_verify_tokens, compile, cuda_graph_capacity(self.model, compile))
        # the EAGLE-3 predictor (draft/predictor_io.py); it reads the target's aux-layer features
        self.predictor = predictor_for(self.model, predictor, self.draft.use_predictor)
        if self.predictor is not None:
            self.runner.hidden_layers = tuple(self.predictor.config.aux_layers)
        self._cost: CostModel | None = None
        self._warm = False
        self._int8_runner: Runner | None = None
        self._draft_model: torch.nn.Module | None = None
        self._lossy: LossyInt8Runner | None = None
        self.eos_ids = self._eos_ids()
        self.threads_source = "as the process had it"  # from_pretrained applies the measured count
        self._busy = threading.Lock()  # one decoding at a time: see _exclusive

    @classmethod
    def from_pretrained(
        cls,
        model: str | None = None,
        *,
        device: str = "cpu",
        dtype: torch.dtype | str | None = None,
        draft: DraftConfig | None = None,
        trust_remote_code: bool = False,
        max_verify_tokens: int | None = None,
        compile: bool = False,
        predictor: PredictorSpec = None,
        fast: bool = True,
        threads: int | None = None,
    ) -> "Engine":
        """Load `model` (catalog name, HF directory or .gguf; None = SmolLM2-135M-Instruct).

        `dtype`: a torch dtype or "int8" (CPU); `max_verify_tokens`: chunk longer trees and prompts (see Runner);
        `compile`: verification forwards through torch.compile (models/compiled.py; call warm_up() before timing).
        `predictor`: an EAGLE-3 predictor (a speculators-layout directory or a loaded one) that drafts EAGLE-2
        trees; False for none, None for the shipped predictor when it fits the model.
        `fast`: lopa's CPU kernels (models/fastkernels.py; False: stock transformers modules).
        `threads`: torch threads; None = OMP_NUM_THREADS, else the fastest count `lopa profile` measured.
        """
        if threads is not None and threads < 1:
            raise InvalidRequestError(f"threads must be >= 1, got {threads}")
        loaded = load_model(model, device=device, dtype=dtype, trust_remote_code=trust_remote_code, fast=fast)
        engine = cls(loaded, draft, max_verify_tokens, compile, predictor)
        engine.threads_source = apply_threads(loaded.fingerprint, engine.runner, threads)
        if engine.draft.draft_model is not None:
            engine.draft_model  # load it now rather than inside the first request
        return engine

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            if source is not None:
                ids.update(source if isinstance(source, list) else [source])
        return ids

    @property
    def cost_model(self) -> CostModel:
        if self._cost is None:
            self.warm_up()
            sizes = self._compiled_sizes() if self.runner.compiled is not None else TREE_SIZES
            costs = load_or_measure_costs(self.runner, self.loaded.fingerprint, sizes)
            self._cost = CostModel(costs, stepwise=self.runner.compiled is not None)
        return self._cost

    def warm_up(self) -> None:
        """With compile: build every graph now rather than inside a timed generation (no-op otherwise).

        Bucket 1 runs first at two prefix lengths, so dynamo already knows the KV length varies
        and compiles later buckets with a dynamic KV length: after this, nothing compiles again
        (a test runs generations under dynamo's error_on_recompile)."""
        if self.runner.compiled is None or self._warm:
            return
        for i, tokens in enumerate((1, *self._compiled_sizes())):
            forward_latency(self.runner, tokens, prefix=16 + i, reps=0)
        self._warm = True

    def _compiled_sizes(self) -> tuple[int, ...]:
        """The buckets a verification forward can run at: up to the largest tree (root + node_budget)."""
        return buckets_up_to(self.draft.node_budget + 1)

    @property
    def int8_runner(self) -> Runner:
        """A runner over an int8 copy of the model (loaded on first use), for the lossy mode."""
        if self._int8_runner is None:
            self._int8_runner = Runner(load_model(str(self.loaded.path), dtype="int8").model)
        return self._int8_runner

    @property
    def draft_model_source(self) -> str | None:
        """DraftConfig.draft_model as a loadable spec ("self" is the target's own directory)."""
        spec = self.draft.draft_model
        return str(self.loaded.path) if spec == "self" else spec

    @property
    def draft_model(self) -> torch.nn.Module:
        """DraftConfig.draft_model, loaded on first use; each sequence drafts through its own Runner over it."""
        if self._draft_model is None:
            dtype = self.draft.draft_model_dtype or ("int8" if self.runner.device.type == "cpu" else self.model.dtype)
            dtype = getattr(torch, dtype) if dtype in ("bfloat16", "float32") else dtype
            loaded = load_model(self.draft_model_source, device=str(self.runner.device), dtype=dtype)
            self.use_draft_model(loaded.model, loaded.tokenizer)
        return self._draft_model

    def use_draft_model(self, model: torch.nn.Module, tokenizer) -> None:
        """Draft with `model` (already loaded, in any precision); its tokenizer must be the target's."""
        if tokenizer.get_vocab() != self.tokenizer.get_vocab():
            raise ModelLoadError(
                f"the draft model's tokenizer ({len(tokenizer)} tokens) differs from the target's "
                f"({len(self.tokenizer)}): a draft model must share the target's vocabulary"
            )
        self._draft_model = model

    @property
    def lossy_runner(self) -> LossyInt8Runner:
        """LOSSY (DraftConfig.lossy_int8_verify): int8 verification with full-precision calibration."""
        if self._lossy is None:
            self._lossy = LossyInt8Runner(self.runner, self.int8_runner, self.draft.lossy_calibration_every)
        return self._lossy

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def encode_prompt(self, prompt: Prompt, chat: bool | None = None) -> list[int]:
        """Token ids for a prompt: raw ids, a chat message list, or text (chat-templated when available)."""
        if isinstance(prompt, str):
            if not prompt.strip():
                raise InvalidRequestError("the prompt is empty")
            if chat is None:
                chat = self.has_chat_template
            if not chat:
                return self.tokenizer(prompt, add_special_tokens=True).input_ids
            prompt = [{"role": "user", "content": prompt}]
        if prompt and all(isinstance(t, int) for t in prompt):
            return list(prompt)
        if not prompt:
            raise InvalidRequestError("the prompt is empty")
        if not self.has_chat_template:
            raise InvalidRequestError("this model has no chat template: send raw text (--no-chat)")
        text = self.tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, tokenize=False)
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def drafting_for(self, cfg: GenerationConfig) -> Drafting | None:
        """Fresh drafting state for one sequence decoded with `cfg`; None for plain decoding (`ar`)."""
        return self.new_drafting() if cfg.method == "lopa" else None

    def new_drafting(self) -> Drafting:
        """Fresh drafters and window controller for one sequence (they keep per-request state)."""
        c = self.draft
        drafters = []
        if c.use_prompt_lookup:
            drafters.append(PromptLookupDrafter(c.prompt_lookup_max_ngram, c.prompt_lookup_matches))
        if c.use_ngram_pool:
            drafters.append(JacobiPoolDrafter(c.ngram_size, c.pool_guesses, c.jacobi_window))
        if self.predictor is not None:
            drafters.append(
                PredictorDrafter(
                    self.predictor, c.top_k_per_depth, c.max_depth, c.node_budget,
                    min_hit_rate=c.predictor_min_hit_rate,
                )
            )
        if c.draft_model is not None:
            drafters.append(DraftModelDrafter(Runner(self.draft_model), c.draft_depth, c.draft_alternatives))
        controller = WindowController(c.max_depth, self.cost_model, c.dynamic_window)
        return Drafting(drafters, controller, c)

    def _check(self, prompt_ids: list[int], cfg: GenerationConfig) -> None:
        cfg.validate()
        limit = self.runner.max_positions
        if len(prompt_ids) >= limit:
            raise InvalidRequestError(f"the prompt has {len(prompt_ids)} tokens; the context holds {limit}")
        if len(prompt_ids) + cfg.max_new_tokens + self.draft.node_budget + 2 > limit:
            raise InvalidRequestError(
                f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({cfg.max_new_tokens}) exceeds the context ({limit})"
            )

    def stream_steps(
        self, prompt: Prompt, config: GenerationConfig | None = None, *, chat: bool | None = None, **overrides
    ) -> Iterator[StreamChunk | GenerationResult]:
        """Yield StreamChunks as text becomes final, then the GenerationResult last.

        One Engine decodes one stream at a time (it has one KV cache): a second stream() while one is
        open is refused; decode many prompts together with generate([...])."""
        cfg = _merge_config(config, overrides)
        prompt_ids = self.encode_prompt(prompt, chat)
        self._check(prompt_ids, cfg)
        with self._exclusive():
            drafting = self.drafting_for(cfg)
            output = SequenceOutput(self, prompt_ids, cfg)
            runner = self.lossy_runner if drafting and self.draft.lossy_int8_verify else self.runner
            for record in decode(runner, prompt_ids, cfg, self.eos_ids, drafting):
                piece = output.add(record)
                if piece:
                    yield StreamChunk(piece, record)
                if output.text.stopped:
                    break
            tail, result = output.finish(runner.forwards, drafting)
            if tail:
                yield StreamChunk(tail, record)
            yield result

    def generate_many(
        self,
        prompts: Sequence[Prompt],
        config: GenerationConfig | None = None,
        *,
        chat: bool | None = None,
        max_batch: int = 16,
        progress: bool | None = None,
        **overrides,
    ) -> list[GenerationResult]:
        """Decode many prompts together, up to `max_batch` at a time in one batched forward per step (offline
        batch inference); each result is what generate() gives that prompt alone. `progress`: a progress
        bar (default: on a terminal, for 8 prompts or more)."""
        cfg = _merge_config(config, overrides)
        encoded = [self.encode_prompt(p, chat) for p in prompts]
        for ids in encoded:
            self._check(ids, cfg)
        if not encoded:
            return []
        slots = max(1, min(max_batch, len(encoded)))
        capacity = max(map(len, encoded)) + cfg.max_new_tokens + self.draft.node_budget + 2
        runner = BatchRunner(self.model, slots, capacity)
        runner.hidden_layers = self.runner.hidden_layers
        results: list[GenerationResult | None] = [None] * len(encoded)
        waiting = deque(range(len(encoded)))
        rows: list[tuple[int, SequenceDecoder, SequenceOutput]] = []  # row i decodes in batch slot i
        show = progress if progress is not None else len(encoded) >= 8 and sys.stderr.isatty()
        with self._exclusive(), tqdm(total=len(encoded), disable=not show, desc="lopa", unit="prompt") as bar:
            while waiting or rows:
                while waiting and len(rows) < slots:
                    i = waiting.popleft()
                    seq = SequenceDecoder(encoded[i], cfg, self.eos_ids, self.drafting_for(cfg))
                    output = SequenceOutput(self, encoded[i], cfg)
                    out = runner.prefill_slot(len(rows), torch.tensor(encoded[i]))
                    output.add(seq.first(out.logits, out.layers))
                    rows.append((i, seq, output))
                for slot in reversed(range(len(rows))):  # finished rows leave; the last row takes the free slot
                    i, seq, output = rows[slot]
                    if seq.done or output.text.stopped:
                        results[i] = output.finish(seq.step, seq.drafting)[1]
                        bar.update(1)
                        runner.free_slot(slot, rows)
                if rows:
                    for (_, _, output), record in zip(rows, step_batch(runner, [seq for _, seq, _ in rows], self.draft.node_budget)):
                        if isinstance(record, Exception):
                            raise record
                        output.add(record)
        return results

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Hold the engine's decoding (its KV cache and lazily measured cost model) for one caller."""
        if not self._busy.acquire(blocking=False):
            raise InvalidRequestError(
                "this Engine is already decoding (a stream() is still open): finish or close it first, use a "
                "second Engine, or decode many prompts together with generate([...])"
            )
        try:
            yield
        finally:
            self._busy.release()

    def stream(self, prompt: Prompt, config: GenerationConfig | None = None, **kwargs) -> Iterator[str]:
        """Text pieces as they are decoded."""
        for item in self.stream_steps(prompt, config, **kwargs):
            if isinstance(item, StreamChunk):
                yield item.text

    def generate(self, prompt: Prompt | list[Prompt], config: GenerationConfig | None = None, **kwargs):
        """Decode a whole answer; same tokens as plain decoding, in fewer forwards. A list of prompts (texts,
        message lists or id lists) is decoded together by generate_many and gives a list of results."""
        if _is_batch(prompt):
            return self.generate_many(prompt, config, **kwargs)
        *_, result = self.stream_steps(prompt, config, **kwargs)
        return result


class SequenceOutput:
    """What one sequence has produced so far: its final text, token ids, logprobs and stats."""

    def __init__(self, engine: Engine, prompt_ids: list[int], cfg: GenerationConfig):
        self.text = TextStream(engine.tokenizer, cfg.stop, cfg.stop_ids(engine.eos_ids))
        self.stats = GenerationStats(cfg.method, prompt_tokens=len(prompt_ids))
        self.logprobs: list[TokenLogprob] | None = [] if cfg.logprobs is not None else None
        self.start = time.perf_counter()

    def add(self, record: StepRecord) -> str:
        """Take one step's tokens; returns the text that became final."""
        stats = self.stats
        if not self.text.ids:
            stats.prefill_s = time.perf_counter() - self.start
        else:
            stats.accept_lengths.append(record.accepted)
            stats.tree_nodes += record.tree_size
            stats.draft_s += record.draft_s
            stats.verify_s += record.verify_s
        stats.steps.append({"tokens": record.tokens, "sources": record.sources})
        if self.logprobs is not None:
            self.logprobs.extend(record.logprobs)
        return self.text.push(record.tokens)

    def finish(self, forwards: int, drafting: Drafting | None) -> tuple[str, GenerationResult]:
        """Decoding ended after `forwards` verification forwards: the held-back text and the result."""
        tail = self.text.close()  # text held back in case a stop string began there
        stats = self.stats
        stats.wall_s = time.perf_counter() - self.start
        stats.forwards = forwards
        stats.new_tokens = len(self.text.ids)
        if drafting:
            stats.window = drafting.controller.summary()
            stats.drafters = {d.source: d.summary() for d in drafting.drafters if hasattr(d, "summary")}
        return tail, GenerationResult(self.text.emitted, self.text.ids, self.text.finish, stats, self.logprobs)


def _is_batch(prompt) -> bool:
    """A list of prompts, as opposed to one prompt given as token ids or as chat messages."""
    return isinstance(prompt, (list, tuple)) and bool(prompt) and all(isinstance(p, (str, list, tuple)) for p in prompt)


def _merge_config(config: GenerationConfig | None, overrides: dict) -> GenerationConfig:
    cfg = GenerationConfig(**{**asdict(config or GenerationConfig()), **overrides})
    cfg.stop = list(cfg.stop or [])
    return cfg


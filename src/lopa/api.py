"""The public surface: Engine.from_pretrained(...), engine.generate(...), engine.stream(...)."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm import tqdm

from .config import DraftConfig, GenerationConfig
from .decode.batch import Batch, Row, drive
from .decode.cost import CostModel
from .decode.loop import Drafting, SequenceDecoder, kv_rows
from .decode.output import GenerationResult, SequenceOutput, StreamChunk
from .decode.pricing import DrafterPrice
from .decode.window import WindowController
from .draft.predictor import warm_up as warm_up_predictor
from .draft.predictor_io import PredictorSpec, predictor_for
from .draft.registry import new_drafters
from .errors import InvalidRequestError, ModelLoadError
from .models.compiled import buckets_up_to, compile_model, cuda_graph_capacity
from .models.fastkernels import row_invariant
from .models.int4 import INT4
from .models.loading import LoadedModel, load_model
from .models.profile import TREE_SIZES, forward_latency, load_or_measure_surface
from .models.quantize import INT8
from .models.runner import Runner
from .models.threads import apply_threads

log = logging.getLogger("lopa")

Prompt = str | Sequence[dict] | Sequence[int]


class Engine:
    """A model, its tokenizer, a runner, the drafters' registry and a cost model: everything needed to decode
    losslessly with lookahead drafting. Every decoding (generate, stream, generate([...]), the server) runs
    decode/loop.py's one batched step."""

    def __init__(
        self,
        loaded: LoadedModel,
        draft: DraftConfig | None = None,
        max_verify_tokens: int | None = None,
        compile: bool = False,
        predictor: PredictorSpec = None,
    ):
        """Wrap a loaded model; no profile yet (the cost model is flat until profile() runs: from_pretrained and
        from_model call it)."""
        self.loaded = loaded
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.draft = draft or DraftConfig()
        self.draft.validate()
        if max_verify_tokens is not None and max_verify_tokens < 1:
            raise InvalidRequestError(f"max_verify_tokens must be >= 1, got {max_verify_tokens}")
        static = cuda_graph_capacity(self.model, compile)  # CUDA graphs replay a static cache of this many rows
        compiled = compile_model(self.model, cuda_graphs=static is not None) if compile else None
        self.runner = Runner(
            self.model,
            1,
            static or 256,
            max_verify_tokens=max_verify_tokens,
            compiled=compiled,
            static=static is not None,
        )
        if self.model.dtype in (torch.bfloat16, torch.float16) and not row_invariant(self.model):
            log.warning(
                "lopa: in %s here a tree's forward rounds its tokens differently from one-token steps, so greedy "
                "lookahead equals plain decoding only up to near-ties at that precision (README: bf16 on the CPU); "
                "on a CPU with lopa's kernels float32 and bf16 keep them equal",
                str(self.model.dtype).removeprefix("torch."),
            )
        # the EAGLE-3 predictor (draft/predictor_io.py); it reads the target's aux-layer features
        self.predictor = predictor_for(self.model, predictor, self.draft.use_predictor)
        if self.predictor is not None:
            self.runner.hidden_layers = tuple(self.predictor.config.aux_layers)
        self.cost = CostModel.flat()
        self.drafter_prices: dict[str, DrafterPrice] = {}  # each drafter's time and yield over the sequences so far
        self._warm_rows = 0  # with compile: the batch rows warm_up() has built graphs for
        self._draft_model: torch.nn.Module | None = None
        self.eos_ids = self._eos_ids()
        self.threads_source = "as the process had it"  # from_pretrained applies the measured count
        self._busy = threading.Lock()  # one decoding of the engine's own runner at a time: see _exclusive

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
        profile: bool = True,
    ) -> Engine:
        """Load `model` (catalog name, HF directory or .gguf; None = SmolLM2-135M-Instruct).

        `dtype`: a torch dtype or "int8" (CPU); `max_verify_tokens`: chunk longer trees and prompts (see Runner);
        `compile`: verification forwards through torch.compile (models/compiled.py; graphs are built by profile()).
        `predictor`: an EAGLE-3 predictor (a speculators-layout directory or a loaded one) that drafts EAGLE-2
        trees; False for none, None for the shipped predictor when it fits the model.
        `fast`: lopa's CPU kernels (models/fastkernels.py; False: stock transformers modules).
        `threads`: torch threads; None = OMP_NUM_THREADS, else the fastest count `lopa profile` measured.
        `profile`: load the latency profile from the cache, measuring what it lacks (see profile()).
        """
        if threads is not None and threads < 1:
            raise InvalidRequestError(f"threads must be >= 1, got {threads}")
        loaded = load_model(model, device=device, dtype=dtype, trust_remote_code=trust_remote_code, fast=fast)
        engine = cls(loaded, draft, max_verify_tokens, compile, predictor)
        engine.threads_source = apply_threads(loaded.fingerprint, engine.runner, threads)
        return engine._ready(profile)

    @classmethod
    def from_model(
        cls,
        model: torch.nn.Module,
        tokenizer,
        *,
        draft: DraftConfig | None = None,
        predictor: PredictorSpec = False,
        max_verify_tokens: int | None = None,
        compile: bool = False,
        profile: bool = True,
    ) -> Engine:
        """Wrap a Hugging Face causal LM the caller already loaded (their quantisation, their adapters, their
        device) without reloading or changing it; `tokenizer` is its tokenizer."""
        name = getattr(model.config, "name_or_path", "") or type(model).__name__
        loaded = LoadedModel(model.eval(), tokenizer, name, Path(name), 0.0)
        return cls(loaded, draft, max_verify_tokens, compile, predictor)._ready(profile)

    def _ready(self, profile: bool) -> Engine:
        if profile:  # a compiled engine builds batch graphs only when asked (the server asks for its batch)
            self.profile(max_rows=1 if self.runner.compiled is not None else 16)
        if self.draft.draft_model is not None:
            _ = self.draft_model  # load it now rather than inside the first request
        return self

    def profile(self, max_rows: int = 16) -> CostModel:
        """Build the compiled graphs (with compile) and the predictor's kernels, and load this hardware's latency
        surface (forwards of 1 to `max_rows` sequences x tree sizes) from the cache, measuring the cells it lacks:
        once per model, precision, device and thread count (the README states what that costs). The cost model
        sizes trees."""
        self.warm_up(rows=max_rows)
        if self.predictor is not None:
            warm_up_predictor(self.predictor, max(self.draft.top_k_per_depth, self.draft.max_depth + 1))
        compiled = self.runner.compiled is not None
        sizes = buckets_up_to(self.draft.node_budget + 1) if compiled else TREE_SIZES
        surface = load_or_measure_surface(self.runner, self.loaded.fingerprint, max_rows, sizes)
        self.cost = CostModel(surface, stepwise=compiled, packed=self.runner.packs)
        return self.cost

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            if source is not None:
                ids.update(source if isinstance(source, list) else [source])
        return ids

    def warm_up(self, rows: int = 1) -> None:
        """With compile: build every graph for batches of up to `rows` now rather than inside a timed
        generation (no-op otherwise).

        Bucket 1 runs first at two prefix lengths, so dynamo already knows the KV length varies and
        compiles later buckets with a dynamic KV length; a batch of 2 then makes the batch size dynamic
        (CUDA graphs: one graph per batch size). After this, nothing compiles again (a test runs
        generations under dynamo's error_on_recompile)."""
        if self.runner.compiled is None or rows <= self._warm_rows:
            return
        wide = self.runner if rows == 1 else self.runner.sibling(rows, self.runner.capacity)
        sizes = buckets_up_to(self.draft.node_budget + 1)
        batches = [r for r in (1, 2, 4, 8, 16) if r <= rows] if self.runner.static else [1, 2][:rows]
        for batch in batches:
            for i, tokens in enumerate((1, *sizes)):
                forward_latency(wide, tokens, prefix=16 + i, reps=0, rows=batch)
        self._warm_rows = rows

    @property
    def draft_model_source(self) -> str | None:
        """DraftConfig.draft_model as a loadable spec ("self" is the target's own directory)."""
        spec = self.draft.draft_model
        return str(self.loaded.path) if spec == "self" else spec

    @property
    def draft_model(self) -> torch.nn.Module:
        """DraftConfig.draft_model, loaded on first use; each sequence drafts through its own Runner over it."""
        if self._draft_model is None:
            dtype = self.draft_model_dtype
            dtype = getattr(torch, dtype) if dtype in ("bfloat16", "float32") else dtype
            loaded = load_model(self.draft_model_source, device=str(self.runner.device), dtype=dtype)
            self.use_draft_model(loaded.model, loaded.tokenizer)
        return self._draft_model

    @property
    def draft_model_dtype(self) -> str:
        """The draft model's precision: DraftConfig.draft_model_dtype, else int4 under an int4 target, int8 on
        CPU, the target's dtype on CUDA."""
        if self.draft.draft_model_dtype:
            return self.draft.draft_model_dtype
        if getattr(self.model, "lopa_precision", None) == INT4:
            return INT4
        return INT8 if self.runner.device.type == "cpu" else str(self.model.dtype).removeprefix("torch.")

    def use_draft_model(self, model: torch.nn.Module, tokenizer) -> None:
        """Draft with `model` (already loaded, in any precision); its tokenizer must be the target's."""
        if tokenizer.get_vocab() != self.tokenizer.get_vocab():
            raise ModelLoadError(
                f"the draft model's tokenizer ({len(tokenizer)} tokens) differs from the target's "
                f"({len(self.tokenizer)}): a draft model must share the target's vocabulary"
            )
        self._draft_model = model

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
        """Fresh drafters and window for one sequence decoded with `cfg`; None for plain decoding (`ar`)."""
        if cfg.method != "lopa":
            return None
        window = WindowController(self.draft.max_depth, self.draft.dynamic_window)
        return Drafting(new_drafters(self), window, self.draft, self.drafter_prices)

    @property
    def sizing(self) -> CostModel | None:
        """The cost model that sizes trees; None with a fixed window (every ranked node is verified)."""
        return self.cost if self.draft.dynamic_window else None

    def answer_room(self, prompt_len: int, wanted: int | None = None, context: int | None = None) -> int:
        """The most new tokens a prompt of `prompt_len` leaves in `context` (default: the model's); raises
        InvalidRequestError when the prompt or `wanted` new tokens do not fit."""
        context = context or self.runner.max_positions
        room = context - kv_rows(prompt_len, 0, self.draft.node_budget)
        if prompt_len >= context or room < 1:
            raise InvalidRequestError(f"the prompt has {prompt_len} tokens; the context holds {context}")
        if wanted is not None and wanted > room:
            raise InvalidRequestError(
                f"prompt ({prompt_len} tokens) + max_new_tokens ({wanted}) exceeds the context ({context}); at most {room}"
            )
        return room

    def stream_steps(
        self, prompt: Prompt, config: GenerationConfig | None = None, *, chat: bool | None = None, **overrides
    ) -> Iterator[StreamChunk | GenerationResult]:
        """Yield StreamChunks as text becomes final, then the GenerationResult last.

        One Engine decodes one stream at a time (it has one KV slot for it): a second stream() while one is
        open is refused; decode many prompts together with generate([...])."""
        row = self._row(prompt, _merge_config(config, overrides), chat)
        with self._exclusive():
            for _, item in drive(Batch(self.runner, self.sizing), [row]):
                yield item

    def generate_many(
        self,
        prompts: Sequence[Prompt],
        config: GenerationConfig | Sequence[GenerationConfig] | None = None,
        *,
        chat: bool | None = None,
        max_batch: int = 16,
        progress: bool | None = None,
        **overrides,
    ) -> list[GenerationResult]:
        """Decode many prompts together, up to `max_batch` at a time in one batched forward per step (offline
        batch inference), longest prompts first; each result, in the order given, is what generate() gives that
        prompt alone. `config`: one for all, or one per prompt (a seed each, say). `progress`: a progress bar
        (default: on a terminal, for 8 prompts or more)."""
        many = isinstance(config, (list, tuple))
        if many and len(config) != len(prompts):
            raise InvalidRequestError(f"{len(config)} configs for {len(prompts)} prompts")
        configs = (
            [_merge_config(c, overrides) for c in config] if many else [_merge_config(config, overrides)] * len(prompts)
        )
        rows = [self._row(prompt, cfg, chat, owner=i) for i, (prompt, cfg) in enumerate(zip(prompts, configs))]
        if not rows:
            return []
        # longest prompts first: a step's rows attend over the longest row's keys, so rows of like lengths waste less
        rows.sort(key=lambda row: -len(row.seq.prompt))
        batch = Batch(self.runner.sibling(max(1, min(max_batch, len(rows))), self.runner.capacity), self.sizing)
        results: list[GenerationResult | None] = [None] * len(rows)
        show = progress if progress is not None else len(rows) >= 8 and sys.stderr.isatty()
        with tqdm(total=len(rows), disable=not show, desc="lopa", unit="prompt") as bar:
            for row, item in drive(batch, rows):
                if isinstance(item, GenerationResult):
                    results[row.owner] = item
                    bar.update(1)
        return results

    def _row(self, prompt: Prompt, cfg: GenerationConfig, chat: bool | None, owner: object = None) -> Row:
        """A batch row decoding `prompt` with `cfg` (both checked first): fresh drafters, an empty output record."""
        cfg.validate()
        prompt_ids = self.encode_prompt(prompt, chat)
        self.answer_room(len(prompt_ids), cfg.max_new_tokens)
        return self.row(prompt_ids, cfg, owner)

    def row(self, prompt_ids: list[int], cfg: GenerationConfig, owner: object = None) -> Row:
        """A batch row (decode/batch.py) decoding `prompt_ids` with `cfg`: fresh drafters, an empty output record."""
        seq = SequenceDecoder(prompt_ids, cfg, self.eos_ids, self.drafting_for(cfg))
        return Row(seq, SequenceOutput(self.tokenizer, seq), owner)

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Hold the engine's own runner (its one KV slot) for one stream."""
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


def _is_batch(prompt) -> bool:
    """A list of prompts, as opposed to one prompt given as token ids or as chat messages."""
    return isinstance(prompt, (list, tuple)) and bool(prompt) and all(isinstance(p, (str, list, tuple)) for p in prompt)


def _merge_config(config: GenerationConfig | None, overrides: dict) -> GenerationConfig:
    cfg = GenerationConfig(**{**asdict(config or GenerationConfig()), **overrides})
    cfg.stop = list(cfg.stop or [])
    return cfg

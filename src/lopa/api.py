"""The public surface: Engine.from_pretrained(...), engine.generate(...), engine.stream(...)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import torch
from tqdm import tqdm

from .config import DraftConfig, GenerationConfig
from .decode.cost import CostModel
from .decode.loop import Drafting, SequenceDecoder, StepRecord, decode, kv_rows, step
from .decode.pricing import DrafterPrice
from .decode.sampling import TokenLogprob
from .decode.window import WindowController
from .draft.predictor import warm_up as warm_up_predictor
from .draft.predictor_io import PredictorSpec, predictor_for
from .draft.registry import new_drafters
from .errors import InvalidRequestError, ModelLoadError
from .models.compiled import buckets_up_to, compile_model, cuda_graph_capacity
from .models.loading import LoadedModel, load_model
from .models.lossy import LossyInt8Runner
from .models.profile import TREE_SIZES, forward_latency, load_or_measure_surface
from .models.runner import Runner
from .models.threads import apply_threads
from .text import TextStream

log = logging.getLogger("lopa")

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
    seed: int | None = None  # sampling: the seed the draws were keyed by (drawn when none was given); None: greedy


@dataclass
class StreamChunk:
    """A piece of text as it becomes final, with the step that produced it."""

    text: str
    step: StepRecord


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
            self.model, 1, static or 256, max_verify_tokens=max_verify_tokens, compiled=compiled, static=static is not None
        )
        if self.model.dtype in (torch.bfloat16, torch.float16):
            log.warning(
                "lopa: in %s a tree's forward rounds its tokens differently from one-token steps, so greedy lookahead "
                "equals plain decoding only up to near-ties at that precision (README: bf16 on the CPU); float32 "
                "keeps them equal", str(self.model.dtype).removeprefix("torch.")
            )
        # the EAGLE-3 predictor (draft/predictor_io.py); it reads the target's aux-layer features
        self.predictor = predictor_for(self.model, predictor, self.draft.use_predictor)
        if self.predictor is not None:
            self.runner.hidden_layers = tuple(self.predictor.config.aux_layers)
        self.cost = CostModel.flat()
        self.drafter_prices: dict[str, DrafterPrice] = {}  # each drafter's time and yield over the sequences so far
        self._warm_rows = 0  # with compile: the batch rows warm_up() has built graphs for
        self._int8_runner: Runner | None = None
        self._draft_model: torch.nn.Module | None = None
        self._lossy: LossyInt8Runner | None = None
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
    ) -> "Engine":
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
        cls, model: torch.nn.Module, tokenizer, *, draft: DraftConfig | None = None, predictor: PredictorSpec = False,
        max_verify_tokens: int | None = None, compile: bool = False, profile: bool = True,
    ) -> "Engine":
        """Wrap a Hugging Face causal LM the caller already loaded (their quantisation, their adapters, their
        device) without reloading or changing it; `tokenizer` is its tokenizer."""
        name = getattr(model.config, "name_or_path", "") or type(model).__name__
        loaded = LoadedModel(model.eval(), tokenizer, name, Path(name), 0.0)
        return cls(loaded, draft, max_verify_tokens, compile, predictor)._ready(profile)

    def _ready(self, profile: bool) -> "Engine":
        if profile:  # a compiled engine builds batch graphs only when asked (the server asks for its batch)
            self.profile(max_rows=1 if self.runner.compiled is not None else 16)
        if self.draft.draft_model is not None:
            self.draft_model  # load it now rather than inside the first request
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
        cfg = _merge_config(config, overrides)
        prompt_ids = self.encode_prompt(prompt, chat)
        cfg.validate()
        self.answer_room(len(prompt_ids), cfg.max_new_tokens)
        with self._exclusive():
            seq = SequenceDecoder(prompt_ids, cfg, self.eos_ids, self.drafting_for(cfg))
            output = SequenceOutput(self, seq)
            runner = self.lossy_runner if seq.drafting and self.draft.lossy_int8_verify else self.runner
            for record in decode(runner, seq, self.sizing):
                piece = output.add(record)
                if piece:
                    yield StreamChunk(piece, record)
                if output.text.stopped:
                    break
            tail, result = output.finish(len(output.stats.steps) - 1)  # the first came from the prefill
            if tail:
                yield StreamChunk(tail, record)
            yield result

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
        configs = [_merge_config(c, overrides) for c in config] if many else [_merge_config(config, overrides)] * len(prompts)
        for cfg in configs:
            cfg.validate()
        encoded = [self.encode_prompt(p, chat) for p in prompts]
        for ids, cfg in zip(encoded, configs):
            self.answer_room(len(ids), cfg.max_new_tokens)
        if not encoded:
            return []
        slots = max(1, min(max_batch, len(encoded)))
        longest = max(kv_rows(len(ids), cfg.max_new_tokens, self.draft.node_budget) for ids, cfg in zip(encoded, configs))
        runner = self.runner.sibling(slots, longest)
        results: list[GenerationResult | None] = [None] * len(encoded)
        # longest prompts first: a step's rows attend over the longest row's keys, so rows of like lengths waste less
        waiting = deque(sorted(range(len(encoded)), key=lambda i: -len(encoded[i])))
        rows: list[tuple[int, SequenceDecoder, SequenceOutput]] = []  # row i decodes in batch slot i
        show = progress if progress is not None else len(encoded) >= 8 and sys.stderr.isatty()
        with tqdm(total=len(encoded), disable=not show, desc="lopa", unit="prompt") as bar:
            while waiting or rows:
                while waiting and len(rows) < slots:
                    i = waiting.popleft()
                    seq = SequenceDecoder(encoded[i], configs[i], self.eos_ids, self.drafting_for(configs[i]))
                    output = SequenceOutput(self, seq)
                    out = runner.prefill(len(rows), torch.tensor(encoded[i]), 0)
                    output.add(seq.first(out.logits, out.layers))
                    rows.append((i, seq, output))
                for slot in reversed(range(len(rows))):  # finished rows leave; the last row takes the free slot
                    i, seq, output = rows[slot]
                    if seq.done or output.text.stopped:
                        results[i] = output.finish(seq.step)[1]
                        bar.update(1)
                        runner.free(slot, rows)
                if rows:
                    for (_, _, output), record in zip(rows, step(runner, [seq for _, seq, _ in rows], self.sizing)):
                        if isinstance(record, Exception):
                            raise record
                        output.add(record)
        return results

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


class SequenceOutput:
    """What one sequence has produced so far: its final text, token ids, logprobs and stats."""

    def __init__(self, engine: Engine, seq: SequenceDecoder):
        cfg = seq.cfg
        self.seq = seq
        self.text = TextStream(engine.tokenizer, cfg.stop, seq.eos_ids)
        self.stats = GenerationStats(cfg.method, prompt_tokens=len(seq.prompt))
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

    def finish(self, forwards: int) -> tuple[str, GenerationResult]:
        """Decoding ended after `forwards` verification steps: the held-back text and the result."""
        tail = self.text.close()  # text held back in case a stop string began there
        stats = self.stats
        stats.wall_s = time.perf_counter() - self.start
        stats.forwards = forwards
        stats.new_tokens = len(self.text.ids)
        drafting = self.seq.drafting
        if drafting:
            stats.window = drafting.controller.summary()
            stats.drafters = {d.source: d.summary() for d in drafting.drafters if hasattr(d, "summary")}
        logprobs = None if self.logprobs is None else self.logprobs[: len(self.text.ids)]  # none past a stop string
        return tail, GenerationResult(self.text.emitted, self.text.ids, self.text.finish, stats, logprobs, self.seq.seed)


def _is_batch(prompt) -> bool:
    """A list of prompts, as opposed to one prompt given as token ids or as chat messages."""
    return isinstance(prompt, (list, tuple)) and bool(prompt) and all(isinstance(p, (str, list, tuple)) for p in prompt)


def _merge_config(config: GenerationConfig | None, overrides: dict) -> GenerationConfig:
    cfg = GenerationConfig(**{**asdict(config or GenerationConfig()), **overrides})
    cfg.stop = list(cfg.stop or [])
    return cfg


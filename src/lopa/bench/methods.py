"""The decoding methods a benchmark compares, each behind one call: generate(prompt_ids, max_new_tokens) -> Run.

All run greedy on the same prompt token ids in the same process. `hf` is the reference
every speedup and exact match is measured against: stock transformers modules over the
engine's weights (`stock_twin`), none of lopa's kernels. lopa ablations are a table of
DraftConfig overrides, so adding one is one line.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from transformers.generation.streamers import BaseStreamer

from ..errors import InvalidRequestError

REFERENCE = "hf"
HF_METHODS = {"hf": {}, "hf-pld": {"prompt_lookup_num_tokens": 10}, "hf-assisted": {}}  # name -> generate() kwargs
ASSISTED = "hf-assisted"  # generate(assistant_model=the --draft-model, in fp32, stock modules)
NO_MODEL_DRAFTS = {"use_predictor": False, "draft_model": None}
LOPA_VARIANTS: dict[str, dict] = {  # name -> DraftConfig overrides
    "lopa": {},
    "lopa-lookup": {"use_ngram_pool": False, **NO_MODEL_DRAFTS},
    "lopa-ngram": NO_MODEL_DRAFTS,
    "lopa-predictor": {"use_prompt_lookup": False, "use_ngram_pool": False, "draft_model": None},
    "lopa-draft": {"use_prompt_lookup": False, "use_ngram_pool": False, "use_predictor": False},
    "lopa-fixed": {"dynamic_window": False},
}
COMPILED_METHODS = {"ar-compiled": "ar", "lopa-compiled": "lopa"}  # name -> method, on a torch.compile runner
LLAMACPP_METHODS = {"llamacpp": False, "llamacpp-pld": True}  # name -> prompt lookup on
ALL_METHODS = (*HF_METHODS, "ar", *LOPA_VARIANTS, *COMPILED_METHODS, *LLAMACPP_METHODS)
DESCRIPTIONS = {
    "hf": "transformers generate(), greedy",
    "hf-pld": "transformers generate(), greedy, prompt_lookup_num_tokens=10",
    "hf-assisted": "transformers generate(assistant_model=--draft-model in fp32), greedy, its default schedule",
    "ar": "lopa runner, one token per forward",
    "llamacpp": "llama-cpp-python on the GGUF (--gguf-precision), greedy",
    "llamacpp-pld": "llama-cpp-python on the GGUF (--gguf-precision) with prompt lookup (10 tokens)",
    **{
        name: "lopa " + (", ".join(f"{k}={v}" for k, v in o.items()) or "defaults") for name, o in LOPA_VARIANTS.items()
    },
    "ar-compiled": "ar on the torch.compile runner (graphs built before timing)",
    "lopa-compiled": "lopa defaults on the torch.compile runner (graphs built before timing)",
}


@dataclass
class Run:
    """What one generation produced and what it cost."""

    token_ids: list[int]
    wall_s: float  # the whole call: prefill + decoding
    prefill_s: float  # until the first new token exists
    forwards: int | None  # target forwards that emitted tokens, the prefill's included; None when unknown
    accept_lengths: list[int]  # drafted tokens accepted per decoding step (empty when unknown)
    draft_s: float | None = None  # of wall_s, drafting (lopa only: proposals, tree, drafters observing)
    verify_s: float | None = None  # of wall_s, verification forwards after the prefill (lopa only)
    predictor_depth1: tuple[int, int] | None = None  # (hits, trials) of the predictor's top-1 after the root


class Method(Protocol):
    name: str
    lossless: bool

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> Run: ...


class _ChunkClock(BaseStreamer):
    """Notes when generate() hands over each chunk of tokens; the first chunk is the prompt."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.sizes: list[int] = []

    def put(self, value: torch.Tensor) -> None:
        self.times.append(time.perf_counter())
        self.sizes.append(int(value.numel()))

    def end(self) -> None:
        pass


class _ForwardTimer:
    """Counts a module's forward calls and the time spent in them, through forward (pre-)hooks."""

    def __init__(self, module: torch.nn.Module):
        self.calls, self.seconds, self._start = 0, 0.0, 0.0
        self.handles = [module.register_forward_pre_hook(self._enter), module.register_forward_hook(self._leave)]

    def _enter(self, *_: object) -> None:
        self._start = time.perf_counter()

    def _leave(self, *_: object) -> None:
        self.calls += 1
        self.seconds += time.perf_counter() - self._start

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


class HFGenerate:
    """transformers generate() with extra kwargs (prompt lookup, an assistant model); forwards counted by hooks.

    With an assistant, the time inside its forwards is reported as drafting time."""

    lossless = True

    def __init__(self, name: str, model: torch.nn.Module, extra: dict, assistant: torch.nn.Module | None = None):
        self.name, self.model, self.extra, self.assistant = name, model, extra, assistant

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> Run:
        ids = torch.tensor([prompt_ids], device=self.model.device)
        extra = dict(self.extra, assistant_model=self.assistant) if self.assistant is not None else self.extra
        clock = _ChunkClock()
        target = _ForwardTimer(self.model)
        drafts = _ForwardTimer(self.assistant) if self.assistant is not None else None
        start = time.perf_counter()
        try:
            out = self.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                streamer=clock,
                **extra,
            )
        finally:
            for timer in (target, drafts):
                if timer is not None:
                    timer.remove()
        wall = time.perf_counter() - start
        prefill = clock.times[1] - start if len(clock.times) > 1 else wall
        # chunk 0 is the prompt, chunk 1 came from the prefill forward; later chunks are steps
        accepted = [n - 1 for n in clock.sizes[2:]]
        draft_s = drafts.seconds if drafts is not None else None
        return Run(out[0, len(prompt_ids) :].tolist(), wall, prefill, target.calls, accepted, draft_s)


class EngineMethod:
    """lopa's own loop: `ar` (no drafters) or lookahead with one DraftConfig."""

    lossless = True

    def __init__(self, name: str, engine, method: str):
        self.name, self.engine, self.method = name, engine, method

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> Run:
        start = time.perf_counter()
        result = self.engine.generate(prompt_ids, max_new_tokens=max_new_tokens, method=self.method, temperature=0.0)
        wall = time.perf_counter() - start
        s = result.stats
        first = s.drafters.get("predictor")
        depth1 = (first["depth1_hits"], first["depth1_trials"]) if first else None
        return Run(
            result.token_ids, wall, s.prefill_s, s.forwards, list(s.accept_lengths), s.draft_s, s.verify_s, depth1
        )


class LlamaCpp:
    """llama.cpp through llama-cpp-python on a GGUF: as shipped (quantised: compared by perplexity too) or lopa's
    full-precision copy of it (models/gguf_precision.py: the weights lopa runs)."""

    lossless = False

    def __init__(self, name: str, gguf: Path, prompt_lookup: bool, n_ctx: int, threads: int, flash_attn: bool):
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        draft = LlamaPromptLookupDecoding(num_pred_tokens=10) if prompt_lookup else None
        self.name, self.prompt_lookup = name, prompt_lookup
        # prompt lookup verifies drafts from every position's logits: llama-cpp-python keeps them all only with
        # logits_all (else its score buffer is sized by n_batch and a long prompt overflows it)
        self.llm = Llama(
            model_path=str(gguf),
            n_ctx=n_ctx,
            n_threads=threads,
            n_threads_batch=threads,
            draft_model=draft,
            logits_all=prompt_lookup,
            flash_attn=flash_attn,
            verbose=False,
        )
        self.eos = self.llm.token_eos()

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> Run:
        self.llm.reset()  # no KV reuse across prompts: every method pays its own prefill
        tokens: list[int] = []
        start = time.perf_counter()
        prefill = None
        for token in self.llm.generate(prompt_ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0):
            prefill = prefill if prefill is not None else time.perf_counter() - start
            tokens.append(int(token))
            if token == self.eos or len(tokens) >= max_new_tokens:
                break
        wall = time.perf_counter() - start
        if self.prompt_lookup:  # llama-cpp-python does not expose its verification steps
            return Run(tokens, wall, prefill or wall, None, [])
        return Run(tokens, wall, prefill or wall, len(tokens), [0] * (len(tokens) - 1))


def llamacpp_missing() -> str | None:
    """Why llama.cpp methods cannot run here, or None when llama-cpp-python imports."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError as exc:
        return f"llama-cpp-python is not installed ({exc.msg}); pip install 'lopa[llamacpp]'"
    return None


def parse_methods(text: str) -> list[str]:
    """Comma-separated names, validated; `hf` is always included since every ratio is against it."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ALL_METHODS]
    if unknown:
        raise InvalidRequestError(f"unknown methods {unknown}; choose from {', '.join(ALL_METHODS)}")
    return list(dict.fromkeys([REFERENCE, *names]))


def build_methods(
    names: list[str], engine, gguf: Callable[[], Path | None], threads: int, flash_attn: bool = False
) -> tuple[dict[str, Method], dict[str, str]]:
    """Instantiate the named methods on one loaded engine; returns (methods, skipped name -> reason).

    `gguf` is called only when a llama.cpp method is asked for and llama-cpp-python imports.
    """
    from ..api import Engine
    from ..models.fastkernels import stock_twin
    from ..models.loading import load_model

    methods: dict[str, Method] = {}
    skipped: dict[str, str] = {}
    compiled = None  # one torch.compile engine shared by the compiled methods
    for name in names:
        if name == ASSISTED and engine.draft.draft_model is None:
            skipped[name] = "no draft model (pass --draft-model NAME)"
        elif name == ASSISTED:
            assistant = load_model(engine.draft_model_source, device=str(engine.runner.device), fast=False).model
            methods[name] = HFGenerate(name, stock_twin(engine.model), {}, assistant)
        elif name in HF_METHODS:
            methods[name] = HFGenerate(name, stock_twin(engine.model), HF_METHODS[name])
        elif name == "ar":
            methods[name] = EngineMethod(name, engine, "ar")
        elif name in LOPA_VARIANTS:
            draft = dataclasses.replace(engine.draft, **LOPA_VARIANTS[name])
            variant = Engine(engine.loaded, draft, predictor=engine.predictor or False)  # --predictor's, loaded once
            variant.cost = engine.cost  # the same model on the same hardware: its profile
            if draft.draft_model is not None:
                variant.use_draft_model(engine.draft_model, engine.tokenizer)  # loaded once too
            if draft.use_prompt_lookup or draft.use_ngram_pool or variant.predictor is not None or draft.draft_model:
                methods[name] = EngineMethod(name, variant, "lopa")
            else:
                skipped[name] = "no drafter left: no predictor fits this model (see --predictor) and no --draft-model"
        elif name in COMPILED_METHODS:
            if compiled is None:
                compiled = Engine(engine.loaded, engine.draft, compile=True, predictor=engine.predictor or False)
                compiled.profile(max_rows=1)  # builds the graphs, and the compiled (padded) latency curve
            methods[name] = EngineMethod(name, compiled, COMPILED_METHODS[name])
        elif (reason := llamacpp_missing()) is not None:
            skipped[name] = reason
        elif (path := gguf()) is None:
            skipped[name] = "no GGUF file for this model (pass --gguf PATH)"
        else:
            n_ctx = min(engine.runner.max_positions, 8192)
            methods[name] = LlamaCpp(name, path, LLAMACPP_METHODS[name], n_ctx, threads, flash_attn)
    return methods, skipped

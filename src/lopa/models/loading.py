"""Load a causal LM from a catalog name, a local HF directory or a GGUF file.

GGUF files are dequantised by transformers once and cached as an fp32 safetensors copy, so later loads are much
faster; an int4 model is built from the GGUF itself (its 4-bit blocks kept), without that copy.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers import logging as hf_logging
from transformers.initialization import no_init_weights

from ..errors import ModelLoadError, UnsupportedModelError
from .catalog import CATALOG, DEFAULT_MODEL, cache_root, fetch_gguf
from .fastkernels import use_fast_kernels
from .fastlinear import PackedLinear
from .gguf_tensors import GGUFTensors
from .int4 import INT4, Int4Embedding, Int4Linear, keep_int4_embedding, quantize_int4, return_freed_memory
from .q8_vocabulary import Q8Embedding, Q8Vocabulary, keep_q8_vocabulary
from .quantize import INT8, quantize_int8


@dataclass
class LoadedModel:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    path: Path
    load_s: float

    @property
    def fingerprint(self) -> str:
        """A short hash of the input embedding matrix: identifies the weights, not the file."""
        return embedding_fingerprint(self.model)

    @property
    def num_parameters(self) -> int:
        """Weights counted as the model defines them (in x out of the layers holding theirs in another form)."""
        held = (Int4Linear, Q8Vocabulary, PackedLinear)  # layers that may keep their weight in another form
        others = [m for m in self.model.modules() if isinstance(m, held) and "weight" not in m._parameters]
        lookups = [m for m in self.model.modules() if isinstance(m, Int4Embedding)]
        held_elsewhere = sum(m.in_features * m.out_features for m in others)
        held_elsewhere += sum(m.num_embeddings * m.embedding_dim for m in lookups)
        return sum(p.numel() for p in self.model.parameters()) + held_elsewhere


def embedding_fingerprint(model: PreTrainedModel, dtype: torch.dtype | None = None) -> str:
    """A short hash of the model's input embedding matrix (every vocab/512-th row, in `dtype`, else the dtype it runs
    in): identifies the weights, not the file. Reads just those rows (a Q8_0 embedding built its whole bf16 matrix,
    and an fp32 copy of it, for this)."""
    vocab = model.get_input_embeddings().num_embeddings
    rows = token_rows(model)(torch.arange(0, vocab, max(1, vocab // 512)))
    return hashlib.sha256(rows.to(dtype or rows.dtype).float().cpu().numpy().tobytes()).hexdigest()[:16]


def token_rows(model: PreTrainedModel) -> Callable[[torch.Tensor], torch.Tensor]:
    """The rows of the model's input embedding matrix for token ids, unscaled (Gemma scales its own lookups), read
    in place: a drafter on the base's embedding needs a few rows a step, not a copy of the matrix (a Q8_0
    vocabulary dequantizes just those rows). Detached: a drafter trained on them leaves the base's weights alone."""
    embedding = model.get_input_embeddings()
    if isinstance(embedding, (Q8Embedding, Int4Embedding)):
        return embedding.forward
    return lambda ids: embedding.weight.detach()[ids]


def default_dtype(device: str) -> torch.dtype:
    return torch.float32 if device == "cpu" else torch.bfloat16


def _gguf_cache_dir(gguf: Path, kind: str) -> Path:
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    return cache_root() / kind / f"{gguf.stem}-{key}"


def _convert_gguf(gguf: Path, out_dir: Path, weights: bool) -> None:
    """Save the GGUF's config and tokenizer as transformers reads them (parsing a large vocabulary takes seconds:
    done once) and, with `weights`, its tensors dequantized by transformers as fp32 safetensors."""
    hf_logging.enable_progress_bar()  # minutes for a 1B+ model: show transformers' bars on stderr
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        if weights:
            saved = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
            # save_pretrained refuses quantizer-backed models; the weights are already plain fp32.
            saved.hf_quantizer = None
            if hasattr(saved.config, "quantization_config"):
                del saved.config.quantization_config
        else:
            saved = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except Exception as exc:  # transformers raises many types for a bad file
        raise ModelLoadError(f"{gguf} is not a readable GGUF model: {exc}") from exc
    finally:
        hf_logging.disable_progress_bar()
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    saved.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.rename(out_dir)


def source_gguf(spec: str | None) -> Path | None:
    """The GGUF file a model spec names (a catalog name or a .gguf path), or None for an HF directory."""
    spec = spec or DEFAULT_MODEL
    if spec in CATALOG:
        return fetch_gguf(spec)
    path = Path(spec).expanduser()
    return path if path.suffix == ".gguf" else None


def resolve_model_dir(spec: str | None, weights: bool = True) -> tuple[str, Path]:
    """Map a model spec to (display name, local HF directory), converting GGUFs on first use; without `weights`,
    a GGUF's directory holds only its config and tokenizer (for a model built from the file itself)."""
    spec = spec or DEFAULT_MODEL
    if spec not in CATALOG:
        path = Path(spec).expanduser()
        if not path.exists():
            known = "; ".join(f"{e.name} ({e.memory})" for e in CATALOG.values())
            raise ModelLoadError(f"model path {spec!r} does not exist (known names: {known})")
        if path.is_dir():
            if not (path / "config.json").exists():
                raise ModelLoadError(f"{path} has no config.json: not a Hugging Face model directory")
            return path.name, path
        if path.suffix != ".gguf":
            raise ModelLoadError(f"{path} is neither a model directory nor a .gguf file")
    gguf = source_gguf(spec)
    out_dir = _gguf_cache_dir(gguf, "converted" if weights else "gguf-metadata")
    if not out_dir.exists():
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        _convert_gguf(gguf, out_dir, weights)
    return spec if spec in CATALOG else gguf.stem, out_dir


def _int4_from_gguf(config: PretrainedConfig, gguf: Path, table: Path) -> PreTrainedModel:
    """The int4 model built from its GGUF without an fp32 copy: a bf16 skeleton left uninitialised (its large
    matrices are never touched, so never resident) takes the file's embeddings, norms and biases, then each
    decoder linear layer becomes an Int4Linear from the file, and the vocabulary projection runs in Q8_0 where it can
    (models/q8_vocabulary.py).
    The weights equal those of a bf16 load of transformers' conversion, quantized the same way (tested). `table`:
    where the file's tensors lie, cached (models/gguf_tensors.tensor_table)."""
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.tie_weights()  # from_pretrained ties them after loading; here they must be tied before filling
    model.eval().requires_grad_(False)
    tensors = GGUFTensors(gguf, model, table)
    vocabulary = keep_q8_vocabulary(model, tensors) or "bf16"
    keep_int4_embedding(model, tensors)
    linears = {module for module in model.get_decoder().modules() if type(module) is nn.Linear}
    linear_weights = {f"{name}.weight" for name, module in model.named_modules() if module in linears}
    for name, parameter in model.named_parameters():  # tied parameters once
        if name in linear_weights:
            continue  # quantize_int4 reads them, one layer at a time
        if name not in tensors:
            raise ModelLoadError(f"{gguf} has no tensor for the model's {name}")
        tensors.read_into(name, parameter)
    quantize_int4(model, tensors)
    model.lopa_int4_layers["vocabulary"] = vocabulary
    del tensors  # the file's mapping (and a reader's parsed metadata, the first time)
    return_freed_memory()
    return model


def load_model(
    spec: str | None = None,
    *,
    device: str = "cpu",
    dtype: torch.dtype | str | None = None,
    trust_remote_code: bool = False,
    fast: bool = True,
) -> LoadedModel:
    """Load the model named by `spec` (catalog name, HF directory or .gguf path; None = default).

    dtype "int8": fp32 weights with the decoder's linear layers quantized to int8 (CPU, models/quantize.py).
    dtype "int4": bf16 with the decoder's linear layers int4 weight-only, a GGUF's own 4-bit blocks kept as they
    are (CPU, models/int4.py), and its vocabulary projection in Q8_0 on a row-invariant int8 kernel (the file's own
    blocks, or quantized once: models/q8_vocabulary.py).
    fast: lopa's CPU kernels (oneDNN-packed linears, in-place grouped-KV attention: models/fastkernels.py);
    False leaves the stock transformers modules.
    """
    start = time.perf_counter()
    hf_logging.disable_progress_bar()
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} asked for, but this torch build sees no CUDA device")
    int8, int4 = dtype == INT8, dtype == INT4
    if int4 and torch.device(device).type != "cpu":
        raise UnsupportedModelError("int4 runs on the CPU only (--device cpu)")
    gguf = source_gguf(spec) if int4 else None  # an int4 model is built from its GGUF itself
    name, path = resolve_model_dir(spec, weights=gguf is None)
    dtype = torch.float32 if int8 else torch.bfloat16 if int4 else dtype or default_dtype(device)
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        if gguf is None:
            model = AutoModelForCausalLM.from_pretrained(
                path, config=config, dtype=dtype, trust_remote_code=trust_remote_code, attn_implementation="sdpa"
            )
    except Exception as exc:  # safetensors, json and transformers each raise their own types
        raise ModelLoadError(f"could not load a causal LM from {path}: {exc}") from exc
    if gguf is not None:
        model, path = _int4_from_gguf(config, gguf, table=path / "tensors.json"), gguf  # beside config and tokenizer
    else:
        model.to(device).eval()
        model.requires_grad_(False)
    if int8:
        quantize_int8(model)
    if int4 and gguf is None:
        quantize_int4(model)
        model.lopa_int4_layers["vocabulary"] = "bf16"
    if fast:
        use_fast_kernels(model)
    return LoadedModel(model, tokenizer, name, path, time.perf_counter() - start)

"""Load a diffusion LM from a local directory: the project's own model or a HF checkpoint.

Own models are recognised by `tokenizer.json` of type "byte" next to `model.safetensors`.
Anything else goes through transformers; `trust_remote_code` stays off unless the
caller asks (Dream and LLaDA ship custom modeling code and need it).
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import load_file

from ..errors import ModelLoadError
from .adapter import CachedAdapter, FullSequenceAdapter
from .model import DLLM, DLLMConfig
from .tokenizer import ByteTokenizer

DEFAULT_PATH = Path(__file__).resolve().parent.parent / "data" / "dllm"
SHIFTED_TYPES = ("dream",)  # model_type values whose logits at i predict token i + 1


def _is_own(path: Path) -> bool:
    tok = path / "tokenizer.json"
    try:
        return tok.is_file() and json.loads(tok.read_text()).get("type") == "byte"
    except (ValueError, OSError):
        return False


def _load_own(path: Path):
    try:
        raw = json.loads((path / "config.json").read_text())
        cfg = DLLMConfig(**{k: v for k, v in raw.items() if k in DLLMConfig.__dataclass_fields__})
        model = DLLM(cfg)
        model.load_state_dict(load_file(str(path / "model.safetensors")))
    except (OSError, ValueError, KeyError, RuntimeError, TypeError, SafetensorError) as e:
        raise ModelLoadError(f"cannot load diffusion model from {path}: {e}") from e
    return CachedAdapter(model), ByteTokenizer.load(path / "tokenizer.json")


def _load_hf(path: Path, trust_remote_code: bool, shift: bool | None):
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as e:
        hint = "" if trust_remote_code else " (Dream/LLaDA checkpoints need --trust-remote-code)"
        raise ModelLoadError(f"cannot load {path}: {e}{hint}") from e
    mask_id = getattr(tok, "mask_token_id", None)
    if mask_id is None:
        mask_id = getattr(config, "mask_token_id", None)
    if mask_id is None:
        raise ModelLoadError(f"{path} has no mask token: not a masked diffusion model")
    try:
        model = (
            AutoModelForMaskedLM if type(config) in AutoModelForMaskedLM._model_mapping else AutoModel
        ).from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"cannot load weights from {path}: {e}") from e
    if shift is None:
        shift = getattr(config, "model_type", "").lower() in SHIFTED_TYPES
    max_len = getattr(config, "max_position_embeddings", None) or 4096
    return FullSequenceAdapter(model, int(mask_id), shift, max_len), tok


def load_dllm(path: str | Path | None = None, trust_remote_code: bool = False, shift: bool | None = None):
    """(adapter, tokenizer) for the model at `path` (default: the shipped model).

    `shift` overrides the logit alignment of a HF model (default: by model_type).
    """
    path = Path(path) if path is not None else DEFAULT_PATH
    if not path.is_dir():
        raise ModelLoadError(f"diffusion model path {path} does not exist or is not a directory")
    return _load_own(path) if _is_own(path) else _load_hf(path, trust_remote_code, shift)

"""Reading a draft model's directory (config.json + safetensors) with one clear ModelLoadError per defect, and
the identity of the base model such a file records."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from ..errors import ModelLoadError
from ..models.loading import embedding_fingerprint


def model_identity(model, name: str = "") -> dict:
    """What a draft file records about its base model (a PreTrainedModel): sizes, architecture, weight fingerprints."""
    cfg = model.config
    return {
        "hidden_size": cfg.get_text_config().hidden_size,
        "vocab_size": model.get_output_embeddings().out_features,
        "architecture": (cfg.architectures or [type(model).__name__])[0],
        "fingerprint": embedding_fingerprint(model),
        "fingerprints": [embedding_fingerprint(model, dtype) for dtype in (torch.float16, torch.bfloat16)],
        "base_name": name,
        "base_parameters": sum(p.numel() for p in model.parameters()),
    }


def read_config_json(path: Path, name: str, kind: str) -> object:
    """The parsed `path / name`; ModelLoadError when it is missing (`path` is then not a `kind` directory) or not JSON."""
    try:
        return json.loads((path / name).read_text())
    except FileNotFoundError:
        raise ModelLoadError(f"{path} is not a {kind} directory: no {name}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{path / name} is not valid JSON: {exc}") from None


def read_weights(path: Path, name: str) -> dict[str, torch.Tensor]:
    """The tensors of `path / name` (safetensors, no pickle); ModelLoadError when missing, truncated or corrupt."""
    try:
        return load_file(str(path / name))
    except FileNotFoundError:
        raise ModelLoadError(f"{path} has no {name}") from None
    except (SafetensorError, OSError, ValueError) as exc:
        raise ModelLoadError(f"{path / name} is truncated or corrupt: {exc}") from None

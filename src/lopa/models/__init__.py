"""Model loading, the static tree KV cache and the runner that drives the stock transformers forward."""

from .loading import LoadedModel, load_model
from .runner import Runner

__all__ = ["LoadedModel", "load_model", "Runner"]

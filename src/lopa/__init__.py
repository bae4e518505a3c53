"""lopa: lossless lookahead parallel decoding for Hugging Face language models."""

from .api import Engine, GenerationResult, GenerationStats, StreamChunk
from .config import DraftConfig, GenerationConfig
from .errors import InvalidRequestError, LopaError, ModelLoadError, UnsupportedModelError

__all__ = [
    "Engine",
    "GenerationResult",
    "GenerationStats",
    "StreamChunk",
    "DraftConfig",
    "GenerationConfig",
    "LopaError",
    "InvalidRequestError",
    "ModelLoadError",
    "UnsupportedModelError",
]
__version__ = "0.1.0"

"""lopa: lossless lookahead parallel decoding for Hugging Face language models."""

from .api import Engine
from .config import DraftConfig, GenerationConfig
from .decode.output import GenerationResult, GenerationStats, StreamChunk
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

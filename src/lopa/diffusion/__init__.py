"""Diffusion LLMs: confidence-driven block decoding and LoPA branch search (arXiv 2512.16229).

from lopa.diffusion import load_dllm, DecodeConfig, DiffusionDecoder
adapter, tok = load_dllm()            # the shipped stdlib model, or a Dream/LLaDA directory
ids, stats = DiffusionDecoder(adapter, DecodeConfig(branches=4)).generate(tok.encode("def f("))
"""

from .decoder import DecodeConfig, DecodeStats, DiffusionDecoder
from .loader import load_dllm

__all__ = ["DecodeConfig", "DecodeStats", "DiffusionDecoder", "load_dllm"]

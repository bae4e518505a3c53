"""`lopa bench`: lopa against transformers generate, its prompt lookup and llama.cpp, on Spec-Bench or built-in prompts."""

from .benchmark import BenchOptions, run_benchmark, write_outputs
from .quality import perplexity
from .schema import validate

__all__ = ["BenchOptions", "perplexity", "run_benchmark", "validate", "write_outputs"]

"""The offline training corpus: the standard library's top-level .py files, sorted.

Every Python install has them, so training is reproducible on any machine; every 20th
file is held out for evaluation and the benchmark's completion task.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import torch

HOLDOUT_EVERY = 20


def stdlib_files() -> list[Path]:
    return sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))


def split_files() -> tuple[list[Path], list[Path]]:
    """(train, held-out) file lists."""
    fs = stdlib_files()
    return ([f for i, f in enumerate(fs) if i % HOLDOUT_EVERY], [f for i, f in enumerate(fs) if i % HOLDOUT_EVERY == 0])


def encode_files(files: list[Path], eos: int) -> torch.Tensor:
    """All files as one int64 byte stream, each followed by eos."""
    out: list[int] = []
    for f in files:
        out += list(f.read_bytes()) + [eos]
    return torch.tensor(out, dtype=torch.long)

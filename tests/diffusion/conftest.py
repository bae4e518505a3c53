import sys
from pathlib import Path

import pytest
import torch

SRC = Path(__file__).resolve().parents[2] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def shipped():
    from lopa.diffusion import load_dllm
    return load_dllm()


@pytest.fixture(scope="session")
def prompts(shipped):
    from lopa.diffusion.quality import completion_tasks
    return [shipped[1].encode(p) for p, _ in completion_tasks(4)]

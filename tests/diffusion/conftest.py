import pytest


@pytest.fixture(scope="session")
def shipped():
    from lopa.diffusion import load_dllm

    return load_dllm()


@pytest.fixture(scope="session")
def prompts(shipped):
    from lopa.diffusion.quality import completion_tasks

    return [shipped[1].encode(p) for p, _ in completion_tasks(4)]

"""Tree verification: every node's logits equal those of its path decoded sequentially."""

from __future__ import annotations

import pytest
import torch

from lopa import Engine
from lopa.draft.tree import DraftTree
from lopa.errors import InvalidRequestError
from lopa.models.runner import Runner


def random_tree(root: int, size: int, vocab: int, seed: int) -> DraftTree:
    gen = torch.Generator().manual_seed(seed)
    tree = DraftTree([root], [-1], [0], ["root"], [[]])
    for i in range(1, size):
        parent = int(torch.randint(0, i, (1,), generator=gen))
        tree.tokens.append(int(torch.randint(0, vocab, (1,), generator=gen)))
        tree.parents.append(parent)
        tree.depths.append(tree.depths[parent] + 1)
        tree.sources.append("test")
        tree.children.append([])
        tree.children[parent].append(i)
    return tree


def sequential_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1]


@pytest.mark.parametrize("static_capacity", [None, 256], ids=["dynamic-kv", "static-kv"])
def test_tree_node_logits_equal_sequential_decoding(engine: Engine, static_capacity: int | None) -> None:
    model, runner = engine.model, Runner(engine.model, static_capacity=static_capacity)
    prompt = engine.tokenizer("The tree attention mask must be exact:").input_ids
    runner.reset(len(prompt) + 40)
    runner.prefill(torch.tensor(prompt))
    tree = random_tree(root=464, size=14, vocab=5000, seed=1)
    out = runner.forward(*tree.tensors())
    for node in range(tree.size):
        want = sequential_logits(model, prompt + tree.path_tokens(node))
        torch.testing.assert_close(out.logits[node], want, atol=1e-4, rtol=0)

    # keep a non-contiguous path: its KV rows move down, and the next step must still be exact
    leaf = max(range(tree.size), key=lambda n: tree.depths[n])
    path = tree.path_nodes(leaf)
    runner.commit(path)
    nxt = random_tree(root=13, size=5, vocab=5000, seed=2)
    out = runner.forward(*nxt.tensors())
    committed = prompt + tree.path_tokens(leaf)
    for node in range(nxt.size):
        want = sequential_logits(model, committed + nxt.path_tokens(node))
        torch.testing.assert_close(out.logits[node], want, atol=1e-4, rtol=0)


def test_cache_buffers_are_reused_across_requests(engine: Engine) -> None:
    runner = Runner(engine.model)
    runner.reset(64)
    runner.prefill(torch.tensor([1, 2, 3]))
    buffers = runner.cache.layers[0].keys
    runner.reset(32)
    runner.prefill(torch.tensor([4, 5]))
    assert runner.cache.layers[0].keys is buffers


def test_static_cache_is_allocated_once_and_decodes_losslessly(engine: Engine) -> None:
    """The static cache (what CUDA graphs replay over) keeps one buffer for every request and attends to all
    of it under the mask; greedy lopa on it equals plain decoding, and a request it cannot hold is refused."""
    static = Engine(engine.loaded)
    static.runner = Runner(engine.model, static_capacity=512)
    static.runner.hidden_layers = engine.runner.hidden_layers  # what the shipped predictor drafts from
    prompt = "List three facts about the Moon."
    want = engine.generate(prompt, max_new_tokens=48, method="ar").token_ids
    assert static.generate(prompt, max_new_tokens=48).token_ids == want
    cache = static.runner.cache
    assert cache.capacity == 512 and cache.offset is not None
    assert static.generate("Hi.", max_new_tokens=8, method="ar").token_ids == engine.generate("Hi.", max_new_tokens=8, method="ar").token_ids
    assert static.runner.cache is cache
    with pytest.raises(InvalidRequestError, match="static cache holds 512"):
        static.runner.reset(600)

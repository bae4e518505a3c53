"""Tree verification: every node's logits equal those of its path decoded sequentially."""

from __future__ import annotations

import pytest
import torch

from lopa import Engine
from lopa.draft.tree import DraftTree
from lopa.errors import InvalidRequestError
from lopa.models.attention import Packing
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


@pytest.mark.parametrize("static", [False, True], ids=["dynamic-kv", "static-kv"])
def test_tree_node_logits_equal_sequential_decoding(engine: Engine, static: bool) -> None:
    model, runner = engine.model, Runner(engine.model, 1, 256, static=static)
    prompt = engine.tokenizer("The tree attention mask must be exact:").input_ids
    runner.prefill(0, torch.tensor(prompt), 0)
    tree = random_tree(root=464, size=14, vocab=5000, seed=1)
    (out,) = runner.verify([tree.tensors()])
    for node in range(tree.size):
        want = sequential_logits(model, prompt + tree.path_tokens(node))
        torch.testing.assert_close(out.logits[node], want, atol=1e-4, rtol=0)

    # keep a non-contiguous path: its KV rows move down, and the next step must still be exact
    leaf = max(range(tree.size), key=lambda n: tree.depths[n])
    path = tree.path_nodes(leaf)
    runner.commit(0, path)
    nxt = random_tree(root=13, size=5, vocab=5000, seed=2)
    (out,) = runner.verify([nxt.tensors()])
    committed = prompt + tree.path_tokens(leaf)
    for node in range(nxt.size):
        want = sequential_logits(model, committed + nxt.path_tokens(node))
        torch.testing.assert_close(out.logits[node], want, atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    "static, chunk", [(False, None), (False, 4), (True, None)], ids=["dynamic-kv", "dynamic-kv-chunked", "static-kv"]
)
def test_rows_of_a_batch_do_not_see_each_other(engine: Engine, static: bool, chunk: int | None) -> None:
    """Three sequences of different lengths verify different trees in one forward (a static cache pads the
    batch to 4 rows; a dynamic one packs the 21 real nodes into one row, in chunks of 4 columns when asked);
    every node equals sequential decoding of its own row, after a commit too."""
    model, runner = engine.model, Runner(engine.model, 4, 128, static=static, max_verify_tokens=chunk)
    prompts = [engine.tokenizer(t).input_ids for t in ("One.", "A longer second prompt here:", "Third, mid size")]
    for slot, ids in enumerate(prompts):
        runner.prefill(slot, torch.tensor(ids), 0)
    trees = [random_tree(root=100 + i, size=3 + 4 * i, vocab=5000, seed=10 + i) for i in range(3)]
    fed: list[tuple[int, ...]] = []
    hook = model.get_input_embeddings().register_forward_hook(lambda _m, args, _out: fed.append(tuple(args[0].shape)))
    try:
        outs = runner.verify([t.tensors() for t in trees])
    finally:
        hook.remove()
    if static:
        assert fed == [(4, 11)]
    else:  # packed: column ranges 0-3, 4-7, 8-10 hold 3+4+4, 0+3+4 and 0+0+3 nodes
        assert fed == ([(1, 21)] if chunk is None else [(1, 11), (1, 7), (1, 3)])
    for slot, out in enumerate(outs):
        for node in range(trees[slot].size):
            want = sequential_logits(model, prompts[slot] + trees[slot].path_tokens(node))
            torch.testing.assert_close(out.logits[node], want, atol=5e-4, rtol=0)  # batched kernels round differently
    leaves = [max(range(t.size), key=lambda n: t.depths[n]) for t in trees]
    for slot, (tree, leaf) in enumerate(zip(trees, leaves)):
        runner.commit(slot, tree.path_nodes(leaf))
        prompts[slot] = prompts[slot] + tree.path_tokens(leaf)
    occupants = [0, 1, 2]
    runner.free(0, occupants)  # the last sequence moves into slot 0
    assert occupants == [2, 1]
    outs = runner.verify([random_tree(7, 4, 5000, seed=20).tensors()] * 2)
    for slot, out in zip(occupants, outs):
        torch.testing.assert_close(out.logits[0], sequential_logits(model, prompts[slot] + [7]), atol=5e-4, rtol=0)


def test_packed_trees_in_rows_far_apart_are_exact(engine: Engine) -> None:
    """Trees of 5 and 9 nodes in rows 0 and 5 of 6, one node elsewhere: attention takes the two rows' keys by
    index rather than as a view of rows 0-5 (Packing's copy path); every node equals sequential decoding."""
    model, runner = engine.model, Runner(engine.model, 6, 128)
    prompts = [engine.tokenizer(f"Prompt {i} of six says").input_ids for i in range(6)]
    for slot, ids in enumerate(prompts):
        runner.prefill(slot, torch.tensor(ids), 0)
    sizes = [5, 1, 1, 1, 1, 9]
    trees = [random_tree(root=200 + i, size=size, vocab=5000, seed=30 + i) for i, size in enumerate(sizes)]
    real = torch.arange(9)[None, :] < torch.tensor(sizes)[:, None]
    assert isinstance(Packing.of(real).blocks[1].rows, torch.Tensor)
    for slot, out in enumerate(runner.verify([t.tensors() for t in trees])):
        for node in range(trees[slot].size):
            want = sequential_logits(model, prompts[slot] + trees[slot].path_tokens(node))
            torch.testing.assert_close(out.logits[node], want, atol=5e-4, rtol=0)


def test_kv_slots_grow_and_keep_their_rows(engine: Engine) -> None:
    runner = Runner(engine.model, 1, 8)
    ids = list(range(20, 60))
    runner.prefill(0, torch.tensor(ids[:5]), 0)
    last = runner.prefill(0, torch.tensor(ids[5:]))  # appends past the first capacity: the buffers grow
    assert runner.capacity >= 40 and runner.lengths[0] == 40
    torch.testing.assert_close(last.logits[-1], sequential_logits(engine.model, ids), atol=1e-4, rtol=0)
    runner.truncate(0, 30)
    again = runner.prefill(0, torch.tensor(ids[30:]))
    torch.testing.assert_close(again.logits[-1], last.logits[-1], atol=1e-4, rtol=0)


def test_static_cache_is_allocated_once_and_decodes_losslessly(engine: Engine) -> None:
    """The static cache (what CUDA graphs replay over) keeps one buffer for every request and attends to all
    of it under the mask; greedy lopa on it equals plain decoding, and a request it cannot hold is refused."""
    static = Engine(engine.loaded)
    static.cost = engine.cost
    static.runner = Runner(engine.model, 1, 512, static=True)
    static.runner.hidden_layers = engine.runner.hidden_layers  # what the shipped predictor drafts from
    prompt = "List three facts about the Moon."
    want = engine.generate(prompt, max_new_tokens=48, method="ar").token_ids
    assert static.generate(prompt, max_new_tokens=48).token_ids == want
    buffers = static.runner.buffers[0][0]
    assert static.runner.capacity == 512 and static.runner.offset is not None
    assert (
        static.generate("Hi.", max_new_tokens=8, method="ar").token_ids
        == engine.generate("Hi.", max_new_tokens=8, method="ar").token_ids
    )
    assert static.runner.buffers[0][0] is buffers
    with pytest.raises(InvalidRequestError, match="static cache holds 512"):
        static.runner.reserve(600)

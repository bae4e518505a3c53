"""fp32, bf16 and int4 on the CPU: a token verified in a tree gets one-token steps' logits bit for bit, so greedy
(and seeded) lookahead is plain decoding at those precisions; int4 keeps a GGUF's own 4-bit blocks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader
from gguf.quants import dequantize, quantize
from transformers import LlamaConfig, LlamaForCausalLM

from lopa import DraftConfig, Engine
from lopa.models import native
from lopa.models.attention import tree_attention
from lopa.models.breakdown import weight_bytes
from lopa.models.fastkernels import row_invariant
from lopa.models.gguf_precision import full_precision_gguf
from lopa.models.gguf_tensors import GGUFTensors, tensor_table
from lopa.models.int4 import (
    Int4Embedding,
    Int4Linear,
    _tile_kernel,
    keep_int4_embedding,
    quantize_int4,
    row_invariant_kernel,
    unpack_blocks,
)
from lopa.models.loading import load_model, source_gguf, token_rows
from lopa.models.ordered_attention import ordered_attention
from lopa.models.q8_vocabulary import Q8Vocabulary, keep_q8_vocabulary
from lopa.models.runner import Runner
from tests.prompts import FAST, accepted_by_source

HEADS, KV_HEADS, DIM = 9, 3, 64
NO_COMPILER = pytest.mark.skipif(not row_invariant_kernel(8, tiles=False), reason="no C compiler")


def _tree_mask(prefix: int, parents: list[int], dtype: torch.dtype) -> torch.Tensor:
    """[1, 1, T, prefix + T]: node i sees the prefix and its ancestors (itself included)."""
    nodes = len(parents)
    allowed = torch.zeros(nodes, prefix + nodes, dtype=torch.bool)
    allowed[:, :prefix] = True
    for node in range(nodes):
        walk = node
        while walk >= 0:
            allowed[node, prefix + walk], walk = True, parents[walk]
    return torch.where(allowed, 0.0, torch.finfo(dtype).min).to(dtype)[None, None]


# (query heads, KV heads, head dim): SmolLM2's; Qwen2.5-Coder-1.5B's groups and head size; a head size whose last
# 16 values take the kernel's narrower path
SHAPES = [(HEADS, KV_HEADS, DIM), (12, 2, 128), (4, 1, 48)]


@pytest.mark.parametrize("heads, kv_heads, dim", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_ordered_attention_is_attention(dtype: torch.dtype, heads: int, kv_heads: int, dim: int) -> None:
    torch.manual_seed(0)
    parents = [-1, 0, 0, 2, 1, 3]
    q = torch.randn(2, len(parents), heads, dim).to(dtype).transpose(1, 2)  # the model's strides
    k, v = (torch.randn(2, kv_heads, 40 + len(parents), dim).to(dtype) for _ in range(2))
    mask = _tree_mask(40, parents, dtype).expand(2, -1, -1, -1)
    got = ordered_attention(q, k, v, mask, dim**-0.5)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask.double(), enable_gqa=True)
    assert got.dtype == dtype
    assert torch.equal(ordered_attention(q, k, v, mask[:1], dim**-0.5), got)  # one mask shared by the rows
    assert torch.equal(ordered_attention(q, k, v, mask == 0, dim**-0.5), got)  # transformers' boolean form
    torch.testing.assert_close(
        got.double(), want.transpose(1, 2), atol=2e-6 if dtype == torch.float32 else 1e-2, rtol=0
    )


@pytest.mark.parametrize("heads, kv_heads, dim", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_tree_query_equals_the_same_query_alone(dtype: torch.dtype, heads: int, kv_heads: int, dim: int) -> None:
    """Ancestors at other slots, masked siblings between them, more keys, another row beside it: bit-identical
    to the query alone over exactly its keys in order (what a one-token step after commit computes). 11 nodes:
    the queries fill two blocks of 4 and part of a third, the keys part of a tile of 16."""
    torch.manual_seed(1)
    prefix, parents = 37, [-1, 0, 0, 2, 1, 3, 3, 6, 7, 0, 9]
    q = torch.randn(2, heads, len(parents), dim, dtype=dtype)
    k, v = (torch.randn(2, kv_heads, prefix + len(parents), dim, dtype=dtype) for _ in range(2))
    tree = ordered_attention(q, k, v, _tree_mask(prefix, parents, dtype).expand(2, -1, -1, -1), dim**-0.5)
    for node in range(len(parents)):
        path, walk = [], node
        while walk >= 0:
            path, walk = [prefix + walk, *path], parents[walk]
        keys = list(range(prefix)) + path
        alone = ordered_attention(
            q[1:, :, node : node + 1],
            k[1:, :, keys],
            v[1:, :, keys],
            torch.zeros(1, 1, 1, len(keys), dtype=dtype),
            dim**-0.5,
        )
        assert torch.equal(alone[0, 0], tree[1, node]), f"node {node}"


def _four_bit_blocks(rows: int) -> dict[Q, np.ndarray]:
    """Each 4-bit GGUF type's raw bytes for `rows` rows of 512 weights."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((rows, 512)).astype(np.float32)
    blocks = {kind: quantize(weight, kind) for kind in (Q.Q4_0, Q.Q4_1)}
    # Q4_K (gguf-py cannot quantize it): random super-blocks of 256 (fp16 d and dmin, 6-bit scales, nibbles)
    k_blocks = rng.integers(0, 256, size=(rows, 2, 144), dtype=np.uint8)
    k_blocks[..., 0:4] = np.abs(rng.standard_normal((rows, 2, 2)) * 0.01).astype(np.float16).view(np.uint8)
    blocks[Q.Q4_K] = k_blocks.reshape(rows, -1)
    return blocks


def test_four_bit_blocks_unpack_as_gguf_dequantizes() -> None:
    for kind, data in _four_bit_blocks(8).items():
        codes, scale, low = unpack_blocks(data, kind, rows=8)
        assert codes.min() >= 0 and codes.max() <= 15
        ours = codes.reshape(8, -1, 32).astype(np.float32) * scale[..., None] + low[..., None]
        np.testing.assert_allclose(ours.reshape(8, -1), dequantize(data, kind), rtol=1e-6, atol=1e-7, err_msg=kind.name)


def test_int4_embedding_rows_are_transformers_values() -> None:
    """A 4-bit embedding looks rows up in the file's blocks to exactly the bf16 values transformers' loader gives."""
    for kind, data in _four_bit_blocks(64).items():
        embedding = Int4Embedding(*(torch.from_numpy(a) for a in unpack_blocks(data, kind, rows=64)))
        expected = torch.from_numpy(dequantize(data, kind)).bfloat16()
        assert torch.equal(embedding.weight, expected), kind.name
        ids = torch.tensor([[3, 63, 3], [0, 17, 40]])
        assert torch.equal(embedding(ids), expected[ids]), kind.name


@pytest.mark.parametrize("tied", [False, True])
def test_an_untied_four_bit_embedding_stays_in_its_blocks(tied: bool) -> None:
    """An int4 model's untied embedding stored in 4-bit blocks is looked up in them (drafters read the same rows);
    a tied one stays a matrix, which the vocabulary projection reads whole."""
    config = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=128, tie_word_embeddings=tied,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    data = quantize(np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32), Q.Q4_1)

    class File:  # what keep_int4_embedding reads of a GGUFTensors
        def __contains__(self, name: str) -> bool:
            return name == "model.embed_tokens.weight"

        def blocks(self, name: str) -> tuple[torch.Tensor, ...]:
            return tuple(torch.from_numpy(a) for a in unpack_blocks(data, Q.Q4_1, rows=128))

    assert keep_int4_embedding(model, File()) == (not tied)
    embedding = model.get_input_embeddings()
    assert isinstance(embedding, Int4Embedding) != tied
    if not tied:
        assert torch.equal(embedding.weight, torch.from_numpy(dequantize(data, Q.Q4_1)).bfloat16())
        ids = torch.tensor([5, 127, 5])
        assert torch.equal(token_rows(model)(ids), embedding.weight[ids])


@NO_COMPILER
@pytest.mark.parametrize("stored", [Q.Q8_0, Q.Q5_0])
def test_an_untied_vocabulary_projection_runs_in_q8_0(stored: Q) -> None:
    """An int4 model's untied output projection runs in Q8_0: the file's own codes and scales where it stores Q8_0
    (Qwen2.5-Coder-0.5B), else quantized by Q8_0's rule from the values transformers' loader gives (the 1.5B's
    Q6_K; here Q5_0, which gguf-py writes): every weight within half a step of that value, the step the group's largest
    magnitude / 127."""
    config = LlamaConfig(
        hidden_size=256, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=512, tie_word_embeddings=False,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    data = quantize(np.random.default_rng(0).standard_normal((512, 256)).astype(np.float32), stored)
    values = torch.from_numpy(dequantize(data, stored))

    class File:  # what keep_q8_vocabulary reads of a GGUFTensors
        def __contains__(self, name: str) -> bool:
            return name == "lm_head.weight"

        def stored(self, name: str):
            return type("Tensor", (), {"tensor_type": stored, "data": data, "shape": np.array([256, 512])})

        def slabs(self, name: str):
            yield 0, values[:300]
            yield 300, values[300:]

    expected = "q8_0" if stored == Q.Q8_0 else "q8_0-by-lopa"
    assert keep_q8_vocabulary(model, File()) == expected
    projection = model.get_output_embeddings()
    assert isinstance(projection, Q8Vocabulary) and not isinstance(model.get_input_embeddings(), Q8Vocabulary)
    if stored == Q.Q8_0:
        assert torch.equal(projection.weight, values.bfloat16())
    else:
        step = values.unflatten(1, (-1, 32)).abs().amax(-1).repeat_interleave(32, dim=1) / 127
        assert projection.codes.abs().max() == 127  # each group's largest magnitude
        rounding = (values.abs() + step) * 2**-8  # .weight is rounded to bf16
        assert ((projection.weight.float() - values).abs() <= step / 2 + rounding).all()
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    weight = projection.weight.float()  # code * scale rounded to bf16 (by 2^-9 of it at most); the logits are bf16 too
    expected = x.float() @ weight.T
    bound = (x.float().abs() @ weight.abs().T + expected.abs()) * 2**-8 + 1e-3
    assert ((projection(x).float() - expected).abs() <= bound).all()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads Linux's memory map")
def test_kernels_share_torchs_openmp_runtime() -> None:
    """lopa's OpenMP kernels run on the thread pool torch's parallel ops use, not on a second runtime."""
    if native.library("int4_matmul") is None or native.library("ordered_attention") is None:
        pytest.skip("no C compiler")
    runtimes = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "libgomp" in line}
    assert len(runtimes) == 1, runtimes


TILES = [False, pytest.param(True, marks=pytest.mark.skipif(not _tile_kernel(), reason="no AMX-BF16 here"))]
INT4_KERNELS = [
    pytest.param("amx-tiles", marks=pytest.mark.skipif(not _tile_kernel(), reason="no AMX-BF16 here")),
    pytest.param("panel", marks=NO_COMPILER),
    "torch",
]


def _assert_rows_computed_alike(layer: torch.nn.Module, inputs: int) -> None:
    """Each row's output is the same whether the row is alone or in a call of 2 .. 70 rows, at any place in it.
    Inputs of very different sizes make a row's fp32 sums round; the bf16 outputs hide most of that rounding,
    hence many rows: a path that summed in another order would show in some of their outputs."""
    x = (torch.randn(1024, inputs) * torch.exp2(torch.randint(-20, 20, (1024, inputs)).float())).bfloat16()
    alone = torch.cat([layer(x[row : row + 1]) for row in range(len(x))])
    for rows in (2, 3, 4, 5, 8, 16, 17, 33, 70):  # the AMX kernel: registers up to 4 rows, tiles above
        together = torch.cat([layer(x[lo : lo + rows]) for lo in range(0, len(x), rows)])
        assert torch.equal(together, alone), f"{int((together != alone).sum())} outputs changed in calls of {rows} rows"


@pytest.mark.parametrize("kernel", INT4_KERNELS)
def test_int4_layer_computes_each_row_alike(kernel: str) -> None:
    """17 panels of 16 outputs: the AMX register path's blocks of 4 (1 row) and 2 (2 rows) panels, and one left
    over; the portable kernel's pairs of rows and a row alone."""
    torch.manual_seed(0)
    dense = torch.nn.Linear(256, 272, bias=False)
    layer = Int4Linear.from_weight(dense.weight, kernel=kernel)
    assert layer.kernel == kernel
    _assert_rows_computed_alike(layer, 256)
    x = torch.randn(5, 256, dtype=torch.bfloat16)
    torch.testing.assert_close(layer(x).float(), x.float() @ layer.weight().T, rtol=1e-2, atol=1e-2)
    # round to nearest in groups of 32: within half a step (range / 15 / 2) plus bf16 scales
    step = dense.weight.unflatten(1, (-1, 32)).aminmax(dim=-1)
    half = ((step.max - step.min) / 30).repeat_interleave(32, dim=1)
    assert ((layer.weight() - dense.weight).abs() <= half * 1.02 + 1e-3).all()


@pytest.mark.parametrize("tiles", TILES)
def test_q8_vocabulary_computes_each_row_alike(tiles: bool) -> None:
    """The Q8_0 projection (int8 codes, a scale per 32) computes rows alike and computes code * scale, on the AMX
    kernel and on the portable one; its rows for a lookup are that weight."""
    if row_invariant_kernel(8, tiles) is None:
        pytest.skip("no C compiler")
    torch.manual_seed(0)
    codes, scale = torch.randint(-128, 128, (256, 128), dtype=torch.int8), torch.rand(256, 4) / 100
    layer = Q8Vocabulary(codes, scale, row_invariant_kernel(8, tiles))
    _assert_rows_computed_alike(layer, 128)
    weight = codes.float() * scale.repeat_interleave(32, dim=1)
    assert torch.equal(layer.weight, weight.bfloat16())
    assert torch.equal(layer.rows(torch.tensor([7, 200, 7])), weight[[7, 200, 7]].bfloat16())
    x = torch.randn(5, 128, dtype=torch.bfloat16)
    torch.testing.assert_close(layer(x).float(), x.float() @ weight.T, rtol=1e-2, atol=1e-2)


@NO_COMPILER
def test_lopas_kernels_compile_whole_and_compute_as_eager() -> None:
    """Under torch.compile the int4 product, the Q8_0 vocabulary and tree attention trace as registered ops
    (fullgraph: a graph break raises) and give what their eager calls give, bit for bit."""
    torch.manual_seed(0)
    int4 = Int4Linear.from_weight(torch.nn.Linear(256, 272).weight, kernel="panel")
    codes, scale = torch.randint(-128, 128, (256, 128), dtype=torch.int8), torch.rand(256, 4) / 100
    vocabulary = Q8Vocabulary(codes, scale, row_invariant_kernel(8, tiles=False))
    layer = torch.nn.Module()
    layer.num_key_value_groups = HEADS // KV_HEADS
    parents = [-1, 0, 0, 2, 1, 3]
    q = torch.randn(1, HEADS, len(parents), DIM, dtype=torch.bfloat16)
    k, v = (torch.randn(1, KV_HEADS, 30 + len(parents), DIM, dtype=torch.bfloat16) for _ in range(2))
    mask = _tree_mask(30, parents, torch.bfloat16)
    attend = lambda *tensors: tree_attention(layer, *tensors)[0]  # noqa: E731
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    for name, call, inputs in [
        ("int4", int4, (x,)),
        ("q8 vocabulary", vocabulary, (x[:, :128],)),
        ("tree attention", attend, (q, k, v, mask)),
    ]:
        compiled = torch.compile(call, fullgraph=True, dynamic=False)
        assert torch.equal(compiled(*inputs), call(*inputs)), name


@pytest.fixture(scope="module")
def int4() -> Engine:
    return Engine.from_pretrained(dtype="int4", draft=DraftConfig(always_draft=True), profile=False)


@pytest.fixture(scope="module")
def bf16() -> Engine:
    return Engine.from_pretrained(dtype="bfloat16", draft=DraftConfig(always_draft=True), profile=False)


def test_int4_keeps_the_files_blocks(int4: Engine, engine: Engine) -> None:
    """Every decoder linear of the shipped Q4_1 file comes from its blocks; the weights are the fp32 copy's up to
    the kernel's rounding; they take under a fifth of the fp32 bytes (half a byte a code, an fp32 scale and
    offset per 32: 0.75 bytes a weight)."""
    layers = [m for m in int4.model.modules() if isinstance(m, Int4Linear)]
    vocabulary = "q8_0" if row_invariant_kernel(8) else "bf16"
    assert int4.model.lopa_int4_layers == {"from_file": 210, "quantized_by_lopa": 0, "vocabulary": vocabulary}
    assert len(layers) == 210
    # without a C compiler the vocabulary projection stays a stock bf16 Linear: then the model is not row-invariant,
    # and the engine warns that lookahead equals plain decoding only up to near-ties
    assert row_invariant(int4.model) == (row_invariant_kernel(8) is not None)
    fp32 = engine.model.model.layers[3].self_attn.q_proj.weight  # q rows are permuted from the file's order
    ours = int4.model.model.layers[3].self_attn.q_proj.weight()
    assert (ours - fp32).abs().max() <= 0.01 * fp32.abs().max()
    weights = sum(m.in_features * m.out_features for m in layers)
    assert weights / 2 < sum(weight_bytes(m) for m in layers) <= weights * 3 / 4
    assert int4.loaded.num_parameters == engine.loaded.num_parameters


def test_a_gguf_tensor_table_maps_what_the_reader_reads(tmp_path: Path) -> None:
    """Where each tensor lies, cached after the first parse: the same names, types, shapes and bytes as gguf-py's
    reader gives, whether just written or read back."""
    source, table = source_gguf(None), tmp_path / "tensors.json"
    reader = GGUFReader(source)
    for _ in range(2):  # written, then read
        architecture, tensors = tensor_table(source, table)
        assert architecture == "llama" and table.exists()
        assert [t.name for t in tensors] == [t.name for t in reader.tensors]
        for ours, theirs in zip(tensors, reader.tensors):
            assert ours.tensor_type == theirs.tensor_type and ours.shape.tolist() == theirs.shape.tolist()
            assert ours.data.dtype == theirs.data.dtype and np.array_equal(ours.data, theirs.data), ours.name


def _tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return dict(model.named_parameters()) | dict(model.named_buffers())


def _assert_same_tensors(ours: torch.nn.Module, theirs: torch.nn.Module) -> None:
    ours, theirs = _tensors(ours), _tensors(theirs)
    assert ours.keys() == theirs.keys()
    differ = [
        name for name in ours if ours[name].dtype != theirs[name].dtype or not torch.equal(ours[name], theirs[name])
    ]
    assert not differ


@pytest.mark.parametrize("precision", [None, "bf16"])
def test_int4_from_the_gguf_equals_int4_from_transformers_conversion(precision: str | None) -> None:
    """An int4 model is built from its GGUF without the fp32 copy: every tensor equals what a bf16 load of
    transformers' conversion holds once quantized the same way. The shipped Q4_1 file (its 4-bit blocks and
    Q8_0 vocabulary kept), and its BF16 rewrite, whose every linear layer lopa quantizes from the file's
    dequantized weights and whose bf16 embedding is read a slab of rows at a time."""
    source = source_gguf(None) if precision is None else full_precision_gguf(source_gguf(None), precision)
    ours = load_model(str(source), dtype="int4", fast=False)
    assert ours.path == source  # the file itself, for a draft model "self"
    reference = load_model(None, dtype=torch.bfloat16, fast=False).model
    if precision is None:
        tensors = GGUFTensors(source, reference)
        keep_q8_vocabulary(reference, tensors)
        quantize_int4(reference, tensors)
        assert reference.lopa_int4_layers == {"from_file": 210, "quantized_by_lopa": 0}
    else:
        assert quantize_int4(reference) == {"from_file": 0, "quantized_by_lopa": 210}
    assert ours.model.lopa_int4_layers["from_file"] == reference.lopa_int4_layers["from_file"]
    _assert_same_tensors(ours.model, reference)


@NO_COMPILER
def test_int4_keeps_the_files_q8_vocabulary(int4: Engine) -> None:
    """The file's Q8_0 token embedding stays Q8_0 (a byte a code), its rows the values transformers' loader
    gives, and it is the output projection too."""
    tensor = next(t for t in GGUFReader(source_gguf(None)).tensors if t.name == "token_embd.weight")
    assert tensor.tensor_type == Q.Q8_0
    embedding, projection = int4.model.get_input_embeddings(), int4.model.get_output_embeddings()
    assert isinstance(projection, Q8Vocabulary) and projection.codes.dtype == torch.int8
    assert torch.equal(embedding.weight, torch.from_numpy(dequantize(tensor.data, tensor.tensor_type)).bfloat16())
    ids = torch.tensor([[1, 500, 49151]])
    assert torch.equal(embedding(ids)[0], embedding.weight[ids[0]])
    assert not any(p.numel() >= projection.out_features * projection.in_features for p in int4.model.parameters())
    assert weight_bytes(projection) == projection.out_features * projection.in_features * (1 + 4 / 32)
    assert int4.predictor is not None  # drafting on the same rows, without a copy of the matrix
    assert torch.equal(int4.predictor.token_embedding(ids[0]), embedding.weight[ids[0]].float())


def _assert_tree_logits_are_steps(runner: Runner, parents: list[int], label: str) -> None:
    """Each node of a tree (node i's parent: parents[i]) verified in one call gets the logits of one-token steps
    along its path, bit for bit."""
    prompt = torch.randint(0, 1000, (30,), generator=torch.Generator().manual_seed(0))
    tokens = torch.randint(0, 1000, (len(parents),), generator=torch.Generator().manual_seed(1))
    ancestors = _tree_mask(0, parents, torch.float32)[0, 0] == 0
    depths = ancestors.sum(1) - 1
    runner.reserve(len(prompt) + 2 * len(parents))
    runner.prefill(0, prompt, 0)
    (tree,) = runner.verify([(tokens, depths, ancestors)])
    leaves = set(range(len(parents))) - set(parents)
    for leaf in leaves:
        path = [leaf]
        while parents[path[0]] >= 0:
            path.insert(0, parents[path[0]])
        runner.prefill(0, prompt, 0)
        for node in path:
            (step,) = runner.verify(
                [(tokens[node : node + 1], torch.zeros(1, dtype=torch.long), torch.ones(1, 1, dtype=torch.bool))]
            )
            runner.commit(0, [0])
            assert torch.equal(step.logits[0], tree.logits[node]), f"{label}: node {node}"


def _lone_row_rounds_alike(model: torch.nn.Module) -> bool:
    """Whether each linear layer of `model` computes a row alone as it does beside others, on this CPU (oneDNN may
    pick another kernel for one row: on an AVX-512 Xeon an fp32 down projection rounded a lone row differently)."""
    torch.manual_seed(0)
    layers = {(m.in_features, m.out_features): m for m in model.modules() if hasattr(m, "packed")}
    with torch.inference_mode():
        for layer in layers.values():
            rows = torch.randn(3, layer.in_features, dtype=layer.packed.dtype)
            if not torch.equal(layer(rows[:1])[0], layer(rows)[0]):
                return False
    return bool(layers)


@pytest.mark.parametrize("precision", ["int4", "bf16", "engine"])
def test_tree_logits_equal_one_token_steps(precision: str, request) -> None:
    """`engine`: the default fp32 model, whose attention goes through the order-fixed kernel too."""
    engine = request.getfixturevalue(precision)
    if precision == "engine" and not _lone_row_rounds_alike(engine.model):
        pytest.skip("oneDNN rounds a lone fp32 row differently from several on this CPU")
    _assert_tree_logits_are_steps(engine.runner, [-1, 0, 1, 0, 3, 2], precision)  # two branches: t0 t1 t2 t5, t0 t3 t4


@pytest.mark.slow
@NO_COMPILER
def test_compiled_int4_is_exact_and_whole() -> None:
    """--compile --dtype int4: lopa's C kernels are registered ops, so each tree size is one graph (no break), and
    with eager's bf16 rounding kept and the token lookup outside the graphs, inductor's graphs give a tree's nodes
    their one-token steps' logits, in one thread and in two: lookahead is the compiled plain decoding. SmolLM2's int4
    layers cut to the first 8 (graphs in about a minute each). Without the casts node 0 differed; with the lookup
    fused into the first norm, node 3 did in one thread (pytest-xdist's workers), not in two."""
    loaded = load_model(dtype="int4")
    loaded.model.model.layers = loaded.model.model.layers[:8]
    loaded.model.config.num_hidden_layers = 8
    engine = Engine(loaded, DraftConfig(node_budget=7, always_draft=True), compile=True, predictor=False)
    torch._dynamo.utils.counters.clear()
    engine.warm_up()  # buckets 1, 2, 4 and 8
    assert not torch._dynamo.utils.counters["graph_break"]
    with torch._dynamo.config.patch(error_on_recompile=True):
        _assert_tree_logits_are_steps(engine.runner, [-1, 0, 1, 2, 0, 4, 5, 1], "compiled int4")  # 3 branches
        for prompt in FAST[:2]:
            plain = engine.generate(prompt.text, max_new_tokens=32, method="ar")
            lookahead = engine.generate(prompt.text, max_new_tokens=32)
            assert lookahead.token_ids == plain.token_ids
            assert sum(accepted_by_source(lookahead.stats.steps).values()) > 0


@pytest.mark.parametrize("precision", ["int4", "bf16"])
def test_lookahead_is_plain_decoding(precision: str, request) -> None:
    engine = request.getfixturevalue(precision)
    prompts = [p.text for p in FAST[:3]]
    accepted = 0
    for prompt in prompts:
        plain = engine.generate(prompt, max_new_tokens=40, method="ar")
        lookahead = engine.generate(prompt, max_new_tokens=40)
        assert lookahead.token_ids == plain.token_ids, prompt
        accepted += sum(accepted_by_source(lookahead.stats.steps).values())
    assert accepted >= 10  # the drafts (the predictor's included) are accepted at these precisions too
    batch = engine.generate(prompts[:2], max_new_tokens=24)  # rows beside each other change nothing either
    assert [r.token_ids for r in batch] == [engine.generate(p, max_new_tokens=24).token_ids for p in prompts[:2]]


def test_an_int4_target_drafts_with_its_own_int4_copy(int4: Engine) -> None:
    """Under an int4 target the draft model defaults to int4 (its step ~0.6x int8's), built from its GGUF ('self':
    the target's own file): output equals plain decoding, and the copy's drafts are accepted."""
    drafted = Engine(int4.loaded, DraftConfig(draft_model="self", use_predictor=False, always_draft=True))
    assert drafted.draft_model_source == str(source_gguf(None)) and drafted.draft_model_dtype == "int4"
    assert drafted.draft_model.lopa_precision == "int4" and drafted.draft_model is not int4.model
    result = drafted.generate(FAST[0].text, max_new_tokens=32)
    assert result.token_ids == int4.generate(FAST[0].text, max_new_tokens=32, method="ar").token_ids
    assert result.stats.drafters["draft"]["chain_acceptance"] > 0.5


def test_generate_on_the_same_model_is_plain_decoding(int4: Engine, stock) -> None:
    """transformers' generate() over the int4 model (no mask: lopa's attention makes the causal one) is plain
    decoding's output, so `lopa bench`'s `hf` reference and `ar` agree at this precision too."""
    ids = stock.prompt_ids(FAST[0].text)
    out = int4.model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False)
    assert out[0, len(ids) :].tolist() == int4.generate(FAST[0].text, max_new_tokens=32, method="ar").token_ids

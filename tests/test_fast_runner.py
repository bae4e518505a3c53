"""The fast runner: packed linears, grouped-KV attention, int8, chunked verification and `lopa profile` keep outputs exact."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from lopa import Engine
from lopa.cli import main
from lopa.config import DraftConfig
from lopa.models.attention import TREE_ATTENTION, tree_attention
from lopa.models.compiled import compile_model
from lopa.models.fastkernels import stock_twin, use_fast_kernels
from lopa.models.fastlinear import PackedLinear, pack_linears
from lopa.models.loading import LoadedModel
from lopa.models.quantize import Int8Linear
from lopa.models.runner import Runner

from .conftest import saved_tiny_llama
from .served import served_and_plain
from .test_runner import random_tree

PROMPTS = ["Write a short story about a robot who learns to paint.", "Explain how a hash map works."]


@pytest.fixture(scope="module")
def int8_engine() -> Engine:
    return Engine.from_pretrained(dtype="int8", predictor=False, profile=False)  # equality tests: any tree sizes do


def test_packed_model_matches_stock_logits(engine: Engine, stock) -> None:
    """lopa's kernels (the CPU default) give stock transformers' logits at every row count."""
    assert any(isinstance(m, PackedLinear) for m in engine.model.modules()), "CPU fp32 models load with packed linears"
    assert engine.model.config._attn_implementation == TREE_ATTENTION
    assert not any(isinstance(m, PackedLinear) for m in stock.model.modules())
    ids = torch.tensor([stock.prompt_ids(PROMPTS[0])])
    with torch.no_grad():
        for rows in (1, 2, 4, 16, ids.shape[1]):
            got, want = engine.model(ids[:, :rows]).logits, stock.model(ids[:, :rows]).logits
            # float noise between GEMM kernels: on an AVX2-only core 15 of 2M logits of 42 rows differed by 1.3e-4
            torch.testing.assert_close(got, want, rtol=1e-4, atol=3e-4, msg=lambda m, rows=rows: f"{rows} rows: {m}")


def test_packed_linear_is_exact_and_row_invariant() -> None:
    """Every row count gives x @ W.T + b, and a row's result does not depend on the rows beside it
    (bit-identical), so a token verified inside a tree gets a 1-token step's projections."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(80, 96)
    layer = PackedLinear(linear)
    x = torch.randn(100, 80)
    with torch.no_grad():
        alone = layer(x[:1])
        for rows in (1, 3, 4, 5, 16, 17, 64, 100):
            out = layer(x[:rows])
            torch.testing.assert_close(out, linear(x[:rows]), rtol=1e-5, atol=1e-5)
            assert torch.equal(out[:1], alone), f"row 0 changed with {rows} rows"
        torch.testing.assert_close(layer(x.view(4, 25, 80)), linear(x).view(4, 25, 96), rtol=1e-5, atol=1e-5)
    assert not layer.holds_weight and torch.equal(layer.weight, linear.weight)  # rebuilt from the packed copy
    assert PackedLinear(linear, keep_weight=True).weight is linear.weight  # one parameter for a stock twin or a tie


@pytest.mark.parametrize("quantized", [False, True])
@pytest.mark.parametrize("tied", [False, True])
def test_packed_layers_keep_the_plain_weight_only_where_it_is_read(quantized: bool, tied: bool) -> None:
    """A model with a stock twin (not quantized) keeps every plain weight beside its packed copy; a quantized one
    keeps only a weight another module shares (the vocabulary tied to the embedding), the rest held packed."""
    config = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=128, tie_word_embeddings=tied,
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    if quantized:
        model.lopa_precision = "int4"
    plain = {name: p.detach().clone() for name, p in model.named_parameters()}
    pack_linears(model)
    layers = dict(model.named_modules())
    packed = {name: m for name, m in layers.items() if isinstance(m, PackedLinear)}
    assert len(packed) == 8  # q, k, v, o, gate, up, down, lm_head
    for name, layer in packed.items():
        tied_head = tied and name == "lm_head"
        assert layer.holds_weight == (not quantized or tied_head), name
        assert torch.equal(layer.weight, plain["model.embed_tokens.weight" if tied_head else f"{name}.weight"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_kv_attention_equals_stock_attention(engine: Engine, dtype: torch.dtype) -> None:
    """The registered tree attention reads grouped KV heads in place (folded into the query length for several
    rows of several queries, and for one bf16 query per row) and matches transformers' SDPA, which copies them out."""
    attn = engine.model.model.layers[0].self_attn
    assert attn.num_key_value_groups > 1, "the default model has grouped KV heads"
    torch.manual_seed(0)
    heads, kv_heads, dim = attn.config.num_attention_heads, attn.config.num_key_value_heads, attn.head_dim
    for rows, queries, keys in ((1, 1, 40), (1, 16, 300), (8, 1, 200), (8, 3, 200)):
        q = torch.randn(rows, heads, queries, dim, dtype=dtype)
        k, v = (torch.randn(rows, kv_heads, keys, dim, dtype=dtype) for _ in range(2))
        mask = torch.where(torch.rand(rows, 1, queries, keys + 5) < 0.8, 0.0, torch.finfo(dtype).min).to(dtype)
        mask[..., 0] = 0.0  # every query sees a key
        got, _ = tree_attention(attn, q, k, v, mask, scaling=attn.scaling)
        want, _ = sdpa_attention_forward(attn, q, k, v, mask[..., :keys], scaling=attn.scaling)
        assert got.dtype == dtype
        # summation order only: float noise in fp32, a rounding step of bf16 (8 bits of mantissa) in bf16
        torch.testing.assert_close(got, want, atol=1e-6 if dtype == torch.float32 else 1e-2, rtol=0)


def test_stock_twin_shares_weights_without_lopa_modules(engine: Engine, stock) -> None:
    twin = stock_twin(engine.model)
    assert twin.config._attn_implementation == "sdpa" and engine.model.config._attn_implementation == TREE_ATTENTION
    assert not any(isinstance(m, PackedLinear) for m in twin.modules())
    assert twin.lm_head.weight.data_ptr() == engine.model.lm_head.weight.data_ptr()
    ids = torch.tensor([stock.prompt_ids(PROMPTS[1])])
    with torch.no_grad():
        assert torch.equal(twin(ids).logits, stock.model(ids).logits)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> LoadedModel:
    """A 4-layer random Llama with the default model's whole vocabulary: the compiled tests' model (inductor builds
    its graphs in seconds; the real model's take minutes each on a CPU)."""
    return saved_tiny_llama(tmp_path_factory.mktemp("tiny-compiled"))


@pytest.fixture(scope="module")
def compiled(tiny: LoadedModel) -> Engine:
    """One inductor-compiled engine over the tiny model; node_budget 3 keeps the tree buckets to 1, 2 and 4. The
    model itself (eager, fp32) drafts too, so drafted trees are accepted whatever the random weights say."""
    compiled = Engine(
        tiny, DraftConfig(node_budget=3, always_draft=True, draft_model="self"), compile=True, predictor=False
    )
    compiled.use_draft_model(tiny.model, tiny.tokenizer)
    return compiled


@pytest.fixture(scope="module")
def eager(tiny: LoadedModel) -> Engine:
    return Engine(tiny, DraftConfig(node_budget=3, always_draft=True), predictor=False)


@pytest.mark.slow
def test_compiled_runner_matches_eager_runner(eager: Engine, compiled: Engine) -> None:
    """torch.compile graphs (trees padded to size buckets) give the eager runner's logits and tokens."""
    compiled.warm_up()
    with torch._dynamo.config.patch(error_on_recompile=True):  # warm_up built every graph: new caches,
        for size, seed in ((3, 0), (4, 1)):  # padded trees and other lengths must not compile again
            tree = random_tree(7, size, 1000, seed)
            outputs = []
            for runner in (Runner(eager.model), compiled.runner):
                runner.prefill(0, torch.arange(10, 40), 0)
                outputs.append(runner.verify([tree.tensors()])[0])
            torch.testing.assert_close(outputs[1].logits, outputs[0].logits, rtol=1e-3, atol=1e-3)
            assert outputs[1].logits.shape[0] == size
        for prompt in PROMPTS:
            want = eager.generate(prompt, max_new_tokens=40, method="ar").token_ids
            assert compiled.generate(prompt, max_new_tokens=40, method="ar").token_ids == want
            lopa = compiled.generate(prompt, max_new_tokens=40, temperature=0.8, seed=5)  # seeded: plain's tokens
            assert (
                lopa.token_ids
                == eager.generate(prompt, max_new_tokens=40, temperature=0.8, seed=5, method="ar").token_ids
            )
            assert compiled.generate(prompt, max_new_tokens=40).token_ids == want


@pytest.mark.slow
def test_compiled_static_cache_matches_eager(tiny: LoadedModel, eager: Engine) -> None:
    """What --compile runs on CUDA (a static cache, fixed shapes), here through inductor on the CPU
    without the CUDA-graph replay: same tokens as plain decoding, nothing compiled after warm_up."""
    static = Engine(tiny, DraftConfig(node_budget=3, always_draft=True), predictor=False)
    static.runner = Runner(tiny.model, 1, 512, compiled=compile_model(tiny.model), static=True)
    static.warm_up()
    with torch._dynamo.config.patch(error_on_recompile=True):
        for prompt in PROMPTS:
            want = eager.generate(prompt, max_new_tokens=40, method="ar").token_ids
            assert static.generate(prompt, max_new_tokens=40, method="ar").token_ids == want
            assert static.generate(prompt, max_new_tokens=40).token_ids == want


@pytest.mark.slow
def test_the_real_architecture_compiles_and_decodes_losslessly(engine: Engine) -> None:
    """One check on SmolLM2 itself: its configuration and weights (grouped KV, tied embeddings, the 49,152-token
    vocabulary, lopa's kernels) cut to its first 2 of 30 layers, so inductor builds the graphs in about a minute
    (the whole model's take ~13 min on this CPU; `lopa profile --compile` compiles it for real). The compiled
    runner gives plain decoding's tokens, greedy and seeded."""
    config = AutoConfig.from_pretrained(engine.loaded.path, num_hidden_layers=2)
    model = AutoModelForCausalLM.from_pretrained(
        engine.loaded.path, config=config, dtype=torch.float32, attn_implementation="sdpa"
    )
    use_fast_kernels(model.eval().requires_grad_(False))
    cut = LoadedModel(model, engine.tokenizer, "smollm2-2-layers", engine.loaded.path, 0.0)
    eager = Engine(cut, DraftConfig(node_budget=3, always_draft=True), predictor=False)
    real = Engine(cut, DraftConfig(node_budget=3, always_draft=True), compile=True, predictor=False)
    real.warm_up()
    for sampling in ({}, {"temperature": 0.8, "seed": 2}):
        want = eager.generate(PROMPTS[1], max_new_tokens=24, method="ar", **sampling).token_ids
        assert real.generate(PROMPTS[1], max_new_tokens=24, **sampling).token_ids == want


def test_int8_plain_equals_int8_lopa(int8_engine: Engine) -> None:
    assert any(isinstance(m, Int8Linear) for m in int8_engine.model.modules())
    for prompt in PROMPTS:
        plain = int8_engine.generate(prompt, max_new_tokens=40, method="ar")
        lopa = int8_engine.generate(prompt, max_new_tokens=40)
        assert lopa.token_ids == plain.token_ids


def test_int8_self_draft_is_lossless(engine: Engine, int8_engine: Engine) -> None:
    """The model's own int8 copy as the draft model (--draft-model self): fp32 output, drafts accepted."""
    drafted = Engine(engine.loaded, DraftConfig(draft_model="self", use_predictor=False, always_draft=True))
    drafted.use_draft_model(int8_engine.model, int8_engine.tokenizer)  # share the loaded int8 model
    result = drafted.generate(PROMPTS[0], max_new_tokens=32)
    assert result.token_ids == engine.generate(PROMPTS[0], max_new_tokens=32, method="ar").token_ids
    # accepted drafts (always_draft: asked at every step, whatever decode/pricing.py would judge it worth)
    assert sum(step["sources"].count("draft") for step in result.stats.steps) >= 2
    assert result.stats.drafters["draft"]["chain_acceptance"] > 0.5


def test_draft_model_is_off_by_default() -> None:
    from lopa.cli import build_parser

    assert DraftConfig().draft_model is None
    assert vars(build_parser().parse_args(["generate", "hi"]))["draft_model"] is None


@pytest.mark.parametrize("limit", [1, 4, 5])
def test_chunked_verification_equals_one_shot(engine: Engine, limit: int) -> None:
    prompt = torch.tensor(engine.tokenizer("Chunked verification must match one-shot verification:").input_ids)
    tree = random_tree(root=464, size=14, vocab=5000, seed=3)
    outputs = []
    for runner in (Runner(engine.model), Runner(engine.model, max_verify_tokens=limit)):
        runner.hidden_layers = (1, 3)  # a predictor's features come back whole from chunked forwards too
        first = runner.prefill(0, prompt, 0)
        (out,) = runner.verify([tree.tensors()])
        leaf = max(range(tree.size), key=lambda n: tree.depths[n])
        runner.commit(0, tree.path_nodes(leaf))
        (nxt,) = runner.verify([random_tree(root=13, size=6, vocab=5000, seed=4).tensors()])
        outputs.append((first, out, nxt))
    for a, b in zip(*outputs):
        assert a.logits.shape == b.logits.shape and a.layers.shape == b.layers.shape
        torch.testing.assert_close(b.logits, a.logits, atol=5e-4, rtol=0)  # float noise: M-dependent kernels
        torch.testing.assert_close(b.layers, a.layers, atol=5e-4, rtol=1e-5)  # hidden states reach ~1e3
        assert torch.equal(b.logits.argmax(-1), a.logits.argmax(-1))


def test_chunked_engine_generates_the_same_tokens(engine: Engine) -> None:
    chunked = Engine(engine.loaded, engine.draft, predictor=False, max_verify_tokens=3)
    want = engine.generate(PROMPTS[1], max_new_tokens=40, method="ar").token_ids
    assert chunked.generate(PROMPTS[1], max_new_tokens=40).token_ids == want


def test_profile_writes_valid_json(tmp_path, monkeypatch) -> None:
    out = tmp_path / "prof"
    code = main(
        [
            "profile",
            "--sizes",
            "1,2",
            "--prefixes",
            "16",
            "--reps",
            "1",
            "--max-rows",
            "2",
            "--out",
            str(out),
            "--no-cache",
            "--no-predictor",
            "--decode-tokens",
            "24",
            "--breakdown-sizes",
            "1,4",
            "--breakdown-prefixes",
            "16,64",
        ]
    )
    assert code == 0
    data = json.loads((out / "profile.json").read_text())
    assert set(data["latency_s"]) == {"1", "2"} and all(v > 0 for v in data["latency_s"].values())
    assert set(data["latency_by_prefix_s"]) == {"16"}
    assert data["weight_bytes"] > 100e6 and data["copy_bandwidth_bytes_per_s"] > 0
    assert data["memory_floor_s"] == pytest.approx(data["weight_bytes"] / data["copy_bandwidth_bytes_per_s"])
    assert (out / "profile.png").stat().st_size > 1000
    assert data["kernels"] == ["packed-linear", TREE_ATTENTION]
    assert data["thread_sweep"]["best"] in {int(n) for n in data["thread_sweep"]["latency_s"]}
    assert set(data["breakdown"]) == {"16", "64"} and set(data["breakdown"]["64"]) == {"1", "4"}
    part = data["breakdown"]["64"]["4"]
    assert set(part["parts_s"]) == {"matmul", "vocab", "attention", "other_kernels", "dispatch"}
    assert part["parts_s"]["matmul"] > 0 and part["parts_s"]["vocab"] > 0 and part["parts_s"]["attention"] > 0
    assert sum(part["parts_s"].values()) >= part["wall_s"] * 0.99  # dispatch is what the kernels leave of the wall time
    assert part["floors_s"]["matmul"] > part["floors_s"]["vocab"] > part["floors_s"]["attention"] > 0
    split = data["step_split"]
    assert split["steps"] >= 2 and sum(split["share"].values()) == pytest.approx(1.0)
    assert split["per_step_s"]["draft_s"] > 0 and split["per_step_s"]["verify_s"] > 0


def test_profile_rejects_bad_sizes(capsys) -> None:
    assert main(["profile", "--sizes", "0,x", "--no-cache"]) == 2
    assert "error" in capsys.readouterr().err


def test_fast_runner_equals_stock_runner_on_trees(engine: Engine) -> None:
    """The runner on lopa's kernels gives the stock modules' tree logits, after a long prefix and across a
    compaction (the accepted path moved down, then a second tree over it)."""
    prompt = torch.arange(1000, 1700)  # 700 committed tokens
    outputs = []
    for model in (engine.model, stock_twin(engine.model)):
        runner = Runner(model)
        first = runner.prefill(0, prompt, 0)
        tree = random_tree(root=464, size=14, vocab=5000, seed=5)
        (out,) = runner.verify([tree.tensors()])
        runner.commit(0, tree.path_nodes(max(range(tree.size), key=lambda n: tree.depths[n])))
        outputs.append((first, out, runner.verify([random_tree(root=13, size=9, vocab=5000, seed=6).tensors()])[0]))
    for fast, stock in zip(*outputs):
        torch.testing.assert_close(fast.logits, stock.logits, atol=1e-4, rtol=0)
        assert torch.equal(fast.logits.argmax(-1), stock.logits.argmax(-1))


def test_models_the_fast_path_refuses_keep_stock_modules(tmp_path, caplog) -> None:
    """fp16 on a CPU has no packed path and eager attention is not SDPA: each keeps its stock module with
    a one-line notice, and lookahead on what remains still equals plain decoding."""
    tiny = saved_tiny_llama(tmp_path / "tiny", 96)
    assert tiny.model.lopa_kernels == ("packed-linear", TREE_ATTENTION)
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "tiny", dtype=torch.float16, attn_implementation="eager")
    with caplog.at_level("INFO", logger="lopa"):
        assert use_fast_kernels(model) == []
    assert "stock linear layers" in caplog.text and "stock eager attention" in caplog.text
    assert not any(isinstance(m, PackedLinear) for m in model.modules())
    engine = Engine(LoadedModel(model, tiny.tokenizer, "tiny-fp16", tmp_path / "tiny", 0.0), predictor=False)
    prompt = [5, 17, 33, 8]
    assert (
        engine.generate(prompt, max_new_tokens=24).token_ids
        == engine.generate(prompt, max_new_tokens=24, method="ar").token_ids
    )


@pytest.mark.slow
def test_compiled_server_returns_the_eager_answers(eager: Engine, compiled: Engine) -> None:
    """`lopa serve --compile`: the server's batched runner through inductor (warm_up makes the batch size
    dynamic) answers concurrent requests with plain decoding's text."""
    compiled.warm_up(rows=4)
    got, want = served_and_plain(compiled, eager, max_tokens=24, timeout=600.0)
    assert [g["choices"][0]["text"] for g in got] == want
    assert max(g["lopa"]["tokens_per_forward"] for g in got) > 1.0

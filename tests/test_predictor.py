"""The EAGLE-3 predictor on tiny random Llamas: cached drafting, the EAGLE-3 file layout, training, decoding."""

from __future__ import annotations

import json
from unittest.mock import patch

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from lopa import DraftConfig, Engine, GenerationConfig
from lopa.decode.batch import decode
from lopa.decode.cost import CostModel
from lopa.decode.loop import Drafting, SequenceDecoder
from lopa.decode.window import WindowController
from lopa.draft.predictor import Eagle3Predictor, PredictorCache, PredictorConfig, causal, default_aux_layers
from lopa.draft.predictor_drafter import PredictorDrafter
from lopa.draft.predictor_io import load_predictor, save_predictor
from lopa.errors import ModelLoadError
from lopa.models.loading import token_rows
from lopa.models.runner import Runner
from lopa.train.predictor import (
    LOG,
    STATE,
    FeatureSet,
    OnlineTeacher,
    PredictorSettings,
    _Batch,
    accuracy,
    step_loss,
    teacher_force,
    train_predictor,
)

from .conftest import tiny_llama
from .prompts import FAST
from .test_greedy import NEW_TOKENS, assert_every_drafter_drafted, sweep

AUX = [1, 2, 3]
PROMPT = [2, 3, 4, 5, 6, 2, 3, 4]


def tiny_llama4(seed: int = 0) -> LlamaForCausalLM:
    """tiny_llama with 4 layers, so low, middle and high aux layers differ."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=32,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
        )
    ).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(40.0)
    return model


def untrained(model, seed: int = 1) -> Eagle3Predictor:
    torch.manual_seed(seed)
    return Eagle3Predictor(PredictorConfig.for_base(model, AUX, 24), token_rows(model)).eval()


def greedy(model, prompt: list[int], n: int) -> list[int]:
    return [
        t
        for r in decode(Runner(model), SequenceDecoder(prompt, GenerationConfig(max_new_tokens=n), set()))
        for t in r.tokens
    ]


def run_drafted(model, predictor, prompt, cfg: GenerationConfig):
    drafter = PredictorDrafter(predictor)
    runner = Runner(model)
    runner.hidden_layers = drafter.hidden_layers
    drafting = Drafting([drafter], WindowController(4), DraftConfig())
    records = list(decode(runner, SequenceDecoder(prompt, cfg, set(), drafting)))
    return [t for r in records for t in r.tokens], sum(r.accepted for r in records)


@pytest.fixture(scope="module")
def model():
    return tiny_llama4()


@pytest.fixture(scope="module")
def trained(model, tmp_path_factory):
    """A predictor trained on the tiny model's own greedy answers to 24 random prompts."""
    gen = torch.Generator().manual_seed(0)
    sequences = []
    for _ in range(24):
        prompt = torch.randint(2, 32, (6,), generator=gen).tolist()
        sequences.append((prompt, greedy(model, prompt, 24)))
    out = tmp_path_factory.mktemp("predictor")
    settings = PredictorSettings(epochs=30, batch_size=8, lr=3e-3, ttt_steps=3)
    data = teacher_force(model, sequences, AUX)
    predictor, log = train_predictor(
        model, data, held_out=data, aux_layers=AUX, draft_vocab_size=24, settings=settings, out=out
    )
    return predictor, log, sequences, out


def test_cached_drafting_matches_recomputation(model) -> None:
    predictor = untrained(model)
    n = len(PROMPT)
    with torch.no_grad():
        layers = torch.cat(
            [model(torch.tensor([PROMPT]), output_hidden_states=True).hidden_states[i][0] for i in AUX], -1
        )
        cache = PredictorCache(capacity=4)  # small: the cache must grow on the way
        feats = predictor.fuse(layers)
        tokens, positions = torch.tensor(PROMPT[1:] + [7]), torch.arange(1, n + 1)
        logits, out = cache.run(predictor, feats, tokens, positions, causal(n))
        cache.commit()
        rows = [(feats[i], int(tokens[i]), int(positions[i]), logits[i]) for i in range(n)]
        # k chain steps, one row each, feeding back the predictor's own feature and argmax token
        feature, logit = out[-1], logits[-1]
        for step in range(4):
            token = int(predictor.draft_ids[logit.argmax()])
            logit_row, out_row = cache.run(
                predictor, feature[None], torch.tensor([token]), torch.tensor([n + 1 + step]), causal(1)
            )
            cache.commit()
            rows.append((feature, token, n + 1 + step, logit_row[0]))
            feature, logit = out_row[0], logit_row[0]
        # a tree: two siblings after the chain, then a child of the second one
        sib_feats, sib_tokens, pos = feature[None].expand(2, -1), torch.tensor([5, 9]), torch.full((2,), n + 5)
        sib_logits, sib_out = cache.run(predictor, sib_feats, sib_tokens, pos, torch.eye(2, dtype=torch.bool))
        child_of_second = torch.tensor([[False, True, True]])  # over the two sibling rows and its own
        child_logits, _ = cache.run(predictor, sib_out[1:], torch.tensor([11]), torch.tensor([n + 6]), child_of_second)
        # recompute without a cache, the whole path to the child in one causal forward
        path = rows + [(sib_feats[1], 9, n + 5, sib_logits[1]), (sib_out[1], 11, n + 6, child_logits[0])]
        full, _ = predictor(
            torch.stack([r[0] for r in path])[None],
            torch.tensor([[r[1] for r in path]]),
            torch.tensor([[r[2] for r in path]]),
            torch.zeros(1, 1, len(path), len(path)).masked_fill_(~causal(len(path)), float("-inf")),
            DynamicCache(),
        )
        assert torch.allclose(full[0], torch.stack([r[3] for r in path]), atol=1e-5)
        assert not torch.allclose(sib_logits[0], sib_logits[1], atol=1e-3)  # siblings differ: the check is not vacuous


def test_parameters_are_counted_and_small_for_a_real_model() -> None:
    """SmolLM2-135M's shape (on the meta device): the default predictor stays under 5% of the base."""
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        tie_word_embeddings=True,
    )
    with torch.device("meta"):
        base = LlamaForCausalLM(config)
    base.model.embed_tokens.weight = torch.nn.Parameter(torch.zeros(49152, 576, dtype=torch.bfloat16))  # fingerprinted
    base.lm_head.weight = base.model.embed_tokens.weight  # tied, as in SmolLM2: 134.5M parameters
    with torch.device("meta"):
        predictor = Eagle3Predictor(
            PredictorConfig.for_base(base, draft_vocab_size=2048, intermediate_size=1024),
            token_rows(base),
        )
    stored = sum(v.numel() for k, v in predictor.state_dict().items() if k not in ("d2t", "t2d"))
    assert predictor.num_parameters == stored
    assert predictor.config.aux_layers == [2, 15, 27]
    assert 134e6 < predictor.config.base["base_parameters"] < 135e6
    assert predictor.summary()["percent_of_base"] < 5.0


def test_save_load_round_trip_and_refusals(model, tmp_path) -> None:
    predictor = untrained(model)
    predictor.set_vocab(torch.arange(8, 32))
    save_predictor(predictor, tmp_path / "p")
    config = json.loads((tmp_path / "p" / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3" and config["draft_vocab_size"] == 24
    assert config["eagle_aux_hidden_state_layer_ids"] == AUX and config["target_hidden_size"] == 32
    weights = load_file(str(tmp_path / "p" / "model.safetensors"))
    assert {"fc.weight", "layers.0.hidden_norm.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"} <= set(weights)
    assert weights["layers.0.self_attn.q_proj.weight"].shape == (32, 64)
    loaded = load_predictor(tmp_path / "p", model)
    feats, tokens, positions = torch.randn(1, 5, 32), torch.tensor([[3, 4, 5, 6, 7]]), torch.arange(1, 6)[None]
    mask = torch.zeros(1, 1, 5, 5).masked_fill_(~causal(5), float("-inf"))
    with torch.no_grad():
        assert torch.equal(
            predictor(feats, tokens, positions, mask, None)[0], loaded(feats, tokens, positions, mask, None)[0]
        )
    assert torch.equal(loaded.draft_ids, torch.arange(8, 32))

    with pytest.raises(ModelLoadError, match="fingerprint"):
        load_predictor(tmp_path / "p", tiny_llama4(seed=5))  # same shapes, other weights
    with pytest.raises(ModelLoadError, match="hidden_size|vocab_size"):
        load_predictor(tmp_path / "p", tiny_llama(vocab=48))

    truncated = tmp_path / "truncated"
    save_predictor(predictor, truncated)
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="truncated"):
        load_predictor(truncated, model)

    wrong = tmp_path / "wrong"
    save_predictor(predictor, wrong)
    weights["fc.weight"] = torch.zeros(32, 64)
    save_file(weights, str(wrong / "model.safetensors"))
    with pytest.raises(ModelLoadError, match="does not match"):
        load_predictor(wrong, model)


def test_training_lowers_the_loss_and_learns_the_next_token(model, trained) -> None:
    predictor, log, sequences, out = trained
    assert log[-1]["loss"] < 0.5 * log[0]["loss"]
    assert [n for n, p in model.named_parameters() if p.grad is not None] == []  # the base stays untouched
    rows = teacher_force(model, sequences, AUX)
    assert accuracy(untrained(model), rows)[0] < 0.2
    assert accuracy(predictor, rows)[0] > 0.6  # chance is 1/32
    assert log[-1]["held_out_top1"] == accuracy(predictor, rows, 3)
    logged = [json.loads(line) for line in (out / LOG).read_text().splitlines()]
    assert logged == log and len(logged) == 30
    resumed, more = train_predictor(model, rows, settings=PredictorSettings(epochs=31), out=out, resume=True)
    assert len(more) == 31 and torch.equal(resumed.d2t, predictor.d2t)


def test_a_resumed_training_run_equals_an_uninterrupted_one(model, trained, tmp_path) -> None:
    """Killed after its second epoch's checkpoint and resumed, a run ends with the weights of one never stopped."""
    _, _, sequences, _ = trained
    data = teacher_force(model, sequences[:8], AUX)
    settings = PredictorSettings(epochs=4, batch_size=2, lr=3e-3, ttt_steps=2)
    kwargs = dict(aux_layers=AUX, draft_vocab_size=24, settings=settings)
    whole, _ = train_predictor(model, data, out=tmp_path / "whole", **kwargs)
    saves = 0

    def save_then_die(predictor, out):
        nonlocal saves
        saves += 1
        if saves == 3:  # the third epoch's checkpoint never lands: the process died after the second
            raise KeyboardInterrupt
        save_predictor(predictor, out)

    with patch("lopa.train.predictor.save_predictor", save_then_die), pytest.raises(KeyboardInterrupt):
        train_predictor(model, data, out=tmp_path / "cut", **kwargs)
    assert [json.loads(line)["epoch"] for line in (tmp_path / "cut" / LOG).read_text().splitlines()] == [0, 1]
    resumed, log = train_predictor(model, data, out=tmp_path / "cut", resume=True, **kwargs)
    assert [e["epoch"] for e in log] == [0, 1, 2, 3]
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name


def test_a_run_stopped_mid_epoch_resumes_to_the_uninterrupted_weights_and_log(model, trained, tmp_path) -> None:
    """Stopped by its time budget after one batch, twice (each stop checkpoints inside epoch 0), then resumed to
    the end: the weights and every epoch's loss and held-out accuracy are those of a run never stopped."""
    _, _, sequences, _ = trained
    data, held = teacher_force(model, sequences[:8], AUX), teacher_force(model, sequences[8:10], AUX)
    kwargs = dict(
        aux_layers=AUX, draft_vocab_size=24, held_out=held, settings=PredictorSettings(epochs=2, batch_size=2, lr=3e-3)
    )
    whole, whole_log = train_predictor(model, data, out=tmp_path / "whole", **kwargs)
    cut = tmp_path / "cut"
    _, log = train_predictor(model, data, out=cut, max_minutes=1e-9, **kwargs)
    assert log == [] and torch.load(cut / STATE, weights_only=True)["progress"]["batches"] == 1
    _, log = train_predictor(model, data, out=cut, resume=True, max_minutes=1e-9, **kwargs)
    assert log == [] and torch.load(cut / STATE, weights_only=True)["progress"]["batches"] == 2
    resumed, log = train_predictor(model, data, out=cut, resume=True, **kwargs)
    assert [{**e, "seconds": 0} for e in log] == [{**e, "seconds": 0} for e in whole_log] and len(log) == 2
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name


def test_distillation_targets_the_base_distribution_renormalised_over_the_draft_vocabulary(model) -> None:
    predictor = untrained(model)  # draft vocabulary: target ids 0..23 of 32
    ids = torch.tensor([[4, 5, 6, 7]])
    labels = torch.tensor([[-100, 3, 9, -100]])  # rows 1 and 2 are answer rows; row 0 a prompt row
    top_ids = torch.tensor([[[0, 1, 2], [3, 30, 5], [9, 8, 31], [0, 1, 2]]], dtype=torch.int32)
    top_probs = torch.tensor(
        [[[1.0, 0.0, 0.0], [0.5, 0.3, 0.2], [0.6, 0.1, 0.3], [1.0, 0.0, 0.0]]], dtype=torch.bfloat16
    )
    batch = _Batch(ids, torch.zeros(1, 4, 96), labels, top_ids, top_probs)
    logits = torch.randn(1, 3, 24)  # step 0's row i predicts the token after row i + 1
    log_q = logits.log_softmax(-1)[0]
    # row 0 predicts after ids[1] (label 3): 30 is outside the draft vocabulary, so 3 and 5 share the mass 0.7
    expected = -(0.5 * log_q[0, 3] + 0.2 * log_q[0, 5]) / 0.7
    # row 1 predicts after ids[2] (label 9): 31 is outside, 9 and 8 share 0.7; row 2 has no label
    expected = (expected - (0.6 * log_q[1, 9] + 0.1 * log_q[1, 8]) / 0.7) / 2
    torch.testing.assert_close(step_loss(predictor, logits, batch, 0, distill=True), expected, rtol=1e-2, atol=1e-3)
    hard = torch.nn.functional.cross_entropy(logits[0, :2], torch.tensor([3, 9]))
    torch.testing.assert_close(step_loss(predictor, logits, batch, 0, distill=False), hard)
    assert step_loss(predictor, logits, batch, 2, distill=True) is None  # step 2's rows reach past every label


def test_teacher_forcing_batches_and_caches_exactly(model, tmp_path) -> None:
    """Batched, right-padded teacher forcing gives each sequence's rows as one-at-a-time runs do; the cache
    file (split in blocks) gives them back."""
    gen = torch.Generator().manual_seed(3)
    sequences = [
        (
            torch.randint(2, 32, (3 + i % 4,), generator=gen).tolist(),
            torch.randint(2, 32, (5 + 3 * i,), generator=gen).tolist(),
        )
        for i in range(7)
    ]
    alone = FeatureSet([teacher_force(model, [s], AUX) for s in sequences])
    batched = teacher_force(model, sequences, AUX, batch_size=3)
    assert len(alone) == len(batched) == len(sequences)
    assert torch.equal(alone.ids, batched.ids) and torch.equal(alone.labels, batched.labels)
    answer = batched.labels >= 0
    assert torch.equal(batched.top_ids[answer, 0].long(), batched.labels[answer])  # the likeliest is the label
    for s in range(len(sequences)):
        one, many = alone.row(s), batched.row(s)
        assert alone.length(s) == batched.length(s) == len(sequences[s][0]) + len(sequences[s][1])
        torch.testing.assert_close(one.top_probs.float(), many.top_probs.float(), atol=2e-2, rtol=1e-2)
        torch.testing.assert_close(one.layers.float(), many.layers.float(), atol=2e-2, rtol=1e-2)
    assert (batched.labels >= 0).sum() == sum(len(a) for _, a in sequences)  # the last prompt row predicts answer[0]
    with patch("lopa.train.predictor.CACHE_BLOCK", 3):
        cached = teacher_force(model, sequences, AUX, cache_dir=tmp_path)
        assert len(list(tmp_path.glob("features-*.safetensors"))) == 3
        again = teacher_force(model, sequences, AUX, cache_dir=tmp_path)  # read back, mapped from the files
    for got in (cached, again):
        assert len(got) == len(sequences)
        for s in range(len(sequences)):
            ours, theirs = got.row(s), batched.row(s)
            assert all(
                torch.equal(getattr(ours, k), getattr(theirs, k)) for k in ("ids", "labels", "top_ids", "top_probs")
            )


def test_a_block_stopped_mid_write_is_not_taken_as_cached(model, tmp_path) -> None:
    """A teacher-forcing run stopped while it writes a block leaves no file under the block's name: the next run
    computes the block again instead of reading a cut one."""
    sequences = [([2, 3, 4], [5, 6, 7, 8])]

    def stopped(tensors, path):  # writes part of the file, then the run is stopped
        with open(path, "wb") as f:
            f.write(b"\x00" * 64)
        raise KeyboardInterrupt

    with patch("lopa.train.predictor.save_file", stopped), pytest.raises(KeyboardInterrupt):
        teacher_force(model, sequences, AUX, cache_dir=tmp_path)
    assert not list(tmp_path.glob("*.safetensors"))
    again = teacher_force(model, sequences, AUX, cache_dir=tmp_path)
    assert torch.equal(again.ids, teacher_force(model, sequences, AUX).ids)


def test_online_teacher_forcing_gives_the_cached_rows_and_trains_alike(model, trained) -> None:
    """Rows teacher-forced per training batch (no cache) are the cached rows; on the model's own greedy answers
    the answers' token counts are the labels' counts, so the draft vocabulary is the same, and training reaches
    the cached run's accuracy."""
    predictor, log, sequences, _ = trained
    online, cached = OnlineTeacher(model, sequences, AUX), teacher_force(model, sequences, AUX)
    assert len(online) == len(cached) and [online.length(s) for s in range(len(online))] == [
        cached.length(s) for s in range(len(cached))
    ]
    assert torch.equal(online.label_counts(32), cached.label_counts(32))
    ours, theirs = online.batch([5, 0, 17]), cached.batch([5, 0, 17])
    assert torch.equal(ours.ids, theirs.ids) and torch.equal(ours.labels, theirs.labels)
    torch.testing.assert_close(ours.layers.float(), theirs.layers.float(), atol=2e-2, rtol=1e-2)
    torch.testing.assert_close(ours.top_probs.float(), theirs.top_probs.float(), atol=2e-2, rtol=1e-2)
    settings = PredictorSettings(epochs=30, batch_size=8, lr=3e-3, ttt_steps=3)
    learned, online_log = train_predictor(
        model, online, held_out=cached, aux_layers=AUX, draft_vocab_size=24, settings=settings
    )
    assert torch.equal(learned.d2t, predictor.d2t)
    assert online_log[-1]["loss"] < 0.5 * online_log[0]["loss"]
    assert abs(online_log[-1]["held_out_top1"][0] - log[-1]["held_out_top1"][0]) < 0.05


def test_greedy_with_the_predictor_equals_plain(model, trained) -> None:
    prompt = [5, 9, 17, 3, 22, 8]
    plain = greedy(model, prompt, 40)
    for predictor in (untrained(model), trained[0]):
        got, accepted = run_drafted(model, predictor, prompt, GenerationConfig(max_new_tokens=40))
        assert got == plain
    assert accepted > 0, "the trained predictor's drafts were never accepted"


def test_sampling_with_the_predictor_is_reproducible(model, trained) -> None:
    cfg = GenerationConfig(max_new_tokens=24, temperature=1.0, seed=7)
    a, _ = run_drafted(model, trained[0], PROMPT, cfg)
    b, _ = run_drafted(model, trained[0], PROMPT, cfg)
    assert a == b and len(a) == 24


def test_engine_with_a_predictor_equals_stock_generate_and_drafts(engine, stock, tmp_path) -> None:
    """The default model through Engine(predictor=...): a predictor overfit on the model's own answers to three
    prompts drafts them back; lopa still equals stock generate() and the predictor's drafts are accepted."""
    prompts = FAST[:3]
    sequences = [stock.greedy(p.text, NEW_TOKENS)[:2] for p in prompts]  # the references test_greedy.py computes
    settings = PredictorSettings(epochs=40, batch_size=4, lr=3e-3, ttt_steps=3)
    data = teacher_force(engine.model, sequences, default_aux_layers(engine.model.config.num_hidden_layers))
    train_predictor(engine.model, data, draft_vocab_size=512, intermediate_size=256, settings=settings, out=tmp_path)
    only = DraftConfig(use_prompt_lookup=False, use_ngram_pool=False, dynamic_window=False)
    drafted = Engine(engine.loaded, only, predictor=str(tmp_path))
    assert drafted.runner.hidden_layers == tuple(drafted.predictor.config.aux_layers)
    failures, results, _ = sweep(drafted, stock, prompts, NEW_TOKENS)
    assert not failures, failures
    assert_every_drafter_drafted(results, ["predictor"])
    first = [r.stats.drafters["predictor"] for r in results]  # depth-1 top-1: one trial per verification step
    assert all(f["depth1_trials"] == r.stats.forwards - 1 for f, r in zip(first, results))
    assert sum(f["depth1_hits"] for f in first) > 0.5 * sum(f["depth1_trials"] for f in first)  # overfit on these


def test_profiling_runs_the_predictor_at_every_row_count_a_drafting_step_does(engine) -> None:
    """Its kernels are built at load (Engine.profile), not inside the first request's timed steps: one forward of
    each count up to a level's frontier (top_k) and the most tokens a step commits (max_depth + 1)."""
    rows: list[int] = []
    handle, cost = (
        engine.predictor.register_forward_hook(lambda module, args, out: rows.append(args[1].shape[1])),
        engine.cost,
    )
    try:
        engine.profile(max_rows=1)
    finally:
        handle.remove()
        engine.cost = cost  # the session's engine keeps what its cost model learned
    assert rows == list(range(1, max(engine.draft.top_k_per_depth, engine.draft.max_depth + 1) + 1))


@pytest.mark.parametrize("seed", [0, 1])
def test_the_predictor_expands_only_what_verification_keeps(model, trained, seed) -> None:
    """Each level of the predictor's tree past the first costs a predictor forward. Where the cost model verifies
    none of its nodes (every extra node priced out) the drafter learns the trees' cutoff and stops expanding most
    steps; where verification is free it keeps expanding; the answer is plain greedy's either way."""
    prompt = torch.randint(2, 32, (6,), generator=torch.Generator().manual_seed(seed)).tolist()

    def expansions_per_step(cost: CostModel) -> float:
        drafter = PredictorDrafter(trained[0])
        runner = Runner(model)
        runner.hidden_layers = drafter.hidden_layers
        drafting = Drafting([drafter], WindowController(4), DraftConfig(always_draft=True))
        with patch.object(PredictorCache, "run", autospec=True, side_effect=PredictorCache.run) as run:
            records = list(
                decode(runner, SequenceDecoder(prompt, GenerationConfig(max_new_tokens=32), set(), drafting), cost)
            )
        assert [t for r in records for t in r.tokens] == greedy(model, prompt, 32)
        steps = len(records) - 1  # the first token came from the prefill; each step runs one predictor commit
        return (run.call_count - steps) / steps

    free = expansions_per_step(CostModel.flat())
    priced_out = expansions_per_step(CostModel({1: {1: 1.0, 2: 100.0, 64: 100.0}}))
    assert free >= 2.0, free  # WindowController(4): up to 3 levels past the first
    # a fixed floor (the cutoff never learned) expanded 0.8-1.1x as often priced out as free on these prompts
    assert priced_out <= 0.6 * free, (priced_out, free)

import torch

from lopa.diffusion import DecodeConfig, DiffusionDecoder
from lopa.diffusion.decoder import branch_scores, build_branches, confidence

M = 99


def test_anchor_fills_confident_positions_and_lookaheads_add_one_each():
    block = torch.tensor([M, 5, M, M, M])
    logits = torch.full((5, 8), -1.0)
    for pos, (tok, strength) in enumerate([(1, 10.0), (0, 0.0), (2, 9.0), (3, 1.0), (4, 2.0)]):
        logits[pos, tok] = strength
    rows = build_branches(block, logits, DecodeConfig(tau_conf=0.9, branches=2), M)
    assert rows[0].tolist() == [1, 5, 2, M, M]  # both confident positions filled
    assert rows.shape[0] == 3
    assert rows[1].tolist() == [1, 5, 2, M, 4] and rows[2].tolist() == [1, 5, 2, 3, M]  # most confident first


def test_single_most_confident_when_none_passes_tau():
    block = torch.tensor([M, M, M])
    logits = torch.zeros(3, 4)
    logits[1, 2] = 1.0
    rows = build_branches(block, logits, DecodeConfig(tau_conf=0.99, branches=0), M)
    assert rows.tolist() == [[M, 2, M]]


def test_branch_score_is_mean_confidence_over_masked():
    logits = torch.log(torch.tensor([[[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]]]))
    s = branch_scores(logits, torch.tensor([[M, 1, M]]), M, "maxprob")
    assert torch.allclose(s, torch.tensor([(0.5 + 0.8) / 2]))
    ne, _ = confidence(logits, "neg_entropy")
    assert torch.allclose(ne[0, 0], torch.tensor(0.5))  # exp(-ln 2)


def test_lopa_tpf_above_baseline_on_shipped_model(shipped, prompts):
    adapter, _ = shipped

    def tpf(k):
        dec = DiffusionDecoder(adapter, DecodeConfig(max_new_tokens=64, branches=k, tau_conf=0.9))
        stats = [dec.generate(p)[1] for p in prompts]
        assert all(s.new_tokens == 64 for s in stats)
        return sum(s.new_tokens for s in stats) / sum(s.forwards for s in stats)

    base, lopa = tpf(0), tpf(4)
    assert lopa > base, (base, lopa)


def test_neg_entropy_decodes(shipped, prompts):
    ids, st = DiffusionDecoder(
        shipped[0], DecodeConfig(max_new_tokens=40, block_size=16, confidence="neg_entropy", branches=2)
    ).generate(prompts[0])
    assert len(ids) == 40 and st.forwards <= 40 + 3


def test_batched_forward_equals_per_branch_forwards(shipped, prompts):
    adapter, _ = shipped
    ctx = adapter.begin(prompts[0])
    adapter.logits(ctx, torch.full((1, 32), adapter.mask_token_id))  # folds the prompt into the cache
    gen = torch.Generator().manual_seed(0)
    branches = torch.randint(0, 256, (5, 32), generator=gen)
    branches[torch.rand(5, 32, generator=gen) < 0.6] = adapter.mask_token_id
    batched = adapter.logits(ctx, branches)
    single = torch.cat([adapter.logits(ctx, b[None]) for b in branches])
    torch.testing.assert_close(batched, single, atol=1e-4, rtol=0)


def test_kv_cache_matches_full_recompute(shipped, prompts):
    adapter, _ = shipped
    p, extra = prompts[1][:100], prompts[1][100:164]
    blk = torch.full((1, 16), adapter.mask_token_id)
    cached = adapter.begin(p)
    adapter.logits(cached, blk)
    adapter.commit(cached, extra)
    a = adapter.logits(cached, blk)
    b = adapter.logits(adapter.begin(p + extra), blk)
    torch.testing.assert_close(a, b, atol=1e-4, rtol=0)

import torch

from lopa.diffusion.model import training_mask
from lopa.diffusion.train import mask_blocks


def test_training_mask_never_leaks_the_answer():
    n, b = 12, 4
    m = training_mask(n, b)
    blk = torch.arange(n) // b
    noisy_to_clean = m[:n, n:]
    assert torch.equal(noisy_to_clean, blk[None, :] < blk[:, None])  # only earlier clean blocks
    assert torch.equal(m[:n, :n], blk[None, :] == blk[:, None])  # own noisy block, both ways
    assert not m[n:, :n].any()  # clean never sees noisy
    assert torch.equal(m[n:, n:], torch.ones(n, n, dtype=torch.bool).tril())


def test_every_training_block_has_a_masked_position():
    m = mask_blocks(torch.zeros(64, 32, dtype=torch.long), 8, torch.Generator().manual_seed(0))
    assert m.view(64, 4, 8).any(-1).all()
    assert 0.3 < m.float().mean() < 0.7  # t ~ U(0, 1)

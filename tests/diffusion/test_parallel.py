from lopa.diffusion import DecodeConfig
from lopa.diffusion.parallel import decode_job, spawn


def test_two_gloo_processes_give_the_same_tokens_as_one(prompts):
    # 3 lookahead branches + anchor = 4 rows split 2/2; also covers the odd case late in a block
    # (fewer branches left than ranks) since blocks shrink to one masked position.
    cfg = DecodeConfig(max_new_tokens=48, block_size=16, branches=3, tau_conf=0.9)
    one = decode_job(None, cfg, prompts[:2])
    two = spawn(2, decode_job, None, cfg, prompts[:2], timeout_s=60)
    assert [ids for ids, _ in two] == [ids for ids, _ in one]
    assert [s["forwards"] for _, s in two] == [s["forwards"] for _, s in one]

import pytest
import torch

from lopa.diffusion import DecodeConfig, DiffusionDecoder, load_dllm
from lopa.diffusion.adapter import FullSequenceAdapter
from lopa.errors import InvalidRequestError, ModelLoadError


@pytest.mark.parametrize(
    "kw",
    [
        dict(block_size=0),
        dict(tau_conf=0.0),
        dict(tau_conf=1.5),
        dict(branches=-1),
        dict(max_new_tokens=0),
        dict(confidence="logit"),
    ],
)
def test_bad_config(shipped, kw):
    with pytest.raises(InvalidRequestError):
        DiffusionDecoder(shipped[0], DecodeConfig(**kw))


def test_empty_and_too_long_prompt(shipped):
    dec = DiffusionDecoder(shipped[0], DecodeConfig(max_new_tokens=8))
    with pytest.raises(InvalidRequestError, match="empty"):
        dec.generate([])
    with pytest.raises(InvalidRequestError, match="exceed"):
        dec.generate([65] * 2000)
    assert len(dec.generate([65, 66])[0]) == 8  # still usable


def test_missing_and_corrupt_model(tmp_path, shipped):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_dllm(tmp_path / "nope")
    d = tmp_path / "bad"
    d.mkdir()
    shipped[1].save(d / "tokenizer.json")
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"\x00" * 10)
    with pytest.raises(ModelLoadError, match="cannot load"):
        load_dllm(d)


def _hf_tokenizer(tmp_path, mask: bool):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, "[UNK]": 1, "[MASK]": 2, **{chr(97 + i): 3 + i for i in range(26)}}
    t = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    extra = dict(mask_token="[MASK]") if mask else {}
    PreTrainedTokenizerFast(tokenizer_object=t, unk_token="[UNK]", pad_token="[PAD]", **extra).save_pretrained(tmp_path)


def test_hf_model_without_mask_token(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(vocab_size=29, n_embd=16, n_layer=1, n_head=2, n_positions=64)).save_pretrained(tmp_path)
    _hf_tokenizer(tmp_path, mask=False)
    with pytest.raises(ModelLoadError, match="no mask token"):
        load_dllm(tmp_path)


def test_hf_masked_lm_loads_and_decodes(tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    BertForMaskedLM(
        BertConfig(
            vocab_size=29,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=64,
        )
    ).save_pretrained(tmp_path)
    _hf_tokenizer(tmp_path, mask=True)
    adapter, tok = load_dllm(tmp_path)
    assert adapter.mask_token_id == 2 and not adapter.shift
    ids, st = DiffusionDecoder(adapter, DecodeConfig(max_new_tokens=12, block_size=4, branches=2)).generate(
        tok.encode("a b c", add_special_tokens=False)
    )
    assert len(ids) == 12 and st.forwards >= 3


class _Echo(torch.nn.Module):
    """Fake HF model whose logits at position i are the one-hot of token i."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(1, 1)

    def get_output_embeddings(self):
        return torch.nn.Linear(1, 10)

    def forward(self, input_ids):
        return type("Out", (), {"logits": torch.nn.functional.one_hot(input_ids, 10).float()})


@pytest.mark.parametrize("shift", [False, True])
def test_logit_alignment(shift):
    ad = FullSequenceAdapter(_Echo(), mask_token_id=9, shift=shift, max_len=64)
    ctx = ad.begin([1, 2, 3])
    got = ad.logits(ctx, torch.tensor([[4, 5]])).argmax(-1).tolist()
    assert got == ([[3, 4]] if shift else [[4, 5]])  # Dream: logits at i-1 predict token i

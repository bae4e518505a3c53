"""The self-distillation corpus on a tiny random Llama with a character tokenizer: chunks, resume, manifest."""

from __future__ import annotations

import gzip
import json
import string
import struct

import numpy as np
import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from lopa import Engine
from lopa.models.loading import embedding_fingerprint
from lopa.train.corpus import CorpusSettings, build_corpus, load_corpus, self_instruct
from lopa.train.sources import read_mo

from .conftest import tiny_llama

SETTINGS = CorpusSettings(prompts=40, chunk_size=12, batch=4, max_new_tokens=10, sampled_fraction=0.5)


def char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per printable character, BOS 0 and EOS 1 as in tiny_llama, and a one-line chat template."""
    vocab = {"<s>": 0, "</s>": 1, "<unk>": 2} | {c: i + 3 for i, c in enumerate(string.printable)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = (
        "{% for m in messages %}Q: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}A: {% endif %}"
    )
    return fast


def write_mo(path, catalogue: dict[str, str]) -> None:
    """A little-endian gettext .mo file (the format read_mo parses)."""
    keys = sorted(catalogue)
    ids, strs = (b"".join(s.encode() + b"\0" for s in seq) for seq in (keys, [catalogue[k] for k in keys]))
    n, start = len(keys), 28 + 16 * len(keys)
    table, pos = [], start
    for s in keys:
        table += [len(s.encode()), pos]
        pos += len(s.encode()) + 1
    trans, pos = [], start + len(ids)
    for k in keys:
        trans += [len(catalogue[k].encode()), pos]
        pos += len(catalogue[k].encode()) + 1
    header = struct.pack("<7I", 0x950412DE, 0, n, 28, 28 + 8 * n, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + struct.pack(f"<{2 * n}I", *table) + struct.pack(f"<{2 * n}I", *trans) + ids + strs)


@pytest.fixture(scope="module")
def locale(tmp_path_factory):
    root = tmp_path_factory.mktemp("locale")
    messages = {
        f"could not open the file number {i} because the disk is full": f"Datei {i} nicht offen, Platte voll"
        for i in range(30)
    }
    write_mo(root / "de" / "LC_MESSAGES" / "demo.mo", messages)
    write_mo(root / "de" / "LC_MESSAGES" / "iso_3166-1.mo", {"France": "Frankreich", "Peru": "Peru"})
    return root


@pytest.fixture(scope="module")
def setup():
    """lopa's engine over a tiny random Llama with a character tokenizer; `calls` records each batch's size."""
    tok = char_tokenizer()
    engine = Engine.from_model(tiny_llama(vocab=len(tok), context=4096), tok, profile=False)
    calls = []
    batched = engine.generate_many

    def counted(prompts, *args, **kwargs):
        calls.append(len(prompts))
        return batched(prompts, *args, **kwargs)

    engine.generate_many = counted
    return engine, tok, calls


def test_read_mo(locale):
    catalogue = read_mo(locale / "de" / "LC_MESSAGES" / "iso_3166-1.mo")
    assert catalogue == {"France": "Frankreich", "Peru": "Peru"}


def test_build_resume_and_load(tmp_path, setup, locale):
    engine, tok, calls = setup
    out = tmp_path / "corpus"
    first = build_corpus(out, engine, SETTINGS, chunks=1, locale_root=locale)
    assert first["chunks_made"] == 1 and first["chunks_total"] >= 3 and first["answer_tokens_per_s"] > 0
    chunk0 = (out / "chunk-00000.npz").stat().st_mtime_ns
    calls.clear()
    second = build_corpus(out, engine, SETTINGS, chunks=2, locale_root=locale)
    assert second["chunks_made"] == 1 and (out / "chunk-00000.npz").stat().st_mtime_ns == chunk0
    assert calls == [SETTINGS.chunk_size]  # no self-instruct rerun, no chunk 0 redone: one chunk decoded together

    fresh = tmp_path / "fresh"
    build_corpus(fresh, engine, SETTINGS, chunks=2, locale_root=locale)
    for name in ("chunk-00000.npz", "chunk-00001.npz"):
        with np.load(out / name) as a, np.load(fresh / name) as b:
            assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)
    assert (out / "manifest.jsonl").read_text() == (fresh / "manifest.jsonl").read_text()

    prompts = [
        json.loads(line) for line in gzip.decompress((out / "prompts.jsonl.gz").read_bytes()).decode().splitlines()
    ]
    assert {p["source"].split(":")[0] for p in prompts} >= {"prompts.py", "locale", "pydoc"}
    corpus = load_corpus(out)
    assert len(corpus) == 2 * SETTINGS.chunk_size
    assert {meta["mode"] for _, _, meta in corpus} == {"greedy", "sampled"}
    assert {meta["producer"] for _, _, meta in corpus} == {"lopa-engine float32 cpu"}
    for prompt_ids, answer_ids, meta in corpus[:: SETTINGS.chunk_size // 4]:  # a few of each mode
        text = prompts[meta["prompt"]]["text"]
        assert (
            prompt_ids == engine.encode_prompt(text)
            and meta["prompt"] == meta["chunk"] * SETTINGS.chunk_size + meta["index"]
        )
        assert (meta["prompt_tokens"], meta["answer_tokens"]) == (len(prompt_ids), len(answer_ids)) and answer_ids
        # what plain decoding of the same model gives that prompt alone, greedy or with the sequence's seed
        sampling = {} if meta["mode"] == "greedy" else {"temperature": SETTINGS.temperature, "top_p": SETTINGS.top_p}
        alone = engine.generate(
            prompt_ids, max_new_tokens=SETTINGS.max_new_tokens, method="ar", seed=meta["seed"], **sampling
        )
        assert answer_ids == alone.token_ids


def test_other_settings_refused(tmp_path, setup, locale):
    engine, _, _ = setup
    build_corpus(tmp_path, engine, SETTINGS, chunks=1, locale_root=locale)
    with pytest.raises(ValueError, match="other settings"):
        build_corpus(
            tmp_path, engine, CorpusSettings(**{**SETTINGS.__dict__, "max_new_tokens": 12}), locale_root=locale
        )
    wider = CorpusSettings(**{**SETTINGS.__dict__, "batch": 8})  # how fast, not what: a resume may change it
    assert build_corpus(tmp_path, engine, wider, chunks=1, locale_root=locale)["chunks_made"] == 0


def test_resumes_at_another_precision_not_with_other_weights(tmp_path, setup, locale):
    """The weights are compared at bf16: a corpus answered in fp32 goes on in bf16 (and back), also one whose config
    recorded the fingerprint at fp32 as earlier versions did; another model's weights are refused."""
    engine, tok, _ = setup
    build_corpus(tmp_path, engine, SETTINGS, chunks=1, locale_root=locale)
    halved = Engine.from_model(tiny_llama(vocab=len(tok), context=4096).to(torch.bfloat16), tok, profile=False)
    assert build_corpus(tmp_path, halved, SETTINGS, chunks=1, locale_root=locale)["chunks_made"] == 0

    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "fingerprint": embedding_fingerprint(engine.model)}))
    assert build_corpus(tmp_path, engine, SETTINGS, chunks=1, locale_root=locale)["chunks_made"] == 0

    other = Engine.from_model(tiny_llama(vocab=len(tok), seed=1, context=4096), tok, profile=False)
    with pytest.raises(ValueError, match="another model"):
        build_corpus(tmp_path, other, SETTINGS, chunks=1, locale_root=locale)


def test_self_instruct_resumes_with_another_batch(tmp_path, setup, locale):
    engine, _, _ = setup
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    whole.mkdir(), cut.mkdir()
    requests = self_instruct(engine, SETTINGS, whole, locale)
    lines = (whole / "self-instruct.jsonl").read_text().splitlines()
    assert len(lines) >= 2
    (cut / "self-instruct.jsonl").write_text(lines[0] + "\n" + lines[1][:9])  # stopped in the second batch's write
    narrower = CorpusSettings(**{**SETTINGS.__dict__, "batch": SETTINGS.batch // 2})
    assert self_instruct(engine, narrower, cut, locale) == requests


def test_cut_manifest_is_rebuilt(tmp_path, setup, locale):
    engine, _, _ = setup
    build_corpus(tmp_path, engine, SETTINGS, chunks=2, locale_root=locale)
    whole = (tmp_path / "manifest.jsonl").read_text()
    (tmp_path / "manifest.jsonl").write_text(whole[: len(whole) // 2 + 7])  # a stop in the middle of a write
    build_corpus(tmp_path, engine, SETTINGS, chunks=2, locale_root=locale)
    assert (tmp_path / "manifest.jsonl").read_text() == whole


def test_cli_trains_a_predictor_from_a_corpus(tmp_path, locale, capsys):
    """`lopa train-heads --corpus`: features recomputed from the stored ids (and cached), stopped by its time
    budget and resumed, a loadable EAGLE-3 directory out with its log and plot; `lopa info` shows the predictor."""
    from lopa.cli import main
    from lopa.draft.predictor_io import load_predictor

    tok, model_dir, corpus, out = char_tokenizer(), tmp_path / "model", tmp_path / "corpus", tmp_path / "predictor"
    model = tiny_llama(vocab=len(tok), context=4096)
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    build_corpus(corpus, Engine.from_model(model, tok, profile=False), SETTINGS, chunks=1, locale_root=locale)
    argv = [
        "train-heads",
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--model",
        str(model_dir),
        "--epochs",
        "2",
        "--draft-vocab",
        "16",
        "--intermediate-size",
        "32",
        "--held-out",
        "2",
        "--features-dir",
        str(tmp_path / "features"),
    ]
    assert main([*argv, "--max-minutes", "1e-9"]) == 0  # one batch, a checkpoint, a stop
    assert "run again with --resume" in capsys.readouterr().out and not (out / "held_out.json").exists()
    assert main([*argv, "--resume"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["train_sequences"] + result["held_out_sequences"] == SETTINGS.chunk_size
    assert len(result["held_out_top1_by_depth"]) == 3 and json.loads((out / "held_out.json").read_text()) == result
    assert (out / "accuracy.png").stat().st_size > 1000 and len((out / "train_log.jsonl").read_text().splitlines()) == 2
    assert len(list((tmp_path / "features").glob("features-*.safetensors"))) == 2  # held-out and training sets
    assert load_predictor(out, model).config.draft_vocab_size == 16
    assert main(["info", "--model", str(model_dir), "--predictor", str(out)]) == 0
    assert "predictor:    EAGLE-3" in capsys.readouterr().out

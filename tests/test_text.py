"""TextStream: exact stop strings across steps, held-back text, incremental detokenizing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from lopa.models.loading import resolve_model_dir
from lopa.text import TextStream

SAMPLE = (
    "Hello ENDless world. Ünïcödé, 日本語 and emoji 🙂🚀 END of story; "
    "def f(x):\n    return x * 2  # STOP here? no, STOPPED.\n"
)


class Chars:
    """A tokenizer whose tokens are characters: a step's text is exactly what it pushed."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if i or not skip_special_tokens)  # 0 is the special EOS


def run(stream: TextStream, steps: list[list[int]]) -> list[str]:
    pieces = []
    for step in steps:
        pieces.append(stream.push(step))
        if stream.stopped:
            break
    pieces.append(stream.close())
    return pieces


def test_a_stop_string_split_over_steps_never_leaks() -> None:
    stream = TextStream(Chars(), ["END"], eos_ids=set())
    pieces = run(stream, [[ord(c) for c in part] for part in ("Hello E", "N", "D", " more")])
    assert pieces == ["Hello ", "", "", ""]
    assert stream.emitted == "Hello " and stream.finish == "stop" and stream.stopped


def test_held_back_text_is_released_when_it_cannot_be_a_stop_string() -> None:
    stream = TextStream(Chars(), ["END"], eos_ids=set())
    assert stream.push([ord(c) for c in "an E"]) == "an "
    assert stream.push([ord(c) for c in "Nx"]) == "ENx"
    assert stream.push([ord("E")]) == ""
    assert stream.close() == "E" and stream.finish == "length" and stream.emitted == "an ENxE"


def test_eos_flushes_held_back_text() -> None:
    stream = TextStream(Chars(), ["END"], eos_ids={0})
    assert stream.push([ord("E"), ord("N")]) == ""
    assert stream.push([0]) == "EN" and stream.finish == "stop" and not stream.stopped


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(resolve_model_dir(None)[1])


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_pieces_equal_plain_decoding_cut_at_the_first_stop_string(tokenizer, data) -> None:
    """Any step split and any stop strings: the pieces (streamed) and the final text (not streamed) are
    decode(all ids) cut before the first stop string."""
    ids = tokenizer(SAMPLE, add_special_tokens=False).input_ids
    text = tokenizer.decode(ids, skip_special_tokens=True)
    stops = data.draw(
        st.lists(st.sampled_from(["END", "STOP", "\n    ", "🚀", "日本", "zzz", ". Ü", "x * 2"]), max_size=3)
    )
    cuts = sorted(data.draw(st.lists(st.integers(1, len(ids) - 1), max_size=12, unique=True)))
    steps = [ids[a:b] for a, b in zip([0, *cuts], [*cuts, len(ids)])]
    stream = TextStream(tokenizer, stops, eos_ids=set())
    pieces = run(stream, steps)
    hits = [text.find(s) for s in stops if s in text]
    want = text[: min(hits)] if hits else text
    assert "".join(pieces) == stream.emitted == want
    assert stream.finish == ("stop" if hits else "length")
    assert all("\ufffd" not in p for p in pieces)  # no half characters handed out


def test_detokenizing_is_incremental(tokenizer) -> None:
    """Each push decodes its new tokens after a bounded context, not the whole output."""
    calls = []

    class Counting:
        def decode(self, ids, skip_special_tokens=True):
            calls.append(len(ids))
            return tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    ids = tokenizer(SAMPLE * 4, add_special_tokens=False).input_ids
    stream = TextStream(Counting(), [], eos_ids=set())
    for token in ids:
        stream.push([token])
    assert stream.close() == ""  # no stop strings, nothing held back at the end
    assert stream.emitted == tokenizer.decode(ids)
    assert max(calls) <= 12  # 6 tokens of context + an emoji's byte tokens waiting to complete

"""Token ids to final text, shared by the engine's stream and the server.

Text is final once no stop string can still cut it and no multi-byte character is
incomplete; pieces of text are handed out only when final. Detokenizing is incremental
(as vLLM's detokenizer and transformers' streamers do): each step decodes its new tokens
after a few tokens of context, not the whole output, and the pieces concatenate to the
text of decoding every id at once.
"""

from __future__ import annotations

from collections.abc import Sequence

_CONTEXT = 6  # tokens decoded before a piece so that leading spaces and merges come out right


class TextStream:
    """Accumulate a step's tokens at a time; `push` returns the text that became final, `close` the rest.

    A stop string may arrive split over steps ("Hello E", "N", "D" for "END"), so text that
    could still be the start of one is held back until the next tokens decide it."""

    def __init__(self, tokenizer, stop: Sequence[str], eos_ids: set[int]):
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self.eos_ids = eos_ids
        self.ids: list[int] = []
        self.text = ""  # the decoded text of ids[:_read]
        self.emitted = ""
        self._read = 0  # ids decoded into self.text
        self.finish = "length"  # "stop" once EOS or a stop string is reached
        self.stopped = False  # a stop string was hit: nothing after it may be emitted

    def push(self, tokens: Sequence[int]) -> str:
        self.ids.extend(tokens)
        if self.ids and self.ids[-1] in self.eos_ids:
            self.finish = "stop"
        return self._release(final=self.finish == "stop")

    def close(self) -> str:
        """Decoding ended (length, EOS or the caller's stop): hand out the held-back text too."""
        return "" if self.stopped else self._release(final=True)

    def _decode_new(self, final: bool) -> None:
        """Extend self.text by the new ids' text; an incomplete character waits unless `final`."""
        context = max(0, self._read - _CONTEXT)
        head = self.tokenizer.decode(self.ids[context : self._read], skip_special_tokens=True)
        full = self.tokenizer.decode(self.ids[context:], skip_special_tokens=True)
        if final or not full.endswith("\ufffd"):
            self.text += full[len(head) :]
            self._read = len(self.ids)

    def _release(self, final: bool) -> str:
        if self.stopped:
            return ""
        self._decode_new(final)
        hits = [(i, i + len(s)) for i, s in ((self.text.find(s, len(self.emitted)), s) for s in self.stop) if i >= 0]
        if hits:
            (end, through), self.finish, self.stopped = min(hits), "stop", True
            self._drop_ids_after(through)
        else:
            end = len(self.text) if final else len(self.text) - self._stop_prefix_length()
        if end <= len(self.emitted):
            return ""
        piece, self.emitted = self.text[len(self.emitted) : end], self.text[:end]
        return piece

    def _drop_ids_after(self, chars: int) -> None:
        """Keep only the ids the text up to `chars` needs (the stop string's last character): what a step
        drafted past a stop string is not part of the answer, however many tokens that step accepted."""
        while len(self.ids) > 1 and len(self.tokenizer.decode(self.ids[:-1], skip_special_tokens=True)) >= chars:
            self.ids.pop()

    def _stop_prefix_length(self) -> int:
        """The length of the longest end of the text that a stop string starts with (it may yet complete)."""
        longest = min(len(self.text) - len(self.emitted), max((len(s) - 1 for s in self.stop), default=0))
        for k in range(longest, 0, -1):
            tail = self.text[-k:]
            if any(s.startswith(tail) for s in self.stop):
                return k
        return 0


def token_pieces(tokenizer, ids: Sequence[int], count: int) -> list[str]:
    """The display text of each of the last `count` tokens of ids (for colouring tokens by source)."""
    pieces = []
    for end in range(len(ids) - count + 1, len(ids) + 1):
        before = ids[max(0, end - 1 - _CONTEXT) : end - 1]
        head = tokenizer.decode(before, skip_special_tokens=True)
        pieces.append(tokenizer.decode(list(before) + [ids[end - 1]], skip_special_tokens=True)[len(head) :])
    return pieces


# how `lopa generate --show` colours a token by its source (the web page uses the same scheme)
SOURCE_STYLES = {
    "predictor": "black on cyan",
    "lookup": "black on green",
    "pool": "black on yellow",
    "jacobi": "black on yellow",
}


class StepPainter:
    """Print each step's tokens to a rich console, coloured by how they were drafted."""

    def __init__(self, tokenizer, console):
        self.tokenizer = tokenizer
        self.console = console
        self.ids: list[int] = []

    def __call__(self, tokens: Sequence[int], sources: Sequence[str]) -> None:
        self.ids.extend(tokens)
        for piece, source in zip(token_pieces(self.tokenizer, self.ids, len(tokens)), sources):
            self.console.print(
                piece, style=SOURCE_STYLES.get(source, ""), end="", markup=False, highlight=False, soft_wrap=True
            )

    def legend(self) -> None:
        for source in ("predictor", "lookup", "pool"):
            self.console.print(f" {source} ", style=SOURCE_STYLES[source], end=" ", markup=False, highlight=False)
        self.console.print("bonus (plain)", markup=False, highlight=False)

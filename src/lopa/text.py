"""Token ids to final text, shared by the engine's stream and the server.

Text is final once no stop string can still cut it and no multi-byte character is
incomplete; pieces of text are handed out only when final.
"""

from __future__ import annotations

from typing import Sequence

_CONTEXT = 6  # tokens decoded before a piece so that leading spaces and merges come out right


class TextStream:
    """Accumulate a step's tokens at a time; `push` returns the text that became final."""

    def __init__(self, tokenizer, stop: Sequence[str], eos_ids: set[int]):
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self.eos_ids = eos_ids
        self.ids: list[int] = []
        self.emitted = ""
        self.finish = "length"  # "stop" once EOS or a stop string is reached
        self.stopped = False  # a stop string was hit: nothing after it may be emitted

    def push(self, tokens: Sequence[int]) -> str:
        self.ids.extend(tokens)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        hits = [text.find(s) for s in self.stop if s in text]
        if hits:
            text, self.finish, self.stopped = text[: min(hits)], "stop", True
        elif self.ids[-1] in self.eos_ids:
            self.finish = "stop"
        # hold back an incomplete multi-byte character until the next step completes it
        final = text if self.finish == "stop" else text.rstrip("\ufffd")
        if len(final) <= len(self.emitted):
            return ""
        piece, self.emitted = final[len(self.emitted) :], final
        return piece


def token_pieces(tokenizer, ids: Sequence[int], count: int) -> list[str]:
    """The display text of each of the last `count` tokens of ids (for colouring tokens by source)."""
    pieces = []
    for end in range(len(ids) - count + 1, len(ids) + 1):
        before = ids[max(0, end - 1 - _CONTEXT) : end - 1]
        head = tokenizer.decode(before, skip_special_tokens=True)
        pieces.append(tokenizer.decode(list(before) + [ids[end - 1]], skip_special_tokens=True)[len(head) :])
    return pieces


# how `lopa generate --show` colours a token by its source (the web page uses the same scheme)
SOURCE_STYLES = {"predictor": "black on cyan", "lookup": "black on green", "pool": "black on yellow", "jacobi": "black on yellow"}


class StepPainter:
    """Print each step's tokens to a rich console, coloured by how they were drafted."""

    def __init__(self, tokenizer, console):
        self.tokenizer = tokenizer
        self.console = console
        self.ids: list[int] = []

    def __call__(self, tokens: Sequence[int], sources: Sequence[str]) -> None:
        self.ids.extend(tokens)
        for piece, source in zip(token_pieces(self.tokenizer, self.ids, len(tokens)), sources):
            self.console.print(piece, style=SOURCE_STYLES.get(source, ""), end="", markup=False, highlight=False, soft_wrap=True)

    def legend(self) -> None:
        for source in ("predictor", "lookup", "pool"):
            self.console.print(f" {source} ", style=SOURCE_STYLES[source], end=" ", markup=False, highlight=False)
        self.console.print("bonus (plain)", markup=False, highlight=False)

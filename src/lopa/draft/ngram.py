"""Training-free drafters: prompt/context lookup and a Jacobi lookahead n-gram pool.

PromptLookupDrafter finds earlier occurrences of the context's last n tokens and proposes
what followed them (several matches become several branches). JacobiPoolDrafter is the
Lookahead Decoding idea fitted into the tree: it carries a Jacobi guess chain of W tokens
that the verification forward refines for free, and pools the n-grams that the target's
parallel predictions produce, seeded from the prompt.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Sequence

from .base import Drafter, StepFeedback
from .calibration import AcceptanceRates
from .tree import Proposal


class NGramIndex:
    """End positions of every n-gram (n <= max_n) of a growing token list, for O(1) suffix lookups."""

    def __init__(self, max_n: int):
        self.max_n = max_n
        self.tokens: list[int] = []
        self.ends: dict[tuple[int, ...], list[int]] = defaultdict(list)

    def extend(self, tokens: Sequence[int]) -> None:
        for tok in tokens:
            self.tokens.append(tok)
            end = len(self.tokens)
            for n in range(1, min(self.max_n, end) + 1):
                self.ends[tuple(self.tokens[end - n : end])].append(end)

    def continuations(self, suffix: tuple[int, ...], length: int, limit: int) -> list[list[int]]:
        """Distinct continuations after earlier occurrences of `suffix`, most recent first."""
        found: list[list[int]] = []
        seen: set[tuple[int, ...]] = set()
        for end in reversed(self.ends.get(suffix, ())):
            cont = self.tokens[end : end + length]
            key = tuple(cont)
            if cont and key not in seen and end < len(self.tokens):
                seen.add(key)
                found.append(cont)
                if len(found) == limit:
                    break
        return found


class PromptLookupDrafter(Drafter):
    """Propose what followed earlier occurrences of the current suffix in prompt and output."""

    source = "lookup"

    def __init__(self, max_ngram: int = 3, max_matches: int = 4):
        self.max_ngram = max_ngram
        self.max_matches = max_matches
        self.index = NGramIndex(max_ngram)
        # confidence = learned P(accept) per match length; longer matches start more trusted
        self.rates = AcceptanceRates({n: 0.15 + 0.15 * n for n in range(1, max_ngram + 1)})
        self.last: list[tuple[int, list[int]]] = []

    def start(self, prompt: Sequence[int]) -> None:
        self.index = NGramIndex(self.max_ngram)
        self.index.extend(prompt)
        self.last = []

    def _sync(self, context: Sequence[int]) -> None:
        self.index.extend(context[len(self.index.tokens) :])

    def propose(self, context: Sequence[int], max_depth: int) -> list[Proposal]:
        self._sync(context)
        proposals: list[Proposal] = []
        self.last = []
        for n in range(min(self.max_ngram, len(context) - 1), 0, -1):
            suffix = tuple(context[-n:])
            # the suffix itself is the last occurrence; its "continuation" is empty and skipped
            for cont in self.index.continuations(suffix, max_depth, self.max_matches - len(proposals)):
                if all(cont != p.tokens[: len(cont)] for p in proposals):
                    proposals.append(Proposal(cont, [self.rates.rate(n)] * len(cont), self.source))
                    self.last.append((n, cont))
            if len(proposals) >= self.max_matches:
                break
        return proposals

    def observe(self, feedback: StepFeedback) -> None:
        self.rates.learn(feedback, self.last)


class JacobiPoolDrafter(Drafter):
    """A Jacobi guess chain plus an n-gram pool fed by the target's parallel predictions."""

    source = "pool"

    def __init__(self, ngram_size: int = 4, guesses: int = 4, window: int = 5):
        self.n = ngram_size
        self.guesses = guesses
        self.window = window
        self.pool: dict[int, OrderedDict[tuple[int, ...], None]] = {}
        self.chain: list[int] = []
        self.rates = AcceptanceRates({("pool", r): 0.3 / (1 + r) for r in range(guesses)} | {"jacobi": 0.1})
        self.last: list[tuple[object, list[int]]] = []

    def start(self, prompt: Sequence[int]) -> None:
        self.pool = {}
        self.chain = []
        self.last = []
        for i in range(len(prompt) - self.n + 1):
            self._add(prompt[i : i + self.n])

    def _add(self, gram: Sequence[int]) -> None:
        """Remember an n-gram under its first token, keeping the G most recent per key."""
        if len(gram) < self.n:
            return
        entry = self.pool.setdefault(gram[0], OrderedDict())
        key = tuple(gram[1:])
        entry.pop(key, None)
        entry[key] = None
        while len(entry) > self.guesses:
            entry.popitem(last=False)

    def propose(self, context: Sequence[int], max_depth: int) -> list[Proposal]:
        guesses: list[tuple[object, list[int]]] = [
            (("pool", rank), list(gram[:max_depth]))
            for rank, gram in enumerate(reversed(self.pool.get(context[-1], {})))
        ]
        if self.chain:
            guesses.append(("jacobi", self.chain[:max_depth]))
        self.last = guesses
        return [
            Proposal(tokens, [self.rates.rate(key)] * len(tokens), "jacobi" if key == "jacobi" else "pool")
            for key, tokens in guesses
        ]

    def observe(self, feedback: StepFeedback) -> None:
        self.rates.learn(feedback, self.last)
        tree, preds, before = feedback.tree, feedback.predictions, feedback.context[:-1]
        # n-grams the target itself produced along every tree path (verified or not: Jacobi guesses)
        for node in range(tree.size):
            tail = (before[-self.n :] + tree.path_tokens(node))[-(self.n - 1) :]
            self._add(tail + [preds[node]])
        # committed text is the most reliable source
        recent = (feedback.context + feedback.new_tokens)[-(len(feedback.new_tokens) + self.n) :]
        for i in range(len(recent) - self.n + 1):
            self._add(recent[i : i + self.n])
        self._advance_chain(feedback)

    def _advance_chain(self, feedback: StepFeedback) -> None:
        """One Jacobi iteration: the target's predictions along the old chain become the new guesses."""
        tree, preds = feedback.tree, feedback.predictions
        accepted = len(feedback.accepted_nodes) - 1  # drafted tokens kept this step
        nodes = tree.find_path(self.chain)
        # predictions at chain nodes beyond the accepted prefix guess the tokens after the new root
        guesses = [preds[node] for node in nodes[accepted + 1 :]]
        if not guesses:  # restart the chain from the freshest pooled n-gram after the new root
            pooled = list(self.pool.get(feedback.new_tokens[-1], {}))
            guesses = list(pooled[-1]) if pooled else []
        self.chain = guesses[: self.window]

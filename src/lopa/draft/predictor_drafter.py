"""EAGLE-2 dynamic draft trees from an Eagle3Predictor.

After every verification the drafter runs its predictor over the rows of the tokens just committed
(each with the target's features of the position before it), which also yields the distribution after
the new root. Drafting then grows a tree depth by depth: the `top_k` nodes of the newest depth with the
highest path confidence are expanded in one batched predictor forward (their rows attend to the
committed rows and to their own ancestors in the predictor's cache), each adding its `top_k` likeliest
children. A node's confidence is its predictor probability calibrated online (`calibration_rates`: the
acceptance actually seen per probability bin in this request), its path confidence the product along its path. A node
is expanded only while its path confidence reaches what the verified trees have lately kept of this drafter's
nodes (`min_path_prob` until a tree was verified): a child never scores above its parent, so a parent below that
cutoff has no child the cost model (decode/cost.py) would verify, and each level expanded is a predictor
forward (~2.5 ms on the 2-core CPU, against a ~50 ms target forward). As trees shrink (a busier batch, a forward
that costs more) the drafter expands less, and an unsure predictor stops early. At the
end all drafted nodes are reranked by path confidence and the best `max_nodes` go out as root-to-leaf
Proposals with their calibrated confidences; tree.py merges them with the other drafters' proposals.

The predictor reads the target's hidden states of its aux layers: set `runner.hidden_layers =
drafter.hidden_layers`, so verification (StepFeedback.layers) and prefill (observe_prefill) carry them.
It never touches the target's KV cache; its own is discarded past the committed rows after each draft.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .base import Drafter, StepFeedback
from .calibration import AcceptanceRates
from .predictor import Eagle3Predictor, PredictorCache, causal
from .tree import Proposal


@dataclass
class _Node:
    token: int  # target id
    parent: int  # node index, -1 for the root's children
    depth: int
    prob: float  # the predictor's probability of this token given its parent
    conf: float  # that probability calibrated: the learned P(accepted | parent accepted) of its bin
    score: float  # cumulative log-confidence (calibrated): what ranks and prunes nodes
    rows: list[int] = field(default_factory=list)  # drafted cache rows of its ancestors and itself, once expanded
    feature: torch.Tensor | None = None  # the parent row's output feature: this node's row input


@dataclass
class _Path:
    """A proposed root-to-leaf path, as _learn reads it back after verification."""

    tokens: list[int]
    bins: list[int]  # each token's probability bin
    scores: list[float]  # each node's path score


CUTOFF_SMOOTHING = 0.3  # weight of the newest step in the expansion cutoff


class PredictorDrafter(Drafter):
    source = "predictor"

    def __init__(
        self,
        predictor: Eagle3Predictor,
        top_k: int = 4,
        max_depth: int = 6,
        max_nodes: int = 24,
        min_path_prob: float = 0.02,
        rates: AcceptanceRates | None = None,
    ):
        self.predictor = predictor
        self.top_k = top_k
        self.max_depth = max_depth
        self.max_nodes = max_nodes
        self.min_path_prob = min_path_prob  # the expansion cutoff before any tree was verified
        self.cutoff = _log(min_path_prob)  # log path confidence the verified trees kept lately (see _learn)
        # per request unless given: each request's text calibrates its own drafts
        self.rates = rates or calibration_rates()
        self.last: list[_Path] = []  # the last proposals: tokens, probability bins and path scores
        self.cache = PredictorCache()
        self.prefill: torch.Tensor | None = None
        self.root: tuple[torch.Tensor, torch.Tensor] | None = None  # (draft logits, feature) after the tree root
        self.first: int | None = None  # its likeliest token after the root, at the last step
        self.first_hits = self.first_trials = 0  # how often that was the target's token (depth-1 top-1 acceptance)
        # committed rows wait here until the next proposal runs them in one forward: while the step does not ask
        # this drafter (decode/pricing.py: it does not pay at the batch's rate) it costs almost nothing
        self.pending: list[tuple[list[int], torch.Tensor]] = []

    @property
    def hidden_layers(self) -> tuple[int, ...]:
        """What Runner.hidden_layers must be for this drafter."""
        return tuple(self.predictor.config.aux_layers)

    def start(self, prompt: Sequence[int]) -> None:
        self.cache.reset()
        self.prefill = self.root = self.first = None
        self.first_hits = self.first_trials = 0
        self.pending = []
        self.cutoff = _log(self.min_path_prob)

    def observe_prefill(self, layers: torch.Tensor) -> None:
        self.prefill = layers  # run at the first propose, when the first token (the root) is known

    def observe(self, feedback: StepFeedback) -> None:
        if feedback.layers is None:
            raise ValueError(f"the runner returns no hidden layers: set runner.hidden_layers = {self.hidden_layers}")
        self._learn(feedback)
        if self.first is not None:
            self.first_trials += 1
            self.first_hits += feedback.new_tokens[0] == self.first
            self.first = None
        self.pending.append((feedback.new_tokens, feedback.layers[feedback.accepted_nodes]))

    def _learn(self, feedback: StepFeedback) -> None:
        """Score each proposed token that reached the tree and whose parent the target accepted, in its bin; and
        move the expansion cutoff towards the lowest path score the tree verified (none verified: above the best
        one proposed)."""
        tree, kept, seen = feedback.tree, set(feedback.accepted_nodes), set()
        verified, best = [], -math.inf
        for path in self.last:
            reached = tree.find_path(path.tokens)[1:]
            verified += path.scores[: len(reached)]
            best = max(best, path.scores[0])
            for node, key in zip(reached, path.bins):
                if tree.parents[node] not in kept:
                    break
                if node not in seen:
                    seen.add(node)
                    self.rates.record(key, node in kept)
        if self.last:
            observed = min(verified) if verified else best
            self.cutoff = (
                observed if self.cutoff == -math.inf else self.cutoff + CUTOFF_SMOOTHING * (observed - self.cutoff)
            )
        self.last = []

    def summary(self) -> dict:
        """Depth-1 top-1 acceptance over this request's steps: the predictor's own quality, whatever the tree kept."""
        return {"depth1_hits": self.first_hits, "depth1_trials": self.first_trials}

    def propose(self, context: Sequence[int], max_depth: int) -> list[Proposal]:
        if self.prefill is not None:  # rows for prompt[1:] + the first token, from the prompt's features
            self.pending.insert(
                0, (list(context[1 : len(context) - sum(len(t) for t, _ in self.pending)]), self.prefill)
            )
            self.prefill = None
        if self.pending:
            self._flush()
        if self.root is None:
            raise ValueError(f"the runner returns no hidden layers: set runner.hidden_layers = {self.hidden_layers}")
        depth = min(max_depth, self.max_depth)
        self.first = self.predictor.draft_ids[int(self.root[0].argmax())].item()
        return self._draft(depth, len(context)) if depth >= 1 else []

    def _flush(self) -> None:
        """Run the pending committed rows in one predictor forward."""
        tokens = [t for part, _ in self.pending for t in part]
        layers = torch.cat([rows for _, rows in self.pending])
        self.pending = []
        self._commit(tokens, layers)

    @torch.no_grad()
    def _commit(self, tokens: list[int], layers: torch.Tensor) -> None:
        """Rows for `tokens`, each paired with the target's features [len, aux * hidden] of the position before it."""
        n = len(tokens)
        positions = torch.arange(n) + self.cache.committed + 1  # row r holds the token at position r + 1
        features = self.predictor.fuse(layers.to(self.predictor.device))
        logits, out = self.cache.run(self.predictor, features, torch.tensor(tokens), positions, causal(n))
        self.cache.commit()
        self.root = (logits[-1], out[-1])

    def _children(self, parent: int, logits: torch.Tensor, feature: torch.Tensor, nodes: list[_Node]) -> list[int]:
        """Add the top_k children of node `parent` (-1: the root) from its row's logits; returns their indices."""
        logp, idx = logits.float().log_softmax(-1).topk(min(self.top_k, logits.numel()))
        tokens = self.predictor.draft_ids[idx].tolist()
        base, depth = (0.0, 1) if parent < 0 else (nodes[parent].score, nodes[parent].depth + 1)
        first = len(nodes)
        for tok, lp in zip(tokens, logp.tolist()):
            conf = self.rates.rate(_bin(math.exp(lp)))
            nodes.append(_Node(tok, parent, depth, math.exp(lp), conf, base + math.log(conf), feature=feature))
        return list(range(first, len(nodes)))

    def _draft(self, depth: int, position: int) -> list[Proposal]:
        """The EAGLE-2 tree of `depth` levels; `position` is the position of the root's children."""
        nodes: list[_Node] = []
        logits, feature = self.root
        frontier = self._children(-1, logits, feature, nodes)
        for level in range(1, depth):
            best = sorted(frontier, key=lambda i: -nodes[i].score)[: self.top_k]
            expand = [i for i in best if nodes[i].score >= self.cutoff]
            if not expand:  # deeper nodes could not pay for their rows: stop drafting early
                break
            drafted, t = self.cache.drafted, len(expand)
            ancestors = torch.zeros(t, drafted + t, dtype=torch.bool)
            for row, i in enumerate(expand):
                parent_rows = nodes[nodes[i].parent].rows if nodes[i].parent >= 0 else []
                nodes[i].rows = parent_rows + [drafted + row]
                ancestors[row, nodes[i].rows] = True
            logits, out = self.cache.run(
                self.predictor,
                torch.stack([nodes[i].feature for i in expand]),
                torch.tensor([nodes[i].token for i in expand]),
                torch.full((t,), position + level - 1),
                ancestors,
            )
            frontier = [c for row, i in enumerate(expand) for c in self._children(i, logits[row], out[row], nodes)]
        self.cache.discard()
        return self._proposals(nodes)

    def _proposals(self, nodes: list[_Node]) -> list[Proposal]:
        """Rerank every drafted node by cumulative log-confidence; the best max_nodes as root-to-leaf paths.

        A child never scores above its parent, so (parents first on ties) the chosen nodes form a tree."""
        chosen = sorted(range(len(nodes)), key=lambda i: (-nodes[i].score, nodes[i].depth))[: self.max_nodes]
        parents = {nodes[i].parent for i in chosen}
        proposals = []
        for leaf in (i for i in chosen if i not in parents):
            path, i = [], leaf
            while i >= 0:
                path.append(nodes[i])
                i = nodes[i].parent
            path.reverse()
            proposals.append(Proposal([n.token for n in path], [n.conf for n in path], self.source))
            self.last.append(_Path([n.token for n in path], [_bin(n.prob) for n in path], [n.score for n in path]))
        return proposals


BINS = 10


def _log(prob: float) -> float:
    return math.log(prob) if prob > 0 else -math.inf


def _bin(prob: float) -> int:
    return min(BINS - 1, int(prob * BINS))


def calibration_rates() -> AcceptanceRates:
    """P(accepted | parent accepted) per bin of the predictor's probability, starting from the bin's centre.

    A predictor trained on a few hundred thousand rows is overconfident on prompts unlike its data (the
    shipped one's 0.5-0.6 bin was right about a quarter of the time on 13 Spec-Bench dev answers; nothing
    here is fitted to them): the tree filter and the cost model need what is actually accepted, which
    these rates learn while decoding."""
    return AcceptanceRates({b: (b + 0.5) / BINS for b in range(BINS)}, strength=8.0, decay=0.995)

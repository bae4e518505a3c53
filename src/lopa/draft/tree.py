"""Merge proposals into one prefix-shared candidate tree under a confidence filter and a node budget.

A proposal's confidences are per-token acceptance probabilities (given the parent was
accepted), so a node's path probability is their product and the sum of path
probabilities is the expected number of accepted draft tokens. Filtering follows LoPA:
a node survives only if its path probability is above tau times the best at its depth,
the top-k per depth are kept, and nodes are added best first by path score until the
budget is spent; the decoding step then keeps the prefix of that order worth its forward
cost (decode/cost.py). The path score ranks only; acceptance is decided by the target model alone,
so none of this can change the output.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import torch

from ..config import DraftConfig


@dataclass
class Proposal:
    """A candidate continuation after the tree root, with a confidence in (0, 1] for each token."""

    tokens: list[int]
    confidences: list[float]
    source: str  # "predictor", "lookup", "pool", "jacobi" or "draft": shown to users per accepted token


@dataclass
class _Candidate:
    token: int
    parent: int  # candidate id; -1 for children of the root
    depth: int
    confidence: float = 0.0
    source: str = ""
    support: int = 0
    logp: float = 0.0  # sum of log confidence along the path
    rank: float = 0.0  # the path score
    children: dict[int, int] = field(default_factory=dict)


@dataclass
class DraftTree:
    """Nodes in topological order; node 0 is the root (the last committed-but-unverified token)."""

    tokens: list[int]
    parents: list[int]
    depths: list[int]
    sources: list[str]
    children: list[list[int]]  # per node, ranked by path score (the order sampling tries them)

    @property
    def size(self) -> int:
        return len(self.tokens)

    @property
    def depth(self) -> int:
        return max(self.depths)

    def path_nodes(self, node: int) -> list[int]:
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def path_tokens(self, node: int) -> list[int]:
        return [self.tokens[i] for i in self.path_nodes(node)]

    def find_path(self, tokens: list[int]) -> list[int]:
        """Node indices following `tokens` down from the root, as far as the tree has them (root first)."""
        nodes = [0]
        for tok in tokens:
            nxt = next((c for c in self.children[nodes[-1]] if self.tokens[c] == tok), None)
            if nxt is None:
                break
            nodes.append(nxt)
        return nodes

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(tokens [T], depths [T], ancestors [T, T] bool with the diagonal) for the runner."""
        t = self.size
        ancestors = torch.zeros(t, t, dtype=torch.bool)
        for i, parent in enumerate(self.parents):
            if parent >= 0:
                ancestors[i] = ancestors[parent]
            ancestors[i, i] = True
        return torch.tensor(self.tokens), torch.tensor(self.depths), ancestors


def root_only(root: int) -> DraftTree:
    return DraftTree([root], [-1], [0], ["root"], [[]])


def _repetitions(tokens: list[int]) -> int:
    """Bigrams that occur more than once in the path: a sign of a degenerate loop."""
    bigrams = list(zip(tokens, tokens[1:]))
    return len(bigrams) - len(set(bigrams))


def _merge(root: int, proposals: list[Proposal], max_depth: int) -> list[_Candidate]:
    """A trie of all proposals; a node keeps its best confidence and counts its supporters."""
    nodes: list[_Candidate] = []
    top: dict[int, int] = {}
    for prop in proposals:
        siblings, parent = top, -1
        for depth, (tok, conf) in enumerate(zip(prop.tokens[:max_depth], prop.confidences), start=1):
            if tok not in siblings:
                siblings[tok] = len(nodes)
                nodes.append(_Candidate(tok, parent, depth))
            node = nodes[siblings[tok]]
            node.support += 1
            if conf > node.confidence:
                node.confidence, node.source = conf, prop.source
            parent, siblings = siblings[tok], node.children
    return nodes


def _score(nodes: list[_Candidate], root: int, cfg: DraftConfig) -> None:
    """Path score = lambda1 * sum log p + lambda2 * log(support) - w * repeated bigrams (parents first)."""
    for node in nodes:  # the trie is built parents first
        parent_logp = nodes[node.parent].logp if node.parent >= 0 else 0.0
        node.logp = parent_logp + math.log(max(node.confidence, 1e-9))
    for node in nodes:
        path, cur = [], node
        while True:
            path.append(cur.token)
            if cur.parent < 0:
                break
            cur = nodes[cur.parent]
        node.rank = (
            cfg.lambda_logp * node.logp
            + cfg.lambda_coherence * math.log(node.support)
            - cfg.repetition_penalty_weight * _repetitions([root] + path[::-1])
        )


@dataclass
class RankedDraft:
    """The drafted nodes best first (every prefix of the order is a connected tree)."""

    root: int
    nodes: list[_Candidate] = field(default_factory=list)
    order: list[int] = field(default_factory=list)

    @property
    def probs(self) -> list[float]:
        """Path probabilities in best-first order: their sum is the expected number of accepted drafts."""
        return [math.exp(self.nodes[i].logp) for i in self.order]

    @property
    def depths(self) -> list[int]:
        """The nodes' depths in best-first order."""
        return [self.nodes[i].depth for i in self.order]

    def tree(self, size: int | None = None) -> DraftTree:
        """The tree of the best `size` nodes (all when None) besides the root, parents first."""
        chosen = sorted(self.order[:size], key=lambda i: (self.nodes[i].depth, -self.nodes[i].rank))
        index = {cand: pos + 1 for pos, cand in enumerate(chosen)}
        tree = root_only(self.root)
        for cand in chosen:
            node = self.nodes[cand]
            parent = index[node.parent] if node.parent >= 0 else 0
            tree.tokens.append(node.token)
            tree.parents.append(parent)
            tree.depths.append(node.depth)
            tree.sources.append(node.source)
            tree.children.append([])
            tree.children[parent].append(index[cand])
        return tree


def rank(root: int, proposals: list[Proposal], cfg: DraftConfig, max_depth: int, budget: int) -> RankedDraft:
    """Merge the proposals, keep the nodes the confidence filter and top-k pass (cfg.tau, cfg.top_k_per_depth),
    and order at most `budget` of them best first by path score from the root."""
    nodes = _merge(root, proposals, max_depth)
    if not nodes:
        return RankedDraft(root)
    _score(nodes, root, cfg)
    by_depth: dict[int, list[int]] = {}
    for i, node in enumerate(nodes):
        by_depth.setdefault(node.depth, []).append(i)
    eligible: set[int] = set()
    for ids in by_depth.values():
        best = max(nodes[i].logp for i in ids)
        kept = [i for i in ids if nodes[i].logp > math.log(cfg.tau) + best or nodes[i].logp == best]
        kept.sort(key=lambda i: -nodes[i].rank)
        eligible.update(kept[: cfg.top_k_per_depth])
    # best-first growth from the root keeps the tree connected and spends the budget on the best paths
    frontier = [(-nodes[i].rank, i) for i in by_depth.get(1, []) if i in eligible]
    heapq.heapify(frontier)
    order: list[int] = []
    while frontier and len(order) < budget:
        _, i = heapq.heappop(frontier)
        order.append(i)
        for child in nodes[i].children.values():
            if child in eligible:
                heapq.heappush(frontier, (-nodes[child].rank, child))
    return RankedDraft(root, nodes, order)

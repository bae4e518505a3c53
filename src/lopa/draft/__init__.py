"""Drafters propose future tokens; tree.py merges their proposals into one candidate tree."""

from .base import Drafter
from .ngram import JacobiPoolDrafter, PromptLookupDrafter
from .tree import DraftTree, Proposal, RankedDraft, rank

__all__ = ["Drafter", "Proposal", "JacobiPoolDrafter", "PromptLookupDrafter", "DraftTree", "RankedDraft", "rank"]

"""Drafters propose future tokens; tree.py merges their proposals into one candidate tree."""

from .base import Drafter, Proposal, StepFeedback
from .ngram import JacobiPoolDrafter, PromptLookupDrafter
from .tree import DraftTree, TreeLimits, build_tree

__all__ = [
    "Drafter",
    "Proposal",
    "StepFeedback",
    "JacobiPoolDrafter",
    "PromptLookupDrafter",
    "DraftTree",
    "TreeLimits",
    "build_tree",
]

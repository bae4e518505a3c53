"""What every prompt source yields: a prompt tagged with where it came from, and the round robin that keeps a
quota taken from the front of a pool varied."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Prompt:
    text: str
    # "prompts.py", "locale:<lang>/<catalogue>", "translate:<src>-><dst>", "pydoc:<topic>", "man:<page>(<section>)",
    # "stdlib:<module>.<name>" or "self-instruct:<topic>"
    source: str


def interleave(groups: Iterable[Iterable[T]]) -> Iterator[T]:
    """Round robin over the groups, so that a prefix taken as a quota is not dominated by one group; lazy down to
    the item, so that a short prefix of lazy groups reads only the groups it reaches."""
    iterators = [iter(group) for group in groups]
    while iterators:
        alive = []
        for iterator in iterators:
            for item in iterator:  # at most one: the group's next item, if it has one
                alive.append(iterator)
                yield item
                break
        iterators = alive

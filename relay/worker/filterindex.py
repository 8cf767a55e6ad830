"""Which clients want a row change: the filter index the worker consults for every row.

A filter names a schema and a table exactly or with ``*`` (any run of characters) and ``?`` (one character); the
match is case-sensitive like MySQL's names on Linux. For each (schema, table, kind) the index answers, once and then
from a cache, the clients whose filters match, each with the queue limit and discard policy of its earliest
matching filter (a change enters a client's queue at most once).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FilterSpec:
    filter_id: int
    client_id: int
    event_mask: int
    schema_name: str
    table_name: str
    queue_limit: int
    discard_policy: int


@dataclass(frozen=True, slots=True)
class Subscription:
    """A client that wants a change, and how its queue treats it (the limit and policy of ``filter_id``, the earliest
    of its filters that match)."""

    client_id: int
    queue_limit: int
    discard_policy: int
    filter_id: int = 0


class NamePattern:
    """A name pattern compiled for matching in time linear in the name's length, whatever the pattern.

    Regular expressions backtrack: ``*`` thirty times then a character that never comes takes exponential time.
    Here the pattern is an automaton whose states (the pattern's positions) are simulated all at once as the bits of
    one integer, so each character of the name costs a shift, two ANDs and two ORs over ``len(pattern) + 1`` bits.
    Bit ``i`` set means "the name so far matches the first ``i`` tokens of the pattern".
    """

    __slots__ = ("_accept", "_any", "_exact", "_masks", "_stars")

    def __init__(self, pattern: str) -> None:
        if "*" not in pattern and "?" not in pattern:
            self._exact: str | None = pattern
            return
        self._exact = None
        tokens: list[str] = []
        for char in pattern:  # runs of stars match what one star matches
            if not (char == "*" and tokens and tokens[-1] == "*"):
                tokens.append(char)
        masks: dict[str, int] = {}
        any_char = stars = 0
        for position, token in enumerate(tokens, start=1):
            bit = 1 << position
            if token == "*":
                stars |= bit
                any_char |= bit
            elif token == "?":
                any_char |= bit
            else:
                masks[token] = masks.get(token, 0) | bit
        # A literal character's mask also holds the wildcard positions, which take any character.
        self._masks = {char: mask | any_char for char, mask in masks.items()}
        self._any = any_char
        self._stars = stars
        self._accept = 1 << len(tokens)

    def matches(self, name: str) -> bool:
        if self._exact is not None:
            return self._exact == name
        masks, any_char, stars = self._masks, self._any, self._stars
        state = 1 | ((1 << 1) & stars)  # a leading star matches the empty prefix
        for char in name:
            # Advance every live position by this character, or stay on a star that swallows it; then let each
            # star that was just reached match the empty string.
            state = ((state << 1) & masks.get(char, any_char)) | (state & stars)
            if not state:
                return False
            state |= (state << 1) & stars
        return bool(state & self._accept)


def name_matches(pattern: str, name: str) -> bool:
    """``*`` (any run of characters) and ``?`` (one character); every other character stands for itself."""
    return NamePattern(pattern).matches(name)


class FilterIndex:
    def __init__(self, filters: Iterable[FilterSpec]) -> None:
        # Earliest filter first: its limit and policy win when several of a client's filters match.
        self._filters = sorted(filters, key=lambda spec: spec.filter_id)
        self._patterns = [(NamePattern(spec.schema_name), NamePattern(spec.table_name)) for spec in self._filters]
        self._cache: dict[tuple[str, str, int], tuple[Subscription, ...]] = {}

    def __len__(self) -> int:
        return len(self._filters)

    def match(self, schema: str, table: str, kind: int) -> tuple[Subscription, ...]:
        key = (schema, table, kind)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._compute(schema, table, kind)
        return found

    def _compute(self, schema: str, table: str, kind: int) -> tuple[Subscription, ...]:
        chosen: dict[int, Subscription] = {}
        for spec, (schema_pattern, table_pattern) in zip(self._filters, self._patterns, strict=True):
            if spec.client_id in chosen or not spec.event_mask & kind:
                continue
            if schema_pattern.matches(schema) and table_pattern.matches(table):
                chosen[spec.client_id] = Subscription(
                    spec.client_id, spec.queue_limit, spec.discard_policy, spec.filter_id
                )
        return tuple(chosen.values())

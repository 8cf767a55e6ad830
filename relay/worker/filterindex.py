"""Which clients want a row change: the filter index the worker consults for every row.

A filter names a schema and a table exactly or with ``*`` (any run of characters) and ``?`` (one character); the
match is case-sensitive like MySQL's names on Linux. For each (schema, table, kind) the index answers, once and then
from a cache, the clients whose filters match, each with the queue limit and discard policy of its earliest
matching filter (a change enters a client's queue at most once).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from relay.store.patterns import NamePattern


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


class FilterIndex:
    def __init__(self, filters: Iterable[FilterSpec], patterns: dict[str, NamePattern] | None = None) -> None:
        # Earliest filter first: its limit and policy win when several of a client's filters match.
        self._filters = sorted(filters, key=lambda spec: spec.filter_id)
        #: Each pattern once (an index loaded again takes the last one's: most filters are as they were).
        self.patterns: dict[str, NamePattern] = {} if patterns is None else patterns
        self._patterns = [(self._pattern(spec.schema_name), self._pattern(spec.table_name)) for spec in self._filters]
        self._cache: dict[tuple[str, str, int], tuple[Subscription, ...]] = {}

    def _pattern(self, text: str) -> NamePattern:
        pattern = self.patterns.get(text)
        if pattern is None:
            if len(self.patterns) > 200_000:  # patterns of filters long gone
                self.patterns.clear()
            pattern = self.patterns[text] = NamePattern(text)
        return pattern

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

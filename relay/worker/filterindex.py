"""Which clients want a row change: the filter index the worker consults for every row.

A filter names a schema and a table exactly or with ``*`` (any run of characters) and ``?`` (one character); the
match is case-sensitive like MySQL's names on Linux. For each (schema, table, kind) the index answers, once and then
from a cache, the clients whose filters match, each with the queue limit and discard policy of its earliest
matching filter (a change enters a client's queue at most once).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache


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
    """A client that wants a change, and how its queue treats it."""

    client_id: int
    queue_limit: int
    discard_policy: int


@lru_cache(maxsize=4096)
def name_pattern(pattern: str) -> re.Pattern[str]:
    """``*`` and ``?`` wildcards; every other character, brackets included, stands for itself."""
    parts = ("." if char == "?" else ".*" if char == "*" else re.escape(char) for char in pattern)
    return re.compile("".join(parts), re.DOTALL)


def name_matches(pattern: str, name: str) -> bool:
    if "*" not in pattern and "?" not in pattern:
        return pattern == name
    return name_pattern(pattern).fullmatch(name) is not None


class FilterIndex:
    def __init__(self, filters: Iterable[FilterSpec]) -> None:
        # Earliest filter first: its limit and policy win when several of a client's filters match.
        self._filters = sorted(filters, key=lambda spec: spec.filter_id)
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
        for spec in self._filters:
            if spec.client_id in chosen or not spec.event_mask & kind:
                continue
            if name_matches(spec.schema_name, schema) and name_matches(spec.table_name, table):
                chosen[spec.client_id] = Subscription(spec.client_id, spec.queue_limit, spec.discard_policy)
        return tuple(chosen.values())

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


#: A client's filters, earliest first, each with its schema and table patterns.
_ClientFilters = list[tuple[FilterSpec, NamePattern, NamePattern]]

#: Past this many (cached answer, changed filter) pairs, an update drops the cached answers rather than mending them.
_MEND_LIMIT = 200_000


class FilterIndex:
    def __init__(self, filters: Iterable[FilterSpec], patterns: dict[str, NamePattern] | None = None) -> None:
        #: Each pattern once (an index loaded again takes the last one's: most filters are as they were).
        self.patterns: dict[str, NamePattern] = {} if patterns is None else patterns
        self._clients: dict[int, _ClientFilters] = self._by_client(filters)
        self._count = sum(len(specs) for specs in self._clients.values())
        self._cache: dict[tuple[str, str, int], tuple[Subscription, ...]] = {}

    def _by_client(self, filters: Iterable[FilterSpec]) -> dict[int, _ClientFilters]:
        # Earliest filter first: its limit and policy win when several of a client's filters match.
        clients: dict[int, _ClientFilters] = {}
        known = self.patterns.get  # most patterns are known already: a reload takes the last index's
        for spec in sorted(filters, key=lambda spec: spec.filter_id):
            entry = (
                spec,
                known(spec.schema_name) or self._pattern(spec.schema_name),
                known(spec.table_name) or self._pattern(spec.table_name),
            )
            specs = clients.get(spec.client_id)
            if specs is None:
                clients[spec.client_id] = [entry]
            else:
                specs.append(entry)
        return clients

    def _pattern(self, text: str) -> NamePattern:
        pattern = self.patterns.get(text)
        if pattern is None:
            if len(self.patterns) > 200_000:  # patterns of filters long gone
                self.patterns.clear()
            pattern = self.patterns[text] = NamePattern(text)
        return pattern

    def __len__(self) -> int:
        return self._count

    def update(self, client_ids: Iterable[int], filters: Iterable[FilterSpec]) -> None:
        """The clients of ``client_ids`` now have ``filters`` (theirs among them; none: they have none left); the
        other clients' filters stay as they are, and so do their cached answers: an update costs the changed
        clients' filters, not every client's."""
        changed = set(client_ids)
        fresh = self._by_client(spec for spec in filters if spec.client_id in changed)
        for client_id in changed:
            old = self._clients.pop(client_id, None)
            if old is not None:
                self._count -= len(old)
        self._clients.update(fresh)
        added = sum(len(specs) for specs in fresh.values())
        self._count += added
        if len(self._cache) * added > _MEND_LIMIT:
            self._cache.clear()
            return
        for key, found in self._cache.items():
            subscriptions = [sub for sub in found if sub.client_id not in changed]
            for specs in fresh.values():
                sub = _first_match(specs, *key)
                if sub is not None:
                    subscriptions.append(sub)
            subscriptions.sort(key=lambda sub: sub.filter_id)
            self._cache[key] = tuple(subscriptions)

    def match(self, schema: str, table: str, kind: int) -> tuple[Subscription, ...]:
        key = (schema, table, kind)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._compute(schema, table, kind)
        return found

    def _compute(self, schema: str, table: str, kind: int) -> tuple[Subscription, ...]:
        """Each client's subscription, in the order of the filters that made them."""
        subscriptions = []
        for specs in self._clients.values():
            sub = _first_match(specs, schema, table, kind)
            if sub is not None:
                subscriptions.append(sub)
        subscriptions.sort(key=lambda sub: sub.filter_id)
        return tuple(subscriptions)


def _first_match(specs: _ClientFilters, schema: str, table: str, kind: int) -> Subscription | None:
    """The subscription of the earliest of one client's filters that matches, if one does."""
    for spec, schema_pattern, table_pattern in specs:
        if spec.event_mask & kind and schema_pattern.matches(schema) and table_pattern.matches(table):
            return Subscription(spec.client_id, spec.queue_limit, spec.discard_policy, spec.filter_id)
    return None

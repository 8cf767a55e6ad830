"""A client's filters: what it subscribes to (event mask, schema, table) and its queue's limit and discard policy.

**The subscription point is exact.** Every filter write (ADDFILTER, REMOVEFILTER, an admin edit or delete, a client's
deletion) bumps :class:`~relay.models.FilterVersion` in its own transaction, through the model signals connected
below, so no path that writes a filter can miss it. The worker reads the version inside each batch's transaction,
before it routes the batch, and reloads its filters when the version moved. The worker reads a row change only after
the source committed it; so a change committed on the source after a filter write's reply was read after that write
committed, and is routed by the new filters: nothing committed after ADDFILTER's reply is missed.

**Reloaded per client.** Each write also stamps its client with the new version (:class:`~relay.models.FilterStamp`),
so the worker reloads only the filters of the clients stamped past the version it loaded: one client rewriting its
filters in a loop costs each batch its own filters, not everyone's.

**Bounded.** Patterns and filters per client are capped (the limits below; clients in relay/store/sessions.py), each
with an error that says which, so that one client cannot make matching or routing expensive for the others.
"""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction
from django.db.models.signals import post_delete, post_save, pre_save

from relay.models import DiscardPolicy, Filter, FilterStamp, FilterVersion
from relay.store.errors import StoreError
from relay.store.sql import table

#: The longest schema or table pattern: MySQL's names have at most 64 characters, and a pattern of wildcards has no
#: reason to be longer than a few names.
MAX_PATTERN_LENGTH = 255
#: Filters per client: a client that needs more subscribes with wildcards.
MAX_FILTERS_PER_CLIENT = 1_000


def check_pattern(what: str, pattern: str) -> None:
    if not pattern:
        raise StoreError(f"{what} must not be empty")
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise StoreError(f"{what} is {len(pattern)} characters, the limit is {MAX_PATTERN_LENGTH}")


def check_room(client_id: int) -> None:
    """Refuses a new filter of a client that has MAX_FILTERS_PER_CLIENT already (ADDFILTER, the admin)."""
    if Filter.objects.filter(client_id=client_id).count() >= MAX_FILTERS_PER_CLIENT:
        raise StoreError(f"the client has {MAX_FILTERS_PER_CLIENT} filters, the limit; remove one first")


def add_filter(
    client_id: int, event_mask: int, schema_name: str, table_name: str, queue_limit: int = 0, discard_policy: int = 0
) -> Filter:
    """Adds a filter; the same (mask, schema, table) again only updates its limit and policy."""
    if not 1 <= event_mask <= 7:
        raise StoreError(f"event mask {event_mask} is not a combination of 1 (insert), 2 (update), 4 (delete)")
    if discard_policy not in DiscardPolicy.values:
        raise StoreError(f"discard policy {discard_policy} is not one of {', '.join(map(str, DiscardPolicy.values))}")
    check_pattern("schema name", schema_name)
    check_pattern("table name", table_name)
    with transaction.atomic():
        spec = Filter.objects.filter(
            client_id=client_id, event_mask=event_mask, schema_name=schema_name, table_name=table_name
        ).first()
        if spec is None:
            check_room(client_id)
            spec = Filter(client_id=client_id, event_mask=event_mask, schema_name=schema_name, table_name=table_name)
        elif (spec.queue_limit, spec.discard_policy) == (queue_limit, discard_policy):
            return spec  # clients re-send their filters on every connect: nothing changed, nothing to reload
        spec.queue_limit, spec.discard_policy = queue_limit, discard_policy
        # Only what changed: the worker adds to discarded and last_discard meanwhile (a whole save writes them back).
        spec.save(update_fields=None if spec.pk is None else ["queue_limit", "discard_policy"])
    return spec


def remove_filter(client_id: int, event_mask: int, schema_name: str, table_name: str) -> bool:
    with transaction.atomic():
        deleted, _ = Filter.objects.filter(
            client_id=client_id, event_mask=event_mask, schema_name=schema_name, table_name=table_name
        ).delete()
    return deleted > 0


def filter_version_sql() -> str:
    """The query of the current filter version (no row: version 0), for a statement that reads more with it."""
    return f"SELECT version FROM {table(FilterVersion)} WHERE id = 1"


def filter_version() -> int:
    """The current filter version: read by the worker inside each batch's transaction."""
    with connection.cursor() as cursor:
        cursor.execute(filter_version_sql())
        row = cursor.fetchone()
    return 0 if row is None else int(row[0])


def bump_filter_version(client_id: int | None = None) -> None:
    """Moves the filter version on, in the caller's transaction, and stamps ``client_id`` with it.

    One upsert, not an UPDATE and a create when it found no row (the row exists from the migration on, but a store
    flushed or edited by hand has none): two filter writes that both found no row would both create it, the second
    would find the first's row and leave it as it was, and the worker, having loaded the first write's filters at
    that version, would never load the second's. A row made again goes on past the newest stamp, so the version never
    moves back behind a stamp the worker compares it with.
    """
    name, stamps = table(FilterVersion), table(FilterStamp)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {name} (id, version) VALUES (1, (SELECT COALESCE(MAX(version), 0) + 1 FROM {stamps}))"
            f" ON CONFLICT (id) DO UPDATE SET version = {name}.version + 1"
        )
        if client_id is not None:
            cursor.execute(
                f"INSERT INTO {stamps} (client_id, version) VALUES (%s, ({filter_version_sql()}))"
                " ON CONFLICT (client_id) DO UPDATE SET version = excluded.version",
                [client_id],
            )


def clients_stamped_after(version: int) -> list[int]:
    """The clients whose filters were written since ``version`` (deleted ones included)."""
    return list(FilterStamp.objects.filter(version__gt=version).values_list("client_id", flat=True))


def _filter_written(sender: Any, instance: Filter, **kwargs: Any) -> None:
    bump_filter_version(instance.client_id)


def _filter_moving(sender: Any, instance: Filter, **kwargs: Any) -> None:
    """A filter given to another client (the admin's change form): the client it leaves is stamped too."""
    if instance.pk is None:
        return
    before = Filter.objects.filter(pk=instance.pk).values_list("client_id", flat=True).first()
    if before is not None and before != instance.client_id:
        bump_filter_version(before)


# Signals rather than calls in each writer: the admin's forms, inlines and bulk deletes and the cascade of a client's
# deletion all save or delete Filter rows through the ORM, and every one of them must move the version.
post_save.connect(_filter_written, sender=Filter, dispatch_uid="relay.store.filters.saved")
post_delete.connect(_filter_written, sender=Filter, dispatch_uid="relay.store.filters.deleted")
pre_save.connect(_filter_moving, sender=Filter, dispatch_uid="relay.store.filters.moving")

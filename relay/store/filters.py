"""A client's filters: what it subscribes to (event mask, schema, table) and its queue's limit and discard policy."""

from __future__ import annotations

from django.db.models import Max

from relay.models import Filter
from relay.store.errors import StoreError


def add_filter(
    client_id: int, event_mask: int, schema_name: str, table_name: str, queue_limit: int = 0, discard_policy: int = 0
) -> Filter:
    """Adds a filter; the same (mask, schema, table) again only updates its limit and policy."""
    if not 1 <= event_mask <= 7:
        raise StoreError(f"event mask {event_mask} is not a combination of 1 (insert), 2 (update), 4 (delete)")
    if discard_policy not in (0, 1, 2):
        raise StoreError(f"discard policy {discard_policy} is not 0, 1 or 2")
    if not schema_name or not table_name:
        raise StoreError("schema and table names must not be empty")
    spec, _ = Filter.objects.update_or_create(
        client_id=client_id,
        event_mask=event_mask,
        schema_name=schema_name,
        table_name=table_name,
        defaults={"queue_limit": queue_limit, "discard_policy": discard_policy},
    )
    return spec


def remove_filter(client_id: int, event_mask: int, schema_name: str, table_name: str) -> bool:
    deleted, _ = Filter.objects.filter(
        client_id=client_id, event_mask=event_mask, schema_name=schema_name, table_name=table_name
    ).delete()
    return deleted > 0


def filters_signature() -> tuple[int, int, int]:
    """Changes whenever a filter is added, removed or updated: the worker reloads its index then."""
    from django.db.models import Count, Sum

    stats = Filter.objects.aggregate(
        count=Count("id"), top=Max("id"), limits=Sum("queue_limit"), policies=Sum("discard_policy")
    )
    return (stats["count"] or 0, stats["top"] or 0, hash((stats["limits"], stats["policies"])))

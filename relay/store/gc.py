"""Garbage collection: consumed queue entries, then the changes no queue points at, in bounded batches."""

from __future__ import annotations

import time

from django.db import transaction
from django.db.models import F, Max

from relay.models import Change, Client, QueueEntry
from relay.store.queues import entry_change_ids


def _queue_heads() -> list[int]:
    """The change each non-empty queue needs first: the oldest change any queue still points at is among these.

    Within a queue, change ids grow with the sequence (both follow binlog order), so a queue's head entry holds its
    smallest change id; one index lookup per client instead of a scan of every entry.
    """
    heads = []
    for client_id, acked in Client.objects.values_list("id", "acked_seq"):
        head = entry_change_ids(client_id, acked, 1)
        if head:
            heads.append(head[0][1])
    return heads


def collect_garbage(batch_size: int = 10_000, max_seconds: float | None = None) -> tuple[int, int]:
    """Deletes consumed queue entries, then the changes no entry points at; each in bounded batches.

    Returns (entries deleted, changes deleted). Safe while the worker appends: a change is deleted only when its id
    is below every remaining entry's change and not above the largest id this statement saw committed.
    ``max_seconds`` stops starting new batches after that long, so that a large backlog is worked off in slices
    that leave the store to the worker in between. A call that starts with time left works one batch of each client's
    entries and one batch of changes at least: where one batch outlasts the slice (a slow store, many clients), every
    call still frees something of each kind, instead of the first clients' entries taking every slice and the changes
    never being reached. A call with no time left (``max_seconds`` <= 0) does nothing.
    """
    if max_seconds is not None and max_seconds <= 0:
        return 0, 0
    deadline = None if max_seconds is None else time.monotonic() + max_seconds

    def out_of_time() -> bool:
        return deadline is not None and time.monotonic() > deadline

    entries_deleted = 0
    for client_id, acked in Client.objects.values_list("id", "acked_seq"):
        first = True
        while first or not out_of_time():
            first = False
            ids = list(
                QueueEntry.objects.filter(client_id=client_id, seq__lte=acked)
                .annotate(end=F("seq") + F("count") - 1)
                .filter(end__lte=acked)
                .values_list("id", flat=True)[:batch_size]
            )
            if not ids:
                break
            entries_deleted += QueueEntry.objects.filter(id__in=ids).delete()[0]
    changes_deleted = 0
    first = True
    while first or not out_of_time():
        first = False
        with transaction.atomic():
            # The newest committed change first: a batch the worker commits after this read has higher ids (it is the
            # one writer of changes, and the ids it takes only go up: relay/worker/bulk.py), so its changes stay
            # whatever the head scan below sees.
            newest = Change.objects.aggregate(top=Max("id"))["top"]
            if newest is None:
                break
            bound = min([newest + 1, *_queue_heads()])
            ids = list(Change.objects.filter(id__lt=bound).order_by("id").values_list("id", flat=True)[:batch_size])
            if not ids:
                break
            changes_deleted += Change.objects.filter(id__in=ids).delete()[0]
    return entries_deleted, changes_deleted

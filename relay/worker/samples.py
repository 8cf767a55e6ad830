"""Once a minute, the worker writes a sample of every client's queue and of its own lag, for the dashboard's history
charts and its "last hour" figures (relay/web/dashboard.py reads them). Samples older than a day are deleted here.

Written in the worker's batch transaction (relay/worker/runner.py ``_report``): a quiet source still sends a
heartbeat every HeartbeatSeconds, so a batch, and a sample, comes at least once a minute while the worker runs.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from relay.models import Client, Filter, LagSample, QueueSample

SAMPLE_SECONDS = 60.0
KEEP = timedelta(hours=25)  # a day of history plus the hour that "last hour" looks back from its start


class Sampler:
    def __init__(self, source: str) -> None:
        self.source = source
        self._next = 0.0  # monotonic time of the next sample

    def due(self) -> bool:
        return time.monotonic() >= self._next

    def write(self, now: datetime, lag: float | None) -> None:
        self._next = time.monotonic() + SAMPLE_SECONDS
        rows = Client.objects.values_list(
            "id", "acked_seq", "served", "queue_state__last_seq", "queue_state__discarded"
        )
        by_filter: dict[int, dict[str, int]] = {}
        for client_id, filter_id, total in Filter.objects.filter(discarded__gt=0).values_list(
            "client_id", "id", "discarded"
        ):
            by_filter.setdefault(client_id, {})[str(filter_id)] = total
        QueueSample.objects.bulk_create(
            [
                QueueSample(
                    client_id=client_id,
                    at=now,
                    queue=max(0, (last_seq or 0) - acked_seq),
                    discarded=discarded or 0,
                    served=served,
                    filter_discards=by_filter.get(client_id, {}),
                )
                for client_id, acked_seq, served, last_seq, discarded in rows
            ]
        )
        if lag is not None:
            LagSample.objects.create(source=self.source, at=now, lag=lag)
        QueueSample.objects.filter(at__lt=now - KEEP).delete()
        LagSample.objects.filter(at__lt=now - KEEP).delete()

"""The relay's one health rule. /healthz, /api/overview, /metrics and the overview's banner all ask :func:`check`,
so they can never disagree.

Red (unhealthy, /healthz answers 503):

- ``store_unreachable``: the store does not answer;
- ``worker_not_reporting``: the active worker has not reported within 3 heartbeat periods plus a margin. A connected
  worker reports on every batch, and a quiet source sends a heartbeat every HeartbeatSeconds, which makes a batch;
- ``worker_not_connected``: no worker, or its state is not "connected" (starting, reconnecting, stopped, failed);
- ``lag_over_threshold``: the lag, computed when read (:func:`lag`), is over the threshold;
- ``no_relay_process``: no ``runrelay`` process reports, so clients cannot connect;
- ``backlog_over_threshold``: only when asked for with ``?max_backlog=N``: more than N entries queued in all.

Amber (degraded, /healthz still answers 200): clients disconnected with a backlog, a queue whose oldest entry is older
than a threshold, and discards in the last hour.

The thresholds come from the environment (:data:`SETTINGS`) and may be overridden per request with query parameters
(``?max_lag=60&max_queue_age=600&max_backlog=100000``), so a load balancer and an alerting probe can ask different
questions of the same rule.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db import DatabaseError, OperationalError, connection, transaction
from django.http import QueryDict
from django.utils import timezone

from relay.config import environment_seconds
from relay.models import WorkerStatus
from relay.templatetags.relay_tags import duration

if TYPE_CHECKING:
    from relay.web import dashboard

RED = "red"
AMBER = "amber"
GREEN = "green"

# Every reason the rule can give, with its level: /metrics exports one gauge per reason, 0 or 1, so that an alert can
# be written on a reason before it ever happened.
REASONS: dict[str, str] = {
    "store_unreachable": RED,
    "worker_not_reporting": RED,
    "worker_not_connected": RED,
    "lag_over_threshold": RED,
    "no_relay_process": RED,
    "backlog_over_threshold": RED,
    "disconnected_with_backlog": AMBER,
    "old_queue_entry": AMBER,
    "recent_discards": AMBER,
}

REPORT_PERIODS = 3  # heartbeat periods a connected worker may miss before it counts as stuck
DEFAULT_HEARTBEAT_SECONDS = 5.0  # the worker's own default ([Server] HeartbeatSeconds) for rows that predate it


@dataclass(frozen=True)
class Thresholds:
    max_lag: float  # seconds
    report_margin: float  # seconds added to 3 heartbeat periods
    max_queue_age: float  # seconds; amber beyond it
    max_backlog: int | None  # entries in all queues; red beyond it, only when asked for


def thresholds(params: QueryDict | None = None) -> Thresholds:
    """The environment's thresholds, with ``?max_lag=``, ``?max_queue_age=`` and ``?max_backlog=`` overriding them.

    Raises ValueError for a parameter that is not a non-negative number."""
    base = Thresholds(
        max_lag=environment_seconds("RELAY_HEALTH_MAX_LAG"),
        report_margin=environment_seconds("RELAY_HEALTH_REPORT_MARGIN"),
        max_queue_age=environment_seconds("RELAY_HEALTH_MAX_QUEUE_AGE"),
        max_backlog=None,
    )
    if params is None:
        return base
    values: dict[str, float | None] = {}
    for key in ("max_lag", "max_queue_age", "max_backlog"):
        text = params.get(key)
        if text is None or text == "":
            continue
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"{key} must be a number of {'entries' if key == 'max_backlog' else 'seconds'}") from None
        if not number >= 0 or number == float("inf"):
            raise ValueError(f"{key} must be zero or more")
        values[key] = number
    return Thresholds(
        max_lag=values.get("max_lag", base.max_lag) or 0.0,
        report_margin=base.report_margin,
        max_queue_age=values.get("max_queue_age", base.max_queue_age) or 0.0,
        max_backlog=int(values["max_backlog"] or 0) if "max_backlog" in values else None,
    )


def lag(worker: WorkerStatus, now: datetime) -> float | None:
    """Seconds the relay is behind its source, computed now: now minus the newer of the source time of the newest
    event applied and the time the worker last applied a source heartbeat (a heartbeat means the source had nothing
    newer). So it grows while the worker is stuck or the source silent, and on a quiet source it stays below one
    heartbeat period. None when the worker has applied nothing yet."""
    marks = [mark for mark in (source_time_here(worker, worker.source_timestamp), worker.caught_up) if mark is not None]
    if not marks:
        return None
    return max(0.0, (now - max(marks)).total_seconds())


def source_time_here(worker: WorkerStatus | None, moment: datetime | None) -> datetime | None:
    """A moment of the source's clock (a binlog timestamp) on this host's, by the skew the worker measured."""
    if moment is None or worker is None or not worker.clock_offset_seconds:
        return moment
    return moment - timedelta(seconds=worker.clock_offset_seconds)


def last_report(worker: WorkerStatus) -> datetime | None:
    marks = [mark for mark in (worker.heartbeat, worker.started) if mark is not None]
    return max(marks) if marks else None


def report_limit(worker: WorkerStatus, limits: Thresholds) -> float:
    """Seconds without a report after which a connected worker counts as stuck."""
    period = worker.heartbeat_seconds or DEFAULT_HEARTBEAT_SECONDS
    return REPORT_PERIODS * period + limits.report_margin


@dataclass(frozen=True)
class Reason:
    code: str  # one of REASONS
    message: str
    link: str = ""  # a dashboard path that shows the detail (a client's page), or ""

    @property
    def level(self) -> str:
        return REASONS[self.code]


@dataclass
class Health:
    checked: datetime
    reasons: list[Reason] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not any(reason.level == RED for reason in self.reasons)

    @property
    def level(self) -> str:
        if not self.healthy:
            return RED
        return AMBER if self.reasons else GREEN

    @property
    def red(self) -> list[Reason]:
        return [reason for reason in self.reasons if reason.level == RED]

    @property
    def amber(self) -> list[Reason]:
        return [reason for reason in self.reasons if reason.level == AMBER]

    def failing(self, code: str) -> bool:
        return any(reason.code == code for reason in self.reasons)

    def as_json(self) -> dict[str, object]:
        return {
            "status": {GREEN: "ok", AMBER: "degraded", RED: "unhealthy"}[self.level],
            "healthy": self.healthy,
            "level": self.level,
            "checked": self.checked.isoformat(),
            "reasons": [{"code": r.code, "level": r.level, "message": r.message} for r in self.reasons],
        }


def store_reachable() -> str:
    """The empty string when the store answers a query, else the error."""
    try:
        connection.ensure_connection()  # a new connection waits at most the store URL's connect_timeout
        with store_deadline(), connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return ""
    except Exception as exc:  # noqa: BLE001 - any store failure means unhealthy, whatever the driver raises
        return str(exc) or type(exc).__name__


@contextlib.contextmanager
def store_deadline() -> Iterator[None]:
    """Past ``store_read_seconds`` and a second, the connection's socket is shut down: the read waiting on it fails
    at once. PostgreSQL's statement_timeout is the server's own: a frozen server (SIGSTOP, a paused VM, a host
    swapping) never sends the cancel, and its kernel still acknowledges, so the read would wait for ever. The
    connection is then dropped (Django closes one whose rollback failed)."""
    if connection.vendor != "postgresql" or connection.connection is None:
        yield
        return
    descriptor = connection.connection.fileno()
    guard = threading.Lock()
    over = False

    def expire() -> None:
        with guard:
            if over:
                return
            with contextlib.suppress(OSError), socket.socket(fileno=os.dup(descriptor)) as duplicate:
                duplicate.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(store_read_seconds() + 1, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with guard:  # the socket is never shut once the reads are over (the connection may serve the next request)
            over = True
        timer.cancel()


def store_read_seconds() -> float:
    """How long the health check's and /metrics' reads may take in all (``RELAY_HEALTH_STORE_TIMEOUT``)."""
    return environment_seconds("RELAY_HEALTH_STORE_TIMEOUT")


@contextlib.contextmanager
def bounded_reads() -> Iterator[None]:
    """The reads inside, in one transaction that PostgreSQL cancels past ``store_read_seconds``: a table locked by
    a VACUUM FULL or an ALTER would otherwise hang the health check, and a probe's timeout says nothing about why.

    On SQLite they run outside a transaction: the store's transactions begin IMMEDIATE (they take the write lock
    first), so one here would wait up to 30 s behind the worker's batch, where a plain read never waits for a writer
    (WAL). A worker frozen inside a large transaction is then named for what it is, not as an unreachable store."""
    if connection.vendor != "postgresql":
        yield
        return
    connection.ensure_connection()
    with store_deadline(), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('statement_timeout', %s, true)", [f"{store_read_seconds() * 1000:.0f}"])
        yield


def store_too_slow(exc: DatabaseError) -> Reason:
    return Reason(
        "store_unreachable",
        f"the store did not answer within {store_read_seconds():g} s (a table locked, or the store overloaded): "
        f"{str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}",
    )


def evaluate(
    now: datetime,
    sources: list[dashboard.SourceOverview],
    processes: list[dashboard.RelayProcessRow],
    backlog: dashboard.Backlog,
    limits: Thresholds,
) -> Health:
    """The rule itself, on data already read (the overview page has read it anyway)."""
    health = Health(now)
    reasons = health.reasons
    workers = [source for source in sources if source.worker is not None]
    if not workers:
        reasons.append(Reason("worker_not_connected", "no binlog worker has reported: start manage.py runbinlog"))
    for source in workers:
        worker = source.worker
        assert worker is not None
        name = source.source
        if worker.state != WorkerStatus.State.CONNECTED:
            detail = f": {worker.last_error.splitlines()[0][:200]}" if worker.last_error else ""
            reasons.append(
                Reason("worker_not_connected", f"worker for {name} is {worker.state}, not connected{detail}")
            )
        elif source.report_age is None or source.report_age > report_limit(worker, limits):
            age = "never" if source.report_age is None else f"{duration(source.report_age)} ago"
            reasons.append(
                Reason(
                    "worker_not_reporting",
                    f"worker for {name} last reported {age} (limit {duration(report_limit(worker, limits))}: "
                    f"{REPORT_PERIODS} heartbeat periods plus {limits.report_margin:g} s)",
                )
            )
        if source.lag is not None and source.lag > limits.max_lag:
            reasons.append(
                Reason(
                    "lag_over_threshold",
                    f"{name} is {duration(source.lag)} behind the source (threshold {duration(limits.max_lag)})",
                )
            )
    if not any(row.alive for row in processes):
        reasons.append(Reason("no_relay_process", "no relay process (manage.py runrelay) is reporting"))
    if limits.max_backlog is not None and backlog.total > limits.max_backlog:
        reasons.append(
            Reason(
                "backlog_over_threshold",
                f"{backlog.total:,} entries queued in all (threshold {limits.max_backlog:,})",
            )
        )
    for row in backlog.disconnected:
        reasons.append(
            Reason(
                "disconnected_with_backlog",
                f"client {row.name} is disconnected with {row.queue:,} queued",
                f"/clients/{row.id}/",
            )
        )
    if backlog.disconnected_total > len(backlog.disconnected):
        more = backlog.disconnected_total - len(backlog.disconnected)
        reasons.append(
            Reason("disconnected_with_backlog", f"and {more:,} more clients disconnected with a backlog", "/clients/")
        )
    for row in backlog.by_age:
        if row.oldest_age is not None and row.oldest_age > limits.max_queue_age:
            reasons.append(
                Reason(
                    "old_queue_entry",
                    f"client {row.name}'s oldest queued entry is {duration(row.oldest_age)} old "
                    f"(threshold {duration(limits.max_queue_age)})",
                    f"/clients/{row.id}/",
                )
            )
    for row in backlog.discarding:
        reasons.append(
            Reason(
                "recent_discards",
                f"client {row.name} discarded {row.discards_last_hour:,} in the last hour",
                f"/clients/{row.id}/",
            )
        )
    if backlog.discarding_total > len(backlog.discarding):
        more = backlog.discarding_total - len(backlog.discarding)
        reasons.append(Reason("recent_discards", f"and {more:,} more clients discarded in the last hour", "/clients/"))
    return health


def of_overview(data: dashboard.Overview, limits: Thresholds | None = None) -> Health:
    """The rule on what the overview read (the page and /api/overview show the same verdict as /healthz)."""
    assert data.backlog is not None
    return evaluate(data.now, data.sources, data.relay_processes, data.backlog, limits or thresholds())


def check(params: QueryDict | None = None, limits: Thresholds | None = None) -> Health:
    """The rule, reading what it needs; a store that does not answer is the one reason then."""
    from relay.web import dashboard  # the read-side queries import this module for lag()

    now = timezone.now()
    limits = limits or thresholds(params)
    error = store_reachable()
    if error:
        return Health(now, [Reason("store_unreachable", f"the store does not answer: {error[:300]}")])
    try:
        with bounded_reads():
            rows = dashboard.client_rows(now, with_history=False)
            sources, processes = dashboard.source_overviews(now), dashboard.relay_process_rows(now)
            backlog = dashboard.backlog(rows)
    except OperationalError as exc:
        return Health(now, [store_too_slow(exc)])
    return evaluate(now, sources, processes, backlog, limits)

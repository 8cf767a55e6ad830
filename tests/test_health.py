"""The one health rule (relay/web/health.py): unit checks of the rule, then real processes frozen with SIGSTOP while
the source writes, seen through /healthz, the overview's banner and /metrics."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.http import QueryDict
from django.test import Client as HttpClient
from django.utils import timezone

from devtools.sandbox import MariaDB
from devtools.wait import wait_for
from relay.models import LagSample, QueueSample, WorkerStatus
from relay.web import dashboard, health
from tests.helpers.dashboard_data import UNICODE
from tests.helpers.processes import RelayProcess, relay_env, start_relay
from tests.helpers.scratch import scratch_dir

HEARTBEAT = 1.0  # the tests' [Server] HeartbeatSeconds (tests/helpers/processes.py)
MARGIN = 2.0
LIMIT = health.REPORT_PERIODS * HEARTBEAT + MARGIN  # seconds without a report before /healthz says 503
SLACK = 3.0  # polling, a batch in flight, a slow shared machine


def reason_codes(body: dict) -> set[str]:
    return {reason["code"] for reason in body["reasons"]}


# -- the rule on stored data ------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_thresholds_from_the_query_string(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAY_HEALTH_MAX_LAG", "30")
    assert health.thresholds().max_lag == 30 and health.thresholds().max_backlog is None
    limits = health.thresholds(QueryDict("max_lag=5&max_backlog=100&max_queue_age=7"))
    assert (limits.max_lag, limits.max_backlog, limits.max_queue_age) == (5, 100, 7)
    for bad in ("max_lag=abc", "max_backlog=-1", "max_queue_age=inf"):
        with pytest.raises(ValueError):
            health.thresholds(QueryDict(bad))


@pytest.mark.django_db
def test_bad_threshold_is_a_400(client: HttpClient) -> None:
    response = client.get("/healthz?max_lag=soon")
    assert response.status_code == 400 and "max_lag" in response.json()["error"]


@pytest.mark.django_db
def test_lag_is_computed_when_read() -> None:
    now = timezone.now()
    worker = WorkerStatus(source="s", lag_seconds=0.3)
    assert health.lag(worker, now) is None  # nothing applied yet
    worker.source_timestamp = now - timedelta(seconds=50)
    assert health.lag(worker, now) == pytest.approx(50)  # the stored 0.3 says nothing about now
    worker.caught_up = now - timedelta(seconds=2)  # a heartbeat applied later: the source had nothing newer
    assert health.lag(worker, now) == pytest.approx(2)
    assert health.lag(worker, now + timedelta(seconds=60)) == pytest.approx(62)  # and it grows while stuck


@pytest.mark.django_db
def test_lag_and_queue_age_take_the_source_clocks_skew_off(viewer: HttpClient, filled) -> None:
    """Binlog timestamps are the source's time. A source clock 60 s behind made every event look a minute late (red
    while the relay kept up); one 900 s ahead hid a stuck worker's lag and a queue's age for 15 minutes."""
    now = timezone.now()
    worker = WorkerStatus(source="s", source_timestamp=now - timedelta(seconds=62), clock_offset_seconds=-60.0)
    assert health.lag(worker, now) == pytest.approx(2)
    worker = WorkerStatus(source="s", source_timestamp=now + timedelta(seconds=900 - 20), clock_offset_seconds=900.0)
    assert health.lag(worker, now) == pytest.approx(20)
    rows = dashboard.client_rows(now, with_history=False)
    ages = {row.id: row.oldest_age for row in rows if row.oldest_age is not None}
    assert ages
    WorkerStatus.objects.update(clock_offset_seconds=-100.0)  # the source 100 s behind: its entries are younger
    corrected = {row.id: row.oldest_age for row in dashboard.client_rows(now, with_history=False) if row.id in ages}
    assert all(corrected[cid] == pytest.approx(max(0.0, ages[cid] - 100)) for cid in ages), (ages, corrected)
    page = viewer.get("/").content.decode()
    assert "-100.0 s from the worker host" in page and "synchronise the clocks" in page


@pytest.mark.django_db
def test_healthy_filled_store_then_each_red_reason(client: HttpClient, filled) -> None:
    WorkerStatus.objects.update(heartbeat=timezone.now(), caught_up=timezone.now(), heartbeat_seconds=HEARTBEAT)
    response = client.get("/healthz")
    assert response.status_code == 200, response.json()
    assert response.json()["healthy"] is True
    # Amber is listed but keeps 200: the fixture's queues hold entries up to a day old.
    body = response.json()
    assert body["level"] == "amber" and "old_queue_entry" in reason_codes(body)
    rows = dashboard.client_rows(with_history=False)
    stranded = any(row.status == "DISCONNECTED" and row.queue > 0 for row in rows)
    assert ("disconnected_with_backlog" in reason_codes(body)) == stranded
    assert client.get("/healthz?max_queue_age=1000000").json()["reasons"] == [] or stranded

    response = client.get("/healthz?max_backlog=10")
    assert response.status_code == 503 and "backlog_over_threshold" in reason_codes(response.json())

    WorkerStatus.objects.update(heartbeat=timezone.now() - timedelta(seconds=60), started=None)
    body = client.get("/healthz").json()
    assert reason_codes(body) >= {"worker_not_reporting"} and body["status"] == "unhealthy"

    WorkerStatus.objects.update(heartbeat=timezone.now(), state=WorkerStatus.State.RECONNECTING, last_error="gone")
    body = client.get("/healthz").json()
    assert "worker_not_connected" in reason_codes(body)
    assert any("reconnecting" in reason["message"] and "gone" in reason["message"] for reason in body["reasons"])

    WorkerStatus.objects.update(state=WorkerStatus.State.CONNECTED, caught_up=timezone.now() - timedelta(hours=1))
    response = client.get("/healthz")
    assert response.status_code == 503 and reason_codes(response.json()) & {"lag_over_threshold"}
    assert client.get("/healthz?max_lag=7200").status_code == 200


@pytest.mark.django_db
def test_store_unreachable(client: HttpClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health, "store_reachable", lambda: "could not connect to server")
    response = client.get("/healthz")
    assert response.status_code == 503
    assert reason_codes(response.json()) == {"store_unreachable"}


@pytest.mark.django_db(transaction=True)
def test_a_locked_store_gives_a_red_verdict_in_bounded_time(
    viewer: HttpClient, filled, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table locked for good (VACUUM FULL, an ALTER, a stuck session) must not hang /healthz and /metrics: they
    answer within RELAY_HEALTH_STORE_TIMEOUT, red, saying so."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("needs the PostgreSQL test store (SQLite's readers never wait for a writer)")
    import psycopg2

    monkeypatch.setenv("RELAY_HEALTH_STORE_TIMEOUT", "1")
    settings = connection.settings_dict
    locker = psycopg2.connect(
        dbname=settings["NAME"], user=settings["USER"], host=settings["HOST"], port=settings["PORT"] or 5432
    )
    try:
        with locker.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("LOCK TABLE relay_queuestate IN ACCESS EXCLUSIVE MODE")
        for url, check in (
            ("/healthz", lambda r: r.status_code == 503 and reason_codes(r.json()) == {"store_unreachable"}),
            (
                "/metrics",
                lambda r: (
                    b"relay_healthy 0" in r.content
                    and b'relay_health_reason{reason="store_unreachable",level="red"} 1' in r.content
                ),
            ),
        ):
            started = time.monotonic()
            response = viewer.get(url)
            assert time.monotonic() - started < 5
            assert check(response), response.content[:2000]
        assert "did not answer within 1 s" in viewer.get("/healthz").json()["reasons"][0]["message"]
    finally:
        locker.rollback()
        locker.close()
    assert "store_unreachable" not in reason_codes(viewer.get("/healthz").json())


@pytest.mark.django_db(transaction=True)
def test_a_writer_holding_the_sqlite_store_delays_no_health_read(viewer: HttpClient, filled) -> None:
    """The worker holds SQLite's write lock for the whole of a large transaction (or frozen inside one): /healthz and
    /metrics read past it at once (they began IMMEDIATE transactions and waited 30 s, then blamed the store)."""
    import sqlite3

    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip(
            "the SQLite store's write lock (PostgreSQL: test_a_locked_store_gives_a_red_verdict_in_bounded_time)"
        )
    writer = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("UPDATE relay_queuestate SET max_queue = max_queue")
        for url in ("/healthz", "/metrics"):
            started = time.monotonic()
            response = viewer.get(url)
            assert time.monotonic() - started < 3, url
            assert b"store_unreachable" not in response.content or b'reason="store_unreachable",level="red"} 0' in (
                response.content
            ), response.content[:2000]
    finally:
        writer.rollback()
        writer.close()


@pytest.mark.django_db
def test_backlog_summary_orders_and_links(filled) -> None:
    rows = dashboard.client_rows(with_history=False)
    summary = dashboard.backlog(rows)
    assert summary.total == sum(row.queue for row in rows) > 0
    assert [row.queue for row in summary.by_size] == sorted((row.queue for row in summary.by_size), reverse=True)
    unicode_row = next(row for row in rows if row.name == UNICODE)
    assert unicode_row.oldest_age is not None and unicode_row.oldest_timestamp is not None
    assert all(row.oldest_age is not None for row in summary.by_age)
    assert all(row.status == "DISCONNECTED" and row.queue > 0 for row in summary.disconnected)


# -- real processes -------------------------------------------------------------------------------------------------


@pytest.fixture
def source() -> Iterator[MariaDB]:
    """A MariaDB of this test alone: it is frozen with SIGSTOP."""
    server = MariaDB(scratch_dir("relay-health-"), row_metadata_full=True).start()
    yield server
    if server.process is not None and server.process.poll() is None:
        server.process.send_signal(signal.SIGCONT)
    server.destroy()


class Writer(threading.Thread):
    """Inserts a row every 0.1 s while the test runs, like a live application; pauses while the source is frozen."""

    def __init__(self, server: MariaDB) -> None:
        super().__init__(name="source-writer", daemon=True)
        self.server = server
        self.stop_event = threading.Event()
        self.paused = threading.Event()
        self.written = 0

    def run(self) -> None:
        conn = self.server.connect("app")
        try:
            while not self.stop_event.wait(0.1):
                if self.paused.is_set():
                    continue
                with conn.cursor() as cursor:
                    cursor.execute("INSERT INTO app.events (v) VALUES (%s)", [self.written])
                self.written += 1
        finally:
            conn.close()


def healthz(client: HttpClient) -> tuple[int, dict]:
    response = client.get("/healthz")
    return response.status_code, response.json()


def metric(client: HttpClient, name: str) -> float:
    text = b"".join([client.get("/metrics").content]).decode()
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    assert match, text
    return float(match.group(1))


@pytest.mark.django_db
def test_metrics_say_whether_the_compiled_paths_run(viewer: HttpClient) -> None:
    """The suite runs with them on one store and off on the other (scripts/test): the gauge follows RELAY_NATIVE."""
    expected = 0 if os.environ.get("RELAY_NATIVE", "1") == "0" else 1
    text = viewer.get("/metrics").content.decode()
    for path in ("row_decoder", "event_reader", "record_encoder", "copy_text"):
        assert f'relay_compiled_path{{path="{path}"}} {expected}' in text


def banner(viewer: HttpClient) -> str:
    html = viewer.get("/").content.decode()
    start = html.index('<section id="health"')
    return html[start : html.index("</section>", start)]


def wait_until_green(viewer: HttpClient, timeout: float = 90) -> None:
    wait_for(lambda: healthz(viewer)[0] == 200, timeout=timeout, interval=0.3, message="/healthz 200")
    assert "banner-green" in banner(viewer) or "banner-amber" in banner(viewer)
    assert metric(viewer, "relay_healthy") == 1


def wait_until_red(viewer: HttpClient, since: float, reasons: set[str]) -> dict:
    """Waits for 503, then checks it came within the limit and that the banner and /metrics agree."""

    def unhealthy() -> dict | None:
        status, body = healthz(viewer)
        return body if status == 503 else None

    body = wait_for(unhealthy, timeout=LIMIT + 30, interval=0.25, message="/healthz 503")
    elapsed = time.monotonic() - since
    print(f"503 after {elapsed:.1f}s: {sorted(reason_codes(body))}")
    assert elapsed <= LIMIT + SLACK, f"503 only after {elapsed:.1f}s: {body}"
    assert reason_codes(body) & reasons, body
    shown = banner(viewer)
    assert "banner-red" in shown and "Unhealthy" in shown
    assert any(f'data-reason="{code}"' in shown for code in reasons), shown
    assert metric(viewer, "relay_healthy") == 0
    return body


@pytest.mark.django_db(transaction=True)
def test_frozen_worker_and_frozen_source_turn_red_then_green(
    source: MariaDB, viewer: HttpClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELAY_HEALTH_REPORT_MARGIN", str(MARGIN))
    source.execute("CREATE DATABASE app", "CREATE TABLE app.events (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
    relay, _ = start_relay(source)
    worker = RelayProcess(relay_env(source), "runbinlog", "--batch-ms", "50").start()
    writer = Writer(source)
    writer.start()
    try:
        wait_until_green(viewer)
        status = WorkerStatus.objects.get()
        assert status.heartbeat_seconds == HEARTBEAT
        # What the lag is computed from while the source writes: the source time of the newest event applied.
        wait_for(lambda: WorkerStatus.objects.get().source_timestamp is not None, timeout=30, message="an event")
        assert LagSample.objects.exists() and QueueSample.objects.exists()  # the first sample comes at once

        # The worker frozen while the source keeps writing: its stored state still says "connected".
        worker.signal(signal.SIGSTOP)
        frozen = time.monotonic()
        body = wait_until_red(viewer, frozen, {"worker_not_reporting"})
        assert WorkerStatus.objects.get().state == WorkerStatus.State.CONNECTED
        time.sleep(2)
        lag = dashboard.source_overviews()[0].lag
        assert lag is not None and lag >= 2, f"lag {lag} does not grow while the worker is frozen: {body}"
        worker.signal(signal.SIGCONT)
        wait_until_green(viewer)

        # The source frozen: no events, no heartbeats; the worker has nothing to apply and stops reporting.
        writer.paused.set()
        assert source.process is not None
        source.process.send_signal(signal.SIGSTOP)
        frozen = time.monotonic()
        wait_until_red(viewer, frozen, {"worker_not_reporting", "worker_not_connected"})
        source.process.send_signal(signal.SIGCONT)
        writer.paused.clear()
        wait_until_green(viewer, timeout=120)
        assert worker.alive() and relay.alive(), worker.output[-3000:]

        # A quiet source sends heartbeats: the worker records that it had everything, and the lag stays small.
        writer.paused.set()
        wait_for(lambda: WorkerStatus.objects.get().caught_up is not None, timeout=30, message="a heartbeat applied")
        time.sleep(3 * HEARTBEAT)
        lag = dashboard.source_overviews()[0].lag
        assert lag is not None and lag <= 2 * HEARTBEAT + 1, lag
    finally:
        writer.stop_event.set()
        writer.join(timeout=10)


@pytest.mark.django_db(transaction=True)
def test_ping_counts_as_activity(viewer: HttpClient) -> None:
    from clientproto import RelayClient
    from relay.models import Client
    from tests.helpers.processes import TEST_SECRET

    _, port = start_relay()
    with RelayClient("127.0.0.1", port, TEST_SECRET, "pinger", reconnect=False) as relay_client:
        long_ago = timezone.now() - timedelta(minutes=10)
        Client.objects.filter(name="pinger").update(last_seen=long_ago)
        relay_client.ping()  # answered at once; its activity is written behind the answer

        def seen() -> bool:
            last_seen = Client.objects.get(name="pinger").last_seen
            return last_seen is not None and last_seen > long_ago + timedelta(minutes=9)

        wait_for(seen, timeout=10, message="the PING written as the client's last activity")
        client = Client.objects.get(name="pinger")
        html = viewer.get(f"/clients/{client.id}/").content.decode()
        assert "Last activity" in html and "127.0.0.1" in html


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(os.environ.get("RELAY_TEST_STORE", "postgres") != "postgres", reason="a PostgreSQL store")
def test_a_frozen_store_is_named_within_the_timeout_on_a_kept_connection_and_on_a_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store that stops answering without closing (SIGSTOP, a paused VM): its statement_timeout never fires, and
    the kernel still acknowledges. The check answers store_unreachable within its timeout on a connection it kept,
    and within the connect timeout on a new one, and is green again once the store answers."""
    from django.db import connection

    from tests.helpers.proxy import Proxy

    monkeypatch.setenv("RELAY_HEALTH_STORE_TIMEOUT", "1")
    settings = connection.settings_dict
    saved = settings["HOST"], settings["PORT"]
    proxy = Proxy(int(settings["PORT"] or 5432))
    verdicts: list[tuple[set[str], float]] = []

    def checks() -> None:
        from django.db import connection as own  # this thread's connection, through the proxy

        try:
            for step in ("kept", "frozen", "new", "thawed"):
                if step == "frozen":
                    proxy.frozen = True
                elif step == "new":
                    own.close()
                elif step == "thawed":
                    proxy.frozen = False
                    proxy.cut()  # the connection the frozen read left behind
                started = time.monotonic()
                verdict = health.check()
                verdicts.append(({reason.code for reason in verdict.reasons}, time.monotonic() - started))
        finally:
            own.close()

    settings["HOST"], settings["PORT"] = "127.0.0.1", str(proxy.port)
    try:
        thread = threading.Thread(target=checks, daemon=True)
        thread.start()
        thread.join(60)
        assert not thread.is_alive(), verdicts
    finally:
        settings["HOST"], settings["PORT"] = saved
        proxy.close()
    (kept, _), (frozen, frozen_seconds), (new, new_seconds), (thawed, _) = verdicts
    assert "store_unreachable" not in kept and "store_unreachable" not in thawed
    assert frozen == {"store_unreachable"} and frozen_seconds < 1 + 1 + 2
    assert new == {"store_unreachable"} and new_seconds < 5 + 2  # the store URL's default connect_timeout


def _disconnected_with_backlogs(count: int) -> None:
    """``count`` clients, each disconnected with one entry queued, the i-th an hour and i seconds old."""
    from relay.models import Change, Client, QueueEntry, QueueState

    now = int(time.time())
    changes = Change.objects.bulk_create(
        Change(
            schema_name="s", table_name="t", kind=1, binlog_file="b.000001", binlog_pos=4 + n, row_index=0,
            timestamp=now - 3600 - n, data="",
        )
        for n in range(count)
    )  # fmt: skip
    clients = Client.objects.bulk_create(Client(name=f"c{n}", connected=False) for n in range(count))
    QueueState.objects.bulk_create(QueueState(client_id=client.id, last_seq=1) for client in clients)
    QueueEntry.objects.bulk_create(
        QueueEntry(client_id=client.id, seq=1, count=1, change_id=change.id)
        for client, change in zip(clients, changes, strict=True)
    )


@pytest.mark.django_db
@pytest.mark.parametrize("clients", [10, 300])
def test_the_checks_reads_and_reasons_do_not_grow_with_the_clients(
    clients: int, django_assert_max_num_queries: Any
) -> None:
    """With thousands of clients holding a backlog, a query per client made /healthz and /metrics take tens of
    seconds, and a reason per disconnected client made the verdict megabytes long: the worst few are named, the rest
    counted, and each queue's oldest entry is found in one statement for all."""
    _disconnected_with_backlogs(clients)
    with django_assert_max_num_queries(20):
        verdict = health.check()
    disconnected = [r.message for r in verdict.reasons if r.code == "disconnected_with_backlog"]
    oldest = dashboard.backlog(dashboard.client_rows(with_history=False)).by_age
    assert [row.name for row in oldest] == [f"c{clients - 1 - n}" for n in range(dashboard.BACKLOG_WORST)]
    assert oldest[0].oldest_age is not None and 3600 + clients - 2 < oldest[0].oldest_age < 3600 + clients + 60
    if clients > dashboard.BACKLOG_WORST:
        assert len(disconnected) == dashboard.BACKLOG_WORST + 1
        assert disconnected[-1] == f"and {clients - dashboard.BACKLOG_WORST:,} more clients disconnected with a backlog"

"""The dashboard's pages: login, content, escaping of hostile names and values, and bad parameters."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from django.db.models import F
from django.test import Client as HttpClient
from django.utils import timezone

from relay import store
from relay.models import Client, ServedEvent, TableUsage, UsageMinute, WorkerStatus
from relay.web import charts, dashboard, tableusage
from tests.helpers.dashboard_data import HOSTILE, HOSTILE_ESCAPED, PASSWORD, QUOTED, UNICODE
from tests.helpers.snapshot_data import add_snapshots

pytestmark = pytest.mark.django_db

PAGES = ["/", "/clients/", "/usage/", "/schema/"]


def page(client: HttpClient, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, response.content[:2000]
    assert response["Content-Type"].startswith("text/html")
    return response.content.decode()


def assert_escaped(html: str) -> None:
    """No hostile name reaches the page as markup; it is there, escaped."""
    assert HOSTILE not in html
    assert "<script>alert" not in html
    assert HOSTILE_ESCAPED in html


@pytest.mark.parametrize("url", [*PAGES, "/clients/1/"])
def test_anonymous_users_are_sent_to_login(client: HttpClient, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


def test_login_page_and_login(client: HttpClient, filled) -> None:
    html = page(client, "/accounts/login/?next=/usage/")
    assert 'name="username"' in html and 'name="next" value="/usage/"' in html
    response = client.post("/accounts/login/", {"username": "viewer", "password": PASSWORD, "next": "/usage/"})
    assert response.status_code == 302 and response["Location"] == "/usage/"
    bad = client.post("/accounts/login/", {"username": "viewer", "password": "wrong"})
    assert bad.status_code == 200 and "did not match" in bad.content.decode()


def test_logout_is_a_post(viewer: HttpClient, filled) -> None:
    html = page(viewer, "/")
    assert 'action="/accounts/logout/"' in html and 'method="post"' in html
    assert viewer.post("/accounts/logout/").status_code in (200, 302)
    assert viewer.get("/").status_code == 302


def test_healthz_is_open_and_gives_its_reasons(client: HttpClient) -> None:
    response = client.get("/healthz")  # no login; an empty store has neither a worker nor a relay process
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unhealthy" and body["healthy"] is False
    assert {reason["code"] for reason in body["reasons"]} == {"worker_not_connected", "no_relay_process"}


def test_unhealthy_probes_are_not_logged_as_errors(client: HttpClient, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from relay.web.logfilters import HealthProbeFilter

    with caplog.at_level(logging.WARNING, logger="django.request"):
        assert client.get("/healthz").status_code == 503
        assert client.get("/no-such-page").status_code in (302, 404)
    probe = next(record for record in caplog.records if getattr(record, "status_code", None) == 503)
    assert not HealthProbeFilter().filter(probe)
    assert all(HealthProbeFilter().filter(r) for r in caplog.records if r is not probe)
    # The console handler of the settings' LOGGING carries the filter.
    consoles = [h for h in logging.getLogger().handlers if any(isinstance(f, HealthProbeFilter) for f in h.filters)]
    assert consoles


def test_static_files_are_served(client: HttpClient) -> None:
    css = client.get("/static/relay/relay.css")
    assert css.status_code == 200
    assert b"svg.chart" in b"".join(css.streaming_content)
    assert client.get("/static/relay/relay.js").status_code == 200


def test_overview(viewer: HttpClient, filled) -> None:
    WorkerStatus.objects.update(caught_up=timezone.now() - timedelta(seconds=90))
    html = page(viewer, "/")
    assert "00010020" in html  # the protocol version, as the original showed it
    for name in ("QUERY_EVENT", "ROTATE_EVENT", "FORMAT_DESCRIPTION_EVENT", "XID_EVENT", "TABLE_MAP_EVENT"):
        assert name in html
    for name in ("WRITE_ROW_EVENT_V1", "UPDATE_ROW_EVENT_V1", "DELETE_ROW_EVENT_V1"):
        assert name in html  # always listed, even at zero
    assert "WRITE_ROWS_EVENT_V2" in html and "GTID_EVENT" in html and "ANNOTATE_ROWS_EVENT" in html
    assert "binlog.000042" in html and "0-1-120" in html  # checkpoint file and GTID
    assert "CONNECTED" in html and "1 min 3" in html and "relay-1" in html  # the lag, computed when read
    assert html.count('class="chart line-chart"') == 4  # rows per minute and the lag, each over 1 h and 24 h
    assert "lost connection: " + HOSTILE_ESCAPED in html  # the last error, escaped
    assert_escaped(html)


def test_overview_lists_the_relay_processes(viewer: HttpClient, filled) -> None:
    html = page(viewer, "/")
    table = html[html.index('id="relay-processes"') :]
    table = table[: table.index("</table>")]
    assert table.count("RUNNING") == 1 and table.count("NOT REPORTING") == 1
    assert "pid 4343 on relay-" + HOSTILE_ESCAPED in table and "pid 4444 on relay-gone" in table
    assert "1 min ago" in table  # the last report of the process that stopped
    assert_escaped(html)


def test_overview_without_a_worker(viewer: HttpClient) -> None:
    html = page(viewer, "/")
    assert "No worker has reported yet" in html
    assert "No relay process is running" in html
    assert html.count('class="chart line-chart"') == 2  # empty charts are still drawn


def test_overview_failed_worker(viewer: HttpClient, filled) -> None:
    WorkerStatus.objects.update(state=WorkerStatus.State.FAILED)
    html = page(viewer, "/")
    assert "state-failed" in html and "FAILED" in html


def test_overview_shows_the_standby_worker(viewer: HttpClient, filled) -> None:
    assert ">none<" in page(viewer, "/")
    WorkerStatus.objects.update(standby_pid=4321, standby_hostname="relay-2", standby_heartbeat=timezone.now())
    html = page(viewer, "/")
    assert "STANDBY" in html and "pid 4321 on relay-2" in html


def test_clients_page_has_the_original_columns(viewer: HttpClient, filled) -> None:
    html = page(viewer, "/clients/")
    for column in ("ID", "Name", "Status", "Started", "Last seen", "Inactive", "Filters", "Queue", "Max queue"):
        assert f">{column}" in html
    for column in ("Served", "Discarded", "Pending acks", "Remote address", "History"):
        assert f">{column}<" in html
    assert "CONNECTED" in html and "DISCONNECTED" in html
    assert "Served -1 : shop.orders" in html  # the history, in the original's layout
    assert re.search(r"Served -10 : .*? : - \d+ ms", html)
    assert "unlimited, no discard" in html and "50, unqueue oldest" in html and "10, ignore newest" in html
    assert "10.0.0.1:50000" in html and "[::1]:6002" in html
    assert_escaped(html)
    assert "O&#x27;Brien &quot;quoted&quot; &amp; co" in html
    assert UNICODE in html


def test_clients_page_when_there_are_none(viewer: HttpClient) -> None:
    assert "No client has connected yet" in page(viewer, "/clients/")


def test_client_detail_decodes_the_queue_head(viewer: HttpClient, filled) -> None:
    client_id = filled.client_ids[UNICODE]
    html = page(viewer, f"/clients/{client_id}/?head=30")
    assert "Head of the queue: the first 30 of 150 entries" in html
    assert "delivered, waiting for an ACK" in html  # the manual-ack fetch of 5
    assert 'class="chart line-chart"' in html
    assert "0x00ff62696e" in html  # a BLOB column, as hex
    assert 'class="value-null">NULL<' in html
    assert_escaped(html)
    assert UNICODE in html
    # Insert rows show no "before" column, deletes no "after".
    assert html.count("<th>Before</th>") < html.count("<th>Column</th>")


def test_client_detail_shows_discards_per_filter_with_the_last_one(viewer: HttpClient, filled) -> None:
    from relay.models import Filter

    spec = Filter.objects.get(client_id=filled.client_ids[QUOTED])  # limit 10, ignore newest: it dropped entries
    assert spec.discarded > 0 and spec.last_discard is not None
    html = page(viewer, f"/clients/{filled.client_ids[QUOTED]}/")
    assert f'<td class="num">{spec.discarded:,}</td>' in html
    assert f"{spec.last_discard:%Y-%m-%d %H:%M:%S} UTC" in html
    assert "never" in page(viewer, f"/clients/{filled.client_ids[UNICODE]}/")  # its filter never dropped anything


def test_client_detail_head_zero_and_empty_queue(viewer: HttpClient, filled) -> None:
    client_id = filled.client_ids[QUOTED]
    html = page(viewer, f"/clients/{client_id}/?head=0")
    assert "the first 0 of 10 entries" in html
    store.purge_queue(client_id)
    html = page(viewer, f"/clients/{client_id}/")
    assert "The queue is empty." in html
    assert 'class="chart line-chart"' in html  # an empty chart, still drawn


@pytest.mark.parametrize("query", ["head=-1", "head=501", "head=abc", "head=1e3"])
def test_client_detail_bad_parameters(viewer: HttpClient, filled, query: str) -> None:
    client_id = filled.client_ids[HOSTILE]
    response = viewer.get(f"/clients/{client_id}/?{query}")
    assert response.status_code == 400
    assert "head" in response.content.decode()


def test_client_detail_shows_its_snapshots(viewer: HttpClient, filled) -> None:
    snapshots = add_snapshots(filled)
    html = page(viewer, f"/clients/{snapshots.client_id}/")
    section = html[html.index("<h2>Snapshots</h2>") : html.index("<h2>Queue</h2>")]
    # Under way first (running, then pending), then the finished ones, the last to finish first.
    states = re.findall(r'<tr data-state="(\w+)">', section)
    assert states == ["running", "pending", "cancelled", "failed", "done"]
    rows = dict(zip(states, section.split('<tr data-state="')[1:], strict=True))
    running = rows["running"]
    assert "shop.orders" in running and "RUNNING" in running
    assert "2,500 / ~10,000" in running and '<progress max="100" value="25">25%</progress> 25%' in running
    assert '<td class="num">50.0</td>' in running and '<td class="num">2 min 30 s</td>' in running
    assert "waiting for the worker" in rows["pending"] and "0 / ?" in rows["pending"]
    assert "1,234 / ~1,200" in rows["done"] and 'value="100"' in rows["done"]
    assert '<td class="num">\u2013</td>' in rows["done"]  # no ETA once done
    failed = rows["failed"]
    assert "FAILED" in failed and "has no primary key and no unique key" in failed
    assert_escaped(section)  # the hostile table's names and the error that quotes them
    # A client without snapshots says how to take one.
    assert "No snapshot asked for" in page(viewer, f"/clients/{filled.client_ids[UNICODE]}/")


def test_client_snapshots_lists_the_last_few_finished(filled) -> None:
    snapshots = add_snapshots(filled)
    from relay.models import Snapshot

    Snapshot.objects.filter(id=snapshots.pending.id).update(state=Snapshot.State.DONE, finished=timezone.now())
    for _ in range(dashboard.FINISHED_SNAPSHOTS):
        extra = Snapshot.objects.create(client_id=snapshots.client_id, schema_name="shop", table_name="old")
        Snapshot.objects.filter(id=extra.id).update(
            state=Snapshot.State.DONE, finished=timezone.now() - timedelta(days=1)
        )
    rows = dashboard.client_snapshots(snapshots.client_id)
    assert rows[0].id == snapshots.running.id
    # The last five to finish, newest first; the older ones are left out.
    assert [row.table_name for row in rows[1:]] == ["customers", "refunds", QUOTED, "items", "old"]


def test_client_detail_unknown_client(viewer: HttpClient, filled) -> None:
    assert viewer.get("/clients/999999/").status_code == 404


def test_usage_page(viewer: HttpClient, filled) -> None:
    html = page(viewer, "/usage/")
    assert "shop.orders" in html
    assert html.count('class="chart sparkline"') == TableUsage.objects.count() == 2
    assert 'class="chart bar-chart"' in html
    assert html.count('class="chart column-chart"') == 2  # the pipeline's hours and days
    assert "run-" + HOSTILE_ESCAPED in html
    assert_escaped(html)
    assert "O&#x27;Brien &quot;quoted&quot; &amp; co" in html


def test_usage_numbers_match_the_counters(viewer: HttpClient, filled) -> None:
    orders = TableUsage.objects.get(schema_name="shop", table_name="orders")
    response = viewer.get("/usage/?q=shop.orders")
    row = re.search(r"<td class=\"mono\">shop\.orders</td>(.*?)</tr>", response.content.decode(), re.S).group(1)
    numbers = [int(n) for n in re.findall(r'<td class="num">(\d+)</td>', row)]
    assert numbers[:6] == [
        orders.start_inserts,
        orders.start_updates,
        orders.start_deletes,
        orders.inserts,
        orders.updates,
        orders.deletes,
    ]
    # Every change of the test data is within the last 24 h, so the rolling 24 h equals all time.
    assert numbers[6:9] == [orders.inserts, orders.updates, orders.deletes]


@pytest.mark.parametrize("sort", [key for name in tableusage.SORT_KEYS for key in (name, f"-{name}")])
def test_usage_every_sort(viewer: HttpClient, filled, sort: str) -> None:
    html = page(viewer, f"/usage/?sort={sort}")
    assert "shop.orders" in html
    assert 'class="chart bar-chart"' in html


def test_usage_search_and_pagination(viewer: HttpClient, filled) -> None:
    html = page(viewer, "/usage/?q=ORDERS")  # case-insensitive
    assert "shop.orders" in html and "1 match<" in html
    html = page(viewer, "/usage/?q=nothing-like-this")
    assert "No table matches." in html
    for index in range(30):
        TableUsage.objects.create(schema_name="bulk", table_name=f"t{index:02}", inserts=index)
    html = page(viewer, "/usage/?sort=-inserts&per_page=10&page=2")
    listed = re.findall(r'<td class="mono">([^<]+)</td>\s*<td class="num">', html)
    expected = TableUsage.objects.order_by("-inserts", "schema_name", "table_name")[10:20]
    assert "page 2 of 4" in html and listed == [f"{t.schema_name}.{t.table_name}" for t in expected]
    assert "page=3" in html and "per_page=10" in html and "sort=-inserts" in html  # links keep the parameters
    html = page(viewer, "/usage/?per_page=10&page=99")  # past the end: the last page
    assert "page 4 of 4" in html


@pytest.mark.parametrize(
    "query",
    [
        "sort=bogus",
        "sort=--hour",
        "page=0",
        "page=-3",
        "page=x",
        "page=99999999999",
        "per_page=5",
        "per_page=101",
        "q=" + "x" * 201,
        "q=a%00b",
    ],
)
def test_usage_bad_parameters(viewer: HttpClient, filled, query: str) -> None:
    response = viewer.get(f"/usage/?{query}")
    assert response.status_code == 400
    assert "Bad request" in response.content.decode()


def test_usage_search_is_escaped_in_the_form(viewer: HttpClient, filled) -> None:
    html = page(viewer, '/usage/?q="><script>x</script>')
    assert "<script>x" not in html
    assert "&quot;&gt;&lt;script&gt;x&lt;/script&gt;" in html


def test_usage_rolling_windows_ignore_old_buckets(viewer: HttpClient) -> None:
    now = int(time.time())
    minute = now - now % 60
    TableUsage.objects.create(schema_name="s", table_name="t", inserts=111)
    UsageMinute.objects.create(schema_name="s", table_name="t", minute=minute, inserts=1)
    UsageMinute.objects.create(schema_name="s", table_name="t", minute=minute - 2 * 3600, inserts=10)
    UsageMinute.objects.create(schema_name="s", table_name="t", minute=minute - 25 * 3600, inserts=100)
    result = tableusage.usage_page(now=now)
    row = result.rows[0]
    assert (row.hour.inserts, row.day.inserts, row.inserts) == (1, 11, 111)
    assert sum(row.spark) == 11 and row.spark[-1] == 1


def test_schema_page(viewer: HttpClient, filled) -> None:
    html = page(viewer, "/schema/")
    assert 'TABLE <span class="mono">shop.orders</span>' in html
    assert "varchar(100)" in html and "0x03" in html and "int unsigned" in html
    assert_escaped(html)
    assert UNICODE in html
    html = page(viewer, "/schema/?q=orders")
    assert "1 table<" in html


def test_the_schema_page_says_which_versions_the_relay_doubts(viewer: HttpClient, filled) -> None:
    """A version marked unreadable (a DDL the history could not apply) or stale (a TABLE_MAP that disagreed) is
    shown as such, in the page and the API: its rows go out with positional names until the table is read again."""
    from relay.models import SchemaVersion

    common = {"source": "main", "schema_name": "shop", "table_name": "orders", "columns": [["id", 3, "int"]]}
    SchemaVersion.objects.create(binlog_file="binlog.000001", binlog_pos=4, baseline=True, **common)
    SchemaVersion.objects.create(
        binlog_file="binlog.000001", binlog_pos=900, statement="ALTER TABLE orders WEIRD", mark="unreadable", **common
    )
    html = page(viewer, "/schema/?q=orders")
    assert "a DDL of it could not be read: rows go out with positional names" in html
    (table,) = viewer.get("/api/schema?q=orders").json()["tables"]
    marks = {version["binlog_pos"]: version["mark"] for version in table["versions"]}
    assert marks[900] == "unreadable" and marks[4] == ""


@pytest.mark.parametrize("query", ["page=0", "page=abc", "q=" + "y" * 300])
def test_schema_bad_parameters(viewer: HttpClient, filled, query: str) -> None:
    assert viewer.get(f"/schema/?{query}").status_code == 400


def test_status_rules() -> None:
    now = timezone.now()
    assert dashboard.client_status(True, None, now) == "CONNECTED"
    assert dashboard.client_status(False, now - timedelta(seconds=1), now) == "POLLING"
    assert dashboard.client_status(False, now - timedelta(seconds=3), now) == "DISCONNECTED"
    assert dashboard.client_status(False, None, now) == "DISCONNECTED"


def test_history_delays(filled) -> None:
    client = Client.objects.get(id=filled.client_ids[HOSTILE])
    events = list(ServedEvent.objects.filter(client=client))
    items = dashboard.history_items(events, events[0].served_at + timedelta(seconds=0.25))
    assert items[0].delay_ms == 250
    assert all(item.delay_ms >= 0 for item in items) and len(items) == 10


def test_event_names() -> None:
    assert dashboard.event_type_name(0x17) == "WRITE_ROW_EVENT_V1"
    assert dashboard.event_type_name(0x1F) == "UPDATE_ROWS_EVENT_V2"
    assert dashboard.event_type_name(0xA3) == "GTID_LIST_EVENT"
    assert dashboard.event_type_name(0x99) == "Event #99"


def test_chart_geometry() -> None:
    chart = charts.line_chart([0, 5, 10], width=100, height=50, pad=0)
    assert chart.points == "0.0,50.0 50.0,25.0 100.0,0.0"
    assert chart.maximum == "10" and not chart.empty
    assert charts.line_chart([], width=100).empty
    assert charts.nice_ceiling(7) == 10 and charts.nice_ceiling(120) == 200 and charts.nice_ceiling(0.3) == 0.5
    assert charts.short_number(1234) == "1.2k" and charts.short_number(5_000_000) == "5M"
    bars = charts.stacked_bars([("a", (1, 1, 2)), ("b", (0, 0, 0))], width=400, label_width=100)
    assert [len(bar.segments) for bar in bars.bars] == [3, 0]
    assert bars.bars[0].end == pytest.approx(100 + 240)


def test_chart_peak_is_exact_and_axes_have_ticks() -> None:
    chart = charts.line_chart([0, 4545, 12], x_ticks=charts.time_ticks(0, 24 * 3600, dates=True))
    assert chart.peak == "4,545" and chart.maximum == "5k"  # the axis top is rounded, the peak it reports is not
    assert [tick.label for tick in chart.y_ticks] == ["5,000", "2,500", "0"]
    assert [tick.label for tick in chart.x_ticks] == [
        "01-01 00:00",
        "01-01 06:00",
        "01-01 12:00",
        "01-01 18:00",
        "01-02 00:00",
    ]  # a 24 h axis says which day
    assert charts.time_ticks(0, 3600, 2) == [(0.0, "00:00"), (1.0, "01:00")]


def test_samples_give_discards_last_hour_and_queue_history(viewer: HttpClient, filled) -> None:
    from relay.models import QueueSample, QueueState
    from relay.worker.samples import Sampler

    client_id = filled.client_ids[UNICODE]
    now = timezone.now()
    Sampler("main").write(now - timedelta(minutes=62), lag=2.0)
    QueueState.objects.filter(client_id=client_id).update(discarded=F("discarded") + 1234)
    Sampler("main").write(now - timedelta(minutes=1), lag=3.0)
    assert QueueSample.objects.filter(client_id=client_id).count() == 2
    (row,) = dashboard.client_rows(client_id=client_id)
    assert row.discards_last_hour == 1234
    assert dashboard.backlog(dashboard.client_rows()).discards_last_hour == 1234
    history = dashboard.queue_history(client_id, now, 3600, 60)
    assert len(history.values) == 60 and max(history.values) == row.queue and history.missing == 59
    assert max(dashboard.lag_history("main", now, 3600, 60).values) == 3.0
    html = page(viewer, "/")
    assert "1,234" in html and f'href="/clients/{client_id}/"' in html
    assert "Queue size, last hour" in page(viewer, f"/clients/{client_id}/")


def test_discards_of_a_client_made_within_the_hour_are_recent_before_its_first_sample(filled) -> None:
    """Its first sample may come after its first discards (samples are taken once a minute): that sample is then no
    baseline, since every discard of a client made within the hour is of the last hour."""
    from relay import store
    from relay.models import Filter, QueueState
    from relay.web import health
    from relay.worker.samples import Sampler

    client_id = store.open_session("dropper").client_id
    spec = store.add_filter(client_id, 1, "shop", "t", 3, 1)
    QueueState.objects.filter(client_id=client_id).update(discarded=7)
    Filter.objects.filter(id=spec.id).update(discarded=7, last_discard=timezone.now())
    Sampler("main").write(timezone.now(), lag=None)  # its first sample, the discards in it
    (row,) = dashboard.client_rows(client_id=client_id)
    assert row.discards_last_hour == 7 and [f.discards_last_hour for f in row.filters] == [7]
    assert any(reason.code == "recent_discards" and "dropper" in reason.message for reason in health.check().reasons)


def test_discards_per_filter_over_time(viewer: HttpClient, filled) -> None:
    from relay.models import Filter
    from relay.worker.samples import Sampler

    client_id = filled.client_ids[QUOTED]  # its one filter (limit 10, ignore newest) dropped entries
    spec = Filter.objects.get(client_id=client_id)
    now = timezone.now()
    Sampler("main").write(now - timedelta(minutes=62), lag=None)
    Filter.objects.filter(id=spec.id).update(discarded=F("discarded") + 500)
    Sampler("main").write(now - timedelta(minutes=31), lag=None)
    Filter.objects.filter(id=spec.id).update(discarded=F("discarded") + 70)
    Sampler("main").write(now - timedelta(minutes=1), lag=None)
    (row,) = dashboard.client_rows(client_id=client_id)
    assert [f.discards_last_hour for f in row.filters] == [570]
    history = dashboard.filter_discard_history(client_id, spec.id, now, 3600, 600)
    assert sorted(history.values)[-2:] == [70.0, 500.0] and sum(history.values) == 570
    html = page(viewer, f"/clients/{client_id}/")
    assert "Discarded by shop.orders (IU), per 10 minutes, last 24 hours" in html
    assert '<td class="num">570</td>' in html


def test_not_found_and_server_error_pages_are_styled(viewer: HttpClient) -> None:
    from django.test import RequestFactory
    from django.views.defaults import server_error

    response = viewer.get("/no-such-page/")
    html = response.content.decode()
    assert response.status_code == 404
    assert "relay/relay.css" in html and "Not found" in html and 'href="/clients/"' in html  # styled, with navigation
    error = server_error(RequestFactory().get("/"))
    html = error.content.decode()
    assert error.status_code == 500 and "relay/relay.css" in html and 'href="/usage/"' in html


def _luminance(colour: str) -> float:
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def test_text_colours_reach_wcag_aa_contrast() -> None:
    from pathlib import Path

    css = (Path(__file__).resolve().parent.parent / "relay/static/relay/relay.css").read_text()
    for scheme in re.findall(r":root\s*\{([^}]*)\}", css):  # the light colours, then the dark ones
        colours = dict(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{6})", scheme))
        for text, background in (
            ("fg", "bg"),
            ("muted", "bg"),
            ("muted", "head"),
            ("accent", "bg"),
            ("accent", "head"),
            ("upd", "bg"),
            ("ins", "bg"),
            ("del", "bg"),
            ("ok", "ok-bg"),
            ("warn", "warn-bg"),
            ("bad", "bad-bg"),
        ):
            if text not in colours or background not in colours:
                continue
            high, low = sorted((_luminance(colours[text]), _luminance(colours[background])), reverse=True)
            assert (high + 0.05) / (low + 0.05) >= 4.5, f"--{text} on --{background}"

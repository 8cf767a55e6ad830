"""/metrics: the Prometheus text format, its label escaping, and who may read it."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client as HttpClient
from django.utils import timezone

from relay.models import WorkerStatus
from relay.web.metrics import CONTENT_TYPE, escape_label
from tests.helpers.dashboard_data import HOSTILE, PASSWORD, QUOTED, UNICODE
from tests.helpers.snapshot_data import add_snapshots

pytestmark = pytest.mark.django_db

# name{labels} value, with label values in double quotes where only \\, \" and \n escapes may appear
SAMPLE = re.compile(r'^[a-z_]+(\{([a-z_]+="(?:[^"\\\n]|\\\\|\\"|\\n)*",?)*\})? -?[0-9.e+Inf]+$|^# (HELP|TYPE) .+$')


def scrape(client: HttpClient, **headers: str) -> str:
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200
    assert response["Content-Type"] == CONTENT_TYPE
    return response.content.decode()


def samples(text: str, name: str) -> dict[str, float]:
    return {
        line[len(name) :].rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    }


def test_anonymous_gets_401(client: HttpClient, filled) -> None:
    response = client.get("/metrics")
    assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Bearer")


def test_bearer_token(client: HttpClient, filled, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAY_METRICS_TOKEN", "s3cret-token")
    assert "relay_worker_up" in scrape(client, authorization="Bearer s3cret-token")
    assert client.get("/metrics", headers={"authorization": "Bearer wrong"}).status_code == 403
    assert client.get("/metrics", headers={"authorization": "Basic czNjcmV0LXRva2Vu"}).status_code == 403


def test_no_token_configured_refuses_every_token(client: HttpClient, filled, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RELAY_METRICS_TOKEN", raising=False)
    assert client.get("/metrics", headers={"authorization": "Bearer "}).status_code == 403
    assert client.get("/metrics", headers={"authorization": "Bearer anything"}).status_code == 403


def test_logged_in_users_may_read(client: HttpClient, filled) -> None:
    assert client.login(username="viewer", password=PASSWORD)
    assert "relay_clients 3" in scrape(client)


def test_every_line_is_valid_exposition_text(client: HttpClient, filled) -> None:
    client.login(username="viewer", password=PASSWORD)
    text = scrape(client)
    assert text.endswith("\n")
    for line in text.splitlines():
        assert SAMPLE.match(line), line
    families = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(families) == len(set(families))  # each family once


def test_values(client: HttpClient, filled) -> None:
    # The lag is computed at scrape time from the source time of the newest event applied, not the stored number.
    WorkerStatus.objects.update(source_timestamp=timezone.now() - timedelta(seconds=90))
    client.login(username="viewer", password=PASSWORD)
    text = scrape(client)
    assert samples(text, "relay_worker_up") == {'{source="main"}': 1}
    assert samples(text, "relay_servers_up") == {"": 1}  # of the two relay processes, one stopped reporting
    ages = samples(text, "relay_server_report_age_seconds")
    gone = [age for key, age in ages.items() if key.startswith('{hostname="relay-gone",pid="4444",process_id="')]
    assert len(gone) == 1 and gone[0] >= 60 and len(ages) == 2
    assert 90 <= samples(text, "relay_lag_seconds")['{source="main"}'] < 120
    assert samples(text, "relay_reconnects_total") == {'{source="main"}': 2}
    assert samples(text, "relay_transactions_total") == {'{source="main"}': 120}
    rows = samples(text, "relay_rows_total")
    assert sum(rows.values()) == filled.rows and set(rows) == {
        '{type="insert"}',
        '{type="update"}',
        '{type="delete"}',
    }
    events = samples(text, "relay_events_total")
    assert events['{source="main",type="XID_EVENT",code="0x10"}'] == 120
    assert events['{source="main",type="ROTATE_EVENT",code="0x04"}'] == 0
    queue = samples(text, "relay_queue_size")
    unicode_id = filled.client_ids[UNICODE]
    assert queue[f'{{client_id="{unicode_id}",client="{UNICODE}"}}'] == 150
    assert samples(text, "relay_pending_acks")[f'{{client_id="{unicode_id}",client="{UNICODE}"}}'] == 5
    assert sum(samples(text, "relay_discarded_total").values()) > 0
    assert samples(text, "relay_worker_state")['{source="main",state="connected"}'] == 1


def test_hostile_names_are_escaped(client: HttpClient, filled) -> None:
    client.login(username="viewer", password=PASSWORD)
    text = scrape(client)
    assert 'client="<script>alert(\\"x\\")</script>"' in text
    assert 'client="O\'Brien \\"quoted\\" & co"' in text
    assert HOSTILE not in text and QUOTED not in text  # never with its quotes raw


def test_escape_label() -> None:
    assert escape_label('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
    assert escape_label("ünï ✓") == "ünï ✓"


def test_worker_down_and_no_lag(client: HttpClient, filled) -> None:
    WorkerStatus.objects.update(state=WorkerStatus.State.RECONNECTING, lag_seconds=None)
    client.login(username="viewer", password=PASSWORD)
    text = scrape(client)
    assert samples(text, "relay_worker_up") == {'{source="main"}': 0}
    assert samples(text, "relay_lag_seconds") == {}
    assert samples(text, "relay_worker_state")['{source="main",state="reconnecting"}'] == 1


def test_empty_store(viewer: HttpClient) -> None:
    text = scrape(viewer)
    assert "relay_clients 0" in text
    assert 'relay_rows_total{type="insert"} 0' in text
    assert samples(text, "relay_worker_up") == {}


def test_standby_age_is_exported(filled) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from relay.models import WorkerStatus
    from relay.web.metrics import render_metrics

    assert "relay_worker_standby_age_seconds{" not in render_metrics()
    WorkerStatus.objects.update(standby_pid=7, standby_heartbeat=timezone.now() - timedelta(seconds=3))
    line = next(x for x in render_metrics().splitlines() if x.startswith("relay_worker_standby_age_seconds{"))
    assert 2.5 < float(line.split()[-1]) < 60


def test_snapshots(client: HttpClient, filled) -> None:
    """Each snapshot under way has its gauges, labelled by client, table and id; finished ones only count."""
    snapshots = add_snapshots(filled)
    client.login(username="viewer", password=PASSWORD)
    text = scrape(client)
    assert all(SAMPLE.match(line) for line in text.splitlines())

    def labels(snapshot) -> str:
        return (
            f'{{client_id="{snapshots.client_id}",client="<script>alert(\\"x\\")</script>",schema="shop",'
            f'table="{snapshot.table_name}",snapshot_id="{snapshot.id}"}}'
        )

    running, pending = labels(snapshots.running), labels(snapshots.pending)
    assert samples(text, "relay_snapshot_rows_done") == {running: 2500, pending: 0}
    assert samples(text, "relay_snapshot_rows_total") == {running: 10_000}  # the pending one's is not known yet
    assert samples(text, "relay_snapshot_rows_per_second") == {running: 50}
    assert samples(text, "relay_snapshot_eta_seconds") == {running: 150}
    assert samples(text, "relay_snapshots") == {
        '{state="pending"}': 1,
        '{state="running"}': 1,
        '{state="done"}': 1,
        '{state="cancelled"}': 1,
        '{state="failed"}': 1,
    }
    assert "# TYPE relay_snapshot_rows_done gauge" in text


def test_no_snapshots(viewer: HttpClient) -> None:
    text = scrape(viewer)
    assert samples(text, "relay_snapshot_rows_done") == {}
    assert set(samples(text, "relay_snapshots").values()) == {0}


def test_two_relay_processes_of_one_host_and_pid_are_two_series(filled) -> None:
    """A relay restarted in a container is pid 1 again while the row of the one killed there is still listed:
    each is a series of its own (a scrape with a series twice is refused whole by strict parsers)."""
    from relay.store import relayprocess
    from relay.web.metrics import render_metrics

    moment = timezone.now()
    for _ in range(2):
        relayprocess.register(relayprocess.ProcessInfo("relay-box", 1, "0.0.0.0:6001", 1, moment), 5.0)
    series = [line.rsplit(" ", 1)[0] for line in render_metrics().splitlines() if line.startswith("relay_server_")]
    assert len(series) == len(set(series)) and sum('hostname="relay-box"' in line for line in series) == 2

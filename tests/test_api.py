"""The JSON API: login, data, hostile names as plain JSON strings, bad parameters."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client as HttpClient
from django.utils import timezone

from relay.models import Client, TableUsage, WorkerStatus
from relay.web import tableusage
from tests.helpers.dashboard_data import HOSTILE, QUOTED, UNICODE
from tests.helpers.snapshot_data import EVIL_ERROR, add_snapshots

pytestmark = pytest.mark.django_db

ENDPOINTS = ["/api/overview", "/api/clients", "/api/clients/1", "/api/usage", "/api/schema"]


def get(client: HttpClient, url: str) -> dict:
    response = client.get(url)
    assert response.status_code == 200, response.content[:2000]
    assert response["Content-Type"] == "application/json"
    return response.json()


@pytest.mark.parametrize("url", ENDPOINTS)
def test_anonymous_callers_get_401_not_a_redirect(client: HttpClient, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 401
    assert response.json() == {"error": "authentication required"}
    assert "WWW-Authenticate" in response


@pytest.mark.parametrize("url", ENDPOINTS)
def test_only_get(viewer: HttpClient, filled, url: str) -> None:
    assert viewer.post(url).status_code == 405


def test_overview(viewer: HttpClient, filled) -> None:
    WorkerStatus.objects.update(caught_up=timezone.now() - timedelta(seconds=90))
    data = get(viewer, "/api/overview")
    assert data["protocol_version"] == "00010020"
    assert data["clients"] == 3 and data["connected_clients"] == 2
    processes = {row["pid"]: row for row in data["relay_processes"]}
    assert (
        processes[4343]["alive"]
        and processes[4343]["clients"] == 2
        and processes[4343]["hostname"] == "relay-" + HOSTILE
    )
    assert not processes[4444]["alive"] and processes[4444]["clients"] == 0
    assert data["events_served"] == 17
    (source,) = data["sources"]
    assert source["source"] == "main"
    assert source["worker"]["state"] == "connected" and source["worker"]["up"] is True
    # The lag is computed when read (now minus the last time the worker had all the source had); the number the
    # worker wrote is kept under its own name.
    assert 90 <= source["worker"]["lag_seconds"] < 120 and source["worker"]["lag_at_last_report_seconds"] == 1.5
    assert source["worker"]["reconnects"] == 2
    # The same verdict as /healthz: over the default 60 s lag threshold.
    assert data["health"]["healthy"] is False
    assert [reason["code"] for reason in data["health"]["reasons"] if reason["level"] == "red"] == [
        "lag_over_threshold"
    ]
    assert source["worker"]["last_error"] == f"lost connection: {HOSTILE}"
    assert source["checkpoint"]["file"] == "binlog.000042" and source["checkpoint"]["gtid"] == "0-1-120"
    names = {event["name"]: event["count"] for event in source["events"]}
    assert names["WRITE_ROW_EVENT_V1"] == 0 and names["WRITE_ROWS_EVENT_V2"] == 120 and names["XID_EVENT"] == 120
    assert len(data["rows_per_minute_last_hour"]) == 60 and len(data["rows_per_minute_last_day_10min"]) == 144
    assert sum(data["rows_per_minute_last_hour"]) > 0


def test_clients(viewer: HttpClient, filled) -> None:
    data = get(viewer, "/api/clients")
    by_name = {client["name"]: client for client in data["clients"]}
    assert set(by_name) == {HOSTILE, QUOTED, UNICODE}
    hostile = by_name[HOSTILE]
    assert hostile["status"] == "CONNECTED" and hostile["served"] == 12 and len(hostile["history"]) == 10
    from relay.models import Filter

    dropping = Filter.objects.get(client__name=HOSTILE, schema_name=HOSTILE)  # limit 50, unqueue oldest
    assert dropping.discarded > 0 and dropping.last_discard is not None
    assert hostile["filters"][1] == {
        "schema": HOSTILE,
        "table": "*",
        "event_mask": 1,
        "events": "I",
        "queue_limit": 50,
        "discard_policy": 1,
        "discard_policy_name": "unqueue oldest",
        "discarded": dropping.discarded,
        "last_discard": dropping.last_discard.isoformat(),
    }
    assert hostile["filters"][0]["discarded"] == 0 and hostile["filters"][0]["last_discard"] is None
    assert by_name[QUOTED]["status"] == "DISCONNECTED" and by_name[QUOTED]["inactive_seconds"] >= 3600
    assert by_name[UNICODE]["pending_acks"] == 5 and by_name[UNICODE]["queue"] == 150


def test_client_detail(viewer: HttpClient, filled) -> None:
    client_id = filled.client_ids[UNICODE]
    data = get(viewer, f"/api/clients/{client_id}?head=7")
    assert data["name"] == UNICODE and len(data["head"]) == 7
    first = data["head"][0]
    assert first["seq"] == 1 and first["delivered"] is True and first["file"] == "binlog.000042"
    assert data["head"][5]["delivered"] is False
    insert = next(entry for entry in data["head"] if entry["kind"] == "insert")
    assert all("before" not in column for column in insert["columns"])
    values = {column["name"]: column.get("after") for column in insert["columns"] if insert["table"] == "orders"}
    if values:
        assert values["photo"] == "0x00ff62696e"
    assert data["buildup"][-1]["queued"] == 150
    assert [point["queued"] for point in data["buildup"]] == sorted(point["queued"] for point in data["buildup"])


def test_client_detail_lists_the_snapshots(viewer: HttpClient, filled) -> None:
    snapshots = add_snapshots(filled)
    data = get(viewer, f"/api/clients/{snapshots.client_id}")
    listed = data["snapshots"]
    assert [item["state"] for item in listed] == ["running", "pending", "cancelled", "failed", "done"]
    running = snapshots.running
    assert listed[0] == {
        "id": running.id,
        "schema": "shop",
        "table": "orders",
        "where": "",
        "state": "running",
        "rows_done": 2500,
        "rows_total_estimate": 10_000,
        "chunks_done": 5,
        "fraction": 0.25,
        "rows_per_second": 50.0,
        "eta_seconds": 150.0,
        "created": running.created.isoformat(),
        "started": running.started.isoformat(),
        "updated": running.updated.isoformat(),
        "finished": None,
        "error": "",
    }
    pending, cancelled, failed, done = listed[1:]
    assert pending["started"] is None and pending["fraction"] is None and pending["rows_per_second"] is None
    assert failed["schema"] == HOSTILE and failed["table"] == QUOTED and failed["error"].startswith(EVIL_ERROR)
    assert failed["eta_seconds"] is None and cancelled["eta_seconds"] is None
    assert done["fraction"] == 1.0 and done["eta_seconds"] == 0.0 and done["rows_done"] == 1234
    assert get(viewer, f"/api/clients/{filled.client_ids[UNICODE]}")["snapshots"] == []


def test_client_detail_hostile_values_are_plain_json(viewer: HttpClient, filled) -> None:
    response = viewer.get(f"/api/clients/{filled.client_ids[UNICODE]}?head=40")
    text = response.content.decode()
    assert "<script>" not in text  # Django's JSON encoder escapes <, > and & as \u003c... inside strings
    data = json.loads(text)
    names = {entry["schema"] for entry in data["head"]}
    assert HOSTILE in names
    values = [column.get("after") for entry in data["head"] for column in entry["columns"]]
    assert any(value and value.startswith(HOSTILE) for value in values)
    assert None in values  # SQL NULL is JSON null, never the text "NULL"


def test_client_detail_errors(viewer: HttpClient, filled) -> None:
    assert viewer.get("/api/clients/424242").status_code == 404
    response = viewer.get(f"/api/clients/{filled.client_ids[HOSTILE]}?head=-5")
    assert response.status_code == 400 and "head" in response.json()["error"]


def test_usage(viewer: HttpClient, filled) -> None:
    data = get(viewer, "/api/usage?sort=table")
    assert data["count"] == 2 and data["sort"] == "table"
    names = [(t["schema"], t["table"]) for t in data["tables"]]
    assert names == sorted(names)
    orders = next(t for t in data["tables"] if t["table"] == "orders")
    stored = TableUsage.objects.get(schema_name="shop", table_name="orders")
    assert orders["all_time"] == {"inserts": stored.inserts, "updates": stored.updates, "deletes": stored.deletes}
    assert orders["day"] == orders["all_time"]
    assert len(orders["day_half_hours"]) == tableusage.SPARK_BINS
    assert sum(orders["day_half_hours"]) == stored.inserts + stored.updates + stored.deletes
    assert data["tables"][0]["schema"] == HOSTILE and data["tables"][0]["table"] == QUOTED


def test_usage_search_sort_and_pages(viewer: HttpClient, filled) -> None:
    for index in range(25):
        TableUsage.objects.create(schema_name="bulk", table_name=f"t{index:02}", deletes=index)
    data = get(viewer, "/api/usage?q=bulk&sort=-deletes&per_page=10&page=3")
    assert data["count"] == 25 and data["pages"] == 3 and data["page"] == 3
    assert [t["table"] for t in data["tables"]] == [f"t{n:02}" for n in range(4, -1, -1)]


@pytest.mark.parametrize("query", ["sort=name", "page=0", "per_page=9", "q=" + "z" * 250, "page=2.5"])
def test_usage_bad_parameters(viewer: HttpClient, filled, query: str) -> None:
    response = viewer.get(f"/api/usage?{query}")
    assert response.status_code == 400
    assert response.json()["error"]


def test_schema(viewer: HttpClient, filled) -> None:
    data = get(viewer, "/api/schema?q=orders")
    assert data["count"] == 1
    (table,) = data["tables"]
    assert table["primary_key"] == ["id"]
    assert [c["name"] for c in table["columns"]] == ["id", "customer", "note", "photo"]
    assert table["columns"][0] == {
        "ordinal": 1,
        "name": "id",
        "type": "int unsigned",
        "type_code": 3,
        "unsigned": True,
        "nullable": False,
        "charset": "",
    }
    everything = get(viewer, "/api/schema")
    evil = next(t for t in everything["tables"] if t["schema"] == HOSTILE)
    assert evil["table"] == QUOTED and [c["name"] for c in evil["columns"]] == [HOSTILE, UNICODE]
    assert viewer.get("/api/schema?page=nope").status_code == 400


def test_empty_store(viewer: HttpClient) -> None:
    assert get(viewer, "/api/overview")["sources"] == []
    assert get(viewer, "/api/clients") == {"clients": []}
    assert get(viewer, "/api/usage")["tables"] == []
    assert get(viewer, "/api/schema")["tables"] == []
    assert Client.objects.count() == 0


def test_column_values_come_from_the_data_and_say_when_cut() -> None:
    from relay.store import rowcodec
    from relay.web import api, dashboard

    long_text = "x" * (api.API_MAX_TEXT + 5)
    column = dashboard.HeadColumn(
        "c",
        dashboard.shown_value(long_text),
        dashboard.shown_value(b"\x00\xff"),
        raw_before=long_text,
        raw_after=b"\x00\xff",
    )
    data = api.column_data(column)
    assert data["before"] == "x" * api.API_MAX_TEXT and data["truncated"] == ["before"]
    assert data["after"] == "0x00ff" and data["binary"] == ["after"]
    # The page cuts at 300 characters for display; the API does not follow the page.
    assert len(dashboard.shown_value(long_text).text) < 400 < len(data["before"])
    whole = api.column_data(dashboard.HeadColumn("n", column.before, column.after, None, rowcodec.MISSING))
    assert whole == {"name": "n", "before": None}  # NULL is null; a side not in the row image is left out

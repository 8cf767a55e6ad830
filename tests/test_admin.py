"""The Django admin: every model is there, read-only where the relay owns the rows, and the actions work."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin
from django.test import Client as HttpClient
from django.urls import reverse
from django.utils import timezone

from relay.models import (
    Change,
    Client,
    EventCount,
    Filter,
    QueueEntry,
    QueueState,
    ServedEvent,
    TableUsage,
    UsageMinute,
)
from relay.store.statistics import reset_statistics
from relay.worker.samples import Sampler
from tests.helpers.dashboard_data import HOSTILE, HOSTILE_ESCAPED, PASSWORD, QUOTED, UNICODE
from tests.helpers.queues import queue_size

pytestmark = pytest.mark.django_db

MODELS = [model for model in apps.get_app_config("relay").get_models()]
READ_ONLY = [
    "change",
    "queueentry",
    "servedevent",
    "queuestate",
    "checkpoint",
    "workerstatus",
    "eventcount",
    "tableusage",
    "usageminute",
    "usagehistory",
    "columnchangehistory",
    "schematable",
    "schemacolumn",
    "relayprocess",
    "queuesample",
    "lagsample",
]


@pytest.fixture
def staff(client: HttpClient, filled) -> HttpClient:
    Sampler("main").write(timezone.now(), lag=0.6172525882720947)  # the history samples the worker writes
    assert client.login(username="admin", password=PASSWORD)
    return client


def action(client: HttpClient, model: str, name: str, ids: list[int]) -> str:
    response = client.post(
        reverse(f"admin:relay_{model}_changelist"),
        {"action": name, "_selected_action": [str(i) for i in ids]},
        follow=True,
    )
    assert response.status_code == 200
    return response.content.decode()


def test_every_model_is_registered() -> None:
    assert MODELS and all(admin.site.is_registered(model) for model in MODELS)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m._meta.model_name)
def test_every_changelist_and_detail_page_renders(staff: HttpClient, model) -> None:
    name = model._meta.model_name
    response = staff.get(reverse(f"admin:relay_{name}_changelist"))
    assert response.status_code == 200
    html = response.content.decode()
    assert HOSTILE not in html
    first = model.objects.order_by("pk").first()
    assert first is not None, f"the test data has no {name}"
    detail = staff.get(reverse(f"admin:relay_{name}_change", args=[first.pk]))
    assert detail.status_code == 200
    assert HOSTILE not in detail.content.decode()


@pytest.mark.parametrize("model", ["client", "filter", "servedevent", "tableusage", "schematable", "schemacolumn"])
def test_search(staff: HttpClient, model: str) -> None:
    response = staff.get(reverse(f"admin:relay_{model}_changelist"), {"q": "a"})
    assert response.status_code == 200


def test_client_list_shows_queue_and_escapes(staff: HttpClient, filled) -> None:
    html = staff.get(reverse("admin:relay_client_changelist")).content.decode()
    assert HOSTILE_ESCAPED in html and HOSTILE not in html
    assert UNICODE in html
    assert ">150<" in html  # the unicode client's queue
    assert "DISCONNECTED" in html


@pytest.mark.parametrize("name", READ_ONLY)
def test_relay_owned_rows_are_read_only(staff: HttpClient, name: str) -> None:
    model = apps.get_model("relay", name)
    model_admin = admin.site._registry[model]
    request = staff.get("/").wsgi_request
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)
    assert not model_admin.has_delete_permission(request)
    assert staff.get(reverse(f"admin:relay_{name}_add")).status_code == 403


def test_purge_queue_action(staff: HttpClient, filled) -> None:
    client_id = filled.client_ids[UNICODE]
    assert queue_size(client_id) == 150
    html = action(staff, "client", "purge_queues", [client_id])
    assert "150 entries dropped" in html
    assert queue_size(client_id) == 0
    assert not QueueEntry.objects.filter(client_id=client_id).exists()
    assert queue_size(filled.client_ids[QUOTED]) == 10  # the others keep theirs


def test_delete_with_queue_action(staff: HttpClient, filled) -> None:
    client_id = filled.client_ids[HOSTILE]
    html = action(staff, "client", "delete_with_queues", [client_id])
    assert "Deleted 1 client(s)" in html
    assert not Client.objects.filter(id=client_id).exists()
    assert not QueueEntry.objects.filter(client_id=client_id).exists()
    assert not Filter.objects.filter(client_id=client_id).exists()
    assert not ServedEvent.objects.filter(client_id=client_id).exists()
    assert Client.objects.count() == 2


def test_bulk_delete_is_replaced(staff: HttpClient, filled) -> None:
    response = staff.get(reverse("admin:relay_client_changelist"))
    assert b"delete_selected" not in response.content
    assert b"delete_with_queues" in response.content and b"purge_queues" in response.content


def test_delete_page_summarises_without_listing_entries(staff: HttpClient, filled) -> None:
    client_id = filled.client_ids[UNICODE]
    url = reverse("admin:relay_client_delete", args=[client_id])
    page = staff.get(url).content.decode()
    assert "Queue entries: 150" in page or "queue entries: 150" in page.lower()
    response = staff.post(url, {"post": "yes"}, follow=True)
    assert response.status_code == 200
    assert not Client.objects.filter(id=client_id).exists()
    assert not QueueEntry.objects.filter(client_id=client_id).exists()


def test_reset_statistics_action(staff: HttpClient, filled) -> None:
    assert EventCount.objects.exclude(count=0).exists() and UsageMinute.objects.exists()
    html = action(staff, "eventcount", "reset_all_statistics", [EventCount.objects.first().pk])
    assert "Statistics reset" in html
    assert not EventCount.objects.exclude(count=0).exists()
    assert not UsageMinute.objects.exists()
    assert set(TableUsage.objects.values_list("inserts", "updates", "deletes", "start_inserts")) == {(0, 0, 0, 0)}
    assert Change.objects.exists() and QueueState.objects.exists()  # queues are not statistics


def test_reset_selected_tables(staff: HttpClient, filled) -> None:
    orders = TableUsage.objects.get(schema_name="shop", table_name="orders")
    evil = TableUsage.objects.get(schema_name=HOSTILE)
    action(staff, "tableusage", "reset_selected", [orders.pk])
    orders.refresh_from_db()
    evil_after = TableUsage.objects.get(pk=evil.pk)
    assert (orders.inserts, orders.updates, orders.deletes) == (0, 0, 0)
    assert evil_after.inserts == evil.inserts and evil_after.inserts + evil_after.updates + evil_after.deletes > 0
    assert not UsageMinute.objects.filter(schema_name="shop").exists()
    assert UsageMinute.objects.filter(schema_name=HOSTILE).exists()
    assert EventCount.objects.exclude(count=0).exists()


def test_reset_statistics_function_counts(filled) -> None:
    buckets = UsageMinute.objects.count()
    counts = reset_statistics()
    assert counts == {"event types": EventCount.objects.count(), "tables": 2, "minute buckets": buckets}


def test_filters_are_editable_and_validated(staff: HttpClient, filled) -> None:
    spec = Filter.objects.get(client_id=filled.client_ids[QUOTED])
    url = reverse("admin:relay_filter_change", args=[spec.pk])
    data = {
        "client": spec.client_id,
        "event_mask": 8,
        "schema_name": spec.schema_name,
        "table_name": spec.table_name,
        "queue_limit": 99,
        "discard_policy": 1,
    }
    response = staff.post(url, data)
    assert response.status_code == 200 and b"1 to 7" in response.content
    data["event_mask"] = 5
    assert staff.post(url, data).status_code == 302
    spec.refresh_from_db()
    assert (spec.event_mask, spec.queue_limit, spec.discard_policy) == (5, 99, 1)


def test_non_staff_users_cannot_use_the_admin(client: HttpClient, filled) -> None:
    assert client.login(username="viewer", password=PASSWORD)
    response = client.get(reverse("admin:relay_client_changelist"))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_staff_without_permissions_see_no_actions(client: HttpClient, filled) -> None:
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user("watcher", password=PASSWORD, is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_client"))
    user.user_permissions.add(Permission.objects.get(codename="view_eventcount"))
    client.login(username="watcher", password=PASSWORD)
    assert client.get(reverse("admin:relay_client_changelist")).status_code == 200
    html = action(client, "client", "purge_queues", [filled.client_ids[UNICODE]])
    assert queue_size(filled.client_ids[UNICODE]) == 150  # refused: no change permission
    assert "No action selected" in html or "purge_queues" not in html
    action(client, "eventcount", "reset_all_statistics", [EventCount.objects.first().pk])
    assert EventCount.objects.exclude(count=0).exists()


def test_change_page_shows_the_decoded_columns(staff: HttpClient, filled) -> None:
    """The stored encoding is not shown; each column's before and after values are, escaped, bytes as hex."""
    from relay.models import Change

    insert = Change.objects.filter(table_name="orders", kind=1).order_by("pk").first()
    assert insert is not None
    html = staff.get(reverse("admin:relay_change_change", args=[insert.pk])).content.decode()
    assert insert.data not in html
    assert "<td>photo</td><td>(not in the row image)</td><td>0x00ff62696e</td>" in html
    assert "<td>id</td><td>(not in the row image)</td>" in html
    assert HOSTILE not in html
    update = Change.objects.filter(table_name="orders", kind=2, data__isnull=False).order_by("pk").first()
    assert update is not None
    html = staff.get(reverse("admin:relay_change_change", args=[update.pk])).content.decode()
    assert "<td>photo</td><td>0x00ff62696e</td><td>0x00ff62696e</td>" in html


def test_times_are_dates_and_lag_is_rounded(staff: HttpClient) -> None:
    changes = staff.get(reverse("admin:relay_change_changelist")).content.decode()
    newest = Change.objects.order_by("-id").first()
    assert newest is not None and f">{newest.timestamp}<" not in changes  # no raw epoch seconds
    assert "event time (utc)" in changes.lower()
    assert "0.6172525882720947" not in staff.get(reverse("admin:relay_lagsample_changelist")).content.decode()
    assert ">0.6<" in staff.get(reverse("admin:relay_lagsample_changelist")).content.decode()
    worker = staff.get(reverse("admin:relay_workerstatus_changelist")).content.decode()
    assert "lag (s)" in worker.lower()

"""The Django admin: every model is there, read-only where the relay owns the rows, and the actions work."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin
from django.test import Client as HttpClient
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from relay.models import (
    Change,
    Client,
    EventCount,
    Filter,
    QueueEntry,
    QueueState,
    ServedEvent,
    Snapshot,
    TableUsage,
    UsageMinute,
)
from relay.store.statistics import reset_statistics
from relay.worker.samples import Sampler
from tests.helpers.dashboard_data import HOSTILE, HOSTILE_ESCAPED, PASSWORD, QUOTED, UNICODE
from tests.helpers.queues import enqueue, queue_size
from tests.helpers.snapshot_data import EVIL_ERROR, add_snapshots

pytestmark = pytest.mark.django_db

MODELS = [model for model in apps.get_app_config("relay").get_models()]
READ_ONLY = [
    "change",
    "queueentry",
    "servedevent",
    "queuestate",
    "checkpoint",
    "preparedtransaction",
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
    "snapshot",  # but for its cancel action
]


@pytest.fixture
def staff(client: HttpClient, filled) -> HttpClient:
    Sampler("main").write(timezone.now(), lag=0.6172525882720947)  # the history samples the worker writes
    add_snapshots(filled)
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


def test_the_status_of_a_source_no_worker_serves_can_be_forgotten_one_at_a_time(staff: HttpClient) -> None:
    """A retired source's stopped status kept /healthz red for ever; a running worker's row cannot be deleted."""
    from relay.models import WorkerStatus
    from relay.web import health

    retired = WorkerStatus.objects.create(source="old-name:3306", state=WorkerStatus.State.STOPPED)
    running = WorkerStatus.objects.create(source="db:3306", state=WorkerStatus.State.CONNECTED)
    assert any("old-name:3306" in reason.message for reason in health.check().reasons)
    assert staff.post(reverse("admin:relay_workerstatus_delete", args=[running.pk]), {"post": "yes"}).status_code == 403
    staff.post(reverse("admin:relay_workerstatus_delete", args=[retired.pk]), {"post": "yes"})
    assert not WorkerStatus.objects.filter(source="old-name:3306").exists()
    assert WorkerStatus.objects.filter(source="db:3306").exists()
    assert not any("old-name:3306" in reason.message for reason in health.check().reasons)


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


def test_the_admins_filter_form_keeps_names_as_given_and_the_filter_limit(staff: HttpClient, filled) -> None:
    """A table's name may begin with spaces (MariaDB allows it): kept as typed. A client at its filter limit gets no
    more filters from the admin than from ADDFILTER."""
    from relay.store.filters import MAX_FILTERS_PER_CLIENT

    client_id = filled.client_ids[QUOTED]
    data = {"client": client_id, "event_mask": 7, "schema_name": "shop", "table_name": "  spaced ", "queue_limit": 0}
    assert staff.post(reverse("admin:relay_filter_add"), {**data, "discard_policy": 0}).status_code == 302
    assert Filter.objects.filter(client_id=client_id, table_name="  spaced ").exists()
    have = Filter.objects.filter(client_id=client_id).count()
    Filter.objects.bulk_create(
        Filter(client_id=client_id, event_mask=1, schema_name="s", table_name=f"t{n}")
        for n in range(MAX_FILTERS_PER_CLIENT - have)
    )
    response = staff.post(reverse("admin:relay_filter_add"), {**data, "table_name": "one_more", "discard_policy": 0})
    assert response.status_code == 200 and b"the limit; remove one first" in response.content
    assert Filter.objects.filter(client_id=client_id).count() == MAX_FILTERS_PER_CLIENT


def test_an_admin_edit_of_a_filter_keeps_the_discards_the_worker_counted_meanwhile(staff: HttpClient, filled) -> None:
    """The worker adds to a filter's discard count at any moment: here between the admin's read of the filter and its
    save (as when the save waits for the commit of a large transaction whose drops the filter's limit made). The
    edit writes the fields of its form, not the count it read."""
    from django.db.models import F
    from django.db.models.signals import pre_save

    spec = Filter.objects.get(client_id=filled.client_ids[QUOTED])
    counted, moment = spec.discarded, timezone.now()

    def worker_discards(sender: object, instance: Filter, **kwargs: object) -> None:
        Filter.objects.filter(id=instance.id).update(discarded=F("discarded") + 5, last_discard=moment)

    data = {
        "client": spec.client_id,
        "event_mask": spec.event_mask,
        "schema_name": spec.schema_name,
        "table_name": spec.table_name,
        "queue_limit": 42,
        "discard_policy": 1,
    }
    pre_save.connect(worker_discards, sender=Filter)
    try:
        assert staff.post(reverse("admin:relay_filter_change", args=[spec.pk]), data).status_code == 302
    finally:
        pre_save.disconnect(worker_discards, sender=Filter)
    spec.refresh_from_db()
    assert (spec.queue_limit, spec.discard_policy, spec.discarded, spec.last_discard) == (42, 1, counted + 5, moment)


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


def test_change_page_cuts_values_of_a_large_row(staff: HttpClient) -> None:
    """A row change of many megabytes gives a page of a few kilobytes: each long value is cut, saying its length,
    and escaped."""
    from relay import store

    session = store.open_session("large-rows")
    enqueue(session.client_id, [{"id": "1", "text": HOSTILE * 200_000, "blob": b"\xff" * 3_000_000}])
    change = Change.objects.latest("id")
    html = staff.get(reverse("admin:relay_change_change", args=[change.pk])).content.decode()
    assert len(html) < 100_000
    assert HOSTILE not in html
    assert f"({len(HOSTILE) * 200_000:,} characters in all)" in html
    assert f"<td>blob</td><td>(not in the row image)</td><td>0x{'ff' * 4096}… (3,000,000 bytes in all)" in html


def test_times_are_dates_and_lag_is_rounded(staff: HttpClient) -> None:
    changes = staff.get(reverse("admin:relay_change_changelist")).content.decode()
    newest = Change.objects.order_by("-id").first()
    assert newest is not None and f">{newest.timestamp}<" not in changes  # no raw epoch seconds
    assert "event time (utc)" in changes.lower()
    assert "0.6172525882720947" not in staff.get(reverse("admin:relay_lagsample_changelist")).content.decode()
    assert ">0.6<" in staff.get(reverse("admin:relay_lagsample_changelist")).content.decode()
    worker = staff.get(reverse("admin:relay_workerstatus_changelist")).content.decode()
    assert "lag (s)" in worker.lower()


# -- snapshots ----------------------------------------------------------------------------------------------------


def ask_for_snapshot(client: HttpClient, ids: list[int], **fields: str) -> str:
    """The client action's second step: its form submitted (the first step only shows it)."""
    response = client.post(
        reverse("admin:relay_client_changelist"),
        {"action": "take_snapshot", "_selected_action": [str(i) for i in ids], "apply": "Take the snapshot", **fields},
        follow=True,
    )
    assert response.status_code == 200
    return response.content.decode()


def test_snapshot_action_asks_which_tables_first(staff: HttpClient, filled) -> None:
    ids = [filled.client_ids[UNICODE], filled.client_ids[HOSTILE]]
    before = Snapshot.objects.count()
    response = staff.post(
        reverse("admin:relay_client_changelist"), {"action": "take_snapshot", "_selected_action": [str(i) for i in ids]}
    )
    html = response.content.decode()
    assert response.status_code == 200 and 'name="tables"' in html and 'name="where"' in html
    assert UNICODE in html and HOSTILE_ESCAPED in html and HOSTILE not in html
    assert html.count('name="_selected_action"') == 2
    assert Snapshot.objects.count() == before  # nothing asked for yet


def test_snapshot_action_asks_and_reports_refusals(staff: HttpClient, filled) -> None:
    unicode_id, quoted_id = filled.client_ids[UNICODE], filled.client_ids[QUOTED]
    html = ask_for_snapshot(staff, [unicode_id, quoted_id], tables="shop.orders\n\nshop.items \n", where="id > 3")
    made = list(Snapshot.objects.filter(client_id=unicode_id).order_by("id"))
    assert [(s.schema_name, s.table_name, s.where, s.state) for s in made] == [
        ("shop", "orders", "id > 3", "pending"),
        ("shop", "items", "id > 3", "pending"),
    ]
    assert f"Client {UNICODE}: snapshot #{made[0].id} of shop.orders asked for (pending)." in html
    # The quoted client's filter covers shop.orders only: refused, with the reason, and nothing asked for.
    assert not Snapshot.objects.filter(client_id=quoted_id).exists()
    assert "O&#x27;Brien &quot;quoted&quot; &amp; co: refused: client" in html
    assert "has no filter that covers inserts on shop.items" in html
    # Again: the snapshots under way are found, not asked for twice.
    html = ask_for_snapshot(staff, [unicode_id], tables="shop.orders", where="id > 3")
    assert f"snapshot #{made[0].id} of shop.orders already under way (pending)." in html
    assert Snapshot.objects.filter(client_id=unicode_id).count() == 2


def test_snapshot_action_form_errors(staff: HttpClient, filled) -> None:
    html = ask_for_snapshot(staff, [filled.client_ids[UNICODE]], tables="orders")
    assert "&#x27;orders&#x27; is not SCHEMA.TABLE" in html and 'name="tables"' in html
    html = ask_for_snapshot(staff, [filled.client_ids[UNICODE]], tables="  \n ")
    assert "This field is required" in html or "name at least one table" in html
    html = ask_for_snapshot(staff, [filled.client_ids[UNICODE]], tables="shop.orders", where="1=1; DROP TABLE x")
    assert "refused" in html and "second statement" in html
    assert not Snapshot.objects.filter(client_id=filled.client_ids[UNICODE]).exists()


def test_snapshot_list_and_page(staff: HttpClient, filled) -> None:
    html = staff.get(reverse("admin:relay_snapshot_changelist")).content.decode()
    assert "2,500 / ~10,000" in html and "25%, 50.0 rows/s, ETA 2 min 30 s" in html
    assert "1,234 / ~1,200" in html and "0 / ?" in html
    assert HOSTILE not in html and HOSTILE_ESCAPED in html
    failed = Snapshot.objects.get(state=Snapshot.State.FAILED)
    page = staff.get(reverse("admin:relay_snapshot_change", args=[failed.pk])).content.decode()
    assert escape(EVIL_ERROR) in page
    assert HOSTILE not in page
    assert staff.post(reverse("admin:relay_snapshot_change", args=[failed.pk]), {"state": "done"}).status_code == 403


def test_snapshot_cancel_action(staff: HttpClient, filled) -> None:
    running = Snapshot.objects.get(state=Snapshot.State.RUNNING)
    pending = Snapshot.objects.get(state=Snapshot.State.PENDING)
    done = Snapshot.objects.get(state=Snapshot.State.DONE)
    html = action(staff, "snapshot", "cancel_selected", [running.pk, pending.pk, done.pk])
    assert "Cancelled 2 snapshot(s); 1 had already finished." in html
    assert set(Snapshot.objects.filter(pk__in=[running.pk, pending.pk]).values_list("state", flat=True)) == {
        "cancelled"
    }
    running.refresh_from_db()
    assert running.rows_done == 2500 and running.finished is not None
    assert Snapshot.objects.get(pk=done.pk).state == Snapshot.State.DONE


def test_snapshot_actions_need_permissions(client: HttpClient, filled) -> None:
    from django.contrib.auth.models import Permission, User

    snapshots = add_snapshots(filled)
    user = User.objects.create_user("watcher", password=PASSWORD, is_staff=True)
    for codename in ("view_client", "view_snapshot"):
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client.login(username="watcher", password=PASSWORD)
    action(client, "snapshot", "cancel_selected", [snapshots.running.pk])
    assert Snapshot.objects.get(pk=snapshots.running.pk).state == Snapshot.State.RUNNING
    ask_for_snapshot(client, [filled.client_ids[UNICODE]], tables="shop.orders")
    assert not Snapshot.objects.filter(client_id=filled.client_ids[UNICODE]).exists()

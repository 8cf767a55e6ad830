"""The Django admin for every model of the store.

Row changes, queue entries, statistics, checkpoints and the schema are written by the worker and the relay server
only, so they are read-only here; a client is deleted, and its queue purged, through the store API, which knows that
a queue is a seq range and that its entries must go with it. Filters can be edited: the worker notices and reloads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import F, QuerySet, Sum
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join

from relay import store
from relay.models import (
    Change,
    Checkpoint,
    Client,
    ColumnChangeHistory,
    EventCount,
    Filter,
    FilterStamp,
    FilterVersion,
    LagSample,
    PreparedTransaction,
    QueueEntry,
    QueueSample,
    QueueState,
    RelayProcess,
    SchemaBaseline,
    SchemaColumn,
    SchemaTable,
    SchemaVersion,
    ServedEvent,
    Snapshot,
    TableUsage,
    UsageHistory,
    UsageMinute,
    WorkerStatus,
    mask_letters,
)
from relay.store import relayprocess, rowcodec
from relay.store.filters import check_room
from relay.store.snapshots import SnapshotRefused, cancel_snapshots, parse_table, progress, request_snapshots
from relay.store.statistics import reset_statistics
from relay.templatetags.relay_tags import duration, num, unix_time
from relay.web import health
from relay.web.dashboard import client_status, event_type_name


class _ClientCounts(TypedDict):
    """What the client list's queryset annotates each client with."""

    queue: int
    pending: int


if TYPE_CHECKING:
    from typing import TypeAlias

    from django_stubs_ext import WithAnnotations

    AnnotatedClient: TypeAlias = WithAnnotations[Client, _ClientCounts]

admin.site.site_header = "Binlog relay administration"
admin.site.site_title = "Binlog relay"
admin.site.index_title = "Store"
admin.site.site_url = "/"


class EstimatedCountPaginator(Paginator):
    """For tables of millions of rows (changes, queue entries, minute buckets): an unfiltered list takes PostgreSQL's
    planner estimate instead of a COUNT(*) that reads the whole table on every page view."""

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if connection.vendor == "postgresql" and isinstance(queryset, QuerySet) and not queryset.query.where:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                    [queryset.model._meta.db_table],
                )
                row = cursor.fetchone()
            if row and row[0] > 100_000:
                return int(row[0])
        return super().count


class ReadOnlyAdmin(admin.ModelAdmin):
    """Viewable, never edited here: the worker and the relay server own these rows."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# -- statistics reset ---------------------------------------------------------------------------------------------


def _report_reset(modeladmin: admin.ModelAdmin, request: HttpRequest, counts: dict[str, int]) -> None:
    text = ", ".join(f"{value} {name}" for name, value in counts.items())
    modeladmin.message_user(request, f"Statistics reset: {text}.", messages.SUCCESS)


class ResetPermissionMixin:
    """The "reset" permission, and the action that resets all statistics, of every statistics admin."""

    def has_reset_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser or request.user.has_perm("relay.change_tableusage")

    @admin.action(
        description="Reset all statistics (event counts, table usage, minute buckets)", permissions=("reset",)
    )
    def reset_all_statistics(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        _report_reset(cast(admin.ModelAdmin, self), request, reset_statistics())


# -- clients ------------------------------------------------------------------------------------------------------


class FilterForm(forms.ModelForm):
    class Meta:
        model = Filter
        fields = ("client", "event_mask", "schema_name", "table_name", "queue_limit", "discard_policy")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("schema_name", "table_name"):
            if name in self.fields:
                # Names are matched as the source writes them, and MariaDB allows leading spaces in a table's name.
                cast(forms.CharField, self.fields[name]).strip = False

    def clean_event_mask(self) -> int:
        mask = self.cleaned_data["event_mask"]
        if not 1 <= mask <= 7:
            raise forms.ValidationError("a combination of 1 (insert), 2 (update) and 4 (delete): 1 to 7")
        return mask

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        client = cleaned.get("client")
        client_id = client.pk if client is not None else self.instance.client_id
        if self.instance.pk is None and client_id is not None:
            try:
                check_room(client_id)  # the limit ADDFILTER keeps, here too
            except store.StoreError as exc:
                raise forms.ValidationError(str(exc)) from None
        return cleaned


class FilterInline(admin.TabularInline):
    model = Filter
    form = FilterForm
    extra = 0
    fields = ("event_mask", "schema_name", "table_name", "queue_limit", "discard_policy", "created")
    readonly_fields = ("created",)


class QueueStateInline(admin.StackedInline):
    model = QueueState
    can_delete = False
    readonly_fields = ("last_seq", "discarded", "max_queue")
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class SnapshotRequestForm(forms.Form):
    """The client action's intermediate page: which tables, and which of their rows."""

    tables = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60}),
        help_text="SCHEMA.TABLE, one a line (a name may hold spaces and commas, so nothing else separates them)",
    )
    where = forms.CharField(
        required=False,
        widget=forms.TextInput(attrs={"size": 80}),
        help_text="an SQL condition on the table's columns, e.g. <code>created &gt;= '2024-01-01'</code>; "
        "empty: every row",
    )

    def clean_tables(self) -> list[tuple[str, str]]:
        tables: list[tuple[str, str]] = []
        for line in self.cleaned_data["tables"].splitlines():
            if not line.strip():
                continue
            try:
                table = parse_table(line.strip())
            except SnapshotRefused as exc:
                raise forms.ValidationError(str(exc)) from None
            if table not in tables:
                tables.append(table)
        if not tables:
            raise forms.ValidationError("name at least one table")
        return tables


@admin.register(Client)
class ClientAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "name",
        "status",
        "remote_address",
        "last_seen",
        "queue_size",
        "pending_acks",
        "served",
        "discarded",
    )
    list_display_links = ("id", "name")
    list_filter = ("connected",)
    search_fields = ("name", "remote_address")
    ordering = ("id",)
    readonly_fields = (
        "name",
        "token",
        "created",
        "last_seen",
        "connected",
        "session_started",
        "remote_address",
        "served",
        "acked_seq",
        "delivered_seq",
    )
    inlines = (FilterInline, QueueStateInline)
    actions = ("take_snapshot", "purge_queues", "delete_with_queues")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Client]:
        return (
            super()
            .get_queryset(request)
            .select_related("queue_state", "relay_process")
            .annotate(
                queue=F("queue_state__last_seq") - F("acked_seq"),
                pending=F("delivered_seq") - F("acked_seq"),
            )
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a client registers itself by name over the relay protocol

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        # Django's bulk delete would load every queue entry to list it; ours deletes them in SQL.
        actions.pop("delete_selected", None)
        return actions

    @admin.display(description="status")
    def status(self, obj: Client) -> str:
        now = timezone.now()
        return client_status(relayprocess.session_is_live(obj, now), obj.last_seen, now)

    @admin.display(description="queue", ordering="queue")
    def queue_size(self, obj: AnnotatedClient) -> int:
        return max(0, obj.queue or 0)

    @admin.display(description="pending acks", ordering="pending")
    def pending_acks(self, obj: AnnotatedClient) -> int:
        return max(0, obj.pending or 0)

    @admin.display(description="discarded")
    def discarded(self, obj: Client) -> int:
        state = getattr(obj, "queue_state", None)
        return state.discarded if state else 0

    @admin.action(description="Take a snapshot of a table…", permissions=("change",))
    def take_snapshot(self, request: HttpRequest, queryset: QuerySet[Client]) -> TemplateResponse | None:
        """Asks the worker for the tables' current rows in each selected client's queue: first a page asking which
        tables (and which rows), then, on its submission, one request per client (relay/store/snapshots.py), each
        refusal reported with its reason. Asking again for a table under way finds the snapshot already asked for."""
        form = SnapshotRequestForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            tables, where = form.cleaned_data["tables"], form.cleaned_data["where"]
            for client in queryset.order_by("id"):
                under_way = set(client.snapshots.filter(state__in=Snapshot.ACTIVE).values_list("id", flat=True))
                try:
                    snapshots = request_snapshots(client, tables, where)
                except SnapshotRefused as exc:
                    self.message_user(request, f"Client {client.name}: refused: {exc}", messages.ERROR)
                    continue
                for snapshot in snapshots:
                    what = "already under way" if snapshot.id in under_way else "asked for"
                    self.message_user(
                        request,
                        f"Client {client.name}: snapshot #{snapshot.id} of {snapshot.schema_name}."
                        f"{snapshot.table_name} {what} ({snapshot.state}).",
                        messages.SUCCESS,
                    )
            return None
        return TemplateResponse(
            request,
            "admin/relay/client/take_snapshot.html",
            {
                **self.admin_site.each_context(request),
                "title": "Take a snapshot of a table",
                "opts": self.model._meta,
                "form": form,
                "clients": queryset.order_by("id"),
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            },
        )

    @admin.action(description="Purge the selected clients' queues", permissions=("change",))
    def purge_queues(self, request: HttpRequest, queryset: QuerySet[Client]) -> None:
        dropped = sum(store.purge_queue(client.id) for client in queryset)
        self.message_user(request, f"Purged {queryset.count()} queue(s): {dropped} entries dropped.", messages.SUCCESS)

    @admin.action(description="Delete the selected clients with their queues", permissions=("delete",))
    def delete_with_queues(self, request: HttpRequest, queryset: QuerySet[Client]) -> None:
        names = [client.name for client in queryset]
        for client in queryset:
            store.delete_client(client.id)
        self.message_user(request, f"Deleted {len(names)} client(s) and their queues.", messages.SUCCESS)

    def delete_model(self, request: HttpRequest, obj: Client) -> None:
        store.delete_client(obj.id)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Client]) -> None:
        for client in queryset:
            store.delete_client(client.id)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[list[str], dict[str, int], set, list]:
        """The confirmation page's summary, counted in SQL: the default would load and list every queue entry."""
        clients = list(objs)
        ids = [client.id for client in clients]
        entries = QueueEntry.objects.filter(client_id__in=ids).aggregate(n=Sum("count"))["n"] or 0
        filters = Filter.objects.filter(client_id__in=ids).count()
        served = ServedEvent.objects.filter(client_id__in=ids).count()
        listed = [f"Client: {client}" for client in clients]
        counts = {"clients": len(clients), "filters": filters, "queue entries": entries, "served events": served}
        perms_needed = set() if self.has_delete_permission(request) else {"client"}
        return listed, counts, perms_needed, []


@admin.register(Filter)
class FilterAdmin(admin.ModelAdmin):
    form = FilterForm
    list_display = ("id", "client", "schema_name", "table_name", "events", "queue_limit", "discard_policy", "created")
    list_filter = ("discard_policy", "event_mask")
    search_fields = ("client__name", "schema_name", "table_name")
    list_select_related = ("client",)
    autocomplete_fields = ("client",)

    @admin.display(description="events", ordering="event_mask")
    def events(self, obj: Filter) -> str:
        return mask_letters(obj.event_mask)


@admin.register(Snapshot)
class SnapshotAdmin(admin.ModelAdmin):
    """Snapshots are asked for with ``manage.py snapshot`` or the client action, and advanced by the worker: read-only
    here, except that one under way can be cancelled (the rows already queued stay queued)."""

    list_display = ("id", "client", "table", "state", "rows", "progress_shown", "updated")
    list_display_links = ("id", "table")
    list_filter = ("state",)
    search_fields = ("client__name", "schema_name", "table_name")
    list_select_related = ("client",)
    ordering = ("-id",)
    actions = ("cancel_selected",)
    fields = (
        "client",
        "schema_name",
        "table_name",
        "where",
        "state",
        "rows",
        "progress_shown",
        "chunks_done",
        "key_columns",
        "last_key",
        "created",
        "started",
        "updated",
        "finished",
        "error",
    )
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("relay.change_snapshot")

    @admin.display(description="table", ordering="table_name")
    def table(self, obj: Snapshot) -> str:
        return f"{obj.schema_name}.{obj.table_name}"

    @admin.display(description="rows done / total (estimate)", ordering="rows_done")
    def rows(self, obj: Snapshot) -> str:
        total = "?" if obj.rows_total is None else f"~{num(obj.rows_total)}"
        return f"{num(obj.rows_done)} / {total}"

    @admin.display(description="progress")
    def progress_shown(self, obj: Snapshot) -> str:
        shown = progress(obj)
        parts = [] if shown.fraction is None else [f"{shown.fraction:.0%}"]
        if shown.rows_per_second is not None:
            parts.append(f"{num(shown.rows_per_second, 1)} rows/s")
        if obj.active and shown.eta_seconds is not None:
            parts.append(f"ETA {duration(shown.eta_seconds)}")
        return ", ".join(parts) or "\u2013"

    @admin.action(
        description="Cancel the selected snapshots (rows already queued stay queued)", permissions=("cancel",)
    )
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Snapshot]) -> None:
        selected = list(queryset)
        cancelled = cancel_snapshots(selected)
        finished = len(selected) - cancelled
        note = f"; {finished} had already finished" if finished else ""
        self.message_user(request, f"Cancelled {cancelled} snapshot(s){note}.", messages.SUCCESS)


@admin.register(SchemaVersion)
class SchemaVersionAdmin(ReadOnlyAdmin):
    """The schema history: each table's layouts, each valid from the binlog position of the DDL that made it."""

    list_display = ("schema_name", "table_name", "binlog_file", "binlog_pos", "gtid", "exists", "baseline", "recorded")
    list_filter = ("baseline", "exists", "schema_name")
    search_fields = ("schema_name", "table_name", "statement")


@admin.register(SchemaBaseline)
class SchemaBaselineAdmin(ReadOnlyAdmin):
    list_display = ("source", "binlog_file", "binlog_pos", "gtid", "taken", "lower_case_table_names")


@admin.register(FilterVersion)
class FilterVersionAdmin(ReadOnlyAdmin):
    """The number every filter write moves on; the worker reloads its filters when it moved."""

    list_display = ("id", "version")


@admin.register(FilterStamp)
class FilterStampAdmin(ReadOnlyAdmin):
    """The version of each client's last filter write; the worker reloads the filters of the clients stamped past the
    version it loaded."""

    list_display = ("client_id", "version")
    search_fields = ("client_id",)


@admin.register(QueueState)
class QueueStateAdmin(ReadOnlyAdmin):
    list_display = ("client", "last_seq", "max_queue", "discarded")
    search_fields = ("client__name",)
    list_select_related = ("client",)


# -- changes and queues -------------------------------------------------------------------------------------------


@admin.register(Change)
class ChangeAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "schema_name", "table_name", "binlog_file", "binlog_pos", "row_index", "event_time")
    # The stored ``data`` is an encoding (relay/store/rowcodec.py): the page shows the decoded columns instead.
    fields = (
        "kind",
        "schema_name",
        "table_name",
        "binlog_file",
        "binlog_pos",
        "row_index",
        "event_time",
        "gtid",
        "column_values",
    )
    readonly_fields = fields
    list_filter = ("kind",)
    search_fields = ("=schema_name", "=table_name", "=binlog_file", "gtid")
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    ordering = ("-id",)

    @admin.display(description="event time (UTC)", ordering="timestamp")
    def event_time(self, obj: Change) -> str:
        return unix_time(obj.timestamp)

    @admin.display(description="columns")
    def column_values(self, obj: Change) -> str:
        rows = ((c.name, _shown(c.before), _shown(c.after)) for c in rowcodec.decode(obj.data))
        return format_html(
            "<table><tr><th>column</th><th>before</th><th>after</th></tr>{}</table>",
            format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td></tr>", rows),
        )


#: Characters (bytes, for binary data) of a value the change page shows; a longer one is cut, saying its size, so a
#: row of any size (up to 1 GB) gives a page a browser can show.
SHOWN_VALUE_LENGTH = 4096


def _shown(value: object) -> str:
    """A stored value for a person: NULL and missing say so, binary data is shown as hex; a value longer than
    SHOWN_VALUE_LENGTH is cut, with its whole length."""
    if value is None:
        return "NULL"
    if value is rowcodec.MISSING:
        return "(not in the row image)"
    if isinstance(value, bytes):
        if len(value) > SHOWN_VALUE_LENGTH:
            return f"0x{value[:SHOWN_VALUE_LENGTH].hex()}… ({len(value):,} bytes in all)"
        return "0x" + value.hex()
    text = str(value)
    if len(text) > SHOWN_VALUE_LENGTH:
        return f"{text[:SHOWN_VALUE_LENGTH]}… ({len(text):,} characters in all)"
    return text


@admin.register(QueueEntry)
class QueueEntryAdmin(ReadOnlyAdmin):
    list_display = ("id", "client_id", "seq", "change_id")
    search_fields = ("=client__name",)
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    ordering = ("-id",)


@admin.register(ServedEvent)
class ServedEventAdmin(ReadOnlyAdmin):
    list_display = ("served_at", "client", "seq", "kind", "schema_name", "table_name")
    list_filter = ("kind",)
    search_fields = ("client__name", "schema_name", "table_name")
    list_select_related = ("client",)


# -- worker -------------------------------------------------------------------------------------------------------


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    list_display = ("source", "binlog_file", "binlog_pos", "gtid", "updated")
    search_fields = ("source",)


@admin.register(PreparedTransaction)
class PreparedTransactionAdmin(ReadOnlyAdmin):
    """XA transactions prepared on the source, their rows held until its XA COMMIT (relay/worker/xa.py)."""

    list_display = ("source", "xid", "rows", "binlog_file", "binlog_pos", "gtid", "prepared_at")
    search_fields = ("source", "xid")
    exclude = ("changes",)  # pickled rows: nothing to read here


@admin.register(WorkerStatus)
class WorkerStatusAdmin(ReadOnlyAdmin):
    list_display = (
        "source",
        "state",
        "hostname",
        "pid",
        "started",
        "heartbeat",
        "lag",
        "rows",
        "transactions",
        "reconnects",
        "last_error_at",
    )
    list_filter = ("state",)
    search_fields = ("source", "hostname", "last_error")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """A source no worker serves any more (retired, or now named by [Server] SourceName) is forgotten here, one
        at a time: its stopped or failed status would keep /healthz red for ever. A worker that runs keeps its row,
        and a worker that starts again for that source makes it again."""
        stopped = (WorkerStatus.State.STOPPED, WorkerStatus.State.FAILED)
        return obj is not None and obj.state in stopped and request.user.has_perm("relay.delete_workerstatus")

    @admin.display(description="lag (s)", ordering="lag_seconds")
    def lag(self, obj: WorkerStatus) -> str:
        # Computed now, like the dashboard (relay/web/health.py); the stored number is the worker's last measure.
        value = health.lag(obj, timezone.now())
        return "\u2013" if value is None else f"{value:,.1f}"


@admin.register(RelayProcess)
class RelayProcessAdmin(ReadOnlyAdmin):
    list_display = ("hostname", "pid", "addresses", "started", "heartbeat", "alive", "connections")
    search_fields = ("hostname", "addresses")

    @admin.display(description="reporting", boolean=True)
    def alive(self, obj: RelayProcess) -> bool:
        return obj.expires >= timezone.now()


# -- statistics ---------------------------------------------------------------------------------------------------


@admin.register(EventCount)
class EventCountAdmin(ResetPermissionMixin, ReadOnlyAdmin):
    list_display = ("source", "event_type_hex", "event_name", "count")
    list_filter = ("source",)
    search_fields = ("source",)
    actions = ("reset_all_statistics",)

    @admin.display(description="type", ordering="event_type")
    def event_type_hex(self, obj: EventCount) -> str:
        return f"0x{obj.event_type:02X}"

    @admin.display(description="name")
    def event_name(self, obj: EventCount) -> str:
        return event_type_name(obj.event_type)


@admin.register(TableUsage)
class TableUsageAdmin(ResetPermissionMixin, ReadOnlyAdmin):
    list_display = (
        "schema_name",
        "table_name",
        "inserts",
        "updates",
        "deletes",
        "start_inserts",
        "start_updates",
        "start_deletes",
        "last_change_time",
    )
    list_filter = ("schema_name",)
    search_fields = ("schema_name", "table_name")
    actions = ("reset_selected", "reset_all_statistics")

    @admin.display(description="last change (UTC)", ordering="last_change")
    def last_change_time(self, obj: TableUsage) -> str:
        return unix_time(obj.last_change)

    @admin.action(description="Reset the selected tables' counters and minute buckets", permissions=("reset",))
    def reset_selected(self, request: HttpRequest, queryset: QuerySet[TableUsage]) -> None:
        tables = list(queryset.values_list("schema_name", "table_name"))
        _report_reset(self, request, reset_statistics(tables))


@admin.register(UsageMinute)
class UsageMinuteAdmin(ResetPermissionMixin, ReadOnlyAdmin):
    list_display = ("minute_time", "schema_name", "table_name", "inserts", "updates", "deletes")
    search_fields = ("=schema_name", "=table_name")
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    ordering = ("-minute",)
    actions = ("reset_all_statistics",)

    @admin.display(description="minute (UTC)", ordering="minute")
    def minute_time(self, obj: UsageMinute) -> str:
        return unix_time(obj.minute)


@admin.register(UsageHistory)
class UsageHistoryAdmin(ReadOnlyAdmin):
    list_display = (
        "period",
        "start",
        "schema_name",
        "table_name",
        "inserts",
        "updates",
        "deletes",
        "transactions",
        "run",
    )
    list_filter = ("period", "run")
    search_fields = ("schema_name", "table_name", "run")
    date_hierarchy = "start"


@admin.register(ColumnChangeHistory)
class ColumnChangeHistoryAdmin(ReadOnlyAdmin):
    list_display = ("day", "schema_name", "table_name", "column_name", "changed", "compared", "run")
    list_filter = ("run",)
    search_fields = ("schema_name", "table_name", "column_name", "run")
    date_hierarchy = "day"


# -- schema -------------------------------------------------------------------------------------------------------


class SchemaColumnInline(admin.TabularInline):
    model = SchemaColumn
    extra = 0
    can_delete = False
    fields = ("ordinal", "name", "type_name", "type_code", "unsigned", "nullable", "charset")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(SchemaTable)
class SchemaTableAdmin(ReadOnlyAdmin):
    list_display = ("schema_name", "table_name", "primary_key", "first_seen", "last_seen")
    list_filter = ("schema_name",)
    search_fields = ("schema_name", "table_name")
    inlines = (SchemaColumnInline,)


@admin.register(SchemaColumn)
class SchemaColumnAdmin(ReadOnlyAdmin):
    list_display = ("table", "ordinal", "name", "type_name", "type_code", "unsigned", "nullable", "charset")
    list_filter = ("type_name", "unsigned", "nullable")
    search_fields = ("name", "table__schema_name", "table__table_name")
    list_select_related = ("table",)


@admin.register(QueueSample)
class QueueSampleAdmin(ReadOnlyAdmin):
    list_display = ("at", "client", "queue", "discarded", "served")
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    ordering = ("-at",)


@admin.register(LagSample)
class LagSampleAdmin(ReadOnlyAdmin):
    list_display = ("at", "source", "lag_rounded")
    ordering = ("-at",)

    @admin.display(description="lag (s)", ordering="lag")
    def lag_rounded(self, obj: LagSample) -> str:
        return f"{obj.lag:,.1f}"

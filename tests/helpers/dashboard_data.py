"""A store filled the way the worker and the relay server fill it, with hostile names, for the dashboard's tests.

Row changes go through relay.worker.ingest.Ingestor (queues, usage counters, minute buckets, schema, event counts and
the checkpoint in one batch, as the worker writes them); sessions and filters through relay.store, consumption through
the relay server's store calls (tests/helpers/queues.py).
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from binlog.changes import RowChange, Transaction
from binlog.position import Position
from binlog.schemahistory import SchemaHistory
from binlog.schemamodel import Column, SchemaModel, TableDef
from binlog.table import ColumnInfo, TableInfo
from relay import store
from relay.models import Client, ColumnChangeHistory, PreparedTransaction, RelayProcess, UsageHistory, WorkerStatus
from relay.store import relayprocess
from relay.store.schemahistory import StoreHistory
from relay.worker.ingest import Ingestor
from tests.helpers.queues import Consumer

SOURCE = "main"
HOSTILE = '<script>alert("x")</script>'
HOSTILE_ESCAPED = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"
QUOTED = 'O\'Brien "quoted" & co'
UNICODE = "ünïcödé ✓ 客户 🚀"
PASSWORD = "correct horse battery"

INT = 3  # MYSQL_TYPE_LONG
VARCHAR = 15  # MYSQL_TYPE_VARCHAR
BLOB = 252

ORDERS = TableInfo(
    "shop",
    "orders",
    (
        ColumnInfo("id", INT, "int unsigned", unsigned=True, nullable=False),
        ColumnInfo("customer", VARCHAR, "varchar(100)", charset="utf8mb4"),
        ColumnInfo("note", VARCHAR, "varchar(255)", charset="utf8mb4"),
        ColumnInfo("photo", BLOB, "blob", charset="binary"),
    ),
    primary_key=("id",),
)
# A table whose schema, table and column names are each an attack on the page that shows them.
EVIL = TableInfo(
    HOSTILE,
    QUOTED,
    (
        ColumnInfo(HOSTILE, INT, "int"),
        ColumnInfo(UNICODE, VARCHAR, "varchar(10)", charset="utf8mb4"),
    ),
    primary_key=(HOSTILE,),
)
TABLES = [ORDERS, EVIL]


@dataclass
class Filled:
    now: int
    client_ids: dict[str, int]
    rows: int


def make_users() -> tuple[User, User]:
    """An administrator and a dashboard user without admin rights."""
    admin = User.objects.create_superuser("admin", "admin@example.com", PASSWORD)
    viewer = User.objects.create_user("viewer", "viewer@example.com", PASSWORD)
    return admin, viewer


def _change(info: TableInfo, kind: int, index: int, timestamp: int, pos: int) -> RowChange:
    columns = info.column_names
    if info is ORDERS:
        values = (
            str(index),
            f"{HOSTILE} {index}" if index % 2 else UNICODE,
            QUOTED if index % 3 else None,
            b"\x00\xffbin",
        )
    else:
        values = (str(index), f"{UNICODE} {index}")
    before = values if kind in (2, 4) else None
    after = values if kind in (1, 2) else None
    if kind == 2:
        after = (values[0], *(f"{v}!" if isinstance(v, str) else v for v in values[1:]))
    return RowChange(
        info.schema, info.table, kind, columns, before, after, "binlog.000042", pos, 0, timestamp, f"0-1-{pos}", info
    )


def transactions(now: int, count: int = 120) -> list[Transaction]:
    """``count`` transactions spread over the last 24 hours (denser in the last hour), each with a few row changes."""
    result = []
    pos = 4
    for index in range(count):
        age = (index * 797) % (24 * 3600) if index % 3 else (index * 31) % 3600
        timestamp = now - age
        changes = []
        for row, info in enumerate(TABLES if index % 4 == 0 else [ORDERS]):
            kind = (1, 2, 4)[(index + row) % 3]
            pos += 100
            changes.append(_change(info, kind, index, timestamp, pos))
        pos += 31
        result.append(
            Transaction(
                changes,
                Position("binlog.000042", pos, f"0-1-{index + 1}"),
                timestamp=timestamp,
                gtid=f"0-1-{index + 1}",
                event_counts={0x02: 1, 0x13: len(changes), 0x1E: 1, 0x10: 1, 0xA2: 1, 0xA0: 1},
            )
        )
    result.sort(key=lambda tx: tx.position.pos)
    return result


def schema_history() -> SchemaHistory:
    """A baseline of shop.orders, then an ALTER read from the stream: the worker writes the version it made with the
    checkpoint of its batch."""
    history = SchemaHistory(databases={"shop": "utf8mb4"})
    model = SchemaModel(databases={"shop": "utf8mb4"})
    columns = (Column("id", "int", "int(11)", None, False), Column("note", "varchar", "varchar(20)", "utf8mb4"))
    model.put("shop", "orders", TableDef(columns, ("id",)))
    StoreHistory(SOURCE).save_baseline(history, model, Position("binlog.000042", 4, "0-1-0"))
    history.statement(
        "shop", "ALTER TABLE orders ADD COLUMN amount DECIMAL(10,2) AFTER id", Position("binlog.000042", 50, "")
    )
    return history


def fill_store(now: int | None = None, transaction_count: int = 120) -> Filled:
    now = int(now if now is not None else time.time())
    moment = timezone.now()
    WorkerStatus.objects.update_or_create(
        source=SOURCE,
        defaults={
            "state": WorkerStatus.State.CONNECTED,
            "pid": 4242,
            "hostname": "relay-1",
            "started": moment,
            "heartbeat": moment,
            "lag_seconds": 1.5,
            "reconnects": 2,
            "source_file": "binlog.000042",
            "source_pos": 123456,
            "last_error": f"lost connection: {HOSTILE}",
            "last_error_at": moment,
        },
    )
    # An XA transaction prepared on the source, its rows held until its commit (relay/worker/xa.py).
    PreparedTransaction.objects.create(
        source=SOURCE,
        xid=f"X'{HOSTILE.encode().hex()}',X'',1",
        gtid="0-1-41",
        binlog_file="binlog.000042",
        binlog_pos=123000,
        rows=0,
        changes=pickle.dumps([]),
    )
    # A relay process holding the sessions, and one that stopped reporting a minute ago.
    relay_id = relayprocess.register(
        relayprocess.ProcessInfo(f"relay-{HOSTILE}", 4343, "0.0.0.0:6001", 1_700_000_000, moment), 5.0
    )
    gone_id = relayprocess.register(relayprocess.ProcessInfo("relay-gone", 4444, "0.0.0.0:6002", 1, moment), 5.0)
    RelayProcess.objects.filter(id=gone_id).update(
        heartbeat=moment - timezone.timedelta(minutes=1), expires=moment - timezone.timedelta(seconds=30)
    )
    sessions = {}
    for name, remote in ((HOSTILE, "10.0.0.1:50000"), (QUOTED, "[::1]:6002"), (UNICODE, "192.168.1.9:4000")):
        sessions[name] = store.open_session(name, remote, relay_id)
    clients = {name: session.client_id for name, session in sessions.items()}
    store.add_filter(clients[HOSTILE], 7, "shop", "*", 0, 0)
    store.add_filter(clients[HOSTILE], 1, HOSTILE, "*", 50, 1)
    store.add_filter(clients[QUOTED], 3, "shop", "orders", 10, 2)
    store.add_filter(clients[UNICODE], 7, "*", "*", 0, 0)
    batch = transactions(now, transaction_count)
    ingestor = Ingestor(SOURCE)
    ingestor.history = schema_history()
    with transaction.atomic():
        result = ingestor.apply(batch)
    # Some consumption: the hostile client polls (history), the unicode one fetches with manual ack (pending acks).
    hostile = Consumer(sessions[HOSTILE])
    for _ in range(12):
        if hostile.poll() is None:
            break
    Consumer(sessions[UNICODE]).fetch(5, manual_ack=True)
    # The quoted client went away an hour ago.
    Client.objects.filter(id=clients[QUOTED]).update(connected=False, last_seen=moment - timezone.timedelta(hours=1))
    hour = moment.replace(minute=0, second=0, microsecond=0)
    day = hour.replace(hour=0)
    for offset in range(6):  # the pipeline's usage history: six hours and six days before this one
        periods = [
            ("hour", hour - timezone.timedelta(hours=offset + 1), (10 * offset, offset, 1, 5)),
            ("day", day - timezone.timedelta(days=offset + 1), (100 * offset, 10, 3, 50)),
        ]
        for info in TABLES:
            for period, start, (inserts, updates, deletes, commits) in periods:
                UsageHistory.objects.create(
                    period=period,
                    start=start,
                    schema_name=info.schema,
                    table_name=info.table,
                    inserts=inserts,
                    updates=updates,
                    deletes=deletes,
                    transactions=commits,
                    run=f"run-{HOSTILE}",
                )
    for offset in range(3):  # the pipeline's column changes: every column compared, the second one changed
        for info in TABLES:
            for index, column in enumerate(info.columns):
                ColumnChangeHistory.objects.create(
                    day=(day - timezone.timedelta(days=offset + 1)).date(),
                    schema_name=info.schema,
                    table_name=info.table,
                    column_name=column.name,
                    changed=7 if index == 1 else 0,
                    compared=7,
                    run=f"run-{HOSTILE}",
                )
    return Filled(now, clients, result.rows)

"""Bulk writes: COPY text on PostgreSQL (escaping, generated line formatters) and executemany on SQLite."""

import pytest

from relay.models import Change
from relay.worker import bulk
from relay.worker.ingest import CHANGE_COLUMNS as COLUMNS

pytestmark = pytest.mark.django_db(transaction=True)

AWKWARD = 'tab\there, new\nline, cr\r, back\\slash \\N, quote " and ü'


@pytest.mark.parametrize("kinds", [None, "issisiiiss"])
def test_rows_round_trip_with_awkward_text(kinds: str | None) -> None:
    first = bulk.allocate_ids(Change._meta.db_table, 2)
    rows = [
        (first, "s", AWKWARD, 1, "binlog.000001", 4, 0, 1_700_000_000, "", AWKWARD),
        (first + 1, "s\\", "t", 4, "f", 2**40, 3, 0, "0-1-2", "{}"),
    ]
    bulk.insert_rows(Change._meta.db_table, COLUMNS, rows, kinds=kinds)
    stored = list(Change.objects.order_by("id").values_list(*COLUMNS))
    assert stored == rows
    assert bulk.allocate_ids(Change._meta.db_table, 5) >= first + 2

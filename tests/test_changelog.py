"""The change log ([Logger]): the original's line layout with correct escaping, JSON lines, schemas and excludes."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from binlog import NOT_PRESENT, Position, RowChange, Transaction
from binlog.table import ColumnInfo, TableInfo
from relay.config import LoggerConfig
from relay.worker.changelog import ChangeLog

COLUMNS = (
    ColumnInfo("id", 3, "int"),
    ColumnInfo("price", 246, "decimal(10,2)"),
    ColumnInfo("name", 15, "varchar(50)", charset="utf8mb4"),
    ColumnInfo("body", 252, "text", charset="utf8mb4"),
    ColumnInfo("seen", 18, "datetime"),
    ColumnInfo("score", 5, "double"),
)
TABLE = TableInfo("shop", "orders", COLUMNS)
NAMES = tuple(column.name for column in COLUMNS)
# 2026-03-04 05:06:07 UTC
MOMENT = 1772600767


@pytest.fixture(autouse=True)
def _utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The log's times are local times: pin the zone so the expected lines hold anywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def change(kind: int, before: tuple | None, after: tuple | None, table: TableInfo = TABLE) -> RowChange:
    return RowChange(
        table.schema, table.table, kind, NAMES, before, after, "binlog.000007", 1234, 0, MOMENT, "0-1-9", table
    )


def write(tmp_path: Path, changes: list[RowChange], **config: object) -> ChangeLog:
    settings = {"path": tmp_path, "schemas": ("shop",), "excludes": frozenset(), "formats": frozenset({"text"})}
    settings.update(config)
    log = ChangeLog(LoggerConfig(**settings))  # type: ignore[arg-type]
    log.write([Transaction(changes, Position("binlog.000007", 1300))])
    log.close()
    return log


def test_original_line_layout(tmp_path: Path) -> None:
    row = ("7", "12.50", 'say "hi"', "long text", "2026-03-04 05:06:07", None)
    write(
        tmp_path,
        [
            change(1, None, row),
            change(2, row, ("7", "13.00", "x", "t", "0000-00-00 00:00:00", "1.5")),
            change(4, row, None),
        ],
    )
    lines = (tmp_path / "relaylogs-20260304.txt").read_text().splitlines()
    # TEXT/BLOB left out; numbers bare with NULL as NULL; other values quoted, NULL empty, the zero datetime 0.
    assert lines == [
        '05:06:07;shop;orders;I;id;7;price;"12.50";name;"say \\"hi\\"";seen;"2026-03-04 05:06:07";score;NULL',
        '05:06:07;shop;orders;U;id;7;7;price;"12.50";"13.00";name;"say \\"hi\\"";"x";'
        'seen;"2026-03-04 05:06:07";0;score;NULL;1.5',
        '05:06:07;shop;orders;D;id;7;price;"12.50";name;"say \\"hi\\"";seen;"2026-03-04 05:06:07";score;NULL',
    ]


def test_escaping_keeps_one_row_per_line(tmp_path: Path) -> None:
    row = ("1", None, "a;b\nc\rd\\e", "", None, "2")
    write(tmp_path, [change(1, None, row)])
    (line,) = (tmp_path / "relaylogs-20260304.txt").read_text().splitlines()
    assert line == '05:06:07;shop;orders;I;id;1;price;;name;"a;b\\nc\\rd\\\\e";seen;;score;2'


def test_schemas_excludes_and_json_lines(tmp_path: Path) -> None:
    other = TableInfo("crm", "people", COLUMNS)
    skipped = TableInfo("shop", "audit", COLUMNS)
    ignored = TableInfo("elsewhere", "t", COLUMNS)
    row = ("1", "2.00", "n", "b", None, "3")
    write(
        tmp_path,
        [
            change(1, None, row),
            change(1, None, row, other),
            change(1, None, row, skipped),
            change(1, None, row, ignored),
            change(2, ("1", "2.00", "n", NOT_PRESENT, None, "3"), ("1", "2.00", b"\xff", NOT_PRESENT, None, "4")),
        ],
        schemas=("shop", "crm"),
        excludes=frozenset({"audit"}),
        formats=frozenset({"text", "json"}),
    )
    text = (tmp_path / "relaylogs-20260304.txt").read_text().splitlines()
    assert [line.split(";")[1:4] for line in text] == [
        ["shop", "orders", "I"],
        ["crm", "people", "I"],
        ["shop", "orders", "U"],
    ]
    records = [json.loads(line) for line in (tmp_path / "relaylogs-20260304.jsonl").read_text().splitlines()]
    assert [(r["schema"], r["table"], r["type"]) for r in records] == [
        ("shop", "orders", "insert"),
        ("crm", "people", "insert"),
        ("shop", "orders", "update"),
    ]
    update = records[2]
    assert update["after"] == {"id": "1", "price": "2.00", "name": "/w==", "seen": None, "score": "4"}
    assert "body" not in update["before"]  # not in the row image: left out, not null
    assert (update["file"], update["pos"], update["gtid"], update["time"]) == ("binlog.000007", 1234, "0-1-9", MOMENT)


def test_a_new_day_opens_a_new_file_and_a_disabled_logger_writes_nothing(tmp_path: Path) -> None:
    log = ChangeLog(LoggerConfig(tmp_path, ("shop",), frozenset(), frozenset({"text"})))
    first = change(1, None, ("1", None, "a", "b", None, "1"))
    later = RowChange("shop", "orders", 1, NAMES, None, first.after, "b", 1, 0, MOMENT + 86_400, "", TABLE)
    log.write([Transaction([first, later], Position("b", 2))])
    log.close()
    assert sorted(os.listdir(tmp_path)) == ["relaylogs-20260304.txt", "relaylogs-20260305.txt"]
    quiet = ChangeLog(LoggerConfig(tmp_path / "off", (), frozenset(), frozenset({"text"})))
    assert quiet.write([Transaction([first], Position("b", 2))]) == 0
    assert not (tmp_path / "off").exists()

"""Large transactions come in parts, so no reader ever holds all of their rows at once."""

from __future__ import annotations

from binlog import read_binlog_files
from binlog.changes import ROW_BYTES
from binlog.files import iter_file_events
from binlog.parser import EventDecoder
from devtools.sandbox import MariaDB


def decode_in_parts(server: MariaDB, chunk_rows: int) -> list:
    server.execute("FLUSH BINARY LOGS")
    decoder = EventDecoder(None, chunk_rows=chunk_rows)
    out = []
    for path in server.binlog_files()[-2:-1]:
        decoder.file = path.name
        for event in iter_file_events(path):
            trx = decoder.feed(event)
            if trx is not None and (trx.changes or trx.part):  # a last part may carry no rows
                out.append(trx)
    return out


def test_a_large_transaction_comes_in_numbered_parts(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)", "FLUSH BINARY LOGS")
    with server.connect(schema) as conn, conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.executemany("INSERT INTO t VALUES (%s)", [(i,) for i in range(1, 6001)])
        cur.execute("COMMIT")
        cur.execute("INSERT INTO t VALUES (9999)")
    parts = decode_in_parts(server, chunk_rows=1000)
    big = [trx for trx in parts if trx.gtid == parts[0].gtid]
    # Parts end at rows-event boundaries (an event holds many rows), so a part has at least chunk_rows rows.
    assert len(big) >= 3
    assert [(trx.partial, trx.part) for trx in big] == [(True, n) for n in range(len(big) - 1)] + [
        (False, len(big) - 1)
    ]
    assert all(1000 <= len(trx.changes) < 3000 for trx in big[:-1])
    assert len(big[-1].changes) < 3000
    ids = [change.after[0] for trx in big for change in trx.changes]
    assert ids == [str(i) for i in range(1, 6001)]
    # Partial parts resume before the transaction; the last one after it.
    assert all(trx.position == big[0].position for trx in big[:-1])
    assert big[-1].position.pos > max(change.pos for trx in big for change in trx.changes)
    small = parts[-1]
    assert (small.partial, small.part, [c.after[0] for c in small.changes]) == (False, 0, ["9999"])
    # Without a chunk size (the file reader's default) the same transaction is whole.
    whole = [trx for trx in read_binlog_files(server.binlog_files()[-2:-1]) if trx.changes]
    assert [len(trx.changes) for trx in whole] == [6000, 1]


def test_a_transaction_of_wide_rows_comes_in_parts_of_bounded_bytes(fresh_schema: tuple[MariaDB, str]) -> None:
    """Parts are cut at chunk_rows rows or chunk_rows * ROW_BYTES bytes of rows events, whichever comes first: a
    transaction of a few hundred wide rows (large JSON or BLOB values) is not held whole, and every part says its
    size, which the worker's hand-off and batches weigh."""
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.w (id INT PRIMARY KEY, doc MEDIUMTEXT)", "FLUSH BINARY LOGS")
    value = "x" * 20_000
    with server.connect(schema) as conn, conn.cursor() as cur:
        cur.execute("BEGIN")
        for i in range(1, 61):
            cur.execute("INSERT INTO w VALUES (%s, %s)", (i, value))
        cur.execute("COMMIT")
    chunk_rows = 10  # 40,960 bytes: two of these rows
    parts = decode_in_parts(server, chunk_rows=chunk_rows)
    big = [trx for trx in parts if trx.changes and trx.gtid == parts[0].gtid]
    assert [change.after[0] for trx in big for change in trx.changes] == [str(i) for i in range(1, 61)]
    assert len(big) >= 20  # by rows alone: 6 parts
    limit = chunk_rows * ROW_BYTES
    assert all(limit <= trx.size < limit + 25_000 for trx in big[:-1]), [trx.size for trx in big]
    assert all(len(trx.changes) < chunk_rows for trx in big)
    assert sum(trx.size for trx in big) > 60 * len(value)
    assert all(trx.weight >= len(trx.changes) + chunk_rows for trx in big[:-1])  # what the worker counts

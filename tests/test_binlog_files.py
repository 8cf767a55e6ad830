"""Binlog files read from a path, from a file object in chunks and from bytes: the same events, the same errors."""

from __future__ import annotations

import contextlib
import io
from collections import Counter
from pathlib import Path

import pytest

from binlog import TruncatedEventError, cli, read_binlog_files
from binlog.constants import GTID_EVENT, LOG_EVENT_BINLOG_IN_USE_F
from binlog.errors import BinlogError
from binlog.files import iter_events, iter_file_events, read_binlog_contents
from devtools.sandbox import MariaDB


@pytest.fixture(scope="module")
def workload_file(mariadb: MariaDB, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A binlog file of a few hundred row changes in events of different sizes, copied out of the server."""
    schema = "files_chunks"
    mariadb.execute(f"DROP DATABASE IF EXISTS `{schema}`", f"CREATE DATABASE `{schema}`", "FLUSH BINARY LOGS")
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(200))",
        "INSERT INTO t SELECT seq, REPEAT('x', seq % 200) FROM seq_1_to_300",
        "UPDATE t SET v = CONCAT(v, 'y') WHERE id % 3 = 0",
        "DELETE FROM t WHERE id > 250",
        database=schema,
    )
    source = mariadb.binlog_files()[-1]
    mariadb.execute("FLUSH BINARY LOGS", f"DROP DATABASE `{schema}`")
    copy = tmp_path_factory.mktemp("binlog") / source.name
    copy.write_bytes(source.read_bytes())
    return copy


def rows(transactions: object) -> list[tuple]:
    return [(c.file, c.pos, c.kind, c.before, c.after) for t in transactions for c in t.changes]  # type: ignore[attr-defined]


@pytest.mark.parametrize("chunk_size", [1, 7, 19, 4096, 1 << 20])
def test_chunked_reads_split_the_same_events_as_whole_bytes(workload_file: Path, chunk_size: int) -> None:
    """Chunks smaller than an event header, than an event, and larger than the file: the same events."""
    data = workload_file.read_bytes()
    whole = list(iter_events(data, name=workload_file.name))
    assert b"\xfebin" + b"".join(whole) == data and len(whole) > 10
    with workload_file.open("rb") as handle:
        assert list(iter_events(handle, name=workload_file.name, chunk_size=chunk_size)) == whole
    assert list(iter_file_events(workload_file)) == whole
    # A start position: the format description, then a jump past what the buffer holds to an event boundary.
    boundary = 4 + sum(len(e) for e in whole[:5])
    with workload_file.open("rb") as handle:
        skipped = list(iter_events(handle, name=workload_file.name, start=boundary, chunk_size=chunk_size))
    assert skipped == [whole[0], *whole[5:]]


def test_contents_decode_like_files(workload_file: Path) -> None:
    from_files = rows(read_binlog_files([workload_file]))
    assert Counter(kind for _, _, kind, _, _ in from_files) == {1: 300, 2: 100, 4: 50}
    uri = f"hdfs://archive/binlogs/{workload_file.name}"
    data = workload_file.read_bytes()
    assert rows(read_binlog_contents([(uri, data)])) == from_files
    assert rows(read_binlog_contents([(uri, io.BytesIO(data))])) == from_files
    assert {r[0] for r in from_files} == {workload_file.name}  # positions name the file, not its folder or URI


def test_start_position_skips_in_every_form(workload_file: Path) -> None:
    data = workload_file.read_bytes()
    transactions = [t for t in read_binlog_files([workload_file]) if t.changes]
    all_rows = rows(transactions)
    boundary = next(t.position.pos for t in transactions if t.changes[0].kind == 2)  # after the UPDATE commits
    expected = [r for r in all_rows if r[1] > boundary]
    assert [r[2] for r in expected] == [4] * 50
    assert rows(read_binlog_files([workload_file], start=boundary)) == expected
    assert rows(read_binlog_contents([(workload_file.name, data)], start=boundary)) == expected
    chunked = read_binlog_contents([(workload_file.name, io.BytesIO(data))], start=boundary)
    assert rows(chunked) == expected


def test_truncation_and_garbage_read_the_same_from_every_form(workload_file: Path, tmp_path: Path) -> None:
    data = workload_file.read_bytes()
    cut = data[: len(data) // 2]
    path = tmp_path / "binlog.000777"
    path.write_bytes(cut)
    messages = set()
    for content in (cut, io.BytesIO(cut)):
        with pytest.raises(TruncatedEventError) as caught:
            list(iter_events(content, name=str(path), chunk_size=64))
        messages.add(str(caught.value))
    with pytest.raises(TruncatedEventError) as caught:
        list(iter_file_events(path))
    messages.add(str(caught.value))
    assert len(messages) == 1
    assert f"{path}: event at position " in messages.pop()

    for garbage in (b"", b"\xfeb", b"not a binlog"):
        with pytest.raises(BinlogError, match=r"x\.1 is not a binlog file"):
            list(iter_events(io.BytesIO(garbage), name="x.1"))
    with pytest.raises(TruncatedEventError, match="impossible size 3"):
        list(iter_events(b"\xfebin" + bytes(9) + (3).to_bytes(4, "little") + bytes(6), name="x.1"))
    with pytest.raises(TruncatedEventError, match="file ends inside the event header at position 4"):
        list(iter_events(b"\xfebin" + bytes(10), name="x.1"))


def test_a_closed_file_that_ends_inside_a_transaction_is_reported_after_the_transactions_before_it(
    workload_file: Path, tmp_path: Path
) -> None:
    """A source writes each transaction into one file whole: a closed file that ends between two events of one was
    cut there. Its earlier transactions are read; then the cut is an error naming the file and where the open
    transaction began, in the library and in ``dump``. A file the source is still writing (in use) may end so."""
    data = workload_file.read_bytes()
    position, starts = 4, []
    for event in iter_events(data, name=workload_file.name):
        if event[4] == GTID_EVENT:
            starts.append(position)
        position += len(event)
    last_gtid = starts[-1]  # the last transaction: a GTID, its TABLE_MAP and rows events, its commit
    whole = list(read_binlog_files([workload_file]))
    expected = [trx for trx in whole if trx.position.pos <= last_gtid]
    assert expected and len(expected) < len(whole)
    for cut_after in (1, 2):  # after the transaction's GTID event, after its TABLE_MAP
        end = last_gtid
        for _ in range(cut_after):
            end += int.from_bytes(data[end + 9 : end + 13], "little")
        path = tmp_path / f"cut-{cut_after}" / workload_file.name
        path.parent.mkdir()
        path.write_bytes(data[:end])
        read: list[object] = []
        with pytest.raises(TruncatedEventError) as caught:
            read.extend(read_binlog_contents([(str(path), path.read_bytes())]))
        assert rows(read) == rows(expected)
        message = str(caught.value)
        assert message.startswith(f"{path}: the file ends inside a transaction begun after position ")
        assert f" begun after position {expected[-1].position.pos}, before its commit" in message

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli.main(["dump", str(path)])
        assert status == 2
        assert err.getvalue() == f"error: {message}\n"
        assert out.getvalue().count("\n") == sum(len(trx.changes) for trx in expected)

        # The same bytes with "in use" set in the format description: a live file's open end, read up to its commit.
        live = bytearray(data[:end])
        live[4 + 17] |= LOG_EVENT_BINLOG_IN_USE_F
        assert rows(read_binlog_contents([(str(path), bytes(live))])) == rows(expected)

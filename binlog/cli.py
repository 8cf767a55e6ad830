"""Command line: ``python -m binlog dump|tail|check``."""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO

from binlog.changes import NOT_PRESENT, Row, RowChange, Transaction
from binlog.check import preflight, summary
from binlog.errors import BinlogError
from binlog.files import read_binlog_files
from binlog.position import Position
from binlog.schema import InformationSchemaProvider, SchemaProvider
from binlog.settings import SourceSettings

# The replica ids `tail` and `check` register with by default. A source keeps one dump per server id and drops the
# older one when a second replica registers with the same id, so these tools must never use the worker's id: the
# relay's configuration refuses a ReplicaServerID in this range, and each run takes its own id from the process id
# (two tails at once do not knock each other off either).
TOOL_SERVER_IDS = range(0xFE000000, 0xFF000000)


def tool_server_id(pid: int | None = None) -> int:
    """This process's replica id, in :data:`TOOL_SERVER_IDS`."""
    return TOOL_SERVER_IDS.start + (os.getpid() if pid is None else pid) % len(TOOL_SERVER_IDS)


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def _image(change: RowChange, image: Row | None) -> dict[str, Any] | None:
    if image is None:
        return None
    return {name: _json_value(v) for name, v in zip(change.columns, image, strict=True) if v is not NOT_PRESENT}


def change_as_json(change: RowChange) -> str:
    return json.dumps(
        {
            "file": change.file,
            "pos": change.pos,
            "row": change.row,
            "timestamp": change.timestamp,
            "gtid": change.gtid,
            "schema": change.schema,
            "table": change.table,
            "type": change.kind_name,
            "before": _image(change, change.before),
            "after": _image(change, change.after),
        },
        ensure_ascii=False,
    )


def _text_value(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return repr(value)


def change_as_text(change: RowChange) -> str:
    parts = [f"{change.file}:{change.pos}#{change.row}", change.gtid or "-", change.kind_name,
             f"{change.schema}.{change.table}"]  # fmt: skip
    for label, image in (("before", change.before), ("after", change.after)):
        if image is not None:
            values = ", ".join(
                f"{name}={_text_value(v)}"
                for name, v in zip(change.columns, image, strict=True)
                if v is not NOT_PRESENT
            )
            parts.append(f"{label}: {values}")
    return " ".join(parts)


def print_changes(transactions: Iterable[Transaction], out: TextIO, as_json: bool) -> int:
    count = 0
    render = change_as_json if as_json else change_as_text
    for trx in transactions:
        for change in trx.changes:
            out.write(render(change) + "\n")
            count += 1
        if trx.changes:
            out.flush()
    return count


def _settings(args: argparse.Namespace) -> SourceSettings:
    return SourceSettings(
        host=args.host,
        port=args.port,
        user=args.user,
        password=args.password,
        server_id=args.server_id if args.server_id is not None else tool_server_id(),
        heartbeat_seconds=args.heartbeat,
    )


def _add_connection_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument("--host", default="127.0.0.1" if not required else None, required=required)
    parser.add_argument("--port", type=int, default=3306)
    parser.add_argument("--user", default="root")
    parser.add_argument("--password", default="")
    parser.add_argument(
        "--server-id",
        type=int,
        default=None,
        help=f"replica id to register with (default: {TOOL_SERVER_IDS.start:#x} + the process id, an id the relay "
        "worker never uses)",
    )
    parser.add_argument("--heartbeat", type=float, default=5.0, help="heartbeat period in seconds")


def _cmd_dump(args: argparse.Namespace) -> int:
    provider: SchemaProvider | None = None
    if args.host and args.follow_ddl:
        # The schema read now stands for the start of the first file; each DDL in the files is applied to it.
        from binlog.schemahistory import SchemaHistory, pymysql_query, read_model

        query, close = pymysql_query(_settings(args).schema_connect_args())
        try:
            model = read_model(query)
        finally:
            close()
        history = SchemaHistory()
        history.set_baseline(model, Position(os.path.basename(args.files[0]), args.start_position))
        provider = history
    elif args.host:
        provider = InformationSchemaProvider(_settings(args).schema_connect_args())
    transactions = read_binlog_files(args.files, schema_provider=provider, start=args.start_position)
    print_changes(transactions, sys.stdout, args.json)
    return 0


def _stream(args: argparse.Namespace) -> Iterator[Transaction]:
    from binlog.stream import BinlogStream

    start = None
    if args.start_file or args.gtid:
        start = Position(args.start_file or "", args.start_position, args.gtid or "")
    stream = BinlogStream(_settings(args), start, blocking=not args.stop_at_end)
    try:
        for trx in stream:
            yield trx
            stream.confirm(trx.position)
    finally:
        stream.close()


def _cmd_tail(args: argparse.Namespace) -> int:
    with contextlib.suppress(KeyboardInterrupt):
        print_changes(_stream(args), sys.stdout, args.json)
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    settings = _settings(args)
    problems = preflight(settings)
    for line in problems:
        print(line)
    if not problems:
        info = summary(settings)
        print("OK: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m binlog", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    dump = sub.add_parser("dump", help="print the row changes in binlog files")
    dump.add_argument("files", nargs="+", metavar="FILE")
    dump.add_argument("--json", action="store_true", help="one JSON object per row change")
    dump.add_argument("--start-position", type=int, default=4, help="start at this position of the first file")
    dump.add_argument(
        "--follow-ddl",
        action="store_true",
        help="with --host: read the schema once, take it as the schema at the start of the first file, and apply "
        "each DDL statement in the files to it (column names of their own time; @1, @2... where a TABLE_MAP "
        "disagrees)",
    )
    _add_connection_arguments(dump, required=False)
    dump.set_defaults(host=None, func=_cmd_dump)

    tail = sub.add_parser("tail", help="stream row changes from a server")
    _add_connection_arguments(tail, required=False)
    tail.add_argument("--json", action="store_true")
    tail.add_argument("--start-file", help="binlog file to start at (default: the current position)")
    tail.add_argument("--start-position", type=int, default=4)
    tail.add_argument("--gtid", help="GTID state to start after (MariaDB 0-1-42 / MySQL uuid:1-42)")
    tail.add_argument("--stop-at-end", action="store_true", help="stop at the end of the binlog instead of waiting")
    tail.set_defaults(func=_cmd_tail)

    check = sub.add_parser("check", help="preflight: what the source lacks, one line each")
    _add_connection_arguments(check, required=False)
    check.set_defaults(func=_cmd_check)

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    command: Callable[[argparse.Namespace], int] = args.func
    try:
        return command(args)
    except BinlogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0

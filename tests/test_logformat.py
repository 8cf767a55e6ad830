"""Log lines stay lines: a name or message from outside (a source's table name, a client's name, a server's error)
cannot forge a log line or send a terminal escape, in the relay's processes and in ``python -m binlog``."""

from __future__ import annotations

import io
import logging

from binlog import cli
from binlog.logformat import OneLineFormatter, one_line

HOSTILE = "orders\n2026-11-27 03:00:00 INFO relay.worker: all good\r\x1b[2J\u2028\u202etxt.exe"


def _written(formatter: logging.Formatter, message: str, *args: object, exc: BaseException | None = None) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    log = logging.getLogger("relay.test.logformat")
    log.propagate = False
    log.addHandler(handler)
    try:
        if exc is None:
            log.warning(message, *args)
        else:
            try:
                raise exc
            except type(exc):
                log.exception(message, *args)
    finally:
        log.removeHandler(handler)
        log.propagate = True
    return stream.getvalue()


def test_a_hostile_name_stays_on_its_line_as_escapes() -> None:
    out = _written(OneLineFormatter("%(levelname)s %(name)s: %(message)s"), "table %s changed", HOSTILE)
    assert out.count("\n") == 1 and out.endswith("\n")
    assert "orders\\x0a2026-11-27 03:00:00 INFO" in out
    assert "\\x0d\\x1b[2J\\u2028\\u202etxt.exe" in out
    assert "\r" not in out and "\x1b" not in out and "\u2028" not in out and "\u202e" not in out


def test_a_traceback_keeps_its_lines_and_escapes_the_rest() -> None:
    out = _written(OneLineFormatter("%(message)s"), "failed", exc=ValueError("bad \x1b]0;title\x07 name"))
    lines = out.splitlines()
    assert lines[0] == "failed" and lines[1].startswith("Traceback")
    assert "ValueError: bad \\x1b]0;title\\x07 name" in lines[-1]
    assert "\x1b" not in out and "\x07" not in out


def test_plain_text_is_unchanged() -> None:
    text = "binlog.000003:4 `shop`.`naïve ünïcode 表` \\n stays"
    assert one_line(text) == text


def test_the_relay_processes_and_the_command_line_write_with_it() -> None:
    from django.conf import settings

    assert settings.LOGGING["formatters"]["plain"]["()"] == "binlog.logformat.OneLineFormatter"
    assert any(isinstance(handler.formatter, OneLineFormatter) for handler in logging.getLogger().handlers)
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers = []
    try:
        cli._setup_logging()
        assert [type(handler.formatter) for handler in root.handlers] == [OneLineFormatter]
    finally:
        root.handlers = saved

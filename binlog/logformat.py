"""Log lines that stay lines: names and messages that come from outside (a source's schema and table names, a client's
name, a server's error text) may hold newlines and other control characters, and written as they are they would
forge log lines or terminal escapes. The formatter writes them as escapes instead."""

from __future__ import annotations

import logging
import re
from types import TracebackType

# C0 and C1 controls and DEL; the Unicode line and paragraph separators; the bidirectional overrides and isolates,
# which reorder what a terminal shows.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def one_line(text: str) -> str:
    """``text`` with every control or reordering character written as its escape (``\\x0a``, ``\\u202e``)."""
    return _UNSAFE.sub(_escape, text)


class OneLineFormatter(logging.Formatter):
    """A record's message on one line whatever it quotes; a traceback keeps its own lines, each escaped likewise."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = one_line(record.message)
        return super().formatMessage(record)

    def formatException(
        self, ei: tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]
    ) -> str:
        return "\n".join(one_line(line) for line in super().formatException(ei).split("\n"))

    def formatStack(self, stack_info: str) -> str:
        return "\n".join(one_line(line) for line in stack_info.split("\n"))

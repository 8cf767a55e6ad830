"""The loggers of the modules that decode binlogs, made on first use.

``python -m binlog dump`` of sound files logs nothing, and importing ``logging`` (with the threading, traceback and
string machinery it pulls in) is a noticeable part of such a short process; so these modules ask for their logger when
they have something to say, and the command line says here how logging is to be set up if it ever is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging

_setup: Callable[[], None] | None = None


def setup_on_first_use(setup: Callable[[], None]) -> None:
    """Run ``setup`` (a ``logging.basicConfig``, say) before the first message of :func:`logger`'s loggers."""
    global _setup
    _setup = setup


def logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)``, logging set up first if the command line asked for it."""
    global _setup
    import logging

    if _setup is not None:
        setup, _setup = _setup, None
        setup()
    return logging.getLogger(name)

"""The compiled hot paths' modules (built by ``python -m devtools.native``): each is used only where it was built
from its source as it is now, and not at all with RELAY_NATIVE=0 in the environment; the Python code runs instead.

* ``binlog/_rows.c``: row images (``binlog.nativerows``);
* ``binlog/_events.c``: packets into events, and the most frequent events decoded in one call (``events`` here,
  configured by ``binlog.parser``).
"""

from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path
from types import ModuleType

from binlog.logs import logger


def load_compiled(name: str, source: Path) -> ModuleType | None:
    """The compiled module ``name``, or None where it is not built, was built from another version of its
    ``source`` (said in the log), or RELAY_NATIVE=0 turns the compiled paths off."""
    if os.environ.get("RELAY_NATIVE", "1") == "0":
        return None
    try:
        module = importlib.import_module(name)
    except ImportError:
        return None
    if not built_from_source(module, source):
        return None
    return module


def built_from_source(module: ModuleType, source: Path) -> bool:
    """Whether a compiled module was built from its source as it is now; where not (the source changed and
    ``scripts/bootstrap`` did not run since), it says so in the log: the Python code runs instead."""
    try:
        current = hashlib.sha1(source.read_bytes()).hexdigest()
    except OSError:
        current = "(unreadable)"
    if getattr(module, "SOURCE_SHA1", None) == current:
        return True
    logger("binlog.native").warning(
        "%s was built from another version of %s than the one here: it is not used, and the Python code runs "
        "instead (scripts/bootstrap builds it again)",
        module.__file__,
        source.name,
    )
    return False


#: binlog/_events.c, or None (binlog.parser configures it: which events it takes).
events = load_compiled("binlog._events", Path(__file__).with_name("_events.c"))

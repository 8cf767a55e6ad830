"""XA (two-phase) transaction ids, as the binlog writes them.

An XA transaction reaches the binlog in two groups: its rows end with an XA_PREPARE event (prepared, not committed:
it may still be rolled back), and a later group holds only the statement ``XA COMMIT xid`` or ``XA ROLLBACK xid``.
Both name the transaction by its xid; this module gives the same text for both, ``X'<gtrid hex>',X'<bqual hex>',<format
id>``, the form MariaDB and MySQL write in the statement.
"""

from __future__ import annotations

import re
import struct

from binlog.errors import TruncatedEventError

_XA_PREPARE = struct.Struct("<BiII")  # one_phase, formatID, gtrid_length, bqual_length

#: ``XA COMMIT`` / ``XA ROLLBACK`` and the xid after it, as the source writes it: X'..',X'..',N (the source rewrites
#: whatever form the client used into this one).
_ENDING = re.compile(
    r"^\s*XA\s+(?P<verb>COMMIT|ROLLBACK)\s+"
    r"X'(?P<gtrid>(?:[0-9A-Fa-f]{2})*)'(?:\s*,\s*X'(?P<bqual>(?:[0-9A-Fa-f]{2})*)'(?:\s*,\s*(?P<format>-?\d+))?)?",
    re.IGNORECASE,
)


def xid_text(gtrid: bytes, bqual: bytes, format_id: int) -> str:
    return f"X'{gtrid.hex()}',X'{bqual.hex()}',{format_id}"


def parse_xa_prepare(body: bytes) -> tuple[bool, str]:
    """(one phase, xid) of an XA_PREPARE event's body. A one-phase XA COMMIT is logged with this event too, and
    commits at once."""
    if len(body) < _XA_PREPARE.size:
        raise TruncatedEventError(f"XA_PREPARE event of {len(body)} bytes is shorter than its xid header")
    one_phase, format_id, gtrid_length, bqual_length = _XA_PREPARE.unpack_from(body, 0)
    start = _XA_PREPARE.size
    end = start + gtrid_length + bqual_length
    if gtrid_length > 64 or bqual_length > 64 or end > len(body):
        raise TruncatedEventError(
            f"XA_PREPARE event's xid says {gtrid_length} + {bqual_length} bytes, {len(body) - start} follow"
        )
    gtrid = bytes(body[start : start + gtrid_length])
    return bool(one_phase), xid_text(gtrid, bytes(body[start + gtrid_length : end]), format_id)


def ending(statement: str) -> tuple[str, str] | None:
    """("COMMIT" or "ROLLBACK", xid) of an ``XA COMMIT xid`` / ``XA ROLLBACK xid`` statement; None for any other
    statement, and for one whose xid is not in a form the binlog writes (it cannot be matched to its prepare)."""
    match = _ENDING.match(statement)
    if match is None:
        return None
    verb = match["verb"].upper()
    gtrid = bytes.fromhex(match["gtrid"])
    bqual = bytes.fromhex(match["bqual"] or "")
    return verb, xid_text(gtrid, bqual, int(match["format"] or 1))

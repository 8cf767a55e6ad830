"""XA transactions in the worker: rows prepared on the source are held in the store, not queued, until the source
commits them.

The binlog holds an XA transaction's rows in a group that ends with XA PREPARE (not committed: it may still be rolled
back), and its fate in a later group, ``XA COMMIT xid`` or ``XA ROLLBACK xid`` (binlog/xa.py). Other transactions
may commit in between, and the worker may stop and start again in between. So the prepared rows are written to the
store (PreparedTransaction) in the batch that passes their XA PREPARE, with its checkpoint; the batch that passes the
XA COMMIT reads them back (before anything reads the batch's changes) and routes them as that transaction's rows, at
its place in the binlog; the XA ROLLBACK deletes them. Each step commits with the checkpoint that passes it, so a
restart anywhere neither loses nor repeats them.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Sequence

from binlog import Transaction
from relay.models import PreparedTransaction

log = logging.getLogger("relay.worker")


def release(source: str, transactions: Sequence[Transaction]) -> None:
    """Before the batch is arranged and routed: each XA COMMIT gets, as its ``changes``, the rows its prepare held
    (earlier in this batch, or in the store). Done first, so that whatever reads the batch's changes (a snapshot's
    watermark window, the routing, the change log) sees them at the commit; reads only."""
    held_here: dict[str, list] = {}
    for tx in transactions:
        if tx.xa == "prepare":
            held_here[tx.xid] = tx.prepared
        elif tx.xa == "commit":
            rows = held_here.pop(tx.xid, None)
            tx.changes = rows if rows is not None else _stored(source, tx)
        elif tx.xa == "rollback":
            held_here.pop(tx.xid, None)


def record(source: str, transactions: Sequence[Transaction]) -> None:
    """Inside the batch's store transaction: a prepare's rows stored, a commit's or a rollback's deleted."""
    for tx in transactions:
        if tx.xa == "prepare":
            _hold(source, tx)
        elif tx.xa in ("commit", "rollback"):
            dropped = PreparedTransaction.objects.filter(source=source, xid=tx.xid).delete()[0]
            if not dropped and tx.xa == "rollback":
                log.info("XA ROLLBACK of %s at %s: nothing of it was held", tx.xid, tx.position)


def _hold(source: str, tx: Transaction) -> None:
    PreparedTransaction.objects.update_or_create(
        source=source,
        xid=tx.xid,
        defaults={
            "gtid": tx.gtid,
            "binlog_file": tx.position.file,
            "binlog_pos": tx.position.pos,
            "rows": len(tx.prepared),
            "changes": pickle.dumps(tx.prepared, pickle.HIGHEST_PROTOCOL),
        },
    )
    log.info("XA PREPARE of %s at %s: %d rows held until its XA COMMIT", tx.xid, tx.position, len(tx.prepared))


def _stored(source: str, tx: Transaction) -> list:
    held = PreparedTransaction.objects.filter(source=source, xid=tx.xid).values_list("changes", flat=True).first()
    if held is None:
        log.warning(
            "XA COMMIT of %s at %s: its XA PREPARE came before this worker's start position, so its rows were never "
            "read and are not delivered",
            tx.xid,
            tx.position,
        )
        return []
    changes: list = pickle.loads(held)  # written by this worker into its own store
    return changes

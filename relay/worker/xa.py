"""XA transactions in the worker: rows prepared on the source are held in the store, not queued, until the source
commits them.

The binlog holds an XA transaction's rows in a group that ends with XA PREPARE (not committed: it may still be rolled
back), and its fate in a later group, ``XA COMMIT xid`` or ``XA ROLLBACK xid`` (binlog/xa.py). Other transactions
may commit in between, and the worker may stop and start again in between. So the prepared rows are written to the
store (PreparedTransaction) in the batch that passes their XA PREPARE, with its checkpoint; the batch that passes the
XA COMMIT reads them back and routes them as that transaction's rows, at its place in the binlog; the XA ROLLBACK
deletes them. Each step commits with the checkpoint that passes it, so a restart anywhere neither loses nor repeats
them.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Sequence

from binlog import Transaction
from relay.models import PreparedTransaction

log = logging.getLogger("relay.worker")


def settle(source: str, transactions: Sequence[Transaction]) -> None:
    """Each XA step of the batch, in place: a prepare's rows set aside in the store, a commit given the rows its
    prepare set aside (as its ``changes``), a rollback's dropped. Runs inside the batch's store transaction, before
    the batch is routed; most batches have no XA step."""
    for tx in transactions:
        if not tx.xa:
            continue
        if tx.xa == "prepare":
            _hold(source, tx)
        elif tx.xa == "commit":
            tx.changes = _release(source, tx)
        elif tx.xa == "rollback":
            dropped = PreparedTransaction.objects.filter(source=source, xid=tx.xid).delete()[0]
            if not dropped:
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


def _release(source: str, tx: Transaction) -> list:
    held = PreparedTransaction.objects.filter(source=source, xid=tx.xid).first()
    if held is None:
        log.warning(
            "XA COMMIT of %s at %s: its XA PREPARE came before this worker's start position, so its rows were never "
            "read and are not delivered",
            tx.xid,
            tx.position,
        )
        return []
    held.delete()
    changes: list = pickle.loads(held.changes)  # written by this worker into its own store
    return changes

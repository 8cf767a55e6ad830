"""The store's one error type: a request it cannot satisfy, with the reason; and how a store that refuses writes is
told from other database errors."""

#: PostgreSQL's read_only_sql_transaction: the store takes no writes (a fail-over onto a hot standby, or
#: default_transaction_read_only). Django raises it as an InternalError.
READ_ONLY_SQL_TRANSACTION = "25006"


class StoreError(Exception):
    """A request the store cannot satisfy; the message says why."""


def refused_as_read_only(exc: BaseException) -> bool:
    """The store refused a write because its session is read-only. A session opened while the store was read-only
    stays so after the store takes writes again: drop it, as a broken one is dropped, and reconnect."""
    return READ_ONLY_SQL_TRANSACTION in (getattr(exc, "pgcode", None), getattr(exc.__cause__, "pgcode", None))

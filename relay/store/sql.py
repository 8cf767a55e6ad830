"""Helpers for the store's raw-SQL statements (the relay server's per-request primitives run as plain SQL: they run once
or twice per POLL, and the ORM's overhead would be most of their cost)."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.utils import timezone


def table(model: Any) -> str:
    """The quoted table name of a model."""
    return connection.ops.quote_name(model._meta.db_table)


def now() -> Any:
    """The current time as the connection's backend stores a datetime."""
    return connection.ops.adapt_datetimefield_value(timezone.now())

"""Small template helpers for the dashboard: query strings that keep the other parameters, and readable durations."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import template
from django.utils.http import urlencode

register = template.Library()


@register.simple_tag(takes_context=True)
def query_with(context: dict[str, Any], **changes: Any) -> str:
    """The current query string with some parameters replaced (None removes one); simple_tag escapes the result."""
    params = context["request"].GET.copy()
    for key, value in changes.items():
        if value is None or value == "":
            params.pop(key, None)
        else:
            params[key] = str(value)
    return "?" + urlencode(sorted(params.items())) if params else "?"


@register.filter
def next_sort(current: str, key: str) -> str:
    """Clicking a column sorts by it, numbers biggest first; clicking it again reverses the order."""
    if current == f"-{key}":
        return key
    if current == key:
        return f"-{key}"
    return key if key == "table" else f"-{key}"


@register.simple_tag
def sort_mark(current: str, key: str) -> str:
    if current == key:
        return "▲"
    if current == f"-{key}":
        return "▼"
    return ""


@register.filter
def duration(seconds: float | int | None) -> str:
    """Seconds as the largest two units: 75 -> "1 min 15 s", 90061 -> "1 d 1 h"."""
    if seconds is None:
        return "\u2013"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    parts = []
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min"), (1, "s")):
        if seconds >= size:
            parts.append(f"{seconds // size} {unit}")
            seconds %= size
        if len(parts) == 2:
            break
    return " ".join(parts)


@register.filter
def hex2(value: int) -> str:
    return f"0x{int(value):02X}"


@register.filter
def unix_time(value: int | None) -> str:
    """Unix seconds as UTC date and time."""
    if value is None:
        return "\u2013"
    return datetime.fromtimestamp(int(value), UTC).strftime("%Y-%m-%d %H:%M:%S")


@register.filter
def num(value: float | int | None, decimals: int = 0) -> str:
    """A number with thousands separators (12,345; 0.62 with ``num:2``); an en dash for None."""
    if value is None or value == "":
        return "\u2013"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if decimals == 0 and number.is_integer():
        return f"{int(number):,}"
    return f"{number:,.{int(decimals)}f}"

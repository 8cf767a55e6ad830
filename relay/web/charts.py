"""Chart geometry for the dashboard's inline SVG: numbers in, coordinates out.

The templates draw the SVG (templates/relay/charts/); this module only computes coordinates, so every name or label
that reaches a chart goes through the template's autoescaping and nothing here builds markup. No JavaScript is needed
to see a chart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is >= value (an axis maximum people can read)."""
    if value <= 0:
        return 1.0
    magnitude = 1.0
    while magnitude * 10 <= value:
        magnitude *= 10
    while magnitude > value:
        magnitude /= 10
    for step in (1, 2, 5, 10):
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude  # pragma: no cover - the loop always returns


def short_number(value: float) -> str:
    """1234 -> "1.2k", 5_000_000 -> "5M": for axis labels only, tables show exact numbers."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            text = f"{value / limit:.1f}".rstrip("0").rstrip(".")
            return text + suffix
    if value == int(value):
        return str(int(value))
    return f"{value:.1f}"


def short_value(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


def exact_number(value: float) -> str:
    """With thousands separators, and one decimal only when the value has a fraction: 4,545 and 12.5."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.1f}"


@dataclass(frozen=True)
class Tick:
    percent: float  # position along the axis, 0 at the left (x) or the top (y), for the HTML labels
    at: float  # the same in SVG coordinates, for the tick line
    label: str


def time_ticks(start: float, end: float, count: int = 5, *, dates: bool = False) -> list[tuple[float, str]]:
    """``count`` evenly spaced (fraction, label) pairs from ``start`` to ``end`` (unix seconds), in UTC; with
    ``dates`` the labels carry the day too, so a 24 h axis never reads "19:57 ... 19:57"."""
    fmt = "%m-%d %H:%M" if dates else "%H:%M"
    result = []
    for index in range(count):
        fraction = index / (count - 1)
        moment = datetime.fromtimestamp(start + (end - start) * fraction, UTC)
        result.append((fraction, moment.strftime(fmt)))
    return result


@dataclass(frozen=True)
class LineChart:
    """A line (with its filled area) over evenly spaced points."""

    width: int
    height: int
    points: str  # "x,y x,y ..." for <polyline>
    area: str  # the same closed along the baseline, for <polygon>
    maximum: str  # the axis maximum, as a label
    empty: bool
    labels: tuple[str, str] = ("", "")  # left and right x-axis labels
    title: str = ""
    pad: int = 4
    values: str = ""  # the values, comma-separated numbers, for the page script's readout
    peak: str = ""  # the largest value, exact, with thousands separators
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)

    @property
    def baseline(self) -> int:
        return self.height - self.pad


def line_chart(
    values: Sequence[float],
    *,
    width: int = 600,
    height: int = 120,
    labels: tuple[str, str] = ("", ""),
    title: str = "",
    pad: int = 4,
    x_ticks: Sequence[tuple[float, str]] = (),
) -> LineChart:
    """``x_ticks`` are (fraction of the width, label) pairs; the y axis gets ticks at 0, half and the top."""
    top = nice_ceiling(max(values, default=0))
    inner_w = width - 2 * pad
    inner_h = height - 2 * pad
    ticks_x = [Tick(round(100 * f, 2), round(pad + inner_w * f, 1), label) for f, label in x_ticks]
    ticks_y = [
        Tick(
            round(100 * (pad + inner_h * (1 - f)) / height, 2), round(pad + inner_h * (1 - f), 1), exact_number(top * f)
        )
        for f in (1.0, 0.5, 0.0)
    ]
    count = len(values)
    coordinates = []
    for index, value in enumerate(values):
        x = pad + (inner_w * index / (count - 1) if count > 1 else inner_w / 2)
        y = pad + inner_h - inner_h * (max(value, 0) / top)
        coordinates.append(f"{x:.1f},{y:.1f}")
    points = " ".join(coordinates)
    area = ""
    if coordinates:
        first_x = coordinates[0].split(",")[0]
        last_x = coordinates[-1].split(",")[0]
        area = f"{first_x},{height - pad} {points} {last_x},{height - pad}"
    return LineChart(
        width=width,
        height=height,
        points=points,
        area=area,
        maximum=short_number(top),
        empty=not any(values),
        labels=labels,
        title=title,
        pad=pad,
        values=",".join(short_value(value) for value in values),
        peak=exact_number(max(values, default=0)),
        x_ticks=ticks_x,
        y_ticks=ticks_y,
    )


@dataclass(frozen=True)
class Segment:
    x: float
    width: float
    css: str  # a fixed class name chosen here, never data


@dataclass(frozen=True)
class Bar:
    label: str
    total: int
    y: float
    segments: list[Segment] = field(default_factory=list)
    end: float = 0.0  # where the bar stops: its total is written there


@dataclass(frozen=True)
class BarChart:
    """Horizontal stacked bars (insert, update, delete), one per labelled item."""

    width: int
    height: int
    label_width: int
    bar_height: int
    bars: list[Bar]
    maximum: str
    title: str = ""

    @property
    def empty(self) -> bool:
        return not self.bars


def stacked_bars(
    items: Sequence[tuple[str, Sequence[int]]],
    *,
    width: int = 600,
    label_width: int = 220,
    bar_height: int = 18,
    gap: int = 6,
    classes: Sequence[str] = ("ins", "upd", "del"),
    title: str = "",
) -> BarChart:
    """``items`` are (label, (inserts, updates, deletes)); bars are scaled to the largest total."""
    totals = [sum(parts) for _, parts in items]
    top = max(totals, default=0) or 1
    room = width - label_width - 60  # keep space on the right for the total's text
    bars = []
    for row, ((label, parts), total) in enumerate(zip(items, totals, strict=True)):
        x = float(label_width)
        segments = []
        for value, css in zip(parts, classes, strict=True):
            if value <= 0:
                continue
            w = room * value / top
            segments.append(Segment(round(x, 1), round(max(w, 0.5), 1), css))
            x += w
        bars.append(Bar(label, total, row * (bar_height + gap), segments, round(x, 1)))
    height = max(len(bars), 1) * (bar_height + gap)
    return BarChart(width, height, label_width, bar_height, bars, short_number(top), title)


@dataclass(frozen=True)
class Column:
    x: float
    y: float
    height: float
    label: str
    value: int


@dataclass(frozen=True)
class ColumnChart:
    """Vertical bars, evenly spaced, for per-hour or per-day totals."""

    width: int
    height: int
    bar_width: float
    columns: list[Column]
    maximum: str
    empty: bool
    labels: tuple[str, str] = ("", "")
    title: str = ""
    peak: str = ""  # the largest value, exact


def column_chart(
    items: Sequence[tuple[str, int]],
    *,
    width: int = 600,
    height: int = 120,
    labels: tuple[str, str] = ("", ""),
    title: str = "",
) -> ColumnChart:
    """``items`` are (label, value); the label becomes the bar's tooltip."""
    top = nice_ceiling(max((value for _, value in items), default=0))
    slot = width / max(len(items), 1)
    columns = []
    for index, (label, value) in enumerate(items):
        h = (height - 4) * max(value, 0) / top
        columns.append(Column(round(index * slot + slot * 0.1, 1), round(height - h, 1), round(h, 1), label, value))
    return ColumnChart(
        width=width,
        height=height,
        bar_width=round(max(slot * 0.8, 0.5), 1),
        columns=columns,
        maximum=short_number(top),
        empty=not any(value for _, value in items),
        labels=labels,
        title=title,
        peak=exact_number(max((value for _, value in items), default=0)),
    )

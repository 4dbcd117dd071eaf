"""Small inline SVG charts for the bench report: bars on a log scale around 1x, bars of counts,
and lines (log or linear y).

Written here rather than taken from a plotting library so that the report stays one
self-contained HTML file with no dependency: every chart is a string of SVG with its colours
in attributes, its data text escaped, and no reference to anything outside it. Each drawn
datum carries a class (`bar`, `failed`, `series`, ...) and a <title> tooltip, which is also what
the tests count.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from html import escape

WIDTH, HEIGHT = 960, 320
LEFT, RIGHT, TOP, BOTTOM = 64, 24, 52, 58
FAST, SLOW, FAILED, NEUTRAL, EMPHASIS = "#2e8b57", "#e69f00", "#c0392b", "#7f8c8d", "#1f4e99"
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")


@dataclass
class Bar:
    """One problem's bar: `value` is its speedup (None draws a marker instead of a bar)."""

    label: str
    value: float | None
    tooltip: str
    failed: bool = False


@dataclass
class Series:
    name: str
    points: list[tuple[float, float]]
    color: str = EMPHASIS
    bold: bool = False
    markers: bool = False
    css: str = "series"
    extra: dict = field(default_factory=dict)


def _svg(title: str, body: list[str], height: int = HEIGHT) -> str:
    return (f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" '
            f'aria-label="{escape(title)}"><title>{escape(title)}</title>'
            f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="15" font-weight="bold">'
            f'{escape(title)}</text>' + "".join(body) + "</svg>")


def _text(x: float, y: float, text: str, anchor: str = "middle", size: int = 11, extra: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" fill="#333"{extra}>'
            f"{escape(text)}</text>")


def _line(x1: float, y1: float, x2: float, y2: float, color: str = "#ccc", width: float = 1,
          extra: str = "") -> str:
    return (f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}" '
            f'stroke-width="{width}"{extra}/>')


class LogScale:
    """Data value -> pixel row on a log axis between `low` and `high` (widened to nice ticks)."""

    def __init__(self, values: list[float], top: float, bottom: float):
        finite = [v for v in values if v > 0 and math.isfinite(v)] + [1.0]
        self.ticks = log_ticks(min(finite) / 1.2, max(finite) * 1.2)
        self.low, self.high = self.ticks[0], self.ticks[-1]
        self.top, self.bottom = top, bottom

    def __call__(self, value: float) -> float:
        value = min(max(value, self.low), self.high)
        span = math.log10(self.high) - math.log10(self.low)
        return self.bottom - (math.log10(value) - math.log10(self.low)) / span * (self.bottom - self.top)


def log_ticks(low: float, high: float) -> list[float]:
    """1-2-5 ticks covering [low, high], starting and ending on a tick (fewer when many)."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    for mantissas in ((1, 2, 5), (1,)):
        ticks = [m * 10.0 ** e for e in range(first, last + 1) for m in mantissas]
        start = max(t for t in ticks if t <= low)
        end = min(t for t in ticks if t >= high)
        chosen = [t for t in ticks if start <= t <= end]
        if len(chosen) <= 12:
            return chosen
    return chosen


def _y_label(text: str) -> str:
    middle = (TOP + HEIGHT - BOTTOM) / 2
    return _text(16, middle, text, extra=f' transform="rotate(-90 16 {middle:.1f})"')


def _speed_label(value: float) -> str:
    return f"{value:g}x"


def _log_axis(scale: LogScale) -> list[str]:
    body = []
    for tick in scale.ticks:
        y = scale(tick)
        body.append(_line(LEFT, y, WIDTH - RIGHT, y, "#e5e5e5"))
        body.append(_text(LEFT - 6, y + 4, _speed_label(tick), anchor="end"))
    return body


def speedup_bars(bars: list[Bar], title: str) -> str:
    """One bar per problem from the 1x line to its speedup (log scale): green above 1x, orange
    below; a failed problem is a red cross on the 1x line, a correct one without a timing a grey
    dot."""
    bottom = HEIGHT - BOTTOM
    scale = LogScale([b.value for b in bars if b.value is not None], TOP, bottom)
    body = _log_axis(scale)
    step = (WIDTH - LEFT - RIGHT) / max(1, len(bars))
    width = min(40.0, max(1.0, step * 0.8))
    one = scale(1.0)
    show_labels = len(bars) <= 60
    for index, bar in enumerate(bars):
        x = LEFT + index * step + (step - width) / 2
        middle = x + width / 2
        tip = f"<title>{escape(bar.tooltip)}</title>"
        if bar.value is not None:
            y = scale(bar.value)
            color = FAST if bar.value > 1 else SLOW
            body.append(f'<rect class="bar" x="{x:.1f}" y="{min(y, one):.1f}" width="{width:.1f}" '
                        f'height="{max(abs(one - y), 1.0):.1f}" fill="{color}">{tip}</rect>')
        elif bar.failed:
            size = min(5.0, max(2.5, width / 2))
            body.append(f'<g class="failed" stroke="{FAILED}" stroke-width="2">{tip}'
                        + _line(middle - size, one - size, middle + size, one + size, FAILED, 2)
                        + _line(middle - size, one + size, middle + size, one - size, FAILED, 2) + "</g>")
        else:
            body.append(f'<circle class="untimed" cx="{middle:.1f}" cy="{one:.1f}" r="3" fill="{NEUTRAL}">'
                        f"{tip}</circle>")
        if show_labels:
            body.append(_text(middle, bottom + 14, bar.label, size=9,
                              extra=f' transform="rotate(-45 {middle:.1f} {bottom + 14:.1f})"'))
    body.append(_line(LEFT, one, WIDTH - RIGHT, one, "#333", 1.5, ' class="unity"'))
    body.append(_y_label("speedup (log scale)"))
    return _svg(title, body)


def count_bars(categories: list[tuple[str, int, str]], title: str) -> str:
    """Vertical bars of counts, one per (label, count, colour), labelled with the count."""
    bottom = HEIGHT - BOTTOM
    peak = max([count for _, count, _ in categories] + [1])
    axis_top = peak * 1.1  # room for the count above the highest bar
    step = (WIDTH - LEFT - RIGHT) / max(1, len(categories))
    width = step * 0.7
    body = []
    for tick in _count_ticks(peak):
        y = bottom - tick / axis_top * (bottom - TOP)
        body.append(_line(LEFT, y, WIDTH - RIGHT, y, "#e5e5e5"))
        body.append(_text(LEFT - 6, y + 4, str(tick), anchor="end"))
    for index, (label, count, color) in enumerate(categories):
        x = LEFT + index * step + (step - width) / 2
        height = count / axis_top * (bottom - TOP)
        body.append(f'<rect class="bar" x="{x:.1f}" y="{bottom - height:.1f}" width="{width:.1f}" '
                    f'height="{height:.1f}" fill="{color}"><title>{escape(f"{label}: {count}")}</title></rect>')
        body.append(_text(x + width / 2, bottom - height - 4, str(count)))
        body.append(_text(x + width / 2, bottom + 16, label, size=12))
    body.append(_line(LEFT, bottom, WIDTH - RIGHT, bottom, "#333"))
    body.append(_y_label("problems"))
    return _svg(title, body)


def _count_ticks(peak: int) -> list[int]:
    step = max(1, math.ceil(peak / 5))
    return list(range(0, peak + 1, step))


def line_chart(series: list[Series], title: str, x_label: str, y_label: str, x_ticks: list[float],
               y_ticks: list[float] | None = None, log_y: bool = False, y_format=str) -> str:
    """Lines over a linear x axis (its range: the first and last of `x_ticks`); y linear over
    `y_ticks`' range, or on a log scale fitted to the data. A series with one point shows as a
    dot; `markers` puts a dot on every point."""
    bottom = HEIGHT - BOTTOM
    x_low, x_high = x_ticks[0], x_ticks[-1]

    def x_of(x: float) -> float:
        return LEFT + (x - x_low) / ((x_high - x_low) or 1) * (WIDTH - LEFT - RIGHT)

    y_of: Callable[[float], float]
    if log_y:
        scale = LogScale([y for s in series for _, y in s.points], TOP, bottom)
        y_of = scale
        body = _log_axis(scale)
        body.append(_line(LEFT, scale(1.0), WIDTH - RIGHT, scale(1.0), "#333", 1.5, ' class="unity"'))
    else:
        if not y_ticks:
            raise ValueError("a linear y axis needs its y_ticks")
        y_low, y_high = y_ticks[0], y_ticks[-1]

        def linear_y(y: float) -> float:
            return bottom - (y - y_low) / ((y_high - y_low) or 1) * (bottom - TOP)

        y_of = linear_y

        body = []
        for tick in y_ticks:
            body.append(_line(LEFT, y_of(tick), WIDTH - RIGHT, y_of(tick), "#e5e5e5"))
            body.append(_text(LEFT - 6, y_of(tick) + 4, y_format(tick), anchor="end"))
    for tick in x_ticks:
        body.append(_line(x_of(tick), TOP, x_of(tick), bottom, "#f0f0f0"))
        body.append(_text(x_of(tick), bottom + 16, f"{tick:g}"))
    body.append(_line(LEFT, bottom, WIDTH - RIGHT, bottom, "#333"))
    for item in series:
        body.append(_series(item, x_of, y_of))
    body.append(_text((LEFT + WIDTH - RIGHT) / 2, HEIGHT - 14, x_label))
    body.append(_y_label(y_label))
    body.append(_legend([s for s in series if s.bold or len(series) <= len(PALETTE)]))
    return _svg(title, body)


def _series(item: Series, x_of, y_of) -> str:
    tip = f"<title>{escape(item.name)}</title>"
    points = " ".join(f"{x_of(x):.1f},{y_of(y):.1f}" for x, y in item.points)
    width, opacity = (2.5, 1.0) if item.bold else (1.2, 0.6)
    parts = [f'<g class="{item.css}" data-name="{escape(item.name)}">{tip}']
    if len(item.points) > 1:
        parts.append(f'<polyline points="{points}" fill="none" stroke="{item.color}" stroke-width="{width}" '
                     f'stroke-opacity="{opacity}"/>')
    if item.markers or len(item.points) == 1:
        for x, y in item.points:
            parts.append(f'<circle class="point" cx="{x_of(x):.1f}" cy="{y_of(y):.1f}" r="2.5" '
                         f'fill="{item.color}"/>')
    parts.append("</g>")
    return "".join(parts)


def _legend(series: list[Series]) -> str:
    parts = []
    x = LEFT + 8
    for item in series[:len(PALETTE) + 1]:
        name = item.name if len(item.name) <= 70 else item.name[:67] + "..."
        parts.append(_line(x, TOP - 16, x + 18, TOP - 16, item.color, 2.5 if item.bold else 1.5))
        parts.append(_text(x + 22, TOP - 12, name, anchor="start"))
        x += 30 + 6 * len(name)
    return f'<g class="legend">{"".join(parts)}</g>'

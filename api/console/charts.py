"""A small line chart per live-data series, drawn on the server as SVG (no script, no library).

The limit (a budget's cap, a KPI's target) is a dashed line, so a point over it reads at a glance.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT, PAD = 320, 120, 24


def line_chart(title: str, points: Sequence[tuple[str, float]], limit: float | None = None) -> str:
    """An SVG of ``points`` (label, value) in the order given, with ``limit`` as a dashed line."""
    label = escape(title)
    if not points:
        return (
            f'<svg role="img" aria-label="{label}: no observations" width="{WIDTH}" height="{HEIGHT}"></svg>'
        )
    values = [v for _, v in points] + ([limit] if limit is not None else [])
    low, high = min(0.0, *values), max(values) or 1.0
    span = (high - low) or 1.0
    step = (WIDTH - 2 * PAD) / max(1, len(points) - 1)

    def y(v: float) -> float:
        return round(HEIGHT - PAD - (v - low) / span * (HEIGHT - 2 * PAD), 1)

    xy = [(round(PAD + i * step, 1), y(v)) for i, (_, v) in enumerate(points)]
    parts = [
        f'<svg role="img" aria-label="{label}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" class="chart"><title>{label}</title>',
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" class="axis"/>',
    ]
    if limit is not None:
        parts.append(
            f'<line x1="{PAD}" y1="{y(limit)}" x2="{WIDTH - PAD}" y2="{y(limit)}" class="limit">'
            f"<title>limit {limit:g}</title></line>"
        )
    if len(xy) > 1:
        parts.append(f'<polyline points="{" ".join(f"{a},{b}" for a, b in xy)}" class="series"/>')
    for (a, b), (name, v) in zip(xy, points, strict=True):
        over = limit is not None and v > limit
        parts.append(
            f'<circle cx="{a}" cy="{b}" r="3" class="{"over" if over else "point"}">'
            f"<title>{escape(name)}: {v:g}</title></circle>"
        )
    parts.append(f'<text x="{PAD}" y="{PAD - 8}" class="max">{high:g}</text>')
    parts.append(f'<text x="{PAD}" y="{HEIGHT - 6}">{escape(points[0][0])}</text>')
    if len(points) > 1:
        parts.append(
            f'<text x="{WIDTH - PAD}" y="{HEIGHT - 6}" text-anchor="end">{escape(points[-1][0])}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)

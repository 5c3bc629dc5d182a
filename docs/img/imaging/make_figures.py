"""Draw the figure of docs/imaging.md as plain SVG, from the stitcher's own window.

Run ``python docs/img/imaging/make_figures.py`` after a change to the blending windows;
``docs/tests/test_figures.py`` fails while the committed figure differs from what this script
draws. Patch positions come from ``insitu.plan.patches_spec`` and weights from
``insitu.stitch.taper_window`` (no plotting library: a few dozen SVG elements written by hand).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from insitu.plan.patches_spec import AxisPositions
from insitu.stitch import taper_window

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # docs/img: the shared SVG writer
from svg import Svg  # noqa: E402

# The palette of docs/img/patches.
INK, NOTE, BLUE, ORANGE, RED, GREEN = "#1a237e", "#555", "#5c6bc0", "#ffb300", "#e53935", "#43a047"
COLOURS = (BLUE, ORANGE, RED, GREEN)


def blend() -> str:
    """One axis of 20 elements, patches of 8 every 5 (the last shifted inward): where each patch
    lies, and what each contributes to an element under "mean" and "taper"."""
    n, size, stride, px = 20, 8, 5, 22
    axis = AxisPositions.of(n, size, stride, "shift")
    origins = axis.all_origins().tolist()
    svg = Svg(620, 450, "Blending overlapping patches on one axis: mean counts, taper weights")
    x0 = 150
    svg.text(
        10,
        22,
        f"{n} elements, patches of {size} every {stride} (shift edge: the last one moved inward)",
        fill=INK,
    )
    y = 40
    for i in range(n):
        svg.rect(x0 + i * px, y, px, 22, fill=BLUE, stroke="#fff", stroke_width=2)
        svg.text(x0 + i * px + px / 2, y + 16, str(i), fill="#fff", text_anchor="middle", font_size=11)
    for k, o in enumerate(origins):
        svg.rect(x0 + o * px + 2, y + 30 + 13 * k, size * px - 4, 9, fill=COLOURS[k % 4], rx=3)
    svg.text(10, y + 16, "elements", fill=INK, font_weight="bold")
    svg.text(10, y + 52, "patches", fill=INK, font_weight="bold")
    svg.text(10, y + 68, f"origins {', '.join(map(str, origins))}", fill=NOTE, font_size=12)
    window = taper_window(size, size - stride).tolist()
    panels = [
        (270, "mean", [1.0] * size, ["1 per patch"]),
        (390, "taper", window, ["ramps over the", f"overlap of {size - stride}"]),
    ]
    unit = 36  # px per unit of weight
    for base, name, weights, note in panels:
        svg.text(10, base - 40, name, fill=INK, font_weight="bold")
        for i, line in enumerate(note):
            svg.text(10, base - 22 + 15 * i, line, fill=NOTE, font_size=12)
        svg.line(x0, base, x0 + n * px, base, stroke=NOTE)
        svg.line(x0 - 4, base - unit, x0 + n * px, base - unit, stroke=NOTE, stroke_dasharray="3 3")
        svg.text(x0 - 8, base - unit + 4, "1", fill=NOTE, text_anchor="end", font_size=11)
        height = [0.0] * n
        for k, o in enumerate(origins):
            for j, w in enumerate(weights):
                h = w * unit
                svg.rect(
                    x0 + (o + j) * px + 3,
                    base - height[o + j] - h,
                    px - 6,
                    h,
                    fill=COLOURS[k % 4],
                    stroke="#fff",
                )
                height[o + j] += h
    svg.text(
        10,
        430,
        "an element's value = sum of weight x output / sum of weight, over the patches covering it",
        fill=NOTE,
        font_size=12,
    )
    return svg.render()


FIGURES: dict[str, Callable[[], str]] = {"blend.svg": blend}


def main(out: Path = HERE) -> None:
    for name, draw in FIGURES.items():
        (out / name).write_text(draw())


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)

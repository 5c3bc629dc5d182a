"""Draw the figures of docs/patches.md as plain SVG, from the patch planner's own arithmetic.

Run ``python docs/img/patches/make_figures.py`` after a change to the planner or to a figure;
``docs/tests/test_figures.py`` fails while a committed figure differs from what this script
draws. Positions, blocks, halos and random draws come from ``insitu.plan.patches`` (no
plotting library: each figure is a few dozen SVG elements written by hand).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from insitu.arrays.geometry import ArrayGeometry
from insitu.plan.patches import PatchSpec, block_chunk_needs, epoch_patches, plan_patches
from insitu.plan.patches_spec import AxisPositions

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # docs/img: the shared SVG writer
from svg import Svg  # noqa: E402

# The palette of docs/img/concepts.
INK, NOTE, GRID = "#1a237e", "#555", "#c5cae9"
BLUE, LIGHT, ORANGE, RED, GREEN = "#5c6bc0", "#e8eaf6", "#ffb300", "#e53935", "#43a047"
SHADES = ("#c5cae9", "#9fa8da")  # neighbouring blocks alternate


def _outline(
    svg: Svg, at: tuple[float, float], tile: tuple[int, ...], c: float, stroke: str, width: float
) -> None:
    """The border of one block of ``tile`` regions of ``c`` pixels, its corner at ``at``."""
    svg.rect(at[0], at[1], tile[1] * c, tile[0] * c, fill="none", stroke=stroke, stroke_width=width)


def _raster(shape: tuple[int, int], chunks: tuple[int, int]) -> ArrayGeometry:
    """A small 2-D array (y, x): only its geometry is needed, never its data."""
    return ArrayGeometry(
        name="raster",
        path="raster",
        shape=shape,
        dtype=np.dtype("float32"),
        chunk_shape=chunks,
        dimension_names=("y", "x"),
    )


def _element_grid(svg: Svg, x0: float, y0: float, n_y: int, n_x: int, px: float) -> None:
    for i in range(n_y + 1):
        svg.line(
            x0, y0 + i * px, x0 + n_x * px, y0 + i * px, stroke=BLUE, stroke_opacity=0.3, stroke_width=0.6
        )
    for j in range(n_x + 1):
        svg.line(
            x0 + j * px, y0, x0 + j * px, y0 + n_y * px, stroke=BLUE, stroke_opacity=0.3, stroke_width=0.6
        )


# -- 1. the grid: stride and overlap ----------------------------------------------------------------
def grid() -> str:
    n, size, px = 18, 6, 10
    svg = Svg(
        460, 316, "A grid of patches: stride equal to the size tiles the array; a smaller stride overlaps"
    )
    panels = [(20, size, "stride = size (default): tiles"), (250, 4, "size 6, stride 4: overlap")]
    y0 = 44
    for x0, stride, caption in panels:
        svg.text(x0, 24, caption, fill=INK)
        origins = AxisPositions.of(n, size, stride, "shift").all_origins().tolist()
        svg.rect(x0, y0, n * px, n * px, fill=LIGHT)
        if stride == size:
            for a, oy in enumerate(origins):
                for b, ox in enumerate(origins):
                    fill = SHADES[(a + b) % 2]
                    svg.rect(x0 + ox * px, y0 + oy * px, size * px, size * px, fill=fill, stroke="#fff")
        _element_grid(svg, x0, y0, n, n, px)
        if stride != size:  # three neighbours, to show what they share
            for (oy, ox), colour in zip([(0, 0), (0, 4), (4, 4)], [BLUE, ORANGE, RED], strict=True):
                svg.rect(
                    x0 + ox * px,
                    y0 + oy * px,
                    size * px,
                    size * px,
                    fill=colour,
                    fill_opacity=0.25,
                    stroke=colour,
                    stroke_width=2,
                )
        for oy in origins:
            for ox in origins:
                svg.circle(x0 + ox * px, y0 + oy * px, 2.6, fill=INK)
        svg.text(x0, y0 + n * px + 20, f"{len(origins) ** 2} patches of 6 x 6", fill=NOTE, font_size=12)
    svg.text(250, y0 + n * px + 38, "red: the patch at origin (4, 4)", fill=RED, font_size=12)
    svg.notes(
        20,
        y0 + n * px + 62,
        [
            "dot: an origin, the patch's first element on every axis;",
            "18 x 18 elements, patch={'y': 6, 'x': 6}",
        ],
        step=17,
    )
    return svg.render()


# -- 2. the edge policies on one axis ---------------------------------------------------------------
def edges() -> str:
    n, size, stride, px = 10, 4, 4, 30
    svg = Svg(500, 380, "Edge policies on one axis of 10 elements, patches of 4 every 4: shift, pad, drop")
    svg.hatch("fill", NOTE)
    svg.text(10, 22, "n = 10 elements, patch size 4, stride 4", fill=INK)
    x0 = 120
    rows = {
        "shift": ("shift (default)", "the last patch moves inward to end at 9; 6 and 7 are seen twice"),
        "pad": ("pad", "the last patch runs past the end: fill value (NaN for floats), masked"),
        "drop": ("drop", "complete patches only: 8 and 9 are never delivered"),
    }
    for r, (edge, (label, note)) in enumerate(rows.items()):
        y0 = 44 + r * 112
        axis = AxisPositions.of(n, size, stride, edge)
        origins = axis.all_origins().tolist()
        extents = axis.valid_extent(axis.all_origins()).tolist()
        svg.text(10, y0 + 19, label, fill=INK, font_weight="bold")
        for i in range(n):
            grey = edge == "drop" and i >= origins[-1] + size
            svg.rect(x0 + i * px, y0, px, 28, fill="#eeeeee" if grey else BLUE, stroke="#fff", stroke_width=2)
            svg.text(
                x0 + i * px + px / 2, y0 + 19, str(i), fill=NOTE if grey else "#fff", text_anchor="middle"
            )
        for k, (o, valid) in enumerate(zip(origins, extents, strict=True)):
            # Overlapping patches go on a second line, so both stay visible.
            overlaps = k > 0 and o < origins[k - 1] + size
            y = y0 + 36 + (14 if overlaps else 0)
            colour = (BLUE, ORANGE, RED)[k % 3]
            svg.rect(x0 + o * px + 2, y, valid * px - 4, 10, fill=colour, rx=3)
            if valid < size:
                svg.rect(
                    x0 + (o + valid) * px + 2,
                    y,
                    (size - valid) * px - 4,
                    10,
                    fill="url(#fill)",
                    stroke=colour,
                    rx=3,
                )
                for i in range(n, o + size):
                    svg.rect(x0 + i * px, y0, px, 28, fill="none", stroke=NOTE, stroke_dasharray="3 3")
        svg.text(10, y0 + 44, f"origins {', '.join(map(str, origins))}", fill=NOTE, font_size=12)
        if edge == "pad":
            svg.text(10, y0 + 60, f"extents {', '.join(map(str, extents))}", fill=NOTE, font_size=12)
        svg.text(10, y0 + 82, note, fill=NOTE, font_size=12)
    return svg.render()


# -- 3. regions and blocks ----------------------------------------------------------------------------
def regions() -> str:
    shape, chunks, px = (24, 32), (4, 4), 6.5  # 6 x 8 chunks; a chunk is 26 px
    geom = _raster(shape, chunks)
    spec = PatchSpec({"y": 6, "x": 6}, stride={"y": 4, "x": 4})
    patches = plan_patches(geom, spec)
    n_cy, n_cx = shape[0] // chunks[0], shape[1] // chunks[1]
    c = chunks[0] * px
    svg = Svg(
        490,
        290,
        "Regions and blocks: chunks are regions, blocks of block_chunks regions are "
        "permuted each epoch, patches straddling a border read the neighbour's chunks",
    )
    svg.hatch("halo", RED)
    for panel, epoch in enumerate((0, 1)):
        order = epoch_patches(patches, spec, epoch=epoch, seed=0, block_chunks=4)
        tile = order.tile
        per_x = -(-n_cx // tile[1])
        turn = {int(b): t for t, b in enumerate(order.blocks.tolist())}
        first = int(order.blocks[0])
        x0, y0 = 20 + panel * 240, 44
        svg.text(x0, 24, f"epoch {epoch}: each block's turn", fill=INK)
        halo: set[int] = set()
        if epoch == 0:  # the chunks of neighbours that the first block's patches read
            needs = block_chunk_needs(order, chunks)
            halo = set(needs.values[needs.starts[0] : needs.starts[1]].tolist())
        for cy in range(n_cy):
            for cx in range(n_cx):
                block = (cy // tile[0]) * per_x + cx // tile[1]
                fill = SHADES[((cy // tile[0]) + (cx // tile[1])) % 2]
                if cy * n_cx + cx in halo and block != first:
                    fill = "url(#halo)"
                svg.rect(x0 + cx * c, y0 + cy * c, c, c, fill=fill, stroke="#fff", stroke_width=1)
        for by in range(-(-n_cy // tile[0])):
            for bx in range(per_x):
                block = by * per_x + bx
                _outline(svg, (x0 + bx * tile[1] * c, y0 + by * tile[0] * c), tile, c, "#fff", 3)
                svg.text(
                    x0 + (bx * tile[1] + 0.5) * c,
                    y0 + (by * tile[0] + 0.5) * c + 5,
                    str(turn[block] + 1),
                    fill=RED if block == first else INK,
                    text_anchor="middle",
                    font_weight="bold" if block == first else "normal",
                )
        if epoch == 0:  # the first block, and one of its patches reading into the next chunks
            by, bx = divmod(first, per_x)
            _outline(svg, (x0 + bx * tile[1] * c, y0 + by * tile[0] * c), tile, c, RED, 2.5)
            oy, ox = (by * tile[0] + 1) * chunks[0], (bx * tile[1] + 1) * chunks[1]  # its last region
            svg.rect(
                x0 + ox * px,
                y0 + oy * px,
                6 * px,
                6 * px,
                fill="none",
                stroke=RED,
                stroke_width=2,
                stroke_dasharray="4 2",
            )
            svg.circle(x0 + ox * px, y0 + oy * px, 3, fill=RED)
    svg.notes(
        20,
        44 + n_cy * c + 22,
        [
            f"{n_cy} x {n_cx} chunks (regions), blocks of {tile[0]} x {tile[1]} (block_chunks = 4),",
            "permuted again each epoch. Red: the first block of epoch 0; dashed: one of",
            "its 6 x 6 patches (stride 4); hatched: the halo of neighbour chunks it reads",
        ],
        step=17,
    )
    return svg.render()


# -- 4. random sampling, drawn per region -------------------------------------------------------------
def random_draws() -> str:
    shape, chunks, px = (24, 32), (4, 4), 10  # a chunk is 40 px
    geom = _raster(shape, chunks)
    spec = PatchSpec({"y": 6, "x": 6}, sampling="random", patches_per_epoch=60)
    patches = plan_patches(geom, spec)
    order = epoch_patches(patches, spec, epoch=0, seed=0, block_chunks=4)
    assert order.region_draws is not None
    draws = order.region_draws.reshape(shape[0] // chunks[0], shape[1] // chunks[1])
    held = patches.region_counts.reshape(draws.shape)
    origins = order.origins_between(0, order.n_patches)
    svg = Svg(
        480,
        340,
        "Random sampling: patches_per_epoch draws split over regions, then origins drawn "
        "uniformly inside each region",
    )
    x0, y0, c = 20, 44, chunks[0] * px
    svg.text(x0, 24, "60 random 6 x 6 patches, 24 x 32 elements, 4 x 4 chunks", fill=INK)
    for cy in range(draws.shape[0]):
        for cx in range(draws.shape[1]):
            fill = "#eeeeee" if held[cy, cx] == 0 else LIGHT
            svg.rect(x0 + cx * c, y0 + cy * c, c, c, fill=fill, stroke=BLUE, stroke_width=1)
    for oy, ox in origins.tolist():
        svg.circle(x0 + (ox + 0.5) * px, y0 + (oy + 0.5) * px, 2.6, fill=RED, fill_opacity=0.8)
    for cy in range(draws.shape[0]):  # the counts last, on a badge above the dots
        for cx in range(draws.shape[1]):
            if held[cy, cx]:
                bx, by = x0 + (cx + 1) * c - 15, y0 + cy * c + 2
                svg.rect(bx, by, 13, 14, fill="#fff", fill_opacity=0.85, rx=2)
                svg.text(
                    bx + 6.5, by + 11, str(int(draws[cy, cx])), fill=INK, text_anchor="middle", font_size=11
                )
    svg.notes(
        x0,
        y0 + shape[0] * px + 22,
        [
            "number: the region's draws this epoch; dot: a drawn origin;",
            "grey: no origin (a 6 x 6 patch from there would run off the array)",
        ],
        step=17,
    )
    return svg.render()


FIGURES: dict[str, Callable[[], str]] = {
    "grid.svg": grid,
    "edges.svg": edges,
    "regions.svg": regions,
    "random.svg": random_draws,
}


def main(out: Path = HERE) -> None:
    for name, draw in FIGURES.items():
        (out / name).write_text(draw())


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)

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


def weighted() -> str:
    """A weighted draw on a 128 x 128 image in 16 x 16 chunks with a mask positive (at half
    density) in its top-left quadrant: the positive region, the image chunks the pass read, and
    the centres of 400 patches of 8 x 8, from an actual epoch."""
    import tempfile

    import numpy as np
    import zarr

    import insitu
    from insitu.testing import RecordingStore

    n, chunk, patch, px = 128, 16, 8, 3
    rng = np.random.default_rng(0)
    mask = np.zeros((n, n), dtype="u1")
    mask[: n // 2, : n // 2] = rng.random((n // 2, n // 2)) < 0.5
    with tempfile.TemporaryDirectory() as tmp:
        root = zarr.open_group(f"{tmp}/f.zarr", mode="w")
        for name, data in {"image": np.zeros((n, n), "f4"), "mask": mask}.items():
            arr = root.create_array(
                name, shape=data.shape, chunks=(chunk, chunk), dtype=data.dtype, dimension_names=("y", "x")
            )
            arr[:] = data
        store = RecordingStore(insitu.open_store(f"{tmp}/f.zarr"))
        geoms = insitu.open_geometries(store)
        ds = insitu.InSituDataset(
            store,
            insitu.split_by_chunk(geoms["image"], fractions=(1.0,)),
            geometries=[geoms["image"], geoms["mask"]],
            patch={"y": patch, "x": patch},
            patch_sampling="random",
            patches_per_epoch=400,
            patch_weights="mask",
        )
        store.reads.clear()  # what the epoch reads, not the summary pass
        origins = np.concatenate([b.patch_origins for b in ds.train])
        read = {
            tuple(int(v) for v in k.split("/")[-2:]) for k in store.chunk_gets() if k.startswith("image/")
        }
        ds.close()
    x0, y0, side = 20, 40, n * px
    svg = Svg(620, 440, "A mask-weighted draw: patches only where the mask is, chunks read only there")
    svg.text(
        10, 22, f"{n} x {n} image, {chunk} x {chunk} chunks; mask positive in the top-left quadrant", fill=INK
    )
    svg.rect(x0, y0, side, side, fill="#fff", stroke=INK)
    svg.rect(x0, y0, side // 2, side // 2, fill="#c5cae9")
    cell = chunk * px
    for i, j in sorted(read):
        svg.rect(x0 + j * cell, y0 + i * cell, cell, cell, fill=ORANGE, fill_opacity=0.3)
    for k in range(n // chunk + 1):
        svg.line(x0 + k * cell, y0, x0 + k * cell, y0 + side, stroke="#9e9e9e", stroke_width=0.5)
        svg.line(x0, y0 + k * cell, x0 + side, y0 + k * cell, stroke="#9e9e9e", stroke_width=0.5)
    for y, x in origins.tolist():
        svg.circle(x0 + (x + patch / 2) * px, y0 + (y + patch / 2) * px, 1.6, fill=RED)
    svg.notes(
        x0 + side + 16,
        y0 + 10,
        [
            "blue: where the mask is positive",
            "orange: image chunks the epoch read",
            f"  ({len(read)} of {(n // chunk) ** 2})",
            f"red: centres of the {len(origins)} patches",
            "",
            "regions the mask leaves empty",
            "get no draw: their chunks are",
            "never fetched, for any array",
        ],
    )
    return svg.render()


def stitched() -> str:
    """A stitched output over a 40 x 64 raster: a stand-in model answers each 16 x 16 patch (every
    12, so neighbours overlap by 4) with one value, alternating 0 and 1 like a checkerboard; the
    stitcher blends them with the taper window, so the seams ramp instead of jumping."""
    import tempfile

    import numpy as np
    import zarr

    import insitu

    h, w, size, stride, px = 40, 64, 16, 12, 6
    with tempfile.TemporaryDirectory() as tmp:
        root = zarr.open_group(f"{tmp}/r.zarr", mode="w")
        arr = root.create_array(
            "image", shape=(h, w), chunks=(24, 32), dtype="f4", dimension_names=("y", "x")
        )
        arr[:] = 0.0
        store = insitu.open_store(f"{tmp}/r.zarr")
        image = insitu.open_geometries(store)["image"]
        ds = insitu.InSituDataset(
            store,
            insitu.split_by_chunk(image, fractions=(1.0,), names=("train",)),
            geometries=[image],
            batch_size=8,
            patch={"y": size, "x": size},
            patch_stride={"y": stride, "x": stride},
        )
        origins = []
        with insitu.PatchStitcher(f"{tmp}/out.zarr", "p", view=ds.all, blend="taper") as stitcher:
            for batch in ds.all:
                o = batch.patch_origins
                origins.append(o)
                value = ((o[:, 0] // stride + o[:, 1] // stride) % 2).astype("f4")
                stitcher.add(batch, np.broadcast_to(value[:, None, None], (len(o), size, size)).copy())
        out = np.asarray(zarr.open_array(f"{tmp}/out.zarr", path="p")[:])
        ds.close()
    x0, y0 = 20, 40
    svg = Svg(620, 350, "A stitched output: patch answers blended with the taper window across overlaps")
    svg.text(
        10, 22, f"{h} x {w} raster, patches of {size} every {stride}: each answers 0 or 1, blended", fill=INK
    )
    shades = np.rint(255 - 180 * out).astype(int)
    for i in range(h):
        j = 0
        while j < w:  # one rectangle per run of equal shade along the row
            end = j + 1
            while end < w and shades[i, end] == shades[i, j]:
                end += 1
            shade = int(shades[i, j])
            svg.rect(x0 + j * px, y0 + i * px, (end - j) * px, px, fill=f"rgb({shade},{shade},255)")
            j = end
    for y, x in np.concatenate(origins).tolist()[:3]:
        svg.rect(x0 + x * px, y0 + y * px, size * px, size * px, fill="none", stroke=RED, stroke_width=1.5)
    svg.notes(
        x0,
        y0 + h * px + 24,
        [
            "darker: closer to 1; red: three of the patches (each overlaps the next by 4)",
            "inside a patch its own answer; in an overlap a tapered mix of the two or four answers",
        ],
    )
    return svg.render()


FIGURES: dict[str, Callable[[], str]] = {
    "blend.svg": blend,
    "stitched.svg": stitched,
    "weighted.svg": weighted,
}


def main(out: Path = HERE) -> None:
    for name, draw in FIGURES.items():
        (out / name).write_text(draw())


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)

"""Train a spectrum autoencoder fibre by fibre, in place, on two chunk layouts of one archive.

Each sample is one fibre's spectrum: ``flux`` and its inverse variance
``ivar`` over the wavelength grid, read from ``(fibre, wavelength)`` Zarr
arrays whose sample axis is the fibre. The synthetic archive stores the same
values twice: ``chunked64/`` (64 spectra per chunk) and ``chunked1/`` (one
spectrum per chunk). Which layout is read is decided by the geometries alone:
the split, the shuffle and therefore every batch are the same, so the same
model trains to the same weights; what differs is the number of objects
read and the throughput, printed as a table.

The autoencoder (an MLP with a bottleneck of ``--components`` numbers)
is scored on held-out fibres by the reduced chi² of its reconstruction
(inverse-variance weighted, masked pixels left out) against PCA with the
same number of components, fitted on the training fibres (numpy SVD) and
fitted to each held-out spectrum by weighted least squares.

    python -m examples.sdss                 # synthetic: 8192 fibres x 1024 wavelengths, ~1 min
    python -m examples.sdss --smoke         # 2048 x 512, a few seconds
    python -m examples.sdss --store /data/spectra.zarr --layouts ""      # your own archive

Real data: SDSS and DESI publish their spectra as FITS files, not Zarr, and
no public Zarr copy is known to this example, so ``--store`` reads a Zarr
archive you made: float32 arrays ``flux`` and ``ivar`` of shape (fibre,
wavelength) (names set by ``--flux`` and ``--ivar``), in the group(s) named
by ``--layouts`` (comma-separated; ``""`` for the store's root). The fibre
axis is found by its name when the arrays name their dimensions
(``--sample-dim``), else it is axis 0. Two layouts are compared when you
give two; one trains and scores alone.
"""

from __future__ import annotations

import os
import tempfile
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import insitu
from examples.common import Result, finish, parser
from examples.sdss.data import LAYOUTS, make_spectra, write_archive
from examples.sdss.model import PCA, Moments, SpectrumAutoencoder, chi2_loss, chi2_terms


@dataclass(frozen=True)
class Sizes:
    """How much to do in each mode: synthetic fibres and wavelengths, epochs, batch size."""

    epochs: int
    batch_size: int
    fibres: int = 0
    wavelengths: int = 0


SMOKE = Sizes(fibres=2048, wavelengths=512, epochs=30, batch_size=64)
DEFAULT = Sizes(fibres=8192, wavelengths=512, epochs=30, batch_size=128)
REAL = Sizes(epochs=30, batch_size=128)
REAL_SMOKE = Sizes(epochs=10, batch_size=64)


class Normalize:
    """Batch transform: each spectrum scaled to unit RMS over its good pixels (ivar scaled to match),
    so that bright and faint fibres weigh alike; ``scale`` keeps the factor."""

    def __call__(self, batch: insitu.Batch) -> insitu.Batch:
        flux, ivar = batch["flux"], batch["ivar"]
        good = ivar > 0
        rms = np.sqrt((np.where(good, flux, 0) ** 2).sum(axis=1) / np.maximum(good.sum(axis=1), 1))
        scale = np.maximum(rms, 1e-12).astype(np.float32)[:, None]
        return batch.replace({"flux": flux / scale, "ivar": ivar * scale**2, "scale": scale[:, 0]})


@dataclass
class LayoutRun:
    """What training on one layout gave: scores, counters, throughput and a digest of the batches."""

    layout: str
    per_chunk: int
    model_chi2: float
    pca_chi2: float
    reads: int
    chunks_decoded: int
    bytes_read: int
    load_samples_per_s: float
    train_samples_per_s: float
    batches_digest: str


def open_layout(store: Any, group: str, *, flux: str, ivar: str, sample_dim: str | None) -> list[Any]:
    """The flux and ivar geometries of one layout, labelled ``flux`` and ``ivar`` in batches."""
    geoms = insitu.open_geometries(store, [flux, ivar], sample_dim=sample_dim, path=group)
    return [geoms[flux].named("flux"), geoms[ivar].named("ivar")]


def make_dataset(
    store: Any,
    geoms: Sequence[Any],
    manifest: insitu.SplitManifest,
    *,
    seed: int,
    batch_size: int,
    cache_bytes: int | None,
) -> insitu.InSituDataset:
    options: dict[str, Any] = {} if cache_bytes is None else {"cache_budget_bytes": cache_bytes}
    return insitu.InSituDataset(
        store,
        manifest,
        list(geoms),
        batch_size=batch_size,
        block_chunks=4,  # shuffled together: 4 x 64 fibres (the manifest's chunks, whatever the layout)
        seed=seed,
        batch_transforms=[Normalize()],
        **options,
    )


def fit_pca(ds: insitu.InSituDataset, k: int, max_spectra: int) -> tuple[PCA, Moments]:
    """PCA and per-wavelength moments from (at most ``max_spectra``) training spectra, one pass."""
    spectra, weights = [], []
    moments: Moments | None = None
    held = 0
    for batch in ds.train:
        x, w = batch["flux"], batch["ivar"]
        moments = moments or Moments(x.shape[1])
        moments.add(x, w)
        if held < max_spectra:
            spectra.append(x[: max_spectra - held].copy())
            weights.append(w[: max_spectra - held].copy())
            held += len(spectra[-1])
    assert moments is not None, "the training split is empty"
    return PCA(np.concatenate(spectra), np.concatenate(weights), k), moments


def run_layout(
    store: Any,
    layout: str,
    geoms: Sequence[Any],
    manifest: insitu.SplitManifest,
    *,
    k: int,
    epochs: int,
    seed: int,
    batch_size: int,
    cache_bytes: int | None,
    max_pca: int,
) -> LayoutRun:
    """Fit PCA, train the autoencoder, score both on the test fibres: all read from ``geoms``."""
    # The loader alone, cold: one pass over the training fibres with nothing else to do.
    with make_dataset(
        store, geoms, manifest, seed=seed, batch_size=batch_size, cache_bytes=cache_bytes
    ) as probe:
        for _ in probe.train:
            pass
        load_rate = probe.stats["samples_per_s"]

    with make_dataset(
        store, geoms, manifest, seed=seed, batch_size=batch_size, cache_bytes=cache_bytes
    ) as ds:
        pca, moments = fit_pca(ds, k, max_pca)
        torch.manual_seed(seed)
        model = SpectrumAutoencoder(moments.mean, moments.std, k)
        loader = insitu.as_torch(ds.train)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        schedule = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=3e-3, total_steps=max(1, epochs * len(loader))
        )
        digest = 0
        model.train()
        train_started, trained = time.perf_counter(), 0
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            for batch in loader:
                x, w = batch["flux"], batch["ivar"]
                if epoch == 0:  # what the model saw, in order: equal digests mean equal batches
                    digest = zlib.crc32(batch.sample_indices.numpy().tobytes(), digest)
                    digest = zlib.crc32(x.numpy().tobytes(), digest)
                loss = chi2_loss(model(x, w), x, w)
                optimizer.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                optimizer.step()
                schedule.step()
                trained += len(x)
        train_rate = trained / (time.perf_counter() - train_started)
        model.eval()
        ours, base, pixels = 0.0, 0.0, 0
        with torch.no_grad():
            for batch in insitu.as_torch(ds.test):
                x, w = batch["flux"], batch["ivar"]
                x_np, w_np = x.numpy(), w.numpy()
                ours += chi2_terms(x_np, model(x, w).numpy(), w_np)[0]
                sq, n = chi2_terms(x_np, pca.reconstruct(x_np, w_np), w_np)
                base += sq
                pixels += n
        stats = ds.stats
    return LayoutRun(
        layout=layout or "/",
        per_chunk=geoms[0].chunk_len,
        model_chi2=ours / max(pixels, 1),
        pca_chi2=base / max(pixels, 1),
        reads=int(stats["reads"]),
        chunks_decoded=int(stats["chunks_decoded"]),
        bytes_read=int(stats["bytes_read"]),
        load_samples_per_s=float(load_rate),
        train_samples_per_s=train_rate,
        batches_digest=f"{digest:08x}",
    )


def table(runs: Sequence[LayoutRun]) -> str:
    """The layouts side by side."""
    head = (
        "layout",
        "spectra/chunk",
        "reads",
        "chunks decoded",
        "MB read",
        "load samples/s",
        "train samples/s",
        "AE chi2",
        "batches",
    )
    rows = [
        (
            r.layout,
            str(r.per_chunk),
            str(r.reads),
            str(r.chunks_decoded),
            f"{r.bytes_read / 1e6:.1f}",
            f"{r.load_samples_per_s:,.0f}",
            f"{r.train_samples_per_s:,.0f}",
            f"{r.model_chi2:.4f}",
            r.batches_digest,
        )
        for r in runs
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(n) for h, n in zip(head, widths, strict=True))]
    lines += ["  ".join(c.rjust(n) for c, n in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--epochs", type=int, default=None, help="training epochs (default: by mode)")
    p.add_argument("--batch-size", type=int, default=None, help="spectra per batch (default: by mode)")
    p.add_argument("--components", type=int, default=6, help="autoencoder bottleneck = PCA components")
    p.add_argument(
        "--layouts",
        default=None,
        help="comma-separated groups holding flux/ivar, one per chunk layout ('' = the root); "
        f"synthetic default: {','.join(LAYOUTS)}",
    )
    p.add_argument("--flux", default="flux", help="name of the flux array")
    p.add_argument("--ivar", default="ivar", help="name of the inverse-variance array (0 = masked)")
    p.add_argument("--sample-dim", default=None, help="the fibre dimension's name (default: the leading one)")
    p.add_argument("--test-fraction", type=float, default=0.2, help="fibres held out for the test")
    p.add_argument(
        "--cache-mb", type=float, default=None, help="decoded-chunk cache, MiB (default: insitu's, 1 GiB)"
    )
    p.add_argument(
        "--max-pca", type=int, default=50_000, help="training spectra the PCA is fitted on, at most"
    )
    args = p.parse_args(argv)
    started = time.perf_counter()
    torch.set_num_threads(max(1, min(4, (os.cpu_count() or 2) // 2)))
    real = args.store is not None
    sizes = REAL if real else (SMOKE if args.smoke else DEFAULT)
    if real and args.smoke:
        sizes = REAL_SMOKE
    epochs = args.epochs or sizes.epochs
    with tempfile.TemporaryDirectory(prefix="insitu-sdss-") as tmp:
        if real:
            url = args.store
            layouts = ("" if args.layouts is None else args.layouts).split(",")
        else:
            url = str(Path(args.workdir or tmp) / "spectra.zarr")
            wave, flux, ivar, truth = make_spectra(sizes.fibres, sizes.wavelengths, seed=args.seed)
            write_archive(url, wave, flux, ivar, truth=truth)
            layouts = list(LAYOUTS) if args.layouts is None else args.layouts.split(",")
        store = insitu.open_store(url)
        geoms = {
            name: open_layout(store, name, flux=args.flux, ivar=args.ivar, sample_dim=args.sample_dim)
            for name in layouts
        }
        reference = geoms[layouts[0]][0]
        # One manifest for every layout: the split and the shuffle are the same, so are the batches.
        manifest = insitu.split_by_chunk(
            reference,
            (1 - args.test_fraction, args.test_fraction),
            names=("train", "test"),
            contiguous=False,
            seed=args.seed,
        )
        cache = int(args.cache_mb * 2**20) if args.cache_mb else None
        print(
            f"sdss: {url}: {reference.n_samples} fibres x {reference.sample_shape[0]} wavelengths, "
            f"sample axis {reference.sample_dim or reference.sample_axis!r}; layouts "
            + ", ".join(f"{name or '/'} (chunks {g[0].chunk_shape})" for name, g in geoms.items())
            + f"; {len(manifest.samples('test'))} fibres held out"
        )
        runs = [
            run_layout(
                store,
                name,
                geoms[name],
                manifest,
                k=args.components,
                epochs=epochs,
                seed=args.seed,
                batch_size=args.batch_size or sizes.batch_size,
                cache_bytes=cache,
                max_pca=args.max_pca,
            )
            for name in layouts
        ]
    print(table(runs))
    first = runs[0]
    result = Result(
        example="sdss",
        metric="held-out chi2/pixel",
        model=first.model_chi2,
        baseline=first.pca_chi2,
        baseline_name=f"PCA, {args.components} components",
        higher_is_better=False,
        seconds=time.perf_counter() - started,
    )
    return finish(result, args)

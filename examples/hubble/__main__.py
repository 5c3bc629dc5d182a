"""``python -m examples.hubble``: denoise WFC3/IR frames read in place from FITS files.

python -m examples.hubble --smoke                  # simulated frames, seconds
python -m examples.hubble                          # more and larger simulated frames
python -m examples.hubble --store s3://stpubdata/hst/public --rootnames icqtbbbxq,icqtbbc0q
python -m examples.hubble --store /data/flt/       # every *_flt.fits under a directory
"""

from __future__ import annotations

import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch

from examples.common import Result, finish, parser, run
from examples.hubble.data import MAST_REGION, frame_urls, make_dataset, open_frames
from examples.hubble.model import MEDIAN_SIZE, build_denoiser, evaluate, train
from examples.hubble.simulate import write_frames

# (simulated frames, frame side, epochs, training crop side, frames per batch)
SIZES = {"smoke": (24, 128, 20, 48, 2), "full": (96, 256, 30, 64, 4)}


def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--rootnames", default="", help="with --store PREFIX: exposures to read, comma-separated")
    p.add_argument("--frames", type=int, default=None, help="simulated frames (default 24 smoke, 96 full)")
    p.add_argument("--size", type=int, default=None, help="simulated frame side in pixels (1014: full frame)")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--test-fraction", type=float, default=0.25, help="frames held out (the last ones)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: steady beside insitu's own threads)",
    )
    args = p.parse_args(argv)
    start = time.perf_counter()
    # zarr warns that TRUTH's scale-offset codec (FITS BSCALE/BZERO) is not in the Zarr v3 spec
    # each time the array is opened; insitu-stores uses it on purpose and the values are right.
    warnings.filterwarnings("ignore", message="Numcodecs codecs are not in the Zarr version 3")
    torch.manual_seed(args.seed)
    # insitu's decode and gather threads (the batch transform runs there) share the cores with
    # torch. With two OpenMP threads on two busy cores, torch's spinning barriers stalled (once
    # measured: the same 180 steps in 36 s instead of 3.4 s with one thread). One thread is steady.
    torch.set_num_threads(args.threads)
    n_frames, side, epochs, crop, batch_size = SIZES["smoke" if args.smoke else "full"]
    epochs = args.epochs or epochs

    with tempfile.TemporaryDirectory(prefix="insitu-hubble-") as tmp:
        if args.store is None:
            workdir = Path(args.workdir) if args.workdir else Path(tmp)
            shape = (args.size or side,) * 2
            paths = write_frames(workdir, args.frames or n_frames, shape, args.seed)
            frames = open_frames(paths, truth=True)
            on_bad_chunk = "raise"
        else:
            rootnames = [r for r in args.rootnames.split(",") if r]
            urls = frame_urls(args.store, rootnames)
            remote = "://" in urls[0] and not urls[0].startswith("file://")
            options = {"anonymous": True, "region": MAST_REGION} if urls[0].startswith("s3://") else {}
            frames = open_frames(urls, truth=False, **options)
            # A frame that cannot be fetched after the store's retries is left out, not fatal.
            on_bad_chunk = "skip" if remote else "raise"
        if frames.n_frames < 2:
            raise SystemExit("need at least two frames: one to train on, one to hold out")
        test_fraction = max(args.test_fraction, 1.0 / frames.n_frames)
        # Several windows of each frame per step; more of a large frame (1014 x 1014: 27).
        area = frames.frame_shape[0] * frames.frame_shape[1]
        per_frame = min(32, max(4, area // (16 * crop * crop)))
        dataset = make_dataset(
            frames,
            seed=args.seed,
            batch_size=batch_size,
            test_fraction=test_fraction,
            on_bad_chunk=on_bad_chunk,
        )
        with dataset:
            model = build_denoiser()
            log = train(
                dataset,
                model,
                epochs=epochs,
                lr=args.lr,
                seed=args.seed,
                crop=crop,
                crops_per_frame=per_frame,
            )
            scores = evaluate(dataset.test, model)
            stats = dataset.stats
        source = "simulated" if frames.simulated else "archive"
        print(
            f"hubble: {frames.n_frames} {source} frames of {frames.frame_shape} read in place from FITS "
            f"({len(dataset.manifest.splits['train'])} train / {scores.frames} held out); "
            f"{log.steps} steps, last loss {log.last_loss:.3g}; noisy input {scores.noisy:.2f} dB; "
            f"{stats['reads']} byte-range reads, {stats['skipped_samples']} frames skipped"
        )
    result = Result(
        example="hubble",
        metric="PSNR dB",
        model=scores.model,
        baseline=scores.median,
        baseline_name=f"median filter {MEDIAN_SIZE}x{MEDIAN_SIZE}",
        higher_is_better=True,
        seconds=time.perf_counter() - start,
    )
    return finish(result, args)


if __name__ == "__main__":
    run(main)

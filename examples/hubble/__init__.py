"""Denoise Hubble WFC3/IR frames read in place from their FITS files, against a median filter.

**Geometry.** One exposure is one ``_flt.fits`` file, the archive's calibrated
product: an empty primary HDU, then ``SCI`` (count rate, e-/s, float32),
``ERR``, ``DQ`` (int16 data-quality bits), ``SAMP``, ``TIME`` and a
``WCSCORR`` table. ``insitu_stores.virtual_store(files, hdus=["SCI", "DQ"])``
stacks the chosen extensions of all files into one Zarr array each, with a
new first axis ``file``: ``SCI`` is ``(n_files, 1014, 1014)`` for full
frames. That axis is the sample axis and each file is one chunk, so one
sample is one frame, splits never cut a frame, and a batch of ``B`` frames
is ``B`` byte-range reads per array. Train/held-out splits are by file
(``split_by_chunk``: the first 75 % train, the rest held out).

**How the bytes are referenced (no copy).** Building the store reads only
the files' headers (astropy parses them through ranged reads). Chunk ``i``
of ``SCI`` is a reference ``(file i, offset, length)``: the offset of file
``i``'s SCI data block (its header's end) and its size, ``NAXIS1 x NAXIS2
x |BITPIX|/8`` bytes; a FITS data block is one contiguous big-endian array,
so that range *is* the frame. insitu fetches it with one ranged read
(obstore, for S3 and local files alike) and decodes the big-endian
values into its pool; BSCALE/BZERO, where a header has them, are applied on
read (``BZERO + BSCALE * stored``). Nothing is converted or written: no
Zarr copy exists anywhere. :func:`examples.hubble.data.references` lists
the references; the tests check every byte the engine reads against them.

**Bad pixels.** A pixel is masked where its ``DQ`` has a bad bit
(:data:`~examples.hubble.data.BAD_DQ`: bad detector pixel, hot, unstable,
saturated, bad flat, A-to-D saturated) or its value is NaN/inf. A batch
transform (:class:`~examples.hubble.data.DenoisingPairs`) sets masked pixels
to the sky level and adds a ``good`` channel; the network sees it, and the
loss and the scores use good pixels only.

**Training setup.** Simulated frames (the default, :mod:`.simulate`) carry
the noiseless frame they were drawn from in a ``TRUTH`` extension (int16
with BSCALE/BZERO), so the model learns noisy ``SCI`` -> clean ``TRUTH``:
read and shot noise, unflagged cosmic rays. Archive frames have no truth:
the target is ``SCI`` as archived and the input is ``SCI`` plus added read
noise and cosmic rays (redrawn every epoch for training, fixed for held-out
frames), so the score measures how much of the added noise is removed. The
model is a residual network of five 3x3 convolutions trained on random
48x48 windows; held-out frames are denoised whole and scored by PSNR (dB,
e-/s, good pixels, truth range as peak) against a 3x3 median filter
(``scipy.ndimage.median_filter``) of the same input.

**Real data.** ``--store s3://stpubdata/hst/public --rootnames
icqtbbbxq,icqtbbc0q`` reads two full-frame F140W exposures (program 14037)
from the archive's public AWS bucket (anonymous, us-east-1) in the layout
``<prefix>/<ipppp>/<rootname>/<rootname>_flt.fits``, through the same
functions as the simulated files: only the URLs and the connection options
differ. Any files of one shape work: ``--store a_flt.fits,b_flt.fits`` or a
local directory.
"""

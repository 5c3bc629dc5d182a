from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from s3_servers import FaultProxy, S3Server


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """A real S3 API server on 127.0.0.1 (random free port), stopped after the session."""
    server = S3Server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def bucket(s3: S3Server) -> str:
    """A fresh, empty bucket on the S3 server."""
    return s3.new_bucket()


@pytest.fixture
def proxy(s3: S3Server) -> Iterator[FaultProxy]:
    """A fault-injecting proxy in front of the S3 server (no faults until a test adds some)."""
    p = FaultProxy(s3.endpoint)
    try:
        yield p
    finally:
        p.stop()


def write_fits(
    path: Path, *, seed: int = 0, scaled: bool = True, table: bool = True
) -> dict[str, np.ndarray]:
    """A FITS file with a scaled int16 cube (PRIMARY), a float32 image (FLUX), a table (TAB).

    Returns the physical values astropy reads for each image HDU.
    """
    from astropy.io import fits

    rng = np.random.default_rng(seed)
    raw = rng.integers(-3000, 3000, size=(12, 6, 5)).astype(">i2")
    primary = fits.PrimaryHDU(raw)
    if scaled:
        primary.header["BSCALE"] = 0.25
        primary.header["BZERO"] = 100.0
    flux = fits.ImageHDU(rng.normal(size=(8, 4)).astype(">f4"), name="FLUX")
    hdus = [primary, flux]
    if table:
        col = fits.Column(name="a", format="E", array=np.arange(3, dtype="float32"))
        hdus.append(fits.BinTableHDU.from_columns([col], name="TAB"))
    fits.HDUList(hdus).writeto(path, overwrite=True)
    with fits.open(path) as hdul:
        return {"PRIMARY": np.array(hdul[0].data, dtype="f8"), "FLUX": np.array(hdul["FLUX"].data)}


# moto's server logs every request through werkzeug: noise in a failing test's report.
logging.getLogger("werkzeug").setLevel(logging.WARNING)

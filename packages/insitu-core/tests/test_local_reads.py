"""Local chunk files read into a decode thread's reused buffer: whole files of any size in any
order come back exactly, whether or not the buffer already holds more than the file."""

from __future__ import annotations

import os
from pathlib import Path

import zarr

from insitu.store.fetch import ChunkFetcher
from insitu.store.retry import RetryPolicy


def test_whole_files_of_changing_sizes_read_back_exactly_into_the_reused_buffer(tmp_path: Path) -> None:
    sizes = [100, 100, 100, 99, 101, 0, 5000, 5000, 4999, 10_001, 7, 10_001, 20_003]
    for i, n in enumerate(sizes):
        (tmp_path / f"k{i}").write_bytes(os.urandom(n))
    fetcher = ChunkFetcher(zarr.storage.LocalStore(tmp_path), RetryPolicy())
    for i, n in enumerate(sizes):
        versions: list[str | None] = []
        got = fetcher.read_file(f"k{i}", reuse=True, versions=versions if i % 2 else None)
        assert bytes(got) == (tmp_path / f"k{i}").read_bytes(), (i, n)
        if i % 2:
            assert versions[0] is not None
            assert versions[0].startswith(f"{n}-")
    assert fetcher.read_file("missing", reuse=True) is None
    # Ranges and suffixes still read only what they ask for.
    whole = (tmp_path / "k6").read_bytes()
    assert bytes(fetcher.read_file("k6", (10, 30), reuse=True)) == whole[10:30]
    assert bytes(fetcher.read_file("k6", suffix=40, reuse=True)) == whole[-40:]
    assert bytes(fetcher.read_file("k6")) == whole

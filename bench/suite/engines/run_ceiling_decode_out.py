"""Decode-and-write ceiling: ``run_ceiling_decode.py`` with each thread's output going to successive
places of a 64 MiB ring (faulted in beforehand) rather than one cache-resident buffer.

Every loader must write what it delivers to memory at least once; on the 2-core
reference machine that alone costs a quarter of the decode ceiling (two threads
decoding zstd fields into reused buffers vs into memory beyond the caches). This is
that bound: decode plus one write of the output, still no IO, gather or shuffle.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run_ceiling_decode

if __name__ == "__main__":
    run_ceiling_decode.main(ring_mb=64)

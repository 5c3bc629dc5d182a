"""Decode-and-keep ceiling: ``run_ceiling_decode.py`` with every pass decoding the whole epoch into
fresh memory, each chunk in its own place, as a cold pass that keeps the epoch for the next must.

A loader that caches decoded chunks (insitu at its default ``cache_budget_bytes="auto"``)
writes every byte of the first epoch into pages never touched before, and the kernel
commits each page (zeroes and maps it) as it is first written; a streaming loader
decodes into recycled memory and pays none of that. Beside ``ceiling_decode_out``
(decode plus one write to warm memory) this bounds how close a caching cold pass can
come to a streaming one on the machine at hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run_ceiling_decode

if __name__ == "__main__":
    run_ceiling_decode.main(keep=True)

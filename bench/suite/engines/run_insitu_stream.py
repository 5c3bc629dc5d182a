"""Runner for insitu with no cache (``cache_budget_bytes=0``): every pass streams.

The mode for one cold pass: slabs are decoded into per-thread scratch (or
straight into their batch row) and copied into recycled batch buffers; nothing
is kept for a later pass, so the warm epoch reads and decodes again. Same
protocol, stores and other tuning as ``run_insitu.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run_insitu

if __name__ == "__main__":
    run_insitu.main(budget=0)

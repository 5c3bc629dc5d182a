"""Benchmark entry point (``nox -s bench``): insitu beside its peers and the machine's ceilings.

    python bench/run.py                         # quick mode: minutes on two cores
    python bench/run.py --mode full --docs      # every case x condition; rewrites docs/benchmarks.md
    python bench/run.py --help

Each engine runs in a fresh process per run (see ``bench/suite/driver.py`` and
``bench/README.md``). ``stores_s3.py`` (obstore against fsspec on loopback S3)
runs on its own.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "suite"))

from driver import main

if __name__ == "__main__":
    sys.exit(main())

"""Benchmark entry point (``nox -s bench``): the engine against the machine's ceilings.

``python bench/run.py`` runs the quick configuration; arguments are passed to
``engine_ceiling.py`` (``--samples 4096 --repeats 5`` for a fuller run).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.argv = [str(Path(__file__).with_name("engine_ceiling.py")), *sys.argv[1:]]
    runpy.run_path(sys.argv[0], run_name="__main__")

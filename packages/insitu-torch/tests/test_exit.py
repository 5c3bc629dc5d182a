"""A training script that never closes its dataset exits promptly and quietly, DataLoader and all."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import zarr

EXIT_TIMEOUT_S = 90  # a hang at exit is what this catches; torch's import alone takes seconds here

SCRIPT = """
import torch, zarr, insitu
from torch.utils.data import DataLoader
store = zarr.storage.LocalStore({root!r}, read_only=True)
g = insitu.open_geometries(store)
ds = insitu.InSituDataset(store, insitu.split_by_chunk(g["x"], fractions=(0.75, 0.25)), batch_size=8)
loader = DataLoader(insitu.as_torch(ds.train), batch_size=None, num_workers=0)
{body}
"""

BODIES = {
    "whole_epoch": "n = sum(len(b['x']) for b in loader)\nassert n == 48, n",
    "partial_epoch": "it = iter(loader)\nb = next(it)\nassert b['x'].shape == (8, 3, 4)",
    "break_then_val": "for b in loader:\n    break\nfor b in ds.val:\n    pass",
}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("exit")
    data = np.arange(64 * 12, dtype="f4").reshape(64, 3, 4)
    zarr.open_group(path, mode="w").create_array("x", shape=data.shape, chunks=(8, 3, 4), dtype="f4")[...] = (
        data
    )
    return path


@pytest.mark.parametrize("case", sorted(BODIES))
def test_script_with_a_dataloader_that_never_closes_exits_promptly(case: str, root: Path) -> None:
    code = textwrap.dedent(SCRIPT.format(root=str(root), body=BODIES[case]))
    proc = subprocess.run(
        [sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, timeout=EXIT_TIMEOUT_S
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr

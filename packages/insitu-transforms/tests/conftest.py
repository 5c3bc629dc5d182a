"""Every test gets its own regrid weight cache: nothing is written to, or read from, the user's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _private_weight_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from insitu_transforms.regrid import cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache.clear_memory()
    yield
    cache.clear_memory()

"""insitu plugin: registers the PyTorch adapters (torch itself loads on first call)."""

from __future__ import annotations

from insitu.plugin_api import RegisterAdapter, hookimpl
from insitu_torch.adapter import as_torch, to_torch


@hookimpl
def insitu_register_adapters(register: RegisterAdapter) -> None:
    """``as_torch`` (view -> IterableDataset) and ``to_torch`` (batch -> tensors)."""
    register("as_torch", as_torch)
    register("to_torch", to_torch)

"""``python -m insitu``: the same as the ``insitu`` console script (top floor, beside the CLI)."""

from insitu.cli import entry_point

entry_point()

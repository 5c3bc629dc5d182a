"""``python -m insitu.cli``: the same as the ``insitu`` console script."""

from insitu.cli import entry_point

entry_point()

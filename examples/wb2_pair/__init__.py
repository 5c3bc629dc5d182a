"""One training task through two loaders over the same WeatherBench2-like store: insitu, and xbatcher
with a torch DataLoader and worker processes. ``python -m examples.wb2_pair [--smoke] [--store URL]``;
see :mod:`examples.wb2_pair.compare`."""

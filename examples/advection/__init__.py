"""Temperature advected by wind: forecast the 24 h temperature change with a small CNN.

One data definition (:mod:`examples.advection.data`) and three training
scripts that share it: ``python -m examples.advection.train_torch``,
``train_jax`` and ``train_tf``. Each trains the same convolutional network on
a training period and must beat persistence (tomorrow = today) on the test
period. Synthetic ERA5-like data by default; ``--store`` trains on
WeatherBench2's ERA5 instead, through the same functions.
"""

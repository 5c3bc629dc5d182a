"""Forecast the 24 h temperature change with a small CNN in plain JAX, trained in place through insitu.

    python -m examples.advection.train_jax --smoke      # synthetic, seconds
    python -m examples.advection.train_jax              # synthetic, 4 years, a few minutes
    python -m examples.advection.train_jax --store gs://weatherbench2/datasets/era5/1959-2023_01_10-6h-64x32_equiangular_conservative.zarr

No neural-network library: the convolutions are ``jax.lax`` calls, the
parameters a list of arrays and the optimiser a dozen lines of Adam.
``insitu.jax_iterator`` hands each batch over as JAX arrays, converting the
next ones while the current step runs. The data definition is
:mod:`examples.advection.data`; the run is :mod:`examples.advection.shared`.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

import insitu
from examples.advection import shared
from examples.common import run

Params = list[tuple[Any, Any]]  # (kernel HWIO, bias) per convolution


class Jax:
    name = "jax"
    layout = "NHWC"  # XLA's CPU convolutions prefer channels last

    def setup(self, seed: int, learning_rate: float, threads: int) -> None:
        if threads == 1 and "jax" not in sys.modules:  # XLA reads its flags once, at import
            os.environ["XLA_FLAGS"] = (
                os.environ.get("XLA_FLAGS", "")
                + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
            )
        import jax
        import jax.numpy as jnp

        self.jax, self.jnp = jax, jnp
        self.learning_rate = learning_rate
        # Same initialisation as torch's Conv2d: uniform within 1/sqrt(fan_in).
        key = jax.random.PRNGKey(seed)
        params: Params = []
        channels = shared.N_INPUTS
        for kernel, width in (*shared.CONV_LAYERS, (1, 1)):
            key, k_w, k_b = jax.random.split(key, 3)
            bound = 1.0 / math.sqrt(channels * kernel * kernel)
            w = jax.random.uniform(k_w, (kernel, kernel, channels, width), minval=-bound, maxval=bound)
            b = jax.random.uniform(k_b, (width,), minval=-bound, maxval=bound)
            params.append((w, b))
            channels = width
        self.params = params
        self.moments = jax.tree_util.tree_map(jnp.zeros_like, (params, params))
        self.step_count = 0

        def forward(params: Params, x: Any) -> Any:
            for i, (w, b) in enumerate(params):
                x = jax.lax.conv_general_dilated(
                    x, w, window_strides=(1, 1), padding="SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
                )
                x = x + b
                if i < len(params) - 1:
                    x = jax.nn.relu(x)
            return x

        def loss(params: Params, x: Any, y: Any) -> Any:
            return jnp.mean(jnp.square(forward(params, x) - y))

        def adam(params: Params, moments: Any, x: Any, y: Any, t: Any) -> tuple[Params, Any, Any]:
            value, grads = jax.value_and_grad(loss)(params, x, y)
            first, second = moments
            beta1, beta2, eps = 0.9, 0.999, 1e-8
            first = jax.tree_util.tree_map(lambda m, g: beta1 * m + (1 - beta1) * g, first, grads)
            second = jax.tree_util.tree_map(lambda v, g: beta2 * v + (1 - beta2) * g * g, second, grads)
            scale = self.learning_rate * jnp.sqrt(1 - beta2**t) / (1 - beta1**t)
            params = jax.tree_util.tree_map(
                lambda p, m, v: p - scale * m / (jnp.sqrt(v) + eps), params, first, second
            )
            return params, (first, second), value

        self.forward = jax.jit(forward)
        self.adam = jax.jit(adam)

    def train_epoch(self, view: insitu.DatasetView, max_batches: int | None) -> float:
        total, count = 0.0, 0
        for i, batch in enumerate(insitu.jax_iterator(view)):
            if max_batches is not None and i == max_batches:
                break
            self.step_count += 1
            self.params, self.moments, loss = self.adam(
                self.params, self.moments, batch["x"], batch["y"], self.step_count
            )
            n = int(batch["x"].shape[0])
            total += float(loss) * n
            count += n
        return total / max(count, 1)

    def predict(self, view: insitu.DatasetView) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for batch in insitu.jax_iterator(view):
            yield np.asarray(self.forward(self.params, batch["x"])), np.asarray(batch["dt"])


def main(argv: Sequence[str] | None = None) -> int:
    return shared.main(Jax(), argv, __doc__ or "")


if __name__ == "__main__":
    run(main)

"""``AdapterConformance``: the checks every framework adapter must pass."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from insitu.batch import Batch


class BatchSource:
    """A re-iterable, view-like source of batches: what an adapter gets from ``ds.train``.

    It has the view attributes adapters rely on (``labels``, ``sample_shapes``,
    ``dtypes``, ``batch_size``, ``split``, ``drop_last``, ``len()``).
    """

    def __init__(self, batches: Sequence[Batch], *, batch_size: int, split: str = "train") -> None:
        if not batches:
            raise ValueError("a BatchSource needs at least one batch")
        self.batches = tuple(batches)
        self.batch_size = batch_size
        self.split = split
        self.drop_last = False
        first = self.batches[0]
        self.labels = tuple(first)
        self.sample_shapes = {k: tuple(v.shape[1:]) for k, v in first.items()}
        self.dtypes = {k: v.dtype for k, v in first.items()}

    def __iter__(self) -> Iterator[Batch]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def make_batches(
    n_batches: int,
    batch_size: int,
    dtypes: Mapping[str, str],
    sample_shapes: Mapping[str, tuple[int, ...]],
    *,
    split: str = "train",
    seed: int = 0,
) -> list[Batch]:
    """Deterministic batches with distinct values per batch and label."""
    rng = np.random.default_rng(seed)
    batches = []
    for index in range(n_batches):
        data = {}
        for label, dtype in dtypes.items():
            shape = (batch_size, *sample_shapes.get(label, ()))
            values = rng.integers(0, 100, size=shape)
            data[label] = values.astype(dtype)
        indices = np.arange(index * batch_size, (index + 1) * batch_size, dtype=np.int64)
        batches.append(Batch(data, indices, dict.fromkeys(data, indices), split, 0, index))
    return batches


class AdapterConformance:
    """Base class for a framework adapter's conformance tests.

    Subclass it (``Test`` prefix) and implement :meth:`adapter`; override
    :meth:`to_numpy` when ``np.asarray`` cannot convert the framework's arrays
    and :meth:`output_arrays` when an output item is not a ``{label: array}``
    mapping. Set ``per_batch = True`` for an adapter that converts one
    ``Batch`` (like ``to_jax``) rather than an iterable (like ``as_torch``).
    Narrow ``sample_dtypes`` for a framework that lacks some dtypes.
    """

    per_batch: bool = False
    batch_size: int = 4
    n_batches: int = 3
    sample_dtypes: ClassVar[Mapping[str, str]] = {"x": "float32", "y": "int64", "mask": "uint8"}
    sample_shapes: ClassVar[Mapping[str, tuple[int, ...]]] = {"x": (3, 2), "y": (), "mask": (5,)}

    def adapter(self) -> Callable[[Any], Any]:
        """The adapter under test, e.g. ``insitu_torch.as_torch``."""
        raise NotImplementedError("AdapterConformance subclasses implement adapter()")

    def to_numpy(self, value: Any) -> np.ndarray:
        """Convert one framework array back to numpy."""
        return np.asarray(value)

    def output_arrays(self, item: Any) -> Mapping[str, Any]:
        """The ``{label: framework array}`` mapping inside one output item."""
        return dict(item)

    def source(self) -> BatchSource:
        """The batches fed to the adapter."""
        batches = make_batches(self.n_batches, self.batch_size, self.sample_dtypes, self.sample_shapes)
        return BatchSource(batches, batch_size=self.batch_size)

    def _roundtrip(self) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]]]:
        source = self.source()
        expected = [{k: v.copy() for k, v in batch.items()} for batch in source]
        adapter = self.adapter()
        outputs = [adapter(batch) for batch in source] if self.per_batch else list(adapter(source))
        # Convert only after every output exists, so an adapter that reuses one
        # buffer across batches shows up as wrong values in earlier batches.
        got = [{k: self.to_numpy(v) for k, v in self.output_arrays(item).items()} for item in outputs]
        return expected, got

    def test_one_output_per_batch(self) -> None:
        """The adapter yields exactly one output per batch it is given."""
        expected, got = self._roundtrip()
        assert len(got) == len(expected), f"{len(got)} outputs for {len(expected)} batches"

    def test_labels_survive(self) -> None:
        """Every output holds exactly the labels of its batch."""
        expected, got = self._roundtrip()
        for want, have in zip(expected, got, strict=False):
            assert set(have) == set(want), f"labels {sorted(have)} instead of {sorted(want)}"

    def test_values_survive_in_order(self) -> None:
        """Every output's values equal its batch's, in batch order (converted only once all outputs exist,
        so an adapter reusing one buffer across batches fails)."""
        expected, got = self._roundtrip()
        for index, (want, have) in enumerate(zip(expected, got, strict=False)):
            for label, values in want.items():
                np.testing.assert_array_equal(have[label], values, err_msg=f"batch {index}, label {label!r}")

    def test_dtypes_preserved(self) -> None:
        """Every label keeps its dtype through the adapter."""
        expected, got = self._roundtrip()
        for want, have in zip(expected, got, strict=False):
            for label, values in want.items():
                assert have[label].dtype == values.dtype, f"{label!r}: {have[label].dtype} != {values.dtype}"

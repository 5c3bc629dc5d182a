"""``TransformConformance``: the checks every chunk transform must pass.

A chunk transform is called as ``transform(label, block) -> ndarray`` on a
decoded block (sample axis first) and has a ``fingerprint() -> str`` that goes
into cache keys: if the fingerprint is unstable, cached results are never
reused; if it ignores a parameter, stale results are served.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

# Unpickles a transform from stdin in a fresh interpreter and prints its
# fingerprint; exit code 3 means its class cannot be imported there.
_FINGERPRINT_SCRIPT = """
import pickle, sys
try:
    transform = pickle.loads(sys.stdin.buffer.read())
except (ImportError, AttributeError):
    sys.exit(3)
sys.stdout.write(transform.fingerprint())
"""


class TransformConformance:
    """Base class for a chunk transform's conformance tests.

    Subclass it (``Test`` prefix) and implement :meth:`make_transform` and
    :meth:`make_other_transform`; override :meth:`sample_block`,
    :meth:`expected_dtype` and :meth:`expected_shape` when the defaults (a
    float32 block, dtype and shape preserved) do not fit. A batch transform
    can reuse the kit by overriding :meth:`apply`.
    """

    #: The label the transform is called with.
    label: str = "x"

    def make_transform(self) -> Any:
        """A new transform instance; two calls must build equal transforms."""
        raise NotImplementedError("TransformConformance subclasses implement make_transform()")

    def make_other_transform(self) -> Any:
        """A transform of the same kind with different parameters (so a different fingerprint)."""
        raise NotImplementedError("TransformConformance subclasses implement make_other_transform()")

    def sample_block(self) -> np.ndarray:
        """The input block, sample axis first."""
        return np.random.default_rng(0).standard_normal((8, 6, 5)).astype("float32")

    def expected_dtype(self, block: np.ndarray) -> np.dtype[Any]:
        """The dtype the transform declares for its output."""
        return block.dtype

    def expected_shape(self, block: np.ndarray) -> tuple[int, ...]:
        """The shape the transform declares for its output."""
        return tuple(block.shape)

    def apply(self, transform: Any, block: np.ndarray) -> np.ndarray:
        """Call the transform the way the engine does."""
        return np.asarray(transform(self.label, block))

    def test_deterministic(self) -> None:
        """Equal transforms, and one transform called twice, give equal outputs."""
        block = self.sample_block()
        first = self.apply(self.make_transform(), block.copy())
        np.testing.assert_array_equal(self.apply(self.make_transform(), block.copy()), first)
        transform = self.make_transform()
        np.testing.assert_array_equal(
            self.apply(transform, block.copy()), self.apply(transform, block.copy())
        )

    def test_output_dtype_and_shape(self) -> None:
        """The output has the declared dtype and shape."""
        block = self.sample_block()
        out = self.apply(self.make_transform(), block.copy())
        assert out.dtype == self.expected_dtype(block), f"output dtype {out.dtype}"
        assert out.shape == self.expected_shape(block), f"output shape {out.shape}"

    def test_leaves_input_unchanged(self) -> None:
        # Blocks come from the shared chunk pool; writing into one corrupts the cache.
        """The input block is not modified (blocks are views of the shared chunk pool)."""
        block = self.sample_block()
        before = block.copy()
        self.apply(self.make_transform(), block)
        np.testing.assert_array_equal(block, before, err_msg="the transform modified its input block")

    def test_fingerprint_is_a_stable_string(self) -> None:
        """``fingerprint()`` is a non-empty string, unchanged by a call, and equal for equal transforms."""
        transform = self.make_transform()
        fingerprint = transform.fingerprint()
        assert isinstance(fingerprint, str), f"fingerprint() returned {type(fingerprint).__name__}"
        assert fingerprint, "fingerprint() returned an empty string"
        assert transform.fingerprint() == fingerprint
        self.apply(transform, self.sample_block())
        assert transform.fingerprint() == fingerprint, "fingerprint changed after a call"
        assert self.make_transform().fingerprint() == fingerprint, "equal transforms differ in fingerprint"

    def test_fingerprint_changes_with_parameters(self) -> None:
        """Different parameters give a different fingerprint."""
        assert self.make_other_transform().fingerprint() != self.make_transform().fingerprint()

    def test_picklable(self) -> None:
        """A pickled and unpickled transform keeps its fingerprint and its outputs."""
        transform = self.make_transform()
        clone = pickle.loads(pickle.dumps(transform))
        assert clone.fingerprint() == transform.fingerprint()
        block = self.sample_block()
        np.testing.assert_array_equal(self.apply(clone, block.copy()), self.apply(transform, block.copy()))

    def test_fingerprint_stable_across_processes(self) -> None:
        # Catches fingerprints built from id() or str hashes, which change per process.
        """The fingerprint is the same in a fresh process with another hash seed."""
        transform = self.make_transform()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        env["PYTHONHASHSEED"] = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
        proc = subprocess.run(
            [sys.executable, "-c", _FINGERPRINT_SCRIPT],
            input=pickle.dumps(transform),
            capture_output=True,
            env=env,
            timeout=120,
            check=False,
        )
        if proc.returncode == 3:
            pytest.skip("the transform's class cannot be imported in a fresh process")
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        assert proc.stdout.decode() == transform.fingerprint(), "fingerprint differs in another process"

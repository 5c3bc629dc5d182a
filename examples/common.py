"""What every example shares: its command line, and how it reports its result against a baseline.

Each example is ``python -m examples.<name> [--smoke] [--store URL] [--seed N]``:
synthetic data by default (offline, no credentials), a real public store with
``--store``. It trains on a training period, evaluates on held-out data and
prints one result line; it exits 1 when the model does not beat its
baseline, so ``nox -s examples`` fails on an example that stopped working.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Result:
    """An example's held-out score beside its baseline's."""

    example: str
    metric: str
    model: float
    baseline: float
    baseline_name: str
    higher_is_better: bool
    seconds: float = 0.0

    @property
    def beats_baseline(self) -> bool:
        return self.model > self.baseline if self.higher_is_better else self.model < self.baseline

    def line(self) -> str:
        verdict = "beats" if self.beats_baseline else "DOES NOT BEAT"
        return (
            f"{self.example}: {self.metric} {self.model:.4g} (model) vs {self.baseline:.4g} "
            f"({self.baseline_name}) -> model {verdict} the baseline [{self.seconds:.1f} s]"
        )


def parser(description: str) -> argparse.ArgumentParser:
    """The flags every example takes; examples add their own."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny sizes: a check that runs in seconds")
    p.add_argument("--store", default=None, help="a real store (URL or path) instead of synthetic data")
    p.add_argument("--workdir", default=None, help="where synthetic data is written (default: a temp dir)")
    p.add_argument("--seed", type=int, default=0, help="seed for data, splits, shuffling and the model")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def finish(result: Result, args: argparse.Namespace) -> int:
    """Print the result; the exit status says whether the model beat its baseline."""
    print(
        json.dumps({**asdict(result), "beats_baseline": result.beats_baseline})
        if args.json
        else result.line()
    )
    sys.stdout.flush()
    return 0 if result.beats_baseline else 1


def run(main: object, argv: Sequence[str] | None = None) -> None:
    """``sys.exit(main(argv))`` for ``if __name__ == "__main__"`` blocks."""
    assert callable(main)
    sys.exit(main(argv))

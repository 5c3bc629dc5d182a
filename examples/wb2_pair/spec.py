"""What both stacks are asked to do: one JSON-able spec, handed to each measuring process."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Plan:
    """Sizes of a run: the date ranges (inclusive, partial dates cover their whole period) and training."""

    train: tuple[str, str]
    test: tuple[str, str]
    batch_size: int
    epochs: int
    lr: float = 3e-3


SMOKE = Plan(train=("2017-12-01", "2017-12-31"), test=("2018-01-01", "2018-01-07"), batch_size=16, epochs=3)
DEFAULT = Plan(train=("2017-01-01", "2017-12-31"), test=("2018-01-01", "2018-01-31"), batch_size=32, epochs=2)


@dataclass(frozen=True)
class Stats:
    """Per channel: mean and std of the inputs, std of the 6-hour change (the model's output scale)."""

    mean: list[float]
    std: list[float]
    change_std: list[float]


@dataclass(frozen=True)
class Spec:
    store: str  # a local path or a URL (gs://, s3://, https://, file://)
    plan: Plan
    seed: int
    lead_hours: int = 6
    num_workers: int = 2  # the xbatcher stack's DataLoader workers
    warmup_steps: int = 2  # training steps left out of the throughput
    shuffle: bool = True
    extra: dict[str, str] = field(default_factory=dict)

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str) -> Spec:
        raw = json.loads(text)
        plan = raw.pop("plan")
        plan["train"], plan["test"] = tuple(plan["train"]), tuple(plan["test"])
        return cls(plan=Plan(**plan), **raw)

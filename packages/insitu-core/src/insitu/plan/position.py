"""Where a view stands in an epoch, as named records, and the view state written from them.

A view remembers three things between passes, each a frozen record replaced
as it moves, never changed in place:

* :class:`PassProgress`: the epoch of its latest pass (or of a loaded state),
  the batches handed out in it, and the epoch's earlier segments at other
  world sizes. The pass's iterator advances it batch by batch; the view's
  ``state_dict`` is written from it (:func:`view_state`).
* a :class:`~insitu.plan.resume_state.ResumePoint`: where the next pass
  starts, taken by that pass.
* an :class:`ElasticEpoch`: an epoch made the rest of what its earlier
  segments, at other world sizes, left; it lasts for that epoch.

:mod:`insitu.plan.resume_state` reads the states written here back, strictly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from insitu.plan.elastic import Segment
from insitu.plan.resume_state import STATE_FORMAT, ResumePoint


@dataclass(frozen=True, slots=True)
class PassProgress:
    """How far a view's latest pass over ``epoch`` has come: ``batches_done`` handed out (a batch
    counts once returned to the consumer), in an epoch whose earlier segments at other world sizes
    are ``resumed_from`` (empty for an epoch read at one world size)."""

    epoch: int
    batches_done: int = 0
    resumed_from: tuple[Segment, ...] = ()

    @classmethod
    def resumed(cls, point: ResumePoint) -> PassProgress:
        """The progress a loaded state stands for, before any batch of the next pass."""
        return cls(point.epoch, point.start, point.resumed_from)

    def advanced_to(self, batches_done: int) -> PassProgress:
        """This progress once ``batches_done`` batches of the pass have been handed out."""
        return PassProgress(self.epoch, batches_done, self.resumed_from)


@dataclass(frozen=True, slots=True)
class ElasticEpoch:
    """An epoch resumed from another world size: what is left of it after ``segments``, its
    earlier segments at other world sizes."""

    epoch: int
    segments: tuple[Segment, ...]

    @classmethod
    def of(cls, point: ResumePoint) -> ElasticEpoch | None:
        """The elastic epoch a resume point starts, or None when it resumes the epoch as it started."""
        return cls(point.epoch, point.resumed_from) if point.resumed_from else None

    def segments_in(self, epoch: int) -> tuple[Segment, ...]:
        """The earlier segments of ``epoch``: these, when it is this epoch, else none."""
        return self.segments if epoch == self.epoch else ()


def view_state(progress: PassProgress, identity: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-able state of a view at ``progress``: the format, the position, then ``identity``
    (what must match to resume: split, seed, batch size, manifest, data...)."""
    return {
        "format": STATE_FORMAT,
        "epoch": progress.epoch,
        "batches_done": progress.batches_done,
        "resumed_from": [segment.to_json() for segment in progress.resumed_from],
        **identity,
    }

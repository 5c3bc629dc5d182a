"""Resume states of a view, read strictly: where an epoch stopped, at which world size, on what data
(the plan floor: a state names the segments an elastic order is made from).

A state is a JSON-able mapping. Counts are integers (never a bool, a float or
a string); its identity (split, seed, batch size, manifest, store, arrays...)
must match the view loading it, each mismatch named with its reason. Several
states, one per old rank, may be given for ranks that did not move in
lockstep.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitu.errors import ConfigError
from insitu.plan.elastic import Segment

STATE_FORMAT = "insitu.ViewState/2"
#: Formats still loaded. Version 1 carried no ``resumed_from``, ``store`` nor ``arrays``.
READABLE_FORMATS = ("insitu.ViewState/1", STATE_FORMAT)
#: Identity keys only format 2 carries: checked when the state has them.
_NEW_IN_2 = ("store", "arrays")

#: Why a mismatch of these keys cannot be resumed, said with the refusal.
_REASONS = {
    "batch_size": "batches done are counted in batches of the saved size, so another batch size would "
    "repeat or skip samples; resume with the saved batch_size (change it from the next epoch on)",
    "order": "the state was saved by an insitu version that orders samples differently; "
    "finish that epoch with that version, or start the epoch over",
    "store": "the state was saved on another store (a different location or snapshot)",
    "arrays": "the state was saved on arrays whose metadata differ (shape, chunks, codecs or attributes)",
    "block_chunks": "the samples already handed out are known from the saved block size only",
}


@dataclass(frozen=True)
class SavedProgress:
    """What one state says about its pass."""

    epoch: int
    rank: int
    world_size: int
    batches_done: int
    resumed_from: tuple[Segment, ...]


@dataclass(frozen=True)
class ResumePoint:
    """Where a view resumes: the epoch, its first batch, and the epoch's earlier segments at other
    world sizes (empty when it resumes the epoch as it started)."""

    epoch: int
    start: int
    resumed_from: tuple[Segment, ...]


def state_int(value: Any, key: str) -> int:
    """``value`` as a non-negative integer, or a ConfigError naming ``key`` and the value."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ConfigError(
            f"state[{key!r}] must be a non-negative integer, got {value!r} ({type(value).__name__})"
        )
    return int(value)


def read_state(state: Any, identity: Mapping[str, Any]) -> SavedProgress:
    """One state checked against the loading view's ``identity`` (rank and world size aside)."""
    if not isinstance(state, Mapping) or state.get("format") not in READABLE_FORMATS:
        fmt = state.get("format") if isinstance(state, Mapping) else type(state).__name__
        raise ConfigError(f"not an insitu view state (format={fmt!r}, expected {STATE_FORMAT!r})")
    for key, value in identity.items():
        if key in ("rank", "world_size") or (key in _NEW_IN_2 and key not in state and _is_v1(state)):
            continue
        if state.get(key) != value:
            why = _REASONS.get(key)
            raise ConfigError(
                f"state does not match this view: {key}={state.get(key)!r} in the state, "
                f"{value!r} here{'; ' + why if why else ''}"
            )
    world_size = state_int(state.get("world_size"), "world_size")
    rank = state_int(state.get("rank"), "rank")
    if world_size < 1 or rank >= world_size:
        raise ConfigError(f"state has rank={rank} of world_size={world_size}: not a rank of that world")
    return SavedProgress(
        epoch=state_int(state.get("epoch"), "epoch"),
        rank=rank,
        world_size=world_size,
        batches_done=state_int(state.get("batches_done"), "batches_done"),
        resumed_from=_segments(state.get("resumed_from", [])),
    )


def resume_point(
    states: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    identity: Mapping[str, Any],
    *,
    rank: int,
    world_size: int,
) -> ResumePoint:
    """Where rank ``rank`` of ``world_size`` resumes from ``states``: one rank's state (ranks that
    moved in lockstep, as DDP's do) or every old rank's, in any order."""
    many = not isinstance(states, Mapping) and isinstance(states, Sequence) and not isinstance(states, str)
    if many and not states:
        raise ConfigError("no state given: pass one rank's state, or a list of every rank's states")
    saved = [read_state(s, identity) for s in states] if many else [read_state(states, identity)]
    first = saved[0]
    for other in saved[1:]:
        for key in ("epoch", "world_size", "resumed_from"):
            if getattr(other, key) != getattr(first, key):
                raise ConfigError(
                    f"the states are of different passes: {key}={getattr(first, key)!r} in one, "
                    f"{getattr(other, key)!r} in another"
                )
    if many:
        ranks = sorted(s.rank for s in saved)
        if ranks != list(range(first.world_size)):
            raise ConfigError(
                f"a list of states needs one state per rank 0..{first.world_size - 1} of the saved "
                f"world_size={first.world_size}; got ranks {ranks}"
            )
    by_rank = {s.rank: s for s in saved}
    if first.world_size == world_size:
        # The same world: each rank continues its own order (one state stands for every rank's).
        own = by_rank.get(rank, first)
        return ResumePoint(own.epoch, own.batches_done, own.resumed_from)
    done = tuple(by_rank[r].batches_done if many else first.batches_done for r in range(first.world_size))
    history = (*first.resumed_from, Segment(first.world_size, done))
    if not any(any(seg.batches_done) for seg in history):
        return ResumePoint(first.epoch, 0, ())  # nothing handed out yet: the epoch as it starts here
    return ResumePoint(first.epoch, 0, history)


def _is_v1(state: Mapping[str, Any]) -> bool:
    return bool(state.get("format") == READABLE_FORMATS[0])


def _segments(value: Any) -> tuple[Segment, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise ConfigError(f"state['resumed_from'] must be a list of segments, got {value!r}")
    out = []
    for i, seg in enumerate(value):
        key = f"resumed_from[{i}]"
        if not isinstance(seg, Mapping):
            raise ConfigError(f"state[{key!r}] must be a mapping, got {seg!r}")
        world = state_int(seg.get("world_size"), f"{key}.world_size")
        done = seg.get("batches_done")
        if not isinstance(done, Sequence) or isinstance(done, str) or len(done) != world or world < 1:
            raise ConfigError(
                f"state[{key + '.batches_done'!r}] must list one count per rank of world_size={world}, "
                f"got {done!r}"
            )
        out.append(Segment(world, tuple(state_int(d, f"{key}.batches_done") for d in done)))
    return tuple(out)

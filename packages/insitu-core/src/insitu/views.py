"""Split views of a dataset, and the iterator that owns one pass over a view.

A :class:`DatasetView` is one split on one rank: it knows its epoch plan,
where its last pass stopped (``state_dict``) and where the next one resumes.
Iterating it creates a :class:`ViewIterator`, which owns its epoch run, its
progress and its share of the pool; it registers with the dataset as soon as
it is created, so the budget check sees every iterator that can be advanced
(``zip(ds.train, ds.val)`` is checked before either moves).
"""

from __future__ import annotations

import concurrent.futures
import queue
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from insitu.batch import Batch
from insitu.engine.passes import CLOSED, END
from insitu.errors import ConfigError, DatasetClosedError
from insitu.options import check_rank
from insitu.plan import memory_model
from insitu.plan.elastic import Segment
from insitu.plan.order import ORDER_VERSION
from insitu.plan.position import ElasticEpoch, PassProgress, view_state
from insitu.plan.reads import EpochPlan
from insitu.plan.resume_state import ResumePoint, resume_point
from insitu.progress import Progress, track
from insitu.stats import PassReport, Stats, difference

if TYPE_CHECKING:
    from insitu.arrays.geometry import ArrayGeometry
    from insitu.arrays.transforms import SlabSpec
    from insitu.engine.passes import PassService
    from insitu.options import ReadOptions, ShardOptions
    from insitu.plan.splits import SplitManifest


class ViewHost(Protocol):
    """What a view and its iterators use of the dataset that made them (``InSituDataset``).

    Views depend on this narrow interface, not on the dataset module, so the
    dataset can import its views without a cycle. They read settings from the
    validated options only, and reach the engine only through the iteration
    service (``passes``): starting a pass, and counting the consumer's time.
    """

    options: ReadOptions
    sharding: ShardOptions
    manifest: SplitManifest
    labels: tuple[ArrayGeometry, ...]
    label_specs: dict[str, SlabSpec]
    static_values: dict[str, np.ndarray]
    passes: PassService

    @property
    def epoch(self) -> int:
        """The epoch whose order the next pass follows."""

    @property
    def closed(self) -> bool:
        """Whether the dataset has been closed."""

    @property
    def stats(self) -> Stats:
        """A snapshot of the dataset's live counters."""

    @property
    def delivered_arrays(self) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
        """``{label: (sample shape, dtype)}`` of what batches deliver, batch transforms included."""

    @property
    def data_identity(self) -> dict[str, str]:
        """Digests of the store's identity and of the read arrays' metadata, recorded in resume states."""

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose shuffle order the views use next."""

    def check_open(self) -> None:
        """Raise if the dataset is closed or was built in another process."""

    def plan(
        self,
        split: str,
        shuffle: bool,
        epoch: int | None = None,
        *,
        rank: int = 0,
        world_size: int = 1,
        resumed_from: tuple[Segment, ...] = (),
    ) -> EpochPlan:
        """The read plan of ``split`` for ``epoch`` (default: the current one) on one rank; with
        ``resumed_from``, of the rest that earlier segments at other world sizes left."""

    def view(self, split: str, *, rank: int | None = None, world_size: int | None = None) -> DatasetView:
        """The view of one split, optionally for one rank (the same object for the same arguments)."""

    def register(self, it: ViewIterator) -> None:
        """Track a new iterator, so that closing the dataset wakes it."""

    def unregister(self, it: ViewIterator) -> None:
        """Stop tracking an iterator that has ended or been closed."""

    def report_pass(self, report: PassReport) -> None:
        """Log one ended pass and hand it to the stats callbacks."""


@dataclass(frozen=True, slots=True)
class ViewTotals:
    """Totals over every pass of a view that ended (``view.totals`` reads them as a dict)."""

    passes: int = 0
    batches: int = 0
    samples: int = 0
    seconds: float = 0.0
    waiting_s: float = 0.0

    def plus(self, report: PassReport) -> ViewTotals:
        """These totals with one more ended pass."""
        return ViewTotals(
            self.passes + 1,
            self.batches + report.batches,
            self.samples + report.samples,
            self.seconds + report.seconds,
            self.waiting_s + report.waiting_s,
        )

    def as_dict(self) -> dict[str, float]:
        """The totals keyed by name: passes, batches, samples, seconds, waiting_s."""
        return asdict(self)


@dataclass(slots=True)
class PassTally:
    """What one pass has delivered so far and how long its consumer waited; owned by its iterator
    alone, counted in place once per batch."""

    batches: int = 0
    samples: int = 0
    waiting_s: float = 0.0

    def delivered(self, samples: int) -> None:
        """One more batch of ``samples`` rows handed to the consumer."""
        self.batches += 1
        self.samples += samples


class DatasetView:
    """One split of a dataset, on one rank. Iterate for batches; ``len()`` is batches per epoch."""

    def __init__(self, dataset: ViewHost, split: str, *, shuffle: bool, rank: int = 0, world_size: int = 1):
        self.dataset = dataset
        self.split = split
        self.shuffle = shuffle
        self.rank = rank
        self.world_size = world_size
        # Named records (insitu.plan.position), each replaced whole as the view moves.
        self._progress: PassProgress | None = None  # the latest pass's (or the loaded state's)
        self._resume: ResumePoint | None = None  # where the next pass starts; taken by it
        self._elastic: ElasticEpoch | None = None  # an epoch resumed from another world size
        self._totals = ViewTotals()
        self.last_pass: PassReport | None = None  # the report of the last pass that ended

    def iter(self, *, progress: Progress = False) -> Iterator[Batch]:
        """One pass, as ``iter(view)``, with opt-in progress: ``progress=True`` shows a tqdm bar on
        stderr (plain lines without tqdm), a callable receives ``(batches_done, total)``."""
        passing = iter(self)
        if not progress:
            return passing
        desc = f"{self.split} epoch {passing.epoch}"
        return track(passing, total=len(self) - passing.batches_done, desc=desc, progress=progress)

    def shard(self, rank: int, world_size: int) -> DatasetView:
        """This split as seen by ``rank`` of ``world_size``: disjoint chunks, equal batch counts."""
        return self.dataset.view(self.split, rank=rank, world_size=world_size)

    def for_rank(self, rank: int, world_size: int, *, source: str = "the caller") -> DatasetView:
        """The view ``rank`` of ``world_size`` reads: this view sharded, or this view itself when it
        is already sharded that way; sharded any other way is a ConfigError naming ``source``
        (e.g. ``"torch.distributed"``), the authority for ``rank`` and ``world_size``."""
        check_rank(rank, world_size)
        if self.world_size == 1:
            return self.shard(rank, world_size) if world_size > 1 else self
        if (self.rank, self.world_size) != (rank, world_size):
            raise ConfigError(
                f"the view is already sharded as rank {self.rank} of {self.world_size}, but {source} says "
                f"rank {rank} of {world_size}; pass the unsharded view"
            )
        return self

    @property
    def batch_size(self) -> int:
        """Samples per batch."""
        return self.dataset.options.batch_size

    @property
    def drop_last(self) -> bool:
        """Whether a short last batch is dropped."""
        return self.dataset.options.drop_last

    @property
    def totals(self) -> dict[str, float]:
        """Totals over every pass of this view that ended: passes, batches, samples, seconds,
        waiting_s (a new dict each time)."""
        return self._totals.as_dict()

    @property
    def resuming(self) -> bool:
        """True when a loaded state makes the next pass start mid-epoch: it yields fewer batches
        than ``len(self)``, or (resumed at another world size) the rest of an epoch, so a later
        pass over a whole epoch yields another number of batches."""
        if self._resume is None:
            return False
        return self._resume.start > 0 or bool(self.resumed_from)

    @property
    def labels(self) -> tuple[str, ...]:
        """The keys of every batch, as delivered (after batch transforms): sampled labels, then
        static ones."""
        return tuple(self.dataset.delivered_arrays)

    @property
    def static_labels(self) -> tuple[str, ...]:
        """Labels of static fields: their batch arrays have a leading axis of 1, not the batch size."""
        return tuple(label for label in self.dataset.static_values if label in self.dataset.delivered_arrays)

    @property
    def sample_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of one sample of each label, as batches deliver it (after chunk and batch
        transforms); for a static label, the array's shape (the batch holds it as ``(1, *shape)``)."""
        return {label: shape for label, (shape, _) in self.dataset.delivered_arrays.items()}

    @property
    def pooled_sample_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of one sample of each label as the pool holds it: after chunk transforms, before
        batch transforms (what a batch transform such as a random crop receives)."""
        shapes = {label: spec.sample_shape for label, spec in self.dataset.label_specs.items()}
        return shapes | {label: v.shape[1:] for label, v in self.dataset.static_values.items()}

    @property
    def pooled_dtypes(self) -> dict[str, np.dtype[Any]]:
        """Dtype of each label as the pool holds it (after chunk transforms, before batch transforms)."""
        dtypes = {label: spec.dtype for label, spec in self.dataset.label_specs.items()}
        return dtypes | {label: v.dtype for label, v in self.dataset.static_values.items()}

    @property
    def dtypes(self) -> dict[str, np.dtype[Any]]:
        """Dtype of each label, as batches deliver it (after chunk and batch transforms)."""
        return {label: dtype for label, (_, dtype) in self.dataset.delivered_arrays.items()}

    def set_epoch(self, epoch: int) -> None:
        """Same as ``dataset.set_epoch``."""
        self.dataset.set_epoch(epoch)

    @property
    def resumed_from(self) -> tuple[Segment, ...]:
        """The current epoch's segments at other world sizes, when a state loaded from another world
        size made this epoch the rest they left (empty otherwise)."""
        elastic = self._elastic
        return elastic.segments_in(self.dataset.epoch) if elastic is not None else ()

    def plan(self) -> EpochPlan:
        """The read plan of this view for the dataset's current epoch (the rest of it, when resumed
        from another world size)."""
        return self.dataset.plan(
            self.split,
            self.shuffle,
            rank=self.rank,
            world_size=self.world_size,
            resumed_from=self.resumed_from,
        )

    def __len__(self) -> int:
        return self.plan().n_batches

    def sample_order(self) -> np.ndarray:
        """Anchors in the order this epoch delivers them (before batching); for patches, the origin
        of each patch along the sample axis (``patch_order`` gives the whole origins)."""
        plan = self.plan()
        n = plan.n_batches * plan.batch_size if self.drop_last else plan.n_positions
        if plan.patches is not None:
            return self.patch_order()[:, plan.patches.patches.grid.sample_axis]
        return plan.anchors[:n].copy()

    def patch_order(self) -> np.ndarray:
        """Patch sampling: the origin of every patch (one row per patch, one column per axis of the
        reference array) in the order this epoch delivers them, before batching."""
        plan = self.plan()
        if plan.patches is None:
            raise TypeError("patch_order is for datasets sampling patches (InSituDataset(..., patch=...))")
        if plan.patches.weighted is not None:
            raise TypeError(
                "a weighted or balanced draw picks each position from the mask's values as its pass "
                "reads them: the origins are known only then (each batch's patch_origins)"
            )
        n = plan.n_batches * plan.batch_size if self.drop_last else plan.n_positions
        return plan.patches.origins_between(0, n)

    def __iter__(self) -> ViewIterator:
        ds = self.dataset
        ds.check_open()
        epoch = ds.epoch
        start = 0
        resume, self._resume = self._resume, None
        plan = self.plan()
        if resume is not None and resume.epoch == epoch:
            start = min(resume.start, plan.n_batches)
        return ViewIterator(self, plan, epoch, start, self.resumed_from)

    # -- exact resume -----------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where this view stands: epoch and batches handed out, plus what must match to resume.

        Load it with :meth:`load_state_dict` on a view of an identically built
        dataset (same data, manifest, seed, batch size...), in this or another
        process: the next iteration continues with the next batch. At another
        world size, the new ranks share what the old ones left of the epoch
        (see ``docs/distributed.md``).
        """
        progress = self._progress if self._progress is not None else PassProgress(self.dataset.epoch)
        return view_state(progress, self._identity())

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Resume from :meth:`state_dict`: sets the epoch; the next iteration skips the batches done.

        ``state`` is one rank's state (ranks that move in lockstep, as DDP's do) or
        the list of every rank's states. Saved at this world size, each rank
        continues its own order. Saved at another, the samples the old ranks
        handed out are known from the states and the rest of the epoch is
        re-sharded over this view's world size (chunk-aligned, equal batch
        counts); the next epoch is an ordinary one. A state that does not
        match this view (another batch size, seed, manifest, store or array
        metadata), or whose counts are not integers within the pass, is a
        ConfigError naming the key and the value.
        """
        point = resume_point(state, self._identity(), rank=self.rank, world_size=self.world_size)
        self.dataset.set_epoch(point.epoch)
        self._elastic = ElasticEpoch.of(point)
        n_batches = self.plan().n_batches  # the elastic order checks the old ranks' counts itself
        if point.start > n_batches:
            raise ConfigError(
                f"state has batches_done={point.start}, but epoch {point.epoch} of split {self.split!r} "
                f"on rank {self.rank} of {self.world_size} is {n_batches} batch(es) long"
            )
        self._resume = point
        self._progress = PassProgress.resumed(point)

    def _identity(self) -> dict[str, Any]:
        ds, options = self.dataset, self.dataset.options
        return {
            "split": self.split,
            "shuffle": self.shuffle,
            "seed": options.seed,
            "batch_size": options.batch_size,
            "drop_last": options.drop_last,
            "block_chunks": options.block_chunks,
            "rank": self.rank,
            "world_size": self.world_size,
            "uneven": ds.sharding.uneven,
            "labels": [g.label for g in ds.labels],
            "manifest": ds.manifest.digest,
            # The sample order's version: a state from a version that shuffled differently would
            # resume at the right batch count in another order (samples repeated or missed).
            "order": ORDER_VERSION,
            **ds.data_identity,
        }

    # -- called by this view's iterators ------------------------------------------
    def _record_progress(self, progress: PassProgress) -> None:
        """Where the view's latest pass stands now (what ``state_dict`` reports)."""
        self._progress = progress

    def _record_pass(self, report: PassReport) -> None:
        """A pass over this view ended: keep its report and count it in the totals."""
        self.last_pass = report
        self._totals = self._totals.plus(report)

    def __repr__(self) -> str:
        return f"DatasetView(split={self.split!r}, shuffle={self.shuffle}, batch_size={self.batch_size})"


class ViewIterator(Iterator[Batch]):
    """One pass over a view: owns its running pass, its progress and its registration with the dataset.

    The pass starts on the first ``next()``. ``close()`` (also called when the
    iterator is exhausted, garbage-collected, or its dataset is closed)
    cancels the pass and releases its pool slots; a consumer blocked in
    ``next()`` when the dataset closes gets :class:`DatasetClosedError`.
    """

    def __init__(
        self,
        view: DatasetView,
        plan: EpochPlan,
        epoch: int,
        start_batch: int,
        resumed_from: tuple[Segment, ...] = (),
    ) -> None:
        ds = view.dataset
        self.view = view
        self._dataset = ds
        self._passes = ds.passes
        self._run = ds.passes.start(plan, split=view.split, epoch=epoch, start_batch=start_batch)
        self._future: concurrent.futures.Future[None] | None = None
        self._finished = False
        self._started_at = 0.0
        self._before: Stats | None = None  # the dataset's counters when this pass started
        self._tally = PassTally()
        self._progress = PassProgress(epoch, start_batch, resumed_from)
        ds.register(self)
        view._record_progress(self._progress)

    def __iter__(self) -> ViewIterator:
        return self

    @property
    def epoch(self) -> int:
        """The epoch this pass reads."""
        return self._progress.epoch

    @property
    def batches_done(self) -> int:
        """Batches of the epoch handed out so far (those a resumed pass skipped included)."""
        return self._progress.batches_done

    @property
    def readahead_bytes(self) -> int:
        """Bytes of batches this pass holds at most besides the pool: the batch being delivered and
        the read-ahead blocks, whose rows streamed slabs are decoded into, plus the prefetch queue."""
        ds = self._dataset
        return memory_model.readahead_bytes(
            self._run.plan,
            ds.label_specs.values(),
            readahead_blocks=ds.options.readahead_blocks,
            prefetch=ds.options.prefetch,
        )

    def __next__(self) -> Batch:
        if self._finished:
            raise StopIteration
        ds = self._dataset
        if ds.closed:
            self._finish(wait=False)
            raise DatasetClosedError(
                "this InSituDataset was closed while one of its views was being iterated"
            )
        if self._future is None:
            self._before = ds.stats
            self._started_at = time.perf_counter()
            self._future = self._run.launch()
        run, passes, tally = self._run, self._passes, self._tally
        while True:
            t0 = time.perf_counter()
            try:
                item = run.next_item(timeout=0.5)
            except queue.Empty:
                waited = time.perf_counter() - t0
                passes.count_waiting(waited)
                tally.waiting_s += waited
                if _is_closed(ds):  # closed meanwhile, by another thread
                    item = CLOSED
                elif self._future.done() and run.drained():
                    self._finish(wait=False)
                    self._future.result()  # re-raise a crash of the run itself
                    raise RuntimeError("insitu: epoch ended without a final marker") from None
                else:
                    continue
            waited = time.perf_counter() - t0
            passes.count_waiting(waited)
            tally.waiting_s += waited
            if item is END:
                self._finish(wait=True, report=True, completed=True)
                raise StopIteration
            if item is CLOSED:
                self._finish(wait=False)
                raise DatasetClosedError(
                    "this InSituDataset was closed while one of its views was being iterated"
                )
            if isinstance(item, BaseException):
                # The run put its error last and ends by itself: wait without cancelling it. A cancel
                # landing while it wound down left a cancelled task, held by the loop a moment longer,
                # whose traceback reached this error, and through the frames the error is raised from,
                # the dataset: one garbage collection then missed the dataset and its threads.
                self._finish(wait=True, cancel=False)
                raise item
            run.took_batch()
            # Counted as handed out once returned.
            self._progress = self._progress.advanced_to(item.index + 1)
            self.view._record_progress(self._progress)
            tally.delivered(item.size)
            return item

    def close(self) -> None:
        """Stop this pass early and release what it holds; waits for the run to stop."""
        self._finish(wait=True, report=True, completed=False)

    def wake_closed(self) -> None:
        """The dataset is closing: cancel the run and wake a consumer blocked in ``next()``."""
        self._run.wake_closed()

    def _finish(
        self, *, wait: bool, report: bool = False, completed: bool = False, cancel: bool = True
    ) -> None:
        if self._finished:
            return
        self._finished = True
        self._dataset.unregister(self)
        if self._future is None:
            return
        seconds = time.perf_counter() - self._started_at
        self._passes.count_iterating(seconds)
        if report:  # a pass ended on the consumer's thread (never from a finaliser)
            self._report(seconds, completed)
        if cancel:
            self._run.cancel()
        # Waiting lets the run release its pins before a next pass starts.
        if wait:
            self._run.wait_stopped(self._future)

    def _report(self, seconds: float, completed: bool) -> None:
        view, done = self.view, self._tally
        before = self._before if self._before is not None else Stats()
        report = PassReport(
            split=view.split,
            epoch=self.epoch,
            rank=view.rank,
            world_size=view.world_size,
            batches=done.batches,
            samples=done.samples,
            seconds=seconds,
            waiting_s=done.waiting_s,
            completed=completed,
            engine=difference(self._dataset.stats, before),
            inflight=self._passes.inflight_limits(before.inflight_changes),
            distinct_chunks=self._run.plan.distinct_chunks,
        )
        view._record_pass(report)
        self._dataset.report_pass(report)

    def __del__(self) -> None:
        # No module global here: an iterator a script still holds at exit is finalised after the
        # interpreter has set this module's globals to None (``contextlib`` among them).
        try:  # noqa: SIM105 - contextlib may be gone already (see above)
            self._finish(wait=False)
        except Exception:  # a finaliser must not raise; the engine's exit handler cleans up
            pass

    def __repr__(self) -> str:
        return (
            f"ViewIterator(split={self.view.split!r}, epoch={self.epoch}, batches_done={self.batches_done})"
        )


def _is_closed(ds: ViewHost) -> bool:
    return ds.closed

"""The one code path: a batch of fetched-page events in, priority updates and feature rows out.

The embedded replay and the live workers (both in streams/) call
`PagePipeline.process_isolated`; only the store behind it differs (memory or Redis). A batch
costs one store read, one index search, one scorer call and one store write, yet each event is
processed as if the events came one at a time in order: its history, its related pages and its
neighbours' stats are what they were right after the event before it. So the output does not
depend on how a stream was cut into batches, and the replay and the workers agree.

One event cannot stop the others (`PagePipeline.process_isolated`): when processing a batch
raises, the batch is rolled back (the scorer's learned state, the index) and retried in halves
until the event that raises is alone; it is reported as failed with the error, and every other
event of the batch is processed as if it had not been there. Errors of the infrastructure
(Redis, the network, memory) are not an event's fault: they propagate, for the caller to retry.

Related pages are recomputed when a page's embedding has moved materially since the one they
were found with (its cosine similarity to it below ``drift_similarity``: pages drift a little on
most fetches), when it has none yet, and when the index has grown ``recompute_growth``-fold
since they were found (so the first pages of a crawl, found among few others, get real
neighbours later); never on every event. The index takes every change of a page's embedding.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime

import faiss
import numpy as np

from online.embedding import HashingTextEmbedder
from online.events import DEFAULT_EMBEDDING_DIM, Fetch, FetchedPage, prepare, utc_now
from online.features import (
    DEFAULT_NEIGHBOURS,
    SIBLING_COLUMNS,
    as_dict,
    feature_names,
    own_feature_matrix,
    related_features_of_versions,
    stats_columns,
)
from online.history import DEFAULT_HISTORY, Emitted, PageState, update, with_embedding
from online.index import VectorIndex
from online.learners import Label
from online.links import sibling_key
from online.neighbour_search import (
    DEFAULT_DRIFT_GROWTH,
    DEFAULT_DRIFT_SIMILARITY,
    PlannedEvent,
    Search,
    finish_search,
    moved_materially,
    start_search,
)
from online.priority import (
    DEFAULT_HORIZON_DAYS,
    DEFAULT_MAX_DAYS,
    DEFAULT_MIN_DAYS,
    DEFAULT_TARGET_NEW_LINKS,
    next_fetch_days,
)
from online.related_updates import (
    Announcement,
    SiblingFollow,
    SiblingGroup,
    group_pass,
    led_at,
    related_updates,
)
from online.schedule import Allocation, BudgetSchedule, Evidence, allocate
from online.scored import (
    ScoredColumns,
    finite_scores,
    flag_missing_model,
    iso,
    iso_many,
    micros_many,
    next_fetch_iso,
    score_rows,
    with_rate,
)
from online.scoring import LearningScorer, Scorer, Scores
from online.state_codec import StateRefused
from online.stores import Neighbours, PageStore, PageWrites, direction_codes

log = logging.getLogger("lookaround.pipeline")

DAY = 86_400.0
#: Errors that are the infrastructure's, not an event's: `PagePipeline.process_isolated` lets
#: them through (the caller retries the whole batch) instead of blaming an event. A store adds
#: its own client's errors (the live worker: Redis's) through ``infrastructure_errors``.
INFRASTRUCTURE_ERRORS: tuple[type[BaseException], ...] = (OSError, MemoryError)


@dataclass(frozen=True)
class PipelineConfig:
    """How the pipeline works; the live settings and the CLI options start from these defaults."""

    history: int = DEFAULT_HISTORY
    neighbours: int = DEFAULT_NEIGHBOURS
    embedding_dim: int = DEFAULT_EMBEDDING_DIM
    recompute_growth: float = 2.0
    #: a page's related pages are searched again when the cosine similarity of its embedding
    #: to the one they were found with falls below this (1: on every change of it)
    drift_similarity: float = DEFAULT_DRIFT_SIMILARITY
    #: a page whose embedding changed, even slightly, has its related pages searched again
    #: once the index has grown this much since they were found (finer than
    #: ``recompute_growth``, which also applies to pages whose embedding stays put)
    drift_growth: float = DEFAULT_DRIFT_GROWTH
    #: bounds of the suggested next fetch: `online.priority.next_fetch_days` options
    revisit: dict = field(
        default_factory=lambda: {
            "target_new_links": DEFAULT_TARGET_NEW_LINKS,
            "min_days": DEFAULT_MIN_DAYS,
            "max_days": DEFAULT_MAX_DAYS,
        }
    )
    #: fetches a day the crawler spends: ``next_fetch_at`` then follows the square-root
    #: allocation of that budget (`online.schedule`); None: ``revisit``'s target
    fetch_budget_per_day: float | None = None


class Processed:
    """One event's outcome. ``row`` and ``priority`` are None for duplicates and stale.

    An applied event's row and priority live in its batch's `ScoredColumns` (``scored``, at
    row ``at``); the priority dict is built on first access.
    """

    __slots__ = ("_priority", "at", "emitted", "event", "names", "page_id", "scored")

    def __init__(
        self,
        event: Fetch,
        page_id: int,
        emitted: Emitted,
        names: list[str] | None = None,
    ) -> None:
        self.event = event
        self.page_id = page_id
        self.emitted = emitted
        self.names = names
        self.scored: ScoredColumns | None = None
        self.at = 0
        self._priority: dict | None = None

    def __repr__(self) -> str:
        kind = self.emitted.kind
        return f"Processed({self.event.url!r}, {kind!r}, scored={self.scored is not None})"

    @property
    def row(self) -> np.ndarray | None:
        """The event's feature row (float64), as known right after it."""
        return None if self.scored is None else self.scored.matrix[self.at]

    @property
    def priority(self) -> dict | None:
        """The priority update for the crawler."""
        if self.scored is None:
            return None
        if self._priority is None:
            self._priority = self.scored.priority(self.at)
        return self._priority

    @property
    def features(self) -> dict[str, float] | None:
        """The known features as a dict (River's form), or None."""
        row = self.row
        if row is None or self.names is None:
            return None
        return as_dict(row, self.names)


@dataclass(slots=True)
class BatchOutcome:
    """`PagePipeline.process_batch`'s result: one `Processed` per event, in order, and the
    scored columns of the applied ones (one block per internal batch, in order)."""

    results: list[Processed]
    scored: list[ScoredColumns]
    #: related updates for the siblings of pages that showed new links
    #: (`online.related_updates`), in order
    related: list[dict] = field(default_factory=list)


def merge_outcomes(first: BatchOutcome, second: BatchOutcome) -> BatchOutcome:
    """Two consecutive parts of a batch as one outcome."""
    return BatchOutcome(
        first.results + second.results,
        first.scored + second.scored,
        first.related + second.related,
    )


@dataclass(slots=True)
class _Walk:
    """A batch after its history pass: every event's outcome in order (``results``) and, per
    applied event in the same order, what the later stages need."""

    results: list[Processed] = field(default_factory=list)
    applied: list[Processed] = field(default_factory=list)
    #: the applied events' plans
    pending: list[PlannedEvent] = field(default_factory=list)
    own_states: list[PageState] = field(default_factory=list)
    #: whether it is its page's first applied fetch
    first_seen: list[bool] = field(default_factory=list)
    #: days since its page's previous fetch (kept only with a fetch budget)
    since: list[float | None] = field(default_factory=list)
    #: its page's (new links, days) over the history window before and after it (kept only
    #: with a fetch budget: the allocation's prior, `online.schedule.Evidence`)
    evidence: list[Evidence] = field(default_factory=list)
    #: the batch's pages' states as stored before it, by URL
    before: dict[str, PageState | None] = field(default_factory=dict)
    #: the row its label is for: a position in this batch, a stored row, or None (learning only)
    previous_at: list[int | np.ndarray | None] = field(default_factory=list)
    #: the label it brings for that row (learning only)
    labels: list[Label | None] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _StatsLookup:
    """The related pages' stats read for a batch: the sorted ids read (``wanted``), each listed
    id's position among them (``where``), where each neighbour list starts in that listing
    (``offsets``, by the list's id()), the rows read and each batch page's row."""

    wanted: np.ndarray
    where: np.ndarray
    offsets: dict[int, int]
    base_stats: np.ndarray
    row_of: dict[int, int]


@dataclass
class Isolated:
    """`PagePipeline.process_isolated`'s result: the outcome of the events that went through
    (in order, the failed ones left out) and each failed event's position in the batch with
    its error (``"OverflowError: ..."``)."""

    outcome: BatchOutcome
    failed: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class PipelineCounters:
    applied: int = 0
    duplicate: int = 0
    stale: int = 0
    searches: int = 0
    embedded_from_text: int = 0
    #: events whose processing raised (isolated, reported to the caller as failed)
    failed: int = 0
    #: priorities whose score, p_new, counts or rate came out NaN or infinite and were replaced
    #: (0; p_new within [0, 1]): a last line of defence, none expected
    nonfinite_scores: int = 0
    #: stored learner states refused at start (not data we wrote: the scorer started fresh)
    learner_refused: int = 0


class PagePipeline:
    """History, related pages, features and scores for batches of events."""

    def __init__(
        self,
        store: PageStore,
        index: VectorIndex,
        scorer: Scorer,
        config: PipelineConfig | None = None,
        *,
        embedder: HashingTextEmbedder | None = None,
        clock: Callable[[], datetime] = utc_now,
        infrastructure_errors: tuple[type[BaseException], ...] = INFRASTRUCTURE_ERRORS,
    ) -> None:
        self.store = store
        self.infrastructure_errors = infrastructure_errors
        self.index = index
        self.scorer = scorer
        self.config = config or PipelineConfig()
        self.embedder = embedder or HashingTextEmbedder(dim=self.config.embedding_dim)
        self.clock = clock
        self.counters = PipelineCounters()
        if self.config.history < 1:
            raise ValueError("history must be at least 1 interval")
        self.feature_names = feature_names(self.config.history)
        self._columns = {name: j for j, name in enumerate(self.feature_names)}
        self._stats_columns = stats_columns(self.config.history)
        self._index_writes: tuple[np.ndarray, np.ndarray] | None = None
        #: how to undo the current batch's index writes: (ids, which were there, their vectors)
        self._index_undo: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None
        self._search_pool: ThreadPoolExecutor | None = None
        #: the scorer, when it learns from the stream (its state is stored and rolled back)
        self.learner: LearningScorer | None = (
            scorer if isinstance(scorer, LearningScorer) and scorer.learns else None
        )
        self.learns = self.learner is not None
        self.schedule: BudgetSchedule | None = None
        self.allocation: Allocation | None = None
        if self.config.fetch_budget_per_day is not None:
            revisit = self.config.revisit
            self.schedule = BudgetSchedule(
                self.config.fetch_budget_per_day, min_days=revisit.get("min_days", DEFAULT_MIN_DAYS)
            )
            self.allocation = store.get_allocation()
        #: what siblings following a gain showed (`online.related_updates`), from the store
        self.follow: SiblingFollow = store.get_follow() or SiblingFollow()
        if self.learns:
            self._restore_learner()

    def _restore_learner(self) -> None:
        """The scorer's stored state, if any. A stored blob that is not a state written as data
        (a pickle planted in Redis, a damaged write) is never run: it is refused, logged and
        counted, and the scorer starts fresh, as a new worker would (the next batch overwrites
        the key). Restarting into the same refusal would only make a crash loop."""
        assert self.learner is not None
        try:
            saved = self.store.get_learner()
        except StateRefused as exc:
            self.counters.learner_refused += 1
            log.error("stored learner state refused, starting a fresh learner: %s", exc)
            return
        if saved is not None:
            self.learner.restore(saved)

    # -- public ------------------------------------------------------------------------------

    def process(self, events: Sequence[Fetch | FetchedPage]) -> list[Processed]:
        """Process a batch in order; returns one `Processed` per event, in the same order."""
        return self.process_batch(events).results

    def process_batch(self, events: Sequence[Fetch | FetchedPage]) -> BatchOutcome:
        """`process`, also giving the applied events' priorities and rows as columns."""
        if not events:
            return BatchOutcome([], [])
        events = [e if isinstance(e, Fetch) else prepare(e) for e in events]
        split = self._index_switch_point(events)
        if split is not None and 0 < split < len(events):
            first, second = self.process_batch(events[:split]), self.process_batch(events[split:])
            return merge_outcomes(first, second)
        return self._process(events)

    def process_isolated(self, events: Sequence[Fetch | FetchedPage]) -> Isolated:
        """`process_batch`, isolating the events whose processing raises.

        A batch that raises is rolled back and retried in halves (bisection: about 2 log2 n
        attempts for one bad event in n), so the events that raise alone are found, reported
        in ``failed`` and left out, and the rest go through exactly as without them. An
        infrastructure error (``infrastructure_errors``) rolls the scorer back to where it was
        before the call and propagates; the caller's store and index writes of the attempt
        are the caller's to discard (the live worker does).
        """
        fetches = [e if isinstance(e, Fetch) else prepare(e) for e in events]
        if not fetches:
            return Isolated(BatchOutcome([], []))
        before = self._checkpoint()
        try:
            return self._isolate(fetches, 0, before)
        except self.infrastructure_errors:
            self._roll_back(before, index=False)
            raise

    def _isolate(self, events: list[Fetch], offset: int, saved: tuple) -> Isolated:
        try:
            return Isolated(self.process_batch(events))
        except self.infrastructure_errors:
            raise
        except Exception as exc:  # an event's fault: find it
            self._roll_back(saved, index=True)
            if len(events) == 1:
                self.counters.failed += 1
                error = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "event failed in processing, left out: %s: %s",
                    events[0].url,
                    error,
                    extra={"url": events[0].url, "error": error},
                )
                return Isolated(BatchOutcome([], []), [(offset, error)])
        mid = len(events) // 2
        left = self._isolate(events[:mid], offset, saved)
        right = self._isolate(events[mid:], offset + mid, self._checkpoint())
        return Isolated(merge_outcomes(left.outcome, right.outcome), left.failed + right.failed)

    def _checkpoint(self) -> tuple:
        """What a failed attempt must restore: the scorer's learned state (a copy), the
        counters, the allocation."""
        learned = None if self.learner is None else _copy_learned(self.learner.state())
        return learned, replace(self.counters), self.allocation, self.follow

    def _roll_back(self, saved: tuple, *, index: bool) -> None:
        learned, counters, allocation, follow = saved
        if self.learner is not None and learned is not None:  # a copy again: the checkpoint
            self.learner.restore(_copy_learned(learned))  # may be rolled back to twice
        self.counters, self.allocation, self.follow = counters, allocation, follow
        self._index_writes = None
        if index and self._index_undo is not None:
            ids, present, vectors = self._index_undo
            added = ids[~present]
            if len(added):
                self.index.remove(added)
            if vectors is not None:
                self.index.upsert(ids[present], vectors)
        self._index_undo = None

    # -- one batch ---------------------------------------------------------------------------
    #
    # The stages, in the order `_process` runs them: read the pages' records, plan (what each
    # event is, which need a search), search (in a thread, while the history is applied),
    # apply history with the labels it brings, related pages, their stats, the index's writes,
    # features, score, emit and write. Store reads all come before the index changes and the
    # one store write, so a batch that fails on the way leaves nothing changed.

    def _process(self, events: Sequence[Fetch]) -> BatchOutcome:
        """One batch through the stages; each event processed as if it came alone, in order."""
        states, page_ids, stored_nbrs = self._read_pages(events)
        pending = self._plan(events, states, page_ids, stored_nbrs)
        writes = PageWrites(states={}, stats={}, neighbours={})
        # FAISS searches in a thread without the GIL while the history is applied here (it
        # does not need the search's result).
        search = self._start_search(pending)
        try:
            stored_rows = self._stored_rows(page_ids) if self.learns else {}
            walk = self._apply_history(pending, states, stored_rows, writes)
            own = self._own_features(walk)
            new_nbrs = self._finish_search(search)
        finally:
            search.wait()  # never leave a search running on an index about to change
        nbr_of = self._neighbours_of(walk, stored_nbrs, new_nbrs, writes)
        sibling_of, groups, keys = self._siblings(walk.pending, walk.first_seen, writes)
        announced = self._group_pass(walk, groups, keys, writes)
        lookup = self._read_related_stats(page_ids, pending, new_nbrs, sibling_of)
        self._write_index()
        scored: list[ScoredColumns] = []
        if walk.applied:
            assert own is not None
            own_stats = own[:, self._stats_columns].astype(np.float32)
            matrix = self._features(own, own_stats, walk, nbr_of, sibling_of, lookup)
            scores = self._score(matrix, walk, writes)
            scored.append(self._emit(matrix, scores, walk, writes))
            writes.stats.update(zip([r.page_id for r in walk.applied], own_stats, strict=True))
        related = self._related_updates(announced, walk)
        self._write(writes, walk)
        return BatchOutcome(walk.results, scored, related)

    def _read_pages(
        self, events: Sequence[Fetch]
    ) -> tuple[dict[str, PageState | None], dict[str, int], dict[int, Neighbours | None]]:
        """The batch's pages as stored before it: history states by URL, page ids by URL and
        related-page lists by page id (one read each)."""
        urls = list(dict.fromkeys(e.url for e in events))
        states = dict(zip(urls, self.store.get_states(urls), strict=True))
        page_ids = {e.url: e.page_id for e in events}
        pids = list(page_ids.values())
        stored_nbrs = dict(zip(pids, self.store.get_neighbours(pids), strict=True))
        return states, page_ids, stored_nbrs

    def _stored_rows(self, page_ids: dict[str, int]) -> dict[int, np.ndarray | None]:
        """The feature rows of each page's previous fetch: a learning scorer learns from them
        when the labels they were waiting for arrive with this batch."""
        pids = list(page_ids.values())
        return dict(zip(pids, self.store.get_rows(pids), strict=True))

    def _apply_history(
        self,
        pending: list[PlannedEvent],
        states: dict[str, PageState | None],
        stored_rows: dict[int, np.ndarray | None],
        writes: PageWrites,
    ) -> _Walk:
        """Each applied event's history update, in stream order: a page's second event in the
        batch sees the state its first one left. Duplicates and stale events are only
        recorded. The new states go to ``writes``."""
        walk = _Walk(before=dict(states))
        last_position: dict[int, int] = {}
        for p in pending:
            event = p.event
            if p.kind != "applied":
                walk.results.append(Processed(event, p.page_id, Emitted(p.kind)))
                continue
            before = states[event.url]
            walk.first_seen.append(before is None)
            new_state, emitted = update(before, event, history=self.config.history)
            if self.schedule is not None:  # days since the page's previous fetch
                last = None if before is None else before.last_fetched_at
                walk.since.append(None if last is None else (event.timestamp - last) / DAY)
                walk.evidence.append(Evidence.of(before, new_state))
            assert new_state is not None
            if p.vector is not None:  # the index holds this vector from now on
                new_state = with_embedding(new_state, p.vector_fp)
            walk.own_states.append(new_state)
            states[event.url] = new_state
            writes.states[event.url] = new_state
            r = Processed(event, p.page_id, emitted, names=self.feature_names)
            if self.learns:
                self._label(walk, r, stored_rows, last_position)
            walk.results.append(r)
            walk.applied.append(r)
            walk.pending.append(p)
        return walk

    @staticmethod
    def _label(
        walk: _Walk,
        r: Processed,
        stored_rows: dict[int, np.ndarray | None],
        last_position: dict[int, int],
    ) -> None:
        """The label an applied event brings (the interval it closes) and where the row it
        labels is: the page's row from earlier in this batch, else the stored one. A label is
        only known one fetch later, so that is when the row is learned from."""
        at = last_position.get(r.page_id)
        walk.previous_at.append(at if at is not None else stored_rows.get(r.page_id))
        interval = r.emitted.interval
        walk.labels.append(
            None
            if interval is None
            else Label(
                interval.new_internal,
                interval.new_external,
                interval.days,
                interval.content_changed,
            )
        )
        last_position[r.page_id] = len(walk.applied)

    def _own_features(self, walk: _Walk) -> np.ndarray | None:
        """The applied events' look-back features, from their new states (None: none applied)."""
        if not walk.applied:
            return None
        urls = [r.event.url for r in walk.applied]
        return own_feature_matrix(walk.own_states, urls, self.config.history)

    @staticmethod
    def _neighbours_of(
        walk: _Walk,
        stored_nbrs: dict[int, Neighbours | None],
        new_nbrs: dict[int, Neighbours],
        writes: PageWrites,
    ) -> list[Neighbours | None]:
        """Each applied event's related pages as of its place in the stream: found for it now,
        else its page's latest list (from earlier in the batch, else stored). New lists go to
        ``writes``."""
        nbr_of: list[Neighbours | None] = []
        current: dict[int, Neighbours | None] = dict(stored_nbrs)
        for p in walk.pending:
            nb = new_nbrs.get(id(p))
            if nb is not None:
                current[p.page_id] = nb
                writes.neighbours[p.page_id] = nb
            nbr_of.append(current.get(p.page_id))
        return nbr_of

    def _read_related_stats(
        self,
        page_ids: dict[str, int],
        pending: list[PlannedEvent],
        new_nbrs: dict[int, Neighbours],
        sibling_of: list[Neighbours | None],
    ) -> _StatsLookup:
        """The stats of the batch's pages and of all their neighbours and siblings as they
        stood before the batch: one row per distinct page, read in one go (the batch's last
        store read)."""
        batch_ids = np.fromiter(page_ids.values(), np.int64, len(page_ids))
        parts, at = [batch_ids], len(batch_ids)
        offsets: dict[int, int] = {}  # where each neighbour list's ids start in all_ids
        for nb in (*(new_nbrs.get(id(p)) or p.neighbours for p in pending), *sibling_of):
            if nb is not None and id(nb) not in offsets:
                offsets[id(nb)] = at
                parts.append(nb.ids)
                at += len(nb.ids)
        wanted, where = np.unique(np.concatenate(parts), return_inverse=True)
        base_stats = self.store.get_stats(wanted)
        row_of = dict(zip(batch_ids.tolist(), where[: len(batch_ids)].tolist(), strict=True))
        return _StatsLookup(wanted, where, offsets, base_stats, row_of)

    def _write_index(self) -> None:
        """The batch's new vectors into the index, after the last store read (a failed read
        leaves the index as it was), remembering how to undo them should the batch fail."""
        self._index_undo = None
        if self._index_writes is None:
            return
        ids = self._index_writes[0]
        present = np.array([pid in self.index for pid in ids.tolist()], dtype=bool)
        before = self.index.reconstruct_many(ids[present]) if present.any() else None
        self._index_undo = (ids, present, before)
        self.index.upsert(*self._index_writes)
        self._index_writes = None

    def _features(
        self,
        own: np.ndarray,
        own_stats: np.ndarray,
        walk: _Walk,
        nbr_of: list[Neighbours | None],
        sibling_of: list[Neighbours | None],
        lookup: _StatsLookup,
    ) -> np.ndarray:
        """The applied events' feature rows: look back (own), look around (related pages) and
        the siblings' columns, each event seeing the stats as they were right before it."""
        where = (lookup.wanted, lookup.where, lookup.offsets)
        related = self._related(
            walk.applied, nbr_of, where, lookup.row_of, lookup.base_stats, own_stats
        )
        siblings = self._related(
            walk.applied, sibling_of, where, lookup.row_of, lookup.base_stats, own_stats
        )
        return np.concatenate([own, related, siblings[:, SIBLING_COLUMNS]], axis=1)

    def _score(self, matrix: np.ndarray, walk: _Walk, writes: PageWrites) -> Scores:
        """The scorer's scores for the rows, made publishable (a rate for every scorer, the
        missing-model flag, never a non-finite value). A learning scorer first learns from
        the labels the batch brought, and its rows and state go with the batch's writes."""
        if self.learner is not None:
            rows32 = matrix.astype(np.float32)
            previous = [rows32[at] if isinstance(at, int) else at for at in walk.previous_at]
            times = [r.event.timestamp for r in walk.applied]
            scores = self.learner.score_and_learn(
                matrix, self._columns, previous, walk.labels, times
            )
            for a, r in enumerate(walk.applied):
                writes.rows[r.page_id] = rows32[a]
            writes.learner = self.learner.state()
        else:
            scores = self.scorer.score_matrix(matrix, self._columns)
        scores = flag_missing_model(with_rate(scores), self.scorer.name)
        scores, replaced = finite_scores(scores)
        self.counters.nonfinite_scores += replaced
        return scores

    def _emit(
        self, matrix: np.ndarray, scores: Scores, walk: _Walk, writes: PageWrites
    ) -> ScoredColumns:
        """The applied events' priority updates as columns (with the suggested next fetch),
        each event's `Processed` pointing at its row."""
        applied = walk.applied
        stamp = iso(self.clock())
        waits = self._next_fetch_days(scores, applied, walk, writes)
        scorer = {"name": self.scorer.name, "version": self.scorer.version}
        scorer["models"] = dict(scores.models or {})
        timestamps = [r.event.timestamp for r in applied]
        fetched_us = micros_many(timestamps)
        events = [r.event for r in applied]
        columns = ScoredColumns(
            urls=[e.url for e in events],
            page_ids=[r.page_id for r in applied],
            crawls=[e.crawl for e in events],
            statuses=[e.status for e in events],
            timestamps=timestamps,
            intervals=[r.emitted.interval for r in applied],
            matrix=matrix,
            fetched_at=iso_many(fetched_us),
            scored_at=stamp,
            values=score_rows(scores),
            next_fetch_at=next_fetch_iso(fetched_us, waits),
            reasons=scores.reasons or [["own_history"]] * len(applied),
            scorer=scorer,
            candidates=scores.candidates,
            row_models=scores.row_models,
        )
        for a, r in enumerate(applied):
            r.scored = columns
            r.at = a
        return columns

    def _write(self, writes: PageWrites, walk: _Walk) -> None:
        """Everything the batch changed, in one store write; then the counters."""
        self.store.write(writes)
        if writes.allocation is not None:
            self.allocation = writes.allocation
        if writes.follow is not None:
            self.follow = writes.follow
        self.counters.applied += len(walk.applied)
        for r in walk.results:
            if r.emitted.kind == "duplicate":
                self.counters.duplicate += 1
            elif r.emitted.kind == "stale":
                self.counters.stale += 1

    def _siblings(
        self, applied: list[PlannedEvent], first_seen: list[bool], writes: PageWrites
    ) -> tuple[list[Neighbours | None], dict[str, SiblingGroup], list[str]]:
        """Each applied event's siblings (its page's translations) as known right before it,
        weighted alike: the pages stored under its sibling key and those first seen earlier in
        the batch. A page seen for the first time joins its key's list (in ``writes``). Also
        the groups as stored, with the batch's first-seen members added, and each applied
        event's sibling key."""
        keys = [sibling_key(p.event.url) for p in applied]
        distinct = list(dict.fromkeys(keys))
        groups = dict(zip(distinct, self.store.get_siblings(distinct), strict=True))
        members = {key: group.ids.tolist() for key, group in groups.items()}
        urls = {key: list(group.urls) for key, group in groups.items()}
        out: list[Neighbours | None] = []
        for p, first, key in zip(applied, first_seen, keys, strict=True):
            known = members[key]
            others = np.array([pid for pid in known if pid != p.page_id], dtype=np.int64)
            out.append(
                Neighbours(others, np.full(len(others), 1.0 / len(others), np.float32), 0)
                if len(others)
                else None
            )
            if first and p.page_id not in known:
                known.append(p.page_id)
                urls[key].append(p.event.url)
                writes.siblings.setdefault(key, []).append(p.event.url)
        grown = {
            key: SiblingGroup(tuple(urls[key]), np.array(members[key], np.int64), group.gain)
            for key, group in groups.items()
        }
        return out, grown, keys

    def _group_pass(
        self, walk: _Walk, groups: dict[str, SiblingGroup], keys: list[str], writes: PageWrites
    ) -> list[Announcement]:
        """The sibling groups' gains and what followed them, in stream order
        (`online.related_updates.group_pass`); the changes go to ``writes``."""
        fetches = [
            (r.event.url, r.page_id, r.event.timestamp, r.emitted.interval, led_at(before))
            for r, before in zip(walk.applied, self._states_before(walk), strict=True)
        ]
        done = group_pass(fetches, keys, groups, self.follow)
        writes.gains.update(done.gains)
        if done.follow != self.follow:
            writes.follow = done.follow
        return done.announcements

    @staticmethod
    def _states_before(walk: _Walk) -> list[PageState | None]:
        """Each applied event's page state right before it."""
        latest = dict(walk.before)
        out = []
        for r, state in zip(walk.applied, walk.own_states, strict=True):
            out.append(latest.get(r.event.url))
            latest[r.event.url] = state
        return out

    def _related_updates(self, announced: list[Announcement], walk: _Walk) -> list[dict]:
        """Related updates for the siblings the batch's gains announce to, each from the
        sibling's state right before the announcing fetch
        (`online.related_updates.related_updates`)."""
        if not announced:
            return []
        in_batch: dict[str, list[int]] = {}
        for position, r in enumerate(walk.applied):
            in_batch.setdefault(r.event.url, []).append(position)
        wanted = {u for a in announced for u in a.siblings}
        outside = [u for u in wanted if u not in walk.before]
        stored = dict(zip(outside, self.store.get_states(outside), strict=True))

        def state_before(url: str, position: int) -> PageState | None:
            earlier = [p for p in in_batch.get(url, ()) if p < position]
            if earlier:
                return walk.own_states[earlier[-1]]
            return walk.before[url] if url in walk.before else stored[url]

        scorer = {"name": self.scorer.name, "version": self.scorer.version, "models": {}}
        return related_updates(
            announced,
            state_before,
            horizon_days=DEFAULT_HORIZON_DAYS,
            scored_at=iso(self.clock()),
            scorer=scorer,
        )

    def _related(
        self,
        applied: list[Processed],
        nbr_of: list[Neighbours | None],
        lookup: tuple[np.ndarray, np.ndarray, dict[int, int]],
        row_of: dict[int, int],
        base_stats: np.ndarray,
        own_stats: np.ndarray,
    ) -> np.ndarray:
        """Look-around features of the applied events, each seeing its neighbours' stats as
        they were right before it: the pre-batch row, or the row left by the latest earlier
        event of that neighbour in this batch.

        ``lookup`` is (sorted ids read, each listed id's position in them, where each
        neighbour list starts in that listing): a neighbour's stats row is found without a
        second search.
        """
        wanted, where, offsets = lookup
        lists = [nb for nb in nbr_of if nb is not None]
        n_applied = len(applied)
        k = max([self.config.neighbours, *(len(nb.ids) for nb in lists)])
        slots = np.full((n_applied, k), -1, dtype=np.int64)
        weights = np.zeros((n_applied, k), dtype=np.float64)
        present = [(a, nb) for a, nb in enumerate(nbr_of) if nb is not None and len(nb.ids)]
        if present:
            lens = np.array([len(nb.ids) for _, nb in present], dtype=np.int64)
            rows = np.repeat(np.array([a for a, _ in present], dtype=np.int64), lens)
            cols = np.arange(len(rows)) - np.repeat(np.cumsum(lens) - lens, lens)
            # Every list here was listed for the read (a page's stored or newly found one).
            starts = np.array([offsets[id(nb)] for _, nb in present], dtype=np.int64)
            slots[rows, cols] = where[np.repeat(starts, lens) + cols]
            weights[rows, cols] = np.concatenate([nb.weights for _, nb in present])
        # Versions of stats: the pre-batch rows, then one row per applied event. Key an update
        # by (page row, position) so a binary search finds the latest one before each event;
        # only slots whose page was updated in the batch need that search.
        span = n_applied + 1
        updated = np.array([row_of[r.page_id] for r in applied], dtype=np.int64)
        version = slots.copy()
        touched = np.zeros(len(wanted), dtype=bool)
        touched[updated] = True
        candidate = (slots >= 0) & touched[np.maximum(slots, 0)]
        if candidate.any():
            keys = updated * span + np.arange(n_applied)
            order = np.argsort(keys, kind="stable")
            sorted_keys = keys[order]
            cand_slots = slots[candidate]
            at_row = np.nonzero(candidate)[0]
            found = np.searchsorted(sorted_keys, cand_slots * span + at_row, side="left") - 1
            hit = (found >= 0) & (updated[order][np.maximum(found, 0)] == cand_slots)
            version[candidate] = np.where(
                hit, len(base_stats) + order[np.maximum(found, 0)], cand_slots
            )
        versions = np.concatenate([base_stats, own_stats])
        return related_features_of_versions(weights, versions, version)

    def _plan(
        self,
        events: Sequence[Fetch],
        states: dict[str, PageState | None],
        page_ids: dict[str, int],
        stored_nbrs: dict[int, Neighbours | None],
    ) -> list[PlannedEvent]:
        """Classify events and decide which need a neighbour search, in stream order."""
        last_seen = {
            url: (s.last_fetched_at if s is not None else None) for url, s in states.items()
        }
        embed_fp = {url: (s.embedding_fp if s is not None else 0) for url, s in states.items()}
        # The vector each page has in the index before the batch (its state records it).
        indexed_fp = {page_ids[url]: fp for url, fp in embed_fp.items()}
        nbrs = dict(stored_nbrs)
        size = len(self.index)
        in_index: set[int] = set()
        batch_vectors: dict[int, np.ndarray] = {}
        pending = []
        for event in events:
            pid = page_ids[event.url]
            ts = event.timestamp
            seen = last_seen[event.url]
            kind = "applied"
            if seen is not None and ts == seen:
                kind = "duplicate"
            elif seen is not None and ts < seen:
                kind = "stale"
            p = PlannedEvent(event, pid, kind, neighbours=nbrs.get(pid))
            pending.append(p)
            if kind != "applied":
                continue
            last_seen[event.url] = ts
            vector, fp = self._source(event)
            if not fp:
                continue
            changed = fp != embed_fp[event.url]
            if changed and vector is None:
                vector = self._embed_text(event)
                if vector is None:
                    continue  # text without a single token: nothing to index
            if changed and pid not in in_index and pid not in self.index:
                size += 1
                in_index.add(pid)
            current = nbrs.get(pid)
            search = current is None or self._stale(current, size, changed, vector)
            if changed or search:
                if vector is None:  # same content as indexed: reuse the indexed vector
                    vector = batch_vectors.get(pid)
                    if vector is None:
                        vector = self.index.reconstruct(pid)
                    if vector is None:
                        vector = self._embed_text(event)
                    if vector is None:
                        continue
                p.vector, p.vector_fp, p.search = vector, fp, search
                p.indexed_fp = indexed_fp.get(pid, 0)
                indexed_fp[pid] = fp
                embed_fp[event.url] = fp
                batch_vectors[pid] = vector
            if search:
                p.found_with = direction_codes(vector)
                # Placeholder so a later event of the same page in this batch sees it as fresh.
                nbrs[pid] = Neighbours(
                    np.empty(0, np.int64), np.empty(0, np.float32), size, p.found_with
                )
        return pending

    def _stale(
        self, current: Neighbours, size: int, changed: bool, vector: np.ndarray | None
    ) -> bool:
        """Whether a page's related pages (``current``) are searched again at an index of
        ``size`` pages: the index has grown ``recompute_growth``-fold since they were found,
        or the page's vector ``changed`` and has moved materially since the one they were
        found with, or the index has grown ``drift_growth``-fold since."""
        found_at = max(current.index_size, 1)
        if size >= self.config.recompute_growth * found_at:
            return True
        if not changed:
            return False
        if size >= self.config.drift_growth * found_at:
            return True
        assert vector is not None  # a changed page's new vector
        return moved_materially(vector, current.found_with, self.config.drift_similarity)

    @staticmethod
    def _source(event: Fetch) -> tuple[np.ndarray | None, int]:
        """(vector if already at hand, fingerprint of what the page's vector comes from).

        Text is fingerprinted before it is embedded, so unchanged text is never embedded again.
        """
        return event.unit_vector(), event.source_fp

    def _embed_text(self, event: Fetch) -> np.ndarray | None:
        if not event.text:
            return None
        self.counters.embedded_from_text += 1
        return self.embedder.embed(event.text)

    def _start_search(self, pending: list[PlannedEvent]) -> Search:
        """Start the search for the events the plan marked (`online.neighbour_search`); the
        batch's index writes are what that search will leave."""
        self._index_writes = None
        todo = [p for p in pending if p.vector is not None]
        return start_search(self.index, todo, self.config.neighbours, self._searcher)

    def _finish_search(self, search: Search) -> dict[int, Neighbours]:
        """The searched events' neighbours (by the plan's id()); their vectors wait in
        `_index_writes` until the batch's last store read."""
        found, writes = finish_search(self.index, search, self.config.neighbours)
        if writes is not None:
            self._index_writes = writes
        self.counters.searches += len(found)
        return found

    def _searcher(self) -> ThreadPoolExecutor:
        if self._search_pool is None:
            threads = self.index.threads
            self._search_pool = ThreadPoolExecutor(
                1, "index-search", initializer=faiss.omp_set_num_threads, initargs=(threads,)
            )
        return self._search_pool

    def _index_switch_point(self, events: Sequence[Fetch]) -> int | None:
        """Where, in this batch, the index's search changes (exact -> approximate, or a
        retrained index taking over)."""
        switch_at = self.index.next_switch
        if switch_at is None or len(self.index) >= switch_at:
            return None
        size = len(self.index)
        seen: set[int] = set()
        for i, event in enumerate(events):
            if not event.source_fp:
                continue
            pid = event.page_id
            if pid in seen or pid in self.index:
                continue
            seen.add(pid)
            size += 1
            if size > switch_at:
                return i
        return None

    def _next_fetch_days(
        self,
        scores: Scores,
        applied: list[Processed],
        walk: _Walk,
        writes: PageWrites,
    ) -> list[float]:
        """Suggested days to the next fetch per row: with a budget, the allocation's (its new
        state goes with the batch's writes).

        A scorer without a rate (``ccr``) gives P(>= 1 change) over the horizon, taken as a
        Poisson rate: -ln(1 - p_new) / horizon changes a day.
        """
        if scores.rate_per_day is None:
            p = np.clip(np.round(scores.p_new, 6), 0.0, 1.0 - 1e-9)
            rate = -np.log1p(-p) / DEFAULT_HORIZON_DAYS
        else:
            rate = np.round(scores.rate_per_day, 6)  # the published rate: the wait follows it
        if self.schedule is not None:
            times = np.array([r.event.timestamp for r in applied], dtype=np.float64)
            writes.allocation, waits = allocate(
                self.allocation,
                self.schedule,
                rates=rate,
                since_days=walk.since,
                timestamps=times,
                evidence=walk.evidence,
            )
            return waits.tolist()
        return next_fetch_days(rate, **self.config.revisit).tolist()


def _copy_learned(state: object) -> object:
    """A copy of a scorer's learned state to roll back to, cheap enough to take before every
    batch: lists of arrays or tuples (rows and labels waiting for an epoch, which only grow and
    shrink) are copied as lists of the same items, everything else deep-copied. The scorer's
    batch refresher is not part of the state: an attempt that fails after an epoch refreshed
    the batch model keeps that refresh."""
    new = copy.copy(state)
    for name, value in vars(state).items():
        if isinstance(value, list) and value and isinstance(value[0], np.ndarray | tuple):
            setattr(new, name, list(value))
        else:
            setattr(new, name, copy.deepcopy(value))
    return new

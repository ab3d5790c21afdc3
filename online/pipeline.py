"""The one code path: a batch of fetched-page events in, priority updates and feature rows out.

The embedded replay and the live workers (both in streams/) call
`PagePipeline.process_isolated`; only the store behind it differs (memory or Redis). A batch
costs one store read, one index search, one scorer call and one store write, yet each event is
processed as if the events came one at a time in order: its history, its related pages and its
neighbours' stats are what they were right after the event before it. So the output does not
depend on how a stream was cut into batches, and the replay and the workers agree.

`PagePipeline` composes the stages and holds what lasts between batches (the store, the
index, the scorer, the counters, the budget's allocation); each stage is a module of its own:

* `online.batch_plan`: what each event is, which events move or search the index (related
  pages are searched again only when they have gone stale, never on every event);
* `online.batch_index`: the index search in a thread, the batch's index writes held back
  until its last store read and undone if it fails;
* `online.batch_walk`: the history pass in stream order, the labels it brings, and any page's
  state right before a place in the batch;
* `online.related_stats`: each event's related pages and their stats as of its place, into
  its feature row;
* `online.sibling_stage`: the sibling groups, their gains, the related updates they send;
* `online.emit`: the priority updates and their suggested next fetch;
* `online.isolation`: one event cannot stop the others: a batch that raises is rolled back
  and retried in halves until the event at fault is alone, and reported as failed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import NamedTuple

import numpy as np

from online.batch_index import BatchIndex
from online.batch_plan import SearchRules, index_switch_point, plan_batch
from online.batch_walk import Walk, walk_history
from online.embedding import HashingTextEmbedder
from online.emit import Emitter
from online.events import DEFAULT_EMBEDDING_DIM, FetchedPage, utc_now
from online.features import (
    DEFAULT_COMPACT_STORE,
    DEFAULT_NEIGHBOURS,
    LOOKAROUND_NAMES,
    LOOKAROUND_WIDE,
    STATS_WIDE,
    feature_names,
    own_feature_matrix,
    stats_columns,
)
from online.fetch import Fetch, prepare
from online.history import DEFAULT_HISTORY, PageState
from online.index import VectorIndex
from online.isolation import Attempts, Isolated, copy_learned, isolate
from online.neighbour_search import (
    DEFAULT_DRIFT_GROWTH,
    DEFAULT_DRIFT_SIMILARITY,
    PlannedEvent,
    Search,
    resolve_short_ids,
)
from online.outcome import BatchOutcome, Processed, merge_outcomes
from online.priority import DEFAULT_MAX_DAYS, DEFAULT_MIN_DAYS, DEFAULT_TARGET_NEW_LINKS
from online.related_stats import feature_matrix, neighbours_of, read_related_stats
from online.related_updates import SiblingFollow
from online.schedule import Allocation, BudgetSchedule
from online.scored import ScoredColumns, finite_scores, flag_missing_model, with_rate
from online.scoring import LearningScorer, Scorer, Scores
from online.sibling_stage import batch_related_updates, pass_groups, read_siblings
from online.state_codec import StateRefused
from online.stores import Neighbours, PageStore, PageWrites, to_half

log = logging.getLogger("lookaround.pipeline")

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
    #: what a batch stores is made compact where it is made, so that every store (memory,
    #: Redis) holds the same numbers: stats, related-page weights and the look-around part
    #: of feature rows in half precision (`online.stores.to_half`; sizes in bytes stay
    #: float32), the direction related pages were found with in 4 bits a dimension, allowed
    #: for by its cosine (`online.neighbour_search.moved_materially`). False: float32 and
    #: int8 codes as before, what ``bench/store_precision.py`` measures the change against.
    #: Off by default: it moves no score by more than half precision does, but a learned
    #: scorer's choices on a sparse site follow its few positive pages so closely that such
    #: moves shift its rankings both ways, and the quality floors were measured without it
    #: (docs/scaling.md has what it saves in Redis)
    compact_store: bool = DEFAULT_COMPACT_STORE


@dataclass
class PipelineCounters:
    applied: int = 0
    duplicate: int = 0
    stale: int = 0
    searches: int = 0
    #: searches done again as wide as the batch could need (`online.neighbour_search`)
    searches_widened: int = 0
    embedded_from_text: int = 0
    #: events whose processing raised (isolated, reported to the caller as failed)
    failed: int = 0
    #: priorities whose score, p_new, counts or rate came out NaN or infinite and were replaced
    #: (0; p_new within [0, 1]): a last line of defence, none expected
    nonfinite_scores: int = 0
    #: stored learner states refused at start (not data we wrote: the scorer started fresh)
    learner_refused: int = 0


class Checkpoint(NamedTuple):
    """What a failed attempt at a batch must restore (`online.isolation`): the scorer's
    learned state (a copy), the counters, the allocation, the sibling-follow state."""

    learned: object | None
    counters: PipelineCounters
    allocation: Allocation | None
    follow: SiblingFollow


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
        compact = self.config.compact_store
        self._batch_index = BatchIndex(index, self.config.neighbours, half=compact)
        self._search_rules = SearchRules(
            self.config.recompute_growth,
            self.config.drift_growth,
            self.config.drift_similarity,
            compact,
        )
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
        self._emitter = Emitter(scorer, clock, self.config.revisit, self.schedule)
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
        split = index_switch_point(self.index, events)
        if split is not None and 0 < split < len(events):
            first, second = self.process_batch(events[:split]), self.process_batch(events[split:])
            return merge_outcomes(first, second)
        return self._process(events)

    def process_isolated(self, events: Sequence[Fetch | FetchedPage]) -> Isolated:
        """`process_batch`, isolating the events whose processing raises.

        A batch that raises is rolled back and retried in halves (`online.isolation`), so the
        events that raise alone are found, reported in ``failed`` and left out, and the rest
        go through exactly as without them. An infrastructure error
        (``infrastructure_errors``) rolls the scorer back to where it was before the call and
        propagates; the caller's store and index writes of the attempt are the caller's to
        discard (the live worker does).
        """
        fetches = [e if isinstance(e, Fetch) else prepare(e) for e in events]
        if not fetches:
            return Isolated(BatchOutcome([], []))
        before = self._checkpoint()
        attempts = Attempts(
            self.process_batch,
            self._checkpoint,
            partial(self._roll_back, index=True),
            self._count_failure,
            self.infrastructure_errors,
        )
        try:
            return isolate(fetches, attempts, before)
        except self.infrastructure_errors:
            self._roll_back(before, index=False)
            raise

    def _checkpoint(self) -> Checkpoint:
        """What an attempt at a batch may change, as it stands now."""
        learned = None if self.learner is None else copy_learned(self.learner.state())
        return Checkpoint(learned, replace(self.counters), self.allocation, self.follow)

    def _roll_back(self, saved: Checkpoint, *, index: bool) -> None:
        """Back to ``saved``; with ``index``, the last attempt's index writes undone too."""
        if self.learner is not None and saved.learned is not None:  # a copy again: the
            self.learner.restore(copy_learned(saved.learned))  # checkpoint may serve twice
        # A copy of the counters too: a checkpoint rolled back to twice must not keep the
        # counts of the attempt between.
        self.counters = replace(saved.counters)
        self.allocation, self.follow = saved.allocation, saved.follow
        self._batch_index.discard(undo=index)

    def _count_failure(self) -> None:
        """One more event left out because its processing raised."""
        self.counters.failed += 1

    # -- one batch ---------------------------------------------------------------------------
    #
    # The stages, in the order `_process` runs them: read the pages' records, plan (what each
    # event is, which need a search), search (in a thread, while the history is applied),
    # apply history with the labels it brings, related pages, siblings, their stats, the
    # index's writes, features, score, emit, related updates and write. Store reads all come
    # before the index changes and the one store write, so a batch that fails on the way
    # leaves nothing changed.

    def _process(self, events: Sequence[Fetch]) -> BatchOutcome:
        """One batch through the stages; each event processed as if it came alone, in order."""
        states, page_ids, stored_nbrs = self._read_pages(events)
        pending = plan_batch(
            events, states, page_ids, stored_nbrs, self.index, self._search_rules, self._embed_text
        )
        writes = PageWrites(states={}, stats={}, neighbours={})
        # FAISS searches in a thread without the GIL while the history is applied here (it
        # does not need the search's result).
        search = self._batch_index.start_search(pending)
        try:
            walk = self._walk(pending, states, page_ids, writes)
            own = self._own_features(walk)
            new_nbrs = self._finish_search(search)
        finally:
            search.wait()  # never leave a search running on an index about to change
        nbr_of = neighbours_of(walk, stored_nbrs, new_nbrs, writes)
        siblings = read_siblings(self.store, walk.pending, walk.first_seen, writes)
        announced = pass_groups(walk, siblings, self.follow, writes)
        lookup = read_related_stats(self.store, page_ids, pending, new_nbrs, siblings.of)
        self._batch_index.write()
        scored: list[ScoredColumns] = []
        if walk.applied:
            assert own is not None
            own_stats = own[:, self._stats_columns].astype(np.float32)
            if self.config.compact_store:  # as stored: what the page lends its neighbours
                own_stats = to_half(own_stats, STATS_WIDE)
            matrix = feature_matrix(
                own, own_stats, walk.applied, nbr_of, siblings.of, lookup, self.config.neighbours
            )
            scores = self._score(matrix, walk, writes)
            scored.append(self._emitter.emit(matrix, scores, walk, self.allocation, writes))
            writes.stats.update(zip([r.page_id for r in walk.applied], own_stats, strict=True))
        related = batch_related_updates(self.store, announced, walk, self.scorer, self.clock)
        self._write(writes, walk)
        return BatchOutcome(walk.results, scored, related)

    def _read_pages(
        self, events: Sequence[Fetch]
    ) -> tuple[dict[str, PageState | None], dict[str, int], dict[int, Neighbours | None]]:
        """The batch's pages as stored before it: history states by URL, page ids by URL and
        related-page lists by page id (one read each)."""
        page_ids = {e.url: e.page_id for e in events}
        urls, pids = list(page_ids), list(page_ids.values())  # distinct, in stream order
        states = dict(zip(urls, self.store.get_states(urls, pids), strict=True))
        stored_nbrs = dict(zip(pids, self.store.get_neighbours(pids), strict=True))
        return states, page_ids, resolve_short_ids(stored_nbrs, self.index)

    def _walk(
        self,
        pending: list[PlannedEvent],
        states: dict[str, PageState | None],
        page_ids: dict[str, int],
        writes: PageWrites,
    ) -> Walk:
        """The history pass (`online.batch_walk`). A learning scorer learns from the feature
        rows of each page's previous fetch when the labels they were waiting for arrive with
        this batch, so those rows are read first."""
        stored_rows: dict[int, np.ndarray | None] = {}
        if self.learns:
            pids = list(page_ids.values())
            stored_rows = dict(zip(pids, self.store.get_rows(pids), strict=True))
        return walk_history(
            pending,
            states,
            stored_rows,
            writes,
            history=self.config.history,
            names=self.feature_names,
            learns=self.learns,
            budgeted=self.schedule is not None,
        )

    def _own_features(self, walk: Walk) -> np.ndarray | None:
        """The applied events' look-back features, from their new states (None: none applied)."""
        if not walk.applied:
            return None
        urls = [r.event.url for r in walk.applied]
        return own_feature_matrix(walk.own_states, urls, self.config.history)

    def _finish_search(self, search: Search) -> dict[int, Neighbours]:
        """The searched events' neighbours (by the plan's id()), counted."""
        found = self._batch_index.finish_search(search)
        self.counters.searches += len(found)
        self.counters.searches_widened += search.widened
        return found

    def _embed_text(self, event: Fetch) -> np.ndarray | None:
        """The event's text embedded (None: it has none), counted."""
        if not event.text:
            return None
        self.counters.embedded_from_text += 1
        return self.embedder.embed(event.text)

    def _score(self, matrix: np.ndarray, walk: Walk, writes: PageWrites) -> Scores:
        """The scorer's scores for the rows, made publishable (a rate for every scorer, the
        missing-model flag, never a non-finite value). A learning scorer first learns from
        the labels the batch brought, and its rows and state go with the batch's writes."""
        if self.learner is not None:
            rows32 = matrix.astype(np.float32)
            own_width = len(self.feature_names) - len(LOOKAROUND_NAMES)
            if self.config.compact_store:
                rows32[:, own_width:] = to_half(rows32[:, own_width:], LOOKAROUND_WIDE)
            previous = self._previous_rows(walk, rows32, own_width)
            times = [r.event.timestamp for r in walk.applied]
            scores = self.learner.score_and_learn(
                matrix, self._columns, previous, walk.labels, times
            )
            for a, r in enumerate(walk.applied):  # the own part is recomputed when labelled
                writes.rows[r.page_id] = rows32[a, own_width:].copy()
            writes.learner = self.learner.state()
        else:
            scores = self.scorer.score_matrix(matrix, self._columns)
        scores = flag_missing_model(with_rate(scores), self.scorer.name)
        scores, replaced = finite_scores(scores)
        self.counters.nonfinite_scores += replaced
        return scores

    def _previous_rows(
        self, walk: Walk, rows32: np.ndarray, own_width: int
    ) -> list[np.ndarray | None]:
        """The rows the applied events' labels are for: from this batch, or stored (the own
        part recomputed from the state it was made from: the same numbers, as
        `online.features.own_feature_matrix` depends on nothing else, joined to the stored
        look-around part). A stored row of another width is passed on whole if it is a full
        row (float32) and is otherwise not learned from."""
        out: list[np.ndarray | None] = [None] * len(walk.previous_at)
        rebuild: list[int] = []
        for a, at in enumerate(walk.previous_at):
            if isinstance(at, int):
                out[a] = rows32[at]
            elif at is not None:
                if len(at) == rows32.shape[1]:
                    out[a] = np.asarray(at, dtype=np.float32)
                elif len(at) == rows32.shape[1] - own_width:
                    rebuild.append(a)
        if rebuild:
            before = walk.states_before()  # the states the stored rows were made from
            rebuild = [a for a in rebuild if before[a] is not None]  # no state: not learned
            states = [before[a] for a in rebuild]
            urls = [walk.applied[a].event.url for a in rebuild]
            if rebuild:
                own = own_feature_matrix(states, urls, self.config.history).astype(np.float32)
                for a, own_row in zip(rebuild, own, strict=True):
                    stored = walk.previous_at[a]
                    out[a] = np.concatenate([own_row, stored])  # type: ignore[list-item]
        return out

    def _write(self, writes: PageWrites, walk: Walk) -> None:
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

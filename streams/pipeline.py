"""The one code path: a batch of fetched-page events in, priority updates and feature rows out.

The embedded replay and the Faust workers both call `PagePipeline.process`; only the store
behind it differs (memory or Redis). A batch costs one store read, one index search, one
scorer call and one store write, yet each event is processed as if the events came one at a
time in order: its history, its related pages and its neighbours' stats are what they were
right after the event before it. So the output does not depend on how a stream was cut into
batches, and the replay and the workers agree.

Related pages are recomputed when a page's embedding changes, when it has none yet, and when
the index has grown ``recompute_growth``-fold since they were found (so the first pages of a
crawl, found among few others, get real neighbours later); never on every event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import faiss
import numpy as np

from online.embedding import HashingTextEmbedder
from online.events import DEFAULT_EMBEDDING_DIM, Fetch, FetchedPage, prepare, utc_now
from online.features import (
    as_dict,
    feature_names,
    own_feature_matrix,
    related_features_of_versions,
    stats_columns,
)
from online.history import DEFAULT_HISTORY, Emitted, PageState, update, with_embedding
from online.index import VectorIndex, neighbour_weights
from online.kernels import iso_utc_many
from online.learners import Label
from online.priority import DEFAULT_HORIZON_DAYS, next_fetch_days
from online.scoring import Scorer, Scores
from streams.scored import ScoredColumns
from streams.stores import Neighbours, PageStore, PageWrites

#: Extra candidates fetched beyond k, so near-ties at the k-th place are settled by the exact
#: recomputed similarities rather than by the search path.
_MARGIN = 5
#: Rows per block when similarities are recomputed (bounds the temporary array).
_CHUNK = 128
#: Query rows per index search task: the search thread takes them in order, and those it has
#: not started when the batch's other work is done are searched by the main thread.
_SEARCH_CHUNK = 128


@dataclass(frozen=True)
class PipelineConfig:
    history: int = DEFAULT_HISTORY
    neighbours: int = 30
    embedding_dim: int = DEFAULT_EMBEDDING_DIM
    recompute_growth: float = 2.0
    #: bounds of the suggested next fetch: `online.priority.next_fetch_days` options
    revisit: dict = field(
        default_factory=lambda: {"target_new_links": 1.0, "min_days": 0.25, "max_days": 30.0}
    )


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


@dataclass(slots=True)
class _Pending:
    event: Fetch
    page_id: int
    kind: str
    vector: np.ndarray | None = None
    vector_fp: int = 0
    search: bool = False
    neighbours: Neighbours | None = None
    indexed_fp: int = 0


@dataclass(slots=True)
class _Search:
    """A batch's index search in flight: the rows that need neighbours, their query data and
    the search of each chunk of rows (``(future, start, end)``)."""

    todo: list[_Pending]
    queries: np.ndarray | None = None
    ids: np.ndarray | None = None
    size_before: int = 0
    in_index: np.ndarray | None = None
    moved: np.ndarray | None = None
    k: int = 0
    parts: list[tuple[Future, int, int]] = field(default_factory=list)

    def found(self, index: VectorIndex) -> np.ndarray:
        """The candidate ids of every row. Chunks the search thread has not started yet are
        searched here, from the last one back, while it works forward: the caller would
        only wait for them."""
        assert self.queries is not None and self.ids is not None
        if not self.parts:
            return np.full((len(self.todo), 0), -1, np.int64)
        found: list[np.ndarray | None] = [None] * len(self.parts)
        for at in range(len(self.parts) - 1, -1, -1):
            future, lo, hi = self.parts[at]
            if not future.cancel():
                break  # started: so are all before it
            found[at] = index.search(self.queries[lo:hi], self.k, self.ids[lo:hi])[1]
        for at, (future, _, _) in enumerate(self.parts):
            if found[at] is None:
                found[at] = future.result()[1]
        return np.concatenate(found)  # type: ignore[arg-type]

    def wait(self) -> None:
        wait([future for future, _, _ in self.parts])


@dataclass
class PipelineCounters:
    applied: int = 0
    duplicate: int = 0
    stale: int = 0
    searches: int = 0
    embedded_from_text: int = 0


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
    ) -> None:
        self.store = store
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
        self._search_pool: ThreadPoolExecutor | None = None
        self.learns = bool(getattr(scorer, "learns", False))
        if self.learns:
            saved = store.get_learner()
            if saved is not None:
                scorer.restore(saved)  # type: ignore[attr-defined]

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
            return BatchOutcome(first.results + second.results, first.scored + second.scored)
        return self._process(events)

    # -- one batch ---------------------------------------------------------------------------

    def _process(self, events: Sequence[Fetch]) -> BatchOutcome:
        cfg = self.config
        urls = list(dict.fromkeys(e.url for e in events))
        states: dict[str, PageState | None] = dict(
            zip(urls, self.store.get_states(urls), strict=True)
        )
        page_ids = {e.url: e.page_id for e in events}
        stored_nbrs = dict(
            zip(
                page_ids.values(),
                self.store.get_neighbours(list(page_ids.values())),
                strict=True,
            )
        )

        # Pass 1: what each event is (applied / duplicate / stale) and which need a search.
        pending = self._plan(events, states, page_ids, stored_nbrs)

        # One search against the index as it stood before the batch, merged with the
        # batch's own earlier vectors. FAISS runs it in a thread without the GIL while the
        # history updates below run here (they do not need its result). The batch's vectors
        # go in only after the last store read, so a failed read leaves nothing changed
        # (a worker can simply retry).
        search = self._start_search(pending)
        try:
            # Rows of each page's previous fetch, for learning when their labels arrive now.
            stored_rows: dict[int, np.ndarray | None] = {}
            if self.learns:
                pids = list(page_ids.values())
                stored_rows = dict(zip(pids, self.store.get_rows(pids), strict=True))
            # Where each applied event's previous row is: ("store", row) or ("batch", position).
            previous_at: list[tuple[str, object] | None] = []
            labels: list[Label | None] = []
            last_position: dict[int, int] = {}

            # Pass 2: history updates, in order.
            results: list[Processed] = []
            applied: list[Processed] = []
            applied_pending: list[_Pending] = []
            own_states: list[PageState] = []
            writes = PageWrites(states={}, stats={}, neighbours={})
            for p in pending:
                event = p.event
                if p.kind != "applied":
                    results.append(Processed(event, p.page_id, Emitted(p.kind)))  # type: ignore[arg-type]
                    continue
                new_state, emitted = update(states[event.url], event, history=cfg.history)
                assert new_state is not None
                if p.search:  # its related pages are found from this vector now
                    new_state = with_embedding(new_state, p.vector_fp)
                own_states.append(new_state)
                states[event.url] = new_state
                writes.states[event.url] = new_state
                r = Processed(event, p.page_id, emitted, names=self.feature_names)
                if self.learns:
                    at = last_position.get(p.page_id)
                    if at is not None:
                        previous_at.append(("batch", at))
                    else:
                        stored = stored_rows.get(p.page_id)
                        previous_at.append(None if stored is None else ("store", stored))
                    interval = emitted.interval
                    labels.append(
                        None
                        if interval is None
                        else Label(interval.new_internal, interval.new_external, interval.days)
                    )
                    last_position[p.page_id] = len(applied)
                results.append(r)
                applied.append(r)
                applied_pending.append(p)
            own = (
                own_feature_matrix(own_states, [r.event.url for r in applied], cfg.history)
                if applied
                else None
            )
            new_nbrs = self._finish_search(search)
        finally:
            search.wait()  # never leave a search running on an index about to change

        # Each applied event's related pages as of its place in the stream.
        nbr_of: list[Neighbours | None] = []
        current_nbrs: dict[int, Neighbours | None] = dict(stored_nbrs)
        for p in applied_pending:
            nb = new_nbrs.get(id(p))
            if nb is not None:
                current_nbrs[p.page_id] = nb
                writes.neighbours[p.page_id] = nb
            nbr_of.append(current_nbrs.get(p.page_id))

        # Neighbours' stats as they stood before the batch: one row per distinct page among
        # the batch's pages and all their neighbours (read in one go).
        batch_ids = np.fromiter(page_ids.values(), np.int64, len(page_ids))
        parts, at = [batch_ids], len(batch_ids)
        offsets: dict[int, int] = {}  # where each neighbour list's ids start in all_ids
        for p in pending:
            nb = new_nbrs.get(id(p)) or p.neighbours
            if nb is not None and id(nb) not in offsets:
                offsets[id(nb)] = at
                parts.append(nb.ids)
                at += len(nb.ids)
        wanted, where = np.unique(np.concatenate(parts), return_inverse=True)
        base_stats = self.store.get_stats(wanted)
        row_of = dict(zip(batch_ids.tolist(), where[: len(batch_ids)].tolist(), strict=True))

        if self._index_writes is not None:
            self.index.upsert(*self._index_writes)
            self._index_writes = None

        scored: list[ScoredColumns] = []
        if applied:
            assert own is not None
            own_stats = own[:, self._stats_columns].astype(np.float32)
            related = self._related(
                applied, nbr_of, (wanted, where, offsets), row_of, base_stats, own_stats
            )
            matrix = np.concatenate([own, related], axis=1)
            if self.learns:
                rows32 = matrix.astype(np.float32)
                previous = [
                    None
                    if where is None
                    else (where[1] if where[0] == "store" else rows32[where[1]])  # type: ignore[index]
                    for where in previous_at
                ]
                scores = self.scorer.score_and_learn(  # type: ignore[attr-defined]
                    matrix, self._columns, previous, labels
                )
                for a, r in enumerate(applied):
                    writes.rows[r.page_id] = rows32[a]
                writes.learner = self.scorer.state()  # type: ignore[attr-defined]
            else:
                scores = self.scorer.score_matrix(matrix, self._columns)
            stamp = _iso(self.clock())
            scores = _with_rate(scores)
            waits = self._next_fetch_days(scores, len(applied))
            reasons = scores.reasons or [["own_history"]] * len(applied)
            scorer = {"name": self.scorer.name, "version": self.scorer.version}
            scorer["models"] = dict(scores.models or {})
            timestamps = [r.event.timestamp for r in applied]
            fetched_us = _micros_many(timestamps)
            events_applied = [r.event for r in applied]
            page_ids_applied = [r.page_id for r in applied]
            columns = ScoredColumns(
                urls=[e.url for e in events_applied],
                page_ids=page_ids_applied,
                crawls=[e.crawl for e in events_applied],
                statuses=[e.status for e in events_applied],
                timestamps=timestamps,
                intervals=[r.emitted.interval for r in applied],
                matrix=matrix,
                fetched_at=_iso_many(fetched_us),
                scored_at=stamp,
                values=_score_rows(scores),
                next_fetch_at=_next_fetch_iso(fetched_us, waits),
                reasons=reasons,
                scorer=scorer,
            )
            scored.append(columns)
            for a, r in enumerate(applied):
                r.scored = columns
                r.at = a
            writes.stats.update(zip(page_ids_applied, own_stats, strict=True))
        self.store.write(writes)
        self.counters.applied += len(applied)
        for r in results:
            if r.emitted.kind == "duplicate":
                self.counters.duplicate += 1
            elif r.emitted.kind == "stale":
                self.counters.stale += 1
        return BatchOutcome(results, scored)

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
        n_applied, k = len(applied), self.config.neighbours
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
    ) -> list[_Pending]:
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
            p = _Pending(event, pid, kind, neighbours=nbrs.get(pid))
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
            grown = current is not None and size >= self.config.recompute_growth * max(
                current.index_size, 1
            )
            if changed or current is None or grown:
                if vector is None:  # same content as indexed: reuse the indexed vector
                    vector = batch_vectors.get(pid)
                    if vector is None:
                        vector = self.index.reconstruct(pid)
                    if vector is None:
                        vector = self._embed_text(event)
                    if vector is None:
                        continue
                p.vector, p.vector_fp, p.search = vector, fp, True
                p.indexed_fp = indexed_fp.get(pid, 0)
                indexed_fp[pid] = fp
                embed_fp[event.url] = fp
                batch_vectors[pid] = vector
                # Placeholder so a later event of the same page in this batch sees it as fresh.
                nbrs[pid] = Neighbours(np.empty(0, np.int64), np.empty(0, np.float32), size)
        return pending

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

    def _start_search(self, pending: list[_Pending]) -> _Search:
        """Start the index search for the events that need neighbours (see `_finish_search`)
        in the search thread; FAISS holds no GIL while it runs."""
        self._index_writes = None
        todo = [p for p in pending if p.search]
        if not todo:
            return _Search(todo)
        k = self.config.neighbours
        # As the index stores them: a page's similarity to another is then the same number
        # whether the other is found in the index or earlier in this batch.
        queries = self.index.stored(np.stack([p.vector for p in todo]))  # type: ignore[misc]
        ids = np.array([p.page_id for p in todo], dtype=np.int64)
        size_before = len(self.index)
        in_index = np.array([pid in self.index for pid in ids.tolist()], dtype=bool)
        # A row "moves" its page when it brings a vector other than the indexed one.
        moved = np.array([p.vector_fp != p.indexed_fp for p in todo], dtype=bool)
        # Candidates from the pre-batch index, without pages moved by an earlier row.
        base_k = min(k + _MARGIN + 1 + int((moved & in_index).sum()), size_before)
        search = _Search(todo, queries, ids, size_before, in_index, moved, base_k)
        if base_k > 0:
            searcher = self._searcher()
            for lo in range(0, len(todo), _SEARCH_CHUNK):
                hi = min(lo + _SEARCH_CHUNK, len(todo))
                future = searcher.submit(self.index.search, queries[lo:hi], base_k, ids[lo:hi])
                search.parts.append((future, lo, hi))
        return search

    def _searcher(self) -> ThreadPoolExecutor:
        if self._search_pool is None:
            threads = int(getattr(self.index, "threads", 1))
            self._search_pool = ThreadPoolExecutor(
                1, "index-search", initializer=faiss.omp_set_num_threads, initargs=(threads,)
            )
        return self._search_pool

    def _finish_search(self, search: _Search) -> dict[int, Neighbours]:
        """Neighbours for the events that need them, each as of its place in the stream.

        Candidates come from the index as it stood before the batch (minus pages whose vector
        changed earlier in the batch) and from the vectors the batch itself set before the
        event; similarities are then recomputed exactly, the same way for every candidate, so
        the result does not depend on which search path found it. The batch's vectors are
        left in `_index_writes` for the index.
        """
        todo = search.todo
        if not todo:
            return {}
        k = self.config.neighbours
        n = len(todo)
        queries, ids, size_before = search.queries, search.ids, search.size_before
        in_index, moved = search.in_index, search.moved
        found = search.found(self.index)
        # The first row at which each found page is moved by the batch (n: never).
        move_rows = np.flatnonzero(moved)
        move_ids, first = np.unique(ids[move_rows], return_index=True)
        moved_at = np.full(found.shape, n, dtype=np.int64)
        if len(move_ids):
            pos = np.minimum(np.searchsorted(move_ids, found), len(move_ids) - 1)
            hit = move_ids[pos] == found
            moved_at[hit] = move_rows[first][pos[hit]]
        index_ok = (found >= 0) & (found != ids[:, None]) & (moved_at >= np.arange(n)[:, None])

        # Candidates from the batch: earlier rows that moved their page and are still its
        # latest vector at this row.
        next_row = np.full(n, n, dtype=np.int64)
        last_row: dict[int, int] = {}
        for row in range(n - 1, -1, -1):
            next_row[row] = last_row.get(int(ids[row]), n)
            if moved[row]:
                last_row[int(ids[row])] = row
        rows = np.arange(n)
        batch_ok = (
            (rows[None, :] < rows[:, None])
            & moved[None, :]
            & (next_row[None, :] >= rows[:, None])
            & (ids[None, :] != ids[:, None])
        )
        wide = min(k + _MARGIN, n)
        inner = np.where(batch_ok, queries @ queries.T, -np.inf)
        batch_rows = np.argpartition(-inner, wide - 1, axis=1)[:, :wide]
        batch_ok = np.take_along_axis(batch_ok, batch_rows, axis=1)

        cand_ids = np.concatenate([np.where(index_ok, found, -1), ids[batch_rows]], axis=1)
        # Stored vectors of the index candidates, row 0 a zero vector for empty slots.
        unique, inverse = np.unique(found[index_ok], return_inverse=True)
        stored = np.zeros((len(unique) + 1, queries.shape[1]), np.float32)
        if len(unique):
            stored[1:] = self.index.reconstruct_many(unique)
        stored_row = np.zeros(found.shape, dtype=np.int64)
        stored_row[index_ok] = inverse.reshape(-1) + 1
        width = found.shape[1]
        # Elementwise products summed along the contiguous last axis: the same arithmetic for
        # a pair of vectors whatever the batch, unlike BLAS kernels chosen by shape.
        sims = np.full(cand_ids.shape, -np.inf, dtype=np.float32)
        for lo in range(0, n, _CHUNK):
            hi = min(lo + _CHUNK, n)
            q = queries[lo:hi]
            exact = np.einsum("cnd,cd->cn", stored[stored_row[lo:hi]], q)
            sims[lo:hi, :width] = np.where(index_ok[lo:hi], exact, -np.inf)
            if batch_ok[lo:hi].any():
                exact = np.einsum("cnd,cd->cn", queries[batch_rows[lo:hi]], q)
                sims[lo:hi, width:] = np.where(batch_ok[lo:hi], exact, -np.inf)
        order = np.lexsort((cand_ids, -sims), axis=-1)[:, :k]
        best_ids = np.take_along_axis(cand_ids, order, axis=1)
        best_sims = np.take_along_axis(sims, order, axis=1)
        best_ids = np.where(np.isfinite(best_sims), best_ids, -1)
        weights = neighbour_weights(np.where(best_ids >= 0, best_sims, 0.0), best_ids)
        new_so_far = np.cumsum(~in_index & _first_occurrence(ids))

        out: dict[int, Neighbours] = {}
        for row, p in enumerate(todo):
            keep = weights[row] > 0
            out[id(p)] = Neighbours(
                best_ids[row][keep],
                weights[row][keep].astype(np.float32),
                size_before + int(new_so_far[row]),
            )
        latest = {p.page_id: p for p, m in zip(todo, moved, strict=True) if m}
        if latest:
            self._index_writes = (
                np.array(list(latest), dtype=np.int64),
                np.stack([p.vector for p in latest.values()]).astype(np.float32),  # type: ignore[misc]
            )
        self.counters.searches += n
        return out

    def _index_switch_point(self, events: Sequence[Fetch]) -> int | None:
        """Where, in this batch, the index changes search method (exact -> approximate)."""
        switch_at = getattr(self.index, "exact_below", None)
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

    def _next_fetch_days(self, scores: Scores, n: int) -> list[float | None]:
        """Suggested days to the next fetch per row (None where no rate is estimated)."""
        if scores.rate_per_day is None:
            return [None] * n
        rate = np.round(scores.rate_per_day, 6)  # the published rate: the suggestion follows it
        return next_fetch_days(rate, **self.config.revisit).tolist()


def _next_fetch_iso(fetched_us: np.ndarray, wait_days: list[float | None]) -> list[str | None]:
    """Suggested next fetch times: each fetch time plus its wait, as `timedelta` rounds it."""
    out: list[str | None] = [None] * len(wait_days)
    rows, waits = [], []
    for row, days in enumerate(wait_days):
        if days is not None:
            wait = timedelta(days=days)
            rows.append(row)
            waits.append((wait.days * 86_400 + wait.seconds) * 1_000_000 + wait.microseconds)
    if rows:
        later = fetched_us[rows] + np.array(waits, dtype=np.int64)
        for row, text in zip(rows, _iso_many(later), strict=True):
            out[row] = text
    return out


def _with_rate(scores: Scores) -> Scores:
    """A scorer that estimates counts but no rate (the formulas) gets counts / horizon."""
    internal, external = scores.expected_new_internal, scores.expected_new_external
    if scores.rate_per_day is not None or internal is None or external is None:
        return scores
    return replace(scores, rate_per_day=(internal + external) / DEFAULT_HORIZON_DAYS)


def _score_rows(scores: Scores) -> list[tuple]:
    """Scores as rows of rounded Python floats (None where a scorer estimates no counts)."""
    n = len(scores.score)

    def column(values: np.ndarray | None) -> list:
        return [None] * n if values is None else np.round(values, 6).tolist()

    return list(
        zip(
            column(scores.score),
            column(scores.expected_new_internal),
            column(scores.expected_new_external),
            column(scores.p_new),
            column(scores.rate_per_day),
            strict=True,
        )
    )


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _micros_many(timestamps: Sequence[float]) -> np.ndarray:
    """Epoch microseconds of timestamps, rounded as `datetime.fromtimestamp` rounds
    (the fraction's microseconds to nearest, ties to even)."""
    frac, whole = np.modf(np.asarray(timestamps, dtype=np.float64))
    return whole.astype(np.int64) * 1_000_000 + np.round(frac * 1e6).astype(np.int64)


def _iso_many(micros: np.ndarray) -> list[str]:
    """`_iso` of UTC moments given in epoch microseconds, for the whole batch in one compiled
    call (about 0.1 µs a time, against 2.3 with `time.gmtime` and an f-string each)."""
    return iso_utc_many(np.ascontiguousarray(micros, dtype=np.int64))


def _first_occurrence(ids: np.ndarray) -> np.ndarray:
    first = np.zeros(len(ids), dtype=bool)
    first[np.unique(ids, return_index=True)[1]] = True
    return first

"""The plan of a batch: what each event is, and which events move or search the index.

Before anything changes, each event is classified (applied, duplicate, stale: a fetch no
newer than its page's last one changes nothing) and, for an applied one, the plan decides
whether it brings its page a new vector (its content changed) and whether its related pages
are searched again (`SearchRules`). The index search can then start at once, in a thread,
while the history is applied.

Related pages are searched again when a page's vector has moved materially since the one they
were found with (its cosine similarity to it below ``drift_similarity``: pages drift a little
on most fetches), when it has none yet, and when the index has grown ``recompute_growth``-fold
since they were found (so the first pages of a crawl, found among few others, get real
neighbours later); never on every event. The index takes every change of a page's vector.

`index_switch_point` finds where in a batch the index would change search method, so the
pipeline can cut the batch there and each part search one way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from online.fetch import Fetch
from online.history import Kind, PageState
from online.index import VectorIndex
from online.neighbour_search import PlannedEvent, moved_materially
from online.stores import Neighbours, codes_cosine, compact_direction, direction_codes


@dataclass(frozen=True, slots=True)
class SearchRules:
    """When a page's related pages are searched again (`PipelineConfig`'s fields of the same
    names): the index grew ``recompute_growth``-fold since they were found; or the page's
    vector changed and the index grew ``drift_growth``-fold, or the vector moved materially
    (cosine similarity to the one they were found with below ``drift_similarity``)."""

    recompute_growth: float
    drift_growth: float
    drift_similarity: float
    #: the found-with direction in 4 bits a dimension, its own cosine kept to allow for it
    #: (`PipelineConfig.compact_store`); False: int8 codes
    compact: bool = True

    def stale(
        self, current: Neighbours, size: int, changed: bool, vector: np.ndarray | None
    ) -> bool:
        """Whether a page's related pages (``current``) are searched again at an index of
        ``size`` pages, its vector having ``changed`` (to ``vector``) or not."""
        found_at = max(current.index_size, 1)
        if size >= self.recompute_growth * found_at:
            return True
        if not changed:
            return False
        if size >= self.drift_growth * found_at:
            return True
        assert vector is not None  # a changed page's new vector
        return moved_materially(
            vector, current.found_with, self.drift_similarity, current.found_cos
        )


def plan_batch(
    events: Sequence[Fetch],
    states: dict[str, PageState | None],
    page_ids: dict[str, int],
    stored_nbrs: dict[int, Neighbours | None],
    index: VectorIndex,
    rules: SearchRules,
    embed_text: Callable[[Fetch], np.ndarray | None],
) -> list[PlannedEvent]:
    """Classify the events and decide which need a neighbour search, in stream order.

    A page's vector comes from the event (an embedding) or its text, fingerprinted before it
    is embedded so that unchanged text is never embedded again (``embed_text`` only runs for
    changed text, or to search for a page the index has no vector of).
    """
    last_seen = {url: (s.last_fetched_at if s is not None else None) for url, s in states.items()}
    embed_fp = {url: (s.embedding_fp if s is not None else 0) for url, s in states.items()}
    # The vector each page has in the index before the batch (its state records it).
    indexed_fp = {page_ids[url]: fp for url, fp in embed_fp.items()}
    nbrs = dict(stored_nbrs)
    size = len(index)
    # the pages the index holds before the batch (it changes only after the plan), or added
    # by an earlier event of the batch
    pids = np.fromiter(page_ids.values(), np.int64, len(page_ids))
    in_index = set(pids[index.contains_many(pids)].tolist())
    batch_vectors: dict[int, np.ndarray] = {}
    pending = []
    for event in events:
        pid = page_ids[event.url]
        ts = event.timestamp
        kind = _kind(ts, last_seen[event.url])
        p = PlannedEvent(event, pid, kind, neighbours=nbrs.get(pid))
        pending.append(p)
        if kind != "applied":
            continue
        last_seen[event.url] = ts
        vector, fp = event.unit_vector(), event.source_fp
        if not fp:
            continue
        changed = fp != embed_fp[event.url]
        if changed and vector is None:
            vector = embed_text(event)
            if vector is None:
                continue  # text without a single token: nothing to index
        if changed and pid not in in_index:
            size += 1
            in_index.add(pid)
        current = nbrs.get(pid)
        search = current is None or rules.stale(current, size, changed, vector)
        if changed or search:
            if vector is None:  # same content as indexed: reuse the indexed vector
                vector = batch_vectors.get(pid)
                if vector is None:
                    vector = index.reconstruct(pid)
                if vector is None:
                    vector = embed_text(event)
                if vector is None:
                    continue
            p.vector, p.vector_fp, p.search = vector, fp, search
            p.indexed_fp = indexed_fp.get(pid, 0)
            indexed_fp[pid] = fp
            embed_fp[event.url] = fp
            batch_vectors[pid] = vector
        if search:
            if rules.compact:
                direction = compact_direction(vector)
                p.found_with = direction_codes(direction)
                p.found_cos = codes_cosine(direction, p.found_with)
            else:
                p.found_with = direction_codes(vector, levels=127)
            # Placeholder so a later event of the same page in this batch sees it as fresh.
            nbrs[pid] = Neighbours(
                np.empty(0, np.int64),
                np.empty(0, np.float32),
                size,
                p.found_with,
                p.found_cos,
                short_ids=rules.compact,
            )
    return pending


def _kind(timestamp: float, last_seen: float | None) -> Kind:
    """An event's kind given its page's last fetch time (None: never fetched)."""
    if last_seen is not None and timestamp == last_seen:
        return "duplicate"
    if last_seen is not None and timestamp < last_seen:
        return "stale"
    return "applied"


def index_switch_point(index: VectorIndex, events: Sequence[Fetch]) -> int | None:
    """Where, in this batch, the index's search changes (exact -> approximate, or a retrained
    index taking over)."""
    switch_at = index.next_switch
    if switch_at is None or len(index) >= switch_at:
        return None
    size = len(index)
    seen: set[int] = set()
    for i, event in enumerate(events):
        if not event.source_fp:
            continue
        pid = event.page_id
        if pid in seen or pid in index:
            continue
        seen.add(pid)
        size += 1
        if size > switch_at:
            return i
    return None

"""The look-around stage: each event's related pages and their stats as they stood right before it.

An event's look-around features are its related pages' stats (and its siblings') as the
stream left them just before the event, even when one of those pages was fetched earlier in
the same batch. So the stats are read once for the batch (every batch page, every related page
and sibling), and each event's rows are picked among versions: the pre-batch row of a page, or
the row left by its latest earlier event in the batch. That keeps a batch's features the same
as if its events had come one at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from online.batch_walk import Walk
from online.features import SIBLING_COLUMNS, related_features_of_versions
from online.neighbour_search import PlannedEvent
from online.outcome import Processed
from online.stores import Neighbours, PageStore, PageWrites


@dataclass(frozen=True, slots=True)
class StatsLookup:
    """The related pages' stats read for a batch: the sorted ids read (``wanted``), each listed
    id's position among them (``where``), where each neighbour list starts in that listing
    (``offsets``, by the list's id()), the rows read and each batch page's row."""

    wanted: np.ndarray
    where: np.ndarray
    offsets: dict[int, int]
    base_stats: np.ndarray
    row_of: dict[int, int]


def neighbours_of(
    walk: Walk,
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


def read_related_stats(
    store: PageStore,
    page_ids: dict[str, int],
    pending: list[PlannedEvent],
    new_nbrs: dict[int, Neighbours],
    sibling_of: list[Neighbours | None],
) -> StatsLookup:
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
    base_stats = store.get_stats(wanted)
    row_of = dict(zip(batch_ids.tolist(), where[: len(batch_ids)].tolist(), strict=True))
    return StatsLookup(wanted, where, offsets, base_stats, row_of)


def feature_matrix(
    own: np.ndarray,
    own_stats: np.ndarray,
    applied: list[Processed],
    nbr_of: list[Neighbours | None],
    sibling_of: list[Neighbours | None],
    lookup: StatsLookup,
    neighbours: int,
) -> np.ndarray:
    """The applied events' feature rows: look back (own), look around (related pages, at
    least ``neighbours`` slots) and the siblings' columns, each event seeing the stats as
    they were right before it."""
    related = related_matrix(applied, nbr_of, lookup, own_stats, neighbours)
    siblings = related_matrix(applied, sibling_of, lookup, own_stats, neighbours)
    return np.concatenate([own, related, siblings[:, SIBLING_COLUMNS]], axis=1)


def related_matrix(
    applied: list[Processed],
    nbr_of: list[Neighbours | None],
    lookup: StatsLookup,
    own_stats: np.ndarray,
    neighbours: int,
) -> np.ndarray:
    """Look-around features of the applied events, each seeing its neighbours' stats as
    they were right before it: the pre-batch row, or the row left by the latest earlier
    event of that neighbour in this batch (``own_stats``, one row per applied event)."""
    slots, weights = _slots(nbr_of, lookup, neighbours)
    version = _versions(slots, applied, lookup)
    versions = np.concatenate([lookup.base_stats, own_stats])
    return related_features_of_versions(weights, versions, version)


def _slots(
    nbr_of: list[Neighbours | None], lookup: StatsLookup, neighbours: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per applied event and neighbour slot: the neighbour's row among the stats read (-1:
    an empty slot) and its weight. Every list here was listed for the read (a page's stored
    or newly found one), so its rows are found from ``lookup`` without a second search."""
    lists = [nb for nb in nbr_of if nb is not None]
    n_applied = len(nbr_of)
    k = max([neighbours, *(len(nb.ids) for nb in lists)])
    slots = np.full((n_applied, k), -1, dtype=np.int64)
    weights = np.zeros((n_applied, k), dtype=np.float64)
    present = [(a, nb) for a, nb in enumerate(nbr_of) if nb is not None and len(nb.ids)]
    if present:
        lens = np.array([len(nb.ids) for _, nb in present], dtype=np.int64)
        rows = np.repeat(np.array([a for a, _ in present], dtype=np.int64), lens)
        cols = np.arange(len(rows)) - np.repeat(np.cumsum(lens) - lens, lens)
        starts = np.array([lookup.offsets[id(nb)] for _, nb in present], dtype=np.int64)
        slots[rows, cols] = lookup.where[np.repeat(starts, lens) + cols]
        weights[rows, cols] = np.concatenate([nb.weights for _, nb in present])
    return slots, weights


def _versions(slots: np.ndarray, applied: list[Processed], lookup: StatsLookup) -> np.ndarray:
    """Which version of its page's stats each slot sees: the pre-batch rows are versions
    0..len(base_stats)-1, then one per applied event. An update is keyed by (page row,
    position) so a binary search finds the latest one before each event; only slots whose
    page was updated in the batch need that search."""
    n_applied = len(applied)
    span = n_applied + 1
    updated = np.array([lookup.row_of[r.page_id] for r in applied], dtype=np.int64)
    version = slots.copy()
    touched = np.zeros(len(lookup.wanted), dtype=bool)
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
            hit, len(lookup.base_stats) + order[np.maximum(found, 0)], cand_slots
        )
    return version

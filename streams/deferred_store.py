"""The live worker's write-behind store: Redis overlaid with the batches not yet written to it.

The worker processes a batch while the one before waits for its messages' delivery and its
Redis write (`streams.live`): the next batch must read what those unwritten batches left, so
every read here goes through the unwritten layers, newest first, before Redis.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from online.ensemble_state import EnsembleState, StoredState
from online.history import PageState
from online.related_updates import SiblingFollow, SiblingGroup
from online.schedule import Allocation
from online.stores import Neighbours, PageWrites, merge_records, sibling_groups
from streams.redis_store import RedisPageStore, learner_parts


class DeferredStore:
    """Reads through to the store, overlaid with the writes not yet in it.

    The batch being processed writes to ``pending``; `seal` turns it into a layer that waits
    for its messages' delivery and is then written (`write_layer`, in a thread, while the next
    batch is processed against the layers still unwritten). Layers are written oldest first.
    A read takes its overlay before it reads the store, so a layer written in between is seen
    either way.
    """

    def __init__(self, store: RedisPageStore) -> None:
        self.store = store
        self.pending = self._empty()
        self.sealed: list[PageWrites] = []  # oldest first

    @staticmethod
    def _empty() -> PageWrites:
        return PageWrites(states={}, stats={}, neighbours={}, rows={}, learner=None)

    def _layers(self) -> list[PageWrites]:
        """The unwritten layers, newest first."""
        return [self.pending, *reversed(self.sealed)]

    @staticmethod
    def _overlay(keys: Sequence, got: list, layers: list[dict]) -> list:
        if not layers:
            return got
        out = []
        for key, value in zip(keys, got, strict=True):
            for layer in layers:
                if key in layer:
                    value = layer[key]
                    break
            out.append(value)
        return out

    def get_states(
        self, urls: Sequence[str], page_ids: Sequence[int] | None = None
    ) -> list[PageState | None]:
        layers = [layer.states for layer in self._layers() if layer.states]
        return self._overlay(urls, self.store.get_states(urls, page_ids), layers)

    def get_neighbours(self, page_ids: Sequence[int]) -> list[Neighbours | None]:
        layers = [layer.neighbours for layer in self._layers() if layer.neighbours]
        got = self.store.get_neighbours(page_ids)
        return self._overlay([int(i) for i in page_ids], got, layers)

    def get_stats(self, page_ids: np.ndarray) -> np.ndarray:
        layers = [layer.stats for layer in reversed(self._layers()) if layer.stats]
        out = self.store.get_stats(page_ids)
        if layers:
            ids = page_ids.tolist()
            for layer in layers:  # oldest first: newer layers overwrite
                for i, pid in enumerate(ids):
                    row = layer.get(pid)
                    if row is not None:
                        out[i] = row
        return out

    def get_rows(self, page_ids: Sequence[int]) -> list[np.ndarray | None]:
        layers = [layer.rows for layer in self._layers() if layer.rows]
        return self._overlay([int(i) for i in page_ids], self.store.get_rows(page_ids), layers)

    def get_siblings(self, keys: Sequence[str]) -> list[SiblingGroup]:
        got = self.store.get_siblings(keys)
        layers = [layer for layer in reversed(self._layers()) if layer.siblings or layer.gains]
        if not layers:
            return got
        lists, gains = [], []
        for key, group in zip(keys, got, strict=True):
            urls, gain = list(group.urls), group.gain
            for layer in layers:  # oldest first; a layer written meanwhile may be in both
                urls += [u for u in layer.siblings.get(key, ()) if u not in urls]
                newer = layer.gains.get(key)
                if newer is not None and (gain is None or newer.at > gain.at):
                    gain = newer
            lists.append(urls)
            gains.append(gain)
        return sibling_groups(lists, gains)

    def get_follow(self) -> SiblingFollow | None:
        for layer in self._layers():
            if layer.follow is not None:
                return layer.follow
        return self.store.get_follow()

    def get_learner(self) -> object | None:
        for layer in self._layers():
            if layer.learner is not None:
                learner = layer.learner
                if isinstance(learner, StoredState):
                    return EnsembleState.from_parts(learner.head, learner.blocks)
                return learner
        return self.store.get_learner()

    def get_allocation(self) -> Allocation | None:
        for layer in self._layers():
            if layer.allocation is not None:
                return layer.allocation
        return self.store.get_allocation()

    def write(self, writes: PageWrites) -> None:
        merge_records(self.pending, writes)
        self.pending.stats.update(writes.stats)

    def seal(self) -> PageWrites:
        """The pending writes as a layer of their own; the learner encoded now (as data, see
        `online.state_codec`), as it stands (the next batch goes on changing it)."""
        layer, self.pending = self.pending, self._empty()
        if layer.learner is not None:
            layer.learner = learner_parts(layer.learner)
        self.sealed.append(layer)
        return layer

    def write_layer(self, layer: PageWrites) -> None:
        """Write the oldest sealed layer (safe in another thread)."""
        assert self.sealed and self.sealed[0] is layer, "layers are written oldest first"
        self.store.write(layer)

    def release(self, layer: PageWrites) -> None:
        """Forget a written layer (in the event loop's thread, after `write_layer`)."""
        self.sealed.remove(layer)

    def discard(self) -> None:
        """Drop the pending writes of a failed attempt (sealed layers stay)."""
        self.pending = self._empty()

"""Adaptive micro-batches for a live worker: small while it keeps up, large while it catches up.

A fixed ``stream.take(n, within=t)`` must choose between latency (a short ``t``: batches of
what came in ``t``) and throughput (a long one: full batches, fewer per-batch costs). A worker
wants both: when it is idle an event should go through at once, and when it is behind the
per-batch costs should be shared by as many events as possible. `BatchGatherer` gives that by
letting chunks pile up only while the worker is busy: its consumer takes everything that
arrived since it last took (up to ``max_size``), so a batch is as large as the backlog that
built up while the previous one was processed, and no larger than needed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class BatchGatherer(Generic[T]):
    """A bounded FIFO of items that a consumer takes in batches of everything waiting.

    ``put`` adds a chunk, waiting while ``max_size`` items or more are already waiting (so a
    stalled consumer holds back the producer instead of buffering without bound); ``get``
    waits for at least one item and takes up to ``max_size``, oldest first.

    >>> async def demo():
    ...     gatherer = BatchGatherer(max_size=4)
    ...     await gatherer.put([1, 2])
    ...     await gatherer.put([3])  # arrived while the consumer was busy
    ...     first = await gatherer.get()
    ...     await gatherer.put([4, 5, 6, 7, 8])
    ...     return first, await gatherer.get(), await gatherer.get()
    >>> asyncio.run(demo())
    ([1, 2, 3], [4, 5, 6, 7], [8])
    """

    def __init__(self, max_size: int) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be at least 1, got {max_size}")
        self.max_size = max_size
        self._items: list[T] = []
        self._changed = asyncio.Condition()

    def __len__(self) -> int:
        return len(self._items)

    async def put(self, items: Sequence[T]) -> None:
        """Append ``items`` (in order) once fewer than ``max_size`` items are waiting."""
        if not items:
            return
        async with self._changed:
            await self._changed.wait_for(lambda: len(self._items) < self.max_size)
            self._items.extend(items)
            self._changed.notify_all()

    async def get(self) -> list[T]:
        """The oldest ``max_size`` items or fewer: all that are waiting, once there is one."""
        async with self._changed:
            await self._changed.wait_for(lambda: bool(self._items))
            batch = self._items[: self.max_size]
            del self._items[: self.max_size]
            self._changed.notify_all()
            return batch

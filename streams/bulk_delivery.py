"""Bulk delivery of one topic's records from Faust's consumer to a worker's batches.

Faust hands a stream its messages one at a time: for every message its fetcher awaits the
conductor's callback against the flow's suspension (two futures and a wait), the conductor
decodes it into an event and queues it, and the stream takes it off the queue, tracks it and
runs its sensors. A live worker takes its events in batches of thousands, so that per-message
machinery cost about a third of its interpreter time, as much as the pipeline itself
(docs/benchmarks.md, "Where a live worker's time goes").

`install` lets an app name one topic (`BulkRoute`) whose records its consumer hands over a
fetch at a time instead: each fetch's messages of that topic, in order, go to the route's
``sink`` in one call (awaited against the flow's suspension once a fetch, not once a message).
Everything else the fetch loop does is Faust's own, unchanged: which partitions are fetched,
the generation and flow checks of ``Consumer.getmany``, the read offsets and their gaps, the
commits every ``broker_commit_every`` acks, and every other topic's messages through the
conductor. Each message the sink takes is tracked as a stream would track it (so a
rebalance's ``wait_empty`` waits for it), and is acked with `ack` after its batch is
committed; a fetch dropped because the flow was suspended while the sink waited is not.

A message still waiting when a rebalance starts a new generation is dropped without an ack
(`current`), as Faust's stream skips one: its partition is read again from its committed
offset by whoever owns it now.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: The app attribute an app's route is kept in (apps without one use Faust's own loop).
ROUTE_ATTRIBUTE = "lookaround_bulk_route"


@dataclass(frozen=True)
class BulkRoute:
    """The topic whose messages go to ``sink`` a fetch at a time (a list, in fetch order)."""

    topic: str
    sink: Callable[[list[Any]], Awaitable[None]]


def install() -> None:
    """Patch Faust's consumer once: an app with a `BulkRoute` (``app.lookaround_bulk_route``)
    drains its fetches through `_drain_in_bulk`; every other app through Faust's own loop."""
    from faust.transport.consumer import Consumer

    original = Consumer._drain_messages
    if getattr(original, "_lookaround", False):
        return

    async def drain(self: Any, fetcher: Any) -> None:
        route = getattr(self.app, ROUTE_ATTRIBUTE, None)
        if route is None:
            return await original(self, fetcher)
        return await _drain_in_bulk(self, fetcher, route)

    drain._lookaround = True  # type: ignore[attr-defined]
    Consumer._drain_messages = drain  # type: ignore[method-assign]


async def _drain_in_bulk(consumer: Any, fetcher: Any, route: BulkRoute) -> None:
    """Faust's ``Consumer._drain_messages`` (the same in faust-streaming 0.11.3 and 0.15.3,
    the ends of the range pyproject.toml allows), with the route's topic collected per fetch
    and handed to its sink in one call."""
    from faust.transport.consumer import CONSUMER_FETCHING

    callback = consumer.callback
    consumer_should_stop = consumer._stopped.is_set
    fetcher_should_stop = fetcher._stopped.is_set
    get_read_offset = consumer._read_offset.__getitem__
    set_read_offset = consumer._read_offset.__setitem__
    commit_every = consumer._commit_every
    acks_enabled_for = consumer.app.topics.acks_enabled_for
    track = consumer.track_message
    topic = route.topic
    try:
        while not (consumer_should_stop() or fetcher_should_stop()):
            consumer.diag.set_flag(CONSUMER_FETCHING)
            fetched = consumer.getmany(timeout=1.0)
            await consumer.sleep(0)  # as Faust's loop: getmany may return at once, repeatedly
            chunk: list[Any] = []
            if not consumer.should_stop:
                async for tp, message in fetched:
                    offset = message.offset
                    read = get_read_offset(tp)
                    if read is not None and offset < read:
                        continue  # read before (Faust drops it too)
                    if read and offset - read > 1 and acks_enabled_for(message.topic):
                        await consumer._add_gap(tp, read + 1, offset)
                    if commit_every is not None and consumer._n_acked >= commit_every:
                        consumer._n_acked = 0
                        await consumer.commit()
                    if message.topic == topic:
                        chunk.append(message)
                    else:
                        await consumer.wait_first(callback(message), consumer.suspend_flow.wait())
                    set_read_offset(tp, offset)
            if chunk:
                handing = route.sink(chunk)
                waited = await consumer.wait_first(handing, consumer.suspend_flow.wait())
                if handing in waited.done:  # taken (not dropped for a suspended flow)
                    for message in chunk:
                        message.tracked = True
                        track(message)
            consumer.diag.unset_flag(CONSUMER_FETCHING)
    except (*consumer.consumer_stopped_errors, asyncio.CancelledError):
        if consumer.transport.app.should_stop:
            return  # stopping already: as Faust's loop
        raise
    except Exception as exc:
        consumer.log.exception("Drain messages raised: %r", exc)
        raise
    finally:
        consumer.diag.unset_flag(CONSUMER_FETCHING)


def current(app: Any, messages: Sequence[Any]) -> list[Any]:
    """The messages of the consumer's current generation (older ones were fetched before a
    rebalance and are read again by their partition's owner)."""
    generation = app.consumer_generation_id
    return [m for m in messages if m.generation_id == generation]


def ack(app: Any, messages: Sequence[Any]) -> None:
    """Ack messages handed over by the route (their offsets become committable), with the
    sensors' message-out call a stream would make."""
    consumer = app.consumer
    on_out = app.sensors.on_message_out
    for m in messages:
        if consumer.ack(m):
            on_out(m.tp, m.offset, m)

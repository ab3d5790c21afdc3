"""The live worker's adaptive batches (`streams.batching.BatchGatherer`)."""

from __future__ import annotations

import asyncio

import pytest

from streams.batching import BatchGatherer


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_batches_are_what_waited_in_order_and_never_over_max_size():
    async def scenario():
        g: BatchGatherer[int] = BatchGatherer(max_size=5)
        await g.put([0, 1, 2])
        await g.put([3, 4, 5, 6])  # 3 waiting < 5: accepted whole
        batches = [await g.get(), await g.get()]
        await g.put([7])
        batches.append(await g.get())
        return batches, len(g)

    batches, left = run(scenario())
    assert batches == [[0, 1, 2, 3, 4], [5, 6], [7]]
    assert left == 0


def test_get_waits_for_an_item_and_takes_it_at_once():
    async def scenario():
        g: BatchGatherer[str] = BatchGatherer(max_size=100)
        getter = asyncio.create_task(g.get())
        await asyncio.sleep(0.01)
        assert not getter.done()
        await g.put(["a"])
        return await getter

    assert run(scenario()) == ["a"]


def test_put_waits_while_max_size_items_wait_so_a_stalled_consumer_holds_the_producer():
    async def scenario():
        g: BatchGatherer[int] = BatchGatherer(max_size=3)
        await g.put([1, 2, 3])
        putter = asyncio.create_task(g.put([4]))
        await asyncio.sleep(0.01)
        blocked = not putter.done()
        first = await g.get()
        await putter
        return blocked, first, await g.get()

    blocked, first, second = run(scenario())
    assert blocked
    assert (first, second) == ([1, 2, 3], [4])


def test_a_busy_consumer_gets_larger_batches_and_an_idle_one_single_chunks():
    """Chunks of 10 arrive every tick. A consumer that takes 5 ticks per batch gets the 5
    chunks that came meanwhile; one that keeps up gets each chunk alone. Nothing is lost,
    nothing repeats, order holds."""

    async def scenario(work_ticks: int, ticks: int = 40) -> list[list[int]]:
        g: BatchGatherer[int] = BatchGatherer(max_size=1000)
        clock = [0]
        batches: list[list[int]] = []

        async def consumer():
            while sum(map(len, batches)) < 10 * ticks:
                batches.append(await g.get())
                until = clock[0] + work_ticks
                while clock[0] < until:  # busy for work_ticks ticks
                    await asyncio.sleep(0)

        task = asyncio.create_task(consumer())
        for t in range(ticks):
            await g.put(list(range(10 * t, 10 * t + 10)))
            for _ in range(5):
                await asyncio.sleep(0)  # let the consumer take what it can
            clock[0] += 1
        while not task.done():
            clock[0] += 1
            await asyncio.sleep(0)
        return batches

    busy = run(scenario(work_ticks=5))
    idle = run(scenario(work_ticks=0))
    for batches in (busy, idle):
        assert [x for b in batches for x in b] == list(range(400))
    assert all(len(b) == 10 for b in idle)
    steady = [len(b) for b in busy[1:-1]]
    assert steady and all(n >= 40 for n in steady), [len(b) for b in busy]


def test_max_size_must_be_positive():
    with pytest.raises(ValueError, match="max_size"):
        BatchGatherer(max_size=0)

"""The budget-aware schedule (``fetch_budget_per_day``): the square-root allocation learned from
the stream, the same whatever the batching, kept in the store (memory and the real Redis), and
a crawler that fetches each page at its ``next_fetch_at`` spends about its budget."""

from __future__ import annotations

import uuid

import numpy as np
import orjson
import pytest

from batch.policies import ScheduledPolicy
from batch.simulate import build_universe, simulate
from batch.timeline import DAY, TimelineParser
from online.index import FaissIndex
from online.pipeline import PagePipeline, PipelineConfig
from online.schedule import Allocation, BudgetSchedule, allocate
from online.scorers import get_scorer
from online.stores import MemoryPageStore
from streams.redis_store import RedisPageStore
from streams.settings import Settings
from streams.simulate import PipelineRates
from tests.test_pipeline import DIM, comparable, crawl

T0 = 1_767_225_600.0


def stream(days: int = 60, seed: int = 0) -> tuple[np.ndarray, list, np.ndarray]:
    """Two pages (rates 0.1 and 0.4) fetched as the allocation says, interleaved in time."""
    rng = np.random.default_rng(seed)
    rows = []
    for rate, every in ((0.1, 2.0), (0.4, 0.5)):
        for k, t in enumerate(np.arange(0, days, every) + rng.uniform(0, 0.1)):
            rows.append((t * DAY, rate, None if k == 0 else every))
    rows.sort(key=lambda r: r[0])
    return (
        np.array([r[1] for r in rows]),
        [r[2] for r in rows],
        np.array([r[0] for r in rows]),
    )


def test_waits_do_not_depend_on_how_the_stream_is_cut() -> None:
    rates, since, times = stream()
    budget = BudgetSchedule(per_day=3.0)
    whole_state, whole = allocate(None, budget, rates=rates, since_days=since, timestamps=times)
    for size in (1, 7, 50):
        state, parts = None, []
        for lo in range(0, len(rates), size):
            hi = lo + size
            state, waits = allocate(
                state, budget, rates=rates[lo:hi], since_days=since[lo:hi], timestamps=times[lo:hi]
            )
            parts.append(waits)
        assert np.array_equal(np.concatenate(parts), whole) and state == whole_state


def test_each_page_weighs_by_the_time_it_covers_not_by_its_fetches() -> None:
    """Page 1 is fetched 4 x as often as page 0: the mean of sqrt(rate) is still the pages'
    mean, so the rates it sets are in proportion to sqrt(rate) and sum to the budget."""
    rates, since, times = stream(days=120)
    state, waits = allocate(
        None, BudgetSchedule(per_day=3.0), rates=rates, since_days=since, timestamps=times
    )
    page_mean = (np.sqrt(0.1) + np.sqrt(0.4)) / 2
    assert state.pages == 2
    assert state.weighted_root / state.weight == pytest.approx(page_mean, rel=0.02)
    last = {rate: wait for rate, wait in zip(rates.tolist(), waits.tolist(), strict=True)}
    assert last[0.1] / last[0.4] == pytest.approx(2.0, rel=0.03)
    assert 1 / last[0.1] + 1 / last[0.4] == pytest.approx(3.0, rel=0.03)


def test_bounds_floor_and_state_bytes() -> None:
    budget = BudgetSchedule(per_day=1.0, min_days=0.5, max_days=40.0)
    state, waits = allocate(
        None,
        budget,
        rates=np.array([0.0, 100.0]),
        since_days=[None, None],
        timestamps=np.zeros(2),
    )
    assert waits.tolist() == [1.0, 2.0]  # first fetches: the pages seen so far, N / R
    root = np.sqrt(0.0005)  # the floor's
    for pages, rate, expected in ((1000, 0.0, 40.0), (1000, np.nan, 40.0), (1, 100.0, 0.5)):
        known = Allocation(pages=pages, weighted_root=root, weight=1.0, at=0.0)
        _, waits = allocate(
            known, budget, rates=np.array([rate]), since_days=[1e-9], timestamps=np.zeros(1)
        )
        assert waits.tolist() == [expected], rate
    assert Allocation.from_bytes(state.to_bytes()) == state
    with pytest.raises(ValueError, match="positive"):
        BudgetSchedule(per_day=0)


def pipeline(store, budget: float | None) -> PagePipeline:  # type: ignore[no-untyped-def]
    config = PipelineConfig(embedding_dim=DIM, neighbours=5, fetch_budget_per_day=budget)
    return PagePipeline(store, FaissIndex(dim=DIM), get_scorer("lbla"), config)


def run(events, batch: int, store=None, budget: float | None = 20.0):  # type: ignore[no-untyped-def]
    p = pipeline(store if store is not None else MemoryPageStore(), budget)
    out = []
    for i in range(0, len(events), batch):
        out.extend(p.process(events[i : i + batch]))
    return p, out


def test_the_pipeline_schedules_by_the_budget_the_same_for_any_batching() -> None:
    events = crawl(pages=40, rounds=4)
    p, one = run(events, 1)
    for size in (9, 1000):
        assert comparable(run(events, size)[1]) == comparable(one)
    assert p.store.get_allocation() == p.allocation and p.allocation.pages == 40
    default = comparable(run(events, 50, budget=None)[1])
    assert [r[2]["next_fetch_at"] for r in default] != [
        r[2]["next_fetch_at"] for r in comparable(one)
    ]
    # busier pages (even: they gain links every round) come back sooner
    last = {r.event.url: r.priority for r in one}
    waits = {url: orjson.loads(orjson.dumps(pr))["next_fetch_at"] for url, pr in last.items()}
    busy = [w for url, w in waits.items() if int(url.rsplit("p", 1)[1]) % 2 == 0]
    calm = [w for url, w in waits.items() if int(url.rsplit("p", 1)[1]) % 2 == 1]
    assert max(busy) < min(calm)


def restarted(events, split: int, store) -> list:  # type: ignore[no-untyped-def]
    """Process ``events`` with a worker restarted at ``split``: a new pipeline on the same store
    and index (a live worker rebuilds its index replica from the embeddings topic)."""
    index = FaissIndex(dim=DIM)
    config = PipelineConfig(embedding_dim=DIM, neighbours=5, fetch_budget_per_day=20.0)
    out = []
    for part in (events[:split], events[split:]):
        p = PagePipeline(store, index, get_scorer("lbla"), config)
        for i in range(0, len(part), 40):
            out.extend(p.process(part[i : i + 40]))
    return out


def test_a_restarted_worker_continues_with_the_stored_allocation() -> None:
    events = crawl(pages=30, rounds=4)
    whole, results = run(events, 40)
    store = MemoryPageStore()
    assert comparable(restarted(events, 60, store)) == comparable(results)
    assert store.get_allocation() == whole.allocation


def test_the_allocation_is_kept_in_redis_with_the_pages() -> None:
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0", socket_connect_timeout=1)
    try:
        client.ping()
    except redis.ConnectionError as exc:  # pragma: no cover - environment
        pytest.skip(f"no Redis: {exc}")
    store = RedisPageStore(client, prefix=f"test:{uuid.uuid4().hex[:12]}:", worker_id="w1")
    try:
        events = crawl(pages=30, rounds=4)
        memory, results = run(events, 40)
        assert comparable(restarted(events, 60, store)) == comparable(results)
        assert store.get_allocation() == memory.allocation
        assert client.exists(store.allocation_key)
    finally:
        store.delete_all()


def test_the_setting() -> None:
    assert Settings().fetch_budget_per_day is None
    assert Settings(fetch_budget_per_day=2500).fetch_budget_per_day == 2500.0
    with pytest.raises(ValueError):
        Settings(fetch_budget_per_day=0)


def test_a_crawler_that_follows_next_fetch_at_spends_about_its_budget() -> None:
    """Slots at 3 x the budget, so the crawl is free to over- or under-spend: it fetches only
    pages whose next_fetch_at has come."""
    parser = TimelineParser()
    hub = "https://site.org/"
    pages = [f"https://site.org/p{i}" for i in range(60)]
    records = [{"url": hub, "at": T0, "outlinks": pages, "text": "home"}]
    records += [
        {"url": p, "at": T0, "outlinks": [], "text": f"page {p} {i % 3}"}
        for i, p in enumerate(pages)
    ]
    for day in range(1, 60):  # the hub and a third of the pages gain a link every few days
        records.append({"url": hub, "at": T0 + day * DAY, "outlinks": [*pages, f"{hub}n{day}"]})
        for i in range(0, 60, 3):
            if (day + i) % 5 == 0:
                records.append(
                    {
                        "url": pages[i],
                        "at": T0 + (day + 0.5) * DAY,
                        "outlinks": [f"https://ext.org/{i}/{day}"],
                    }
                )
    for n, r in enumerate(records, 1):
        parser.add(orjson.dumps(r), n)
    timeline = parser.timeline(end=T0 + 60 * DAY)
    universe = build_universe(timeline)
    budget = 6.0
    config = PipelineConfig(fetch_budget_per_day=budget)
    policy = ScheduledPolicy(source=lambda: PipelineRates("lbla", config))
    log = simulate(universe, policy, 3 * budget)
    times = np.array(log.times)
    second_half = ((times - T0) >= 30 * DAY).sum() / 30
    assert second_half == pytest.approx(budget, rel=0.3)

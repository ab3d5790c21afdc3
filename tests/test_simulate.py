"""The closed loop on small timelines: budget and slots, discovery, politeness, determinism,
decisions from the past only, each policy's rule, the metrics' definitions, and the pipeline's
rates as the lookaround policy reads them."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest

from batch.discovery import measure
from batch.policies import (
    AdaptivePolicy,
    ChangeRatePolicy,
    Fetched,
    LookaroundPolicy,
    NNLAveragePolicy,
    UniformPolicy,
    Universe,
    check_policy,
    make_policy,
    rate_priority,
)
from batch.simulate import Budget, SimulationConfig, build_universe, simulate, slot_times
from batch.timeline import DAY, Timeline, TimelineParser
from streams.simulate import PipelineRates

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
HUB = "https://site.org/"


def page(n: int) -> str:
    return f"https://site.org/p{n}"


def build(records: list[dict], days: float) -> Timeline:
    parser = TimelineParser()
    for n, r in enumerate(records, 1):
        parser.add(orjson.dumps(r), n)
    assert not parser.rejects, parser.rejects
    return parser.timeline(end=T0 + days * DAY)


def rec(url: str, day: float, links: list[str], **kw) -> dict:
    return {"url": url, "at": T0 + day * DAY, "outlinks": links, "text": f"page {url}", **kw}


def busy_site(pages: int = 40, days: float = 30.0) -> Timeline:
    """A hub that gains a link to a new page every day, pages that never change, and one page
    (p0) that gains an external link every other day."""
    records = [rec(HUB, 0, [page(i) for i in range(pages)])]
    records += [rec(page(i), 0, [HUB]) for i in range(pages)]
    links = [page(i) for i in range(pages)]
    for day in range(1, int(days)):
        born = f"https://site.org/new{day}"
        links = [*links, born]
        records.append(rec(HUB, day + 0.3, list(links)))
        records.append(rec(born, day + 0.2, [HUB]))
        if day % 2 == 0:
            records.append(
                rec(
                    page(0),
                    day + 0.5,
                    [HUB] + [f"https://ext.org/{d}" for d in range(0, day + 1, 2)],
                )
            )
    return build(records, days)


def run(timeline: Timeline, name: str, per_day: float, **config) -> tuple[Universe, object]:
    universe = build_universe(timeline)
    policy = make_policy(name, rates=PipelineRates)
    log = simulate(universe, policy, per_day, SimulationConfig(**config))
    return universe, log


def test_budget_parsing() -> None:
    assert Budget.parse(" 2.5% ").per_day(1000) == 25.0
    assert Budget.parse("40").per_day(1000) == 40.0
    for bad in ("", "5 %%", "-3", "0", "abc", "2000%"):
        with pytest.raises(ValueError, match="budget"):
            Budget.parse(bad)


def test_slots_are_evenly_spaced_and_never_exceed_the_budget() -> None:
    slots = slot_times(T0, T0 + 10 * DAY, 7.0)
    assert len(slots) == 70 and slots[0] == T0 + DAY / 7 and slots[-1] == T0 + 10 * DAY
    assert np.allclose(np.diff(slots), DAY / 7)
    site = busy_site()
    _, log = run(site, "uniform", 6.0)
    times = np.array(log.times)
    assert len(log) == 6 * 30
    per_day = np.bincount(((times - T0) // DAY).astype(int))
    assert per_day.max() <= 6
    assert set(times.tolist()) <= set(slot_times(site.start, site.end, 6.0).tolist())


def test_the_index_at_the_start_and_pages_found_by_links() -> None:
    site = busy_site()
    universe, log = run(site, "uniform", 10.0)
    assert universe.pages_at_start == 41
    assert universe.known_at_start.sum() == 41
    fetched = {universe.urls[p]: t for p, t in zip(log.pages, log.times, strict=True)}
    # Every born page is found on the hub and fetched: it joins as a discovered URL.
    discovered = {universe.urls[p] for p, d in zip(log.pages, log.discovered, strict=True) if d}
    assert discovered <= {b.url for b in site.births()} and len(discovered) >= 25
    for birth in site.births():
        if birth.url in fetched:
            assert fetched[birth.url] >= birth.at


def test_a_link_to_a_missing_page_is_fetched_as_a_404_and_links_elsewhere_are_not_followed():
    site = build(
        [
            rec(HUB, 0, [page(0)]),
            rec(page(0), 0, []),
            rec(HUB, 1, [page(0), "https://site.org/missing", "https://elsewhere.org/"]),
        ],
        days=5,
    )
    universe = build_universe(site)
    assert "https://elsewhere.org/" not in universe.index
    log = simulate(universe, make_policy("uniform"), 4.0)
    urls = [universe.urls[p] for p in log.pages]
    assert "https://site.org/missing" in urls


def test_same_seed_same_crawl_other_seed_other_ties() -> None:
    site = busy_site()
    first, second = (run(site, "uniform", 5.0, seed=1)[1] for _ in range(2))
    assert first.pages == second.pages and first.times == second.times
    assert run(site, "uniform", 5.0, seed=2)[1].pages != first.pages


def test_politeness_on_one_host_caps_the_fetches_at_one_per_gap() -> None:
    site = busy_site(days=10)
    _, log = run(site, "uniform", 48.0, politeness_seconds=3 * 3600)
    times = np.array(log.times)
    assert np.diff(times).min() >= 3 * 3600 - 1e-6
    assert len(log) == pytest.approx(10 * 8, abs=2)  # 8 a day, not 48
    _, free = run(site, "uniform", 48.0)
    assert len(free) == 480


class Spy(UniformPolicy):
    """Uniform, recording when it was asked and the latest fetch it had learned from."""

    def start(self, universe: Universe) -> None:
        super().start(universe)
        self.asked: list[tuple[float, float]] = []
        self.learned_until = -math.inf

    def observe(self, fetched: Fetched) -> None:
        super().observe(fetched)
        self.learned_until = max(self.learned_until, float(fetched.times.max()))

    def priority(self, now: float) -> np.ndarray:
        self.asked.append((now, self.learned_until))
        return super().priority(now)


def test_a_policy_decides_before_its_cycles_fetches_knowing_only_earlier_ones() -> None:
    site = busy_site(days=5)
    universe = build_universe(site)
    spy = Spy()
    log = simulate(universe, spy, 24.0, SimulationConfig(cycle_hours=4))
    times = np.array(log.times)
    for now, learned in spy.asked:
        assert learned < now  # everything it learned was fetched before it decided
        cycle = times[(times >= now) & (times < now + 4 * 3600)]
        assert len(cycle) and cycle.min() >= now


def fetched(
    pages: list[int], days: list[float], *, changed: list[bool], new: list[int], first=False
) -> Fetched:
    n = len(pages)
    return Fetched(
        np.array(pages),
        T0 + np.array(days) * DAY,
        np.ones(n, dtype=bool),
        np.full(n, first),
        np.array(changed),
        np.array(new),
        [None] * n,
        [],
    )


def universe_of(size: int) -> Universe:
    site = build([rec(page(i), 0, []) for i in range(size)], days=50)
    return build_universe(site)


def test_adaptive_is_nutchs_rule_with_its_defaults() -> None:
    policy = AdaptivePolicy()
    policy.start(universe_of(3))
    policy.observe(fetched([0, 1, 2], [0, 0, 0], changed=[False] * 3, new=[0] * 3, first=True))
    assert np.allclose(policy.interval, 30.0)  # db.fetch.interval.default
    policy.observe(fetched([0, 1], [10, 10], changed=[True, False], new=[0, 0]))
    assert policy.interval.tolist() == [24.0, 42.0, 30.0]
    order = np.argsort(-policy.priority(T0 + 11 * DAY)).tolist()
    assert order == [2, 0, 1]  # due at day 30, 34, 52
    for _ in range(20):
        policy.observe(fetched([1], [11], changed=[False], new=[0]))
    assert policy.interval[1] == 90.0  # db.fetch.interval.max


def test_change_rate_is_cho_and_garcia_molinas_estimator_clamped() -> None:
    # 10 intervals of 7 days, 2 with a change: -log(8.5 / 10.5) / 7
    assert ChangeRatePolicy.estimate(2, 10, 7.0) == pytest.approx(-math.log(8.5 / 10.5) / 7)
    assert ChangeRatePolicy.estimate(0, 5, 7.0) == 0.0005
    assert ChangeRatePolicy.estimate(10, 10, 0.01) == 7.0
    policy = ChangeRatePolicy()
    policy.start(universe_of(2))
    policy.observe(fetched([0, 1], [0, 0], changed=[False, False], new=[0, 0], first=True))
    policy.observe(fetched([0, 1], [7, 7], changed=[True, False], new=[0, 0]))
    assert policy.rate[0] == pytest.approx(-math.log(0.5 / 1.5) / 7)
    assert policy.rate[1] == 0.0005


def test_nnl_av_is_new_links_per_day_over_the_window() -> None:
    policy = NNLAveragePolicy(history=2)
    policy.start(universe_of(1))
    policy.observe(fetched([0], [0], changed=[False], new=[0], first=True))
    for day, new in ((2, 4), (4, 0), (10, 2)):
        policy.observe(fetched([0], [day], changed=[bool(new)], new=[new]))
    assert policy.rate[0] == pytest.approx((0 + 2) / (2 + 6))  # the last two intervals


def test_the_square_root_rule_fetches_in_proportion_to_the_root_of_the_rate() -> None:
    rates = np.array([4.0, 1.0, 0.0])
    assert rate_priority(rates, np.ones(3), 0.5, floor=0.01).tolist() == [2.0, 1.0, 0.1]
    assert rate_priority(rates, np.ones(3), 1.0, floor=0.01).tolist() == [4.0, 1.0, 0.01]


class FixedRates:
    """A rate source that publishes a fixed rate per URL (NaN for the listed duplicates)."""

    def __init__(self, by_url: dict[str, float]) -> None:
        self.by_url = by_url

    def rates(self, events) -> np.ndarray:  # type: ignore[no-untyped-def]
        return np.array([self.by_url.get(e.url, 0.0) for e in events])

    def related(self) -> list[tuple[str, float]]:
        return []


def test_lookaround_allocates_fetches_by_the_square_root_of_its_rates() -> None:
    site = build([rec(page(i), 0, []) for i in range(40)], days=60)
    universe = build_universe(site)
    rates = {page(i): 1.0 if i < 10 else 0.25 if i < 20 else 0.0 for i in range(40)}
    groups = [[universe.index[page(i)] for i in range(lo, hi)] for lo, hi in ((0, 10), (10, 20))]

    def fetches(exponent: float) -> tuple[int, int, int]:
        policy = LookaroundPolicy(source=lambda: FixedRates(rates), exponent=exponent)
        counts = np.bincount(simulate(universe, policy, 10.0).pages, minlength=40)
        high, low = (int(counts[g].sum()) for g in groups)
        return high, low, int(counts.sum()) - high - low

    # square root: fetch rates 1 : 0.5 : 0.022 (the floor), so the rate-0 pages wait
    # c / 0.022 days, longer than the window
    high, low, none = fetches(0.5)
    assert high == pytest.approx(2 * low, rel=0.05) and none == 0
    high, low, none = fetches(1.0)  # greedy: in proportion to the rates
    assert high == pytest.approx(4 * low, rel=0.1) and none == 0
    with pytest.raises(ValueError, match="rate source"):
        LookaroundPolicy().start(universe)


def test_the_oracle_is_the_ceiling_on_a_busy_site() -> None:
    site = busy_site()
    figures = {}
    for name in ("uniform", "adaptive", "change-rate", "nnl-av", "lookaround", "oracle"):
        universe, log = run(site, name, 4.0)
        urls = [universe.urls[p] for p in log.pages]
        figures[name] = measure(site, urls, log.times)
    oracle = figures.pop("oracle")
    assert oracle.found_1d == oracle.appearances  # each found within the hour
    for d in figures.values():
        assert d.found_7d <= oracle.found_7d and d.found_1d <= oracle.found_1d
        assert d.delay_median_days >= oracle.delay_median_days
        assert d.born_found <= oracle.born_found


def test_policy_names() -> None:
    for name in ("uniform", "lookaround-greedy"):
        check_policy(name)
    with pytest.raises(ValueError, match="unknown policy 'fifo'"):
        make_policy("fifo")


def metric_site() -> Timeline:
    return build(
        [
            rec(HUB, 0, []),
            rec(HUB, 1, ["https://site.org/kept", "https://site.org/brief"]),
            rec(HUB, 1.5, ["https://site.org/kept"]),  # "brief" gone before day 2
            rec("https://site.org/kept", 0.5, [HUB]),  # born; linked from day 1
            rec("https://site.org/early", 3, []),  # born, never linked
        ],
        days=10,
    )


def test_a_link_is_found_at_the_first_fetch_of_its_page_while_it_is_there() -> None:
    site = metric_site()
    at_appearance = measure(site, [HUB], [T0 + DAY])
    assert (at_appearance.found, at_appearance.delay_median_days) == (2, 0.0)
    later = measure(site, [HUB, HUB], [T0 + 2 * DAY, T0 + 3 * DAY])
    assert (
        later.found == 1 and later.found_1d == 1 and later.delays.tolist() == [math.inf, 1.0]
    )  # brief, kept
    assert later.delay_median_days == 1.0 and later.delay_p90_days == math.inf
    assert later.fetches_per_link == 2.0
    assert measure(site, [HUB], [T0 + 11 * DAY]).found == 0  # after the window
    none = measure(site, [], [])
    assert none.found == 0 and none.fetches_per_link == math.inf
    assert none.summary()["delay_median_days"] is None


def test_a_born_page_is_found_by_a_link_or_by_fetching_it_alive() -> None:
    site = metric_site()
    by_link = measure(site, [HUB], [T0 + 2 * DAY])
    assert (by_link.born, by_link.born_found, by_link.born_delay_median_days) == (2, 1, 1.5)
    known_before = measure(site, ["https://site.org/early"] * 2, [T0 + DAY, T0 + 4 * DAY])
    assert known_before.born_found == 1 and known_before.born_delay_median_days == 1.0


def test_pipeline_rates_are_the_published_rate_per_day() -> None:
    site = busy_site(days=6)
    universe = build_universe(site)
    source = PipelineRates()
    policy = LookaroundPolicy(source=lambda: source)
    log = simulate(universe, policy, 10.0)
    assert len(log) == 60
    assert source.pipeline.counters.applied == 41 + 60
    hub = universe.index[HUB]
    assert policy.rate[hub] > np.median(policy.rate[: len(site.urls)])  # it gains a link a day
    duplicate = source.rates([replace_time(log, universe, site)])
    assert np.isnan(duplicate).all()


def replace_time(log, universe: Universe, site: Timeline):  # type: ignore[no-untyped-def]
    """The event of the crawl's last fetch again: a duplicate for the pipeline."""
    from dataclasses import replace

    from online.fetch import prepare

    url, t = universe.urls[log.pages[-1]], log.times[-1]
    return replace(prepare(site.state_at(url, t).page), timestamp=t)

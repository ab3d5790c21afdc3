"""The recrawl frontier a crawler integration drives (streams/crawlers/frontier.py): the three
orders, stale and redelivered updates, pages in flight, and the request budget."""

from __future__ import annotations

import math

import pytest

from streams.crawlers.frontier import RecrawlFrontier, TokenBucket

DAY = 86_400.0


def update(url: str, fetched: float, due: float | None = None, rate=None, score=0.0) -> dict:
    return {
        "url": url,
        "fetched_at": fetched,
        "next_fetch_at": due,
        "rate_per_day": rate,
        "score": score,
    }


def urls(taken) -> list[str]:
    return [url for url, _ in taken]


def test_due_mode_longest_overdue_first():
    f = RecrawlFrontier("due")
    f.update(update("a", 0, due=3 * DAY))
    f.update(update("b", 0, due=1 * DAY))
    f.update(update("c", 0, due=9 * DAY))
    f.update(update("d", 0, due=None))  # no schedule: never due
    assert urls(f.take(now=5 * DAY, n=10, real_now=0)) == ["b", "a"]
    assert f.due_count(10 * DAY) == 3


def test_updates_apply_once_and_in_order():
    f = RecrawlFrontier("due")
    assert f.update(update("a", 10, due=20))
    assert not f.update(update("a", 10, due=5))  # redelivered
    assert not f.update(update("a", 9, due=5))  # stale
    assert not f.update({"url": "b"})  # unusable
    assert not f.update({"url": "b", "fetched_at": "yesterday"})
    assert urls(f.take(now=15, n=5, real_now=0)) == []
    assert f.update(update("a", "1970-01-01T00:00:11Z", due="1970-01-01T00:00:12Z"))
    assert urls(f.take(now=15, n=5, real_now=0)) == ["a"]
    assert len(f) == 1 and "b" not in f  # an unusable update adds no page


def test_in_flight_until_the_next_update_a_failure_or_the_timeout():
    f = RecrawlFrontier("due", inflight_timeout=30)
    f.update(update("a", 0, due=1))
    assert urls(f.take(now=2, n=5, real_now=100)) == ["a"]
    assert f.take(now=2, n=5, real_now=110) == []  # in flight
    assert urls(f.take(now=2, n=5, real_now=131)) == ["a"]  # timed out
    f.release("a")
    assert urls(f.take(now=2, n=5, real_now=132)) == ["a"]  # released after a failure
    f.update(update("a", 3, due=4))  # its fetch is known: free again, due later
    assert f.take(now=3.5, n=5, real_now=133) == []
    assert urls(f.take(now=4, n=5, real_now=133)) == ["a"]


def test_a_late_update_of_an_earlier_fetch_leaves_a_page_in_flight():
    """A lagging worker's update of the fetch before the hand-out does not free the page: its
    recrawl is still queued, and handing it out again would spend the budget twice."""
    for mode in ("budget", "due"):
        f = RecrawlFrontier(mode, inflight_timeout=600)
        f.update(update("a", 0, due=1, rate=1.0))
        f.update(update("b", 0, due=1, rate=0.5))
        assert urls(f.take(now=3 * DAY, n=1, real_now=0)) == ["a"]
        # The update of a fetch at 2 days, made before the hand-out and reported late.
        assert f.update(update("a", 2 * DAY, due=2 * DAY, rate=1.0))  # it applies ...
        assert urls(f.take(now=3 * DAY, n=2, real_now=1)) == ["b"]  # ... a stays in flight
        f.fetched("a", 2.5 * DAY)  # a response of a request before the hand-out
        assert f.take(now=3 * DAY, n=2, real_now=2) == []
        f.fetched("a", 3 * DAY)  # the recrawl's own fetch
        if mode == "due":
            f.update(update("a", 3 * DAY, due=3 * DAY))  # the due mode waits for its update
        assert urls(f.take(now=4 * DAY, n=2, real_now=3)) == ["a"]


def test_budget_mode_orders_by_expected_waiting_links_square_root_rule():
    f = RecrawlFrontier("budget")
    f.update(update("fast-recent", 9 * DAY, rate=1.0))  # 1 day old: sqrt(1) * 1 = 1
    f.update(update("slow-old", 0, rate=0.01))  # 10 days old: 0.1 * 10 = 1.0 (just below)
    f.update(update("mid", 6 * DAY, rate=0.25))  # 4 days: 0.5 * 4 = 2
    f.update(update("no-rate", 8 * DAY, score=4.0))  # the score stands in: 2 * 2 = 4
    f.update(update("dead", 0, rate=0.0))  # the floor: sqrt(0.0005) * 10 = 0.22
    assert urls(f.take(now=10 * DAY, n=5, real_now=0)) == [
        "no-rate",
        "mid",
        "fast-recent",
        "slow-old",
        "dead",
    ]
    greedy = RecrawlFrontier("budget", exponent=1.0)
    greedy.update(update("fast-recent", 9 * DAY, rate=1.0))  # 1
    greedy.update(update("slow-old", 0, rate=0.01))  # 0.1
    assert urls(greedy.take(now=10 * DAY, n=1, real_now=0)) == ["fast-recent"]


def test_interval_mode_is_fed_by_fetches():
    g = RecrawlFrontier("interval", interval_seconds=2 * DAY)
    g.fetched("a", 0)
    g.fetched("b", 1 * DAY)
    assert urls(g.take(now=2.5 * DAY, n=5, real_now=0)) == ["a"]
    assert urls(g.take(now=3 * DAY, n=5, real_now=0)) == ["b"]
    g.fetched("a", 3 * DAY)  # fetched again: due two days later, no longer in flight
    assert urls(g.take(now=5 * DAY, n=5, real_now=0)) == ["a"]
    round_robin = RecrawlFrontier("interval", interval_seconds=0)
    for k, url in enumerate("cab"):
        round_robin.fetched(url, k)
    assert urls(round_robin.take(now=10, n=2, real_now=0)) == ["c", "a"]


def test_budget_mode_is_fed_by_fetches_too_so_a_lagging_scorer_leaves_no_budget_idle():
    f = RecrawlFrontier("budget", inflight_timeout=600)
    f.update(update("a", 0, rate=1.0))
    f.update(update("b", 0, rate=0.04))
    assert urls(f.take(now=4 * DAY, n=1, real_now=0)) == ["a"]  # 2 * 4 against 0.2 * 4
    f.fetched("a", 4 * DAY)  # fetched, not scored yet: free again, its wait starts over
    assert urls(f.take(now=5 * DAY, n=2, real_now=1)) == ["a", "b"]  # 2 * 1 against 0.2 * 5
    f.fetched("a", 5 * DAY)
    f.fetched("b", 5 * DAY)
    # The update of the fetch the crawler already counted still brings its rate.
    assert f.update(update("a", 5 * DAY, rate=0.0))
    assert not f.update(update("a", 5 * DAY, rate=9.0))  # redelivered
    assert urls(f.take(now=6 * DAY, n=2, real_now=2)) == ["b", "a"]
    f.fetched("new", 5 * DAY)  # a page the crawler found itself: at the floor until scored
    assert "new" in f
    late = RecrawlFrontier("budget")
    late.update(update("x", 5 * DAY, rate=1.0))
    late.update(update("y", 4 * DAY, rate=1.0))
    late.fetched("x", 1 * DAY)  # an older fetch reported late moves nothing back
    assert urls(late.take(now=6 * DAY, n=1, real_now=0)) == ["y"]
    due = RecrawlFrontier("due")
    due.fetched("a", 0)  # the due mode waits for the update that says when
    assert "a" not in due


def test_take_returns_at_most_n_best_first_with_scores():
    f = RecrawlFrontier("due")
    for k in range(3000):  # past the first array growth
        f.update(update(f"p{k}", 0, due=float(3000 - k), score=k / 10))
    taken = f.take(now=5000, n=3, real_now=0)
    assert taken == [("p2999", 299.9), ("p2998", 299.8), ("p2997", 299.7)]
    assert len(f.take(now=5000, n=10_000, real_now=0)) == 2997


def test_modes_are_checked():
    with pytest.raises(ValueError, match="unknown recrawl mode"):
        RecrawlFrontier("sometimes")
    with pytest.raises(ValueError, match="interval_seconds"):
        RecrawlFrontier("interval")


def test_token_bucket():
    bucket = TokenBucket(60, now=0.0)  # one a second
    assert bucket.available(0.0) == 0
    assert bucket.available(10.0) == 1  # a burst of at most one second's worth
    bucket.charge(1)
    bucket.charge(3)  # pages the spider found on its own
    assert bucket.available(12.0) == 0
    assert bucket.available(14.5) == 1
    big = TokenBucket(600, now=0.0)
    assert big.available(100.0) == 10
    with pytest.raises(ValueError):
        TokenBucket(0, now=0.0)
    assert math.isclose(big.rate, 10.0)


def test_token_bucket_counts_the_budget_it_could_not_save_up():
    bucket = TokenBucket(60, now=0.0)
    assert bucket.available(0.5) == 0 and bucket.unspent == 0.0
    assert bucket.available(10.0) == 1
    assert math.isclose(bucket.unspent, 9.0)  # ten seconds' worth, one kept
    bucket.charge(1)
    assert bucket.available(10.5) == 0 and math.isclose(bucket.unspent, 9.0)

"""Which page a crawler recrawls next, and how many it may: the recrawl frontier a crawler
integration (`streams.crawlers.scrapy`) drives. No I/O and no crawler in here.

`RecrawlFrontier` holds one entry per page, fed either by lookaround's priority updates
(`RecrawlFrontier.update`) or, for the fixed-interval baseline, by the crawler's own fetches
(`RecrawlFrontier.fetched`). `RecrawlFrontier.take` hands out up to n pages in one of three
orders:

* ``due``: pages whose ``next_fetch_at`` has come, the longest overdue first;
* ``budget``: every page, by the new links expected to be waiting, max(rate, floor)^a × the
  time since its fetch (a = 1/2: the square-root allocation `lookaround simulate` found best;
  ``rate_per_day`` of the update, its ``score`` when the scorer gives no rate): a crawler that
  spends a fixed request budget;
* ``interval``: pages fetched at least ``interval_seconds`` ago, the longest waiting first (the
  baseline: every page at a fixed interval).

A page handed out is in flight until its next fetch is known (an update of a fetch at or after
the moment it was handed out, or that fetch itself in the ``interval`` and ``budget`` modes,
which order by the time since it; an update of an earlier fetch that arrives late, as when
the worker lags, leaves it in flight, so a queued recrawl is never issued twice),
`RecrawlFrontier.release` says its request failed, or ``inflight_timeout`` real seconds pass:
it is never handed out twice at once. So a ``budget`` crawl spends its budget whether or not
lookaround's updates keep up with it: a page fetched and not yet scored keeps its last rate.

`TokenBucket` is the request budget: ``per_minute`` requests, in real time, with a burst of
at most one second's worth; what it could not save up is counted (``unspent``).

>>> f = RecrawlFrontier("due")
>>> f.update({"url": "https://a.org/", "fetched_at": 0.0, "next_fetch_at": 100.0, "score": 1.0})
True
>>> f.take(now=50.0, n=5, real_now=0.0), f.take(now=150.0, n=5, real_now=0.0)
([], [('https://a.org/', 1.0)])
>>> f.take(now=150.0, n=5, real_now=1.0)  # in flight
[]
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import numpy as np

MODES = ("due", "budget", "interval")
DAY = 86_400.0


class RecrawlFrontier:
    """Recrawl candidates and their order (see the module's docstring).

    Times: ``fetched_at``, ``next_fetch_at`` and ``now`` are the crawl's clock (epoch seconds,
    simulated on a living site); ``real_now`` is the real clock, for in-flight timeouts.
    """

    def __init__(
        self,
        mode: str = "due",
        *,
        interval_seconds: float | None = None,
        exponent: float = 0.5,
        rate_floor: float = 0.0005,
        inflight_timeout: float = 60.0,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown recrawl mode {mode!r}; choose one of {list(MODES)}")
        if mode == "interval" and not (interval_seconds is not None and interval_seconds >= 0):
            raise ValueError("the interval mode needs interval_seconds >= 0")
        self.mode = mode
        self.interval_seconds = interval_seconds
        self.exponent = exponent
        self.rate_floor = rate_floor
        self.inflight_timeout = inflight_timeout
        self.urls: list[str] = []
        self._slot: dict[str, int] = {}
        size = 1024
        self._fetched = np.full(size, -math.inf)
        self._updated = np.full(size, -math.inf)
        self._due = np.full(size, math.inf)
        self._rate = np.zeros(size)
        self._score = np.zeros(size)
        self._busy_until = np.full(size, -math.inf)
        self._taken_at = np.full(size, -math.inf)

    def __len__(self) -> int:
        return len(self.urls)

    def __contains__(self, url: str) -> bool:
        return url in self._slot

    def _index(self, url: str) -> int:
        k = self._slot.get(url)
        if k is None:
            k = self._slot[url] = len(self.urls)
            self.urls.append(url)
            if k == len(self._fetched):
                self._grow()
        return k

    def _grow(self) -> None:
        def more(a: np.ndarray, fill: float) -> np.ndarray:
            return np.concatenate([a, np.full(len(a), fill)])

        self._fetched = more(self._fetched, -math.inf)
        self._updated = more(self._updated, -math.inf)
        self._due = more(self._due, math.inf)
        self._rate = more(self._rate, 0.0)
        self._score = more(self._score, 0.0)
        self._busy_until = more(self._busy_until, -math.inf)
        self._taken_at = more(self._taken_at, -math.inf)

    # -- feeding --------------------------------------------------------------------------------

    def update(self, update: dict[str, Any]) -> bool:
        """Apply a priority update (a dict as published); False when it is not newer than what
        the page has (a redelivered or stale update) or not usable. A related update
        (``kind: "related"``, `online.related_updates`) revises the priority of the page's
        fetch it names: it applies to that fetch too, and leaves a page in flight in flight."""
        try:
            url = update["url"]
            fetched = _epoch(update["fetched_at"])
        except (KeyError, TypeError, ValueError):
            return False
        k = self._index(url)
        related = update.get("kind") == "related"
        if fetched < self._updated[k] or (fetched == self._updated[k] and not related):
            return False
        busy = self._busy_until[k]
        self._updated[k] = fetched
        self._fetched[k] = max(fetched, self._fetched[k])
        due = update.get("next_fetch_at")
        self._due[k] = _epoch(due) if due is not None else math.inf
        score = float(update.get("score") or 0.0)
        rate = update.get("rate_per_day")
        self._score[k] = score
        self._rate[k] = float(rate) if rate is not None else max(score, 0.0)
        self._busy_until[k] = busy if related else self._still_busy(k, fetched)
        return True

    def _still_busy(self, k: int, fetched: float) -> float:
        """Page ``k``'s in-flight deadline once a fetch at ``fetched`` is known: none when the
        fetch is the one it was handed out for (or later), else the deadline it had."""
        return -math.inf if fetched >= self._taken_at[k] else self._busy_until[k]

    def fetched(self, url: str, at: float) -> None:
        """The crawler fetched ``url`` at ``at``: in ``interval`` mode, its next fetch is due
        ``interval_seconds`` later; in ``budget`` mode its wait starts again from ``at``, at
        the rate it had (a page new to the frontier at the floor) until its update comes. The
        ``due`` mode waits for the page's update, which says when it is due."""
        if self.mode == "due":
            return
        k = self._index(url)
        if at > self._fetched[k]:
            self._fetched[k] = at
            if self.mode == "interval":
                self._due[k] = at + float(self.interval_seconds or 0.0)
        self._busy_until[k] = self._still_busy(k, at)

    def release(self, url: str) -> None:
        """The request for ``url`` failed: it may be handed out again."""
        k = self._slot.get(url)
        if k is not None:
            self._busy_until[k] = -math.inf

    # -- choosing -------------------------------------------------------------------------------

    def take(self, now: float, n: int, real_now: float) -> list[tuple[str, float]]:
        """Up to ``n`` pages to recrawl now, best first, each with its score (the crawler's
        request priority); they are in flight from here."""
        size = len(self.urls)
        if n <= 0 or not size:
            return []
        free = self._busy_until[:size] < real_now
        if self.mode == "budget":
            age = np.maximum(now - self._fetched[:size], 0.0) / DAY
            rate = np.maximum(self._rate[:size], self.rate_floor) ** self.exponent
            key = np.where(free & (age > 0), -(rate * age), np.inf)
        else:
            due = self._due[:size]
            key = np.where(free & (due <= now), due, np.inf)
        candidates = np.flatnonzero(np.isfinite(key))
        if len(candidates) > n:
            candidates = candidates[np.argpartition(key[candidates], n - 1)[:n]]
        order = candidates[np.argsort(key[candidates], kind="stable")]
        self._busy_until[order] = real_now + self.inflight_timeout
        self._taken_at[order] = now
        return [(self.urls[k], float(self._score[k])) for k in order]

    def due_count(self, now: float) -> int:
        """Pages due now (``due`` and ``interval`` modes), in flight or not."""
        return int((self._due[: len(self.urls)] <= now).sum())


class TokenBucket:
    """``per_minute`` requests a minute, at most one second's worth (and at least one request)
    saved up; `TokenBucket.charge` may take it below zero (requests the crawler made on its
    own, such as newly found pages), which later refills pay back.

    >>> bucket = TokenBucket(120, now=0.0)
    >>> bucket.available(0.5), bucket.charge(3), bucket.available(1.0)
    (1, None, 0)
    """

    def __init__(self, per_minute: float, now: float) -> None:
        if not per_minute > 0:
            raise ValueError(f"the request budget must be positive, got {per_minute}")
        self.rate = per_minute / 60.0
        self.burst = max(1.0, self.rate)
        self.tokens = 0.0
        self.unspent = 0.0
        self._last = now

    def _refill(self, now: float) -> None:
        tokens = self.tokens + (now - self._last) * self.rate
        self.unspent += max(0.0, tokens - self.burst)
        self.tokens = min(self.burst, tokens)
        self._last = now

    def available(self, now: float) -> int:
        """Whole requests that may be made now."""
        self._refill(now)
        return max(0, math.floor(self.tokens))

    def charge(self, requests: float = 1.0) -> None:
        self.tokens -= requests


def _epoch(value: Any) -> float:
    """Epoch seconds of an ISO-8601 text (a ``Z`` allowed) or a number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        moment = datetime.fromisoformat(value)
        return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
    raise ValueError(f"not a time: {value!r}")
